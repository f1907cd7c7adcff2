//! Single sign-on's server side that needs no provider, on both stores: a
//! server with `[oidc]` lets nobody in without a credential (token or
//! not), says so in `/auth/options`, answers a login it cannot start
//! (provider down) and a callback it did not begin with their stable
//! codes, refuses unknown cookies, and signs out idempotently. The sign-in
//! itself, against a real OpenID provider in Chromium, is
//! `web/e2e/oidc.test.mjs`.

mod common;

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use serde_json::Value;
use shepherd_protocol as p;

use common::{Env, Kind, Server, OPERATOR};

/// `[oidc]` naming a provider nobody serves: discovery is lazy, so the
/// server starts, and only a login needs the provider.
fn sso_env(kind: Kind, token: bool) -> Env {
    let mut env = Env::new(kind);
    env.with_config_file(
        r#"
[oidc]
issuer = "http://127.0.0.1:9"
client_id = "shepherd"
client_secret = "a-client-secret"
redirect_url = "http://127.0.0.1:7777/auth/callback"
admin_groups = ["admins"]
"#,
    );
    if token {
        env.set("SHEPHERD_TOKEN", OPERATOR);
    }
    env
}

fn code(b: &Value) -> &str {
    b["error"]["code"].as_str().unwrap_or_default()
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn nobody_is_anonymous_with_sso(kind: Kind) {
    let env = sso_env(kind, false);
    let s = Server::start(&env).await;
    for path in ["/api/v1/agents", "/api/v1/me", "/api/v1/tasks"] {
        let (st, b) = s.get(path, None).await;
        assert_eq!((st, code(&b)), (401, "unauthorized"), "{path}: {b}");
    }
    let (st, o) = s.get_as::<p::LoginOptions>("/auth/options", None).await;
    assert_eq!((st, o.oidc), (200, true));
    // What needs no credential anywhere still needs none.
    let (st, _) = s.get("/healthz", None).await;
    assert_eq!(st, 200);
    s.stop().await;
}

async fn cookies_that_open_nothing_are_refused(kind: Kind) {
    let env = sso_env(kind, true);
    let s = Server::start(&env).await;
    for cookie in [
        "shepherd_session=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "shepherd_session=not-even-hex",
        "shepherd_session=",
    ] {
        let res = s
            .http
            .get(s.url("/api/v1/me"))
            .header(COOKIE, cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401, "{cookie}");
    }
    // A bearer token wins over any cookie, so scripts are unaffected.
    let res = s
        .http
        .get(s.url("/api/v1/me"))
        .bearer_auth(OPERATOR)
        .header(COOKIE, "shepherd_session=junk")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let me: p::Me = res.json().await.unwrap();
    assert_eq!((me.name.as_str(), me.csrf_token), ("admin", None));

    // Signing out without a session: nothing to end, the cookie cleared.
    let res = s
        .http
        .post(s.url("/auth/logout"))
        .header(COOKIE, "shepherd_session=junk")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    let cleared = res.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(cleared.starts_with("shepherd_session=;"), "{cleared}");
    assert!(
        cleared.contains("HttpOnly") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    s.stop().await;
}

async fn a_login_or_callback_that_cannot_go_on_says_why(kind: Kind) {
    let env = sso_env(kind, true);
    let s = Server::start(&env).await;
    let http = no_redirects();

    // The provider is down: the browser is not sent anywhere.
    let res = http.get(s.url("/auth/login")).send().await.unwrap();
    assert_eq!(res.status(), 503);
    assert!(res.headers().get(LOCATION).is_none());
    let b: Value = res.json().await.unwrap();
    assert_eq!(code(&b), "provider_unavailable", "{b}");

    // A callback this browser did not begin, with or without a cookie, and
    // one the provider sent with an error.
    for (query, cookie) in [
        ("?state=forged&code=c", None),
        ("?state=forged&code=c", Some("shepherd_login=other")),
        ("?code=c", None),
        ("?state=s&error=access_denied", Some("shepherd_login=s")),
    ] {
        let mut req = http.get(s.url(&format!("/auth/callback{query}")));
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        let res = req.send().await.unwrap();
        assert_eq!(res.status(), 400, "{query}");
        assert!(
            res.headers()[SET_COOKIE]
                .to_str()
                .unwrap()
                .starts_with("shepherd_login=;"),
            "a failed callback clears the login cookie"
        );
        let page = res.text().await.unwrap();
        assert!(
            page.contains(r#"<code id="code">login_state_mismatch</code>"#),
            "{query}: {page}"
        );
    }
    s.stop().await;
}

async fn a_server_without_sso_has_no_login(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let (st, o) = s.get_as::<p::LoginOptions>("/auth/options", None).await;
    assert_eq!((st, o.oidc), (200, false));
    let res = no_redirects()
        .get(s.url("/auth/login"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    let b: Value = res.json().await.unwrap();
    assert_eq!(code(&b), "oidc_not_configured");
    // A session cookie means nothing here.
    let res = s
        .http
        .get(s.url("/api/v1/me"))
        .header(COOKIE, "shepherd_session=abc")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    s.stop().await;
}

/// Nobody is anonymous, the built-in runner included: without
/// `SHEPHERD_TOKEN` it still registers its agents' workers.
async fn the_built_in_runner_works_without_a_token(kind: Kind) {
    let mut env = Env::new(kind);
    env.with_config_file(
        r#"
[oidc]
issuer = "http://127.0.0.1:9"
client_id = "shepherd"
client_secret = "a-client-secret"
redirect_url = "http://127.0.0.1:7777/auth/callback"

[agents.echo]
command = ["true"]
"#,
    );
    let s = Server::start(&env).await;
    let store = shepherd_store::Store::open(&env.store_config())
        .await
        .unwrap();
    let filter = shepherd_core::event::EventFilter {
        kinds: vec!["worker.registered".into()],
        ..Default::default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let page = store.read_events(0, &filter, 10).await.unwrap();
        if let Some(e) = page.events.first() {
            assert_eq!(e.refs.agent_id.as_deref(), Some("echo"));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the built-in runner registered no worker"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (st, _) = s.get("/api/v1/agents", None).await;
    assert_eq!(st, 401, "the runner's token is not everyone's");
    s.stop().await;
}

e2e!(nobody_is_anonymous_with_sso, nobody_is_anonymous_with_sso);
e2e!(
    the_built_in_runner_works_without_a_token,
    the_built_in_runner_works_without_a_token
);
e2e!(
    cookies_that_open_nothing_are_refused,
    cookies_that_open_nothing_are_refused
);
e2e!(
    a_login_or_callback_that_cannot_go_on_says_why,
    a_login_or_callback_that_cannot_go_on_says_why
);
e2e!(
    a_server_without_sso_has_no_login,
    a_server_without_sso_has_no_login
);
