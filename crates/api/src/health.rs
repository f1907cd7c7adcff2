//! Liveness and readiness probes. Both stay open without a token.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use shepherd_protocol::{Health, Ready};

use crate::error::ApiResult;
use crate::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, body = Ready),
    (status = 503, description = "database unreachable", body = shepherd_protocol::ErrorBody)
))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Ready>> {
    state.store.ping().await?;
    Ok(Json(Ready {
        status: "ready".into(),
        database: state.store.backend_name().into(),
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}
