//! The worker registry's workers: the list with provenance, and worker events.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use shepherd_core::status::{
    EventState, SessionStatus, WorkerEventType, WorkerSource, WorkerStatus,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WorkersQuery {
    /// Include workers that deregistered or were terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_closed: Option<bool>,
    /// Matches `project_path` (substring, case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// A worker as the worker registry contract's `list_workers` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerInfo {
    pub worker_id: String,
    pub session_id: Option<String>,
    pub name: Option<String>,
    pub project_path: Option<String>,
    pub terminal_id: Option<String>,
    /// The agent, under the worker registry contract's name.
    pub agent_type: String,
    pub agent_id: String,
    pub worker_type: String,
    pub status: SessionStatus,
    pub registry_status: WorkerStatus,
    pub created_at: String,
    pub last_activity: String,
    pub last_heartbeat_at: String,
    pub capabilities: Vec<String>,
    pub max_concurrent: i64,
    pub active_claims: i64,
    pub source: WorkerSource,
    pub event_state: EventState,
    /// When this server recovered it from storage; null for live workers.
    pub recovered_at: Option<String>,
    pub last_event_ts: Option<String>,
    /// The host it runs on (`GET /api/v1/hosts`), when its runner said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerInfoList {
    pub workers: Vec<WorkerInfo>,
    pub count: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct WorkerEventsQuery {
    /// An ISO 8601 time (events at or after it) or a cursor (events after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Default 1000; without `since`, the most recent `limit` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_snapshot: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_summary: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0, maximum = 100000)]
    pub stale_threshold_minutes: Option<i64>,
}

/// One worker lifecycle event under the worker registry contract's names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerEvent {
    /// Stable: the event's sequence number.
    pub id: i64,
    pub ts: String,
    #[serde(rename = "type")]
    pub kind: WorkerEventType,
    pub worker_id: Option<String>,
    #[schema(value_type = Object)]
    pub data: Value,
}

/// The `data` of a derived `worker_active` event (a claim granted): the
/// task and run the worker took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerActiveData {
    pub vtid: Option<String>,
    pub run_id: Option<String>,
}

/// The `data` of a derived `worker_idle` event (a claim released or
/// expired): the task the worker no longer holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerIdleData {
    pub released: Option<String>,
}

/// The latest `workers.snapshot` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerSnapshot {
    pub id: i64,
    pub ts: String,
    #[schema(value_type = Object)]
    pub data: Value,
}

/// Which workers the page's events concern, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerEventSummary {
    pub started: Vec<String>,
    pub closed: Vec<String>,
    pub idle: Vec<String>,
    pub active: Vec<String>,
    /// Active with no progress for longer than `stale_threshold_minutes`.
    pub stuck: Vec<String>,
    pub last_event_ts: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkerEventsResponse {
    pub events: Vec<WorkerEvent>,
    pub count: usize,
    pub next_cursor: i64,
    /// With `include_summary=true` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<WorkerEventSummary>,
    /// With `include_snapshot=true` only: absent otherwise, null when no
    /// snapshot was ever taken.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "double_option"
    )]
    #[schema(value_type = Option<WorkerSnapshot>)]
    #[schemars(with = "Option<WorkerSnapshot>")]
    pub snapshot: Option<Option<WorkerSnapshot>>,
}

/// `Option<Option<T>>`: absent, `null` or a value, each kept apart.
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}
