//! `GET /api/v1/runs/{run_id}/diff`: what a worktree run changed. The
//! runner keeps the run's branch after the run, so the diff is
//! `git diff base_commit..branch` read from the repository the run
//! recorded; the server can serve it when that repository is on its host.
//!
//! The workspace is what a worker reported, so nothing of it reaches git
//! unchecked: the repository must be one a configured agent names
//! ([`crate::workspace_repos`]), the branch a branch name by git's rules and
//! the commits full object ids (`shepherd_core::cmdline`), and every
//! revision follows `--end-of-options`.

use std::path::Path as FsPath;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Extension, Json, Router};
use shepherd_core::Error;
use shepherd_protocol::RunDiff;

use crate::auth::Caller;
use crate::error::ApiResult;
use crate::workspace_repos::{allowed_repo, RepoRefusal};
use crate::AppState;

/// Runs git in `repo`; its stdout, or its stderr as the error.
async fn git(repo: &FsPath, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// The diff of a worktree run's branch against the commit it started from.
#[utoipa::path(get, path = "/api/v1/runs/{run_id}/diff", tag = "runs", params(("run_id" = String, Path)), responses(
    (status = 200, body = RunDiff),
    (status = 403, description = "forbidden, origin_not_allowed, workspace_repo_not_allowed", body = crate::openapi::ErrorBody),
    (status = 404, description = "run_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "workspace_repo_gone, workspace_branch_gone", body = crate::openapi::ErrorBody),
    (status = 422, description = "run_has_no_workspace, invalid_workspace, git_failed", body = crate::openapi::ErrorBody)))]
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
    // Recorded before reports were checked, a workspace may still hold
    // what git would read as an option.
    ws.check()
        .map_err(|why| Error::invalid("invalid_workspace", format!("run {run_id}: {why}")))?;
    let repo = ws.repo.clone().unwrap_or_default();
    let gone = || {
        Error::conflict(
            "workspace_repo_gone",
            format!("the repository {repo:?} of run {run_id} is not on this host (moved, deleted, or on another machine)"),
        )
    };
    if repo.is_empty() {
        return Err(gone().into());
    }
    let repo_path = match allowed_repo(&state.settings.workspace_repos, FsPath::new(&repo)) {
        Ok(p) => p,
        Err(RepoRefusal::Gone) => return Err(gone().into()),
        Err(RepoRefusal::NotAllowed) => {
            let why = format!(
                "the repository {repo:?} of run {run_id} is not one a configured agent works in \
                 (agents.NAME.repo): the server reads diffs only from those"
            );
            return Err(Error::forbidden("workspace_repo_not_allowed", why).into());
        }
    };
    let repo_path = repo_path.as_path();
    if !repo_path.is_dir() || git(repo_path, &["rev-parse", "--git-dir"]).await.is_err() {
        return Err(gone().into());
    }
    let branch_ref = format!("refs/heads/{}", ws.branch);
    let head = git(
        repo_path,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &branch_ref,
        ],
    )
    .await
    .map(|s| s.trim().to_owned())
    .map_err(|_| {
        Error::conflict(
            "workspace_branch_gone",
            format!(
                "the branch {} of run {run_id} no longer exists (pruned or deleted)",
                ws.branch
            ),
        )
    })?;
    let range = format!("{}..{}", ws.base_commit, head);
    let failed = |e: String| Error::invalid("git_failed", format!("git diff {range}: {e}"));
    // `--` after the range: it is never read as a path either.
    let diff = git(
        repo_path,
        &[
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--end-of-options",
            &range,
            "--",
        ],
    )
    .await
    .map_err(failed)?;
    let stat = git(
        repo_path,
        &[
            "diff",
            "--no-color",
            "--stat",
            "--end-of-options",
            &range,
            "--",
        ],
    )
    .await
    .map_err(failed)?;
    Ok(Json(RunDiff {
        run_id: run.id,
        workspace: ws,
        head,
        stat,
        diff,
    }))
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/runs/{run_id}/diff", get(run_diff))
}
