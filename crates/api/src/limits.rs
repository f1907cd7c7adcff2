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
//!
//! Workers' own reports (heartbeats, claims, progress, steps, run status)
//! must not be shed because clients flooded the server: a worker that
//! cannot heartbeat loses its claims, and the work is done twice. Requests
//! to those routes take a slot of the general cap when one is free, and
//! otherwise one of a small reserve that only they may use.
//!
//! One credential (a token, or none on a token-less loopback server) may
//! hold at most `SHEPHERD_MAX_REQUESTS_PER_TOKEN` requests at once, beyond
//! which it gets 429 `too_many_requests`: one misbehaving worker, or one
//! stolen worker token sending slow bodies, then cannot take the slots
//! everyone else needs.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    /// The reserve for workers' routes, used once `requests` is full.
    workers: Option<Arc<Semaphore>>,
    streams: Option<Arc<Semaphore>>,
    pub max_requests: usize,
    pub max_worker_requests: usize,
    pub max_streams: usize,
    /// Ordinary requests being handled now (reserve slots included).
    pub requests_in_flight: AtomicI64,
    /// Workers' requests holding a slot of the reserve now.
    pub worker_reserve_in_use: AtomicI64,
    /// Open SSE streams of the event log.
    pub sse_clients: AtomicI64,
    /// Other open streams (WebSockets, MCP).
    pub other_streams: AtomicI64,
    /// Requests refused with 503 `overloaded`.
    pub shed_requests: AtomicU64,
    /// Streams refused with 503 `too_many_streams`.
    pub shed_streams: AtomicU64,
    /// Requests one credential may have in flight; 0: no cap.
    pub max_per_token: usize,
    /// Requests in flight per credential (a keyed hash of it, so that no
    /// token is kept in memory); an entry goes when its count is zero, so
    /// invented tokens leave nothing behind.
    per_token: Mutex<HashMap<u64, usize>>,
    token_hasher: std::hash::RandomState,
    /// Requests refused with 429 `too_many_requests`.
    pub refused_per_token: AtomicU64,
}

impl Limits {
    /// `0` means no cap (for `max_worker_requests`: no reserve; it has no
    /// effect without a request cap).
    pub fn new(max_requests: usize, max_worker_requests: usize, max_streams: usize) -> Self {
        let sem = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Limits {
            requests: sem(max_requests),
            workers: sem(max_worker_requests),
            streams: sem(max_streams),
            max_requests,
            max_worker_requests,
            max_streams,
            requests_in_flight: AtomicI64::new(0),
            worker_reserve_in_use: AtomicI64::new(0),
            sse_clients: AtomicI64::new(0),
            other_streams: AtomicI64::new(0),
            shed_requests: AtomicU64::new(0),
            shed_streams: AtomicU64::new(0),
            max_per_token: 0,
            per_token: Mutex::default(),
            token_hasher: std::hash::RandomState::new(),
            refused_per_token: AtomicU64::new(0),
        }
    }

    /// The same caps, and at most `n` requests in flight per credential.
    pub fn with_per_token(mut self, n: usize) -> Self {
        self.max_per_token = n;
        self
    }

    /// Takes one of the credential's slots, or `None` when it holds all.
    fn take_token_slot(&self, key: u64) -> Option<TokenSlot<'_>> {
        let mut map = self.per_token.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key).or_default();
        if *n >= self.max_per_token {
            return None;
        }
        *n += 1;
        Some(TokenSlot { limits: self, key })
    }
}

/// One request's slot of its credential's; freed when dropped.
struct TokenSlot<'a> {
    limits: &'a Limits,
    key: u64,
}

impl Drop for TokenSlot<'_> {
    fn drop(&mut self) {
        let mut map = self
            .limits
            .per_token
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// The credential a request carries (its `Authorization` header, or a
/// browser WebSocket's token), as the key of its slots; valid or not, it is
/// counted before it is checked, since checking costs a database read.
fn credential_key(limits: &Limits, req: &Request) -> u64 {
    let headers = req.headers();
    match headers.get(axum::http::header::AUTHORIZATION) {
        Some(v) => limits.token_hasher.hash_one(v.as_bytes()),
        None => limits
            .token_hasher
            .hash_one(crate::auth::subprotocol_token(headers).unwrap_or_default()),
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(0, 0, 0)
    }
}

/// What kind of request this is, for the caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Never refused: probes and metrics must answer when the server is busiest.
    Exempt,
    Request,
    /// A worker's report: may fall back on the reserve.
    Worker,
    Sse,
    OtherStream,
}

fn classify(method: &Method, path: &str) -> Class {
    match path {
        "/healthz" | "/metrics" => Class::Exempt,
        "/api/events" if method == Method::GET => Class::Sse,
        "/mcp" if method == Method::GET => Class::OtherStream,
        p if p.starts_with("/ws/") && method == Method::GET => Class::OtherStream,
        // A runner's host link stays open as long as the runner runs.
        p if method == Method::GET && p.starts_with("/api/v1/hosts/") && p.ends_with("/link") => {
            Class::OtherStream
        }
        p if p.starts_with("/api/v1/worker/orchestrator/") => Class::Worker,
        p if method == Method::POST && is_run_report(p) => Class::Worker,
        _ => Class::Request,
    }
}

/// `POST /api/v1/runs/{id}/steps|status|usage|requeue`: what a worker sends
/// about the run it holds.
fn is_run_report(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/api/v1/runs/") else {
        return false;
    };
    match rest.split_once('/') {
        Some((id, tail)) => {
            !id.is_empty() && matches!(tail, "steps" | "status" | "usage" | "requeue")
        }
        None => false,
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
    /// The slot is one of the workers' reserve.
    reserve: bool,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let limits = &self.state.limits;
        gauge(limits, self.class).fetch_sub(1, Ordering::Relaxed);
        if self.reserve {
            limits.worker_reserve_in_use.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn gauge(l: &Limits, class: Class) -> &AtomicI64 {
    match class {
        Class::Sse => &l.sse_clients,
        Class::OtherStream => &l.other_streams,
        _ => &l.requests_in_flight,
    }
}

fn refuse(kind: ErrorKind, code: &'static str, message: String) -> Response {
    let mut res = ApiError::from(Error::new(kind, code, message)).into_response();
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
        Class::Request | Class::Worker => &limits.requests,
        Class::Sse | Class::OtherStream => &limits.streams,
    };
    // Before the shared caps: a credential at its own cap takes no slot
    // from anyone else.
    let _token_slot = match class {
        Class::Request | Class::Worker if limits.max_per_token > 0 => {
            match limits.take_token_slot(credential_key(limits, &req)) {
                Some(slot) => Some(slot),
                None => {
                    limits.refused_per_token.fetch_add(1, Ordering::Relaxed);
                    return refuse(
                        ErrorKind::Capacity,
                        "too_many_requests",
                        format!(
                            "this token already has {} requests in flight \
                             (SHEPHERD_MAX_REQUESTS_PER_TOKEN); retry shortly",
                            limits.max_per_token
                        ),
                    );
                }
            }
        }
        _ => None,
    };
    let mut reserve = false;
    let permit = match sem {
        None => None,
        Some(s) => match s.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) if class == Class::Worker && limits.workers.is_some() => {
                match limits
                    .workers
                    .as_ref()
                    .map(|w| w.clone().try_acquire_owned())
                {
                    Some(Ok(p)) => {
                        reserve = true;
                        limits.worker_reserve_in_use.fetch_add(1, Ordering::Relaxed);
                        Some(p)
                    }
                    _ => {
                        limits.shed_requests.fetch_add(1, Ordering::Relaxed);
                        return refuse(
                            ErrorKind::Unavailable,
                            "overloaded",
                            format!(
                                "the server is handling its limit of {} requests and every one \
                                 of the {} slots reserved for workers; retry shortly",
                                limits.max_requests, limits.max_worker_requests
                            ),
                        );
                    }
                }
            }
            Err(_) if matches!(class, Class::Request | Class::Worker) => {
                limits.shed_requests.fetch_add(1, Ordering::Relaxed);
                return refuse(
                    ErrorKind::Unavailable,
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
                    ErrorKind::Unavailable,
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
        reserve,
    };
    if matches!(class, Class::Request | Class::Worker) {
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

    #[test]
    fn workers_reports_are_told_apart() {
        for (m, p) in [
            (Method::POST, "/api/v1/worker/orchestrator/heartbeat"),
            (
                Method::POST,
                "/api/v1/worker/orchestrator/tasks/V-1/progress",
            ),
            (Method::GET, "/api/v1/worker/orchestrator/tasks/pending"),
            (Method::POST, "/api/v1/runs/r-1/steps"),
            (Method::POST, "/api/v1/runs/r-1/status"),
        ] {
            assert_eq!(classify(&m, p), Class::Worker, "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/api/v1/runs/r-1/steps"),
            (Method::POST, "/api/v1/runs//steps"),
            (Method::POST, "/api/v1/runs/r-1/steps/x"),
            (Method::POST, "/api/v1/tasks"),
            (Method::GET, "/api/v1/workers"),
        ] {
            assert_eq!(classify(&m, p), Class::Request, "{m} {p}");
        }
    }
}
