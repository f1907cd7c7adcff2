//! Harness for end-to-end tests: the real server on `127.0.0.1:0` with a
//! fresh database per test (a SQLite file, or a PostgreSQL schema), driven
//! over real HTTP; or the real binary as a child process.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use shepherd::config::Config;
use shepherd_protocol as p;
use tokio::sync::oneshot;

pub const OPERATOR: &str = "operator-token-0123456789";

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use shepherd_testkit::{alive, free_port, pg_url, unique, wait_for, Kind, Served};

/// A GET (no body) or POST (a body) to a server started as a child
/// process, as the operator; status 0 while it is not listening yet.
pub async fn operator_call(base: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let req = match body {
        Some(b) => http.post(format!("{base}{path}")).json(&b),
        None => http.get(format!("{base}{path}")),
    };
    let Ok(r) = req.bearer_auth(OPERATOR).send().await else {
        return (0, Value::Null);
    };
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or_default())
}

/// Environment for a fresh database of `kind`, plus any extra settings.
pub struct Env {
    pub vars: HashMap<String, String>,
    pub dir: PathBuf,
}

impl Env {
    pub fn new(kind: Kind) -> Env {
        let dir = std::env::temp_dir().join(format!("shepherd-e2e-{}", unique()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut vars = HashMap::new();
        // Terminals in tests run a plain /bin/sh: an interactive bash would
        // read the machine's ~/.bashrc, whose tools (pyenv's rehash lock,
        // left behind when a test kills a shell mid-start) can stall every
        // later shell for a minute. The in-process server reads SHELL from
        // this process's environment, spawned servers from `vars`.
        std::env::set_var("SHELL", "/bin/sh");
        // The in-process runner starts each agent under `shepherd shim`:
        // the real binary's, not this test program.
        std::env::set_var("SHEPHERD_SHIM_PROGRAM", env!("CARGO_BIN_EXE_shepherd"));
        vars.insert("SHELL".to_string(), "/bin/sh".to_string());
        vars.insert("SHEPHERD_DATA_DIR".to_string(), dir.display().to_string());
        vars.insert("SHEPHERD_LOG".to_string(), "warn".to_string());
        // One secrets key for every test's servers, as a cluster's nodes
        // share one: tests start several nodes, and restored copies, on one
        // database. (`stored_secrets` and `spawn_env` remove it to use the
        // data directory's own.)
        vars.insert(
            "SHEPHERD_SECRETS_KEY_FILE".to_string(),
            std::env::temp_dir()
                .join("shepherd-tests-secrets.key")
                .display()
                .to_string(),
        );
        if kind == Kind::Postgres {
            vars.insert("SHEPHERD_DATABASE_URL".into(), pg_url());
            vars.insert("SHEPHERD_PG_SCHEMA".into(), format!("t_{}", unique()));
            vars.insert("SHEPHERD_PG_POOL_SIZE".into(), "6".into());
        }
        Env { vars, dir }
    }

    pub fn set(&mut self, k: &str, v: &str) -> &mut Self {
        self.vars.insert(k.into(), v.into());
        self
    }

    /// Writes a configuration file with these contents and points the server at it.
    pub fn with_config_file(&mut self, toml: &str) -> &mut Self {
        let path = self.dir.join("shepherd.toml");
        std::fs::write(&path, toml).unwrap();
        let p = path.display().to_string();
        self.set("SHEPHERD_CONFIG", &p)
    }

    /// Writes an executable script into the test directory; returns its path.
    pub fn script(&self, name: &str, body: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, body).unwrap();
        path.display().to_string()
    }

    pub fn config(&self) -> Config {
        let vars = self.vars.clone();
        Config::load_with(None, &move |k| vars.get(k).cloned()).expect("config")
    }

    /// `shepherd serve` with this environment, in its directory, on a port
    /// it chooses (`SHEPHERD_LISTEN=127.0.0.1:0`; a later `.env` call may
    /// set another address); start it with [`Served::spawn`].
    pub fn serve_command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"));
        cmd.arg("serve")
            .envs(&self.vars)
            .env("SHEPHERD_LISTEN", "127.0.0.1:0")
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null());
        cmd
    }

    /// The store settings of [`Env::config`], to open the server's database alongside it.
    pub fn store_config(&self) -> shepherd_store::StoreConfig {
        shepherd::config::store_config(&self.config()).unwrap()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server running in this process, or the real binary as a child
/// ([`Server::spawn`]); either way reached over real HTTP at `base`.
pub struct Server {
    pub base: String,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
    pub http: reqwest::Client,
    /// The child process, for a spawned server.
    pub child: Option<Served>,
}

/// Waits until `base` answers `/readyz` with success; panics after 30 s.
pub async fn wait_ready(http: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "{base} is not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Server {
    pub async fn start(env: &Env) -> Server {
        let config = env.config();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            shepherd::server::run(config, listener, async move {
                let _ = rx.await;
            })
            .await
            .expect("server");
        });
        let http = reqwest::Client::new();
        wait_ready(&http, &base).await;
        Server {
            base,
            stop: Some(tx),
            handle: Some(handle),
            http,
            child: None,
        }
    }

    /// The real binary (`shepherd serve`) with this environment, as a child
    /// on a port it chose; ready when this returns.
    pub async fn spawn(env: &Env) -> Server {
        Server::spawn_at(env, "127.0.0.1:0").await
    }

    /// [`Server::spawn`] on a given address (`127.0.0.1:PORT`), for tests
    /// that start a server again where its clients were told it is.
    pub async fn spawn_at(env: &Env, listen: &str) -> Server {
        let served = Served::spawn(
            env.serve_command()
                .env("SHEPHERD_LISTEN", listen)
                .stderr(std::process::Stdio::null()),
        );
        let http = reqwest::Client::new();
        wait_ready(&http, &served.base).await;
        Server {
            base: served.base.clone(),
            stop: None,
            handle: None,
            http,
            child: Some(served),
        }
    }

    /// A server in this process serving HTTPS (the environment names its
    /// certificate), reached at `https://HOST:PORT` with `http`, a client
    /// that trusts that certificate.
    pub async fn start_tls(env: &Env, host: &str, http: reqwest::Client) -> Server {
        let config = env.config();
        assert!(config.tls.is_some(), "the environment sets SHEPHERD_TLS_*");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{host}:{}", listener.local_addr().unwrap().port());
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            shepherd::server::run(config, listener, async move {
                let _ = rx.await;
            })
            .await
            .expect("server");
        });
        wait_ready(&http, &base).await;
        Server {
            base,
            stop: Some(tx),
            handle: Some(handle),
            http,
            child: None,
        }
    }

    pub async fn stop(mut self) {
        if let Some(mut served) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(served.pid(), libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while served.child.try_wait().ok().flatten().is_none() {
                assert!(Instant::now() < deadline, "server stops in time");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .expect("server stops in time")
                .unwrap();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request; returns status and JSON body.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.expect("request");
        let status = res.status().as_u16();
        let body = res.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, token, None).await
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, token, Some(body))
            .await
    }

    // Typed answers. A test reads an answer through its wire type (the
    // protocol crate's) unless its point is the raw JSON: an error body's
    // code, a key's absence, a golden comparison. Where it checks the exact
    // success status (201, not just "a success"), `*_as` below keep the
    // status; otherwise the typed client's method for the route serves.

    /// The typed client of this server, acting with `token`.
    pub fn client(&self, token: Option<&str>) -> shepherd_client::Client {
        shepherd_client::Client::new(&self.base, token.map(str::to_owned)).expect("a client")
    }

    /// [`Server::call`] with the answer read as a `T`: the status and the
    /// typed body. An answer that is not a `T` (an error body, say) fails
    /// the test, showing its status and JSON.
    pub async fn call_as<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, T) {
        let (status, raw) = self.call(method.clone(), path, token, body).await;
        match T::deserialize(&raw) {
            Ok(typed) => (status, typed),
            Err(e) => panic!(
                "{method} {path} answered {status} with no {}: {e}\n{raw}",
                std::any::type_name::<T>()
            ),
        }
    }

    pub async fn get_as<T: DeserializeOwned>(&self, path: &str, token: Option<&str>) -> (u16, T) {
        self.call_as(reqwest::Method::GET, path, token, None).await
    }

    pub async fn post_as<T: DeserializeOwned>(
        &self,
        path: &str,
        token: Option<&str>,
        body: Value,
    ) -> (u16, T) {
        self.call_as(reqwest::Method::POST, path, token, Some(body))
            .await
    }

    pub async fn delete_as<T: DeserializeOwned>(
        &self,
        path: &str,
        token: Option<&str>,
    ) -> (u16, T) {
        self.call_as(reqwest::Method::DELETE, path, token, None)
            .await
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<i64>,
    pub event: String,
    pub data: Value,
}

/// A raw SSE connection read frame by frame.
pub struct SseClient {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
}

impl SseClient {
    pub async fn connect(
        base: &str,
        path: &str,
        token: Option<&str>,
        last_event_id: Option<i64>,
    ) -> SseClient {
        let res = Self::request(base, path, token, last_event_id)
            .await
            .expect("sse connect");
        assert_eq!(res.status().as_u16(), 200, "SSE status");
        SseClient {
            stream: res.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// Like [`SseClient::connect`], but `None` when the node cannot be
    /// reached or does not answer 200 (a client failing over to another node).
    pub async fn try_connect(
        base: &str,
        path: &str,
        token: Option<&str>,
        last_event_id: Option<i64>,
    ) -> Option<SseClient> {
        let res = Self::request(base, path, token, last_event_id).await.ok()?;
        (res.status().as_u16() == 200).then(|| SseClient {
            stream: res.bytes_stream().boxed(),
            buf: String::new(),
        })
    }

    /// The stream of a response already received (from a client of one's
    /// own: one that trusts a test CA).
    pub fn over(res: reqwest::Response) -> SseClient {
        assert_eq!(res.status().as_u16(), 200, "SSE status");
        SseClient {
            stream: res.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    async fn request(
        base: &str,
        path: &str,
        token: Option<&str>,
        last_event_id: Option<i64>,
    ) -> reqwest::Result<reqwest::Response> {
        let mut req = reqwest::Client::new().get(format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        req.send().await
    }

    /// The next frame that carries data (comments are skipped), or None on timeout/end.
    pub async fn next(&mut self, wait: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..pos + 2).collect();
                let (mut id, mut event, mut data) = (None, String::from("message"), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if data.is_empty() {
                    continue;
                }
                return Some(Frame {
                    id,
                    event,
                    data: serde_json::from_str(&data).unwrap_or(Value::Null),
                });
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .ok()??;
            self.buf.push_str(&String::from_utf8_lossy(&chunk.ok()?));
        }
    }
}

/// A task body with sensible defaults.
pub fn task(vtid: &str, workflow: &str) -> Value {
    json!({ "vtid": vtid, "title": format!("Task {vtid}"), "spec": format!("# {vtid}\nDo it."), "workflow": workflow })
}

/// Declares one test per backend.
#[macro_export]
macro_rules! e2e {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                ($body)($crate::common::Kind::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                ($body)($crate::common::Kind::Postgres).await;
            }
        }
    };
}

/// Every event after `after` through the REST pages, as (seq, type): how
/// tests compare one server's log with another's.
#[allow(dead_code)]
pub async fn events_after(s: &Server, mut after: i64) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    loop {
        let (st, page) = s
            .get(&format!("/api/v1/events?after={after}&limit=1000"), None)
            .await;
        assert_eq!(st, 200, "{page}");
        let events = page["events"].as_array().unwrap();
        if events.is_empty() {
            return out;
        }
        for e in events {
            out.push((
                e["id"].as_i64().unwrap(),
                e["type"].as_str().unwrap().to_owned(),
            ));
        }
        after = page["next_cursor"].as_i64().unwrap();
    }
}

// Polling helpers shared by the end-to-end tests: wait for what a test
// expects, with a deadline, instead of sleeping a fixed time.

/// Waits until task `vtid` is in one of `states`; returns the task.
pub async fn task_in(s: &Server, vtid: &str, states: &[&str], within: Duration) -> Value {
    wait_for(&format!("{vtid} to reach {states:?}"), within, || async {
        let (_, t) = s.get(&format!("/api/v1/tasks/{vtid}"), None).await;
        states
            .contains(&t["state"].as_str().unwrap_or(""))
            .then_some(t)
    })
    .await
}

/// The runs of task `vtid`, newest first.
pub async fn runs_of(s: &Server, vtid: &str) -> Vec<Value> {
    let (_, runs) = s.get(&format!("/api/v1/runs?vtid={vtid}"), None).await;
    runs["runs"].as_array().cloned().unwrap_or_default()
}

/// The polling helpers above with typed answers: the task as
/// `GET /api/v1/tasks/{vtid}` shows it, the runs as `GET /api/v1/runs` lists them.
pub mod typed {
    use super::*;

    /// Waits until task `vtid` is in one of `states`; returns the task.
    pub async fn task_in(
        s: &Server,
        vtid: &str,
        states: &[&str],
        within: Duration,
    ) -> p::TaskDetail {
        let c = s.client(None);
        wait_for(&format!("{vtid} to reach {states:?}"), within, || async {
            let (t, _) = c.task(vtid).await.ok()?;
            states.contains(&t.task.state.as_str()).then_some(t)
        })
        .await
    }

    /// The runs of task `vtid`, newest first.
    pub async fn runs_of(s: &Server, vtid: &str) -> Vec<p::Run> {
        let q = p::RunsQuery {
            vtid: Some(vtid.to_owned()),
            ..Default::default()
        };
        s.client(None).runs(&q).await.expect("the runs").runs
    }
}

/// A child process killed and reaped when the test ends, even on panic.
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real `shepherd runner` of another "machine": its own data
/// directory, HOME and sessions root, `/bin/sh` as its shell, one-second
/// heartbeats, and `config` (its agents) when given. Logs at `FLEET_LOG`
/// (default `warn`).
pub fn runner_host(
    base: &str,
    data_dir: &std::path::Path,
    root: &std::path::Path,
    config: Option<&std::path::Path>,
) -> Proc {
    let home = data_dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"));
    cmd.args(["runner", "--server", base]).env_clear();
    if let Some(c) = config {
        cmd.env("SHEPHERD_CONFIG", c);
    }
    let child = cmd
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("SHELL", "/bin/sh")
        .env("SHEPHERD_TOKEN", OPERATOR)
        .env("SHEPHERD_DATA_DIR", data_dir)
        .env("SHEPHERD_SESSIONS_ROOT", root)
        .env("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        // So that tests may read its descriptors (`fleet_hosts`).
        .env("SHEPHERD_DUMPABLE", "1")
        .env(
            "SHEPHERD_LOG",
            std::env::var("FLEET_LOG").unwrap_or("warn".into()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("shepherd runner");
    Proc(child)
}

/// The type of the marker events tests append beside a flood: a real type
/// (the event routes refuse a `types` filter naming an unknown one) that
/// those tests never produce otherwise, since they archive no channel.
pub const MARKER_TYPE: &str = "channel.archived";
