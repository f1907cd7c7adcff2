//! The real binary as a child process: graceful shutdown on SIGTERM, refusal
//! to expose itself without a token, and what survives a SIGKILL: the event
//! stream resumes exactly, workers are recovered with their provenance, and
//! claims of workers that never come back expire while the others carry on.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{task, wait_ready, Env, Kind, Served, SseClient};

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

async fn get(base: &str, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or_default())
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
            let (st, c) = post(
                &p.base,
                &format!("/api/v1/worker/orchestrator/tasks/{t}/claim"),
                json!({ "worker_id": w }),
            )
            .await;
            assert_eq!(st, 200, "{c}");
            runs.push((
                c["run_id"].as_str().unwrap().to_owned(),
                c["claim_token"].as_str().unwrap().to_owned(),
            ));
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
        let (_, missed_task) = post(&p.base, "/api/v1/tasks", task("K-3", "simple")).await;
        assert_eq!(missed_task["vtid"], "K-3");
        signal(&p, libc::SIGKILL);
        wait_exit(&mut p, Duration::from_secs(5));

        let started = Instant::now();
        let p = spawn(&env, &addr).await;
        // Recovered workers are marked as such until they are heard from again.
        let (_, ws) = get(&p.base, "/api/v1/workers").await;
        let by_id = |id: &str| {
            ws["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["worker_id"] == id)
                .cloned()
                .unwrap()
        };
        for id in ["silent", "faithful"] {
            let w = by_id(id);
            assert_eq!(w["source"], "event_log", "{w}");
            assert_eq!(w["event_state"], "active");
            assert!(
                w["recovered_at"].is_string() && w["last_event_ts"].is_string(),
                "{w}"
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
        assert_eq!((st, hb["claims"].as_array().unwrap().len()), (200, 1));
        let (_, ws) = get(&p.base, "/api/v1/workers").await;
        let faithful = ws["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["worker_id"] == "faithful")
            .cloned()
            .unwrap();
        assert_eq!(faithful["source"], "registry");

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
        assert_eq!(f.data["task_id"], "K-3");
        assert_eq!(f.event, "task.created");
        // Within the heartbeat timeout nothing expired (downtime does not count).
        let (_, k1) = get(&p.base, "/api/v1/tasks/K-1").await;
        assert_eq!(k1["state"], "running");
        // Later, the silent worker's claim expires; the faithful one carries on.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            beat(p.base.clone()).await;
            let (_, k1) = get(&p.base, "/api/v1/tasks/K-1").await;
            if k1["state"] == "pending" {
                break;
            }
            assert!(Instant::now() < deadline, "claim never expired: {k1}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "expired before one heartbeat timeout after start"
        );
        let (_, run1) = get(&p.base, &format!("/api/v1/runs/{}", runs[0].0)).await;
        assert_eq!(run1["status"], "failed");
        assert_eq!(
            run1["transcript"].as_array().map(Vec::len),
            Some(1),
            "its steps are kept"
        );
        let (_, k2) = get(&p.base, "/api/v1/tasks/K-2").await;
        assert_eq!(k2["state"], "running");
        let (st, done) = post(&p.base, "/api/v1/worker/orchestrator/tasks/K-2/progress", json!({
        "worker_id": "faithful", "event": "worker.execution.completed", "claim_token": runs[1].1
    })).await;
        assert_eq!((st, done["state"].as_str()), (200, Some("done")), "{done}");
        let (_, evs) = get(&p.base, "/api/v1/events?types=worker.claim.expired").await;
        assert_eq!(evs["events"].as_array().unwrap().len(), 1);
        let (_, we) = get(
            &p.base,
            "/api/v1/worker_events?include_summary=true&include_snapshot=true",
        )
        .await;
        assert!(we["snapshot"]["data"]["workers"].is_array(), "{we}");
        let mut p = p;
        signal(&p, libc::SIGTERM);
        assert!(wait_exit(&mut p, Duration::from_secs(5)).success());
    }
);
