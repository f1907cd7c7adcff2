// End-to-end tests of the web UI in real Chromium against a real server.
// Run with `npm run e2e` after `cargo build -p shepherd` and `npm run build`
// (the binary embeds web/dist). SCREENSHOTS=1 also writes the README's
// screenshots (light and dark) to docs/screenshots/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { generate, SCHEMA_FILE } from "../scripts/gen-api.mjs";
import { join } from "node:path";
import {
  REPO,
  apiCall,
  axe,
  createTask,
  gate,
  launchBrowser,
  makeWorkspace,
  runOf,
  startServer,
  until,
  waitForCount,
  waitForText,
  writeConfig,
} from "./lib.mjs";

const SHOTS = process.env.SCREENSHOTS === "1" ? join(REPO, "docs/screenshots") : null;

let ws;
let server;
let browser;
let context;
let page;
const seeded = {};

async function screenshot(name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.screenshot({ path: join(SHOTS, `${name}-${scheme}.png`) });
  }
  await page.emulateMedia({ colorScheme: "light" });
}

async function expectAccessible(name) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    const violations = await axe(page);
    assert.deepEqual(violations, [], `${name} (${scheme}) has serious accessibility violations: ${JSON.stringify(violations, null, 1)}`);
  }
  await page.emulateMedia({ colorScheme: "light" });
}

async function selectedId() {
  return page.locator('[data-testid="worker-card"][data-selected="true"]').getAttribute("data-worker-id", { timeout: 10_000 });
}

before(async () => {
  ws = makeWorkspace();
  server = await startServer(ws);
  browser = await launchBrowser();
  context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));

  // Runs to look at: three demo runs that finish, one scripted run that
  // fails, one scripted run left running.
  for (const title of ["Inspect alpha", "Inspect beta", "Inspect gamma"]) {
    const t = await createTask(server, { title, spec: `# ${title}\nLook around.`, agent_id: "demo" });
    seeded[title] = await runOf(server, t.vtid, "done");
  }
  const failing = await createTask(server, { title: "Scripted failure", agent_id: "scripted" });
  gate(ws, failing.vtid, "step2");
  gate(ws, failing.vtid, "fail");
  gate(ws, failing.vtid, "finish");
  seeded.failed = await runOf(server, failing.vtid, "failed");
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test("the shell loads at client routes and unknown API paths stay JSON", async () => {
  const html = await fetch(`${server.url}/tasks/VTID-NOPE`);
  assert.equal(html.status, 200);
  assert.match(html.headers.get("content-type"), /text\/html/);
  assert.equal(html.headers.get("cache-control"), "no-cache");
  const body = await html.text();
  const asset = body.match(/\/assets\/[^"]+\.js/)[0];
  const js = await fetch(server.url + asset);
  assert.match(js.headers.get("cache-control"), /immutable/);
  const api = await fetch(`${server.url}/api/v1/nothing-here`);
  assert.equal(api.status, 404);
  assert.equal((await api.json()).error.code, "route_not_found");
});

test("the committed schema.d.ts is what this server's /api/openapi.json generates", async () => {
  const doc = await apiCall(server, "GET", "/api/openapi.json");
  const fresh = await generate(doc);
  // The UI's wire types come only from schema.d.ts: a drift means they no
  // longer describe this server.
  assert.ok(
    fresh === readFileSync(SCHEMA_FILE, "utf8"),
    "web/src/api/schema.d.ts differs from /api/openapi.json: run `npm run gen:api` in web/ against this server and commit it",
  );
});

test("home lists agents with their counts", async () => {
  await page.goto(`${server.url}/`);
  await waitForCount(page, '[data-testid="agent-card"]', 2);
  const demo = page.locator('[data-testid="agent-card"][data-agent-id="demo"]');
  await waitForText(page, '[data-agent-id="scripted"] [data-testid="agent-failed"]', "1");
  assert.equal(await demo.locator('[data-testid="agent-running"]').textContent(), "0");
  await waitForText(page, '[data-testid="connection"]', "Live");
  // The theme toggle goes light, dark, back to the system's, and is remembered.
  await page.getByTestId("theme-toggle").click();
  await page.waitForFunction(() => document.documentElement.dataset.theme === "light");
  await page.getByTestId("theme-toggle").click();
  await page.waitForFunction(() => document.documentElement.dataset.theme === "dark");
  await page.reload();
  await page.waitForFunction(() => document.documentElement.dataset.theme === "dark");
  await page.getByTestId("theme-toggle").click();
  await page.waitForFunction(() => document.documentElement.dataset.theme === undefined);
  await expectAccessible("home");
  await screenshot("home");
});

test("workers page lists runs, counts them, filters by status and search", async () => {
  await page.goto(`${server.url}/agents/demo/workers`);
  await waitForCount(page, '[data-testid="worker-card"]', 3);
  await waitForText(page, '[data-testid="worker-count"]', "3 runs");
  await waitForText(page, '[data-testid="detail-empty"]', "Select a worker to view details");

  await page.getByTestId("worker-search").fill("beta");
  await waitForCount(page, '[data-testid="worker-card"]', 1);
  await waitForText(page, '[data-testid="worker-card"]', "Inspect beta");
  await waitForText(page, '[data-testid="worker-count"]', "1 run");
  assert.match(page.url(), /q=beta/);
  await page.getByTestId("worker-search").fill("");
  await waitForCount(page, '[data-testid="worker-card"]', 3);

  await page.goto(`${server.url}/agents/scripted/workers`);
  await waitForCount(page, '[data-testid="worker-card"]', 1);
  await page.getByTestId("pill-done").click();
  await waitForText(page, '[data-testid="list-empty"]', "No runs match.");
  await page.getByTestId("pill-failed").click();
  await waitForCount(page, '[data-testid="worker-card"][data-run-status="failed"]', 1);
  await page.getByTestId("pill-all").click();
  await waitForCount(page, '[data-testid="worker-card"]', 1);
  await expectAccessible("workers list");
});

test("a deep link opens a run with its result and transcript", async () => {
  const run = seeded["Inspect gamma"];
  await page.goto(`${server.url}/agents/demo/workers?worker=${run.id}`);
  await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect gamma");
  assert.equal(await selectedId(), run.id);
  await waitForText(page, '[data-testid="result"]', "Inspected");
  await page.getByTestId("transcript").waitFor();
  await waitForText(page, '[data-testid="tool-call"] summary', "shell");
  // A tool call opens to show its full arguments.
  const call = page.getByTestId("tool-call").first();
  await call.locator("summary").click();
  await waitForText(page, '[data-testid="tool-call"][open] pre', '"command"');
  await waitForText(page, '[data-testid="tool-result"]', "shell");
  await expectAccessible("workers detail");
  await screenshot("workers");
});

test("a running run's status changes live and its transcript appears when it completes", async () => {
  const t = await createTask(server, { title: "Scripted live run", agent_id: "scripted" });
  const run = await runOf(server, t.vtid, "running");
  await page.goto(`${server.url}/agents/scripted/workers?worker=${run.id}`);
  await waitForText(page, '[data-testid="live-status"]', "phase one: waiting");
  // Its first step is stored already: the transcript shows it, not the note for a run without steps.
  await waitForText(page, '[data-testid="live-panel"] [data-testid="live-transcript"]', "Starting phase one.");
  await waitForText(page, `[data-worker-id="${run.id}"] [data-testid="worker-card-live"]`, "phase one");
  await waitForText(page, '[data-testid="connection"]', "Live");

  gate(ws, t.vtid, "step2");
  await waitForText(page, '[data-testid="live-status"]', "phase two: running tool");
  await waitForText(page, '[data-testid="active-tool"]', "shell");
  await waitForText(page, '[data-testid="tool-calls"]', "1");
  await waitForText(page, `[data-worker-id="${run.id}"] [data-testid="worker-card-live"]`, "phase two");

  gate(ws, t.vtid, "finish");
  await page.getByTestId("transcript").waitFor();
  await waitForText(page, '[data-testid="worker-detail"][data-run-status="done"] [data-testid="result"]', "Scripted run finished.");
  await waitForText(page, '[data-testid="transcript"]', "scripted output");
  // Agent text is markdown with its HTML escaped, never markup.
  await waitForText(page, '[data-testid="transcript"]', "<b>not bold</b>");
  assert.equal(await page.locator('[data-testid="transcript"] b').count(), 0);
  await waitForCount(page, `[data-testid="worker-card"][data-worker-id="${run.id}"][data-run-status="done"]`, 1);
});

/** Whether the transcript's step showing `text` lies inside the transcript's visible box. */
function stepInView(text) {
  return page.evaluate((t) => {
    const box = document.querySelector('[data-testid="transcript"]');
    const step = [...(box?.querySelectorAll(".step") ?? [])].find((s) => s.textContent.includes(t));
    if (!box || !step) return false;
    const b = box.getBoundingClientRect();
    const r = step.getBoundingClientRect();
    return r.top >= b.top - 1 && r.bottom <= b.bottom + 1;
  }, text);
}

test("a running run's transcript grows live and follows the newest step until scrolled up, on the Workers and task pages", async () => {
  const t = await createTask(server, { title: "Scripted long run", agent_id: "scripted" });
  gate(ws, t.vtid, "many");
  const run = await runOf(server, t.vtid, "running");
  await page.goto(`${server.url}/agents/scripted/workers?worker=${run.id}`);
  await waitForText(page, '[data-testid="live-transcript"]', "Starting phase one.");
  await waitForText(page, '[data-testid="connection"]', "Live");
  const follow = page.getByTestId("follow-toggle");
  assert.equal(await follow.getAttribute("aria-pressed"), "true", "follow is on at first");

  // Forty-one steps arrive while the page is open: each one shows, the newest in view.
  gate(ws, t.vtid, "step2");
  await page.waitForSelector('[data-testid="transcript"][data-steps="42"]');
  await until(() => stepInView("Progress note 40"), "the newest step to be in view");
  assert.equal(await page.locator('[data-testid="worker-detail"]').getAttribute("data-run-status"), "running");
  await expectAccessible("live transcript");

  // Scrolling up stops following: later steps arrive without moving the view.
  await page.locator('[data-testid="transcript"]').hover();
  await page.mouse.wheel(0, -5000);
  await until(async () => (await follow.getAttribute("aria-pressed")) === "false", "follow to turn off");
  gate(ws, t.vtid, "more");
  await page.waitForSelector('[data-testid="transcript"][data-steps="62"]');
  assert.equal(await stepInView("Progress note 60"), false, "not following, the view stays where it was");
  assert.ok(await stepInView("Starting phase one."), "the first step is still in view");
  // Following again goes to the newest step.
  await follow.click();
  assert.equal(await follow.getAttribute("aria-pressed"), "true");
  await until(() => stepInView("Progress note 60"), "the newest step to be in view again");

  // The task page shows the running run's transcript too.
  await page.goto(`${server.url}/tasks/${t.vtid}`);
  await page.waitForSelector('[data-testid="task-detail"] [data-testid="live-transcript"] [data-testid="transcript"][data-steps="62"]');
  await until(() => stepInView("Progress note 60"), "the newest step in view on the task page");
  await waitForText(page, '[data-testid="run-attempt"]', "attempt 1");
  gate(ws, t.vtid, "finish");
  await page.getByTestId("live-transcript").waitFor({ state: "detached" });
});

test("a run without a transcript says so", async () => {
  const run = seeded.failed;
  await page.goto(`${server.url}/agents/scripted/workers?worker=${run.id}`);
  await waitForText(page, '[data-testid="worker-detail"]', "Scripted failure");
  // The failed run has steps, so it has a transcript; a run of a worker that
  // recorded none shows the note. Seed one through the connector.
  const reg = await apiCall(server, "POST", "/api/v1/worker/orchestrator/register", {
    worker_id: "e2e-silent-worker",
    capabilities: ["silent"],
    max_concurrent: 1,
  });
  const silent = await createTask(server, { title: "Silent run", capabilities: ["silent"] });
  const headers = { authorization: `Bearer ${reg.worker_token}`, "content-type": "application/json" };
  const claim = await (await fetch(`${server.url}/api/v1/worker/orchestrator/tasks/${silent.vtid}/claim`, { method: "POST", headers, body: "{}" })).json();
  for (const event of ["worker.execution.started", "worker.execution.completed"]) {
    const res = await fetch(`${server.url}/api/v1/worker/orchestrator/tasks/${silent.vtid}/progress`, {
      method: "POST",
      headers,
      body: JSON.stringify({ event, message: event, claim_token: claim.claim_token }),
    });
    assert.equal(res.status, 200, await res.text());
    if (event === "worker.execution.started") {
      // Running without a step yet: the Workers page contract's note.
      const running = await runOf(server, silent.vtid, "running");
      await page.goto(`${server.url}/agents/${running.agent_id}/workers?worker=${running.id}`);
      await waitForText(page, '[data-testid="live-panel"] [data-testid="transcript-pending"]', "Transcript available when worker completes.");
    }
  }
  const runRow = await runOf(server, silent.vtid, "done");
  await page.goto(`${server.url}/agents/${runRow.agent_id}/workers?worker=${runRow.id}`);
  await waitForText(page, '[data-testid="no-transcript"]', "Full transcript not available for this worker");
});

test("the selection survives reload and follows back and forward", async () => {
  const a = seeded["Inspect alpha"];
  const b = seeded["Inspect beta"];
  await page.goto(`${server.url}/agents/demo/workers`);
  await page.locator(`[data-testid="worker-card"][data-worker-id="${a.id}"]`).click();
  await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect alpha");
  await page.locator(`[data-testid="worker-card"][data-worker-id="${b.id}"]`).click();
  await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect beta");
  assert.match(page.url(), new RegExp(`worker=${b.id}`));

  await page.reload();
  await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect beta");
  assert.equal(await selectedId(), b.id);

  await page.goBack();
  await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect alpha");
  assert.equal(await selectedId(), a.id);
  await page.goForward();
  await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect beta");

  // Arrow keys move the selection through the list.
  await page.locator(`[data-testid="worker-card"][data-worker-id="${b.id}"]`).focus();
  await page.keyboard.press("ArrowDown");
  await until(async () => (await selectedId()) !== b.id, "the selection to move down");
});

test("a task created from the board moves across columns live", async () => {
  await page.goto(`${server.url}/tasks`);
  await page.getByTestId("board").waitFor();
  await page.getByTestId("new-task").click();
  await page.getByTestId("task-title").fill("Board task");
  await page.getByTestId("task-spec").fill("# Board task\nMove across the board.");
  await page.getByTestId("task-agent").selectOption("scripted");
  await page.getByTestId("task-dispatch").uncheck();
  await expectAccessible("task dialog");
  await page.getByTestId("task-submit").click();
  const card = (state) => `[data-testid="board-column"][data-state="${state}"] [data-testid="task-card"]`;
  await waitForText(page, card("draft"), "Board task");
  const vtid = await page.locator(card("draft"), { hasText: "Board task" }).getAttribute("data-vtid");

  await page.locator(`[data-vtid="${vtid}"] [data-testid="task-dispatch-btn"]`).click();
  await waitForText(page, card("running"), "Board task");
  await screenshot("tasks");
  gate(ws, vtid, "step2");
  gate(ws, vtid, "finish");
  await waitForText(page, card("done"), "Board task");
  await expectAccessible("tasks board");

  await page.locator(`[data-vtid="${vtid}"] a.task-title`).click();
  await page.getByTestId("task-detail").waitFor();
  await waitForText(page, '[data-testid="task-timeline"]', "task.state_changed");
  await waitForText(page, '[data-testid="task-detail"]', "Move across the board.");
  // The agent reported usage on its way out: the run lists it.
  await waitForText(page, '[data-testid="run-usage"]', "1.2k in · 340 out · $0.0123");
  await expectAccessible("task detail");
  await screenshot("task-detail");
});

test("cancel from the board asks first, and dismissing does not cancel; Retry and Rerun run it again", async () => {
  const t = await createTask(server, { title: "Task to cancel", agent_id: "scripted" });
  await runOf(server, t.vtid, "running");
  const cancels = [];
  const onRequest = (r) => {
    if (r.method() === "POST" && r.url().endsWith(`/api/v1/tasks/${t.vtid}/cancel`)) cancels.push(r.url());
  };
  page.on("request", onRequest);
  try {
    await page.goto(`${server.url}/tasks`);
    const card = (state) => `[data-testid="board-column"][data-state="${state}"] [data-vtid="${t.vtid}"]`;
    await waitForText(page, card("running"), "Task to cancel");
    const dialog = page.getByRole("dialog", { name: `Cancel ${t.vtid}?` });

    // Escape, then "Keep it": the dialog goes and nothing is cancelled.
    await page.locator(`[data-vtid="${t.vtid}"] [data-testid="task-cancel-btn"]`).click();
    await dialog.waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.dataset.testid), "confirm-dismiss", "focus starts on the safe choice");
    await expectAccessible("cancel confirmation");
    await page.keyboard.press("Escape");
    await dialog.waitFor({ state: "detached" });
    await page.locator(`[data-vtid="${t.vtid}"] [data-testid="task-cancel-btn"]`).click();
    await dialog.getByRole("button", { name: "Keep it" }).click();
    await dialog.waitFor({ state: "detached" });
    assert.deepEqual(cancels, [], "dismissing the dialog sends no cancel");
    const still = await apiCall(server, "GET", `/api/v1/tasks/${t.vtid}`);
    assert.equal(still.state, "running");
    assert.equal(still.cancel_requested_at ?? null, null);
    assert.equal(await page.locator(card("running")).count(), 1);

    // Confirming cancels.
    await page.locator(`[data-vtid="${t.vtid}"] [data-testid="task-cancel-btn"]`).click();
    await dialog.getByRole("button", { name: "Cancel task" }).click();
    await waitForText(page, card("cancelled"), "Task to cancel");
    assert.equal(cancels.length, 1);

    // A cancelled task is retried from its card: it runs again, as attempt 2.
    await page.locator(`${card("cancelled")} [data-testid="task-retry-btn"]`).click();
    await waitForText(page, card("running"), "Task to cancel");
    const second = await until(async () => {
      const { runs } = await apiCall(server, "GET", `/api/v1/runs?vtid=${t.vtid}&status=running`);
      return runs[0];
    }, "the retried run");
    assert.equal(second.attempt, 2);
    gate(ws, t.vtid, "step2");
    gate(ws, t.vtid, "finish");
    await waitForText(page, card("done"), "Task to cancel");

    // A done task is rerun as a new task with the same definition, which opens.
    await page.locator(`${card("done")} [data-testid="task-rerun-btn"]`).click();
    await page.waitForURL((u) => /\/tasks\/[^/]+$/.test(u.pathname) && !u.pathname.endsWith(`/${t.vtid}`));
    await waitForText(page, '[data-testid="task-detail"] h2', "Task to cancel");
    const rerunVtid = decodeURIComponent(new URL(page.url()).pathname.split("/").pop());
    const rerun = await apiCall(server, "GET", `/api/v1/tasks/${rerunVtid}`);
    assert.equal(rerun.title, "Task to cancel");
    assert.equal(rerun.agent_id, "scripted");
    await runOf(server, rerunVtid, "running");
    gate(ws, rerunVtid, "step2");
    gate(ws, rerunVtid, "finish");
    await runOf(server, rerunVtid, "done");
  } finally {
    page.off("request", onRequest);
  }
});

test("the Workers page filters by cancelled runs and shows them as cancelled", async () => {
  // The run cancelled from the board above is one of the scripted agent's.
  await page.goto(`${server.url}/agents/scripted/workers`);
  await page.getByTestId("pill-cancelled").click();
  assert.match(page.url(), /status=cancelled/);
  await waitForCount(page, '[data-testid="worker-card"][data-run-status="cancelled"]', 1);
  assert.equal(await page.locator('[data-testid="worker-card"]:not([data-run-status="cancelled"])').count(), 0);
  await waitForText(page, '[data-testid="worker-card"] [data-status="cancelled"]', "cancelled");
  // A deep link keeps the filter.
  await page.reload();
  await waitForCount(page, '[data-testid="worker-card"][data-run-status="cancelled"]', 1);
});

test("a failed task is retried from its page, and each run shows its attempt", async () => {
  const vtid = seeded.failed.vtid;
  await page.goto(`${server.url}/tasks/${vtid}`);
  await page.locator('[data-testid="task-detail"][data-state="failed"]').waitFor();
  await waitForText(page, '[data-testid="run-attempt"]', "attempt 1");
  await page.getByTestId("task-retry-btn").click();
  // Its gates are all open: the second attempt fails at once as the first did.
  await waitForCount(page, '[data-testid="run-attempt"]', 2);
  await waitForText(page, '[data-testid="run-attempt"]', "attempt 2");
  await page.locator('[data-testid="task-detail"][data-state="failed"]').waitFor();
  const retried = await until(async () => {
    const { runs } = await apiCall(server, "GET", `/api/v1/runs?vtid=${vtid}`);
    return runs.find((r) => r.attempt === 2 && r.status === "failed");
  }, "the second, failed attempt");
  await page.goto(`${server.url}/agents/scripted/workers?worker=${retried.id}`);
  await waitForText(page, '[data-testid="worker-detail"] [data-testid="run-attempt"]', "attempt 2");
});

test("terminal tabs are neither agents on the home page nor workers in the fleet table", async () => {
  const session = await apiCall(server, "POST", "/api/v1/sessions", { location_path: ws.dir, name: "naming" });
  const tab = await apiCall(server, "POST", `/api/v1/sessions/${session.id}/workers`, { type: "terminal" });
  // The tab registered as a worker, but the agent list (the home page, the
  // New task form) names no tab's agent.
  const { agents } = await apiCall(server, "GET", "/api/v1/agents");
  assert.ok(agents.length > 0 && agents.every((a) => a.worker_type !== "pty" && a.id !== "terminal"), JSON.stringify(agents));
  await page.goto(`${server.url}/`);
  await waitForCount(page, '[data-testid="agent-card"]', agents.length);
  assert.equal(await page.locator('[data-testid="agent-card"][data-agent-id="terminal"]').count(), 0);

  await page.goto(`${server.url}/fleet`);
  await page.locator(`[data-testid="fleet-sessions"] [data-testid="fleet-session-row"][data-worker-id="${tab.id}"]`).waitFor();
  await waitForText(page, `[data-testid="fleet-session-row"][data-worker-id="${tab.id}"]`, "terminal");
  assert.equal(await page.locator(`[data-testid="fleet-row"][data-worker-id="${tab.id}"]`).count(), 0, "the tab is not a worker row");
  await expectAccessible("fleet with session tabs");
  await apiCall(server, "DELETE", `/api/v1/sessions/${session.id}`);
});

test("two tabs share one event stream", async () => {
  const streams = [];
  const ctx = await browser.newContext();
  ctx.on("request", (r) => {
    if (r.url().includes("/api/events")) streams.push(r.url());
  });
  const one = await ctx.newPage();
  await one.goto(`${server.url}/`);
  await waitForText(one, '[data-testid="connection"]', "Live");
  const two = await ctx.newPage();
  await two.goto(`${server.url}/tasks`);
  await waitForText(two, '[data-testid="connection"]', "Live");
  // The second tab sees a task created now, through the first tab's stream.
  await createTask(server, { title: "Seen through the leader", agent_id: "demo" });
  await waitForText(two, '[data-testid="task-card"]', "Seen through the leader");
  assert.equal(streams.length, 1, `expected one event stream, saw ${streams.join(", ")}`);
  // When the leader goes, the other tab takes over the stream.
  await one.close();
  await until(() => streams.length === 2, "the second tab to open the stream");
  await waitForText(two, '[data-testid="connection"]', "Live");
  await ctx.close();
});

test("fleet shows workers, then recovered ones after a restart, with the indicator reconnecting", async () => {
  await page.goto(`${server.url}/fleet`);
  await waitForCount(page, '[data-testid="fleet-row"]', 3);
  await waitForText(page, '[data-testid="fleet-table"]', "source: registry");
  // The node is a host, online, and its built-in runner's workers are
  // listed under it.
  await waitForText(page, '[data-testid="host-row"]', "online");
  const node = await page.locator('[data-testid="host-row"]').first().getAttribute("data-host-id");
  await page.locator(`[data-testid="host-group"][data-host-id="${node}"] [data-testid="fleet-row"]`).first().waitFor({ state: "visible" });
  await waitForText(page, '[data-testid="worker-events"]', "worker_started");
  await expectAccessible("fleet");
  await screenshot("fleet");

  // A worker holding a claim with no activity for longer than the threshold
  // is stuck; a threshold of 0 minutes makes any busy worker so.
  const busy = await createTask(server, { title: "Busy for the fleet", agent_id: "scripted" });
  const busyRun = await runOf(server, busy.vtid, "running");
  await page.getByTestId("stale-threshold").fill("0");
  await waitForText(page, `[data-testid="fleet-row"][data-worker-id="${busyRun.worker_id}"].row-stuck`, "stuck");
  await page.getByTestId("stale-threshold").fill("10");
  await waitForCount(page, ".row-stuck", 0);
  gate(ws, busy.vtid, "step2");
  gate(ws, busy.vtid, "finish");
  await runOf(server, busy.vtid, "done");

  // Restart on the same data and port without agents: the workers are
  // known only from storage now.
  const port = server.port;
  await server.stop();
  await waitForText(page, '[data-testid="connection"]', "Reconnecting");
  server = await startServer(ws, { config: writeConfig(ws, { agents: false }), port });
  await waitForText(page, '[data-testid="connection"]', "Live", 30_000);
  await page.reload();
  await waitForText(page, '[data-testid="fleet-table"]', "source: event_log");
  await waitForText(page, '[data-testid="fleet-table"]', "recovered");
});

test("the token prompt appears when the server has a token", async () => {
  const token = "e2e-operator-token-0123456789";
  const tws = makeWorkspace();
  const guarded = await startServer(tws, { token, config: writeConfig(tws, { agents: false }) });
  try {
    const ctx = await browser.newContext();
    const p = await ctx.newPage();
    const urls = [];
    p.on("request", (r) => urls.push(r.url()));
    await p.goto(`${guarded.url}/`);
    await p.getByTestId("token-prompt").waitFor();
    // It names the variable the server reads, not the deprecated one.
    await waitForText(p, '[data-testid="token-prompt"] code', "SHEPHERD_TOKEN");
    assert.ok(!(await p.getByTestId("token-prompt").textContent()).includes("SHEPHERD_AUTH_TOKEN"));
    await p.locator('[data-testid="token-prompt"] input').fill("wrong-token-wrong-token");
    await p.locator('[data-testid="token-prompt"] button[type="submit"]').click();
    await waitForText(p, '[data-testid="token-prompt"] [role="alert"]', "That token was refused.");
    const savedPage = page;
    page = p;
    await expectAccessible("token prompt");
    await screenshot("token");
    page = savedPage;
    await p.locator('[data-testid="token-prompt"] input').fill(token);
    await p.locator('[data-testid="token-prompt"] button[type="submit"]').click();
    await p.getByTestId("token-prompt").waitFor({ state: "detached" });
    await waitForText(p, '[data-testid="connection"]', "Live");
    await waitForText(p, "main", "No agents yet");
    assert.ok(!urls.some((u) => u.includes(token)), "the token never appears in a URL");
    // The token stays for this tab across a reload.
    await p.reload();
    await waitForText(p, '[data-testid="connection"]', "Live");
    assert.equal(await p.getByTestId("token-prompt").count(), 0);
    await ctx.close();
  } finally {
    await guarded.stop();
  }
});
