//! The event stream under pressure: a consumer too slow for the live feed
//! is told to resync and resumes exactly; a cursor older than retention gets
//! one `resync`; the worker registry contract's `worker_events` shape with a stuck worker.

mod common;

use std::time::Duration;

use serde_json::json;
use shepherd_core::event::{EventRefs, NewEvent};
use shepherd_protocol::{
    Resync, WireEvent, WorkerEventsQuery, WorkerEventsResponse, WorkersSnapshot,
};

use common::{task, Env, Frame, Kind, Server, SseClient, MARKER_TYPE};

/// A `resync` frame's data.
fn resync_of(f: &Frame) -> Resync {
    serde_json::from_value(f.data.clone())
        .unwrap_or_else(|e| panic!("no resync in the frame ({e}): {f:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_gets_resync_and_resumes_without_a_gap() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let mut slow = SseClient::connect(&s.base, "/api/events?after=now", None, None).await;
    let mut fast = SseClient::connect(
        &s.base,
        &format!("/api/events?after=now&types={MARKER_TYPE}"),
        None,
        None,
    )
    .await;
    // Another writer floods the log while the slow client reads nothing.
    let writer = shepherd_store::Store::open(&env.store_config())
        .await
        .unwrap();
    let payload = "x".repeat(200);
    for batch in 0..40 {
        let events: Vec<NewEvent> = (0..2000)
            .map(|i| {
                NewEvent::new(
                    "test.flood",
                    EventRefs::default(),
                    json!({ "batch": batch, "i": i, "pad": payload }),
                )
            })
            .collect();
        writer.append_events(events).await.unwrap();
    }
    writer
        .append_events(vec![NewEvent::new(
            MARKER_TYPE,
            EventRefs::default(),
            json!({}),
        )])
        .await
        .unwrap();
    // Other consumers are not held back.
    let marker = fast
        .next(Duration::from_secs(20))
        .await
        .expect("the fast consumer got its event");
    assert_eq!(marker.event, MARKER_TYPE);
    // The slow one drains what was buffered, then hears resync and the stream
    // ends. On a starved machine the server may instead find it still
    // draining when it fell out of the ring (its socket buffers not yet
    // full): then it is caught up from the log, and must get every event
    // through the marker, in order, with no gap. (Which verdict a stalled
    // connection gets is pinned by the unit tests in api/src/events.rs.)
    let mut last_id = None;
    let mut resync = None;
    while let Some(f) = slow.next(Duration::from_secs(10)).await {
        if f.event == "resync" {
            resync = Some(f);
            break;
        }
        if let (Some(prev), Some(id)) = (last_id, f.id) {
            assert_eq!(id, prev + 1, "no gap before the resync");
        }
        last_id = f.id;
        if f.event == MARKER_TYPE {
            break;
        }
    }
    let Some(resync) = resync else {
        let last = last_id.expect("some events");
        assert_eq!(
            Some(last),
            writer.head().await.ok(),
            "caught up instead of told to resync: every event through the marker"
        );
        writer.close();
        s.stop().await;
        return;
    };
    assert_eq!(resync_of(&resync).reason, "slow_consumer");
    assert!(
        slow.next(Duration::from_millis(500)).await.is_none(),
        "disconnected after resync"
    );
    // Resuming from its cursor continues exactly where it stopped.
    let last = last_id.expect("some events before the resync");
    let mut again = SseClient::connect(&s.base, "/api/events", None, Some(last)).await;
    let f = again.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(f.id, Some(last + 1));
    writer.close();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_older_than_retention_gets_one_resync() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    for i in 0..3 {
        s.post("/api/v1/tasks", None, task(&format!("R-{i}"), "simple"))
            .await;
    }
    let store = shepherd_store::Store::open(&env.store_config())
        .await
        .unwrap();
    let removed = store
        .prune_events(shepherd_store::now_ms() + 60_000)
        .await
        .unwrap();
    assert!(removed > 0);
    store.close();
    s.post("/api/v1/tasks", None, task("R-new", "simple")).await;
    let mut sse =
        SseClient::connect(&s.base, "/api/events?types=task.created", None, Some(1)).await;
    let first = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.event, "resync");
    assert_eq!(resync_of(&first).reason, "cursor_expired");
    let next = sse.next(Duration::from_secs(5)).await.unwrap();
    let created: WireEvent = serde_json::from_value(next.data.clone()).unwrap();
    assert_eq!(
        (next.event.as_str(), created.event.refs.task_id.as_deref()),
        ("task.created", Some("R-new"))
    );
    assert!(
        sse.next(Duration::from_millis(300)).await.is_none(),
        "only one resync"
    );
    s.stop().await;
}

e2e!(
    worker_events_has_the_contract_shape_and_finds_stuck_workers,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        for w in ["busy", "lazy", "gone"] {
            s.post(
                "/api/v1/worker/orchestrator/register",
                None,
                json!({ "worker_id": w }),
            )
            .await;
        }
        s.post("/api/v1/tasks", None, task("WE-1", "simple")).await;
        let (st, _) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/WE-1/claim",
                None,
                json!({ "worker_id": "busy" }),
            )
            .await;
        assert_eq!(st, 200);
        s.post(
            "/api/v1/worker/orchestrator/deregister",
            None,
            json!({ "worker_id": "gone" }),
        )
        .await;
        let (st, we) = s
        .get("/api/v1/worker_events?include_summary=true&include_snapshot=true&stale_threshold_minutes=0", None)
        .await;
        assert_eq!(st, 200, "{we}");
        // The shape itself: every key on the wire, read raw (a typed read
        // would take an absent `snapshot` or `summary` for `None`).
        for key in ["events", "count", "summary", "snapshot", "next_cursor"] {
            assert!(we.get(key).is_some(), "missing {key}: {we}");
        }
        for e in we["events"].as_array().unwrap() {
            for key in ["id", "ts", "type", "worker_id", "data"] {
                assert!(e.get(key).is_some(), "event lacks {key}: {e}");
            }
        }
        let we: WorkerEventsResponse = serde_json::from_value(we).unwrap();
        let events = &we.events;
        assert_eq!(we.count, events.len());
        for e in events {
            assert!([
                "snapshot",
                "worker_started",
                "worker_idle",
                "worker_active",
                "worker_closed"
            ]
            .contains(&e.kind.as_str()));
        }
        let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "stable, increasing ids"
        );
        let summary = we.summary.as_ref().expect("a summary");
        assert_eq!(summary.started, vec!["busy", "lazy", "gone"]);
        assert_eq!(summary.active, vec!["busy"]);
        assert_eq!(summary.closed, vec!["gone"]);
        assert_eq!(
            summary.stuck,
            vec!["busy"],
            "active with no progress past the threshold"
        );
        assert_eq!(
            summary.last_event_ts.as_deref(),
            Some(events.last().unwrap().ts.as_str())
        );
        // A snapshot with its time and its list of workers.
        let snapshot = we.snapshot.clone().flatten().expect("a snapshot");
        let _: WorkersSnapshot =
            serde_json::from_value(snapshot.data).expect("the snapshot's workers");
        // With a generous threshold nobody is stuck.
        let client = s.client(None);
        let calm = client
            .worker_events(&WorkerEventsQuery {
                include_summary: Some(true),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(calm.summary.expect("a summary").stuck, Vec::<String>::new());
        // Polling by cursor: nothing twice, nothing missed.
        let cursor = we.next_cursor;
        s.post(
            "/api/v1/worker/orchestrator/deregister",
            None,
            json!({ "worker_id": "lazy" }),
        )
        .await;
        let more = client
            .worker_events(&WorkerEventsQuery {
                since: Some(cursor.to_string()),
                ..Default::default()
            })
            .await
            .unwrap();
        let types: Vec<&str> = more.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(types, vec!["worker_closed"]);
        // ISO time, inclusive.
        let ts = &events[0].ts;
        let (st, since) = s
            .get_as::<WorkerEventsResponse>(
                &format!("/api/v1/worker_events?since={ts}&limit=1"),
                None,
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(since.events[0].ts, *ts);
        s.stop().await;
    }
);
