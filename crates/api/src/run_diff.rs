//! `GET /api/v1/runs/{run_id}/diff`: what a worktree run changed. The
//! runner keeps the run's branch after the run, so the diff is
//! `git diff base_commit..branch` read from the repository the run
//! recorded, on the host that holds it: the server reads it itself when
//! the run's worker ran on this node's host (or named none), and asks the
//! runner's host over its link ([`crate::host_link`]) otherwise. Either
//! side reads only repositories its own configured agents name
//! (`shepherd_runner::workspace_diff`).

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Extension, Json, Router};
use shepherd_core::status::HostKind;
use shepherd_core::Error;
use shepherd_protocol::{LinkReply, LinkRequest, RunDiff};

use crate::auth::Caller;
use crate::error::ApiResult;
use crate::AppState;

/// The diff of a worktree run's branch against the commit it started from.
#[utoipa::path(get, path = "/api/v1/runs/{run_id}/diff", tag = "runs", params(("run_id" = String, Path)), responses(
    (status = 200, body = RunDiff),
    (status = 403, description = "forbidden, origin_not_allowed, workspace_repo_not_allowed", body = crate::openapi::ErrorBody),
    (status = 404, description = "run_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "workspace_repo_gone, workspace_branch_gone", body = crate::openapi::ErrorBody),
    (status = 422, description = "run_has_no_workspace, invalid_workspace, git_failed", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline: the run's host has no link to this server; host_timeout: it did not answer in time", body = crate::openapi::ErrorBody)))]
pub async fn run_diff(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
) -> ApiResult<Json<RunDiff>> {
    let (run, _) = state.store.run(&run_id).await?;
    crate::scope::check_run(&caller, &run)?;
    let ws = run.workspace.clone().ok_or_else(|| {
        Error::invalid(
            "run_has_no_workspace",
            format!("run {run_id} did not run in a worktree (its agent has no workspace = \"worktree\")"),
        )
    })?;
    let read = match runner_host_of(&state, &run.worker_id).await? {
        Some(host) => {
            let ask = LinkRequest::RunDiff {
                run_id: run.id.clone(),
                workspace: ws.clone(),
            };
            match state.links.ask(&host, ask).await {
                Ok(LinkReply::RunDiff(d)) => d,
                Ok(LinkReply::Failed {
                    status,
                    code,
                    message,
                }) => {
                    return Err(
                        crate::host_link::remote_error(&host, status, &code, message).into(),
                    )
                }
                // A runner on the server's own machine, stopped: the server
                // reads a repository its own agents name itself.
                Err(e) if e.code == "host_offline" && server_may_read(&state, &ws) => {
                    shepherd_runner::workspace_diff::read_diff(
                        &state.settings.workspace_repos,
                        &run.id,
                        &ws,
                    )
                    .await?
                }
                Ok(_) => {
                    return Err(Error::unavailable(
                        "host_failed",
                        format!("host {host} answered something else than a diff"),
                    )
                    .into())
                }
                Err(e) => return Err(e.into()),
            }
        }
        None => {
            shepherd_runner::workspace_diff::read_diff(
                &state.settings.workspace_repos,
                &run.id,
                &ws,
            )
            .await?
        }
    };
    Ok(Json(RunDiff {
        run_id: run.id,
        workspace: ws,
        head: read.head,
        stat: read.stat,
        diff: read.diff,
    }))
}

/// Whether the server's own agents name the run's repository (so the
/// server may read it on its own host).
fn server_may_read(state: &AppState, ws: &shepherd_core::model::RunWorkspace) -> bool {
    ws.repo.as_deref().is_some_and(|r| {
        shepherd_runner::workspace_diff::allowed_repo(
            &state.settings.workspace_repos,
            std::path::Path::new(r),
        )
        .is_ok()
    })
}

/// The runner's host a worker ran on, when it named one; `None` for this
/// node's own host and for workers that named none (outside workers, which
/// report repositories of the server's host or none it may read).
async fn runner_host_of(state: &AppState, worker_id: &str) -> Result<Option<String>, Error> {
    let worker = match state.store.worker(worker_id).await {
        Ok(w) => w,
        Err(e) if e.code == "worker_not_found" => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(host_id) = worker.host_id else {
        return Ok(None);
    };
    let host = state.store.host(&host_id).await?;
    Ok((host.kind == HostKind::Runner).then_some(host.id))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/runs/{run_id}/diff", get(run_diff))
}
