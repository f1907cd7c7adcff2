//! Wire types of a run's token usage and cost
//! (`POST /api/v1/runs/{run_id}/usage`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use shepherd_core::usage::Usage;

/// The run's usage so far (a running total: it replaces the last report),
/// fenced by the claim token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetUsage {
    pub claim_token: String,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct UsageAck {
    pub ok: bool,
    pub run_id: String,
    pub usage: Option<Usage>,
}
