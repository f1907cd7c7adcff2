//! Shepherd's HTTP face: REST, server-sent events and the OpenAPI document,
//! all on one port.
//!
//! [`router`] builds the whole application from an [`AppState`]; [`serve`]
//! runs it on a listener the caller bound (tests bind `127.0.0.1:0`) until a
//! shutdown future resolves ([`tls::serve`] does the same over HTTPS). Only
//! this crate knows HTTP: handlers translate requests into store operations
//! and errors into status codes, nothing more.

pub mod auth;
pub mod body_timeout;
pub mod channels;
pub mod connector;
pub mod conversations;
pub mod error;
pub mod events;
pub mod health;
pub mod host;
pub mod host_link;
pub mod hosts;
pub mod input_requests;
pub mod limits;
pub mod listener;
pub mod login;
pub mod metrics;
pub mod node_relay;
pub mod oidc;
pub mod openapi;
pub mod origin;
pub mod parse_errors;
pub mod reject;
pub mod revocation;
pub mod roles;
pub mod run_diff;
pub mod runs;
pub mod scope;
pub mod session_relay;
pub mod session_ws;
pub mod sessions;
pub mod tasks;
pub mod tls;
pub mod ui;
pub mod usage;
pub mod users;
pub mod webhooks;
pub mod workers;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue};
use axum::Router;
use shepherd_core::defaults;
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
    /// What a caller who is not an admin presents to register a new host
    /// (`SHEPHERD_HOST_ENROLLMENT_TOKEN`); none: only admins may.
    pub host_enrollment_token: Option<String>,
    pub body_limit_bytes: usize,
    pub heartbeat_timeout: Duration,
    pub claim_ttl: Duration,
    pub cancel_grace: Duration,
    /// Agents' own grace (`[agents.NAME] cancel_grace_secs`), which the
    /// runner gives their processes instead of `cancel_grace`.
    pub agent_cancel_grace: std::collections::BTreeMap<String, Duration>,
    /// Agents' permission policies (`[agents.NAME]` `allow`, `deny`,
    /// `ask_timeout`, `on_timeout`): the rules that answer their input
    /// requests at once, and how long a request may wait.
    pub agent_permissions:
        std::collections::BTreeMap<String, shepherd_core::input::PermissionPolicy>,
    /// Agents' `stuck_after`: a running run quiet this long is reported stuck.
    pub agent_stuck_after: std::collections::BTreeMap<String, Duration>,
    pub sse_keepalive: Duration,
    /// A busy SSE stream writes at most once per this interval, carrying
    /// every event of the interval in one write.
    pub sse_coalesce: Duration,
    /// How many writes a quiet SSE stream makes at once before it coalesces
    /// (the events of one send or claim reach the client as they come: a
    /// conversation's send makes thirteen, its first step the ninth).
    pub sse_burst: u32,
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
    /// The `Host` names this server answers to (`SHEPHERD_ALLOWED_HOSTS`
    /// and what else it is known by); others get 421.
    pub hosts: host::HostRule,
    /// A connection must send a request's whole header within this
    /// (`SHEPHERD_HEADER_TIMEOUT`).
    pub header_timeout: Duration,
    /// A request's body must arrive within this, or 408 `body_timeout`
    /// (`SHEPHERD_BODY_TIMEOUT`).
    pub body_timeout: Duration,
    /// Requests one credential may have in flight, streams apart
    /// (`SHEPHERD_MAX_REQUESTS_PER_TOKEN`); 0: no cap.
    pub max_requests_per_token: usize,
    /// The git repositories runs' diffs may be read from: the `repo` of each
    /// configured worktree agent (see `shepherd_runner::workspace_diff`).
    pub workspace_repos: Vec<std::path::PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            auth_token: None,
            host_enrollment_token: None,
            body_limit_bytes: defaults::BODY_LIMIT_BYTES as usize,
            heartbeat_timeout: defaults::HEARTBEAT_TIMEOUT,
            claim_ttl: defaults::CLAIM_TTL,
            cancel_grace: defaults::CANCEL_GRACE,
            agent_cancel_grace: Default::default(),
            agent_permissions: Default::default(),
            agent_stuck_after: Default::default(),
            sse_keepalive: Duration::from_secs(15),
            sse_coalesce: Duration::from_millis(25),
            sse_burst: 32,
            allowed_origins: Vec::new(),
            max_requests: 0,
            max_worker_requests: 0,
            max_streams: 0,
            send_timeout: Duration::ZERO,
            hosts: host::HostRule::default(),
            header_timeout: defaults::HEADER_TIMEOUT,
            body_timeout: defaults::BODY_TIMEOUT,
            max_requests_per_token: 0,
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
    /// This node's sessions and PTY workers (the sessions contract); `None`: not served.
    pub sessions: Option<Arc<shepherd_sessions::SessionManager>>,
    /// The request and stream caps, and their gauges.
    pub limits: Arc<limits::Limits>,
    /// Request counts and latencies for `/metrics`.
    pub metrics: Arc<metrics::HttpMetrics>,
    /// The key run tokens are checked with, read from the store once.
    pub run_key: Arc<tokio::sync::OnceCell<String>>,
    /// The OpenID provider people sign in to the web UI with (`[oidc]`).
    pub oidc: Option<Arc<oidc::Provider>>,
    /// The links runners' hosts hold open to this node.
    pub links: Arc<host_link::HostLinks>,
    /// This node's follower of credential changes, for the watches of
    /// long-lived connections.
    pub revocations: Arc<revocation::Revocations>,
}

impl std::ops::Deref for AppState {
    type Target = StateFields;

    fn deref(&self) -> &StateFields {
        &self.0
    }
}

impl AppState {
    pub fn new(store: Store, settings: Settings, shutdown: CancellationToken) -> Self {
        let limits = Arc::new(
            limits::Limits::new(
                settings.max_requests,
                settings.max_worker_requests,
                settings.max_streams,
            )
            .with_per_token(settings.max_requests_per_token),
        );
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
            run_key: Arc::default(),
            oidc: None,
            links: Arc::default(),
            revocations: Arc::default(),
        }))
    }

    /// The same state, signing people in through `provider` (set before
    /// the state is shared).
    pub fn with_oidc(self, provider: Arc<oidc::Provider>) -> Self {
        let mut fields = Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone());
        fields.oidc = Some(provider);
        AppState(Arc::new(fields))
    }

    /// The same state, serving `sessions` (set before the state is shared).
    pub fn with_sessions(self, sessions: Arc<shepherd_sessions::SessionManager>) -> Self {
        let mut fields = Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone());
        fields.sessions = Some(sessions);
        AppState(Arc::new(fields))
    }

    /// The key run tokens are made and checked with (the same on every node).
    pub async fn run_key(&self) -> Result<&str, shepherd_core::Error> {
        self.run_key
            .get_or_try_init(|| self.store.run_token_key())
            .await
            .map(String::as_str)
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
        .merge(input_requests::router())
        .merge(webhooks::router())
        .merge(users::router())
        .merge(hosts::router())
        .merge(host_link::router())
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
        .merge(login::router())
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
                revocation::end_streams,
            ))
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
    // shed requests too, a foreign Host is refused before any work, and
    // shedding happens before the rest. A body is read (in its time) while
    // it holds its slots, so a slow one holds its own token's slots only.
    .layer(axum::middleware::from_fn_with_state(
        metrics_state.clone(),
        body_timeout::read_body_in_time,
    ))
    .layer(axum::middleware::from_fn_with_state(
        metrics_state.clone(),
        limits::shed,
    ))
    .layer(axum::middleware::from_fn_with_state(
        metrics_state.clone(),
        host::check_host,
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
/// lets in-flight requests finish and returns (plain HTTP; [`tls::serve`]
/// for HTTPS).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listener::serve(listener, state, listener::Handshake::Plain, shutdown).await
}

/// Sets the cursor header on a response.
pub fn cursor_header(cursor: i64) -> [(HeaderName, HeaderValue); 1] {
    [(CURSOR_HEADER, HeaderValue::from(cursor))]
}
