//! Runs and transcripts: the Workers page contract's list and detail, and the `/api/v1/runs`
//! routes workers append steps and set status through.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use shepherd_core::model::Run;
use shepherd_core::status::RunStatus;
use shepherd_core::transcript::TranscriptStep;

/// `GET /api/channels/status`: what runs now, per channel (the Workers page
/// contract's status snapshot, which a client reads on load and on
/// reconnecting its event stream).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ChannelStatusResponse {
    /// Channels with a running run, by id; runs in no channel come under
    /// `channel_id: null`.
    pub channels: Vec<ChannelStatus>,
}

/// One channel's running runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ChannelStatus {
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub active_workers: Vec<ActiveWorker>,
}

/// A running run ("worker") as the status snapshot has it: the same live
/// status and tool-call count the list route merges into its running rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ActiveWorker {
    pub id: String,
    pub task: String,
    /// The live status text, if the run set one.
    pub status: Option<String>,
    pub started_at: String,
    pub tool_calls: i64,
    pub agent_id: String,
    pub vtid: String,
}

/// The Workers page contract's worker list item (a run), with the live overlay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerRunInfo {
    pub id: String,
    pub task: String,
    pub status: RunStatus,
    pub worker_type: String,
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub has_transcript: bool,
    /// Null once the run ended.
    pub live_status: Option<String>,
    /// 0 once the run ended.
    pub tool_calls: i64,
    pub agent_id: String,
    pub vtid: String,
    pub active_tool: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerListResponse {
    pub workers: Vec<WorkerRunInfo>,
    pub total: i64,
}

/// The Workers page contract's worker detail (a run) with its decompressed transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerDetailResponse {
    pub id: String,
    pub task: String,
    pub result: Option<String>,
    pub status: RunStatus,
    pub worker_type: String,
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub started_at: String,
    pub completed_at: Option<String>,
    /// Null while running, or where none was recorded.
    pub transcript: Option<Vec<TranscriptStep>>,
    pub agent_id: String,
    pub vtid: String,
    pub live_status: Option<String>,
    pub tool_calls: i64,
}

/// The Workers page contract's list query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WorkersPageQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// 1 to 500; default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0)]
    pub offset: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<RunStatus>)]
    pub status: Option<String>,
    /// Search in task titles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WorkersPageDetailQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The run id.
    pub worker_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Runs of one channel (resource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<RunStatus>)]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtid: Option<String>,
    /// Search in task titles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0)]
    pub offset: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunList {
    pub runs: Vec<Run>,
    pub total: i64,
}

/// One run: the detail route's fields and the full record under `run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub detail: WorkerDetailResponse,
    pub run: Run,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StepsQuery {
    /// Return steps with an index greater than this (omit for all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = -1)]
    pub after: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct IndexedStep {
    pub index: i64,
    pub step: TranscriptStep,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct StepsPage {
    pub run_id: String,
    pub status: RunStatus,
    pub steps: Vec<IndexedStep>,
    /// Pass as `after` to read on.
    pub next_after: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendSteps {
    pub claim_token: String,
    pub start_index: i64,
    pub steps: Vec<TranscriptStep>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct AppendAck {
    pub ok: bool,
    pub accepted: i64,
    /// Steps already stored (a retried batch).
    pub duplicates: i64,
    pub next_index: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetStatus {
    pub claim_token: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct StatusAck {
    pub ok: bool,
    pub run_id: String,
    pub live_status: Option<String>,
}

/// The reason a runner gives when a run's agent did not survive a restart
/// of its server or host: the task goes back to the queue, not to failed.
pub const REQUEUE_SERVER_RESTART: &str = "server_restart";

/// `POST /api/v1/runs/{run_id}/requeue`: the worker holding the run gives
/// its task back to the queue (the run ends `failed` with the reason).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequeueRun {
    pub claim_token: String,
    /// Why (default `server_restart`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `GET /api/v1/runs/{run_id}/diff`: what a worktree run changed, as
/// `git diff base_commit..branch` (the shape of a session's `git-diff` tab,
/// with the workspace it came from).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunDiff {
    pub run_id: String,
    pub workspace: shepherd_core::model::RunWorkspace,
    /// The branch's commit the diff was taken at.
    pub head: String,
    /// `git diff --stat` of the same range.
    pub stat: String,
    /// Unified diff, plain text (no colour).
    pub diff: String,
}
