//! Users and their personal access tokens. Every change appends its event
//! (`user.created`, `user.updated`, `token.created`, `token.revoked`) in
//! the same unit of work. A token's secret is made here, returned once and
//! kept only as its SHA-256; what a lookup finds is judged by the caller
//! (revoked, expired, disabled), so the rule lives in one place, the API's
//! authentication.

use shepherd_core::event::payloads::{TokenChanged, UserChanged};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::role::Role;
use shepherd_core::time::Millis;
use shepherd_core::token::PERSONAL_TOKEN_PREFIX;
use shepherd_core::Error;

use super::{emit, hash_token, random_hex};
use crate::params;
use crate::sql::{Db, Row};

/// The built-in user the bootstrap token (`SHEPHERD_TOKEN`) acts as.
pub const BUILTIN_ADMIN: &str = "admin";

/// A user as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct UserRow {
    pub name: String,
    pub role: Role,
    pub email: Option<String>,
    pub disabled: bool,
    pub created_at: Millis,
}

/// A personal access token as stored (never its secret).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub user: String,
    pub created_at: Millis,
    pub expires_at: Option<Millis>,
    pub last_used_at: Option<Millis>,
    pub revoked_at: Option<Millis>,
}

/// A change to a user: each field, when given, replaces the stored one.
#[derive(Debug, Clone, Default)]
pub struct UserChange {
    pub role: Option<Role>,
    pub disabled: Option<bool>,
}

const USER_COLUMNS: &str = "name, role, email, disabled, created_at";
const TOKEN_COLUMNS: &str = "id, name, user_name, created_at, expires_at, last_used_at, revoked_at";

/// How old a token's `last_used_at` may grow before a use writes it again.
pub const LAST_USED_GRANULARITY_MS: Millis = 60_000;

fn user_from_row(r: &Row) -> Result<UserRow, Error> {
    let role = r.string(1)?;
    Ok(UserRow {
        name: r.string(0)?,
        role: Role::parse(&role)
            .ok_or_else(|| Error::internal(format!("unknown role {role:?} in users")))?,
        email: r.opt_string(2)?,
        disabled: r.bool(3)?,
        created_at: r.i64(4)?,
    })
}

fn token_from_row(r: &Row) -> Result<TokenRow, Error> {
    Ok(TokenRow {
        id: r.string(0)?,
        name: r.string(1)?,
        user: r.string(2)?,
        created_at: r.i64(3)?,
        expires_at: r.opt_i64(4)?,
        last_used_at: r.opt_i64(5)?,
        revoked_at: r.opt_i64(6)?,
    })
}

fn user_not_found(name: &str) -> Error {
    Error::not_found("user_not_found", format!("no user {name:?}"))
}

/// A user name appears in URLs, logs and the events' actors: 1-64 of
/// lowercase letters, digits and `- _ .`, starting with a letter or digit.
pub(crate) fn validate_name(name: &str) -> Result<(), Error> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    if shepherd_core::actor_names::reserved(name) {
        // The audit trail names the server's own changes and answers with
        // these; a person of such a name would be indistinguishable.
        return Err(Error::invalid(
            "reserved_user_name",
            format!(
                "the name {name:?} is reserved: the audit trail uses it for the server's own \
                 changes and answers (reserved: {}, and any name with a colon)",
                shepherd_core::actor_names::RESERVED.join(", ")
            ),
        ));
    }
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "invalid_user_name",
            format!(
                "a user name is 1-64 lowercase letters, digits and - _ . starting with a letter or digit (got {name:?})"
            ),
        ))
    }
}

fn validate_email(email: &str) -> Result<(), Error> {
    let ok = email.len() <= 254
        && email
            .split_once('@')
            .is_some_and(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains('@'))
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "invalid_email",
            format!("{email:?} is not an email address"),
        ))
    }
}

pub(crate) fn user_event(k: &'static str, u: &UserRow) -> NewEvent {
    NewEvent::typed(
        k,
        EventRefs::default(),
        &UserChanged {
            name: u.name.clone(),
            role: u.role,
            disabled: u.disabled,
        },
    )
}

fn token_event(k: &'static str, t: &TokenRow) -> NewEvent {
    NewEvent::typed(
        k,
        EventRefs::default(),
        &TokenChanged {
            id: t.id.clone(),
            name: t.name.clone(),
            user: t.user.clone(),
            expires_at: t.expires_at.map(shepherd_core::time::to_rfc3339),
        },
    )
}

pub async fn get_user<D: Db>(db: &mut D, name: &str) -> Result<UserRow, Error> {
    find_user(db, name)
        .await?
        .ok_or_else(|| user_not_found(name))
}

async fn find_user<D: Db>(db: &mut D, name: &str) -> Result<Option<UserRow>, Error> {
    db.query_opt(
        &format!("SELECT {USER_COLUMNS} FROM users WHERE name = $1"),
        params![name],
    )
    .await?
    .map(|r| user_from_row(&r))
    .transpose()
}

/// Every user, by name.
pub async fn list_users<D: Db>(db: &mut D) -> Result<Vec<UserRow>, Error> {
    db.query(
        &format!("SELECT {USER_COLUMNS} FROM users ORDER BY name"),
        params![],
    )
    .await?
    .iter()
    .map(user_from_row)
    .collect()
}

pub async fn create_user<D: Db>(
    db: &mut D,
    now: Millis,
    name: &str,
    role: Role,
    email: Option<&str>,
) -> Result<UserRow, Error> {
    validate_name(name)?;
    if let Some(e) = email {
        validate_email(e)?;
    }
    if find_user(db, name).await?.is_some() {
        return Err(Error::conflict(
            "user_exists",
            format!("a user {name:?} exists already"),
        ));
    }
    db.execute(
        "INSERT INTO users (name, role, email, disabled, created_at, updated_at) \
         VALUES ($1, $2, $3, 0, $4, $4)",
        params![name, role.as_str(), email, now],
    )
    .await?;
    let user = get_user(db, name).await?;
    emit(db, now, user_event(kind::USER_CREATED, &user));
    Ok(user)
}

/// Changes a user's role or disables them. The built-in admin keeps its
/// role and cannot be disabled: the bootstrap token must keep working.
pub async fn update_user<D: Db>(
    db: &mut D,
    now: Millis,
    name: &str,
    change: UserChange,
) -> Result<UserRow, Error> {
    let before = get_user(db, name).await?;
    let role = change.role.unwrap_or(before.role);
    let disabled = change.disabled.unwrap_or(before.disabled);
    if name == BUILTIN_ADMIN && (role != Role::Admin || disabled) {
        return Err(Error::conflict(
            "builtin_user",
            "the built-in admin (the bootstrap token's user) stays an enabled admin",
        ));
    }
    if role == before.role && disabled == before.disabled {
        return Ok(before);
    }
    db.execute(
        "UPDATE users SET role = $2, disabled = $3, updated_at = $4 WHERE name = $1",
        params![name, role.as_str(), i64::from(disabled), now],
    )
    .await?;
    let user = get_user(db, name).await?;
    emit(db, now, user_event(kind::USER_UPDATED, &user));
    Ok(user)
}

/// Makes a token for `user`; returns it with its secret, which is not kept.
pub async fn create_token<D: Db>(
    db: &mut D,
    now: Millis,
    user: &str,
    name: &str,
    expires_at: Option<Millis>,
) -> Result<(TokenRow, String), Error> {
    if name.trim().is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "invalid_token_name",
            "a token's name is 1-100 printable characters",
        ));
    }
    let owner = get_user(db, user).await?;
    if owner.disabled {
        return Err(Error::conflict(
            "user_disabled",
            format!("user {user:?} is disabled"),
        ));
    }
    let id = format!("tok_{}", random_hex(8));
    let secret = format!("{PERSONAL_TOKEN_PREFIX}{}", random_hex(24));
    db.execute(
        "INSERT INTO access_tokens (id, name, user_name, token_hash, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        params![
            id.as_str(),
            name,
            user,
            hash_token(&secret),
            now,
            expires_at
        ],
    )
    .await?;
    let token = get_token(db, &id).await?;
    emit(db, now, token_event(kind::TOKEN_CREATED, &token));
    Ok((token, secret))
}

pub async fn get_token<D: Db>(db: &mut D, id: &str) -> Result<TokenRow, Error> {
    db.query_opt(
        &format!("SELECT {TOKEN_COLUMNS} FROM access_tokens WHERE id = $1 AND revoked_at IS NULL"),
        params![id],
    )
    .await?
    .map(|r| token_from_row(&r))
    .transpose()?
    .ok_or_else(|| Error::not_found("token_not_found", format!("no token {id:?}")))
}

/// Tokens not revoked, oldest first: one user's, or everyone's.
pub async fn list_tokens<D: Db>(db: &mut D, user: Option<&str>) -> Result<Vec<TokenRow>, Error> {
    let rows = match user {
        Some(u) => {
            db.query(
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM access_tokens \
                     WHERE user_name = $1 AND revoked_at IS NULL ORDER BY created_at, id"
                ),
                params![u],
            )
            .await?
        }
        None => {
            db.query(
                &format!(
                    "SELECT {TOKEN_COLUMNS} FROM access_tokens \
                     WHERE revoked_at IS NULL ORDER BY created_at, id"
                ),
                params![],
            )
            .await?
        }
    };
    rows.iter().map(token_from_row).collect()
}

/// Revokes a token: from now on it answers 401.
pub async fn revoke_token<D: Db>(db: &mut D, now: Millis, id: &str) -> Result<TokenRow, Error> {
    let token = get_token(db, id).await?;
    db.execute(
        "UPDATE access_tokens SET revoked_at = $2 WHERE id = $1",
        params![id, now],
    )
    .await?;
    emit(db, now, token_event(kind::TOKEN_REVOKED, &token));
    Ok(token)
}

/// The token a presented secret is, revoked ones included, with its user.
pub async fn token_by_secret<D: Db>(
    db: &mut D,
    secret: &str,
) -> Result<Option<(TokenRow, UserRow)>, Error> {
    let Some(row) = db
        .query_opt(
            &format!("SELECT {TOKEN_COLUMNS} FROM access_tokens WHERE token_hash = $1"),
            params![hash_token(secret)],
        )
        .await?
    else {
        return Ok(None);
    };
    let token = token_from_row(&row)?;
    let user = get_user(db, &token.user).await?;
    Ok(Some((token, user)))
}

/// Records a use of a token, unless one was recorded less than
/// [`LAST_USED_GRANULARITY_MS`] ago.
pub async fn touch_token<D: Db>(db: &mut D, now: Millis, id: &str) -> Result<(), Error> {
    db.execute(
        "UPDATE access_tokens SET last_used_at = $2 \
         WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $3)",
        params![id, now, now - LAST_USED_GRANULARITY_MS],
    )
    .await?;
    Ok(())
}
