//! A run's token usage and cost, reported by the worker holding its claim
//! (`POST /api/v1/runs/{run_id}/usage`). Runs in lists and details carry
//! the stored total as `usage`.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use shepherd_core::usage::Usage;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult};
use crate::AppState;

/// Token counts and cost; a running total for the run (each report
/// replaces the last).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// US dollars; null while unknown.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

impl From<RunUsage> for Usage {
    fn from(u: RunUsage) -> Usage {
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

impl From<Usage> for RunUsage {
    fn from(u: Usage) -> RunUsage {
        RunUsage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd: u.cost_usd,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetUsage {
    pub claim_token: String,
    pub usage: RunUsage,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SetUsageResponse {
    pub ok: bool,
    pub run_id: String,
    pub usage: Option<RunUsage>,
}

/// Set the token usage and cost of a running run, fenced by its claim token.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/usage", tag = "runs", params(("run_id" = String, Path)), request_body = SetUsage, responses(
    (status = 200, body = SetUsageResponse),
    (status = 400, description = "invalid_usage", body = crate::openapi::ErrorBody),
    (status = 404, description = "run_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "claim_stale", body = crate::openapi::ErrorBody)))]
pub async fn set_usage(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<SetUsage>,
) -> ApiResult<Json<SetUsageResponse>> {
    let worker = match caller {
        Caller::Worker(w) => Some(w),
        Caller::Operator => None,
    };
    let run = state
        .store
        .set_run_usage(&run_id, &b.claim_token, worker, b.usage.into())
        .await?;
    Ok(Json(SetUsageResponse {
        ok: true,
        run_id: run.id,
        usage: run.usage.map(RunUsage::from),
    }))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/runs/{run_id}/usage", post(set_usage))
}
