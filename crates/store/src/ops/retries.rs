//! Retries in the store: applies `shepherd_core::retry::after_run` when a
//! run fails or loses its claim, and writes what it decided (the failure,
//! the next attempt's `run_at`, the `task.retry_scheduled` event).
//!
//! Kept apart from the claim path so that path only asks "what now?" and
//! moves the task where the answer says.

use serde::Deserialize;
use serde_json::Value;
use shepherd_core::event::payloads::RetryScheduled;
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::{Claim, Task};
use shepherd_core::retry::{self, AfterRun, AttemptFailure, RunEnding};
use shepherd_core::status::RunStatus;
use shepherd_core::time::Millis;
use shepherd_core::workflow::{self, Workflow};
use shepherd_core::Error;

use super::tasks::policy_of;
use super::{emit, to_json};
use crate::params;
use crate::sql::Db;

/// What a worker may say about a failure in the progress report's
/// `metadata`: `"retryable": false` makes it final (the runner sends it for
/// an exit code not listed in the agent's `retry_on_exit_codes`).
#[derive(Debug, Default, Deserialize)]
struct FailureHints {
    #[serde(default)]
    retryable: Option<bool>,
}

/// Whether the worker's report allows a retry.
pub(crate) fn retryable(metadata: &Value) -> bool {
    serde_json::from_value::<FailureHints>(metadata.clone())
        .ok()
        .and_then(|h| h.retryable)
        .unwrap_or(true)
}

/// A number in `[0, 1)` for the backoff's jitter.
fn jitter() -> f64 {
    let mut b = [0u8; 4];
    // getrandom only fails when the OS has no entropy source at all.
    getrandom::fill(&mut b).expect("the operating system's random source");
    f64::from(u32::from_le_bytes(b)) / 4_294_967_296.0
}

/// Decides what becomes of `task` now that the run of `claim` failed.
pub(crate) fn decide(task: &Task, claim_lost: bool, retryable: bool, now: Millis) -> AfterRun {
    let ending = RunEnding {
        status: RunStatus::Failed,
        claim_lost,
        retryable,
        cancel_requested: task.cancel_requested_at.is_some(),
    };
    retry::after_run(
        policy_of(task).as_ref(),
        task.failures.len() as i64,
        ending,
        now,
        jitter(),
    )
}

/// Where a retried task waits: a validator's attempt goes back to review,
/// a builder's to the queue.
pub(crate) fn back_to(wf: &Workflow, claim: &Claim) -> &'static str {
    if claim.purpose == shepherd_core::status::ClaimPurpose::Validate {
        wf.review_state.unwrap_or(wf.dispatched_state)
    } else {
        wf.dispatched_state
    }
}

/// Records the failed attempt on the task and, for a retry, its `run_at`
/// and the `task.retry_scheduled` event. Call after the task moved.
pub(crate) async fn record<D: Db>(
    db: &mut D,
    now: Millis,
    task: &mut Task,
    claim: &Claim,
    reason: &str,
    decision: AfterRun,
) -> Result<(), Error> {
    let run_at = match decision {
        AfterRun::Retry { run_at } => Some(run_at),
        AfterRun::Fail => None,
        AfterRun::Workflow | AfterRun::Requeue => return Ok(()),
    };
    let attempt = db
        .query_opt(
            "SELECT attempt FROM runs WHERE id = $1",
            params![&claim.run_id],
        )
        .await?
        .map(|r| r.i64(0))
        .transpose()?
        .unwrap_or(task.attempts);
    let reason = if reason.trim().is_empty() {
        "failed".to_owned()
    } else {
        reason.to_owned()
    };
    task.failures.push(AttemptFailure {
        attempt,
        run_id: claim.run_id.clone(),
        reason: reason.clone(),
        at: now,
    });
    task.run_at = run_at.or(task.run_at);
    db.defer(
        "UPDATE tasks SET failures = $2, run_at = $3 WHERE id = $1",
        params![&task.vtid, to_json(&task.failures), task.run_at],
    );
    if let Some(run_at) = run_at {
        let mut refs = EventRefs::default()
            .task(&task.vtid)
            .worker(&claim.worker_id)
            .run(&claim.run_id)
            .channel(task.channel_id.clone())
            .conversation(task.conversation_id.clone());
        refs.agent_id = task.agent_id.clone();
        emit(
            db,
            now,
            NewEvent::typed(
                kind::TASK_RETRY_SCHEDULED,
                refs,
                &RetryScheduled {
                    attempt,
                    run_id: claim.run_id.clone(),
                    reason: reason.to_owned(),
                    run_at,
                    max_attempts: task.max_attempts.unwrap_or(1),
                },
            ),
        );
    }
    Ok(())
}

/// The state a failed run leaves its task in, given the decision.
pub(crate) fn state_after(
    wf: &Workflow,
    claim: &Claim,
    decision: AfterRun,
    otherwise: &'static str,
) -> &'static str {
    match decision {
        AfterRun::Retry { .. } | AfterRun::Requeue => back_to(wf, claim),
        AfterRun::Fail => workflow::FAILED,
        AfterRun::Workflow => otherwise,
    }
}

/// Sets an agent's default retry policy (from configuration); tasks created
/// for the agent afterwards take it unless they set their own.
pub(crate) async fn set_agent_default<D: Db>(
    db: &mut D,
    agent_id: &str,
    max_attempts: Option<i64>,
    backoff: Option<retry::RetryBackoff>,
) -> Result<(), Error> {
    if let Some(n) = max_attempts {
        retry::validate_max_attempts(n).map_err(|m| Error::invalid("invalid_max_attempts", m))?;
    }
    if let Some(b) = &backoff {
        b.validate()
            .map_err(|m| Error::invalid("invalid_retry_backoff", m))?;
    }
    let n = db
        .execute(
            "UPDATE agents SET max_attempts = $2, retry_backoff = $3 WHERE id = $1",
            params![agent_id, max_attempts, backoff.as_ref().map(to_json)],
        )
        .await?;
    if n == 0 {
        return Err(Error::not_found(
            "agent_not_found",
            format!("no agent {agent_id:?}"),
        ));
    }
    Ok(())
}
