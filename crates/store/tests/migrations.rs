//! Schema migrations on both databases: an applied migration whose text has
//! changed stops the store from opening; databases migrated before
//! checksums were recorded get them on their next start.

mod common;

use common::{Kind, TestDb};
use shepherd_store::Store;

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
            let (client, conn) = tokio_postgres::connect(&common::pg_url(), tokio_postgres::NoTls)
                .await
                .unwrap();
            let driver = tokio::spawn(conn);
            let schema = config.pg_schema.expect("a test schema");
            client
                .batch_execute(&format!("SET search_path = {schema}"))
                .await
                .unwrap();
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
