//! SQLite's schema migrations, applied at open by the writer's connection
//! (see `crate::migrations` for what is applied and the checksum check).

use rusqlite::Connection;
use shepherd_core::Error;

use super::db::map_err;
use crate::migrations::{self, Migration, Step};

const MIGRATIONS: &[Migration] = &[
    (1, include_str!("0001_init.sql")),
    (2, include_str!("0002_sessions.sql")),
    (3, include_str!("0003_conversations.sql")),
    (4, include_str!("0004_run_usage.sql")),
    (5, include_str!("0005_retries.sql")),
    (8, include_str!("0008_run_workspace.sql")),
    (9, include_str!("0009_claims_in_runs.sql")),
    (10, include_str!("0010_run_counts_by_worker.sql")),
    (11, include_str!("0011_tasks_ready.sql")),
    (12, include_str!("0012_input_requests.sql")),
    (13, include_str!("0013_webhooks.sql")),
    (14, include_str!("0014_users.sql")),
    (15, include_str!("0015_event_actors.sql")),
    (16, include_str!("0016_web_sessions.sql")),
    (17, include_str!("0017_hosts.sql")),
    (18, include_str!("0018_host_links.sql")),
    (19, include_str!("0019_webhook_allow_private.sql")),
];

/// Brings the database up to this build's schema. One `BEGIN IMMEDIATE`
/// holds SQLite's write lock across reading what was applied and applying
/// the rest, so processes opening one file at once apply each migration once.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), Error> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL, checksum TEXT)",
    )
    .map_err(map_err)?;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(map_err)?;
    // Databases created before checksums were recorded lack the column.
    let has_checksum: bool = tx
        .query_row(
            "SELECT EXISTS(SELECT 1 FROM pragma_table_info('schema_migrations') WHERE name = 'checksum')",
            [],
            |r| r.get(0),
        )
        .map_err(map_err)?;
    if !has_checksum {
        tx.execute_batch("ALTER TABLE schema_migrations ADD COLUMN checksum TEXT")
            .map_err(map_err)?;
    }
    let applied = {
        let mut stmt = tx
            .prepare("SELECT version, checksum FROM schema_migrations")
            .map_err(map_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
            })
            .map_err(map_err)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(map_err)?
    };
    for step in migrations::plan(MIGRATIONS, &applied)? {
        match step {
            Step::Apply {
                version,
                sql,
                checksum,
            } => {
                tracing::info!(version, "applying SQLite migration");
                let started = std::time::Instant::now();
                // A migration that rewrites a big table can take a while:
                // say so every few seconds (SQLite calls this every so many
                // of its steps), so that a slow start is not taken for a hang.
                let last = std::cell::Cell::new(started);
                tx.progress_handler(
                    100_000,
                    Some(move || {
                        if last.get().elapsed() >= crate::migrations::PROGRESS_EVERY {
                            last.set(std::time::Instant::now());
                            tracing::info!(
                                version,
                                elapsed_s = started.elapsed().as_secs(),
                                "still applying SQLite migration"
                            );
                        }
                        false
                    }),
                );
                let ran = tx.execute_batch(sql);
                tx.progress_handler(0, None::<fn() -> bool>);
                ran.map_err(map_err)?;
                tracing::info!(
                    version,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "applied SQLite migration"
                );
                tx.execute(
                    "INSERT INTO schema_migrations (version, applied_at, checksum) VALUES (?1, ?2, ?3)",
                    rusqlite::params![version, chrono::Utc::now().timestamp_millis(), checksum],
                )
                .map_err(map_err)?;
            }
            Step::Record { version, checksum } => {
                tx.execute(
                    "UPDATE schema_migrations SET checksum = ?2 WHERE version = ?1",
                    rusqlite::params![version, checksum],
                )
                .map_err(map_err)?;
            }
        }
    }
    tx.commit().map_err(map_err)
}
