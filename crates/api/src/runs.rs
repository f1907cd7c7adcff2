//! Runs and transcripts: seed 000's list and detail routes as written, and
//! the `/api/v1/runs` routes workers use to append steps and set status.

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use shepherd_core::model::Run;
use shepherd_core::time::{opt_rfc3339, to_rfc3339};
use shepherd_core::transcript::TranscriptStep;
use shepherd_core::Error;
use shepherd_store::RunFilter;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::tasks::paging;
use crate::{cursor_header, AppState};

const STATUSES: [&str; 4] = ["running", "done", "failed", "cancelled"];

/// Seed 000's worker list item (a run), with the live overlay.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerRunInfo {
    pub id: String,
    pub task: String,
    pub status: String,
    pub worker_type: String,
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub has_transcript: bool,
    pub live_status: Option<String>,
    pub tool_calls: i64,
    pub agent_id: String,
    pub vtid: String,
    pub active_tool: Option<String>,
}

impl From<Run> for WorkerRunInfo {
    fn from(r: Run) -> Self {
        let running = r.status == "running";
        WorkerRunInfo {
            id: r.id,
            task: r.task,
            status: r.status,
            worker_type: r.worker_type,
            channel_id: r.channel_id,
            channel_name: r.channel_name,
            started_at: to_rfc3339(r.started_at),
            completed_at: opt_rfc3339(r.completed_at),
            has_transcript: r.has_transcript,
            // Completed runs answer null/0, as the seed says.
            live_status: if running { r.live_status } else { None },
            tool_calls: if running { r.tool_calls } else { 0 },
            agent_id: r.agent_id,
            vtid: r.vtid,
            active_tool: if running { r.active_tool } else { None },
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerListResponse {
    pub workers: Vec<WorkerRunInfo>,
    pub total: i64,
}

/// Seed 000's worker detail (a run) with its decompressed transcript.
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkerDetailResponse {
    pub id: String,
    pub task: String,
    pub result: Option<String>,
    pub status: String,
    pub worker_type: String,
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub started_at: String,
    pub completed_at: Option<String>,
    /// Null while running, or where none was recorded.
    #[schema(value_type = Option<Vec<Object>>)]
    pub transcript: Option<Vec<TranscriptStep>>,
    pub agent_id: String,
    pub vtid: String,
    pub live_status: Option<String>,
    pub tool_calls: i64,
}

fn detail_of(r: Run, transcript: Option<Vec<TranscriptStep>>) -> WorkerDetailResponse {
    let running = r.status == "running";
    WorkerDetailResponse {
        id: r.id,
        task: r.task,
        result: r.result,
        status: r.status,
        worker_type: r.worker_type,
        channel_id: r.channel_id,
        channel_name: r.channel_name,
        started_at: to_rfc3339(r.started_at),
        completed_at: opt_rfc3339(r.completed_at),
        transcript,
        agent_id: r.agent_id,
        vtid: r.vtid,
        live_status: if running { r.live_status } else { None },
        tool_calls: if running { r.tool_calls } else { 0 },
    }
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct WorkersQuery {
    pub agent_id: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    /// `running | done | failed | cancelled`.
    pub status: Option<String>,
    /// Search in task titles.
    pub q: Option<String>,
}

async fn check_agent(state: &AppState, agent_id: &Option<String>) -> Result<(), Error> {
    if let Some(a) = agent_id {
        let agents = state.store.list_agents().await?;
        if !agents.iter().any(|x| &x.id == a) {
            return Err(Error::not_found(
                "agent_not_found",
                format!("no agent {a:?}"),
            ));
        }
    }
    Ok(())
}

/// Seed 000: list runs ("workers") without transcripts, newest first.
#[utoipa::path(get, path = "/api/agents/workers", tag = "runs", params(WorkersQuery), responses(
    (status = 200, body = WorkerListResponse),
    (status = 400, description = "invalid_status, invalid_limit, invalid_offset", body = crate::openapi::ErrorBody),
    (status = 404, description = "agent_not_found", body = crate::openapi::ErrorBody)))]
pub async fn seed_list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<WorkersQuery>,
) -> ApiResult<impl IntoResponse> {
    let (limit, offset) = paging(q.limit, q.offset, 50)?;
    let status = q.status.filter(|s| !s.is_empty());
    if let Some(s) = &status {
        if !STATUSES.contains(&s.as_str()) {
            return Err(Error::bad_request(
                "invalid_status",
                format!("status must be one of {STATUSES:?}"),
            )
            .into());
        }
    }
    let agent_id = q.agent_id.filter(|s| !s.is_empty());
    check_agent(&state, &agent_id).await?;
    let (runs, total, cursor) = state
        .store
        .list_runs(RunFilter {
            agent_id,
            channel_id: None,
            status,
            vtid: None,
            q: q.q.filter(|s| !s.is_empty()),
            limit,
            offset,
        })
        .await?;
    let workers = runs.into_iter().map(WorkerRunInfo::from).collect();
    Ok((
        cursor_header(cursor),
        Json(WorkerListResponse { workers, total }),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct DetailQuery {
    pub agent_id: Option<String>,
    /// The run id.
    pub worker_id: String,
}

/// Seed 000: one run ("worker") with its transcript.
#[utoipa::path(get, path = "/api/agents/workers/detail", tag = "runs", params(DetailQuery), responses(
    (status = 200, body = WorkerDetailResponse),
    (status = 404, description = "run_not_found", body = crate::openapi::ErrorBody),
    (status = 500, description = "transcript_corrupt", body = crate::openapi::ErrorBody)))]
pub async fn seed_detail(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<DetailQuery>,
) -> ApiResult<impl IntoResponse> {
    let (run, transcript, cursor) = state.store.run_detail(&q.worker_id).await?;
    if let Some(a) = q.agent_id.filter(|s| !s.is_empty()) {
        if a != run.agent_id {
            return Err(Error::not_found(
                "run_not_found",
                format!("agent {a:?} has no run {:?}", q.worker_id),
            )
            .into());
        }
    }
    Ok((cursor_header(cursor), Json(detail_of(run, transcript))))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    pub agent_id: Option<String>,
    /// Runs of one channel (resource).
    pub channel_id: Option<String>,
    pub status: Option<String>,
    pub vtid: Option<String>,
    pub q: Option<String>,
    pub limit: Option<i64>,
    pub offset: Option<i64>,
}

/// Runs with every field, newest first.
#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", params(RunsQuery), responses((status = 200, body = Object)))]
pub async fn list_runs(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> ApiResult<impl IntoResponse> {
    let (limit, offset) = paging(q.limit, q.offset, 50)?;
    if let Some(s) = &q.status {
        if !STATUSES.contains(&s.as_str()) {
            return Err(Error::bad_request(
                "invalid_status",
                format!("status must be one of {STATUSES:?}"),
            )
            .into());
        }
    }
    let (runs, total, cursor) = state
        .store
        .list_runs(RunFilter {
            agent_id: q.agent_id,
            channel_id: q.channel_id,
            status: q.status,
            vtid: q.vtid,
            q: q.q,
            limit,
            offset,
        })
        .await?;
    Ok((
        cursor_header(cursor),
        Json(json!({ "runs": runs, "total": total })),
    ))
}

/// One run (the detail route's fields) and its full record.
#[utoipa::path(get, path = "/api/v1/runs/{run_id}", tag = "runs", params(("run_id" = String, Path)), responses(
    (status = 200, body = WorkerDetailResponse), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get_run(
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let (run, transcript, cursor) = state.store.run_detail(&run_id).await?;
    let mut body = serde_json::to_value(detail_of(run.clone(), transcript)).unwrap_or_default();
    if let Value::Object(m) = &mut body {
        m.insert("run".into(), json!(run));
    }
    Ok((cursor_header(cursor), Json(body)))
}

#[derive(Debug, Deserialize, IntoParams)]
pub struct StepsQuery {
    /// Return steps with an index greater than this (omit for all).
    pub after: Option<i64>,
    pub limit: Option<i64>,
}

/// Steps of a running or finished run alike.
#[utoipa::path(get, path = "/api/v1/runs/{run_id}/steps", tag = "runs", params(("run_id" = String, Path), StepsQuery), responses(
    (status = 200, description = "`{run_id, status, steps: [{index, step}], next_after}`", body = Object)))]
pub async fn get_steps(
    State(state): State<AppState>,
    Path(run_id): Path<String>,
    ApiQuery(q): ApiQuery<StepsQuery>,
) -> ApiResult<impl IntoResponse> {
    let after = q.after.unwrap_or(-1);
    if after < -1 {
        return Err(Error::bad_request("invalid_after", "after must be -1 or more").into());
    }
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(
            Error::bad_request("invalid_limit", "limit must be between 1 and 10000").into(),
        );
    }
    let (run, steps, cursor) = state.store.run_steps(&run_id, after, limit).await?;
    let next_after = steps.last().map(|(i, _)| *i).unwrap_or(after);
    let steps: Vec<Value> = steps
        .into_iter()
        .map(|(i, s)| json!({ "index": i, "step": s }))
        .collect();
    Ok((
        cursor_header(cursor),
        Json(
            json!({ "run_id": run.id, "status": run.status, "steps": steps, "next_after": next_after }),
        ),
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendSteps {
    pub claim_token: String,
    pub start_index: i64,
    #[schema(value_type = Vec<Object>)]
    pub steps: Vec<TranscriptStep>,
}

fn caller_worker(caller: &Caller) -> Option<String> {
    match caller {
        Caller::Worker(w) => Some(w.clone()),
        Caller::Operator => None,
    }
}

/// Append finished steps, fenced by the claim token. A retried batch is
/// acknowledged without storing twice; a gap is `step_gap`.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/steps", tag = "runs", params(("run_id" = String, Path)), request_body = AppendSteps, responses(
    (status = 200, description = "`{ok, accepted, duplicates, next_index}`", body = Object),
    (status = 409, description = "claim_stale, step_gap", body = crate::openapi::ErrorBody)))]
pub async fn append_steps(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<AppendSteps>,
) -> ApiResult<Json<Value>> {
    if b.steps.len() > 1000 {
        return Err(Error::invalid("too_many_steps", "at most 1000 steps per call").into());
    }
    let ack = state
        .store
        .append_steps(
            &run_id,
            &b.claim_token,
            caller_worker(&caller),
            b.start_index,
            b.steps,
        )
        .await?;
    Ok(Json(json!({
        "ok": true, "accepted": ack.accepted, "duplicates": ack.duplicates, "next_index": ack.next_index,
    })))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetStatus {
    pub claim_token: String,
    pub status: String,
}

/// Set the live status text of a running run.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/status", tag = "runs", params(("run_id" = String, Path)), request_body = SetStatus, responses(
    (status = 200, body = Object), (status = 409, description = "claim_stale", body = crate::openapi::ErrorBody)))]
pub async fn set_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<SetStatus>,
) -> ApiResult<Json<Value>> {
    let run = state
        .store
        .set_run_status(&run_id, &b.claim_token, caller_worker(&caller), &b.status)
        .await?;
    Ok(Json(
        json!({ "ok": true, "run_id": run.id, "live_status": run.live_status }),
    ))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/agents/workers", get(seed_list))
        .route("/api/agents/workers/detail", get(seed_detail))
        .route("/api/v1/runs", get(list_runs))
        .route("/api/v1/runs/{run_id}", get(get_run))
        .route(
            "/api/v1/runs/{run_id}/steps",
            get(get_steps).post(append_steps),
        )
        .route("/api/v1/runs/{run_id}/status", post(set_status))
}
