//! Workers as seed 001 sees them: `list_workers` with provenance after a
//! restart, and `worker_events` with stable ids; plus a JSON page of the
//! event log for clients that poll rather than stream.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use shepherd_core::event::{kind, Event, EventFilter};
use shepherd_core::model::Worker;
use shepherd_core::time::{opt_rfc3339, parse_iso8601, to_rfc3339};
use shepherd_core::Error;
use shepherd_store::WorkerFilter;
use utoipa::IntoParams;

use crate::error::{ApiQuery, ApiResult};
use crate::events::{event_json, start_cursor};
use crate::{cursor_header, AppState};

/// Seed 001's event state of a worker: idle, active or closed.
pub fn event_state(w: &Worker) -> &'static str {
    if w.status == "terminated" {
        "closed"
    } else if w.active_claims > 0 {
        "active"
    } else {
        "idle"
    }
}

/// Seed 001's session status: ready (idle), busy (active), closed.
pub fn session_status(w: &Worker) -> &'static str {
    match event_state(w) {
        "closed" => "closed",
        "active" => "busy",
        _ => "ready",
    }
}

fn worker_json(state: &AppState, w: &Worker, last_event: Option<i64>) -> Value {
    // A worker heard from since this server started is live ("registry");
    // one known only from storage was recovered ("event_log").
    let live = w.last_heartbeat_at >= state.started_at || w.registered_at >= state.started_at;
    json!({
        "worker_id": w.worker_id,
        "session_id": w.session_id,
        "name": w.name,
        "project_path": w.project_path,
        "terminal_id": w.terminal_id,
        "agent_type": w.agent_id,
        "agent_id": w.agent_id,
        "worker_type": w.worker_type,
        "status": session_status(w),
        "registry_status": w.status,
        "created_at": to_rfc3339(w.registered_at),
        "last_activity": to_rfc3339(w.last_activity_at.unwrap_or(w.registered_at)),
        "last_heartbeat_at": to_rfc3339(w.last_heartbeat_at),
        "capabilities": w.capabilities,
        "max_concurrent": w.max_concurrent,
        "active_claims": w.active_claims,
        "source": if live { "registry" } else { "event_log" },
        "event_state": event_state(w),
        "recovered_at": if live { Value::Null } else { json!(to_rfc3339(state.started_at)) },
        "last_event_ts": opt_rfc3339(last_event),
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WorkersQuery {
    /// Include workers that deregistered or were terminated.
    pub include_closed: Option<bool>,
    /// Matches `project_path` (substring, case-insensitive).
    pub project: Option<String>,
    pub agent_id: Option<String>,
}

/// Seed 001's `list_workers`: every worker known, live and recovered.
#[utoipa::path(get, path = "/api/v1/workers", tag = "workers", params(WorkersQuery), responses(
    (status = 200, description = "`{workers: [...], count}` with `source`, `event_state`, `recovered_at`, `last_event_ts`", body = Object)))]
pub async fn list_workers(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<WorkersQuery>,
) -> ApiResult<impl IntoResponse> {
    let (workers, cursor) = state
        .store
        .list_workers(WorkerFilter {
            include_closed: q.include_closed.unwrap_or(false),
            project: q.project,
            agent_id: q.agent_id,
        })
        .await?;
    let last = state.store.worker_last_event_ts().await?;
    let list: Vec<Value> = workers
        .iter()
        .map(|w| worker_json(&state, w, last.get(&w.worker_id).copied()))
        .collect();
    Ok((
        cursor_header(cursor),
        Json(json!({ "workers": list, "count": list.len() })),
    ))
}

/// Seed 001's event names for worker lifecycle events in the log.
fn seed001_name(kind_: &str) -> Option<&'static str> {
    match kind_ {
        kind::WORKER_REGISTERED => Some("worker_started"),
        kind::WORKER_ACTIVE => Some("worker_active"),
        kind::WORKER_IDLE => Some("worker_idle"),
        kind::WORKER_CLOSED => Some("worker_closed"),
        kind::WORKERS_SNAPSHOT => Some("snapshot"),
        _ => None,
    }
}

fn seed001_filter() -> EventFilter {
    EventFilter {
        kinds: [
            kind::WORKER_REGISTERED,
            kind::WORKER_ACTIVE,
            kind::WORKER_IDLE,
            kind::WORKER_CLOSED,
            kind::WORKERS_SNAPSHOT,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Default::default()
    }
}

fn seed001_event(e: &Event) -> Value {
    json!({
        "id": e.seq,
        "ts": to_rfc3339(e.ts),
        "type": seed001_name(&e.kind).unwrap_or("unknown"),
        "worker_id": e.refs.worker_id,
        "data": e.data,
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WorkerEventsQuery {
    /// An ISO 8601 time (events at or after it) or a cursor (events after it).
    pub since: Option<String>,
    /// Default 1000; without `since`, the most recent `limit` events.
    pub limit: Option<i64>,
    pub include_snapshot: Option<bool>,
    pub include_summary: Option<bool>,
    pub stale_threshold_minutes: Option<i64>,
}

/// Seed 001's `worker_events`, with stable ids and a `next_cursor`.
#[utoipa::path(get, path = "/api/v1/worker_events", tag = "workers", params(WorkerEventsQuery), responses(
    (status = 200, description = "`{events, count, summary?, snapshot?, next_cursor}`", body = Object),
    (status = 400, description = "invalid_since, invalid_limit", body = crate::openapi::ErrorBody)))]
pub async fn worker_events(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<WorkerEventsQuery>,
) -> ApiResult<impl IntoResponse> {
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(
            Error::bad_request("invalid_limit", "limit must be between 1 and 10000").into(),
        );
    }
    let threshold = q.stale_threshold_minutes.unwrap_or(10);
    if !(0..=100_000).contains(&threshold) {
        return Err(Error::bad_request(
            "invalid_stale_threshold",
            "stale_threshold_minutes must be 0 or more",
        )
        .into());
    }
    let filter = seed001_filter();
    let page = match q.since.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => state.store.read_latest_events(&filter, limit).await?,
        Some(s) => match s.parse::<i64>() {
            Ok(cursor) if cursor >= 0 => state.store.read_events(cursor, &filter, limit).await?,
            _ => {
                let ts = parse_iso8601(s).ok_or_else(|| {
                    Error::bad_request(
                        "invalid_since",
                        format!("since must be an ISO 8601 time or a cursor, not {s:?}"),
                    )
                })?;
                state.store.read_events_since(ts, &filter, limit).await?
            }
        },
    };
    let events: Vec<Value> = page.events.iter().map(seed001_event).collect();
    let mut body = json!({
        "events": events,
        "count": events.len(),
        "next_cursor": page.next_cursor,
    });
    if q.include_snapshot.unwrap_or(false) {
        let snap_filter = EventFilter {
            kinds: vec![kind::WORKERS_SNAPSHOT.into()],
            ..Default::default()
        };
        let snap = state.store.read_latest_events(&snap_filter, 1).await?;
        body["snapshot"] = match snap.events.first() {
            Some(e) => json!({ "id": e.seq, "ts": to_rfc3339(e.ts), "data": e.data }),
            None => Value::Null,
        };
    }
    if q.include_summary.unwrap_or(false) {
        let mut lists: HashMap<&str, Vec<String>> = HashMap::new();
        for e in &page.events {
            if let (Some(name), Some(w)) = (seed001_name(&e.kind), &e.refs.worker_id) {
                let key = match name {
                    "worker_started" => "started",
                    "worker_closed" => "closed",
                    "worker_idle" => "idle",
                    "worker_active" => "active",
                    _ => continue,
                };
                let l = lists.entry(key).or_default();
                if !l.contains(w) {
                    l.push(w.clone());
                }
            }
        }
        // Stuck: active now, with no progress or step (heartbeats do not
        // count) for longer than the threshold.
        let (workers, _) = state.store.list_workers(WorkerFilter::default()).await?;
        let cutoff = shepherd_store::now_ms() - threshold * 60_000;
        let stuck: Vec<String> = workers
            .iter()
            .filter(|w| {
                w.active_claims > 0 && w.last_activity_at.unwrap_or(w.registered_at) < cutoff
            })
            .map(|w| w.worker_id.clone())
            .collect();
        let mut take = |k: &str| lists.remove(k).unwrap_or_default();
        body["summary"] = json!({
            "started": take("started"),
            "closed": take("closed"),
            "idle": take("idle"),
            "active": take("active"),
            "stuck": stuck,
            "last_event_ts": page.events.last().map(|e| to_rfc3339(e.ts)),
        });
    }
    Ok((cursor_header(page.head), Json(body)))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EventPageQuery {
    /// Cursor to read after; without it, the latest `limit` events.
    pub after: Option<String>,
    pub limit: Option<i64>,
    pub agent_id: Option<String>,
    pub worker_id: Option<String>,
    pub task_id: Option<String>,
    pub run_id: Option<String>,
    pub channel_id: Option<String>,
    pub types: Option<String>,
}

/// A page of the event log as JSON (for polling clients and the CLI).
#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventPageQuery), responses(
    (status = 200, description = "`{events, next_cursor, cursor_expired}`", body = Object)))]
pub async fn event_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventPageQuery>,
) -> ApiResult<impl IntoResponse> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=10_000).contains(&limit) {
        return Err(
            Error::bad_request("invalid_limit", "limit must be between 1 and 10000").into(),
        );
    }
    let filter = crate::events::EventsQuery {
        after: None,
        agent_id: q.agent_id,
        worker_id: q.worker_id,
        task_id: q.task_id,
        vtid: None,
        run_id: q.run_id,
        channel_id: q.channel_id,
        conversation_id: None,
        session_id: None,
        types: q.types,
    }
    .filter();
    let page = match q.after {
        Some(a) => {
            let cursor = start_cursor(&state, &headers, Some(&a)).await?;
            state.store.read_events(cursor, &filter, limit).await?
        }
        None => state.store.read_latest_events(&filter, limit).await?,
    };
    let events: Vec<Value> = page.events.iter().map(event_json).collect();
    Ok((
        cursor_header(page.head),
        Json(
            json!({ "events": events, "next_cursor": page.next_cursor, "cursor_expired": page.cursor_expired }),
        ),
    ))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/workers", get(list_workers))
        .route("/api/v1/worker_events", get(worker_events))
        .route("/api/v1/events", get(event_page))
}
