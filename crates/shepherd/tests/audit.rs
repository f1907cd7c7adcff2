//! The audit trail end to end, on both stores: every event names who made
//! the change (`actor`): a user by name (the bootstrap token as `admin`), a
//! worker as `worker:<id>`, the server's own loops as `system`; the event
//! page and the stream filter by it, and answers to agents' requests name
//! who answered.

mod common;

use std::time::Duration;

use serde_json::{json, Value};
use shepherd_protocol as p;

use common::{task, Env, Kind, Server, SseClient, OPERATOR};

fn code(b: &Value) -> &str {
    b["error"]["code"].as_str().unwrap_or_default()
}

/// The events of `path`'s page as (type, actor), oldest first.
async fn actors(s: &Server, path: &str) -> Vec<(String, Option<String>)> {
    let (st, page) = s.get_as::<p::EventPage>(path, Some(OPERATOR)).await;
    assert_eq!(st, 200);
    page.events
        .into_iter()
        .map(|e| (e.event.kind, e.event.refs.actor))
        .collect()
}

fn actor_of<'a>(events: &'a [(String, Option<String>)], kind: &str) -> Option<&'a str> {
    events
        .iter()
        .find(|(k, _)| k == kind)
        .and_then(|(_, a)| a.as_deref())
}

e2e!(
    every_change_names_its_actor_and_reads_filter_by_it,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.set("SHEPHERD_TOKEN", OPERATOR)
            .set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "1")
            .set("SHEPHERD_SWEEP_INTERVAL_SECS", "1");
        let s = Server::start(&env).await;

        // alice, an operator with a personal token.
        let (st, _) = s
            .post(
                "/api/v1/users",
                Some(OPERATOR),
                json!({ "name": "alice", "role": "operator" }),
            )
            .await;
        assert_eq!(st, 201);
        let (st, t) = s
            .post_as::<p::CreatedToken>(
                "/api/v1/tokens",
                Some(OPERATOR),
                json!({ "name": "laptop", "user": "alice" }),
            )
            .await;
        assert_eq!(st, 201);
        let alice = t.token;

        // Someone follows alice's changes from the start of the log.
        let mut live = SseClient::connect(
            &s.base,
            "/api/events?actor=alice&after=0",
            Some(OPERATOR),
            None,
        )
        .await;

        // The bootstrap token creates A-1; alice creates A-2 and cancels A-1.
        assert_eq!(
            s.post("/api/v1/tasks", Some(OPERATOR), task("A-1", "simple"))
                .await
                .0,
            201
        );
        assert_eq!(
            s.post("/api/v1/tasks", Some(&alice), task("A-2", "simple"))
                .await
                .0,
            201
        );
        let (st, b) = s
            .post("/api/v1/tasks/A-1/cancel", Some(&alice), json!({}))
            .await;
        assert_eq!(st, 200, "{b}");

        let a1 = actors(&s, "/api/v1/events?task_id=A-1&limit=100").await;
        assert_eq!(actor_of(&a1, "task.created"), Some("admin"), "{a1:?}");
        assert_eq!(
            actor_of(&a1, "task.cancel_requested"),
            Some("alice"),
            "{a1:?}"
        );
        let a2 = actors(&s, "/api/v1/events?task_id=A-2&limit=100").await;
        assert_eq!(actor_of(&a2, "task.created"), Some("alice"), "{a2:?}");

        // A worker's claim is the worker's; its lapsed lease, the server's.
        let (st, reg) = s
            .post(
                "/api/v1/worker/orchestrator/register",
                Some(OPERATOR),
                json!({ "worker_id": "w-1", "capabilities": [], "max_concurrent": 1 }),
            )
            .await;
        assert_eq!(st, 200, "{reg}");
        let worker = reg["worker_token"].as_str().unwrap().to_owned();
        let (st, claim) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/A-2/claim",
                Some(&worker),
                json!({ "worker_id": "w-1" }),
            )
            .await;
        assert_eq!(
            (st, claim["claimed"].as_bool()),
            (200, Some(true)),
            "{claim}"
        );
        let w = actors(&s, "/api/v1/events?worker_id=w-1&limit=100").await;
        assert_eq!(actor_of(&w, "worker.registered"), Some("admin"), "{w:?}");
        assert_eq!(
            actor_of(&w, "worker.claim.granted"),
            Some("worker:w-1"),
            "{w:?}"
        );
        let expired =
            shepherd_testkit::wait_for("the lapsed lease", Duration::from_secs(30), || async {
                let w = actors(
                    &s,
                    "/api/v1/events?worker_id=w-1&types=worker.claim.expired",
                )
                .await;
                w.first().cloned()
            })
            .await;
        assert_eq!(expired.1.as_deref(), Some("system"));

        // The page filtered by actor holds alice's changes and no one else's.
        let mine = actors(&s, "/api/v1/events?actor=alice&limit=1000").await;
        let kinds: Vec<&str> = mine.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            kinds.contains(&"task.created") && kinds.contains(&"task.cancel_requested"),
            "{mine:?}"
        );
        assert!(
            mine.iter().all(|(_, a)| a.as_deref() == Some("alice")),
            "{mine:?}"
        );
        let workers = actors(&s, "/api/v1/events?actor=worker:w-1&limit=1000").await;
        assert!(
            !workers.is_empty()
                && workers
                    .iter()
                    .all(|(_, a)| a.as_deref() == Some("worker:w-1"))
        );
        assert!(actors(&s, "/api/v1/events?actor=nobody").await.is_empty());

        // And so does the stream.
        let mut streamed = Vec::new();
        while streamed.len() < mine.len() {
            let f = live
                .next(Duration::from_secs(10))
                .await
                .expect("alice's events, live");
            let e: p::WireEvent = serde_json::from_value(f.data.clone()).unwrap();
            assert_eq!(e.event.refs.actor.as_deref(), Some("alice"), "{}", f.data);
            streamed.push(e.event.kind);
        }
        let expected: Vec<String> = mine.into_iter().map(|(k, _)| k).collect();
        assert_eq!(streamed, expected);

        // `system`, `timeout`, `run_ended` are the server's names in the
        // audit trail (actors, `answered_by`): no user may take one.
        for name in ["system", "timeout", "run_ended", "operator"] {
            let (st, b) = s
                .post(
                    "/api/v1/users",
                    Some(OPERATOR),
                    json!({ "name": name, "role": "viewer" }),
                )
                .await;
            assert_eq!((st, code(&b)), (422, "reserved_user_name"), "{name}: {b}");
        }
        let (st, b) = s.get("/api/v1/users", Some(OPERATOR)).await;
        assert_eq!(st, 200, "{b}");
        assert!(!b.to_string().contains("\"timeout\""), "{b}");
    }
);
