//! Signing in to the web UI through the OpenID provider (`[oidc]`), and the
//! browser's session that follows.
//!
//! - `GET /auth/login` keeps a new login (state, nonce, PKCE verifier) in
//!   the store and sends the browser to the provider, with a short-lived
//!   `shepherd_login` cookie holding the state: the callback accepts a state
//!   only from the browser that began it, so nobody can sign a victim in to
//!   the attacker's account by sending them a callback link.
//! - `GET /auth/callback` takes the login (once), has the code exchanged and
//!   the ID token verified (`oidc`), maps the provider's groups to a role,
//!   and opens a session: an opaque random cookie, kept by its hash, with an
//!   idle and an absolute lifetime and a CSRF token.
//! - `POST /auth/logout` ends the session.
//!
//! The cookie is `HttpOnly` (no script reads it), `SameSite=Lax` (other
//! sites' pages cannot send it with their requests, top-level navigation
//! apart) and `Secure` when the server is reached over HTTPS.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde::Deserialize;
use shepherd_core::Error;
use shepherd_protocol::{ErrorBody, LoginOptions};
use shepherd_store::{LoginAttempt, SessionLifetimes, SignIn, UserRow, WebSession};

use crate::auth::{unauthorized, Caller, CookieSession};
use crate::error::{ApiError, ApiResult};
use crate::oidc::Provider;
use crate::AppState;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "shepherd_session";
/// The cookie binding a login under way to the browser that began it.
pub const LOGIN_COOKIE: &str = "shepherd_login";

/// How often a session's use is written at most: often enough that the
/// idle lifetime is kept to within a quarter of itself.
fn touch_granularity(idle: Duration) -> i64 {
    (idle.as_millis() as i64 / 4).clamp(1, 60_000)
}

fn provider(state: &AppState) -> Result<&Arc<Provider>, Error> {
    state.oidc.as_ref().ok_or_else(|| {
        Error::not_found(
            "oidc_not_configured",
            "this server has no [oidc] table: sign in with a token",
        )
    })
}

fn secure(provider: &Provider) -> bool {
    provider.settings().redirect_url.starts_with("https://")
}

/// The session cookie a request carries, when single sign-on is on (a
/// server without `[oidc]` has no sessions, and ignores the cookie).
pub fn session_cookie(state: &AppState, headers: &HeaderMap) -> Option<String> {
    state.oidc.as_ref()?;
    CookieJar::from_headers(headers)
        .get(SESSION_COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|v| !v.is_empty())
}

/// Whether a session may no longer be used: ended, idle too long, past its
/// absolute lifetime, or its user disabled. A request and an open
/// connection's later checks (`revocation`) apply this one rule.
pub(crate) fn session_refused(
    session: &WebSession,
    user: &UserRow,
    now: i64,
    idle: Duration,
) -> bool {
    session.ended_at.is_some() || now >= session_lasts_until(session, idle) || user.disabled
}

/// When a session ends unless it is used again first: the earlier of its
/// idle and absolute lifetimes.
pub(crate) fn session_lasts_until(session: &WebSession, idle: Duration) -> i64 {
    session
        .expires_at
        .min(session.last_seen_at + idle.as_millis() as i64)
}

/// The person a session cookie signs in, or the 401 it gets: unknown (or
/// altered), ended, idle too long, past its absolute lifetime, or its user
/// disabled, each the same 401.
pub async fn session_caller(
    state: &AppState,
    cookie: &str,
) -> Result<(Caller, CookieSession), ApiError> {
    let refused = || unauthorized("your session has ended or is not valid; sign in again");
    let provider = provider(state).map_err(|_| refused())?;
    let Some((session, user)) = state.store.web_session(cookie).await? else {
        return Err(refused());
    };
    let now = state.store.now();
    let idle = provider.settings().session_idle;
    if session_refused(&session, &user, now, idle) {
        return Err(refused());
    }
    let granularity = touch_granularity(idle);
    if now - session.last_seen_at >= granularity {
        // A failed bookkeeping write must not refuse a good session.
        if let Err(e) = state.store.touch_web_session(cookie, granularity).await {
            tracing::warn!(user = %user.name, error = %e, "could not record the session's use");
        }
    }
    Ok((
        Caller::User {
            name: user.name,
            role: user.role,
        },
        CookieSession {
            csrf_token: session.csrf_token,
        },
    ))
}

/// How a browser may sign in here.
#[utoipa::path(get, path = "/auth/options", tag = "users", operation_id = "login_options",
    responses((status = 200, body = LoginOptions)))]
pub async fn options(State(state): State<AppState>) -> Json<LoginOptions> {
    Json(LoginOptions {
        oidc: state.oidc.is_some(),
    })
}

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    return_to: Option<String>,
}

/// Only a path on this server: a login must not end on another site.
fn safe_return_to(r: Option<&str>) -> String {
    match r {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains('\\')
                && !p.chars().any(char::is_control) =>
        {
            p.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// Sends the browser to the provider to sign in.
pub async fn login(
    State(state): State<AppState>,
    Query(q): Query<LoginQuery>,
) -> ApiResult<Response> {
    let provider = provider(&state)?;
    let auth = provider.authorize().await?;
    state
        .store
        .begin_login(
            &auth.state,
            LoginAttempt {
                nonce: auth.nonce,
                pkce_verifier: auth.pkce_verifier,
                return_to: safe_return_to(q.return_to.as_deref()),
            },
        )
        .await?;
    let binding = Cookie::build((LOGIN_COOKIE, auth.state))
        .path("/auth")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure(provider))
        .max_age(time_of(Duration::from_millis(
            shepherd_store::LOGIN_ATTEMPT_TTL_MS as u64,
        )))
        .build();
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, auth.url),
            (header::SET_COOKIE, binding.to_string()),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
    )
        .into_response())
}

fn time_of(d: Duration) -> cookie::time::Duration {
    cookie::time::Duration::seconds(d.as_secs() as i64)
}

#[derive(Debug, Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// A page a person reads in the browser the provider sent back: what went
/// wrong, its stable code, and a way to try again.
fn failure_page(e: &Error) -> Response {
    let status = crate::error::status_of(e.kind);
    // What went wrong inside the server stays in its log.
    let message = if e.kind == shepherd_core::ErrorKind::Internal {
        "something went wrong on the server; its log says what".to_owned()
    } else {
        e.message.clone()
    };
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Sign-in failed · Shepherd</title></head><body>\
         <main><h1>Sign-in failed</h1><p id=\"message\">{}</p>\
         <p>Code: <code id=\"code\">{}</code></p>\
         <p><a href=\"/\">Back to Shepherd</a> to try again.</p></main></body></html>",
        escape(&message),
        e.code
    );
    let clear = Cookie::build((LOGIN_COOKIE, ""))
        .path("/auth")
        .max_age(time_of(Duration::ZERO))
        .build();
    let mut res = (
        status,
        [
            (header::SET_COOKIE, clear.to_string()),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        Html(body),
    )
        .into_response();
    res.extensions_mut().insert(crate::reject::PageForPeople);
    res
}

/// Where the provider sends the browser back: finishes the login.
pub async fn callback(
    State(state): State<AppState>,
    jar: CookieJar,
    Query(q): Query<CallbackQuery>,
) -> Response {
    match finish(&state, &jar, q).await {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(code = e.code, message = %e.message, "a sign-in failed");
            failure_page(&e)
        }
    }
}

async fn finish(state: &AppState, jar: &CookieJar, q: CallbackQuery) -> Result<Response, Error> {
    let provider = provider(state)?;
    let mismatch = || {
        Error::bad_request(
            "login_state_mismatch",
            "this sign-in was not started in this browser, was used already, or took too long; \
             start again",
        )
    };
    let state_param = q.state.ok_or_else(mismatch)?;
    let bound = jar.get(LOGIN_COOKIE).map(|c| c.value().to_owned());
    if !bound.is_some_and(|b| shepherd_core::token::tokens_equal(&b, &state_param)) {
        return Err(mismatch());
    }
    // Taken before anything else: a state is good for one try.
    let attempt = state
        .store
        .take_login(&state_param)
        .await?
        .ok_or_else(mismatch)?;
    if let Some(error) = q.error {
        let detail = q.error_description.unwrap_or_default();
        return Err(Error::bad_request(
            "provider_error",
            format!("the sign-in provider answered {error}: {detail}"),
        ));
    }
    let code = q
        .code
        .ok_or_else(|| Error::bad_request("login_failed", "the provider sent no code"))?;
    let identity = provider
        .finish(&code, &attempt.nonce, &attempt.pkce_verifier)
        .await?;
    let role = provider.role_of(&identity)?;
    let name = crate::oidc::user_name_of(&identity).ok_or_else(|| {
        Error::forbidden(
            "login_not_allowed",
            "the provider gave this account neither a preferred_username nor an email that \
             makes a user name (lowercase letters, digits, - _ .)",
        )
    })?;
    let s = provider.settings();
    let session = state
        .store
        .sign_in(
            SignIn {
                subject: identity.subject,
                name,
                email: identity.email.filter(|_| identity.email_verified),
                role,
            },
            SessionLifetimes {
                idle_ms: s.session_idle.as_millis() as i64,
                max_ms: s.session_max.as_millis() as i64,
            },
        )
        .await?;
    tracing::info!(user = %session.user.name, role = %session.user.role, "signed in");
    let cookie = Cookie::build((SESSION_COOKIE, session.cookie))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure(provider))
        .max_age(time_of(s.session_max))
        .build();
    let clear = Cookie::build((LOGIN_COOKIE, ""))
        .path("/auth")
        .max_age(time_of(Duration::ZERO))
        .build();
    let mut res = (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, attempt.return_to),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
    )
        .into_response();
    for c in [cookie, clear] {
        if let Ok(v) = c.to_string().parse() {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    Ok(res)
}

/// Ends this browser's session.
#[utoipa::path(post, path = "/auth/logout", tag = "users", operation_id = "logout", responses(
    (status = 204, description = "signed out (also when no session was open)"),
    (status = 403, description = "csrf_token_invalid", body = ErrorBody)))]
pub async fn logout(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    if let Some(cookie) = session_cookie(&state, &headers) {
        // The same CSRF rule as every change a cookie authenticates: another
        // site's page must not sign people out either.
        if let Ok((_, session)) = session_caller(&state, &cookie).await {
            let sent = headers
                .get(crate::auth::CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !shepherd_core::token::tokens_equal(sent, &session.csrf_token) {
                return Err(Error::forbidden(
                    "csrf_token_invalid",
                    "signing out by the session cookie needs the X-CSRF-Token header",
                )
                .into());
            }
            if let Some(name) = state.store.end_web_session(&cookie).await? {
                tracing::info!(user = %name, "signed out");
            }
        }
    }
    let secure = state.oidc.as_deref().is_some_and(secure);
    let clear = Cookie::build((SESSION_COOKIE, ""))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure)
        .max_age(time_of(Duration::ZERO))
        .build();
    Ok((
        StatusCode::NO_CONTENT,
        [(header::SET_COOKIE, clear.to_string())],
    )
        .into_response())
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/auth/options", get(options))
        .route("/auth/login", get(login))
        .route("/auth/callback", get(callback))
        .route("/auth/logout", post(logout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_returns_only_to_a_path_of_this_server() {
        assert_eq!(safe_return_to(Some("/tasks?x=1")), "/tasks?x=1");
        for bad in [
            "https://evil.test/",
            "//evil.test/",
            "/\\evil.test",
            "tasks",
            "/a\nb",
            "",
        ] {
            assert_eq!(safe_return_to(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(safe_return_to(None), "/");
    }

    #[test]
    fn sessions_are_touched_often_enough_for_their_idle_lifetime() {
        assert_eq!(touch_granularity(Duration::from_secs(12 * 3600)), 60_000);
        assert_eq!(touch_granularity(Duration::from_secs(2)), 500);
    }
}
