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
///
/// In Rust `data` stays a JSON value, so a client reads events of types it
/// does not know yet; the OpenAPI schema (written by hand, below) says what
/// `data` is for each type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// `cursor_expired` or `slow_consumer`.
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
    /// Claims the worker holds after this grant (1: it was idle until now).
    /// Absent from events written by earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_active_claims: Option<i64>,
}

/// `data` of `worker.claim.released` and `worker.claim.expired`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ClaimReleased {
    pub claim_id: String,
    pub purpose: shepherd_core::status::ClaimPurpose,
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

// ---------------------------------------------------------------------------
// The other event types' `data`. The store writes each with `json!` (it does
// not depend on this crate); `crates/shepherd/tests/event_schemas.rs` holds
// every event of a real run, on both stores, to these schemas.

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
/// log from an earlier version may hold it): seed 001's `worker_active` now
/// comes from `worker.claim.granted` with `worker_active_claims` 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerActive {
    pub vtid: String,
    pub run_id: String,
}

/// `data` of `worker.idle`: the worker's last claim ended. No longer written
/// (a log from an earlier version may hold it): seed 001's `worker_idle` now
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

/// One worker in a `workers.snapshot` (seed 001's fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SnapshotWorker {
    pub worker_id: String,
    pub session_id: Option<String>,
    pub name: Option<String>,
    pub project_path: Option<String>,
    pub terminal_id: Option<String>,
    pub agent_type: String,
    pub worker_type: String,
    pub registry_status: String,
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
    pub usage: shepherd_core::usage::Usage,
}

/// `data` of `channel.created` and `channel.updated`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ChannelChanged {
    pub name: String,
    /// Set when the channel is a resource with an agent (seed 002).
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
    #[serde(default)]
    pub max_concurrent: Option<i64>,
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
    pub signal: Option<String>,
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

/// What an SSE frame's `data:` line holds: an event, or a `resync` notice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StreamData {
    Event(WireEvent),
    Resync(Resync),
}

// ---------------------------------------------------------------------------
// The OpenAPI schema of `WireEvent`: the envelope, then one schema per event
// type whose `type` is an enum of that type's name and whose `data` is its
// payload. Written by hand because `data` is a JSON value in Rust (see
// `WireEvent`); the table below is the only place that says which payload a
// type carries.

use std::borrow::Cow;
use utoipa::openapi::schema::{
    AllOfBuilder, Discriminator, KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat,
    Type,
};
use utoipa::openapi::{Ref, RefOr};

type Components = Vec<(String, RefOr<Schema>)>;

/// A group of event types sharing one payload, as one named component.
pub struct EventFamily {
    /// The component's name (`TaskStateChangedEvent`).
    pub component: &'static str,
    pub types: Vec<&'static str>,
    /// The payload component's name (`TaskStateChanged`).
    pub payload: Cow<'static, str>,
    collect: fn(&mut Components),
}

impl EventFamily {
    fn of<T: ToSchema>(component: &'static str, types: Vec<&'static str>) -> Self {
        EventFamily {
            component,
            types,
            payload: T::name(),
            collect: |out| {
                out.push((
                    T::name().into_owned(),
                    <T as utoipa::PartialSchema>::schema(),
                ));
                T::schemas(out);
            },
        }
    }

    /// The envelope, then `type` (this family's names) and `data` (its payload).
    fn schema(&self) -> RefOr<Schema> {
        let names = self.types.join("`, `");
        AllOfBuilder::new()
            .description(Some(format!("An event of type `{names}`.")))
            .item(Ref::from_schema_name(ENVELOPE))
            .item(
                ObjectBuilder::new()
                    .property(
                        "type",
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .enum_values(Some(self.types.iter().copied())),
                    )
                    .required("type")
                    .property("data", Ref::from_schema_name(self.payload.clone()))
                    .required("data"),
            )
            .into()
    }
}

/// Every event type the server writes to its log, with its payload. A type
/// missing here is missing from the OpenAPI document: `api`'s tests compare
/// this with `shepherd_core::event::kind::ALL` and the workflows' event types.
pub fn event_families() -> Vec<EventFamily> {
    use shepherd_core::event::kind as k;
    type F = EventFamily;
    vec![
        F::of::<WorkerRegisteredData>("WorkerRegisteredEvent", vec![k::WORKER_REGISTERED]),
        F::of::<WorkerActive>("WorkerActiveEvent", vec![k::WORKER_ACTIVE]),
        F::of::<WorkerIdle>("WorkerIdleEvent", vec![k::WORKER_IDLE]),
        F::of::<WorkerInactive>("WorkerInactiveEvent", vec![k::WORKER_INACTIVE]),
        F::of::<WorkerClosed>("WorkerClosedEvent", vec![k::WORKER_CLOSED]),
        F::of::<WorkersSnapshot>("WorkersSnapshotEvent", vec![k::WORKERS_SNAPSHOT]),
        F::of::<ServerRecovered>("ServerRecoveredEvent", vec![k::RECOVERY_REPORT]),
        F::of::<TaskCreated>("TaskCreatedEvent", vec![k::TASK_CREATED]),
        F::of::<TaskDispatched>("TaskDispatchedEvent", vec![k::TASK_DISPATCHED]),
        F::of::<TaskStateChanged>("TaskStateChangedEvent", vec![k::TASK_STATE_CHANGED]),
        F::of::<CancelRequested>("TaskCancelRequestedEvent", vec![k::TASK_CANCEL_REQUESTED]),
        F::of::<TransitionRejected>(
            "TaskTransitionRejectedEvent",
            vec![k::TASK_TRANSITION_REJECTED],
        ),
        F::of::<RetryScheduled>("TaskRetryScheduledEvent", vec![k::TASK_RETRY_SCHEDULED]),
        F::of::<ClaimGranted>("ClaimGrantedEvent", vec![k::CLAIM_GRANTED]),
        F::of::<ClaimReleased>(
            "ClaimReleasedEvent",
            vec![k::CLAIM_RELEASED, k::CLAIM_EXPIRED],
        ),
        F::of::<RunStarted>("RunStartedEvent", vec![k::RUN_STARTED]),
        F::of::<RunStatusChanged>("RunStatusEvent", vec![k::RUN_STATUS]),
        F::of::<RunUsage>("RunUsageEvent", vec![k::RUN_USAGE]),
        F::of::<RunStep>("RunStepEvent", vec![k::RUN_STEP]),
        F::of::<RunCompleted>("RunCompletedEvent", vec![k::RUN_COMPLETED]),
        F::of::<ChannelChanged>(
            "ChannelChangedEvent",
            vec![k::CHANNEL_CREATED, k::CHANNEL_UPDATED],
        ),
        F::of::<ChannelArchived>("ChannelArchivedEvent", vec![k::CHANNEL_ARCHIVED]),
        F::of::<AgentUpserted>("AgentUpsertedEvent", vec![k::AGENT_UPSERTED]),
        F::of::<ConversationCreated>("ConversationCreatedEvent", vec![k::CONVERSATION_CREATED]),
        F::of::<ConversationStateChanged>(
            "ConversationStateChangedEvent",
            vec![k::CONVERSATION_STATE_CHANGED],
        ),
        F::of::<ConversationMessageData>("ConversationMessageEvent", vec![k::CONVERSATION_MESSAGE]),
        F::of::<ConversationActivated>(
            "ConversationActivatedEvent",
            vec![k::CONVERSATION_ACTIVATED],
        ),
        F::of::<ConversationAgentSession>(
            "ConversationAgentSessionEvent",
            vec![k::CONVERSATION_AGENT_SESSION],
        ),
        F::of::<SessionCreated>("SessionCreatedEvent", vec![k::SESSION_CREATED]),
        F::of::<SessionDeleted>("SessionDeletedEvent", vec![k::SESSION_DELETED]),
        F::of::<SessionWorkerAdded>("SessionWorkerAddedEvent", vec![k::SESSION_WORKER_ADDED]),
        F::of::<SessionWorkerStarted>(
            "SessionWorkerStartedEvent",
            vec![k::SESSION_WORKER_RESTORED, k::SESSION_WORKER_RESTARTED],
        ),
        F::of::<SessionWorkerExited>("SessionWorkerExitedEvent", vec![k::SESSION_WORKER_EXITED]),
        F::of::<SessionWorkerRemoved>("SessionWorkerRemovedEvent", vec![k::SESSION_WORKER_REMOVED]),
        // Progress from workers and events from outside: the workflows' types.
        F::of::<ProgressRecorded>("ProgressEvent", shepherd_core::workflow::event_types()),
    ]
}

/// The component holding what every event has besides `type` and `data`.
const ENVELOPE: &str = "EventEnvelope";

fn envelope_schema() -> RefOr<Schema> {
    let int64 = || {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
    };
    AllOfBuilder::new()
        .description(Some(
            "What every event has: its cursor, its time and the ids it concerns.",
        ))
        .item(
            ObjectBuilder::new()
                .property(
                    "id",
                    int64().description(Some("The cursor; equal to `seq`.")),
                )
                .required("id")
                .property("seq", int64())
                .required("seq")
                .property(
                    "ts",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
                )
                .required("ts"),
        )
        .item(Ref::from_schema_name(
            <shepherd_core::event::EventRefs as ToSchema>::name(),
        ))
        .into()
}

impl utoipa::PartialSchema for WireEvent {
    /// One of the event families, told apart by `type`.
    fn schema() -> RefOr<Schema> {
        let families = event_families();
        let target = |f: &EventFamily| format!("#/components/schemas/{}", f.component);
        let mapping = families
            .iter()
            .flat_map(|f| f.types.iter().map(move |t| (t.to_string(), target(f))));
        let mut one_of = OneOfBuilder::new()
            .description(Some(
                "One event of the log: the envelope (cursor, time, ids), `type`, and the `data` \
                 that type carries.",
            ))
            .discriminator(Some(Discriminator::with_mapping("type", mapping)));
        for f in &families {
            one_of = one_of.item(Ref::from_schema_name(f.component));
        }
        one_of.into()
    }
}

impl ToSchema for WireEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("WireEvent")
    }

    fn schemas(out: &mut Components) {
        use shepherd_core::event::EventRefs;
        out.push((
            EventRefs::name().into_owned(),
            <EventRefs as utoipa::PartialSchema>::schema(),
        ));
        EventRefs::schemas(out);
        out.push((ENVELOPE.to_owned(), envelope_schema()));
        for f in &event_families() {
            out.push((f.component.to_owned(), f.schema()));
            (f.collect)(out);
        }
    }
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
