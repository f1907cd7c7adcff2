//! The pure rules of claiming, with no storage behind them: who may take a
//! task, when a lease has lapsed, and which reports end a run. The store
//! reads the rows and writes the outcome; every decision in between is
//! made here, so each rule has one definition and is tested on its own.

use crate::error::Error;
use crate::model::{Task, Worker};
use crate::status::{RunStatus, WorkerStatus};
use crate::time::Millis;
use crate::workflow::{self, Workflow};

/// Timing rules for leases.
#[derive(Debug, Clone, Copy)]
pub struct LeaseRules {
    /// A claim lasts this long unless extended by heartbeats.
    pub ttl_ms: i64,
    /// A worker silent this long loses its claims.
    pub heartbeat_timeout_ms: i64,
    /// Nothing expires before this instant: downtime of the server does not
    /// count against workers (start time + heartbeat timeout).
    pub not_before: Millis,
    /// After a cancel request, the worker has this long to stop.
    pub cancel_grace_ms: i64,
}

/// Why a lease lapsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    /// The holder deregistered.
    Deregistered,
    /// The holder has not been heard from for this long.
    Silent { for_ms: i64 },
    /// The claim's TTL passed without a heartbeat extending it.
    TtlPassed,
}

impl std::fmt::Display for Lapse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lapse::Deregistered => f.write_str("worker deregistered"),
            Lapse::Silent { for_ms } => write!(f, "no heartbeat for {}s", for_ms / 1000),
            Lapse::TtlPassed => f.write_str("claim TTL passed without renewal"),
        }
    }
}

/// Whether a lease lapsed at `now`, and why. The one rule for every path
/// that touches a claim (claim, heartbeat, report, sweep): a lapsed lease
/// is lapsed whoever touches it first, so no outcome depends on sweep
/// timing. Within the start grace (`rules.not_before`) nothing lapses. A
/// holder status that is not a known word counts as live.
///
/// The grant (`granted_at`) is hearing from the holder too: a worker that
/// asks for work after a quiet spell (one that heartbeats only while it
/// holds work) gets a lease that runs from the grant, not one that was
/// already silent past the timeout when it was handed out. Only this claim
/// counts from its grant; the worker's other claims keep their own silence.
pub fn lapse(
    now: Millis,
    rules: &LeaseRules,
    expires_at: Millis,
    granted_at: Millis,
    last_heartbeat: Millis,
    holder_status: &str,
) -> Option<Lapse> {
    if now < rules.not_before {
        return None;
    }
    let silent_for = now - last_heartbeat.max(granted_at);
    if holder_status == WorkerStatus::Terminated.as_str() {
        Some(Lapse::Deregistered)
    } else if silent_for > rules.heartbeat_timeout_ms {
        Some(Lapse::Silent { for_ms: silent_for })
    } else if expires_at < now {
        Some(Lapse::TtlPassed)
    } else {
        None
    }
}

/// The capabilities of `needed` that `worker` lacks.
fn missing_capabilities(worker: &Worker, needed: &[String]) -> Vec<String> {
    needed
        .iter()
        .filter(|c| !worker.capabilities.contains(c))
        .cloned()
        .collect()
}

/// Whether `worker` may take `task` at `now`, ignoring capacity and
/// existing claims; the refusal says which rule refused it.
pub fn eligibility(wf: &Workflow, worker: &Worker, task: &Task, now: Millis) -> Result<(), Error> {
    if let Some(run_at) = task.run_at.filter(|t| *t > now) {
        return Err(Error::conflict(
            "task_not_due",
            format!(
                "task {} may not be claimed before {}",
                task.vtid,
                crate::time::to_rfc3339(run_at)
            ),
        ));
    }
    if task.cancel_requested_at.is_some() {
        return Err(Error::conflict(
            "task_cancelled",
            format!("task {} is being cancelled", task.vtid),
        ));
    }
    if !wf.is_claimable(&task.state) {
        let code = if task.state == wf.draft_state {
            "task_not_dispatched"
        } else {
            "task_not_claimable"
        };
        return Err(Error::conflict(
            code,
            format!(
                "task {} is {:?} and cannot be claimed",
                task.vtid, task.state
            ),
        ));
    }
    if let Some(agent) = &task.agent_id {
        if agent != &worker.agent_id {
            return Err(Error::forbidden(
                "wrong_agent",
                format!(
                    "task {} is for agent {agent:?}; this worker is {:?}",
                    task.vtid, worker.agent_id
                ),
            ));
        }
    }
    let mut needed = task.capabilities.clone();
    if wf.awaits_validator(&task.state) {
        needed.push(workflow::VALIDATOR_CAPABILITY.to_owned());
    }
    let missing = missing_capabilities(worker, &needed);
    if !missing.is_empty() {
        return Err(Error::forbidden(
            "missing_capabilities",
            format!(
                "worker lacks capabilities {missing:?} required by task {}",
                task.vtid
            ),
        ));
    }
    if wf.awaits_validator(&task.state)
        && task.builder_worker_id.as_deref() == Some(worker.worker_id.as_str())
    {
        return Err(Error::forbidden(
            "validator_is_builder",
            format!(
                "worker {} built task {} and cannot validate it",
                worker.worker_id, task.vtid
            ),
        ));
    }
    Ok(())
}

/// How a run ends: its final status and the reason its claim is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnding {
    pub status: RunStatus,
    pub reason: &'static str,
}

/// Whether `worker` may take `task` at `now` (the rules of a claim, without
/// capacity): what a worker token may read of a task it does not hold.
/// A delayed task the worker could take once it is due counts too; a task
/// of a workflow this build does not know, never.
pub fn may_take(worker: &Worker, task: &Task, now: Millis) -> bool {
    workflow::by_name(&task.workflow)
        .is_some_and(|wf| eligibility(wf, worker, task, task.run_at.unwrap_or(0).max(now)).is_ok())
}

/// Whether the report `event`, which moved the task to `to` (with the
/// transition's `trigger`, if any), ends the run that holds the task.
pub fn run_ending(
    wf: &Workflow,
    event: &str,
    to: &str,
    trigger: Option<&str>,
) -> Option<RunEnding> {
    let ending = |status, reason| Some(RunEnding { status, reason });
    if event == workflow::EXECUTION_FAILED {
        ending(RunStatus::Failed, "failed")
    } else if event == workflow::EXECUTION_CANCELLED || to == workflow::CANCELLED {
        ending(RunStatus::Cancelled, "cancelled")
    } else if trigger == Some("validate") {
        ending(RunStatus::Done, "completed; awaiting validation")
    } else if event == workflow::VALIDATOR_PASSED || event == workflow::VALIDATOR_FAILED {
        ending(RunStatus::Done, "validated")
    } else if wf.is_final(to) {
        ending(RunStatus::Done, "completed")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: LeaseRules = LeaseRules {
        ttl_ms: 60_000,
        heartbeat_timeout_ms: 30_000,
        not_before: 1_000_000,
        cancel_grace_ms: 10_000,
    };

    #[test]
    fn a_lease_lapses_for_the_first_reason_that_holds() {
        let now = 2_000_000;
        // Live: heard from recently, TTL ahead.
        assert_eq!(lapse(now, &RULES, now + 1, 0, now - 1_000, "active"), None);
        // Deregistered wins over silence and TTL.
        assert_eq!(
            lapse(now, &RULES, now - 1, 0, now - 99_000, "terminated"),
            Some(Lapse::Deregistered)
        );
        // Silence wins over TTL, and says for how long.
        let silent = lapse(now, &RULES, now - 1, 0, now - 45_000, "active");
        assert_eq!(silent, Some(Lapse::Silent { for_ms: 45_000 }));
        assert_eq!(silent.unwrap().to_string(), "no heartbeat for 45s");
        // Exactly at the timeout is not yet silent; the TTL is.
        assert_eq!(
            lapse(now, &RULES, now - 1, 0, now - 30_000, "active"),
            Some(Lapse::TtlPassed)
        );
        assert_eq!(lapse(now, &RULES, now, 0, now, "active"), None);
    }

    #[test]
    fn a_new_claim_is_silent_only_from_its_grant() {
        let now = 2_000_000;
        // The worker was last heard from 45 s ago, and asked for work 1 s
        // ago: the claim granted then is live.
        assert_eq!(
            lapse(now, &RULES, now + 1, now - 1_000, now - 45_000, "active"),
            None
        );
        // Silent 30 s after the grant (no heartbeat since) it lapses, and
        // says for how long since it was last heard from: the grant.
        assert_eq!(
            lapse(now, &RULES, now + 1, now - 30_001, now - 45_000, "active"),
            Some(Lapse::Silent { for_ms: 30_001 })
        );
        // A heartbeat after the grant counts from the heartbeat.
        assert_eq!(
            lapse(now, &RULES, now + 1, now - 40_000, now - 1_000, "active"),
            None
        );
        // A grant does not revive a deregistered holder.
        assert_eq!(
            lapse(now, &RULES, now + 1, now, now - 45_000, "terminated"),
            Some(Lapse::Deregistered)
        );
    }

    #[test]
    fn nothing_lapses_within_the_start_grace() {
        let now = RULES.not_before - 1;
        assert_eq!(lapse(now, &RULES, 0, 0, 0, "terminated"), None);
        assert_eq!(
            lapse(RULES.not_before, &RULES, 0, 0, 0, "terminated"),
            Some(Lapse::Deregistered)
        );
    }

    #[test]
    fn reports_end_runs_as_the_workflow_says() {
        let wf = workflow::by_name("simple").unwrap();
        let end = |event, to| run_ending(wf, event, to, None);
        assert_eq!(
            end(workflow::EXECUTION_COMPLETED, workflow::DONE),
            Some(RunEnding {
                status: RunStatus::Done,
                reason: "completed"
            })
        );
        assert_eq!(
            end(workflow::EXECUTION_FAILED, workflow::FAILED)
                .unwrap()
                .status,
            RunStatus::Failed
        );
        // A retried failure moves the task back to the queue, but the run ends failed.
        assert_eq!(
            end(workflow::EXECUTION_FAILED, "pending").unwrap().status,
            RunStatus::Failed
        );
        assert_eq!(
            end(workflow::EXECUTION_CANCELLED, workflow::CANCELLED)
                .unwrap()
                .status,
            RunStatus::Cancelled
        );
        assert_eq!(end(workflow::EXECUTION_STARTED, "running"), None);
        assert_eq!(
            run_ending(
                wf,
                workflow::EXECUTION_COMPLETED,
                "review",
                Some("validate")
            ),
            Some(RunEnding {
                status: RunStatus::Done,
                reason: "completed; awaiting validation"
            })
        );
    }
}
