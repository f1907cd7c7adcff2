//! `GET /api/events`: every event of the log as server-sent events.
//!
//! `id:` is the event's sequence number, so a browser's `EventSource`
//! resumes by itself with `Last-Event-ID`; `?after=<seq>` does the same for
//! other clients and `?after=now` starts live. The stream backfills from the
//! database, then follows the live broadcast with no gap and no duplicate
//! (see `shepherd_store::hub`). A client whose cursor was pruned gets one
//! `resync` event; a client too slow for the live feed gets `resync` and is
//! disconnected, and resumes from its cursor.
//!
//! Seed 000's run activity travels under its own names: `worker_started`,
//! `worker_status`, `tool_started`, `tool_completed`, `worker_completed`
//! (there a "worker" is a run). Every other event keeps its log type.

use std::convert::Infallible;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::stream::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use shepherd_core::event::{kind, Event, EventFilter};
use shepherd_core::Error;
use shepherd_store::{Tail, TailItem};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use utoipa::IntoParams;

use crate::error::{ApiQuery, ApiResult};
use crate::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// A cursor (sequence number) to resume after, or `now`. `Last-Event-ID` wins.
    pub after: Option<String>,
    pub agent_id: Option<String>,
    pub worker_id: Option<String>,
    pub task_id: Option<String>,
    pub vtid: Option<String>,
    pub run_id: Option<String>,
    pub channel_id: Option<String>,
    pub conversation_id: Option<String>,
    pub session_id: Option<String>,
    /// Comma-separated log types; a trailing `*` matches a prefix (`worker.*`).
    pub types: Option<String>,
}

impl EventsQuery {
    pub fn filter(&self) -> EventFilter {
        EventFilter {
            agent_id: self.agent_id.clone(),
            worker_id: self.worker_id.clone(),
            task_id: self.task_id.clone().or_else(|| self.vtid.clone()),
            run_id: self.run_id.clone(),
            channel_id: self.channel_id.clone(),
            conversation_id: self.conversation_id.clone(),
            session_id: self.session_id.clone(),
            kinds: self
                .types
                .as_deref()
                .map(|t| {
                    t.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// The SSE `event:` name of a log event on this surface.
pub fn surface_name(e: &Event) -> &str {
    match e.kind.as_str() {
        kind::RUN_STARTED => "worker_started",
        kind::RUN_STATUS => "worker_status",
        kind::RUN_COMPLETED => "worker_completed",
        kind::RUN_STEP => match e.data.get("kind").and_then(Value::as_str) {
            Some("tool_result") => "tool_completed",
            Some("action") if e.data.get("tool_name").is_some_and(|t| !t.is_null()) => {
                "tool_started"
            }
            _ => kind::RUN_STEP,
        },
        other => other,
    }
}

/// The JSON of one event as clients see it.
pub fn event_json(e: &Event) -> Value {
    let mut v = json!({
        "id": e.seq,
        "seq": e.seq,
        "ts": shepherd_core::time::to_rfc3339(e.ts),
        "type": e.kind,
        "data": e.data,
    });
    if let (Value::Object(m), Ok(Value::Object(refs))) = (&mut v, serde_json::to_value(&e.refs)) {
        m.extend(refs);
    }
    v
}

/// One SSE frame, as bytes on the wire.
fn frame(id: Option<i64>, event: &str, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + event.len() + 32);
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(&id.to_string());
        out.push('\n');
    }
    out.push_str("event: ");
    out.push_str(event);
    out.push('\n');
    // JSON never contains a raw newline, so one data line is enough.
    out.push_str("data: ");
    out.push_str(data);
    out.push_str("\n\n");
    Bytes::from(out)
}

/// Every subscriber of an event gets the same bytes, so each event is
/// rendered once and shared: a small direct-mapped cache keyed by `seq`.
pub struct FrameCache {
    slots: Vec<std::sync::Mutex<Option<(i64, Bytes)>>>,
}

impl Default for FrameCache {
    fn default() -> Self {
        FrameCache {
            slots: (0..4096).map(|_| std::sync::Mutex::new(None)).collect(),
        }
    }
}

impl FrameCache {
    fn render(&self, e: &Event) -> Bytes {
        let slot = &self.slots[(e.seq as usize) % self.slots.len()];
        if let Ok(guard) = slot.lock() {
            if let Some((seq, bytes)) = guard.as_ref() {
                if *seq == e.seq {
                    return bytes.clone();
                }
            }
        }
        let bytes = frame(Some(e.seq), surface_name(e), &event_json(e).to_string());
        if let Ok(mut guard) = slot.lock() {
            *guard = Some((e.seq, bytes.clone()));
        }
        bytes
    }
}

fn resync(reason: &str, cursor: i64, message: &str) -> Bytes {
    frame(
        None,
        "resync",
        &json!({ "reason": reason, "cursor": cursor, "message": message }).to_string(),
    )
}

/// Works out where a stream starts: `Last-Event-ID`, then `?after=`, else now.
pub async fn start_cursor(
    state: &AppState,
    headers: &HeaderMap,
    after: Option<&str>,
) -> Result<i64, Error> {
    let bad = |v: &str| {
        Error::bad_request(
            "invalid_cursor",
            format!("a cursor is a non-negative integer or `now`, not {v:?}"),
        )
    };
    if let Some(h) = headers.get("last-event-id") {
        let v = h.to_str().map_err(|_| bad("?"))?.trim();
        return v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad(v));
    }
    match after {
        None | Some("now") => state.store.head().await,
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad(v)),
    }
}

/// Feeds one client's bounded buffer from a tail. History the client asked
/// for is paced by the client (a full buffer waits); once the stream has
/// been live, a full buffer means the client cannot keep up: it gets a
/// `resync` notice after what it already has, and the stream ends, so no
/// client can hold memory or slow anyone else. A comment line keeps idle
/// connections open through proxies.
async fn produce(
    mut tail: Tail,
    tx: mpsc::Sender<Bytes>,
    frames: Arc<FrameCache>,
    keepalive: Duration,
    shutdown: CancellationToken,
) {
    let mut has_been_live = false;
    loop {
        let item = tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tx.closed() => return,
            item = tokio::time::timeout(keepalive, tail.next()) => item,
        };
        has_been_live |= !tail.is_backfilling();
        let bytes = match item {
            Err(_) => Bytes::from_static(b": keep-alive\n\n"),
            Ok(Ok(TailItem::Event(e))) => frames.render(&e),
            Ok(Ok(TailItem::Expired)) => resync(
                "cursor_expired",
                tail.cursor(),
                "events before this cursor were removed by retention; reload state, then continue",
            ),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "event stream ended");
                return;
            }
        };
        if !has_been_live {
            if tx.send(bytes).await.is_err() {
                return;
            }
            continue;
        }
        match tx.try_send(bytes) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => return,
            Err(mpsc::error::TrySendError::Full(_)) => {
                // The frame that did not fit is not sent: the client's cursor
                // stays at the last frame it will receive, and it resumes there.
                let notice = resync(
                    "slow_consumer",
                    tail.cursor() - 1,
                    "this client fell behind the live stream; reconnect with Last-Event-ID to resume",
                );
                let _ = tokio::time::timeout(Duration::from_secs(60), tx.send(notice)).await;
                return;
            }
        }
    }
}

/// Every event, live, resumable.
#[utoipa::path(get, path = "/api/events", tag = "events", params(EventsQuery,
    ("Last-Event-ID" = Option<String>, Header, description = "resume after this sequence number")),
    responses((status = 200, description = "text/event-stream of `id: seq`, `event: type`, `data: json`"),
              (status = 400, description = "invalid_cursor", body = crate::openapi::ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> ApiResult<Response> {
    let cursor = start_cursor(&state, &headers, q.after.as_deref()).await?;
    let tail = state.store.tail(cursor, q.filter());
    let (tx, rx) = mpsc::channel(state.settings.sse_buffer.max(1));
    tokio::spawn(produce(
        tail,
        tx,
        state.frames.clone(),
        state.settings.sse_keepalive,
        state.shutdown.clone(),
    ));
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<_, Infallible>));
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response())
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/events", get(events))
}
