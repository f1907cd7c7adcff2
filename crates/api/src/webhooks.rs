//! Webhook subscriptions (`/api/v1/webhooks`): the operator subscribes a URL
//! to events of the log, lists and deletes subscriptions, and reads each
//! one's delivery attempts. Delivering is the server's delivery loop's
//! work; these routes only record what to deliver.
//!
//! Operator only: a subscription decides where the log's contents (tool
//! inputs, prompts) are sent, so neither a worker nor an agent may make one.
//! Letting deliveries reach loopback and private addresses
//! (`allow_private`) and reading why a delivery failed are the admin's.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Json, Router};
use shepherd_core::role::Role;
use shepherd_core::time::to_rfc3339;
use shepherd_core::webhook_events::{validate_events, DEFAULT_EVENTS};
use shepherd_core::webhook_signature::WebhookSecret;
use shepherd_core::webhook_target::{validate_format, validate_url};
use shepherd_core::Error;
use shepherd_protocol::{
    CreateWebhook, CreatedWebhook, ErrorBody, Webhook, WebhookDeliveriesQuery, WebhookDelivery,
    WebhookDeliveryList, WebhookList,
};
use shepherd_store::{NewWebhook, WebhookAttempt, WebhookRow};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::AppState;

/// A subscription as listed.
pub fn to_wire(row: &WebhookRow) -> Webhook {
    Webhook {
        id: row.id.clone(),
        url: row.url.clone(),
        events: row.events.clone(),
        format: row.format.clone(),
        state: row.state.clone(),
        source: row.source.clone(),
        allow_private: row.allow_private,
        cursor: row.cursor_seq,
        created_at: to_rfc3339(row.created_at),
    }
}

/// An attempt as listed; `error` only for admins: what a failed connection
/// says ("connection refused", "no answer within …") tells which addresses
/// and ports answer from the server's side, a port scanner for whoever can
/// point a webhook somewhere and read the result.
fn delivery_to_wire(a: WebhookAttempt, show_error: bool) -> WebhookDelivery {
    WebhookDelivery {
        seq: a.seq,
        kind: a.event_type,
        attempt: a.attempt,
        outcome: a.outcome,
        http_status: a.http_status,
        error: a.error.filter(|_| show_error),
        started_at: to_rfc3339(a.started_at),
        finished_at: to_rfc3339(a.finished_at),
        next_attempt_at: a.next_attempt_at.map(to_rfc3339),
    }
}

/// Subscribe a URL to events. Deliveries start with the next event logged;
/// the secret is shown in this answer only.
#[utoipa::path(post, path = "/api/v1/webhooks", tag = "webhooks", request_body = CreateWebhook, responses(
    (status = 201, body = CreatedWebhook),
    (status = 403, description = "origin_not_allowed, operator_only, forbidden (a user whose role is below the route's, or allow_private without the admin role)", body = ErrorBody),
    (status = 422, description = "invalid_webhook_url, invalid_webhook_events, invalid_webhook_secret, invalid_webhook_format", body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateWebhook>,
) -> ApiResult<impl IntoResponse> {
    caller.require_operator()?;
    validate_url(&body.url)?;
    // Reaching the server's own machine and network is the admin's call.
    if body.allow_private && caller.role() != Some(Role::Admin) {
        return Err(Error::forbidden(
            "forbidden",
            "allow_private (deliveries to loopback and private addresses) needs the admin role",
        )
        .into());
    }
    let events = body
        .events
        .unwrap_or_else(|| DEFAULT_EVENTS.iter().map(|e| (*e).to_owned()).collect());
    validate_events(&events)?;
    let secret = match body.secret {
        Some(text) => WebhookSecret::parse(&text)?.to_text(),
        None => shepherd_store::new_webhook_secret(),
    };
    let format = body.format.unwrap_or_else(|| "standard".into());
    validate_format(&format)?;
    let row = state
        .store
        .create_webhook(NewWebhook {
            id: shepherd_store::new_webhook_id(),
            url: body.url,
            events,
            secret: secret.clone(),
            format,
            source: "api".into(),
            allow_private: body.allow_private,
        })
        .await?;
    tracing::info!(webhook = %row.id, url = %row.url, "webhook subscribed");
    Ok((
        StatusCode::CREATED,
        Json(CreatedWebhook {
            webhook: to_wire(&row),
            secret,
        }),
    ))
}

/// Every subscription, oldest first (never their secrets).
#[utoipa::path(get, path = "/api/v1/webhooks", tag = "webhooks", operation_id = "list_webhooks", responses(
    (status = 200, body = WebhookList)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<WebhookList>> {
    caller.require_operator()?;
    let rows = state.store.webhooks().await?;
    Ok(Json(WebhookList {
        webhooks: rows.iter().map(to_wire).collect(),
    }))
}

/// One subscription.
#[utoipa::path(get, path = "/api/v1/webhooks/{id}", tag = "webhooks", operation_id = "get_webhook", params(("id" = String, Path)), responses(
    (status = 200, body = Webhook),
    (status = 404, description = "webhook_not_found", body = ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Json<Webhook>> {
    caller.require_operator()?;
    Ok(Json(to_wire(&state.store.webhook(&id).await?)))
}

/// Delete a subscription made through the API (and its delivery record).
#[utoipa::path(delete, path = "/api/v1/webhooks/{id}", tag = "webhooks", operation_id = "delete_webhook", params(("id" = String, Path)), responses(
    (status = 204, description = "deleted"),
    (status = 404, description = "webhook_not_found", body = ErrorBody),
    (status = 409, description = "webhook_from_config", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    caller.require_operator()?;
    state.store.delete_webhook(&id).await?;
    tracing::info!(webhook = %id, "webhook deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// A subscription's delivery attempts, newest first.
#[utoipa::path(get, path = "/api/v1/webhooks/{id}/deliveries", tag = "webhooks", params(("id" = String, Path), WebhookDeliveriesQuery), responses(
    (status = 200, body = WebhookDeliveryList),
    (status = 400, description = "invalid_limit", body = ErrorBody),
    (status = 404, description = "webhook_not_found", body = ErrorBody)))]
pub async fn deliveries(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<WebhookDeliveriesQuery>,
) -> ApiResult<Json<WebhookDeliveryList>> {
    caller.require_operator()?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(Error::bad_request("invalid_limit", "limit must be between 1 and 500").into());
    }
    let attempts = state.store.webhook_deliveries(&id, limit).await?;
    let admin = caller.role() == Some(Role::Admin);
    Ok(Json(WebhookDeliveryList {
        deliveries: attempts
            .into_iter()
            .map(|a| delivery_to_wire(a, admin))
            .collect(),
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/webhooks", get(list).post(create))
        .route("/api/v1/webhooks/{id}", get(get_one).delete(delete))
        .route("/api/v1/webhooks/{id}/deliveries", get(deliveries))
}
