//! Task workflows as data: a table of (event types, from states) → to state.
//!
//! Progress reported by workers and events from outside (a pull request was
//! opened) are looked up in the task's workflow. Keeping the table as data
//! means a workflow can be shown (`GET /api/v1/workflows`), tested row by row
//! and extended without touching the code that applies it.

use serde::Serialize;

/// One row of a workflow table.
#[derive(Debug, Clone, Serialize)]
pub struct Transition {
    pub event_types: &'static [&'static str],
    /// States this applies from; `["*"]` means every non-final state.
    pub from_states: &'static [&'static str],
    pub to_state: &'static str,
    /// An action the server performs on entering `to_state` (`validate`, `rework`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_action: Option<&'static str>,
    pub description: &'static str,
}

/// A named workflow: its states and its transition table.
#[derive(Debug, Clone, Serialize)]
pub struct Workflow {
    pub name: &'static str,
    /// State of a task created with `dispatch: false`.
    pub draft_state: &'static str,
    /// State a dispatched task waits in for a builder.
    pub dispatched_state: &'static str,
    /// State a task moves to when a builder claims it (may equal `dispatched_state`).
    pub claimed_state: &'static str,
    /// State in which the task is offered to validators (governance gate), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_state: Option<&'static str>,
    pub final_states: &'static [&'static str],
    pub states: &'static [&'static str],
    pub transitions: &'static [Transition],
}

pub const DONE: &str = "done";
pub const FAILED: &str = "failed";
pub const CANCELLED: &str = "cancelled";

/// Progress events that end the current run.
pub const EXECUTION_COMPLETED: &str = "worker.execution.completed";
pub const EXECUTION_FAILED: &str = "worker.execution.failed";
pub const EXECUTION_CANCELLED: &str = "worker.execution.cancelled";
pub const EXECUTION_STARTED: &str = "worker.execution.started";
pub const VALIDATOR_PASSED: &str = "validator.passed";
pub const VALIDATOR_FAILED: &str = "validator.failed";
/// Capability a worker needs to take a task that waits in review.
pub const VALIDATOR_CAPABILITY: &str = "validator";

pub static SIMPLE: Workflow = Workflow {
    name: "simple",
    draft_state: "draft",
    dispatched_state: "pending",
    claimed_state: "claimed",
    review_state: None,
    final_states: &[DONE, FAILED, CANCELLED],
    states: &[
        "draft", "pending", "claimed", "running", DONE, FAILED, CANCELLED,
    ],
    transitions: &[
        Transition {
            event_types: &[EXECUTION_STARTED],
            from_states: &["claimed", "running"],
            to_state: "running",
            trigger_action: None,
            description: "Worker began executing",
        },
        Transition {
            event_types: &[
                "worker.building",
                "worker.execution.building",
                "worker.pr.created",
            ],
            from_states: &["claimed", "running"],
            to_state: "running",
            trigger_action: None,
            description: "Worker reports activity",
        },
        Transition {
            event_types: &[EXECUTION_COMPLETED],
            from_states: &["claimed", "running"],
            to_state: DONE,
            trigger_action: None,
            description: "Worker finished the task",
        },
        Transition {
            event_types: &[EXECUTION_FAILED],
            from_states: &["*"],
            to_state: FAILED,
            trigger_action: None,
            description: "Unrecoverable error",
        },
        Transition {
            event_types: &[EXECUTION_CANCELLED],
            from_states: &["*"],
            to_state: CANCELLED,
            trigger_action: None,
            description: "Worker stopped after a cancel request",
        },
    ],
};

pub static AUTOPILOT: Workflow = Workflow {
    name: "autopilot",
    draft_state: "draft",
    dispatched_state: "in_progress",
    claimed_state: "in_progress",
    review_state: Some("reviewing"),
    final_states: &[DONE, FAILED, CANCELLED],
    states: &[
        "draft",
        "in_progress",
        "building",
        "pr_created",
        "reviewing",
        DONE,
        FAILED,
        CANCELLED,
    ],
    transitions: &[
        Transition {
            event_types: &[EXECUTION_STARTED],
            from_states: &["in_progress"],
            to_state: "in_progress",
            trigger_action: None,
            description: "No change, confirms receipt",
        },
        Transition {
            event_types: &["worker.building", "worker.execution.building"],
            from_states: &["in_progress"],
            to_state: "building",
            trigger_action: None,
            description: "Worker started building",
        },
        Transition {
            event_types: &["worker.pr.created", "github.pull_request.opened"],
            from_states: &["building"],
            to_state: "pr_created",
            trigger_action: None,
            description: "PR created",
        },
        Transition {
            event_types: &[EXECUTION_COMPLETED],
            from_states: &["pr_created"],
            to_state: "reviewing",
            trigger_action: Some("validate"),
            description: "Worker done, trigger validation",
        },
        Transition {
            event_types: &[VALIDATOR_PASSED],
            from_states: &["reviewing"],
            to_state: DONE,
            trigger_action: None,
            description: "Validator passed the work",
        },
        Transition {
            event_types: &[VALIDATOR_FAILED],
            from_states: &["reviewing"],
            to_state: "in_progress",
            trigger_action: Some("rework"),
            description: "Validator rejected the work; back to a builder",
        },
        Transition {
            event_types: &[EXECUTION_FAILED],
            from_states: &["*"],
            to_state: FAILED,
            trigger_action: None,
            description: "Unrecoverable error",
        },
        Transition {
            event_types: &[EXECUTION_CANCELLED],
            from_states: &["*"],
            to_state: CANCELLED,
            trigger_action: None,
            description: "Worker stopped after a cancel request",
        },
    ],
};

pub static ALL: [&Workflow; 2] = [&SIMPLE, &AUTOPILOT];

/// Every event type some workflow knows (progress from workers, events from
/// outside), each once, in table order: the types a progress event may have
/// in the log.
pub fn event_types() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for t in ALL.iter().flat_map(|w| w.transitions) {
        for e in t.event_types {
            if !out.contains(e) {
                out.push(e);
            }
        }
    }
    out
}

/// Finds a workflow by name.
pub fn by_name(name: &str) -> Option<&'static Workflow> {
    ALL.iter().copied().find(|w| w.name == name)
}

/// What applying an event to a task in some state means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Move to `to` (possibly the same state), then run the trigger, if any.
    Move {
        to: &'static str,
        trigger: Option<&'static str>,
    },
    /// The workflow knows the event, but not from this state.
    NotFromHere,
    /// The workflow has never heard of this event type.
    Unknown,
}

impl Workflow {
    pub fn is_final(&self, state: &str) -> bool {
        self.final_states.contains(&state)
    }

    pub fn knows_event(&self, event_type: &str) -> bool {
        self.transitions
            .iter()
            .any(|t| t.event_types.contains(&event_type))
    }

    /// The states in which a task waits to be claimed (by a builder, or by a validator).
    pub fn is_claimable(&self, state: &str) -> bool {
        state == self.dispatched_state || Some(state) == self.review_state
    }

    /// True when a task in `state` waits for a validator rather than a builder.
    pub fn awaits_validator(&self, state: &str) -> bool {
        Some(state) == self.review_state
    }

    /// Looks the event up in the table.
    pub fn apply(&self, state: &str, event_type: &str) -> Outcome {
        if !self.knows_event(event_type) {
            return Outcome::Unknown;
        }
        if self.is_final(state) {
            return Outcome::NotFromHere;
        }
        for t in self.transitions {
            if !t.event_types.contains(&event_type) {
                continue;
            }
            let applies = t.from_states.iter().any(|f| *f == "*" || *f == state);
            if applies {
                return Outcome::Move {
                    to: t.to_state,
                    trigger: t.trigger_action,
                };
            }
        }
        Outcome::NotFromHere
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autopilot_matches_the_connector_table() {
        let w = &AUTOPILOT;
        assert_eq!(
            w.apply("in_progress", "worker.execution.started"),
            Outcome::Move {
                to: "in_progress",
                trigger: None
            }
        );
        assert_eq!(
            w.apply("in_progress", "worker.building"),
            Outcome::Move {
                to: "building",
                trigger: None
            }
        );
        assert_eq!(
            w.apply("building", "github.pull_request.opened"),
            Outcome::Move {
                to: "pr_created",
                trigger: None
            }
        );
        assert_eq!(
            w.apply("pr_created", "worker.execution.completed"),
            Outcome::Move {
                to: "reviewing",
                trigger: Some("validate")
            }
        );
        assert_eq!(
            w.apply("building", "worker.execution.completed"),
            Outcome::NotFromHere
        );
        for s in ["in_progress", "building", "pr_created", "reviewing"] {
            assert_eq!(
                w.apply(s, "worker.execution.failed"),
                Outcome::Move {
                    to: FAILED,
                    trigger: None
                }
            );
        }
        assert_eq!(
            w.apply(DONE, "worker.execution.failed"),
            Outcome::NotFromHere
        );
        assert_eq!(w.apply("in_progress", "worker.dance"), Outcome::Unknown);
    }

    #[test]
    fn simple_runs_to_done() {
        let w = &SIMPLE;
        assert_eq!(
            w.apply("claimed", EXECUTION_STARTED),
            Outcome::Move {
                to: "running",
                trigger: None
            }
        );
        assert_eq!(
            w.apply("running", EXECUTION_COMPLETED),
            Outcome::Move {
                to: DONE,
                trigger: None
            }
        );
        assert_eq!(
            w.apply("pending", EXECUTION_COMPLETED),
            Outcome::NotFromHere
        );
        assert!(w.is_claimable("pending"));
        assert!(!w.is_claimable("claimed"));
    }
}
