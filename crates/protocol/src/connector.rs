//! The connector contract's worker connector: register, poll, claim, progress,
//! heartbeat and deregister.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use shepherd_core::model::ClaimConversation;
use shepherd_core::status::{ClaimPurpose, WorkerStatus};

fn is_null(v: &Value) -> bool {
    v.is_null()
}

#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    /// Optional; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// `builtin` for Shepherd's own runner; anything else names an outside worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_id: Option<String>,
    #[serde(default, skip_serializing_if = "is_null")]
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// The host it runs on: a host id from `GET /api/v1/hosts` (a runner
    /// registers its host first, then its workers on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RegisterResponse {
    pub ok: bool,
    pub worker_id: String,
    pub registered_at: String,
    /// The worker's own bearer token; shown once.
    pub worker_token: String,
    pub agent_id: String,
    pub capabilities: Vec<String>,
    pub max_concurrent: i64,
    pub heartbeat_interval_secs: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PendingQuery {
    /// Needed with the operator token; a worker token names its worker itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// 1 to 500; default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// A task offered to a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct PendingTask {
    pub vtid: String,
    pub title: String,
    pub state: String,
    pub dispatched_at: Option<String>,
    pub spec_snapshot_id: Option<String>,
    pub priority: i64,
    pub capabilities: Vec<String>,
    pub agent_id: Option<String>,
    pub workflow: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct PendingResponse {
    pub ok: bool,
    pub tasks: Vec<PendingTask>,
}

/// Names the acting worker; optional with a worker token.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
pub struct WorkerBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClaimResponse {
    pub ok: bool,
    pub claimed: bool,
    pub vtid: String,
    pub title: String,
    /// The spec as dispatched (its snapshot), markdown.
    pub spec: String,
    pub spec_snapshot_id: Option<String>,
    pub claim_expires_at: String,
    pub run_id: String,
    /// The fencing token every later call under this claim carries.
    pub claim_token: String,
    pub purpose: ClaimPurpose,
    /// Which attempt at the task this claim's run is (1 for the first).
    #[serde(default = "first_attempt")]
    pub attempt: i64,
    pub state: String,
    pub workflow: String,
    /// For a task answering a conversation's message: what the worker
    /// needs to continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ClaimConversation>,
    /// The run's token for its agent (`SHEPHERD_RUN_TOKEN`), as `POST
    /// /api/v1/runs/{run_id}/token` would answer: only when the claim asked
    /// for it (`with_run_token` on claim-next), so the worker can start the
    /// agent without another round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_token: Option<String>,
}

fn first_attempt() -> i64 {
    1
}

/// Claim the next tasks: the best eligible ones (priority, then age), as
/// many as `max`.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ClaimNextBody {
    /// Needed with the operator token; a worker token names its worker itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// How many tasks to claim at most: 1 up to the worker's free capacity
    /// (`max_concurrent` minus the claims it holds). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max: Option<i64>,
    /// With nothing to claim, hold the request up to this many milliseconds
    /// (at most 30,000) and claim as soon as work comes; the answer is empty
    /// if none came. Default 0: answer at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 30000)]
    pub wait_ms: Option<i64>,
    /// Put each claimed run's token (`run_token`) in its claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_run_token: Option<bool>,
}

/// The longest a claim may wait for work (`wait_ms`).
pub const MAX_CLAIM_WAIT_MS: i64 = 30_000;

/// The claims granted, best task first; empty when nothing is eligible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClaimNextResponse {
    pub ok: bool,
    /// Each element is what claiming that task by its vtid answers.
    pub claims: Vec<ClaimResponse>,
}

/// One report of a batch: a progress report naming its task.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ProgressReport {
    pub vtid: String,
    /// The fencing token from the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_token: Option<String>,
    /// Such as `worker.building`, `worker.execution.completed`.
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "is_null")]
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// The run's result text, for completion events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// Several progress reports of one worker, applied in order in one
/// transaction, each on its own.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ProgressBatchBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// 1 to 500 reports.
    pub reports: Vec<ProgressReport>,
}

/// Steps of several runs of one worker in one request (a runner with many
/// running agents): each run's steps are appended as `POST
/// /api/v1/runs/{run_id}/steps` would, fenced by its claim token, on their
/// own, all in one transaction.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct StepBatchBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// 1 to 500 runs' steps, at most 1,000 steps in all.
    pub runs: Vec<RunSteps>,
}

/// One run's steps in a [`StepBatchBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSteps {
    pub run_id: String,
    pub claim_token: String,
    /// The index of the first step (a retried batch is acknowledged, not stored twice).
    pub start_index: i64,
    pub steps: Vec<shepherd_core::transcript::TranscriptStep>,
}

/// The outcome of one run's steps: the acknowledgement of `POST
/// /api/v1/runs/{run_id}/steps` when stored, `error` (claim_stale,
/// step_gap, run_not_found, too_many_steps, …) when refused, which stored
/// none of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunStepsResult {
    pub run_id: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<i64>,
    /// Steps already stored (a retried batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicates: Option<i64>,
    /// The index the run's next step must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_index: Option<i64>,
    /// The HTTP status `POST /api/v1/runs/{run_id}/steps` would have answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::ErrorDetail>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct StepBatchResponse {
    pub ok: bool,
    /// One per run, in the order of the request.
    pub results: Vec<RunStepsResult>,
}

/// The outcome of one report: `state` when applied, `error` when refused
/// (a refused report changed nothing, except that an `invalid_transition`
/// is recorded in the log as `event_id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ProgressResult {
    pub vtid: String,
    pub ok: bool,
    /// The task's state after the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The recorded event's sequence number in the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::ErrorDetail>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ProgressBatchResponse {
    pub ok: bool,
    /// One per report, in the order of the reports.
    pub results: Vec<ProgressResult>,
}

#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct ProgressBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// Such as `worker.building`, `worker.execution.completed`.
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "is_null")]
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// The fencing token from the claim; recommended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_token: Option<String>,
    /// The run's result text, for completion events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// A workflow event applied: the task moved from `previous_state` to `state`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct EventApplied {
    pub ok: bool,
    pub vtid: String,
    pub event: String,
    pub previous_state: String,
    pub state: String,
    /// The event's sequence number in the log.
    pub event_id: i64,
}

#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// The task the worker believes it is working on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_vtid: Option<String>,
}

/// A claim the worker holds, as a heartbeat reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HeartbeatClaim {
    pub vtid: String,
    pub run_id: String,
    pub claim_expires_at: String,
    /// The operator asked to cancel: stop within the grace period.
    pub cancel_requested: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HeartbeatResponse {
    pub ok: bool,
    pub worker_id: String,
    pub status: WorkerStatus,
    pub last_heartbeat_at: String,
    pub claims: Vec<HeartbeatClaim>,
    pub heartbeat_interval_secs: u64,
}

#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct DeregisterBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct DeregisterResponse {
    pub ok: bool,
    pub worker_id: String,
    pub status: WorkerStatus,
}
