// Browser test of two `shepherd serve` nodes sharing one PostgreSQL database
// (a fresh schema of SHEPHERD_TEST_PG_URL, the Rust tests' database): a
// terminal lives on the node that hosts its session, and another node's page
// serves it all the same (that node relays); once the hosting node is gone,
// the page says where the session runs, links there and stops trying,
// instead of "Reconnecting…" forever.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { apiCall, axe, launchBrowser, makeWorkspace, startServer, until, waitForText } from "./lib.mjs";

const PG_URL = process.env.SHEPHERD_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
/** A schema no other run uses; the time in it tells how old a leftover is. */
const SCHEMA = `e2e_${Math.floor(Date.now() / 1000)}_${process.pid}`;

/** The widths the layout tests use (layout.test.mjs). */
const VIEWPORTS = [
  { width: 1280, height: 800 },
  { width: 390, height: 844 },
  { width: 360, height: 740 },
];

let wsA;
let a;
let b;
let browser;

before(async () => {
  wsA = makeWorkspace();
  // Every node of one database seals its secrets with the same key: the
  // first node makes the file, the second reads it.
  const shared = {
    SHEPHERD_DATABASE_URL: PG_URL,
    SHEPHERD_PG_SCHEMA: SCHEMA,
    SHEPHERD_PG_POOL_SIZE: "4",
    SHEPHERD_SECRETS_KEY_FILE: join(wsA.dir, "cluster-secret.key"),
  };
  // One after the other: the first migrates the fresh schema.
  a = await startServer(wsA, { env: { ...shared, SHEPHERD_NODE_ID: "node-a" } });
  b = await startServer(makeWorkspace(), { env: { ...shared, SHEPHERD_NODE_ID: "node-b" } });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await Promise.all([a?.stop(), b?.stop()]);
  try {
    execFileSync("psql", [PG_URL, "-qc", `DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`], { stdio: "ignore" });
  } catch {
    /* no psql here: the schema stays, as the Rust tests' do */
  }
});

/** What the terminal on `page` shows, row by row. */
function screen(page) {
  return page.evaluate(() => [...document.querySelectorAll('[data-testid="terminal"] .xterm-rows > div')].map((r) => r.textContent).join("\n"));
}

test("a terminal of a session on another node works through this node, and names that node once it is gone", async () => {
  const session = await apiCall(a, "POST", "/api/v1/sessions", { name: "on node a", location_path: wsA.dir });
  const tab = await apiCall(a, "POST", `/api/v1/sessions/${session.id}/workers`, { type: "terminal" });
  const context = await browser.newContext({ viewport: VIEWPORTS[0] });
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  try {
    const path = `/sessions/${session.id}?tab=${tab.id}`;
    // Through node b: the shell on node a, typed into.
    await page.goto(b.url + path);
    await waitForText(page, '[data-testid="terminal-link"]', "Connected");
    await page.locator('[data-testid="terminal"]').click();
    await page.keyboard.type("echo via-b-$((20+22))");
    await page.keyboard.press("Enter");
    await until(async () => /^via-b-42\s*$/m.test(await screen(page)), "the shell on node a, through node b");

    // Node a stops: node b cannot relay, says where the session runs and
    // stops trying.
    const aUrl = a.url;
    await a.stop();
    a = null;
    await waitForText(page, '[data-testid="terminal-refusal"]', "This session runs on node node-a");
    const link = page.getByTestId("terminal-link");
    await until(async () => (await link.getAttribute("data-state")) === "refused", "the terminal gives up");
    assert.doesNotMatch(await link.textContent(), /Reconnecting/);
    assert.doesNotMatch(await page.locator("main").textContent(), /Reconnecting/);
    const href = await page.getByTestId("terminal-node-link").getAttribute("href");
    assert.equal(href, aUrl + path, "the link opens the same page on node a");

    // At every width the layout tests use: inside the window, and axe passes.
    for (const viewport of VIEWPORTS) {
      await page.setViewportSize(viewport);
      const box = await page.getByTestId("terminal-refusal").boundingBox();
      assert.ok(box && box.x >= 0 && box.x + box.width <= viewport.width, `the message lies inside ${viewport.width} px: ${JSON.stringify(box)}`);
      assert.equal(await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth), false, `sideways scroll at ${viewport.width} px`);
      for (const scheme of ["light", "dark"]) {
        await page.emulateMedia({ colorScheme: scheme });
        const violations = await axe(page);
        assert.deepEqual(violations, [], `the refusal at ${viewport.width} px (${scheme}): ${JSON.stringify(violations, null, 1)}`);
      }
      await page.emulateMedia({ colorScheme: "light" });
    }
  } finally {
    await context.close();
  }
});
