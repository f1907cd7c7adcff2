//! Properties of the workflow tables and the retry rule, over any sequence
//! of events: the tables only ever name their own states, a final state
//! never moves, every waiting state can still end `done`, review is
//! entered only to validate, and retries stop at `max_attempts` with waits
//! inside the backoff's bounds. The store applies exactly these functions
//! (`Workflow::apply`, `retry::after_run`); crates/store/tests/lease_props.rs
//! checks the leases around them.

use std::collections::BTreeSet;

use proptest::prelude::*;
use shepherd_core::retry::{after_run, AfterRun, RetryBackoff, RetryPolicy, RunEnding};
use shepherd_core::status::RunStatus;
use shepherd_core::workflow::{self, Outcome, Workflow, ALL};

/// Every event type any workflow knows, plus some none does.
fn events() -> Vec<&'static str> {
    let mut all: BTreeSet<&'static str> = ALL
        .iter()
        .flat_map(|w| {
            w.transitions
                .iter()
                .flat_map(|t| t.event_types.iter().copied())
        })
        .collect();
    all.extend(["worker.dance", "", "*", "done"]);
    all.into_iter().collect()
}

fn workflow_ix() -> impl Strategy<Value = usize> {
    0..ALL.len()
}

/// One step of a task's life: an event, or what is not an event in the
/// table: a dispatch (a draft starts waiting) or a claim (a builder's task
/// moves to `claimed_state`).
#[derive(Debug, Clone)]
enum Step {
    Event(usize),
    Dispatch,
    Claim,
}

fn step() -> impl Strategy<Value = Step> {
    let n = events().len();
    prop_oneof![
        6 => (0..n).prop_map(Step::Event),
        1 => Just(Step::Dispatch),
        1 => Just(Step::Claim),
    ]
}

fn next(wf: &Workflow, state: &'static str, step: &Step) -> &'static str {
    match step {
        Step::Dispatch if state == wf.draft_state => wf.dispatched_state,
        Step::Dispatch => state,
        Step::Claim if state == wf.dispatched_state => wf.claimed_state,
        Step::Claim => state,
        Step::Event(i) => match wf.apply(state, events()[*i]) {
            Outcome::Move { to, .. } => to,
            Outcome::NotFromHere | Outcome::Unknown => state,
        },
    }
}

fn static_state(wf: &Workflow, s: &str) -> &'static str {
    wf.states
        .iter()
        .copied()
        .find(|x| *x == s)
        .unwrap_or_else(|| panic!("{}: {s:?} is not one of its states", wf.name))
}

#[test]
fn every_table_is_well_formed() {
    for wf in ALL {
        let states: BTreeSet<&str> = wf.states.iter().copied().collect();
        assert_eq!(states.len(), wf.states.len(), "{}: a state twice", wf.name);
        for s in [wf.draft_state, wf.dispatched_state, wf.claimed_state]
            .into_iter()
            .chain(wf.review_state)
        {
            assert!(states.contains(s), "{}: {s:?} not a state", wf.name);
            assert!(!wf.is_final(s), "{}: {s:?} is final", wf.name);
        }
        for f in wf.final_states {
            assert!(states.contains(f), "{}: final {f:?} not a state", wf.name);
        }
        for t in wf.transitions {
            assert!(
                states.contains(t.to_state),
                "{}: to {:?}",
                wf.name,
                t.to_state
            );
            for f in t.from_states {
                assert!(*f == "*" || states.contains(f), "{}: from {f:?}", wf.name);
            }
        }
        assert!(std::ptr::eq(workflow::by_name(wf.name).unwrap(), wf));
    }
}

/// From every state that is not final, `done` can still be reached with
/// claims and events: no table has a dead end short of the end.
#[test]
fn every_waiting_state_can_still_end_done() {
    for wf in ALL {
        for &start in wf.states.iter().filter(|s| !wf.is_final(s)) {
            let mut seen = BTreeSet::from([start]);
            let mut todo = vec![start];
            while let Some(s) = todo.pop() {
                let steps = (0..events().len())
                    .map(Step::Event)
                    .chain([Step::Dispatch, Step::Claim]);
                for step in steps {
                    let to = next(wf, s, &step);
                    if seen.insert(to) {
                        todo.push(to);
                    }
                }
            }
            assert!(
                seen.contains(workflow::DONE),
                "{}: {start:?} cannot reach done (reaches {seen:?})",
                wf.name
            );
        }
    }
}

/// 256 cases each, or `PROPTEST_CASES`.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    // No seed files: a failure is kept as a named test instead.
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any sequence of claims and events keeps a task among its workflow's
    /// states, never moves it once final, and only the catch-all rows
    /// (failed, cancelled) apply from every state that is not final.
    #[test]
    fn any_sequence_keeps_the_state_machine(wf in workflow_ix(), steps in prop::collection::vec(step(), 0..60)) {
        let wf = ALL[wf];
        let mut state = wf.draft_state;
        let mut ended: Option<&str> = None;
        for step in &steps {
            let to = next(wf, state, step);
            prop_assert!(wf.states.contains(&to), "{}: moved to {:?}", wf.name, to);
            if let Some(end) = ended {
                prop_assert_eq!(to, end, "{}: final {:?} moved", wf.name, end);
            }
            if let Step::Event(i) = step {
                let event = events()[*i];
                let outcome = wf.apply(state, event);
                prop_assert_eq!(outcome == Outcome::Unknown, !wf.knows_event(event));
                if let Outcome::Move { to, trigger } = &outcome {
                    // Review is entered only to validate, and a rework goes
                    // back to a builder.
                    if Some(*to) == wf.review_state && *to != state {
                        prop_assert_eq!(*trigger, Some("validate"));
                    }
                    if *trigger == Some("rework") {
                        prop_assert_eq!(*to, wf.dispatched_state);
                    }
                }
                if !wf.is_final(state) {
                    for (e, end) in [
                        (workflow::EXECUTION_FAILED, workflow::FAILED),
                        (workflow::EXECUTION_CANCELLED, workflow::CANCELLED),
                    ] {
                        prop_assert_eq!(wf.apply(state, e), Outcome::Move { to: end, trigger: None });
                    }
                }
            }
            state = static_state(wf, to);
            if wf.is_final(state) {
                ended = ended.or(Some(state));
            }
        }
    }

    /// The retry rule: a task with a policy gets exactly `max_attempts - 1`
    /// retries of retryable failures, each due inside the backoff's bounds;
    /// a cancel is never retried; without a policy a failure is final and
    /// a lost claim goes straight back to the queue.
    #[test]
    fn retries_stop_at_max_attempts(
        max_attempts in 1i64..=10,
        initial_ms in 0i64..=60_000,
        extra_ms in 0i64..=600_000,
        jitters in prop::collection::vec(0.0f64..1.0, 12),
        lost in any::<bool>(),
        now in 0i64..=4_000_000_000_000,
    ) {
        let backoff = RetryBackoff { initial_ms, max_ms: initial_ms + extra_ms };
        prop_assert!(backoff.validate().is_ok());
        let policy = RetryPolicy { max_attempts, backoff };
        let ending = |cancel_requested| RunEnding {
            status: RunStatus::Failed,
            claim_lost: lost,
            retryable: true,
            cancel_requested,
        };
        let mut retries = 0;
        for (failed_before, jitter) in jitters.iter().enumerate() {
            let failed_before = failed_before as i64;
            match after_run(Some(&policy), failed_before, ending(false), now, *jitter) {
                AfterRun::Retry { run_at } => {
                    prop_assert!(failed_before + 1 < max_attempts);
                    let base = initial_ms
                        .saturating_mul(1 << failed_before.min(40))
                        .min(backoff.max_ms);
                    prop_assert!(
                        (now + base / 2..=now + base).contains(&run_at),
                        "wait {} outside [{}, {}]", run_at - now, base / 2, base
                    );
                    retries += 1;
                }
                AfterRun::Fail => prop_assert!(failed_before + 1 >= max_attempts),
                other => prop_assert!(false, "{:?} for a failure under a policy", other),
            }
            prop_assert_eq!(
                after_run(Some(&policy), failed_before, ending(true), now, *jitter),
                AfterRun::Workflow
            );
        }
        prop_assert_eq!(retries, (max_attempts - 1).min(jitters.len() as i64));
        let without = after_run(None, 0, ending(false), now, 0.5);
        prop_assert_eq!(without, if lost { AfterRun::Requeue } else { AfterRun::Fail });
        for status in [RunStatus::Done, RunStatus::Cancelled, RunStatus::Running] {
            let e = RunEnding { status, ..ending(false) };
            prop_assert_eq!(after_run(Some(&policy), 0, e, now, 0.5), AfterRun::Workflow);
        }
    }

    /// The wait never shrinks as failures add up (for the same draw), and
    /// never passes `max_ms`.
    #[test]
    fn backoff_grows_and_is_bounded(
        initial_ms in 0i64..=100_000,
        extra_ms in 0i64..=1_000_000,
        failures in 1i64..=80,
        jitter in 0.0f64..1.0,
    ) {
        let b = RetryBackoff { initial_ms, max_ms: initial_ms + extra_ms };
        let d = b.delay_ms(failures, jitter);
        prop_assert!((0..=b.max_ms).contains(&d));
        prop_assert!(b.delay_ms(failures + 1, jitter) >= d);
    }
}
