//! A credential that stops working ends what it opened, on both stores: a
//! terminal's WebSocket and `/api/events` opened with a person's token,
//! then the token revoked, its user disabled, or its user demoted to
//! viewer. The socket gets a close frame (4401, or 4403 for the demotion)
//! and nothing typed after the change runs; the stream ends, except for
//! the demoted viewer, who may still read it. An input request's long poll
//! and an MCP session's stream end the same way, and a token revoked
//! through one node of a cluster ends the stream another node serves.

mod common;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use shepherd_protocol as p;
use tokio_tungstenite::tungstenite::Message;

use common::{task, Env, Kind, Server, SseClient, OPERATOR};

#[path = "common/ws.rs"]
mod ws;

/// What every wait here allows; the server acts within a second.
const WAIT: Duration = Duration::from_secs(5);

fn env_with_token(kind: Kind) -> Env {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    env
}

/// A user of `role` and a personal token of theirs: (token id, secret).
async fn person(s: &Server, name: &str, role: &str) -> (String, String) {
    let (st, b) = s
        .post(
            "/api/v1/users",
            Some(OPERATOR),
            json!({ "name": name, "role": role }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, t) = s
        .post_as::<p::CreatedToken>(
            "/api/v1/tokens",
            Some(OPERATOR),
            json!({ "name": "t", "user": name }),
        )
        .await;
    assert_eq!(st, 201);
    (t.id, t.token)
}

/// A session in a fresh directory with one terminal tab: (directory,
/// session id, tab id).
async fn terminal(s: &Server, env: &Env) -> (String, String, String) {
    let dir = env.dir.join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap().display().to_string();
    let (st, session) = s
        .post_as::<p::Session>(
            "/api/v1/sessions",
            Some(OPERATOR),
            json!({ "location_path": dir }),
        )
        .await;
    assert_eq!(st, 201);
    let (st, tab) = s
        .post_as::<p::SessionWorker>(
            &format!("/api/v1/sessions/{}/workers", session.id),
            Some(OPERATOR),
            json!({ "type": "terminal" }),
        )
        .await;
    assert_eq!(st, 201);
    (dir, session.id, tab.id)
}

/// Waits for the server's close frame; its code and reason.
async fn close_frame(term: &mut ws::Term) -> (u16, String) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let msg = tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut term.ws))
            .await
            .expect("a close frame in time");
        match msg {
            Some(Ok(Message::Close(Some(f)))) => return (u16::from(f.code), f.reason.to_string()),
            Some(Ok(Message::Close(None))) => panic!("a close frame without a code"),
            Some(Ok(_)) => continue,
            other => panic!("the socket ended without a close frame: {other:?}"),
        }
    }
}

/// Whether the stream ends (rather than times out) within [`WAIT`], past
/// whatever it still delivers.
async fn stream_ends(sse: &mut SseClient) -> bool {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        let started = tokio::time::Instant::now();
        if sse.next(left).await.is_none() {
            // `next` answers None on an end and on its timeout alike.
            return started.elapsed() < left;
        }
    }
}

/// Proves what `touch`ing `marker` would have done: another client types
/// an echo into the same shell and waits for it, so everything typed
/// before (in order) has run; then the file must not exist.
async fn did_not_run(s: &Server, session: &str, tab: &str, marker: &std::path::Path) {
    let mut admin = ws::connect(&s.base, session, tab, Some(OPERATOR)).await;
    admin.history().await;
    admin.type_line("echo after-$((40+2))").await;
    admin.wait_for("after-42", Duration::from_secs(20)).await;
    assert!(
        !marker.exists(),
        "a command typed after the change ran: {}",
        marker.display()
    );
}

/// The change each case makes to alice's credential.
#[derive(Clone, Copy, Debug)]
enum Change {
    Revoke,
    Disable,
    Demote,
}

async fn change_ends_terminal_and_stream(kind: Kind, change: Change) {
    let env = env_with_token(kind);
    let s = Server::start(&env).await;
    let (token_id, alice) = person(&s, "alice", "operator").await;
    let (dir, session, tab) = terminal(&s, &env).await;

    let mut term = ws::connect(&s.base, &session, &tab, Some(&alice)).await;
    term.history().await;
    term.wait_prompt("", Duration::from_secs(20)).await;
    // The shell takes alice's input while she may type.
    term.type_line("echo before-$((1+1))").await;
    term.wait_for("before-2", Duration::from_secs(20)).await;
    let mut sse = SseClient::connect(
        &s.base,
        "/api/events?after=now&types=task.created",
        Some(&alice),
        None,
    )
    .await;
    let (st, _) = s
        .post("/api/v1/tasks", Some(OPERATOR), task("R-1", "simple"))
        .await;
    assert_eq!(st, 201);
    let seen = sse.next(WAIT).await.expect("the stream delivers");
    assert_eq!(seen.event, "task.created");

    let (st, b) = match change {
        Change::Revoke => {
            s.call(
                Method::DELETE,
                &format!("/api/v1/tokens/{token_id}"),
                Some(OPERATOR),
                None,
            )
            .await
        }
        Change::Disable => {
            s.call(
                Method::PATCH,
                "/api/v1/users/alice",
                Some(OPERATOR),
                Some(json!({ "disabled": true })),
            )
            .await
        }
        Change::Demote => {
            s.call(
                Method::PATCH,
                "/api/v1/users/alice",
                Some(OPERATOR),
                Some(json!({ "role": "viewer" })),
            )
            .await
        }
    };
    assert!(st == 200 || st == 204, "{change:?}: {st} {b}");
    // Typed at once, before the server has said anything: it must not run.
    let marker = std::path::Path::new(&dir).join("typed-after");
    type_line(&mut term, &format!("touch {}", marker.display())).await;

    let (code, reason) = close_frame(&mut term).await;
    match change {
        Change::Demote => {
            assert_eq!(code, 4403, "{reason}");
            assert!(
                reason.contains("operator") && reason.contains("viewer"),
                "{reason}"
            );
        }
        Change::Revoke | Change::Disable => assert_eq!(code, 4401, "{reason}"),
    }
    did_not_run(&s, &session, &tab, &marker).await;

    match change {
        // A viewer may still read the stream: it goes on.
        Change::Demote => {
            let (st, _) = s
                .post("/api/v1/tasks", Some(OPERATOR), task("R-2", "simple"))
                .await;
            assert_eq!(st, 201);
            let next = sse.next(WAIT).await.expect("the viewer's stream goes on");
            assert_eq!(next.event, "task.created");
            assert_eq!(next.data["task_id"], "R-2", "{:?}", next.data);
            // And may open a terminal no more.
            let refused = ws::try_connect(
                &s.base,
                &ws::path(&session, &tab),
                ws::Opts {
                    token: Some(&alice),
                    ..Default::default()
                },
            )
            .await;
            assert_eq!(refused.err(), Some(403));
        }
        Change::Revoke | Change::Disable => {
            assert!(stream_ends(&mut sse).await, "the stream ends");
            let (st, _) = s.get("/api/v1/tasks", Some(&alice)).await;
            assert_eq!(st, 401);
        }
    }
    s.stop().await;
}

e2e!(
    a_revoked_token_closes_its_terminal_and_ends_its_stream,
    |kind: Kind| async move { change_ends_terminal_and_stream(kind, Change::Revoke).await }
);

e2e!(
    a_disabled_user_is_closed_out_of_terminal_and_stream,
    |kind: Kind| async move { change_ends_terminal_and_stream(kind, Change::Disable).await }
);

e2e!(
    a_demoted_user_loses_the_terminal_and_keeps_reading,
    |kind: Kind| async move { change_ends_terminal_and_stream(kind, Change::Demote).await }
);

/// A worker with one claimed run: its run token.
async fn claimed_run(s: &Server, vtid: &str) -> String {
    let (st, b) = s
        .post("/api/v1/tasks", Some(OPERATOR), task(vtid, "simple"))
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, reg) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": "w-1", "capabilities": [], "max_concurrent": 1 }),
        )
        .await;
    assert_eq!(st, 200, "{reg}");
    let (st, claim) = s
        .post(
            &format!("/api/v1/worker/orchestrator/tasks/{vtid}/claim"),
            Some(OPERATOR),
            json!({ "worker_id": "w-1" }),
        )
        .await;
    assert_eq!(st, 200, "{claim}");
    let run_id = claim["run_id"].as_str().unwrap().to_owned();
    let (st, t) = s
        .post(
            &format!("/api/v1/runs/{run_id}/token"),
            Some(OPERATOR),
            json!({ "claim_token": claim["claim_token"] }),
        )
        .await;
    assert_eq!(st, 200, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

e2e!(
    a_long_poll_ends_when_its_token_is_revoked,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        let (token_id, alice) = person(&s, "alice", "viewer").await;
        let run_token = claimed_run(&s, "LP-1").await;
        let (st, r) = s
            .post(
                "/api/v1/input-requests",
                Some(&run_token),
                json!({ "prompt": "go on?" }),
            )
            .await;
        assert_eq!(st, 201, "{r}");
        let id = r["id"].as_str().unwrap().to_owned();
        let http = s.http.clone();
        let url = s.url(&format!("/api/v1/input-requests/{id}?wait=60"));
        let waiting = tokio::spawn(async move {
            let res = http.get(url).bearer_auth(alice).send().await.unwrap();
            let st = res.status().as_u16();
            (st, res.json::<Value>().await.unwrap_or_default())
        });
        // The poll is under way once the server holds it (no answer yet).
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "the long poll waits");
        let (st, _) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/tokens/{token_id}"),
                Some(OPERATOR),
                None,
            )
            .await;
        assert_eq!(st, 204);
        let (st, b) = tokio::time::timeout(WAIT, waiting)
            .await
            .expect("the long poll ends at once, not after its 60 s")
            .unwrap();
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (401, Some("unauthorized")),
            "{b}"
        );
        s.stop().await;
    }
);

e2e!(
    an_mcp_stream_ends_when_its_token_is_revoked,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        let (token_id, alice) = person(&s, "alice", "operator").await;
        let init = s
            .http
            .post(s.url("/mcp"))
            .bearer_auth(&alice)
            .header("accept", "application/json, text/event-stream")
            .json(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "rust-test", "version": "1"}}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(init.status(), 200);
        let session = init.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = init.text().await;
        let st = s
            .http
            .post(s.url("/mcp"))
            .bearer_auth(&alice)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(st, 202);
        // The session's stream of notifications from the server.
        let res = s
            .http
            .get(s.url("/mcp"))
            .bearer_auth(&alice)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let mut body = futures::StreamExt::boxed(res.bytes_stream());
        let open = tokio::time::timeout(
            Duration::from_millis(500),
            futures::StreamExt::next(&mut body),
        )
        .await;
        assert!(
            !matches!(open, Ok(None)),
            "the stream stays open while the token is good"
        );
        let (st, _) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/tokens/{token_id}"),
                Some(OPERATOR),
                None,
            )
            .await;
        assert_eq!(st, 204);
        let ended = tokio::time::timeout(WAIT, async {
            while let Some(Ok(_)) = futures::StreamExt::next(&mut body).await {}
        })
        .await;
        assert!(ended.is_ok(), "the MCP stream ends");
        s.stop().await;
    }
);

/// Types a line as the contract's `input` message; a socket the server
/// is closing may refuse it, which is no failure here.
async fn type_line(term: &mut ws::Term, line: &str) {
    use futures::SinkExt;
    let msg = json!({"type": "input", "data": format!("{line}\r")});
    let _ = term.ws.send(Message::Text(msg.to_string().into())).await;
}

/// Two nodes on one PostgreSQL schema: a token revoked through one node
/// ends the stream the other node serves (the change reaches it through
/// the event log, as every event does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_on_one_node_ends_a_stream_on_another() {
    let mut a = env_with_token(Kind::Postgres);
    let mut b = env_with_token(Kind::Postgres);
    for k in ["SHEPHERD_PG_SCHEMA", "SHEPHERD_DATABASE_URL"] {
        let v = a.vars[k].clone();
        b.set(k, &v);
    }
    a.set("SHEPHERD_NODE_ID", "node-a");
    b.set("SHEPHERD_NODE_ID", "node-b");
    let node_a = Server::start(&a).await;
    let node_b = Server::start(&b).await;
    let (token_id, alice) = person(&node_a, "alice", "viewer").await;
    let mut sse = SseClient::connect(
        &node_b.base,
        "/api/events?after=now&types=task.created",
        Some(&alice),
        None,
    )
    .await;
    let (st, _) = node_a
        .post("/api/v1/tasks", Some(OPERATOR), task("N-1", "simple"))
        .await;
    assert_eq!(st, 201);
    let seen = sse.next(WAIT).await.expect("node b's stream delivers");
    assert_eq!(seen.data["task_id"], "N-1");
    let (st, _) = node_a
        .call(
            Method::DELETE,
            &format!("/api/v1/tokens/{token_id}"),
            Some(OPERATOR),
            None,
        )
        .await;
    assert_eq!(st, 204);
    assert!(stream_ends(&mut sse).await, "node b's stream ends");
    node_b.stop().await;
    node_a.stop().await;
}
