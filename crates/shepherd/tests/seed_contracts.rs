//! The seeds' sentences that a client written from a seed relies on, each
//! checked against the real server on both stores, with the sentence
//! quoted above its test.

mod common;
#[path = "common/ws.rs"]
mod ws;

use std::time::Duration;

use serde_json::{json, Value};
use shepherd_protocol::{AddWorker, EventPage, Session, WorkerEventsResponse};

use common::{wait_for, Env, Kind, Server, SseClient};

const WAIT: Duration = Duration::from_secs(30);

/// Posts a task for `agent`, tried once.
async fn submit(s: &Server, vtid: &str, agent: &str) {
    let (st, body) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": agent, "max_attempts": 1 }),
        )
        .await;
    assert_eq!(st, 201, "{body}");
}

// Workers page seed: "Thread a `success: bool` through
// `ProcessEvent::WorkerComplete` and use it in `log_worker_completed` to
// write `'done'` vs `'failed'`."
e2e!(
    every_worker_completed_event_says_whether_the_run_succeeded,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.with_config_file(
            "[agents.fine]\ncommand = [\"sh\", \"-c\", \"echo fine\"]\n\
             [agents.broken]\ncommand = [\"sh\", \"-c\", \"echo broken; exit 3\"]\n",
        );
        let s = Server::start(&env).await;
        let mut sse =
            SseClient::connect(&s.base, "/api/events?types=worker_completed", None, None).await;
        submit(&s, "OK-1", "fine").await;
        submit(&s, "BAD-1", "broken").await;
        let mut seen: Vec<(String, Value, Value)> = Vec::new();
        while seen.len() < 2 {
            let f = sse.next(WAIT).await.expect("a worker_completed event");
            if f.event != "worker_completed" {
                continue;
            }
            let data = &f.data["data"];
            seen.push((
                f.data["task_id"].as_str().unwrap_or_default().to_owned(),
                data["status"].clone(),
                data["success"].clone(),
            ));
        }
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            seen,
            [
                ("BAD-1".to_owned(), json!("failed"), json!(false)),
                ("OK-1".to_owned(), json!("done"), json!(true)),
            ],
        );
        s.stop().await;
    }
);

// Worker state seed: "**last_event_ts** is the newest event timestamp in
// the response."
e2e!(
    last_event_ts_is_the_newest_event_returned,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        let go = env.dir.join("go");
        env.with_config_file(&format!(
            "[agents.pair]\nmax_concurrent = 2\ncommand = [\"sh\", \"-c\", \"while [ ! -e {} ]; do sleep 0.05; done\"]\n",
            go.display()
        ));
        let s = Server::start(&env).await;
        // The first claim makes the worker active (an event of the
        // registry's); the second, later, is a claim.granted the registry
        // view leaves out, and the newest event of the page.
        submit(&s, "P-1", "pair").await;
        common::typed::task_in(&s, "P-1", &["running"], WAIT).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        submit(&s, "P-2", "pair").await;
        common::typed::task_in(&s, "P-2", &["running"], WAIT).await;
        let body: WorkerEventsResponse = wait_for("the worker events", WAIT, || async {
            let (st, b) = s
                .get_as::<WorkerEventsResponse>("/api/v1/worker_events?include_summary=true", None)
                .await;
            (st == 200).then_some(b)
        })
        .await;
        let newest = body.events.iter().map(|e| e.ts.clone()).max();
        assert!(newest.is_some(), "{body:?}");
        assert_eq!(
            body.summary.expect("a summary").last_event_ts,
            newest,
            "{:?}",
            body.events
        );
        std::fs::write(&go, b"").unwrap();
        s.stop().await;
    }
);

// Worker restore seed: the `exit` message is `{type: 'exit', exitCode,
// signal}` with `signal: null` when no signal ended the process; the log's
// `session.worker.exited` says the same in the same types.
e2e!(
    a_signal_is_a_number_in_the_exit_message_and_the_event,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let dir = env.dir.join("work");
        std::fs::create_dir_all(&dir).unwrap();
        let (st, session) = s
            .post_as::<Session>(
                "/api/v1/sessions",
                None,
                json!({ "location_path": dir.canonicalize().unwrap() }),
            )
            .await;
        assert_eq!(st, 201);
        let tab = s
            .client(None)
            .add_session_worker(
                &session.id,
                &AddWorker {
                    kind: "terminal".into(),
                    name: None,
                    agent_id: None,
                },
            )
            .await
            .expect("a terminal tab");
        let mut term = ws::connect(&s.base, &session.id, &tab.id, None).await;
        term.history().await;
        term.type_line("kill -9 $$").await;
        let exit = term.wait_exit(WAIT).await;
        assert_eq!(exit, json!({"type": "exit", "exitCode": null, "signal": 9}));
        let exited = wait_for("the exit in the log", WAIT, || async {
            let (_, page) = s
                .get_as::<EventPage>("/api/v1/events?after=0&types=session.worker.exited", None)
                .await;
            page.events.into_iter().next()
        })
        .await;
        assert_eq!(exited.event.data["signal"], json!(9), "{exited:?}");
        assert_eq!(exited.event.data["exitCode"], Value::Null, "{exited:?}");
        s.stop().await;
    }
);

// Workers page seed: "The `StatusBlock` ... tracks active workers with: id,
// task, status text, started_at, tool_calls count. It's ... exposed via
// `GET /api/channels/status`."
e2e!(
    channels_status_lists_the_running_runs_per_channel,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        let go = env.dir.join("go");
        let script = env.script(
            "busy.sh",
            &format!(
                "echo '{{\"type\":\"status\",\"text\":\"reading the docs\"}}'\n\
                 echo '{{\"type\":\"action\",\"content\":[{{\"type\":\"tool_call\",\"id\":\"c1\",\"name\":\"shell\",\"args\":\"{{}}\"}}]}}'\n\
                 while [ ! -e {} ]; do sleep 0.05; done\n",
                go.display()
            ),
        );
        env.with_config_file(&format!(
            "[agents.busy]\ncommand = [\"sh\", \"{script}\"]\ntranscript = \"steps-jsonl\"\n"
        ));
        let s = Server::start(&env).await;
        let (st, b) = s
            .post(
                "/api/v1/channels",
                None,
                json!({ "id": "docs", "name": "#docs" }),
            )
            .await;
        assert!(st == 200 || st == 201, "{b}");
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                None,
                json!({ "vtid": "CS-1", "title": "Read the docs", "agent_id": "busy", "channel_id": "docs" }),
            )
            .await;
        assert_eq!(st, 201, "{b}");
        // Once the run's status and tool call have arrived, the snapshot
        // holds what the list route merges into its running row.
        let list_item = wait_for("the run's live state", WAIT, || async {
            let (_, list) = s
                .get_as::<shepherd_protocol::WorkerListResponse>(
                    "/api/agents/workers?agent_id=busy",
                    None,
                )
                .await;
            list.workers
                .into_iter()
                .find(|w| w.live_status.is_some() && w.tool_calls == 1)
        })
        .await;
        let (st, snap) = s
            .get_as::<shepherd_protocol::ChannelStatusResponse>("/api/channels/status", None)
            .await;
        assert_eq!(st, 200);
        assert_eq!(snap.channels.len(), 1, "{snap:?}");
        let docs = &snap.channels[0];
        assert_eq!(docs.channel_id.as_deref(), Some("docs"));
        assert_eq!(docs.channel_name.as_deref(), Some("#docs"));
        assert_eq!(docs.active_workers.len(), 1, "{snap:?}");
        let w = &docs.active_workers[0];
        assert_eq!(
            (
                w.id.as_str(),
                w.task.as_str(),
                w.status.as_deref(),
                w.started_at.as_str(),
                w.tool_calls
            ),
            (
                list_item.id.as_str(),
                "Read the docs",
                list_item.live_status.as_deref(),
                list_item.started_at.as_str(),
                1
            ),
        );
        // A worker's token sees only its own runs (this one ran none).
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/register",
                None,
                json!({ "worker_id": "outsider", "capabilities": [], "max_concurrent": 1 }),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let token = b["worker_token"].as_str().unwrap().to_owned();
        let (st, theirs) = s
            .get_as::<shepherd_protocol::ChannelStatusResponse>(
                "/api/channels/status",
                Some(&token),
            )
            .await;
        assert_eq!(st, 200);
        assert!(theirs.channels.is_empty(), "{theirs:?}");
        // Once the run ends, it is no longer active.
        std::fs::write(&go, b"").unwrap();
        common::typed::task_in(&s, "CS-1", &["done"], WAIT).await;
        let (_, after) = s
            .get_as::<shepherd_protocol::ChannelStatusResponse>("/api/channels/status", None)
            .await;
        assert!(after.channels.is_empty(), "{after:?}");
        s.stop().await;
    }
);
