//! Hosts: `GET /api/v1/hosts` (where work lives, and whether each place is
//! there), `POST /api/v1/hosts` (a runner registers its host with the
//! operator token and is given a host token) and
//! `POST /api/v1/hosts/{id}/heartbeat` (the host says it is still there).
//!
//! A host token is the narrowest credential the server gives out: the
//! authentication layer lets it reach only the routes
//! [`crate::auth::host_token_may`] lists, and each checks that the host
//! named is the token's own.
//!
//! Whoever is given a host's token holds its link, and so reads what people
//! type into that host's terminals and answers for it. So a token is given
//! only to whom the host's id is theirs: a new id to an admin (or to whoever
//! presents the configured host enrollment token), an existing id to its
//! current token's holder (the runner come back), or to an admin who says
//! `replace` (whose registration closes the old link).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use shepherd_core::model::Host;
use shepherd_core::role::Role;
use shepherd_core::time::to_rfc3339;
use shepherd_core::Error;
use shepherd_protocol::{
    ErrorBody, HostCapacity, HostHeartbeatResponse, HostList, HostView, KeptBranch, LinkReply,
    LinkRequest, PruneBranchesBody, PruneBranchesReport, RegisterHostBody, RegisterHostResponse,
    HEARTBEAT_INTERVAL_SECS,
};
use shepherd_store::{HostClaim, HostDeclaration};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult};
use crate::AppState;

/// A host as the wire shows it: online when seen within one heartbeat
/// timeout of now.
pub fn host_to_wire(state: &AppState, h: Host) -> HostView {
    let timeout = state.settings.heartbeat_timeout.as_millis() as i64;
    HostView {
        online: shepherd_store::now_ms() - h.last_seen_at <= timeout,
        last_seen_at: to_rfc3339(h.last_seen_at),
        registered_at: to_rfc3339(h.registered_at),
        capacity: HostCapacity {
            slots: h.slots,
            running: h.running,
        },
        id: h.id,
        name: h.name,
        kind: h.kind,
        agents: h.agents,
        sessions_root: h.sessions_root,
        sessions: h.sessions,
        address: h.address,
    }
}

/// Every host: server nodes first, then runners' hosts, by name.
#[utoipa::path(get, path = "/api/v1/hosts", tag = "hosts", operation_id = "list_hosts", responses(
    (status = 200, body = HostList),
    (status = 403, description = "forbidden: a worker token", body = ErrorBody)))]
pub async fn list_hosts(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<HostList>> {
    crate::scope::operator_only(&caller, "hosts")?;
    let hosts = state.store.list_hosts().await?;
    Ok(Json(HostList {
        hosts: hosts.into_iter().map(|h| host_to_wire(&state, h)).collect(),
    }))
}

/// Register a runner's host. The answer carries the host's own token, once.
/// A new host: an admin, or a caller presenting the host enrollment token.
/// The same id again (a runner that restarted with its data directory):
/// with the host's current token (`host_token`), which keeps the host and
/// replaces its token; or an admin's `replace`, which also closes the
/// host's link.
#[utoipa::path(post, path = "/api/v1/hosts", tag = "hosts", operation_id = "register_host", request_body = RegisterHostBody, responses(
    (status = 201, body = RegisterHostResponse),
    (status = 403, description = "host_enrollment_required: a new host needs an admin or the enrollment token; forbidden: replace is for admins", body = ErrorBody),
    (status = 409, description = "host_kind_conflict: the id is a server node's; host_exists: the id is registered and no current host token (nor an admin's replace) came with it", body = ErrorBody),
    (status = 422, description = "invalid_host_id, invalid_host_name, invalid_sessions_root, invalid_agents, invalid_agent_id, invalid_slots", body = ErrorBody)))]
pub async fn register_host(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<RegisterHostBody>,
) -> ApiResult<impl IntoResponse> {
    caller.require_operator()?;
    let admin = caller.role() == Some(Role::Admin);
    if body.replace && !admin {
        return Err(Error::forbidden(
            "forbidden",
            "replacing a registered host (taking its link without its token) needs the admin role",
        )
        .into());
    }
    let enrolled = match (
        &state.settings.host_enrollment_token,
        &body.enrollment_token,
    ) {
        (Some(want), Some(got)) => shepherd_core::token::digests_equal(
            &shepherd_core::token::hash_token(want),
            &shepherd_core::token::hash_token(got),
        ),
        _ => false,
    };
    let claim = HostClaim {
        may_create: admin || enrolled,
        current_token: body.host_token,
        replace: body.replace,
    };
    let id = body.id.unwrap_or_else(shepherd_store::new_host_id);
    let decl = HostDeclaration {
        name: body.name.unwrap_or_else(|| id.clone()),
        id,
        address: None,
        sessions_root: body.sessions_root,
        agents: body.agents,
        slots: body.slots,
    };
    let replace = claim.replace;
    let registered = state.store.register_host(decl, claim).await?;
    let (host, host_token) = (registered.host, registered.token);
    if registered.existed {
        // The old token is void: a link opened with it (a dead runner's, or
        // the one an admin replaces) serves this host no more.
        state.links.drop_link(&host.id);
    }
    tracing::info!(host = %host.id, name = %host.name, by = caller.actor(), replace, "host registered");
    Ok((
        StatusCode::CREATED,
        Json(RegisterHostResponse {
            host: host_to_wire(&state, host),
            host_token,
            heartbeat_interval_secs: HEARTBEAT_INTERVAL_SECS,
        }),
    ))
}

/// The host is still there (its own host token, or a person's).
#[utoipa::path(post, path = "/api/v1/hosts/{id}/heartbeat", tag = "hosts", operation_id = "host_heartbeat", params(("id" = String, Path)), responses(
    (status = 200, body = HostHeartbeatResponse),
    (status = 403, description = "not_your_host", body = ErrorBody),
    (status = 404, description = "host_not_found", body = ErrorBody)))]
pub async fn heartbeat(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Json<HostHeartbeatResponse>> {
    caller.require_host(&id)?;
    let host = state.store.host_seen(&id).await?;
    Ok(Json(HostHeartbeatResponse {
        host: host_to_wire(&state, host),
    }))
}

/// The most branches one prune request may name.
const MAX_PRUNE: usize = 10_000;

/// Have a runner's host delete branches worktree runs left there (what
/// `shepherd prune --branches-older-than` sends for each runner's host).
/// The host deletes only `shepherd/*` branches of repositories its own
/// agents name, whatever the list says; a host that is offline keeps them
/// all, each listed as kept with the reason.
#[utoipa::path(post, path = "/api/v1/hosts/{id}/prune_branches", tag = "hosts", operation_id = "prune_host_branches",
    params(("id" = String, Path)), request_body = PruneBranchesBody, responses(
    (status = 200, body = PruneBranchesReport),
    (status = 403, description = "operator_only: not for worker, run or host tokens", body = ErrorBody),
    (status = 404, description = "host_not_found", body = ErrorBody),
    (status = 409, description = "host_kind_conflict: a server node's branches are pruned on its own machine", body = ErrorBody),
    (status = 422, description = "invalid_body: more than 10000 branches", body = ErrorBody),
    (status = 503, description = "host_timeout, host_failed: the host has a link but did not answer (an offline host keeps its branches: 200, each kept with the reason)", body = ErrorBody)))]
pub async fn prune_branches(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<PruneBranchesBody>,
) -> ApiResult<Json<PruneBranchesReport>> {
    // The route table decides which people; no worker, run or host token.
    caller.require_operator()?;
    let host = state.store.host(&id).await?;
    if host.kind != shepherd_core::status::HostKind::Runner {
        return Err(Error::conflict(
            "host_kind_conflict",
            format!("host {id} is a server node: run `shepherd prune --branches-older-than` on its machine"),
        )
        .into());
    }
    if b.branches.len() > MAX_PRUNE {
        return Err(Error::invalid(
            "invalid_body",
            format!(
                "at most {MAX_PRUNE} branches at once (got {})",
                b.branches.len()
            ),
        )
        .into());
    }
    // Pruning is maintenance that the next run picks up again: a host that
    // is away keeps its branches for now, and the report says so.
    if !state.links.connected(&id) {
        let reason = format!("host {id} is offline: its branches are kept until the next prune");
        let kept = b
            .branches
            .into_iter()
            .map(|branch| KeptBranch {
                branch,
                reason: reason.clone(),
            })
            .collect();
        return Ok(Json(PruneBranchesReport {
            removed: Vec::new(),
            kept,
        }));
    }
    let ask = LinkRequest::PruneBranches {
        branches: b.branches,
    };
    match state.links.ask(&id, ask).await? {
        LinkReply::Pruned(report) => Ok(Json(report)),
        LinkReply::Failed {
            status,
            code,
            message,
        } => Err(crate::host_link::remote_error(&id, status, &code, message).into()),
        _ => Err(Error::unavailable(
            "host_failed",
            format!("host {id} answered something else than a prune"),
        )
        .into()),
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/hosts", get(list_hosts).post(register_host))
        .route("/api/v1/hosts/{id}/heartbeat", post(heartbeat))
        .route("/api/v1/hosts/{id}/prune_branches", post(prune_branches))
}
