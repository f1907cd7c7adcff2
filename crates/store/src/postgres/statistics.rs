//! Planner statistics for young tables.
//!
//! The writer runs the same few statements thousands of times on one
//! connection, so PostgreSQL caches a generic plan for each of them. That
//! plan is made from the statistics of the moment and kept until a table it
//! reads is analysed again. On a new deployment the first plans see empty
//! tables, pick sequential scans (cheapest on an empty table), and keep
//! them while the tables grow: a claim then reads every run ever made
//! to find the one active run of its task. Autovacuum analyses a table
//! after about a tenth of it changed, but looks at each database only once
//! a minute (`autovacuum_naptime`) and may be busy elsewhere, and a busy
//! new deployment outgrows its first plans many times over in that minute.
//! Measured on a 2-core machine: 16,000 claim+complete cycles ran at 195
//! cycles/s with those plans and at about 1,450/s with tables analysed
//! while they grew.
//!
//! So each node checks its schema's tables every [`CHECK_INTERVAL`] and
//! analyses one that changed by at least as many rows as it had when last
//! analysed (at least [`MIN_CHANGES`]): at each doubling of a growing table,
//! and never while autovacuum keeps up (it acts at a tenth). Analysing a
//! table invalidates the plans that read it, so the writer's next
//! statements are planned for the table as it now is. `SKIP_LOCKED` leaves
//! a table alone while another node or autovacuum is working on it.

use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use super::connect::{map_err, pool_err};

/// How often a node looks at its tables' change counts. PostgreSQL
/// publishes a busy session's counts about once a second.
const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// A table with fewer changes than this since it was last analysed is left
/// alone, however small it is: plans for a table of a few hundred rows are
/// cheap whichever they are.
const MIN_CHANGES: i64 = 500;

/// The schema's tables due for analysis (see the module docs), each as a
/// quoted `schema.table` name.
const DUE_SQL: &str = "SELECT format('%I.%I', s.schemaname, s.relname) \
     FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid \
     WHERE s.schemaname = current_schema() \
       AND s.n_mod_since_analyze >= GREATEST($1::bigint, c.reltuples::bigint) \
     ORDER BY s.n_mod_since_analyze DESC";

/// Analyses what is due, every [`CHECK_INTERVAL`], until `shutdown`.
pub(super) async fn refresh_loop(pool: Pool, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_INTERVAL) => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            outcome = refresh_due(&pool) => match outcome {
                Ok(analysed) if !analysed.is_empty() => {
                    tracing::debug!(tables = ?analysed, "analysed tables that outgrew their statistics");
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "statistics check skipped"),
            },
        }
    }
}

/// Analyses each table of the schema that is due; returns their names.
async fn refresh_due(pool: &Pool) -> Result<Vec<String>, shepherd_core::Error> {
    let client = pool.get().await.map_err(pool_err)?;
    let due: Vec<String> = client
        .query(DUE_SQL, &[&MIN_CHANGES])
        .await
        .map_err(map_err)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for table in &due {
        // The name comes from the catalogue, quoted by `format('%I')`.
        client
            .batch_execute(&format!("ANALYZE (SKIP_LOCKED) {table}"))
            .await
            .map_err(map_err)?;
    }
    Ok(due)
}
