//! Sessions over REST (the sessions contract): create, list, show and delete workspaces;
//! add, remove and restart their tabs; the `git-diff` tab's diff.
//!
//! A session's public view is its persisted metadata (the contract's
//! `toPublicSession()`): every tab is listed whether or not its process is
//! alive; a client that attaches to one restores it (see `session_ws.rs`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use shepherd_core::time::to_rfc3339;
use shepherd_core::Error;
use shepherd_protocol::{
    AddWorker, CreateSession, GitDiff, OtherNode, RestartWorker, Session, SessionList,
    SessionWorker,
};
use shepherd_sessions::SessionManager;
use shepherd_store::{SessionRecord, SessionWorkerRecord};

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiResult};
use crate::node_relay;
use crate::session_relay::{self as relay, Place};
use crate::AppState;

pub(crate) fn manager(state: &AppState) -> Result<Arc<SessionManager>, Error> {
    state.sessions.clone().ok_or_else(|| {
        Error::unavailable("sessions_unavailable", "this server does not run sessions")
    })
}

/// A tab's view; `alive` says whether its process runs now, here or on the
/// runner's host `on` (as far as that host's link last said).
pub(crate) fn worker_view(
    state: &AppState,
    m: &SessionManager,
    on: &str,
    w: &SessionWorkerRecord,
) -> SessionWorker {
    let alive = w.is_pty()
        && if on == m.config().node_id {
            m.alive(&w.id)
        } else {
            state.links.live(on, &w.id)
        };
    SessionWorker {
        id: w.id.clone(),
        kind: w.kind.clone(),
        name: w.name.clone(),
        agent_id: w.agent_id.clone(),
        created_at: to_rfc3339(w.created_at),
        pid: w.pid,
        alive,
        epoch: w.epoch,
        exit_code: w.exit_code,
        exited_at: w.exited_at.map(to_rfc3339),
    }
}

fn session_view(state: &AppState, m: &SessionManager, s: &SessionRecord) -> Session {
    Session {
        id: s.id.clone(),
        name: s.name.clone(),
        location_path: s.location_path.clone(),
        created_at: to_rfc3339(s.created_at),
        node_id: s.node_id.clone(),
        node_address: s.node_address.clone(),
        workers: s
            .workers
            .iter()
            .map(|w| worker_view(state, m, &s.node_id, w))
            .collect(),
    }
}

/// Adds the hosting node's address to a `session_on_other_node` error.
pub(crate) async fn with_node(state: &AppState, session_id: &str, e: ApiError) -> ApiError {
    if e.error.code != "session_on_other_node" || e.extra.is_some() {
        return e;
    }
    let node = state.store.session(session_id).await.ok();
    let extra = OtherNode {
        node_id: node.as_ref().map(|s| s.node_id.clone()).unwrap_or_default(),
        address: node.and_then(|s| s.node_address),
    };
    e.with_fields(extra)
}

/// For a session on another server node: what that node answers, asked
/// as the caller; `None` when it cannot be asked (the local path then
/// answers `session_on_other_node`).
async fn other_node<T, F, Fut>(
    state: &AppState,
    m: &SessionManager,
    place: &Place,
    s: &SessionRecord,
    headers: &HeaderMap,
    ask: F,
) -> Option<Result<T, ApiError>>
where
    F: FnOnce(shepherd_client::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, shepherd_client::ClientError>>,
{
    let Place::OtherNode(node) = place else {
        return None;
    };
    let peer = node_relay::peer(state, m, node, Some(s), headers).await?;
    node_relay::answer(&s.node_id, ask(peer).await)
}

/// Create a session.
#[utoipa::path(post, path = "/api/v1/sessions", tag = "sessions", operation_id = "create_session", request_body = CreateSession, responses(
    (status = 201, body = Session),
    (status = 404, description = "host_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "session_on_other_node: the host is another server node", body = crate::openapi::ErrorBody),
    (status = 422, description = "invalid_location, outside_sessions_root, invalid_name, invalid_sessions_root (the host holds no sessions)", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline, host_timeout, host_failed", body = crate::openapi::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    ApiJson(b): ApiJson<CreateSession>,
) -> ApiResult<(StatusCode, Json<Session>)> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let host = b.host.clone().unwrap_or_else(|| m.config().node_id.clone());
    // A runner's host linked to another node is asked through that node.
    if let Some(node) = relay::link_elsewhere(&state, &m, &host).await {
        if let Some(peer) = node_relay::peer(&state, &m, &node, None, &headers).await {
            if let Some(r) = node_relay::answer(&node, peer.create_session(&b).await) {
                return r.map(|s| (StatusCode::CREATED, Json(s)));
            }
        }
    }
    let s = relay::create(&state, &m, &host, b.name, &b.location_path).await?;
    Ok((StatusCode::CREATED, Json(session_view(&state, &m, &s))))
}

/// Every session with its tabs.
#[utoipa::path(get, path = "/api/v1/sessions", tag = "sessions", operation_id = "list_sessions", responses((status = 200, body = SessionList)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<SessionList>> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let list = state.store.list_sessions().await?.items;
    let sessions: Vec<Session> = list.iter().map(|s| session_view(&state, &m, s)).collect();
    Ok(Json(SessionList {
        count: sessions.len(),
        sessions,
    }))
}

/// A session's public view: its persisted tabs, alive or not.
#[utoipa::path(get, path = "/api/v1/sessions/{id}", tag = "sessions", operation_id = "get_session", params(("id" = String, Path)), responses(
    (status = 200, body = Session), (status = 404, description = "session_not_found", body = crate::openapi::ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Json<Session>> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let s = state.store.session(&id).await?;
    Ok(Json(session_view(&state, &m, &s)))
}

/// Delete a session, ending every process of it.
#[utoipa::path(delete, path = "/api/v1/sessions/{id}", tag = "sessions", operation_id = "delete_session", params(("id" = String, Path)), responses(
    (status = 200, body = Session), (status = 404, description = "session_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "session_on_other_node", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline (with host_id, host_name, last_seen_at), host_timeout, host_failed: the session lives on a runner's host", body = crate::openapi::ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Session>> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let s = state.store.session(&id).await?;
    let place = relay::place(&state, &m, &s).await;
    if let Some(r) = other_node(&state, &m, &place, &s, &headers, |c| {
        let id = &id;
        async move { c.delete_session(id).await }
    })
    .await
    {
        return r.map(Json);
    }
    let deleted = match relay::unreached(place, &s) {
        Place::Host(host) => relay::delete(&state, &host, &s).await,
        Place::Here | Place::OtherNode(_) => m.delete_session(&id).await.map_err(Into::into),
    };
    match deleted {
        Ok(s) => {
            let mut v = session_view(&state, &m, &s);
            v.workers.iter_mut().for_each(|w| w.alive = false);
            Ok(Json(v))
        }
        Err(e) => Err(with_node(&state, &id, e).await),
    }
}

/// Add a tab: `agent` (its `interactive_command`), `terminal` (the user's shell) or `git-diff`.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/workers", tag = "sessions", operation_id = "add_session_worker", params(("id" = String, Path)),
    request_body = AddWorker, responses(
    (status = 201, body = SessionWorker), (status = 404, description = "session_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "session_on_other_node", body = crate::openapi::ErrorBody),
    (status = 422, description = "invalid_worker_type, agent_not_found, agent_not_interactive, invalid_location, spawn_failed", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline (with host_id, host_name, last_seen_at), host_timeout, host_failed: the session lives on a runner's host", body = crate::openapi::ErrorBody)))]
pub async fn add_worker(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<AddWorker>,
) -> ApiResult<(StatusCode, Json<SessionWorker>)> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let s = state.store.session(&id).await?;
    let place = relay::place(&state, &m, &s).await;
    if let Some(r) = other_node(&state, &m, &place, &s, &headers, |c| {
        let (id, b) = (&id, &b);
        async move { c.add_session_worker(id, b).await }
    })
    .await
    {
        return r.map(|w| (StatusCode::CREATED, Json(w)));
    }
    let added = match relay::unreached(place, &s) {
        Place::Host(host) => {
            relay::add_worker(&state, &host, &s, &b.kind, b.name, b.agent_id).await
        }
        Place::Here | Place::OtherNode(_) => m
            .add_worker(&id, &b.kind, b.name, b.agent_id)
            .await
            .map_err(Into::into),
    };
    match added {
        Ok(w) => Ok((
            StatusCode::CREATED,
            Json(worker_view(&state, &m, &s.node_id, &w)),
        )),
        Err(e) => Err(with_node(&state, &id, e).await),
    }
}

/// Remove a tab, ending every process of its PTY.
#[utoipa::path(delete, path = "/api/v1/sessions/{id}/workers/{worker_id}", tag = "sessions", operation_id = "remove_session_worker",
    params(("id" = String, Path), ("worker_id" = String, Path)), responses(
    (status = 200, body = SessionWorker), (status = 404, description = "session_not_found, worker_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "session_on_other_node", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline (with host_id, host_name, last_seen_at), host_timeout, host_failed: the session lives on a runner's host", body = crate::openapi::ErrorBody)))]
pub async fn remove_worker(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path((id, worker_id)): Path<(String, String)>,
) -> ApiResult<Json<SessionWorker>> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let (s, _) = state.store.session_worker(&id, &worker_id).await?;
    let place = relay::place(&state, &m, &s).await;
    if let Some(r) = other_node(&state, &m, &place, &s, &headers, |c| {
        let (id, w) = (&id, &worker_id);
        async move { c.remove_session_worker(id, w).await }
    })
    .await
    {
        return r.map(Json);
    }
    let removed = match relay::unreached(place, &s) {
        Place::Host(host) => relay::remove_worker(&state, &host, &s, &worker_id).await,
        Place::Here | Place::OtherNode(_) => {
            m.remove_worker(&id, &worker_id).await.map_err(Into::into)
        }
    };
    match removed {
        Ok(w) => {
            let mut v = worker_view(&state, &m, &s.node_id, &w);
            v.alive = false;
            Ok(Json(v))
        }
        Err(e) => Err(with_node(&state, &id, e).await),
    }
}

/// Kill the tab's process (if alive) and start a fresh one.
#[utoipa::path(post, path = "/api/v1/sessions/{id}/workers/{worker_id}/restart", tag = "sessions", operation_id = "restart_session_worker",
    params(("id" = String, Path), ("worker_id" = String, Path)), request_body = RestartWorker, responses(
    (status = 200, body = SessionWorker), (status = 404, description = "session_not_found, worker_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "session_on_other_node", body = crate::openapi::ErrorBody),
    (status = 422, description = "not_a_terminal, agent_not_found, agent_not_interactive, invalid_location, spawn_failed", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline (with host_id, host_name, last_seen_at), host_timeout, host_failed: the session lives on a runner's host", body = crate::openapi::ErrorBody)))]
pub async fn restart(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path((id, worker_id)): Path<(String, String)>,
    ApiJson(b): ApiJson<RestartWorker>,
) -> ApiResult<Json<SessionWorker>> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let (s, w) = state.store.session_worker(&id, &worker_id).await?;
    let place = relay::place(&state, &m, &s).await;
    if let Some(r) = other_node(&state, &m, &place, &s, &headers, |c| {
        let (id, w, b) = (&id, &worker_id, &b);
        async move { c.restart_session_worker(id, w, b).await }
    })
    .await
    {
        return r.map(Json);
    }
    let restarted = match relay::unreached(place, &s) {
        Place::Host(host) => relay::restart(&state, &host, &s, &w, b.mode).await,
        Place::Here | Place::OtherNode(_) => {
            m.restart(&id, &worker_id, b.mode).await.map_err(Into::into)
        }
    };
    match restarted {
        Ok(w) => Ok(Json(worker_view(&state, &m, &s.node_id, &w))),
        Err(e) => Err(with_node(&state, &id, e).await),
    }
}

/// A `git-diff` tab: `git diff` and `git status --porcelain` of the session's location.
#[utoipa::path(get, path = "/api/v1/sessions/{id}/workers/{worker_id}/diff", tag = "sessions", operation_id = "session_worker_diff",
    params(("id" = String, Path), ("worker_id" = String, Path)), responses(
    (status = 200, body = GitDiff), (status = 404, description = "session_not_found, worker_not_found", body = crate::openapi::ErrorBody),
    (status = 422, description = "not_a_git_diff_worker, git_failed", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline (with host_id, host_name, last_seen_at), host_timeout, host_failed: the session lives on a runner's host", body = crate::openapi::ErrorBody)))]
pub async fn diff(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path((id, worker_id)): Path<(String, String)>,
) -> ApiResult<Json<GitDiff>> {
    caller.require_operator()?;
    let m = manager(&state)?;
    let (s, w) = state.store.session_worker(&id, &worker_id).await?;
    let place = relay::place(&state, &m, &s).await;
    if let Some(r) = other_node(&state, &m, &place, &s, &headers, |c| {
        let (id, w) = (&id, &worker_id);
        async move { c.session_diff(id, w).await }
    })
    .await
    {
        return r.map(Json);
    }
    let diff = match relay::unreached(place, &s) {
        Place::Host(host) => relay::diff(&state, &host, &s, &w).await,
        Place::Here | Place::OtherNode(_) => m.diff(&id, &worker_id).await.map_err(Into::into),
    };
    match diff {
        Ok(d) => Ok(Json(d)),
        Err(e) => Err(with_node(&state, &id, e).await),
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/sessions", post(create).get(list))
        .route("/api/v1/sessions/{id}", get(show).delete(delete))
        .route("/api/v1/sessions/{id}/workers", post(add_worker))
        .route(
            "/api/v1/sessions/{id}/workers/{worker_id}",
            axum::routing::delete(remove_worker),
        )
        .route(
            "/api/v1/sessions/{id}/workers/{worker_id}/restart",
            post(restart),
        )
        .route("/api/v1/sessions/{id}/workers/{worker_id}/diff", get(diff))
}
