//! The data directory is private: the real binary, started under the usual
//! umask 022 with a fresh data directory, creates it 0700 and the database,
//! its WAL, scrollback segments and an agent's output 0600, while the
//! terminals and agents it starts keep the umask it was started with; and a
//! data directory an older version left open (0755, files 0644) is made
//! private at the next start, with a line in the log.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::{Env, Kind, Served};

const WAIT: Duration = Duration::from_secs(30);

/// The permission bits, in octal ("700").
fn mode(p: &Path) -> String {
    let m = std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode();
    format!("{:o}", m & 0o777)
}

async fn call(base: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let req = match body {
        Some(b) => http.post(format!("{base}{path}")).json(&b),
        None => http.get(format!("{base}{path}")),
    };
    let Ok(r) = req.send().await else {
        return (0, Value::Null);
    };
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or_default())
}

/// `shepherd serve` under umask 022, its stderr in `log`.
async fn serve(env: &Env, log: &Path) -> Served {
    let mut cmd = env.serve_command();
    cmd.env("SHEPHERD_LOG", "info")
        .stderr(std::fs::File::create(log).unwrap());
    // SAFETY: umask(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    let p = Served::spawn(&mut cmd);
    let start = Instant::now();
    while call(&p.base, "/readyz", None).await.0 != 200 {
        assert!(start.elapsed() < WAIT, "the server did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p
}

async fn stop(mut p: Served) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(p.pid(), libc::SIGTERM);
    }
    let start = Instant::now();
    while p.child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "the server did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn until_exists(p: &Path) {
    let start = Instant::now();
    while !p.exists() {
        assert!(start.elapsed() < WAIT, "{} did not appear", p.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Files under `dir` whose name ends with `suffix`.
fn find(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(find(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_private_and_children_keep_the_umask() {
    let mut env = Env::new(Kind::Sqlite);
    let data = env.dir.join("data");
    env.set("SHEPHERD_DATA_DIR", &data.display().to_string());
    let out = env.dir.clone();
    // The terminal's shell and the agent say which umask they run under.
    let shell = env.script(
        "umask-shell.sh",
        &format!(
            "#!/bin/sh\numask > {0}.tmp; mv {0}.tmp {0}\nexec /bin/sh\n",
            out.join("terminal.umask").display()
        ),
    );
    std::fs::set_permissions(&shell, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.set("SHELL", &shell);
    // It runs on until the test has looked at its output file: a finished
    // run's directory is gone.
    let release = out.join("agent.release");
    let agent = format!(
        "umask > {0}.tmp; mv {0}.tmp {0}; echo done; while [ ! -e {1} ]; do sleep 0.05; done",
        out.join("agent.umask").display(),
        release.display()
    );
    env.with_config_file(&format!(
        "[agents.umask]\ncommand = [\"sh\", \"-c\", \"{agent}\"]\n"
    ));
    let log = env.dir.join("serve.log");
    let server = serve(&env, &log).await;
    let base = server.base.clone();

    // A terminal with some output, and an agent's run.
    let work = env.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (st, s) = call(
        &base,
        "/api/v1/sessions",
        Some(json!({ "location_path": work.display().to_string() })),
    )
    .await;
    assert_eq!(st, 201, "{s}");
    let sid = s["id"].as_str().unwrap().to_owned();
    let (st, w) = call(
        &base,
        &format!("/api/v1/sessions/{sid}/workers"),
        Some(json!({ "type": "terminal" })),
    )
    .await;
    assert_eq!(st, 201, "{w}");
    let (st, b) = call(
        &base,
        "/api/v1/tasks",
        Some(json!({ "vtid": "UM-1", "title": "umask", "spec": "go", "agent_id": "umask" })),
    )
    .await;
    assert_eq!(st, 201, "{b}");
    until_exists(&out.join("terminal.umask")).await;
    until_exists(&out.join("agent.umask")).await;
    let start = Instant::now();
    while find(&data.join("sessions"), ".seg").is_empty() {
        assert!(start.elapsed() < WAIT, "no scrollback segment was written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Shepherd's own files: private.
    assert_eq!(mode(&data), "700", "the data directory");
    assert_eq!(mode(&data.join("shepherd.db")), "600");
    assert_eq!(mode(&data.join("shepherd.db-wal")), "600");
    assert_eq!(mode(&data.join("sessions")), "700");
    for seg in find(&data.join("sessions"), ".seg") {
        assert_eq!(mode(&seg), "600", "{}", seg.display());
    }
    let outputs = find(&data.join("runner"), "/out");
    assert!(!outputs.is_empty(), "the agent's output file");
    for f in outputs {
        assert_eq!(mode(&f), "600", "{}", f.display());
    }
    std::fs::write(&release, "").unwrap();
    // What it starts: the umask it was started with.
    for f in ["terminal.umask", "agent.umask"] {
        let got = std::fs::read_to_string(out.join(f)).unwrap();
        assert_eq!(got.trim(), "0022", "{f}");
    }
    stop(server).await;
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("made it private"),
        "a fresh data directory had nothing to tighten"
    );

    // An older version left it open: the next start closes it, and says so.
    let seg = find(&data.join("sessions"), ".seg").remove(0);
    for (p, m) in [
        (data.clone(), 0o755),
        (data.join("sessions"), 0o755),
        (data.join("shepherd.db"), 0o644),
        (seg.clone(), 0o644),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    let server = serve(&env, &log).await;
    assert_eq!(mode(&data), "700");
    assert_eq!(mode(&data.join("sessions")), "700");
    assert_eq!(mode(&data.join("shepherd.db")), "600");
    assert_eq!(mode(&seg), "600");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("made it private"), "{said}");
    stop(server).await;
}
