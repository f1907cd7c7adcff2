//! Channels (the conversations contract's resources, the Workers page contract's channels): what runs and
//! conversations belong to. A channel is archived, never deleted with its runs.

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Extension, Json, Router};
use shepherd_core::model::Channel;
use shepherd_protocol::{ChannelBody, ChannelList, ChannelListQuery, ErrorBody};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::AppState;

/// Create a channel (or rename an existing one).
#[utoipa::path(post, path = "/api/v1/channels", tag = "channels", request_body = ChannelBody, responses(
    (status = 200, body = Channel), (status = 403, description = "operator_only", body = ErrorBody),
    (status = 422, description = "invalid_channel_id, invalid_name", body = ErrorBody)))]
pub async fn upsert(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<ChannelBody>,
) -> ApiResult<Json<Channel>> {
    caller.require_operator()?;
    Ok(Json(state.store.upsert_channel(&b.id, &b.name).await?))
}

/// Channels with their number of runs.
#[utoipa::path(get, path = "/api/v1/channels", tag = "channels", params(ChannelListQuery), responses((status = 200, body = ChannelList)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<ChannelListQuery>,
) -> ApiResult<Json<ChannelList>> {
    crate::scope::operator_only(&caller, "the channel list")?;
    let channels = state
        .store
        .list_channels(q.include_archived.unwrap_or(false))
        .await?;
    Ok(Json(ChannelList { channels }))
}

/// Archive a channel; its runs and history stay.
#[utoipa::path(post, path = "/api/v1/channels/{id}/archive", tag = "channels", params(("id" = String, Path)), responses(
    (status = 200, body = Channel), (status = 403, description = "operator_only", body = ErrorBody),
    (status = 404, description = "channel_not_found", body = ErrorBody),
    (status = 409, description = "channel_archived", body = ErrorBody)))]
pub async fn archive(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Json<Channel>> {
    caller.require_operator()?;
    Ok(Json(state.store.archive_channel(&id).await?))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/channels", post(upsert).get(list))
        .route("/api/v1/channels/{id}/archive", post(archive))
}
