//! A run's token usage and cost, reported by the worker holding its claim
//! (`POST /api/v1/runs/{run_id}/usage`). Runs in lists and details carry
//! the stored total as `usage`.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Extension, Json, Router};
use shepherd_protocol::{SetUsage, UsageAck};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiResult};
use crate::AppState;

/// Set the token usage and cost of a running run, fenced by its claim token.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/usage", tag = "runs", params(("run_id" = String, Path)), request_body = SetUsage, responses(
    (status = 200, body = UsageAck),
    (status = 404, description = "run_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "claim_stale", body = crate::openapi::ErrorBody),
    (status = 422, description = "invalid_usage", body = crate::openapi::ErrorBody)))]
pub async fn set_usage(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<SetUsage>,
) -> ApiResult<Json<UsageAck>> {
    let worker = match caller {
        Caller::Worker(w) => Some(w),
        Caller::Operator => None,
    };
    let run = state
        .store
        .set_run_usage(&run_id, &b.claim_token, worker, b.usage)
        .await?;
    Ok(Json(UsageAck {
        ok: true,
        run_id: run.id,
        usage: run.usage,
    }))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/runs/{run_id}/usage", post(set_usage))
}
