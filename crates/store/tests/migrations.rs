//! Schema migrations on both databases: an applied migration whose text has
//! changed stops the store from opening; databases migrated before
//! checksums were recorded get them on their next start; a database with
//! claims in flight upgrades from the schema before claims moved into runs
//! without losing a lease, a token or a count.

mod common;

use common::{Kind, TestDb};
use serde_json::json;
use shepherd_store::{Applied, LeaseRules, RunFilter, Store};

/// A connection to the test's PostgreSQL schema (created if the store has
/// not made it yet), outside the store, and the task driving it.
async fn pg_session(db: &TestDb) -> (tokio_postgres::Client, tokio::task::JoinHandle<()>) {
    let (client, conn) = tokio_postgres::connect(&common::pg_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let schema = db.config().pg_schema.expect("a test schema");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path = {schema}"
        ))
        .await
        .unwrap();
    (client, driver)
}

/// Runs `sql` on the test database directly, outside the store.
async fn raw(db: &TestDb, sql: &str) -> Vec<Option<String>> {
    let config = db.config();
    match db.kind {
        Kind::Sqlite => {
            let path = config.url.trim_start_matches("sqlite://").to_owned();
            let sql = sql.to_owned();
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(path).unwrap();
                let mut stmt = conn.prepare(&sql).unwrap();
                let cols = stmt.column_count();
                let mut rows = stmt.query([]).unwrap();
                let mut out = Vec::new();
                while let Some(r) = rows.next().unwrap() {
                    if cols > 0 {
                        out.push(r.get::<_, Option<String>>(0).unwrap());
                    }
                }
                out
            })
            .await
            .unwrap()
        }
        Kind::Postgres => {
            let (client, driver) = pg_session(db).await;
            let rows = client.query(sql, &[]).await.unwrap();
            drop(client);
            let _ = driver.await;
            rows.iter()
                .map(|r| {
                    if r.is_empty() {
                        None
                    } else {
                        r.get::<_, Option<String>>(0)
                    }
                })
                .collect()
        }
    }
}

const CHECKSUMS: &str = "SELECT checksum FROM schema_migrations ORDER BY version";

contract!(
    an_edited_applied_migration_refuses_to_start,
    |db: TestDb| async move {
        let store = db.open().await;
        store.close();
        drop(store);
        let sums = raw(&db, CHECKSUMS).await;
        assert!(!sums.is_empty());
        assert!(
            sums.iter()
                .all(|s| s.as_ref().is_some_and(|s| s.len() == 64)),
            "every applied migration has its SHA-256: {sums:?}"
        );
        // As if migration 1's file had been edited after it was applied.
        raw(
            &db,
            "UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1",
        )
        .await;
        let err = match Store::open(&db.config()).await {
            Ok(_) => panic!("a store opened over an edited migration"),
            Err(e) => e,
        };
        assert_eq!(err.code, "migration_changed");
        assert!(err.message.contains("migration 1"), "{}", err.message);
    }
);

contract!(
    a_database_a_newer_build_migrated_refuses_to_start,
    |db: TestDb| async move {
        let store = db.open().await;
        store.close();
        drop(store);
        // As if a newer shepherd had applied its migration 9000.
        raw(
            &db,
            "INSERT INTO schema_migrations (version, applied_at, checksum) \
             VALUES (9000, 0, 'from-the-future')",
        )
        .await;
        let err = match Store::open(&db.config()).await {
            Ok(_) => panic!("a store opened a database a newer build migrated"),
            Err(e) => e,
        };
        assert_eq!(err.code, "schema_too_new");
        assert!(err.message.contains("migration 9000"), "{}", err.message);
        assert!(
            err.message.contains("newest migration is"),
            "{}",
            err.message
        );
    }
);

contract!(
    checksums_are_recorded_for_databases_migrated_without_them,
    |db: TestDb| async move {
        let store = db.open().await;
        store.close();
        drop(store);
        let sums = raw(&db, CHECKSUMS).await;
        raw(&db, "UPDATE schema_migrations SET checksum = NULL").await;
        assert!(raw(&db, CHECKSUMS).await.iter().all(Option::is_none));
        // The next start fills them in from this build's migrations, and
        // the one after accepts them.
        let store = db.open().await;
        store.close();
        drop(store);
        assert_eq!(raw(&db, CHECKSUMS).await, sums);
        let store = db.open().await;
        store.ping().await.unwrap();
        store.close();
    }
);

/// Runs a script of several statements on the test database, outside the
/// store (on PostgreSQL, creating the test's schema first).
async fn raw_batch(db: &TestDb, script: &str) {
    let config = db.config();
    match db.kind {
        Kind::Sqlite => {
            let path = config.url.trim_start_matches("sqlite://").to_owned();
            let script = script.to_owned();
            tokio::task::spawn_blocking(move || {
                rusqlite::Connection::open(path)
                    .unwrap()
                    .execute_batch(&script)
                    .unwrap()
            })
            .await
            .unwrap()
        }
        Kind::Postgres => {
            let (client, driver) = pg_session(db).await;
            client.batch_execute(script).await.unwrap();
            drop(client);
            let _ = driver.await;
        }
    }
}

/// The migrations up to 8, the schema in which claims had a table of their
/// own, as the store's files hold them.
fn migrations_before_claims_moved(kind: Kind) -> Vec<(i64, &'static str)> {
    match kind {
        Kind::Sqlite => vec![
            (1, include_str!("../src/sqlite/0001_init.sql")),
            (2, include_str!("../src/sqlite/0002_sessions.sql")),
            (3, include_str!("../src/sqlite/0003_conversations.sql")),
            (4, include_str!("../src/sqlite/0004_run_usage.sql")),
            (5, include_str!("../src/sqlite/0005_retries.sql")),
            (8, include_str!("../src/sqlite/0008_run_workspace.sql")),
        ],
        Kind::Postgres => vec![
            (1, include_str!("../src/postgres/0001_init.sql")),
            (2, include_str!("../src/postgres/0002_sessions.sql")),
            (3, include_str!("../src/postgres/0003_conversations.sql")),
            (4, include_str!("../src/postgres/0004_run_usage.sql")),
            (5, include_str!("../src/postgres/0005_retries.sql")),
            (8, include_str!("../src/postgres/0008_run_workspace.sql")),
        ],
    }
}

const RULES: LeaseRules = LeaseRules {
    ttl_ms: 3_600_000,
    heartbeat_timeout_ms: 300_000,
    not_before: 0,
    cancel_grace_ms: 30_000,
};

contract!(
    claims_in_flight_survive_the_move_into_runs,
    |db: TestDb| async move {
        // A database as version 8 left it: migrations applied (recorded
        // without checksums, as before they existed), one worker holding
        // two live claims (one token stored as granted in early versions,
        // one hashed), a finished run with its released claim and its
        // count, and a task nobody claimed yet.
        let mut script = String::from(
            "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL);",
        );
        for (version, sql) in migrations_before_claims_moved(db.kind) {
            script.push_str(sql);
            script.push_str(&format!(
                ";\nINSERT INTO schema_migrations (version, applied_at) VALUES ({version}, 0);\n"
            ));
        }
        raw_batch(&db, &script).await;
        let now = chrono::Utc::now().timestamp_millis();
        let later = now + 3_600_000;
        let hashed = shepherd_core::token::hash_token("hashed-token");
        raw_batch(
            &db,
            &format!(
                "INSERT INTO agents (id, source, created_at, updated_at) VALUES ('default', 'worker', {now}, {now});
                 INSERT INTO workers (id, agent_id, worker_type, max_concurrent, status, token_hash, registered_at, last_heartbeat_at)
                     VALUES ('w1', 'default', 'builtin', 4, 'active', 'worker-token-hash', {now}, {now});
                 INSERT INTO tasks (id, title, spec, workflow, state, created_at, updated_at) VALUES
                     ('A', 'a', 'spec', 'simple', 'claimed', {now}, {now}),
                     ('B', 'b', 'spec', 'simple', 'done', {now}, {now}),
                     ('C', 'c', 'spec', 'simple', 'running', {now}, {now}),
                     ('D', 'd', 'spec', 'simple', 'pending', {now}, {now});
                 INSERT INTO runs (id, task_id, task, worker_id, agent_id, attempt, status, started_at, completed_at) VALUES
                     ('run-a', 'A', 'a', 'w1', 'default', 1, 'running', {now}, NULL),
                     ('run-b', 'B', 'b', 'w1', 'default', 1, 'done', {now}, {now}),
                     ('run-c', 'C', 'c', 'w1', 'default', 1, 'running', {now}, NULL);
                 INSERT INTO claims (id, task_id, worker_id, run_id, token, claimed_at, expires_at, released_at, release_reason) VALUES
                     ('claim-a', 'A', 'w1', 'run-a', 'legacy-token', {now}, {later}, NULL, NULL),
                     ('claim-b', 'B', 'w1', 'run-b', '{hashed}', {now}, {later}, {now}, 'completed'),
                     ('claim-c', 'C', 'w1', 'run-c', '{hashed}', {now}, {later}, NULL, NULL);
                 INSERT INTO run_counts (agent_id, status, n) VALUES ('default', 'done', 1), ('default', 'running', 2);"
            ),
        )
        .await;

        let store = db.open().await;
        // Both live claims are still held, with their leases.
        let (_, held) = store.heartbeat("w1", RULES).await.unwrap();
        let mut held: Vec<_> = held
            .iter()
            .map(|h| (h.vtid.clone(), h.run_id.clone()))
            .collect();
        held.sort();
        assert_eq!(
            held,
            vec![
                ("A".to_owned(), "run-a".to_owned()),
                ("C".to_owned(), "run-c".to_owned())
            ]
        );
        // Still one active claim per task, enforced.
        let err = store.claim_task("w1", "A", RULES).await.unwrap_err();
        assert_eq!(err.code, "already_claimed", "{err}");
        // Each token still fences its own claim, and only it.
        let complete = |vtid: &'static str, token: &'static str| {
            let store = store.clone();
            async move {
                store
                    .progress(
                        "w1",
                        vtid,
                        Some(token.to_owned()),
                        "worker.execution.completed",
                        None,
                        json!({}),
                        None,
                        RULES,
                    )
                    .await
            }
        };
        let err = complete("C", "legacy-token").await.unwrap_err();
        assert_eq!(err.code, "claim_stale", "{err}");
        for (vtid, token) in [("A", "legacy-token"), ("C", "hashed-token")] {
            match complete(vtid, token).await.unwrap() {
                Applied::Moved { task, .. } => assert_eq!(task.state, "done", "{vtid}"),
                other => panic!("{vtid}: {other:?}"),
            }
        }
        // The released claim stayed released, and a new claim works.
        let (_, held) = store.heartbeat("w1", RULES).await.unwrap();
        assert!(held.is_empty(), "{held:?}");
        let grant = store.claim_task("w1", "D", RULES).await.unwrap();
        assert_eq!(grant.claim.vtid, "D");
        // The finished count carried over: the old run and the two just
        // completed.
        let done = store
            .list_runs(RunFilter {
                agent_id: Some("default".into()),
                status: Some("done".into()),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(done.total, 3, "{:?}", done.items);
        assert_eq!(done.items.len(), 3);
        store.close();
    }
);
