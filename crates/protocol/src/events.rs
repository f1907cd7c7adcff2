//! The event log on the wire: the JSON page (`GET /api/v1/events`) and the
//! server-sent event stream (`GET /api/events`).
//!
//! Every SSE frame's `data:` is one [`WireEvent`] (the `event:` name is the
//! log type, or seed 000's name for run activity: `worker_started`,
//! `worker_status`, `tool_started`, `tool_completed`, `worker_completed`),
//! except `resync`, whose data is a [`Resync`]. The `data` field of each
//! event type is described by the payload types below.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use shepherd_core::event::Event;

/// Reads a cursor as a client writes it (`Last-Event-ID`, `?after=`, an SSE
/// frame's `id:`): a sequence number, 0 or more, surrounding whitespace
/// ignored. `None` for anything else; the server answers that with 400
/// `invalid_cursor`. One function for every place a cursor arrives, so the
/// server and its clients agree on what one is.
pub fn parse_cursor(text: &str) -> Option<i64> {
    text.trim().parse::<i64>().ok().filter(|n| *n >= 0)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventStreamQuery {
    /// A cursor (sequence number) to resume after, or `now`. `Last-Event-ID` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Same as `task_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Comma-separated log types; a trailing `*` matches a prefix (`worker.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventPageQuery {
    /// Cursor to read after; without it, the latest `limit` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    /// Comma-separated log types; a trailing `*` matches a prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<String>,
}

/// One event as clients see it: the log record with `id` (= `seq`, the
/// SSE id) and the ids it concerns at the top level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WireEvent {
    /// The cursor; equal to `seq`.
    pub id: i64,
    #[serde(flatten)]
    pub event: Event,
}

impl From<&Event> for WireEvent {
    fn from(e: &Event) -> Self {
        WireEvent {
            id: e.seq,
            event: e.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct EventPage {
    pub events: Vec<WireEvent>,
    /// Resume after this cursor.
    pub next_cursor: i64,
    /// The cursor was below what retention kept: reload state.
    pub cursor_expired: bool,
}

/// The `resync` frame: the reader missed events and must reload state,
/// then resume from `cursor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct Resync {
    /// `cursor_expired` or `too_slow`.
    pub reason: String,
    pub cursor: i64,
    pub message: String,
}

/// `data` of `task.state_changed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TaskStateChanged {
    pub from: String,
    pub to: String,
    /// The event type or action that moved it (`dispatched`, `claimed`, …).
    pub cause: String,
}

/// `data` of a progress event (`worker.*`, `validator.*`) or an outside event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ProgressRecorded {
    pub from: String,
    pub to: String,
    pub message: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub result: Option<String>,
    /// True for events from outside any worker.
    pub external: bool,
}

/// `data` of `run.started` (SSE `worker_started`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunStarted {
    pub agent_id: String,
    pub attempt: i64,
    pub channel_id: Option<String>,
    pub purpose: shepherd_core::status::ClaimPurpose,
    pub task: String,
    pub worker_type: String,
}

/// `data` of `run.status` (SSE `worker_status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunStatusChanged {
    pub status: String,
}

/// `data` of `run.step` (SSE `tool_started`, `tool_completed` or `run.step`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunStep {
    pub index: i64,
    /// `action` or `tool_result`.
    pub kind: String,
    pub preview: String,
    pub tool_name: Option<String>,
    pub call_ids: Vec<String>,
}

/// `data` of `run.completed` (SSE `worker_completed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunCompleted {
    pub status: shepherd_core::status::RunStatus,
    pub result: Option<String>,
    pub reason: String,
    pub steps: i64,
}

/// `data` of `worker.claim.granted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClaimGranted {
    pub claim_id: String,
    pub attempt: i64,
    /// Milliseconds since the Unix epoch.
    pub expires_at: i64,
    pub purpose: shepherd_core::status::ClaimPurpose,
}

/// `data` of `worker.claim.released` and `worker.claim.expired`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClaimReleased {
    pub claim_id: String,
    pub purpose: shepherd_core::status::ClaimPurpose,
    pub reason: String,
}

/// `data` of `task.cancel_requested`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct CancelRequested {
    pub reason: String,
}

/// `data` of `conversation.state_changed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ConversationStateChanged {
    /// `idle`, `processing` or `cancelled`.
    pub from: String,
    pub to: String,
    /// The task (run) the change concerns.
    #[serde(default)]
    pub task_id: Option<String>,
    /// The user message that started processing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Why it was cancelled, or why it went idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// On `idle`: the final state of the task that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<String>,
}

/// `data` of `task.retry_scheduled`: an attempt failed (or lost its claim)
/// and the task waits for its next attempt. Emitted once per retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RetryScheduled {
    /// The attempt that failed.
    pub attempt: i64,
    /// Its run.
    pub run_id: String,
    pub reason: String,
    /// When the next attempt may be claimed (Unix milliseconds).
    pub run_at: i64,
    pub max_attempts: i64,
}

#[cfg(test)]
mod tests {
    use super::parse_cursor;

    #[test]
    fn a_cursor_is_a_non_negative_integer() {
        assert_eq!(parse_cursor("0"), Some(0));
        assert_eq!(parse_cursor(" 42\t"), Some(42));
        assert_eq!(parse_cursor("9223372036854775807"), Some(i64::MAX));
        for bad in [
            "",
            " ",
            "-1",
            "now",
            "1.5",
            "0x10",
            "9223372036854775808",
            "1 2",
        ] {
            assert_eq!(parse_cursor(bad), None, "{bad:?}");
        }
    }
}
