//! People and their credentials: `/api/v1/users` (admins only, by the route
//! table), `/api/v1/tokens` (one's own; anyone's for admins) and
//! `/api/v1/me`.
//!
//! A personal token's secret is in the answer that makes it and nowhere
//! else: the store keeps its SHA-256. Workers and runs have their own
//! tokens and make none of these.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, patch};
use axum::{Extension, Json, Router};
use shepherd_core::role::Role;
use shepherd_core::time::{opt_rfc3339, parse_age, to_rfc3339};
use shepherd_core::Error;
use shepherd_protocol::{
    CreateToken, CreateUser, CreatedToken, ErrorBody, Me, TokenInfo, TokenList, UpdateUser, User,
    UserList,
};
use shepherd_store::{TokenRow, UserChange, UserRow};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult};
use crate::AppState;

/// The longest a token may live: a credential that outlives a year is one
/// nobody remembers to rotate.
const MAX_TOKEN_LIFETIME: std::time::Duration = std::time::Duration::from_secs(366 * 86400);

fn user_to_wire(u: UserRow) -> User {
    User {
        name: u.name,
        role: u.role,
        email: u.email,
        disabled: u.disabled,
        created_at: to_rfc3339(u.created_at),
    }
}

fn token_to_wire(t: TokenRow) -> TokenInfo {
    TokenInfo {
        id: t.id,
        name: t.name,
        user: t.user,
        created_at: to_rfc3339(t.created_at),
        expires_at: opt_rfc3339(t.expires_at),
        last_used_at: opt_rfc3339(t.last_used_at),
    }
}

/// The user a person's request acts as; worker and run tokens have none.
fn person(caller: &Caller) -> Result<&str, Error> {
    caller.user_name().ok_or_else(|| {
        Error::forbidden(
            "operator_only",
            "worker and run tokens have no user; use a person's token",
        )
    })
}

/// Refuses unless `caller` is `user` or an admin.
fn own_or_admin(caller: &Caller, user: &str) -> Result<(), Error> {
    let me = person(caller)?;
    if me == user || caller.role() == Some(Role::Admin) {
        return Ok(());
    }
    Err(Error::forbidden(
        "forbidden",
        format!(
            "another user's tokens need the admin role; {me} is a {}",
            caller.role().map_or("worker", Role::as_str)
        ),
    ))
}

/// Who this credential is.
#[utoipa::path(get, path = "/api/v1/me", tag = "users", operation_id = "whoami", responses(
    (status = 200, body = Me)))]
pub async fn me(
    Extension(caller): Extension<Caller>,
    session: Option<Extension<crate::auth::CookieSession>>,
) -> Json<Me> {
    let kind = match &caller {
        Caller::Operator | Caller::User { .. } => "user",
        Caller::Worker(_) => "worker",
        Caller::Run(_) => "run",
        Caller::Host(_) => "host",
    };
    let name = caller
        .user_name()
        .map(str::to_owned)
        .unwrap_or_else(|| caller.actor());
    Json(Me {
        name,
        role: caller.role(),
        kind: kind.into(),
        csrf_token: session.map(|Extension(s)| s.csrf_token),
    })
}

/// Add a user (admins only).
#[utoipa::path(post, path = "/api/v1/users", tag = "users", operation_id = "create_user", request_body = CreateUser, responses(
    (status = 201, body = User),
    (status = 409, description = "user_exists", body = ErrorBody),
    (status = 422, description = "invalid_user_name, invalid_email", body = ErrorBody)))]
pub async fn create_user(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateUser>,
) -> ApiResult<impl IntoResponse> {
    person(&caller)?;
    let user = state
        .store
        .create_user(&body.name, body.role, body.email)
        .await?;
    tracing::info!(user = %user.name, role = %user.role, by = caller.actor(), "user added");
    Ok((StatusCode::CREATED, Json(user_to_wire(user))))
}

/// Every user, by name (admins only).
#[utoipa::path(get, path = "/api/v1/users", tag = "users", operation_id = "list_users", responses(
    (status = 200, body = UserList)))]
pub async fn list_users(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<UserList>> {
    person(&caller)?;
    let users = state.store.users().await?;
    Ok(Json(UserList {
        users: users.into_iter().map(user_to_wire).collect(),
    }))
}

/// Change a user's role, or disable or enable them (admins only). A
/// disabled user's tokens answer 401.
#[utoipa::path(patch, path = "/api/v1/users/{name}", tag = "users", operation_id = "update_user", params(("name" = String, Path)), request_body = UpdateUser, responses(
    (status = 200, body = User),
    (status = 404, description = "user_not_found", body = ErrorBody),
    (status = 409, description = "builtin_user: the built-in admin stays an enabled admin", body = ErrorBody)))]
pub async fn update_user(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<UpdateUser>,
) -> ApiResult<Json<User>> {
    person(&caller)?;
    let user = state
        .store
        .update_user(
            &name,
            UserChange {
                role: body.role,
                disabled: body.disabled,
            },
        )
        .await?;
    tracing::info!(user = %user.name, role = %user.role, disabled = user.disabled, by = caller.actor(), "user changed");
    Ok(Json(user_to_wire(user)))
}

/// Make a personal access token: for oneself, or (admins) for `user`. The
/// secret is in this answer only.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "users", operation_id = "create_token", request_body = CreateToken, responses(
    (status = 201, body = CreatedToken),
    (status = 403, description = "forbidden: another user's token needs the admin role", body = ErrorBody),
    (status = 404, description = "user_not_found", body = ErrorBody),
    (status = 409, description = "user_disabled", body = ErrorBody),
    (status = 422, description = "invalid_token_name, invalid_expires_in", body = ErrorBody)))]
pub async fn create_token(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateToken>,
) -> ApiResult<impl IntoResponse> {
    let user = match &body.user {
        Some(u) => u.clone(),
        None => person(&caller)?.to_owned(),
    };
    own_or_admin(&caller, &user)?;
    let expires_at = match &body.expires_in {
        None => None,
        Some(text) => {
            let life = parse_age(text).map_err(|e| Error::invalid("invalid_expires_in", e))?;
            if life.is_zero() || life > MAX_TOKEN_LIFETIME {
                return Err(Error::invalid(
                    "invalid_expires_in",
                    format!("a token lives from 1 s to 366 d (got {text:?})"),
                )
                .into());
            }
            Some(shepherd_store::now_ms() + life.as_millis() as i64)
        }
    };
    let (token, secret) = state
        .store
        .create_token(&user, &body.name, expires_at)
        .await?;
    tracing::info!(token = %token.id, user = %token.user, by = caller.actor(), "token made");
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            id: token.id,
            token: secret,
            user: token.user,
            expires_at: opt_rfc3339(token.expires_at),
        }),
    ))
}

/// One's own tokens, oldest first; an admin sees everyone's. Never their
/// secrets; revoked ones are gone.
#[utoipa::path(get, path = "/api/v1/tokens", tag = "users", operation_id = "list_tokens", responses(
    (status = 200, body = TokenList)))]
pub async fn list_tokens(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<TokenList>> {
    let me = person(&caller)?;
    let whose = (caller.role() != Some(Role::Admin)).then(|| me.to_owned());
    let tokens = state.store.tokens(whose).await?;
    Ok(Json(TokenList {
        tokens: tokens.into_iter().map(token_to_wire).collect(),
    }))
}

/// Revoke a token: one's own, or (admins) anyone's. It answers 401 from now on.
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "users", operation_id = "revoke_token", params(("id" = String, Path)), responses(
    (status = 204, description = "revoked"),
    (status = 404, description = "token_not_found", body = ErrorBody)))]
pub async fn revoke_token(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let token = state.store.token(&id).await?;
    // Someone else's token is "not found" to a non-admin: its id tells nothing.
    if own_or_admin(&caller, &token.user).is_err() {
        person(&caller)?;
        return Err(Error::not_found("token_not_found", format!("no token {id:?}")).into());
    }
    let token = state.store.revoke_token(&id).await?;
    tracing::info!(token = %token.id, user = %token.user, by = caller.actor(), "token revoked");
    Ok(StatusCode::NO_CONTENT)
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/me", get(me))
        .route("/api/v1/users", get(list_users).post(create_user))
        .route("/api/v1/users/{name}", patch(update_user))
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}", axum::routing::delete(revoke_token))
}
