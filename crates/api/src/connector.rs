//! The connector contract's worker connector, served exactly at its routes: register,
//! poll, claim, progress, heartbeat, plus deregister.
//!
//! Errors keep the contract's fields (`ok: false`, `claimed: false`, `reason`)
//! beside the standard `error` object, so clients written to the seed keep
//! working.

use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use shepherd_core::event::{kind, EventFilter};
use shepherd_core::time::to_rfc3339;
use shepherd_core::Error;
use shepherd_protocol::{
    ClaimNextBody, ClaimNextResponse, ClaimResponse, ConnectorErrorFields, DeregisterBody,
    DeregisterResponse, ErrorDetail, EventApplied, HeartbeatBody, HeartbeatClaim,
    HeartbeatResponse, PendingQuery, PendingResponse, PendingTask, ProgressBatchBody,
    ProgressBatchResponse, ProgressBody, ProgressResult, RegisterBody, RegisterResponse,
    RunStepsResult, SeedErrorBody, StepBatchBody, StepBatchResponse, WorkerBody, MAX_CLAIM_WAIT_MS,
};
use shepherd_store::{Applied, Registration, StepAppend};

use crate::auth::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, ApiResult};
use crate::tasks::applied_response;
use crate::AppState;

pub use shepherd_protocol::HEARTBEAT_INTERVAL_SECS;

fn connector_error(e: impl Into<ApiError>, claim: bool) -> ApiError {
    let e: ApiError = e.into();
    let reason = e.error.message.clone();
    e.with_fields(ConnectorErrorFields {
        ok: false,
        reason,
        claimed: claim.then_some(false),
    })
}

/// Register a worker (operator token); returns the worker's own token.
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/register", tag = "connector", request_body = RegisterBody, responses(
    (status = 200, body = RegisterResponse),
    (status = 403, description = "operator_only", body = SeedErrorBody),
    (status = 404, description = "host_not_found: host_id names no registered host", body = SeedErrorBody),
    (status = 422, description = "invalid_worker_id, …", body = SeedErrorBody)))]
pub async fn register(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<RegisterBody>,
) -> ApiResult<Json<RegisterResponse>> {
    caller
        .require_operator()
        .map_err(|e| connector_error(e, false))?;
    let (worker, token) = state
        .store
        .register_worker(Registration {
            worker_id: b.worker_id,
            host_id: b.host_id,
            agent_id: b.agent_id.unwrap_or_else(|| "default".into()),
            worker_type: b
                .worker_type
                .unwrap_or_else(|| shepherd_core::status::WorkerType::Builtin.to_string()),
            name: b.name,
            project_path: b.project_path,
            session_id: b.session_id,
            terminal_id: b.terminal_id,
            capabilities: b.capabilities,
            max_concurrent: b.max_concurrent.unwrap_or(1),
            metadata: b.metadata,
        })
        .await
        .map_err(|e| connector_error(e, false))?;
    Ok(Json(RegisterResponse {
        ok: true,
        worker_id: worker.worker_id,
        registered_at: to_rfc3339(worker.registered_at),
        worker_token: token,
        agent_id: worker.agent_id,
        capabilities: worker.capabilities,
        max_concurrent: worker.max_concurrent,
        heartbeat_interval_secs: HEARTBEAT_INTERVAL_SECS,
    }))
}

fn acting_worker(caller: &Caller, named: Option<&str>) -> Result<String, Error> {
    match (caller, named) {
        (Caller::Worker(w), None) => Ok(w.clone()),
        (_, Some(n)) => {
            caller.require_worker(n)?;
            Ok(n.to_owned())
        }
        (Caller::Operator | Caller::User { .. }, None) => Err(Error::bad_request(
            "missing_worker_id",
            "worker_id is required",
        )),
        (Caller::Run(_) | Caller::Host(_), None) => Err(crate::scope::forbidden("the connector")),
    }
}

/// Tasks the calling worker may take now (agent and capabilities), best first.
#[utoipa::path(get, path = "/api/v1/worker/orchestrator/tasks/pending", tag = "connector", params(PendingQuery), responses(
    (status = 200, body = PendingResponse),
    (status = 400, description = "missing_worker_id, invalid_limit", body = SeedErrorBody),
    (status = 403, description = "not_your_worker", body = SeedErrorBody),
    (status = 404, description = "worker_not_found", body = SeedErrorBody),
    (status = 409, description = "worker_terminated", body = SeedErrorBody)))]
pub async fn pending(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<PendingQuery>,
) -> ApiResult<Json<PendingResponse>> {
    let worker =
        acting_worker(&caller, q.worker_id.as_deref()).map_err(|e| connector_error(e, false))?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(connector_error(
            Error::bad_request("invalid_limit", "limit must be between 1 and 500"),
            false,
        ));
    }
    let tasks = state
        .store
        .pending_tasks(&worker, limit)
        .await
        .map_err(|e| connector_error(e, false))?;
    let tasks = tasks
        .into_iter()
        .map(|t| PendingTask {
            vtid: t.vtid,
            title: t.title,
            state: t.state,
            dispatched_at: t.dispatched_at.map(to_rfc3339),
            spec_snapshot_id: t.spec_snapshot_id,
            priority: t.priority,
            capabilities: t.capabilities,
            agent_id: t.agent_id,
            workflow: t.workflow,
        })
        .collect();
    Ok(Json(PendingResponse { ok: true, tasks }))
}

/// The claims a worker has lost track of, judged from the connector contract's
/// `active_vtid` in its heartbeat: when it names no task (empty) or a task
/// it holds no claim on, every claim it holds is one it no longer works on.
/// A worker that leaves the field out says nothing, and one that names one
/// of its claims is believed (a worker with several slots names one).
pub fn lost_claims<'a>(active_vtid: Option<&str>, held: &[&'a str]) -> Vec<&'a str> {
    match active_vtid {
        None => Vec::new(),
        Some(v) if held.contains(&v) => Vec::new(),
        Some(_) => held.to_vec(),
    }
}

/// Claim a task atomically; at most one active claim per task.
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/tasks/{vtid}/claim", tag = "connector", params(("vtid" = String, Path)), request_body = WorkerBody, responses(
    (status = 200, body = ClaimResponse),
    (status = 400, description = "missing_worker_id", body = SeedErrorBody),
    (status = 404, description = "task_not_found, worker_not_found", body = SeedErrorBody),
    (status = 409, description = "already_claimed, task_not_claimable, task_not_dispatched", body = SeedErrorBody),
    (status = 403, description = "wrong_agent, missing_capabilities, validator_is_builder", body = SeedErrorBody),
    (status = 429, description = "worker_at_capacity, agent_at_capacity", body = SeedErrorBody)))]
pub async fn claim(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(vtid): axum::extract::Path<String>,
    ApiJson(b): ApiJson<WorkerBody>,
) -> ApiResult<Json<ClaimResponse>> {
    let worker =
        acting_worker(&caller, b.worker_id.as_deref()).map_err(|e| connector_error(e, true))?;
    let g = state
        .store
        .claim_task(&worker, &vtid, state.lease_rules())
        .await
        .map_err(|e| connector_error(e, true))?;
    Ok(Json(
        claim_response(g).map_err(|e| connector_error(e, true))?,
    ))
}

/// What a granted claim answers (claim-by-vtid and each claim-next element).
fn claim_response(g: shepherd_store::Grant) -> Result<ClaimResponse, Error> {
    let purpose = g.claim.purpose;
    Ok(ClaimResponse {
        ok: true,
        claimed: true,
        vtid: g.task.vtid,
        title: g.task.title,
        spec: g.spec,
        spec_snapshot_id: g.task.spec_snapshot_id,
        claim_expires_at: to_rfc3339(g.claim.expires_at),
        run_id: g.claim.run_id,
        claim_token: g.claim_token,
        purpose,
        attempt: g.task.attempts,
        state: g.task.state,
        workflow: g.task.workflow,
        conversation: g.conversation,
        run_token: None,
    })
}

/// Claim the next tasks: the best eligible ones (priority, then age; agent
/// and capabilities respected), up to `max`, in one transaction. Rows other
/// nodes are claiming are skipped, not waited for. With `wait_ms` and
/// nothing to claim, the request is held until work comes (a long poll): a
/// worker learns of a new task the moment it is committed, through the
/// node's own event feed, not through a paced event stream of its own.
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/tasks/claim", tag = "connector", request_body = ClaimNextBody, responses(
    (status = 200, body = ClaimNextResponse),
    (status = 400, description = "missing_worker_id", body = SeedErrorBody),
    (status = 403, description = "not_your_worker", body = SeedErrorBody),
    (status = 404, description = "worker_not_found", body = SeedErrorBody),
    (status = 409, description = "worker_terminated", body = SeedErrorBody),
    (status = 422, description = "invalid_max (below 1), max_above_capacity (above the worker's free capacity), invalid_wait_ms (below 0 or above 30000)", body = SeedErrorBody)))]
pub async fn claim_next(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<ClaimNextBody>,
) -> ApiResult<Json<ClaimNextResponse>> {
    let worker =
        acting_worker(&caller, b.worker_id.as_deref()).map_err(|e| connector_error(e, true))?;
    let wait = claim_wait(b.wait_ms).map_err(|e| connector_error(e, true))?;
    let max = b.max.unwrap_or(1);
    // Subscribed before the first claim: work committed between that claim
    // and the wait still wakes it.
    let mut news = (!wait.is_zero()).then(|| {
        state
            .store
            .tail(state.store.published_through(), work_news_filter())
    });
    let deadline = tokio::time::Instant::now() + wait;
    let grants = loop {
        let grants = state
            .store
            .claim_next(&worker, max, state.lease_rules())
            .await
            .map_err(|e| connector_error(e, true))?;
        let Some(tail) = news.as_mut() else {
            break grants;
        };
        if !grants.is_empty() {
            break grants;
        }
        let woke = tokio::select! {
            _ = state.shutdown.cancelled() => false,
            _ = tokio::time::sleep_until(deadline) => false,
            item = tail.next() => item.is_ok(),
        };
        if !woke {
            break grants;
        }
        // Everything already at hand is answered by one claim.
        while let Some(Ok(_)) = tail.try_next() {}
    };
    let mut claims = grants
        .into_iter()
        .map(claim_response)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| connector_error(e, true))?;
    if b.with_run_token == Some(true) && !claims.is_empty() {
        // Derived from the run id, as the token route derives it: the
        // claim's own fencing already says this worker holds the run.
        let key = state
            .run_key()
            .await
            .map_err(|e| connector_error(e, true))?;
        for c in &mut claims {
            c.run_token = Some(shepherd_core::token::run_token(key, &c.run_id));
        }
    }
    Ok(Json(ClaimNextResponse { ok: true, claims }))
}

/// A claim's `wait_ms`, checked.
fn claim_wait(wait_ms: Option<i64>) -> Result<Duration, Error> {
    match wait_ms.unwrap_or(0) {
        ms @ 0..=MAX_CLAIM_WAIT_MS => Ok(Duration::from_millis(ms as u64)),
        ms => Err(Error::invalid(
            "invalid_wait_ms",
            format!("wait_ms must be 0 to {MAX_CLAIM_WAIT_MS} (got {ms})"),
        )),
    }
}

/// The events after which a waiting claim looks again: a task became
/// claimable (created, back in the queue, its claim let go or expired).
fn work_news_filter() -> EventFilter {
    EventFilter {
        kinds: [
            kind::TASK_DISPATCHED,
            kind::TASK_STATE_CHANGED,
            kind::CLAIM_RELEASED,
            kind::CLAIM_EXPIRED,
        ]
        .into_iter()
        .map(String::from)
        .collect(),
        ..Default::default()
    }
}

/// Most reports one batch may carry.
pub const MAX_PROGRESS_REPORTS: usize = 500;

/// Report progress on several claims at once: applied in order, in one
/// transaction, each on its own (a refused report changes nothing and does
/// not stop the others).
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/progress", tag = "connector", request_body = ProgressBatchBody, responses(
    (status = 200, description = "one result per report, in order; a refused report has `ok: false` and an `error` (claim_stale, invalid_transition, unknown_event, invalid_event, task_not_found, …)", body = ProgressBatchResponse),
    (status = 400, description = "missing_worker_id", body = SeedErrorBody),
    (status = 403, description = "not_your_worker", body = SeedErrorBody),
    (status = 422, description = "invalid_reports (none, or more than 500)", body = SeedErrorBody)))]
pub async fn progress_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<ProgressBatchBody>,
) -> ApiResult<Json<ProgressBatchResponse>> {
    let worker =
        acting_worker(&caller, b.worker_id.as_deref()).map_err(|e| connector_error(e, false))?;
    if b.reports.is_empty() || b.reports.len() > MAX_PROGRESS_REPORTS {
        return Err(connector_error(
            Error::invalid(
                "invalid_reports",
                format!(
                    "reports must hold 1 to {MAX_PROGRESS_REPORTS} reports (got {})",
                    b.reports.len()
                ),
            ),
            false,
        ));
    }
    // Reports refused before reaching the store keep their place in the answer.
    let mut results: Vec<Option<ProgressResult>> = Vec::with_capacity(b.reports.len());
    let mut valid = Vec::with_capacity(b.reports.len());
    let mut events = Vec::with_capacity(b.reports.len());
    for r in b.reports {
        if r.event.is_empty() || r.event.len() > 128 {
            results.push(Some(refused(
                r.vtid,
                None,
                None,
                &Error::invalid("invalid_event", "event must be 1-128 characters"),
            )));
            continue;
        }
        results.push(None);
        events.push(r.event.clone());
        valid.push(shepherd_store::ProgressReport {
            vtid: r.vtid,
            claim_token: r.claim_token,
            event: r.event,
            message: r.message,
            metadata: r.metadata,
            result: r.result,
        });
    }
    let vtids: Vec<String> = valid.iter().map(|r| r.vtid.clone()).collect();
    let outcomes = state
        .store
        .progress_batch(&worker, valid, state.lease_rules())
        .await
        .map_err(|e| connector_error(e, false))?;
    let mut outcomes = outcomes.into_iter().zip(vtids).zip(events);
    for slot in results.iter_mut().filter(|s| s.is_none()) {
        let Some(((outcome, vtid), event)) = outcomes.next() else {
            break;
        };
        *slot = Some(match outcome {
            Ok(Applied::Moved { task, seq, .. }) => ProgressResult {
                vtid: task.vtid,
                ok: true,
                state: Some(task.state),
                event_id: Some(seq),
                error: None,
            },
            Ok(Applied::Rejected { task, seq }) => {
                let e = Error::conflict(
                    "invalid_transition",
                    format!(
                        "event {event:?} does not apply to task {} in state {:?}",
                        task.vtid, task.state
                    ),
                );
                refused(task.vtid, Some(task.state), Some(seq), &e)
            }
            Err(e) => refused(vtid, None, None, &e),
        });
    }
    Ok(Json(ProgressBatchResponse {
        ok: true,
        results: results.into_iter().flatten().collect(),
    }))
}

/// The most runs one step batch may carry.
pub const MAX_STEP_BATCH_RUNS: usize = 500;
/// The most steps one step batch may carry in all (as one run's own append).
pub const MAX_STEP_BATCH_STEPS: usize = 1000;

/// Append the steps of several runs the calling worker holds, each run's as
/// `POST /api/v1/runs/{run_id}/steps` would (fenced by its claim token, a
/// retried batch acknowledged without storing twice), each on its own, in
/// one transaction.
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/steps", tag = "connector", request_body = StepBatchBody, responses(
    (status = 200, description = "one result per run, in order; a refused run's steps have `ok: false`, the `status` its own append would have answered, and an `error` (claim_stale, step_gap, run_not_found, …)", body = StepBatchResponse),
    (status = 400, description = "missing_worker_id", body = SeedErrorBody),
    (status = 403, description = "not_your_worker", body = SeedErrorBody),
    (status = 422, description = "invalid_runs (none, more than 500 runs, or more than 1,000 steps in all)", body = SeedErrorBody)))]
pub async fn append_steps_batch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<StepBatchBody>,
) -> ApiResult<Json<StepBatchResponse>> {
    let worker =
        acting_worker(&caller, b.worker_id.as_deref()).map_err(|e| connector_error(e, false))?;
    let steps: usize = b.runs.iter().map(|r| r.steps.len()).sum();
    if b.runs.is_empty() || b.runs.len() > MAX_STEP_BATCH_RUNS || steps > MAX_STEP_BATCH_STEPS {
        return Err(connector_error(
            Error::invalid(
                "invalid_runs",
                format!(
                    "runs must hold 1 to {MAX_STEP_BATCH_RUNS} runs and at most \
                     {MAX_STEP_BATCH_STEPS} steps in all (got {} runs, {steps} steps)",
                    b.runs.len()
                ),
            ),
            false,
        ));
    }
    let run_ids: Vec<String> = b.runs.iter().map(|r| r.run_id.clone()).collect();
    let appends = b
        .runs
        .into_iter()
        .map(|r| StepAppend {
            run_id: r.run_id,
            claim_token: r.claim_token,
            start_index: r.start_index,
            steps: r.steps,
        })
        .collect();
    let outcomes = state
        .store
        .append_steps_many(Some(worker), appends, state.lease_rules())
        .await
        .map_err(|e| connector_error(e, false))?;
    let results = outcomes
        .into_iter()
        .zip(run_ids)
        .map(|(outcome, run_id)| match outcome {
            Ok(ack) => RunStepsResult {
                run_id,
                ok: true,
                accepted: Some(ack.accepted),
                duplicates: Some(ack.duplicates),
                next_index: Some(ack.next_index),
                status: None,
                error: None,
            },
            Err(e) => {
                let status = crate::error::status_of(e.kind);
                let message = if status.is_server_error() {
                    // Internals are logged, never answered.
                    tracing::error!(run_id, error = %e, "appending a batch's steps failed");
                    "the server could not store these steps; try again".to_owned()
                } else {
                    e.message.clone()
                };
                RunStepsResult {
                    run_id,
                    ok: false,
                    accepted: None,
                    duplicates: None,
                    next_index: None,
                    status: Some(status.as_u16()),
                    error: Some(ErrorDetail {
                        code: e.code.to_owned(),
                        message,
                    }),
                }
            }
        })
        .collect();
    Ok(Json(StepBatchResponse { ok: true, results }))
}

fn refused(
    vtid: String,
    state: Option<String>,
    event_id: Option<i64>,
    e: &Error,
) -> ProgressResult {
    ProgressResult {
        vtid,
        ok: false,
        state,
        event_id,
        error: Some(ErrorDetail {
            code: e.code.to_owned(),
            message: e.message.clone(),
        }),
    }
}

/// Report progress under a claim; drives the task's workflow.
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/tasks/{vtid}/progress", tag = "connector", params(("vtid" = String, Path)), request_body = ProgressBody, responses(
    (status = 200, body = EventApplied),
    (status = 400, description = "missing_worker_id", body = SeedErrorBody),
    (status = 403, description = "not_your_worker", body = SeedErrorBody),
    (status = 404, description = "task_not_found", body = SeedErrorBody),
    (status = 409, description = "claim_stale (seed fields), invalid_transition (body `TransitionRejectedBody`)", body = SeedErrorBody),
    (status = 422, description = "unknown_event", body = SeedErrorBody)))]
pub async fn progress(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(vtid): axum::extract::Path<String>,
    ApiJson(b): ApiJson<ProgressBody>,
) -> ApiResult<Json<EventApplied>> {
    let worker =
        acting_worker(&caller, b.worker_id.as_deref()).map_err(|e| connector_error(e, false))?;
    if b.event.is_empty() || b.event.len() > 128 {
        return Err(connector_error(
            Error::invalid("invalid_event", "event must be 1-128 characters"),
            false,
        ));
    }
    let applied = state
        .store
        .progress(
            &worker,
            &vtid,
            b.claim_token,
            &b.event,
            b.message,
            b.metadata,
            b.result,
            state.lease_rules(),
        )
        .await
        .map_err(|e| connector_error(e, false))?;
    applied_response(applied, &b.event)
}

/// Record a heartbeat; extends the worker's claims and repeats any cancel request.
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/heartbeat", tag = "connector", request_body = HeartbeatBody, responses(
    (status = 200, body = HeartbeatResponse),
    (status = 400, description = "missing_worker_id", body = SeedErrorBody),
    (status = 403, description = "not_your_worker", body = SeedErrorBody),
    (status = 404, description = "worker_not_found", body = SeedErrorBody),
    (status = 409, description = "worker_terminated", body = SeedErrorBody)))]
pub async fn heartbeat(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<HeartbeatBody>,
) -> ApiResult<Json<HeartbeatResponse>> {
    let worker =
        acting_worker(&caller, b.worker_id.as_deref()).map_err(|e| connector_error(e, false))?;
    let (w, claims) = state
        .store
        .heartbeat(&worker, state.lease_rules())
        .await
        .map_err(|e| connector_error(e, false))?;
    let held: Vec<&str> = claims.iter().map(|c| c.vtid.as_str()).collect();
    let lost = lost_claims(b.active_vtid.as_deref(), &held);
    if !lost.is_empty() {
        // The claims stay until they end or lapse as the connector contract says; the
        // answer below lists them, which is how the worker learns what it
        // still holds. The operator learns it from this line.
        tracing::warn!(
            worker = %w.worker_id,
            active_vtid = b.active_vtid.as_deref().unwrap_or(""),
            vtid = %lost.join(","),
            "worker heartbeat names a task other than the one(s) it holds a claim on: it has lost track of its claim"
        );
    }
    let claims = claims
        .into_iter()
        .map(|c| HeartbeatClaim {
            vtid: c.vtid,
            run_id: c.run_id,
            claim_expires_at: to_rfc3339(c.expires_at),
            cancel_requested: c.cancel_requested,
        })
        .collect();
    Ok(Json(HeartbeatResponse {
        ok: true,
        worker_id: w.worker_id,
        status: w.status,
        last_heartbeat_at: to_rfc3339(w.last_heartbeat_at),
        claims,
        heartbeat_interval_secs: HEARTBEAT_INTERVAL_SECS,
    }))
}

/// Leave: claims are released (tasks back to the queue), the token stops working.
#[utoipa::path(post, path = "/api/v1/worker/orchestrator/deregister", tag = "connector", request_body = DeregisterBody, responses(
    (status = 200, body = DeregisterResponse),
    (status = 400, description = "missing_worker_id", body = SeedErrorBody),
    (status = 404, description = "worker_not_found", body = SeedErrorBody),
    (status = 409, description = "worker_terminated", body = SeedErrorBody)))]
pub async fn deregister(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<DeregisterBody>,
) -> ApiResult<Json<DeregisterResponse>> {
    let worker =
        acting_worker(&caller, b.worker_id.as_deref()).map_err(|e| connector_error(e, false))?;
    let w = state
        .store
        .deregister_worker(&worker, b.reason)
        .await
        .map_err(|e| connector_error(e, false))?;
    Ok(Json(DeregisterResponse {
        ok: true,
        worker_id: w.worker_id,
        status: w.status,
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/worker/orchestrator/register", post(register))
        .route("/api/v1/worker/orchestrator/tasks/pending", get(pending))
        .route("/api/v1/worker/orchestrator/tasks/claim", post(claim_next))
        .route("/api/v1/worker/orchestrator/progress", post(progress_batch))
        .route(
            "/api/v1/worker/orchestrator/steps",
            post(append_steps_batch),
        )
        .route(
            "/api/v1/worker/orchestrator/tasks/{vtid}/claim",
            post(claim),
        )
        .route(
            "/api/v1/worker/orchestrator/tasks/{vtid}/progress",
            post(progress),
        )
        .route("/api/v1/worker/orchestrator/heartbeat", post(heartbeat))
        .route("/api/v1/worker/orchestrator/deregister", post(deregister))
}

#[cfg(test)]
mod tests {
    use super::lost_claims;

    #[test]
    fn a_heartbeat_naming_another_or_no_task_loses_the_claims_held() {
        assert_eq!(lost_claims(Some("VTID-2"), &["VTID-1"]), ["VTID-1"]);
        assert_eq!(lost_claims(Some(""), &["VTID-1"]), ["VTID-1"]);
        assert!(lost_claims(Some("VTID-1"), &["VTID-1", "VTID-3"]).is_empty());
        assert!(lost_claims(None, &["VTID-1"]).is_empty());
        assert!(lost_claims(Some("VTID-9"), &[]).is_empty());
    }
}
