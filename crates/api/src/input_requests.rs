//! Input requests (`/api/v1/input-requests`): a run's agent asks a person
//! for a permission or an answer, and whoever answers first (from any
//! device, through any node) decides; and the run tokens agents ask with
//! (`POST /api/v1/runs/{run_id}/token`).
//!
//! Who may do what: the operator everything; a worker token asks and reads
//! for the runs it holds and answers their requests (a remote runner's own
//! policy); a run token asks and reads for its own run only, and never
//! answers (an agent approving its own tool calls would make asking moot).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use shepherd_core::event::{kind, EventFilter};
use shepherd_core::input::{InputAnswer, InputRequest, InputState};
use shepherd_core::Error;
use shepherd_protocol::{
    AskInput, ErrorBody, InputRequestList, InputRequestQuery, InputRequestsQuery, RunToken,
    RunTokenRequest,
};
use shepherd_store::{InputFilter, NewInputRequest, TailItem};

use crate::auth::Caller;
use crate::error::{ApiJson, ApiQuery, ApiResult};
use crate::{cursor_header, AppState};

/// Longest a `GET …/{id}?wait=` holds the request open.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// The run a caller asks or reads for: its own (a run token), or the one it
/// names, which a worker token must hold.
async fn asking_run(state: &AppState, caller: &Caller, named: Option<String>) -> ApiResult<String> {
    let run_id = match (caller, named) {
        (Caller::Run(own), None) => own.clone(),
        (Caller::Run(own), Some(n)) if &n == own => n,
        (Caller::Run(_), Some(_)) => {
            return Err(
                Error::forbidden("not_your_run", "a run token asks only for its own run").into(),
            )
        }
        (_, Some(n)) => n,
        (_, None) => {
            return Err(Error::invalid("invalid_input_request", "run_id is required").into())
        }
    };
    if let Caller::Worker(_) = caller {
        let (run, _) = state.store.run(&run_id).await?;
        crate::scope::check_run(caller, &run)?;
    }
    Ok(run_id)
}

/// Whether `caller` may see `request`.
async fn check_visible(state: &AppState, caller: &Caller, request: &InputRequest) -> ApiResult<()> {
    match caller {
        Caller::Operator | Caller::User { .. } => Ok(()),
        Caller::Run(own) if own == &request.run_id => Ok(()),
        Caller::Run(_) => {
            Err(Error::forbidden("not_your_run", "another run's input request").into())
        }
        Caller::Host(_) => Err(crate::scope::forbidden("input requests").into()),
        Caller::Worker(_) => {
            let (run, _) = state.store.run(&request.run_id).await?;
            crate::scope::check_run(caller, &run)?;
            Ok(())
        }
    }
}

/// Ask a person: a permission for a tool call, or a question. A rule of the
/// agent's policy may answer it at once (`answered_by` `rule:<rule>`).
/// Asking again with the same `key` returns the same request.
#[utoipa::path(post, path = "/api/v1/input-requests", tag = "input", request_body = AskInput, responses(
    (status = 201, body = InputRequest),
    (status = 403, description = "forbidden, not_your_run", body = ErrorBody),
    (status = 404, description = "run_not_found", body = ErrorBody),
    (status = 409, description = "run_not_running", body = ErrorBody),
    (status = 422, description = "invalid_input_request", body = ErrorBody)))]
pub async fn ask(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(b): ApiJson<AskInput>,
) -> ApiResult<impl IntoResponse> {
    let run_id = asking_run(&state, &caller, b.run_id).await?;
    let (run, _) = state.store.run(&run_id).await?;
    let policy = state
        .settings
        .agent_permissions
        .get(&run.agent_id)
        .cloned()
        .unwrap_or_default();
    let request = state
        .store
        .ask(NewInputRequest {
            run_id,
            kind: b.kind,
            key: b.key,
            tool_name: b.tool_name,
            tool_input: b.tool_input,
            prompt: b.prompt,
            options: b.options,
            policy,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(request)))
}

/// Input requests, newest first (a run token sees its own run's).
#[utoipa::path(get, path = "/api/v1/input-requests", tag = "input", operation_id = "list_input_requests", params(InputRequestsQuery), responses(
    (status = 200, body = InputRequestList),
    (status = 400, description = "invalid_state, invalid_limit", body = ErrorBody),
    (status = 403, description = "forbidden", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiQuery(q): ApiQuery<InputRequestsQuery>,
) -> ApiResult<impl IntoResponse> {
    let state_filter = match q.state.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(
            s.parse::<InputState>()
                .map_err(|m| Error::bad_request("invalid_state", format!("state: {m}")))?,
        ),
    };
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(Error::bad_request("invalid_limit", "limit must be between 1 and 1000").into());
    }
    let run_id = match (&caller, q.run_id.filter(|s| !s.is_empty())) {
        (Caller::Operator | Caller::User { .. }, named) => named,
        (_, named) => {
            if matches!(caller, Caller::Worker(_)) && named.is_none() {
                return Err(crate::scope::forbidden(
                    "every run's input requests; name a run_id it holds",
                )
                .into());
            }
            Some(asking_run(&state, &caller, named).await?)
        }
    };
    let listing = state
        .store
        .input_requests(InputFilter {
            state: state_filter,
            run_id,
            vtid: q.vtid.filter(|s| !s.is_empty()),
            limit,
        })
        .await?;
    Ok((
        cursor_header(listing.cursor),
        Json(InputRequestList {
            requests: listing.items,
            cursor: listing.cursor,
        }),
    ))
}

/// One input request; with `wait`, held open until it is answered (or the
/// wait ends), so an asker learns the answer as soon as it is given.
#[utoipa::path(get, path = "/api/v1/input-requests/{id}", tag = "input", params(("id" = String, Path), InputRequestQuery), responses(
    (status = 200, body = InputRequest),
    (status = 403, description = "forbidden, not_your_run", body = ErrorBody),
    (status = 404, description = "input_request_not_found", body = ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    credential: Option<Extension<crate::revocation::Credential>>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<InputRequestQuery>,
) -> ApiResult<impl IntoResponse> {
    let (request, cursor) = state.store.input_request_at(&id).await?;
    check_visible(&state, &caller, &request).await?;
    let wait = Duration::from_secs(q.wait.unwrap_or(0)).min(MAX_WAIT);
    if request.state.is_final() || wait.is_zero() {
        return Ok((cursor_header(cursor), Json(request)));
    }
    let filter = EventFilter {
        run_id: Some(request.run_id.clone()),
        kinds: vec![kind::INPUT_ANSWERED.into()],
        ..Default::default()
    };
    let mut tail = state.store.tail(cursor, filter);
    // A wait lasts only as long as the credential that began it: one lost
    // meanwhile is answered as a request with it now would be.
    let watch = crate::revocation::watch(&state, credential.map(|Extension(c)| c));
    let waited = tokio::time::timeout(wait, async {
        loop {
            tokio::select! {
                _ = watch.ended().cancelled() => return Ok::<_, Error>(()),
                item = tail.next() => match item? {
                    // Any answer in this run: read the request again.
                    TailItem::Event(_) => {
                        let (now, _) = state.store.input_request_at(&id).await?;
                        if now.state.is_final() {
                            return Ok(());
                        }
                    }
                    TailItem::Expired | TailItem::FellBehind => return Ok(()),
                },
            }
        }
    })
    .await;
    if let Ok(Err(e)) = waited {
        return Err(e.into());
    }
    if let Some(lost) = watch.lost() {
        return Err(lost.to_error().into());
    }
    let (request, cursor) = state.store.input_request_at(&id).await?;
    Ok((cursor_header(cursor), Json(request)))
}

/// Answer a pending request: `{"decision": "allow"|"deny", "message"?}` for
/// a permission, `{"text"}` or `{"option"}` for a question. The first answer
/// wins; any later one gets 409 `already_answered`.
#[utoipa::path(post, path = "/api/v1/input-requests/{id}/answer", tag = "input", params(("id" = String, Path)), request_body = InputAnswer, responses(
    (status = 200, body = InputRequest),
    (status = 403, description = "forbidden", body = ErrorBody),
    (status = 404, description = "input_request_not_found", body = ErrorBody),
    (status = 409, description = "already_answered", body = ErrorBody),
    (status = 422, description = "invalid_answer", body = ErrorBody)))]
pub async fn answer(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(b): ApiJson<InputAnswer>,
) -> ApiResult<Json<InputRequest>> {
    match &caller {
        Caller::Operator | Caller::User { .. } => {}
        Caller::Host(_) => return Err(crate::scope::forbidden("input requests").into()),
        Caller::Run(_) => {
            return Err(Error::forbidden(
                "forbidden",
                "a run token cannot answer input requests; a person (or the operator token) does",
            )
            .into())
        }
        Caller::Worker(_) => {
            let request = state.store.input_request(&id).await?;
            check_visible(&state, &caller, &request).await?;
        }
    }
    let request = state.store.answer_input(&id, b, &caller.actor()).await?;
    Ok(Json(request))
}

/// The run token for a running run, asked by the worker holding its claim:
/// its agent gets it as `SHEPHERD_RUN_TOKEN`. Derived, not stored: asking
/// again gives the same token.
#[utoipa::path(post, path = "/api/v1/runs/{run_id}/token", tag = "input", params(("run_id" = String, Path)), request_body = RunTokenRequest, responses(
    (status = 200, body = RunToken),
    (status = 404, description = "run_not_found", body = ErrorBody),
    (status = 409, description = "claim_stale", body = ErrorBody)))]
pub async fn run_token(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
    ApiJson(b): ApiJson<RunTokenRequest>,
) -> ApiResult<Json<RunToken>> {
    let worker = match &caller {
        Caller::Operator | Caller::User { .. } => None,
        Caller::Worker(w) => Some(w.clone()),
        Caller::Run(_) | Caller::Host(_) => {
            return Err(crate::scope::forbidden("other run tokens").into())
        }
    };
    let run = state
        .store
        .fenced_run(&run_id, &b.claim_token, worker)
        .await?;
    let token = shepherd_core::token::run_token(state.run_key().await?, &run.id);
    Ok(Json(RunToken {
        run_id: run.id,
        token,
    }))
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/input-requests", get(list).post(ask))
        .route("/api/v1/input-requests/{id}", get(get_one))
        .route("/api/v1/input-requests/{id}/answer", post(answer))
        .route("/api/v1/runs/{run_id}/token", post(run_token))
}
