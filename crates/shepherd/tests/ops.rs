//! Operations: JSON logs from the real binary, the token-free metrics
//! listener and the metrics it serves, the configured listen backlog, and
//! the request slots reserved for workers' reports.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use common::{task, wait_for, wait_ready, Env, Kind, Served, Server, SseClient, OPERATOR};

/// `shepherd serve` as a child process on a port it chose, stderr piped.
async fn spawn_serve(env: &Env) -> Served {
    let p = Served::spawn(env.serve_command().stderr(Stdio::piped()));
    wait_ready(&reqwest::Client::new(), &p.base).await;
    p
}

/// SIGTERM, then everything the process wrote to stderr.
fn stop_and_read_stderr(mut p: Served) -> String {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(p.pid(), libc::SIGTERM);
    }
    let mut err = String::new();
    p.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = p.child.wait().unwrap();
    assert!(status.success(), "serve exited with {status}: {err}");
    err
}

async fn some_traffic(base: &str) {
    let http = reqwest::Client::new();
    for i in 0..3 {
        let res = http
            .post(format!("{base}/api/v1/tasks"))
            .bearer_auth(OPERATOR)
            .json(&task(&format!("LOG-{i}"), "simple"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 201);
    }
    // An error path logs too.
    let res = http
        .get(format!("{base}/api/v1/tasks/NOPE"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_and_text_logs_have_no_colour_off_a_terminal() {
    // JSON: every line of stderr is one JSON object with a level and fields.
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_LOG_FORMAT", "json")
        .set("SHEPHERD_LOG", "debug,hyper=info,h2=info,reqwest=info");
    let p = spawn_serve(&env).await;
    some_traffic(&p.base).await;
    let err = stop_and_read_stderr(p);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 5, "too few log lines: {err}");
    let mut messages = Vec::new();
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string(), "no level: {l}");
        assert!(v["timestamp"].is_string(), "no timestamp: {l}");
        messages.push(v["fields"]["message"].as_str().unwrap_or("").to_owned());
    }
    for want in ["shepherd is serving", "request", "stopped"] {
        assert!(
            messages.iter().any(|m| m == want),
            "no {want:?} line in {messages:?}"
        );
    }
    assert!(
        !err.contains('\u{1b}'),
        "escape codes in JSON logs: {err:?}"
    );

    // Text, to a pipe: readable lines without colour codes.
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_LOG", "debug,hyper=info,h2=info,reqwest=info");
    env.vars.remove("NO_COLOR");
    let p = spawn_serve(&env).await;
    some_traffic(&p.base).await;
    let err = stop_and_read_stderr(p);
    assert!(err.contains("shepherd is serving"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour codes while stderr is a pipe: {err:?}"
    );
    assert!(
        err.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_err()),
        "text format wrote JSON"
    );
}

/// The value of an unlabelled sample, or of the sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

async fn metrics_listener_serves_metrics_without_a_token(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_METRICS_LISTEN", "127.0.0.1:0");
    let s = Server::spawn(&env).await;
    let metrics = s
        .child
        .as_ref()
        .and_then(|c| c.metrics)
        .expect("the metrics address");
    let mbase = format!("http://{metrics}");
    let mut sse = SseClient::connect(&s.base, "/api/events?after=now", Some(OPERATOR), None).await;
    for i in 0..5 {
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                Some(OPERATOR),
                task(&format!("M-{i}"), "simple"),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    let mut created = 0;
    while created < 5 {
        let f = sse.next(Duration::from_secs(10)).await.expect("an event");
        created += usize::from(f.event == "task.created");
    }

    // The main listener still wants the operator token.
    assert_eq!(s.get("/metrics", None).await.0, 401);
    // The metrics listener does not, and serves the same exposition.
    let http = reqwest::Client::new();
    let res = http.get(format!("{mbase}/metrics")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = res.text().await.unwrap();
    let (_, t) = s.get("/api/v1/tasks/M-0", Some(OPERATOR)).await;
    let state = t["state"].as_str().expect("a state").to_owned();
    for line in [
        "shepherd_http_requests_total{route=\"/api/v1/tasks\",method=\"POST\",status=\"201\"} 5",
        &format!("shepherd_tasks{{state=\"{state}\"}} 5"),
        "shepherd_sse_clients 1",
        "shepherd_http_max_worker_requests 32",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // The writer's group commits: at least the five creations.
    let batches = sample(&text, "shepherd_writer_batch_units_count").expect("batch count");
    let units = sample(&text, "shepherd_writer_batch_units_sum").expect("batch units");
    assert!(
        batches >= 1.0 && units >= 5.0,
        "{batches} batches, {units} units"
    );
    let commits = sample(&text, "shepherd_writer_commit_seconds_count").expect("commit count");
    assert_eq!(commits, batches);
    assert_eq!(
        sample(&text, "shepherd_writer_batch_units_bucket{le=\"+Inf\"}"),
        Some(batches)
    );
    // Event lag: the five live deliveries, and nothing left unpublished.
    let delivered =
        sample(&text, "shepherd_sse_delivery_lag_seconds_count").expect("delivery lag count");
    assert!(delivered >= 5.0, "{delivered} deliveries");
    let head = sample(&text, "shepherd_event_log_head").unwrap();
    assert!(head >= 5.0);
    assert!(sample(&text, "shepherd_event_lag_events").is_some());
    // Every histogram's buckets are cumulative and end at its count.
    for name in [
        "shepherd_writer_batch_units",
        "shepherd_writer_commit_seconds",
        "shepherd_sse_delivery_lag_seconds",
    ] {
        let buckets: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(
            buckets.windows(2).all(|w| w[0] <= w[1]),
            "{name}: {buckets:?}"
        );
        assert_eq!(
            buckets.last().copied(),
            sample(&text, &format!("{name}_count")),
            "{name}"
        );
    }
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let value = l.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample {l:?}");
    }
    // Nothing else is reachable through it, with or without a token.
    for path in ["/api/v1/tasks", "/healthz", "/"] {
        let res = http
            .get(format!("{mbase}{path}"))
            .bearer_auth(OPERATOR)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 404, "{path}");
        let b: Value = res.json().await.unwrap();
        assert_eq!(b["error"]["code"], "not_found", "{path}: {b}");
    }
    let res = http.post(format!("{mbase}/metrics")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 405);
    let b: Value = res.json().await.unwrap();
    assert_eq!(b["error"]["code"], "method_not_allowed", "{b}");
    s.stop().await;
    // It stops with the server.
    assert!(
        http.get(format!("{mbase}/metrics")).send().await.is_err(),
        "the metrics listener outlived the server"
    );
}

e2e!(
    metrics_listener_serves_metrics_without_a_token,
    metrics_listener_serves_metrics_without_a_token
);

/// The backlog of the listening socket on `port`, as `ss` reports it
/// (its Send-Q column); `None` when `ss` is not installed.
fn listen_backlog(port: u16) -> Option<u64> {
    let out = Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no listener on {port}"));
    // State Recv-Q Send-Q Local Peer
    line.split_whitespace().nth(2)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listen_backlog_is_the_configured_one() {
    if Command::new("ss").arg("-V").output().is_err() {
        eprintln!("skipped: `ss` (iproute2) is not installed, so the backlog cannot be read");
        return;
    }
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_LISTEN_BACKLOG", "37")
        .set("SHEPHERD_METRICS_LISTEN", "127.0.0.1:0");
    let p = spawn_serve(&env).await;
    let metrics = p.metrics.expect("the metrics address");
    assert_eq!(listen_backlog(p.port()), Some(37));
    assert_eq!(listen_backlog(metrics.port()), Some(37));
    stop_and_read_stderr(p);
    // The default.
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    let p = spawn_serve(&env).await;
    let somaxconn: u64 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(4096);
    assert_eq!(listen_backlog(p.port()), Some(1024.min(somaxconn)));
    stop_and_read_stderr(p);
}

/// Opens a request whose body never finishes, so that it holds a request
/// slot; returns the socket (dropping it ends the request).
async fn held_request(s: &Server, path: &str, token: &str) -> tokio::net::TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"x\""
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    sock
}

/// Holds `n` requests on `path` until `probe` is shed; returns the sockets.
async fn fill(
    s: &Server,
    n: usize,
    path: &str,
    token: &str,
    probe: (&str, &str),
) -> Vec<tokio::net::TcpStream> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(held_request(s, path, token).await);
    }
    let (probe_path, probe_token) = probe;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let res = s
            .http
            .post(s.url(probe_path))
            .bearer_auth(probe_token)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        if res.status().as_u16() == 503 {
            return held;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slots were never all taken"
        );
        // A held request that arrived while the probe held a slot was shed
        // (it has an answer waiting): hold a new one in its place.
        for h in held.iter_mut() {
            let mut byte = [0u8; 1];
            if !matches!(h.try_read(&mut byte), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
            {
                *h = held_request(s, path, token).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn register(s: &Server, id: &str) -> String {
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": id }),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    b["worker_token"].as_str().unwrap().to_owned()
}

async fn heartbeat(s: &Server, tok: &str) -> (u16, Value) {
    s.post(
        "/api/v1/worker/orchestrator/heartbeat",
        Some(tok),
        json!({}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_heartbeat_gets_through_when_clients_hold_every_request_slot() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_MAX_REQUESTS", "2")
        .set("SHEPHERD_MAX_WORKER_REQUESTS", "2");
    let s = Server::start(&env).await;
    let w = register(&s, "w-reserve").await;
    // Clients hold the whole general cap.
    let clients = fill(
        &s,
        2,
        "/api/v1/tasks",
        OPERATOR,
        ("/api/v1/tasks", OPERATOR),
    )
    .await;
    let (st, b) = s
        .post("/api/v1/tasks", Some(OPERATOR), task("T-shed", "simple"))
        .await;
    assert_eq!((st, b["error"]["code"].as_str()), (503, Some("overloaded")));
    // A worker's heartbeat and progress still get through.
    let (st, b) = heartbeat(&s, &w).await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = s
        .get("/api/v1/worker/orchestrator/tasks/pending", Some(&w))
        .await;
    assert_eq!(st, 200, "{b}");
    // The reserve is bounded too: once workers' requests hold it, the next is shed.
    let workers = fill(
        &s,
        2,
        "/api/v1/worker/orchestrator/heartbeat",
        &w,
        ("/api/v1/worker/orchestrator/heartbeat", &w),
    )
    .await;
    let res = s
        .http
        .post(s.url("/api/v1/worker/orchestrator/heartbeat"))
        .bearer_auth(&w)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    drop(workers);
    drop(clients);
    wait_for(
        "the slots to come back",
        Duration::from_secs(10),
        || async {
            let (st, _) = s.get("/api/v1/tasks", Some(OPERATOR)).await;
            (st == 200).then_some(Value::Null)
        },
    )
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_reserve_a_worker_heartbeat_is_shed_like_any_request() {
    // The control for the test above: the same flood sheds the heartbeat
    // when no slot is reserved.
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_MAX_REQUESTS", "2")
        .set("SHEPHERD_MAX_WORKER_REQUESTS", "0");
    let s = Server::start(&env).await;
    let w = register(&s, "w-none").await;
    let held = fill(
        &s,
        2,
        "/api/v1/tasks",
        OPERATOR,
        ("/api/v1/tasks", OPERATOR),
    )
    .await;
    let (st, b) = heartbeat(&s, &w).await;
    assert_eq!((st, b["error"]["code"].as_str()), (503, Some("overloaded")));
    drop(held);
    s.stop().await;
}
