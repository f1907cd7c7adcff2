//! `https://` end to end, with certificates from throwaway CAs made by
//! rcgen. A TLS front (rustls) before a real server: the client crate, every
//! CLI verb and the runner reach it by trusting that CA through
//! `SHEPHERD_CA_CERT`, and refuse it without. The server's own TLS listener
//! (`SHEPHERD_TLS_CERT`, `SHEPHERD_TLS_KEY`): REST, SSE, the session
//! WebSocket, `/mcp`, `shepherd mcp` and the built-in runner over it, plain
//! HTTP refused, and a certificate from another CA served after SIGHUP
//! while a stream opened before keeps flowing.

mod common;

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use shepherd_client::{Client, Start};
use shepherd_protocol as p;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;

use common::{Env, Kind, Server, SseClient, OPERATOR};

/// A CA and a server certificate for 127.0.0.1 it signed; returns the CA's
/// PEM and the server's TLS configuration.
fn certificates() -> (String, ServerConfig) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let chain: Vec<CertificateDer<'static>> = vec![leaf.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    (ca.pem(), config)
}

/// Terminates TLS on a fresh port and forwards each connection to `backend`.
async fn tls_front(config: ServerConfig, backend: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(&backend).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    format!("https://{addr}")
}

fn cli(env: &Env, ca: &str, server: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(args)
        .args(["--server", server])
        .envs(&env.vars)
        .env("SHEPHERD_TOKEN", OPERATOR)
        .env("SHEPHERD_CA_CERT", ca)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cli_and_runner_work_over_https() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    // The TLS front forwards the `Host` its clients send: its own address,
    // on its own port, which the server is told to answer to (as an
    // operator tells it a proxy's name).
    env.set("SHEPHERD_ALLOWED_HOSTS", "127.0.0.1");
    let agent = env.script(
        "agent.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"type\":\"action\",\"content\":[{\"type\":\"text\",\"text\":\"hello over tls\"}]}'\n",
    );
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.with_config_file(&format!(
        "[agents.tls]\ncommand = [\"{agent}\"]\ncapabilities = [\"tls\"]\n"
    ));
    let s = Server::start(&env).await;
    let (ca_pem, config) = certificates();
    let ca = env.dir.join("ca.pem");
    std::fs::write(&ca, &ca_pem).unwrap();
    let ca = ca.display().to_string();
    let base = tls_front(config, s.base.trim_start_matches("http://").to_owned()).await;

    // Without the CA the certificate is refused, with a reason.
    let untrusting = Client::with_ca(&base, Some(OPERATOR.into()), None)
        .unwrap()
        .with_retries(0);
    let err = untrusting.health().await.unwrap_err();
    assert_eq!(err.code(), "unreachable", "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );

    // The client crate, trusting the CA.
    let c = Client::with_ca(&base, Some(OPERATOR.into()), Some(&ca)).unwrap();
    assert_eq!(c.health().await.unwrap().status, "ok");
    let head = c.head().await.unwrap();
    let t = c
        .create_task(&p::CreateTask {
            vtid: Some("TLS-1".into()),
            title: "over tls".into(),
            capabilities: vec!["tls".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(t.vtid, "TLS-1");
    // The stream, over TLS, from the head read before the task existed.
    let mut seen = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        c.follow(
            &p::EventStreamQuery {
                task_id: Some("TLS-1".into()),
                ..Default::default()
            },
            Start::After(head),
            |f| {
                seen.push(f.event.clone());
                f.event != "task.dispatched"
            },
            |_| {},
        ),
    )
    .await
    .expect("events in time")
    .unwrap();
    assert_eq!(seen.first().map(String::as_str), Some("task.created"));

    // The runner, over TLS, takes the task; `task watch` sees it end.
    let data = env.dir.join("runner-data");
    let mut runner = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["runner", "--server", &base, "--data-dir"])
        .arg(&data)
        .envs(&env.vars)
        .env("SHEPHERD_TOKEN", OPERATOR)
        .env("SHEPHERD_CA_CERT", &ca)
        .env("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let watch = tokio::task::spawn_blocking({
        let (vars, ca, base) = (env.vars.clone(), ca.clone(), base.clone());
        move || {
            Command::new(env!("CARGO_BIN_EXE_shepherd"))
                .args(["task", "watch", "TLS-1", "--server", &base])
                .envs(&vars)
                .env("SHEPHERD_TOKEN", OPERATOR)
                .env("SHEPHERD_CA_CERT", &ca)
                .output()
                .unwrap()
        }
    });
    let out = tokio::time::timeout(Duration::from_secs(60), watch)
        .await
        .expect("task watch ends")
        .unwrap();
    let _ = runner.kill();
    let _ = runner.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "watch: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("done"), "{stdout}");

    // Every read verb, over TLS.
    for args in [
        &["task", "list"][..],
        &["task", "show", "TLS-1"],
        &["task", "list", "-o", "json"],
        &["runs", "list"],
        &["workers", "--all"],
        &["events", "--task", "TLS-1"],
    ] {
        let out = cli(&env, &ca, &base, args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs = cli(&env, &ca, &base, &["runs", "list", "-o", "json"]);
    let list: p::RunList = serde_json::from_slice(&runs.stdout).unwrap();
    let run = &list.runs[0];
    let out = cli(&env, &ca, &base, &["runs", "show", &run.id[..8]]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("hello over tls"),
        "a unique prefix finds the run: {shown}"
    );
    // Piped into a reader that has already gone (as `head` goes once it has
    // its line), a verb ends quietly.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} task show TLS-1 --server {base} | true",
            env!("CARGO_BIN_EXE_shepherd")
        ))
        .envs(&env.vars)
        .env("SHEPHERD_TOKEN", OPERATOR)
        .env("SHEPHERD_CA_CERT", &ca)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{stderr}"
    );
    // Without the CA, the CLI says why.
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["task", "list", "--server", &base])
        .env("SHEPHERD_TOKEN", OPERATOR)
        .env_remove("SHEPHERD_CA_CERT")
        .output()
        .unwrap();
    assert!(!out.status.success());
    s.stop().await;
}

/// A throwaway certificate authority.
struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    fn pem(&self) -> String {
        self.0.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost and its own key,
    /// written to `cert` and `key` (PEM).
    fn issue(&self, cert: &std::path::Path, key: &std::path::Path) {
        let pair = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap()
            .signed_by(&pair, &self.0)
            .unwrap();
        std::fs::write(cert, leaf.pem()).unwrap();
        std::fs::write(key, pair.serialize_pem()).unwrap();
    }

    /// An HTTP client that trusts this CA only (no web roots).
    fn http(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(self.pem().as_bytes()).unwrap())
            .build()
            .unwrap()
    }

    /// A rustls client configuration that trusts this CA only.
    fn rustls(&self) -> tokio_rustls::rustls::ClientConfig {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.pem().as_bytes()).unwrap())
            .unwrap();
        tokio_rustls::rustls::ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
    }
}

/// Waits until task `vtid` is `done`, read through `c`.
async fn done(c: &Client, vtid: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (t, _) = c.task(vtid).await.unwrap();
        if t.task.state == "done" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{vtid} is {}, not done",
            t.task.state
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tls_task(vtid: &str) -> p::CreateTask {
    p::CreateTask {
        vtid: Some(vtid.into()),
        title: format!("{vtid} over the TLS listener"),
        capabilities: vec!["tls".into()],
        ..Default::default()
    }
}

/// Reads `sse` until the `task.created` event of `vtid`.
async fn created_on(sse: &mut SseClient, vtid: &str) {
    loop {
        let f = sse
            .next(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("the stream ended before {vtid} was created"));
        if f.event == "task.created" && f.data["task_id"] == vtid {
            return;
        }
    }
}

/// The session WebSocket over `wss://`: a terminal runs what is typed.
async fn terminal_over_wss(s: &Server, ca: &Ca, env: &Env) -> (String, String) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let dir = env.dir.join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap().display().to_string();
    let (st, session) = s
        .post(
            "/api/v1/sessions",
            Some(OPERATOR),
            serde_json::json!({ "location_path": dir }),
        )
        .await;
    assert_eq!(st, 201, "{session}");
    // Other nodes send clients to this address: https, as served.
    assert_eq!(session["node_address"], s.base.as_str(), "{session}");
    let sid = session["id"].as_str().unwrap();
    let (st, w) = s
        .post(
            &format!("/api/v1/sessions/{sid}/workers"),
            Some(OPERATOR),
            serde_json::json!({ "type": "terminal" }),
        )
        .await;
    assert_eq!(st, 201, "{w}");
    let wid = w["id"].as_str().unwrap();
    let authority = s.base.trim_start_matches("https://");
    let tcp = TcpStream::connect(authority).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(ca.rustls()))
        .connect(
            tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let mut req = format!("wss://{authority}/ws/session/{sid}/worker/{wid}")
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {OPERATOR}").parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::client_async(req, tls).await.unwrap();
    ws.send(Message::Text(
        serde_json::json!({"type": "input", "data": "echo over-$((6*7))-wss\r"})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    let mut screen = String::new();
    while !screen.contains("over-42-wss") {
        let msg = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .unwrap_or_else(|_| panic!("no output over wss; screen so far: {screen}"))
            .expect("the socket stays open")
            .unwrap();
        if let Message::Text(t) = msg {
            let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            if let Some(d) = v["data"].as_str() {
                screen.push_str(d);
            }
        }
    }
    let _ = ws.close(None).await;
    (sid.to_owned(), wid.to_owned())
}

/// `shepherd attach` over `wss://`, trusting the CA through
/// `SHEPHERD_CA_CERT`: what is typed runs, and Ctrl-] d detaches.
fn attach_over_cli(env: &Env, base: &str, ca: &str, sid: &str, wid: &str) {
    use std::io::{Read, Write};
    let mut child = common::Proc(
        Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(["attach", sid, wid, "--server", base])
            .envs(&env.vars)
            .env("SHEPHERD_TOKEN", OPERATOR)
            .env("SHEPHERD_CA_CERT", ca)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    stdin.write_all(b"echo via-cli-$((9*9))-tls\r").unwrap();
    stdin.flush().unwrap();
    let mut stdout = child.0.stdout.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("via-cli-81-tls") {
        let n = stdout.read(&mut buf).unwrap();
        if n == 0 {
            let mut err = String::new();
            let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
            panic!("attach ended early: {seen}{err}");
        }
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    stdin.write_all(&[0x1d, b'd']).unwrap();
    stdin.flush().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            assert!(st.success());
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "attach did not detach"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `shepherd mcp` against `base`, trusting `ca` through `SHEPHERD_CA_CERT`
/// (absent: only the web roots): the answer to a `list_workers` call.
fn mcp_stdio(env: &Env, base: &str, ca: Option<&str>) -> serde_json::Value {
    use std::io::{BufRead, BufReader, Write};
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shepherd"));
    cmd.args(["mcp", "--server", base])
        .envs(&env.vars)
        .env("SHEPHERD_TOKEN", OPERATOR)
        .env_remove("SHEPHERD_CA_CERT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(ca) = ca {
        cmd.env("SHEPHERD_CA_CERT", ca);
    }
    let mut child = common::Proc(cmd.spawn().unwrap());
    let mut stdin = child.0.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    for m in [
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "tls-test", "version": "1"}}}),
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "list_workers", "arguments": {}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    stdin.flush().unwrap();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "shepherd mcp ended without answering"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["id"] == 2 {
            return v["result"].clone();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_serves_https_and_reloads_its_certificate() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    let agent = env.script(
        "agent.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"type\":\"action\",\"content\":[{\"type\":\"text\",\"text\":\"hello over tls\"}]}'\n",
    );
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.with_config_file(&format!(
        "[agents.tls]\ncommand = [\"{agent}\"]\ncapabilities = [\"tls\"]\n"
    ));
    let (cert, key) = (env.dir.join("tls-cert.pem"), env.dir.join("tls-key.pem"));
    let first = Ca::new();
    first.issue(&cert, &key);
    env.set("SHEPHERD_TLS_CERT", &cert.display().to_string());
    env.set("SHEPHERD_TLS_KEY", &key.display().to_string());
    let first_pem = env.dir.join("first-ca.pem");
    std::fs::write(&first_pem, first.pem()).unwrap();
    let first_pem = first_pem.display().to_string();
    let s = Server::start_tls(&env, "127.0.0.1", first.http()).await;
    let port = s.base.rsplit(':').next().unwrap().to_owned();

    // REST through the project's client, trusting the CA.
    let c = Client::with_ca(&s.base, Some(OPERATOR.into()), Some(&first_pem)).unwrap();
    assert_eq!(c.health().await.unwrap().status, "ok");
    // A stream opened now stays open across the reload below.
    let head = c.head().await.unwrap();
    let res = s
        .http
        .get(s.url(&format!("/api/events?after={head}")))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    let mut sse = SseClient::over(res);
    c.create_task(&tls_task("TLS-A")).await.unwrap();
    created_on(&mut sse, "TLS-A").await;
    // The built-in runner reaches its own listener over https.
    done(&c, "TLS-A").await;
    let (st, list) = s.get("/api/v1/tasks", Some(OPERATOR)).await;
    assert_eq!(st, 200, "{list}");
    assert_eq!(list["tasks"][0]["vtid"], "TLS-A", "{list}");

    // Plain HTTP on the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");

    // /mcp over https.
    let init = s
        .http
        .post(s.url("/mcp"))
        .bearer_auth(OPERATOR)
        .header("accept", "application/json, text/event-stream")
        .json(
            &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "tls-test", "version": "1"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(init.status().as_u16(), 200);
    assert!(init.text().await.unwrap().contains("\"shepherd\""));

    // `shepherd mcp` trusts the CA through SHEPHERD_CA_CERT, as the CLI
    // does, and refuses the certificate without it.
    let answer = tokio::task::block_in_place(|| mcp_stdio(&env, &s.base, Some(&first_pem)));
    assert_eq!(answer["isError"], false, "{answer}");
    assert!(
        answer["structuredContent"]["workers"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["agent_id"] == "tls")),
        "the built-in runner's worker is listed: {answer}"
    );
    let refused = tokio::task::block_in_place(|| mcp_stdio(&env, &s.base, None));
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused.to_string().to_lowercase().contains("certificate"),
        "{refused}"
    );

    let (sid, wid) = terminal_over_wss(&s, &first, &env).await;
    tokio::task::block_in_place(|| attach_over_cli(&env, &s.base, &first_pem, &sid, &wid));
    // Without the CA, attach says why it cannot connect.
    let out = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(["attach", &sid, &wid, "--server", &s.base])
            .envs(&env.vars)
            .env("SHEPHERD_TOKEN", OPERATOR)
            .env_remove("SHEPHERD_CA_CERT")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    });
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("certificate"),
        "{err}"
    );

    // A certificate from another CA, served after SIGHUP.
    let second = Ca::new();
    second.issue(&cert, &key);
    // SAFETY: kill(2) to this process, whose server handles SIGHUP.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGHUP) }, 0);
    let trusting_second = second.http();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while trusting_second.get(s.url("/healthz")).send().await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the new certificate is not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let err = first
        .http()
        .get(s.url("/healthz"))
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").to_lowercase().contains("certificate"),
        "{err:?}"
    );
    // The stream opened under the first certificate still delivers, and
    // the built-in runner still reaches its server.
    let second_pem = env.dir.join("second-ca.pem");
    std::fs::write(&second_pem, second.pem()).unwrap();
    let c = Client::with_ca(&s.base, Some(OPERATOR.into()), second_pem.to_str()).unwrap();
    c.create_task(&tls_task("TLS-B")).await.unwrap();
    created_on(&mut sse, "TLS-B").await;
    done(&c, "TLS-B").await;
    drop(sse);
    s.stop().await;
}

/// `shepherd serve` with these TLS settings: it must refuse to start, and
/// say so on stderr (returned).
fn refused_start(env: &Env, vars: &[(&str, &str)]) -> String {
    let mut child = common::Proc(
        Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .arg("serve")
            .envs(&env.vars)
            .env("SHEPHERD_LISTEN", "127.0.0.1:0")
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "serve started with {vars:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    err
}

#[test]
fn serve_refuses_a_half_or_unreadable_tls_setting() {
    let env = Env::new(Kind::Sqlite);
    let (cert, key) = (env.dir.join("cert.pem"), env.dir.join("key.pem"));
    let (cert_s, key_s) = (cert.display().to_string(), key.display().to_string());
    let err = refused_start(&env, &[("SHEPHERD_TLS_CERT", &cert_s)]);
    assert!(
        err.contains("SHEPHERD_TLS_CERT") && err.contains("SHEPHERD_TLS_KEY"),
        "{err}"
    );
    // Missing, then a key that is not the certificate's.
    let both = [
        ("SHEPHERD_TLS_CERT", cert_s.as_str()),
        ("SHEPHERD_TLS_KEY", key_s.as_str()),
    ];
    let err = refused_start(&env, &both);
    assert!(err.contains(&cert_s), "{err}");
    let ca = Ca::new();
    ca.issue(&cert, &key);
    let other_key = env.dir.join("other-key.pem");
    ca.issue(&env.dir.join("other-cert.pem"), &other_key);
    std::fs::copy(&other_key, &key).unwrap();
    let err = refused_start(&env, &both);
    assert!(
        err.contains("SHEPHERD_TLS_KEY") && err.contains(&key_s),
        "{err}"
    );
}

#[test]
fn serve_refuses_a_key_other_users_may_read_when_tls_is_strict() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new(Kind::Sqlite);
    // Outside the data directory: the server makes everything in there
    // private as it starts, a key file too.
    let keys = std::env::temp_dir().join(format!("shepherd-tls-keys-{}", common::unique()));
    std::fs::create_dir_all(&keys).unwrap();
    let (cert, key) = (keys.join("cert.pem"), keys.join("key.pem"));
    Ca::new().issue(&cert, &key);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (cert_s, key_s) = (cert.display().to_string(), key.display().to_string());
    let err = refused_start(
        &env,
        &[
            ("SHEPHERD_TLS_CERT", cert_s.as_str()),
            ("SHEPHERD_TLS_KEY", key_s.as_str()),
            ("SHEPHERD_TLS_STRICT", "1"),
        ],
    );
    assert!(
        err.contains(&key_s) && err.contains("644") && err.contains("chmod 600"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&keys);
}
