//! Retries: what happens to a task when one of its runs ends without
//! success. A pure rule over the run's status, the task's retry policy and
//! how many attempts already failed, so that every store (and a reader of
//! the code) applies the same one.
//!
//! A task without a policy keeps the connector contract's behaviour: a failure is final,
//! and a claim that lapsed puts the task straight back in the queue. With a
//! policy (`max_attempts`, set on the task or inherited from its agent) a
//! failure, a timeout or a lost claim each use up an attempt; the next one
//! waits for an exponential backoff with jitter, bounded by `max_ms`.

use serde::{Deserialize, Serialize};

use crate::status::RunStatus;
use crate::time::Millis;

/// Upper bound for `max_attempts`: a loop that fails forever is a bug, not a policy.
pub const MAX_ATTEMPTS_LIMIT: i64 = 100;
/// Upper bound for any backoff: one day.
pub const MAX_BACKOFF_MS: i64 = 86_400_000;

/// How long to wait before the next attempt: `initial_ms`, doubled after
/// each failure, never more than `max_ms`; the wait is then drawn between
/// half of that and all of it, so that tasks that failed together do not
/// come back together.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct RetryBackoff {
    /// Wait before the second attempt, in milliseconds.
    #[serde(default = "default_initial_ms")]
    pub initial_ms: i64,
    /// The longest wait, in milliseconds.
    #[serde(default = "default_max_ms")]
    pub max_ms: i64,
}

fn default_initial_ms() -> i64 {
    10_000
}

fn default_max_ms() -> i64 {
    600_000
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff {
            initial_ms: default_initial_ms(),
            max_ms: default_max_ms(),
        }
    }
}

impl RetryBackoff {
    /// Checks the bounds; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if !(0..=MAX_BACKOFF_MS).contains(&self.initial_ms) {
            return Err(format!(
                "retry_backoff.initial_ms must be between 0 and {MAX_BACKOFF_MS}"
            ));
        }
        if !(self.initial_ms..=MAX_BACKOFF_MS).contains(&self.max_ms) {
            return Err(format!(
                "retry_backoff.max_ms must be between initial_ms and {MAX_BACKOFF_MS}"
            ));
        }
        Ok(())
    }

    /// The wait after the `failures`-th failure (1 for the first), with
    /// `jitter` in `[0, 1)` choosing a point between half and all of it.
    pub fn delay_ms(&self, failures: i64, jitter: f64) -> i64 {
        let doublings = (failures.max(1) - 1).min(62) as u32;
        let base = self
            .initial_ms
            .max(0)
            .saturating_mul(1_i64.checked_shl(doublings).unwrap_or(i64::MAX))
            .min(self.max_ms.max(0));
        let jitter = if jitter.is_finite() {
            jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let half = base / 2;
        (half + ((base - half) as f64 * jitter) as i64).min(base)
    }
}

/// A task's retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 means no retry).
    pub max_attempts: i64,
    pub backoff: RetryBackoff,
}

/// Checks `max_attempts`.
pub fn validate_max_attempts(n: i64) -> Result<(), String> {
    if (1..=MAX_ATTEMPTS_LIMIT).contains(&n) {
        Ok(())
    } else {
        Err(format!(
            "max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT}"
        ))
    }
}

/// How a run ended, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnding {
    pub status: RunStatus,
    /// The worker lost its claim (no heartbeat, TTL, deregistered) rather
    /// than reporting an end.
    pub claim_lost: bool,
    /// False when the worker said this failure is final (an exit code not
    /// listed in the agent's `retry_on_exit_codes`).
    pub retryable: bool,
    /// The task has a cancel request: nothing is retried.
    pub cancel_requested: bool,
}

/// What becomes of the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    /// Not a matter for retries: the workflow (or the cancel) decides.
    Workflow,
    /// Back in the queue at once, without using up an attempt (a lost claim
    /// on a task without a policy: the connector contract's rule).
    Requeue,
    /// A failed attempt; the next one may be claimed from `run_at`.
    Retry { run_at: Millis },
    /// A failed attempt and no attempt left (or a failure that must not be
    /// retried): the task ends `failed`.
    Fail,
}

/// The rule. `failed_before` counts the attempts of this task that already
/// failed (not this one).
pub fn after_run(
    policy: Option<&RetryPolicy>,
    failed_before: i64,
    ending: RunEnding,
    now: Millis,
    jitter: f64,
) -> AfterRun {
    match ending.status {
        RunStatus::Running | RunStatus::Done | RunStatus::Cancelled => AfterRun::Workflow,
        _ if ending.cancel_requested => AfterRun::Workflow,
        RunStatus::Failed => {
            let Some(policy) = policy else {
                return if ending.claim_lost {
                    AfterRun::Requeue
                } else {
                    AfterRun::Fail
                };
            };
            let failures = failed_before + 1;
            if ending.retryable && failures < policy.max_attempts {
                AfterRun::Retry {
                    run_at: now + policy.backoff.delay_ms(failures, jitter),
                }
            } else {
                AfterRun::Fail
            }
        }
    }
}

/// One attempt that failed, as the task records it.
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct AttemptFailure {
    /// The attempt number (the run's `attempt`).
    pub attempt: i64,
    pub run_id: String,
    /// Why it failed, in the worker's (or the lease's) words.
    pub reason: String,
    #[serde(with = "crate::time::serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub at: Millis,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> RunEnding {
        RunEnding {
            status: RunStatus::Failed,
            claim_lost: false,
            retryable: true,
            cancel_requested: false,
        }
    }

    fn policy(n: i64) -> RetryPolicy {
        RetryPolicy {
            max_attempts: n,
            backoff: RetryBackoff {
                initial_ms: 1000,
                max_ms: 5000,
            },
        }
    }

    #[test]
    fn without_a_policy_failures_are_final_and_lost_claims_requeue() {
        assert_eq!(after_run(None, 0, failed(), 0, 0.5), AfterRun::Fail);
        let lost = RunEnding {
            claim_lost: true,
            ..failed()
        };
        assert_eq!(after_run(None, 3, lost, 0, 0.5), AfterRun::Requeue);
    }

    #[test]
    fn retries_until_attempts_are_used_up() {
        let p = policy(3);
        assert_eq!(
            after_run(Some(&p), 0, failed(), 100, 1.0),
            AfterRun::Retry { run_at: 1100 }
        );
        assert_eq!(
            after_run(Some(&p), 1, failed(), 100, 1.0),
            AfterRun::Retry { run_at: 2100 }
        );
        assert_eq!(after_run(Some(&p), 2, failed(), 100, 1.0), AfterRun::Fail);
        let lost = RunEnding {
            claim_lost: true,
            ..failed()
        };
        assert!(matches!(
            after_run(Some(&p), 0, lost, 0, 0.0),
            AfterRun::Retry { .. }
        ));
    }

    #[test]
    fn cancels_successes_and_final_failures_are_not_retried() {
        let p = policy(5);
        for status in [RunStatus::Done, RunStatus::Cancelled] {
            let e = RunEnding { status, ..failed() };
            assert_eq!(after_run(Some(&p), 0, e, 0, 0.0), AfterRun::Workflow);
        }
        let cancelling = RunEnding {
            cancel_requested: true,
            ..failed()
        };
        assert_eq!(
            after_run(Some(&p), 0, cancelling, 0, 0.0),
            AfterRun::Workflow
        );
        let final_failure = RunEnding {
            retryable: false,
            ..failed()
        };
        assert_eq!(
            after_run(Some(&p), 0, final_failure, 0, 0.0),
            AfterRun::Fail
        );
    }

    #[test]
    fn backoff_doubles_is_bounded_and_jittered() {
        let b = RetryBackoff {
            initial_ms: 1000,
            max_ms: 5000,
        };
        assert_eq!(b.delay_ms(1, 1.0), 1000);
        assert_eq!(b.delay_ms(1, 0.0), 500);
        assert_eq!(b.delay_ms(2, 1.0), 2000);
        assert_eq!(b.delay_ms(3, 1.0), 4000);
        assert_eq!(b.delay_ms(4, 1.0), 5000);
        assert_eq!(b.delay_ms(80, 0.99), 4975);
        assert!((2500..=5000).contains(&b.delay_ms(1000, 0.3)));
        assert_eq!(b.delay_ms(2, f64::NAN), 1000);
        assert!(b.validate().is_ok());
        assert!(RetryBackoff {
            initial_ms: 10,
            max_ms: 5
        }
        .validate()
        .is_err());
        assert!(validate_max_attempts(0).is_err());
        assert!(validate_max_attempts(3).is_ok());
    }
}
