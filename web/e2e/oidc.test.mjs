// Browser tests of single sign-on (issue 39) in real Chromium against a real
// `shepherd serve` and a real OpenID provider (the certified oidc-provider
// from npm, tests/oidc/provider.mjs), whose sign-in form the tests type
// into: a login from the token prompt, the role from the provider's group
// claim, a viewer who can neither cancel nor type into a terminal (no
// buttons, and the API and the WebSocket refuse), CSRF on what a cookie
// changes, logout, idle and absolute session lifetimes, a tampered cookie,
// callbacks whose state does not belong to the browser (forged, from
// another browser, replayed, a code from another login), and accounts the
// server does not let in.
//
// Three servers share one provider (one client, a callback each): the main
// one (with a bootstrap SHEPHERD_TOKEN, by which the tests create tasks and
// read events as admin), one whose sessions idle out after 2 s, and one
// whose sessions end 4 s after login, used or not, served by a second
// provider that puts every claim in the ID token and has no userinfo.
import { test, before, after, describe } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { REPO, apiCall, createTask, launchBrowser, makeWorkspace, runOf, startServer, until, waitForText, writeConfig } from "./lib.mjs";

const PROVIDER = join(REPO, "tests/oidc/provider.mjs");
const CLIENT_ID = "shepherd-e2e";
const CLIENT_SECRET = "e2e-client-secret-0123456789abcdef";
const BOOTSTRAP = "e2e-bootstrap-token-0123456789";
const SUBPROTOCOL = "shepherd.v1";

let browser;
const providers = [];
const servers = {};
/** The signed-in browsers of the main server, by user, made once. */
const sessions = {};

/** A port free now: the server must know its callback URL before it listens. */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.unref();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Starts tests/oidc/provider.mjs; resolves once it says it listens. */
async function startProvider({ port, redirectUris, env: extra = {} }) {
  const env = {
    ...process.env,
    OIDC_PORT: String(port),
    OIDC_CLIENT_ID: CLIENT_ID,
    OIDC_CLIENT_SECRET: CLIENT_SECRET,
    OIDC_REDIRECT_URI: redirectUris.join(" "),
    ...extra,
  };
  const child = spawn(process.execPath, [PROVIDER], { env, cwd: join(REPO, "tests/oidc"), stdio: ["ignore", "pipe", "pipe"], detached: true });
  let log = "";
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the provider did not start:\n${log}`)), 30_000);
    const onData = (buf) => {
      log += buf.toString();
      if (log.includes("oidc-provider listening")) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the provider exited with ${code}:\n${log}`));
    });
  });
  const provider = {
    url: `http://127.0.0.1:${port}`,
    child,
    log: () => log,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {
        /* already gone */
      }
      await exited;
    },
  };
  providers.push(provider);
  return provider;
}

/** shepherd.toml: the tests' agents and an [oidc] table for `provider`. */
function oidcConfig(ws, { provider, port, idle = 3600, max = 7 * 24 * 3600 }) {
  const path = join(ws.dir, "oidc.toml");
  writeFileSync(
    path,
    readFileSync(writeConfig(ws), "utf8") +
      `
[oidc]
issuer = ${JSON.stringify(provider.url)}
client_id = ${JSON.stringify(CLIENT_ID)}
redirect_url = "http://127.0.0.1:${port}/auth/callback"
scopes = ["openid", "email", "profile", "groups"]
groups_claim = "groups"
admin_groups = ["shepherd-admins"]
operator_groups = ["shepherd-operators"]
allowed_email_domains = ["example.com"]
session_idle_secs = ${idle}
session_max_secs = ${max}
`,
  );
  return path;
}

/** A server on `port` signing in through `provider`; the secret comes from the environment. */
async function startOidcServer({ port, provider, token, idle, max }) {
  const ws = makeWorkspace();
  const server = await startServer(ws, {
    port,
    token,
    config: oidcConfig(ws, { provider, port, idle, max }),
    env: { SHEPHERD_OIDC_CLIENT_SECRET: CLIENT_SECRET },
  });
  server.ws = ws;
  return server;
}

/** A new browser context and page; the pages a test opened explain its failure. */
let opened = [];
async function newPage() {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  opened.push(page);
  return { context, page };
}

/** A test whose failure also shows what its pages showed and what the servers logged. */
function scenario(name, body) {
  test(name, async () => {
    opened = [];
    try {
      await body();
    } catch (e) {
      for (const page of opened) {
        if (page.isClosed()) continue;
        const shown = await page
          .locator("body")
          .innerText({ timeout: 1_000 })
          .catch((x) => x.message);
        e.message += `\n--- a page (${page.url()}):\n${shown.slice(0, 2_000)}`;
      }
      for (const [which, s] of Object.entries(servers)) {
        const lines = s
          .log()
          .split("\n")
          .filter((l) => /sign|login|oidc|warn|error/i.test(l));
        e.message += `\n--- the ${which} server's sign-in log:\n${lines.slice(-15).join("\n")}`;
      }
      throw e;
    }
  });
}

/** Types `user`'s credentials into the provider's form and submits it. */
async function submitCredentials(page, user, password = `${user}-password`) {
  const form = page.locator('form[action*="/interaction/"]');
  await form.waitFor();
  await form.locator('input[name="username"]').fill(user);
  await form.locator('input[name="password"]').fill(password);
  await form.getByRole("button", { name: "Sign in" }).click();
}

const onServer = (server, path) => (u) => u.origin === server.url && u.pathname + u.search === path;

/** The value of the browser's session cookie for `server`, if it has one. */
async function sessionCookie(context, server) {
  const cookies = await context.cookies(server.url);
  return cookies.find((c) => c.name === "shepherd_session" && c.value)?.value;
}

/** Signs `user` in to `server` in a new browser, starting at /auth/login. */
async function signIn(server, user, { returnTo = "/" } = {}) {
  const { context, page } = await newPage();
  await page.goto(`${server.url}/auth/login?return_to=${encodeURIComponent(returnTo)}`);
  await submitCredentials(page, user);
  await page.waitForURL(onServer(server, returnTo));
  const cookie = await sessionCookie(context, server);
  assert.ok(cookie, `${user} has a session cookie`);
  return { context, page, cookie };
}

/** `user`'s browser on the main server, signed in the first time it is asked for. */
async function as(user) {
  if (!sessions[user]) {
    sessions[user] = await signIn(servers.main, user);
    opened = opened.filter((p) => p !== sessions[user].page);
  }
  return sessions[user];
}

/** A request from inside the page (its cookie, its origin); `csrf` adds the header. */
function fromPage(page, method, path, { csrf, body } = {}) {
  return page.evaluate(
    async ([method, path, csrf, body]) => {
      const headers = { "content-type": "application/json" };
      if (csrf) headers["x-csrf-token"] = csrf;
      const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await r.text();
      let json = null;
      try {
        json = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      return { status: r.status, body: json ?? text };
    },
    [method, path, csrf ?? null, body],
  );
}

const me = (page) => fromPage(page, "GET", "/api/v1/me");

/** A request from outside any browser, carrying only `cookie` as the session cookie. */
async function withCookie(server, cookie, path, init = {}) {
  const res = await fetch(server.url + path, { ...init, headers: { ...init.headers, cookie: `shepherd_session=${cookie}` } });
  const text = await res.text();
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* not JSON */
  }
  return { status: res.status, body };
}

/** The code a sign-in failure page shows. */
async function failureCode(page) {
  await page.locator("#code").waitFor();
  return (await page.locator("#code").textContent()).trim();
}

/** The events `actor` caused, oldest first. */
async function eventsBy(actor) {
  const { events } = await apiCall(servers.main, "GET", `/api/v1/events?actor=${encodeURIComponent(actor)}&limit=1000`);
  return events;
}

/** Opens the terminal WebSocket from inside the page: whether it opened, and how it closed. */
function openTerminal(page, path) {
  return page.evaluate(
    ([path, protocol]) =>
      new Promise((resolve) => {
        let open = false;
        const ws = new WebSocket(`ws://${location.host}${path}`, [protocol]);
        const timer = setTimeout(() => resolve({ open, timedOut: true }), 10_000);
        ws.onopen = () => {
          open = true;
          ws.close();
        };
        ws.onclose = (e) => {
          clearTimeout(timer);
          resolve({ open, code: e.code });
        };
      }),
    [path, SUBPROTOCOL],
  );
}

/**
 * Holds back the provider's redirects to `server`'s callback in `page`: their
 * URLs are kept, the browser never gets there. Through the DevTools
 * protocol, since Playwright's routes see only the first request of a chain
 * of redirects, and the callback is reached by one.
 */
async function holdCallbacks(page, server) {
  const held = [];
  const cdp = await page.context().newCDPSession(page);
  cdp.on("Fetch.requestPaused", (e) => {
    held.push(new URL(e.request.url));
    cdp.send("Fetch.failRequest", { requestId: e.requestId, errorReason: "Aborted" }).catch(() => {});
  });
  await cdp.send("Fetch.enable", { patterns: [{ urlPattern: `${server.url}/auth/callback*`, requestStage: "Request" }] });
  return {
    held,
    async release() {
      await cdp.send("Fetch.disable");
      await cdp.detach();
    },
  };
}

/** The token prompt, offering single sign-on. */
async function expectSignInPrompt(page) {
  await page.getByTestId("token-prompt").waitFor();
  await page.getByTestId("token-prompt").getByRole("link", { name: "Sign in with single sign-on" }).waitFor();
}

/** Time going by with the session unused: the thing under test, so there is nothing to poll for. */
const unusedFor = (ms) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  const [providerPort, idTokenProviderPort, mainPort, idlePort, maxPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
  const callback = (port) => `http://127.0.0.1:${port}/auth/callback`;
  const [provider, idTokenProvider] = await Promise.all([
    startProvider({ port: providerPort, redirectUris: [callback(mainPort), callback(idlePort)] }),
    startProvider({ port: idTokenProviderPort, redirectUris: [callback(maxPort)], env: { OIDC_CLAIMS: "id_token" } }),
  ]);
  [servers.main, servers.idle, servers.max] = await Promise.all([
    startOidcServer({ port: mainPort, provider, token: BOOTSTRAP }),
    startOidcServer({ port: idlePort, provider, idle: 2 }),
    startOidcServer({ port: maxPort, provider: idTokenProvider, idle: 2, max: 4 }),
  ]);
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  for (const [which, s] of Object.entries(servers)) {
    // A server that ended by itself explains the failures that followed.
    if (s.child.exitCode !== null) console.error(`the ${which} server exited with ${s.child.exitCode}:\n${s.log()}`);
    await s.stop();
  }
  for (const p of providers) {
    if (p.child.exitCode !== null) console.error(`a provider exited with ${p.child.exitCode}:\n${p.log()}`);
    await p.stop();
  }
});

describe("signing in", () => {
  scenario("alice signs in from the token prompt by typing into the provider's form, and is an admin", async () => {
    const server = servers.main;
    const { context, page } = await newPage();
    assert.deepEqual(await (await fetch(`${server.url}/auth/options`)).json(), { oidc: true });

    await page.goto(`${server.url}/`);
    await expectSignInPrompt(page);
    const link = page.getByTestId("token-prompt").getByRole("link", { name: "Sign in with single sign-on" });
    assert.equal(await link.getAttribute("href"), "/auth/login?return_to=%2F");
    await link.click();

    // The provider's own page, with the login bound to this browser.
    await page.waitForURL((u) => u.origin !== server.url && u.pathname.startsWith("/interaction/"));
    const binding = (await context.cookies(server.url + "/auth/callback")).find((c) => c.name === "shepherd_login");
    assert.ok(binding?.value, "the login under way is bound to the browser by a cookie");
    assert.equal(binding.path, "/auth");
    assert.ok(binding.httpOnly);

    // A wrong password is refused by the provider: no way round its form.
    await submitCredentials(page, "alice", "not-alices-password");
    await waitForText(page, '[role="alert"]', "Invalid username or password.");
    assert.ok(new URL(page.url()).pathname.startsWith("/interaction/"), `still on the provider's form, at ${page.url()}`);
    assert.equal(await sessionCookie(context, server), undefined);

    await submitCredentials(page, "alice");
    await page.waitForURL(onServer(server, "/"));
    await page.getByTestId("token-prompt").waitFor({ state: "detached" });
    await waitForText(page, '[data-testid="account"]', "alice");
    await waitForText(page, '[data-testid="account"]', "admin");
    assert.equal(await page.getByTestId("read-only-note").count(), 0);
    await page.getByTestId("sign-out").waitFor();

    const who = await me(page);
    assert.equal(who.status, 200, JSON.stringify(who));
    assert.equal(who.body.name, "alice");
    assert.equal(who.body.role, "admin");
    assert.equal(who.body.kind, "user");
    assert.match(who.body.csrf_token ?? "", /^\S{16,}$/, `a CSRF token: ${JSON.stringify(who.body)}`);

    const cookies = await context.cookies(server.url);
    const session = cookies.find((c) => c.name === "shepherd_session");
    assert.ok(session.httpOnly, "no script reads the session cookie");
    assert.equal(session.sameSite, "Lax");
    assert.equal(session.path, "/");
    assert.equal(await page.evaluate(() => document.cookie.includes("shepherd_session")), false);
    assert.equal(cookies.find((c) => c.name === "shepherd_login" && c.value), undefined, "the login's binding is cleared");

    // A bearer token, when sent, wins over the cookie.
    const both = await withCookie(server, session.value, "/api/v1/me", { headers: { authorization: `Bearer ${BOOTSTRAP}` } });
    assert.equal(both.body.name, "admin", JSON.stringify(both));
    assert.equal(both.body.csrf_token, undefined, "no CSRF token when the cookie did not sign the request in");
    // No credential at all is refused, cookie or not.
    assert.equal((await fetch(`${server.url}/api/v1/me`)).status, 401);
    assert.equal((await fetch(`${servers.idle.url}/api/v1/me`)).status, 401, "with [oidc] and no SHEPHERD_TOKEN, still 401");

    sessions.alice = { context, page, cookie: session.value };
    opened = opened.filter((p) => p !== page);
  });

  scenario("the role comes from the provider's group claim: oscar is an operator, vera (no groups) a viewer", async () => {
    const oscar = await as("oscar");
    const o = await me(oscar.page);
    assert.deepEqual({ name: o.body.name, role: o.body.role }, { name: "oscar", role: "operator" });
    await waitForText(oscar.page, '[data-testid="account"]', "oscar");
    await waitForText(oscar.page, '[data-testid="account"]', "operator");
    assert.equal(await oscar.page.getByTestId("read-only-note").count(), 0);

    const vera = await as("vera");
    const v = await me(vera.page);
    assert.deepEqual({ name: v.body.name, role: v.body.role }, { name: "vera", role: "viewer" });
    await waitForText(vera.page, '[data-testid="account"]', "vera");
    await waitForText(vera.page, '[data-testid="account"]', "viewer");
    await waitForText(vera.page, '[data-testid="read-only-note"]', "read-only");

    // Each is a Shepherd user now, with that role, and each login is in the log.
    const { users } = await apiCall(servers.main, "GET", "/api/v1/users");
    const roles = Object.fromEntries(users.filter((u) => ["alice", "oscar", "vera"].includes(u.name)).map((u) => [u.name, u.role]));
    assert.deepEqual(roles, { alice: "admin", oscar: "operator", vera: "viewer" });
    for (const [name, role] of Object.entries(roles)) {
      const login = (await eventsBy(name)).find((e) => e.type === "user.login");
      assert.ok(login, `a user.login event by ${name}`);
      assert.deepEqual(login.data, { name, role, via: "oidc" });
    }
  });

  scenario("with the claims only in the ID token (no userinfo), the group claim still gives the role", async () => {
    const { page } = await signIn(servers.max, "oscar");
    const o = await me(page);
    assert.deepEqual({ status: o.status, name: o.body.name, role: o.body.role }, { status: 200, name: "oscar", role: "operator" });
  });

  for (const [user, code] of [
    ["mallory", "login_not_allowed"],
    ["admin", "login_name_taken"],
  ]) {
    scenario(`the provider's ${user} is not let in: ${code}`, async () => {
      const server = servers.main;
      const { context, page } = await newPage();
      await page.goto(`${server.url}/auth/login?return_to=%2F`);
      const answered = page.waitForResponse((r) => r.url().startsWith(`${server.url}/auth/callback?`));
      await submitCredentials(page, user);
      assert.equal((await answered).status(), 403);
      await page.waitForURL((u) => u.origin === server.url && u.pathname === "/auth/callback");
      assert.equal(await failureCode(page), code);
      assert.equal(await sessionCookie(context, server), undefined);
      // The page leads back to Shepherd, which asks to sign in.
      await page.getByRole("link", { name: "Back to Shepherd" }).click();
      await expectSignInPrompt(page);
      if (user === "admin") {
        // The built-in admin stays the bootstrap credential's.
        const { users } = await apiCall(server, "GET", "/api/v1/users");
        const admin = users.find((u) => u.name === "admin");
        assert.notEqual(admin?.email, "admin@example.com", `the built-in admin took no provider identity: ${JSON.stringify(admin)}`);
        assert.equal((await eventsBy("admin")).filter((e) => e.type === "user.login").length, 0, "nobody signed in as admin");
      } else {
        const { users } = await apiCall(server, "GET", "/api/v1/users");
        assert.equal(users.find((u) => u.name === user), undefined, `${user} was not made a user`);
      }
    });
  }
});

describe("what a role may do", () => {
  scenario("a viewer cannot cancel or type into a terminal: no buttons, and the API and the WebSocket refuse", async () => {
    const server = servers.main;
    const vera = await as("vera");
    const alice = await as("alice");
    const oscar = await as("oscar");
    const t = await createTask(server, { title: "Viewer looks on", agent_id: "scripted" });
    await runOf(server, t.vtid, "running");

    // The task page shows the task, and no action on it.
    await vera.page.goto(`${server.url}/tasks/${t.vtid}`);
    await vera.page.getByTestId("task-detail").waitFor();
    await waitForText(vera.page, '[data-testid="task-detail"]', "Viewer looks on");
    await waitForText(vera.page, '[data-testid="read-only-note"]', "read-only");
    for (const action of ["task-cancel-btn", "task-retry-btn", "task-dispatch-btn", "task-rerun-btn"]) {
      assert.equal(await vera.page.getByTestId(action).count(), 0, `a viewer sees no ${action}`);
    }
    // ...where an admin has the cancel button.
    await alice.page.goto(`${server.url}/tasks/${t.vtid}`);
    await alice.page.getByTestId("task-cancel-btn").first().waitFor();

    // The board shows the task's card, and no "New task".
    await vera.page.goto(`${server.url}/tasks`);
    await waitForText(vera.page, `[data-vtid="${t.vtid}"]`, "Viewer looks on");
    assert.equal(await vera.page.getByTestId("new-task").count(), 0, "a viewer has no New task button");
    assert.equal(await vera.page.locator(`[data-vtid="${t.vtid}"] [data-testid="task-cancel-btn"]`).count(), 0);

    // The API refuses the cancel for the role (the CSRF token is right).
    const { csrf_token } = (await me(vera.page)).body;
    const refused = await fromPage(vera.page, "POST", `/api/v1/tasks/${t.vtid}/cancel`, { csrf: csrf_token, body: {} });
    assert.equal(refused.status, 403, JSON.stringify(refused));
    assert.equal(refused.body?.error?.code, "forbidden", JSON.stringify(refused));
    const still = await apiCall(server, "GET", `/api/v1/tasks/${t.vtid}`);
    assert.equal(still.state, "running");
    assert.equal(still.cancel_requested_at ?? null, null);

    // A session's terminal is read-only for her: no terminal, and the upgrade is refused.
    const session = await apiCall(server, "POST", "/api/v1/sessions", { name: "viewer session", location_path: server.ws.dir });
    const tab = await apiCall(server, "POST", `/api/v1/sessions/${session.id}/workers`, { type: "terminal" });
    await vera.page.goto(`${server.url}/sessions/${session.id}?tab=${tab.id}`);
    await vera.page.getByTestId("terminal-readonly").waitFor();
    assert.equal(await vera.page.getByTestId("terminal").count(), 0, "a viewer gets no terminal");
    const path = `/ws/session/${session.id}/worker/${tab.id}`;
    const ws = await openTerminal(vera.page, path);
    assert.equal(ws.open, false, `the viewer's WebSocket did not open: ${JSON.stringify(ws)}`);
    assert.notEqual(ws.timedOut, true, "the upgrade was answered");
    // A plain GET (what the UI asks to learn why) says why.
    const why = await fromPage(vera.page, "GET", path);
    assert.equal(why.status, 403, JSON.stringify(why));
    assert.equal(why.body?.error?.code, "forbidden");

    // An operator's does open, through the same cookie mechanism.
    await oscar.page.goto(`${server.url}/sessions/${session.id}?tab=${tab.id}`);
    await waitForText(oscar.page, '[data-testid="terminal-link"]', "Connected");
    const operatorWs = await openTerminal(oscar.page, path);
    assert.equal(operatorWs.open, true, `the operator's WebSocket opened: ${JSON.stringify(operatorWs)}`);
    await oscar.page.goto("about:blank");

    await apiCall(server, "POST", `/api/v1/tasks/${t.vtid}/cancel`, {});
    await apiCall(server, "DELETE", `/api/v1/sessions/${session.id}`);
  });

  scenario("a change the cookie signs in needs the X-CSRF-Token header; the audit trail names alice", async () => {
    const server = servers.main;
    const alice = await as("alice");
    const t = await createTask(server, { title: "Alice cancels this", agent_id: "scripted" });
    await runOf(server, t.vtid, "running");

    const bare = await fromPage(alice.page, "POST", `/api/v1/tasks/${t.vtid}/cancel`, { body: {} });
    assert.equal(bare.status, 403, JSON.stringify(bare));
    assert.equal(bare.body?.error?.code, "csrf_token_invalid", JSON.stringify(bare));
    const wrong = await fromPage(alice.page, "POST", `/api/v1/tasks/${t.vtid}/cancel`, { csrf: "not-the-token", body: {} });
    assert.equal(wrong.body?.error?.code, "csrf_token_invalid", JSON.stringify(wrong));
    assert.equal((await apiCall(server, "GET", `/api/v1/tasks/${t.vtid}`)).cancel_requested_at ?? null, null, "nothing was cancelled");

    const { csrf_token } = (await me(alice.page)).body;
    const done = await fromPage(alice.page, "POST", `/api/v1/tasks/${t.vtid}/cancel`, { csrf: csrf_token, body: {} });
    assert.equal(done.status, 200, JSON.stringify(done));

    await alice.page.goto(`${server.url}/tasks/${t.vtid}`);
    await alice.page.locator('[data-testid="task-timeline"] li', { hasText: "task.cancel_requested" }).filter({ hasText: "by alice" }).waitFor();

    const events = await eventsBy("alice");
    assert.ok(
      events.some((e) => e.type === "task.cancel_requested" && JSON.stringify(e).includes(t.vtid)),
      `alice's events include the cancel of ${t.vtid}: ${JSON.stringify(events.map((e) => e.type))}`,
    );
    assert.ok(events.some((e) => e.type === "user.login"));
    assert.ok(events.every((e) => e.actor === "alice"));

    // The UI sends the header itself: alice cancels another task with its button.
    const u = await createTask(server, { title: "Alice cancels this from the UI", agent_id: "scripted" });
    await runOf(server, u.vtid, "running");
    await alice.page.goto(`${server.url}/tasks/${u.vtid}`);
    await alice.page.getByTestId("task-cancel-btn").first().click();
    await alice.page.getByRole("dialog", { name: `Cancel ${u.vtid}?` }).getByRole("button", { name: "Cancel task" }).click();
    await alice.page.locator('[data-testid="task-timeline"] li', { hasText: "task.cancel_requested" }).filter({ hasText: "by alice" }).waitFor();
    const cancelled = await apiCall(server, "GET", `/api/v1/tasks/${u.vtid}`);
    assert.ok(cancelled.cancel_requested_at, JSON.stringify(cancelled));
  });
});

describe("sessions", () => {
  scenario("a tampered or made-up cookie is refused", async () => {
    const server = servers.main;
    const { cookie } = await as("oscar");
    const i = Math.floor(cookie.length / 2);
    const tampered = cookie.slice(0, i) + (cookie[i] === "a" ? "b" : "a") + cookie.slice(i + 1);
    assert.notEqual(tampered, cookie);
    for (const [what, value] of [
      ["one character changed", tampered],
      ["made up", "0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"],
      ["cut short", cookie.slice(0, -1)],
    ]) {
      const r = await withCookie(server, value, "/api/v1/me");
      assert.equal(r.status, 401, `a cookie ${what}: ${JSON.stringify(r)}`);
      assert.equal(r.body?.error?.code, "unauthorized");
    }
    // The real one still works.
    const ok = await withCookie(server, cookie, "/api/v1/me");
    assert.equal(ok.status, 200, JSON.stringify(ok));
    assert.equal(ok.body.name, "oscar");
    assert.equal(ok.body.csrf_token !== undefined, true, "the cookie signed it in");

    // A browser holding the tampered cookie is asked to sign in.
    const { context, page } = await newPage();
    await context.addCookies([{ name: "shepherd_session", value: tampered, url: server.url, httpOnly: true, sameSite: "Lax" }]);
    await page.goto(`${server.url}/tasks`);
    await expectSignInPrompt(page);
  });

  scenario("signing out ends the session: the prompt comes back and the old cookie is refused", async () => {
    const server = servers.main;
    const alice = await as("alice");
    const old = alice.cookie;
    await alice.page.goto(`${server.url}/`);
    await waitForText(alice.page, '[data-testid="account"]', "alice");

    // Another site's page cannot sign her out: the header is needed.
    const forged = await fromPage(alice.page, "POST", "/auth/logout");
    assert.equal(forged.status, 403, JSON.stringify(forged));
    assert.equal(forged.body?.error?.code, "csrf_token_invalid");
    assert.equal((await withCookie(server, old, "/api/v1/me")).status, 200);

    await alice.page.getByTestId("sign-out").click();
    await expectSignInPrompt(alice.page);
    assert.equal(await sessionCookie(alice.context, server), undefined, "the browser's cookie is cleared");
    assert.equal((await me(alice.page)).status, 401);
    const replayed = await withCookie(server, old, "/api/v1/me");
    assert.equal(replayed.status, 401, `the old cookie replayed: ${JSON.stringify(replayed)}`);
    const logout = (await eventsBy("alice")).find((e) => e.type === "user.logout");
    assert.ok(logout, "a user.logout event by alice");
    assert.deepEqual(logout.data, { name: "alice" });
    delete sessions.alice;
  });

  scenario("a session unused for longer than session_idle_secs ends; using it keeps it", async () => {
    const server = servers.idle;
    const { page, cookie } = await signIn(server, "oscar");
    // The page's own requests would keep the session in use.
    await page.goto("about:blank");
    const start = Date.now();
    // Used within 2 s each time, it outlives 2 s.
    for (const gap of [300, 600, 1_200]) {
      await unusedFor(gap);
      const r = await withCookie(server, cookie, "/api/v1/me");
      assert.equal(r.status, 200, `used again after ${gap} ms: ${JSON.stringify(r)}`);
    }
    assert.ok(Date.now() - start > 2_000, "the session outlived its idle lifetime by being used");
    // Then left alone for longer than 2 s, it has ended.
    await unusedFor(2_600);
    const r = await withCookie(server, cookie, "/api/v1/me");
    assert.equal(r.status, 401, `after 2.6 s unused: ${JSON.stringify(r)}`);
    // The browser is asked to sign in again, and comes back where it was.
    await page.goto(`${server.url}/tasks`);
    await expectSignInPrompt(page);
    await page.getByTestId("token-prompt").getByRole("link", { name: "Sign in with single sign-on" }).click();
    await until(async () => {
      if (onServer(server, "/tasks")(new URL(page.url()))) return true;
      // The provider may remember oscar, or ask again.
      if (await page.locator('form[action*="/interaction/"]').isVisible()) await submitCredentials(page, "oscar");
      return false;
    }, "oscar to be back on /tasks");
    await waitForText(page, '[data-testid="account"]', "oscar");
    assert.notEqual(await sessionCookie(page.context(), server), cookie, "a new session, not the old one");
  });

  scenario("a session ends session_max_secs after its login, however much it is used", async () => {
    const server = servers.max;
    const { page, cookie } = await signIn(server, "vera");
    await page.goto("about:blank");
    const start = Date.now();
    // Polled all along, so never idle; the absolute lifetime (4 s) ends it.
    await until(async () => (await withCookie(server, cookie, "/api/v1/me")).status === 401, "the session to end", 15_000);
    const lasted = Date.now() - start;
    assert.ok(lasted > 2_500, `the session lasted past its idle lifetime while used (${lasted} ms)`);
    await page.goto(`${server.url}/`);
    await expectSignInPrompt(page);
  });
});

describe("a callback that is not this browser's login", () => {
  scenario("a forged state is refused", async () => {
    const server = servers.main;
    const { context, page } = await newPage();
    const res = await page.goto(`${server.url}/auth/callback?state=forged&code=x`);
    assert.equal(res.status(), 400);
    assert.equal(await failureCode(page), "login_state_mismatch");
    assert.equal(await sessionCookie(context, server), undefined);
  });

  scenario("a callback finished in another browser is refused; in its own it works, once", async () => {
    const server = servers.main;
    // Browser A starts a login; the provider's redirect back is held.
    const a = await newPage();
    const hold = await holdCallbacks(a.page, server);
    await a.page.goto(`${server.url}/auth/login?return_to=${encodeURIComponent("/tasks")}`);
    const binding = (await a.context.cookies(server.url + "/auth/callback")).find((c) => c.name === "shepherd_login");
    await submitCredentials(a.page, "oscar");
    const sent = await until(() => hold.held[0], "the provider to send browser A back");
    const callback = sent.href;
    assert.ok(sent.searchParams.get("code") && sent.searchParams.get("state"), callback);
    assert.equal(sent.searchParams.get("state"), binding.value, "the state is the one bound to browser A");

    // Browser B, with a login of its own under way, is sent A's callback.
    const b = await newPage();
    await b.page.goto(`${server.url}/auth/login?return_to=%2F`);
    await b.page.locator('form[action*="/interaction/"]').waitFor();
    const res = await b.page.goto(callback);
    assert.equal(res.status(), 400);
    assert.equal(await failureCode(b.page), "login_state_mismatch");
    assert.equal(await sessionCookie(b.context, server), undefined, "browser B is not signed in as oscar");
    // And a browser with no login at all.
    const c = await newPage();
    await c.page.goto(callback);
    assert.equal(await failureCode(c.page), "login_state_mismatch");

    // In browser A the same callback signs oscar in.
    await hold.release();
    await a.page.goto(callback);
    await a.page.waitForURL(onServer(server, "/tasks"));
    assert.equal((await me(a.page)).body.name, "oscar");

    // Replayed, with the login's binding put back, it is refused: a state is good once.
    await a.context.addCookies([{ name: "shepherd_login", value: binding.value, url: `${server.url}/auth`, httpOnly: true, sameSite: "Lax" }]);
    const replay = await a.page.goto(callback);
    assert.equal(replay.status(), 400);
    assert.equal(await failureCode(a.page), "login_state_mismatch");
  });

  scenario("a code from another login of the same browser is refused (the PKCE verifier does not fit)", async () => {
    const server = servers.main;
    const { context, page } = await newPage();
    const hold = await holdCallbacks(page, server);
    const { held } = hold;
    // Two logins; the second's state is the one bound to the browser now.
    await page.goto(`${server.url}/auth/login?return_to=%2F`);
    await submitCredentials(page, "vera");
    await until(() => held.length === 1, "the first login's callback");
    // The provider remembers vera: it may send her straight back, to the
    // callback held back, which aborts the navigation.
    await page.goto(`${server.url}/auth/login?return_to=%2F`).catch((e) => {
      if (!/ERR_ABORTED/.test(e.message)) throw e;
    });
    await until(async () => {
      if (held.length === 2) return true;
      if (await page.locator('form[action*="/interaction/"]').isVisible()) await submitCredentials(page, "vera");
      return held.length === 2;
    }, "the second login's callback");
    await hold.release();
    const [first, second] = held;
    const swapped = `${server.url}/auth/callback?code=${encodeURIComponent(first.searchParams.get("code"))}&state=${encodeURIComponent(second.searchParams.get("state"))}`;
    await page.goto(swapped);
    assert.equal(await failureCode(page), "login_failed");
    assert.equal(await sessionCookie(context, server), undefined);
  });
});
