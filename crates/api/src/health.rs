//! Liveness and readiness probes. Both stay open without a token.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::AppState;

#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
    pub version: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Ready {
    pub status: &'static str,
    pub database: &'static str,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, body = Ready),
    (status = 503, description = "database unreachable", body = crate::openapi::ErrorBody)
))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Ready>> {
    state.store.ping().await?;
    Ok(Json(Ready {
        status: "ready",
        database: state.store.backend_name(),
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}
