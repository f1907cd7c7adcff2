//! Shepherd's HTTP face: REST, server-sent events and the OpenAPI document,
//! all on one port.
//!
//! [`router`] builds the whole application from an [`AppState`]; [`serve`]
//! runs it on a listener the caller bound (tests bind `127.0.0.1:0`) until a
//! shutdown future resolves. Only this crate knows HTTP: handlers translate
//! requests into store operations and errors into status codes, nothing more.

pub mod auth;
pub mod channels;
pub mod connector;
pub mod conversations;
pub mod error;
pub mod events;
pub mod health;
pub mod limits;
pub mod metrics;
pub mod openapi;
pub mod origin;
pub mod reject;
pub mod run_diff;
pub mod runs;
pub mod scope;
pub mod session_ws;
pub mod sessions;
pub mod tasks;
pub mod ui;
pub mod usage;
pub mod workers;
pub mod workspace_repos;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue};
use axum::serve::ListenerExt;
use axum::Router;
use shepherd_store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Response header carrying the event-log cursor a response's data is valid at.
pub const CURSOR_HEADER: HeaderName = HeaderName::from_static("x-shepherd-cursor");

/// Server behaviour that handlers need to know.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The operator token; `None` only on loopback.
    pub auth_token: Option<String>,
    pub body_limit_bytes: usize,
    pub heartbeat_timeout: Duration,
    pub claim_ttl: Duration,
    pub cancel_grace: Duration,
    /// Agents' own grace (`[agents.NAME] cancel_grace_secs`), which the
    /// runner gives their processes instead of `cancel_grace`.
    pub agent_cancel_grace: std::collections::BTreeMap<String, Duration>,
    pub sse_keepalive: Duration,
    /// A busy SSE stream writes at most once per this interval, carrying
    /// every event of the interval in one write.
    pub sse_coalesce: Duration,
    /// Origins besides the server's own that browsers may call from
    /// (`SHEPHERD_ALLOWED_ORIGINS`), e.g. `https://ui.example.com`.
    pub allowed_origins: Vec<String>,
    /// Requests handled at once before more are refused with 503
    /// (`SHEPHERD_MAX_REQUESTS`); 0: no cap.
    pub max_requests: usize,
    /// Slots kept for workers' reports (heartbeats, claims, progress,
    /// steps) once `max_requests` is reached (`SHEPHERD_MAX_WORKER_REQUESTS`).
    pub max_worker_requests: usize,
    /// Open streams (SSE, WebSockets, MCP) before more are refused
    /// (`SHEPHERD_MAX_STREAMS`); 0: no cap.
    pub max_streams: usize,
    /// A connection whose peer takes nothing the server sends for this long
    /// is closed (`SHEPHERD_SEND_TIMEOUT`); zero: never.
    pub send_timeout: Duration,
    /// The git repositories runs' diffs may be read from: the `repo` of each
    /// configured worktree agent (see [`workspace_repos`]).
    pub workspace_repos: Vec<std::path::PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            auth_token: None,
            body_limit_bytes: 8 * 1024 * 1024,
            heartbeat_timeout: Duration::from_secs(300),
            claim_ttl: Duration::from_secs(3600),
            cancel_grace: Duration::from_secs(30),
            agent_cancel_grace: Default::default(),
            sse_keepalive: Duration::from_secs(15),
            sse_coalesce: Duration::from_millis(25),
            allowed_origins: Vec::new(),
            max_requests: 0,
            max_worker_requests: 0,
            max_streams: 0,
            send_timeout: Duration::ZERO,
            workspace_repos: Vec::new(),
        }
    }
}

/// Everything a handler can reach, behind one reference count: each
/// middleware layer and each `State` extractor clones it for every request,
/// and a clone of the fields themselves would touch every `Arc` among them.
#[derive(Clone)]
pub struct AppState(Arc<StateFields>);

/// What [`AppState`] holds (reached through it: `state.store`, ...).
#[derive(Clone)]
pub struct StateFields {
    pub store: Store,
    pub settings: Arc<Settings>,
    /// Cancelled when the server begins shutting down; long-lived responses
    /// (event streams) end on it so that graceful shutdown can complete.
    pub shutdown: CancellationToken,
    /// When this server started (ms): downtime before it does not count
    /// against workers' leases.
    pub started_at: i64,
    /// Rendered frames of events read from the log, shared by every
    /// subscriber (live events carry their own frame).
    pub frames: Arc<events::FrameCache>,
    /// This node's sessions and PTY workers (seed 004); `None`: not served.
    pub sessions: Option<Arc<shepherd_sessions::SessionManager>>,
    /// The request and stream caps, and their gauges.
    pub limits: Arc<limits::Limits>,
    /// Request counts and latencies for `/metrics`.
    pub metrics: Arc<metrics::HttpMetrics>,
}

impl std::ops::Deref for AppState {
    type Target = StateFields;

    fn deref(&self) -> &StateFields {
        &self.0
    }
}

impl AppState {
    pub fn new(store: Store, settings: Settings, shutdown: CancellationToken) -> Self {
        let limits = Arc::new(limits::Limits::new(
            settings.max_requests,
            settings.max_worker_requests,
            settings.max_streams,
        ));
        // Every live reader of this store writes the same SSE frame for an
        // event: the store renders it once, when it publishes the event.
        store.render_live_frames(events::render_frame);
        AppState(Arc::new(StateFields {
            limits,
            metrics: Arc::default(),
            store,
            settings: Arc::new(settings),
            shutdown,
            started_at: shepherd_store::now_ms(),
            frames: Arc::default(),
            sessions: None,
        }))
    }

    /// The same state, serving `sessions` (set before the state is shared).
    pub fn with_sessions(self, sessions: Arc<shepherd_sessions::SessionManager>) -> Self {
        let mut fields = Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone());
        fields.sessions = Some(sessions);
        AppState(Arc::new(fields))
    }

    /// The lease rules in force on this node.
    pub fn lease_rules(&self) -> shepherd_store::LeaseRules {
        let s = &self.settings;
        shepherd_store::LeaseRules {
            ttl_ms: s.claim_ttl.as_millis() as i64,
            heartbeat_timeout_ms: s.heartbeat_timeout.as_millis() as i64,
            not_before: self.started_at + s.heartbeat_timeout.as_millis() as i64,
            cancel_grace_ms: s.cancel_grace.as_millis() as i64,
        }
    }
}

/// The whole HTTP application.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route(
            "/api/openapi.json",
            axum::routing::get(openapi::serve_openapi),
        )
        .merge(tasks::router())
        .merge(connector::router())
        .merge(runs::router())
        .merge(events::router())
        .merge(workers::router())
        .merge(channels::router())
        .merge(conversations::router())
        .merge(usage::router())
        .merge(run_diff::router())
        .merge(sessions::router())
        .merge(session_ws::router())
        .merge(metrics::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    let app = Router::new()
        .merge(health::router())
        .merge(api)
        .fallback(ui::serve)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            origin::check_origin,
        ))
        .layer(DefaultBodyLimit::max(state.settings.body_limit_bytes))
        .layer(axum::middleware::from_fn(log_requests))
        .with_state(state.clone());
    // MCP over Streamable HTTP, behind the same auth; its tools call `app`
    // in-process with the caller's own Authorization header.
    let mcp = shepherd_mcp::http_route(app.clone(), state.shutdown.clone());
    let metrics_state = state.clone();
    app.merge(
        Router::new()
            .route("/mcp", mcp)
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                auth::authenticate,
            ))
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                origin::check_origin,
            ))
            .layer(axum::middleware::from_fn(log_requests))
            .with_state(state),
    )
    // Outermost first: the error shape covers everything, metrics count
    // shed requests too, and shedding happens before any other work.
    .layer(axum::middleware::from_fn_with_state(
        metrics_state.clone(),
        limits::shed,
    ))
    .layer(axum::middleware::from_fn_with_state(
        metrics_state,
        metrics::record,
    ))
    .layer(axum::middleware::from_fn(reject::uniform_errors))
}

/// Logs each request with its status and duration.
async fn log_requests(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let started = std::time::Instant::now();
    let res = next.run(req).await;
    tracing::debug!(
        target: "shepherd::http",
        %method,
        path,
        status = res.status().as_u16(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    res
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting,
/// lets in-flight requests finish and returns.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let token = state.shutdown.clone();
    let send_timeout = state.settings.send_timeout;
    let app = router(state);
    // Event streams write small frames that must leave at once, not wait for
    // the peer's delayed ACK (Nagle), so every connection sets TCP_NODELAY.
    let listener = listener.tap_io(move |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        if let Err(e) = set_send_timeout(tcp, send_timeout) {
            tracing::debug!(error = %e, "could not set TCP_USER_TIMEOUT");
        }
    });
    // A shared make-service: each connection clones a pointer, not the router.
    axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(async move {
            shutdown.await;
            token.cancel();
        })
        .await
}

/// Closes the connection once data the server sent has waited `timeout`
/// unacknowledged, or untransmitted because the peer's receive window stayed
/// shut (TCP_USER_TIMEOUT). A stream whose client stopped reading would
/// otherwise hold its slot and its buffers for as long as the client keeps
/// the connection open, since the server only learns that a client fell
/// behind when it can write to it again; the same bound ends connections to
/// peers that vanished without a FIN. Linux only; elsewhere a no-op.
#[cfg(target_os = "linux")]
fn set_send_timeout(tcp: &tokio::net::TcpStream, timeout: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if timeout.is_zero() {
        return Ok(());
    }
    let ms = libc::c_uint::try_from(timeout.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: setsockopt on a socket this stream owns, with a pointer to a
    // live c_uint and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_send_timeout(_tcp: &tokio::net::TcpStream, _timeout: Duration) -> std::io::Result<()> {
    Ok(())
}

/// Sets the cursor header on a response.
pub fn cursor_header(cursor: i64) -> [(HeaderName, HeaderValue); 1] {
    [(CURSOR_HEADER, HeaderValue::from(cursor))]
}
