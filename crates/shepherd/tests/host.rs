//! The `Host` rule over real HTTP (DNS rebinding): a token-less loopback
//! server refuses requests that name it by a host it is not known by, with
//! 421 `host_not_allowed`, on REST reads and writes, the session WebSocket's
//! upgrade and `/mcp`, even when `Origin` matches that host, as a rebound
//! page's does; its own names, its advertise URL's host and the names in
//! `SHEPHERD_ALLOWED_HOSTS` pass.

mod common;
#[path = "common/ws.rs"]
mod ws;

use serde_json::{json, Value};

use common::{Env, Kind, Server};
use ws::{try_connect, Opts};

async fn send(
    s: &Server,
    method: reqwest::Method,
    path: &str,
    host: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let origin = format!("http://{host}");
    let mut req = s
        .http
        .request(method, s.url(path))
        .header("host", host)
        .header("origin", origin);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let code = res.status().as_u16();
    (code, res.json().await.unwrap_or_default())
}

fn port_of(s: &Server) -> u16 {
    s.base.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_gets_nothing_from_a_tokenless_server() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let evil = format!("evil.example:{}", port_of(&s));
    let dir = env.dir.join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap().display().to_string();

    // A write that would give the page a terminal: refused, and nothing made.
    let (code, body) = send(
        &s,
        reqwest::Method::POST,
        "/api/v1/sessions",
        &evil,
        Some(json!({ "location_path": dir })),
    )
    .await;
    assert_eq!(code, 421, "{body}");
    assert_eq!(body["error"]["code"], "host_not_allowed");
    let (_, sessions) = s.get("/api/v1/sessions", None).await;
    assert_eq!(sessions["sessions"], json!([]), "nothing was created");

    // Reads, the UI shell, health and the task queue alike.
    for path in ["/api/v1/tasks", "/api/v1/events?after=0", "/", "/healthz"] {
        let (code, body) = send(&s, reqwest::Method::GET, path, &evil, None).await;
        assert_eq!(code, 421, "{path}: {body}");
        assert_eq!(body["error"]["code"], "host_not_allowed", "{path}");
    }
    let (code, _) = send(
        &s,
        reqwest::Method::POST,
        "/api/v1/tasks",
        &evil,
        Some(common::task("VTID-09001", "simple")),
    )
    .await;
    assert_eq!(code, 421);

    // MCP: its tools would run the same operations.
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "page", "version": "1"}}
    });
    let res = s
        .http
        .post(s.url("/mcp"))
        .header("host", &evil)
        .header("origin", format!("http://{evil}"))
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 421);

    // The terminal's WebSocket, for a terminal made through the real name.
    let (code, session) = s
        .post("/api/v1/sessions", None, json!({ "location_path": dir }))
        .await;
    assert_eq!(code, 201, "{session}");
    let sid = session["id"].as_str().unwrap().to_owned();
    let (code, tab) = s
        .post(
            &format!("/api/v1/sessions/{sid}/workers"),
            None,
            json!({ "type": "terminal" }),
        )
        .await;
    assert_eq!(code, 201, "{tab}");
    let wid = tab["id"].as_str().unwrap().to_owned();
    let origin = format!("http://{evil}");
    let refused = try_connect(
        &s.base,
        &ws::path(&sid, &wid),
        Opts {
            host: Some(&evil),
            origin: Some(&origin),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(refused.err(), Some(421));
    let own = format!("localhost:{}", port_of(&s));
    let own_origin = format!("http://{own}");
    let admitted = try_connect(
        &s.base,
        &ws::path(&sid, &wid),
        Opts {
            host: Some(&own),
            origin: Some(&own_origin),
            ..Default::default()
        },
    )
    .await;
    assert!(admitted.is_ok(), "the server's own name opens the terminal");
    drop(admitted);

    // The server's own names.
    for host in [
        format!("127.0.0.1:{}", port_of(&s)),
        format!("localhost:{}", port_of(&s)),
    ] {
        let (code, body) = send(&s, reqwest::Method::GET, "/api/v1/tasks", &host, None).await;
        assert_eq!(code, 200, "{host}: {body}");
    }
    // Loopback on another port is another server's name.
    let other = format!("localhost:{}", port_of(&s).wrapping_add(1));
    let (code, _) = send(&s, reqwest::Method::GET, "/api/v1/tasks", &other, None).await;
    assert_eq!(code, 421);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_names_are_served() {
    let mut env = Env::new(Kind::Sqlite);
    env.set(
        "SHEPHERD_ALLOWED_HOSTS",
        "shepherd.example, proxy.example:8443",
    );
    env.set("SHEPHERD_ADVERTISE_URL", "http://node-2.internal:7700");
    env.set("SHEPHERD_ALLOWED_ORIGINS", "https://ui.example.com");
    let s = Server::start(&env).await;
    for host in [
        "shepherd.example",
        "shepherd.example:7700",
        "proxy.example:8443",
        "node-2.internal:7700",
        "ui.example.com",
    ] {
        let (code, body) = send(&s, reqwest::Method::GET, "/api/v1/tasks", host, None).await;
        assert_eq!(code, 200, "{host}: {body}");
    }
    for host in [
        "proxy.example:8444",
        "evil.example",
        "shepherd.example.evil",
    ] {
        let (code, body) = send(&s, reqwest::Method::GET, "/api/v1/tasks", host, None).await;
        assert_eq!(code, 421, "{host}: {body}");
    }
    s.stop().await;
}

#[test]
fn a_bad_allowed_host_is_a_start_up_error() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_ALLOWED_HOSTS", "*.example");
    let vars = env.vars.clone();
    let e = shepherd::config::Config::load_with(None, &move |k| vars.get(k).cloned()).unwrap_err();
    assert!(e.to_string().contains("SHEPHERD_ALLOWED_HOSTS"), "{e}");
}
