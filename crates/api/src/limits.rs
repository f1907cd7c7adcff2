//! Load shedding: a cap on requests in flight, and a separate cap on
//! long-lived streams.
//!
//! Past its capacity a server that queues every request serves all of them
//! slowly (seconds of latency, clients retrying on top). Refusing the excess
//! at once with 503 `overloaded` and `Retry-After` costs almost nothing and
//! keeps the requests that are admitted fast. The check is a non-blocking
//! semaphore acquire, so nothing waits in the server.
//!
//! Streams (SSE at `/api/events`, WebSockets under `/ws/`, the MCP `GET`
//! stream) stay open for hours while costing little, so they do not count
//! against the request cap; they have their own, far larger, one. A stream's
//! slot is held as long as its response body (or, for a WebSocket, the
//! upgraded socket) lives. Liveness and metrics answer under any load.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use shepherd_core::{Error, ErrorKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::AppState;

/// Seconds a shed client is asked to wait before trying again.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The caps and the gauges that go with them.
#[derive(Debug)]
pub struct Limits {
    requests: Option<Arc<Semaphore>>,
    streams: Option<Arc<Semaphore>>,
    pub max_requests: usize,
    pub max_streams: usize,
    /// Ordinary requests being handled now.
    pub requests_in_flight: AtomicI64,
    /// Open SSE streams of the event log.
    pub sse_clients: AtomicI64,
    /// Other open streams (WebSockets, MCP).
    pub other_streams: AtomicI64,
    /// Requests refused with 503 `overloaded`.
    pub shed_requests: AtomicU64,
    /// Streams refused with 503 `too_many_streams`.
    pub shed_streams: AtomicU64,
}

impl Limits {
    /// `0` means no cap.
    pub fn new(max_requests: usize, max_streams: usize) -> Self {
        let sem = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Limits {
            requests: sem(max_requests),
            streams: sem(max_streams),
            max_requests,
            max_streams,
            requests_in_flight: AtomicI64::new(0),
            sse_clients: AtomicI64::new(0),
            other_streams: AtomicI64::new(0),
            shed_requests: AtomicU64::new(0),
            shed_streams: AtomicU64::new(0),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(0, 0)
    }
}

/// What kind of request this is, for the caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Never refused: probes and metrics must answer when the server is busiest.
    Exempt,
    Request,
    Sse,
    OtherStream,
}

fn classify(method: &Method, path: &str) -> Class {
    match path {
        "/healthz" | "/metrics" => Class::Exempt,
        "/api/events" if method == Method::GET => Class::Sse,
        "/mcp" if method == Method::GET => Class::OtherStream,
        p if p.starts_with("/ws/") && method == Method::GET => Class::OtherStream,
        _ => Class::Request,
    }
}

/// A stream's slot, handed to a WebSocket handler through the request's
/// extensions so that the upgraded socket can keep it.
#[derive(Clone)]
pub struct StreamSlot(#[allow(dead_code)] Arc<SlotGuard>);

/// Frees a slot and moves the gauge back when dropped.
struct SlotGuard {
    _permit: Option<OwnedSemaphorePermit>,
    state: AppState,
    class: Class,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        gauge(&self.state.limits, self.class).fetch_sub(1, Ordering::Relaxed);
    }
}

fn gauge(l: &Limits, class: Class) -> &AtomicI64 {
    match class {
        Class::Sse => &l.sse_clients,
        Class::OtherStream => &l.other_streams,
        _ => &l.requests_in_flight,
    }
}

fn refuse(code: &'static str, message: String) -> Response {
    let mut res = ApiError::from(Error::new(ErrorKind::Unavailable, code, message)).into_response();
    res.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        HeaderValue::from(RETRY_AFTER_SECS),
    );
    res
}

/// The layer.
pub async fn shed(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let class = classify(req.method(), req.uri().path());
    let limits = &state.limits;
    let sem = match class {
        Class::Exempt => return next.run(req).await,
        Class::Request => &limits.requests,
        Class::Sse | Class::OtherStream => &limits.streams,
    };
    let permit = match sem {
        None => None,
        Some(s) => match s.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) if class == Class::Request => {
                limits.shed_requests.fetch_add(1, Ordering::Relaxed);
                return refuse(
                    "overloaded",
                    format!(
                        "the server is handling its limit of {} requests; retry shortly",
                        limits.max_requests
                    ),
                );
            }
            Err(_) => {
                limits.shed_streams.fetch_add(1, Ordering::Relaxed);
                return refuse(
                    "too_many_streams",
                    format!(
                        "the server holds its limit of {} open streams; retry shortly",
                        limits.max_streams
                    ),
                );
            }
        },
    };
    gauge(limits, class).fetch_add(1, Ordering::Relaxed);
    let guard = SlotGuard {
        _permit: permit,
        state: state.clone(),
        class,
    };
    if class == Class::Request {
        // The slot ends when the handler has answered; sending a finished
        // body is the kernel's work, not the server's.
        let res = next.run(req).await;
        drop(guard);
        return res;
    }
    let slot = StreamSlot(Arc::new(guard));
    req.extensions_mut().insert(slot.clone());
    let res = next.run(req).await;
    if res.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
        // The upgraded socket's handler holds the slot (see `StreamSlot`).
        return res;
    }
    // The body carries the slot: it is freed when the stream ends or the
    // client goes away.
    let (parts, body) = res.into_parts();
    let body = Body::from_stream(body.into_data_stream().map(move |chunk| {
        let _held = &slot;
        chunk
    }));
    Response::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_probes_are_told_apart() {
        assert_eq!(classify(&Method::GET, "/api/events"), Class::Sse);
        assert_eq!(classify(&Method::GET, "/mcp"), Class::OtherStream);
        assert_eq!(classify(&Method::POST, "/mcp"), Class::Request);
        assert_eq!(
            classify(&Method::GET, "/ws/session/s/worker/w"),
            Class::OtherStream
        );
        assert_eq!(classify(&Method::GET, "/api/v1/tasks"), Class::Request);
        assert_eq!(classify(&Method::GET, "/healthz"), Class::Exempt);
    }
}
