//! What survives a restart: a run whose agent did not survive goes back to
//! the queue (reason `server_restart`), and an operator can retry a task
//! that failed or was cancelled.

use shepherd_core::event::EventRefs;
use shepherd_core::model::Task;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use super::{claims, runs, tasks};
use crate::params;

/// Ends the run (fenced by its claim token, like steps) and puts its task
/// back in the queue, as an expired claim would, with `reason`.
pub async fn requeue_run<D: crate::sql::Db>(
    db: &mut D,
    now: Millis,
    run_id: &str,
    claim_token: &str,
    caller: Option<&str>,
    reason: &str,
) -> Result<Task, Error> {
    let run = runs::require(db, run_id).await?;
    // Not refused when the lease lapsed: requeueing ends the claim anyway.
    let active = runs::fence_run(db, now, &run, claim_token, caller, None).await?;
    claims::expire(db, now, &active.claim, reason).await?;
    tasks::require(db, &active.claim.vtid).await
}

/// Makes a failed or cancelled task runnable again: back to its workflow's
/// dispatched state (dispatched first if it never was), cancel request
/// cleared. Any other state is 409
/// `task_not_failed` (the code predates retrying cancelled tasks and is
/// kept, since clients match on it).
pub async fn retry_task<D: crate::sql::Db>(
    db: &mut D,
    now: Millis,
    vtid: &str,
) -> Result<Task, Error> {
    let mut task = tasks::require(db, vtid).await?;
    use shepherd_core::workflow::{CANCELLED, FAILED};
    if task.state != FAILED && task.state != CANCELLED {
        return Err(Error::conflict(
            "task_not_failed",
            format!(
                "task {vtid} is {}; only a failed or cancelled task can be retried",
                task.state
            ),
        ));
    }
    let reason = if task.state == CANCELLED {
        "retried by the operator after a cancel"
    } else {
        "retried by the operator"
    };
    let wf = tasks::workflow_of(&task)?;
    db.defer(
        "UPDATE tasks SET cancel_requested_at = NULL WHERE id = $1",
        params![vtid],
    );
    task.cancel_requested_at = None;
    // A draft cancelled before it was ever dispatched is dispatched now:
    // a task in the queue always has its frozen spec and its place in the
    // hand-out order (`dispatched_at`; without one it sorted first on
    // SQLite and last on PostgreSQL).
    if task.dispatched_at.is_none() {
        tasks::freeze_spec(db, now, &mut task);
    }
    tasks::set_state(
        db,
        now,
        &mut task,
        wf.dispatched_state,
        reason,
        EventRefs::default(),
    )
    .await?;
    Ok(task)
}
