//! Error bodies: `{"error": {"code", "message"}}` everywhere, plus the
//! the connector's own fields (`ok`, `claimed`, `reason`) beside it.

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
    // A string in Rust, so a client reads codes newer than itself; the
    // document lists every code the server answers with (see below).
    #[schema(schema_with = error_code_schema)]
    pub code: String,
    pub message: String,
}

/// The schema of `ErrorDetail.code`: an enum of every code in
/// `shepherd_core::error::codes`, described with what each means.
fn error_code_schema() -> utoipa::openapi::Object {
    use shepherd_core::error::codes::ERROR_CODES;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let mut description = String::from("Stable, machine-readable, snake_case. One of:\n");
    for c in ERROR_CODES {
        description.push_str(&format!("\n- `{}`: {}", c.code, c.description));
    }
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(ERROR_CODES.iter().map(|c| c.code)))
        .description(Some(description))
        .build()
}

/// A connector (the connector contract) error: the standard `error` object with the
/// contract's `ok: false` and `reason`, and `claimed: false` on claims. A
/// request that could not be read at all (malformed JSON) has only `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SeedErrorBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The error's message again, as the contract names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Present (false) on a refused claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<bool>,
    pub error: ErrorDetail,
}

/// The contract's extra error fields, without the `error` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectorErrorFields {
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
