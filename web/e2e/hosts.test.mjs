// Browser test of a session on a runner's host: the real `shepherd runner`
// (its own data directory and sessions root, no agents) registers its
// machine, and a person picks that host in the new-session form, opens a
// terminal tab and types into it through the server. The shell is the
// runner's child, not the server's.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { BIN, apiCall, axe, launchBrowser, makeWorkspace, startServer, until, waitForText } from "./lib.mjs";

let server;
let runner;
let browser;
let farWork;

before(async () => {
  const ws = makeWorkspace();
  server = await startServer(ws);
  const far = join(ws.dir, "far-host");
  farWork = join(far, "work");
  mkdirSync(join(farWork, "project"), { recursive: true });
  mkdirSync(join(far, "home"), { recursive: true });
  runner = spawn(BIN, ["runner", "--server", server.url], {
    env: {
      PATH: process.env.PATH,
      HOME: join(far, "home"),
      SHELL: "/bin/sh",
      SHEPHERD_DATA_DIR: join(far, "data"),
      SHEPHERD_SESSIONS_ROOT: farWork,
      SHEPHERD_RUNNER_HEARTBEAT_SECS: "1",
      SHEPHERD_LOG: "warn",
    },
    stdio: ["ignore", "ignore", "inherit"],
  });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  if (runner && runner.exitCode === null) {
    const exited = new Promise((r) => runner.once("exit", r));
    runner.kill("SIGTERM");
    await exited;
  }
  await server?.stop();
});

/** The parent of process `pid`, from /proc. */
function parentOf(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

test("a person opens a session on a runner's host and types into its terminal", async () => {
  const host = await until(async () => {
    const list = await apiCall(server, "GET", "/api/v1/hosts");
    return list.hosts.find((h) => h.kind === "runner" && h.online);
  }, "the runner's host online");
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  try {
    await page.goto(`${server.url}/sessions`);
    const picker = page.getByTestId("session-host");
    await until(async () => (await picker.locator(`option[value="${host.id}"]`).count()) === 1, "the host in the picker");
    await picker.selectOption(host.id);
    await page.getByTestId("session-name").fill("far away");
    await page.getByTestId("session-path").fill(join(farWork, "project"));
    const violations = await axe(page);
    assert.deepEqual(violations, [], `the form with its host picker: ${JSON.stringify(violations, null, 1)}`);
    await page.getByTestId("session-create").click();
    await page.waitForURL(/\/sessions\/[^/?]+/);
    const sessionId = new URL(page.url()).pathname.split("/").pop();

    await page.getByTestId("tab-type").selectOption("terminal");
    await page.getByTestId("tab-add").click();
    await waitForText(page, '[data-testid="terminal-link"]', "Connected");
    const rows = () => page.evaluate(() => [...document.querySelectorAll('[data-testid="terminal"] .xterm-rows > div')].map((r) => r.textContent).join("\n"));
    await until(async () => (await rows()).trim() !== "", "the shell prompt");
    await page.locator('[data-testid="terminal"]').click();
    await page.keyboard.type("echo far-$((40+2))");
    await page.keyboard.press("Enter");
    await until(async () => /^far-42\s*$/m.test(await rows()), "the echo from the runner's host");

    const session = await apiCall(server, "GET", `/api/v1/sessions/${sessionId}`);
    assert.equal(session.node_id, host.id, "the session lives on the runner's host");
    assert.equal(parentOf(session.workers[0].pid), runner.pid, "the shell is the runner's child");
  } finally {
    await context.close();
  }
});
