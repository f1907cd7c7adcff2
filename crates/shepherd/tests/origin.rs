//! The `Origin` rule and browser WebSocket authentication over real HTTP:
//! a foreign origin is refused on every route, even on loopback without a
//! token; the server's own and listed origins pass; a token offered as the
//! `bearer.<token>` subprotocol authenticates like a bearer header.

mod common;

use common::{Env, Kind, Server, OPERATOR};

async fn status(s: &Server, path: &str, headers: &[(&str, String)]) -> (u16, serde_json::Value) {
    let mut req = s.http.get(s.url(path));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let res = req.send().await.unwrap();
    let code = res.status().as_u16();
    (code, res.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origins_are_refused_even_without_a_token() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let own = s.base.clone();

    let (code, body) = status(
        &s,
        "/api/v1/tasks",
        &[("origin", "http://evil.example".into())],
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(body["error"]["code"], "origin_not_allowed");
    // A port is part of the origin.
    let other_port = format!("{}1", own);
    let (code, _) = status(&s, "/api/v1/tasks", &[("origin", other_port)]).await;
    assert_eq!(code, 403);
    let (code, _) = status(&s, "/api/v1/tasks", &[("origin", "null".into())]).await;
    assert_eq!(code, 403);

    let (code, _) = status(&s, "/api/v1/tasks", &[("origin", own)]).await;
    assert_eq!(code, 200);
    let (code, _) = status(&s, "/api/v1/tasks", &[]).await;
    assert_eq!(
        code, 200,
        "a request without Origin is judged by its token alone"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_origins_pass_and_subprotocol_tokens_authenticate() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    env.set("SHEPHERD_ALLOWED_ORIGINS", "https://ui.example.com");
    let s = Server::start(&env).await;

    let listed = ("origin", "https://ui.example.com".to_string());
    let (code, body) = status(&s, "/api/v1/tasks", std::slice::from_ref(&listed)).await;
    assert_eq!(code, 401, "an allowed origin still needs the token: {body}");

    let offered = format!("shepherd.v1, bearer.{OPERATOR}");
    let (code, _) = status(
        &s,
        "/api/v1/tasks",
        &[listed, ("sec-websocket-protocol", offered)],
    )
    .await;
    assert_eq!(code, 200);

    let (code, body) = status(
        &s,
        "/api/v1/tasks",
        &[(
            "sec-websocket-protocol",
            "shepherd.v1, bearer.not-the-token".into(),
        )],
    )
    .await;
    assert_eq!(code, 401);
    assert_eq!(body["error"]["code"], "unauthorized");

    let (code, _) = status(
        &s,
        "/api/v1/tasks",
        &[
            ("origin", "https://evil.example".into()),
            ("authorization", format!("Bearer {OPERATOR}")),
        ],
    )
    .await;
    assert_eq!(code, 403, "the token does not excuse a foreign origin");
    s.stop().await;
}
