//! A graceful restart of `shepherd serve` does not touch agent work: each
//! agent runs under its shim, the next start re-adopts it, streams what it
//! wrote meanwhile (every line once) and ends the run with the agent's real
//! exit status. A shim no server comes back for ends its agent; a run whose
//! shim is gone too goes back to the queue (`server_restart`). A failed
//! task can be retried.

mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shepherd_protocol::{
    ActionContent, EventPageQuery, RunsQuery, StepsPage, StepsQuery, Task, TaskStateChanged,
    TranscriptStep,
};

use shepherd_runner::shim::ExitRecord;

use common::typed::{runs_of, task_in};
use common::{alive, wait_for, Env, Kind, Served, Server};

/// Up to 500 steps of a run.
const ALL_STEPS: StepsQuery = StepsQuery {
    after: None,
    limit: Some(500),
};

/// The text each step opens with, for the steps that open with one.
fn texts_of(page: &StepsPage) -> Vec<String> {
    page.steps
        .iter()
        .filter_map(|st| match &st.step {
            TranscriptStep::Action { content } => match content.first() {
                Some(ActionContent::Text { text }) => Some(text.clone()),
                _ => None,
            },
            TranscriptStep::ToolResult { .. } => None,
        })
        .collect()
}

/// The run's step texts; none while its steps cannot be read.
async fn step_texts(s: &Server, run_id: &str) -> Vec<String> {
    s.client(None)
        .steps(run_id, &ALL_STEPS)
        .await
        .map(|page| texts_of(&page))
        .unwrap_or_default()
}

fn read_pid(path: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// An agent printing one transcript step every 150 ms, its pid first.
fn slow_agent(env: &Env, lines: u32, code: i32) -> String {
    let pid = env.dir.join("agent.pid");
    env.script(
        "slow.sh",
        &format!(
            r#"echo $$ > {pid}
for i in $(seq 1 {lines}); do
  echo "{{\"type\":\"action\",\"content\":[{{\"type\":\"text\",\"text\":\"line $i\"}}]}}"
  sleep 0.15
done
exit {code}
"#,
            pid = pid.display()
        ),
    )
}

async fn survives_a_restart(kind: Kind, code: i32) {
    let mut env = Env::new(kind);
    let lines = 30;
    let script = slow_agent(&env, lines, code);
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "30")
        .set("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .with_config_file(&format!(
            "[agents.slow]\ncommand = [\"sh\", \"{script}\"]\ntranscript = \"steps-jsonl\"\n"
        ));
    let s = Server::start(&env).await;
    let (st, _) = s
        .post_as::<Task>(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "SR-1", "title": "survive", "spec": "go", "agent_id": "slow" }),
        )
        .await;
    assert_eq!(st, 201);
    task_in(
        &s,
        "SR-1",
        &["running", "in_progress"],
        Duration::from_secs(20),
    )
    .await;
    let run_id = runs_of(&s, "SR-1").await[0].id.clone();
    wait_for("a few steps", Duration::from_secs(20), || async {
        (step_texts(&s, &run_id).await.len() >= 3).then_some(Value::Null)
    })
    .await;
    let pid_file = env.dir.join("agent.pid");
    let pid = read_pid(&pid_file).expect("agent pid");
    s.stop().await;
    let dir = env.dir.join("runner").join("runs").join(&run_id);
    assert!(
        alive(pid),
        "the agent outlives a graceful stop of the server: exit {:?}, shim log {:?}",
        std::fs::read_to_string(dir.join("exit")),
        std::fs::read_to_string(dir.join("shim.log"))
    );
    // While no server runs, the agent goes on writing.
    let out = env
        .dir
        .join("runner")
        .join("runs")
        .join(&run_id)
        .join("out");
    let before = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    wait_for(
        "the agent to write while the server is down",
        Duration::from_secs(10),
        || async {
            (std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) > before).then_some(Value::Null)
        },
    )
    .await;
    let s = Server::start(&env).await;
    let end = if code == 0 { "done" } else { "failed" };
    task_in(&s, "SR-1", &[end], Duration::from_secs(30)).await;
    let runs = runs_of(&s, "SR-1").await;
    assert_eq!(runs.len(), 1, "one run, carried on: {runs:?}");
    assert_eq!(runs[0].id, run_id);
    let texts = step_texts(&s, &run_id).await;
    let want: Vec<String> = (1..=lines).map(|i| format!("line {i}")).collect();
    assert_eq!(texts, want, "every line exactly once, in order");
    let (detail, _) = s.client(None).run(&run_id).await.expect("the run");
    let run = detail.run;
    if code == 0 {
        assert_eq!(run.status, "done", "{run:?}");
    } else {
        assert_eq!(run.status, "failed", "{run:?}");
        assert!(
            run.result
                .as_deref()
                .is_some_and(|r| r.contains(&format!("exit code {code}"))),
            "the real exit status: {run:?}"
        );
    }
    assert!(!alive(pid));
    s.stop().await;
}

e2e!(
    an_agent_survives_a_graceful_restart_and_completes,
    |kind| async move { survives_a_restart(kind, 0).await }
);

e2e!(
    an_agent_that_fails_after_a_restart_reports_its_real_exit_code,
    |kind| async move { survives_a_restart(kind, 3).await }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_whose_server_never_returns_ends_its_agent() {
    let mut env = Env::new(Kind::Sqlite);
    let script = slow_agent(&env, 1000, 0);
    // Heartbeat timeout 3 s, heartbeats every second: the lease is 2 s.
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "3")
        .set("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .with_config_file(&format!(
            "[agents.slow]\ncommand = [\"sh\", \"{script}\"]\ntranscript = \"steps-jsonl\"\n"
        ));
    let s = Server::start(&env).await;
    s.post(
        "/api/v1/tasks",
        None,
        json!({ "vtid": "SN-1", "title": "orphan", "spec": "go", "agent_id": "slow" }),
    )
    .await;
    task_in(
        &s,
        "SN-1",
        &["running", "in_progress"],
        Duration::from_secs(20),
    )
    .await;
    let run_id = runs_of(&s, "SN-1").await[0].id.clone();
    let pid_file = env.dir.join("agent.pid");
    let pid = wait_for("the agent's pid", Duration::from_secs(10), || async {
        read_pid(&pid_file)
    })
    .await;
    s.stop().await;
    let stopped = Instant::now();
    assert!(alive(pid), "alive right after the stop");
    wait_for(
        "the shim to end its agent",
        Duration::from_secs(15),
        || async { (!alive(pid)).then_some(Value::Null) },
    )
    .await;
    assert!(
        stopped.elapsed() >= Duration::from_millis(1500),
        "not before the lease timeout"
    );
    let exit = env
        .dir
        .join("runner")
        .join("runs")
        .join(&run_id)
        .join("exit");
    let record = wait_for("the exit record", Duration::from_secs(5), || async {
        std::fs::read_to_string(&exit)
            .ok()
            .and_then(|t| serde_json::from_str::<ExitRecord>(&t).ok())
    })
    .await;
    assert!(record.lease_expired, "{record:?}");
}

async fn lost_run_is_requeued(kind: Kind) {
    let mut env = Env::new(kind);
    let marker = env.dir.join("first-attempt");
    let pid_file = env.dir.join("agent.pid");
    let script = env.script(
        "once.sh",
        &format!(
            "echo $$ > {p}\nif [ ! -e {m} ]; then touch {m}; sleep 60; fi\necho finished on retry\n",
            m = marker.display(),
            p = pid_file.display()
        ),
    );
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "30")
        .set("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .with_config_file(&format!(
            "[agents.once]\ncommand = [\"sh\", \"{script}\"]\n"
        ));
    let s = Server::start(&env).await;
    s.post(
        "/api/v1/tasks",
        None,
        json!({ "vtid": "SL-1", "title": "lost", "spec": "go", "agent_id": "once" }),
    )
    .await;
    task_in(
        &s,
        "SL-1",
        &["running", "in_progress"],
        Duration::from_secs(20),
    )
    .await;
    let run_id = runs_of(&s, "SL-1").await[0].id.clone();
    let pid = wait_for("the agent's pid", Duration::from_secs(10), || async {
        read_pid(&pid_file)
    })
    .await;
    s.stop().await;
    // A host reboot, as far as the run can tell: shim and agent are gone.
    let dir = env.dir.join("runner").join("runs").join(&run_id);
    let shim = read_pid(&dir.join("shim")).expect("the shim's record");
    assert!(alive(shim), "the shim outlives the server's stop");
    // SAFETY: plain kill(2) calls on processes this test started.
    unsafe {
        libc::kill(shim, libc::SIGKILL);
        libc::kill(-pid, libc::SIGKILL);
    }
    wait_for("shim and agent to die", Duration::from_secs(10), || async {
        (!alive(shim) && !alive(pid)).then_some(Value::Null)
    })
    .await;
    let s = Server::start(&env).await;
    task_in(&s, "SL-1", &["done"], Duration::from_secs(30)).await;
    let runs = runs_of(&s, "SL-1").await;
    let statuses: Vec<&str> = runs.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, vec!["done", "failed"], "newest first: {runs:?}");
    let lost = &runs[1];
    assert_eq!(lost.id, run_id);
    assert!(
        lost.result
            .as_deref()
            .is_some_and(|r| r.contains("server_restart")),
        "put back in the queue for the restart: {lost:?}"
    );
    let q = EventPageQuery {
        types: Some("task.state_changed".into()),
        limit: Some(500),
        ..Default::default()
    };
    let (events, _) = s.client(None).events(&q).await.expect("the events");
    let changes: Vec<TaskStateChanged> = events
        .events
        .into_iter()
        .filter(|e| e.event.refs.task_id.as_deref() == Some("SL-1"))
        .map(|e| serde_json::from_value(e.event.data).expect("a state change"))
        .collect();
    assert!(
        !changes
            .iter()
            .any(|c| c.to == "failed" || c.to == "cancelled"),
        "the task never ended failed or cancelled: {changes:?}"
    );
    s.stop().await;
}

e2e!(
    a_run_whose_shim_died_goes_back_to_the_queue,
    |kind| async move { lost_run_is_requeued(kind).await }
);

async fn retry(kind: Kind) {
    let mut env = Env::new(kind);
    let marker = env.dir.join("failed-once");
    let script = env.script(
        "flaky.sh",
        &format!(
            "if [ ! -e {m} ]; then touch {m}; echo broken >&2; exit 2; fi\necho fine\n",
            m = marker.display()
        ),
    );
    env.with_config_file(&format!(
        "[agents.flaky]\ncommand = [\"sh\", \"{script}\"]\n"
    ));
    let s = Server::start(&env).await;
    s.post(
        "/api/v1/tasks",
        None,
        json!({ "vtid": "RT-1", "title": "flaky", "spec": "go", "agent_id": "flaky" }),
    )
    .await;
    task_in(&s, "RT-1", &["failed"], Duration::from_secs(20)).await;
    // The CLI verb, as an operator would type it.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["--server", &s.base, "task", "retry", "RT-1"])
        .env_remove("SHEPHERD_TOKEN")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("back in the queue"));
    task_in(&s, "RT-1", &["done"], Duration::from_secs(20)).await;
    assert_eq!(runs_of(&s, "RT-1").await.len(), 2);
    let (st, b) = s.post("/api/v1/tasks/RT-1/retry", None, json!({})).await;
    assert_eq!(st, 409, "{b}");
    assert_eq!(b["error"]["code"], "task_not_failed");
    let (st, b) = s.post("/api/v1/tasks/NOPE-1/retry", None, json!({})).await;
    assert_eq!(st, 404, "{b}");
    assert_eq!(b["error"]["code"], "task_not_found");
    // A cancelled task can be retried too; a waiting one cannot.
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "RT-2", "title": "by hand", "spec": "go", "capabilities": ["by-hand"] }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s.post("/api/v1/tasks/RT-2/retry", None, json!({})).await;
    assert_eq!(st, 409, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failed or cancelled"),
        "{b}"
    );
    let (st, b) = s.post("/api/v1/tasks/RT-2/cancel", None, json!({})).await;
    assert_eq!(st, 200, "{b}");
    task_in(&s, "RT-2", &["cancelled"], Duration::from_secs(20)).await;
    let (st, b) = s.post("/api/v1/tasks/RT-2/retry", None, json!({})).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["state"], "pending", "{b}");
    assert!(b["cancel_requested_at"].is_null(), "{b}");
    s.stop().await;
}

e2e!(
    task_retry_makes_a_failed_or_cancelled_task_runnable_and_refuses_a_done_one,
    |kind| async move { retry(kind).await }
);

/// The real binary: SIGTERM to `shepherd serve`, then the same command
/// again. The agent (started by the binary's own shim) lives on and the
/// run ends with every line once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_restart_of_the_real_binary_keeps_the_agent() {
    use std::process::Stdio;
    let mut env = Env::new(Kind::Sqlite);
    let lines = 30;
    let script = slow_agent(&env, lines, 0);
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "30")
        .set("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .with_config_file(&format!(
            "[agents.slow]\ncommand = [\"sh\", \"{script}\"]\ntranscript = \"steps-jsonl\"\n"
        ));
    // The second server listens where the first one chose to.
    let spawn = |listen: &str, log: &str| {
        let log = std::fs::File::create(env.dir.join(log)).unwrap();
        Served::spawn(
            env.serve_command()
                .env("SHEPHERD_LISTEN", listen)
                .env_remove("SHEPHERD_SHIM_PROGRAM")
                .env("SHEPHERD_LOG", "info")
                .stderr(Stdio::from(log)),
        )
    };
    let mut first = spawn("127.0.0.1:0", "first.log");
    let (base, addr) = (first.base.clone(), first.addr.to_string());
    let http = reqwest::Client::new();
    // Up once `/readyz` answers with any JSON at all.
    wait_for("the server", Duration::from_secs(20), || async {
        let r = http.get(format!("{base}/readyz")).send().await.ok()?;
        r.json::<Value>().await.ok()
    })
    .await;
    http.post(format!("{base}/api/v1/tasks"))
        .json(&json!({ "vtid": "BIN-1", "title": "bin", "spec": "go", "agent_id": "slow" }))
        .send()
        .await
        .unwrap();
    // No retries of its own: the polls below try again while the server is down.
    let client = shepherd_client::Client::new(&base, None)
        .unwrap()
        .with_retries(0);
    let bin_1 = RunsQuery {
        vtid: Some("BIN-1".into()),
        ..Default::default()
    };
    let run_id = wait_for("a run with steps", Duration::from_secs(20), || async {
        let runs = client.runs(&bin_1).await.ok()?;
        let id = runs.runs.first()?.id.clone();
        let page = client.steps(&id, &StepsQuery::default()).await.ok()?;
        (page.steps.len() >= 3).then_some(id)
    })
    .await;
    let pid = read_pid(&env.dir.join("agent.pid")).expect("agent pid");
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(first.pid(), libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(alive(pid), "the agent outlives SIGTERM to serve");
    // The log says once what happens to the agent, and it is what happened.
    let log = std::fs::read_to_string(env.dir.join("first.log")).unwrap();
    assert!(
        log.contains("go on under their shims") && !log.contains("ending agent processes"),
        "{log}"
    );
    let mut second = spawn(&addr, "second.log");
    let done = wait_for("the run to end", Duration::from_secs(40), || async {
        let (t, _) = client.task("BIN-1").await.ok()?;
        (t.task.state == "done").then_some(t)
    })
    .await;
    assert_eq!(done.task.state, "done");
    let page = client.steps(&run_id, &ALL_STEPS).await.unwrap();
    let texts = texts_of(&page);
    let want: Vec<String> = (1..=lines).map(|i| format!("line {i}")).collect();
    assert_eq!(texts, want, "every line exactly once, in order");
    let runs = client.runs(&bin_1).await.unwrap();
    assert_eq!(runs.runs.len(), 1);
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(second.pid(), libc::SIGTERM);
    }
    let _ = second.child.wait();
}
