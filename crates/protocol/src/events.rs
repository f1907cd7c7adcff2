//! The event log on the wire: the JSON page (`GET /api/v1/events`) and the
//! server-sent event stream (`GET /api/events`).
//!
//! Every SSE frame's `data:` is one [`WireEvent`] (the `event:` name is the
//! log type, or the Workers page contract's name for run activity: `worker_started`,
//! `worker_status`, `tool_started`, `tool_completed`, `worker_completed`),
//! except `resync`, whose data is a [`Resync`]. The `data` field of each
//! event type is one of the payload types of `shepherd_core::event::payloads`
//! (re-exported here): the store writes events from the same types, so the
//! schema below describes exactly what is written.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

pub use shepherd_core::event::payloads::*;
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
    /// Only the changes of this actor: a user's name, `worker:<id>`,
    /// `run:<id>` or `system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
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
    /// Only the changes of this actor: a user's name (`GET
    /// /api/v1/events?actor=alice`: what alice did), `worker:<id>`,
    /// `run:<id>` or `system`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
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

/// What an SSE frame's `data:` line holds: an event, or a `resync` notice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StreamData {
    Event(Box<WireEvent>),
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
        F::of::<RunStuck>("RunStuckEvent", vec![k::RUN_STUCK]),
        F::of::<InputRequested>("InputRequestedEvent", vec![k::INPUT_REQUESTED]),
        F::of::<InputAnswered>("InputAnsweredEvent", vec![k::INPUT_ANSWERED]),
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
        F::of::<UserChanged>("UserChangedEvent", vec![k::USER_CREATED, k::USER_UPDATED]),
        F::of::<UserLoggedIn>("UserLoggedInEvent", vec![k::USER_LOGIN]),
        F::of::<UserLoggedOut>("UserLoggedOutEvent", vec![k::USER_LOGOUT]),
        F::of::<TokenChanged>(
            "TokenChangedEvent",
            vec![k::TOKEN_CREATED, k::TOKEN_REVOKED],
        ),
        F::of::<HostRegistered>("HostRegisteredEvent", vec![k::HOST_REGISTERED]),
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
