//! Conversations on resources (the conversations contract), on both databases: the state
//! machine, cancel keeping partial work, new chat as an implicit cancel,
//! multitask, one processing conversation per resource under concurrency,
//! and the agent session id handed to the next claim.

mod common;

use serde_json::json;
use shepherd_core::event::EventFilter;
use shepherd_core::transcript::{ActionContent, TranscriptStep};
use shepherd_store::{Grant, LeaseRules, Multitask, Registration, Store};

use common::TestDb;

fn rules() -> LeaseRules {
    LeaseRules {
        ttl_ms: 3_600_000,
        heartbeat_timeout_ms: 300_000,
        not_before: 0,
        cancel_grace_ms: 30_000,
    }
}

async fn setup(store: &Store, worker: &str) {
    store
        .register_worker(Registration {
            worker_id: Some(worker.into()),
            agent_id: "coder".into(),
            worker_type: "builtin".into(),
            max_concurrent: 4,
            ..Default::default()
        })
        .await
        .unwrap();
    let (r, created) = store
        .upsert_resource("repo-1", "Repository one", "coder")
        .await
        .unwrap();
    assert!(created);
    assert_eq!(r.agent_id.as_deref(), Some("coder"));
}

fn step(text: &str) -> TranscriptStep {
    TranscriptStep::Action {
        content: vec![ActionContent::Text { text: text.into() }],
    }
}

/// Claims the conversation's current task as `worker`.
async fn claim_current(store: &Store, worker: &str, conversation: &str) -> Grant {
    let (view, _) = store.load_conversation(conversation).await.unwrap();
    let vtid = view.conversation.current_task_id.expect("a current task");
    store.claim_task(worker, &vtid, rules()).await.unwrap()
}

async fn finish(store: &Store, worker: &str, g: &Grant, event: &str, meta: serde_json::Value) {
    store
        .progress(
            worker,
            &g.task.vtid,
            Some(g.claim_token.clone()),
            event,
            None,
            meta,
            Some("the answer".into()),
            rules(),
        )
        .await
        .unwrap();
}

async fn state(store: &Store, id: &str) -> String {
    store
        .load_conversation(id)
        .await
        .unwrap()
        .0
        .conversation
        .state
}

contract!(send_reply_and_follow_up, |db: TestDb| async move {
    let store = db.open().await;
    setup(&store, "w1").await;
    let c = store.create_conversation("repo-1").await.unwrap();
    assert_eq!((c.state.as_str(), c.active), ("idle", true));
    let sent = store
        .send_message(&c.id, "Research the rows", Multitask::Reject)
        .await
        .unwrap();
    assert_eq!(sent.conversation.state, "processing");
    assert_eq!(sent.message.status, "sent");
    let g = claim_current(&store, "w1", &c.id).await;
    assert_eq!(g.task.channel_id.as_deref(), Some("repo-1"));
    assert_eq!(g.task.agent_id.as_deref(), Some("coder"));
    let ctx = g
        .conversation
        .clone()
        .expect("claim carries the conversation");
    assert_eq!((ctx.turn, ctx.agent_session_id.clone()), (1, None));
    assert_eq!(g.spec, "Research the rows");
    store
        .append_steps(
            &g.claim.run_id,
            &g.claim_token,
            None,
            0,
            vec![step("row 1"), step("row 2")],
            rules(),
        )
        .await
        .unwrap();
    let (view, cursor) = store.load_conversation(&c.id).await.unwrap();
    assert_eq!(view.active_run_id.as_deref(), Some(g.claim.run_id.as_str()));
    assert_eq!(view.messages.len(), 2);
    assert_eq!(view.messages[1].role, "agent");
    assert_eq!(view.messages[1].steps.parse().unwrap().len(), 2);
    assert!(cursor > 0);
    finish(
        &store,
        "w1",
        &g,
        "worker.execution.completed",
        json!({ "session_id": "agent-sess-1" }),
    )
    .await;
    let (view, _) = store.load_conversation(&c.id).await.unwrap();
    assert_eq!(view.conversation.state, "idle");
    assert_eq!(
        view.conversation.agent_session_id.as_deref(),
        Some("agent-sess-1")
    );
    assert_eq!(view.active_run_id, None);
    assert_eq!(view.messages[1].status, "done");
    assert_eq!(
        view.messages[1].steps.parse().unwrap().len(),
        2,
        "steps from the blob once finished"
    );
    assert_eq!(view.messages[1].text.as_deref(), Some("the answer"));

    // The follow-up: its claim carries the stored session id, its spec the history.
    store
        .send_message(&c.id, "Now the next ten", Multitask::Reject)
        .await
        .unwrap();
    let g2 = claim_current(&store, "w1", &c.id).await;
    let ctx = g2.conversation.clone().unwrap();
    assert_eq!(ctx.turn, 2);
    assert_eq!(ctx.agent_session_id.as_deref(), Some("agent-sess-1"));
    assert_eq!(ctx.message, "Now the next ten");
    assert!(g2.spec.contains("Research the rows"), "{}", g2.spec);
    assert!(g2.spec.contains("the answer"), "{}", g2.spec);
    assert!(g2.spec.ends_with("Now the next ten"), "{}", g2.spec);

    // Every change is an event carrying the conversation and the resource.
    let page = store
        .read_events(
            0,
            &EventFilter {
                conversation_id: Some(c.id.clone()),
                ..Default::default()
            },
            1000,
        )
        .await
        .unwrap();
    let types: Vec<&str> = page.events.iter().map(|e| e.kind.as_str()).collect();
    for t in [
        "conversation.created",
        "conversation.message",
        "conversation.state_changed",
        "run.started",
        "run.step",
        "run.completed",
        "conversation.agent_session",
    ] {
        assert!(types.contains(&t), "{t} missing from {types:?}");
    }
    assert!(page
        .events
        .iter()
        .all(|e| e.refs.channel_id.as_deref() == Some("repo-1")));
});

contract!(
    cancel_keeps_partial_steps_and_waits_for_the_run,
    |db: TestDb| async move {
        let store = db.open().await;
        setup(&store, "w1").await;
        let c = store.create_conversation("repo-1").await.unwrap();
        store
            .send_message(&c.id, "Research 10 rows", Multitask::Reject)
            .await
            .unwrap();
        let g = claim_current(&store, "w1", &c.id).await;
        let steps: Vec<_> = (1..=4)
            .map(|i| step(&format!("row {i} researched")))
            .collect();
        store
            .append_steps(&g.claim.run_id, &g.claim_token, None, 0, steps, rules())
            .await
            .unwrap();
        let after = store.cancel_conversation(&c.id, None).await.unwrap();
        assert_eq!(after.state, "cancelled");
        // Cancelled lasts until the run has ended: sends are refused meanwhile.
        let busy = store
            .send_message(&c.id, "again", Multitask::Reject)
            .await
            .unwrap_err();
        assert_eq!(busy.code, "conversation_busy");
        // The worker stops and sends one more step within the grace.
        store
            .append_steps(
                &g.claim.run_id,
                &g.claim_token,
                None,
                4,
                vec![step("stopping")],
                rules(),
            )
            .await
            .unwrap();
        finish(&store, "w1", &g, "worker.execution.cancelled", json!({})).await;
        let (view, _) = store.load_conversation(&c.id).await.unwrap();
        assert_eq!(view.conversation.state, "idle");
        assert_eq!(view.messages[1].status, "cancelled");
        assert_eq!(view.messages[1].steps.parse().unwrap().len(), 5);
        // Idle conversations have nothing to cancel.
        let e = store.cancel_conversation(&c.id, None).await.unwrap_err();
        assert_eq!(e.code, "conversation_idle");
        // And the conversation goes on.
        store
            .send_message(&c.id, "continue", Multitask::Reject)
            .await
            .unwrap();
        assert_eq!(state(&store, &c.id).await, "processing");
    }
);

contract!(
    cancel_before_any_claim_is_immediate,
    |db: TestDb| async move {
        let store = db.open().await;
        setup(&store, "w1").await;
        let c = store.create_conversation("repo-1").await.unwrap();
        store
            .send_message(&c.id, "hello", Multitask::Reject)
            .await
            .unwrap();
        let after = store.cancel_conversation(&c.id, None).await.unwrap();
        assert_eq!(after.state, "idle");
        let types: Vec<String> = store
            .read_events(
                0,
                &EventFilter {
                    conversation_id: Some(c.id.clone()),
                    kinds: vec!["conversation.state_changed".into()],
                    ..Default::default()
                },
                100,
            )
            .await
            .unwrap()
            .events
            .iter()
            .map(|e| {
                format!(
                    "{}->{}",
                    e.data["from"].as_str().unwrap(),
                    e.data["to"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            types,
            [
                "idle->processing",
                "processing->cancelled",
                "cancelled->idle"
            ]
        );
    }
);

contract!(
    new_chat_while_processing_is_an_implicit_cancel,
    |db: TestDb| async move {
        let store = db.open().await;
        setup(&store, "w1").await;
        let old = store.create_conversation("repo-1").await.unwrap();
        store
            .send_message(&old.id, "long research", Multitask::Reject)
            .await
            .unwrap();
        let g = claim_current(&store, "w1", &old.id).await;
        store
            .append_steps(
                &g.claim.run_id,
                &g.claim_token,
                None,
                0,
                vec![step("row 1")],
                rules(),
            )
            .await
            .unwrap();
        let new = store.create_conversation("repo-1").await.unwrap();
        assert!(new.active);
        let (old_view, _) = store.load_conversation(&old.id).await.unwrap();
        assert_eq!(old_view.conversation.state, "cancelled");
        assert!(!old_view.conversation.active);
        finish(&store, "w1", &g, "worker.execution.cancelled", json!({})).await;
        let (old_view, _) = store.load_conversation(&old.id).await.unwrap();
        assert_eq!(old_view.conversation.state, "idle");
        assert_eq!(
            old_view.messages[1].steps.parse().unwrap().len(),
            1,
            "partial work preserved"
        );
        let shepherd_store::ConversationPage {
            conversations: list,
            next_before: next,
            ..
        } = store.list_conversations("repo-1", None, 1).await.unwrap();
        assert_eq!(list[0].id, new.id, "newest first");
        let shepherd_store::ConversationPage {
            conversations: list2,
            next_before: next2,
            ..
        } = store.list_conversations("repo-1", next, 1).await.unwrap();
        assert_eq!(list2[0].id, old.id);
        assert_eq!(next2, None);
        // Continue the old one: it becomes active again.
        let back = store.activate_conversation(&old.id).await.unwrap();
        assert!(back.active);
        let res = store.list_resources().await.unwrap().items;
        assert_eq!(
            res[0].active_conversation_id.as_deref(),
            Some(old.id.as_str())
        );
    }
);

contract!(enqueue_and_interrupt, |db: TestDb| async move {
    let store = db.open().await;
    setup(&store, "w1").await;
    let c = store.create_conversation("repo-1").await.unwrap();
    store
        .send_message(&c.id, "first", Multitask::Reject)
        .await
        .unwrap();
    let g1 = claim_current(&store, "w1", &c.id).await;
    let e = store
        .send_message(&c.id, "second", Multitask::Reject)
        .await
        .unwrap_err();
    assert_eq!(e.code, "conversation_busy");
    let q = store
        .send_message(&c.id, "second", Multitask::Enqueue)
        .await
        .unwrap();
    assert_eq!(q.message.status, "queued");
    finish(&store, "w1", &g1, "worker.execution.completed", json!({})).await;
    // The queued message started when the first run ended.
    let (view, _) = store.load_conversation(&c.id).await.unwrap();
    assert_eq!(view.conversation.state, "processing");
    let g2 = claim_current(&store, "w1", &c.id).await;
    assert_eq!(g2.conversation.as_ref().unwrap().message, "second");
    store
        .append_steps(
            &g2.claim.run_id,
            &g2.claim_token,
            None,
            0,
            vec![step("half")],
            rules(),
        )
        .await
        .unwrap();
    // Interrupt: the current run is cancelled, then this one runs.
    let i = store
        .send_message(&c.id, "third, now", Multitask::Interrupt)
        .await
        .unwrap();
    assert_eq!(i.message.status, "queued");
    assert_eq!(i.conversation.state, "cancelled");
    finish(&store, "w1", &g2, "worker.execution.cancelled", json!({})).await;
    let g3 = claim_current(&store, "w1", &c.id).await;
    assert_eq!(g3.conversation.as_ref().unwrap().message, "third, now");
    let (view, _) = store.load_conversation(&c.id).await.unwrap();
    let summary: Vec<(String, String)> = view
        .messages
        .iter()
        .map(|m| (m.role.to_string(), m.status.clone()))
        .collect();
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        summary,
        [
            s("user", "sent"),
            s("agent", "done"),
            s("user", "sent"),
            s("agent", "cancelled"),
            s("user", "sent"),
            s("agent", "running")
        ]
    );
    assert_eq!(
        view.messages[3].steps.parse().unwrap().len(),
        1,
        "the interrupted reply keeps its work"
    );
});

contract!(
    one_processing_conversation_per_resource,
    |db: TestDb| async move {
        let store = db.open().await;
        setup(&store, "w1").await;
        let a = store.create_conversation("repo-1").await.unwrap();
        store
            .send_message(&a.id, "in a", Multitask::Reject)
            .await
            .unwrap();
        let b = store.create_conversation("repo-1").await.unwrap();
        // Creating b cancelled a (no claim yet, so at once).
        assert_eq!(state(&store, &a.id).await, "idle");
        store
            .send_message(&b.id, "in b", Multitask::Reject)
            .await
            .unwrap();
        // a is not active and b is processing: a send in a is refused.
        let e = store
            .send_message(&a.id, "again in a", Multitask::Reject)
            .await
            .unwrap_err();
        assert_eq!(e.code, "resource_busy");
        // Enqueued on the resource, it starts once b's task ends.
        store
            .send_message(&a.id, "again in a", Multitask::Enqueue)
            .await
            .unwrap();
        assert_eq!(state(&store, &a.id).await, "idle");
        let g = claim_current(&store, "w1", &b.id).await;
        finish(&store, "w1", &g, "worker.execution.failed", json!({})).await;
        assert_eq!(state(&store, &b.id).await, "idle");
        assert_eq!(state(&store, &a.id).await, "processing");
    }
);

contract!(
    concurrent_sends_accept_exactly_one,
    |db: TestDb| async move {
        let store = db.open().await;
        setup(&store, "w1").await;
        let c = store.create_conversation("repo-1").await.unwrap();
        let mut handles = Vec::new();
        for i in 0..32 {
            let (store, id) = (store.clone(), c.id.clone());
            handles.push(tokio::spawn(async move {
                store
                    .send_message(&id, &format!("message {i}"), Multitask::Reject)
                    .await
            }));
        }
        let mut ok = 0;
        for h in handles {
            match h.await.unwrap() {
                Ok(_) => ok += 1,
                Err(e) => assert_eq!(e.code, "conversation_busy", "{e:?}"),
            }
        }
        assert_eq!(ok, 1);
        let (view, _) = store.load_conversation(&c.id).await.unwrap();
        assert_eq!(
            view.messages.iter().filter(|m| m.role == "user").count(),
            1,
            "refused sends store nothing"
        );
        assert_eq!(view.conversation.messages, 1);
    }
);

contract!(bad_input, |db: TestDb| async move {
    let store = db.open().await;
    setup(&store, "w1").await;
    let e = store
        .upsert_resource("repo 2", "x", "coder")
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_resource_id");
    let e = store
        .upsert_resource("repo-2", "x", "nobody")
        .await
        .unwrap_err();
    assert_eq!(e.code, "unknown_agent");
    let (_, created) = store
        .upsert_resource("repo-1", "Renamed", "coder")
        .await
        .unwrap();
    assert!(!created);
    let e = store.create_conversation("nope").await.unwrap_err();
    assert_eq!(e.code, "resource_not_found");
    let c = store.create_conversation("repo-1").await.unwrap();
    let e = store
        .send_message(&c.id, "  ", Multitask::Reject)
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_text");
    let e = store
        .send_message("nope", "hi", Multitask::Reject)
        .await
        .unwrap_err();
    assert_eq!(e.code, "conversation_not_found");
    let e = store
        .list_conversations("repo-1", Some("garbage".into()), 10)
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_page_token");
});

contract!(
    an_agent_session_id_that_could_be_an_option_is_refused,
    |db: TestDb| async move {
        let store = db.open().await;
        setup(&store, "w1").await;
        let c = store.create_conversation("repo-1").await.unwrap();
        store
            .send_message(&c.id, "hello", Multitask::Reject)
            .await
            .unwrap();
        let g = claim_current(&store, "w1", &c.id).await;
        let report = |meta: serde_json::Value| {
            let (store, token, vtid) = (store.clone(), g.claim_token.clone(), g.task.vtid.clone());
            async move {
                store
                    .progress(
                        "w1",
                        &vtid,
                        Some(token),
                        "worker.building",
                        None,
                        meta,
                        None,
                        rules(),
                    )
                    .await
            }
        };
        let long = "a".repeat(shepherd_core::cmdline::AGENT_SESSION_ID_MAX + 1);
        for bad in [
            json!({ "agent_session_id": "--evil=/x" }),
            json!({ "agent_session_id": "-x" }),
            json!({ "agent_session_id": "a b" }),
            json!({ "agent_session_id": "{run_id}" }),
            json!({ "agent_session_id": long }),
            json!({ "session_id": "--evil=/x" }),
        ] {
            let e = report(bad.clone()).await.expect_err(&bad.to_string());
            assert_eq!(e.code, "invalid_agent_session_id", "{bad}: {e:?}");
            assert_eq!(e.kind, shepherd_core::ErrorKind::Invalid);
            let (view, _) = store.load_conversation(&c.id).await.unwrap();
            assert_eq!(view.conversation.agent_session_id, None, "{bad}");
        }
        report(json!({ "agent_session_id": "0f8e2c1a-7b7d_X" }))
            .await
            .unwrap();
        let (view, _) = store.load_conversation(&c.id).await.unwrap();
        assert_eq!(
            view.conversation.agent_session_id.as_deref(),
            Some("0f8e2c1a-7b7d_X")
        );
    }
);

contract!(
    titles_come_from_the_first_message_and_empty_chats_do_not_pile_up,
    |db: TestDb| async move {
        let store = db.open().await;
        setup(&store, "w1").await;
        let first = store.create_conversation("repo-1").await.unwrap();
        assert_eq!(first.title, None);
        store
            .send_message(
                &first.id,
                "\n  Fix the login bug  \nIt fails on Safari.",
                Multitask::Reject,
            )
            .await
            .unwrap();
        // "New chat" twice without a word: only the active empty one shows.
        let left_empty = store.create_conversation("repo-1").await.unwrap();
        let current = store.create_conversation("repo-1").await.unwrap();
        let page = store.list_conversations("repo-1", None, 50).await.unwrap();
        let ids: Vec<&str> = page.conversations.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, [current.id.as_str(), first.id.as_str()], "{page:?}");
        assert!(!ids.contains(&left_empty.id.as_str()));
        assert_eq!(
            page.conversations[1].title.as_deref(),
            Some("Fix the login bug")
        );
        assert_eq!(page.conversations[0].title, None);
        // The one left empty is still there to open by id.
        let (again, _) = store.load_conversation(&left_empty.id).await.unwrap();
        assert_eq!(again.conversation.messages, 0);
    }
);
