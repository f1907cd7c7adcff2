//! The real binary as a child process: graceful shutdown on SIGTERM, refusal
//! to expose itself without a token, and what survives a SIGKILL: the event
//! stream resumes exactly, workers are recovered with their provenance, and
//! claims of workers that never come back expire while the others carry on.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use shepherd_protocol::{
    ClaimResponse, EventApplied, EventPageQuery, HeartbeatResponse, Task, WireEvent,
    WorkerEventsQuery, WorkerInfo, WorkerInfoList, WorkersQuery, WorkersSnapshot,
};

use common::{free_port, task, wait_ready, Env, Kind, Served, SseClient};

/// `shepherd serve` on `listen` (`127.0.0.1:0`, or the address an earlier
/// run of the same test chose), ready when this returns.
async fn spawn(env: &Env, listen: &str) -> Served {
    let p = Served::spawn(
        env.serve_command()
            .env("SHEPHERD_LISTEN", listen)
            .env_remove("SHEPHERD_CONFIG")
            .stderr(Stdio::inherit()),
    );
    wait_ready(&reqwest::Client::new(), &p.base).await;
    p
}

fn signal(p: &Served, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(p.pid(), sig);
    }
}

fn wait_exit(p: &mut Served, within: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return st;
        }
        assert!(
            start.elapsed() < within,
            "process did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or_default())
}

/// [`post`] with the answer read as a `T`, for where the exact status
/// matters; an answer that is not a `T` fails the test.
async fn post_as<T: DeserializeOwned>(base: &str, path: &str, body: Value) -> (u16, T) {
    let (st, raw) = post(base, path, body).await;
    match T::deserialize(&raw) {
        Ok(typed) => (st, typed),
        Err(e) => panic!(
            "POST {path} answered {st} with no {}: {e}\n{raw}",
            std::any::type_name::<T>()
        ),
    }
}

/// The worker `id` in the list.
fn worker<'a>(ws: &'a WorkerInfoList, id: &str) -> &'a WorkerInfo {
    ws.workers
        .iter()
        .find(|w| w.worker_id == id)
        .unwrap_or_else(|| panic!("no worker {id}: {ws:?}"))
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully_even_with_a_stream_open() {
    let env = Env::new(Kind::Sqlite);
    let mut p = spawn(&env, "127.0.0.1:0").await;
    assert!(
        env.dir.join("shepherd.db").exists(),
        "the data directory holds the database"
    );
    let mut sse = SseClient::connect(&p.base, "/api/events?after=0", None, None).await;
    assert!(sse.next(Duration::from_secs(5)).await.is_some());
    signal(&p, libc::SIGTERM);
    let st = wait_exit(&mut p, Duration::from_secs(5));
    assert!(st.success(), "exit status {st:?}");
}

#[tokio::test]
async fn a_reader_of_the_announcement_that_goes_away_does_not_stop_the_server() {
    // `shepherd serve | head -1`: stdout's reader is gone before the server
    // says where it listens. The port is told in advance, since nobody
    // reads it back here.
    let env = Env::new(Kind::Sqlite);
    let port = free_port();
    let mut child = env
        .serve_command()
        .env("SHEPHERD_LISTEN", format!("127.0.0.1:{port}"))
        .env("SHEPHERD_METRICS_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn shepherd serve");
    drop(child.stdout.take());
    let p = common::Proc(child);
    wait_ready(&reqwest::Client::new(), &format!("http://127.0.0.1:{port}")).await;
    assert!(common::alive(p.0.id() as i32), "the server still runs");
}

#[tokio::test]
async fn refuses_to_listen_beyond_loopback_without_a_token() {
    let env = Env::new(Kind::Sqlite);
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .arg("serve")
        .envs(&env.vars)
        .env("SHEPHERD_LISTEN", "0.0.0.0:0")
        .env_remove("SHEPHERD_AUTH_TOKEN")
        .env_remove("SHEPHERD_TOKEN")
        .current_dir(&env.dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SHEPHERD_TOKEN"), "{err}");
}

#[tokio::test]
async fn bad_configuration_names_the_key() {
    let env = Env::new(Kind::Sqlite);
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .arg("serve")
        .envs(&env.vars)
        .env("SHEPHERD_CLAIM_TTL_SECS", "an hour")
        .current_dir(&env.dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("SHEPHERD_CLAIM_TTL_SECS"));
}

e2e!(
    after_sigkill_streams_resume_and_silent_workers_lose_their_claims,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "2")
            .set("SHEPHERD_SWEEP_INTERVAL_SECS", "1");
        let mut p = spawn(&env, "127.0.0.1:0").await;
        let addr = p.addr.to_string();
        for w in ["silent", "faithful"] {
            let (st, _) = post(
                &p.base,
                "/api/v1/worker/orchestrator/register",
                json!({ "worker_id": w }),
            )
            .await;
            assert_eq!(st, 200);
        }
        let mut runs = Vec::new();
        for (t, w) in [("K-1", "silent"), ("K-2", "faithful")] {
            post(&p.base, "/api/v1/tasks", task(t, "simple")).await;
            let (st, c) = post_as::<ClaimResponse>(
                &p.base,
                &format!("/api/v1/worker/orchestrator/tasks/{t}/claim"),
                json!({ "worker_id": w }),
            )
            .await;
            assert_eq!(st, 200, "{c:?}");
            runs.push((c.run_id, c.claim_token));
            post(
                &p.base,
                &format!("/api/v1/runs/{}/steps", runs.last().unwrap().0),
                json!({
                    "claim_token": runs.last().unwrap().1, "start_index": 0,
                    "steps": [{"type":"action","content":[{"type":"text","text":"working"}]}]
                }),
            )
            .await;
        }
        // A client follows the stream, then loses its connection.
        let mut sse =
            SseClient::connect(&p.base, "/api/events?after=0&types=task.*", None, None).await;
        let mut seen = Vec::new();
        while let Some(f) = sse.next(Duration::from_millis(500)).await {
            seen.push(f.id.unwrap());
        }
        assert!(!seen.is_empty());
        drop(sse);
        let (_, missed_task) =
            post_as::<Task>(&p.base, "/api/v1/tasks", task("K-3", "simple")).await;
        assert_eq!(missed_task.vtid, "K-3");
        signal(&p, libc::SIGKILL);
        wait_exit(&mut p, Duration::from_secs(5));

        let started = Instant::now();
        let p = spawn(&env, &addr).await;
        let client = shepherd_client::Client::new(&p.base, None).unwrap();
        // Recovered workers are marked as such until they are heard from again.
        let ws = client.workers(&WorkersQuery::default()).await.unwrap();
        for id in ["silent", "faithful"] {
            let w = worker(&ws, id);
            assert_eq!(w.source, "event_log", "{w:?}");
            assert_eq!(w.event_state, "active");
            assert!(
                w.recovered_at.is_some() && w.last_event_ts.is_some(),
                "{w:?}"
            );
        }
        // The faithful worker keeps heartbeating; the silent one never returns.
        let beat = |base: String| async move {
            post(
                &base,
                "/api/v1/worker/orchestrator/heartbeat",
                json!({ "worker_id": "faithful" }),
            )
            .await
        };
        let (st, hb) = beat(p.base.clone()).await;
        let hb: HeartbeatResponse = serde_json::from_value(hb).unwrap();
        assert_eq!((st, hb.claims.len()), (200, 1));
        let ws = client.workers(&WorkersQuery::default()).await.unwrap();
        assert_eq!(worker(&ws, "faithful").source, "registry");

        // The stream resumes exactly after the last event the client saw.
        let mut sse = SseClient::connect(
            &p.base,
            "/api/events?types=task.*",
            None,
            Some(*seen.last().unwrap()),
        )
        .await;
        let f = sse
            .next(Duration::from_secs(5))
            .await
            .expect("missed event");
        let missed: WireEvent = serde_json::from_value(f.data.clone()).unwrap();
        assert_eq!(missed.event.refs.task_id.as_deref(), Some("K-3"));
        assert_eq!(f.event, "task.created");
        // Within the heartbeat timeout nothing expired (downtime does not count).
        let state = |vtid: &'static str| {
            let client = client.clone();
            async move { client.task(vtid).await.map(|(t, _)| t.task.state) }
        };
        assert_eq!(state("K-1").await.unwrap(), "running");
        // Later, the silent worker's claim expires; the faithful one carries on.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            beat(p.base.clone()).await;
            let k1 = state("K-1").await;
            if k1.as_ref().is_ok_and(|s| s == "pending") {
                break;
            }
            assert!(Instant::now() < deadline, "claim never expired: {k1:?}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "expired before one heartbeat timeout after start"
        );
        let (run1, _) = client.run(&runs[0].0).await.unwrap();
        assert_eq!(run1.detail.status, "failed");
        assert_eq!(
            run1.detail.transcript.as_ref().map(Vec::len),
            Some(1),
            "its steps are kept"
        );
        assert_eq!(state("K-2").await.unwrap(), "running");
        let (st, done) = post_as::<EventApplied>(&p.base, "/api/v1/worker/orchestrator/tasks/K-2/progress", json!({
        "worker_id": "faithful", "event": "worker.execution.completed", "claim_token": runs[1].1
    })).await;
        assert_eq!((st, done.state.as_str()), (200, "done"), "{done:?}");
        let expired = EventPageQuery {
            types: Some("worker.claim.expired".into()),
            ..Default::default()
        };
        let (evs, _) = client.events(&expired).await.unwrap();
        assert_eq!(evs.events.len(), 1);
        let we = client
            .worker_events(&WorkerEventsQuery {
                include_summary: Some(true),
                include_snapshot: Some(true),
                ..Default::default()
            })
            .await
            .unwrap();
        let snapshot = we.snapshot.clone().flatten();
        assert!(
            snapshot.is_some_and(|s| serde_json::from_value::<WorkersSnapshot>(s.data).is_ok()),
            "{we:?}"
        );
        let mut p = p;
        signal(&p, libc::SIGTERM);
        assert!(wait_exit(&mut p, Duration::from_secs(5)).success());
    }
);
