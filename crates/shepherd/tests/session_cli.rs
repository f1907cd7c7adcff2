//! The session verbs of the CLI against the real server: `session new`,
//! `add`, `list`, `show`, `rm`, and `attach` as a terminal client that
//! types, reads and detaches with `Ctrl-]` `d`.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{Env, Kind, Server};

fn shepherd(server: &Server, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(args)
        .env("SHEPHERD_SERVER", &server.base)
        .env_remove("SHEPHERD_TOKEN")
        .env_remove("SHEPHERD_AUTH_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(server: &Server, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (ok, out, err) = shepherd(server, &all);
    assert!(ok, "shepherd {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|_| panic!("JSON from {args:?}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_verbs_and_attach() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let dir = env.dir.join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let server = &s;
    let (session, worker) = tokio::task::block_in_place(|| {
        let session = json_of(server, &["session", "new", "--path", &d, "--name", "proj"]);
        assert_eq!(session["name"], "proj");
        let sid = session["id"].as_str().unwrap().to_owned();
        let w = json_of(server, &["session", "add", &sid, "terminal"]);
        assert_eq!(w["type"], "terminal");
        let list = json_of(server, &["session", "list"]);
        assert_eq!(list["count"], 1);
        let (ok, table, _) = shepherd(server, &["session", "show", &sid]);
        assert!(ok && table.contains(w["id"].as_str().unwrap()), "{table}");
        let (ok, _, err) = shepherd(server, &["session", "add", &sid, "agent", "nobody"]);
        assert!(!ok && err.contains("agent_not_found"), "{err}");
        (sid, w["id"].as_str().unwrap().to_owned())
    });

    let (session2, worker2) = (session.clone(), worker.clone());
    let base = s.base.clone();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(["attach", &session2, &worker2])
            .env("SHEPHERD_SERVER", &base)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"echo via-cli-$((9*9))\r").unwrap();
        stdin.flush().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut seen = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 4096];
        while !seen.contains("via-cli-81") {
            assert!(Instant::now() < deadline, "no echo through attach: {seen}");
            let n = stdout.read(&mut buf).unwrap();
            assert!(n > 0, "attach ended early: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        // Ctrl-] d detaches; the shell keeps running.
        stdin.write_all(&[0x1d, b'd']).unwrap();
        stdin.flush().unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "attach did not detach"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success());
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(err.contains("detached"), "{err}");
    })
    .await
    .unwrap();

    let view = s.get(&format!("/api/v1/sessions/{session}"), None).await.1;
    assert_eq!(
        view["workers"][0]["alive"], true,
        "detaching leaves the shell running"
    );
    tokio::task::block_in_place(|| {
        let (ok, _, err) = shepherd(server, &["session", "rm", &session]);
        assert!(ok, "{err}");
        let (ok, _, err) = shepherd(server, &["session", "show", &session]);
        assert!(!ok && err.contains("session_not_found"), "{err}");
    });
    s.stop().await;
}

/// `attach` with no arguments lists what can be attached to; a session is
/// found by name and its one terminal tab by default; wrong names and a
/// git-diff tab are explained; piped input is sent and attach exits once
/// the tab has answered and fallen quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_by_name_lists_choices_explains_refusals_and_ends_with_piped_input() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let dir = env.dir.join("named");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display().to_string();
    let server = &s;
    tokio::task::block_in_place(|| {
        let (ok, out, _) = shepherd(server, &["attach"]);
        assert!(ok && out.contains("no sessions yet"), "{out}");
        let session = json_of(server, &["session", "new", "--path", &d, "--name", "named"]);
        let sid = session["id"].as_str().unwrap().to_owned();
        let (ok, _, err) = shepherd(server, &["attach", "named"]);
        assert!(!ok && err.contains("no terminal or agent tab"), "{err}");
        let term = json_of(server, &["session", "add", &sid, "terminal"]);
        let diff = json_of(server, &["session", "add", &sid, "git-diff"]);
        let (term, diff) = (term["id"].as_str().unwrap(), diff["id"].as_str().unwrap());

        let (ok, out, err) = shepherd(server, &["attach"]);
        assert!(ok, "{err}");
        assert!(
            out.contains(&sid) && out.contains(term) && !out.contains(diff),
            "{out}"
        );
        let (ok, _, err) = shepherd(server, &["attach", "nosuch"]);
        assert!(
            !ok && err.contains("no session has the id or name \"nosuch\""),
            "{err}"
        );
        let (ok, _, err) = shepherd(server, &["attach", "named", "nosuchtab"]);
        assert!(
            !ok && err.contains("no tab has the id or name \"nosuchtab\""),
            "{err}"
        );
        let (ok, _, err) = shepherd(server, &["attach", "named", diff]);
        assert!(!ok && err.contains("git-diff tab"), "{err}");

        let mut child = Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(["attach", "named"])
            .env("SHEPHERD_SERVER", &server.base)
            .env_remove("SHEPHERD_TOKEN")
            .env_remove("SHEPHERD_AUTH_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"echo piped-$((6*7))\r").unwrap();
        drop(stdin);
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "attach did not end with its input"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.contains("piped-42"), "{stdout}");
        assert!(stderr.contains("end of input"), "{stderr}");
    });
    s.stop().await;
}
