//! Channels (seed 002's resources, seed 000's channels): what runs and
//! conversations belong to. A channel is archived, never deleted with its runs.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelBody {
    pub id: String,
    /// Display name, e.g. `#general`.
    pub name: String,
}

/// Create a channel (or rename an existing one).
#[utoipa::path(post, path = "/api/v1/channels", tag = "channels", request_body = ChannelBody, responses(
    (status = 200, body = Object), (status = 422, description = "invalid_channel_id, invalid_name", body = crate::openapi::ErrorBody)))]
pub async fn upsert(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<ChannelBody>,
) -> ApiResult<Json<Value>> {
    caller.require_operator()?;
    Ok(Json(state.store.upsert_channel(&b.id, &b.name).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub include_archived: Option<bool>,
}

/// Channels with their number of runs.
#[utoipa::path(get, path = "/api/v1/channels", tag = "channels", params(ListQuery), responses((status = 200, body = Object)))]
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<Value>> {
    let channels = state
        .store
        .list_channels(q.include_archived.unwrap_or(false))
        .await?;
    Ok(Json(json!({ "channels": channels })))
}

/// Archive a channel; its runs and history stay.
#[utoipa::path(post, path = "/api/v1/channels/{id}/archive", tag = "channels", params(("id" = String, Path)), responses(
    (status = 200, body = Object), (status = 404, description = "channel_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "channel_archived", body = crate::openapi::ErrorBody)))]
pub async fn archive(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    caller.require_operator()?;
    Ok(Json(state.store.archive_channel(&id).await?))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/channels", post(upsert).get(list))
        .route("/api/v1/channels/{id}/archive", post(archive))
}
