//! The tools' arguments and answers as typed structs. Their JSON Schemas
//! (from `schemars`) are the tools' `inputSchema` and `outputSchema`; the
//! answers are read from the REST API's JSON into these types, so a shape
//! the API changes without this crate fails loudly instead of drifting.
//!
//! Field names follow the REST API and the seeds (001 for workers and
//! worker events, 000 for runs) exactly. Only the tools' own shapes live
//! here (arguments, and answers that page, combine or trim REST answers);
//! every REST shape a tool passes on whole is the protocol crate's. Two
//! answers keep the schema names they always had (`RunDetail`,
//! `IndexedStep`) though their Rust names differ from the protocol's types
//! of those names, whose shapes they do not have.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use shepherd_protocol::{
    CancelResponse, ConversationInfo, ErrorBody, MultitaskMode, SendResponse, SessionList, Task,
    TaskDetail, WorkerEvent, WorkerEventSummary, WorkerInfoList, WorkerListResponse,
    WorkerSnapshot,
};
use shepherd_protocol::{TranscriptStep, WorkerDetailResponse};

// ---------------------------------------------------------------- workers

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListWorkersArgs {
    /// Include workers that have closed (deregistered or terminated).
    #[serde(default)]
    pub include_closed: bool,
    /// Only workers whose `project_path` contains this (case-insensitive).
    pub project_filter: Option<String>,
    /// Only workers of this agent.
    pub agent_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerEventsArgs {
    /// An ISO 8601 time (events at or after it), or a previous answer's
    /// `next_cursor` (events after it, each exactly once). Omit for the most
    /// recent `limit` events.
    pub since: Option<String>,
    /// At most this many events (default 1000, 1 to 10000).
    pub limit: Option<i64>,
    /// Add the latest fleet snapshot, even if it predates `since`.
    #[serde(default)]
    pub include_snapshot: bool,
    /// Add `summary`: who started, closed, went idle or active in this
    /// window, and who is stuck.
    #[serde(default)]
    pub include_summary: bool,
    /// A worker active with no progress for longer than this is `stuck`
    /// (default 10).
    pub stale_threshold_minutes: Option<i64>,
    /// Only events of workers whose `project_path` contains this
    /// (case-insensitive); fleet snapshots are kept.
    pub project_filter: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct WorkerEventsAnswer {
    pub events: Vec<WorkerEvent>,
    pub count: i64,
    /// Pass as `since` to get the events after these, each exactly once.
    pub next_cursor: String,
    /// True when more events may follow `next_cursor` already.
    pub has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<WorkerEventSummary>,
    /// Present (possibly null) when `include_snapshot` was set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<Option<WorkerSnapshot>>,
}

// ------------------------------------------------------------------ tasks

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitTaskArgs {
    pub title: String,
    /// What to do, in markdown (given to the agent as its prompt).
    #[serde(default)]
    pub spec: String,
    /// The agent that must run it (e.g. `demo`); any matching worker if
    /// omitted. An agent nobody configured or declared is refused
    /// (`unknown_agent`) unless `external` is true.
    pub agent: Option<String>,
    /// The agent belongs to an outside worker that has not registered yet.
    #[serde(default)]
    pub external: bool,
    /// Capabilities the worker must have.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// `simple` (default) or `autopilot`.
    pub workflow: Option<String>,
    /// Higher runs first.
    #[serde(default)]
    pub priority: i64,
    /// Your own id for it (`VTID-NNNNN` is generated otherwise).
    pub vtid: Option<String>,
    pub channel_id: Option<String>,
    /// Leave it as a draft instead of offering it to workers at once.
    #[serde(default)]
    pub draft: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SubmitTaskAnswer {
    pub vtid: String,
    pub state: String,
    /// The run, once a worker has claimed the task (often not yet).
    pub run_id: Option<String>,
    pub task: Task,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTasksArgs {
    pub state: Option<String>,
    pub agent_id: Option<String>,
    /// 1 to 500 (default 50).
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessionsArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VtidArgs {
    pub vtid: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelTaskArgs {
    pub vtid: String,
    pub reason: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitForTaskArgs {
    pub vtid: String,
    /// Give up after this many seconds (default 120, at most 3600).
    pub timeout_seconds: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct WaitAnswer {
    pub vtid: String,
    pub state: String,
    /// The task reached `done`, `failed` or `cancelled`.
    #[serde(rename = "final")]
    pub is_final: bool,
    pub timed_out: bool,
    /// Its latest run, if any.
    pub run_id: Option<String>,
    pub task: Task,
}

// ------------------------------------------------------------------- runs

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRunsArgs {
    pub agent_id: Option<String>,
    /// `running`, `done`, `failed` or `cancelled`.
    pub status: Option<String>,
    /// Search in task titles.
    pub q: Option<String>,
    /// 1 to 500 (default 50).
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetRunArgs {
    pub run_id: String,
    /// Include the whole transcript (the Workers page contract's detail); for long runs use
    /// `get_transcript`, which pages.
    #[serde(default)]
    pub include_transcript: bool,
}

// A projection of the protocol's `WorkerDetailResponse` rather than that
// type itself: the REST shape always carries `transcript` (null while
// running or when none was recorded), while `get_run` leaves the key out
// unless it was asked for, a long run's transcript being large. An absent
// key, unlike null, says "not asked for". (Plain comments: a doc comment
// here would become the output schema's description.)
/// The Workers page contract's detail shape, with the transcript only when asked for.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "RunDetail")]
pub struct RunAnswer {
    pub id: String,
    pub task: String,
    pub result: Option<String>,
    pub status: String,
    pub worker_type: String,
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub started_at: String,
    pub completed_at: Option<String>,
    /// Present with `include_transcript`: null while running or when none
    /// was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<Option<Vec<TranscriptStep>>>,
    pub agent_id: String,
    pub vtid: String,
    pub live_status: Option<String>,
    pub tool_calls: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetTranscriptArgs {
    pub run_id: String,
    /// The first step index to return (default 0).
    pub start_index: Option<i64>,
    /// At most this many steps (default 200, 1 to 1000).
    pub max_steps: Option<i64>,
}

// One step of a `TranscriptPage`. Unlike the protocol's `IndexedStep`
// (index and step, always whole), a step too large for the answer's size
// cap comes without its body: `step` null and `omitted_bytes` its size, so
// that paging moves past it instead of stalling.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(rename = "IndexedStep")]
pub struct PageStep {
    pub index: i64,
    /// The Workers page contract's transcript step; null when the step alone was larger than
    /// the size cap (`omitted_bytes` says how large).
    pub step: Option<TranscriptStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_bytes: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TranscriptPage {
    pub run_id: String,
    /// The run's status when read.
    pub status: String,
    pub steps: Vec<PageStep>,
    /// Pass as `start_index` for the next page.
    pub next_index: i64,
    /// More steps are stored after these already.
    pub has_more: bool,
    /// The run has ended and every step was returned.
    pub complete: bool,
}

// ---------------------------------------------------------- conversations

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageArgs {
    pub conversation_id: String,
    /// The user's message; the resource's agent answers it in a new run.
    pub text: String,
    /// While a reply is still running: `reject` (default), `enqueue` or `interrupt`.
    pub multitask: Option<MultitaskMode>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelConversationArgs {
    pub conversation_id: String,
    pub reason: Option<String>,
}

impl RunAnswer {
    /// The REST detail, its transcript kept only when it was asked for.
    pub fn from_rest(d: WorkerDetailResponse, with_transcript: bool) -> Self {
        RunAnswer {
            id: d.id,
            task: d.task,
            result: d.result,
            status: d.status.to_string(),
            worker_type: d.worker_type,
            channel_id: d.channel_id,
            channel_name: d.channel_name,
            started_at: d.started_at,
            completed_at: d.completed_at,
            transcript: with_transcript.then_some(d.transcript),
            agent_id: d.agent_id,
            vtid: d.vtid,
            live_status: d.live_status,
            tool_calls: d.tool_calls,
        }
    }
}

/// `list_input_requests`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListInputRequestsArgs {
    /// `pending` (default), `answered`, `expired`, `withdrawn`, or `all`.
    pub state: Option<String>,
    pub run_id: Option<String>,
    pub vtid: Option<String>,
    /// 1 to 1000 (default 100).
    pub limit: Option<i64>,
}

/// `answer_input_request`: `decision` (and `message`) for a permission,
/// `text` or `option` for a question.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerInputArgs {
    pub id: String,
    pub decision: Option<shepherd_protocol::Decision>,
    pub message: Option<String>,
    pub text: Option<String>,
    pub option: Option<String>,
}
