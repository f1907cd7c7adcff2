//! The task queue and worker connector (the connector contract), on both databases:
//! the whole flow, atomic claims, expiry, fencing and eligibility rules.

mod common;

use serde_json::json;
use shepherd_core::event::EventFilter;
use shepherd_core::transcript::{ActionContent, TranscriptStep};
use shepherd_core::usage::Usage;
use shepherd_store::{Applied, Clock, LeaseRules, NewTask, Registration, Store};

use common::TestDb;

fn rules() -> LeaseRules {
    LeaseRules {
        ttl_ms: 3_600_000,
        heartbeat_timeout_ms: 300_000,
        not_before: 0,
        cancel_grace_ms: 30_000,
    }
}

async fn register(store: &Store, id: &str, caps: &[&str]) -> String {
    let (_, token) = store
        .register_worker(Registration {
            worker_id: Some(id.into()),
            agent_id: "default".into(),
            worker_type: "builtin".into(),
            capabilities: caps.iter().map(|c| c.to_string()).collect(),
            max_concurrent: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    token
}

fn task(vtid: &str, workflow: &str) -> NewTask {
    NewTask {
        vtid: Some(vtid.into()),
        title: format!("Task {vtid}"),
        spec: format!("# {vtid}\nDo the thing."),
        priority: 1,
        workflow: Some(workflow.into()),
        dispatch: true,
        ..Default::default()
    }
}

async fn progress(
    store: &Store,
    worker: &str,
    vtid: &str,
    token: &str,
    event: &str,
) -> Result<Applied, shepherd_core::Error> {
    store
        .progress(
            worker,
            vtid,
            Some(token.into()),
            event,
            Some(format!("{event} now")),
            json!({}),
            None,
            rules(),
        )
        .await
}

fn state_of(a: &Applied) -> &str {
    match a {
        Applied::Moved { task, .. } | Applied::Rejected { task, .. } => &task.state,
    }
}

async fn event_types(store: &Store, vtid: &str) -> Vec<String> {
    let f = EventFilter {
        task_id: Some(vtid.into()),
        ..Default::default()
    };
    store
        .read_events(0, &f, 1000)
        .await
        .unwrap()
        .events
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

contract!(
    autopilot_flow_with_validator_and_rework,
    |db: TestDb| async move {
        let store = db.open().await;
        register(&store, "builder", &["rust"]).await;
        register(&store, "checker", &["rust", "validator"]).await;
        let mut t = task("VTID-01180", "autopilot");
        t.capabilities = vec!["rust".into()];
        let created = store.create_task(t).await.unwrap();
        assert_eq!(created.state, "in_progress");
        assert!(created.spec_snapshot_id.is_some());

        let pending = store.pending_tasks("builder", 10).await.unwrap();
        assert_eq!(
            pending.iter().map(|t| t.vtid.as_str()).collect::<Vec<_>>(),
            vec!["VTID-01180"]
        );
        let grant = store
            .claim_task("builder", "VTID-01180", rules())
            .await
            .unwrap();
        assert!(grant.spec.starts_with("# VTID-01180"));
        assert!(store.pending_tasks("builder", 10).await.unwrap().is_empty());

        let tok = grant.claim_token.clone();
        assert_eq!(
            state_of(
                &progress(
                    &store,
                    "builder",
                    "VTID-01180",
                    &tok,
                    "worker.execution.started"
                )
                .await
                .unwrap()
            ),
            "in_progress"
        );
        // Completing before building is known but not allowed from here: recorded, rejected.
        let rejected = progress(
            &store,
            "builder",
            "VTID-01180",
            &tok,
            "worker.execution.completed",
        )
        .await
        .unwrap();
        assert!(matches!(rejected, Applied::Rejected { .. }));
        assert_eq!(
            state_of(
                &progress(&store, "builder", "VTID-01180", &tok, "worker.building")
                    .await
                    .unwrap()
            ),
            "building"
        );
        assert_eq!(
            state_of(
                &progress(&store, "builder", "VTID-01180", &tok, "worker.pr.created")
                    .await
                    .unwrap()
            ),
            "pr_created"
        );
        let err = progress(&store, "builder", "VTID-01180", &tok, "worker.dance")
            .await
            .unwrap_err();
        assert_eq!(err.code, "unknown_event");
        assert_eq!(
            state_of(
                &progress(
                    &store,
                    "builder",
                    "VTID-01180",
                    &tok,
                    "worker.execution.completed"
                )
                .await
                .unwrap()
            ),
            "reviewing"
        );
        // The builder's claim and run ended; the task waits for a validator.
        let (run, _) = store.run(&grant.claim.run_id).await.unwrap();
        assert_eq!(run.status, "done");
        assert!(
            store.pending_tasks("builder", 10).await.unwrap().is_empty(),
            "builder lacks validator capability"
        );
        let err = store
            .claim_task("builder", "VTID-01180", rules())
            .await
            .unwrap_err();
        assert_eq!(err.code, "missing_capabilities");

        // Validator rejects: back to in_progress, unclaimed, for rework.
        let v = store
            .claim_task("checker", "VTID-01180", rules())
            .await
            .unwrap();
        assert_eq!(v.claim.purpose, "validate");
        let a = progress(
            &store,
            "checker",
            "VTID-01180",
            &v.claim_token,
            "validator.failed",
        )
        .await
        .unwrap();
        assert_eq!(state_of(&a), "in_progress");

        // Rework by the builder, then the validator passes it.
        let g2 = store
            .claim_task("builder", "VTID-01180", rules())
            .await
            .unwrap();
        assert_eq!(g2.claim.purpose, "build");
        for e in [
            "worker.building",
            "worker.pr.created",
            "worker.execution.completed",
        ] {
            progress(&store, "builder", "VTID-01180", &g2.claim_token, e)
                .await
                .unwrap();
        }
        let v2 = store
            .claim_task("checker", "VTID-01180", rules())
            .await
            .unwrap();
        let done = progress(
            &store,
            "checker",
            "VTID-01180",
            &v2.claim_token,
            "validator.passed",
        )
        .await
        .unwrap();
        assert_eq!(state_of(&done), "done");
        // Final states accept nothing more.
        let err = store
            .claim_task("checker", "VTID-01180", rules())
            .await
            .unwrap_err();
        assert_eq!(err.code, "task_not_claimable");
        let (detail, _) = store.task("VTID-01180", 200).await.unwrap();
        assert_eq!(detail.claims.len(), 4);
        assert!(detail.claims.iter().all(|c| c.released_at.is_some()));
        assert_eq!(detail.task.attempts, 4);

        let types = event_types(&store, "VTID-01180").await;
        for expected in [
            "task.created",
            "task.dispatched",
            "worker.claim.granted",
            "worker.execution.started",
            "worker.building",
            "worker.pr.created",
            "worker.execution.completed",
            "task.transition_rejected",
            "validator.failed",
            "validator.passed",
            "worker.claim.released",
            "run.started",
            "run.completed",
            "task.state_changed",
        ] {
            assert!(
                types.iter().any(|t| t == expected),
                "missing event {expected} in {types:?}"
            );
        }
        store.close();
    }
);

contract!(
    validator_cannot_validate_own_build,
    |db: TestDb| async move {
        let store = db.open().await;
        register(&store, "both", &["validator"]).await;
        store
            .create_task(task("VTID-7", "autopilot"))
            .await
            .unwrap();
        let g = store.claim_task("both", "VTID-7", rules()).await.unwrap();
        for e in [
            "worker.building",
            "worker.pr.created",
            "worker.execution.completed",
        ] {
            progress(&store, "both", "VTID-7", &g.claim_token, e)
                .await
                .unwrap();
        }
        let err = store
            .claim_task("both", "VTID-7", rules())
            .await
            .unwrap_err();
        assert_eq!(err.code, "validator_is_builder");
        assert!(store.pending_tasks("both", 10).await.unwrap().is_empty());
        store.close();
    }
);

contract!(
    simple_flow_with_steps_and_failure,
    |db: TestDb| async move {
        let store = db.open().await;
        register(&store, "w1", &[]).await;
        let t = store.create_task(task("T-1", "simple")).await.unwrap();
        assert_eq!(t.state, "pending");
        let g = store.claim_task("w1", "T-1", rules()).await.unwrap();
        assert_eq!(g.task.state, "claimed");
        let step = TranscriptStep::Action {
            content: vec![ActionContent::Text {
                text: "hello".into(),
            }],
        };
        let ack = store
            .append_steps(
                &g.claim.run_id,
                &g.claim_token,
                None,
                0,
                vec![step],
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(ack.next_index, 1);
        let (d, _) = store.task("T-1", 10).await.unwrap();
        assert_eq!(
            d.task.state, "running",
            "a first step moves claimed to running"
        );
        let failed = store
            .progress(
                "w1",
                "T-1",
                Some(g.claim_token.clone()),
                "worker.execution.failed",
                None,
                json!({}),
                Some("boom".into()),
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(state_of(&failed), "failed");
        let (run, transcript, _) = store.run_detail(&g.claim.run_id).await.unwrap();
        assert_eq!(run.status, "failed", "a failure is failed, never done");
        assert_eq!(run.result.as_deref(), Some("boom"));
        assert_eq!(transcript.unwrap().len(), 1);
        store.close();
    }
);

contract!(
    sixty_four_concurrent_claimers_one_winner,
    |db: TestDb| async move {
        // Several nodes, so that on PostgreSQL the database itself arbitrates.
        let nodes = vec![db.open().await, db.open().await, db.open().await];
        for i in 0..64 {
            register(&nodes[0], &format!("w{i}"), &[]).await;
        }
        nodes[0].create_task(task("HOT-1", "simple")).await.unwrap();
        let mut handles = Vec::new();
        for i in 0..64 {
            let store = nodes[i % nodes.len()].clone();
            handles.push(tokio::spawn(async move {
                store.claim_task(&format!("w{i}"), "HOT-1", rules()).await
            }));
        }
        let mut winners = 0;
        for h in handles {
            match h.await.unwrap() {
                Ok(_) => winners += 1,
                Err(e) => assert_eq!(e.code, "already_claimed", "{e}"),
            }
        }
        assert_eq!(winners, 1);
        let (d, _) = nodes[0].task("HOT-1", 10).await.unwrap();
        assert_eq!(d.claims.len(), 1);
        let granted = event_types(&nodes[0], "HOT-1")
            .await
            .iter()
            .filter(|t| *t == "worker.claim.granted")
            .count();
        assert_eq!(granted, 1);
        for n in nodes {
            n.close();
        }
    }
);

contract!(
    a_lapsed_lease_fences_reports_before_any_sweep,
    |db: TestDb| async move {
        // A lease lapses under the rules in force whoever touches it first:
        // the holder's own progress, steps, status and usage are refused
        // once its TTL or heartbeat timeout passed, though no sweep,
        // heartbeat or claim has ended the claim yet; inside the start
        // grace they are accepted.
        let store = db.open().await;
        let t0 = 1_900_000_000_000;
        store.set_clock(Some(t0));
        register(&store, "w", &[]).await;
        // The TTL passes first (heartbeats on time), or the worker falls
        // silent past the heartbeat timeout while its TTL still runs.
        let ttl_first = LeaseRules {
            ttl_ms: 60_000,
            heartbeat_timeout_ms: 300_000,
            not_before: 0,
            cancel_grace_ms: 30_000,
        };
        let silence_first = LeaseRules {
            ttl_ms: 3_600_000,
            ..ttl_first
        };
        for (vtid, lease, lapse_at) in [
            ("L-ttl", ttl_first, 60_001),
            ("L-silent", silence_first, 300_001),
        ] {
            store.create_task(task(vtid, "simple")).await.unwrap();
            store.set_clock(Some(t0));
            store.heartbeat("w", lease).await.unwrap();
            let g = store.claim_task("w", vtid, lease).await.unwrap();
            let at = t0 + lapse_at;
            store.set_clock(Some(at));
            // Inside the start grace (a node that just started) the lapse
            // does not count: the report is accepted.
            let grace = LeaseRules {
                not_before: at + 1,
                ..lease
            };
            let ack = store
                .append_steps(
                    &g.claim.run_id,
                    &g.claim_token,
                    Some("w".into()),
                    0,
                    vec![],
                    grace,
                )
                .await
                .unwrap();
            assert_eq!(ack.accepted, 0);
            store
                .set_run_status(
                    &g.claim.run_id,
                    &g.claim_token,
                    Some("w".into()),
                    "in grace",
                    grace,
                )
                .await
                .unwrap();
            let in_grace = Usage {
                input_tokens: 1,
                ..Usage::default()
            };
            store
                .set_run_usage(
                    &g.claim.run_id,
                    &g.claim_token,
                    Some("w".into()),
                    in_grace,
                    grace,
                )
                .await
                .unwrap();
            let err = store
                .append_steps(
                    &g.claim.run_id,
                    &g.claim_token,
                    Some("w".into()),
                    0,
                    vec![],
                    lease,
                )
                .await
                .unwrap_err();
            assert_eq!(
                err.code, "claim_stale",
                "{vtid}: steps under a lapsed lease"
            );
            let err = store
                .set_run_status(
                    &g.claim.run_id,
                    &g.claim_token,
                    Some("w".into()),
                    "lapsed",
                    lease,
                )
                .await
                .unwrap_err();
            assert_eq!(
                err.code, "claim_stale",
                "{vtid}: status under a lapsed lease"
            );
            let lapsed = Usage {
                input_tokens: 2,
                ..Usage::default()
            };
            let err = store
                .set_run_usage(
                    &g.claim.run_id,
                    &g.claim_token,
                    Some("w".into()),
                    lapsed,
                    lease,
                )
                .await
                .unwrap_err();
            assert_eq!(
                err.code, "claim_stale",
                "{vtid}: usage under a lapsed lease"
            );
            // The refused reports wrote nothing: the run keeps what was
            // reported in grace.
            let (run, _) = store.run(&g.claim.run_id).await.unwrap();
            assert_eq!(run.live_status.as_deref(), Some("in grace"), "{vtid}");
            assert_eq!(run.usage, Some(in_grace), "{vtid}");
            for token in [Some(g.claim_token.clone()), None] {
                let err = store
                    .progress(
                        "w",
                        vtid,
                        token,
                        "worker.execution.completed",
                        None,
                        json!({}),
                        None,
                        lease,
                    )
                    .await
                    .unwrap_err();
                assert_eq!(
                    err.code, "claim_stale",
                    "{vtid}: progress under a lapsed lease"
                );
            }
            let (d, _) = store.task(vtid, 10).await.unwrap();
            assert_eq!(
                d.task.state, "claimed",
                "{vtid}: the refused report changed nothing"
            );
            // The next one to touch the claim ends it, as the sweeper would.
            store.heartbeat("w", lease).await.unwrap();
            let (d, _) = store.task(vtid, 10).await.unwrap();
            assert_eq!(d.task.state, "pending", "{vtid}: the lapsed claim ended");
            let (run, _) = store.run(&g.claim.run_id).await.unwrap();
            assert_eq!(run.status, "failed");
        }
        store.close();
    }
);

contract!(
    expiry_returns_task_once_and_fences_the_zombie,
    |db: TestDb| async move {
        // Both nodes read one clock, which the test moves.
        let clock = Clock::fixed(shepherd_store::now_ms());
        let a = db.open_with_clock(&clock).await;
        let b = db.open_with_clock(&clock).await;
        register(&a, "zombie", &[]).await;
        register(&a, "fresh", &[]).await;
        a.create_task(task("Z-1", "simple")).await.unwrap();
        let g = a.claim_task("zombie", "Z-1", rules()).await.unwrap();
        // The zombie goes silent; time passes beyond the heartbeat timeout.
        clock.advance(50);
        let short = LeaseRules {
            heartbeat_timeout_ms: 10,
            ..rules()
        };
        // Downtime rule: nothing expires before `not_before`.
        let later = LeaseRules {
            not_before: clock.now() + 60_000,
            ..short
        };
        assert_eq!(a.sweep(later).await.unwrap().expired, 0);
        // Two nodes sweep at once: the claim expires exactly once.
        let (ra, rb) = tokio::join!(a.sweep(short), b.sweep(short));
        assert_eq!(ra.unwrap().expired + rb.unwrap().expired, 1);
        let types = event_types(&a, "Z-1").await;
        assert_eq!(
            types
                .iter()
                .filter(|t| *t == "worker.claim.expired")
                .count(),
            1
        );
        let (d, _) = a.task("Z-1", 10).await.unwrap();
        assert_eq!(d.task.state, "pending");
        let (run, _) = a.run(&g.claim.run_id).await.unwrap();
        assert_eq!(run.status, "failed");
        assert!(run.result.unwrap().contains("no heartbeat"));

        // The task is re-granted; the zombie comes back and is fenced.
        a.heartbeat("fresh", rules()).await.unwrap();
        let g2 = a.claim_task("fresh", "Z-1", rules()).await.unwrap();
        a.heartbeat("zombie", rules()).await.unwrap();
        for token in [Some(g.claim_token.clone()), None] {
            let err = a
                .progress(
                    "zombie",
                    "Z-1",
                    token,
                    "worker.execution.completed",
                    None,
                    json!({}),
                    None,
                    rules(),
                )
                .await
                .unwrap_err();
            assert_eq!(err.code, "claim_stale");
        }
        let err = a
            .append_steps(&g.claim.run_id, &g.claim_token, None, 0, vec![], rules())
            .await
            .unwrap_err();
        assert_eq!(err.code, "claim_stale");
        let (d, _) = a.task("Z-1", 10).await.unwrap();
        assert_eq!(d.task.state, "claimed", "the zombie changed nothing");
        progress(
            &a,
            "fresh",
            "Z-1",
            &g2.claim_token,
            "worker.execution.completed",
        )
        .await
        .unwrap();
        a.close();
        b.close();
    }
);

contract!(eligibility_rules_and_capacity, |db: TestDb| async move {
    let store = db.open().await;
    register(&store, "plain", &[]).await;
    store
        .register_worker(Registration {
            worker_id: Some("coder".into()),
            agent_id: "claude".into(),
            worker_type: "builtin".into(),
            capabilities: vec!["rust".into()],
            max_concurrent: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut for_claude = task("A-1", "simple");
    for_claude.agent_id = Some("claude".into());
    store.create_task(for_claude).await.unwrap();
    let mut needs_rust = task("C-1", "simple");
    needs_rust.capabilities = vec!["rust".into()];
    needs_rust.priority = 5;
    store.create_task(needs_rust).await.unwrap();
    let mut draft = task("D-1", "simple");
    draft.dispatch = false;
    store.create_task(draft).await.unwrap();

    assert!(store.pending_tasks("plain", 10).await.unwrap().is_empty());
    let coder: Vec<_> = store
        .pending_tasks("coder", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.vtid)
        .collect();
    assert_eq!(coder, vec!["C-1", "A-1"], "priority first");
    assert_eq!(
        store
            .claim_task("plain", "A-1", rules())
            .await
            .unwrap_err()
            .code,
        "wrong_agent"
    );
    assert_eq!(
        store
            .claim_task("plain", "C-1", rules())
            .await
            .unwrap_err()
            .code,
        "missing_capabilities"
    );
    assert_eq!(
        store
            .claim_task("plain", "D-1", rules())
            .await
            .unwrap_err()
            .code,
        "task_not_dispatched"
    );
    assert_eq!(
        store
            .claim_task("plain", "NOPE", rules())
            .await
            .unwrap_err()
            .code,
        "task_not_found"
    );
    assert_eq!(
        store
            .claim_task("ghost", "D-1", rules())
            .await
            .unwrap_err()
            .code,
        "worker_not_found"
    );
    store.claim_task("coder", "C-1", rules()).await.unwrap();
    assert_eq!(
        store
            .claim_task("coder", "A-1", rules())
            .await
            .unwrap_err()
            .code,
        "worker_at_capacity"
    );
    // Agent limit: claude may run one at a time.
    store
        .upsert_agent("claude", "builtin", vec![], Some(1))
        .await
        .unwrap();
    register(&store, "other", &["rust"]).await;
    let mut second = task("A-2", "simple");
    second.agent_id = Some("claude".into());
    store.create_task(second).await.unwrap();
    store
        .register_worker(Registration {
            worker_id: Some("coder2".into()),
            agent_id: "claude".into(),
            worker_type: "builtin".into(),
            max_concurrent: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .claim_task("coder2", "A-2", rules())
            .await
            .unwrap_err()
            .code,
        "agent_at_capacity"
    );
    // Duplicate ids and unknown workflows.
    assert_eq!(
        store
            .create_task(task("C-1", "simple"))
            .await
            .unwrap_err()
            .code,
        "task_exists"
    );
    assert_eq!(
        store
            .create_task(task("X-1", "waterfall"))
            .await
            .unwrap_err()
            .code,
        "unknown_workflow"
    );
    let generated = store
        .create_task(NewTask {
            title: "auto id".into(),
            dispatch: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(generated.vtid.starts_with("VTID-"), "{}", generated.vtid);
    store.close();
});

contract!(
    cancel_reaches_holder_and_grace_ends_it,
    |db: TestDb| async move {
        let clock = Clock::fixed(shepherd_store::now_ms());
        let store = db.open_with_clock(&clock).await;
        register(&store, "w", &[]).await;
        store.create_task(task("K-1", "simple")).await.unwrap();
        let g = store.claim_task("w", "K-1", rules()).await.unwrap();
        let (_, outcome) = store.cancel_task("K-1", None).await.unwrap();
        assert!(matches!(
            outcome,
            shepherd_store::CancelOutcome::Requested { .. }
        ));
        let (_, held) = store.heartbeat("w", rules()).await.unwrap();
        assert!(
            held[0].cancel_requested,
            "the heartbeat answer repeats the cancel"
        );
        // Steps sent while stopping are kept.
        let step = TranscriptStep::Action {
            content: vec![ActionContent::ToolCall {
                id: "c1".into(),
                name: "shell".into(),
                args: "{}".into(),
            }],
        };
        store
            .append_steps(
                &g.claim.run_id,
                &g.claim_token,
                None,
                0,
                vec![step],
                rules(),
            )
            .await
            .unwrap();
        clock.advance(20);
        let r = store
            .sweep(LeaseRules {
                cancel_grace_ms: 1,
                ..rules()
            })
            .await
            .unwrap();
        assert_eq!(r.cancelled, 1);
        let (run, transcript, _) = store.run_detail(&g.claim.run_id).await.unwrap();
        assert_eq!(run.status, "cancelled");
        let transcript = transcript.unwrap();
        assert_eq!(
            transcript.len(),
            2,
            "the dangling tool call is closed with a synthetic result"
        );
        assert!(
            matches!(&transcript[1], TranscriptStep::ToolResult { call_id, .. } if call_id == "c1")
        );
        let (d, _) = store.task("K-1", 10).await.unwrap();
        assert_eq!(d.task.state, "cancelled");
        assert_eq!(
            store.cancel_task("K-1", None).await.unwrap_err().code,
            "task_finished"
        );
        store.close();
    }
);

contract!(
    deregister_releases_claims_and_kills_the_token,
    |db: TestDb| async move {
        let store = db.open().await;
        let token = register(&store, "w", &[]).await;
        assert_eq!(
            store.worker_for_token(&token).await.unwrap().as_deref(),
            Some("w")
        );
        store.create_task(task("R-1", "simple")).await.unwrap();
        store.claim_task("w", "R-1", rules()).await.unwrap();
        store.deregister_worker("w", None).await.unwrap();
        assert_eq!(store.worker_for_token(&token).await.unwrap(), None);
        let (d, _) = store.task("R-1", 10).await.unwrap();
        assert_eq!(d.task.state, "pending");
        assert_eq!(
            store.heartbeat("w", rules()).await.unwrap_err().code,
            "worker_terminated"
        );
        store.close();
    }
);

contract!(
    text_with_nul_characters_is_stored_not_refused,
    |db: TestDb| async move {
        // PostgreSQL refuses NUL in text; agent output can contain one. Both
        // stores keep the text, each NUL as U+FFFD, and the run completes.
        let store = db.open().await;
        register(&store, "w1", &[]).await;
        let mut t = task("NUL-1", "simple");
        t.title = "before\0after".into();
        store.create_task(t).await.unwrap();
        let (d, _) = store.task("NUL-1", 10).await.unwrap();
        assert_eq!(d.task.title, "before\u{FFFD}after");
        let g = store.claim_task("w1", "NUL-1", rules()).await.unwrap();
        let done = store
            .progress(
                "w1",
                "NUL-1",
                Some(g.claim_token.clone()),
                "worker.execution.completed",
                None,
                json!({}),
                Some("binary\0output".into()),
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(state_of(&done), "done");
        let (run, _, _) = store.run_detail(&g.claim.run_id).await.unwrap();
        assert_eq!(run.status, "done");
        assert_eq!(run.result.as_deref(), Some("binary\u{FFFD}output"));
        store.close();
    }
);

contract!(
    applied_events_report_their_own_seq,
    |db: TestDb| async move {
        // The `seq` answered for a progress report or an outside event is that
        // event's place in the log, whether it moved the task or was rejected,
        // and also when many units of work share one commit.
        let store = db.open().await;
        let seq_of = |a: &Applied| match a {
            Applied::Moved { seq, .. } | Applied::Rejected { seq, .. } => *seq,
        };
        let logged = |store: Store, seq: i64| async move {
            let page = store
                .read_events(seq - 1, &EventFilter::default(), 1)
                .await
                .unwrap();
            let e = page.events.into_iter().next().expect("an event at seq");
            assert_eq!(e.seq, seq);
            (e.kind, e.refs.task_id)
        };
        let mut runs = Vec::new();
        for i in 0..8 {
            let worker = format!("sw{i}");
            let vtid = format!("SEQ-{i}");
            register(&store, &worker, &[]).await;
            store.create_task(task(&vtid, "autopilot")).await.unwrap();
            let g = store.claim_task(&worker, &vtid, rules()).await.unwrap();
            runs.push((worker, vtid, g.claim_token));
        }
        let reports = futures::future::join_all(runs.iter().map(|(w, v, tok)| {
            let store = store.clone();
            async move { progress(&store, w, v, tok, "worker.building").await }
        }))
        .await;
        for ((_, vtid, _), r) in runs.iter().zip(reports) {
            let a = r.unwrap();
            assert_eq!(state_of(&a), "building");
            let (kind, task) = logged(store.clone(), seq_of(&a)).await;
            assert_eq!(
                (kind.as_str(), task.as_deref()),
                ("worker.building", Some(vtid.as_str()))
            );
        }
        // Rejected (a known event from a state that does not take it): the
        // seq is that of the recorded rejection.
        let (w, v, tok) = &runs[0];
        let rejected = progress(&store, w, v, tok, "worker.execution.completed")
            .await
            .unwrap();
        assert!(matches!(rejected, Applied::Rejected { .. }));
        let (kind, task) = logged(store.clone(), seq_of(&rejected)).await;
        assert_eq!(kind, "task.transition_rejected");
        assert_eq!(task.as_deref(), Some(v.as_str()));
        // An event from outside any worker.
        let outside = store
            .task_event(v, "github.pull_request.opened", None, json!({}))
            .await
            .unwrap();
        assert_eq!(state_of(&outside), "pr_created");
        let (kind, task) = logged(store.clone(), seq_of(&outside)).await;
        assert_eq!(kind, "github.pull_request.opened");
        assert_eq!(task.as_deref(), Some(v.as_str()));
        store.close();
    }
);

contract!(
    pending_filters_capabilities_in_the_query_so_untakeable_tasks_never_hide_takeable_ones,
    |db: TestDb| async move {
        let store = db.open().await;
        register(&store, "rusty", &["rust"]).await;
        // 150 tasks this worker cannot take, all ahead of the one it can.
        for i in 0..150 {
            let mut t = task(&format!("GPU-{i:03}"), "simple");
            t.priority = 9;
            t.capabilities = vec!["gpu".into()];
            store.create_task(t).await.unwrap();
        }
        let mut mine = task("RUST-1", "simple");
        mine.capabilities = vec!["rust".into()];
        mine.priority = 2;
        store.create_task(mine).await.unwrap();
        store.create_task(task("ANY-1", "simple")).await.unwrap();

        let pending = store.pending_tasks("rusty", 10).await.unwrap();
        let vtids: Vec<_> = pending.iter().map(|t| t.vtid.as_str()).collect();
        assert_eq!(vtids, ["RUST-1", "ANY-1"], "best first, untakeable skipped");
        let first = store.pending_tasks("rusty", 1).await.unwrap();
        assert_eq!(first[0].vtid, "RUST-1");
        store.close();
    }
);

contract!(
    a_late_heartbeat_does_not_revive_a_lapsed_claim,
    |db: TestDb| async move {
        let clock = Clock::fixed(shepherd_store::now_ms());
        let store = db.open_with_clock(&clock).await;
        register(&store, "late", &[]).await;
        store.create_task(task("L-1", "simple")).await.unwrap();
        let g = store.claim_task("late", "L-1", rules()).await.unwrap();
        clock.advance(30);
        let short = LeaseRules {
            heartbeat_timeout_ms: 10,
            ..rules()
        };
        // Within the start grace a heartbeat still extends the claim.
        let grace = LeaseRules {
            not_before: clock.now() + 60_000,
            ..short
        };
        let (_, held) = store.heartbeat("late", grace).await.unwrap();
        assert_eq!(held.len(), 1, "start grace keeps the lease");
        clock.advance(30);
        // After it, the silence has lapsed the claim: no sweep ran, but the
        // heartbeat finds it lapsed and ends it as the sweeper would.
        let (_, held) = store.heartbeat("late", short).await.unwrap();
        assert!(
            held.is_empty(),
            "the lapsed claim is not extended: {held:?}"
        );
        let (d, _) = store.task("L-1", 10).await.unwrap();
        assert_eq!(d.task.state, "pending");
        let (run, _) = store.run(&g.claim.run_id).await.unwrap();
        assert_eq!(run.status, "failed");
        assert_eq!(store.sweep(short).await.unwrap().expired, 0, "expired once");
        store.close();
    }
);

contract!(
    a_worker_granted_a_task_twice_must_name_its_claim,
    |db: TestDb| async move {
        let clock = Clock::fixed(shepherd_store::now_ms());
        let store = db.open_with_clock(&clock).await;
        register(&store, "twice", &[]).await;
        store.create_task(task("T2-1", "simple")).await.unwrap();
        // The first claim (token-less reports are fine while it is the only one).
        let first = store.claim_task("twice", "T2-1", rules()).await.unwrap();
        let tokenless = store
            .progress(
                "twice",
                "T2-1",
                None,
                "worker.execution.started",
                None,
                json!({}),
                None,
                rules(),
            )
            .await;
        assert!(tokenless.is_ok(), "{tokenless:?}");
        // It lapses and is granted to the same worker again.
        clock.advance(30);
        let short = LeaseRules {
            heartbeat_timeout_ms: 10,
            ..rules()
        };
        assert_eq!(store.sweep(short).await.unwrap().expired, 1);
        store.heartbeat("twice", rules()).await.unwrap();
        let second = store.claim_task("twice", "T2-1", rules()).await.unwrap();
        assert_ne!(first.claim_token, second.claim_token);
        // A token-less completion could be the first attempt's: refused.
        let err = store
            .progress(
                "twice",
                "T2-1",
                None,
                "worker.execution.completed",
                None,
                json!({}),
                None,
                rules(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code, "claim_stale");
        let err = store
            .progress(
                "twice",
                "T2-1",
                Some(first.claim_token.clone()),
                "worker.execution.completed",
                None,
                json!({}),
                None,
                rules(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code, "claim_stale");
        store
            .progress(
                "twice",
                "T2-1",
                Some(second.claim_token.clone()),
                "worker.execution.completed",
                None,
                json!({}),
                None,
                rules(),
            )
            .await
            .unwrap();
        store.close();
    }
);

#[tokio::test]
async fn claim_tokens_are_stored_hashed_and_still_fence() {
    let db = TestDb::new(common::Kind::Sqlite).await;
    let store = db.open().await;
    register(&store, "w", &[]).await;
    store.create_task(task("H-1", "simple")).await.unwrap();
    let g = store.claim_task("w", "H-1", rules()).await.unwrap();
    let path = db.config().url.trim_start_matches("sqlite://").to_owned();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let stored: String = conn
        .query_row(
            "SELECT claim_token FROM runs WHERE id = ?1",
            [&g.claim.run_id],
            |r| r.get(0),
        )
        .unwrap();
    assert_ne!(
        stored, g.claim_token,
        "the database does not hold the token"
    );
    assert!(!stored.contains(&g.claim_token));
    // A wrong token of any length is refused the same way; the right one works.
    for wrong in ["x", "sct_0000", &"f".repeat(64), &stored] {
        let err = progress(&store, "w", "H-1", wrong, "worker.execution.started")
            .await
            .unwrap_err();
        assert_eq!(err.code, "claim_stale", "{wrong}");
    }
    progress(
        &store,
        "w",
        "H-1",
        &g.claim_token,
        "worker.execution.started",
    )
    .await
    .unwrap();
    store.close();
}

contract!(
    a_grant_starts_the_lease_of_a_quiet_worker,
    |db: TestDb| async move {
        // A worker that has been quiet longer than the heartbeat timeout
        // (it heartbeats only while it holds work) claims a task: the grant
        // is hearing from it, so the new claim's lease runs from the grant,
        // by vtid and by claim-next alike. Before, the claim lapsed at once
        // ("no heartbeat for 4s") on the next heartbeat, report or sweep.
        let store = db.open().await;
        let lease = LeaseRules {
            ttl_ms: 30_000,
            heartbeat_timeout_ms: 3_000,
            not_before: 0,
            cancel_grace_ms: 30_000,
        };
        let t0 = 1_900_000_000_000;
        store.set_clock(Some(t0));
        for w in ["quiet-a", "quiet-b"] {
            register(&store, w, &[]).await;
        }
        store.create_task(task("Q-1", "simple")).await.unwrap();
        store.create_task(task("Q-2", "simple")).await.unwrap();
        // Four seconds of silence, then a claim of each kind.
        let grant_at = t0 + 4_000;
        store.set_clock(Some(grant_at));
        let by_vtid = store.claim_task("quiet-a", "Q-1", lease).await.unwrap();
        let next = store.claim_next("quiet-b", 1, lease).await.unwrap();
        assert_eq!(next.len(), 1, "claim-next granted the waiting task");
        let by_next = &next[0];
        assert_eq!(by_next.task.vtid, "Q-2");
        // A moment later: the sweeper finds nothing lapsed, a report under
        // the claim is accepted, and the heartbeat still holds the claim.
        store.set_clock(Some(grant_at + 3));
        assert_eq!(store.sweep(lease).await.unwrap().expired, 0);
        let applied = store
            .progress(
                "quiet-a",
                "Q-1",
                Some(by_vtid.claim_token.clone()),
                "worker.execution.started",
                None,
                json!({}),
                None,
                lease,
            )
            .await
            .expect("a fresh claim is not stale");
        assert_eq!(state_of(&applied), "running");
        for (w, g) in [("quiet-a", &by_vtid), ("quiet-b", by_next)] {
            let (_, held) = store.heartbeat(w, lease).await.unwrap();
            let held: Vec<&str> = held.iter().map(|c| c.run_id.as_str()).collect();
            assert_eq!(held, vec![g.claim.run_id.as_str()], "{w} keeps its claim");
        }
        // A claim-next grant never heartbeated is live until the timeout
        // after the grant has passed, and lapses then.
        register(&store, "quiet-c", &[]).await;
        let later = grant_at + 60_000;
        store.set_clock(Some(later));
        // (The first two claims, unheard of since, lapse here.)
        assert_eq!(store.sweep(lease).await.unwrap().expired, 2);
        let third = store.claim_next("quiet-c", 1, lease).await.unwrap();
        assert_eq!(third.len(), 1);
        store.set_clock(Some(later + 3_000));
        assert_eq!(store.sweep(lease).await.unwrap().expired, 0);
        // Past the timeout from the grant, silent since: the claim lapses.
        store.set_clock(Some(later + 3_001));
        assert_eq!(store.sweep(lease).await.unwrap().expired, 1);
        let (run, _) = store.run(&third[0].claim.run_id).await.unwrap();
        assert_eq!(run.status, "failed");
        assert!(run.result.unwrap_or_default().contains("no heartbeat"));
        store.close();
    }
);

contract!(
    step_batches_read_together_and_answer_each_run_on_its_own,
    |db: TestDb| async move {
        let store = db.open().await;
        store
            .register_worker(Registration {
                worker_id: Some("fleet".into()),
                agent_id: "default".into(),
                worker_type: "builtin".into(),
                max_concurrent: 3,
                ..Default::default()
            })
            .await
            .unwrap();
        register(&store, "other", &[]).await;
        let mut grants = Vec::new();
        for vtid in ["B-1", "B-2", "B-3"] {
            store.create_task(task(vtid, "simple")).await.unwrap();
            grants.push(store.claim_task("fleet", vtid, rules()).await.unwrap());
        }
        let text = |t: &str| TranscriptStep::Action {
            content: vec![ActionContent::Text { text: t.into() }],
        };
        let append = |i: usize, token: &str, start: i64, steps: Vec<TranscriptStep>| {
            shepherd_store::StepAppend {
                run_id: grants[i].claim.run_id.clone(),
                claim_token: token.to_owned(),
                start_index: start,
                steps,
            }
        };
        let t = |i: usize| grants[i].claim_token.clone();
        let missing = shepherd_store::StepAppend {
            run_id: "r-missing".into(),
            claim_token: t(0),
            start_index: 0,
            steps: vec![text("x")],
        };
        let results = store
            .append_steps_many(
                Some("fleet".into()),
                vec![
                    append(0, &t(0), 0, vec![text("a0"), text("a1")]),
                    append(1, "sct_wrong", 0, vec![text("b0")]),
                    missing,
                    // The same run again: read afresh, after the first append.
                    append(0, &t(0), 2, vec![text("a2")]),
                    append(2, &t(2), 1, vec![text("c1")]),
                    append(1, &t(1), 0, vec![text("b0")]),
                    append(0, &t(0), 0, vec![text("a0")]),
                ],
                rules(),
            )
            .await
            .unwrap();
        let summary: Vec<Result<(i64, i64, i64), &str>> = results
            .iter()
            .map(|r| match r {
                Ok(a) => Ok((a.accepted, a.duplicates, a.next_index)),
                Err(e) => Err(e.code),
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                Ok((2, 0, 2)),
                Err("claim_stale"),
                Err("run_not_found"),
                Ok((1, 0, 3)),
                Err("step_gap"),
                Ok((1, 0, 1)),
                Ok((0, 1, 3)),
            ]
        );
        // A first step moved each task it reached, and only those.
        for (vtid, state) in [("B-1", "running"), ("B-2", "running"), ("B-3", "claimed")] {
            let (d, _) = store.task(vtid, 10).await.unwrap();
            assert_eq!(d.task.state, state, "{vtid}");
        }
        let (_, steps, _) = store
            .run_steps(&grants[0].claim.run_id, -1, 10)
            .await
            .unwrap();
        let texts: Vec<String> = steps
            .iter()
            .map(|(_, s)| match s {
                TranscriptStep::Action { content } => match &content[0] {
                    ActionContent::Text { text } => text.clone(),
                    _ => String::new(),
                },
                _ => String::new(),
            })
            .collect();
        assert_eq!(texts, ["a0", "a1", "a2"]);
        // Another worker's batch is fenced out of runs it does not hold.
        let theirs = store
            .append_steps_many(
                Some("other".into()),
                vec![append(2, &t(2), 0, vec![text("c0")])],
                rules(),
            )
            .await
            .unwrap();
        assert_eq!(theirs[0].as_ref().unwrap_err().code, "claim_stale");
        store.close();
    }
);
