//! Wire shapes of users and personal access tokens (`/api/v1/users`,
//! `/api/v1/tokens`, `/api/v1/me`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use shepherd_core::role::Role;

/// `POST /api/v1/users` (admins only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    /// 1-64 lowercase letters, digits and `- _ .`.
    pub name: String,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// `PATCH /api/v1/users/{name}` (admins only): each given field replaces
/// the stored one.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct UpdateUser {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// A disabled user's tokens answer 401 until they are enabled again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct User {
    pub name: String,
    pub role: Role,
    pub email: Option<String>,
    pub disabled: bool,
    /// RFC 3339.
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct UserList {
    pub users: Vec<User>,
}

/// `POST /api/v1/tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// What it is for (`laptop`, `ci`): shown in lists.
    pub name: String,
    /// Whose token: oneself when omitted; another user only for admins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Lifetime with a unit (`90m`, `12h`, `30d`, `2w`); omitted: no expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
}

/// The answer to `POST /api/v1/tokens`: the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct CreatedToken {
    pub id: String,
    /// The secret (`spt_…`), as `Authorization: Bearer <token>`. It is kept
    /// only as a digest: nobody can show it again.
    pub token: String,
    pub user: String,
    /// RFC 3339; none: it does not expire.
    pub expires_at: Option<String>,
}

/// A token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub user: String,
    /// RFC 3339.
    pub created_at: String,
    pub expires_at: Option<String>,
    /// RFC 3339, to the minute; none: never used.
    pub last_used_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

/// `GET /api/v1/me`: who the credential is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct Me {
    /// The user's name, `worker:<id>` or `run:<id>`.
    pub name: String,
    /// A person's role; none for a worker's or a run's token.
    pub role: Option<Role>,
    /// `user`, `worker` or `run`.
    pub kind: String,
    /// When the request was signed in by the browser's session cookie: the
    /// value of the `X-CSRF-Token` header that every change it makes must
    /// carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csrf_token: Option<String>,
}

/// `GET /auth/options`: how a browser may sign in to this server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LoginOptions {
    /// Single sign-on through an OpenID provider (`/auth/login`) is
    /// configured; a token works either way.
    pub oidc: bool,
}
