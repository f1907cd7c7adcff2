//! PostgreSQL's schema migrations (see `crate::migrations` for what is
//! applied and the checksum check). Nodes starting together on one database
//! take turns: a session-level advisory lock is held around the lot.

use deadpool_postgres::Pool;
use shepherd_core::Error;

use super::connect::{map_err, pool_err};
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
const MIGRATION_LOCK: i64 = 0x5348_4550_0002;

pub(super) async fn migrate(pool: &Pool) -> Result<(), Error> {
    let client = pool.get().await.map_err(pool_err)?;
    // Several nodes may start at once; one migrates while the others wait.
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map_err)?;
    let result = async {
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL, checksum TEXT); \
                 ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum TEXT",
            )
            .await
            .map_err(map_err)?;
        let applied: Vec<(i64, Option<String>)> = client
            .query("SELECT version, checksum FROM schema_migrations", &[])
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        for step in migrations::plan(MIGRATIONS, &applied)? {
            match step {
                Step::Apply {
                    version,
                    sql,
                    checksum,
                } => {
                    tracing::info!(version, "applying PostgreSQL migration");
                    let started = std::time::Instant::now();
                    client.batch_execute("BEGIN").await.map_err(map_err)?;
                    let applied = async {
                        // A migration that rewrites a big table can take a
                        // while: say so every few seconds, so that a slow
                        // start is not mistaken for a hung one.
                        let run = client.batch_execute(sql);
                        tokio::pin!(run);
                        let mut ticks = tokio::time::interval_at(
                            tokio::time::Instant::now() + super::super::migrations::PROGRESS_EVERY,
                            super::super::migrations::PROGRESS_EVERY,
                        );
                        loop {
                            tokio::select! {
                                done = &mut run => break done,
                                _ = ticks.tick() => tracing::info!(
                                    version,
                                    elapsed_s = started.elapsed().as_secs(),
                                    "still applying PostgreSQL migration"
                                ),
                            }
                        }?;
                        client
                            .execute(
                                "INSERT INTO schema_migrations (version, applied_at, checksum) VALUES ($1, $2, $3)",
                                &[&version, &chrono::Utc::now().timestamp_millis(), &checksum.as_str()],
                            )
                            .await
                    }
                    .await;
                    match applied {
                        Ok(_) => {
                            client.batch_execute("COMMIT").await.map_err(map_err)?;
                            tracing::info!(
                                version,
                                elapsed_ms = started.elapsed().as_millis() as u64,
                                "applied PostgreSQL migration"
                            );
                        }
                        Err(e) => {
                            let _ = client.batch_execute("ROLLBACK").await;
                            return Err(map_err(e));
                        }
                    }
                }
                Step::Record { version, checksum } => {
                    client
                        .execute(
                            "UPDATE schema_migrations SET checksum = $2 WHERE version = $1",
                            &[&version, &checksum.as_str()],
                        )
                        .await
                        .map_err(map_err)?;
                }
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}
