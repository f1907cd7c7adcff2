//! The tools' arguments and answers as typed structs. Their JSON Schemas
//! (from `schemars`) are the tools' `inputSchema` and `outputSchema`; the
//! answers are read from the REST API's JSON into these types, so a shape
//! the API changes without this crate fails loudly instead of drifting.
//!
//! Field names follow the REST API and the seeds (001 for workers and
//! worker events, 000 for runs) exactly.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// A worker as seed 001's `list_workers` shows it, live or recovered.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkerInfo {
    pub worker_id: String,
    pub session_id: Option<String>,
    pub name: Option<String>,
    pub project_path: Option<String>,
    pub terminal_id: Option<String>,
    /// The agent the worker runs (seed 001's `agent_type`).
    pub agent_type: String,
    /// `ready` (idle), `busy` (active) or `closed`.
    pub status: String,
    /// ISO 8601.
    pub last_activity: String,
    /// ISO 8601.
    pub created_at: String,
    /// `registry` (heard from since this server started) or `event_log`
    /// (recovered from storage after a restart).
    pub source: String,
    /// `idle`, `active` or `closed`.
    pub event_state: String,
    /// When recovery happened (ISO 8601); null for live workers.
    pub recovered_at: Option<String>,
    /// The newest lifecycle event of this worker (ISO 8601).
    pub last_event_ts: Option<String>,
    pub agent_id: String,
    pub worker_type: String,
    /// The registry's own status: `active`, `inactive` or `terminated`.
    pub registry_status: String,
    pub last_heartbeat_at: String,
    pub capabilities: Vec<String>,
    pub max_concurrent: i64,
    pub active_claims: i64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct WorkerList {
    pub workers: Vec<WorkerInfo>,
    pub count: i64,
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

/// One worker lifecycle event (seed 001), with its stable `id`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkerEvent {
    /// The event's sequence number: unique, increasing, a cursor.
    pub id: i64,
    /// ISO 8601.
    pub ts: String,
    /// `snapshot`, `worker_started`, `worker_idle`, `worker_active` or `worker_closed`.
    #[serde(rename = "type")]
    pub kind: String,
    pub worker_id: Option<String>,
    pub data: Value,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct WorkerEventsSummary {
    pub started: Vec<String>,
    pub closed: Vec<String>,
    pub idle: Vec<String>,
    pub active: Vec<String>,
    /// Active workers with no progress for longer than the threshold.
    pub stuck: Vec<String>,
    /// The newest event's time in this answer.
    pub last_event_ts: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    pub id: i64,
    pub ts: String,
    /// `{count, workers: [...]}`.
    pub data: Value,
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
    pub summary: Option<WorkerEventsSummary>,
    /// Present (possibly null) when `include_snapshot` was set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<Option<Snapshot>>,
}

/// The REST route's answer, as read.
#[derive(Debug, Deserialize)]
pub struct RestWorkerEvents {
    pub events: Vec<WorkerEvent>,
    pub next_cursor: i64,
    #[serde(default)]
    pub summary: Option<WorkerEventsSummary>,
    #[serde(default)]
    pub snapshot: Option<Snapshot>,
}

// ------------------------------------------------------------------ tasks

/// A unit of work.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Task {
    pub vtid: String,
    pub title: String,
    /// Markdown.
    pub spec: String,
    pub priority: i64,
    pub capabilities: Vec<String>,
    pub agent_id: Option<String>,
    pub channel_id: Option<String>,
    /// `simple` or `autopilot`.
    pub workflow: String,
    /// `draft`, `pending`, `claimed`, `running` (simple) or `in_progress`, `building`,
    /// `pr_created`, `reviewing` (autopilot); final: `done`, `failed`, `cancelled`.
    pub state: String,
    pub spec_snapshot_id: Option<String>,
    pub dispatched_at: Option<String>,
    pub builder_worker_id: Option<String>,
    pub cancel_requested_at: Option<String>,
    pub attempts: i64,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitTaskArgs {
    pub title: String,
    /// What to do, in markdown (given to the agent as its prompt).
    #[serde(default)]
    pub spec: String,
    /// The agent that must run it (e.g. `demo`); any matching worker if omitted.
    pub agent: Option<String>,
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

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct TaskList {
    pub tasks: Vec<Task>,
    pub total: i64,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessionsArgs {}

/// One tab of a session (seed 004): a PTY (`agent`, `terminal`) or `git-diff`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct SessionTab {
    pub id: String,
    /// `agent`, `terminal` or `git-diff`.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub agent_id: Option<String>,
    pub created_at: String,
    pub pid: Option<i64>,
    /// Whether the tab's process runs now (a stopped tab is restored when a client attaches).
    pub alive: bool,
    pub epoch: i64,
    pub exit_code: Option<i64>,
    pub exited_at: Option<String>,
}

/// A workspace with its tabs.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    pub id: String,
    pub name: String,
    pub location_path: String,
    pub created_at: String,
    /// The node that hosts the session's processes.
    pub node_id: String,
    pub node_address: Option<String>,
    pub workers: Vec<SessionTab>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    pub sessions: Vec<Session>,
    pub count: usize,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VtidArgs {
    pub vtid: String,
}

/// A lease of a task by a worker.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Claim {
    pub id: String,
    pub vtid: String,
    pub worker_id: String,
    pub run_id: String,
    /// `build` or `validate`.
    pub purpose: String,
    pub claimed_at: String,
    pub expires_at: String,
    pub released_at: Option<String>,
    pub release_reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: Task,
    pub claims: Vec<Claim>,
    /// The task's latest events, oldest first.
    pub events: Vec<Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelTaskArgs {
    pub vtid: String,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct PendingWorker {
    pub worker_id: String,
    pub run_id: String,
    pub grace_secs: i64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CancelAnswer {
    pub ok: bool,
    /// True when the task was cancelled outright; false when a worker holds
    /// it and has been told to stop (see `pending_worker`).
    pub cancelled: bool,
    pub pending_worker: Option<PendingWorker>,
    pub task: Task,
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

/// Seed 000's list item: a run (there called a "worker").
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunInfo {
    pub id: String,
    pub task: String,
    pub status: String,
    pub worker_type: String,
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub has_transcript: bool,
    pub live_status: Option<String>,
    pub tool_calls: i64,
    pub agent_id: String,
    pub vtid: String,
    pub active_tool: Option<String>,
}

/// Seed 000's list shape.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RunList {
    pub workers: Vec<RunInfo>,
    pub total: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetRunArgs {
    pub run_id: String,
    /// Include the whole transcript (seed 000's detail); for long runs use
    /// `get_transcript`, which pages.
    #[serde(default)]
    pub include_transcript: bool,
}

/// Seed 000's detail shape.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct RunDetail {
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
    pub transcript: Option<Option<Vec<Value>>>,
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

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct IndexedStep {
    pub index: i64,
    /// Seed 000's transcript step; null when the step alone was larger than
    /// the size cap (`omitted_bytes` says how large).
    pub step: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted_bytes: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TranscriptPage {
    pub run_id: String,
    /// The run's status when read.
    pub status: String,
    pub steps: Vec<IndexedStep>,
    /// Pass as `start_index` for the next page.
    pub next_index: i64,
    /// More steps are stored after these already.
    pub has_more: bool,
    /// The run has ended and every step was returned.
    pub complete: bool,
}

/// The REST steps route's answer, as read.
#[derive(Debug, Deserialize)]
pub struct RestSteps {
    pub status: String,
    pub steps: Vec<IndexedStep>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RestRun {
    pub id: String,
    pub vtid: String,
    pub status: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RestRunList {
    pub runs: Vec<RestRun>,
}

/// A tool's failure, as its `structuredContent` carries it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ToolError {
    pub error: ErrorBody,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// The REST API's stable snake_case code (e.g. `task_not_found`).
    pub code: String,
    pub message: String,
}

// ---------------------------------------------------------- conversations

/// What to do with a message sent while the conversation is busy (seed 002).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Multitask {
    /// Refuse with `conversation_busy` (the default).
    Reject,
    /// Run it after the current run.
    Enqueue,
    /// Cancel the current run (its partial work kept), then run it.
    Interrupt,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessageArgs {
    pub conversation_id: String,
    /// The user's message; the resource's agent answers it in a new run.
    pub text: String,
    /// While a reply is still running: `reject` (default), `enqueue` or `interrupt`.
    pub multitask: Option<Multitask>,
}

/// A conversation as the REST API lists it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ConversationInfo {
    pub id: String,
    pub resource_id: String,
    /// `idle`, `processing` or `cancelled`.
    pub state: String,
    /// Whether it is the resource's active conversation.
    pub active: bool,
    pub created_at: String,
    pub updated_at: String,
    /// User messages so far.
    pub messages: i64,
    /// The agent's own conversation id, captured from its output.
    pub agent_session_id: Option<String>,
}

/// A user message as stored.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct MessageRecord {
    pub id: String,
    pub conversation_id: String,
    /// 1 for the conversation's first message.
    pub ordinal: i64,
    pub text: String,
    /// `sent` (its run is queued or running) or `queued` (waits for the current run).
    pub status: String,
    /// The task answering it, once sent.
    pub task_id: Option<String>,
    pub created_at: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct SendMessageAnswer {
    pub message: MessageRecord,
    pub conversation: ConversationInfo,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelConversationArgs {
    pub conversation_id: String,
    pub reason: Option<String>,
}
