//! The spare shim a runner keeps started in advance (`shepherd shim
//! --stand-by`), with the real `shepherd serve` and its built-in runner:
//! there is one, waiting, holding none of Shepherd's secrets; a run takes
//! it (its shim is the spare that was waiting) and another is started; a
//! spare killed before a run is simply replaced and the run still starts;
//! and when the server is killed outright the spare goes too. Either way
//! the agent starts with no signal blocked or ignored.

mod common;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use common::{alive, operator_call, wait_for, Env, Kind, Served, OPERATOR};

const WAIT: Duration = Duration::from_secs(30);

/// The pids of `parent`'s children whose command line is a waiting shim.
fn spares_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(parent) && cmdline.split(|b| *b == 0).any(|arg| arg == b"--stand-by")
        })
        .collect()
}

/// The one spare of `parent`, once there is exactly one.
async fn one_spare(parent: i32) -> i32 {
    wait_for("one spare shim", WAIT, || async {
        match spares_of(parent)[..] {
            [pid] => Some(pid),
            _ => None,
        }
    })
    .await
}

/// Runs a task to its end; returns the pid its agent saw as its parent
/// (the shim).
async fn run_task(base: &str, dir: &std::path::Path, vtid: &str) -> i32 {
    let (st, b) = operator_call(
        base,
        "/api/v1/tasks",
        Some(json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": "parent" })),
    )
    .await;
    assert_eq!(st, 201, "{b}");
    wait_for("the task done", WAIT, || async {
        let (_, t) = operator_call(base, &format!("/api/v1/tasks/{vtid}"), None).await;
        (t["state"] == "done").then_some(())
    })
    .await;
    assert_default_signals(&dir.join(format!("{vtid}.sig")));
    let text = std::fs::read_to_string(dir.join(format!("{vtid}.ppid"))).unwrap();
    text.trim().parse().unwrap()
}

/// The agent starts as a program expects to: nothing blocked, and none of
/// the signals the shim itself handles or Rust ignores left ignored.
fn assert_default_signals(status: &std::path::Path) {
    let text = std::fs::read_to_string(status).unwrap();
    let mask = |name: &str| {
        let line = text.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "the agent starts with signals blocked");
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGPIPE, libc::SIGTERM] {
        assert_eq!(
            mask("SigIgn:") & (1 << (sig - 1)),
            0,
            "the agent starts with signal {sig} ignored"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_shim_waits_takes_the_next_run_and_goes_with_its_runner() {
    let mut env = Env::new(Kind::Sqlite);
    let dir = env.dir.clone();
    // The agent writes its parent's pid (its shim) where the test reads it,
    // then becomes a grep of its own signal state: read by the process
    // itself at its exec, never by the shell while the shell waits on a
    // child (dash blocks every signal then).
    let out = dir.display().to_string();
    env.with_config_file(&format!(
        r#"
[agents.parent]
command = ["sh", "-c", "echo $PPID > {out}/$SHEPHERD_TASK_ID.ppid; exec grep -E '^Sig(Blk|Ign)' /proc/self/status > {out}/$SHEPHERD_TASK_ID.sig"]
"#
    ));
    let mut server = Served::spawn(
        env.serve_command()
            .env("SHEPHERD_TOKEN", OPERATOR)
            .env("SHEPHERD_WEBHOOK_SECRET", "webhook-secret-value")
            .stderr(Stdio::inherit()),
    );
    let base = server.base.clone();
    let server_pid = server.pid();

    // One spare, waiting, without the server's secrets.
    let first = one_spare(server_pid).await;
    // (Not dumpable, it shows its environment only to root; refused, no
    // one else reads anything of it.)
    let environ = match std::fs::read(format!("/proc/{first}/environ")) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Vec::new(),
        read => read.unwrap(),
    };
    for secret in [&b"SHEPHERD_TOKEN="[..], b"SHEPHERD_WEBHOOK_SECRET="] {
        assert!(
            !environ
                .split(|b| *b == 0)
                .any(|var| var.starts_with(secret)),
            "the spare holds {}",
            String::from_utf8_lossy(secret)
        );
    }

    // A run takes it: the agent's parent is the spare that was waiting.
    let shim = run_task(&base, &dir, "SPARE-1").await;
    assert_eq!(shim, first, "the run did not go to the waiting spare");
    let second = one_spare(server_pid).await;
    assert_ne!(second, first, "no new spare after the run");

    // A spare that is gone is replaced, and the run still starts.
    // SAFETY: kill(2) on a pid this test found as the server's child.
    unsafe {
        libc::kill(second, libc::SIGKILL);
    }
    wait_for("the killed spare gone", WAIT, || async {
        (!spares_of(server_pid).contains(&second)).then_some(())
    })
    .await;
    let shim = run_task(&base, &dir, "SPARE-2").await;
    assert_ne!(shim, second);
    let third = one_spare(server_pid).await;
    assert_ne!(third, second);

    // The server killed outright: its spare sees its pipe close and exits.
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(server_pid, libc::SIGKILL);
    }
    let _ = server.child.wait();
    wait_for("the spare gone with its runner", WAIT, || async {
        (!alive(third)).then_some(())
    })
    .await;
}
