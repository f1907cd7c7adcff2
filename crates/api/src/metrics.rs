//! `GET /metrics`: the server's health in Prometheus' text format, for the
//! operator token only on the main listener; [`serve_metrics`] also serves
//! it without a token on a listener of its own (`SHEPHERD_METRICS_LISTEN`),
//! meant for a private interface that Prometheus scrapes.
//!
//! Request counts and latencies are recorded by a layer around every route
//! (labelled by the route's template, never the raw path, so ids cannot
//! blow up the series count); queue depth, claims and runs are read from the
//! store at scrape time. The exposition is written by hand: the format is a
//! few lines of text and needs no library.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use shepherd_core::status::RunStatus;
use shepherd_core::workflow;
use shepherd_store::{RunFilter, TaskFilter, WorkerFilter};

use crate::auth::Caller;
use crate::error::ApiResult;
use crate::AppState;

/// Upper bounds (seconds) of the latency histogram's buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Default)]
struct Histogram {
    /// Count per bucket (not cumulative; summed when written).
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Request counters and latency histograms, by route.
#[derive(Default)]
pub struct HttpMetrics {
    /// (route, method, status) → requests.
    requests: Mutex<BTreeMap<(String, &'static str, u16), u64>>,
    /// route → time to the response's head.
    latency: Mutex<BTreeMap<String, Histogram>>,
    /// Live SSE deliveries' lag behind their events' timestamps.
    pub delivery_lag: DeliveryLag,
}

impl std::fmt::Debug for HttpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpMetrics")
    }
}

impl HttpMetrics {
    fn observe(&self, route: String, method: &'static str, status: u16, secs: f64) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((route.clone(), method, status)).or_default() += 1;
        }
        if let Ok(mut m) = self.latency.lock() {
            let h = m.entry(route).or_default();
            h.count += 1;
            h.sum += secs;
            if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
                h.counts[i] += 1;
            }
        }
    }
}

/// The layer that counts and times every request.
pub async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    // Unmatched paths share one label: their raw paths are unbounded.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(req.method());
    let started = Instant::now();
    let res = next.run(req).await;
    state.metrics.observe(
        route,
        method,
        res.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    res
}

/// The method as a label: the standard ones by name, any other `other`.
/// A client may invent methods (hyper accepts any token up to the header
/// limit), and each distinct label would be a counter kept for ever, so a
/// raw method would let anyone, even without a token, grow the server's
/// memory and this page without bound.
fn method_label(method: &axum::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "other",
    }
}

/// Escapes a label value as the text format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header_of(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn write_http(out: &mut String, m: &HttpMetrics) {
    header_of(
        out,
        "shepherd_http_requests_total",
        "counter",
        "HTTP requests answered, by route template, method and status.",
    );
    if let Ok(reqs) = m.requests.lock() {
        for ((route, method, status), n) in reqs.iter() {
            let _ = writeln!(
                out,
                "shepherd_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                label(route),
                label(method)
            );
        }
    }
    header_of(
        out,
        "shepherd_http_request_duration_seconds",
        "histogram",
        "Time from a request's arrival to its response's head, by route template.",
    );
    if let Ok(lat) = m.latency.lock() {
        for (route, h) in lat.iter() {
            let route = label(route);
            let mut cumulative = 0;
            for (b, n) in BUCKETS.iter().zip(h.counts.iter()) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "shepherd_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "shepherd_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "shepherd_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "shepherd_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    header_of(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

fn counter(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    header_of(out, name, "counter", help);
    let _ = writeln!(out, "{name} {value}");
}

/// A histogram from per-bucket counts (one more count than bounds: the
/// last is above every bound), with its sum.
fn write_histogram(
    out: &mut String,
    name: &str,
    help: &str,
    bounds: &[String],
    counts: &[u64],
    sum: impl std::fmt::Display,
) {
    header_of(out, name, "histogram", help);
    let mut cumulative = 0;
    for (b, n) in bounds.iter().zip(counts) {
        cumulative += n;
        let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
    }
    let total: u64 = counts.iter().sum();
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
    let _ = writeln!(out, "{name}_sum {sum}");
    let _ = writeln!(out, "{name}_count {total}");
}

/// The writer's group commits: units per transaction and time per transaction.
fn write_writer(out: &mut String, w: &shepherd_store::writer_stats::WriterSnapshot) {
    use shepherd_store::writer_stats::{BATCH_BUCKETS, COMMIT_BUCKETS};
    write_histogram(
        out,
        "shepherd_writer_batch_units",
        "Units of work per write transaction (group commit).",
        &BATCH_BUCKETS.map(|b| b.to_string()),
        &w.batch_counts,
        w.units,
    );
    write_histogram(
        out,
        "shepherd_writer_commit_seconds",
        "Time of each write transaction, from its first statement to its commit's answer.",
        &COMMIT_BUCKETS.map(|b| b.to_string()),
        &w.commit_counts,
        w.commit_seconds,
    );
}

/// Upper bounds (seconds) of the event delivery lag histogram.
const LAG_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

/// Delivery lags counted locally, for [`DeliveryLag::record`].
#[derive(Debug, Default)]
pub struct LagTally {
    counts: [u64; LAG_BUCKETS.len() + 1],
    millis: u64,
}

impl LagTally {
    /// One live event handed to a client `lag_ms` after its timestamp.
    pub fn add(&mut self, lag_ms: i64) {
        let lag_ms = lag_ms.max(0) as u64;
        let secs = lag_ms as f64 / 1000.0;
        let i = LAG_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(LAG_BUCKETS.len());
        self.counts[i] += 1;
        self.millis += lag_ms;
    }

    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|c| *c == 0)
    }
}

/// How long live events took from being stamped (when the store call that
/// appended them began) to being handed to an SSE client's connection.
#[derive(Debug, Default)]
pub struct DeliveryLag {
    counts: [std::sync::atomic::AtomicU64; LAG_BUCKETS.len() + 1],
    millis: std::sync::atomic::AtomicU64,
}

impl DeliveryLag {
    /// Adds a stream's tally of one write. Every stream counts into these
    /// same counters, so a write adds its events' lags at once rather than
    /// touching them once per event.
    pub fn record(&self, t: &LagTally) {
        for (c, n) in self.counts.iter().zip(&t.counts) {
            if *n > 0 {
                c.fetch_add(*n, Ordering::Relaxed);
            }
        }
        if t.millis > 0 {
            self.millis.fetch_add(t.millis, Ordering::Relaxed);
        }
    }

    fn write(&self, out: &mut String) {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        write_histogram(
            out,
            "shepherd_sse_delivery_lag_seconds",
            "Time from a live event's timestamp to its write to an SSE client, per delivery.",
            &LAG_BUCKETS.map(|b| b.to_string()),
            &counts,
            self.millis.load(Ordering::Relaxed) as f64 / 1000.0,
        );
    }
}

/// The whole exposition.
pub async fn render(state: &AppState) -> Result<String, shepherd_core::Error> {
    let mut out = String::with_capacity(8 * 1024);
    write_http(&mut out, &state.metrics);
    let l = &state.limits;
    gauge(
        &mut out,
        "shepherd_http_requests_in_flight",
        "Ordinary requests being handled now.",
        l.requests_in_flight.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "shepherd_http_max_requests",
        "The cap on requests in flight (0: none).",
        l.max_requests,
    );
    gauge(
        &mut out,
        "shepherd_http_worker_reserve_in_use",
        "Workers' requests holding a slot of the reserve kept for them.",
        l.worker_reserve_in_use.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "shepherd_http_max_worker_requests",
        "Slots reserved for workers' reports beyond the request cap.",
        l.max_worker_requests,
    );
    counter(
        &mut out,
        "shepherd_http_shed_requests_total",
        "Requests refused with 503 overloaded.",
        l.shed_requests.load(Ordering::Relaxed),
    );
    counter(
        &mut out,
        "shepherd_http_shed_streams_total",
        "Streams refused with 503 too_many_streams.",
        l.shed_streams.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "shepherd_sse_clients",
        "Open server-sent event streams of the event log.",
        l.sse_clients.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "shepherd_other_streams",
        "Open WebSocket and MCP streams.",
        l.other_streams.load(Ordering::Relaxed),
    );

    // Queue depth: tasks per workflow state (states shared by workflows
    // are counted once).
    let mut states: Vec<&str> = workflow::ALL
        .iter()
        .flat_map(|w| w.states.iter().copied())
        .collect();
    states.sort_unstable();
    states.dedup();
    header_of(
        &mut out,
        "shepherd_tasks",
        "gauge",
        "Tasks by state (queue depth).",
    );
    for s in states {
        let shepherd_store::Page { total, .. } = state
            .store
            .list_tasks(TaskFilter {
                state: Some(s.to_owned()),
                agent_id: None,
                channel_id: None,
                limit: 1,
                offset: 0,
            })
            .await?;
        let _ = writeln!(out, "shepherd_tasks{{state=\"{}\"}} {total}", label(s));
    }
    header_of(&mut out, "shepherd_runs", "gauge", "Runs by status.");
    for s in RunStatus::ALL {
        let shepherd_store::Page { total, .. } = state
            .store
            .list_runs(RunFilter {
                agent_id: None,
                channel_id: None,
                status: Some(s.as_str().to_owned()),
                vtid: None,
                q: None,
                limit: 1,
                offset: 0,
            })
            .await?;
        let _ = writeln!(out, "shepherd_runs{{status=\"{}\"}} {total}", s.as_str());
    }
    let shepherd_store::Listing {
        items: workers,
        cursor: head,
    } = state.store.list_workers(WorkerFilter::default()).await?;
    gauge(
        &mut out,
        "shepherd_active_claims",
        "Claims held now.",
        workers.iter().map(|w| w.active_claims).sum::<i64>(),
    );
    header_of(
        &mut out,
        "shepherd_workers",
        "gauge",
        "Workers by registry status.",
    );
    let mut by_status: BTreeMap<&str, i64> = BTreeMap::new();
    for w in &workers {
        *by_status.entry(w.status.as_str()).or_default() += 1;
    }
    for (s, n) in by_status {
        let _ = writeln!(out, "shepherd_workers{{status=\"{}\"}} {n}", label(s));
    }
    gauge(
        &mut out,
        "shepherd_event_log_head",
        "The sequence number of the newest event.",
        head,
    );
    let published = state.store.published_through();
    gauge(
        &mut out,
        "shepherd_event_published_through",
        "The newest event this node has handed to its live readers.",
        published,
    );
    gauge(
        &mut out,
        "shepherd_event_lag_events",
        "Events committed that this node has not yet handed to its live readers.",
        (head - published).max(0),
    );
    state.metrics.delivery_lag.write(&mut out);
    write_writer(&mut out, &state.store.writer_stats());
    Ok(out)
}

/// Prometheus metrics (text format 0.0.4); operator token only.
#[utoipa::path(get, path = "/metrics", tag = "health", responses(
    (status = 200, description = "Prometheus text exposition", content_type = "text/plain"),
    (status = 401, description = "unauthorized", body = shepherd_protocol::ErrorBody),
    (status = 403, description = "operator_only", body = shepherd_protocol::ErrorBody)))]
pub async fn metrics(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Response> {
    caller.require_operator()?;
    exposition(&state).await
}

async fn exposition(state: &AppState) -> ApiResult<Response> {
    let body = render(state).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response())
}

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

/// The metrics listener's whole application: `GET /metrics` without a
/// token, every other path 404 `not_found` (nothing else of the API is
/// reachable through it), errors in the standard shape.
pub fn metrics_only_router(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(state): State<AppState>| async move { exposition(&state).await }),
        )
        .fallback(|| async {
            crate::error::ApiError::from(shepherd_core::Error::not_found(
                "not_found",
                "this listener serves only GET /metrics",
            ))
        })
        .layer(axum::middleware::from_fn(crate::reject::uniform_errors))
        .with_state(state)
}

/// Serves [`metrics_only_router`] on `listener` until the server's
/// shutdown token is cancelled.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: AppState,
) -> std::io::Result<()> {
    let token = state.shutdown.clone();
    let app = metrics_only_router(state);
    axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(async move { token.cancelled().await })
        .await
}
