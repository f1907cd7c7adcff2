//! What the processes Shepherd spawns inherit from it: the real binary
//! (`shepherd serve`, its environment holding the operator token and the
//! other secret settings) runs an agent through the built-in runner and its
//! shim, a terminal tab and an agent tab on real PTYs, each of which writes
//! its environment to a file. None holds Shepherd's own secrets, nor any
//! other `SHEPHERD_*` setting (such as `SHEPHERD_CONFIG` and
//! `SHEPHERD_DATA_DIR`, which lead to the configuration file and the
//! database); what the agent's configuration sets explicitly is there. The
//! agent is told the listener's address, which the built-in runner itself
//! does not use.
//!
//! And what an agent can read of the server through `/proc`: the server
//! and the agent's shim are not dumpable, so an agent running as the same
//! user reads neither's `environ` (the server runs as an unprivileged user
//! when the test runs as root, whose `CAP_SYS_PTRACE` reads anything); the
//! server's own copy of its environment no longer holds the token.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use common::{operator_call, Env, Kind, Served, OPERATOR};

const WAIT: Duration = Duration::from_secs(30);

/// The `NAME=value` lines a process wrote, once the file is complete.
async fn env_of(path: &std::path::Path) -> Vec<String> {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            // Each dump ends with a marker line: the file is whole.
            if text.contains("DUMP_DONE=1") {
                return text.lines().map(str::to_owned).collect();
            }
        }
        assert!(
            start.elapsed() < WAIT,
            "{} was not written in time",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn has(env: &[String], name: &str) -> Option<String> {
    env.iter()
        .find_map(|l| l.strip_prefix(&format!("{name}=")).map(str::to_owned))
}

/// How many TCP connections to `port` on this machine some process other
/// than this test opened (`/proc/net/tcp*` rows whose inode is none of this
/// process's descriptors). The server's own descriptors are not readable:
/// it is not dumpable.
fn connections_to(port: u16) -> usize {
    let pid = std::process::id();
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let remote_port = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .flat_map(|table| table.lines().skip(1).map(str::to_owned).collect::<Vec<_>>())
        .filter(|row| {
            let cols: Vec<&str> = row.split_whitespace().collect();
            // local, remote, state (01: established), ..., inode (10th).
            cols.len() > 9
                && cols[2].ends_with(&remote_port)
                && cols[3] == "01"
                && !inodes.contains(cols[9])
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_agents_and_terminals_do_not_inherit_shepherds_secrets() {
    let mut env = Env::new(Kind::Sqlite);
    let dir = env.dir.clone();
    let dump = |name: &str| {
        format!(
            "env > {out}.tmp; echo DUMP_DONE=1 >> {out}.tmp; mv {out}.tmp {out}",
            out = dir.join(name).display()
        )
    };
    // A terminal tab runs $SHELL: this one writes its environment first.
    let shell = env.script(
        "dump-shell.sh",
        &format!("#!/bin/sh\n{}\nexec /bin/sh\n", dump("terminal.env")),
    );
    std::fs::set_permissions(&shell, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.set("SHELL", &shell);
    // The agent also says which session it is in (field 6 of its stat).
    let agent_cmd = dump("agent.env").replacen(
        "; echo DUMP_DONE=1",
        "; echo AGENT_SID=$(cut -d' ' -f6 /proc/$$/stat) >> {out}.tmp; echo DUMP_DONE=1",
        1,
    );
    let agent_cmd = agent_cmd.replace("{out}", &dir.join("agent.env").display().to_string());
    let tab_cmd = format!("{}; exec cat", dump("tab.env"));
    env.with_config_file(&format!(
        r#"
[agents.envdump]
command = ["sh", "-c", "{agent_cmd}"]
interactive_command = ["sh", "-c", "{tab_cmd}"]
env = {{ AGENT_SETTING = "chosen", SHEPHERD_WEBHOOK_SECRET = "given-on-purpose" }}
"#
    ));
    // The server's own secrets, as an operator would set them.
    let db = dir.join("shepherd.db");
    let secrets = [
        ("SHEPHERD_TOKEN", OPERATOR.to_owned()),
        (
            "SHEPHERD_DATABASE_URL",
            format!("sqlite://{}", db.display()),
        ),
        (
            "SHEPHERD_OIDC_CLIENT_SECRET",
            "oidc-secret-value".to_owned(),
        ),
        ("SHEPHERD_WEBHOOK_SECRET", "webhook-secret-value".to_owned()),
    ];
    let mut server = Served::spawn(
        env.serve_command()
            .envs(secrets.iter().map(|(k, v)| (*k, v.as_str())))
            .current_dir(&dir)
            .stderr(Stdio::inherit()),
    );
    let base = server.base.clone();
    let start = Instant::now();
    while operator_call(&base, "/readyz", None).await.0 != 200 {
        assert!(start.elapsed() < WAIT, "the server did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // An agent run by the built-in runner, under its shim.
    let (st, b) = operator_call(
        &base,
        "/api/v1/tasks",
        Some(json!({ "vtid": "ENV-1", "title": "env", "spec": "go", "agent_id": "envdump" })),
    )
    .await;
    assert_eq!(st, 201, "{b}");
    // A terminal tab and an agent tab, each on a PTY.
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (st, s) = operator_call(
        &base,
        "/api/v1/sessions",
        Some(json!({ "location_path": work.display().to_string() })),
    )
    .await;
    assert_eq!(st, 201, "{s}");
    let sid = s["id"].as_str().unwrap();
    for tab in [
        json!({ "type": "terminal" }),
        json!({ "type": "agent", "agent_id": "envdump" }),
    ] {
        let (st, w) =
            operator_call(&base, &format!("/api/v1/sessions/{sid}/workers"), Some(tab)).await;
        assert_eq!(st, 201, "{w}");
    }

    for (file, configured) in [
        ("agent.env", true),
        ("terminal.env", false),
        ("tab.env", true),
    ] {
        let seen = env_of(&dir.join(file)).await;
        // It is a process Shepherd started, told what it is part of.
        assert!(
            seen.iter().any(|l| l.starts_with("SHEPHERD_")),
            "{file}: {seen:?}"
        );
        for (name, value) in &secrets {
            let got = has(&seen, name);
            if *name == "SHEPHERD_WEBHOOK_SECRET" && configured {
                // The agent's configuration sets it on purpose.
                assert_eq!(got.as_deref(), Some("given-on-purpose"), "{file}");
            } else {
                assert_eq!(got, None, "{file} inherited {name}");
            }
            assert!(
                !seen.iter().any(|l| l.contains(value.as_str())),
                "{file} holds the value of {name}"
            );
        }
        assert_eq!(has(&seen, "SHEPHERD_AUTH_TOKEN"), None, "{file}");
        // Nor any other setting of the server's: they lead to its
        // configuration file (which may hold secrets) and its database.
        for name in [
            "SHEPHERD_CONFIG",
            "SHEPHERD_DATA_DIR",
            "SHEPHERD_LOG",
            "SHEPHERD_LISTEN",
            "SHEPHERD_SHIM_PROGRAM",
        ] {
            assert_eq!(has(&seen, name), None, "{file} inherited {name}");
        }
        if configured {
            assert_eq!(
                has(&seen, "AGENT_SETTING").as_deref(),
                Some("chosen"),
                "{file}"
            );
        }
    }
    // The agent's shim leads a session of its own: nothing aimed at the
    // server's session or terminal reaches the agent.
    let seen = env_of(&dir.join("agent.env")).await;
    // The agent is told the listener's address, though the runner that
    // started it reaches the server without it: its requests (register,
    // claim, progress) went to the server's router in-process, and not one
    // socket of the server is a connection to its own listener.
    assert_eq!(
        has(&seen, "SHEPHERD_SERVER").as_deref(),
        Some(base.as_str())
    );
    let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(
        connections_to(port),
        0,
        "the built-in runner connected to its own server's listener"
    );
    let agent_sid: i32 = has(&seen, "AGENT_SID").unwrap().trim().parse().unwrap();
    // SAFETY: getsid(2) reads a process's session id; no memory involved.
    let server_sid = unsafe { libc::getsid(server.pid()) };
    // 0 is a real answer: the server's session leader lives outside this
    // PID namespace (as under some CI sandboxes), while the shim's own
    // session, made by its setsid here, is always visible and never 0.
    assert!(server_sid >= 0 && agent_sid > 0, "{server_sid} {agent_sid}");
    assert_ne!(
        agent_sid, server_sid,
        "the agent runs in the server's session"
    );
    // A graceful stop ends the tabs' processes with the server.
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(server.pid(), libc::SIGTERM);
    }
    let start = Instant::now();
    while server.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "the server did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The uid and gid the server runs as in [`an_agent_reads_nothing_of_the_server_through_proc`]
/// when the test runs as root: `nobody`'s.
const UNPRIVILEGED: u32 = 65534;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reads_nothing_of_the_server_through_proc() {
    use std::os::unix::process::CommandExt;

    let mut env = Env::new(Kind::Sqlite);
    // The data directory's own key, which the server's user can read.
    env.vars.remove("SHEPHERD_SECRETS_KEY_FILE");
    let dir = env.dir.clone();
    let out = dir.join("proc-check");
    // The agent tries the server's environment (its pid in a file the test
    // writes) and its shim's (its parent), then writes its own.
    let agent = env.script(
        "agent.sh",
        &format!(
            r#"#!/bin/sh
pid=$(cat {dir}/server.pid)
{{
  if cat /proc/$pid/environ > {dir}/server.environ 2>/dev/null; then echo SERVER=read; else echo SERVER=refused; fi
  if cat /proc/$PPID/environ > /dev/null 2>&1; then echo SHIM=read; else echo SHIM=refused; fi
  env
  echo DUMP_DONE=1
}} > {out}.tmp
mv {out}.tmp {out}
"#,
            dir = dir.display(),
            out = out.display()
        ),
    );
    env.with_config_file(&format!(
        "[agents.prober]\ncommand = [\"sh\", \"{agent}\"]\n"
    ));
    let mut cmd = env.serve_command();
    cmd.env("SHEPHERD_TOKEN", OPERATOR)
        .env("SHEPHERD_WEBHOOK_SECRET", "webhook-secret-value")
        .env("HOME", &dir)
        .stderr(Stdio::inherit());
    // SAFETY: geteuid(2) reads this process's credentials.
    if unsafe { libc::geteuid() } == 0 {
        // Root reads every process's `environ`, dumpable or not: the server
        // and its agents run as an ordinary user, as they would in use.
        let status = std::process::Command::new("chown")
            .args(["-R", &format!("{UNPRIVILEGED}:{UNPRIVILEGED}")])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success());
        // (std drops root's supplementary groups with the uid.)
        cmd.uid(UNPRIVILEGED).gid(UNPRIVILEGED);
    }
    let mut server = Served::spawn(&mut cmd);
    let base = server.base.clone();
    let pid_file = dir.join("server.pid");
    std::fs::write(&pid_file, server.pid().to_string()).unwrap();
    let start = Instant::now();
    while operator_call(&base, "/readyz", None).await.0 != 200 {
        assert!(start.elapsed() < WAIT, "the server did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (st, b) = operator_call(
        &base,
        "/api/v1/tasks",
        Some(json!({ "vtid": "PROC-1", "title": "proc", "spec": "go", "agent_id": "prober" })),
    )
    .await;
    assert_eq!(st, 201, "{b}");
    let seen = env_of(&out).await;
    let leaked = std::fs::read(dir.join("server.environ")).unwrap_or_default();
    assert_eq!(
        has(&seen, "SERVER").as_deref(),
        Some("refused"),
        "the agent read the server's environment: {}",
        String::from_utf8_lossy(&leaked)
    );
    assert_eq!(
        has(&seen, "SHIM").as_deref(),
        Some("refused"),
        "the agent read its shim's environment"
    );
    for name in ["SHEPHERD_TOKEN", "SHEPHERD_CONFIG", "SHEPHERD_DATA_DIR"] {
        assert_eq!(has(&seen, name), None, "the agent inherited {name}");
    }
    assert!(!seen.iter().any(|l| l.contains(OPERATOR)), "{seen:?}");
    // What is left of the server's environment in its memory no longer
    // holds the token (readable here only to a root test).
    if let Ok(environ) = std::fs::read(format!("/proc/{}/environ", server.pid())) {
        let text = String::from_utf8_lossy(&environ);
        assert!(
            !text.contains(OPERATOR),
            "the server's environ holds the token"
        );
        assert!(!text.contains("webhook-secret-value"), "{text}");
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(server.pid(), libc::SIGTERM);
    }
    let start = Instant::now();
    while server.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "the server did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
