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

/// How `GET /api/v1/usage` groups runs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum UsageGroupBy {
    Agent,
    Task,
    /// The UTC day a run started.
    Day,
}

impl UsageGroupBy {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageGroupBy::Agent => "agent",
            UsageGroupBy::Task => "task",
            UsageGroupBy::Day => "day",
        }
    }
}

impl std::str::FromStr for UsageGroupBy {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "agent" => Ok(UsageGroupBy::Agent),
            "task" => Ok(UsageGroupBy::Task),
            "day" => Ok(UsageGroupBy::Day),
            _ => Err(()),
        }
    }
}

/// `GET /api/v1/usage` query.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// `agent` (default), `task` or `day`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<UsageGroupBy>)]
    pub group_by: Option<String>,
    /// Only runs started since: an RFC 3339 time or an age such as `7d`,
    /// `12h`, `30m` (default: all runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// The summed usage of one group of runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct UsageGroup {
    /// The agent id, task id (vtid) or day (`YYYY-MM-DD`, UTC).
    pub key: String,
    /// Runs that reported usage.
    pub runs: i64,
    pub usage: Usage,
}

/// `GET /api/v1/usage`: stored usage summed per group, largest cost first
/// (days in order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct UsageReport {
    pub group_by: UsageGroupBy,
    /// The start of the window, when one was asked for.
    pub since: Option<String>,
    pub groups: Vec<UsageGroup>,
    pub total: Usage,
    /// Runs counted in `total`.
    pub runs: i64,
}
