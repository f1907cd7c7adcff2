// Helpers for the browser tests: a real `shepherd serve` with a fresh data
// directory, the demo agent and a scripted agent; real Chromium (Debian's
// package) driven by playwright-core; and waits that poll for what a user
// would see, with a deadline, never for a fixed time.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, mkdirSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const WEB = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const REPO = resolve(WEB, "..");
export const BIN = process.env.SHEPHERD_BIN ?? join(REPO, "target/debug/shepherd");
export const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const DEFAULT_TIMEOUT = Number(process.env.E2E_TIMEOUT_MS ?? 20_000);

/** A fresh directory for one server's data and the scripted agent's gates. */
export function makeWorkspace() {
  const dir = mkdtempSync(join(tmpdir(), "shepherd-e2e-"));
  const control = join(dir, "control");
  mkdirSync(control);
  return { dir, control, data: join(dir, "data") };
}

/** shepherd.toml with the demo agent and the scripted agent. */
export function writeConfig(ws, { agents = true } = {}) {
  const path = join(ws.dir, agents ? "shepherd.toml" : "empty.toml");
  const text = agents
    ? `
[agents.demo]
command = ["bash", ${JSON.stringify(join(REPO, "examples/demo-agent.sh"))}]
cwd = ${JSON.stringify(REPO)}
transcript = "steps-jsonl"
max_concurrent = 4
capabilities = ["shell"]
env = { DEMO_AGENT_PAUSE = "0" }

[agents.scripted]
command = ["bash", ${JSON.stringify(join(WEB, "e2e/scripted-agent.sh"))}, "{task_id}"]
transcript = "steps-jsonl"
max_concurrent = 8
capabilities = ["script"]
env = { SCRIPTED_CONTROL_DIR = ${JSON.stringify(ws.control)} }
interactive_command = ["sh", "-c", "echo \\"agent-ready $*\\"; exec cat", "agent"]
continue_args = ["--continue"]
`
    : "";
  writeFileSync(path, text);
  return path;
}

/**
 * Starts `shepherd serve` on a free port; resolves once it serves. `env`
 * adds to (or, with `undefined`, removes from) the server's environment:
 * a shared database, a node id.
 */
export async function startServer(ws, { config, token, port = 0, env: extra = {} } = {}) {
  const env = {
    ...process.env,
    SHEPHERD_DATA_DIR: ws.data,
    SHEPHERD_LISTEN: `127.0.0.1:${port}`,
    SHEPHERD_LOG_FORMAT: "json",
    SHEPHERD_LOG: "info",
    SHEPHERD_CONFIG: config ?? writeConfig(ws),
    SHEPHERD_HEARTBEAT_TIMEOUT_SECS: "300",
    // Terminal tabs run $SHELL: /bin/sh keeps the machine's rc files out.
    SHELL: "/bin/sh",
  };
  delete env.SHEPHERD_AUTH_TOKEN;
  if (token) env.SHEPHERD_AUTH_TOKEN = token;
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  const child = spawn(BIN, ["serve"], { env, cwd: REPO, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let log = "";
  const addr = await new Promise((resolveAddr, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30_000);
    const onData = (buf) => {
      log += buf.toString();
      const m = log.match(/"addr":"(127\.0\.0\.1:\d+)"/);
      if (m) {
        clearTimeout(timer);
        resolveAddr(m[1]);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code}:\n${log}`));
    });
  });
  const url = `http://${addr}`;
  const server = {
    url,
    port: Number(addr.split(":")[1]),
    child,
    token,
    log: () => log,
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        /* already gone */
      }
      await exited;
    },
    async kill() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
      await exited;
    },
  };
  return server;
}

/** A JSON call to the server's API, as the operator. */
export async function apiCall(server, method, path, body) {
  const headers = { "content-type": "application/json" };
  if (server.token) headers.authorization = `Bearer ${server.token}`;
  const res = await fetch(server.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return json;
}

/** Polls `check` until it returns a truthy value or the deadline passes. */
export async function until(check, what, timeout = DEFAULT_TIMEOUT) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Creates a task and returns it. */
export function createTask(server, body) {
  return apiCall(server, "POST", "/api/v1/tasks", body);
}

/** The run of a task, once it exists. */
export async function runOf(server, vtid, status) {
  return until(async () => {
    const { runs } = await apiCall(server, "GET", `/api/v1/runs?vtid=${encodeURIComponent(vtid)}`);
    const run = runs[0];
    return run && (!status || run.status === status) ? run : null;
  }, `a ${status ?? ""} run of ${vtid}`);
}

/** Lets the scripted agent working on `vtid` move to `phase`. */
export function gate(ws, vtid, phase) {
  writeFileSync(join(ws.control, `${vtid}.${phase}`), "");
}

/**
 * With E2E_UI_DIR (a directory such as web/dist), pages get the UI's files
 * from there instead of from the binary, which embeds the bundle it was
 * compiled with: a bundle can be tried before the binary is rebuilt. The
 * server still answers every request first (its host and origin checks,
 * its headers); only a shell or asset body is replaced.
 */
const UI_DIR = process.env.E2E_UI_DIR ? resolve(process.env.E2E_UI_DIR) : null;
const TYPES = { js: "text/javascript; charset=utf-8", css: "text/css; charset=utf-8", html: "text/html; charset=utf-8" };

async function serveUiFrom(context, dir) {
  await context.route(
    (url) => !/^\/(api|ws|mcp|healthz|readyz)(\/|$)/.test(url.pathname),
    async (route) => {
      const request = route.request();
      if (request.method() !== "GET") return route.continue();
      const path = new URL(request.url()).pathname;
      const asset = path.startsWith("/assets/") ? join(dir, path) : null;
      if (asset && existsSync(asset)) {
        const type = TYPES[asset.split(".").pop()] ?? "application/octet-stream";
        return route.fulfill({ status: 200, headers: { "content-type": type }, body: readFileSync(asset) });
      }
      let response;
      try {
        response = await route.fetch();
      } catch {
        return route.continue(); // a name only the browser resolves (--host-resolver-rules)
      }
      if (request.resourceType() !== "document" || response.status() !== 200 || !response.headers()["content-type"]?.startsWith("text/html")) {
        return route.fulfill({ response });
      }
      const headers = { ...response.headers() };
      for (const h of ["content-length", "content-encoding", "etag"]) delete headers[h];
      return route.fulfill({ response, headers, body: readFileSync(join(dir, "index.html")) });
    },
  );
}

export async function launchBrowser({ args = [] } = {}) {
  if (!existsSync(CHROMIUM)) throw new Error(`no browser at ${CHROMIUM}: install Debian's chromium package`);
  // A shell the driver fulfils has no address, so Chromium takes it for a
  // public page and blocks its calls to loopback (Local Network Access).
  const lna = UI_DIR ? ["--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests"] : [];
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage", ...lna, ...args], headless: true });
  if (UI_DIR) {
    const newContext = browser.newContext.bind(browser);
    browser.newContext = async (options) => {
      const context = await newContext(options);
      await serveUiFrom(context, UI_DIR);
      return context;
    };
  }
  return browser;
}

/** Waits until `selector` matches exactly `n` elements. */
export async function waitForCount(page, selector, n, timeout = DEFAULT_TIMEOUT) {
  await page.waitForFunction(([s, c]) => document.querySelectorAll(s).length === c, [selector, n], { timeout });
}

/** Waits until an element matching `selector` shows `text` (substring). */
export async function waitForText(page, selector, text, timeout = DEFAULT_TIMEOUT) {
  await page.locator(selector, { hasText: text }).first().waitFor({ state: "visible", timeout });
}

const AXE = readFileSync(join(WEB, "node_modules/axe-core/axe.min.js"), "utf8");

/** Runs axe-core in the page; returns critical and serious violations. */
export async function axe(page) {
  // Evaluated through the driver, which the page's CSP does not apply to.
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE);
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await window.axe.run(document, { resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" ")) }));
  });
  return result.filter((v) => v.impact === "critical" || v.impact === "serious");
}
