//! Tasks: create, list, show, dispatch, cancel and outside events.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use shepherd_core::event::Event;
use shepherd_core::model::{Claim, Task};

#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    /// Optional; generated as `VTID-NNNNN` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtid: Option<String>,
    pub title: String,
    /// Markdown.
    #[serde(default)]
    pub spec: String,
    /// Higher first, then oldest first.
    #[serde(default)]
    pub priority: i64,
    /// Required of the worker.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Only workers registered with this agent may take it. An agent that
    /// is neither configured nor declared by a registered worker is refused
    /// (422 `unknown_agent`) unless `external` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The task is for an outside worker that has not registered its agent
    /// yet: accept an `agent_id` nobody declares (it waits for one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub external: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    /// `simple` (default) or `autopilot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Dispatch at once (default true); `false` leaves a draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<bool>,
    /// Attempts in all (1 to 100) before the task ends `failed`; without it
    /// (and without `retry_backoff`) the agent's default applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i64>,
    /// The wait between attempts: exponential from `initial_ms`, at most
    /// `max_ms`, with jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<shepherd_core::retry::RetryBackoff>,
    /// A delayed task: not claimable before this instant (RFC 3339).
    #[serde(
        default,
        with = "shepherd_core::time::serde_ms::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub run_at: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TaskListQuery {
    /// A state of any workflow (`pending`, `running`, `done`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Tasks of one channel (resource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0)]
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TaskList {
    pub tasks: Vec<Task>,
    pub total: i64,
}

/// A task with its claims and its latest events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: Task,
    pub claims: Vec<Claim>,
    pub events: Vec<Event>,
}

#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The worker that holds a task being cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct PendingWorker {
    pub worker_id: String,
    pub run_id: String,
    /// How long the worker has to stop before its claim is revoked.
    pub grace_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct CancelResponse {
    pub ok: bool,
    pub task: Task,
    /// True when the task is cancelled now; false when a worker was asked to stop.
    pub cancelled: bool,
    pub pending_worker: Option<PendingWorker>,
}

#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct OutsideEvent {
    /// Such as `github.pull_request.opened`.
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    #[schema(value_type = Object)]
    pub metadata: Value,
}
