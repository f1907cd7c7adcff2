//! Workers as the worker registry contract sees them: `list_workers` with provenance after a
//! restart, and `worker_events` with stable ids; plus a JSON page of the
//! event log for clients that poll rather than stream.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Json, Router};
use shepherd_core::event::{kind, Event, EventFilter};
use shepherd_core::model::Worker;
use shepherd_core::status::{EventState, SessionStatus, WorkerEventType, WorkerSource};
use shepherd_core::time::{opt_rfc3339, parse_iso8601, to_rfc3339};
use shepherd_core::Error;
use shepherd_protocol::{
    ErrorBody, EventPage, EventPageQuery, WireEvent, WorkerActiveData, WorkerEvent,
    WorkerEventSummary, WorkerEventsQuery, WorkerEventsResponse, WorkerIdleData, WorkerInfo,
    WorkerInfoList, WorkerSnapshot, WorkersQuery,
};
use shepherd_store::WorkerFilter;

use crate::auth::Caller;
use crate::error::{ApiQuery, ApiResult};
use crate::events::start_cursor;
use crate::{cursor_header, AppState};

/// The worker registry contract's event state of a worker: idle, active or closed.
pub fn event_state(w: &Worker) -> EventState {
    if w.status == shepherd_core::status::WorkerStatus::Terminated.as_str() {
        EventState::Closed
    } else if w.active_claims > 0 {
        EventState::Active
    } else {
        EventState::Idle
    }
}

/// The worker registry contract's session status: spawning (registered, not heard from since:
/// no poll, claim or heartbeat yet), ready (idle), busy (active), closed.
pub fn session_status(w: &Worker) -> SessionStatus {
    match event_state(w) {
        EventState::Closed => SessionStatus::Closed,
        EventState::Active => SessionStatus::Busy,
        EventState::Idle if w.last_activity_at.is_none() => SessionStatus::Spawning,
        EventState::Idle => SessionStatus::Ready,
    }
}

/// Whether a worker has gone silent: marked inactive by the sweeper, or
/// past its heartbeat timeout and not yet swept (outside the start grace,
/// during which silence after a restart does not count).
pub fn is_silent(state: &AppState, w: &Worker, now: i64) -> bool {
    let rules = state.lease_rules();
    w.status == shepherd_core::status::WorkerStatus::Inactive.as_str()
        || (w.status == shepherd_core::status::WorkerStatus::Active.as_str()
            && now >= rules.not_before
            && w.last_heartbeat_at < now - rules.heartbeat_timeout_ms)
}

fn worker_info(state: &AppState, w: &Worker, last_event: Option<i64>) -> WorkerInfo {
    // A worker heard from since this server started is live ("registry");
    // one known only from storage was recovered ("event_log").
    let live = w.last_heartbeat_at >= state.started_at || w.registered_at >= state.started_at;
    // A silent worker is not `ready` to take work, whatever it held: it
    // shows `closed` until it heartbeats again (its registry status says
    // `inactive`, so a client can tell it from a deregistered one).
    let status = if is_silent(state, w, shepherd_store::now_ms()) {
        SessionStatus::Closed
    } else {
        session_status(w)
    };
    WorkerInfo {
        worker_id: w.worker_id.clone(),
        session_id: w.session_id.clone(),
        name: w.name.clone(),
        project_path: w.project_path.clone(),
        terminal_id: w.terminal_id.clone(),
        agent_type: w.agent_id.clone(),
        agent_id: w.agent_id.clone(),
        worker_type: w.worker_type.clone(),
        status,
        registry_status: w.status,
        created_at: to_rfc3339(w.registered_at),
        last_activity: to_rfc3339(w.last_activity_at.unwrap_or(w.registered_at)),
        last_heartbeat_at: to_rfc3339(w.last_heartbeat_at),
        capabilities: w.capabilities.clone(),
        max_concurrent: w.max_concurrent,
        active_claims: w.active_claims,
        source: if live {
            WorkerSource::Registry
        } else {
            WorkerSource::EventLog
        },
        event_state: event_state(w),
        recovered_at: (!live).then(|| to_rfc3339(state.started_at)),
        last_event_ts: opt_rfc3339(last_event),
        host_id: w.host_id.clone(),
    }
}

/// The worker registry contract's `list_workers`: every worker known, live and recovered.
#[utoipa::path(get, path = "/api/v1/workers", tag = "workers", params(WorkersQuery), responses(
    (status = 200, body = WorkerInfoList), (status = 400, description = "invalid_query", body = ErrorBody)))]
pub async fn list_workers(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<WorkersQuery>,
) -> ApiResult<impl IntoResponse> {
    let shepherd_store::Listing {
        items: mut workers,
        cursor,
    } = state
        .store
        .list_workers(WorkerFilter {
            include_closed: q.include_closed.unwrap_or(false),
            project: q.project,
            agent_id: q.agent_id,
        })
        .await?;
    // A worker token sees its own record only.
    if let Caller::Worker(me) = &caller {
        workers.retain(|w| &w.worker_id == me);
    }
    let last = state.store.worker_last_event_ts().await?;
    let workers: Vec<WorkerInfo> = workers
        .iter()
        .map(|w| worker_info(&state, w, last.get(&w.worker_id).copied()))
        .collect();
    Ok((
        cursor_header(cursor),
        Json(WorkerInfoList {
            count: workers.len(),
            workers,
        }),
    ))
}

/// The worker's claim count a claim event carries after its change.
fn active_claims_after(e: &Event) -> Option<i64> {
    e.data.get("worker_active_claims").and_then(|n| n.as_i64())
}

/// The worker registry contract's event name for a stored event, if it is one of the worker registry contract's:
/// each stored event maps to at most one, derived from that event alone.
/// `worker_active` / `worker_idle` are the claim events that took a worker
/// from no claim to one and back (logs from earlier versions stored them
/// as `worker.active` / `worker.idle`, which map as before; their claim
/// events carry no count and map to nothing, so nothing appears twice).
fn registry_event_name(e: &Event) -> Option<WorkerEventType> {
    match e.kind.as_str() {
        kind::WORKER_REGISTERED => Some(WorkerEventType::WorkerStarted),
        kind::WORKER_ACTIVE => Some(WorkerEventType::WorkerActive),
        kind::WORKER_IDLE => Some(WorkerEventType::WorkerIdle),
        kind::WORKER_CLOSED => Some(WorkerEventType::WorkerClosed),
        kind::WORKERS_SNAPSHOT => Some(WorkerEventType::Snapshot),
        kind::CLAIM_GRANTED if active_claims_after(e) == Some(1) => {
            Some(WorkerEventType::WorkerActive)
        }
        kind::CLAIM_RELEASED | kind::CLAIM_EXPIRED if active_claims_after(e) == Some(0) => {
            Some(WorkerEventType::WorkerIdle)
        }
        _ => None,
    }
}

fn registry_event_filter() -> EventFilter {
    EventFilter {
        kinds: [
            kind::WORKER_REGISTERED,
            kind::WORKER_ACTIVE,
            kind::WORKER_IDLE,
            kind::CLAIM_GRANTED,
            kind::CLAIM_RELEASED,
            kind::CLAIM_EXPIRED,
            kind::WORKER_CLOSED,
            kind::WORKERS_SNAPSHOT,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Default::default()
    }
}

/// The worker registry contract's form of a stored event, if it has one. The id stays the
/// event's `seq`, so it is a cursor like any other.
fn registry_event(e: &Event) -> Option<WorkerEvent> {
    let kind_ = registry_event_name(e)?;
    // A derived event carries the data its stored form used to have.
    let data = match (kind_, e.kind.as_str()) {
        (WorkerEventType::WorkerActive, kind::CLAIM_GRANTED) => {
            serde_json::to_value(WorkerActiveData {
                vtid: e.refs.task_id.clone(),
                run_id: e.refs.run_id.clone(),
            })
            .unwrap_or_default()
        }
        (WorkerEventType::WorkerIdle, kind::CLAIM_RELEASED | kind::CLAIM_EXPIRED) => {
            serde_json::to_value(WorkerIdleData {
                released: e.refs.task_id.clone(),
            })
            .unwrap_or_default()
        }
        _ => e.data.clone(),
    };
    Some(WorkerEvent {
        id: e.seq,
        ts: to_rfc3339(e.ts),
        kind: kind_,
        worker_id: e.refs.worker_id.clone(),
        data,
    })
}

/// The worker registry contract's `worker_events`, with stable ids and a `next_cursor`.
#[utoipa::path(get, path = "/api/v1/worker_events", tag = "workers", params(WorkerEventsQuery), responses(
    (status = 200, body = WorkerEventsResponse),
    (status = 400, description = "invalid_since, invalid_limit, invalid_stale_threshold", body = ErrorBody)))]
pub async fn worker_events(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<WorkerEventsQuery>,
) -> ApiResult<impl IntoResponse> {
    let me = crate::scope::event_worker(&caller, None)?;
    if me.is_some() && q.include_snapshot.unwrap_or(false) {
        return Err(crate::scope::forbidden("the snapshot of every worker").into());
    }
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
    let filter = EventFilter {
        worker_id: me.clone(),
        ..registry_event_filter()
    };
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
    let events: Vec<WorkerEvent> = page.events.iter().filter_map(registry_event).collect();
    let mut body = WorkerEventsResponse {
        count: events.len(),
        events,
        next_cursor: page.next_cursor,
        summary: None,
        snapshot: None,
    };
    if q.include_snapshot.unwrap_or(false) {
        let snap_filter = EventFilter {
            kinds: vec![kind::WORKERS_SNAPSHOT.into()],
            ..Default::default()
        };
        let snap = state.store.read_latest_events(&snap_filter, 1).await?;
        body.snapshot = Some(snap.events.first().map(|e| WorkerSnapshot {
            id: e.seq,
            ts: to_rfc3339(e.ts),
            data: e.data.clone(),
        }));
    }
    if q.include_summary.unwrap_or(false) {
        let mut lists: HashMap<&str, Vec<String>> = HashMap::new();
        for e in &page.events {
            if let (Some(name), Some(w)) = (registry_event_name(e), &e.refs.worker_id) {
                let key = match name {
                    WorkerEventType::WorkerStarted => "started",
                    WorkerEventType::WorkerClosed => "closed",
                    WorkerEventType::WorkerIdle => "idle",
                    WorkerEventType::WorkerActive => "active",
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
        let mut workers = state
            .store
            .list_workers(WorkerFilter::default())
            .await?
            .items;
        if let Some(me) = &me {
            workers.retain(|w| &w.worker_id == me);
        }
        let cutoff = shepherd_store::now_ms() - threshold * 60_000;
        let stuck: Vec<String> = workers
            .iter()
            .filter(|w| {
                w.active_claims > 0 && w.last_activity_at.unwrap_or(w.registered_at) < cutoff
            })
            .map(|w| w.worker_id.clone())
            .collect();
        let mut take = |k: &str| lists.remove(k).unwrap_or_default();
        body.summary = Some(WorkerEventSummary {
            started: take("started"),
            closed: take("closed"),
            idle: take("idle"),
            active: take("active"),
            stuck,
            // The newest event in this answer: the page may end with log
            // events the registry view leaves out, which a client resuming
            // from `since=last_event_ts` must not skip past.
            last_event_ts: page
                .events
                .iter()
                .filter(|e| registry_event_name(e).is_some())
                .map(|e| e.ts)
                .max()
                .map(to_rfc3339),
        });
    }
    Ok((cursor_header(page.head), Json(body)))
}

/// A page of the event log as JSON (for polling clients and the CLI).
#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventPageQuery), responses(
    (status = 200, body = EventPage),
    (status = 400, description = "invalid_limit, invalid_cursor, unknown_event_type", body = ErrorBody)))]
pub async fn event_page(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventPageQuery>,
) -> ApiResult<impl IntoResponse> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=10_000).contains(&limit) {
        return Err(
            Error::bad_request("invalid_limit", "limit must be between 1 and 10000").into(),
        );
    }
    let filter = shepherd_protocol::EventStreamQuery {
        after: None,
        agent_id: q.agent_id,
        worker_id: crate::scope::event_worker(&caller, q.worker_id)?,
        task_id: q.task_id,
        vtid: None,
        run_id: q.run_id,
        channel_id: q.channel_id,
        conversation_id: None,
        session_id: None,
        actor: q.actor,
        types: q.types,
    };
    let filter = crate::events::filter_of(&filter)?;
    let page = match q.after {
        Some(a) => {
            let cursor = start_cursor(&state, &headers, Some(&a)).await?;
            state.store.read_events(cursor, &filter, limit).await?
        }
        None => state.store.read_latest_events(&filter, limit).await?,
    };
    let events = page.events.iter().map(WireEvent::from).collect();
    Ok((
        cursor_header(page.head),
        Json(EventPage {
            events,
            next_cursor: page.next_cursor,
            cursor_expired: page.cursor_expired,
        }),
    ))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/workers", get(list_workers))
        .route("/api/v1/worker_events", get(worker_events))
        .route("/api/v1/events", get(event_page))
}
