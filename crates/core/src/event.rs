//! The event log's vocabulary: what an event is, what it concerns, and how a
//! reader says which events it wants.
//!
//! The log uses one unambiguous type name per kind of change (the constants in
//! [`kind`]). Surfaces that speak another dialect (the Workers page contract's run events, seed
//! 001's worker events) map from these names; the log itself never stores two
//! names for one thing.

pub mod payloads;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Millis;
use payloads::EventPayload;

/// Declares each type name as a constant and lists them all in `ALL`, so a
/// new type cannot be added without appearing there (the OpenAPI document
/// must describe every one of them; `api`'s tests check it).
macro_rules! kinds {
    ($($(#[$doc:meta])* $name:ident = $value:literal;)*) => {
        $($(#[$doc])* pub const $name: &str = $value;)*
        /// Every type name above.
        pub const ALL: &[&str] = &[$($name),*];
    };
}

/// Event type names as stored in the log.
pub mod kind {
    /// A worker took its first claim. No longer written: the worker registry contract's
    /// `worker_active` is derived from [`CLAIM_GRANTED`] (its data's
    /// `worker_active_claims` is 1). Logs written before may hold it.
    pub const WORKER_ACTIVE: &str = "worker.active";
    /// A worker's last claim ended. No longer written: the worker registry contract's
    /// `worker_idle` is derived from [`CLAIM_RELEASED`] / [`CLAIM_EXPIRED`]
    /// (`worker_active_claims` 0). Logs written before may hold it.
    pub const WORKER_IDLE: &str = "worker.idle";
    /// Types earlier versions wrote that a log may still hold: documented
    /// and mapped like the others, never written.
    pub const LEGACY: &[&str] = &[WORKER_ACTIVE, WORKER_IDLE];

    kinds! {
        // Workers (the worker registry contract surface: worker_started / worker_active / worker_idle / worker_closed / snapshot;
        // worker_active and worker_idle come from the claim events).
        WORKER_REGISTERED = "worker.registered";
        WORKER_INACTIVE = "worker.inactive";
        WORKER_CLOSED = "worker.closed";
        WORKERS_SNAPSHOT = "workers.snapshot";
        RECOVERY_REPORT = "server.recovered";
        // Tasks.
        TASK_CREATED = "task.created";
        TASK_DISPATCHED = "task.dispatched";
        TASK_STATE_CHANGED = "task.state_changed";
        TASK_CANCEL_REQUESTED = "task.cancel_requested";
        TASK_TRANSITION_REJECTED = "task.transition_rejected";
        /// An attempt failed and another is scheduled (data: attempt, run_id,
        /// reason, run_at, max_attempts).
        TASK_RETRY_SCHEDULED = "task.retry_scheduled";
        // Claims (the connector contract names the expiry event).
        CLAIM_GRANTED = "worker.claim.granted";
        CLAIM_RELEASED = "worker.claim.released";
        CLAIM_EXPIRED = "worker.claim.expired";
        // Runs (the Workers page contract surface: worker_started / worker_status / tool_started / tool_completed / worker_completed).
        RUN_STARTED = "run.started";
        RUN_STATUS = "run.status";
        RUN_USAGE = "run.usage";
        RUN_STEP = "run.step";
        RUN_COMPLETED = "run.completed";
        /// A running run made no new step for its agent's `stuck_after`
        /// (once per quiet spell).
        RUN_STUCK = "run.stuck";
        // Input requests: an agent asks a person (permission or question).
        INPUT_REQUESTED = "input.requested";
        INPUT_ANSWERED = "input.answered";
        // Channels (the conversations contract's resources).
        CHANNEL_CREATED = "channel.created";
        CHANNEL_ARCHIVED = "channel.archived";
        AGENT_UPSERTED = "agent.upserted";
        CHANNEL_UPDATED = "channel.updated";
        // Conversations on resources (the conversations contract).
        CONVERSATION_CREATED = "conversation.created";
        CONVERSATION_STATE_CHANGED = "conversation.state_changed";
        CONVERSATION_MESSAGE = "conversation.message";
        CONVERSATION_ACTIVATED = "conversation.activated";
        CONVERSATION_AGENT_SESSION = "conversation.agent_session";
        // Sessions (the sessions contract): workspaces and their tabs.
        SESSION_CREATED = "session.created";
        SESSION_DELETED = "session.deleted";
        SESSION_WORKER_ADDED = "session.worker.added";
        SESSION_WORKER_RESTORED = "session.worker.restored";
        SESSION_WORKER_RESTARTED = "session.worker.restarted";
        SESSION_WORKER_EXITED = "session.worker.exited";
        SESSION_WORKER_REMOVED = "session.worker.removed";
        // People and their credentials.
        USER_CREATED = "user.created";
        /// A user's role changed, or they were disabled or enabled again.
        USER_UPDATED = "user.updated";
        TOKEN_CREATED = "token.created";
        TOKEN_REVOKED = "token.revoked";
        /// Someone signed in to the web UI through the OpenID provider.
        USER_LOGIN = "user.login";
        /// A web session ended by its user signing out.
        USER_LOGOUT = "user.logout";
        // Hosts: where work lives.
        /// A runner registered its host (again, after a restart).
        HOST_REGISTERED = "host.registered";
    }
}

/// The ids an event concerns. Each is optional; filters match on them.
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    schemars::JsonSchema,
)]
pub struct EventRefs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Who made the change: a user's name (`admin` for the bootstrap
    /// token), `worker:<id>`, `run:<id>`, or `system` for the server's own
    /// loops. Events written before actors were recorded have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}

impl EventRefs {
    pub fn agent(mut self, id: impl Into<String>) -> Self {
        self.agent_id = Some(id.into());
        self
    }
    pub fn worker(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }
    pub fn task(mut self, id: impl Into<String>) -> Self {
        self.task_id = Some(id.into());
        self
    }
    pub fn run(mut self, id: impl Into<String>) -> Self {
        self.run_id = Some(id.into());
        self
    }
    pub fn channel(mut self, id: Option<String>) -> Self {
        self.channel_id = id;
        self
    }
    pub fn conversation(mut self, id: Option<String>) -> Self {
        self.conversation_id = id;
        self
    }
    pub fn session(mut self, id: Option<String>) -> Self {
        self.session_id = id;
        self
    }
}

/// An event about to be appended; the store assigns `seq` and `ts`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: String,
    pub refs: EventRefs,
    pub data: Value,
}

impl NewEvent {
    /// An event whose `data` is any JSON value. The store writes its own
    /// events with [`NewEvent::typed`]; this is for events a caller shapes
    /// itself (tests, benchmarks).
    pub fn new(kind: impl Into<String>, refs: EventRefs, data: Value) -> Self {
        NewEvent {
            kind: kind.into(),
            refs,
            data,
        }
    }

    /// An event whose `data` is one of the documented payloads of
    /// [`payloads`].
    pub fn typed<P: EventPayload>(kind: impl Into<String>, refs: EventRefs, payload: &P) -> Self {
        // A payload holds strings, numbers, options and JSON values only, so
        // turning it into a JSON value cannot fail; `null` is the fallback
        // rather than a panic in the middle of a unit of work.
        let data = serde_json::to_value(payload).unwrap_or(Value::Null);
        NewEvent::new(kind, refs, data)
    }
}

/// A committed event. `seq` is its cursor: strictly increasing in commit order.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Event {
    pub seq: i64,
    /// Milliseconds since the Unix epoch; RFC 3339 in JSON.
    #[serde(with = "crate::time::serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub ts: Millis,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(flatten)]
    pub refs: EventRefs,
    /// The event's own fields; their shape depends on `type`.
    #[schema(value_type = Object)]
    pub data: Value,
}

/// Which events a reader wants. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub agent_id: Option<String>,
    pub worker_id: Option<String>,
    pub task_id: Option<String>,
    pub run_id: Option<String>,
    pub channel_id: Option<String>,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
    pub actor: Option<String>,
    /// Exact type names, or prefixes ending in `*` (`worker.*`).
    pub kinds: Vec<String>,
}

impl EventFilter {
    pub fn is_empty(&self) -> bool {
        *self == EventFilter::default()
    }

    pub fn matches(&self, e: &Event) -> bool {
        fn eq(want: &Option<String>, have: &Option<String>) -> bool {
            match want {
                None => true,
                Some(w) => have.as_deref() == Some(w.as_str()),
            }
        }
        eq(&self.agent_id, &e.refs.agent_id)
            && eq(&self.worker_id, &e.refs.worker_id)
            && eq(&self.task_id, &e.refs.task_id)
            && eq(&self.run_id, &e.refs.run_id)
            && eq(&self.channel_id, &e.refs.channel_id)
            && eq(&self.conversation_id, &e.refs.conversation_id)
            && eq(&self.session_id, &e.refs.session_id)
            && eq(&self.actor, &e.refs.actor)
            && self.matches_kind(&e.kind)
    }

    pub fn matches_kind(&self, kind: &str) -> bool {
        self.kinds.is_empty()
            || self.kinds.iter().any(|k| match k.strip_suffix('*') {
                Some(prefix) => kind.starts_with(prefix),
                None => k == kind,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, task: Option<&str>) -> Event {
        Event {
            seq: 1,
            ts: 0,
            kind: kind.into(),
            refs: EventRefs {
                task_id: task.map(String::from),
                ..Default::default()
            },
            data: Value::Null,
        }
    }

    #[test]
    fn filters_by_ids_and_kind_prefixes() {
        let f = EventFilter {
            task_id: Some("VTID-1".into()),
            kinds: vec!["worker.*".into(), "task.created".into()],
            ..Default::default()
        };
        assert!(f.matches(&ev("worker.building", Some("VTID-1"))));
        assert!(f.matches(&ev("task.created", Some("VTID-1"))));
        assert!(!f.matches(&ev("task.dispatched", Some("VTID-1"))));
        assert!(!f.matches(&ev("worker.building", Some("VTID-2"))));
        assert!(!f.matches(&ev("worker.building", None)));
        assert!(EventFilter::default().matches(&ev("anything", None)));
    }
}
