//! A run's token usage and cost: stored on the run as the worker holding its
//! claim reports it (a running total, so the latest report replaces the
//! last) and announced as a `run.usage` event.

use shepherd_core::event::payloads::RunUsage;
use shepherd_core::event::{kind, NewEvent};
use shepherd_core::model::Run;
use shepherd_core::time::Millis;
use shepherd_core::usage::Usage;
use shepherd_core::Error;

use super::claims::LeaseRules;
use super::emit;
use super::runs::{fence_run, require, run_refs};
use crate::params;
use crate::sql::Db;

/// Sets the usage of a running run, fenced by its claim token and the lease
/// rules: a report under a lapsed lease is refused, as steps are.
pub async fn set_usage<D: Db>(
    db: &mut D,
    now: Millis,
    run_id: &str,
    claim_token: &str,
    caller: Option<&str>,
    usage: Usage,
    rules: &LeaseRules,
) -> Result<Run, Error> {
    if usage.cost_usd.is_some_and(|c| !c.is_finite() || c < 0.0) {
        return Err(Error::invalid(
            "invalid_usage",
            "cost_usd is a non-negative number",
        ));
    }
    let run = require(db, run_id).await?;
    fence_run(db, now, &run, claim_token, caller, Some(rules)).await?;
    let text = serde_json::to_string(&usage).map_err(|e| Error::internal(e.to_string()))?;
    db.defer(
        "UPDATE runs SET usage = $2 WHERE id = $1",
        params![run_id, text],
    );
    emit(
        db,
        now,
        NewEvent::typed(kind::RUN_USAGE, run_refs(&run), &RunUsage { usage }),
    );
    require(db, run_id).await
}

/// One run's stored usage, for aggregation: agent, task, start and usage.
pub type UsageRow = (String, String, Millis, Usage);

/// The usage of every run started at or after `since` that reported any.
/// Summing happens in the caller: usage is a JSON column, and reading it
/// back the one way both stores share keeps the sums exact on each.
pub async fn rows<D: Db>(db: &mut D, since: Option<Millis>) -> Result<Vec<UsageRow>, Error> {
    let rows = db
        .query(
            "SELECT agent_id, task_id, started_at, usage FROM runs \
             WHERE usage IS NOT NULL AND started_at >= $1",
            params![since.unwrap_or(i64::MIN)],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let usage: Usage = serde_json::from_str(&r.string(3)?)
                .map_err(|e| Error::internal(format!("stored usage unreadable: {e}")))?;
            Ok((r.string(0)?, r.string(1)?, r.i64(2)?, usage))
        })
        .collect()
}
