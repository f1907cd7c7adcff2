//! Reliability and security over real HTTP: every error (framework
//! rejections included) in the standard shape; unknown API routes that
//! reveal nothing without a token; worker tokens scoped to their own work;
//! load shedding that spares event streams; a silent worker that is not
//! shown `ready`; and the operator's `/metrics`.

mod common;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use shepherd_protocol::{
    ClaimResponse, ConversationDetail, ConversationInfo, EventPage, HeartbeatResponse,
    RegisterResponse, ResourceInfo, SendResponse, StatusAck, Task, WireEvent, WorkerEventsResponse,
    WorkerInfoList, WorkersQuery,
};

use common::{task, Env, Frame, Kind, Server, SseClient, OPERATOR};

/// Asserts the standard error shape and returns its code.
fn code(status: u16, body: &Value) -> String {
    assert!(status >= 400, "not an error: {status} {body}");
    let c = body["error"]["code"].as_str().unwrap_or_else(|| {
        panic!("{status}: no error.code in {body}");
    });
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{status}: no error.message in {body}"
    );
    c.to_owned()
}

async fn raw(
    s: &Server,
    method: Method,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = s.http.request(method, s.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let res = req.body(body.to_owned()).send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let text = res.text().await.unwrap();
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("{status}: body is not JSON: {text:?}"));
    (status, headers, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rejection_has_the_error_shape_and_unknown_routes_reveal_nothing() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let op = Some(OPERATOR);

    // A path parameter that is not UTF-8 once decoded.
    let (st, _, b) = raw(&s, Method::GET, "/api/v1/tasks/%ff", op, None, "").await;
    assert_eq!((st, code(st, &b).as_str()), (400, "invalid_path"));
    // A wrong method: 405 with Allow, and a body.
    let (st, h, b) = raw(&s, Method::DELETE, "/api/v1/tasks", op, None, "").await;
    assert_eq!((st, code(st, &b).as_str()), (405, "method_not_allowed"));
    assert!(h.get("allow").is_some(), "405 keeps its Allow header");
    // An over-long URI.
    let long = format!("/api/v1/tasks?state={}", "a".repeat(10_000));
    let (st, _, b) = raw(&s, Method::GET, &long, op, None, "").await;
    assert_eq!((st, code(st, &b).as_str()), (414, "uri_too_long"));
    // Bad JSON, a wrong content type, a query that does not parse.
    let (st, _, b) = raw(
        &s,
        Method::POST,
        "/api/v1/tasks",
        op,
        Some("application/json"),
        "{nope",
    )
    .await;
    assert_eq!((st, code(st, &b).as_str()), (400, "malformed_json"));
    let (st, _, b) = raw(
        &s,
        Method::POST,
        "/api/v1/tasks",
        op,
        Some("text/plain"),
        "{}",
    )
    .await;
    assert_eq!(code(st, &b), "unsupported_media_type");
    let (st, _, b) = raw(&s, Method::GET, "/api/v1/tasks?limit=abc", op, None, "").await;
    assert_eq!((st, code(st, &b).as_str()), (400, "invalid_query"));
    // The MCP transport's own refusals are reshaped too.
    let (st, _, b) = raw(&s, Method::PUT, "/mcp", op, None, "").await;
    code(st, &b);

    // Unknown routes under the API prefixes: 401 without a valid token,
    // 404 with one.
    for path in [
        "/api/nothing",
        "/api/v1/nothing/here",
        "/ws/nothing",
        "/mcp/x",
    ] {
        let (st, _, b) = raw(&s, Method::GET, path, None, None, "").await;
        assert_eq!((st, code(st, &b).as_str()), (401, "unauthorized"), "{path}");
        let (st, _, b) = raw(&s, Method::GET, path, Some("not-a-token"), None, "").await;
        assert_eq!(st, 401, "{path}: {b}");
        let (st, _, b) = raw(&s, Method::GET, path, op, None, "").await;
        assert_eq!(
            (st, code(st, &b).as_str()),
            (404, "route_not_found"),
            "{path}"
        );
    }
    // A wrong method on a known route without a token: 401, not 405.
    let (st, _, b) = raw(&s, Method::DELETE, "/api/v1/tasks", None, None, "").await;
    assert_eq!((st, code(st, &b).as_str()), (401, "unauthorized"));
    let (st, _, b) = raw(&s, Method::POST, "/anything", None, None, "").await;
    assert_eq!(st, 401, "{b}");
    // Any other GET serves the UI shell without a token.
    let res = s.http.get(s.url("/tasks/T-1")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    s.stop().await;
}

async fn register(s: &Server, id: &str, caps: &[&str]) -> String {
    let (st, b) = s
        .post_as::<RegisterResponse>(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": id, "capabilities": caps, "max_concurrent": 2 }),
        )
        .await;
    assert_eq!(st, 200, "{b:?}");
    b.worker_token
}

async fn create(s: &Server, vtid: &str, caps: &[&str]) {
    let mut t = task(vtid, "autopilot");
    t["capabilities"] = json!(caps);
    let (st, b) = s.post_as::<Task>("/api/v1/tasks", Some(OPERATOR), t).await;
    assert_eq!(st, 201, "{b:?}");
}

async fn claim(s: &Server, tok: &str, vtid: &str) -> (String, String) {
    let (st, b) = s
        .post_as::<ClaimResponse>(
            &format!("/api/v1/worker/orchestrator/tasks/{vtid}/claim"),
            Some(tok),
            json!({}),
        )
        .await;
    assert_eq!(st, 200, "{b:?}");
    (b.run_id, b.claim_token)
}

/// An SSE frame's data as the event it carries.
fn event(f: &Frame) -> WireEvent {
    serde_json::from_value(f.data.clone())
        .unwrap_or_else(|e| panic!("no event in the frame ({e}): {:?}", f.data))
}

fn forbidden(st: u16, b: &Value) {
    assert_eq!((st, code(st, b).as_str()), (403, "forbidden"), "{b}");
}

e2e!(
    worker_tokens_read_only_their_own_work,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
        let s = Server::start(&env).await;
        let w1 = register(&s, "w-one", &["a"]).await;
        let w2 = register(&s, "w-two", &["b"]).await;
        create(&s, "T-A1", &["a"]).await;
        create(&s, "T-B", &["b"]).await;
        create(&s, "T-A2", &["a"]).await;
        let (r1, ct1) = claim(&s, &w1, "T-A1").await;
        let (r2, _) = claim(&s, &w2, "T-B").await;
        let (st, b) = s
            .post_as::<StatusAck>(
                &format!("/api/v1/runs/{r1}/status"),
                Some(&w1),
                json!({ "claim_token": ct1, "status": "working" }),
            )
            .await;
        assert_eq!(st, 200, "{b:?}");

        // Tasks: the one it holds and the one it may take; not another's.
        assert_eq!(s.get("/api/v1/tasks/T-A1", Some(&w1)).await.0, 200);
        assert_eq!(s.get("/api/v1/tasks/T-A2", Some(&w1)).await.0, 200);
        let (st, b) = s.get("/api/v1/tasks/T-B", Some(&w1)).await;
        forbidden(st, &b);
        // Runs: its own only.
        assert_eq!(s.get(&format!("/api/v1/runs/{r1}"), Some(&w1)).await.0, 200);
        for path in [
            format!("/api/v1/runs/{r2}"),
            format!("/api/v1/runs/{r2}/steps"),
            format!("/api/agents/workers/detail?worker_id={r2}"),
        ] {
            let (st, b) = s.get(&path, Some(&w1)).await;
            forbidden(st, &b);
        }
        // Lists beyond one worker's scope.
        for path in [
            "/api/v1/tasks",
            "/api/v1/runs",
            "/api/agents/workers",
            "/api/v1/agents",
            "/api/v1/channels",
            "/api/v1/events?worker_id=w-two",
            "/api/v1/worker_events?include_snapshot=true",
        ] {
            let (st, b) = s.get(path, Some(&w1)).await;
            forbidden(st, &b);
        }
        // Its own worker record only.
        let (st, b) = s
            .get_as::<WorkerInfoList>("/api/v1/workers", Some(&w1))
            .await;
        assert_eq!(st, 200);
        let ids: Vec<&str> = b.workers.iter().map(|w| w.worker_id.as_str()).collect();
        assert_eq!(ids, ["w-one"]);
        // Events that name it only, paged and streamed.
        let (st, b) = s
            .get_as::<EventPage>("/api/v1/events?limit=1000", Some(&w1))
            .await;
        assert_eq!(st, 200);
        let events = b.events;
        assert!(!events.is_empty());
        assert!(
            events
                .iter()
                .all(|e| e.event.refs.worker_id.as_deref() == Some("w-one")),
            "{events:?}"
        );
        let (st, b) = s
            .get_as::<WorkerEventsResponse>("/api/v1/worker_events?since=0", Some(&w1))
            .await;
        assert_eq!(st, 200);
        assert!(b
            .events
            .iter()
            .all(|e| e.worker_id.as_deref() == Some("w-one")));
        let last_own = events.iter().map(|e| e.id).max().unwrap();
        let mut sse = SseClient::connect(&s.base, "/api/events?after=0", Some(&w1), None).await;
        loop {
            let f = sse
                .next(Duration::from_secs(10))
                .await
                .expect("the worker's own events arrive");
            let e = event(&f);
            assert_eq!(e.event.refs.worker_id.as_deref(), Some("w-one"), "{e:?}");
            if f.id == Some(last_own) {
                break;
            }
        }
        // The operator sees everything.
        assert_eq!(s.get("/api/v1/tasks/T-B", Some(OPERATOR)).await.0, 200);
        assert_eq!(s.get("/api/v1/runs", Some(OPERATOR)).await.0, 200);
        let all = s
            .client(Some(OPERATOR))
            .workers(&WorkersQuery::default())
            .await
            .unwrap();
        assert_eq!(all.workers.len(), 2);
        s.stop().await;
    }
);

e2e!(
    worker_tokens_read_only_conversations_they_ran,
    |kind: Kind| async move {
        // A worker token used to read every resource and conversation:
        // the operator's messages and other workers' transcripts. Now it
        // reads a conversation only when it ran one of its runs, as runs
        // themselves; lists are the operator's.
        let mut env = Env::new(kind);
        env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
        let s = Server::start(&env).await;
        let op = Some(OPERATOR);
        // Two workers of an agent that only external workers run.
        let mut tokens = Vec::new();
        for id in ["w-one", "w-two"] {
            let (st, b) = s
                .post_as::<RegisterResponse>(
                    "/api/v1/worker/orchestrator/register",
                    op,
                    json!({ "worker_id": id, "agent_id": "external", "max_concurrent": 2 }),
                )
                .await;
            assert_eq!(st, 200, "{b:?}");
            tokens.push(b.worker_token);
        }
        let (w1, w2) = (tokens[0].clone(), tokens[1].clone());
        let (st, b) = s
            .post_as::<ResourceInfo>(
                "/api/v1/resources",
                op,
                json!({ "id": "table-1", "name": "Leads", "agent_id": "external" }),
            )
            .await;
        assert_eq!(st, 201, "{b:?}");
        let new_chat = || async {
            let (st, c) = s
                .post_as::<ConversationInfo>(
                    "/api/v1/resources/table-1/conversations",
                    op,
                    json!({}),
                )
                .await;
            assert_eq!(st, 201, "{c:?}");
            c.id
        };
        let ran = new_chat().await;
        let (st, b) = s
            .post_as::<SendResponse>(
                &format!("/api/v1/conversations/{ran}/messages"),
                op,
                json!({ "text": "the operator's private question" }),
            )
            .await;
        assert_eq!(st, 201, "{b:?}");
        let vtid = b.message.task_id.unwrap();
        claim(&s, &w1, &vtid).await;
        // Another conversation, whose message no worker has taken.
        let other = new_chat().await;

        // The worker that ran the conversation's run reads it, messages
        // and all.
        let (st, c) = s
            .get_as::<ConversationDetail>(&format!("/api/v1/conversations/{ran}"), Some(&w1))
            .await;
        assert_eq!(st, 200, "{c:?}");
        assert_eq!(
            c.messages[0].text.as_deref(),
            Some("the operator's private question"),
            "{c:?}"
        );
        // Another worker, or a conversation it did not run: forbidden.
        let (st, b) = s
            .get(&format!("/api/v1/conversations/{ran}"), Some(&w2))
            .await;
        forbidden(st, &b);
        let (st, b) = s
            .get(&format!("/api/v1/conversations/{other}"), Some(&w1))
            .await;
        forbidden(st, &b);
        // The lists are beyond one worker's scope.
        for path in [
            "/api/v1/resources",
            "/api/v1/resources/table-1/conversations",
        ] {
            for tok in [&w1, &w2] {
                let (st, b) = s.get(path, Some(tok)).await;
                forbidden(st, &b);
            }
        }
        // The writes stay the operator's.
        for (path, body) in [
            (
                "/api/v1/resources".to_owned(),
                json!({ "id": "t2", "name": "x", "agent_id": "external" }),
            ),
            (
                "/api/v1/resources/table-1/conversations".to_owned(),
                json!({}),
            ),
            (
                format!("/api/v1/conversations/{ran}/messages"),
                json!({ "text": "hi" }),
            ),
            (format!("/api/v1/conversations/{ran}/cancel"), json!({})),
            (format!("/api/v1/conversations/{other}/activate"), json!({})),
        ] {
            let (st, b) = s.post(&path, Some(&w1), body).await;
            assert_eq!(
                (st, code(st, &b).as_str()),
                (403, "operator_only"),
                "{path}: {b}"
            );
        }
        // Its stream of the conversation carries the events that name it;
        // the other worker's carries none of the conversation's.
        let stream = format!("/api/events?after=0&conversation_id={ran}");
        let mut sse = SseClient::connect(&s.base, &stream, Some(&w1), None).await;
        loop {
            let f = sse
                .next(Duration::from_secs(10))
                .await
                .expect("the worker's own events of the conversation arrive");
            let e = event(&f);
            assert_eq!(e.event.refs.worker_id.as_deref(), Some("w-one"), "{e:?}");
            if e.event.kind == "worker.claim.granted" {
                break;
            }
        }
        let mut sse = SseClient::connect(&s.base, &stream, Some(&w2), None).await;
        if let Some(f) = sse.next(Duration::from_secs(1)).await {
            let e = event(&f);
            assert_ne!(
                e.event.refs.conversation_id.as_deref(),
                Some(ran.as_str()),
                "{e:?}"
            );
        }
        // The operator reads everything.
        for path in [
            "/api/v1/resources".to_owned(),
            "/api/v1/resources/table-1/conversations".to_owned(),
            format!("/api/v1/conversations/{ran}"),
            format!("/api/v1/conversations/{other}"),
        ] {
            assert_eq!(s.get(&path, op).await.0, 200, "{path}");
        }
        s.stop().await;
    }
);

/// Opens a request whose body never finishes, so that it holds a request
/// slot; returns the socket (dropping it ends the request).
async fn held_request(s: &Server) -> tokio::net::TcpStream {
    let addr = s.base.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /api/v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"vtid\""
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    sock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_shed_with_retry_after_while_streams_keep_working() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    env.set("SHEPHERD_MAX_REQUESTS", "2");
    let s = Server::start(&env).await;
    let mut sse = SseClient::connect(&s.base, "/api/events?after=now", Some(OPERATOR), None).await;

    let mut held = vec![held_request(&s).await, held_request(&s).await];
    // Wait (with a deadline) until both slots are taken.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let res = loop {
        let res = s
            .http
            .get(s.url("/api/v1/tasks"))
            .bearer_auth(OPERATOR)
            .send()
            .await
            .unwrap();
        if res.status().as_u16() == 503 || tokio::time::Instant::now() > deadline {
            break res;
        }
        // The built-in runner's own requests share the cap: a held request
        // that arrived while one of them ran was shed (it has an answer
        // waiting). Hold a new one in its place.
        for h in held.iter_mut() {
            let mut byte = [0u8; 1];
            if !matches!(h.try_read(&mut byte), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
            {
                *h = held_request(&s).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(res.status().as_u16(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    let b: Value = res.json().await.unwrap();
    assert_eq!(code(503, &b), "overloaded");
    // Probes and new streams are outside the request cap.
    assert_eq!(s.get("/healthz", None).await.0, 200);
    let mut second =
        SseClient::connect(&s.base, "/api/events?after=now", Some(OPERATOR), None).await;

    // Free one slot; the server admits requests again and both streams
    // deliver the event they cause.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (st, b) = s
            .post("/api/v1/tasks", Some(OPERATOR), task("T-1", "autopilot"))
            .await;
        if st == 201 {
            break;
        }
        assert_eq!(st, 503, "{b}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "a slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for stream in [&mut sse, &mut second] {
        loop {
            let f = stream.next(Duration::from_secs(10)).await.expect("event");
            if event(&f).event.refs.task_id.as_deref() == Some("T-1") {
                break;
            }
        }
    }
    drop(held);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_worker_whose_claim_expired_is_not_ready() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "1");
    env.set("SHEPHERD_SWEEP_INTERVAL_SECS", "1");
    let s = Server::start(&env).await;
    let w = register(&s, "w-silent", &[]).await;
    create(&s, "T-S", &[]).await;
    claim(&s, &w, "T-S").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let op = s.client(Some(OPERATOR));
    let all = WorkersQuery::default();
    let worker = loop {
        let b = op.workers(&all).await.unwrap();
        let w = b.workers[0].clone();
        if w.active_claims == 0 {
            break w;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the claim never expired: {w:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(worker.status, "closed", "{worker:?}");
    assert_eq!(worker.registry_status, "inactive", "{worker:?}");
    // A heartbeat brings it back.
    let (st, b) = s
        .post_as::<HeartbeatResponse>("/api/v1/worker/orchestrator/heartbeat", Some(&w), json!({}))
        .await;
    assert_eq!(st, 200, "{b:?}");
    let b = op.workers(&all).await.unwrap();
    assert_eq!(b.workers[0].status, "ready", "{b:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_for_the_operator_in_prometheus_text() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let w = register(&s, "w-m", &[]).await;
    create(&s, "T-M1", &[]).await;
    create(&s, "T-M2", &[]).await;
    claim(&s, &w, "T-M1").await;
    let _sse = SseClient::connect(&s.base, "/api/events?after=now", Some(OPERATOR), None).await;

    assert_eq!(s.get("/metrics", None).await.0, 401);
    let (st, b) = s.get("/metrics", Some(&w)).await;
    assert_eq!(st, 403, "{b}");
    let res = s
        .http
        .get(s.url("/metrics"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = res.text().await.unwrap();
    for line in [
        "shepherd_http_requests_total{route=\"/api/v1/tasks\",method=\"POST\",status=\"201\"} 2",
        "shepherd_tasks{state=\"in_progress\"} 2",
        "shepherd_active_claims 1",
        "shepherd_sse_clients 1",
        "shepherd_runs{status=\"running\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(text.contains(
        "shepherd_http_request_duration_seconds_bucket{route=\"/api/v1/tasks\",le=\"+Inf\"} 2"
    ));
    // Every sample line is `name{labels} value` or `name value`.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let value = l.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "bad sample {l:?}");
    }
    s.stop().await;
}
