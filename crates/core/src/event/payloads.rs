//! What each event type carries in its `data`, as types: the store builds
//! every event it appends from one of these, and the OpenAPI document
//! describes `data` with their schemas (`shepherd_protocol::events` lists
//! which event types carry which payload), so what is written and what is
//! documented cannot drift apart.
//!
//! Each type serialises to exactly the JSON the log has always held: an
//! `Option` without `skip_serializing_if` is written as `null`, one with it
//! is left out, as events already in the log have them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A type that is the `data` of some event type. Only these go into
/// [`NewEvent::typed`](super::NewEvent::typed), so the store cannot write
/// a payload the OpenAPI document does not describe.
pub trait EventPayload: Serialize {}

/// Marks each payload type as one.
macro_rules! event_payloads {
    ($($payload:ty),+ $(,)?) => {
        $(impl EventPayload for $payload {})+
    };
}

event_payloads!(
    TaskStateChanged,
    ProgressRecorded,
    RunStarted,
    RunStatusChanged,
    RunStep,
    RunCompleted,
    ClaimGranted,
    ClaimReleased,
    CancelRequested,
    ConversationStateChanged,
    RetryScheduled,
    WorkerRegisteredData,
    WorkerActive,
    WorkerIdle,
    WorkerInactive,
    WorkerClosed,
    WorkersSnapshot,
    ServerRecovered,
    TaskCreated,
    TaskDispatched,
    TransitionRejected,
    RunUsage,
    ChannelChanged,
    ChannelArchived,
    AgentUpserted,
    ConversationCreated,
    ConversationMessageData,
    ConversationActivated,
    ConversationAgentSession,
    SessionCreated,
    SessionDeleted,
    SessionWorkerAdded,
    SessionWorkerStarted,
    SessionWorkerExited,
    SessionWorkerRemoved,
    InputRequested,
    InputAnswered,
    RunStuck,
    UserChanged,
    UserLoggedIn,
    UserLoggedOut,
    TokenChanged,
    HostRegistered,
);

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
    /// What the worker sent along (any JSON; `null` when nothing).
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
    pub purpose: crate::status::ClaimPurpose,
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
    pub status: crate::status::RunStatus,
    pub result: Option<String>,
    pub reason: String,
    pub steps: i64,
    /// True exactly when the run ended `done` (the Workers page contract's
    /// completion flag: a failed or cancelled run is not a success).
    pub success: bool,
}

/// Completes `data` that an older build wrote for an event of `kind` with
/// the fields a reader of today relies on, derived from what it holds: the
/// log is never rewritten, so a field added to a payload later reaches old
/// events here, as they are read. Unknown kinds and other shapes are left
/// as they are.
pub fn complete_old_data(kind: &str, data: &mut serde_json::Value) {
    use serde_json::Value;
    let Value::Object(fields) = data else {
        return;
    };
    match kind {
        super::kind::RUN_COMPLETED if !fields.contains_key("success") => {
            let done = fields.get("status").and_then(Value::as_str) == Some("done");
            fields.insert("success".to_owned(), Value::Bool(done));
        }
        // The signal was once written as text ("9").
        super::kind::SESSION_WORKER_EXITED => {
            if let Some(Value::String(text)) = fields.get("signal") {
                let number = text.parse::<i64>().map_or(Value::Null, Value::from);
                fields.insert("signal".to_owned(), number);
            }
        }
        _ => {}
    }
}

/// `data` of `worker.claim.granted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClaimGranted {
    pub claim_id: String,
    pub attempt: i64,
    /// Milliseconds since the Unix epoch.
    pub expires_at: i64,
    pub purpose: crate::status::ClaimPurpose,
    /// Claims the worker holds after this grant (1: it was idle until now).
    /// Absent from events written by earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_active_claims: Option<i64>,
}

/// `data` of `worker.claim.released` and `worker.claim.expired`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClaimReleased {
    pub claim_id: String,
    pub purpose: crate::status::ClaimPurpose,
    pub reason: String,
    /// Claims the worker still holds after this one ended (0: it is idle).
    /// Absent from events written by earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_active_claims: Option<i64>,
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

/// `data` of `worker.registered` when a worker registers (or a PTY tab does).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerRegistered {
    /// The worker id was registered before (a restart of the same worker).
    pub re_registered: bool,
    pub name: Option<String>,
    pub project_path: Option<String>,
    pub terminal_id: Option<String>,
    pub worker_type: String,
    pub capabilities: Vec<String>,
    pub max_concurrent: i64,
}

/// `data` of `worker.registered` when an inactive worker is heard from again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerResumed {
    /// Always `true`.
    pub resumed: bool,
}

/// `data` of `worker.registered`: a registration, or a lapsed worker back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(untagged)]
pub enum WorkerRegisteredData {
    Registered(WorkerRegistered),
    Resumed(WorkerResumed),
}

/// `data` of `worker.active`: the worker took a claim. No longer written (a
/// log from an earlier version may hold it): the worker registry contract's `worker_active` now
/// comes from `worker.claim.granted` with `worker_active_claims` 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerActive {
    pub vtid: String,
    pub run_id: String,
}

/// `data` of `worker.idle`: the worker's last claim ended. No longer written
/// (a log from an earlier version may hold it): the worker registry contract's `worker_idle` now
/// comes from `worker.claim.released` / `worker.claim.expired` with
/// `worker_active_claims` 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerIdle {
    /// The task whose claim ended.
    pub released: String,
}

/// `data` of `worker.inactive`: its heartbeats lapsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerInactive {
    pub reason: String,
}

/// `data` of `worker.closed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerClosed {
    pub reason: String,
    /// Claims released by a deregistration (absent when a PTY tab closes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_claims: Option<i64>,
}

/// One worker in a `workers.snapshot` (the worker registry contract's fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SnapshotWorker {
    pub worker_id: String,
    pub session_id: Option<String>,
    pub name: Option<String>,
    pub project_path: Option<String>,
    pub terminal_id: Option<String>,
    pub agent_type: String,
    pub worker_type: String,
    pub registry_status: crate::status::WorkerStatus,
    /// `active` or `idle`.
    pub state: String,
    /// `busy` or `ready`.
    pub status: String,
    pub created_at: String,
    pub last_activity: Option<String>,
    pub last_heartbeat_at: String,
}

/// `data` of `workers.snapshot`: every worker not closed, at start-up and on a timer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkersSnapshot {
    pub count: i64,
    pub workers: Vec<SnapshotWorker>,
    pub reason: String,
}

/// `data` of `server.recovered`: workers found in storage at start-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ServerRecovered {
    pub added: i64,
    pub updated: i64,
    pub ignored: i64,
    /// RFC 3339.
    pub timestamp: String,
}

/// `data` of `task.created`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TaskCreated {
    pub title: String,
    pub priority: i64,
    pub workflow: String,
    pub capabilities: Vec<String>,
    pub state: String,
}

/// `data` of `task.dispatched`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TaskDispatched {
    /// The frozen copy of the spec the workers get.
    pub spec_snapshot_id: String,
    pub priority: i64,
}

/// `data` of `task.transition_rejected`: a known event the task's state does not take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TransitionRejected {
    pub event: String,
    pub state: String,
    pub message: Option<String>,
    /// What the reporter sent along (any JSON; `null` when nothing).
    pub metadata: Value,
}

/// `data` of `run.usage`: the run's running total.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunUsage {
    pub usage: crate::usage::Usage,
}

/// `data` of `channel.created` and `channel.updated`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ChannelChanged {
    pub name: String,
    /// Set when the channel is a resource with an agent (the conversations contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `data` of `channel.archived`: nothing (the channel is in `channel_id`).
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
pub struct ChannelArchived {}

/// `data` of `agent.upserted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct AgentUpserted {
    /// `config` or `registration`.
    pub source: String,
    pub worker_type: String,
    /// Only for agents from the configuration (`null` when not set there).
    // Outer `None`: left out (an agent first seen through a registration);
    // `Some(None)`: written as `null` (a configured agent without a limit).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schema(value_type = Option<i64>)]
    #[schemars(with = "Option<i64>")]
    pub max_concurrent: Option<Option<i64>>,
}

/// Reads a field that is there, `null` included, as `Some`: with
/// `#[serde(default)]` an absent field stays `None`, so the two differ.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// `data` of `conversation.created`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ConversationCreated {
    pub resource_id: String,
    pub state: String,
    pub active: bool,
    /// The conversation that was active on the resource before.
    pub previous_active: Option<String>,
    /// A conversation that was processing and was cancelled for this one.
    pub cancelled: Option<String>,
}

/// `data` of `conversation.message` when a message is posted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct MessagePosted {
    pub message_id: String,
    pub ordinal: i64,
    /// `queued`, `processing`, …
    pub status: String,
    /// The first 200 bytes of the text.
    pub preview: String,
}

/// `data` of `conversation.message` when queued messages are dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct MessagesDropped {
    /// Always `dropped`.
    pub status: String,
    pub count: i64,
    pub reason: String,
}

/// `data` of `conversation.message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ConversationMessageData {
    Posted(MessagePosted),
    Dropped(MessagesDropped),
}

/// `data` of `conversation.activated`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ConversationActivated {
    pub previous_active: Option<String>,
}

/// `data` of `conversation.agent_session`: the agent's own session id, to continue it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ConversationAgentSession {
    pub agent_session_id: String,
    pub previous: Option<String>,
}

/// `data` of `host.registered`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HostRegistered {
    pub host_id: String,
    pub name: String,
    pub kind: crate::status::HostKind,
    /// Whether the host was known before (a runner that came back).
    pub re_registered: bool,
    pub sessions_root: Option<String>,
    pub agents: Vec<String>,
}

/// `data` of `session.created`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionCreated {
    pub name: String,
    pub location_path: String,
    pub node_id: String,
}

/// `data` of `session.deleted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionDeleted {
    /// How many tabs it had.
    pub workers: i64,
}

/// `data` of `session.worker.added`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionWorkerAdded {
    /// The tab's type (`terminal`, `agent`, `git-diff`).
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub agent_id: Option<String>,
    pub pid: Option<i64>,
    pub epoch: i64,
}

/// `data` of `session.worker.restored` and `session.worker.restarted`: a new process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionWorkerStarted {
    pub pid: i64,
    pub epoch: i64,
    pub previous_pid: Option<i64>,
    /// `continue` or `fresh`.
    pub mode: String,
}

/// `data` of `session.worker.exited`: the tab's process ended, or could not be restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionWorkerExited {
    /// The process that ended (absent when a restore failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
    #[serde(rename = "exitCode")]
    pub exit_code: Option<i64>,
    /// The number of the signal that ended the process, if one did (as in
    /// the WebSocket's `exit` message).
    pub signal: Option<i64>,
    /// Present (`true`) when a restore failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_failed: Option<bool>,
    /// Why the restore failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `data` of `session.worker.removed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionWorkerRemoved {
    #[serde(rename = "type")]
    pub kind: String,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data<P: EventPayload>(payload: &P) -> Value {
        crate::event::NewEvent::typed("test", Default::default(), payload).data
    }

    #[test]
    fn an_agent_from_a_registration_has_no_limit_and_a_configured_one_a_null() {
        let registered = AgentUpserted {
            source: "registration".into(),
            worker_type: "builtin".into(),
            max_concurrent: None,
        };
        assert_eq!(
            data(&registered),
            json!({ "source": "registration", "worker_type": "builtin" })
        );
        let configured = AgentUpserted {
            max_concurrent: Some(None),
            source: "config".into(),
            ..registered.clone()
        };
        let written = data(&configured);
        assert_eq!(
            written,
            json!({ "source": "config", "worker_type": "builtin", "max_concurrent": null })
        );
        // Read back, the two stay apart.
        let read: AgentUpserted = serde_json::from_value(written).unwrap();
        assert_eq!(read, configured);
        let read: AgentUpserted = serde_json::from_value(data(&registered)).unwrap();
        assert_eq!(read, registered);
    }

    #[test]
    fn an_old_run_completed_gains_success_from_its_status() {
        let mut old =
            json!({ "status": "failed", "result": null, "reason": "exit code 3", "steps": 1 });
        complete_old_data(crate::event::kind::RUN_COMPLETED, &mut old);
        assert_eq!(old["success"], json!(false));
        let mut done = json!({ "status": "done", "result": "ok", "reason": "", "steps": 2 });
        complete_old_data(crate::event::kind::RUN_COMPLETED, &mut done);
        assert_eq!(done["success"], json!(true));
        // What a run recorded itself is never overwritten, nor other kinds.
        let mut new = json!({ "status": "done", "success": false });
        complete_old_data(crate::event::kind::RUN_COMPLETED, &mut new);
        assert_eq!(new["success"], json!(false));
        let mut other = json!({ "status": "done" });
        complete_old_data(crate::event::kind::RUN_STATUS, &mut other);
        assert!(other.get("success").is_none());
    }

    #[test]
    fn an_old_exit_signal_written_as_text_reads_as_a_number() {
        let mut old = json!({ "epoch": 1, "exitCode": null, "signal": "9" });
        complete_old_data(crate::event::kind::SESSION_WORKER_EXITED, &mut old);
        assert_eq!(old["signal"], json!(9));
        let parsed: SessionWorkerExited = serde_json::from_value(old).unwrap();
        assert_eq!(parsed.signal, Some(9));
    }

    #[test]
    fn a_failed_restore_writes_a_null_signal_and_no_epoch() {
        let exited = SessionWorkerExited {
            epoch: None,
            exit_code: Some(1),
            signal: None,
            restore_failed: Some(true),
            reason: Some("gone".into()),
        };
        assert_eq!(
            data(&exited),
            json!({ "restore_failed": true, "reason": "gone", "exitCode": 1, "signal": null })
        );
    }

    #[test]
    fn a_variant_of_an_untagged_payload_is_written_as_its_fields() {
        let resumed = WorkerRegisteredData::Resumed(WorkerResumed { resumed: true });
        assert_eq!(data(&resumed), json!({ "resumed": true }));
        assert_eq!(data(&ChannelArchived {}), json!({}));
    }
}

/// `data` of `input.requested`: the request as it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct InputRequested {
    pub request: crate::input::InputRequest,
}

/// `data` of `input.answered`: how a request ended (answered by a person
/// or a rule, expired, or withdrawn with its run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct InputAnswered {
    pub id: String,
    pub kind: crate::input::InputKind,
    pub state: crate::input::InputState,
    pub answer: Option<crate::input::InputAnswer>,
    pub answered_by: Option<String>,
    /// Requests of the run still pending after this one.
    pub pending_input: i64,
}

/// `data` of `run.stuck`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunStuck {
    /// Milliseconds since the run's last step (or its start, without one).
    pub quiet_ms: i64,
    pub steps: i64,
    /// The agent's `stuck_after`, in milliseconds.
    pub stuck_after_ms: i64,
}

/// `data` of `user.created` and `user.updated`: the user as they are now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct UserChanged {
    pub name: String,
    pub role: crate::role::Role,
    pub disabled: bool,
}

/// `data` of `user.login`: who signed in, as what, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct UserLoggedIn {
    pub name: String,
    /// The role the login gave them (from the provider's groups).
    pub role: crate::role::Role,
    /// `oidc`.
    pub via: String,
}

/// `data` of `user.logout`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct UserLoggedOut {
    pub name: String,
}

/// `data` of `token.created` and `token.revoked` (never the secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TokenChanged {
    pub id: String,
    pub name: String,
    /// Whose token it is.
    pub user: String,
    /// RFC 3339; none: it does not expire.
    pub expires_at: Option<String>,
}
