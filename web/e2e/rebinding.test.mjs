// DNS rebinding in real Chromium: a page whose name resolves to 127.0.0.1
// (the resolver rule plays the attacker's DNS) is, to the browser, its own
// origin, so its requests to a token-less server on loopback carry a
// matching Origin. The server must still refuse them by their Host: no
// session, no terminal, no WebSocket, no MCP, not even the UI's shell.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { apiCall, launchBrowser, makeWorkspace, startServer } from "./lib.mjs";

let ws;
let server;
let browser;

/** Opens a WebSocket to `path` from `page`'s own origin: "open" or "refused". */
function openSocket(page, path) {
  return page.evaluate(
    (p) =>
      new Promise((resolve) => {
        const sock = new WebSocket(`ws://${location.host}${p}`, ["shepherd.v1"]);
        sock.onopen = () => resolve("open");
        sock.onerror = () => resolve("refused");
      }),
    path,
  );
}

before(async () => {
  ws = makeWorkspace();
  server = await startServer(ws);
  browser = await launchBrowser({ args: ["--host-resolver-rules=MAP evil.example 127.0.0.1"] });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test("a rebound page can neither load nor drive a token-less server", async () => {
  const page = await (await browser.newContext()).newPage();
  const evil = `http://evil.example:${server.port}`;
  const nav = await page.goto(`${evil}/`);
  assert.equal(nav.status(), 421, "the UI is not served under a foreign name");
  assert.match(await page.content(), /host_not_allowed/);

  // Script running in that origin, as the attacker's page would.
  const work = join(ws.dir, "work");
  mkdirSync(work, { recursive: true });
  const tried = await page.evaluate(async (dir) => {
    const json = { "content-type": "application/json" };
    const post = (path, body) => fetch(path, { method: "POST", headers: json, body: JSON.stringify(body) }).then(async (r) => [r.status, await r.text()]);
    const session = await post("/api/v1/sessions", { location_path: dir });
    const tasks = await fetch("/api/v1/tasks").then((r) => r.status);
    const mcp = await fetch("/mcp", {
      method: "POST",
      headers: { ...json, accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "page", version: "1" } } }),
    }).then((r) => r.status);
    return { session, tasks, mcp };
  }, work);
  assert.equal(tried.session[0], 421, tried.session[1]);
  assert.match(tried.session[1], /host_not_allowed/);
  assert.equal(tried.tasks, 421);
  assert.equal(tried.mcp, 421);
  const { sessions } = await apiCall(server, "GET", "/api/v1/sessions");
  assert.deepEqual(sessions, [], "the page created nothing");

  // A terminal made by the operator: the page cannot open its WebSocket.
  const session = await apiCall(server, "POST", "/api/v1/sessions", { location_path: work });
  const tab = await apiCall(server, "POST", `/api/v1/sessions/${session.id}/workers`, { type: "terminal" });
  const terminal = `/ws/session/${session.id}/worker/${tab.id}`;
  const opened = await openSocket(page, terminal);
  assert.equal(opened, "refused");

  // The same page under the server's own name works, so the refusal above
  // is the Host rule and not a broken server.
  const own = await (await browser.newContext()).newPage();
  const ok = await own.goto(`http://localhost:${server.port}/`);
  assert.equal(ok.status(), 200);
  const ownOpen = await openSocket(own, terminal);
  assert.equal(ownOpen, "open");
});
