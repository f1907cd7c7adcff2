//! The runner with real processes: success, failure, timeout, cancel
//! mid-run (the process group is gone and the last steps are kept), an
//! agent driving the autopilot workflow, a runner killed with SIGKILL (the
//! next one carries its run on), and
//! a server restarted under a runner that keeps working; a failed attempt
//! retried to success, and a cancelled task not retried.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shepherd_protocol::{
    ActionContent, CancelResponse, RunDetail, RunsQuery, Task, TranscriptStep,
};

use common::typed::{runs_of, task_in};
use common::{alive, wait_for, wait_ready, Env, Kind, Proc, Served, Server};

/// The newest run of task `vtid`, with its transcript.
async fn last_run(s: &Server, vtid: &str) -> RunDetail {
    let runs = runs_of(s, vtid).await;
    let id = &runs.first().expect("a run").id;
    s.client(None).run(id).await.expect("the run").0
}

/// Creates a task; the status and the task.
async fn create(s: &Server, body: Value) -> (u16, Task) {
    s.post_as("/api/v1/tasks", None, body).await
}

fn read_pids(path: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_that_is_not_utf8_is_kept_and_the_agent_runs_to_its_end() {
    // The agent writes invalid UTF-8, then a long line, then 20,000 more
    // lines: more than a pipe holds, so a runner that stopped reading at the
    // first bad byte would kill it with SIGPIPE (or leave it blocked).
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file(
        r#"
[agents.binary]
command = ["bash", "-c", "cat > /dev/null; printf 'before\\n\\377\\376 junk\\n'; head -c 3000000 /dev/zero | tr '\\0' x; echo; seq 1 20000; echo finished-cleanly"]
"#,
    );
    let s = Server::start(&env).await;
    let (st, b) = create(
        &s,
        json!({ "vtid": "BIN-1", "title": "binary", "spec": "go", "agent_id": "binary" }),
    )
    .await;
    assert_eq!(st, 201, "{b:?}");
    task_in(&s, "BIN-1", &["done", "failed"], Duration::from_secs(60)).await;
    let run = last_run(&s, "BIN-1").await.detail;
    assert_eq!(run.status, "done", "{:?}", run.result);
    assert!(run.result.as_ref().unwrap().contains("finished-cleanly"));
    let transcript = serde_json::to_string(&run.transcript).unwrap();
    assert!(
        transcript.contains("\u{FFFD}\u{FFFD} junk"),
        "the invalid bytes are kept as U+FFFD"
    );
    assert!(transcript.contains("before") && transcript.contains("20000"));
    // One vocabulary: the run of the built-in runner names the same kind
    // of worker as the agent list does for the same agent.
    assert_eq!(run.worker_type, "builtin", "{run:?}");
    let agents = s.client(None).agents().await.unwrap();
    let agent = agents
        .agents
        .iter()
        .find(|a| a.id == "binary")
        .expect("the configured agent");
    assert_eq!(agent.worker_type, run.worker_type, "{agent:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_failure_and_timeout() {
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file(
        r#"
[agents.ok]
command = ["bash", "-c", "cat > /dev/null; echo hello; echo all done"]
[agents.broken]
command = ["bash", "-c", "echo oops >&2; exit 3"]
[agents.slow]
command = ["sleep", "30"]
timeout_secs = 1
cancel_grace_secs = 1
[agents.missing]
command = ["/nonexistent/shepherd-no-such-program"]
"#,
    );
    let s = Server::start(&env).await;
    for (vtid, agent) in [
        ("OK-1", "ok"),
        ("BAD-1", "broken"),
        ("SLOW-1", "slow"),
        ("GONE-1", "missing"),
    ] {
        let (st, b) = create(
            &s,
            json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": agent }),
        )
        .await;
        assert_eq!(st, 201, "{b:?}");
    }
    task_in(&s, "OK-1", &["done"], Duration::from_secs(15)).await;
    let run = last_run(&s, "OK-1").await.detail;
    assert_eq!(run.status, "done");
    assert_eq!(run.agent_id, "ok");
    assert!(run.result.as_ref().unwrap().contains("all done"), "{run:?}");
    assert!(
        serde_json::to_string(&run.transcript)
            .unwrap()
            .contains("hello"),
        "{run:?}"
    );

    task_in(&s, "BAD-1", &["failed"], Duration::from_secs(15)).await;
    let run = last_run(&s, "BAD-1").await.detail;
    assert_eq!(run.status, "failed");
    let result = run.result.unwrap();
    assert!(
        result.contains("exit code 3") && result.contains("oops"),
        "{result}"
    );

    task_in(&s, "SLOW-1", &["failed"], Duration::from_secs(15)).await;
    let run = last_run(&s, "SLOW-1").await.detail;
    assert!(
        run.result.as_ref().unwrap().contains("timed out after 1s"),
        "{run:?}"
    );

    // A program that cannot be started fails its run with the reason.
    task_in(&s, "GONE-1", &["failed"], Duration::from_secs(15)).await;
    let run = last_run(&s, "GONE-1").await.detail;
    assert_eq!(run.status, "failed");
    let result = run.result.unwrap();
    assert!(
        result.contains("cannot start") && result.contains("shepherd-no-such-program"),
        "{result}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_run_kills_the_group_and_keeps_final_steps() {
    let mut env = Env::new(Kind::Sqlite);
    let pids = env.dir.join("pids");
    let script = env.script(
        "stubborn.sh",
        &format!(
            r#"
cat > /dev/null
trap 'echo "{{\"type\":\"action\",\"content\":[{{\"type\":\"text\",\"text\":\"stopping: saved partial work\"}}]}}"; exit 0' TERM
echo '{{"type":"action","content":[{{"type":"tool_call","id":"c1","name":"shell","args":"{{}}"}}]}}'
sleep 60 &
echo "$$ $!" > {pids}
wait
"#,
            pids = pids.display()
        ),
    );
    env.with_config_file(&format!(
        "[agents.stubborn]\ncommand = [\"bash\", \"{script}\"]\ntranscript = \"steps-jsonl\"\ncancel_grace_secs = 5\n"
    ));
    let s = Server::start(&env).await;
    s.post(
        "/api/v1/tasks",
        None,
        json!({ "vtid": "C-1", "title": "cancel me", "agent_id": "stubborn" }),
    )
    .await;
    task_in(&s, "C-1", &["running"], Duration::from_secs(10)).await;
    wait_for("the agent's pids", Duration::from_secs(10), || async {
        (read_pids(&pids).len() == 2).then_some(Value::Null)
    })
    .await;
    let procs = read_pids(&pids);
    assert!(procs.iter().all(|p| alive(*p)));
    let started = Instant::now();
    let (st, b) = s
        .post_as::<CancelResponse>(
            "/api/v1/tasks/C-1/cancel",
            None,
            json!({ "reason": "changed my mind" }),
        )
        .await;
    assert_eq!((st, b.cancelled), (200, false), "{b:?}");
    // The grace told is the agent's own, not the server's default of 30 s.
    assert_eq!(
        b.pending_worker.as_ref().map(|w| w.grace_secs),
        Some(5),
        "{b:?}"
    );
    task_in(&s, "C-1", &["cancelled"], Duration::from_secs(10)).await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "cancel reached the runner at once, not at the next heartbeat"
    );
    for p in &procs {
        wait_for(
            &format!("pid {p} to be gone"),
            Duration::from_secs(5),
            || async { (!alive(*p)).then_some(Value::Null) },
        )
        .await;
    }
    let run = last_run(&s, "C-1").await.detail;
    assert_eq!(run.status, "cancelled");
    let transcript = run.transcript.unwrap();
    let text = serde_json::to_string(&transcript).unwrap();
    assert!(
        text.contains("stopping: saved partial work"),
        "the step sent while stopping is kept: {text}"
    );
    // The dangling tool call was closed, so the transcript is well formed.
    assert!(
        transcript
            .iter()
            .any(|s| matches!(s, TranscriptStep::ToolResult { call_id, .. } if call_id == "c1")),
        "{text}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_drives_autopilot_to_reviewing() {
    let mut env = Env::new(Kind::Sqlite);
    let script = env.script(
        "builder.sh",
        r#"
cat > /dev/null
echo '{"type":"progress","event":"worker.building","message":"writing code"}'
echo '{"type":"action","content":[{"type":"text","text":"Implemented the endpoint."}]}'
echo '{"type":"progress","event":"worker.pr.created","message":"PR #42","metadata":{"pr":42}}'
echo '{"type":"result","text":"Opened PR #42"}'
"#,
    );
    env.with_config_file(&format!(
        "[agents.builder]\ncommand = [\"bash\", \"{script}\"]\ntranscript = \"steps-jsonl\"\n"
    ));
    let s = Server::start(&env).await;
    s.post("/api/v1/tasks", None, json!({ "vtid": "AP-1", "title": "autopilot", "agent_id": "builder", "workflow": "autopilot" })).await;
    task_in(&s, "AP-1", &["reviewing"], Duration::from_secs(15)).await;
    let run = last_run(&s, "AP-1").await.detail;
    assert_eq!(run.status, "done");
    assert_eq!(run.result.as_deref(), Some("Opened PR #42"));
    let (t, _) = s.client(None).task("AP-1").await.unwrap();
    let types: Vec<&str> = t.events.iter().map(|e| e.kind.as_str()).collect();
    for e in [
        "worker.building",
        "worker.pr.created",
        "worker.execution.completed",
    ] {
        assert!(types.contains(&e), "{e} missing from {types:?}");
    }
    s.stop().await;
}

fn spawn_runner(env: &Env, server: &str, data: &std::path::Path) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(["runner", "--server", server, "--data-dir"])
            .arg(data)
            .envs(&env.vars)
            .env("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
            .env("SHEPHERD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_leaves_its_agent_to_the_next_runner_which_carries_the_run_on() {
    let mut env = Env::new(Kind::Sqlite);
    // A heartbeat timeout far longer than the test: the claim survives the
    // gap between the two runners, and nothing lapses by timing.
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "120")
        .set("SHEPHERD_SWEEP_INTERVAL_SECS", "1");
    let go = env.dir.join("go");
    let pids = env.dir.join("pids");
    let script = env.script(
        "once.sh",
        &format!(
            "cat > /dev/null\nsleep 60 & echo \"$$ $!\" > {p}\nwhile [ ! -e {g} ]; do sleep 0.1; done\nkill $!\necho finished after the runner changed\nexit 0\n",
            g = go.display(),
            p = pids.display()
        ),
    );
    let server = Server::start(&env).await;
    // The agents live in the runner's configuration, not the server's.
    let mut runner_env = Env::new(Kind::Sqlite);
    runner_env.with_config_file(&format!(
        "[agents.once]\ncommand = [\"bash\", \"{script}\"]\n"
    ));
    let data = env.dir.join("runner-data");
    server
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "RK-1", "title": "survive", "agent_id": "once", "external": true }),
        )
        .await;
    let mut a = spawn_runner(&runner_env, &server.base, &data);
    task_in(&server, "RK-1", &["running"], Duration::from_secs(15)).await;
    wait_for("pids", Duration::from_secs(10), || async {
        (read_pids(&pids).len() == 2).then_some(Value::Null)
    })
    .await;
    let procs = read_pids(&pids);
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    // The runner died: its agent lives on under its shim.
    assert!(
        procs.iter().all(|p| alive(*p)),
        "processes outlive a SIGKILLed runner"
    );
    let _b = spawn_runner(&runner_env, &server.base, &data);
    // The next runner re-adopts the run: it renews the shim's lease.
    let runs_dir = data.join("runner").join("runs");
    let lease = || {
        std::fs::read_dir(&runs_dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .and_then(|e| std::fs::read_to_string(e.path().join("lease")).ok())
    };
    let first = lease().expect("the run's lease");
    wait_for(
        "the next runner to renew the lease",
        Duration::from_secs(15),
        || async { lease().filter(|l| *l != first).map(|_| Value::Null) },
    )
    .await;
    assert!(
        procs.iter().all(|p| alive(*p)),
        "the next runner carries the agent on rather than ending it"
    );
    std::fs::write(&go, b"").unwrap();
    task_in(&server, "RK-1", &["done"], Duration::from_secs(20)).await;
    let runs = runs_of(&server, "RK-1").await;
    let statuses: Vec<&str> = runs.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, vec!["done"], "one run, carried on to its end");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_under_a_working_runner_loses_no_step() {
    let env = Env::new(Kind::Sqlite);
    let script = env.script(
        "steady.sh",
        r#"
cat > /dev/null
for i in $(seq 1 24); do
  echo "{\"type\":\"action\",\"content\":[{\"type\":\"text\",\"text\":\"step $i\"}]}"
  sleep 0.15
done
echo '{"type":"result","text":"24 steps"}'
"#,
    );
    // The second server listens where the first one chose to.
    let spawn_server = |env: &Env, listen: &str| {
        Served::spawn(
            env.serve_command()
                .env("SHEPHERD_LISTEN", listen)
                .stderr(Stdio::inherit()),
        )
    };
    let http = reqwest::Client::new();
    let mut server = spawn_server(&env, "127.0.0.1:0");
    let (base, addr) = (server.base.clone(), server.addr.to_string());
    wait_ready(&http, &base).await;
    // No retries of its own: the polls below try again while the server is down.
    let client = shepherd_client::Client::new(&base, None)
        .unwrap()
        .with_retries(0);
    let rs_1 = RunsQuery {
        vtid: Some("RS-1".into()),
        ..Default::default()
    };
    let mut runner_env = Env::new(Kind::Sqlite);
    runner_env.with_config_file(&format!(
        "[agents.steady]\ncommand = [\"bash\", \"{script}\"]\ntranscript = \"steps-jsonl\"\n"
    ));
    let _runner = spawn_runner(&runner_env, &base, &env.dir.join("runner-data"));
    let r = http
        .post(format!("{base}/api/v1/tasks"))
        .json(&json!({ "vtid": "RS-1", "title": "steady", "agent_id": "steady", "external": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    // Let a few steps arrive, then kill the server outright.
    wait_for("some steps", Duration::from_secs(15), || async {
        let runs = client.runs(&rs_1).await.ok()?;
        (runs.runs.first()?.step_count >= 3).then_some(())
    })
    .await;
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _server = spawn_server(&env, &addr);
    wait_ready(&http, &base).await;
    let done = wait_for("the run to complete", Duration::from_secs(30), || async {
        let (t, _) = client.task("RS-1").await.ok()?;
        (t.task.state == "done").then_some(t)
    })
    .await;
    assert_eq!(done.task.state, "done");
    let runs = client.runs(&rs_1).await.unwrap();
    let run = client.run(&runs.runs[0].id).await.unwrap().0.detail;
    // The text an action step starts with ("" for anything else).
    let texts: Vec<String> = run
        .transcript
        .unwrap()
        .iter()
        .map(|s| match s {
            TranscriptStep::Action { content } => match content.first() {
                Some(ActionContent::Text { text }) => text.clone(),
                _ => String::new(),
            },
            _ => String::new(),
        })
        .collect();
    let expected: Vec<String> = (1..=24).map(|i| format!("step {i}")).collect();
    assert_eq!(texts, expected, "every step exactly once, in order");
    assert_eq!(run.result.as_deref(), Some("24 steps"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_stopped_while_the_server_is_down_exits_and_says_why() {
    let env = Env::new(Kind::Sqlite);
    let server = Server::start(&env).await;
    let mut runner_env = Env::new(Kind::Sqlite);
    runner_env
        .with_config_file("[agents.long]\ncommand = [\"sleep\", \"120\"]\ncancel_grace_secs = 1\n");
    server
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "DOWN-1", "title": "long", "agent_id": "long", "external": true }),
        )
        .await;
    let log = env.dir.join("runner.log");
    let data = env.dir.join("runner-data");
    let mut runner = Proc(
        Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(["runner", "--server", &server.base, "--data-dir"])
            .arg(&data)
            .envs(&runner_env.vars)
            .env("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
            .env("SHEPHERD_LOG", "warn")
            .stdout(Stdio::null())
            // Logs go to stderr.
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    task_in(&server, "DOWN-1", &["running"], Duration::from_secs(15)).await;
    server.stop().await;
    unsafe { libc::kill(runner.0.id() as i32, libc::SIGTERM) };
    // Bounded: the agent's grace, then the stopping report window (10 s).
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = runner.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the runner still runs a minute after SIGTERM with the server down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(status.success() || status.code().is_some(), "{status:?}");
    assert!(
        text.contains("server is unreachable"),
        "the log says why the run's end was not reported: {text}"
    );
}

/// Retries end to end: an agent that fails its first attempt (no marker
/// file yet) and succeeds on its second ends the task `done` with two runs,
/// each with its own attempt number; a task cancelled mid-run is not
/// retried though attempts remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_retried_and_a_cancelled_one_is_not() {
    let mut env = Env::new(Kind::Sqlite);
    let marks = env.dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let flaky = env.script(
        "flaky.sh",
        &format!(
            "cat > /dev/null\nm={m}/$SHEPHERD_TASK_ID\nif [ ! -e $m ]; then touch $m; echo 'rate limited' >&2; exit 3; fi\necho 'second time lucky'\n",
            m = marks.display()
        ),
    );
    let slow = env.script(
        "slow.sh",
        &format!(
            "cat > /dev/null\necho $$ >> {m}/slow-$SHEPHERD_TASK_ID\nsleep 60\n",
            m = marks.display()
        ),
    );
    env.with_config_file(&format!(
        "[agents.flaky]\ncommand = [\"bash\", \"{flaky}\"]\n\
         [agents.slow]\ncommand = [\"bash\", \"{slow}\"]\ncancel_grace_secs = 1\n"
    ));
    let s = Server::start(&env).await;
    let backoff = json!({ "initial_ms": 10, "max_ms": 20 });
    for (vtid, agent) in [("R-1", "flaky"), ("R-2", "slow")] {
        let (st, b) = create(
            &s,
            json!({ "vtid": vtid, "title": vtid, "agent_id": agent,
                    "max_attempts": 2, "retry_backoff": backoff }),
        )
        .await;
        assert_eq!(st, 201, "{b:?}");
    }
    let t = task_in(&s, "R-1", &["done", "failed"], Duration::from_secs(60)).await;
    assert_eq!(t.task.state, "done", "{t:?}");
    let mut runs = runs_of(&s, "R-1").await;
    runs.sort_by_key(|r| r.attempt);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!((runs[0].attempt, runs[0].status.as_str()), (1, "failed"));
    assert!(
        runs[0]
            .result
            .as_deref()
            .unwrap_or("")
            .contains("rate limited"),
        "{:?}",
        runs[0]
    );
    assert_eq!((runs[1].attempt, runs[1].status.as_str()), (2, "done"));
    assert_ne!(runs[0].id, runs[1].id);

    // Cancelled while running: no second attempt.
    let slow_pids = marks.join("slow-R-2");
    wait_for(
        "the slow agent to start",
        Duration::from_secs(20),
        || async { slow_pids.exists().then_some(Value::Null) },
    )
    .await;
    let (st, b) = s
        .post_as::<CancelResponse>(
            "/api/v1/tasks/R-2/cancel",
            None,
            json!({ "reason": "not needed" }),
        )
        .await;
    assert_eq!(st, 200, "{b:?}");
    task_in(&s, "R-2", &["cancelled"], Duration::from_secs(20)).await;
    // Give a wrongly scheduled retry its chance: the backoff is 20 ms at most,
    // so a retry would have been claimed by the time a new task of the same
    // agent has run to its end.
    s.post(
        "/api/v1/tasks",
        None,
        json!({ "vtid": "R-3", "title": "R-3", "agent_id": "flaky", "max_attempts": 2, "retry_backoff": backoff }),
    )
    .await;
    task_in(&s, "R-3", &["done"], Duration::from_secs(60)).await;
    let runs = runs_of(&s, "R-2").await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].status, "cancelled");
    let (t, _) = s.client(None).task("R-2").await.unwrap();
    assert_eq!(t.task.state, "cancelled", "{t:?}");
    assert_eq!(
        std::fs::read_to_string(&slow_pids).unwrap().lines().count(),
        1,
        "the slow agent started once"
    );
    s.stop().await;
}

/// Work the runner hears of while it is busy asking for work (its claim
/// call in flight as the previous run ends), or before its event stream has
/// connected, still wakes it. With the poll an hour long, a lost wake-up
/// leaves a task pending for good, and this test fails at a deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_sent_as_the_last_run_ends_is_claimed_without_waiting_for_the_poll() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_RUNNER_POLL", "1h");
    env.with_config_file(
        r#"
[agents.quick]
command = ["sh", "-c", "cat > /dev/null; echo quick"]
"#,
    );
    let s = Server::start(&env).await;
    for i in 0..40 {
        let vtid = format!("WAKE-{i}");
        let (st, b) = create(
            &s,
            json!({ "vtid": vtid, "title": "quick", "spec": "go", "agent_id": "quick" }),
        )
        .await;
        assert_eq!(st, 201, "{b:?}");
        // The next task is made the moment this one is seen done: when the
        // runner has just freed its slot and is asking for more.
        task_in(&s, &vtid, &["done"], Duration::from_secs(30)).await;
    }
    s.stop().await;
}
