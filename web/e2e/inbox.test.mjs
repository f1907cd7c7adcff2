// Browser tests of the Inbox (issue 36, "Where people answer") in real
// Chromium against a real server whose agents ask people through `shepherd
// ask` (e2e/asking-agent.sh): a question answered with an option, a
// permission denied with a message, a free-text answer that another device
// gave first; the navigation's count, the document's title, the browser
// notification, and the run's views showing each request with its answer.
// Each runs at desktop width and at a phone's (390×844). SCREENSHOTS=1 also
// writes screenshots (light and dark) to docs/screenshots/.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { BIN, REPO, WEB, apiCall, axe, createTask, launchBrowser, makeWorkspace, runOf, startServer, until, waitForText } from "./lib.mjs";

const SHOTS = process.env.SCREENSHOTS === "1" ? join(REPO, "docs/screenshots") : null;
const VIEWPORTS = {
  desktop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
};

let ws;
let server;
let browser;

/** shepherd.toml: one agent per way of asking, all running asking-agent.sh. */
function askingConfig() {
  const agent = (name, mode, extra = "") => `
[agents.${name}]
command = ["bash", ${JSON.stringify(join(WEB, "e2e/asking-agent.sh"))}, "${mode}", "{task_id}"]
transcript = "steps-jsonl"
max_concurrent = 4
env = { SHEPHERD_BIN = ${JSON.stringify(BIN)}, ASK_OUT_DIR = ${JSON.stringify(ws.control)} }
${extra}
`;
  const path = join(ws.dir, "asking.toml");
  writeFileSync(
    path,
    agent("asker", "question", 'allow = ["Bash(git status:*)"]') + agent("texter", "text") + agent("guarded", "permission"),
  );
  return path;
}

/** What the agent of `vtid` was answered ("yes exit=0"), once it wrote it. */
function agentAnswer(vtid) {
  const file = join(ws.control, `${vtid}.answer`);
  return until(() => existsSync(file) && readFileSync(file, "utf8").trim(), `the agent of ${vtid} to get its answer`);
}

/** The task's requests through the API. */
async function requestsOf(vtid) {
  return (await apiCall(server, "GET", `/api/v1/input-requests?vtid=${encodeURIComponent(vtid)}`)).requests;
}

/**
 * A page at `viewport` whose Notification is a stand-in recording what would
 * be shown: permission "default" until the page asks, then "granted".
 */
async function openPage(viewport) {
  const context = await browser.newContext({ viewport: VIEWPORTS[viewport] });
  await context.addInitScript(() => {
    const shown = [];
    let permission = "default";
    class RecordingNotification {
      static get permission() {
        return permission;
      }
      static async requestPermission() {
        permission = "granted";
        return permission;
      }
      constructor(title, options = {}) {
        shown.push({ title, body: options.body ?? "", tag: options.tag ?? "" });
      }
      close() {}
    }
    window.Notification = RecordingNotification;
    window.__notifications = shown;
  });
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  return { context, page };
}

function notifications(page) {
  return page.evaluate(() => window.__notifications);
}

async function expectAccessible(page, name) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    const violations = await axe(page);
    assert.deepEqual(violations, [], `${name} (${scheme}) has serious accessibility violations: ${JSON.stringify(violations, null, 1)}`);
  }
  await page.emulateMedia({ colorScheme: "light" });
}

async function screenshot(page, name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.screenshot({ path: join(SHOTS, `${name}-${scheme}.png`), fullPage: true });
  }
  await page.emulateMedia({ colorScheme: "light" });
}

/** Runs `body` with a page at `viewport`; a failure also tells what the server and the page had. */
async function withPage(viewport, body) {
  const { context, page } = await openPage(viewport);
  try {
    await body(page);
  } catch (e) {
    const requests = await apiCall(server, "GET", "/api/v1/input-requests?limit=10").catch((x) => x.message);
    const shown = await page
      .locator("main")
      .innerText({ timeout: 1_000 })
      .catch((x) => x.message);
    e.message += `\n--- the server's newest requests: ${JSON.stringify(requests)}\n--- the page (${page.url()}):\n${shown}`;
    throw e;
  } finally {
    await context.close();
  }
}

/** Nothing scrolls sideways, and every answer button is inside the window. */
async function expectFits(page, name) {
  const overflow = await page.evaluate(() => {
    const wide = [document.documentElement, document.body, document.querySelector("main")].filter((el) => el && el.scrollWidth > el.clientWidth + 1);
    return wide.map((el) => `${el.tagName} ${el.scrollWidth} > ${el.clientWidth}`);
  });
  assert.deepEqual(overflow, [], `${name} scrolls sideways`);
  const width = page.viewportSize().width;
  for (const button of await page.locator('[data-testid="input-request"] button').all()) {
    const box = await button.boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= width, `${name}: a button lies outside the window (${JSON.stringify(box)})`);
  }
}

const card = (kind) => `[data-testid="input-request"][data-kind="${kind}"]`;

/** Waits until the navigation's count says `n` (no count shown at 0). */
async function expectCount(page, n) {
  await page.locator(`[data-testid="nav-inbox"][data-count="${n}"]`).waitFor();
  if (n > 0) await waitForText(page, '[data-testid="inbox-count"]', String(n));
  else assert.equal(await page.getByTestId("inbox-count").count(), 0);
  await until(async () => (await page.title()) === (n > 0 ? `(${n}) Shepherd` : "Shepherd"), `the title to count ${n}`);
}

before(async () => {
  ws = makeWorkspace();
  server = await startServer(ws, { config: askingConfig() });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  // A server that ended by itself explains the failures that followed.
  if (server && server.child.exitCode !== null) console.error(`the server exited with ${server.child.exitCode}:\n${server.log()}`);
  await server?.stop();
});

for (const viewport of Object.keys(VIEWPORTS)) {
  describe(`the Inbox at ${viewport} width`, () => {
    test("a question appears, is answered with an option, leaves the list, and the agent gets the answer", async () => {
      await withPage(viewport, async (page) => {
        await page.goto(`${server.url}/inbox`);
        await waitForText(page, '[data-testid="inbox-empty"]', "Nothing waits for you");
        await waitForText(page, '[data-testid="connection"]', "Live");
        await expectCount(page, 0);
        await page.getByTestId("enable-notifications").click();
        await waitForText(page, '[data-testid="notifications-on"]', "Notifications on");

        const task = await createTask(server, { title: `Deploy from the ${viewport}`, agent_id: "asker" });
        const question = page.locator(card("question"), { hasText: "Deploy to staging?" });
        await question.waitFor();
        await waitForText(page, `${card("question")} [data-testid="request-task"]`, task.vtid);
        await waitForText(page, card("question"), "agent asker");
        await waitForText(page, card("question"), "just now");
        await expectCount(page, 1);
        // The rule answered the agent's `git status` at once: it never showed.
        assert.equal(await page.locator(card("permission")).count(), 0);
        const [r] = (await requestsOf(task.vtid)).filter((q) => q.state === "pending");
        assert.equal(await question.getAttribute("data-request-id"), r.id);
        // One notification, for the question only.
        const shown = await until(async () => {
          const n = await notifications(page);
          return n.length > 0 && n;
        }, "a notification");
        assert.equal(shown.length, 1, JSON.stringify(shown));
        assert.match(shown[0].title, /asker asks/);
        assert.match(shown[0].body, /Deploy to staging\?/);
        assert.equal(shown[0].tag, r.id);

        await expectFits(page, `inbox (${viewport})`);
        await expectAccessible(page, `inbox with a question (${viewport})`);
        await screenshot(page, `inbox-question-${viewport}`);

        await question.locator('[data-testid="answer-option"][data-option="yes"]').click();
        await question.waitFor({ state: "detached" });
        await waitForText(page, '[data-testid="inbox-empty"]', "Nothing waits for you");
        await waitForText(page, '[data-testid="answer-done"]', "yes");
        await expectCount(page, 0);
        assert.equal(await agentAnswer(task.vtid), "yes exit=0");
        await runOf(server, task.vtid, "done");
        assert.equal((await notifications(page)).length, 1, "no notification for the answer");

        // The Answered tab shows it with who answered.
        await page.getByTestId("inbox-tab-answered").click();
        const answered = page.locator(`[data-testid="input-request"][data-request-id="${r.id}"]`);
        await waitForText(page, `[data-request-id="${r.id}"] [data-testid="request-outcome"]`, "“yes”");
        await waitForText(page, `[data-request-id="${r.id}"] [data-testid="request-answered-by"]`, "by admin");
        assert.equal(await answered.locator("button").count(), 0, "an answered request has no buttons");
        await expectFits(page, `answered tab (${viewport})`);
        await expectAccessible(page, `answered tab (${viewport})`);

        // The task page shows the run's requests: the rule's and the person's.
        await page.locator(`[data-request-id="${r.id}"] [data-testid="request-task"]`).click();
        await page.getByTestId("task-detail").waitFor();
        await waitForText(page, `[data-testid="run-request"][data-request-id="${r.id}"]`, "by admin");
        await waitForText(page, '[data-testid="run-request"][data-state="answered"]', "by rule:Bash(git status:*)");
        assert.equal(await page.getByTestId("waiting-for-you").count(), 0);
      });
    });

    test("a permission is denied with a message, which the run's views show", async () => {
      await withPage(viewport, async (page) => {
        const task = await createTask(server, { title: `Clean from the ${viewport}`, agent_id: "guarded" });
        const run = await runOf(server, task.vtid, "running");
        // The run says it waits for a person, and leads to the Inbox.
        await page.goto(`${server.url}/agents/guarded/workers?worker=${run.id}`);
        await waitForText(page, '[data-testid="waiting-for-you"]', "Waiting for you");
        await waitForText(page, '[data-testid="live-status"]', "Bash");
        await waitForText(page, '[data-testid="run-request"][data-state="pending"] [data-testid="request-command"]', "rm -rf build");
        await expectCount(page, 1);
        await page.locator('[data-testid="waiting-for-you"] a').click();
        await page.waitForURL(/\/inbox$/);

        const permission = page.locator(card("permission"));
        await waitForText(page, `${card("permission")} .request-title`, "Bash");
        // A Bash command shows as the command; its other fields beside it.
        await waitForText(page, `${card("permission")} [data-testid="request-command"]`, "rm -rf build");
        await waitForText(page, card("permission"), "Clean the build before deploying");
        // A long input scrolls inside its own box, not the page.
        const extras = page.locator(`${card("permission")} .request-extras`);
        await waitForText(page, `${card("permission")} .request-extras`, "the build directory");
        assert.ok(await extras.evaluate((el) => el.scrollWidth > el.clientWidth), "the long input scrolls inside its box");
        await expectFits(page, `inbox with a permission (${viewport})`);
        await expectAccessible(page, `inbox with a permission (${viewport})`);
        await screenshot(page, `inbox-permission-${viewport}`);

        await permission.getByTestId("answer-message").fill("not in this repo");
        await permission.getByTestId("answer-deny").click();
        await permission.waitFor({ state: "detached" });
        await waitForText(page, '[data-testid="inbox-empty"]', "Nothing waits for you");
        await expectCount(page, 0);
        assert.equal(await agentAnswer(task.vtid), "deny exit=1");
        const [r] = await requestsOf(task.vtid);
        assert.deepEqual(
          { state: r.state, decision: r.answer?.decision, message: r.answer?.message, by: r.answered_by },
          { state: "answered", decision: "deny", message: "not in this repo", by: "admin" },
        );

        // The run's view shows the denial and who gave it, and no marker.
        await page.goto(`${server.url}/agents/guarded/workers?worker=${run.id}`);
        await waitForText(page, `[data-testid="run-request"][data-request-id="${r.id}"]`, "Denied: not in this repo");
        await waitForText(page, `[data-testid="run-request"][data-request-id="${r.id}"]`, "by admin");
        assert.equal(await page.getByTestId("waiting-for-you").count(), 0);
        await expectAccessible(page, `run with its requests (${viewport})`);
      });
    });
  });
}

test("an answer another device gave first is shown with who gave it, and the list refreshes", async () => {
  await withPage("desktop", async (page) => {
    await page.goto(`${server.url}/inbox`);
    await waitForText(page, '[data-testid="connection"]', "Live");
    const task = await createTask(server, { title: "Pick a branch", agent_id: "texter" });
    const question = page.locator(card("question"), { hasText: "Which branch?" });
    await question.waitFor();
    const id = await question.getAttribute("data-request-id");

    // Until the click, this device's lists stay as they were: the other
    // device's answer (and its event) must not reach it first.
    const stale = await (await fetch(`${server.url}/api/v1/input-requests?state=pending&limit=1000`)).text();
    let frozen = true;
    let servedStale = 0;
    await page.route(
      (url) => url.pathname === "/api/v1/input-requests",
      (route) => {
        if (!frozen || route.request().method() !== "GET") return route.continue();
        servedStale++;
        return route.fulfill({ status: 200, contentType: "application/json", body: stale });
      },
    );
    await apiCall(server, "POST", `/api/v1/input-requests/${id}/answer`, { text: "main" });
    // The answer's event makes the page refetch its list: it gets the old one.
    await until(() => servedStale > 0, "the page to refetch after the other device's answer");
    await question.getByTestId("answer-text").fill("develop");
    frozen = false;
    await question.getByTestId("answer-send").click();
    await waitForText(page, '[data-testid="answer-conflict"]', "Someone answered “Question” first: “main” by admin");
    await question.waitFor({ state: "detached" });
    await waitForText(page, '[data-testid="inbox-empty"]', "Nothing waits for you");
    await expectAccessible(page, "inbox after a conflict");
    assert.equal(await agentAnswer(task.vtid), "main exit=0");
  });
});
