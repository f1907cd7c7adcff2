//! Error bodies: `{"error": {"code", "message"}}` everywhere, plus the
//! seed 003 connector's own fields (`ok`, `claimed`, `reason`) beside it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The shape of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable, snake_case.
    pub code: String,
    pub message: String,
}

/// A connector (seed 003) error: the standard `error` object with the
/// seed's `ok: false` and `reason`, and `claimed: false` on claims.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SeedErrorBody {
    pub ok: bool,
    /// The error's message again, as the seed names it.
    pub reason: String,
    /// Present (false) on a refused claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<bool>,
    pub error: ErrorDetail,
}

/// The seed's extra error fields, without the `error` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedErrorFields {
    pub ok: bool,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<bool>,
}

/// An event that does not apply in the task's state: it is recorded (with
/// `event_id`) and refused with `invalid_transition`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TransitionRejectedBody {
    pub ok: bool,
    pub vtid: String,
    pub state: String,
    pub event_id: i64,
    pub error: ErrorDetail,
}

/// [`TransitionRejectedBody`] without the `error` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransitionRejectedFields {
    pub ok: bool,
    pub vtid: String,
    pub state: String,
    pub event_id: i64,
}
