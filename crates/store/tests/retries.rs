//! Retries and delayed tasks, on both databases: a failed attempt comes back
//! after its backoff as a new run, a cancel is never retried, exhausted
//! attempts end `failed` with every reason, a lost claim uses an attempt,
//! and a task is not claimable before its `run_at`.
//!
//! Time is the store's own clock, fixed at [`T0`] and moved by the tests
//! (`Store::set_clock`): a backoff or a lease runs out exactly when the
//! test says, and no test sleeps.

mod common;

use serde_json::{json, Value};
use shepherd_core::event::EventFilter;
use shepherd_core::model::Task;
use shepherd_core::retry::RetryBackoff;
use shepherd_store::{Applied, Grant, LeaseRules, NewTask, Registration, RunFilter, Store};

use common::TestDb;

/// Where every test's clock starts (2026-01-01T00:00:00Z).
const T0: i64 = 1_767_225_600_000;

/// A store whose clock stands at [`T0`] until a test moves it.
async fn open_at_t0(db: &TestDb) -> Store {
    let store = db.open().await;
    store.set_clock(Some(T0));
    store
}

fn rules() -> LeaseRules {
    LeaseRules {
        ttl_ms: 3_600_000,
        heartbeat_timeout_ms: 300_000,
        not_before: 0,
        cancel_grace_ms: 30_000,
    }
}

async fn register(store: &Store, id: &str) {
    store
        .register_worker(Registration {
            worker_id: Some(id.into()),
            agent_id: "default".into(),
            worker_type: "builtin".into(),
            max_concurrent: 1,
            ..Default::default()
        })
        .await
        .unwrap();
}

fn task(vtid: &str, max_attempts: Option<i64>, initial_ms: i64) -> NewTask {
    NewTask {
        vtid: Some(vtid.into()),
        title: format!("Task {vtid}"),
        spec: "Do the thing.".into(),
        dispatch: true,
        max_attempts,
        retry_backoff: Some(RetryBackoff {
            initial_ms,
            max_ms: initial_ms.max(1000),
        }),
        ..Default::default()
    }
}

async fn report(store: &Store, g: &Grant, event: &str, message: &str, metadata: Value) -> Task {
    let applied = store
        .progress(
            &g.claim.worker_id,
            &g.task.vtid,
            Some(g.claim_token.clone()),
            event,
            Some(message.into()),
            metadata,
            None,
            rules(),
        )
        .await
        .unwrap();
    match applied {
        Applied::Moved { task, .. } => task,
        Applied::Rejected { task, .. } => panic!("rejected in {}", task.state),
    }
}

/// Moves the clock to `vtid`'s `run_at` and claims it there; one
/// millisecond earlier it is refused as not due.
async fn claim_when_due(store: &Store, worker: &str, vtid: &str) -> Grant {
    let (d, _) = store.task(vtid, 0).await.unwrap();
    let run_at = d
        .task
        .run_at
        .expect("a task waiting for its retry has a run_at");
    store.set_clock(Some(run_at - 1));
    let early = store.claim_task(worker, vtid, rules()).await.unwrap_err();
    assert_eq!(
        early.code, "task_not_due",
        "{vtid} claimed before its run_at"
    );
    store.set_clock(Some(run_at));
    store
        .claim_task(worker, vtid, rules())
        .await
        .unwrap_or_else(|e| panic!("claim of {vtid} at its run_at: {e:?}"))
}

/// Moves the clock past the heartbeat timeout of a worker last heard from
/// at `last_heard` and sweeps: the claim it held expires then, not a
/// millisecond earlier.
async fn expire_claims(store: &Store, last_heard: i64) {
    let timeout = rules().heartbeat_timeout_ms;
    store.set_clock(Some(last_heard + timeout));
    assert_eq!(
        store.sweep(rules()).await.unwrap().expired,
        0,
        "expired early"
    );
    store.set_clock(Some(last_heard + timeout + 1));
    assert_eq!(store.sweep(rules()).await.unwrap().expired, 1);
}

async fn count_events(store: &Store, vtid: &str, kind: &str) -> usize {
    let f = EventFilter {
        task_id: Some(vtid.into()),
        ..Default::default()
    };
    store
        .read_events(0, &f, 1000)
        .await
        .unwrap()
        .events
        .iter()
        .filter(|e| e.kind == kind)
        .count()
}

async fn runs_of(store: &Store, vtid: &str) -> Vec<shepherd_core::model::Run> {
    let shepherd_store::Page {
        items: mut runs, ..
    } = store
        .list_runs(RunFilter {
            vtid: Some(vtid.into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    runs.sort_by_key(|r| r.attempt);
    runs
}

contract!(fails_first_succeeds_second, |db: TestDb| async move {
    let store = open_at_t0(&db).await;
    register(&store, "w1").await;
    store.create_task(task("R-1", Some(2), 300)).await.unwrap();
    let g1 = store.claim_task("w1", "R-1", rules()).await.unwrap();
    report(&store, &g1, "worker.execution.started", "go", json!({})).await;
    let t = report(
        &store,
        &g1,
        "worker.execution.failed",
        "exit code 1: flaky network",
        json!({}),
    )
    .await;
    assert_eq!(
        t.state, "pending",
        "a failed attempt with attempts left waits"
    );
    assert_eq!(t.failures.len(), 1);
    assert!(t.run_at.is_some());
    assert_eq!(count_events(&store, "R-1", "task.retry_scheduled").await, 1);
    // Not before the backoff (150 to 300 ms): neither listed nor claimable.
    assert!(store.pending_tasks("w1", 10).await.unwrap().is_empty());
    let early = store.claim_task("w1", "R-1", rules()).await.unwrap_err();
    assert_eq!(early.code, "task_not_due");

    let g2 = claim_when_due(&store, "w1", "R-1").await;
    assert_ne!(g2.claim.run_id, g1.claim.run_id);
    assert_eq!(g2.task.attempts, 2);
    assert_eq!(g2.task.run_at, None);
    report(&store, &g2, "worker.execution.started", "go", json!({})).await;
    let t = report(&store, &g2, "worker.execution.completed", "ok", json!({})).await;
    assert_eq!(t.state, "done");
    let runs = runs_of(&store, "R-1").await;
    assert_eq!(
        runs.iter()
            .map(|r| (r.attempt, r.status.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "failed"), (2, "done")]
    );
});

contract!(cancelled_is_not_retried, |db: TestDb| async move {
    let store = open_at_t0(&db).await;
    register(&store, "w1").await;
    store.create_task(task("R-2", Some(3), 0)).await.unwrap();
    let g = store.claim_task("w1", "R-2", rules()).await.unwrap();
    store.cancel_task("R-2", None).await.unwrap();
    let t = report(
        &store,
        &g,
        "worker.execution.cancelled",
        "stopped",
        json!({}),
    )
    .await;
    assert_eq!(t.state, "cancelled");
    // A task being cancelled whose run then fails is not retried either.
    store.create_task(task("R-3", Some(3), 0)).await.unwrap();
    let g = store.claim_task("w1", "R-3", rules()).await.unwrap();
    store.cancel_task("R-3", None).await.unwrap();
    let t = report(&store, &g, "worker.execution.failed", "killed", json!({})).await;
    assert_eq!(t.state, "failed");
    for vtid in ["R-2", "R-3"] {
        assert_eq!(count_events(&store, vtid, "task.retry_scheduled").await, 0);
        assert_eq!(runs_of(&store, vtid).await.len(), 1);
    }
});

contract!(
    exhausted_attempts_fail_with_every_reason,
    |db: TestDb| async move {
        let store = open_at_t0(&db).await;
        register(&store, "w1").await;
        store.create_task(task("R-4", Some(2), 0)).await.unwrap();
        let g = store.claim_task("w1", "R-4", rules()).await.unwrap();
        let t = report(
            &store,
            &g,
            "worker.execution.failed",
            "first: rate limited",
            json!({}),
        )
        .await;
        assert_eq!(t.state, "pending");
        let g = claim_when_due(&store, "w1", "R-4").await;
        let t = report(
            &store,
            &g,
            "worker.execution.failed",
            "second: timed out after 5s",
            json!({}),
        )
        .await;
        assert_eq!(t.state, "failed");
        let (d, _) = store.task("R-4", 10).await.unwrap();
        assert_eq!(d.task.state, "failed");
        assert_eq!(
            d.task
                .failures
                .iter()
                .map(|f| (f.attempt, f.reason.as_str()))
                .collect::<Vec<_>>(),
            vec![
                (1, "first: rate limited"),
                (2, "second: timed out after 5s")
            ]
        );
        assert_eq!(count_events(&store, "R-4", "task.retry_scheduled").await, 1);
        // A failure the worker marks final is not retried.
        store.create_task(task("R-5", Some(5), 0)).await.unwrap();
        let g = store.claim_task("w1", "R-5", rules()).await.unwrap();
        let t = report(
            &store,
            &g,
            "worker.execution.failed",
            "exit code 2",
            json!({ "retryable": false }),
        )
        .await;
        assert_eq!(t.state, "failed");
        assert_eq!(t.failures.len(), 1);
    }
);

contract!(lost_claim_uses_an_attempt, |db: TestDb| async move {
    let store = open_at_t0(&db).await;
    register(&store, "w1").await;
    store.create_task(task("R-6", Some(2), 0)).await.unwrap();
    store.claim_task("w1", "R-6", rules()).await.unwrap();
    // The worker falls silent after its claim.
    expire_claims(&store, T0).await;
    let (d, _) = store.task("R-6", 10).await.unwrap();
    assert_eq!(d.task.state, "pending");
    assert_eq!(d.task.failures.len(), 1);
    assert!(d.task.failures[0].reason.starts_with("claim lost"));
    assert_eq!(count_events(&store, "R-6", "task.retry_scheduled").await, 1);
    // The worker comes back, claims the second attempt and falls silent
    // again: that attempt is lost too, and attempts are used up.
    let (d, _) = store.task("R-6", 0).await.unwrap();
    let back = d.task.run_at.expect("the retry waits for its run_at");
    store.set_clock(Some(back));
    store.heartbeat("w1", rules()).await.unwrap();
    claim_when_due(&store, "w1", "R-6").await;
    expire_claims(&store, back).await;
    let (d, _) = store.task("R-6", 10).await.unwrap();
    assert_eq!(d.task.state, "failed");
    assert_eq!(d.task.failures.len(), 2);
});

contract!(delayed_task_waits_for_run_at, |db: TestDb| async move {
    let store = open_at_t0(&db).await;
    register(&store, "w1").await;
    let run_at = T0 + 400;
    let mut t = task("R-7", None, 0);
    t.retry_backoff = None;
    t.run_at = Some(run_at);
    let created = store.create_task(t).await.unwrap();
    assert_eq!(created.run_at, Some(run_at));
    assert!(store.pending_tasks("w1", 10).await.unwrap().is_empty());
    let early = store.claim_task("w1", "R-7", rules()).await.unwrap_err();
    assert_eq!(early.code, "task_not_due");
    // Still not a millisecond before its run_at; then in the worker's queue.
    store.set_clock(Some(run_at - 1));
    assert!(store.pending_tasks("w1", 10).await.unwrap().is_empty());
    store.set_clock(Some(run_at));
    let pending = store.pending_tasks("w1", 10).await.unwrap();
    assert_eq!(
        pending.iter().map(|t| t.vtid.as_str()).collect::<Vec<_>>(),
        ["R-7"]
    );
    store.claim_task("w1", "R-7", rules()).await.unwrap();
});

contract!(
    agent_default_policy_applies_to_new_tasks,
    |db: TestDb| async move {
        let store = open_at_t0(&db).await;
        store
            .upsert_agent("coder", "builtin", vec![], None)
            .await
            .unwrap();
        store
            .set_agent_retry(
                "coder",
                Some(3),
                Some(RetryBackoff {
                    initial_ms: 5,
                    max_ms: 50,
                }),
            )
            .await
            .unwrap();
        let t = store
            .create_task(NewTask {
                title: "inherits".into(),
                agent_id: Some("coder".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(t.max_attempts, Some(3));
        assert_eq!(t.retry_backoff.map(|b| b.max_ms), Some(50));
        let own = store
            .create_task(NewTask {
                title: "own".into(),
                agent_id: Some("coder".into()),
                max_attempts: Some(1),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(own.max_attempts, Some(1));
        let bad = store
            .create_task(NewTask {
                title: "bad".into(),
                max_attempts: Some(0),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(bad.code, "invalid_max_attempts");
    }
);

// A created task is answered from what the creation wrote, not read back:
// the answer must be exactly what a read of the task gives, whatever the
// creation filled in (a NUL in the text, the agent's default policy, a
// channel, a delay, a generated id).
contract!(
    a_created_task_is_what_reading_it_gives,
    |db: TestDb| async move {
        let store = open_at_t0(&db).await;
        store
            .upsert_agent("agent-a", "builtin", vec!["gpu".into()], Some(2))
            .await
            .unwrap();
        store
            .set_agent_retry(
                "agent-a",
                Some(3),
                Some(RetryBackoff {
                    initial_ms: 500,
                    max_ms: 2000,
                }),
            )
            .await
            .unwrap();
        let variants = [
            NewTask {
                title: "with a NUL \0 inside".into(),
                spec: "spec \0 too".into(),
                capabilities: vec!["gpu".into(), "linux".into()],
                agent_id: Some("agent-a".into()),
                channel_id: Some("chan-1".into()),
                priority: -7,
                run_at: Some(4_102_444_800_000),
                dispatch: false,
                ..Default::default()
            },
            NewTask {
                vtid: Some("R-CREATED".into()),
                title: "dispatched at once".into(),
                spec: "go".into(),
                workflow: Some("autopilot".into()),
                dispatch: true,
                ..task("unused", Some(4), 100)
            },
            NewTask {
                title: "plain".into(),
                spec: String::new(),
                ..Default::default()
            },
        ];
        for new in variants {
            let created = store.create_task(new).await.unwrap();
            let (read, _) = store.task(&created.vtid, 0).await.unwrap();
            assert_eq!(created, read.task);
        }
    }
);
