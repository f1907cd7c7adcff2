//! Runs and transcripts: the Workers page contract's list and detail routes as written, and
//! the `/api/v1/runs` routes workers use to append steps and set status.

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use shepherd_core::model::Run;
use shepherd_core::status::RunStatus;
use shepherd_core::time::{opt_rfc3339, to_rfc3339};
use shepherd_core::transcript::TranscriptStep;
use shepherd_core::Error;
use shepherd_protocol::{
    ActiveWorker, AppendAck, AppendSteps, ChannelStatus, ChannelStatusResponse, ErrorBody,
    IndexedStep, RequeueRun, RunDetail, RunList, RunsQuery, SetStatus, StatusAck, StepsPage,
    StepsQuery, WorkerDetailResponse, WorkerListResponse, WorkerRunInfo, WorkersPageDetailQuery,
    WorkersPageQuery,
};
use shepherd_store::RunFilter;

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::tasks::paging;
use crate::{cursor_header, AppState};

/// Checks a `status` filter against the run vocabulary.
fn check_status(status: &str) -> Result<(), Error> {
    match status.parse::<RunStatus>() {
        Ok(_) => Ok(()),
        Err(_) => Err(Error::bad_request(
            "invalid_status",
            format!(
                "status must be one of {:?}",
                RunStatus::ALL
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
            ),
        )),
    }
}

fn info_of(r: Run) -> WorkerRunInfo {
    let running = r.status == RunStatus::Running;
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
        // Completed runs answer null/0, as the contract says.
        live_status: if running { r.live_status } else { None },
        tool_calls: if running { r.tool_calls } else { 0 },
        agent_id: r.agent_id,
        vtid: r.vtid,
        active_tool: if running { r.active_tool } else { None },
    }
}

fn detail_of(r: Run, transcript: Option<Vec<TranscriptStep>>) -> WorkerDetailResponse {
    let running = r.status == RunStatus::Running;
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

/// The Workers page contract: list runs ("workers") without transcripts, newest first.
#[utoipa::path(get, path = "/api/agents/workers", tag = "runs", params(WorkersPageQuery), responses(
    (status = 200, body = WorkerListResponse),
    (status = 400, description = "invalid_status, invalid_limit, invalid_offset", body = ErrorBody),
    (status = 404, description = "agent_not_found", body = ErrorBody)))]
pub async fn seed_list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<WorkersPageQuery>,
) -> ApiResult<impl IntoResponse> {
    crate::scope::operator_only(&caller, "the run list")?;
    let (limit, offset) = paging(q.limit, q.offset, 50)?;
    let status = q.status.filter(|s| !s.is_empty());
    if let Some(s) = &status {
        check_status(s)?;
    }
    let agent_id = q.agent_id.filter(|s| !s.is_empty());
    check_agent(&state, &agent_id).await?;
    let shepherd_store::Page {
        items: runs,
        total,
        cursor,
    } = state
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
    let workers = runs.into_iter().map(info_of).collect();
    Ok((
        cursor_header(cursor),
        Json(WorkerListResponse { workers, total }),
    ))
}

/// The Workers page contract: one run ("worker") with its transcript.
#[utoipa::path(get, path = "/api/agents/workers/detail", tag = "runs", params(WorkersPageDetailQuery), responses(
    (status = 200, body = WorkerDetailResponse),
    (status = 404, description = "run_not_found", body = ErrorBody),
    (status = 500, description = "transcript_corrupt", body = ErrorBody)))]
pub async fn seed_detail(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<WorkersPageDetailQuery>,
) -> ApiResult<impl IntoResponse> {
    let (run, transcript, cursor) = state.store.run_detail(&q.worker_id).await?;
    crate::scope::check_run(&caller, &run)?;
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

/// The Workers page contract's status snapshot: every running run, per
/// channel, with its live status and tool-call count. A worker sees only
/// its own runs.
#[utoipa::path(get, path = "/api/channels/status", tag = "runs", responses(
    (status = 200, body = ChannelStatusResponse),
    (status = 403, description = "forbidden", body = ErrorBody)))]
pub async fn channels_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<impl IntoResponse> {
    let only_worker = match &caller {
        Caller::Operator | Caller::User { .. } => None,
        Caller::Worker(w) => Some(w.clone()),
        Caller::Run(_) | Caller::Host(_) => {
            return Err(crate::scope::forbidden("the channels' status").into())
        }
    };
    const PAGE: i64 = 500;
    let mut running = Vec::new();
    let mut cursor = 0;
    for offset in (0..).step_by(PAGE as usize) {
        let page = state
            .store
            .list_runs(RunFilter {
                status: Some(RunStatus::Running.as_str().to_owned()),
                limit: PAGE,
                offset,
                ..Default::default()
            })
            .await?;
        cursor = page.cursor;
        let full = page.items.len() as i64 == PAGE;
        running.extend(page.items);
        if !full {
            break;
        }
    }
    running.retain(|r| only_worker.as_ref().is_none_or(|w| &r.worker_id == w));
    // Oldest first within a channel, channels in order of their id.
    running.sort_by(|a, b| (&a.channel_id, a.started_at).cmp(&(&b.channel_id, b.started_at)));
    let mut channels: Vec<ChannelStatus> = Vec::new();
    for r in running {
        let worker = ActiveWorker {
            id: r.id,
            task: r.task,
            status: r.live_status,
            started_at: to_rfc3339(r.started_at),
            tool_calls: r.tool_calls,
            agent_id: r.agent_id,
            vtid: r.vtid,
        };
        match channels.last_mut() {
            Some(c) if c.channel_id == r.channel_id => c.active_workers.push(worker),
            _ => channels.push(ChannelStatus {
                channel_id: r.channel_id,
                channel_name: r.channel_name,
                active_workers: vec![worker],
            }),
        }
    }
    Ok((
        cursor_header(cursor),
        Json(ChannelStatusResponse { channels }),
    ))
}

/// Runs with every field, newest first.
#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", params(RunsQuery), responses(
    (status = 200, body = RunList),
    (status = 400, description = "invalid_status, invalid_limit, invalid_offset", body = ErrorBody)))]
pub async fn list_runs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> ApiResult<impl IntoResponse> {
    crate::scope::operator_only(&caller, "the run list")?;
    let (limit, offset) = paging(q.limit, q.offset, 50)?;
    if let Some(s) = &q.status {
        check_status(s)?;
    }
    let shepherd_store::Page {
        items: runs,
        total,
        cursor,
    } = state
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
    Ok((cursor_header(cursor), Json(RunList { runs, total })))
}

/// One run (the detail route's fields) and its full record.
#[utoipa::path(get, path = "/api/v1/runs/{run_id}", tag = "runs", params(("run_id" = String, Path)), responses(
    (status = 200, body = RunDetail), (status = 404, description = "run_not_found", body = ErrorBody),
    (status = 500, description = "transcript_corrupt", body = ErrorBody)))]
pub async fn get_run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    let (run, transcript, cursor) = state.store.run_detail(&run_id).await?;
    crate::scope::check_run(&caller, &run)?;
    let body = RunDetail {
        detail: detail_of(run.clone(), transcript),
        run,
    };
    Ok((cursor_header(cursor), Json(body)))
}

/// Steps of a running or finished run alike.
#[utoipa::path(get, path = "/api/v1/runs/{run_id}/steps", tag = "runs", params(("run_id" = String, Path), StepsQuery), responses(
    (status = 200, body = StepsPage),
    (status = 400, description = "invalid_after, invalid_limit", body = ErrorBody),
    (status = 404, description = "run_not_found", body = ErrorBody)))]
pub async fn get_steps(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
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
    crate::scope::check_run(&caller, &run)?;
    let next_after = steps.last().map(|(i, _)| *i).unwrap_or(after);
    let steps = steps
        .into_iter()
        .map(|(index, step)| IndexedStep { index, step })
        .collect();
    Ok((
        cursor_header(cursor),
        Json(StepsPage {
            run_id: run.id,
            status: run.status,
            steps,
            next_after,
        }),
    ))
}

fn caller_worker(caller: &Caller) -> Option<String> {
    match caller {
        Caller::Worker(w) => Some(w.clone()),
        // Never a claim's holder: a run token is fenced out.
        Caller::Run(r) => Some(format!("run:{r}")),
        Caller::Host(h) => Some(format!("host:{h}")),
        Caller::Operator | Caller::User { .. } => None,
    }
}

/// Append finished steps, fenced by the claim token. A retried batch is
/// acknowledged without storing twice; a gap is `step_gap`.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/steps", tag = "runs", params(("run_id" = String, Path)), request_body = AppendSteps, responses(
    (status = 200, body = AppendAck),
    (status = 404, description = "run_not_found", body = ErrorBody),
    (status = 409, description = "claim_stale, step_gap", body = ErrorBody),
    (status = 422, description = "too_many_steps, invalid_body", body = ErrorBody)))]
pub async fn append_steps(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<AppendSteps>,
) -> ApiResult<Json<AppendAck>> {
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
            state.lease_rules(),
        )
        .await?;
    Ok(Json(AppendAck {
        ok: true,
        accepted: ack.accepted,
        duplicates: ack.duplicates,
        next_index: ack.next_index,
    }))
}

/// Set the live status text of a running run.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/status", tag = "runs", params(("run_id" = String, Path)), request_body = SetStatus, responses(
    (status = 200, body = StatusAck), (status = 404, description = "run_not_found", body = ErrorBody),
    (status = 409, description = "claim_stale", body = ErrorBody)))]
pub async fn set_status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<SetStatus>,
) -> ApiResult<Json<StatusAck>> {
    let run = state
        .store
        .set_run_status(
            &run_id,
            &b.claim_token,
            caller_worker(&caller),
            &b.status,
            state.lease_rules(),
        )
        .await?;
    Ok(Json(StatusAck {
        ok: true,
        run_id: run.id,
        live_status: run.live_status,
    }))
}

/// Give a run's task back to the queue: its agent did not survive a restart
/// (reason `server_restart`). Fenced by the claim token, like steps.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/requeue", tag = "runs", params(("run_id" = String, Path)), request_body = RequeueRun, responses(
    (status = 200, body = shepherd_protocol::Task), (status = 404, description = "run_not_found", body = ErrorBody),
    (status = 409, description = "claim_stale", body = ErrorBody)))]
pub async fn requeue_run(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<RequeueRun>,
) -> ApiResult<Json<shepherd_protocol::Task>> {
    let reason = b
        .reason
        .filter(|r| !r.trim().is_empty())
        .unwrap_or_else(|| shepherd_protocol::REQUEUE_SERVER_RESTART.to_owned());
    if reason.len() > 200 {
        return Err(Error::bad_request("invalid_reason", "reason is at most 200 bytes").into());
    }
    let task = state
        .store
        .requeue_run(&run_id, &b.claim_token, caller_worker(&caller), &reason)
        .await?;
    Ok(Json(task))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/agents/workers", get(seed_list))
        .route("/api/channels/status", get(channels_status))
        .route("/api/agents/workers/detail", get(seed_detail))
        .route("/api/v1/runs", get(list_runs))
        .route("/api/v1/runs/{run_id}", get(get_run))
        .route(
            "/api/v1/runs/{run_id}/steps",
            get(get_steps).post(append_steps),
        )
        .route("/api/v1/runs/{run_id}/status", post(set_status))
        .route("/api/v1/runs/{run_id}/requeue", post(requeue_run))
}
