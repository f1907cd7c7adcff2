// Browser tests of the Conversations page (the conversations contract) and the Sessions pages
// (the sessions contract) in real Chromium against a real server. SCREENSHOTS=1 also
// writes their screenshots (light and dark) to docs/screenshots/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { REPO, apiCall, axe, gate, launchBrowser, makeWorkspace, startServer, until, waitForCount, waitForText, writeConfig } from "./lib.mjs";

const SHOTS = process.env.SCREENSHOTS === "1" ? join(REPO, "docs/screenshots") : null;

let ws;
let server;
let browser;
let page;

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

/** The running run of a resource's conversation, once it exists. */
function runningRun(resourceId) {
  return until(async () => {
    const { runs } = await apiCall(server, "GET", `/api/v1/runs?channel_id=${encodeURIComponent(resourceId)}&status=running`);
    return runs[0];
  }, `a running run on ${resourceId}`);
}

before(async () => {
  ws = makeWorkspace();
  server = await startServer(ws);
  browser = await launchBrowser();
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

test("a conversation is sent, cancelled mid-reply with its partial steps kept, and a new chat started", async () => {
  await apiCall(server, "POST", "/api/v1/resources", { id: "research-table", name: "Research table", agent_id: "scripted" });
  await page.goto(`${server.url}/conversations`);
  // The index goes to the first resource, which has no conversation yet.
  await page.waitForURL(/\/resources\/research-table\/conversations/);
  await page.getByRole("button", { name: "Start a chat" }).click();
  await page.getByTestId("send-input").waitFor();

  // A first message, answered in full.
  await page.getByTestId("send-input").fill("Research the first row.");
  await page.getByTestId("send-btn").click();
  await waitForText(page, '[data-testid="working"]', "AI is working…");
  assert.equal(await page.getByTestId("send-input").isDisabled(), true, "the send box is disabled while the agent works");
  const first = await runningRun("research-table");
  await waitForText(page, '[data-testid="message"][data-role="agent"] [data-testid="message-step"]', "Starting phase one.");
  gate(ws, first.vtid, "step2");
  await waitForText(page, '[data-testid="message"][data-role="agent"] [data-testid="tool-call"]', "shell");
  gate(ws, first.vtid, "finish");
  await waitForText(page, '[data-testid="message"][data-role="agent"][data-status="done"] [data-testid="message-result"]', "Scripted run finished.");
  await page.getByTestId("working").waitFor({ state: "detached" });
  await expectAccessible("conversation");
  await screenshot("conversations");

  // A second message, cancelled while the agent is on its first step.
  await page.getByTestId("send-input").fill("Now research the second row.");
  await page.getByTestId("send-input").press("Enter");
  await waitForText(page, '[data-testid="working"]', "AI is working…");
  await waitForCount(page, '[data-testid="message"][data-role="agent"]', 2);
  const second = await until(async () => {
    const run = await runningRun("research-table");
    return run.id !== first.id && run;
  }, "the second reply's run");
  await waitForText(page, '[data-testid="message"][data-role="agent"][data-status="running"] [data-testid="message-step"]', "Starting phase one.");
  await page.getByTestId("cancel-btn").click();
  await page.getByTestId("working").waitFor({ state: "detached" });
  await waitForText(page, '[data-testid="message"][data-role="agent"][data-status="cancelled"] [data-testid="message-step"]', "Starting phase one.");
  assert.equal(await page.getByTestId("send-input").isDisabled(), false, "the send box is back once cancelled");
  assert.equal((await apiCall(server, "GET", `/api/v1/runs/${second.id}`)).status, "cancelled");
  const oldId = await page.getByTestId("conversation").getAttribute("data-conversation-id");

  // New chat: a new active conversation; the old one stays in the history.
  await page.getByTestId("new-chat").click();
  const emptyId = await until(async () => {
    const id = await page.getByTestId("conversation").getAttribute("data-conversation-id");
    return id && id !== oldId && id;
  }, "the new conversation");
  await waitForText(page, '[data-testid="conversation"]', "Say something to start the conversation.");
  await waitForCount(page, '[data-testid="conversation-item"]', 2);
  const items = page.getByTestId("conversation-item");
  assert.equal(await items.nth(1).getAttribute("data-conversation-id"), oldId, "newest first");

  // History: the old one reads back with its partial steps, then continues.
  // The keyboard gets there too: down the list, then Enter.
  await items.first().focus();
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("Enter");
  await waitForText(page, '[data-testid="history-note"]', "You are reading an older conversation.");
  await waitForText(page, '[data-testid="message"][data-status="cancelled"]', "Starting phase one.");
  await expectAccessible("conversation history");
  await page.getByTestId("continue-btn").click();
  await page.getByTestId("send-input").waitFor();
  await waitForText(page, `[data-testid="conversation-item"][data-conversation-id="${oldId}"]`, "active");

  // New chat while the agent works is an implicit cancel: the old
  // conversation keeps its partial reply.
  await page.getByTestId("send-input").fill("A third row, please.");
  await page.getByTestId("send-btn").click();
  await waitForText(page, '[data-testid="working"]', "AI is working…");
  await waitForText(page, '[data-testid="message"][data-role="agent"][data-status="running"] [data-testid="message-step"]', "Starting phase one.");
  await page.getByTestId("new-chat").click();
  const newId = await until(async () => {
    const id = await page.getByTestId("conversation").getAttribute("data-conversation-id");
    return id && id !== oldId && id !== emptyId && id;
  }, "another new conversation");
  // The history lists conversations with messages and the active one: the
  // one the first New chat left empty is gone from it.
  await until(async () => {
    const ids = await items.evaluateAll((els) => els.map((e) => e.dataset.conversationId));
    return ids.join() === [newId, oldId].join();
  }, "the new conversation above the old one, and not the empty one");
  await page.locator(`[data-testid="conversation-item"][data-conversation-id="${oldId}"]`).click();
  await until(async () => {
    const statuses = await page.locator('[data-testid="message"][data-role="agent"]').evaluateAll((els) => els.map((e) => e.dataset.status));
    if (statuses.join() === "done,cancelled,cancelled") return true;
    const api = await apiCall(server, "GET", `/api/v1/conversations/${oldId}`);
    throw new Error(`page shows ${statuses}; API has ${api.state} ${api.messages.map((m) => `${m.role}:${m.status}`)}`);
  }, "the old conversation with both partial replies cancelled");
  await page.getByTestId("history-note").waitFor();

  // Continuing an older conversation while another one is replying asks
  // first: keeping it changes nothing, confirming cancels that reply.
  await apiCall(server, "POST", `/api/v1/conversations/${newId}/messages`, { text: "A fourth row." });
  await waitForText(page, `[data-testid="conversation-item"][data-conversation-id="${newId}"][data-state="processing"]`, "");
  const dialog = page.getByRole("dialog", { name: "Stop the other reply?" });
  await page.getByTestId("continue-btn").click();
  await dialog.waitFor();
  await waitForText(page, '[data-testid="confirm-dialog"]', "A fourth row.");
  await expectAccessible("continue confirmation");
  await dialog.getByRole("button", { name: "Keep it running" }).click();
  await dialog.waitFor({ state: "detached" });
  assert.equal((await apiCall(server, "GET", `/api/v1/conversations/${newId}`)).state, "processing");
  await page.getByTestId("history-note").waitFor();
  await page.getByTestId("continue-btn").click();
  await dialog.getByRole("button", { name: "Cancel it and continue" }).click();
  await page.getByTestId("send-input").waitFor();
  await until(async () => {
    const other = await apiCall(server, "GET", `/api/v1/conversations/${newId}`);
    return other.state === "idle" && other.messages.at(-1).status === "cancelled";
  }, "the other conversation's reply cancelled");
});

test("a sent message stays working until the reply ends, across New chat, an older conversation and Continue, repeatedly", async () => {
  await apiCall(server, "POST", "/api/v1/resources", { id: "race-table", name: "Race table", agent_id: "scripted" });
  // A slow network: each conversation read answers late, after a delay of
  // its own, so answers can arrive after newer ones and after the events
  // that followed them (the reads still see the server's state when sent).
  let delays = 0;
  const slow = async (route) => {
    const response = await route.fetch();
    const ms = [0, 150, 400, 800][delays++ % 4];
    await new Promise((r) => setTimeout(r, ms));
    await route.fulfill({ response }).catch(() => {});
  };
  await page.route(/\/api\/v1\/conversations\/[^/?]+$/, slow);
  await page.goto(`${server.url}/resources/race-table/conversations`);
  await page.getByRole("button", { name: "Start a chat" }).click();
  await page.getByTestId("send-input").waitFor();
  const olderId = await until(() => page.getByTestId("conversation").getAttribute("data-conversation-id"), "the first conversation");
  // Every state the pane shows for the watched conversation, recorded as it
  // changes (a revert to idle may last a moment only).
  await page.evaluate(() => {
    window.__watch = null;
    new MutationObserver(() => {
      const w = window.__watch;
      const el = document.querySelector('[data-testid="conversation"]');
      if (!w || w.finishing || !el || el.dataset.conversationId !== w.id) return;
      const sent = [...el.querySelectorAll('[data-testid="message"][data-role="user"]')].some((m) => m.textContent.includes(w.text));
      const last = w.seen[w.seen.length - 1];
      const now = `${el.dataset.state}${sent ? "" : " (message not shown)"}`;
      if (now !== last) w.seen.push(now);
    }).observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-state"] });
  });
  const runs = new Set();
  for (let i = 1; i <= 8; i++) {
    if (i > 1) {
      // New chat, then back to the older conversation and Continue.
      await page.getByTestId("new-chat").click();
      await until(async () => {
        const id = await page.getByTestId("conversation").getAttribute("data-conversation-id");
        return id && id !== olderId;
      }, "a new conversation");
      await page.locator(`[data-testid="conversation-item"][data-conversation-id="${olderId}"]`).click();
      await page.getByTestId("continue-btn").click();
      await page.getByTestId("send-input").waitFor();
    }
    const text = `Race row ${i}.`;
    await page.evaluate(([id, t]) => {
      window.__watch = { id, text: t, seen: [], finishing: false };
    }, [olderId, text]);
    await page.getByTestId("send-input").fill(text);
    await page.getByTestId("send-btn").click();
    await waitForText(page, '[data-testid="working"]', "AI is working…");
    const run = await until(async () => {
      const r = await runningRun("race-table");
      return !runs.has(r.id) && r;
    }, `run ${i}`);
    runs.add(run.id);
    gate(ws, run.vtid, "step2");
    await waitForText(page, '[data-testid="message"][data-role="agent"][data-status="running"] [data-testid="tool-call"]', "shell");
    await page.evaluate(() => {
      window.__watch.finishing = true;
    });
    const seen = await page.evaluate(() => window.__watch.seen);
    const from = seen.indexOf("processing");
    assert.ok(from >= 0, `round ${i}: the pane never showed processing: ${seen.join(" → ")}`);
    assert.deepEqual(
      seen.slice(from).filter((x) => x !== "processing"),
      [],
      `round ${i}: once working, the pane went back: ${seen.join(" → ")}`,
    );
    gate(ws, run.vtid, "finish");
    await page.getByTestId("working").waitFor({ state: "detached" });
    assert.equal(await page.getByTestId("send-input").isDisabled(), false);
  }
  await page.unroute(/\/api\/v1\/conversations\/[^/?]+$/, slow);
});

/** The terminal's visible text, one line per row. */
function terminalText() {
  return page.evaluate(() => [...document.querySelectorAll('[data-testid="terminal"] .xterm-rows > div')].map((r) => r.textContent).join("\n"));
}

test("a terminal tab runs echo, and after the server is killed and restarted it shows the restored shell below the old output", async () => {
  const work = join(ws.dir, "project");
  mkdirSync(work);
  // A git repository with one change, for the git-diff tab.
  const git = (...args) => execFileSync("git", ["-c", "user.name=e2e", "-c", "user.email=e2e@example.com", ...args], { cwd: work });
  git("init", "-q");
  writeFileSync(join(work, "notes.md"), "# Notes\n\nfirst line\n");
  git("add", ".");
  git("commit", "-qm", "first");
  writeFileSync(join(work, "notes.md"), "# Notes\n\nfirst line, edited\nsecond line\n");

  await page.goto(`${server.url}/sessions`);
  await page.getByTestId("session-name").fill("e2e project");
  await page.getByTestId("session-path").fill(work);
  await page.getByTestId("session-create").click();
  await page.waitForURL(/\/sessions\/[^/?]+/);
  await waitForText(page, ".tab-panel", "No tabs yet");

  // A git-diff tab, rendered.
  await page.getByTestId("tab-type").selectOption("git-diff");
  await page.getByTestId("tab-add").click();
  await waitForText(page, '[data-testid="diff"] .diff-add', "second line");
  await waitForText(page, '[data-testid="diff"] .diff-del', "first line");
  await waitForText(page, '[data-testid="diff-status"]', "notes.md");
  await expectAccessible("session git diff");
  await screenshot("session-diff");

  // A terminal tab: the URL names it.
  await page.getByTestId("tab-type").selectOption("terminal");
  await page.getByTestId("tab-add").click();
  await waitForCount(page, '[data-testid="session-tab"]', 2);
  await waitForText(page, '[data-testid="terminal-link"]', "Connected");
  const tab = await page.locator('[data-testid="session-tab"][data-type="terminal"]').getAttribute("data-worker-id");
  await until(() => page.url().includes(`tab=${tab}`), "the tab in the URL");
  // The shell's prompt, then a command typed into the terminal.
  await until(async () => (await terminalText()).trim() !== "", "the shell prompt");
  await page.locator('[data-testid="terminal"]').click();
  await page.keyboard.type("echo before-$((2+3))");
  await page.keyboard.press("Enter");
  await until(async () => /^before-5\s*$/m.test(await terminalText()), "the echo output");
  await expectAccessible("session terminal");
  await screenshot("session-terminal");

  // The terminal follows the window's size, and so does the shell's PTY.
  const size = async () => {
    const t = page.getByTestId("terminal");
    return { cols: Number(await t.getAttribute("data-cols")), rows: Number(await t.getAttribute("data-rows")) };
  };
  const wide = await size();
  await page.setViewportSize({ width: 900, height: 700 });
  await until(async () => (await size()).cols < wide.cols, "fewer columns in a narrower window");
  const narrow = await size();
  await page.locator('[data-testid="terminal"]').click();
  await page.keyboard.type("stty size");
  await page.keyboard.press("Enter");
  await until(async () => new RegExp(`^${narrow.rows} ${narrow.cols}\\s*$`, "m").test(await terminalText()), `stty size to say ${narrow.rows} ${narrow.cols}`);
  await page.setViewportSize({ width: 1280, height: 800 });
  await until(async () => (await size()).cols === wide.cols, "the columns back");

  // Kill the server (no graceful shutdown) and start it again on the same
  // data directory and port: the tab reconnects by itself and the restored
  // shell appears below the old output and the restore marker.
  const port = server.port;
  await server.kill();
  await waitForText(page, '[data-testid="terminal-link"]', "Reconnecting");
  server = await startServer(ws, { port });
  await waitForText(page, '[data-testid="terminal-link"]', "Connected", 30_000);
  await until(async () => (await terminalText()).includes("session restored"), "the restore marker", 30_000);
  const text = await terminalText();
  assert.ok(text.indexOf("before-5") < text.indexOf("session restored"), `old output above the marker:\n${text}`);
  // The screen starts over from the new history rather than repeating it.
  assert.equal(text.match(/^before-5\s*$/gm)?.length, 1, `the old output once:\n${text}`);
  // The restored shell answers.
  await page.locator('[data-testid="terminal"]').click();
  await page.keyboard.type("echo after-$((3+4))");
  await page.keyboard.press("Enter");
  await until(async () => /^after-7\s*$/m.test(await terminalText()), "the restored shell's output");

  // Restart the tab as a new process, then close it.
  await page.getByTestId("restart-new").click();
  await until(async () => (await terminalText()).includes("restarted (new)"), "the restart marker");
  await page.getByTestId("tab-close").click();
  await waitForCount(page, '[data-testid="session-tab"]', 1);

  await page.goto(`${server.url}/sessions`);
  await waitForText(page, '[data-testid="session-row"]', "e2e project");
  await expectAccessible("sessions list");
  await screenshot("sessions");
});

test("an agent tab runs the agent's interactive command and restarts it to continue", async () => {
  const { id } = await apiCall(server, "POST", "/api/v1/sessions", { name: "agent session", location_path: ws.dir });
  await page.goto(`${server.url}/sessions/${id}`);
  await waitForText(page, ".tab-panel", "No tabs yet");
  await page.getByTestId("tab-type").selectOption("agent");
  await page.getByTestId("tab-agent").selectOption("scripted");
  await page.getByTestId("tab-add").click();
  await waitForText(page, '[data-testid="terminal-link"]', "Connected");
  await until(async () => /^agent-ready\s*$/m.test(await terminalText()), "the agent's first line");
  await page.getByTestId("restart-continue").click();
  await until(async () => (await terminalText()).includes("agent-ready --continue"), "the agent continued");
  assert.ok((await terminalText()).includes("restarted (continue)"));
});

test("with an operator token, a terminal authenticates with the bearer subprotocol, never the URL", async () => {
  const token = "e2e-session-token-0123456789";
  const tws = makeWorkspace();
  const guarded = await startServer(tws, { token, config: writeConfig(tws, { agents: false }) });
  const ctx = await browser.newContext();
  try {
    const p = await ctx.newPage();
    const urls = [];
    p.on("request", (r) => urls.push(r.url()));
    p.on("websocket", (w) => urls.push(w.url()));
    const { id } = await apiCall(guarded, "POST", "/api/v1/sessions", { name: "guarded", location_path: tws.dir });
    await apiCall(guarded, "POST", `/api/v1/sessions/${id}/workers`, { type: "terminal" });
    await p.goto(`${guarded.url}/sessions/${id}`);
    await p.locator('[data-testid="token-prompt"] input').fill(token);
    await p.locator('[data-testid="token-prompt"] button[type="submit"]').click();
    await waitForText(p, '[data-testid="terminal-link"]', "Connected");
    await p.locator('[data-testid="terminal"]').click();
    await p.keyboard.type("echo guarded-$((6*7))");
    await p.keyboard.press("Enter");
    await until(
      async () => /^guarded-42\s*$/m.test(await p.evaluate(() => [...document.querySelectorAll('[data-testid="terminal"] .xterm-rows > div')].map((r) => r.textContent).join("\n"))),
      "the guarded terminal's output",
    );
    assert.ok(urls.some((u) => u.includes("/ws/session/")), "the terminal used the WebSocket");
    assert.ok(!urls.some((u) => u.includes(token)), "the token never appears in a URL");
  } finally {
    await ctx.close();
    await guarded.stop();
  }
});
