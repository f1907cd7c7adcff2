//! `https://` end to end: a TLS front (rustls, with a certificate from a
//! throwaway CA made by rcgen) before a real server; the client crate, every
//! CLI verb and the runner reach it by trusting that CA through
//! `SHEPHERD_CA_CERT`, and refuse it without.

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

use common::{Env, Kind, Server, OPERATOR};

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
