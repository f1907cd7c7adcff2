//! Runs and transcripts on both databases: listing with filters, paging,
//! totals and search; truncation at the caps; channels archived with their
//! runs kept.

mod common;

use serde_json::json;
use shepherd_core::transcript::{
    ActionContent, TranscriptStep, MAX_TOOL_ARGS_BYTES, MAX_TOOL_RESULT_BYTES,
};
use shepherd_store::{LeaseRules, NewTask, Registration, RunFilter, Store};

use common::TestDb;

fn rules() -> LeaseRules {
    LeaseRules {
        ttl_ms: 3_600_000,
        heartbeat_timeout_ms: 300_000,
        not_before: 0,
        cancel_grace_ms: 30_000,
    }
}

async fn worker(store: &Store, id: &str, agent: &str) {
    store
        .register_worker(Registration {
            worker_id: Some(id.into()),
            agent_id: agent.into(),
            worker_type: "builtin".into(),
            max_concurrent: 100,
            ..Default::default()
        })
        .await
        .unwrap();
}

/// Creates a task and runs it to `end` (`done`, `failed`) or leaves it running.
async fn run(
    store: &Store,
    w: &str,
    vtid: &str,
    title: &str,
    channel: Option<&str>,
    end: Option<&str>,
) -> String {
    store
        .create_task(NewTask {
            vtid: Some(vtid.into()),
            title: title.into(),
            channel_id: channel.map(String::from),
            dispatch: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let g = store.claim_task(w, vtid, rules()).await.unwrap();
    if let Some(end) = end {
        let event = if end == "done" {
            "worker.execution.completed"
        } else {
            "worker.execution.failed"
        };
        store
            .progress(
                w,
                vtid,
                Some(g.claim_token.clone()),
                event,
                None,
                json!({}),
                None,
                rules(),
            )
            .await
            .unwrap();
    }
    g.claim.run_id
}

contract!(
    list_filters_paging_totals_and_search,
    |db: TestDb| async move {
        let store = db.open().await;
        worker(&store, "a1", "alpha").await;
        worker(&store, "b1", "beta").await;
        for i in 0..7 {
            run(
                &store,
                "a1",
                &format!("A-{i}"),
                &format!("Alpha job {i}"),
                Some("ops"),
                Some(if i % 2 == 0 { "done" } else { "failed" }),
            )
            .await;
        }
        run(
            &store,
            "a1",
            "A-LIVE",
            "Deploy the 100% safe_thing",
            None,
            None,
        )
        .await;
        run(&store, "b1", "B-1", "Beta job", None, Some("done")).await;
        let page = |f: RunFilter| {
            let store = store.clone();
            async move {
                store
                    .list_runs(RunFilter {
                        limit: if f.limit == 0 { 50 } else { f.limit },
                        ..f
                    })
                    .await
                    .map(|p| (p.items, p.total, p.cursor))
                    .unwrap()
            }
        };
        let (all, total, _) = page(RunFilter::default()).await;
        assert_eq!((all.len(), total), (9, 9));
        assert!(
            all.windows(2).all(|w| w[0].started_at >= w[1].started_at),
            "newest first"
        );
        let (alpha, total, _) = page(RunFilter {
            agent_id: Some("alpha".into()),
            ..Default::default()
        })
        .await;
        assert_eq!((alpha.len(), total), (8, 8));
        let (_, total, _) = page(RunFilter {
            agent_id: Some("alpha".into()),
            status: Some("failed".into()),
            ..Default::default()
        })
        .await;
        assert_eq!(total, 3);
        let (p1, total, _) = page(RunFilter {
            agent_id: Some("alpha".into()),
            limit: 3,
            offset: 0,
            ..Default::default()
        })
        .await;
        let (p2, _, _) = page(RunFilter {
            agent_id: Some("alpha".into()),
            limit: 3,
            offset: 3,
            ..Default::default()
        })
        .await;
        assert_eq!((p1.len(), p2.len(), total), (3, 3, 8));
        assert!(
            p1.iter().all(|a| p2.iter().all(|b| a.id != b.id)),
            "pages do not overlap"
        );
        let (found, total, _) = page(RunFilter {
            q: Some("JOB 3".into()),
            ..Default::default()
        })
        .await;
        assert_eq!(
            (total, found[0].vtid.as_str()),
            (1, "A-3"),
            "case-insensitive title search"
        );
        // LIKE wildcards in the search are literal.
        let (found, total, _) = page(RunFilter {
            q: Some("100% safe_".into()),
            ..Default::default()
        })
        .await;
        assert_eq!((total, found[0].vtid.as_str()), (1, "A-LIVE"));
        let (_, total, _) = page(RunFilter {
            q: Some("%".into()),
            ..Default::default()
        })
        .await;
        assert_eq!(total, 1);
        let (ops, _, _) = page(RunFilter {
            agent_id: Some("alpha".into()),
            status: Some("done".into()),
            ..Default::default()
        })
        .await;
        assert!(ops.iter().all(|r| r.channel_name.as_deref() == Some("ops")));
        store.close();
    }
);

contract!(
    truncation_at_the_caps_keeps_utf8_whole,
    |db: TestDb| async move {
        let store = db.open().await;
        worker(&store, "w", "default").await;
        store
            .create_task(NewTask {
                vtid: Some("T".into()),
                title: "big".into(),
                dispatch: true,
                ..Default::default()
            })
            .await
            .unwrap();
        let g = store.claim_task("w", "T", rules()).await.unwrap();
        let big_result = "日本語🙂".repeat(MAX_TOOL_RESULT_BYTES / 4);
        let big_args = format!("{{\"x\":\"{}\"}}", "é".repeat(MAX_TOOL_ARGS_BYTES));
        let steps = vec![
            TranscriptStep::Action {
                content: vec![ActionContent::ToolCall {
                    id: "c".into(),
                    name: "shell".into(),
                    args: big_args,
                }],
            },
            TranscriptStep::ToolResult {
                call_id: "c".into(),
                name: "shell".into(),
                text: big_result,
            },
        ];
        store
            .append_steps(&g.claim.run_id, &g.claim_token, None, 0, steps, rules())
            .await
            .unwrap();
        let (_, stored, _) = store.run_steps(&g.claim.run_id, -1, 10).await.unwrap();
        match &stored[0].1 {
            TranscriptStep::Action { content } => match &content[0] {
                ActionContent::ToolCall { args, .. } => {
                    assert!(args.len() <= MAX_TOOL_ARGS_BYTES, "{}", args.len());
                    assert!(args.contains("truncated"), "a visible marker");
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        match &stored[1].1 {
            TranscriptStep::ToolResult { text, .. } => {
                assert!(text.len() <= MAX_TOOL_RESULT_BYTES);
                assert!(text.contains("truncated"));
                assert!(text.starts_with("日本語🙂"));
            }
            other => panic!("{other:?}"),
        }
        store.close();
    }
);

contract!(archived_channels_keep_their_runs, |db: TestDb| async move {
    let store = db.open().await;
    worker(&store, "w", "default").await;
    store
        .upsert_channel("discord:1:2", "#general")
        .await
        .unwrap();
    let run_id = run(
        &store,
        "w",
        "CH-1",
        "in a channel",
        Some("discord:1:2"),
        Some("done"),
    )
    .await;
    let ch = store.archive_channel("discord:1:2").await.unwrap();
    assert!(ch.archived_at.is_some());
    assert_eq!(ch.runs, 1);
    assert_eq!(
        store.archive_channel("discord:1:2").await.unwrap_err().code,
        "channel_archived"
    );
    assert_eq!(
        store.archive_channel("nope").await.unwrap_err().code,
        "channel_not_found"
    );
    assert!(store.list_channels(false).await.unwrap().is_empty());
    assert_eq!(store.list_channels(true).await.unwrap().len(), 1);
    let (r, _) = store.run(&run_id).await.unwrap();
    assert_eq!(
        r.channel_name.as_deref(),
        Some("#general"),
        "history survives archiving"
    );
    store.close();
});

contract!(pruning_transcripts_keeps_rows, |db: TestDb| async move {
    let store = db.open().await;
    worker(&store, "w", "default").await;
    store
        .create_task(NewTask {
            vtid: Some("P".into()),
            title: "p".into(),
            dispatch: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let g = store.claim_task("w", "P", rules()).await.unwrap();
    let step = TranscriptStep::Action {
        content: vec![ActionContent::Text {
            text: "x".repeat(1000),
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
    store
        .progress(
            "w",
            "P",
            Some(g.claim_token),
            "worker.execution.completed",
            None,
            json!({}),
            None,
            rules(),
        )
        .await
        .unwrap();
    let (runs, bytes) = store
        .prune_transcripts(shepherd_store::now_ms() + 1000)
        .await
        .unwrap();
    assert_eq!(runs, 1);
    assert!(bytes > 0);
    let (r, t, _) = store.run_detail(&g.claim.run_id).await.unwrap();
    assert_eq!(
        (r.status.as_str(), r.has_transcript, t),
        ("done", false, None)
    );
    store.close();
});

contract!(
    a_reported_workspace_git_would_misread_is_refused,
    |db: TestDb| async move {
        let store = db.open().await;
        worker(&store, "w1", "a").await;
        let run_id = run(&store, "w1", "WS-1", "workspace", None, None).await;
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let report = |ws: serde_json::Value| {
            let store = store.clone();
            async move {
                // Without a token: the worker has held one claim on the task.
                store
                    .progress(
                        "w1",
                        "WS-1",
                        None,
                        "worker.building",
                        None,
                        json!({ "workspace": ws }),
                        None,
                        rules(),
                    )
                    .await
            }
        };
        let ws = |branch: &str, base_commit: &str, head: Option<&str>| {
            json!({ "branch": branch, "base": "main", "base_commit": base_commit,
                    "head": head, "repo": "/srv/repo" })
        };
        for bad in [
            ws("shepherd/WS-1-1", "--output=/tmp/shepherd-pwned", None),
            ws("shepherd/WS-1-1", "HEAD~1", None),
            ws("shepherd/WS-1-1", "0123456", None),
            ws("shepherd/WS-1-1", commit, Some("--output=/tmp/x")),
            ws("-x", commit, None),
            ws("--output=/tmp/x", commit, None),
            ws("a..b", commit, None),
            ws("main@{-1}", commit, None),
        ] {
            let e = report(bad.clone()).await.expect_err(&bad.to_string());
            assert_eq!(e.code, "invalid_workspace", "{bad}: {e:?}");
            assert_eq!(e.kind, shepherd_core::ErrorKind::Invalid);
            let (r, _) = store.run(&run_id).await.unwrap();
            assert_eq!(r.workspace, None, "nothing of {bad} is recorded");
        }
        report(ws("shepherd/WS-1-1", commit, None)).await.unwrap();
        let (r, _) = store.run(&run_id).await.unwrap();
        assert_eq!(r.workspace.unwrap().base_commit, commit);
        // A shape that is not a workspace at all stays the worker's business.
        report(json!({ "kind": "something else" })).await.unwrap();
    }
);
