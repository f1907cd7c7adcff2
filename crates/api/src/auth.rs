//! Who is calling: the operator, a worker, or (on loopback without a
//! configured token) an anonymous local user with operator rights.
//!
//! Two kinds of bearer token exist (PRODUCT.md decision 9). The operator
//! token may do everything. A worker token, returned by registration, lets
//! its holder act only as that worker. A person may also hold a personal
//! token, or, in a browser signed in through the OpenID provider, the
//! session cookie (`login`): a bearer token, when sent, wins over the
//! cookie, and a request the cookie authenticates that changes anything must
//! carry the session's CSRF token, since a browser attaches the cookie to
//! requests other sites' pages make too.

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, SEC_WEBSOCKET_PROTOCOL};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use shepherd_core::role::Role;
use shepherd_core::{Error, ErrorKind};

use crate::error::ApiError;
use crate::revocation::{Credential, Secret};
use crate::AppState;

/// The authenticated caller, available to handlers as an extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The bootstrap credential (`SHEPHERD_TOKEN`, or no token on loopback
    /// when none is configured): the built-in user `admin`.
    Operator,
    /// A person, by a personal access token. What their role allows is
    /// decided once, by the route table in [`crate::roles`].
    User {
        name: String,
        role: Role,
    },
    Worker(String),
    /// A run token (`SHEPHERD_RUN_TOKEN`): an agent acting for its own run.
    /// It reaches only the routes [`run_token_may`] lists.
    Run(String),
    /// A host token, given to a runner when it registers its host: it
    /// reaches only the routes [`host_token_may`] lists, for its own host.
    Host(String),
}

impl Caller {
    /// Refuses unless the caller is a person (the bootstrap credential or a
    /// user): the route is not for worker or run tokens. Which people may
    /// call it the route table has already decided.
    pub fn require_operator(&self) -> Result<(), Error> {
        match self {
            Caller::Operator | Caller::User { .. } => Ok(()),
            Caller::Worker(_) | Caller::Run(_) | Caller::Host(_) => Err(Error::forbidden(
                "operator_only",
                "this action needs the operator token",
            )),
        }
    }

    /// Whether the caller is a person rather than a worker or a run.
    pub fn is_person(&self) -> bool {
        matches!(self, Caller::Operator | Caller::User { .. })
    }

    /// A person's role: the bootstrap credential is an admin.
    pub fn role(&self) -> Option<Role> {
        match self {
            Caller::Operator => Some(Role::Admin),
            Caller::User { role, .. } => Some(*role),
            Caller::Worker(_) | Caller::Run(_) | Caller::Host(_) => None,
        }
    }

    /// The user a person's credential belongs to.
    pub fn user_name(&self) -> Option<&str> {
        match self {
            Caller::Operator => Some(shepherd_store::BUILTIN_ADMIN),
            Caller::User { name, .. } => Some(name),
            Caller::Worker(_) | Caller::Run(_) | Caller::Host(_) => None,
        }
    }

    /// Refuses unless the caller is a person or the named host itself.
    pub fn require_host(&self, host_id: &str) -> Result<(), Error> {
        match self {
            Caller::Operator | Caller::User { .. } => Ok(()),
            Caller::Host(h) if h == host_id => Ok(()),
            Caller::Host(h) => Err(Error::forbidden(
                "not_your_host",
                format!("this token belongs to host {h:?}, not {host_id:?}"),
            )),
            Caller::Worker(_) | Caller::Run(_) => Err(Error::forbidden(
                "not_your_host",
                "worker and run tokens act for no host",
            )),
        }
    }

    /// Refuses unless the caller is the operator or the named worker itself.
    pub fn require_worker(&self, worker_id: &str) -> Result<(), Error> {
        match self {
            Caller::Operator | Caller::User { .. } => Ok(()),
            Caller::Worker(w) if w == worker_id => Ok(()),
            Caller::Worker(w) => Err(Error::forbidden(
                "not_your_worker",
                format!("this token belongs to worker {w:?}, not {worker_id:?}"),
            )),
            Caller::Run(r) => Err(Error::forbidden(
                "not_your_worker",
                format!("this token belongs to run {r:?}, not to a worker"),
            )),
            Caller::Host(h) => Err(Error::forbidden(
                "not_your_worker",
                format!("this token belongs to host {h:?}, not to a worker"),
            )),
        }
    }

    /// The caller as the audit trail names it: the `actor` of the events
    /// its requests write, and who answered an input request
    /// (`answered_by`).
    pub fn actor(&self) -> String {
        match self {
            Caller::Operator => shepherd_store::BUILTIN_ADMIN.into(),
            Caller::User { name, .. } => name.clone(),
            Caller::Worker(w) => format!("worker:{w}"),
            Caller::Run(r) => format!("run:{r}"),
            Caller::Host(h) => format!("host:{h}"),
        }
    }
}

/// The routes a run token reaches: asking for input, reading its requests,
/// and reading its own run (each handler checks that it is its own).
pub fn run_token_may(method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').collect();
    matches!(
        (method, segments.as_slice()),
        (&Method::POST, ["input-requests"])
            | (&Method::GET, ["input-requests"])
            | (&Method::GET, ["input-requests", _])
            | (&Method::GET, ["runs", _])
            | (&Method::GET, ["runs", _, "steps"])
    )
}

/// The routes a host token reaches: saying its host is still there, and
/// opening its link (each handler checks that it is its own host).
pub fn host_token_may(method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').collect();
    matches!(
        (method, segments.as_slice()),
        (&Method::POST, ["hosts", _, "heartbeat"]) | (&Method::GET, ["hosts", _, "link"])
    )
}

pub(crate) fn unauthorized(message: &str) -> ApiError {
    Error::new(ErrorKind::Unauthorized, "unauthorized", message).into()
}

/// The subprotocol a browser's WebSocket offers beside `bearer.<token>`; the
/// server selects it, never the one that carries the token.
pub const WS_SUBPROTOCOL: &str = "shepherd.v1";

/// The token a browser's WebSocket carries as the subprotocol
/// `bearer.<token>` (browsers cannot set headers on a WebSocket, and a token
/// never goes in a URL, where logs and history would keep it).
pub fn subprotocol_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix("bearer.").map(str::to_owned))
}

/// A request authenticated by a browser's session cookie: what the CSRF
/// check and `GET /api/v1/me` need of it.
#[derive(Debug, Clone)]
pub struct CookieSession {
    pub csrf_token: String,
}

/// The header a cookie-authenticated request that changes something
/// carries its session's CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Who sent a request with these headers, or the 401 it gets.
pub async fn identify(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    identify_with_session(state, headers).await.map(|(c, _)| c)
}

/// [`identify`], saying too whether the session cookie was the credential.
pub async fn identify_with_session(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(Caller, Option<CookieSession>), ApiError> {
    identify_credential(state, headers)
        .await
        .map(|(caller, session, _)| (caller, session))
}

/// [`identify_with_session`], and the person's secret when it is one that
/// can stop working while a connection it opened lasts (a personal token,
/// a session cookie): see [`crate::revocation`].
async fn identify_credential(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<(Caller, Option<CookieSession>, Option<Secret>), ApiError> {
    let header = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let token = match header {
        None => subprotocol_token(headers),
        Some(h) => match h
            .strip_prefix("Bearer ")
            .or_else(|| h.strip_prefix("bearer "))
        {
            Some(t) => Some(t.trim().to_owned()),
            None => {
                return Err(unauthorized(
                    "the Authorization header must be `Bearer <token>`",
                ))
            }
        },
    };
    if token.is_none() {
        if let Some(cookie) = crate::login::session_cookie(state, headers) {
            let (caller, session) = crate::login::session_caller(state, &cookie).await?;
            return Ok((caller, Some(session), Some(Secret::Session(cookie))));
        }
    }
    let mut secret = None;
    let caller = match (token, &state.settings.auth_token) {
        // A server with single sign-on has people to tell apart: nobody is
        // the operator by default there, token or no token.
        (None, None) if state.oidc.is_none() => {
            if is_webhook_delivery(headers) {
                return Err(Error::forbidden(
                    "webhook_request_refused",
                    "this looks like a webhook delivery (Standard Webhooks headers or the \
                     Shepherd-Webhooks user agent); a server without a token does not take \
                     it for the operator",
                )
                .into());
            }
            Caller::Operator
        }
        (None, None) => return Err(unauthorized("sign in first (/auth/login) or send a token")),
        (None, Some(_)) => {
            return Err(unauthorized(
                "this server needs `Authorization: Bearer <token>`",
            ))
        }
        (Some(t), Some(op)) if shepherd_core::token::tokens_equal(&t, op) => Caller::Operator,
        (Some(t), _) if t.starts_with(shepherd_core::token::PERSONAL_TOKEN_PREFIX) => {
            let caller = personal(state, &t).await?;
            secret = Some(Secret::Personal(t));
            caller
        }
        (Some(t), _) if t.starts_with(shepherd_core::token::RUN_TOKEN_PREFIX) => {
            match shepherd_core::token::verify_run_token(state.run_key().await?, &t) {
                Some(run_id) => Caller::Run(run_id),
                None => return Err(unauthorized("unknown or revoked token")),
            }
        }
        (Some(t), _) if t.starts_with(shepherd_store::HOST_TOKEN_PREFIX) => {
            match state.store.host_for_token(&t).await? {
                Some(host_id) => Caller::Host(host_id),
                None => return Err(unauthorized("unknown or revoked token")),
            }
        }
        (Some(t), _) => match state.store.worker_for_token(&t).await? {
            Some(worker_id) => Caller::Worker(worker_id),
            None => return Err(unauthorized("unknown or revoked token")),
        },
    };
    Ok((caller, None, secret))
}

/// Whether a request looks like a webhook delivery: it carries one of the
/// Standard Webhooks headers every delivery carries, or Shepherd's delivery
/// User-Agent.
///
/// A server without a token takes any request from loopback for the
/// operator, and a webhook aimed at the server's own routes (by an
/// operator, or by anyone who can subscribe one) would then act as the
/// operator with whatever the log puts in its body. A delivery always
/// carries these headers and never a token, and no client of the API sends
/// them, so refusing on them is simple and cannot be dodged by the URL (a
/// name that resolves to the server, another port, a proxy on the way).
/// The address rule of deliveries (no loopback without `allow_private`)
/// keeps them away too; this holds even when an admin allowed loopback.
pub fn is_webhook_delivery(headers: &HeaderMap) -> bool {
    ["webhook-id", "webhook-signature", "webhook-timestamp"]
        .iter()
        .any(|h| headers.contains_key(*h))
        || headers
            .get(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ua| ua.starts_with("Shepherd-Webhooks/"))
}

/// Refuses a cookie-authenticated request that changes something without
/// its session's CSRF token.
fn check_csrf(session: Option<&CookieSession>, req: &Request) -> Result<(), ApiError> {
    let Some(session) = session else {
        return Ok(());
    };
    use axum::http::Method;
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let sent = req
        .headers()
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if shepherd_core::token::tokens_equal(sent, &session.csrf_token) {
        Ok(())
    } else {
        Err(Error::forbidden(
            "csrf_token_invalid",
            "a request signed in by the session cookie that changes something needs the \
             X-CSRF-Token header (its value is csrf_token in GET /api/v1/me)",
        )
        .into())
    }
}

/// The user a personal token belongs to, if it may still be used: not
/// revoked, not expired, its user not disabled. Each refusal is the same 401,
/// so a stolen token's holder learns nothing from it.
async fn personal(state: &AppState, secret: &str) -> Result<Caller, ApiError> {
    let refused = || unauthorized("unknown, revoked or expired token");
    let Some((token, user)) = state.store.token_by_secret(secret).await? else {
        return Err(refused());
    };
    let now = shepherd_store::now_ms();
    if personal_refused(&token, &user, now) {
        return Err(refused());
    }
    if token
        .last_used_at
        .is_none_or(|at| at < now - shepherd_store::LAST_USED_GRANULARITY_MS)
    {
        // A failed bookkeeping write must not refuse a good token.
        if let Err(e) = state.store.touch_token(&token.id).await {
            tracing::warn!(token = token.id, error = %e, "could not record the token's use");
        }
    }
    Ok(Caller::User {
        name: user.name,
        role: user.role,
    })
}

/// Whether a personal token may no longer be used: revoked, expired, or
/// its user disabled. A request and an open connection's later checks
/// (`revocation`) apply this one rule.
pub(crate) fn personal_refused(
    token: &shepherd_store::TokenRow,
    user: &shepherd_store::UserRow,
    now: i64,
) -> bool {
    token.revoked_at.is_some() || token.expires_at.is_some_and(|at| at <= now) || user.disabled
}

/// The request's route as the role table names it.
fn routed(req: &Request) -> String {
    req.extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| req.uri().path().to_owned())
}

/// The least role the request's route needs (`None`: no role may call it).
fn needed_role(req: &Request) -> Option<Role> {
    crate::roles::least_role(req.method(), &routed(req))
}

/// Refuses a user whose role is below what the route needs.
fn check_role(caller: &Caller, req: &Request) -> Result<(), ApiError> {
    let Caller::User { name, role } = caller else {
        return Ok(());
    };
    let routed = routed(req);
    match crate::roles::least_role(req.method(), &routed) {
        Some(needed) if *role >= needed => Ok(()),
        Some(needed) => Err(Error::forbidden(
            "forbidden",
            format!("this needs the {needed} role; {name} is a {role}"),
        )
        .into()),
        None => Err(Error::forbidden(
            "forbidden",
            format!("no role may call {} {routed}", req.method()),
        )
        .into()),
    }
}

pub async fn authenticate(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (caller, session, secret) = identify_credential(&state, req.headers()).await?;
    check_csrf(session.as_ref(), &req)?;
    if matches!(caller, Caller::Run(_)) && !run_token_may(req.method(), req.uri().path()) {
        return Err(Error::forbidden(
            "forbidden",
            "a run token may only ask for input and read its own run and requests",
        )
        .into());
    }
    if matches!(caller, Caller::Host(_)) && !host_token_may(req.method(), req.uri().path()) {
        return Err(
            Error::forbidden("forbidden", "a host token may only serve its own host").into(),
        );
    }
    check_role(&caller, &req)?;
    if let (Some(secret), Caller::User { .. }) = (secret, &caller) {
        let needs = needed_role(&req);
        req.extensions_mut().insert(Credential { secret, needs });
    }
    let actor = caller.actor();
    req.extensions_mut().insert(caller);
    if let Some(session) = session {
        req.extensions_mut().insert(session);
    }
    Ok(shepherd_store::actor::acting_as(actor, next.run(req)).await)
}
