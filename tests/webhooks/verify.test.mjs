// Shepherd's webhook deliveries checked with `standardwebhooks`, the
// Standard Webhooks reference library from npm, not with Shepherd's code.
//
// A real `shepherd serve` delivers to a receiver here. Three subscriptions
// reach it: one with the secret Shepherd made, one with a secret given by
// the operator, both of which must verify; and one whose receiver checks
// with a different secret, which must not (so this test can fail). The
// `slack` format must post `{text}`.
//
// Usage: node verify.test.mjs PATH/TO/shepherd

import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { Webhook } from "standardwebhooks";

const SHEPHERD = path.resolve(process.argv[2] ?? "target/debug/shepherd");
const WAIT_MS = 30_000;

function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}

async function waitFor(what, f) {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// The receiver: every POST to /<name> is kept with the verifier's verdict
// for the secret registered under that name.
const secrets = new Map();
const received = [];
const receiver = http.createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    const name = req.url.slice(1);
    let verified = null;
    let error = null;
    try {
      verified = new Webhook(secrets.get(name)).verify(body, req.headers);
    } catch (e) {
      error = e.message;
    }
    received.push({ name, body: JSON.parse(body), headers: req.headers, verified, error });
    res.writeHead(200).end();
  });
});
await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
const hook = (name) => `http://127.0.0.1:${receiver.address().port}/${name}`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "shepherd-webhooks-"));
const child = spawn(SHEPHERD, ["serve"], {
  env: {
    PATH: process.env.PATH,
    HOME: tmp,
    SHEPHERD_DATA_DIR: path.join(tmp, "data"),
    SHEPHERD_LISTEN: "127.0.0.1:0",
    SHEPHERD_LOG: "warn",
  },
  stdio: ["ignore", "pipe", "inherit"],
});
const base = await new Promise((resolve) => {
  readline.createInterface({ input: child.stdout }).on("line", (line) => {
    const m = line.match(/^shepherd is serving (\S+)/);
    if (m) resolve(m[1]);
  });
  child.on("exit", (code) => fail(`shepherd serve exited early (${code})`));
});

async function api(method, route, body) {
  const res = await fetch(base + route, {
    method,
    headers: body ? { "content-type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

// The receiver listens on loopback, which a subscription reaches only with
// allow_private.
async function subscribe(name, body) {
  const r = await api("POST", "/api/v1/webhooks", { url: hook(name), allow_private: true, ...body });
  if (r.status !== 201) fail(`subscribing ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

try {
  const made = await subscribe("made", { events: ["task.created"] });
  secrets.set("made", made.secret);
  const given = "whsec_" + Buffer.from("a secret the operator chose, 32 b").toString("base64");
  await subscribe("given", { events: ["task.created"], secret: given });
  secrets.set("given", given);
  await subscribe("wrong", { events: ["task.created"] });
  secrets.set("wrong", "whsec_" + Buffer.from("not the secret Shepherd signs with").toString("base64"));
  await subscribe("slack", { events: ["task.created"], format: "slack" });
  secrets.set("slack", "whsec_" + Buffer.from("unused: Slack checks no signature").toString("base64"));

  for (const vtid of ["WH-1", "WH-2"]) {
    const r = await api("POST", "/api/v1/tasks", { vtid, title: `Task ${vtid}`, spec: "Do it.", workflow: "simple" });
    if (r.status !== 201) fail(`creating ${vtid}: ${r.status}`);
  }
  await waitFor("two deliveries to each receiver", () =>
    ["made", "given", "wrong", "slack"].every((n) => received.filter((r) => r.name === n).length >= 2),
  );

  for (const name of ["made", "given"]) {
    const got = received.filter((r) => r.name === name);
    for (const r of got) {
      if (r.error) fail(`${name}: the verifier refused a delivery: ${r.error}`);
      if (r.verified.type !== "task.created") fail(`${name}: verified body ${JSON.stringify(r.verified)}`);
    }
    const vtids = got.map((r) => r.verified.data.task_id);
    if (vtids.join() !== "WH-1,WH-2") fail(`${name}: delivered ${vtids} out of order`);
    if (!/^msg_/.test(got[0].headers["webhook-id"])) fail(`${name}: webhook-id ${got[0].headers["webhook-id"]}`);
  }
  for (const r of received.filter((r) => r.name === "wrong")) {
    if (!r.error) fail("a delivery verified under the wrong secret");
  }
  for (const r of received.filter((r) => r.name === "slack")) {
    const keys = Object.keys(r.body);
    if (keys.join() !== "text" || !r.body.text.includes("task.created")) {
      fail(`slack body ${JSON.stringify(r.body)}`);
    }
  }
  console.log(`ok: ${received.length} deliveries checked with standardwebhooks`);
} finally {
  child.kill("SIGTERM");
  receiver.close();
}
process.exit(0);
