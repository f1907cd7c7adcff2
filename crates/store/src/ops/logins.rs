//! Single sign-on: logins under way, the users a login makes or updates,
//! and the browsers' sessions. What the provider said has been verified by
//! the API before anything here runs; these operations decide who the
//! identity is in Shepherd and keep the session.
//!
//! Secrets (the login's state, the session's cookie) are kept as their
//! SHA-256 only, like tokens: a copy of the database signs no one in.

use shepherd_core::event::payloads::{UserLoggedIn, UserLoggedOut};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::role::Role;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use super::users::{get_user, user_event, validate_name, UserRow, BUILTIN_ADMIN};
use super::{emit, hash_token, random_hex};
use crate::params;
use crate::sql::{Db, Row};

/// How long the provider has to send the browser back.
pub const LOGIN_ATTEMPT_TTL_MS: Millis = 10 * 60_000;

/// A login under way, as kept between `/auth/login` and `/auth/callback`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoginAttempt {
    pub nonce: String,
    pub pkce_verifier: String,
    pub return_to: String,
}

/// Who the provider says signed in, and the role its groups give them.
#[derive(Debug, Clone, PartialEq)]
pub struct SignIn {
    /// The provider's identity: issuer and subject, which never change.
    pub subject: String,
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
}

/// A browser's session, as stored (never its cookie).
#[derive(Debug, Clone, PartialEq)]
pub struct WebSession {
    pub user: String,
    pub csrf_token: String,
    pub created_at: Millis,
    pub last_seen_at: Millis,
    pub expires_at: Millis,
    pub ended_at: Option<Millis>,
}

/// How long sessions live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLifetimes {
    /// Unused this long, a session ends.
    pub idle_ms: Millis,
    /// This long after the login, a session ends.
    pub max_ms: Millis,
}

/// A session just made: the cookie's value (only this answer holds it).
#[derive(Debug, Clone, PartialEq)]
pub struct NewWebSession {
    pub cookie: String,
    pub csrf_token: String,
    pub expires_at: Millis,
    pub user: UserRow,
}

/// Keeps a login under way; forgets the ones nobody came back for.
pub async fn begin_login<D: Db>(
    db: &mut D,
    now: Millis,
    state: &str,
    attempt: &LoginAttempt,
) -> Result<(), Error> {
    db.execute(
        "DELETE FROM login_attempts WHERE created_at < $1",
        params![now - LOGIN_ATTEMPT_TTL_MS],
    )
    .await?;
    db.execute(
        "INSERT INTO login_attempts (state_hash, nonce, pkce_verifier, return_to, created_at) \
         VALUES ($1, $2, $3, $4, $5)",
        params![
            hash_token(state),
            attempt.nonce.as_str(),
            attempt.pkce_verifier.as_str(),
            attempt.return_to.as_str(),
            now
        ],
    )
    .await?;
    Ok(())
}

/// The login `state` began, taken: a state is good for one callback, and
/// only while it is fresh.
pub async fn take_login<D: Db>(
    db: &mut D,
    now: Millis,
    state: &str,
) -> Result<Option<LoginAttempt>, Error> {
    let hash = hash_token(state);
    let row = db
        .query_opt(
            "SELECT nonce, pkce_verifier, return_to, created_at FROM login_attempts \
             WHERE state_hash = $1",
            params![hash.as_str()],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    db.execute(
        "DELETE FROM login_attempts WHERE state_hash = $1",
        params![hash.as_str()],
    )
    .await?;
    if row.i64(3)? < now - LOGIN_ATTEMPT_TTL_MS {
        return Ok(None);
    }
    Ok(Some(LoginAttempt {
        nonce: row.string(0)?,
        pkce_verifier: row.string(1)?,
        return_to: row.string(2)?,
    }))
}

fn login_refused(code: &'static str, message: String) -> Error {
    Error::forbidden(code, message)
}

/// Signs `who` in: finds the user bound to their identity, or makes one on
/// a first login, sets the role their groups give, and opens a session.
///
/// A name that belongs to someone else (a user made by hand, or bound to
/// another identity, or the built-in admin) is refused, never taken over:
/// a provider account must not become an existing user by choosing their
/// name.
pub async fn sign_in<D: Db>(
    db: &mut D,
    now: Millis,
    who: &SignIn,
    lifetimes: SessionLifetimes,
) -> Result<NewWebSession, Error> {
    let bound = db
        .query_opt(
            "SELECT name FROM users WHERE oidc_subject = $1",
            params![who.subject.as_str()],
        )
        .await?
        .map(|r| r.string(0))
        .transpose()?;
    let acting = |db: &mut D, e: NewEvent| emit_as(db, now, &who.name, e);
    let user = match bound {
        Some(name) => {
            let before = get_user(db, &name).await?;
            if before.disabled {
                return Err(login_refused(
                    "user_disabled",
                    format!("user {name:?} is disabled"),
                ));
            }
            db.execute(
                "UPDATE users SET role = $2, email = $3, updated_at = $4 WHERE name = $1",
                params![name.as_str(), who.role.as_str(), &who.email, now],
            )
            .await?;
            let user = get_user(db, &name).await?;
            if user.role != before.role {
                acting(db, user_event(kind::USER_UPDATED, &user));
            }
            user
        }
        None => {
            validate_name(&who.name)?;
            let taken = who.name == BUILTIN_ADMIN
                || db
                    .query_opt(
                        "SELECT 1 FROM users WHERE name = $1",
                        params![who.name.as_str()],
                    )
                    .await?
                    .is_some();
            if taken {
                return Err(login_refused(
                    "login_name_taken",
                    format!(
                        "the name {:?} belongs to another Shepherd user; an admin can rename \
                         or remove that user, or the provider can give this account another \
                         preferred_username",
                        who.name
                    ),
                ));
            }
            db.execute(
                "INSERT INTO users (name, role, email, disabled, created_at, updated_at, \
                 oidc_subject) VALUES ($1, $2, $3, 0, $4, $4, $5)",
                params![
                    who.name.as_str(),
                    who.role.as_str(),
                    &who.email,
                    now,
                    who.subject.as_str()
                ],
            )
            .await?;
            let user = get_user(db, &who.name).await?;
            acting(db, user_event(kind::USER_CREATED, &user));
            user
        }
    };
    // Sessions no cookie can open any more go as new ones come: the table
    // holds live sessions, not a history (the events are the history).
    db.execute(
        "DELETE FROM web_sessions WHERE expires_at <= $1 OR ended_at IS NOT NULL",
        params![now],
    )
    .await?;
    let cookie = random_hex(32);
    let csrf_token = random_hex(24);
    let expires_at = now + lifetimes.max_ms;
    db.execute(
        "INSERT INTO web_sessions (id_hash, user_name, csrf_token, created_at, last_seen_at, \
         expires_at) VALUES ($1, $2, $3, $4, $4, $5)",
        params![
            hash_token(&cookie),
            user.name.as_str(),
            csrf_token.as_str(),
            now,
            expires_at
        ],
    )
    .await?;
    acting(
        db,
        NewEvent::typed(
            kind::USER_LOGIN,
            EventRefs::default(),
            &UserLoggedIn {
                name: user.name.clone(),
                role: user.role,
                via: "oidc".into(),
            },
        ),
    );
    Ok(NewWebSession {
        cookie,
        csrf_token,
        expires_at,
        user,
    })
}

/// Appends `e` as `actor`'s: a login happens before its request has a user.
fn emit_as<D: Db>(db: &mut D, now: Millis, actor: &str, mut e: NewEvent) {
    e.refs.actor = Some(actor.to_owned());
    emit(db, now, e);
}

fn session_from_row(r: &Row) -> Result<WebSession, Error> {
    Ok(WebSession {
        user: r.string(0)?,
        csrf_token: r.string(1)?,
        created_at: r.i64(2)?,
        last_seen_at: r.i64(3)?,
        expires_at: r.i64(4)?,
        ended_at: r.opt_i64(5)?,
    })
}

/// The session a cookie opens, ended ones included, with its user.
pub async fn session_by_cookie<D: Db>(
    db: &mut D,
    cookie: &str,
) -> Result<Option<(WebSession, UserRow)>, Error> {
    let Some(row) = db
        .query_opt(
            "SELECT user_name, csrf_token, created_at, last_seen_at, expires_at, ended_at \
             FROM web_sessions WHERE id_hash = $1",
            params![hash_token(cookie)],
        )
        .await?
    else {
        return Ok(None);
    };
    let session = session_from_row(&row)?;
    let user = get_user(db, &session.user).await?;
    Ok(Some((session, user)))
}

/// Records a use of a session (which keeps it from idling out), unless one
/// was recorded less than `granularity_ms` ago.
pub async fn touch_session<D: Db>(
    db: &mut D,
    now: Millis,
    cookie: &str,
    granularity_ms: Millis,
) -> Result<(), Error> {
    db.execute(
        "UPDATE web_sessions SET last_seen_at = $2 \
         WHERE id_hash = $1 AND ended_at IS NULL AND last_seen_at < $3",
        params![hash_token(cookie), now, now - granularity_ms],
    )
    .await?;
    Ok(())
}

/// Ends a session (signing out); returns whose it was, or `None` for a
/// cookie that opens no live session.
pub async fn end_session<D: Db>(
    db: &mut D,
    now: Millis,
    cookie: &str,
) -> Result<Option<String>, Error> {
    let Some((session, _)) = session_by_cookie(db, cookie).await? else {
        return Ok(None);
    };
    if session.ended_at.is_some() {
        return Ok(None);
    }
    db.execute(
        "UPDATE web_sessions SET ended_at = $2 WHERE id_hash = $1",
        params![hash_token(cookie), now],
    )
    .await?;
    emit_as(
        db,
        now,
        &session.user,
        NewEvent::typed(
            kind::USER_LOGOUT,
            EventRefs::default(),
            &UserLoggedOut {
                name: session.user.clone(),
            },
        ),
    );
    Ok(Some(session.user))
}
