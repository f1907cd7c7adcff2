// Every page at desktop and phone widths (issue 37, web item 1), in real
// Chromium against a real server: nothing scrolls sideways, the top bar's
// controls (navigation menu, Live indicator, theme toggle) stay inside the
// window, the navigation collapses into a menu that Escape and a chosen link
// close, and the two- and three-column pages become one column that switches
// between list and detail. Each page is checked with axe in light and dark.
// SCREENSHOTS=1 also writes the phone's screenshots (390×844, light and
// dark) to docs/screenshots/phone-*.png.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { REPO, apiCall, axe, createTask, launchBrowser, makeWorkspace, runOf, startServer, until, waitForText } from "./lib.mjs";

const VIEWPORTS = [
  { name: "desktop", width: 1280, height: 800 },
  { name: "phone", width: 390, height: 844 },
  { name: "small phone", width: 360, height: 740 },
];
/** Below this width the layout is the phone's (the CSS breakpoint). */
const NARROW = 800;

const SHOTS = process.env.SCREENSHOTS === "1" ? join(REPO, "docs/screenshots") : null;

let ws;
let server;
let browser;
const seeded = {};

before(async () => {
  ws = makeWorkspace();
  server = await startServer(ws);
  browser = await launchBrowser();
  for (const title of ["Inspect alpha with a rather long title that must wrap or be cut on a phone", "Inspect beta"]) {
    const t = await createTask(server, { title, spec: `# ${title}\nLook around.`, agent_id: "demo" });
    seeded[title.split(" ")[1]] = await runOf(server, t.vtid, "done");
  }
  seeded.task = seeded.alpha.vtid;
  await apiCall(server, "POST", "/api/v1/resources", { id: "phone-table", name: "Phone table", agent_id: "demo" });
  const conversation = await apiCall(server, "POST", "/api/v1/resources/phone-table/conversations");
  seeded.conversation = conversation.id;
  await apiCall(server, "POST", `/api/v1/conversations/${conversation.id}/messages`, { text: "Look at the first row, please." });
  await until(async () => (await apiCall(server, "GET", `/api/v1/conversations/${conversation.id}`)).state === "idle", "the conversation's reply");
  const session = await apiCall(server, "POST", "/api/v1/sessions", { name: "phone session", location_path: ws.dir });
  seeded.session = session.id;
  await apiCall(server, "POST", `/api/v1/sessions/${session.id}/workers`, { type: "terminal" });
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** A new page at `viewport`; closed after `body`. */
async function withPage(viewport, body) {
  const context = await browser.newContext({ viewport: { width: viewport.width, height: viewport.height } });
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  try {
    await body(page);
  } finally {
    await context.close();
  }
}

/** At the phone's width only (390×844), with SCREENSHOTS=1: light and dark. */
async function screenshot(page, viewport, name) {
  if (!SHOTS || viewport.width !== 390) return;
  mkdirSync(SHOTS, { recursive: true });
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.screenshot({ path: join(SHOTS, `phone-${name}-${scheme}.png`) });
  }
  await page.emulateMedia({ colorScheme: "light" });
}

/** The element is shown and lies wholly inside the window. */
async function expectInWindow(page, selector, what) {
  const el = page.locator(selector).first();
  await el.waitFor({ state: "visible" });
  const box = await el.boundingBox();
  const { width, height } = page.viewportSize();
  assert.ok(
    box && box.x >= 0 && box.y >= 0 && box.x + box.width <= width + 0.5 && box.y + box.height <= height + 0.5,
    `${what} lies outside the ${width}×${height} window: ${JSON.stringify(box)}`,
  );
  return box;
}

/** Nothing scrolls sideways: neither the document nor the main area. */
async function expectNoSidewaysScroll(page, what) {
  const wide = await page.evaluate(() => {
    const out = [];
    if (document.documentElement.scrollWidth > window.innerWidth) out.push(`document ${document.documentElement.scrollWidth} > ${window.innerWidth}`);
    for (const el of [document.body, document.querySelector("main")]) {
      if (el && el.scrollWidth > el.clientWidth + 1) out.push(`${el.tagName} ${el.scrollWidth} > ${el.clientWidth}`);
    }
    return out;
  });
  assert.deepEqual(wide, [], `${what} scrolls sideways`);
}

/** The top bar's controls are there to use at this width. */
async function expectTopBar(page, viewport, what) {
  if (viewport.width < NARROW) {
    await expectInWindow(page, '[data-testid="nav-toggle"]', `${what}: the menu button`);
  } else {
    assert.equal(await page.getByTestId("nav-toggle").isVisible(), false, `${what}: no menu button at desktop width`);
    await expectInWindow(page, 'nav[aria-label="Main"] a[href="/sessions"]', `${what}: the last navigation link`);
  }
  await expectInWindow(page, '[data-testid="connection"] .conn-dot', `${what}: the Live dot`);
  await waitForText(page, '[data-testid="connection"]', "Live");
  await expectInWindow(page, '[data-testid="theme-toggle"]', `${what}: the theme toggle`);
}

/** Fits, keeps its controls and passes axe, in light and in dark. */
async function expectUsable(page, viewport, what) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    const name = `${what} at ${viewport.width}×${viewport.height} (${scheme})`;
    await expectNoSidewaysScroll(page, name);
    await expectTopBar(page, viewport, name);
    const violations = await axe(page);
    assert.deepEqual(violations, [], `${name} has serious accessibility violations: ${JSON.stringify(violations, null, 1)}`);
  }
  await page.emulateMedia({ colorScheme: "light" });
}

for (const viewport of VIEWPORTS) {
  const narrow = viewport.width < NARROW;
  describe(`at ${viewport.width}×${viewport.height} (${viewport.name})`, () => {
    test("every page fits the window with its controls in reach", async () => {
      await withPage(viewport, async (page) => {
        const pages = [
          ["home", "/", '[data-testid="agent-card"]'],
          ["inbox", "/inbox", "main h1"],
          ["tasks board", "/tasks", '[data-testid="task-card"]'],
          ["new task dialog", "/tasks?new=true", '[data-testid="task-submit"]'],
          ["task detail", `/tasks/${seeded.task}`, '[data-testid="task-detail"]'],
          ["fleet", "/fleet", '[data-testid="fleet-row"]'],
          ["workers list", "/agents/demo/workers", '[data-testid="worker-card"]'],
          ["workers detail", `/agents/demo/workers?worker=${seeded.alpha.id}`, '[data-testid="transcript"]'],
          ["conversations", `/resources/phone-table/conversations/${seeded.conversation}`, '[data-testid="send-input"]'],
          ["sessions", "/sessions", '[data-testid="session-row"]'],
          ["session terminal", `/sessions/${seeded.session}`, '[data-testid="terminal"] .xterm-rows'],
          ["not found", "/no/such/page", "main"],
        ];
        for (const [what, path, marker] of pages) {
          await page.goto(server.url + path);
          await page.locator(marker).first().waitFor({ state: "visible" });
          await expectUsable(page, viewport, what);
        }
        // The tasks board's columns stack or scroll inside the board, never the page.
        await page.goto(`${server.url}/tasks`);
        await page.getByTestId("task-card").first().waitFor();
        await screenshot(page, viewport, "tasks");
        const board = await page.getByTestId("board").boundingBox();
        assert.ok(board.x >= 0 && board.x + board.width <= viewport.width, `the board lies inside the window: ${JSON.stringify(board)}`);
      });
    });

    test("the conversation can be read and answered", async () => {
      await withPage(viewport, async (page) => {
        await page.goto(`${server.url}/resources/phone-table/conversations`);
        await waitForText(page, '[data-testid="message"][data-role="user"]', "Look at the first row, please.");
        const conversation = await expectInWindow(page, '[data-testid="conversation"]', "the conversation");
        assert.ok(conversation.width >= Math.min(viewport.width - 40, 600), `the conversation is ${conversation.width} px wide`);
        const input = await expectInWindow(page, '[data-testid="send-input"]', "the send box");
        assert.ok(input.width >= (narrow ? 200 : 300), `the send box is ${input.width} px wide`);
        await expectInWindow(page, '[data-testid="send-btn"]', "the send button");
        await screenshot(page, viewport, "conversation");
        const toHistory = page.getByTestId("show-history");
        if (!narrow) {
          assert.equal(await toHistory.isVisible(), false, "no History switch at desktop width");
          await expectInWindow(page, '[data-testid="conversation-item"]', "the history beside the conversation");
          return;
        }
        // On a phone: the history list instead of the conversation, and back.
        assert.equal(await page.getByTestId("conversation-item").first().isVisible(), false, "the history is hidden behind its switch");
        await toHistory.click();
        await expectInWindow(page, '[data-testid="conversation-item"]', "the history list");
        assert.equal(await page.getByTestId("send-input").isVisible(), false, "the conversation is hidden while the history shows");
        await expectUsable(page, viewport, "conversation history list");
        await screenshot(page, viewport, "conversation-history");
        await page.getByTestId("conversation-item").first().click();
        await expectInWindow(page, '[data-testid="send-input"]', "the send box after choosing a conversation");
        assert.equal(await page.getByTestId("conversation-item").first().isVisible(), false);
        // The send box works at this width.
        await page.getByTestId("send-input").fill("And the second row.");
        await page.getByTestId("send-btn").click();
        await waitForText(page, '[data-testid="message"][data-role="user"]', "And the second row.");
        await expectNoSidewaysScroll(page, "the conversation after sending");
      });
    });

    test("the Workers page shows the list, then one run with a way back; a deep link opens the run", async () => {
      await withPage(viewport, async (page) => {
        await page.goto(`${server.url}/agents/demo/workers`);
        await page.locator(`[data-testid="worker-card"][data-worker-id="${seeded.beta.id}"]`).waitFor();
        await expectInWindow(page, `[data-testid="worker-card"][data-worker-id="${seeded.alpha.id}"]`, "a worker card");
        const back = page.getByTestId("worker-back");
        if (!narrow) {
          await waitForText(page, '[data-testid="detail-empty"]', "Select a worker to view details");
          await page.locator(`[data-testid="worker-card"][data-worker-id="${seeded.beta.id}"]`).click();
          await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect beta");
          assert.equal(await back.isVisible(), false, "no Back control at desktop width");
          assert.equal(await page.getByTestId("worker-card").first().isVisible(), true, "the list stays beside the detail");
          return;
        }
        assert.equal(await page.getByTestId("worker-detail").isVisible(), false, "no detail column beside the list");
        await page.locator(`[data-testid="worker-card"][data-worker-id="${seeded.beta.id}"]`).click();
        await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect beta");
        assert.match(page.url(), new RegExp(`worker=${seeded.beta.id}`));
        assert.equal(await page.getByTestId("worker-card").first().isVisible(), false, "the list gives way to the detail");
        await expectInWindow(page, '[data-testid="worker-back"]', "the Back control");
        await expectUsable(page, viewport, "workers detail");
        await screenshot(page, viewport, "workers");
        await back.click();
        await expectInWindow(page, `[data-testid="worker-card"][data-worker-id="${seeded.beta.id}"]`, "the list again");
        assert.doesNotMatch(page.url(), /worker=/);
        // The browser's Back returns to the detail.
        await page.goBack();
        await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect beta");
        // A deep link opens the detail view at once.
        await page.goto(`${server.url}/agents/demo/workers?worker=${seeded.alpha.id}`);
        await page.getByTestId("transcript").waitFor();
        await waitForText(page, '[data-testid="worker-detail"] .detail-task', "Inspect alpha");
        assert.equal(await page.getByTestId("worker-card").first().isVisible(), false);
        await expectInWindow(page, '[data-testid="worker-back"]', "the Back control of a deep link");
        await expectNoSidewaysScroll(page, "a deep-linked run");
      });
    });

    if (narrow) {
      test("the navigation is a menu: it opens, Escape closes it, and choosing a link closes it", async () => {
        await withPage(viewport, async (page) => {
          await page.goto(`${server.url}/`);
          await page.getByTestId("agent-card").first().waitFor();
          const toggle = page.getByTestId("nav-toggle");
          const tasksLink = page.locator('nav[aria-label="Main"] a[href="/tasks"]');
          assert.equal(await toggle.getAttribute("aria-expanded"), "false");
          assert.equal(await tasksLink.isVisible(), false, "the links are folded away");
          await toggle.click();
          assert.equal(await toggle.getAttribute("aria-expanded"), "true");
          for (const href of ["/", "/inbox", "/tasks", "/fleet", "/conversations", "/sessions"]) {
            await expectInWindow(page, `nav[aria-label="Main"] a[href="${href}"]`, `the menu's link to ${href}`);
          }
          await expectUsable(page, viewport, "the open menu");
          await screenshot(page, viewport, "menu");
          await page.keyboard.press("Escape");
          await tasksLink.waitFor({ state: "hidden" });
          assert.equal(await toggle.getAttribute("aria-expanded"), "false");
          assert.equal(await page.evaluate(() => document.activeElement?.dataset.testid), "nav-toggle", "focus goes back to the menu button");
          // The keyboard opens it too; choosing a link goes there and closes it.
          await page.keyboard.press("Enter");
          await tasksLink.waitFor();
          await tasksLink.click();
          await page.waitForURL(/\/tasks$/);
          await page.getByTestId("board").waitFor();
          await tasksLink.waitFor({ state: "hidden" });
          assert.equal(await toggle.getAttribute("aria-expanded"), "false");
          // The Inbox and its count stay in the bar while the menu is folded.
          await expectInWindow(page, '[data-testid="nav-inbox"]', "the Inbox link");
        });
      });
    }
  });
}
