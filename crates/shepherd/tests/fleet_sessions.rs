//! Sessions on a runner's host, on both stores, with two hosts on this
//! machine: the real `shepherd serve` and the real `shepherd runner` (its
//! own data directory, HOME and sessions root, no agents). A terminal is
//! created on the runner's host and typed into through the server; its
//! process is the runner's child, not the server's. Its history reaches
//! the client exactly once after the server is killed with SIGKILL and
//! started again (the runner's link comes back, the client resumes from
//! its offset) and after the runner is killed with SIGKILL and started
//! again (the tab is restored: old history once, a marker, a new process).
//! While the runner is down, its sessions answer 503 `host_offline`, naming
//! the host.

mod common;
#[path = "common/ws.rs"]
mod ws;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shepherd_protocol as p;

use common::{wait_ready, Env, Kind, Proc, Served, Server, OPERATOR};
use ws::{Opts, Term};

const WAIT: Duration = Duration::from_secs(30);

/// `shepherd runner` with its own data directory, HOME and sessions root.
fn runner(base: &str, data_dir: &Path, root: &Path) -> Proc {
    common::runner_host(base, data_dir, root, None)
}

/// The real server, started again on the same data and address.
struct Node {
    env: Env,
    listen: String,
    base: String,
    child: Option<Served>,
    http: reqwest::Client,
}

impl Node {
    async fn start(&mut self) {
        let served = Served::spawn(
            self.env
                .serve_command()
                .env("SHEPHERD_LISTEN", &self.listen)
                .stderr(Stdio::inherit()),
        );
        self.listen = served.addr.to_string();
        self.base = served.base.clone();
        self.child = Some(served);
        wait_ready(&self.http, &self.base).await;
    }

    fn kill9(&mut self) {
        if let Some(mut p) = self.child.take() {
            p.child.kill().unwrap();
            p.child.wait().unwrap();
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(OPERATOR);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn ppid(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Attaches through the server, retrying while the host's link is not back
/// yet (503 `host_offline`).
async fn attach(base: &str, sid: &str, wid: &str, resume: Option<(u64, i64)>) -> Term {
    let start = Instant::now();
    loop {
        let o = Opts {
            token: Some(OPERATOR),
            query: resume.map(|(o, e)| format!("offset={o}&epoch={e}")),
            ..Default::default()
        };
        match ws::try_connect(base, &ws::path(sid, wid), o).await {
            Ok(mut t) => {
                // A link that dropped between the check and the attach
                // closes the socket at once ("try again"); so does that.
                let first = t.next(Duration::from_secs(10)).await;
                if first.as_ref().is_some_and(|v| v["type"] == "history") {
                    return t;
                }
            }
            Err(status) => assert_eq!(status, 503, "only a host not back yet is retried"),
        }
        assert!(start.elapsed() < WAIT, "the tab was never attached again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn a_terminal_on_a_runners_host(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_NODE_ID", "node-a")
        .set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "3");
    let far = env.dir.join("far-host");
    let root = far.join("work");
    std::fs::create_dir_all(root.join("project")).unwrap();
    std::fs::create_dir_all(env.dir.join("not-far")).unwrap();
    let mut node = Node {
        env,
        listen: "127.0.0.1:0".into(),
        base: String::new(),
        child: None,
        http: reqwest::Client::new(),
    };
    node.start().await;
    let mut r = runner(&node.base, &far.join("data"), &root);

    // The runner's host comes online.
    let start = Instant::now();
    let host = loop {
        let (_, list) = node.call(reqwest::Method::GET, "/api/v1/hosts", None).await;
        let list: p::HostList = serde_json::from_value(list).unwrap();
        if let Some(h) = list
            .hosts
            .into_iter()
            .find(|h| h.kind == p::HostKind::Runner && h.online)
        {
            break h;
        }
        assert!(
            start.elapsed() < WAIT,
            "the runner's host never came online"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The host's own rules: a location outside its sessions root is refused.
    let outside = node.env.dir.join("not-far");
    let (st, e) = node
        .call(
            reqwest::Method::POST,
            "/api/v1/sessions",
            Some(json!({ "location_path": outside, "host": host.id })),
        )
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (422, Some("outside_sessions_root")),
        "{e}"
    );
    let (st, e) = node
        .call(
            reqwest::Method::POST,
            "/api/v1/sessions",
            Some(json!({ "location_path": root.join("project"), "host": "host-nowhere" })),
        )
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("host_not_found")),
        "{e}"
    );

    // A session on it, and a terminal there, typed into through the server.
    let (st, session) = node
        .call(
            reqwest::Method::POST,
            "/api/v1/sessions",
            Some(json!({ "location_path": root.join("project"), "host": host.id })),
        )
        .await;
    assert_eq!(st, 201, "{session}");
    let session: p::Session = serde_json::from_value(session).unwrap();
    assert_eq!(session.node_id, host.id);
    let sid = session.id.clone();
    let (st, w) = node
        .call(
            reqwest::Method::POST,
            &format!("/api/v1/sessions/{sid}/workers"),
            Some(json!({ "type": "terminal" })),
        )
        .await;
    assert_eq!(st, 201, "{w}");
    let w: p::SessionWorker = serde_json::from_value(w).unwrap();
    let wid = w.id.clone();
    let pid = w.pid.expect("a process");
    assert_eq!(
        ppid(pid),
        Some(r.0.id() as i64),
        "the PTY is the runner's child, on its host"
    );

    let mut t = attach(&node.base, &sid, &wid, None).await;
    t.wait_prompt("", WAIT).await;
    t.type_line("echo one-$((40+2))").await;
    t.wait_for("one-42", WAIT).await;
    let (_, shown) = node
        .call(
            reqwest::Method::GET,
            &format!("/api/v1/sessions/{sid}"),
            None,
        )
        .await;
    assert_eq!(shown["workers"][0]["alive"], true, "{shown}");
    if kind == Kind::Postgres {
        // A second node, which the runner has no link to: it serves the
        // tab through the node that has, and the client resumes there with
        // each byte once.
        node.env.set("SHEPHERD_NODE_ID", "node-b");
        let b = Server::start(&node.env).await;
        node.env.set("SHEPHERD_NODE_ID", "node-a");
        let resume = (t.offset, t.epoch.unwrap());
        let mut tb = attach(&b.base, &sid, &wid, Some(resume)).await;
        assert_eq!(tb.screen, "", "nothing twice through the other node");
        tb.type_line("echo via-b-$((2*3))").await;
        tb.wait_for("via-b-6", WAIT).await;
        drop(tb);
        t.wait_for("via-b-6", WAIT).await;
        // A session on the runner's host made through node-b, which has no
        // link to it, is made through node-a, which has.
        let (st, other) = b
            .post(
                "/api/v1/sessions",
                Some(OPERATOR),
                json!({ "location_path": root.join("project"), "host": host.id, "name": "via b" }),
            )
            .await;
        assert_eq!(st, 201, "{other}");
        assert_eq!(other["node_id"], host.id.as_str());
        b.stop().await;
    }
    // Something that prints while the server is gone.
    t.type_line("sleep 2; echo two-$((1+1))").await;
    t.wait_for("sleep 2", WAIT).await;
    let before = (t.offset, t.epoch.unwrap());
    let seen_before = t.screen.clone();

    // The server is killed and started again; the client resumes.
    node.kill9();
    assert!(t.closed(WAIT).await);
    node.start().await;
    let mut t = attach(&node.base, &sid, &wid, Some(before)).await;
    t.wait_for("two-2", WAIT).await;
    let whole = format!("{seen_before}{}", t.screen);
    assert_eq!(whole.matches("one-42").count(), 1, "{whole:?}");
    assert_eq!(whole.matches("two-2").count(), 1, "{whole:?}");
    assert_eq!(t.epoch, Some(before.1), "the same process");
    t.wait_prompt("two-2", WAIT).await;
    let after_server = (t.offset, t.epoch.unwrap());

    // The runner is killed: its sessions say which host is gone.
    r.0.kill().unwrap();
    r.0.wait().unwrap();
    assert!(t.closed(WAIT).await);
    let start = Instant::now();
    loop {
        let (st, e) = node
            .call(
                reqwest::Method::POST,
                &format!("/api/v1/sessions/{sid}/workers"),
                Some(json!({ "type": "terminal" })),
            )
            .await;
        if st == 503 {
            assert_eq!(e["error"]["code"], "host_offline", "{e}");
            assert_eq!(e["host_id"], host.id.as_str(), "{e}");
            assert!(
                e["last_seen_at"].as_str().is_some_and(|s| !s.is_empty()),
                "{e}"
            );
            break;
        }
        // Until the server notices the link is gone, a tab may still be
        // added; it dies with the runner like the others.
        assert!(start.elapsed() < WAIT, "{st} {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (st, e) = node
        .call(
            reqwest::Method::GET,
            &format!("/ws/session/{sid}/worker/{wid}"),
            None,
        )
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (503, Some("host_offline")),
        "{e}"
    );

    // Started again with its data directory: the tab is restored on attach,
    // its old history once, then a marker, then a new process.
    let r2 = runner(&node.base, &far.join("data"), &root);
    let mut t = attach(&node.base, &sid, &wid, Some(after_server)).await;
    t.wait_for("session restored", WAIT).await;
    assert_eq!(t.epoch, Some(2), "a new process, a new epoch");
    assert_eq!(t.screen.matches("one-42").count(), 1, "{:?}", t.screen);
    assert_eq!(t.screen.matches("two-2").count(), 1, "{:?}", t.screen);
    t.wait_prompt("session restored", WAIT).await;
    t.type_line("echo three-$((1+2))").await;
    t.wait_for("three-3", WAIT).await;
    let (_, shown) = node
        .call(
            reqwest::Method::GET,
            &format!("/api/v1/sessions/{sid}"),
            None,
        )
        .await;
    let shown: p::Session = serde_json::from_value(shown).unwrap();
    let tab = shown.workers.iter().find(|x| x.id == wid).unwrap();
    assert_eq!(tab.epoch, 2);
    assert_eq!(ppid(tab.pid.unwrap()), Some(r2.0.id() as i64));
    drop(t);

    // Deleted: its processes end and its scrollback leaves the runner's disk.
    let scrollback = far.join("data").join("sessions").join(&sid);
    assert!(scrollback.exists());
    let (st, _) = node
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/sessions/{sid}"),
            None,
        )
        .await;
    assert_eq!(st, 200);
    assert!(!scrollback.exists());
    let start = Instant::now();
    while std::fs::metadata(format!("/proc/{}", tab.pid.unwrap())).is_ok()
        && ppid(tab.pid.unwrap()).is_some()
    {
        assert!(start.elapsed() < WAIT, "the tab's process ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_on_a_runners_host_sqlite() {
    a_terminal_on_a_runners_host(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_on_a_runners_host_postgres() {
    a_terminal_on_a_runners_host(Kind::Postgres).await;
}

/// A host speaks only for its own sessions: a host token's link that tells
/// of an exit in another host's session changes nothing there, while the
/// same news of its own tab is recorded. The "runner" here is this test
/// speaking the link protocol itself, so it can say what no runner would.
async fn a_host_speaks_only_for_its_own_sessions(kind: Kind) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let mut env = Env::new(kind);
    let root = env.dir.join("work");
    std::fs::create_dir_all(&root).unwrap();
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_NODE_ID", "node-main")
        .set("SHEPHERD_SESSIONS_ROOT", root.to_str().unwrap());
    let s = Server::start(&env).await;
    // A tab on the node itself.
    let (st, mine) = s
        .post_as::<p::Session>(
            "/api/v1/sessions",
            Some(OPERATOR),
            json!({ "location_path": root }),
        )
        .await;
    assert_eq!(st, 201);
    let (st, node_tab) = s
        .post_as::<p::SessionWorker>(
            &format!("/api/v1/sessions/{}/workers", mine.id),
            Some(OPERATOR),
            json!({ "type": "terminal" }),
        )
        .await;
    assert_eq!(st, 201);

    // A host, and its link, spoken by hand.
    let (st, reg) = s
        .post_as::<p::RegisterHostResponse>(
            "/api/v1/hosts",
            Some(OPERATOR),
            json!({ "id": "host-hand", "name": "by hand", "sessions_root": "/srv/hand" }),
        )
        .await;
    assert_eq!(st, 201);
    let url = format!(
        "{}/api/v1/hosts/host-hand/link",
        s.base.replacen("http://", "ws://", 1)
    );
    let mut req = url.clone().into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", reg.host_token).parse().unwrap(),
    );
    let (mut link, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    // The host answers what a session and a tab on it need.
    let answer = tokio::spawn(async move {
        while let Some(Ok(m)) = link.next().await {
            let Message::Text(t) = m else { continue };
            let Ok(p::LinkMessage::Request { id, request }) = serde_json::from_str(t.as_str())
            else {
                continue;
            };
            let last = matches!(request, p::LinkRequest::TabStart { .. });
            let reply = match request {
                p::LinkRequest::SessionLocation { path } => p::LinkReply::Location { path },
                p::LinkRequest::TabStart { .. } => p::LinkReply::TabStarted { pid: 999_999 },
                _ => p::LinkReply::Done,
            };
            let text = serde_json::to_string(&p::LinkMessage::Reply { id, reply }).unwrap();
            link.send(Message::text(text)).await.unwrap();
            if last {
                return link;
            }
        }
        panic!("the link closed");
    });
    let hand_session = loop {
        let (st, v) = s
            .post(
                "/api/v1/sessions",
                Some(OPERATOR),
                json!({ "location_path": "/srv/hand/app", "host": "host-hand" }),
            )
            .await;
        if st == 201 {
            break serde_json::from_value::<p::Session>(v).unwrap();
        }
        // Until the server has taken the link.
        assert_eq!(v["error"]["code"], "host_offline", "{v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (st, hand_tab) = s
        .post_as::<p::SessionWorker>(
            &format!("/api/v1/sessions/{}/workers", hand_session.id),
            Some(OPERATOR),
            json!({ "type": "terminal" }),
        )
        .await;
    assert_eq!(st, 201);
    assert_eq!(hand_tab.pid, Some(999_999));
    let mut link = answer.await.unwrap();

    let exited = |session: &str, worker: &str| p::LinkMessage::Event {
        event: p::HostEvent::TabExited {
            session_id: session.into(),
            worker_id: worker.into(),
            epoch: 1,
            exit_code: Some(9),
            signal: None,
        },
    };
    for m in [
        exited(&mine.id, &node_tab.id),
        exited(&hand_session.id, &hand_tab.id),
    ] {
        let text = serde_json::to_string(&m).unwrap();
        link.send(Message::text(text)).await.unwrap();
    }
    let tab_of = |session: &str| {
        let path = format!("/api/v1/sessions/{session}");
        let s = &s;
        async move {
            let (_, v) = s.get_as::<p::Session>(&path, Some(OPERATOR)).await;
            v.workers.into_iter().next().unwrap()
        }
    };
    let start = Instant::now();
    while tab_of(&hand_session.id).await.exited_at.is_none() {
        assert!(start.elapsed() < WAIT, "the host's own exit is recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let node_tab = tab_of(&mine.id).await;
    assert!(
        node_tab.exited_at.is_none() && node_tab.alive,
        "{node_tab:?}"
    );

    // The host goes away; its session can still be deleted, and when the
    // host is back and says the tab runs, the server has it stopped.
    link.close(None).await.unwrap();
    drop(link);
    let path = format!("/api/v1/sessions/{}", hand_session.id);
    let start = Instant::now();
    loop {
        let (st, v) = s
            .call(reqwest::Method::DELETE, &path, Some(OPERATOR), None)
            .await;
        if st == 200 {
            break;
        }
        assert!(start.elapsed() < WAIT, "{st} {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", reg.host_token).parse().unwrap(),
    );
    let (mut link, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let live = p::LinkMessage::Event {
        event: p::HostEvent::Live {
            tabs: vec![p::LiveTab {
                session_id: hand_session.id.clone(),
                worker_id: hand_tab.id.clone(),
            }],
        },
    };
    link.send(Message::text(serde_json::to_string(&live).unwrap()))
        .await
        .unwrap();
    let stop = tokio::time::timeout(WAIT, async {
        while let Some(Ok(m)) = link.next().await {
            if let Message::Text(t) = m {
                if let Ok(p::LinkMessage::Request { request, .. }) =
                    serde_json::from_str(t.as_str())
                {
                    return request;
                }
            }
        }
        panic!("the link closed");
    })
    .await
    .expect("the server asks the host to stop the deleted tab");
    assert_eq!(
        stop,
        p::LinkRequest::TabStop {
            session_id: hand_session.id.clone(),
            worker_id: Some(hand_tab.id.clone()),
            forget: true,
        }
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_speaks_only_for_its_own_sessions_sqlite() {
    a_host_speaks_only_for_its_own_sessions(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_speaks_only_for_its_own_sessions_postgres() {
    a_host_speaks_only_for_its_own_sessions(Kind::Postgres).await;
}
