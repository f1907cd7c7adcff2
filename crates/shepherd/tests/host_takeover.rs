//! Who may become a runner's host, on both stores, with the real `shepherd
//! serve` and the real `shepherd runner` hosting a terminal:
//!
//! - an operator cannot register the id of an existing host (409
//!   `host_exists`), replace it (403), or register a new host without the
//!   enrollment token (403 `host_enrollment_required`); through all of it
//!   the real runner keeps its link, and what an admin types reaches it;
//! - a second link opened with the host's token while the runner's link is
//!   live is refused (409 `host_link_taken`); one opened while the
//!   runner's link is silent (the runner stopped) takes its place, and the
//!   runner, refused when it comes back, says why in its log and tries
//!   again until the other link goes;
//! - an admin's `replace` closes the runner's link for good (its token no
//!   longer works, and coming back it is refused with `host_exists`).

mod common;
#[path = "common/ws.rs"]
mod ws;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use shepherd_protocol as p;

use common::{Env, Kind, Proc, Server, OPERATOR};
use ws::{Opts, Term};

const WAIT: Duration = Duration::from_secs(30);

fn code(b: &Value) -> &str {
    b["error"]["code"].as_str().unwrap_or_default()
}

/// `shepherd runner` with its own data directory, HOME and sessions root,
/// its log (warnings) written to `log`.
fn runner(base: &str, data_dir: &Path, root: &Path, log: &Path) -> Proc {
    let home = data_dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["runner", "--server", base])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("SHELL", "/bin/sh")
        .env("SHEPHERD_TOKEN", OPERATOR)
        .env("SHEPHERD_DATA_DIR", data_dir)
        .env("SHEPHERD_SESSIONS_ROOT", root)
        .env("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .env("SHEPHERD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("shepherd runner");
    Proc(child)
}

async fn wait_until<F, Fut>(what: &str, wait: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        assert!(start.elapsed() < wait, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn online(s: &Server, id: &str) -> bool {
    let (_, list) = s
        .get_as::<p::HostList>("/api/v1/hosts", Some(OPERATOR))
        .await;
    list.hosts.iter().any(|h| h.id == id && h.online)
}

/// Attaches to a tab through the server (retrying while the host's link is
/// not there: 503) and waits for its prompt.
async fn attach(base: &str, sid: &str, wid: &str) -> Term {
    let start = Instant::now();
    loop {
        let o = Opts {
            token: Some(OPERATOR),
            ..Default::default()
        };
        match ws::try_connect(base, &ws::path(sid, wid), o).await {
            Ok(mut t) => {
                let first = t.next(Duration::from_secs(10)).await;
                if first.as_ref().is_some_and(|v| v["type"] == "history") {
                    return t;
                }
            }
            Err(status) => assert_eq!(status, 503, "only a host not back yet is retried"),
        }
        assert!(start.elapsed() < WAIT, "the tab was never attached");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A host link opened by hand with `token`, answering the server's pings
/// (tungstenite answers them as it reads) until dropped.
struct HandLink(tokio::task::JoinHandle<()>);

impl HandLink {
    async fn open(base: &str, host: &str, token: &str) -> Result<HandLink, u16> {
        let o = Opts {
            token: Some(token),
            ..Default::default()
        };
        let t = ws::try_connect(base, &format!("/api/v1/hosts/{host}/link"), o).await?;
        let mut ws = t.ws;
        Ok(HandLink(tokio::spawn(async move {
            while let Some(Ok(_)) = ws.next().await {}
        })))
    }
}

impl Drop for HandLink {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn kept_token(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("runner").join("host-token"))
        .expect("the runner keeps its host token")
        .trim()
        .to_owned()
}

fn signal(r: &Proc, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &r.0.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

async fn an_operator_cannot_take_a_runners_host_over(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_NODE_ID", "node-a")
        .set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "5");
    let s = Server::spawn(&env).await;
    let far = env.dir.join("far-host");
    let (root, data): (PathBuf, PathBuf) = (far.join("work"), far.join("data"));
    std::fs::create_dir_all(root.join("project")).unwrap();
    let log = env.dir.join("runner.log");
    let mut r = runner(&s.base, &data, &root, &log);

    // oscar, an operator with a personal token.
    let (st, b) = s
        .post(
            "/api/v1/users",
            Some(OPERATOR),
            json!({ "name": "oscar", "role": "operator" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, t) = s
        .post_as::<p::CreatedToken>(
            "/api/v1/tokens",
            Some(OPERATOR),
            json!({ "name": "laptop", "user": "oscar" }),
        )
        .await;
    assert_eq!(st, 201);
    let oscar = t.token;

    // The runner's host, online, with a terminal an admin types into.
    let start = Instant::now();
    let host = loop {
        let (_, list) = s
            .get_as::<p::HostList>("/api/v1/hosts", Some(OPERATOR))
            .await;
        if let Some(h) = list
            .hosts
            .into_iter()
            .find(|h| h.kind == p::HostKind::Runner && h.online)
        {
            break h.id;
        }
        assert!(
            start.elapsed() < WAIT,
            "the runner's host never came online"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (st, session) = s
        .post(
            "/api/v1/sessions",
            Some(OPERATOR),
            json!({ "location_path": root.join("project"), "host": host }),
        )
        .await;
    assert_eq!(st, 201, "{session}");
    let sid = session["id"].as_str().unwrap().to_owned();
    let (st, w) = s
        .post(
            &format!("/api/v1/sessions/{sid}/workers"),
            Some(OPERATOR),
            json!({ "type": "terminal" }),
        )
        .await;
    assert_eq!(st, 201, "{w}");
    let wid = w["id"].as_str().unwrap().to_owned();
    let mut term = attach(&s.base, &sid, &wid).await;
    term.wait_prompt("", WAIT).await;
    term.type_line("echo one-$((40+2))").await;
    term.wait_for("one-42", WAIT).await;

    // The operator's takeover: refused every way, and nothing written.
    let runner_token = kept_token(&data);
    for (body, status, want) in [
        (json!({ "id": host }), 409, "host_exists"),
        (
            json!({ "id": host, "host_token": "shk_0000" }),
            409,
            "host_exists",
        ),
        (json!({ "id": host, "replace": true }), 403, "forbidden"),
        (json!({ "id": "host-new" }), 403, "host_enrollment_required"),
        (
            json!({ "id": "host-new", "enrollment_token": "a-guess-at-the-token" }),
            403,
            "host_enrollment_required",
        ),
    ] {
        let (st, b) = s.post("/api/v1/hosts", Some(&oscar), body.clone()).await;
        assert_eq!((st, code(&b)), (status, want), "{body}: {b}");
    }
    assert_eq!(kept_token(&data), runner_token);
    let (st, _) = s
        .post(
            &format!("/api/v1/hosts/{host}/heartbeat"),
            Some(&runner_token),
            json!({}),
        )
        .await;
    assert_eq!(st, 200, "the runner's token still works");
    // The real runner still has the link: what the admin types reaches it.
    term.type_line("echo still-$((1+2))").await;
    term.wait_for("still-3", WAIT).await;

    // A second link with the host's own token, while the runner's answers:
    // refused, the runner's kept.
    let refused = HandLink::open(&s.base, &host, &runner_token).await;
    assert_eq!(refused.err(), Some(409), "a live link was replaced");
    term.type_line("echo kept-$((2+2))").await;
    term.wait_for("kept-4", WAIT).await;

    // The runner stops answering (SIGSTOP: its link is half-open): a link
    // with its token takes the place of the silent one.
    signal(&r, "-STOP");
    let hand = HandLink::open(&s.base, &host, &runner_token)
        .await
        .expect("a silent link is replaced");
    assert!(
        term.closed(WAIT).await,
        "the replaced link's tab stream ends"
    );
    // The runner comes back: its link is refused while the other lives,
    // it says why, and keeps trying.
    signal(&r, "-CONT");
    wait_until("the runner logs the refusal", WAIT, || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("host_link_taken") && text.contains("refused the host link")
    })
    .await;
    drop(hand);
    let mut term = attach(&s.base, &sid, &wid).await;
    term.type_line("echo back-$((3+3))").await;
    term.wait_for("back-6", Duration::from_secs(60)).await;

    // An admin's replace: the runner's link closes and its token is void.
    let (st, replaced) = s
        .post_as::<p::RegisterHostResponse>(
            "/api/v1/hosts",
            Some(OPERATOR),
            json!({ "id": host, "replace": true }),
        )
        .await;
    assert_eq!(st, 201);
    assert!(
        term.closed(WAIT).await,
        "the replaced host's link is closed"
    );
    let (st, _) = s
        .post(
            &format!("/api/v1/hosts/{host}/heartbeat"),
            Some(&runner_token),
            json!({}),
        )
        .await;
    assert_eq!(st, 401, "the old token is void");
    // The old runner, coming back with its old token, is refused and says so.
    wait_until("the old runner logs host_exists", WAIT, || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("host_exists")
    })
    .await;
    let o = Opts {
        token: Some(OPERATOR),
        ..Default::default()
    };
    let e = ws::try_connect(&s.base, &ws::path(&sid, &wid), o).await;
    assert_eq!(e.err(), Some(503), "nobody serves the host now");
    // The new token is the host's.
    let (st, _) = s
        .post(
            &format!("/api/v1/hosts/{host}/heartbeat"),
            Some(&replaced.host_token),
            json!({}),
        )
        .await;
    assert_eq!(st, 200);
    assert!(online(&s, &host).await);
    r.0.kill().unwrap();
    r.0.wait().unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cannot_take_a_runners_host_over_sqlite() {
    an_operator_cannot_take_a_runners_host_over(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cannot_take_a_runners_host_over_postgres() {
    an_operator_cannot_take_a_runners_host_over(Kind::Postgres).await;
}

/// With an enrollment token configured, an operator who presents it
/// registers a new host; a wrong one is refused.
#[tokio::test]
async fn the_enrollment_token_lets_an_operator_register_a_new_host() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_HOST_ENROLLMENT_TOKEN", "enroll-0123456789abcdef");
    let s = Server::start(&env).await;
    let (st, _) = s
        .post(
            "/api/v1/users",
            Some(OPERATOR),
            json!({ "name": "oscar", "role": "operator" }),
        )
        .await;
    assert_eq!(st, 201);
    let (_, t) = s
        .post_as::<p::CreatedToken>(
            "/api/v1/tokens",
            Some(OPERATOR),
            json!({ "name": "laptop", "user": "oscar" }),
        )
        .await;
    let (st, b) = s
        .post(
            "/api/v1/hosts",
            Some(&t.token),
            json!({ "id": "host-e", "enrollment_token": "enroll-wrong" }),
        )
        .await;
    assert_eq!((st, code(&b)), (403, "host_enrollment_required"), "{b}");
    let (st, b) = s
        .post(
            "/api/v1/hosts",
            Some(&t.token),
            json!({ "id": "host-e", "enrollment_token": "enroll-0123456789abcdef" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    // The enrollment token makes hosts; it takes none over.
    let (st, b) = s
        .post(
            "/api/v1/hosts",
            Some(&t.token),
            json!({ "id": "host-e", "enrollment_token": "enroll-0123456789abcdef" }),
        )
        .await;
    assert_eq!((st, code(&b)), (409, "host_exists"), "{b}");
    s.stop().await;
}
