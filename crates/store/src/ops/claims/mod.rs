//! Claims: the lease of one task by one worker, with an expiry and a fencing
//! token. Granting, progress under a claim, heartbeats, release, expiry.
//!
//! The database enforces at most one active claim per task (a unique index
//! over `task_id` where `released_at IS NULL`). Every progress report is
//! checked against the active claim: a worker whose claim expired (and was
//! perhaps granted to another) is refused with `claim_stale` and changes
//! nothing. That is the fencing the older queues lacked.
//!
//! This module holds what every claim path reads (the active claim and its
//! holder's liveness); `grant`, `report` and `lease` hold the three jobs.
//! The rules they apply are pure functions in `shepherd_core::claiming`.

use serde_json::Value;
use shepherd_core::claiming;
use shepherd_core::event::payloads::{
    ClaimGranted, ClaimReleased, ProgressRecorded, TaskStateChanged, TransitionRejected,
    WorkerClosed, WorkerInactive, WorkerRegisteredData, WorkerResumed,
};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::{Claim, Task, Worker};
use shepherd_core::status::{ClaimPurpose, RunStatus, WorkerStatus};
use shepherd_core::time::Millis;
use shepherd_core::workflow::{self, Outcome};
use shepherd_core::Error;

use super::tasks::{self, set_state, task_from_row, workflow_of, Applied, TASK_COLUMNS};
use super::workers::WORKER_COLUMNS;
use super::{emit, emit_returning, new_uuid, random_hex, retries, runs, workers};
use crate::params;
use crate::sql::Appended;
use crate::sql::{Db, Dialect, Row};

mod grant;
mod lease;
mod report;

#[cfg(feature = "test-hooks")]
pub use grant::explain_eligible;
pub use grant::{claim_alone, claim_next, claim_prefetch, lost_race, pending, Grant};
pub use lease::{deregister, heartbeat, sweep, HeldClaim, SweepReport};
pub(crate) use lease::{expire, release};
pub use report::progress_prefetch;
pub(crate) use report::{apply_event, progress, settle_seq, BatchReads, Holder};
pub use shepherd_core::claiming::LeaseRules;

/// A claim's columns, read from its run row (aliased `c`): a run is one
/// claim attempt, and the claim's time is the run's start.
const CLAIM_COLUMNS: &str =
    "c.claim_id, c.task_id, c.worker_id, c.id, c.purpose, c.started_at, c.expires_at, c.released_at, c.release_reason";

fn claim_from_row(r: &Row) -> Result<Claim, Error> {
    Ok(Claim {
        id: r.string(0)?,
        vtid: r.string(1)?,
        worker_id: r.string(2)?,
        run_id: r.string(3)?,
        purpose: r.word(4)?,
        claimed_at: r.i64(5)?,
        expires_at: r.i64(6)?,
        released_at: r.opt_i64(7)?,
        release_reason: r.opt_string(8)?,
    })
}

/// An active claim with its fencing token.
#[derive(Debug, Clone)]
pub struct ActiveClaim {
    pub claim: Claim,
    pub token: String,
}

pub async fn for_task<D: Db>(db: &mut D, vtid: &str) -> Result<Vec<Claim>, Error> {
    let sql = format!(
        "SELECT {CLAIM_COLUMNS} FROM runs c WHERE c.task_id = $1 AND c.claim_id IS NOT NULL \
         ORDER BY c.started_at, c.claim_id"
    );
    db.query(&sql, params![vtid])
        .await?
        .iter()
        .map(claim_from_row)
        .collect()
}

pub async fn active_for_task<D: Db>(db: &mut D, vtid: &str) -> Result<Option<Claim>, Error> {
    Ok(active_with_token(db, vtid).await?.map(|a| a.claim))
}

pub(crate) async fn active_with_token<D: Db>(
    db: &mut D,
    vtid: &str,
) -> Result<Option<ActiveClaim>, Error> {
    let sql = format!("SELECT {CLAIM_COLUMNS}, c.claim_token FROM runs c WHERE c.task_id = $1 AND c.released_at IS NULL");
    match db.query_opt(&sql, params![vtid]).await? {
        Some(r) => Ok(Some(ActiveClaim {
            claim: claim_from_row(&r)?,
            token: r.string(9)?,
        })),
        None => Ok(None),
    }
}

/// The active claim of a run, for step and status calls fenced by token,
/// with its holder's last heartbeat and registry status (whether its lease
/// lapsed).
pub(crate) async fn active_for_run<D: Db>(
    db: &mut D,
    run_id: &str,
) -> Result<Option<(ActiveClaim, i64, String)>, Error> {
    let sql = format!(
        "SELECT {CLAIM_COLUMNS}, c.claim_token, w.last_heartbeat_at, w.status FROM runs c \
         JOIN workers w ON w.id = c.worker_id WHERE c.id = $1 AND c.released_at IS NULL"
    );
    match db.query_opt(&sql, params![run_id]).await? {
        Some(r) => Ok(Some((
            ActiveClaim {
                claim: claim_from_row(&r)?,
                token: r.string(9)?,
            },
            r.i64(10)?,
            r.string(11)?,
        ))),
        None => Ok(None),
    }
}

/// [`active_for_run`] of several runs in one statement, by run id (a run
/// with no active claim is absent).
pub(crate) async fn active_for_runs<D: Db>(
    db: &mut D,
    run_ids: &[String],
) -> Result<std::collections::HashMap<String, (ActiveClaim, i64, String)>, Error> {
    let list = crate::sql::placeholder_list(1, run_ids.len());
    let sql = format!(
        "SELECT {CLAIM_COLUMNS}, c.claim_token, w.last_heartbeat_at, w.status FROM runs c \
         JOIN workers w ON w.id = c.worker_id WHERE c.id IN ({list}) AND c.released_at IS NULL"
    );
    let rows = db
        .query(&sql, run_ids.iter().map(crate::sql::Value::from).collect())
        .await?;
    let mut out = std::collections::HashMap::with_capacity(rows.len());
    for r in rows {
        let claim = claim_from_row(&r)?;
        out.insert(
            claim.run_id.clone(),
            (
                ActiveClaim {
                    claim,
                    token: r.string(9)?,
                },
                r.i64(10)?,
                r.string(11)?,
            ),
        );
    }
    Ok(out)
}

/// Whether `worker` may take `task` now, ignoring capacity and existing
/// claims (the rule itself: [`claiming::eligibility`]).
fn eligibility(worker: &Worker, task: &Task, now: Millis) -> Result<(), Error> {
    claiming::eligibility(workflow_of(task)?, worker, task, now)
}

/// Columns `from..from+len` of a row, as a row of their own.
fn slice(r: &Row, from: usize, len: usize) -> Row {
    Row(r.0.iter().skip(from).take(len).cloned().collect())
}

const TASK_WIDTH: usize = 21;
const WORKER_WIDTH: usize = 17;

/// An active claim with its holder's last heartbeat and registry status.
type ActiveWithHolder = (ActiveClaim, Option<i64>, Option<String>);

/// An active claim read together with its holder's liveness.
fn active_from(r: &Row, at: usize, vtid: &str) -> Result<Option<ActiveWithHolder>, Error> {
    let Some(id) = r.opt_string(at)? else {
        return Ok(None);
    };
    let claim = Claim {
        id,
        vtid: vtid.to_owned(),
        worker_id: r.string(at + 1)?,
        run_id: r.string(at + 2)?,
        purpose: r.word(at + 3)?,
        claimed_at: r.i64(at + 4)?,
        expires_at: r.i64(at + 5)?,
        released_at: None,
        release_reason: None,
    };
    let token = r.string(at + 6)?;
    Ok(Some((
        ActiveClaim { claim, token },
        r.opt_i64(at + 7)?,
        r.opt_string(at + 8)?,
    )))
}

/// Why a lease lapsed, if it did. The one rule for every path that touches
/// a claim (claim, heartbeat, report, sweep): a lapsed lease is lapsed
/// whoever touches it first, so no outcome depends on sweep timing. The
/// claim's grant (its run's start) counts as hearing from its holder.
pub(crate) fn lapse_reason(
    now: Millis,
    rules: &LeaseRules,
    claim: &Claim,
    last_heartbeat: i64,
    status: &str,
) -> Option<String> {
    claiming::lapse(
        now,
        rules,
        claim.expires_at,
        claim.claimed_at,
        last_heartbeat,
        status,
    )
    .map(|l| l.to_string())
}
