//! Resources and their conversations (the conversations contract).
//!
//! A resource is a channel with the agent its conversations talk to. The
//! client load sequence of the contract is two calls: the conversation list
//! (newest first, paged), then one conversation with every message and
//! step persisted so far and the cursor that answer is valid at (body and
//! `X-Shepherd-Cursor`); tailing `/api/events?after=<cursor>&conversation_id=<id>`
//! then gives exactly what followed, once.
//!
//! Resources and their conversations are the operator's: a worker token
//! reads only a conversation it ran a run of (`scope::check_conversation`),
//! and writes nothing here.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use shepherd_core::time::{opt_rfc3339, to_rfc3339};
use shepherd_core::Error;
use shepherd_protocol::{
    CancelBody, ConversationDetail, ConversationInfo, ConversationPage, ConversationsQuery,
    MessageInfo, MessageRecord, MultitaskMode, ResourceBody, ResourceInfo, ResourceList, SendBody,
    SendResponse,
};
use shepherd_store::{Conversation, Message, MessageView, Multitask, Resource};
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::{cursor_header, AppState};

fn resource_info(r: Resource) -> ResourceInfo {
    ResourceInfo {
        id: r.id,
        name: r.name,
        agent_id: r.agent_id,
        created_at: to_rfc3339(r.created_at),
        archived_at: opt_rfc3339(r.archived_at),
        active_conversation_id: r.active_conversation_id,
        processing_conversation_id: r.processing_conversation_id,
    }
}

fn conversation_info(c: Conversation) -> ConversationInfo {
    ConversationInfo {
        id: c.id,
        resource_id: c.resource_id,
        state: c.state,
        active: c.active,
        created_at: to_rfc3339(c.created_at),
        updated_at: to_rfc3339(c.updated_at),
        messages: c.messages,
        agent_session_id: c.agent_session_id,
        title: c.title,
    }
}

fn message_info(m: MessageView) -> MessageInfo {
    MessageInfo {
        id: m.id,
        role: m.role.to_owned(),
        text: m.text,
        run_id: m.run_id,
        status: m.status,
        steps: m.steps,
        created_at: to_rfc3339(m.created_at),
    }
}

fn message_record(m: Message) -> MessageRecord {
    MessageRecord {
        id: m.id,
        conversation_id: m.conversation_id,
        ordinal: m.ordinal,
        text: m.text,
        status: m.status,
        task_id: m.task_id,
        created_at: to_rfc3339(m.created_at),
    }
}

/// Create a resource, or update its name and agent.
#[utoipa::path(post, path = "/api/v1/resources", tag = "conversations", request_body = ResourceBody, responses(
    (status = 201, description = "created", body = ResourceInfo), (status = 200, description = "updated", body = ResourceInfo),
    (status = 422, description = "invalid_resource_id, invalid_name, invalid_agent_id, unknown_agent", body = crate::openapi::ErrorBody)))]
pub async fn upsert_resource(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<ResourceBody>,
) -> ApiResult<impl IntoResponse> {
    caller.require_operator()?;
    let (r, created) = state
        .store
        .upsert_resource(&b.id, &b.name, &b.agent_id)
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(resource_info(r))))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct NoQuery {}

/// Resources (channels not archived), with their active and processing conversations.
#[utoipa::path(get, path = "/api/v1/resources", tag = "conversations", responses((status = 200, body = ResourceList)))]
pub async fn list_resources(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(_none): ApiQuery<NoQuery>,
) -> ApiResult<impl IntoResponse> {
    crate::scope::operator_only(&caller, "the resource list")?;
    let shepherd_store::Listing {
        items: list,
        cursor,
    } = state.store.list_resources().await?;
    Ok((
        cursor_header(cursor),
        Json(ResourceList {
            resources: list.into_iter().map(resource_info).collect(),
        }),
    ))
}

/// New chat: a new active conversation (a processing one there is cancelled, its partial work kept).
#[utoipa::path(post, path = "/api/v1/resources/{id}/conversations", tag = "conversations", params(("id" = String, Path)), responses(
    (status = 201, body = ConversationInfo), (status = 404, description = "resource_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "resource_archived", body = crate::openapi::ErrorBody)))]
pub async fn create_conversation(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    caller.require_operator()?;
    let c = state.store.create_conversation(&id).await?;
    Ok((StatusCode::CREATED, Json(conversation_info(c))))
}

/// A resource's conversations, newest first.
#[utoipa::path(get, path = "/api/v1/resources/{id}/conversations", tag = "conversations", params(("id" = String, Path), ConversationsQuery), responses(
    (status = 200, body = ConversationPage), (status = 404, description = "resource_not_found", body = crate::openapi::ErrorBody),
    (status = 400, description = "invalid_limit, invalid_page_token", body = crate::openapi::ErrorBody)))]
pub async fn list_conversations(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ConversationsQuery>,
) -> ApiResult<impl IntoResponse> {
    crate::scope::operator_only(&caller, "a resource's conversations")?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(Error::bad_request(
            "invalid_limit",
            format!("limit must be between 1 and 200 (got {limit})"),
        )
        .into());
    }
    let shepherd_store::ConversationPage {
        conversations: list,
        next_before: next,
        cursor,
    } = state.store.list_conversations(&id, q.page, limit).await?;
    Ok((
        cursor_header(cursor),
        Json(ConversationPage {
            conversations: list.into_iter().map(conversation_info).collect(),
            next,
        }),
    ))
}

/// A conversation with every message and step persisted so far, and the cursor to tail from.
#[utoipa::path(get, path = "/api/v1/conversations/{id}", tag = "conversations", params(("id" = String, Path)), responses(
    (status = 200, body = ConversationDetail), (status = 404, description = "conversation_not_found", body = crate::openapi::ErrorBody)))]
pub async fn get_conversation(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(_none): ApiQuery<NoQuery>,
) -> ApiResult<impl IntoResponse> {
    let (view, cursor) = state.store.load_conversation(&id).await?;
    crate::scope::check_conversation(&caller, &view.workers)?;
    let c = view.conversation;
    Ok((
        cursor_header(cursor),
        Json(ConversationDetail {
            id: c.id,
            resource_id: c.resource_id,
            state: c.state,
            active: c.active,
            active_run_id: view.active_run_id,
            cursor,
            agent_session_id: c.agent_session_id,
            created_at: to_rfc3339(c.created_at),
            updated_at: to_rfc3339(c.updated_at),
            title: c.title,
            messages: view.messages.into_iter().map(message_info).collect(),
        }),
    ))
}

/// Send a user message: starts a run on the resource's agent.
#[utoipa::path(post, path = "/api/v1/conversations/{id}/messages", tag = "conversations", params(("id" = String, Path)), request_body = SendBody, responses(
    (status = 201, body = SendResponse),
    (status = 404, description = "conversation_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "conversation_busy, resource_busy, resource_has_no_agent", body = crate::openapi::ErrorBody),
    (status = 422, description = "invalid_text", body = crate::openapi::ErrorBody)))]
pub async fn send_message(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<SendBody>,
) -> ApiResult<impl IntoResponse> {
    caller.require_operator()?;
    let mode = match b.multitask {
        MultitaskMode::Reject => Multitask::Reject,
        MultitaskMode::Enqueue => Multitask::Enqueue,
        MultitaskMode::Interrupt => Multitask::Interrupt,
    };
    let out = state.store.send_message(&id, &b.text, mode).await?;
    Ok((
        StatusCode::CREATED,
        Json(SendResponse {
            message: message_record(out.message),
            conversation: conversation_info(out.conversation),
        }),
    ))
}

/// Cancel the current run: it reaches the worker at once; the conversation
/// stays `cancelled` until the run has ended, keeping its partial work.
#[utoipa::path(post, path = "/api/v1/conversations/{id}/cancel", tag = "conversations", params(("id" = String, Path)), request_body = CancelBody, responses(
    (status = 200, body = ConversationInfo),
    (status = 404, description = "conversation_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "conversation_idle", body = crate::openapi::ErrorBody)))]
pub async fn cancel_conversation(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<ConversationInfo>> {
    caller.require_operator()?;
    // The body is optional: an empty one means "no reason given".
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        serde_json::from_slice::<CancelBody>(&body)
            .map_err(|e| Error::bad_request("malformed_json", format!("cancel body: {e}")))?
            .reason
    };
    let c = state.store.cancel_conversation(&id, reason).await?;
    Ok(Json(conversation_info(c)))
}

/// Continue an old conversation: make it the active one (a processing one there is cancelled).
#[utoipa::path(post, path = "/api/v1/conversations/{id}/activate", tag = "conversations", params(("id" = String, Path)), responses(
    (status = 200, body = ConversationInfo), (status = 404, description = "conversation_not_found", body = crate::openapi::ErrorBody)))]
pub async fn activate_conversation(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Json<ConversationInfo>> {
    caller.require_operator()?;
    let c = state.store.activate_conversation(&id).await?;
    Ok(Json(conversation_info(c)))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v1/resources",
            post(upsert_resource).get(list_resources),
        )
        .route(
            "/api/v1/resources/{id}/conversations",
            post(create_conversation).get(list_conversations),
        )
        .route("/api/v1/conversations/{id}", get(get_conversation))
        .route("/api/v1/conversations/{id}/messages", post(send_message))
        .route(
            "/api/v1/conversations/{id}/cancel",
            post(cancel_conversation),
        )
        .route(
            "/api/v1/conversations/{id}/activate",
            post(activate_conversation),
        )
}
