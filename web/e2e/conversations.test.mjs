// Browser tests of the Conversations page at the sizes daily use reaches, in
// real Chromium against a real server: a history longer than one page of
// 200 (titles, "Load more", live updates keeping the pages read), and a
// conversation of 150 messages, which renders only what is on screen and
// stays at the newest as messages arrive.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync } from "node:fs";
import { apiCall, axe, gate, launchBrowser, makeWorkspace, startServer, until, waitForCount, waitForText, writeConfig } from "./lib.mjs";

/** The widths the layout tests use (layout.test.mjs). */
const VIEWPORTS = [
  { width: 1280, height: 800 },
  { width: 390, height: 844 },
  { width: 360, height: 740 },
];

let ws;
let server;
let browser;
let page;

before(async () => {
  ws = makeWorkspace();
  // The scripted agent (lib.mjs), and one that answers at once, so that a
  // long conversation is quick to make.
  const config = writeConfig(ws);
  appendFileSync(
    config,
    `
[agents.quick]
command = ["sh", "-c", ${JSON.stringify(`cat >/dev/null; echo '{"type":"action","content":[{"type":"text","text":"Reading it."}]}'; echo '{"type":"result","text":"Noted."}'`)}]
transcript = "steps-jsonl"
max_concurrent = 4
`,
  );
  server = await startServer(ws, { config });
  browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

async function expectAccessible(what) {
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    const violations = await axe(page);
    assert.deepEqual(violations, [], `${what} (${scheme}) has serious accessibility violations: ${JSON.stringify(violations, null, 1)}`);
  }
  await page.emulateMedia({ colorScheme: "light" });
}

/** The ids the history list shows, in order. */
function shownIds() {
  return page.getByTestId("conversation-item").evaluateAll((els) => els.map((e) => e.dataset.conversationId));
}

test("a history of 205 conversations shows 200, then Load more the rest; titles come from first messages", async () => {
  await apiCall(server, "POST", "/api/v1/resources", { id: "long-history", name: "Long history", agent_id: "quick" });
  // The history lists conversations with a message and the active one:
  // 204 with a first message each, then the active one, still empty.
  const created = [];
  for (let i = 1; i <= 205; i++) {
    const { id } = await apiCall(server, "POST", "/api/v1/resources/long-history/conversations");
    if (i < 205) await apiCall(server, "POST", `/api/v1/conversations/${id}/messages`, { text: `Conversation ${i}` });
    created.push(id);
  }
  const newestFirst = [...created].reverse();

  await page.goto(`${server.url}/resources/long-history/conversations`);
  await waitForCount(page, '[data-testid="conversation-item"]', 200);
  assert.deepEqual(await shownIds(), newestFirst.slice(0, 200), "the newest 200, newest first");
  // Before any message a conversation has no title: the list and the header say so.
  await waitForText(page, `[data-testid="conversation-item"][data-conversation-id="${created[204]}"] [data-testid="conversation-item-title"]`, "New conversation");
  await waitForText(page, '[data-testid="conversation-title"]', "New conversation");

  await page.getByTestId("load-more").click();
  await waitForCount(page, '[data-testid="conversation-item"]', 205);
  assert.deepEqual(await shownIds(), newestFirst, "the older five after the first page, none twice");
  await page.getByTestId("load-more").waitFor({ state: "detached" });
  await waitForText(page, `[data-testid="conversation-item"][data-conversation-id="${created[0]}"] [data-testid="conversation-item-title"]`, "Conversation 1");
  await waitForText(page, `[data-testid="conversation-item"][data-conversation-id="${created[203]}"] [data-testid="conversation-item-title"]`, "Conversation 204");

  // A first message names the conversation, in the header and in the list;
  // the events that refresh the list keep both pages.
  await page.getByTestId("send-input").fill("Plan the spring release\nwith the details below");
  await page.getByTestId("send-btn").click();
  await waitForText(page, '[data-testid="conversation-title"]', "Plan the spring release");
  const item = `[data-testid="conversation-item"][data-conversation-id="${created[204]}"]`;
  await waitForText(page, `${item} [data-testid="conversation-item-title"]`, "Plan the spring release");
  assert.equal(await page.locator(`${item} [data-testid="conversation-item-title"]`).textContent(), "Plan the spring release", "the first line only");
  await waitForText(page, item, "1 message");
  await waitForText(page, '[data-testid="message"][data-role="agent"][data-status="done"]', "Noted.");
  await waitForCount(page, '[data-testid="conversation-item"]', 205);

  // A conversation started elsewhere arrives live at the top; the older
  // page stays read, now one longer.
  const another = await apiCall(server, "POST", "/api/v1/resources/long-history/conversations");
  await until(async () => (await shownIds())[0] === another.id, "the new conversation at the top");
  await waitForCount(page, '[data-testid="conversation-item"]', 206);
  assert.deepEqual(await shownIds(), [another.id, ...newestFirst], "every conversation once, newest first");

  // "Load more" at every width the layout tests use, and axe with it shown.
  await page.goto(`${server.url}/resources/long-history/conversations?view=history`);
  for (const viewport of VIEWPORTS) {
    await page.setViewportSize(viewport);
    await page.getByTestId("load-more").waitFor();
    const box = await page.getByTestId("load-more").boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= viewport.width, `Load more lies inside ${viewport.width} px: ${JSON.stringify(box)}`);
    const sideways = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
    assert.equal(sideways, false, `the history scrolls sideways at ${viewport.width} px`);
    await expectAccessible(`the history with Load more at ${viewport.width} px`);
  }
  await page.setViewportSize({ width: 1280, height: 800 });
});

/** Where the element lies against the message list's visible area (null when it is not rendered). */
function placeInMessages(selector) {
  return page.evaluate((s) => {
    const list = document.querySelector('[data-testid="messages"]');
    const el = [...document.querySelectorAll(s)].pop();
    if (!list || !el) return null;
    const a = list.getBoundingClientRect();
    const b = el.getBoundingClientRect();
    return { inside: b.top >= a.top - 1 && b.bottom <= a.bottom + 1 && b.height > 0 };
  }, selector);
}

test("a conversation of 150 messages renders only what is on screen, at the newest, and follows new ones", async () => {
  await apiCall(server, "POST", "/api/v1/resources", { id: "long-talk", name: "Long talk", agent_id: "quick" });
  const { id } = await apiCall(server, "POST", "/api/v1/resources/long-talk/conversations");
  // Queued one after another: 75 messages, 75 replies.
  for (let i = 1; i <= 75; i++) {
    await apiCall(server, "POST", `/api/v1/conversations/${id}/messages`, { text: `Message ${i}.`, multitask: "enqueue" });
  }
  await until(
    async () => {
      const c = await apiCall(server, "GET", `/api/v1/conversations/${id}`);
      return c.messages.length === 150 && c.messages.every((m) => m.role === "user" || m.status === "done");
    },
    "150 messages, every reply done",
    120_000,
  );

  await page.goto(`${server.url}/resources/long-talk/conversations/${id}`);
  await waitForText(page, '[data-testid="message"][data-role="user"]', "Message 75.");
  const rendered = await page.locator('[data-testid="message"]').count();
  assert.ok(rendered < 50, `${rendered} of 150 messages are in the page`);
  // The newest message and its reply are in view.
  await until(async () => (await placeInMessages('[data-testid="message"][data-role="user"]'))?.inside, "the newest message in view");
  await until(async () => (await placeInMessages('[data-testid="message"][data-role="agent"]'))?.inside, "the newest reply in view");
  const last = page.locator('[data-testid="message"][data-role="user"]').last();
  assert.equal(await last.locator(".message-text").textContent(), "Message 75.");

  // Scrolled to the top: the first messages, in place of the newest.
  await page.getByTestId("messages").evaluate((el) => {
    el.scrollTop = 0;
  });
  await waitForText(page, '[data-testid="message"][data-role="user"]', "Message 1.");
  assert.equal(await page.locator('[data-testid="message"][data-role="user"]', { hasText: "Message 75." }).count(), 0, "the newest is no longer rendered");
  assert.ok((await page.locator('[data-testid="message"]').count()) < 50);

  // Back at the end, a new message and its reply arrive in view.
  await page.getByTestId("messages").evaluate((el) => {
    el.scrollTop = el.scrollHeight;
  });
  await waitForText(page, '[data-testid="message"][data-role="user"]', "Message 75.");
  // The scripted agent replies one step at a time: each state of the
  // growing reply, and then its result, stays in view.
  await apiCall(server, "POST", "/api/v1/resources", { id: "long-talk", name: "Long talk", agent_id: "scripted" });
  await page.getByTestId("send-input").fill("Message 76.");
  await page.getByTestId("send-btn").click();
  const newestReply = '[data-testid="message"][data-role="agent"][data-status="running"]';
  await waitForText(page, `${newestReply} [data-testid="message-step"]`, "Starting phase one.");
  await until(async () => (await placeInMessages(newestReply))?.inside, "the reply's first step in view");
  const { runs } = await apiCall(server, "GET", "/api/v1/runs?channel_id=long-talk&status=running");
  gate(ws, runs[0].vtid, "step2");
  await waitForText(page, `${newestReply} [data-testid="tool-call"]`, "shell");
  await until(async () => (await placeInMessages(newestReply))?.inside, "the reply's tool call in view");
  gate(ws, runs[0].vtid, "finish");
  await waitForText(page, '[data-testid="message"][data-role="agent"][data-status="done"] [data-testid="message-result"]', "Scripted run finished.");
  await until(async () => (await page.getByTestId("messages").getAttribute("data-messages")) === "152", "152 messages on the page");
  await page.getByTestId("working").waitFor({ state: "detached" });
  await until(async () => (await placeInMessages('[data-testid="message"][data-role="agent"][data-status="done"]'))?.inside, "the finished reply in view");
  const newest = page.locator('[data-testid="message"][data-role="user"]').last();
  assert.equal(await newest.locator(".message-text").textContent(), "Message 76.");
  await expectAccessible("a long conversation");
});
