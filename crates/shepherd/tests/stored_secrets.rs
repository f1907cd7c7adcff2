//! The secrets the database keeps are sealed with a key it does not keep:
//! on both stores, a webhook's signing secret and the run-token key are
//! nowhere in the database in clear (the SQLite file and its WAL read as
//! bytes, the PostgreSQL rows read by SQL), a subscription stored in clear
//! by an older version is sealed at the next start, and deliveries are
//! still signed with the right secret. The key file is the owner's alone
//! (`0600`), and a server given another key refuses to start.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::json;
use shepherd_core::webhook_signature::{message_id, WebhookSecret};

use common::{pg_url, wait_for, Env, Kind, Server};

const WAIT: Duration = Duration::from_secs(30);

/// One POST the receiver got: its signing headers and its body as sent.
#[derive(Debug, Clone)]
struct Got {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

type Inbox = Arc<Mutex<Vec<Got>>>;

async fn receive(State(inbox): State<Inbox>, headers: HeaderMap, body: String) -> StatusCode {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    inbox.lock().unwrap().push(Got {
        id: h("webhook-id"),
        timestamp: h("webhook-timestamp"),
        signature: h("webhook-signature"),
        body,
    });
    StatusCode::OK
}

/// Serves on 127.0.0.1; returns the URL and what it receives.
async fn receiver() -> (String, Inbox) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let inbox = Inbox::default();
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(inbox.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, inbox)
}

/// The delivery to subscription `id` of a `task.created` for `vtid`, once
/// it arrived.
async fn delivery_to(inbox: &Inbox, id: &str, vtid: &str) -> Got {
    // `msg_<subscription>_<seq>`
    let prefix = format!("{}_", message_id(id, 0).rsplit_once('_').unwrap().0);
    let task = format!("\"task_id\":\"{vtid}\"");
    wait_for("the delivery", WAIT, || async {
        inbox
            .lock()
            .unwrap()
            .iter()
            .find(|g| g.id.starts_with(&prefix) && g.body.contains(&task))
            .cloned()
    })
    .await
}

/// Checks that `got` is signed with `secret`, as a receiver would.
fn assert_signed_with(got: &Got, secret: &str) {
    let ts: i64 = got.timestamp.parse().unwrap();
    let want = WebhookSecret::parse(secret)
        .unwrap()
        .sign(&got.id, ts, got.body.as_bytes());
    assert!(
        got.signature.split(' ').any(|s| s == want),
        "{} is not signed with the subscription's secret ({want})",
        got.signature
    );
}

/// What the database holds, as text a secret in clear would show in: the
/// SQLite files' bytes, or the PostgreSQL rows that hold secrets.
async fn stored_text(env: &Env, kind: Kind) -> String {
    match kind {
        Kind::Sqlite => {
            let mut all = Vec::new();
            for suffix in ["", "-wal"] {
                if let Ok(b) = std::fs::read(env.dir.join(format!("shepherd.db{suffix}"))) {
                    all.extend(b);
                }
            }
            assert!(!all.is_empty(), "no database file");
            String::from_utf8_lossy(&all).into_owned()
        }
        Kind::Postgres => {
            let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let schema = &env.vars["SHEPHERD_PG_SCHEMA"];
            let mut out = String::new();
            for q in [
                format!("SELECT id || ' ' || secret FROM {schema}.webhooks"),
                format!("SELECT name || ' ' || value FROM {schema}.server_keys"),
            ] {
                for row in client.query(&q, &[]).await.unwrap() {
                    out.push_str(&row.get::<_, String>(0));
                    out.push('\n');
                }
            }
            out
        }
    }
}

/// The secret's key in the forms it could be stored in: its `whsec_` text
/// and its base64 alone.
fn forms(secret: &str) -> [String; 2] {
    [
        secret.to_owned(),
        secret.trim_start_matches("whsec_").to_owned(),
    ]
}

e2e!(
    stored_secrets_are_sealed_and_still_sign,
    |kind| async move {
        let mut env = Env::new(kind);
        // The data directory's own key, made at the first start.
        env.vars.remove("SHEPHERD_SECRETS_KEY_FILE");
        let (url, inbox) = receiver().await;
        // A subscription an older version stored: its secret in clear (a store
        // opened without a key stores it as it is).
        let old_secret = format!("whsec_{}", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let run_key = {
            let config = env.config();
            let mut clear = shepherd_store::StoreConfig::new(config.database_url);
            clear.pg_schema = config.pg_schema;
            let store = shepherd_store::Store::open(&clear).await.unwrap();
            // The run-token key, as an older version kept it.
            let run_key = store.run_token_key().await.unwrap();
            assert!(!shepherd_store::is_sealed(&run_key));
            store
                .create_webhook(shepherd_store::NewWebhook {
                    id: "wh_older".into(),
                    url: url.clone(),
                    events: vec!["task.created".into()],
                    secret: old_secret.clone(),
                    format: "standard".into(),
                    source: "api".into(),
                    // The receiver is this test, on loopback.
                    allow_private: true,
                })
                .await
                .unwrap();
            store.close();
            run_key
        };
        let stored = stored_text(&env, kind).await;
        assert!(stored.contains(&old_secret) && stored.contains(&run_key));

        let s = Server::spawn(&env).await;

        let new_secret = format!("whsec_{}", "dGhpcyBpcyBhIG5ldyBzZWNyZXQga2V5IQ==");
        let (st, made) = s
            .post(
                "/api/v1/webhooks",
                None,
                json!({ "url": url, "secret": new_secret, "events": ["task.created"], "allow_private": true }),
            )
            .await;
        assert_eq!(st, 201, "{made}");
        let new_id = made["id"].as_str().unwrap().to_owned();
        // The key is in the data directory, the owner's alone.
        let key = env.dir.join("secret.key");
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", key.display());
        let (st, b) = s
            .post("/api/v1/tasks", None, common::task("SEAL-1", "simple"))
            .await;
        assert_eq!(st, 201, "{b}");

        // Both subscriptions get the task, each signed with its own secret.
        for (id, secret) in [("wh_older", &old_secret), (new_id.as_str(), &new_secret)] {
            assert_signed_with(&delivery_to(&inbox, id, "SEAL-1").await, secret);
        }
        s.stop().await;

        // No secret is in the database in clear, in any form; every stored
        // secret is sealed. The run-token key is the one it was.
        let stored = stored_text(&env, kind).await;
        for secret in [&old_secret, &new_secret] {
            for form in forms(secret) {
                assert!(!stored.contains(&form), "{form} is stored in clear");
            }
        }
        assert!(
            !stored.contains(&run_key),
            "the run-token key is stored in clear"
        );
        {
            let store = shepherd_store::Store::open(&env.store_config())
                .await
                .unwrap();
            assert_eq!(store.run_token_key().await.unwrap(), run_key);
            store.close();
        }
        if kind == Kind::Postgres {
            for line in stored.lines() {
                let value = line.split_once(' ').unwrap().1;
                assert!(shepherd_store::is_sealed(value), "not sealed: {line}");
            }
        }

        // Started again, it still signs with the right secret.
        let s = Server::spawn(&env).await;
        let (st, b) = s
            .post("/api/v1/tasks", None, common::task("SEAL-2", "simple"))
            .await;
        assert_eq!(st, 201, "{b}");
        for (id, secret) in [("wh_older", &old_secret), (new_id.as_str(), &new_secret)] {
            assert_signed_with(&delivery_to(&inbox, id, "SEAL-2").await, secret);
        }
        s.stop().await;

        // Another key does not open them: the server refuses to start.
        let other = env.dir.join("other.key");
        std::fs::write(
            &other,
            format!("shepherd-secrets-key v1\n{}\n", "ab".repeat(32)),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .arg("migrate")
            .envs(&env.vars)
            .env("SHEPHERD_SECRETS_KEY_FILE", &other)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("secrets_key_mismatch"),
            "{err}"
        );
    }
);
