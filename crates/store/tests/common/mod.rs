//! Test harness: a fresh database per test, on both backends.
//!
//! SQLite gets a new file in a temporary directory. PostgreSQL gets a new
//! schema in the database named by `SHEPHERD_TEST_PG_URL` (default: the local
//! server's `test` database); schemas left by earlier runs are dropped once
//! they are an hour old.

#![allow(dead_code)]

use shepherd_store::{Store, StoreConfig};

pub use shepherd_testkit::{pg_url, unique, Kind, TempDir};

/// A fresh, empty database; `config()` opens it (several times, for several nodes).
pub struct TestDb {
    pub kind: Kind,
    config: StoreConfig,
    _dir: Option<TempDir>,
}

impl TestDb {
    pub async fn new(kind: Kind) -> TestDb {
        match kind {
            Kind::Sqlite => {
                let dir = TempDir::new("shepherd-test");
                let url = format!("sqlite://{}", dir.0.join("shepherd.db").display());
                TestDb {
                    kind,
                    config: StoreConfig::new(url),
                    _dir: Some(dir),
                }
            }
            Kind::Postgres => {
                cleanup_old_schemas().await;
                let mut config = StoreConfig::new(pg_url());
                config.pg_schema = Some(format!("t_{}", unique()));
                config.pg_pool_size = 8;
                TestDb {
                    kind,
                    config,
                    _dir: None,
                }
            }
        }
    }

    pub fn config(&self) -> StoreConfig {
        self.config.clone()
    }

    pub async fn open(&self) -> Store {
        Store::open(&self.config).await.expect("open store")
    }

    /// Opens the database with `clock` as the store's "now": a test moves
    /// it (`Clock::advance`) to let leases lapse instead of sleeping.
    pub async fn open_with_clock(&self, clock: &shepherd_store::Clock) -> Store {
        let mut config = self.config.clone();
        config.clock = clock.clone();
        Store::open(&config).await.expect("open store")
    }
}

async fn cleanup_old_schemas() {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
        let Ok((client, conn)) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls).await
        else {
            return;
        };
        tokio::spawn(conn);
        let cutoff = chrono::Utc::now().timestamp() - 3600;
        let rows = client
            .query(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 't\\_%'",
                &[],
            )
            .await
            .unwrap_or_default();
        for row in rows {
            let name: String = row.get(0);
            let ts = name.split('_').nth(1).and_then(|s| s.parse::<i64>().ok());
            if matches!(ts, Some(ts) if ts < cutoff) {
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await;
            }
        }
    })
    .await;
}

/// Declares one test per backend: `contract!(name, |db: TestDb| async move { … })`.
#[macro_export]
macro_rules! contract {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let db = $crate::common::TestDb::new($crate::common::Kind::Sqlite).await;
                ($body)(db).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let db = $crate::common::TestDb::new($crate::common::Kind::Postgres).await;
                ($body)(db).await;
            }
        }
    };
}
