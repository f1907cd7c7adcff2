//! Sessions and PTY workers (the sessions contract) against the real server, with a real
//! WebSocket client, on both stores: terminals that echo and resize, several
//! clients on one PTY, resume by offset and epoch, exit and restart, agents
//! with `interactive_command` and `continue_args`, `git-diff` tabs, every
//! process of a PTY's session ended on delete, and the refusals.

mod common;
#[path = "common/ws.rs"]
mod ws;

use std::time::Duration;

use serde_json::{json, Value};
use shepherd_protocol::{
    AddWorker, EventPage, GitDiff, OtherNode, Session, SessionWorker, SessionWorkerExited,
    WireEvent, WorkersQuery,
};

use common::{Env, Kind, Server, OPERATOR};
use ws::{connect, eventually, session_members, try_connect, Opts};

const WAIT: Duration = Duration::from_secs(20);

/// A fresh working directory for a session.
fn workdir(env: &Env, name: &str) -> String {
    let d = env.dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap().display().to_string()
}

async fn new_session(s: &Server, token: Option<&str>, dir: &str) -> Session {
    let (st, body) = s
        .post_as("/api/v1/sessions", token, json!({ "location_path": dir }))
        .await;
    assert_eq!(st, 201, "{body:?}");
    body
}

/// Adds a tab; the status and the tab.
async fn add(s: &Server, token: Option<&str>, session: &str, body: Value) -> (u16, SessionWorker) {
    s.post_as(&format!("/api/v1/sessions/{session}/workers"), token, body)
        .await
}

/// Adds a tab, or asks to; the status and the raw answer (a refusal's code).
async fn try_add(s: &Server, token: Option<&str>, session: &str, body: Value) -> (u16, Value) {
    s.post(&format!("/api/v1/sessions/{session}/workers"), token, body)
        .await
}

/// A terminal tab, through the typed client (no status to check).
async fn add_terminal(s: &Server, token: Option<&str>, session: &str) -> SessionWorker {
    let body = AddWorker {
        kind: "terminal".into(),
        name: None,
        agent_id: None,
    };
    s.client(token)
        .add_session_worker(session, &body)
        .await
        .expect("a terminal tab")
}

async fn events_of(s: &Server, types: &str) -> Vec<WireEvent> {
    let (st, body) = s
        .get_as::<EventPage>(
            &format!("/api/v1/events?after=0&limit=1000&types={types}"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{body:?}");
    body.events
}

e2e!(
    a_terminal_tab_is_no_agent_for_tasks,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let dir = workdir(&env, "work");
        let session = new_session(&s, None, &dir).await;
        add_terminal(&s, None, &session.id).await;
        // The tab is a worker (of the `terminal` agent) on the fleet's pages,
        // but no task can be given to it.
        let (st, agents) = s
            .get_as::<shepherd_protocol::AgentList>("/api/v1/agents", None)
            .await;
        assert_eq!(st, 200);
        assert!(
            agents.agents.iter().all(|a| a.id != "terminal"),
            "{agents:?}"
        );
        let (st, body) = s
            .post(
                "/api/v1/tasks",
                None,
                json!({ "vtid": "TAB-1", "title": "for a tab", "agent_id": "terminal" }),
            )
            .await;
        assert_eq!(st, 422, "{body}");
        assert_eq!(body["error"]["code"], "unknown_agent", "{body}");
        s.stop().await;
    }
);

e2e!(
    terminal_echoes_resizes_and_fans_out,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let dir = workdir(&env, "work");
        let session = new_session(&s, None, &dir).await;
        let sid = session.id.clone();
        assert_eq!(session.location_path, dir);
        assert!(session.workers.is_empty(), "{session:?}");
        let (st, raw) = try_add(&s, None, &sid, json!({ "type": "terminal" })).await;
        assert_eq!(st, 201, "{raw}");
        // Raw: the keys are on the wire even when null (a typed `Option`
        // would read an absent key as `None` too).
        for k in ["id", "name", "agent_id", "created_at"] {
            assert!(raw.get(k).is_some(), "worker lacks {k}: {raw}");
        }
        let w: SessionWorker = serde_json::from_value(raw).unwrap();
        assert_eq!(w.kind, "terminal");
        assert!(w.alive);
        assert!(w.pid.unwrap() > 1);
        let wid = w.id.clone();

        let mut a = connect(&s.base, &sid, &wid, None).await;
        let mut b = connect(&s.base, &sid, &wid, None).await;
        let h = a.history().await;
        assert_eq!(h["epoch"], 1);
        b.history().await;
        // The arithmetic proves the shell ran it: the typed line shows `$((…))`.
        a.type_line("echo hello-$((6*7))-$RANDOM-done").await;
        a.wait_for("hello-42-", WAIT).await;
        b.wait_for("hello-42-", WAIT).await;
        // Both clients saw the same bytes up to the same offset.
        a.type_line("echo sync-$((2*2))").await;
        a.wait_for("sync-4", WAIT).await;
        b.wait_for("sync-4", WAIT).await;
        // Any client may type.
        b.send(json!({"type": "resize", "cols": 100, "rows": 40}))
            .await;
        b.type_line("stty size; echo size-$((1+1))").await;
        a.wait_for("40 100", WAIT).await;
        a.wait_for("size-2", WAIT).await;
        b.wait_for("size-2", WAIT).await;
        let tail_a = &a.screen[a.screen.find("sync-4").unwrap()..];
        let tail_b = &b.screen[b.screen.find("sync-4").unwrap()..];
        let common_len = tail_a.len().min(tail_b.len());
        assert_eq!(tail_a[..common_len], tail_b[..common_len]);
        assert!(
            a.messages
                .iter()
                .any(|m| m["type"] == "activity" && m["state"] == "active"),
            "an activity message arrives"
        );
        // A bad message is answered, not fatal.
        a.send(json!({"type": "teleport"})).await;
        a.send(json!({"type": "resize", "cols": 0, "rows": 5}))
            .await;
        let mut codes = Vec::new();
        while codes.len() < 2 {
            let m = a.next(WAIT).await.expect("error replies");
            if m["type"] == "error" {
                codes.push(m["code"].as_str().unwrap().to_owned());
            }
        }
        assert_eq!(codes, ["invalid_message", "invalid_size"]);

        // The public view and the worker registry both show the tab.
        let (st, view) = s
            .get_as::<Session>(&format!("/api/v1/sessions/{sid}"), None)
            .await;
        assert_eq!(st, 200);
        assert_eq!(view.workers[0].id, wid);
        assert!(view.workers[0].alive);
        let client = s.client(None);
        let list = client.sessions().await.unwrap();
        assert_eq!(list.count, 1);
        let workers = client.workers(&WorkersQuery::default()).await.unwrap();
        let pty = workers
            .workers
            .iter()
            .find(|x| x.worker_id == wid)
            .expect("the PTY tab is in list_workers");
        assert_eq!(pty.session_id.as_deref(), Some(sid.as_str()));
        assert_eq!(pty.terminal_id.as_deref(), Some(wid.as_str()));
        assert_eq!(pty.project_path.as_deref(), Some(dir.as_str()));
        let created = events_of(&s, "session.created,session.worker.added").await;
        assert_eq!(created.len(), 2, "{created:?}");
        s.stop().await;
    }
);

e2e!(resume_by_offset_and_epoch, |kind: Kind| async move {
    let env = Env::new(kind);
    let s = Server::start(&env).await;
    let dir = workdir(&env, "work");
    let sid = new_session(&s, None, &dir).await.id;
    let wid = add_terminal(&s, None, &sid).await.id;
    let mut a = connect(&s.base, &sid, &wid, None).await;
    a.history().await;
    a.type_line("echo first-$((10+1))").await;
    a.wait_for("first-11", WAIT).await;
    let (offset, epoch) = (a.offset, a.epoch.unwrap());
    drop(a);
    // Output while nobody is attached.
    let mut b = connect(&s.base, &sid, &wid, None).await;
    b.history().await;
    b.type_line("echo second-$((20+2))").await;
    b.wait_for("second-22", WAIT).await;
    drop(b);
    let path = ws::path(&sid, &wid);
    let mut c = try_connect(
        &s.base,
        &path,
        Opts {
            query: Some(format!("offset={offset}&epoch={epoch}")),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let h = c.history().await;
    let data = h["data"].as_str().unwrap();
    assert!(data.contains("second-22"), "{data:?}");
    assert!(
        !data.contains("first-11"),
        "no doubled scrollback: {data:?}"
    );
    // Another epoch: the whole history.
    let mut d = try_connect(
        &s.base,
        &path,
        Opts {
            query: Some(format!("offset={offset}&epoch={}", epoch + 7)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let h = d.history().await;
    assert!(h["data"].as_str().unwrap().contains("first-11"));
    s.stop().await;
});

e2e!(
    exit_is_reported_and_restart_starts_anew,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let dir = workdir(&env, "work");
        let sid = new_session(&s, None, &dir).await.id;
        let w = add_terminal(&s, None, &sid).await;
        let wid = w.id.clone();
        let mut a = connect(&s.base, &sid, &wid, None).await;
        a.history().await;
        a.type_line("exit 3").await;
        let exit = a.wait_exit(WAIT).await;
        assert_eq!(exit, json!({"type": "exit", "exitCode": 3, "signal": null}));
        // Exited while the server was up: attaching again is not a restore.
        let client = s.client(None);
        let mut view = client.session(&sid).await.unwrap();
        for _ in 0..200 {
            if view.workers[0].exit_code == Some(3) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            view = client.session(&sid).await.unwrap();
        }
        assert_eq!(view.workers[0].exit_code, Some(3), "{view:?}");
        assert!(!view.workers[0].alive);
        let mut b = connect(&s.base, &sid, &wid, None).await;
        assert_eq!(b.history().await["epoch"], 1);
        assert_eq!(b.wait_exit(WAIT).await["exitCode"], 3);
        assert!(b.closed(WAIT).await);
        assert!(events_of(&s, "session.worker.restored").await.is_empty());
        // Restart: a new process, a new epoch.
        let restart = format!("/api/v1/sessions/{sid}/workers/{wid}/restart");
        let (st, r) = s
            .post_as::<SessionWorker>(&restart, None, json!({"mode": "new"}))
            .await;
        assert_eq!(st, 200, "{r:?}");
        assert_eq!(r.epoch, 2);
        assert!(r.alive);
        assert_ne!(r.pid, w.pid);
        let mut c = connect(&s.base, &sid, &wid, None).await;
        assert_eq!(c.history().await["epoch"], 2);
        c.type_line("echo again-$((5*5))").await;
        c.wait_for("again-25", WAIT).await;
        let (st, e) = s.post(&restart, None, json!({"mode": "sideways"})).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (422, Some("invalid_body"))
        );
        s.stop().await;
    }
);

e2e!(
    deleting_a_session_ends_every_process_of_its_ptys,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let dir = workdir(&env, "work");
        let sid = new_session(&s, None, &dir).await.id;
        let w = add_terminal(&s, None, &sid).await;
        let (wid, pid) = (w.id, w.pid.unwrap());
        let mut a = connect(&s.base, &sid, &wid, None).await;
        a.history().await;
        // A background job gets a process group of its own in an interactive shell.
        a.type_line("sleep 1000 & sleep 1001 & echo bg-$((3*3))")
            .await;
        a.wait_for("bg-9", WAIT).await;
        eventually("the background jobs run", WAIT, || {
            session_members(pid).len() >= 3
        })
        .await;
        let (st, body) = s
            .delete_as::<Session>(&format!("/api/v1/sessions/{sid}"), None)
            .await;
        assert_eq!(st, 200, "{body:?}");
        assert!(
            session_members(pid).is_empty(),
            "left alive: {:?}",
            session_members(pid)
        );
        let (st, body) = s.get(&format!("/api/v1/sessions/{sid}"), None).await;
        assert_eq!(
            (st, body["error"]["code"].as_str()),
            (404, Some("session_not_found"))
        );
        let q = WorkersQuery {
            include_closed: Some(true),
            ..Default::default()
        };
        let workers = s.client(None).workers(&q).await.unwrap();
        let row = workers.workers.iter().find(|x| x.worker_id == wid).unwrap();
        assert_eq!(row.registry_status, "terminated");
        let removed = events_of(&s, "session.worker.removed,session.deleted").await;
        assert_eq!(removed.len(), 2);
        s.stop().await;
    }
);

e2e!(
    agents_run_interactive_command_and_continue_args,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        let argv = env.dir.join("argv.txt");
        let script = env.script(
            "agent.sh",
            &format!(
                "printf '%s\\n' \"start:$*\" >> {}\necho agent-ready\nexec cat\n",
                argv.display()
            ),
        );
        let resumed_argv = env.dir.join("resumed-argv.txt");
        let resumer = env.script(
            "resumer.sh",
            &format!(
                "printf '%s\\n' \"start:$*\" >> {}\necho resumer-ready\nexec cat\n",
                resumed_argv.display()
            ),
        );
        env.with_config_file(&format!(
        "[agents.talker]\ncommand = [\"sh\", \"-c\", \"true\"]\ninteractive_command = [\"sh\", \"{script}\"]\n\
         continue_args = [\"--continue\"]\n\n[agents.oneshot]\ncommand = [\"true\"]\n\n\
         [agents.resumer]\ncommand = [\"true\"]\ninteractive_command = [\"sh\", \"{resumer}\"]\n\
         continue_args = [\"--resume\", \"{{agent_session_id}}\"]\n"
    ));
        let s = Server::start(&env).await;
        let dir = workdir(&env, "work");
        let sid = new_session(&s, None, &dir).await.id;
        let (st, w) = add(
            &s,
            None,
            &sid,
            json!({ "type": "agent", "agent_id": "talker" }),
        )
        .await;
        assert_eq!(st, 201, "{w:?}");
        assert_eq!(w.agent_id.as_deref(), Some("talker"));
        let wid = w.id.clone();
        let mut a = connect(&s.base, &sid, &wid, None).await;
        a.wait_for("agent-ready", WAIT).await;
        a.type_line("ping-agent").await;
        a.wait_for("ping-agent", WAIT).await;
        let (st, r) = s
            .post_as::<SessionWorker>(
                &format!("/api/v1/sessions/{sid}/workers/{wid}/restart"),
                None,
                json!({"mode": "continue"}),
            )
            .await;
        assert_eq!(st, 200, "{r:?}");
        eventually("the agent restarts with continue_args", WAIT, || {
            std::fs::read_to_string(&argv).unwrap_or_default() == "start:\nstart:--continue\n"
        })
        .await;
        // A tab knows no agent conversation id: continue_args that need one
        // are left out, never passed with the placeholder unfilled.
        let (st, w) = add(
            &s,
            None,
            &sid,
            json!({ "type": "agent", "agent_id": "resumer" }),
        )
        .await;
        assert_eq!(st, 201, "{w:?}");
        let rid = w.id.clone();
        let mut r = connect(&s.base, &sid, &rid, None).await;
        r.wait_for("resumer-ready", WAIT).await;
        let (st, body) = s
            .post_as::<SessionWorker>(
                &format!("/api/v1/sessions/{sid}/workers/{rid}/restart"),
                None,
                json!({"mode": "continue"}),
            )
            .await;
        assert_eq!(st, 200, "{body:?}");
        eventually("the resumer restarts", WAIT, || {
            std::fs::read_to_string(&resumed_argv)
                .unwrap_or_default()
                .lines()
                .count()
                == 2
        })
        .await;
        assert_eq!(
            std::fs::read_to_string(&resumed_argv).unwrap(),
            "start:\nstart:\n",
            "no unfilled {{agent_session_id}} reaches the agent"
        );
        let (st, e) = try_add(
            &s,
            None,
            &sid,
            json!({ "type": "agent", "agent_id": "oneshot" }),
        )
        .await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (422, Some("agent_not_interactive"))
        );
        let (st, e) = try_add(
            &s,
            None,
            &sid,
            json!({ "type": "agent", "agent_id": "nobody" }),
        )
        .await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (422, Some("agent_not_found"))
        );
        s.stop().await;
    }
);

e2e!(
    git_diff_tabs_show_diff_and_status,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let dir = workdir(&env, "repo");
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(["-C", &dir])
                .args(args)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.com")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.com")
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        std::fs::write(format!("{dir}/a.txt"), "one\n").unwrap();
        git(&["add", "a.txt"]);
        git(&["commit", "-qm", "init"]);
        std::fs::write(format!("{dir}/a.txt"), "two\n").unwrap();
        std::fs::write(format!("{dir}/new.txt"), "x").unwrap();
        let sid = new_session(&s, None, &dir).await.id;
        let (st, w) = add(&s, None, &sid, json!({ "type": "git-diff" })).await;
        assert_eq!(st, 201, "{w:?}");
        assert_eq!(w.pid, None);
        assert!(!w.alive);
        let wid = w.id.as_str();
        let (st, d) = s
            .get_as::<GitDiff>(&format!("/api/v1/sessions/{sid}/workers/{wid}/diff"), None)
            .await;
        assert_eq!(st, 200, "{d:?}");
        assert!(d.diff.contains("+two"), "{d:?}");
        assert!(d.status.contains("?? new.txt"), "{d:?}");
        // Not a terminal: no WebSocket.
        let r = try_connect(&s.base, &ws::path(&sid, wid), Opts::default()).await;
        assert_eq!(r.err(), Some(422));
        // Not in the worker registry: only PTY tabs are workers there.
        let workers = s
            .client(None)
            .workers(&WorkersQuery::default())
            .await
            .unwrap();
        assert!(!workers.workers.iter().any(|x| x.worker_id == wid));
        s.stop().await;
    }
);

e2e!(bad_requests_have_their_codes, |kind: Kind| async move {
    let mut env = Env::new(kind);
    let root = env.dir.join("root");
    std::fs::create_dir_all(root.join("inside")).unwrap();
    std::fs::create_dir_all(env.dir.join("outside")).unwrap();
    env.set("SHEPHERD_SESSIONS_ROOT", &root.display().to_string());
    let s = Server::start(&env).await;
    let cases = [
        (
            json!({ "location_path": env.dir.join("missing").display().to_string() }),
            422,
            "invalid_location",
        ),
        (
            json!({ "location_path": "relative/dir" }),
            422,
            "invalid_location",
        ),
        (
            json!({ "location_path": env.dir.join("outside").display().to_string() }),
            422,
            "outside_sessions_root",
        ),
        (
            json!({ "location_path": root.join("inside/../../outside").display().to_string() }),
            422,
            "outside_sessions_root",
        ),
        (json!({ "path": "/tmp" }), 422, "invalid_body"),
    ];
    for (body, status, code) in cases {
        let (st, e) = s.post("/api/v1/sessions", None, body.clone()).await;
        assert_eq!(
            (st, e["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }
    let list = s.client(None).sessions().await.unwrap();
    assert_eq!(list.count, 0, "nothing half-written");
    let dir = root.join("inside").display().to_string();
    let sid = new_session(&s, None, &dir).await.id;
    let (st, e) = try_add(&s, None, &sid, json!({ "type": "browser" })).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (422, Some("invalid_worker_type"))
    );
    let (st, e) = try_add(&s, None, "ses_nope", json!({ "type": "terminal" })).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("session_not_found"))
    );
    let (st, e) = s
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/sessions/{sid}/workers/wk_nope"),
            None,
            None,
        )
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("worker_not_found"))
    );
    let r = try_connect(&s.base, &ws::path(&sid, "wk_nope"), Opts::default()).await;
    assert_eq!(r.err(), Some(404));
    let r = try_connect(&s.base, &ws::path("ses_nope", "wk_nope"), Opts::default()).await;
    assert_eq!(r.err(), Some(404));
    s.stop().await;
});

e2e!(
    a_location_moved_outside_the_root_starts_nothing,
    |kind: Kind| async move {
        // The sessions root was checked only when a session was created:
        // replacing its directory by a link to a directory elsewhere (as
        // /etc) afterwards opened the next terminal there. Every launch (a
        // new tab, a restart, a restore) checks the location again.
        let mut env = Env::new(kind);
        let root = env.dir.join("root");
        let inside = root.join("inside");
        let outside = env.dir.join("outside");
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        env.set("SHEPHERD_SESSIONS_ROOT", &root.display().to_string());
        let s = Server::start(&env).await;
        let dir = inside.canonicalize().unwrap().display().to_string();
        let sid = new_session(&s, None, &dir).await.id;
        let (st, w) = add(&s, None, &sid, json!({ "type": "terminal" })).await;
        assert_eq!(st, 201, "{w:?}");
        let wid = w.id.clone();

        // The session's directory becomes a link to one outside the root.
        std::fs::rename(&inside, root.join("moved-away")).unwrap();
        std::os::unix::fs::symlink(&outside, &inside).unwrap();
        let refused = |st: u16, e: &Value, what: &str| {
            assert_eq!(
                (st, e["error"]["code"].as_str()),
                (422, Some("outside_sessions_root")),
                "{what}: {e}"
            );
            assert!(
                e["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(&*outside.canonicalize().unwrap().to_string_lossy()),
                "{what}: the message says where it leads: {e}"
            );
        };
        let (st, e) = try_add(&s, None, &sid, json!({ "type": "terminal" })).await;
        refused(st, &e, "a new tab");
        let (st, e) = s
            .post(
                &format!("/api/v1/sessions/{sid}/workers/{wid}/restart"),
                None,
                json!({ "mode": "new" }),
            )
            .await;
        refused(st, &e, "a restart");
        // A restore after the server restarted: the contract's exit message,
        // and the reason in the log.
        s.stop().await;
        let s = Server::start(&env).await;
        let mut t = connect(&s.base, &sid, &wid, None).await;
        assert_eq!(
            t.next(WAIT).await,
            Some(json!({"type": "exit", "exitCode": 1, "signal": null}))
        );
        let exited = events_of(&s, "session.worker.exited").await;
        assert!(
            exited.iter().any(|e| {
                let data: SessionWorkerExited =
                    serde_json::from_value(e.event.data.clone()).unwrap();
                e.event.refs.worker_id.as_deref() == Some(wid.as_str())
                    && data.restore_failed == Some(true)
                    && data.reason.unwrap().contains("outside the sessions root")
            }),
            "{exited:?}"
        );
        // Back where it was, a tab starts again.
        std::fs::remove_file(&inside).unwrap();
        std::fs::rename(root.join("moved-away"), &inside).unwrap();
        let (st, w) = add(&s, None, &sid, json!({ "type": "terminal" })).await;
        assert_eq!(st, 201, "{w:?}");
        s.stop().await;
    }
);

e2e!(
    a_token_is_required_when_configured,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
        let s = Server::start(&env).await;
        let dir = workdir(&env, "work");
        let sid = new_session(&s, Some(OPERATOR), &dir).await.id;
        let wid = add_terminal(&s, Some(OPERATOR), &sid).await.id;
        let path = ws::path(&sid, &wid);
        let r = try_connect(&s.base, &path, Opts::default()).await;
        assert_eq!(r.err(), Some(401), "no token");
        let r = try_connect(
            &s.base,
            &path,
            Opts {
                token: Some("wrong-token-0123456789"),
                ..Default::default()
            },
        )
        .await;
        assert_eq!(r.err(), Some(401), "a wrong token");
        let mut t = try_connect(
            &s.base,
            &path,
            Opts {
                token: Some(OPERATOR),
                protocols: Some("shepherd.v1"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(t.protocol.as_deref(), Some("shepherd.v1"));
        t.history().await;
        t.type_line("echo authed-$((4+4))").await;
        t.wait_for("authed-8", WAIT).await;
        // A browser: no header, the token offered as a subprotocol, its own origin.
        let offered = format!("shepherd.v1, bearer.{OPERATOR}");
        let own = s.base.clone();
        let mut b = try_connect(
            &s.base,
            &path,
            Opts {
                protocols: Some(&offered),
                origin: Some(&own),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(
            b.protocol.as_deref(),
            Some("shepherd.v1"),
            "the token is never echoed back"
        );
        b.wait_for("authed-8", WAIT).await;
        // Cross-site WebSocket hijacking: another origin is refused even with the token.
        let r = try_connect(
            &s.base,
            &path,
            Opts {
                protocols: Some(&offered),
                origin: Some("http://evil.example"),
                ..Default::default()
            },
        )
        .await;
        assert_eq!(r.err(), Some(403), "a foreign Origin");
        let r = try_connect(
            &s.base,
            &path,
            Opts {
                protocols: Some("shepherd.v1, bearer.wrong-token-0123456789"),
                ..Default::default()
            },
        )
        .await;
        assert_eq!(r.err(), Some(401), "a wrong subprotocol token");
        s.stop().await;
    }
);

#[tokio::test]
async fn openapi_names_the_session_routes() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    // The document itself is the answer: JSON, read as such.
    let (_, doc) = s.get("/api/openapi.json", None).await;
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/api/v1/sessions",
        "/api/v1/sessions/{id}",
        "/api/v1/sessions/{id}/workers",
        "/api/v1/sessions/{id}/workers/{worker_id}",
        "/api/v1/sessions/{id}/workers/{worker_id}/restart",
        "/api/v1/sessions/{id}/workers/{worker_id}/diff",
        "/ws/session/{sessionId}/worker/{workerId}",
    ] {
        assert!(paths.contains_key(p), "OpenAPI lacks {p}");
    }
    s.stop().await;
}

/// Two nodes on one PostgreSQL: a session lives on the node that created
/// it, and the other node serves it all the same, passing each request and
/// each attached client on to the node holding the PTY. A client that
/// resumes through the other node gets each byte once. Only when the
/// holding node cannot be reached does the other answer 409
/// `session_on_other_node`, with that node's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_node_relays_to_the_host() {
    let mut env = Env::new(Kind::Postgres);
    env.set("SHEPHERD_NODE_ID", "node-a");
    let a = Server::start(&env).await;
    env.set("SHEPHERD_NODE_ID", "node-b");
    let b = Server::start(&env).await;
    let dir = workdir(&env, "work");
    let session = new_session(&a, None, &dir).await;
    assert_eq!(session.node_id, "node-a");
    assert_eq!(session.node_address.as_deref(), Some(a.base.as_str()));
    let sid = session.id.clone();
    // A tab added through the other node is started on the holding node.
    let (st, w) = add(&b, None, &sid, json!({ "type": "terminal" })).await;
    assert_eq!(st, 201, "{w:?}");
    let wid = w.id.clone();
    let (st, view) = a
        .get_as::<Session>(&format!("/api/v1/sessions/{sid}"), None)
        .await;
    assert_eq!(st, 200);
    assert!(view.workers[0].alive, "running on node-a: {view:?}");
    // Refusals come back as the holding node gave them.
    let (st, e) = try_add(&b, None, &sid, json!({ "type": "sideways" })).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (422, Some("invalid_worker_type"))
    );

    // Typed into through node-b; resumed through node-a, then node-b again.
    let mut t = connect(&b.base, &sid, &wid, None).await;
    t.history().await;
    t.wait_prompt("", WAIT).await;
    t.type_line("echo via-b-$((6*7))").await;
    t.wait_for("via-b-42", WAIT).await;
    t.wait_prompt("via-b-42", WAIT).await;
    let seen = t.screen.clone();
    let resume = format!("offset={}&epoch={}", t.offset, t.epoch.unwrap());
    drop(t);
    let o = Opts {
        query: Some(resume),
        ..Default::default()
    };
    let mut t = try_connect(&a.base, &ws::path(&sid, &wid), o)
        .await
        .unwrap();
    let h = t.history().await;
    assert_eq!(h["data"], "", "nothing twice: {h}");
    t.type_line("echo via-a-$((8*8))").await;
    t.wait_for("via-a-64", WAIT).await;
    t.wait_prompt("via-a-64", WAIT).await;
    let resume = format!("offset={}&epoch={}", t.offset, t.epoch.unwrap());
    let seen = format!("{seen}{}", t.screen);
    drop(t);
    let o = Opts {
        query: Some(resume),
        ..Default::default()
    };
    let mut t = try_connect(&b.base, &ws::path(&sid, &wid), o)
        .await
        .unwrap();
    t.history().await;
    t.type_line("echo again-b-$((1+1))").await;
    t.wait_for("again-b-2", WAIT).await;
    let whole = format!("{seen}{}", t.screen);
    assert_eq!(whole.matches("via-b-42").count(), 1, "{whole:?}");
    assert_eq!(whole.matches("via-a-64").count(), 1, "{whole:?}");
    drop(t);
    // A plain GET through the other node: the tab could be attached.
    let (st, e) = b
        .call(reqwest::Method::GET, &ws::path(&sid, &wid), None, None)
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (400, Some("websocket_required"))
    );
    let (st, shown) = b
        .call(
            reqwest::Method::GET,
            &format!("/api/v1/sessions/{sid}/workers/{wid}/diff"),
            None,
            None,
        )
        .await;
    assert_eq!(
        (st, shown["error"]["code"].as_str()),
        (422, Some("not_a_git_diff_worker"))
    );

    // The holding node stops: the other cannot relay, and says where the
    // session is.
    let a_base = a.base.clone();
    a.stop().await;
    let (st, e) = try_add(&b, None, &sid, json!({ "type": "terminal" })).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("session_on_other_node")),
        "{e}"
    );
    let host: OtherNode = serde_json::from_value(e).unwrap();
    assert_eq!(host.address.as_deref(), Some(a_base.as_str()));
    assert_eq!(host.node_id, "node-a");
    // So do its attach and, for a browser, the plain GET that says why.
    let r = try_connect(&b.base, &ws::path(&sid, &wid), Opts::default()).await;
    assert_eq!(r.err(), Some(409));
    let (st, e) = b
        .call(reqwest::Method::GET, &ws::path(&sid, &wid), None, None)
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("session_on_other_node"))
    );
    let (st, e) = b
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/sessions/{sid}"),
            None,
            None,
        )
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("session_on_other_node"))
    );
    b.stop().await;
}
