//! Input requests (`/api/v1/input-requests`): what agents ask people, and
//! the run tokens they ask with.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

pub use shepherd_core::input::{Decision, InputAnswer, InputKind, InputRequest, InputState};

/// `POST /api/v1/input-requests`: a run asks a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskInput {
    /// The asking run (a run token may leave it out: its own run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// `permission` or `question`; default: `permission` when `tool_name` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<InputKind>,
    /// The asker's own key for this request (a tool call's id, say): asking
    /// again with it returns the same request, so a retry never asks twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub tool_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// `GET /api/v1/input-requests`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InputRequestsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<InputState>)]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtid: Option<String>,
    /// 1 to 1000; default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// `GET /api/v1/input-requests/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct InputRequestQuery {
    /// Wait up to this many seconds (at most 60) for a pending request to
    /// end before answering; the answer is the request either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0, maximum = 60)]
    pub wait: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct InputRequestList {
    /// Newest first.
    pub requests: Vec<InputRequest>,
    /// The event-log cursor the list is valid at: follow `input.*` events from it.
    pub cursor: i64,
}

/// `POST /api/v1/runs/{run_id}/token`: the run token the worker holding a
/// run gives its agent (`SHEPHERD_RUN_TOKEN`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTokenRequest {
    pub claim_token: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunToken {
    pub run_id: String,
    /// `srt_…`: may ask for input and read its own run and requests, nothing else.
    pub token: String,
}

/// The MCP server name and tool Claude Code asks for permission through
/// (`--permission-prompt-tool mcp__shepherd__approve`): `shepherd
/// permission-tool`, which the runner configures for agents with
/// `permissions = "ask"`.
pub const PERMISSION_TOOL_SERVER: &str = "shepherd";
pub const PERMISSION_TOOL: &str = "approve";
