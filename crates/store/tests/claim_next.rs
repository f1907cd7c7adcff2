//! Claim-next and batched progress, on both databases: the best eligible
//! tasks are claimed in one call (priority, then age; agent and
//! capabilities respected), concurrent claimers on two nodes never share a
//! task, and each report of a batch is applied or refused on its own.

mod common;

use std::collections::HashSet;

use serde_json::json;
use shepherd_store::{Applied, LeaseRules, NewTask, ProgressReport, Registration, Store};

use common::TestDb;

fn rules() -> LeaseRules {
    LeaseRules {
        ttl_ms: 3_600_000,
        heartbeat_timeout_ms: 300_000,
        not_before: 0,
        cancel_grace_ms: 30_000,
    }
}

async fn register(store: &Store, id: &str, agent: &str, caps: &[&str], max: i64) {
    store
        .register_worker(Registration {
            worker_id: Some(id.into()),
            agent_id: agent.into(),
            worker_type: "builtin".into(),
            capabilities: caps.iter().map(|c| c.to_string()).collect(),
            max_concurrent: max,
            ..Default::default()
        })
        .await
        .unwrap();
}

fn task(vtid: &str, priority: i64) -> NewTask {
    NewTask {
        vtid: Some(vtid.into()),
        title: format!("Task {vtid}"),
        spec: format!("# {vtid}"),
        priority,
        workflow: Some("simple".into()),
        dispatch: true,
        ..Default::default()
    }
}

fn report(vtid: &str, token: Option<&str>, event: &str) -> ProgressReport {
    ProgressReport {
        vtid: vtid.into(),
        claim_token: token.map(str::to_owned),
        event: event.into(),
        message: None,
        metadata: json!({}),
        result: None,
    }
}

/// The types of `vtid`'s events, oldest first.
async fn kinds_of(store: &Store, vtid: &str) -> Vec<String> {
    let f = shepherd_core::event::EventFilter {
        task_id: Some(vtid.to_owned()),
        ..Default::default()
    };
    let page = store.read_events(0, &f, 100).await.unwrap();
    page.events.into_iter().map(|e| e.kind).collect()
}

contract!(
    claim_next_takes_the_best_eligible_tasks,
    |db: TestDb| async move {
        let store = db.open().await;
        register(&store, "w", "default", &["rust"], 3).await;
        assert!(
            store.claim_next("w", 1, rules()).await.unwrap().is_empty(),
            "nothing eligible: no claims, no error"
        );
        store.create_task(task("LOW", 1)).await.unwrap();
        store.create_task(task("HIGH-1", 5)).await.unwrap();
        store.create_task(task("HIGH-2", 5)).await.unwrap();
        let mut other_agent = task("OTHER-AGENT", 9);
        other_agent.agent_id = Some("someone-else".into());
        store.create_task(other_agent).await.unwrap();
        let mut needs_go = task("NEEDS-GO", 9);
        needs_go.capabilities = vec!["go".into()];
        store.create_task(needs_go).await.unwrap();
        let mut draft = task("DRAFT", 9);
        draft.dispatch = false;
        store.create_task(draft).await.unwrap();

        let grants = store.claim_next("w", 2, rules()).await.unwrap();
        let got: Vec<&str> = grants.iter().map(|g| g.task.vtid.as_str()).collect();
        assert_eq!(got, vec!["HIGH-1", "HIGH-2"]);
        for g in &grants {
            assert_eq!(g.task.state, "claimed");
            assert!(g.claim_token.starts_with("sct_"));
            assert!(!g.claim.run_id.is_empty());
        }
        // One slot left: asking for two is refused, asking for one gets LOW.
        let err = store.claim_next("w", 2, rules()).await.unwrap_err();
        assert_eq!(err.code, "max_above_capacity");
        let err = store.claim_next("w", 0, rules()).await.unwrap_err();
        assert_eq!(err.code, "invalid_max");
        let last = store.claim_next("w", 1, rules()).await.unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].task.vtid, "LOW");
        // At capacity: any max is above it.
        let err = store.claim_next("w", 1, rules()).await.unwrap_err();
        assert_eq!(err.code, "max_above_capacity");
        let err = store.claim_next("ghost", 1, rules()).await.unwrap_err();
        assert_eq!(err.code, "worker_not_found");
        // A grant is a claim like any other: it fences progress.
        let done = store
            .progress(
                "w",
                "LOW",
                Some(last[0].claim_token.clone()),
                "worker.execution.completed",
                None,
                json!({}),
                None,
                rules(),
            )
            .await
            .unwrap();
        assert!(matches!(done, Applied::Moved { ref task, .. } if task.state == "done"));
        store.close();
    }
);

contract!(
    claim_next_on_two_nodes_never_shares_a_task,
    |db: TestDb| async move {
        const TASKS: usize = 60;
        let a = db.open().await;
        let b = db.open().await;
        for w in 0..6 {
            register(&a, &format!("w{w}"), "default", &[], 4).await;
        }
        for n in 0..TASKS {
            a.create_task(task(&format!("T-{n:03}"), 1)).await.unwrap();
        }
        // Six workers, three on each node, claim and complete until the queue is empty.
        let mut handles = Vec::new();
        for w in 0..6 {
            let store = if w % 2 == 0 { a.clone() } else { b.clone() };
            handles.push(tokio::spawn(async move {
                let id = format!("w{w}");
                let mut mine = Vec::new();
                loop {
                    let grants = store.claim_next(&id, 4, rules()).await.unwrap();
                    if grants.is_empty() {
                        break;
                    }
                    let reports = grants
                        .iter()
                        .map(|g| {
                            report(
                                &g.task.vtid,
                                Some(&g.claim_token),
                                "worker.execution.completed",
                            )
                        })
                        .collect();
                    for r in store.progress_batch(&id, reports, rules()).await.unwrap() {
                        r.unwrap();
                    }
                    mine.extend(grants.into_iter().map(|g| g.task.vtid));
                }
                mine
            }));
        }
        let mut seen = HashSet::new();
        let mut total = 0;
        for h in handles {
            for vtid in h.await.unwrap() {
                total += 1;
                assert!(seen.insert(vtid.clone()), "{vtid} claimed twice");
            }
        }
        assert_eq!(total, TASKS);
        let shepherd_store::Page { total: done, .. } = a
            .list_tasks(shepherd_store::TaskFilter {
                state: Some("done".into()),
                limit: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(done, TASKS as i64);
        a.close();
        b.close();
    }
);

contract!(
    progress_batch_applies_each_report_on_its_own,
    |db: TestDb| async move {
        let store = db.open().await;
        register(&store, "w", "default", &[], 3).await;
        register(&store, "other", "default", &[], 1).await;
        for v in ["A", "B", "C"] {
            store.create_task(task(v, 1)).await.unwrap();
        }
        let grants = store.claim_next("w", 3, rules()).await.unwrap();
        let token = |v: &str| {
            grants
                .iter()
                .find(|g| g.task.vtid == v)
                .map(|g| g.claim_token.clone())
                .unwrap()
        };
        let (ta, tb, tc) = (token("A"), token("B"), token("C"));
        let results = store
            .progress_batch(
                "w",
                vec![
                    // Two reports on one task, applied in order.
                    report("A", Some(&ta), "worker.execution.started"),
                    report("A", Some(&ta), "worker.execution.completed"),
                    // A wrong token: refused, B unchanged.
                    report("B", Some("sct_wrong"), "worker.execution.completed"),
                    // Unknown to the workflow: refused.
                    report("C", Some(&tc), "worker.no.such.event"),
                    report("MISSING", Some(&tc), "worker.execution.completed"),
                    // Still applied after the refusals.
                    report("C", Some(&tc), "worker.execution.completed"),
                    // C is done now: the workflow refuses a second completion.
                    report("C", Some(&tc), "worker.execution.completed"),
                ],
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(results.len(), 7);
        let state = |i: usize| match &results[i] {
            Ok(Applied::Moved { task, .. }) => Ok(task.state.clone()),
            Ok(Applied::Rejected { .. }) => Err("rejected".to_owned()),
            Err(e) => Err(e.code.to_owned()),
        };
        assert_eq!(state(0), Ok("running".into()));
        assert_eq!(state(1), Ok("done".into()));
        assert_eq!(state(2), Err("claim_stale".into()));
        assert_eq!(state(3), Err("unknown_event".into()));
        assert_eq!(state(4), Err("task_not_found".into()));
        assert_eq!(state(5), Ok("done".into()));
        assert!(
            matches!(state(6), Err(ref c) if c == "claim_stale" || c == "rejected"),
            "{:?}",
            state(6)
        );
        let (b, _) = store.task("B", 0).await.unwrap();
        assert_eq!(b.task.state, "claimed", "a refused report changes nothing");
        // B's claim still works with the right token.
        let r = store
            .progress_batch(
                "w",
                vec![report("B", Some(&tb), "worker.execution.completed")],
                rules(),
            )
            .await
            .unwrap();
        assert!(matches!(&r[0], Ok(Applied::Moved { task, .. }) if task.state == "done"));
        // Sequence numbers are real: each applied report names its event.
        if let Ok(Applied::Moved { seq, .. }) = &r[0] {
            assert!(*seq > 0);
        }
        // Another worker reporting on w's claims is refused.
        let r = store
            .progress_batch(
                "other",
                vec![report("A", Some(&ta), "worker.execution.completed")],
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(r[0].as_ref().unwrap_err().code, "claim_stale");
        store.close();
    }
);

/// The claims released after `head`, in log order: each one's task and the
/// worker's claim count after it (`worker_active_claims`).
async fn releases_after(store: &Store, head: i64) -> Vec<(String, i64)> {
    let page = store
        .read_events(head, &shepherd_core::event::EventFilter::default(), 1_000)
        .await
        .unwrap();
    page.events
        .iter()
        .filter(|e| e.kind == shepherd_core::event::kind::CLAIM_RELEASED)
        .map(|e| {
            (
                e.refs.task_id.clone().unwrap_or_default(),
                e.data["worker_active_claims"].as_i64().unwrap(),
            )
        })
        .collect()
}

contract!(
    a_batch_counts_its_workers_claims_down_run_by_run,
    |db: TestDb| async move {
        // The reports of a batch share one read taken before the first of
        // them runs; each release must still carry the worker's claim count
        // after it (the worker registry contract derives `worker_idle` from the one that reaches
        // 0), not the count that read saw.
        let store = db.open().await;
        register(&store, "w", "default", &[], 4).await;
        for v in ["A", "B", "C", "D"] {
            store.create_task(task(v, 1)).await.unwrap();
        }
        let grants = store.claim_next("w", 4, rules()).await.unwrap();
        assert_eq!(grants.len(), 4);
        let token = |v: &str| {
            grants
                .iter()
                .find(|g| g.task.vtid == v)
                .map(|g| g.claim_token.clone())
                .unwrap()
        };
        let head = store.head().await.unwrap();
        let results = store
            .progress_batch(
                "w",
                vec![
                    report("A", Some(&token("A")), "worker.execution.completed"),
                    report("B", Some(&token("B")), "worker.execution.started"),
                    report("C", Some(&token("C")), "worker.execution.completed"),
                    report("D", Some("sct_wrong"), "worker.execution.completed"),
                    report("B", Some(&token("B")), "worker.execution.completed"),
                    report("D", Some(&token("D")), "worker.execution.completed"),
                ],
                rules(),
            )
            .await
            .unwrap();
        let codes: Vec<_> = results
            .iter()
            .map(|r| match r {
                Ok(Applied::Moved { task, .. }) => task.state.clone(),
                Ok(Applied::Rejected { .. }) => "rejected".to_owned(),
                Err(e) => e.code.to_owned(),
            })
            .collect();
        assert_eq!(
            codes,
            ["done", "running", "done", "claim_stale", "done", "done"]
        );
        let expected: Vec<(String, i64)> = [("A", 3), ("C", 2), ("B", 1), ("D", 0)]
            .iter()
            .map(|(v, n)| (v.to_string(), *n))
            .collect();
        assert_eq!(releases_after(&store, head).await, expected);
        let worker = store.worker("w").await.unwrap();
        assert_eq!(worker.active_claims, 0);
        // Claimed again and completed in a second batch: the count starts
        // from what the database holds now.
        store.create_task(task("E", 1)).await.unwrap();
        let g = store.claim_next("w", 4, rules()).await.unwrap();
        assert_eq!(g.len(), 1);
        let head = store.head().await.unwrap();
        store
            .progress_batch(
                "w",
                vec![report(
                    "E",
                    Some(&g[0].claim_token),
                    "worker.execution.completed",
                )],
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(releases_after(&store, head).await, [("E".to_owned(), 0)]);
        store.close();
    }
);

contract!(
    claim_next_waits_for_run_at_and_takes_retries,
    |db: TestDb| async move {
        let store = db.open().await;
        // The store's clock, moved by the test instead of waiting.
        let t0 = shepherd_store::now_ms();
        store.set_clock(Some(t0));
        register(&store, "w", "default", &[], 2).await;
        let mut later = task("LATER", 9);
        later.run_at = Some(t0 + 3_600_000);
        store.create_task(later).await.unwrap();
        let mut flaky = task("FLAKY", 1);
        flaky.max_attempts = Some(2);
        flaky.retry_backoff = Some(shepherd_core::retry::RetryBackoff {
            initial_ms: 200,
            max_ms: 1000,
        });
        store.create_task(flaky).await.unwrap();
        // The higher-priority task is not due: only FLAKY is claimed.
        let g = store.claim_next("w", 2, rules()).await.unwrap();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].task.vtid, "FLAKY");
        let r = store
            .progress_batch(
                "w",
                vec![report(
                    "FLAKY",
                    Some(&g[0].claim_token),
                    "worker.execution.failed",
                )],
                rules(),
            )
            .await
            .unwrap();
        assert!(
            matches!(&r[0], Ok(Applied::Moved { task, .. }) if task.state == "pending"),
            "{r:?}"
        );
        // Re-queued, but not before its backoff; then claimed again.
        let run_at = match &r[0] {
            Ok(Applied::Moved { task, .. }) => task.run_at.expect("a retry waits for its run_at"),
            other => panic!("{other:?}"),
        };
        assert!(run_at > t0, "a backoff of at least 100 ms");
        store.set_clock(Some(run_at - 1));
        assert!(store.claim_next("w", 1, rules()).await.unwrap().is_empty());
        store.set_clock(Some(run_at));
        let again = store.claim_next("w", 1, rules()).await.unwrap();
        assert_eq!(again.len(), 1, "the retry is claimed at its run_at");
        let again = again.into_iter().next().unwrap();
        assert_eq!(again.task.vtid, "FLAKY");
        assert_eq!(again.task.attempts, 2);
        let (later, _) = store.task("LATER", 0).await.unwrap();
        assert_eq!(later.task.state, "pending");
        store.close();
    }
);

contract!(
    claim_next_stops_at_the_agents_limit_and_records_each_grant,
    |db: TestDb| async move {
        let store = db.open().await;
        store
            .upsert_agent("capped", "builtin", vec![], Some(2))
            .await
            .unwrap();
        register(&store, "w", "capped", &[], 5).await;
        for n in 0..4 {
            let mut t = task(&format!("CAP-{n}"), 0);
            t.agent_id = Some("capped".into());
            store.create_task(t).await.unwrap();
        }
        // One call grants only as many as the agent's limit leaves room for.
        let grants = store.claim_next("w", 5, rules()).await.unwrap();
        assert_eq!(grants.len(), 2, "the agent runs at most 2");
        let runs: HashSet<_> = grants.iter().map(|g| g.claim.run_id.clone()).collect();
        assert_eq!(runs.len(), 2, "each grant is a run of its own");
        for g in &grants {
            assert_eq!(g.spec, format!("# {}", g.task.vtid), "the dispatched spec");
            assert_eq!(g.task.attempts, 1);
            // Every grant is recorded: its claim, its run, its state change.
            let kinds = kinds_of(&store, &g.task.vtid).await;
            // task.state_changed: once dispatched, once claimed.
            for (want, n) in [
                ("worker.claim.granted", 1),
                ("run.started", 1),
                ("task.state_changed", 2),
            ] {
                assert_eq!(
                    kinds.iter().filter(|k| *k == want).count(),
                    n,
                    "{want} once for {}: {kinds:?}",
                    g.task.vtid
                );
            }
        }
        let agents = store.list_agents().await.unwrap();
        let capped = agents.iter().find(|a| a.id == "capped").unwrap();
        assert_eq!(capped.running, 2);
        // At its limit the agent gets nothing more, and no error.
        assert!(store.claim_next("w", 3, rules()).await.unwrap().is_empty());
        // A finished run makes room for one more.
        let done = &grants[0];
        store
            .progress(
                "w",
                &done.task.vtid,
                Some(done.claim_token.clone()),
                "worker.execution.completed",
                None,
                json!({}),
                None,
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(store.claim_next("w", 3, rules()).await.unwrap().len(), 1);
    }
);

/// Rows a PostgreSQL `EXPLAIN ANALYZE` plan says it read from the scans
/// whose line contains `scan` (e.g. "on tasks t"): rows returned times
/// loops, plus the rows its filter removed.
fn rows_read(plan: &[String], scan: &str) -> u64 {
    let number_after = |line: &str, key: &str| -> u64 {
        line.split(key)
            .nth(1)
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut total = 0;
    let mut in_scan = false;
    for line in plan {
        if line.contains("->") || line.contains("(actual") {
            in_scan = line.contains(scan);
            if in_scan {
                total += number_after(line, " rows=") * number_after(line, " loops=").max(1);
            }
        } else if in_scan && line.contains("Rows Removed by") {
            total += number_after(line, ": ");
        }
    }
    total
}

contract!(
    claim_next_reads_about_its_limit_not_the_whole_queue,
    |db: TestDb| async move {
        // Autopilot tasks keep their dispatched state when claimed, so the
        // held ones stay in the ready index and must be skipped by their
        // active run: the hardest case for the eligibility read.
        const QUEUED: usize = 1_500;
        const HELD: i64 = 300;
        const LIMIT: i64 = 10;
        // Statistics are what a fresh deployment has: none yet. The store
        // would analyse the tasks table as it fills, and with statistics the
        // planner may rightly sort a table this small instead.
        let mut config = db.config();
        config.pg_analyze_growing_tables = false;
        let store = shepherd_store::Store::open(&config).await.unwrap();
        register(&store, "holder", "default", &[], HELD).await;
        register(&store, "picker", "default", &[], LIMIT).await;
        for n in 0..QUEUED {
            let mut t = task(&format!("Q-{n:04}"), 1);
            t.workflow = Some("autopilot".into());
            store.create_task(t).await.unwrap();
        }
        for _ in 0..HELD / 100 {
            assert_eq!(
                store
                    .claim_next("holder", 100, rules())
                    .await
                    .unwrap()
                    .len(),
                100
            );
        }
        let plan = store.explain_claim_next("picker", LIMIT).await.unwrap();
        let shown = plan.join("\n");
        match db.kind {
            common::Kind::Postgres => {
                let tasks = rows_read(&plan, "on tasks t");
                let runs = rows_read(&plan, "on runs c");
                let bound = 2 * (HELD + LIMIT) as u64;
                assert!(
                    tasks <= bound && runs <= bound,
                    "read {tasks} task rows and {runs} run rows for {LIMIT} tasks \
                     past {HELD} held ones (bound {bound} each):\n{shown}"
                );
            }
            common::Kind::Sqlite => {
                assert!(
                    shown.contains("tasks_ready") && !shown.contains("TEMP B-TREE"),
                    "not read in hand-out order from tasks_ready:\n{shown}"
                );
            }
        }
        // And what it finds is right: the oldest tasks nobody holds.
        let grants = store.claim_next("picker", LIMIT, rules()).await.unwrap();
        let got: Vec<String> = grants.into_iter().map(|g| g.task.vtid).collect();
        let want: Vec<String> = (HELD..HELD + LIMIT).map(|n| format!("Q-{n:04}")).collect();
        assert_eq!(got, want);
        store.close();
    }
);

contract!(
    reports_queued_together_each_see_what_the_ones_before_them_wrote,
    |db: TestDb| async move {
        // Eight workers each hold twelve claims and send every completion
        // twice at once, so the writer runs many reports in one transaction
        // and the duplicate often right behind its twin. On PostgreSQL
        // the writer reads each report's task for all of them at once;
        // a twin must still see its task completed, not the claim it read
        // before the first report ran.
        const WORKERS: usize = 8;
        const EACH: usize = 12;
        let store = db.open().await;
        for w in 0..WORKERS {
            register(&store, &format!("w{w}"), "default", &[], EACH as i64).await;
        }
        for n in 0..WORKERS * EACH {
            store
                .create_task(task(&format!("T-{n:03}"), 1))
                .await
                .unwrap();
        }
        let mut grants = Vec::new();
        for w in 0..WORKERS {
            let got = store
                .claim_next(&format!("w{w}"), EACH as i64, rules())
                .await
                .unwrap();
            assert_eq!(got.len(), EACH);
            grants.push(got);
        }
        let mut handles = Vec::new();
        for (w, held) in grants.into_iter().enumerate() {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let worker = format!("w{w}");
                let mut outcomes = Vec::new();
                for g in held {
                    let send = || {
                        store.progress(
                            &worker,
                            &g.task.vtid,
                            Some(g.claim_token.clone()),
                            "worker.execution.completed",
                            None,
                            json!({}),
                            None,
                            rules(),
                        )
                    };
                    let (a, b) = tokio::join!(send(), send());
                    outcomes.push((g.task.vtid.clone(), a, b));
                }
                outcomes
            }));
        }
        for h in handles {
            for (vtid, a, b) in h.await.unwrap() {
                let moved = [&a, &b]
                    .iter()
                    .filter(|r| matches!(r, Ok(Applied::Moved { .. })))
                    .count();
                let stale = [&a, &b]
                    .iter()
                    .filter(|r| matches!(r, Err(e) if e.code == "claim_stale"))
                    .count();
                assert_eq!(
                    (moved, stale),
                    (1, 1),
                    "{vtid}: one report completes it, its twin finds the claim gone: {a:?} / {b:?}"
                );
                let kinds = kinds_of(&store, &vtid).await;
                for (want, n) in [
                    ("worker.execution.completed", 1),
                    ("worker.claim.released", 1),
                    ("run.completed", 1),
                ] {
                    assert_eq!(
                        kinds.iter().filter(|k| *k == want).count(),
                        n,
                        "{vtid}: {want} in {kinds:?}"
                    );
                }
            }
        }
        // Every worker is idle again, and can take a new task.
        for w in 0..WORKERS {
            assert_eq!(
                store
                    .claim_next(&format!("w{w}"), EACH as i64, rules())
                    .await
                    .unwrap()
                    .len(),
                0
            );
        }
        if matches!(db.kind, common::Kind::Postgres) {
            assert!(
                store.prefetch_hits() > 0,
                "no report ran on a prefetched read: the test did not exercise it"
            );
        }
        store.close();
    }
);

contract!(
    claims_queued_together_respect_the_task_and_the_agents_limit,
    |db: TestDb| async move {
        // Sixteen workers of an agent limited to five runs all claim at
        // once: some of them the same task, the rest one task each. On
        // PostgreSQL the writer reads every claim's task and worker at
        // the start of their shared transaction; each claim must still
        // see the grants made before it in that transaction.
        const WORKERS: usize = 16;
        const LIMIT: i64 = 5;
        let store = db.open().await;
        store
            .upsert_agent("capped", "builtin", vec![], Some(LIMIT))
            .await
            .unwrap();
        for w in 0..WORKERS {
            register(&store, &format!("w{w}"), "capped", &[], 2).await;
        }
        for n in 0..WORKERS {
            let mut t = task(&format!("C-{n:02}"), 0);
            t.agent_id = Some("capped".into());
            store.create_task(t).await.unwrap();
        }
        let mut handles = Vec::new();
        for w in 0..WORKERS {
            let store = store.clone();
            // Workers 0..4 all want C-00; the others each their own task.
            let vtid = if w < 4 {
                "C-00".to_owned()
            } else {
                format!("C-{w:02}")
            };
            handles.push(tokio::spawn(async move {
                let r = store.claim_task(&format!("w{w}"), &vtid, rules()).await;
                (vtid, r)
            }));
        }
        let mut granted = Vec::new();
        for h in handles {
            let (vtid, r) = h.await.unwrap();
            match r {
                Ok(g) => granted.push(g.task.vtid),
                Err(e) => assert!(
                    ["already_claimed", "agent_at_capacity"].contains(&e.code),
                    "{vtid}: {e:?}"
                ),
            }
        }
        assert_eq!(
            granted.len(),
            LIMIT as usize,
            "the agent's limit, exactly: {granted:?}"
        );
        let zero = granted.iter().filter(|v| *v == "C-00").count();
        assert!(zero <= 1, "C-00 granted {zero} times");
        if matches!(db.kind, common::Kind::Postgres) {
            assert!(
                store.prefetch_hits() > 0,
                "no claim ran on a prefetched read: the test did not exercise it"
            );
        }
        store.close();
    }
);
