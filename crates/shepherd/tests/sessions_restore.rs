//! Restore on attach (the sessions contract) with the real binary as a child process:
//! after `kill -9` of the server, attaching brings back a new shell whose
//! history holds what the terminal showed before plus a restore marker;
//! two clients attaching at once cause exactly one new process; an agent
//! comes back with its `continue_args`; an impossible restore answers the
//! contract's exit message and closes.

mod common;
#[path = "common/ws.rs"]
mod ws;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{wait_ready, Env, Kind, Served};
use ws::{connect, eventually, session_members};

const WAIT: Duration = Duration::from_secs(20);

/// `shepherd serve` on `listen` (`127.0.0.1:0`, or the address the first
/// run chose), ready when this returns.
async fn spawn(env: &Env, listen: &str) -> Served {
    let p = Served::spawn(
        env.serve_command()
            .env("SHEPHERD_LISTEN", listen)
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

fn wait_exit(p: &mut Served) {
    let start = Instant::now();
    while p.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "the server did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn call(method: reqwest::Method, url: String, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    (res.status().as_u16(), res.json().await.unwrap_or_default())
}

async fn post(p: &Served, path: &str, body: Value) -> Value {
    let (st, v) = call(
        reqwest::Method::POST,
        format!("{}{path}", p.base),
        Some(body),
    )
    .await;
    assert!(st == 201 || st == 200, "{path}: {st} {v}");
    v
}

async fn get(p: &Served, path: &str) -> Value {
    let (st, v) = call(reqwest::Method::GET, format!("{}{path}", p.base), None).await;
    assert_eq!(st, 200, "{path}: {v}");
    v
}

fn dir(env: &Env, name: &str) -> String {
    let d = env.dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap().display().to_string()
}

e2e!(restore_after_kill_9, |kind: Kind| async move {
    let mut env = Env::new(kind);
    let argv = env.dir.join("argv.txt");
    let script = env.script(
        "agent.sh",
        &format!(
            "printf '%s\\n' \"start:$*\" >> {}\necho agent-ready\nexec cat\n",
            argv.display()
        ),
    );
    env.with_config_file(&format!(
        "[agents.talker]\ncommand = [\"true\"]\ninteractive_command = [\"sh\", \"{script}\"]\n\
         continue_args = [\"--continue\"]\n"
    ));
    let mut p = spawn(&env, "127.0.0.1:0").await;
    let addr = p.addr.to_string();
    let work = dir(&env, "work");
    let doomed = dir(&env, "doomed");
    let sid = post(&p, "/api/v1/sessions", json!({ "location_path": work })).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let term = post(
        &p,
        &format!("/api/v1/sessions/{sid}/workers"),
        json!({"type": "terminal"}),
    )
    .await;
    let agent = post(
        &p,
        &format!("/api/v1/sessions/{sid}/workers"),
        json!({"type": "agent", "agent_id": "talker"}),
    )
    .await;
    let (tid, aid) = (
        term["id"].as_str().unwrap().to_owned(),
        agent["id"].as_str().unwrap().to_owned(),
    );
    let old_pid = term["pid"].as_i64().unwrap();
    let sid2 = post(&p, "/api/v1/sessions", json!({ "location_path": doomed })).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let lost = post(
        &p,
        &format!("/api/v1/sessions/{sid2}/workers"),
        json!({"type": "terminal"}),
    )
    .await;
    let lost_id = lost["id"].as_str().unwrap().to_owned();

    let mut t = connect(&p.base, &sid, &tid, None).await;
    t.wait_prompt("", WAIT).await;
    t.type_line("echo before-$((2+3))").await;
    t.wait_for("before-5", WAIT).await;
    let mut a = connect(&p.base, &sid, &aid, None).await;
    a.wait_for("agent-ready", WAIT).await;
    drop((t, a));

    signal(&p, libc::SIGKILL);
    wait_exit(&mut p);
    std::fs::remove_dir_all(&doomed).unwrap();
    let p = spawn(&env, &addr).await;

    // The public view lists the tabs from storage; no process runs yet.
    let view = get(&p, &format!("/api/v1/sessions/{sid}")).await;
    assert_eq!(view["workers"][0]["alive"], false, "{view}");
    assert_eq!(view["workers"][0]["pid"], old_pid);

    // Two clients at the same moment: one restore between them.
    let (mut c1, mut c2) = tokio::join!(
        connect(&p.base, &sid, &tid, None),
        connect(&p.base, &sid, &tid, None)
    );
    for c in [&mut c1, &mut c2] {
        let h = c.history().await;
        assert_eq!(h["epoch"], 2);
        let data = h["data"].as_str().unwrap();
        assert!(
            data.contains("before-5"),
            "pre-restart output survives: {data:?}"
        );
        assert!(
            data.contains("session restored"),
            "the restore marker: {data:?}"
        );
    }
    c1.wait_prompt("session restored", WAIT).await;
    c1.type_line("echo after-$((3+4))").await;
    c1.wait_for("after-7", WAIT).await;
    c2.wait_for("after-7", WAIT).await;
    let view = get(&p, &format!("/api/v1/sessions/{sid}")).await;
    let w = view["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == tid.as_str())
        .unwrap()
        .clone();
    assert_eq!(w["alive"], true);
    assert_eq!(w["epoch"], 2);
    let new_pid = w["pid"].as_i64().unwrap();
    assert_ne!(new_pid, old_pid, "the new pid is persisted");
    let restored = get(
        &p,
        "/api/v1/events?after=0&limit=1000&types=session.worker.restored",
    )
    .await;
    let for_term: Vec<&Value> = restored["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["worker_id"] == tid.as_str())
        .collect();
    assert_eq!(for_term.len(), 1, "exactly one restore: {restored}");
    // The old shell did not outlive its server.
    eventually("the old PTY session is gone", WAIT, || {
        session_members(old_pid).is_empty()
    })
    .await;

    // The agent comes back with its continue_args (its earlier
    // "agent-ready" is already in the history, so wait for the file).
    let _a = connect(&p.base, &sid, &aid, None).await;
    eventually("the agent is restored with continue_args", WAIT, || {
        std::fs::read_to_string(&argv).unwrap_or_default() == "start:\nstart:--continue\n"
    })
    .await;

    // Its location is gone: the contract's exit message, then close.
    let mut l = connect(&p.base, &sid2, &lost_id, None).await;
    let first = l.next(WAIT).await.expect("a message");
    assert_eq!(
        first,
        json!({"type": "exit", "exitCode": 1, "signal": null})
    );
    assert!(l.closed(WAIT).await);
    let failed = get(
        &p,
        "/api/v1/events?after=0&limit=1000&types=session.worker.exited",
    )
    .await;
    assert!(
        failed["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["worker_id"] == lost_id.as_str()
                && e["data"]["restore_failed"] == true
                && e["data"]["reason"]
                    .as_str()
                    .unwrap()
                    .contains("no longer exists")),
        "the reason is in the log: {failed}"
    );

    // A graceful stop ends the PTYs it runs.
    let mut p = p;
    signal(&p, libc::SIGTERM);
    wait_exit(&mut p);
    assert!(
        session_members(new_pid).is_empty(),
        "left: {:?}",
        session_members(new_pid)
    );
});
