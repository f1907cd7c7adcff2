// A real OpenID provider for Shepherd's single sign-on tests: the certified
// oidc-provider from npm, with one confidential client (Shepherd), a few
// users who sign in with a password through a plain HTML form, and consent
// granted without asking (the tests are about Shepherd, not about consent
// screens).
//
//   OIDC_PORT=4011 OIDC_CLIENT_ID=shepherd OIDC_CLIENT_SECRET=... \
//   OIDC_REDIRECT_URI=http://127.0.0.1:7777/auth/callback node provider.mjs
//
// OIDC_REDIRECT_URI may list several URIs, separated by spaces: one provider
// then serves several Shepherd servers (each with its own callback).
//
// OIDC_CLAIMS=id_token moves every claim into the ID token and turns the
// userinfo endpoint off, so a relying party that only reads userinfo (or only
// the ID token) is caught by one configuration or the other.
//
// Prints `oidc-provider listening on http://127.0.0.1:PORT` once it serves.
import { createServer } from "node:http";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import Provider from "oidc-provider";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is required`);
  return v;
};
const port = Number(env("OIDC_PORT"));
const issuer = `http://127.0.0.1:${port}`;
const claimsInIdToken = process.env.OIDC_CLAIMS === "id_token";

// Every user's password is `<name>-password`: the tests type it into the
// form, and a wrong one is refused, so the form is a real login step.
const USERS = {
  alice: { email: "alice@example.com", groups: ["shepherd-admins"] },
  oscar: { email: "oscar@example.com", groups: ["shepherd-operators"] },
  vera: { email: "vera@example.com", groups: [] },
  mallory: { email: "mallory@evil.test", groups: ["shepherd-admins"] },
  // Shepherd's built-in user is called admin; a provider's admin must not
  // become it, whatever its groups say.
  admin: { email: "admin@example.com", groups: ["shepherd-admins"] },
};
const passwordOf = (name) => `${name}-password`;

// A signing key of our own per run: the library's fixed development keys
// would make every run's tokens verifiable with a key anyone has.
const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: "jwk" }), kid: "test-key", use: "sig", alg: "RS256" };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: env("OIDC_CLIENT_ID"),
      client_secret: env("OIDC_CLIENT_SECRET"),
      redirect_uris: env("OIDC_REDIRECT_URI").split(/\s+/).filter(Boolean),
      token_endpoint_auth_method: "client_secret_basic",
      response_types: ["code"],
      grant_types: ["authorization_code"],
    },
  ],
  // The library requires PKCE only of public clients; Shepherd says it
  // sends S256 as a confidential client too, so insist on it.
  pkce: { required: () => true },
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["preferred_username", "name"],
    groups: ["groups"],
  },
  // With the default (true) an ID token from the code flow carries only
  // `sub` and the scope's claims come from userinfo, as OpenID Connect Core
  // 5.4 describes; Shepherd must then ask userinfo. OIDC_CLAIMS=id_token sets
  // it false and drops userinfo, so the claims can only come from the ID
  // token.
  conformIdTokenClaims: !claimsInIdToken,
  features: {
    devInteractions: { enabled: false },
    userinfo: { enabled: !claimsInIdToken },
  },
  jwks: { keys: [jwk] },
  cookies: { keys: [randomBytes(32).toString("hex")] },
  async findAccount(_ctx, sub) {
    const user = USERS[sub];
    if (!user) return undefined;
    return {
      accountId: sub,
      async claims() {
        // The provider keeps only what the granted scopes allow.
        return {
          sub,
          email: user.email,
          email_verified: true,
          preferred_username: sub,
          name: sub[0].toUpperCase() + sub.slice(1),
          groups: user.groups,
        };
      },
    };
  },
});

const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function loginForm(res, uid, { error, username = "" } = {}) {
  res.statusCode = error ? 401 : 200;
  res.setHeader("content-type", "text/html; charset=utf-8");
  res.setHeader("cache-control", "no-store");
  res.end(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test provider: sign in</title></head>
<body>
<h1>Test provider</h1>
${error ? `<p role="alert">${escapeHtml(error)}</p>` : ""}
<form method="post" action="/interaction/${escapeHtml(uid)}/login">
  <label>Username <input name="username" autocomplete="username" value="${escapeHtml(username)}" autofocus></label>
  <label>Password <input name="password" type="password" autocomplete="current-password"></label>
  <button type="submit">Sign in</button>
</form>
</body></html>`);
}

async function formBody(req) {
  let text = "";
  for await (const chunk of req) text += chunk;
  return new URLSearchParams(text);
}

// Grants what the client asked for, as a user pressing "Allow" would.
async function grantConsent(details) {
  const { prompt, params, session } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(" "));
  if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
  return grant.save();
}

// The interaction pages, the part of a provider the library leaves to its
// user; everything else is the library's own routes.
async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error("interaction mismatch");
  if (req.method === "GET" && !action) {
    if (details.prompt.name === "login") return loginForm(res, uid);
    if (details.prompt.name === "consent") {
      const grantId = await grantConsent(details);
      return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    }
    throw new Error(`unexpected prompt ${details.prompt.name}`);
  }
  if (req.method === "POST" && action === "login" && details.prompt.name === "login") {
    const form = await formBody(req);
    const username = (form.get("username") ?? "").trim();
    if (!Object.hasOwn(USERS, username) || form.get("password") !== passwordOf(username)) {
      return loginForm(res, uid, { error: "Invalid username or password.", username });
    }
    return provider.interactionFinished(req, res, { login: { accountId: username } }, { mergeWithLastSubmission: false });
  }
  res.statusCode = 405;
  res.end();
}

const handle = provider.callback();
const server = createServer(async (req, res) => {
  const m = new URL(req.url, issuer).pathname.match(/^\/interaction\/([^/]+)(?:\/(login))?$/);
  if (!m) return handle(req, res);
  try {
    await interaction(req, res, m[1], m[2]);
  } catch (e) {
    res.statusCode = 400;
    res.setHeader("content-type", "text/plain; charset=utf-8");
    res.end(`interaction failed: ${e.message}`);
  }
});
server.listen(port, "127.0.0.1", () => {
  console.log(`oidc-provider listening on ${issuer}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
