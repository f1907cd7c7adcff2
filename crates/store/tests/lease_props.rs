//! The lease rules as a state machine, on both databases.
//!
//! Random sequences of task creations, claims (by vtid and "the next
//! ones"), heartbeats, progress reports (under the right claim token, a
//! stale one, another task's, none, or a made-up one), transcript steps,
//! cancels, operator retries, deregistrations and re-registrations,
//! external events, sweeps and time passing are applied to the real store
//! and, beside it, to a small model of the README's rules (claim TTL,
//! heartbeat timeout, start grace, `claim_token` fencing, cancel grace,
//! retries). After every step the database must agree with the model and
//! keep these invariants, checked on what the store reports, not on the
//! model:
//!
//! - at most one active claim per task;
//! - a final task (done, failed, cancelled) never moves again, except an
//!   operator's retry of a failed one;
//! - a report under a stale or wrong token, or from a worker that does not
//!   hold the claim, is refused with `claim_stale` and appends nothing;
//! - one `task.state_changed` per state change, chained from the previous
//!   state to the current one;
//! - `seq` strictly increasing, with no event before the previous head;
//! - a task with a cancel request is either held or final: a cancel is
//!   never left waiting with nobody to carry it out.
//!
//! Time is the store's own clock (`Store::set_clock`), moved by the test:
//! leases lapse exactly when the rules say and a failing case replays the
//! same way. `PROPTEST_CASES` sets the cases per database (default 32).

mod common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;
use shepherd_core::event::{kind, Event, EventFilter};
use shepherd_core::retry::RetryBackoff;
use shepherd_core::transcript::{ActionContent, TranscriptStep};
use shepherd_core::workflow::{self, Outcome, Workflow, AUTOPILOT, SIMPLE};
use shepherd_core::Error;
use shepherd_store::{Applied, LeaseRules, NewTask, Registration, Store, WorkerFilter};

use common::{Kind, TestDb};

/// Where every case's clock starts (2026-01-01T00:00:00Z).
const T0: i64 = 1_767_225_600_000;
const MAX_TASKS: usize = 4;
const WORKERS: usize = 3;
const BACKOFF: RetryBackoff = RetryBackoff {
    initial_ms: 1_000,
    max_ms: 4_000,
};

// ----- operations -----

/// Who sends a report: the worker holding the task's claim, or a given one.
#[derive(Debug, Clone, Copy)]
enum By {
    Holder,
    Worker(u8),
}

/// Which claim token a report carries.
#[derive(Debug, Clone, Copy)]
enum Tok {
    /// The task's active claim's.
    Current,
    /// One of the task's released claims'.
    Old(u8),
    /// Another task's active claim's.
    OtherTask(u8),
    /// None (the connector contract's request shape; steps always carry one).
    Missing,
    /// One never granted.
    Garbage,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Started,
    Building,
    PrCreated,
    Completed,
    Failed {
        retryable: bool,
    },
    Cancelled,
    ValidatorPassed,
    ValidatorFailed,
    /// One of the events that move the task on from where it is (not a
    /// failure nor a cancel): without it the workflows' later states
    /// (review, validation, rework) are almost never reached.
    Next(u8),
}

impl Ev {
    fn name(self) -> &'static str {
        match self {
            Ev::Started => workflow::EXECUTION_STARTED,
            Ev::Building => "worker.building",
            Ev::PrCreated => "worker.pr.created",
            Ev::Completed => workflow::EXECUTION_COMPLETED,
            Ev::Failed { .. } => workflow::EXECUTION_FAILED,
            Ev::Cancelled => workflow::EXECUTION_CANCELLED,
            Ev::ValidatorPassed => workflow::VALIDATOR_PASSED,
            Ev::ValidatorFailed => workflow::VALIDATOR_FAILED,
            Ev::Next(_) => unreachable!("resolved by Ev::resolve"),
        }
    }

    /// `Next` as the event it stands for in a task's state.
    fn resolve(self, wf: &Workflow, state: &str) -> Ev {
        let Ev::Next(i) = self else {
            return self;
        };
        let onward: Vec<Ev> = [
            Ev::Started,
            Ev::Building,
            Ev::PrCreated,
            Ev::Completed,
            Ev::ValidatorPassed,
            Ev::ValidatorFailed,
        ]
        .into_iter()
        .filter(|e| matches!(wf.apply(state, e.name()), Outcome::Move { to, .. } if to != state))
        .collect();
        if onward.is_empty() {
            Ev::Started
        } else {
            onward[i as usize % onward.len()]
        }
    }
}

/// How far the clock moves.
#[derive(Debug, Clone, Copy)]
enum Adv {
    Tick,
    HalfTtl,
    Ttl,
    HalfTimeout,
    Timeout,
    Grace,
    Backoff,
}

#[derive(Debug, Clone)]
enum Op {
    Create {
        autopilot: bool,
        dispatch: bool,
        max_attempts: Option<i64>,
    },
    Dispatch {
        task: u8,
    },
    Claim {
        worker: u8,
        task: u8,
    },
    ClaimNext {
        worker: u8,
        max: u8,
    },
    Heartbeat {
        worker: u8,
    },
    Progress {
        by: By,
        task: u8,
        token: Tok,
        event: Ev,
    },
    Step {
        by: By,
        task: u8,
        token: Tok,
    },
    Cancel {
        task: u8,
    },
    Retry {
        task: u8,
    },
    Deregister {
        worker: u8,
    },
    Register {
        worker: u8,
    },
    External {
        task: u8,
    },
    Advance(Adv),
    Sweep,
}

/// One case: the lease rules in force, the workers, and the operations.
#[derive(Debug, Clone)]
struct Scenario {
    ttl_ms: i64,
    heartbeat_timeout_ms: i64,
    /// Whether the case starts inside the start grace (PRODUCT decision 5).
    start_grace: bool,
    /// Per worker: `validator` capability, `max_concurrent`.
    workers: Vec<(bool, i64)>,
    ops: Vec<Op>,
}

fn by() -> impl Strategy<Value = By> {
    prop_oneof![4 => Just(By::Holder), 1 => any::<u8>().prop_map(By::Worker)]
}

fn tok() -> impl Strategy<Value = Tok> {
    prop_oneof![
        10 => Just(Tok::Current),
        2 => any::<u8>().prop_map(Tok::Old),
        1 => any::<u8>().prop_map(Tok::OtherTask),
        2 => Just(Tok::Missing),
        1 => Just(Tok::Garbage),
    ]
}

fn ev() -> impl Strategy<Value = Ev> {
    prop_oneof![
        3 => Just(Ev::Started),
        2 => Just(Ev::Building),
        2 => Just(Ev::PrCreated),
        3 => Just(Ev::Completed),
        2 => any::<bool>().prop_map(|retryable| Ev::Failed { retryable }),
        1 => Just(Ev::Cancelled),
        2 => Just(Ev::ValidatorPassed),
        1 => Just(Ev::ValidatorFailed),
        10 => any::<u8>().prop_map(Ev::Next),
    ]
}

fn adv() -> impl Strategy<Value = Adv> {
    prop_oneof![
        Just(Adv::Tick),
        Just(Adv::HalfTtl),
        Just(Adv::Ttl),
        Just(Adv::HalfTimeout),
        Just(Adv::Timeout),
        Just(Adv::Grace),
        Just(Adv::Backoff),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let t = any::<u8>();
    let w = any::<u8>();
    prop_oneof![
        3 => (any::<bool>(), prop::bool::weighted(0.9), prop::option::of(1i64..=3)).prop_map(
            |(autopilot, dispatch, max_attempts)| Op::Create { autopilot, dispatch, max_attempts }
        ),
        1 => t.prop_map(|task| Op::Dispatch { task }),
        12 => (w, t).prop_map(|(worker, task)| Op::Claim { worker, task }),
        3 => (w, prop_oneof![1 => Just(0u8), 6 => Just(1), 2 => Just(2)])
            .prop_map(|(worker, max)| Op::ClaimNext { worker, max }),
        4 => w.prop_map(|worker| Op::Heartbeat { worker }),
        14 => (by(), t, tok(), ev()).prop_map(|(by, task, token, event)| Op::Progress { by, task, token, event }),
        3 => (by(), t, tok()).prop_map(|(by, task, token)| Op::Step { by, task, token }),
        1 => t.prop_map(|task| Op::Cancel { task }),
        1 => t.prop_map(|task| Op::Retry { task }),
        1 => w.prop_map(|worker| Op::Deregister { worker }),
        1 => w.prop_map(|worker| Op::Register { worker }),
        1 => t.prop_map(|task| Op::External { task }),
        3 => adv().prop_map(Op::Advance),
        2 => Just(Op::Sweep),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop_oneof![Just(1_000i64), Just(4_000)],
        prop_oneof![Just(2_000i64), Just(3_000)],
        any::<bool>(),
        prop::collection::vec((prop::bool::weighted(0.7), 1i64..=2), WORKERS),
        prop::collection::vec(op(), 1..40),
    )
        .prop_map(
            |(ttl_ms, heartbeat_timeout_ms, start_grace, workers, ops)| Scenario {
                ttl_ms,
                heartbeat_timeout_ms,
                start_grace,
                workers,
                ops,
            },
        )
}

// ----- the model -----

#[derive(Debug, Clone)]
struct MClaim {
    worker: usize,
    token: String,
    run_id: String,
    expires_at: i64,
    /// When it was granted: a grant is hearing from the holder.
    granted_at: i64,
    validate: bool,
    /// The run's cancel request.
    cancel_at: Option<i64>,
    steps: i64,
}

/// A released claim: its token and run stay stale forever.
#[derive(Debug, Clone)]
struct Old {
    worker: usize,
    token: String,
    run_id: String,
}

#[derive(Debug, Clone)]
struct MTask {
    vtid: String,
    wf: &'static Workflow,
    state: String,
    dispatched_at: Option<i64>,
    cancel_at: Option<i64>,
    attempts: i64,
    failures: i64,
    max_attempts: Option<i64>,
    run_at: Option<i64>,
    builder: Option<usize>,
    active: Option<MClaim>,
    old: Vec<Old>,
    /// Claims ever granted, per worker (what token-less reports depend on).
    held_by: Vec<i64>,
}

#[derive(Debug, Clone)]
struct MWorker {
    id: String,
    validator: bool,
    max: i64,
    status: &'static str,
    last_hb: i64,
}

/// What an operation did, beyond the state it left.
#[derive(Debug, Clone, Default)]
struct Effects {
    /// (task, from, to) in the order the rules apply them.
    transitions: Vec<(usize, String, String)>,
    granted: Vec<usize>,
    released: usize,
    expired: usize,
    /// Runs ended by this operation, and the status each must end with.
    ended_runs: Vec<(String, &'static str)>,
    /// Tasks whose retry was scheduled (their `run_at` is checked).
    retried: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    Workflow,
    Requeue,
    Retry,
    Fail,
}

#[derive(Debug, Clone)]
struct Model {
    now: i64,
    rules: LeaseRules,
    tasks: Vec<MTask>,
    workers: Vec<MWorker>,
    fx: Effects,
}

/// The error code the model expects, or success.
type Expect = Result<(), &'static str>;

impl Model {
    fn active_claims(&self, w: usize) -> i64 {
        self.tasks
            .iter()
            .filter(|t| matches!(&t.active, Some(c) if c.worker == w))
            .count() as i64
    }

    /// README: a lease lapses when its worker is gone, silent past the
    /// heartbeat timeout (counted from its last heartbeat or the claim's
    /// grant, whichever is later), or its TTL passed; never inside the
    /// start grace.
    fn lapsed(&self, c: &MClaim, last_hb: i64, status: &str) -> bool {
        if self.now < self.rules.not_before {
            return false;
        }
        status == "terminated"
            || self.now - last_hb.max(c.granted_at) > self.rules.heartbeat_timeout_ms
            || c.expires_at < self.now
    }

    /// Whether the lease of `t`'s active claim lapsed (nothing ended it yet).
    fn holder_lapsed(&self, t: usize) -> bool {
        self.tasks[t].active.as_ref().is_some_and(|c| {
            let holder = &self.workers[c.worker];
            self.lapsed(c, holder.last_hb, holder.status)
        })
    }

    fn set_state(&mut self, t: usize, to: &str) {
        let task = &mut self.tasks[t];
        if task.state != to {
            self.fx
                .transitions
                .push((t, task.state.clone(), to.to_owned()));
            task.state = to.to_owned();
        }
    }

    fn release(&mut self, t: usize, expired: bool, run_status: &'static str) -> MClaim {
        let c = self.tasks[t].active.take().expect("an active claim");
        self.tasks[t].old.push(Old {
            worker: c.worker,
            token: c.token.clone(),
            run_id: c.run_id.clone(),
        });
        if expired {
            self.fx.expired += 1;
        } else {
            self.fx.released += 1;
        }
        self.fx.ended_runs.push((c.run_id.clone(), run_status));
        c
    }

    fn decide(&self, t: usize, lost: bool, retryable: bool) -> After {
        let task = &self.tasks[t];
        if task.cancel_at.is_some() {
            return After::Workflow;
        }
        match task.max_attempts {
            None if lost => After::Requeue,
            None => After::Fail,
            Some(max) if retryable && task.failures + 1 < max => After::Retry,
            Some(_) => After::Fail,
        }
    }

    fn back_to(wf: &Workflow, c: &MClaim) -> &'static str {
        if c.validate {
            wf.review_state.unwrap_or(wf.dispatched_state)
        } else {
            wf.dispatched_state
        }
    }

    fn state_after(wf: &Workflow, c: &MClaim, d: After, otherwise: &'static str) -> &'static str {
        match d {
            After::Retry | After::Requeue => Self::back_to(wf, c),
            After::Fail => workflow::FAILED,
            After::Workflow => otherwise,
        }
    }

    fn record(&mut self, t: usize, d: After) {
        match d {
            After::Retry => {
                self.tasks[t].failures += 1;
                // Some time after now (the store draws it; `check` reads
                // it back and checks it against the backoff).
                self.tasks[t].run_at = Some(self.now + 1);
                self.fx.retried.push(t);
            }
            After::Fail => self.tasks[t].failures += 1,
            After::Workflow | After::Requeue => {}
        }
    }

    /// A lost lease: the run fails, the task goes back (or is cancelled,
    /// or uses up an attempt).
    fn expire(&mut self, t: usize) {
        let c = self.release(t, true, "failed");
        let wf = self.tasks[t].wf;
        if wf.is_final(&self.tasks[t].state) {
            return;
        }
        if self.tasks[t].cancel_at.is_some() {
            self.set_state(t, workflow::CANCELLED);
            return;
        }
        let d = self.decide(t, true, true);
        let to = Self::state_after(wf, &c, d, Self::back_to(wf, &c));
        self.set_state(t, to);
        self.record(t, d);
    }

    fn claim(&mut self, w: usize, t: usize) -> Expect {
        if self.workers[w].status == "terminated" {
            return Err("worker_terminated");
        }
        if let Some(c) = self.tasks[t].active.clone() {
            let holder = &self.workers[c.worker];
            if self.lapsed(&c, holder.last_hb, holder.status) {
                self.expire(t);
            } else {
                return Err("already_claimed");
            }
        }
        let task = &self.tasks[t];
        let wf = task.wf;
        if matches!(task.run_at, Some(at) if at > self.now) {
            return Err("task_not_due");
        }
        if task.cancel_at.is_some() {
            return Err("task_cancelled");
        }
        if !wf.is_claimable(&task.state) {
            return Err(if task.state == wf.draft_state {
                "task_not_dispatched"
            } else {
                "task_not_claimable"
            });
        }
        let validate = wf.awaits_validator(&task.state);
        if validate && !self.workers[w].validator {
            return Err("missing_capabilities");
        }
        if validate && task.builder == Some(w) {
            return Err("validator_is_builder");
        }
        if self.active_claims(w) >= self.workers[w].max {
            return Err("worker_at_capacity");
        }
        let now = self.now;
        let ttl = self.rules.ttl_ms;
        let task = &mut self.tasks[t];
        task.attempts += 1;
        task.run_at = None;
        task.held_by[w] += 1;
        task.active = Some(MClaim {
            worker: w,
            token: String::new(),
            run_id: String::new(),
            expires_at: now + ttl,
            granted_at: now,
            validate,
            cancel_at: None,
            steps: 0,
        });
        if !validate {
            task.builder = Some(w);
            self.set_state(t, wf.claimed_state);
        }
        self.fx.granted.push(t);
        Ok(())
    }

    /// The tasks `claim_next` hands out, best first.
    fn claim_next(&mut self, w: usize, max: i64) -> Expect {
        if self.workers[w].status == "terminated" {
            return Err("worker_terminated");
        }
        let free = (self.workers[w].max - self.active_claims(w)).max(0);
        if max < 1 {
            return Err("invalid_max");
        }
        if max > free {
            return Err("max_above_capacity");
        }
        let mut candidates: Vec<usize> = (0..self.tasks.len())
            .filter(|&t| {
                let task = &self.tasks[t];
                let review = task.wf.awaits_validator(&task.state);
                task.active.is_none()
                    && task.wf.is_claimable(&task.state)
                    && task.cancel_at.is_none()
                    && task.run_at.is_none_or(|at| at <= self.now)
                    && (!review || (self.workers[w].validator && task.builder != Some(w)))
            })
            .collect();
        candidates.sort_by_key(|&t| (self.tasks[t].dispatched_at, self.tasks[t].vtid.clone()));
        for t in candidates.into_iter().take(max as usize) {
            self.claim(w, t)
                .expect("an eligible task can be claimed by claim_next");
        }
        Ok(())
    }

    fn heartbeat(&mut self, w: usize) -> Expect {
        if self.workers[w].status == "terminated" {
            return Err("worker_terminated");
        }
        let (prev_hb, prev_status) = (self.workers[w].last_hb, self.workers[w].status);
        self.workers[w].last_hb = self.now;
        self.workers[w].status = "active";
        for t in 0..self.tasks.len() {
            if let Some(c) = self.tasks[t].active.clone() {
                if c.worker == w && self.lapsed(&c, prev_hb, prev_status) {
                    self.expire(t);
                }
            }
        }
        let extended = self.now + self.rules.ttl_ms;
        for task in &mut self.tasks {
            if let Some(c) = task.active.as_mut().filter(|c| c.worker == w) {
                c.expires_at = c.expires_at.max(extended);
            }
        }
        Ok(())
    }

    /// Whether `token` (None: no token) fences the active claim of `t` for `w`.
    fn fenced(&self, w: usize, t: usize, token: Option<&str>) -> bool {
        let task = &self.tasks[t];
        match &task.active {
            Some(c) if c.worker == w => match token {
                Some(tok) => tok == c.token,
                None => task.held_by[w] == 1,
            },
            _ => false,
        }
    }

    fn progress(&mut self, w: usize, t: usize, token: Option<&str>, ev: Ev) -> Expect {
        let wf = self.tasks[t].wf;
        let event = ev.name();
        if wf.apply(&self.tasks[t].state, event) == Outcome::Unknown {
            return Err("unknown_event");
        }
        if !self.fenced(w, t, token) {
            return Err("claim_stale");
        }
        // A lapsed lease is lapsed whoever touches it first: the holder's
        // report under a lease that lapsed is refused even though nothing
        // ended the claim yet (no sweep, heartbeat or claim since). The
        // refusal changes nothing; the next heartbeat, claim or sweep ends it.
        if self.holder_lapsed(t) {
            return Err("claim_stale");
        }
        self.apply_event(t, ev);
        Ok(())
    }

    /// `claims::apply_event`: the table decides, failures may be retried,
    /// and events that end the run release the claim.
    fn apply_event(&mut self, t: usize, ev: Ev) {
        let wf = self.tasks[t].wf;
        let event = ev.name();
        let (to, trigger) = match wf.apply(&self.tasks[t].state, event) {
            Outcome::Move { to, trigger } => (to, trigger),
            Outcome::NotFromHere | Outcome::Unknown => return,
        };
        let active = self.tasks[t].active.clone();
        let retry = match (&active, ev) {
            (Some(c), Ev::Failed { retryable }) => {
                Some((c.clone(), self.decide(t, false, retryable)))
            }
            _ => None,
        };
        let to = match &retry {
            Some((c, d)) => Self::state_after(wf, c, *d, to),
            None => to,
        };
        self.set_state(t, to);
        if let Some((_, d)) = retry {
            self.record(t, d);
        }
        let ending = match ev {
            Ev::Failed { .. } => Some("failed"),
            Ev::Cancelled => Some("cancelled"),
            _ if to == workflow::CANCELLED => Some("cancelled"),
            _ if trigger == Some("validate") => Some("done"),
            Ev::ValidatorPassed | Ev::ValidatorFailed => Some("done"),
            _ if wf.is_final(to) => Some("done"),
            _ => None,
        };
        if let (Some(_), Some(status)) = (active, ending) {
            self.release(t, false, status);
            // The run ended with a cancel pending: the cancel takes effect.
            if self.tasks[t].cancel_at.is_some() && !wf.is_final(&self.tasks[t].state) {
                self.set_state(t, workflow::CANCELLED);
            }
        }
    }

    fn step(&mut self, run_id: &str, token: &str, caller: usize) -> Expect {
        let Some(t) = self
            .tasks
            .iter()
            .position(|task| matches!(&task.active, Some(c) if c.run_id == run_id))
        else {
            return Err("claim_stale");
        };
        let c = self.tasks[t].active.as_ref().unwrap();
        // The same answer for "not your claim" as for a wrong token
        // (issue 18, item 5): nothing tells a caller its guess was right.
        if c.token != token || c.worker != caller {
            return Err("claim_stale");
        }
        // As for progress: a lapsed lease fences its steps out.
        if self.holder_lapsed(t) {
            return Err("claim_stale");
        }
        let validate = c.validate;
        self.tasks[t].active.as_mut().unwrap().steps += 1;
        let task = &self.tasks[t];
        if !validate && task.cancel_at.is_none() {
            if let Outcome::Move { to, .. } =
                task.wf.apply(&task.state, workflow::EXECUTION_STARTED)
            {
                self.set_state(t, to);
            }
        }
        Ok(())
    }

    fn cancel(&mut self, t: usize) -> Expect {
        let task = &mut self.tasks[t];
        if task.wf.is_final(&task.state) {
            return Err("task_finished");
        }
        match task.active.as_mut() {
            Some(c) => {
                if task.cancel_at.is_none() {
                    task.cancel_at = Some(self.now);
                    c.cancel_at = c.cancel_at.or(Some(self.now));
                }
            }
            None => {
                task.cancel_at = Some(self.now);
                self.set_state(t, workflow::CANCELLED);
            }
        }
        Ok(())
    }

    fn retry(&mut self, t: usize) -> Expect {
        if self.tasks[t].state != workflow::FAILED && self.tasks[t].state != workflow::CANCELLED {
            return Err("task_not_failed");
        }
        self.tasks[t].cancel_at = None;
        // A draft cancelled before its dispatch is dispatched by the retry.
        if self.tasks[t].dispatched_at.is_none() {
            self.tasks[t].dispatched_at = Some(self.now);
        }
        let to = self.tasks[t].wf.dispatched_state;
        self.set_state(t, to);
        Ok(())
    }

    fn deregister(&mut self, w: usize) -> Expect {
        if self.workers[w].status == "terminated" {
            return Err("worker_terminated");
        }
        self.workers[w].status = "terminated";
        for t in 0..self.tasks.len() {
            if matches!(&self.tasks[t].active, Some(c) if c.worker == w) {
                self.expire(t);
            }
        }
        Ok(())
    }

    fn register(&mut self, w: usize) -> Expect {
        self.workers[w].status = "active";
        self.workers[w].last_hb = self.now;
        Ok(())
    }

    fn sweep(&mut self) -> (u64, u64, u64) {
        let (mut expired, mut cancelled, mut inactive) = (0, 0, 0);
        let (now, r) = (self.now, self.rules);
        for t in 0..self.tasks.len() {
            let Some(c) = self.tasks[t].active.clone() else {
                continue;
            };
            let holder = self.workers[c.worker].clone();
            let grace_over = matches!(c.cancel_at, Some(at) if at < now - r.cancel_grace_ms);
            let silent_since = now - r.heartbeat_timeout_ms;
            let selected = c.expires_at < now
                || (holder.last_hb < silent_since && c.granted_at < silent_since)
                || grace_over;
            if !selected {
                continue;
            }
            if grace_over {
                self.release(t, false, "cancelled");
                self.set_state(t, workflow::CANCELLED);
                cancelled += 1;
            } else if self.lapsed(&c, holder.last_hb, holder.status) {
                self.expire(t);
                expired += 1;
            }
        }
        if now >= r.not_before {
            for w in &mut self.workers {
                if w.status == "active" && w.last_hb < now - r.heartbeat_timeout_ms {
                    w.status = "inactive";
                    inactive += 1;
                }
            }
        }
        (expired, cancelled, inactive)
    }
}

// ----- running a case -----

/// Fails the case with a message (proptest then shrinks it).
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// The outcome of one operation against the store, reduced to what the
/// model predicts.
enum Got {
    Skipped,
    /// Success, with whatever the store handed out that the model needs.
    Done(Done),
    Refused(&'static str),
}

enum Done {
    Nothing,
    /// Grants, in order: (vtid, token, run id).
    Grants(Vec<(String, String, String)>),
    Applied(Box<Applied>),
    Held(Vec<String>),
    Swept(u64, u64, u64),
}

fn code<T>(r: Result<T, Error>) -> Result<T, &'static str> {
    r.map_err(|e| e.code)
}

fn outcome<T>(r: Result<T, &'static str>, f: impl FnOnce(T) -> Done) -> Got {
    match r {
        Ok(v) => Got::Done(f(v)),
        Err(c) => Got::Refused(c),
    }
}

/// Whether a report carries a token that cannot be current, whoever sends it.
fn surely_stale(model: &Model, t: usize, token: Option<&str>) -> bool {
    match token {
        None => false,
        Some(tok) => model.tasks[t]
            .active
            .as_ref()
            .is_none_or(|c| c.token != tok),
    }
}

fn resolve_token(model: &Model, t: usize, tok: Tok) -> Option<String> {
    let task = &model.tasks[t];
    let garbage = || Some(format!("sct_{}", "0".repeat(32)));
    match tok {
        Tok::Current => match &task.active {
            Some(c) => Some(c.token.clone()),
            None => garbage(),
        },
        Tok::Old(k) if !task.old.is_empty() => {
            Some(task.old[k as usize % task.old.len()].token.clone())
        }
        Tok::Old(_) => garbage(),
        Tok::OtherTask(k) => {
            let others: Vec<&MTask> = model
                .tasks
                .iter()
                .enumerate()
                .filter(|(i, o)| *i != t && o.active.is_some())
                .map(|(_, o)| o)
                .collect();
            if others.is_empty() {
                garbage()
            } else {
                Some(
                    others[k as usize % others.len()]
                        .active
                        .as_ref()
                        .unwrap()
                        .token
                        .clone(),
                )
            }
        }
        Tok::Missing => None,
        Tok::Garbage => garbage(),
    }
}

fn sender(model: &Model, t: usize, by: By) -> usize {
    match (by, &model.tasks[t].active) {
        (By::Holder, Some(c)) => c.worker,
        (By::Holder, None) => match model.tasks[t].old.last() {
            Some(o) => o.worker,
            None => 0,
        },
        (By::Worker(i), _) => i as usize % model.workers.len(),
    }
}

fn one_step() -> TranscriptStep {
    TranscriptStep::Action {
        content: vec![ActionContent::Text {
            text: "working".into(),
        }],
    }
}

struct Case {
    store: Store,
    model: Model,
    head: i64,
    /// Per task: the state last read from the store, and whether final.
    seen: Vec<String>,
    created: usize,
    /// Prefixes this case's ids (cases may share a database).
    prefix: String,
    log: Vec<String>,
    /// The task an operator retried in this step (it may leave `failed`).
    operator_retry: Option<usize>,
}

/// Where the cases of one test run. SQLite: a new database per case.
/// PostgreSQL: one schema per test (a new schema per case costs more than
/// the case), each case under its own agent, with its own task and worker
/// ids, leaving no claim behind (see [`run_case`]).
struct Bench {
    kind: Kind,
    shared: Option<(TestDb, Store)>,
    cases: std::sync::atomic::AtomicUsize,
}

impl Bench {
    async fn new(kind: Kind) -> Bench {
        let shared = match kind {
            Kind::Sqlite => None,
            Kind::Postgres => {
                let db = TestDb::new(kind).await;
                let store = db.open().await;
                Some((db, store))
            }
        };
        Bench {
            kind,
            shared,
            cases: Default::default(),
        }
    }

    async fn close(self) {
        if let Some((db, store)) = self.shared {
            store.close();
            drop_schema(&db).await;
        }
    }
}

async fn run_case(bench: &Bench, s: Scenario) -> Result<(), String> {
    let n = bench
        .cases
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let prefix = format!("c{n}-");
    match &bench.shared {
        None => {
            let db = TestDb::new(bench.kind).await;
            let store = db.open().await;
            let result = run_ops(&store, &s, &prefix).await;
            store.close();
            result
        }
        Some((_, store)) => {
            let result = run_ops(store, &s, &prefix).await;
            // Whatever the case left held goes back, so that no later
            // case's sweep meets it (its tasks are for its own agent, so
            // no later worker is offered them).
            store.set_clock(None);
            for i in 0..s.workers.len() {
                let _ = store
                    .deregister_worker(&format!("{prefix}w{i}"), None)
                    .await;
            }
            result
        }
    }
}

async fn drop_schema(db: &TestDb) {
    let Some(schema) = db.config().pg_schema else {
        return;
    };
    if let Ok((client, conn)) =
        tokio_postgres::connect(&common::pg_url(), tokio_postgres::NoTls).await
    {
        let handle = tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
        drop(client);
        let _ = handle.await;
    }
}

async fn run_ops(store: &Store, s: &Scenario, prefix: &str) -> Result<(), String> {
    let rules = LeaseRules {
        ttl_ms: s.ttl_ms,
        heartbeat_timeout_ms: s.heartbeat_timeout_ms,
        not_before: if s.start_grace {
            T0 + s.heartbeat_timeout_ms
        } else {
            0
        },
        cancel_grace_ms: 500,
    };
    store.set_clock(Some(T0));
    let mut workers = Vec::new();
    for (i, (validator, max)) in s.workers.iter().enumerate() {
        let id = format!("{prefix}w{i}");
        register(store, &id, &agent(prefix), *validator, *max).await?;
        workers.push(MWorker {
            id,
            validator: *validator,
            max: *max,
            status: "active",
            last_hb: T0,
        });
    }
    let head = store.head().await.map_err(|e| e.to_string())?;
    let mut case = Case {
        store: store.clone(),
        model: Model {
            now: T0,
            rules,
            tasks: Vec::new(),
            workers,
            fx: Effects::default(),
        },
        head,
        seen: Vec::new(),
        created: 0,
        prefix: prefix.to_owned(),
        log: Vec::new(),
        operator_retry: None,
    };
    for op in &s.ops {
        case.log.push(format!("{op:?} @{}", case.model.now - T0));
        if let Err(e) = case.step(op).await {
            return Err(format!("{e}\nafter:\n  {}", case.log.join("\n  ")));
        }
    }
    Ok(())
}

fn agent(prefix: &str) -> String {
    format!("{prefix}agent")
}

async fn register(
    store: &Store,
    id: &str,
    agent: &str,
    validator: bool,
    max: i64,
) -> Result<(), String> {
    store
        .register_worker(Registration {
            worker_id: Some(id.into()),
            agent_id: agent.into(),
            worker_type: "builtin".into(),
            max_concurrent: max,
            capabilities: if validator {
                vec![workflow::VALIDATOR_CAPABILITY.to_owned()]
            } else {
                Vec::new()
            },
            ..Default::default()
        })
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl Case {
    fn task_ix(&self, i: u8) -> Option<usize> {
        (!self.model.tasks.is_empty()).then(|| i as usize % self.model.tasks.len())
    }

    /// Task `i` among those `pick` prefers, if there are any; else among all.
    /// Random indexes alone mostly hit tasks nobody holds, and the deep
    /// paths (validation, retries, cancel while held) would rarely run.
    fn task_among(&self, i: u8, pick: impl Fn(&MTask) -> bool) -> Option<usize> {
        let preferred: Vec<usize> = (0..self.model.tasks.len())
            .filter(|&t| pick(&self.model.tasks[t]))
            .collect();
        if preferred.is_empty() {
            self.task_ix(i)
        } else {
            Some(preferred[i as usize % preferred.len()])
        }
    }

    /// The task a report is about: for the holder, a held one.
    fn report_task(&self, by: By, i: u8) -> Option<usize> {
        match by {
            By::Holder => self.task_among(i, |t| t.active.is_some()),
            By::Worker(_) => self.task_ix(i),
        }
    }

    fn worker_ix(&self, i: u8) -> usize {
        i as usize % self.model.workers.len()
    }

    async fn step(&mut self, op: &Op) -> Result<(), String> {
        let store = self.store.clone();
        let rules = self.model.rules;
        let mut before = self.model.clone();
        before.fx = Effects::default();
        let mut m = before.clone();
        let mut swept = None;
        store.set_clock(Some(m.now));
        // Reports that must be refused as stale whatever the model says.
        let mut must_be_stale = false;
        let (expect, got): (Expect, Got) = match *op {
            Op::Advance(a) => {
                m.now += match a {
                    Adv::Tick => 1,
                    Adv::HalfTtl => rules.ttl_ms / 2,
                    Adv::Ttl => rules.ttl_ms + 1,
                    Adv::HalfTimeout => rules.heartbeat_timeout_ms / 2,
                    Adv::Timeout => rules.heartbeat_timeout_ms + 1,
                    Adv::Grace => rules.cancel_grace_ms + 1,
                    Adv::Backoff => BACKOFF.max_ms,
                };
                self.model = m;
                return Ok(());
            }
            Op::Create {
                autopilot,
                dispatch,
                max_attempts,
            } => {
                if m.tasks.len() >= MAX_TASKS {
                    (Ok(()), Got::Skipped)
                } else {
                    let vtid = format!("{}T{:02}", self.prefix, self.created);
                    self.created += 1;
                    let wf: &'static Workflow = if autopilot { &AUTOPILOT } else { &SIMPLE };
                    let got = store
                        .create_task(NewTask {
                            vtid: Some(vtid.clone()),
                            title: format!("Task {vtid}"),
                            spec: "Do it.".into(),
                            workflow: Some(wf.name.into()),
                            agent_id: Some(agent(&self.prefix)),
                            dispatch,
                            max_attempts,
                            retry_backoff: max_attempts.map(|_| BACKOFF),
                            ..Default::default()
                        })
                        .await;
                    m.tasks.push(MTask {
                        vtid,
                        wf,
                        state: wf.draft_state.to_owned(),
                        dispatched_at: None,
                        cancel_at: None,
                        attempts: 0,
                        failures: 0,
                        max_attempts,
                        run_at: None,
                        builder: None,
                        active: None,
                        old: Vec::new(),
                        held_by: vec![0; m.workers.len()],
                    });
                    self.seen.push(wf.draft_state.to_owned());
                    let t = m.tasks.len() - 1;
                    if dispatch {
                        m.tasks[t].dispatched_at = Some(m.now);
                        m.set_state(t, wf.dispatched_state);
                    }
                    (Ok(()), outcome(code(got), |_| Done::Nothing))
                }
            }
            Op::Dispatch { task } => match self.task_ix(task) {
                None => (Ok(()), Got::Skipped),
                Some(t) => {
                    let got = store.dispatch_task(&m.tasks[t].vtid).await;
                    let wf = m.tasks[t].wf;
                    let expect = if m.tasks[t].state == wf.draft_state {
                        m.tasks[t].dispatched_at = Some(m.now);
                        m.set_state(t, wf.dispatched_state);
                        Ok(())
                    } else {
                        Err("already_dispatched")
                    };
                    (expect, outcome(code(got), |_| Done::Nothing))
                }
            },
            Op::Claim { worker, task } => {
                match self.task_among(task, |t| t.active.is_none() && t.wf.is_claimable(&t.state)) {
                    None => (Ok(()), Got::Skipped),
                    Some(t) => {
                        let w = self.worker_ix(worker);
                        let got = store
                            .claim_task(&m.workers[w].id, &m.tasks[t].vtid, rules)
                            .await;
                        (
                            m.claim(w, t),
                            outcome(code(got), |g| {
                                Done::Grants(vec![(g.task.vtid, g.claim_token, g.claim.run_id)])
                            }),
                        )
                    }
                }
            }
            Op::ClaimNext { worker, max } => {
                let w = self.worker_ix(worker);
                let got = store.claim_next(&m.workers[w].id, max as i64, rules).await;
                (
                    m.claim_next(w, max as i64),
                    outcome(code(got), |gs| {
                        Done::Grants(
                            gs.into_iter()
                                .map(|g| (g.task.vtid, g.claim_token, g.claim.run_id))
                                .collect(),
                        )
                    }),
                )
            }
            Op::Heartbeat { worker } => {
                let w = self.worker_ix(worker);
                let got = store.heartbeat(&m.workers[w].id, rules).await;
                (
                    m.heartbeat(w),
                    outcome(code(got), |(_, held)| {
                        Done::Held(held.into_iter().map(|h| h.vtid).collect())
                    }),
                )
            }
            Op::Progress {
                by,
                task,
                token,
                event,
            } => match self.report_task(by, task) {
                None => (Ok(()), Got::Skipped),
                Some(t) => {
                    let event = event.resolve(m.tasks[t].wf, &m.tasks[t].state);
                    let w = sender(&m, t, by);
                    let tok = resolve_token(&m, t, token);
                    must_be_stale = (surely_stale(&m, t, tok.as_deref())
                        || (m.holder_lapsed(t) && m.fenced(w, t, tok.as_deref())))
                        && m.tasks[t].wf.knows_event(event.name());
                    let metadata = match event {
                        Ev::Failed { retryable: false } => json!({ "retryable": false }),
                        _ => json!({}),
                    };
                    let got = store
                        .progress(
                            &m.workers[w].id,
                            &m.tasks[t].vtid,
                            tok.clone(),
                            event.name(),
                            Some(event.name().into()),
                            metadata,
                            None,
                            rules,
                        )
                        .await;
                    (
                        m.progress(w, t, tok.as_deref(), event),
                        outcome(code(got), |a| Done::Applied(Box::new(a))),
                    )
                }
            },
            Op::Step { by, task, token } => match self.report_task(by, task) {
                None => (Ok(()), Got::Skipped),
                Some(t) => {
                    // Which run the step names: a released one for an old
                    // token, else the task's active run.
                    let (run_id, tok) = match token {
                        Tok::Old(k) if !m.tasks[t].old.is_empty() => {
                            let o = &m.tasks[t].old[k as usize % m.tasks[t].old.len()];
                            (o.run_id.clone(), o.token.clone())
                        }
                        _ => match &m.tasks[t].active {
                            Some(c) => (
                                c.run_id.clone(),
                                resolve_token(&m, t, token)
                                    .filter(|_| !matches!(token, Tok::Missing))
                                    .unwrap_or_else(|| "sct_missing".into()),
                            ),
                            None => match m.tasks[t].old.last() {
                                Some(o) => (o.run_id.clone(), o.token.clone()),
                                None => return Ok(()),
                            },
                        },
                    };
                    let w = sender(&m, t, by);
                    must_be_stale = !m.tasks.iter().enumerate().any(|(i, task)| {
                        matches!(&task.active, Some(c) if c.run_id == run_id && c.token == tok && c.worker == w)
                            && !m.holder_lapsed(i)
                    });
                    let index = m
                        .tasks
                        .iter()
                        .find_map(|task| task.active.as_ref().filter(|c| c.run_id == run_id))
                        .map_or(0, |c| c.steps);
                    let got = store
                        .append_steps(
                            &run_id,
                            &tok,
                            Some(m.workers[w].id.clone()),
                            index,
                            vec![one_step()],
                            rules,
                        )
                        .await;
                    if let Ok(ack) = &got {
                        ensure!(
                            ack.accepted == 1 && ack.next_index == index + 1,
                            "step at {index} acknowledged as {ack:?}"
                        );
                    }
                    (
                        m.step(&run_id, &tok, w),
                        outcome(code(got), |_| Done::Nothing),
                    )
                }
            },
            // Half the cancels are of a held task (the grace period path).
            Op::Cancel { task } => match if task % 2 == 0 {
                self.task_among(task / 2, |t| t.active.is_some())
            } else {
                self.task_ix(task / 2)
            } {
                None => (Ok(()), Got::Skipped),
                Some(t) => {
                    let got = store.cancel_task(&m.tasks[t].vtid, None).await;
                    (m.cancel(t), outcome(code(got), |_| Done::Nothing))
                }
            },
            Op::Retry { task } => match self.task_among(task, |t| t.state == workflow::FAILED) {
                None => (Ok(()), Got::Skipped),
                Some(t) => {
                    let got = store.retry_task(&m.tasks[t].vtid).await;
                    let expect = m.retry(t);
                    if expect.is_ok() {
                        // The one move a final task may make.
                        self.operator_retry = Some(t);
                    }
                    (expect, outcome(code(got), |_| Done::Nothing))
                }
            },
            Op::Deregister { worker } => {
                let w = self.worker_ix(worker);
                let got = store.deregister_worker(&m.workers[w].id, None).await;
                (m.deregister(w), outcome(code(got), |_| Done::Nothing))
            }
            Op::Register { worker } => {
                let w = self.worker_ix(worker);
                let (validator, max) = (m.workers[w].validator, m.workers[w].max);
                let got = register(
                    &store,
                    &m.workers[w].id,
                    &agent(&self.prefix),
                    validator,
                    max,
                )
                .await;
                ensure!(got.is_ok(), "registration refused: {got:?}");
                (m.register(w), Got::Done(Done::Nothing))
            }
            Op::External { task } => match self.task_ix(task) {
                None => (Ok(()), Got::Skipped),
                Some(t) => {
                    let event = "github.pull_request.opened";
                    let got = store
                        .task_event(&m.tasks[t].vtid, event, None, json!({}))
                        .await;
                    let expect = if m.tasks[t].wf.knows_event(event) {
                        // Only autopilot knows it: building → pr_created.
                        let wf = m.tasks[t].wf;
                        if let Outcome::Move { to, .. } = wf.apply(&m.tasks[t].state, event) {
                            m.set_state(t, to);
                        }
                        Ok(())
                    } else {
                        Err("unknown_event")
                    };
                    (expect, outcome(code(got), |a| Done::Applied(Box::new(a))))
                }
            },
            Op::Sweep => {
                let got = store.sweep(rules).await;
                swept = Some(m.sweep());
                (
                    Ok(()),
                    outcome(code(got), |r| {
                        Done::Swept(r.expired, r.cancelled, r.workers_inactive)
                    }),
                )
            }
        };
        match (&expect, &got) {
            (_, Got::Skipped) => return Ok(()),
            (Ok(()), Got::Done(done)) => {
                match done {
                    Done::Grants(grants) => {
                        let want: Vec<&str> =
                            m.fx.granted
                                .iter()
                                .map(|&t| m.tasks[t].vtid.as_str())
                                .collect();
                        let have: Vec<&str> = grants.iter().map(|g| g.0.as_str()).collect();
                        ensure!(want == have, "granted {have:?}, the model {want:?}");
                        for (vtid, token, run_id) in grants {
                            let t = m.tasks.iter().position(|x| &x.vtid == vtid).unwrap();
                            let c = m.tasks[t].active.as_mut().unwrap();
                            c.token = token.clone();
                            c.run_id = run_id.clone();
                        }
                    }
                    Done::Applied(applied) => {
                        let (task, rejected) = match applied.as_ref() {
                            Applied::Moved { task, .. } => (task, false),
                            Applied::Rejected { task, .. } => (task, true),
                        };
                        ensure!(
                            task.state == model_state(&m, &task.vtid),
                            "answered state {:?}, the model {:?} (rejected: {rejected})",
                            task.state,
                            model_state(&m, &task.vtid)
                        );
                    }
                    Done::Held(held) => {
                        let w = match op {
                            Op::Heartbeat { worker } => self.worker_ix(*worker),
                            _ => unreachable!(),
                        };
                        let mut have = held.clone();
                        have.sort();
                        let mut want: Vec<String> = m
                            .tasks
                            .iter()
                            .filter(|t| matches!(&t.active, Some(c) if c.worker == w))
                            .map(|t| t.vtid.clone())
                            .collect();
                        want.sort();
                        ensure!(have == want, "heartbeat holds {have:?}, the model {want:?}");
                    }
                    Done::Swept(e, c, i) => {
                        let want = swept.unwrap();
                        ensure!(
                            (*e, *c, *i) == want,
                            "sweep (expired, cancelled, inactive) = {:?}, the model {want:?}",
                            (e, c, i)
                        );
                    }
                    Done::Nothing => {}
                }
                for (t, from, to) in &m.fx.transitions {
                    let name = format!("~ {} {from} -> {to}", m.tasks[*t].wf.name);
                    note(name);
                }
                self.model = m;
            }
            (Err(want), Got::Refused(have)) => {
                ensure!(
                    want == have,
                    "refused with {have:?}, the model expected {want:?}"
                );
                self.model = before;
            }
            (want, Got::Refused(have)) => {
                return Err(format!(
                    "refused with {have:?}, the model expected {want:?}"
                ));
            }
            (Err(want), Got::Done(_)) => {
                return Err(format!("accepted; the model expected {want:?}"));
            }
        }
        tally(op, &got);
        if must_be_stale {
            ensure!(
                matches!(got, Got::Refused("claim_stale")),
                "a report under a stale token or from another worker was not refused as claim_stale"
            );
        }
        self.check(matches!(got, Got::Refused(_))).await
    }

    /// Compares the store with the model and checks the invariants.
    async fn check(&mut self, refused: bool) -> Result<(), String> {
        let store = self.store.clone();
        let m = self.model.clone();
        let retried = self.operator_retry.take();
        let page = store
            .read_events(self.head, &EventFilter::default(), 10_000)
            .await
            .map_err(|e| e.to_string())?;
        let head = store.head().await.map_err(|e| e.to_string())?;
        let events: Vec<Event> = page.events;
        let mut prev = self.head;
        for e in &events {
            ensure!(e.seq > prev, "seq {} after {prev}", e.seq);
            prev = e.seq;
        }
        ensure!(prev == head, "events end at {prev}, head is {head}");
        if refused {
            ensure!(
                events.is_empty(),
                "a refused operation appended {:?}",
                events.iter().map(|e| &e.kind).collect::<Vec<_>>()
            );
        }
        self.head = head;
        let count = |k: &str| events.iter().filter(|e| e.kind == k).count();
        if !refused {
            ensure!(
                count(kind::CLAIM_GRANTED) == m.fx.granted.len(),
                "{} claims granted, the model {}",
                count(kind::CLAIM_GRANTED),
                m.fx.granted.len()
            );
            ensure!(
                count(kind::CLAIM_RELEASED) == m.fx.released
                    && count(kind::CLAIM_EXPIRED) == m.fx.expired,
                "released/expired {}/{}, the model {}/{}",
                count(kind::CLAIM_RELEASED),
                count(kind::CLAIM_EXPIRED),
                m.fx.released,
                m.fx.expired
            );
            ensure!(
                count(kind::TASK_RETRY_SCHEDULED) == m.fx.retried.len(),
                "{} retries scheduled, the model {}",
                count(kind::TASK_RETRY_SCHEDULED),
                m.fx.retried.len()
            );
        }
        let mut changes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for e in events.iter().filter(|e| e.kind == kind::TASK_STATE_CHANGED) {
            let vtid = e.refs.task_id.clone().unwrap_or_default();
            let from = e.data["from"].as_str().unwrap_or_default().to_owned();
            let to = e.data["to"].as_str().unwrap_or_default().to_owned();
            ensure!(from != to, "{vtid}: a state change from {from:?} to itself");
            changes.entry(vtid).or_default().push((from, to));
        }
        for (run_id, status) in &m.fx.ended_runs {
            let (run, _) = store.run(run_id).await.map_err(|e| e.to_string())?;
            ensure!(
                run.status == *status,
                "run {run_id} ended {:?}, the model {status:?}",
                run.status
            );
        }
        for (t, task) in m.tasks.iter().enumerate() {
            let (detail, _) = store.task(&task.vtid, 0).await.map_err(|e| e.to_string())?;
            let db = &detail.task;
            let active: Vec<_> = detail
                .claims
                .iter()
                .filter(|c| c.released_at.is_none())
                .collect();
            // Invariant: at most one active claim per task.
            ensure!(
                active.len() <= 1,
                "{}: {} active claims",
                task.vtid,
                active.len()
            );
            // Invariant: a final task never moves (the retry op updated `seen`).
            let seen = &self.seen[t];
            if task.wf.is_final(seen) && retried != Some(t) {
                ensure!(
                    &db.state == seen,
                    "{}: final {seen:?} moved to {:?}",
                    task.vtid,
                    db.state
                );
            }
            // Invariant: one event per state change, chained.
            let have = changes.remove(&task.vtid).unwrap_or_default();
            let mut at = seen.clone();
            for (from, to) in have.clone() {
                ensure!(
                    from == at,
                    "{}: state change from {from:?} but the task was {at:?}",
                    task.vtid
                );
                at = to;
            }
            ensure!(
                at == db.state,
                "{}: events lead to {at:?}, the task is {:?}",
                task.vtid,
                db.state
            );
            let want: Vec<(String, String)> =
                m.fx.transitions
                    .iter()
                    .filter(|(i, _, _)| *i == t)
                    .map(|(_, f, to)| (f.clone(), to.clone()))
                    .collect();
            ensure!(
                have == want,
                "{}: state changes {have:?}, the model {want:?}",
                task.vtid
            );
            // Invariant: a cancel request is carried out by the holder, or
            // the task is over; never left with nobody to act on it.
            if db.cancel_requested_at.is_some() && !task.wf.is_final(&db.state) {
                ensure!(
                    !active.is_empty(),
                    "{}: cancel requested, {:?}, and nobody holds it",
                    task.vtid,
                    db.state
                );
            }
            // Agreement with the model.
            ensure!(
                db.state == task.state,
                "{}: state {:?}, the model {:?}",
                task.vtid,
                db.state,
                task.state
            );
            ensure!(
                db.attempts == task.attempts,
                "{}: attempts {}, the model {}",
                task.vtid,
                db.attempts,
                task.attempts
            );
            ensure!(
                db.failures.len() as i64 == task.failures,
                "{}: {} failures, the model {}",
                task.vtid,
                db.failures.len(),
                task.failures
            );
            ensure!(
                db.cancel_requested_at.is_some() == task.cancel_at.is_some(),
                "{}: cancel requested {:?}, the model {:?}",
                task.vtid,
                db.cancel_requested_at,
                task.cancel_at
            );
            match (active.first(), &task.active) {
                (None, None) => {}
                (Some(c), Some(mc)) => ensure!(
                    c.worker_id == m.workers[mc.worker].id
                        && c.run_id == mc.run_id
                        && c.expires_at == mc.expires_at,
                    "{}: active claim {}/{}/{}, the model {}/{}/{}",
                    task.vtid,
                    c.worker_id,
                    c.run_id,
                    c.expires_at,
                    m.workers[mc.worker].id,
                    mc.run_id,
                    mc.expires_at
                ),
                (c, mc) => {
                    return Err(format!(
                        "{}: active claim {:?}, the model {:?}",
                        task.vtid,
                        c.map(|c| &c.worker_id),
                        mc.as_ref().map(|c| &m.workers[c.worker].id)
                    ))
                }
            }
            let total: i64 = task.held_by.iter().sum();
            ensure!(
                detail.claims.len() as i64 == total,
                "{}: {} claims in all, the model {total}",
                task.vtid,
                detail.claims.len()
            );
            self.seen[t] = db.state.clone();
        }
        // The store chose each retry's time; check it against the backoff,
        // then the model keeps it.
        let now = m.now;
        for &t in &m.fx.retried.clone() {
            let (detail, _) = store
                .task(&self.model.tasks[t].vtid, 0)
                .await
                .map_err(|e| e.to_string())?;
            let failures = self.model.tasks[t].failures;
            let base = (BACKOFF.initial_ms << (failures - 1).min(20)).min(BACKOFF.max_ms);
            let run_at = detail.task.run_at.ok_or("a retry without run_at")?;
            ensure!(
                (now + base / 2..=now + base).contains(&run_at),
                "{}: retry at +{}ms after {failures} failures (base {base})",
                detail.task.vtid,
                run_at - now
            );
            self.model.tasks[t].run_at = Some(run_at);
        }
        let shepherd_store::Listing { items: listed, .. } = store
            .list_workers(WorkerFilter {
                include_closed: true,
                agent_id: Some(agent(&self.prefix)),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        ensure!(
            listed.len() == self.model.workers.len(),
            "{} workers listed",
            listed.len()
        );
        for w in &self.model.workers {
            let db = listed
                .iter()
                .find(|d| d.worker_id == w.id)
                .ok_or_else(|| format!("{} not listed", w.id))?;
            ensure!(
                db.status == w.status,
                "{}: status {:?}, the model {:?}",
                w.id,
                db.status,
                w.status
            );
            ensure!(
                db.active_claims == self.model.active_claims(self.worker_ix_of(&w.id)),
                "{}: {} active claims, the model {}",
                w.id,
                db.active_claims,
                self.model.active_claims(self.worker_ix_of(&w.id))
            );
        }
        Ok(())
    }

    fn worker_ix_of(&self, id: &str) -> usize {
        self.model.workers.iter().position(|w| w.id == id).unwrap()
    }
}

thread_local! {
    /// How often each operation was accepted or refused (and why), and each
    /// transition taken, printed at the end so a run shows what it
    /// exercised. Per thread: each test (database) runs on its own.
    static TALLY: std::cell::RefCell<BTreeMap<String, u64>> = const {
        std::cell::RefCell::new(BTreeMap::new())
    };
}

fn note(key: String) {
    TALLY.with(|t| *t.borrow_mut().entry(key).or_default() += 1);
}

fn tally(op: &Op, got: &Got) {
    let name = format!("{op:?}");
    let name = name.split([' ', '(']).next().unwrap_or_default().to_owned();
    let what = match got {
        Got::Skipped => "skipped",
        Got::Done(_) => "ok",
        Got::Refused(code) => code,
    };
    note(format!("{name}: {what}"));
}

fn model_state(m: &Model, vtid: &str) -> String {
    m.tasks
        .iter()
        .find(|t| t.vtid == vtid)
        .map(|t| t.state.clone())
        .unwrap_or_default()
}

// ----- the tests -----

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

fn check_store(kind: Kind) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 400,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let bench = rt.block_on(Bench::new(kind));
    let result = runner.run(&scenario(), |s| {
        rt.block_on(run_case(&bench, s))
            .map_err(TestCaseError::fail)
    });
    rt.block_on(bench.close());
    eprintln!(
        "lease_props {kind:?}: {} cases in {:.1}s",
        cases(),
        started.elapsed().as_secs_f64()
    );
    for (k, n) in TALLY.with(|t| std::mem::take(&mut *t.borrow_mut())) {
        eprintln!("  {k}: {n}");
    }
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn sqlite_keeps_the_lease_rules() {
    check_store(Kind::Sqlite);
}

#[test]
fn postgres_keeps_the_lease_rules() {
    check_store(Kind::Postgres);
}

// ----- regressions: cases the properties found, kept as they were shrunk -----

/// Runs one scenario on both databases.
fn replay(s: Scenario) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for kind in [Kind::Sqlite, Kind::Postgres] {
        let bench = rt.block_on(Bench::new(kind));
        let result = rt.block_on(run_case(&bench, s.clone()));
        rt.block_on(bench.close());
        eprintln!("{kind:?}:");
        for (k, n) in TALLY.with(|t| std::mem::take(&mut *t.borrow_mut())) {
            eprintln!("  {k}: {n}");
        }
        if let Err(e) = result {
            panic!("{kind:?}: {e}");
        }
    }
}

fn plain_workers() -> Vec<(bool, i64)> {
    vec![(false, 1); WORKERS]
}

/// A worker that presents the right claim token for a run it does not
/// hold was told `not_your_claim` (403), which confirms that the token it
/// presented is right; it is `claim_stale`, as for a wrong token.
#[test]
fn regression_steps_from_another_worker_are_claim_stale() {
    replay(Scenario {
        ttl_ms: 1_000,
        heartbeat_timeout_ms: 2_000,
        start_grace: false,
        workers: plain_workers(),
        ops: vec![
            Op::Create {
                autopilot: false,
                dispatch: true,
                max_attempts: None,
            },
            Op::Claim { worker: 1, task: 0 },
            Op::Step {
                by: By::Worker(0),
                task: 0,
                token: Tok::Current,
            },
        ],
    });
}

/// An autopilot builder asked to cancel finished instead: its completion
/// moved the task to review and ended the run, and the task then waited
/// there for good (a task being cancelled may not be claimed, and the
/// sweeper ends only cancels a worker holds). The cancel now takes effect
/// when the run ends.
#[test]
fn regression_a_run_that_ends_during_a_cancel_cancels_the_task() {
    let next = |token| Op::Progress {
        by: By::Holder,
        task: 0,
        token,
        event: Ev::Next(0),
    };
    replay(Scenario {
        ttl_ms: 1_000,
        heartbeat_timeout_ms: 2_000,
        start_grace: false,
        workers: plain_workers(),
        ops: vec![
            Op::Create {
                autopilot: true,
                dispatch: true,
                max_attempts: None,
            },
            Op::Claim { worker: 0, task: 0 },
            next(Tok::Current),
            Op::Cancel { task: 0 },
            next(Tok::Missing),
            next(Tok::Missing),
        ],
    });
}

// ----- paths random cases seldom reach, replayed on both databases -----

fn progress(event: Ev) -> Op {
    Op::Progress {
        by: By::Holder,
        task: 0,
        token: Tok::Current,
        event,
    }
}

/// Review and validation: the builder may not validate, a validator's
/// rework sends the task back to a builder, a validator's lapsed claim
/// returns the task to review, and a pass ends it for good.
#[test]
fn validation_agrees_with_the_model() {
    let build = [
        Op::Claim { worker: 0, task: 0 },
        progress(Ev::Next(0)),
        progress(Ev::Next(0)),
        progress(Ev::Next(0)),
    ];
    let mut ops = vec![Op::Create {
        autopilot: true,
        dispatch: true,
        max_attempts: None,
    }];
    ops.extend(build.clone());
    ops.extend([
        Op::Claim { worker: 0, task: 0 },
        Op::Claim { worker: 1, task: 0 },
        Op::Step {
            by: By::Holder,
            task: 0,
            token: Tok::Current,
        },
        progress(Ev::Next(1)),
    ]);
    ops.extend(build);
    ops.extend([
        Op::Claim { worker: 2, task: 0 },
        Op::Advance(Adv::Ttl),
        Op::Sweep,
        Op::Claim { worker: 1, task: 0 },
        progress(Ev::Next(0)),
        Op::Cancel { task: 0 },
        Op::Retry { task: 0 },
        Op::Claim { worker: 2, task: 0 },
    ]);
    replay(Scenario {
        ttl_ms: 1_000,
        heartbeat_timeout_ms: 3_000,
        start_grace: false,
        workers: vec![(false, 1), (true, 1), (true, 1)],
        ops,
    });
}

/// Retries: a failure is retried after its backoff (not before), the last
/// attempt's failure ends the task, an operator's retry brings it back,
/// and a lost claim inside the start grace is not lost.
#[test]
fn retries_and_start_grace_agree_with_the_model() {
    replay(Scenario {
        ttl_ms: 1_000,
        heartbeat_timeout_ms: 2_000,
        start_grace: true,
        workers: plain_workers(),
        ops: vec![
            Op::Create {
                autopilot: false,
                dispatch: true,
                max_attempts: Some(2),
            },
            Op::Claim { worker: 0, task: 0 },
            Op::Advance(Adv::Ttl),
            Op::Sweep,
            Op::Heartbeat { worker: 0 },
            progress(Ev::Failed { retryable: true }),
            Op::Claim { worker: 1, task: 0 },
            Op::Advance(Adv::Backoff),
            Op::ClaimNext { worker: 1, max: 1 },
            progress(Ev::Failed { retryable: true }),
            Op::Retry { task: 0 },
            Op::Advance(Adv::Backoff),
            Op::Claim { worker: 2, task: 0 },
            Op::Advance(Adv::Timeout),
            Op::Heartbeat { worker: 2 },
            Op::Claim { worker: 0, task: 0 },
        ],
    });
}

/// A draft cancelled before its dispatch and then retried went back to the
/// queue with no `dispatched_at`: it sorted first on SQLite and last on
/// PostgreSQL (found by CI's random cases). A retry now dispatches it.
#[test]
fn regression_claim_next_after_a_retry_in_the_same_millisecond() {
    let create = |dispatch| Op::Create {
        autopilot: false,
        dispatch,
        max_attempts: None,
    };
    replay(Scenario {
        ttl_ms: 1_000,
        heartbeat_timeout_ms: 2_000,
        start_grace: false,
        workers: vec![(false, 1), (false, 2), (false, 1)],
        ops: vec![
            create(false),
            create(false),
            Op::Cancel { task: 62 },
            create(false),
            Op::Retry { task: 79 },
            create(true),
            Op::ClaimNext {
                worker: 109,
                max: 1,
            },
        ],
    });
}
