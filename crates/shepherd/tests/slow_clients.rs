//! Clients that try to wear the server down, over raw TCP against the real
//! server: invented HTTP methods leave no trace in memory or `/metrics`; a
//! connection that never finishes its header is closed; a request whose
//! body trickles in answers 408 `body_timeout`; requests hyper cannot parse
//! answer in the standard error shape; one token's
//! slow requests take only its own slots (429 `too_many_requests` beyond
//! them), so the operator is still served.

mod common;

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use common::{task, Env, Kind, Server, OPERATOR};

fn addr(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// Sends a request's header and the first bytes of a longer body, and
/// keeps the connection open.
async fn slow_post(s: &Server, path: &str, token: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(addr(s)).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"a\":",
        addr(s)
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// The text of `/metrics`, read with `token` when the server has one.
async fn metrics(s: &Server, token: Option<&str>) -> String {
    let mut req = s.http.get(s.url("/metrics"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap().text().await.unwrap()
}

/// The server's `shepherd_http_requests_in_flight` gauge (`/metrics` is
/// never shed, so it answers while the slots are taken).
async fn requests_in_flight(s: &Server) -> i64 {
    let text = metrics(s, Some(OPERATOR)).await;
    text.lines()
        .find_map(|l| l.strip_prefix("shepherd_http_requests_in_flight "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no requests-in-flight gauge in /metrics: {text}"))
}

/// Reads a whole response from `tcp` (the server closes after an error).
async fn response(tcp: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_methods_share_one_label() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    for i in 0..300 {
        let method = format!("X{i:04}{}", "M".repeat(1000));
        let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
        let req = format!(
            "{method} /api/v1/tasks HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            addr(&s)
        );
        tcp.write_all(req.as_bytes()).await.unwrap();
        let res = response(&mut tcp).await;
        assert!(res.starts_with("HTTP/1.1 405"), "{res}");
    }
    let metrics = metrics(&s, None).await;
    assert!(
        !metrics.contains("X0001"),
        "an invented method became a label"
    );
    assert!(
        metrics.contains("method=\"other\""),
        "invented methods are counted as other"
    );
    assert!(
        metrics.len() < 200_000,
        "/metrics grew to {} bytes",
        metrics.len()
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_body_times_out_with_408() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_BODY_TIMEOUT", "1s");
    let s = Server::start(&env).await;
    let mut tcp = slow_post(&s, "/api/v1/tasks", OPERATOR).await;
    let res = response(&mut tcp).await;
    assert!(res.starts_with("HTTP/1.1 408"), "{res}");
    assert!(res.contains("\"code\":\"body_timeout\""), "{res}");
    // A body that arrives in time is served as before.
    let (code, body) = s
        .post("/api/v1/tasks", None, task("SLOW-1", "simple"))
        .await;
    assert_eq!(code, 201, "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tokens_slow_requests_take_only_its_own_slots() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    env.set("SHEPHERD_MAX_REQUESTS", "4");
    env.set("SHEPHERD_MAX_WORKER_REQUESTS", "0");
    env.set("SHEPHERD_MAX_REQUESTS_PER_TOKEN", "3");
    let s = Server::start(&env).await;
    let (code, reg) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": "slowpoke", "capabilities": ["x"], "max_concurrent": 1 }),
        )
        .await;
    assert_eq!(code, 200, "{reg}");
    let worker = reg["worker_token"].as_str().unwrap().to_owned();

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(slow_post(&s, "/api/v1/worker/orchestrator/heartbeat", &worker).await);
    }
    // Each slow request holds its slot once its header is read; the server
    // reads the three connections in its own time, so wait until it holds
    // all three (a request sent sooner could overtake one of them and take
    // its slot, which is not what this test is about).
    let mut in_flight = 0;
    for _ in 0..400 {
        in_flight = requests_in_flight(&s).await;
        if in_flight >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(in_flight, 3, "the three slow requests are being handled");
    let refused = s
        .http
        .post(s.url("/api/v1/worker/orchestrator/heartbeat"))
        .bearer_auth(&worker)
        .json(&json!({ "worker_id": "slowpoke" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused.status().as_u16(),
        429,
        "the fourth request of one token is refused"
    );
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests");

    // The operator still has a slot of the server's four.
    let (code, body) = s.get("/api/v1/tasks", Some(OPERATOR)).await;
    assert_eq!(code, 200, "{body}");

    // Once the slow requests are gone, the worker is served again.
    drop(held);
    let mut served = false;
    for _ in 0..200 {
        let (code, _) = s
            .post(
                "/api/v1/worker/orchestrator/heartbeat",
                Some(&worker),
                json!({ "worker_id": "slowpoke" }),
            )
            .await;
        if code == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(served, "the worker's slots come back");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_that_never_ends_is_cut_off() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_HEADER_TIMEOUT", "1s");
    let s = Server::start(&env).await;
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
        tcp.write_all(b"GET /api/v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        held.push(tcp);
    }
    for tcp in &mut held {
        let mut buf = [0u8; 512];
        // Closed (perhaps after a 408), well before the test's own deadline.
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(
            read.is_ok(),
            "a connection with an unfinished header stayed open"
        );
    }
    // A whole request on a fresh connection is served as before.
    let (code, _) = s.get("/api/v1/tasks", None).await;
    assert_eq!(code, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_requests_answer_in_the_error_shape() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let long = format!("/api/v1/tasks/{}", "a".repeat(70_000));
    for (target, status, code) in [
        (&b"/api/v1/tasks/\xff\xfe"[..], 400, "bad_request"),
        (b"/api/v1/tasks/a\x01b", 400, "bad_request"),
        (long.as_bytes(), 414, "uri_too_long"),
    ] {
        let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
        let mut req = b"GET ".to_vec();
        req.extend_from_slice(target);
        req.extend_from_slice(format!(" HTTP/1.1\r\nHost: {}\r\n\r\n", addr(&s)).as_bytes());
        tcp.write_all(&req).await.unwrap();
        let res = response(&mut tcp).await;
        assert!(res.starts_with(&format!("HTTP/1.1 {status}")), "{res}");
        let body = res
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {res:?}"));
        assert_eq!(v["error"]["code"], code, "{res}");
    }
    s.stop().await;
}
