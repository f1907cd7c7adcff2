//! Task routes: create, list, show, dispatch, cancel, outside events; and
//! the read-only catalogues (workflows, agents).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use shepherd_core::model::Task;
use shepherd_core::workflow;
use shepherd_core::Error;
use shepherd_protocol::{
    AgentList, CancelBody, CancelResponse, CreateTask, ErrorBody, EventApplied, OutsideEvent,
    PendingWorker, TaskDetail, TaskList, TaskListQuery, TransitionRejectedBody,
    TransitionRejectedFields, WorkflowInfo, WorkflowList,
};
use shepherd_store::{Applied, CancelOutcome, NewTask, TaskFilter};

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ApiResult};
use crate::{cursor_header, AppState};

/// Checks paging parameters: clear 400s rather than surprising pages.
pub fn paging(limit: Option<i64>, offset: Option<i64>, default: i64) -> Result<(i64, i64), Error> {
    let limit = limit.unwrap_or(default);
    let offset = offset.unwrap_or(0);
    if !(1..=500).contains(&limit) {
        return Err(Error::bad_request(
            "invalid_limit",
            format!("limit must be between 1 and 500 (got {limit})"),
        ));
    }
    if !(0..=10_000_000).contains(&offset) {
        return Err(Error::bad_request(
            "invalid_offset",
            format!("offset must be between 0 and 10000000 (got {offset})"),
        ));
    }
    Ok((limit, offset))
}

/// Create a task; it is dispatched at once unless `dispatch` is false.
#[utoipa::path(post, path = "/api/v1/tasks", tag = "tasks", request_body = CreateTask, responses(
    (status = 201, description = "created", body = Task),
    (status = 403, description = "operator_only", body = ErrorBody),
    (status = 409, description = "task_exists", body = ErrorBody),
    (status = 422, description = "invalid_title, unknown_agent, unknown_workflow, invalid_max_attempts, invalid_retry_backoff, invalid_run_at, …", body = ErrorBody)))]
pub async fn create_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateTask>,
) -> ApiResult<impl IntoResponse> {
    caller.require_operator()?;
    if let Some(agent) = body.agent_id.as_deref() {
        // A typo in an agent id would otherwise leave the task waiting for
        // a worker that never comes.
        if !body.external && !state.store.agent_known(agent).await? {
            return Err(Error::invalid(
                "unknown_agent",
                format!(
                    "no agent {agent:?} is configured or declared by a registered worker; \
pass \"external\": true if an outside worker will register it"
                ),
            )
            .into());
        }
    }
    let task = state
        .store
        .create_task(NewTask {
            vtid: body.vtid,
            title: body.title,
            spec: body.spec,
            priority: body.priority,
            capabilities: body.capabilities,
            agent_id: body.agent_id,
            channel_id: body.channel_id,
            workflow: body.workflow,
            dispatch: body.dispatch.unwrap_or(true),
            conversation_id: None,
            max_attempts: body.max_attempts,
            retry_backoff: body.retry_backoff,
            run_at: body.run_at,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(task)))
}

/// List tasks, newest first.
#[utoipa::path(get, path = "/api/v1/tasks", tag = "tasks", params(TaskListQuery), responses(
    (status = 200, body = TaskList),
    (status = 400, description = "invalid_state, invalid_limit, invalid_offset", body = ErrorBody)))]
pub async fn list_tasks(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<TaskListQuery>,
) -> ApiResult<impl IntoResponse> {
    crate::scope::operator_only(&caller, "the task list; it lists its pending tasks")?;
    let (limit, offset) = paging(q.limit, q.offset, 50)?;
    if let Some(s) = &q.state {
        if !workflow::ALL.iter().any(|w| w.states.contains(&s.as_str())) {
            return Err(Error::bad_request("invalid_state", format!("unknown state {s:?}")).into());
        }
    }
    let shepherd_store::Page {
        items: tasks,
        total,
        cursor,
    } = state
        .store
        .list_tasks(TaskFilter {
            state: q.state,
            agent_id: q.agent_id,
            channel_id: q.channel_id,
            limit,
            offset,
        })
        .await?;
    Ok((cursor_header(cursor), Json(TaskList { tasks, total })))
}

/// A task with its claims and its latest events.
#[utoipa::path(get, path = "/api/v1/tasks/{vtid}", tag = "tasks", params(("vtid" = String, Path)), responses(
    (status = 200, body = TaskDetail), (status = 404, description = "task_not_found", body = ErrorBody)))]
pub async fn get_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(vtid): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let (d, cursor) = state.store.task(&vtid, 100).await?;
    crate::scope::check_task(&state, &caller, &d).await?;
    Ok((
        cursor_header(cursor),
        Json(TaskDetail {
            task: d.task,
            claims: d.claims,
            events: d.events,
        }),
    ))
}

/// Dispatch a draft: snapshot its spec and offer it to workers.
#[utoipa::path(post, path = "/api/v1/tasks/{vtid}/dispatch", tag = "tasks", params(("vtid" = String, Path)), responses(
    (status = 200, body = Task), (status = 403, description = "operator_only", body = ErrorBody),
    (status = 404, description = "task_not_found", body = ErrorBody),
    (status = 409, description = "already_dispatched", body = ErrorBody)))]
pub async fn dispatch_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(vtid): Path<String>,
) -> ApiResult<Json<Task>> {
    caller.require_operator()?;
    Ok(Json(state.store.dispatch_task(&vtid).await?))
}

/// Retry a failed or cancelled task: it goes back to the queue as a new attempt.
#[utoipa::path(post, path = "/api/v1/tasks/{vtid}/retry", tag = "tasks", params(("vtid" = String, Path)), responses(
    (status = 200, body = Task), (status = 403, description = "operator_only", body = ErrorBody),
    (status = 404, description = "task_not_found", body = ErrorBody),
    (status = 409, description = "task_not_failed", body = ErrorBody)))]
pub async fn retry_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(vtid): Path<String>,
) -> ApiResult<Json<Task>> {
    caller.require_operator()?;
    Ok(Json(state.store.retry_task(&vtid).await?))
}

/// Cancel a task. If a worker holds it, the worker is told at once and has
/// the grace period to stop; the answer says which.
#[utoipa::path(post, path = "/api/v1/tasks/{vtid}/cancel", tag = "tasks", params(("vtid" = String, Path)), request_body = CancelBody, responses(
    (status = 200, body = CancelResponse), (status = 400, description = "malformed_json", body = ErrorBody),
    (status = 403, description = "operator_only", body = ErrorBody),
    (status = 404, description = "task_not_found", body = ErrorBody),
    (status = 409, description = "task_finished", body = ErrorBody)))]
pub async fn cancel_task(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(vtid): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<CancelResponse>> {
    caller.require_operator()?;
    // The body is optional: an empty one means "no reason given".
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        serde_json::from_slice::<CancelBody>(&body)
            .map_err(|e| Error::bad_request("malformed_json", format!("cancel body: {e}")))?
            .reason
    };
    let (task, outcome) = state.store.cancel_task(&vtid, reason).await?;
    // The grace the worker's process gets: its agent's, where configured.
    let grace = task
        .agent_id
        .as_deref()
        .and_then(|a| state.settings.agent_cancel_grace.get(a))
        .copied()
        .unwrap_or(state.settings.cancel_grace);
    let pending_worker = match outcome {
        CancelOutcome::Cancelled => None,
        CancelOutcome::Requested { worker_id, run_id } => Some(PendingWorker {
            worker_id,
            run_id,
            grace_secs: grace.as_secs(),
        }),
    };
    Ok(Json(CancelResponse {
        ok: true,
        task,
        cancelled: pending_worker.is_none(),
        pending_worker,
    }))
}

/// Render the outcome of a workflow event the same way for every route.
pub fn applied_response(applied: Applied, event: &str) -> ApiResult<Json<EventApplied>> {
    match applied {
        Applied::Moved { task, from, seq } => Ok(Json(EventApplied {
            ok: true,
            vtid: task.vtid,
            event: event.to_owned(),
            previous_state: from,
            state: task.state,
            event_id: seq,
        })),
        Applied::Rejected { task, seq } => Err(ApiError::from(Error::conflict(
            "invalid_transition",
            format!(
                "event {event:?} does not apply to task {} in state {:?}",
                task.vtid, task.state
            ),
        ))
        .with_fields(TransitionRejectedFields {
            ok: false,
            vtid: task.vtid,
            state: task.state,
            event_id: seq,
        })),
    }
}

/// Record an event from outside any worker; it drives the workflow like progress does.
#[utoipa::path(post, path = "/api/v1/tasks/{vtid}/events", tag = "tasks", params(("vtid" = String, Path)), request_body = OutsideEvent, responses(
    (status = 200, body = EventApplied),
    (status = 403, description = "operator_only", body = ErrorBody),
    (status = 404, description = "task_not_found", body = ErrorBody),
    (status = 409, description = "invalid_transition (recorded)", body = TransitionRejectedBody),
    (status = 422, description = "unknown_event", body = ErrorBody)))]
pub async fn task_event(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(vtid): Path<String>,
    ApiJson(body): ApiJson<OutsideEvent>,
) -> ApiResult<Json<EventApplied>> {
    caller.require_operator()?;
    if body.event.is_empty() || body.event.len() > 128 {
        return Err(Error::invalid("invalid_event", "event must be 1-128 characters").into());
    }
    let applied = state
        .store
        .task_event(&vtid, &body.event, body.message, body.metadata)
        .await?;
    applied_response(applied, &body.event)
}

/// The workflows tasks can follow, as transition tables.
#[utoipa::path(get, path = "/api/v1/workflows", tag = "tasks", responses((status = 200, body = WorkflowList)))]
pub async fn workflows() -> Json<WorkflowList> {
    Json(WorkflowList {
        workflows: workflow::ALL
            .iter()
            .map(|w| WorkflowInfo::from(*w))
            .collect(),
    })
}

/// Agents, from configuration or first registration, with their running runs.
#[utoipa::path(get, path = "/api/v1/agents", tag = "runs", responses((status = 200, body = AgentList)))]
pub async fn agents(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<AgentList>> {
    crate::scope::operator_only(&caller, "the agent list")?;
    Ok(Json(AgentList {
        agents: state.store.list_agents().await?,
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/tasks", post(create_task).get(list_tasks))
        .route("/api/v1/tasks/{vtid}", get(get_task))
        .route("/api/v1/tasks/{vtid}/dispatch", post(dispatch_task))
        .route("/api/v1/tasks/{vtid}/cancel", post(cancel_task))
        .route("/api/v1/tasks/{vtid}/retry", post(retry_task))
        .route("/api/v1/tasks/{vtid}/events", post(task_event))
        .route("/api/v1/workflows", get(workflows))
        .route("/api/v1/agents", get(agents))
}
