// The real Claude Code CLI asking for permission through Shepherd.
//
// Each agent is `claude -p … --output-format stream-json` with
// `permissions = "ask"`, run by Shepherd's built-in runner; its model is a
// scripted stand-in (fake-anthropic.mjs) that asks to run
// `echo hello > out.txt` with Bash, then says ALLOWED or DENIED depending
// on the tool result it gets back. A person answers through the REST API,
// as the Inbox, the CLI and MCP do. Cases: allow (the file appears), deny
// with a message (Claude Code is told why), a timeout (`ask_timeout`), and
// the server killed with SIGKILL while a request waits (the answer given
// to the next server still reaches Claude Code).
//
// Usage: node permissions.test.mjs PATH/TO/shepherd

import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { startFakeAnthropic } from "./fake-anthropic.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const SHEPHERD = path.resolve(process.argv[2] ?? "target/debug/shepherd");
const CLAUDE = path.join(here, "node_modules/.bin/claude");
const WAIT_MS = 60_000;
const script = JSON.parse(fs.readFileSync(path.join(here, "scripts/bash-echo.json"), "utf8"));

function fail(msg) {
  console.error(`FAIL: ${msg}`);
  process.exit(1);
}

async function waitFor(what, f, within = WAIT_MS) {
  const deadline = Date.now() + within;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > deadline) fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "shepherd-claude-"));
const dataDir = path.join(tmp, "data");
const home = path.join(tmp, "home");
fs.mkdirSync(home);

/// An agent table for one case: its own model stand-in and work directory.
function agent(name, fake, extra = "") {
  const work = path.join(tmp, name);
  fs.mkdirSync(work, { recursive: true });
  const env = {
    ANTHROPIC_BASE_URL: fake.url,
    ANTHROPIC_API_KEY: "test-key",
    HOME: home,
    DISABLE_TELEMETRY: "1",
    DISABLE_AUTOUPDATER: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  };
  const envToml = Object.entries(env).map(([k, v]) => `${k} = ${JSON.stringify(v)}`).join(", ");
  return {
    work,
    toml: `
[agents.${name}]
command = [${JSON.stringify(CLAUDE)}, "-p", "{spec}", "--output-format", "stream-json", "--verbose"]
transcript = "claude-stream-json"
cwd = ${JSON.stringify(work)}
permissions = "ask"
allow = ["Read"]
env = { ${envToml} }
${extra}
`,
  };
}

function startServer(port, configFile) {
  const child = spawn(SHEPHERD, ["serve"], {
    env: {
      PATH: process.env.PATH,
      HOME: home,
      SHEPHERD_DATA_DIR: dataDir,
      SHEPHERD_CONFIG: configFile,
      SHEPHERD_LISTEN: `127.0.0.1:${port}`,
      SHEPHERD_LOG: "warn",
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const m = line.match(/^shepherd is serving (\S+)/);
      if (m) resolve({ child, base: m[1] });
    });
    child.on("exit", (code) => fail(`shepherd serve exited early (${code})`));
  }).then((s) => {
    s.child.removeAllListeners("exit");
    return s;
  });
}

async function api(base, method, route, body) {
  const res = await fetch(base + route, {
    method,
    headers: body ? { "content-type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

async function pendingOf(base, vtid) {
  return waitFor(`a pending request of ${vtid}`, async () => {
    const r = await api(base, "GET", `/api/v1/input-requests?state=pending&vtid=${vtid}`);
    return r.body?.requests?.[0];
  });
}

async function taskEnds(base, vtid) {
  return waitFor(`${vtid} to end`, async () => {
    const r = await api(base, "GET", `/api/v1/tasks/${vtid}`);
    const state = r.body?.state;
    return ["done", "failed", "cancelled"].includes(state) ? r.body : null;
  });
}

async function finalText(base, vtid) {
  const runs = await api(base, "GET", `/api/v1/runs?vtid=${vtid}`);
  const run = runs.body.runs[0];
  const detail = await api(base, "GET", `/api/v1/runs/${run.id}`);
  return { run, result: detail.body.result ?? "" };
}

async function create(base, vtid, agentId) {
  const r = await api(base, "POST", "/api/v1/tasks", {
    vtid, title: vtid, spec: "Write hello to out.txt", agent_id: agentId,
  });
  if (r.status !== 201) fail(`create ${vtid}: ${r.status} ${JSON.stringify(r.body)}`);
}

function lastToolResult(fake) {
  const msg = fake.requests.at(-1)?.messages?.at(-1);
  return msg?.content?.find?.((c) => c.type === "tool_result");
}

const fakes = {};
for (const name of ["allowing", "denying", "waiting", "surviving"]) {
  fakes[name] = await startFakeAnthropic(script);
}
const agents = {
  allowing: agent("allowing", fakes.allowing),
  denying: agent("denying", fakes.denying),
  waiting: agent("waiting", fakes.waiting, 'ask_timeout = "2s"\non_timeout = "deny"'),
  surviving: agent("surviving", fakes.surviving),
};
const configFile = path.join(tmp, "shepherd.toml");
fs.writeFileSync(configFile, Object.values(agents).map((a) => a.toml).join("\n"));
const port = await freePort();
let server = await startServer(port, configFile);
const base = server.base;

try {
  // Allow: the tool runs.
  await create(base, "CC-ALLOW", "allowing");
  const asked = await pendingOf(base, "CC-ALLOW");
  if (asked.kind !== "permission" || asked.tool_name !== "Bash") fail(`asked ${JSON.stringify(asked)}`);
  if (asked.tool_input?.command !== "echo hello > out.txt") fail(`input ${JSON.stringify(asked.tool_input)}`);
  const run = (await api(base, "GET", `/api/v1/runs/${asked.run_id}`)).body;
  if (run.run.pending_input !== 1 || !/waiting for approval: Bash/.test(run.run.live_status ?? ""))
    fail(`the run does not show what it waits for: ${JSON.stringify(run.run)}`);
  let r = await api(base, "POST", `/api/v1/input-requests/${asked.id}/answer`, { decision: "allow" });
  if (r.status !== 200) fail(`allow: ${r.status} ${JSON.stringify(r.body)}`);
  await taskEnds(base, "CC-ALLOW");
  const file = path.join(agents.allowing.work, "out.txt");
  if (!fs.existsSync(file) || fs.readFileSync(file, "utf8").trim() !== "hello") fail("allow: out.txt was not written");
  if ((await finalText(base, "CC-ALLOW")).result.indexOf("ALLOWED") < 0) fail("allow: the model did not see the tool succeed");
  console.log("ok: allow runs the tool");

  // Deny with a message: Claude Code is told why, nothing is written.
  await create(base, "CC-DENY", "denying");
  const denied = await pendingOf(base, "CC-DENY");
  r = await api(base, "POST", `/api/v1/input-requests/${denied.id}/answer`, {
    decision: "deny", message: "not on a Friday",
  });
  if (r.status !== 200) fail(`deny: ${r.status}`);
  r = await api(base, "POST", `/api/v1/input-requests/${denied.id}/answer`, { decision: "allow" });
  if (r.status !== 409 || r.body.error.code !== "already_answered") fail(`a second answer: ${r.status}`);
  await taskEnds(base, "CC-DENY");
  if (fs.existsSync(path.join(agents.denying.work, "out.txt"))) fail("deny: out.txt was written");
  const told = lastToolResult(fakes.denying);
  const toldText = JSON.stringify(told?.content ?? "");
  if (!told?.is_error || !toldText.includes("not on a Friday")) fail(`deny: Claude Code was told ${JSON.stringify(told)}`);
  console.log("ok: deny refuses the tool and Claude Code is told why");

  // Nobody answers: after ask_timeout the request expires with on_timeout.
  await create(base, "CC-WAIT", "waiting");
  const waited = await pendingOf(base, "CC-WAIT");
  await taskEnds(base, "CC-WAIT");
  const expired = (await api(base, "GET", `/api/v1/input-requests/${waited.id}`)).body;
  if (expired.state !== "expired" || expired.answered_by !== "timeout") fail(`timeout: ${JSON.stringify(expired)}`);
  if (fs.existsSync(path.join(agents.waiting.work, "out.txt"))) fail("timeout: out.txt was written");
  if (!lastToolResult(fakes.waiting)?.is_error) fail("timeout: the model was not told the tool was refused");
  console.log("ok: an unanswered request expires with the agent's on_timeout");

  // The server dies (SIGKILL) while Claude Code waits; the next one gets
  // the answer to it.
  await create(base, "CC-KILL", "surviving");
  const before = await pendingOf(base, "CC-KILL");
  server.child.kill("SIGKILL");
  await new Promise((res) => server.child.on("exit", res));
  server = await startServer(port, configFile);
  const after = (await api(server.base, "GET", `/api/v1/input-requests/${before.id}`)).body;
  if (after.state !== "pending") fail(`after the restart: ${JSON.stringify(after)}`);
  r = await api(server.base, "POST", `/api/v1/input-requests/${before.id}/answer`, { decision: "allow" });
  if (r.status !== 200) fail(`allow after restart: ${r.status}`);
  await taskEnds(server.base, "CC-KILL");
  if (!fs.existsSync(path.join(agents.surviving.work, "out.txt"))) fail("kill -9: out.txt was not written");
  const asks = (await api(server.base, "GET", "/api/v1/input-requests?vtid=CC-KILL")).body.requests;
  if (asks.length !== 1) fail(`kill -9: asked ${asks.length} times`);
  console.log("ok: a request survives kill -9 of the server and its answer reaches Claude Code");
} finally {
  server.child.kill("SIGTERM");
  await new Promise((res) => server.child.on("exit", res));
  for (const f of Object.values(fakes)) await f.close();
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log("claude-code permissions: all passed");
