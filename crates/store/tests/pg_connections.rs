//! PostgreSQL connections on the real local server: live event delivery that
//! does not wait for the request pool, and TLS as `sslmode` asks for it.

mod common;

use std::time::Duration;

use common::{pg_url, Kind, TestDb};
use serde_json::json;
use shepherd_core::event::{EventFilter, EventRefs, NewEvent};
use shepherd_store::{Store, StoreConfig, TailItem, TaskFilter};

fn event(kind: &str) -> NewEvent {
    NewEvent::new(kind, EventRefs::default(), json!({}))
}

fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

/// A plain connection of the test's own, to look at the server's side.
async fn raw() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    client
}

/// The next event's kind. A reader that gets nothing is stuck: the bound
/// only turns that hang into a failure (it is no measure of speed).
async fn next_kind(tail: &mut shepherd_store::Tail, what: &str) -> String {
    match tokio::time::timeout(Duration::from_secs(60), tail.next()).await {
        Ok(Ok(TailItem::Event(e))) => e.kind.clone(),
        Ok(other) => panic!("{what}: unexpected {other:?}"),
        Err(_) => panic!("{what}: no event reached the live reader"),
    }
}

/// Requests that hold every pooled connection (here: reads blocked on a
/// lock) used to stall live delivery: the event pump read the log through
/// the same pool, so other nodes' events waited with the requests (and,
/// once the pool's wait timed out, were retried, still waiting). Delivery
/// now has its own connection, which also comes back by itself when the
/// server terminates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_events_arrive_while_requests_hold_every_pooled_connection() {
    let db = TestDb::new(Kind::Postgres).await;
    let schema = db.config().pg_schema.unwrap();
    let app = format!("d{schema}");
    let mut config = db.config();
    config.url = with_param(&config.url, &format!("application_name={app}"));
    config.pg_pool_size = 2;
    let node = Store::open(&config).await.expect("open node");
    // A second node: its commits reach `node` only through `node`'s pump.
    let other = db.open().await;

    let mut tail = node.tail(node.head().await.unwrap(), EventFilter::default());
    other.append_events(vec![event("warmup")]).await.unwrap();
    assert_eq!(
        next_kind(&mut tail, "before the pool is busy").await,
        "warmup"
    );

    // Every pooled connection of `node` waits for a lock held here.
    let locker = raw().await;
    locker
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {schema}.tasks IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    let held: Vec<_> = (0..6)
        .map(|_| {
            let node = node.clone();
            tokio::spawn(async move {
                node.list_tasks(TaskFilter {
                    limit: 10,
                    ..Default::default()
                })
                .await
            })
        })
        .collect();
    let watcher = raw().await;
    let waiting = || async {
        let row = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&app],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    while waiting().await < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    other
        .append_events(vec![event("while-busy")])
        .await
        .unwrap();
    assert_eq!(next_kind(&mut tail, "pool busy").await, "while-busy");

    // The delivery connection is terminated while the pool is still busy.
    let killed = watcher
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&format!("{app} events")],
        )
        .await
        .unwrap();
    assert_eq!(
        killed, 1,
        "the delivery connection is named after the pool's"
    );
    other
        .append_events(vec![event("after-kill")])
        .await
        .unwrap();
    assert_eq!(
        next_kind(&mut tail, "pool busy, delivery reconnecting").await,
        "after-kill"
    );
    assert_eq!(waiting().await, 2, "the pool was busy throughout");

    locker.batch_execute("ROLLBACK").await.unwrap();
    for h in held {
        h.await
            .unwrap()
            .expect("the held reads finish once the lock is gone");
    }
    node.close();
    other.close();
}

/// The server's certificate file if it has TLS on, else `None` (printed:
/// the TLS tests then have nothing to connect to).
async fn server_tls() -> Option<String> {
    let c = raw().await;
    let ssl: String = c.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    if ssl != "on" {
        eprintln!("skipped: the test server has ssl = {ssl}; nothing to test TLS against");
        return None;
    }
    Some(c.query_one("SHOW ssl_cert_file", &[]).await.unwrap().get(0))
}

/// A configuration for a fresh schema with extra URL parameters, and the
/// application name its connections carry.
async fn tls_config(params: &str) -> (TestDb, StoreConfig, String) {
    let db = TestDb::new(Kind::Postgres).await;
    let mut config = db.config();
    let app = format!("tls{}", config.pg_schema.as_deref().unwrap());
    config.url = with_param(&config.url, &format!("application_name={app}&{params}"));
    (db, config, app)
}

/// Of the store's connections (pool and delivery): how many, how many encrypted.
///
/// The store opens its delivery connection in the background: this waits
/// (up to 10 s) until a store's two kinds of connection are both there, so
/// that a busy machine cannot make it count before the second connects.
async fn encrypted(app: &str) -> (i64, i64) {
    let client = raw().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE s.ssl) \
                 FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
                 WHERE a.application_name IN ($1, $1 || ' events')",
                &[&app],
            )
            .await
            .unwrap();
        let (all, tls): (i64, i64) = (row.get(0), row.get(1));
        if all >= 2 || std::time::Instant::now() > deadline {
            return (all, tls);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn open_err(config: &StoreConfig) -> shepherd_core::Error {
    match Store::open(config).await {
        Ok(s) => {
            s.close();
            panic!("{} must not connect", config.url)
        }
        Err(e) => e,
    }
}

/// `require` encrypts every connection without checking the certificate;
/// no `sslmode` stays unencrypted, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sslmode_require_encrypts_every_connection() {
    if server_tls().await.is_none() {
        return;
    }
    let (_db, config, app) = tls_config("sslmode=require").await;
    let store = Store::open(&config)
        .await
        .expect("sslmode=require connects to a server with TLS, whatever its certificate");
    store.append_events(vec![event("over-tls")]).await.unwrap();
    let page = store
        .read_events(0, &EventFilter::default(), 10)
        .await
        .unwrap();
    assert_eq!(page.events.len(), 1);
    let (all, tls) = encrypted(&app).await;
    assert!(all >= 2, "pool and delivery connections: {all}");
    assert_eq!(tls, all, "every connection is encrypted");
    store.close();

    let (_db, config, app) = tls_config("connect_timeout=10").await;
    let store = Store::open(&config).await.unwrap();
    store.head().await.unwrap();
    let (all, tls) = encrypted(&app).await;
    assert!(all >= 2);
    assert_eq!(tls, 0, "without sslmode nothing is encrypted");
    store.close();
}

/// `verify-full` and `verify-ca` check the server's certificate: a
/// self-signed one is refused against the bundled public roots, accepted
/// against itself as `sslrootcert`, and `verify-full` also wants the host's
/// name in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verify_modes_check_the_server_certificate() {
    let Some(cert) = server_tls().await else {
        return;
    };
    let (_db, config, _) = tls_config("sslmode=verify-full").await;
    let e = open_err(&config).await;
    assert_eq!(e.code, "database_unavailable", "{e:?}");
    assert!(
        e.message.contains("invalid peer certificate") && e.message.contains("sslrootcert"),
        "a clear error: {}",
        e.message
    );

    if std::fs::File::open(&cert).is_err() {
        eprintln!("skipped: the server's certificate {cert} is not readable here");
        return;
    }
    let root = format!("sslrootcert={cert}");
    // Addressed as 127.0.0.1, which a certificate for a host name does not name.
    let (_db, config, _) = tls_config(&format!("sslmode=verify-full&{root}")).await;
    if config.url.contains("@127.0.0.1") {
        let e = open_err(&config).await;
        assert!(
            e.message.contains("not valid for name"),
            "the name is what fails: {}",
            e.message
        );
    }
    let (_db, config, app) = tls_config(&format!("sslmode=verify-ca&{root}")).await;
    let store = Store::open(&config)
        .await
        .expect("verify-ca accepts a certificate that chains to sslrootcert");
    store.head().await.unwrap();
    let (all, tls) = encrypted(&app).await;
    assert!(all >= 2 && tls == all, "{tls} of {all} encrypted");
    store.close();

    // The same server by the name in its certificate (Debian's snakeoil
    // certificate names the host it was made on).
    if !config.url.contains("@127.0.0.1") {
        eprintln!("skipped: verify-full by name needs the test server at 127.0.0.1");
        return;
    }
    for name in ["localhost".to_owned(), hostname()] {
        let (_db, mut config, _) =
            tls_config(&format!("sslmode=verify-full&{root}&hostaddr=127.0.0.1")).await;
        config.url = config.url.replace("@127.0.0.1", &format!("@{name}"));
        match Store::open(&config).await {
            Ok(store) => {
                store.head().await.unwrap();
                store.close();
                return;
            }
            Err(e) => assert!(
                e.message.contains("not valid for name"),
                "only the name may fail: {}",
                e.message
            ),
        }
    }
    eprintln!("skipped: the server's certificate names neither localhost nor this host");
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// TLS parameters Shepherd does not support, or that do not go together,
/// are refused by name, before anything connects.
#[tokio::test]
async fn unsupported_tls_parameters_are_refused_by_name() {
    for (param, named) in [
        ("sslmode=allow", "sslmode"),
        // A client certificate without TLS to send it over.
        ("sslcert=/etc/client.pem&sslkey=/etc/client.key", "sslmode"),
        // Encrypted keys are not supported.
        ("sslmode=require&sslpassword=x", "sslpassword"),
        (
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "/nonexistent/ca.pem",
        ),
    ] {
        let mut config = StoreConfig::new(with_param(&pg_url(), param));
        config.pg_schema = Some("t_never_created".into());
        let e = open_err(&config).await;
        assert_eq!(e.code, "bad_database_url", "{param}: {e:?}");
        assert!(e.message.contains(named), "{param}: {}", e.message);
    }
}

/// Whether PostgreSQL records a manual `ANALYZE` of `table` in `schema`.
/// Autovacuum's own analyses are recorded apart (`last_autoanalyze`), so
/// only the store's refresh sets this.
async fn analysed_by_store(client: &tokio_postgres::Client, schema: &str, table: &str) -> bool {
    client
        .query_one(
            "SELECT COALESCE((SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables \
             WHERE schemaname = $1 AND relname = $2), false)",
            &[&schema, &table],
        )
        .await
        .expect("read table statistics")
        .get(0)
}

/// A new deployment's tables grow far faster than autovacuum looks at them,
/// and the writer's cached plans were made for them empty (sequential
/// scans, which cost a claim more with every run ever made). The store
/// analyses a table once it changed by as many rows as it had, and leaves
/// tables that hardly changed alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_that_outgrow_their_statistics_are_analysed() {
    let db = TestDb::new(Kind::Postgres).await;
    let schema = db.config().pg_schema.unwrap();
    let store = db.open().await;
    let client = raw().await;
    for table in ["tasks", "events", "workers"] {
        assert!(
            !analysed_by_store(&client, &schema, table).await,
            "{table} analysed before any write"
        );
    }
    // Well past the threshold (500 changed rows) for tasks and events.
    futures::future::try_join_all((0..700).map(|n| {
        store.create_task(shepherd_store::NewTask {
            vtid: Some(format!("G-{n:04}")),
            title: "grow".into(),
            spec: "s".into(),
            ..Default::default()
        })
    }))
    .await
    .expect("create tasks");
    // PostgreSQL publishes a session's change counts within about ten
    // seconds and the store looks every two; the bound only turns a store
    // that never analyses into a failure.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if analysed_by_store(&client, &schema, "tasks").await
            && analysed_by_store(&client, &schema, "events").await
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "tasks and events were not analysed after growing from nothing to 700 rows"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // No worker registered: nothing to analyse there.
    assert!(!analysed_by_store(&client, &schema, "workers").await);
    store.close();
}
