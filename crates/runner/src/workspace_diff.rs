//! A worktree run's diff, read on the host that holds its repository: the
//! server reads it itself when the repository is on its own host, and asks
//! a runner's host over its link otherwise; both call [`read_diff`].
//!
//! Which repositories may be read at all: a run's workspace (`repo`,
//! `branch`, `base_commit`) is what a worker reported, and a worker token
//! is not the operator: a repository it names is read only when the
//! operator named it too, as the `repo` of a configured worktree agent
//! (`[agents.NAME] repo`) of the host that reads it (the server's
//! configuration on the server's host, the runner's on a runner's).
//! Anything else on the host, other projects, `~/.ssh` under a git
//! repository, is refused whatever the worker wrote. Paths are compared
//! after resolving symlinks and `..`, so neither leads out of a configured
//! repository. [`allowed_repo`] is the one place that decides.
//!
//! A diff runs no program the repository's configuration names (an agent
//! can write that configuration through its worktree): no external diff,
//! no textconv filter. Nothing a worker reported reaches git unchecked: the branch must be a
//! branch name by git's rules and the commits full object ids
//! (`shepherd_core::cmdline`, [`RunWorkspace::check`]), and every revision
//! follows `--end-of-options`.

use std::path::{Path, PathBuf};

use shepherd_core::model::RunWorkspace;
use shepherd_core::Error;
use shepherd_protocol::LinkRunDiff;

use crate::worktree::git_raw as git;

/// Why a recorded repository is not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoRefusal {
    /// No configured agent names it.
    NotAllowed,
    /// A configured agent names it, but it is not on this host any more
    /// (moved or deleted).
    Gone,
}

/// The directory to run git in for a recorded repository, `recorded`: its
/// canonical path, when it is one of the `allowed` repositories. A path
/// that does not resolve is `Gone` only when it is literally a configured
/// one, so an answer never tells a worker whether some other path exists.
pub fn allowed_repo(allowed: &[PathBuf], recorded: &Path) -> Result<PathBuf, RepoRefusal> {
    // A relative path would be read against the server's own directory.
    if !recorded.is_absolute() {
        return Err(RepoRefusal::NotAllowed);
    }
    match std::fs::canonicalize(recorded) {
        Ok(real) => {
            if allowed
                .iter()
                .any(|a| std::fs::canonicalize(a).is_ok_and(|a| a == real))
            {
                Ok(real)
            } else {
                Err(RepoRefusal::NotAllowed)
            }
        }
        Err(_) if allowed.iter().any(|a| a == recorded) => Err(RepoRefusal::Gone),
        Err(_) => Err(RepoRefusal::NotAllowed),
    }
}

/// The diff of run `run_id`'s branch against the commit it started from,
/// read from its repository when `allowed` names it.
pub async fn read_diff(
    allowed: &[PathBuf],
    run_id: &str,
    ws: &RunWorkspace,
) -> Result<LinkRunDiff, Error> {
    // Recorded before reports were checked, a workspace may still hold
    // what git would read as an option.
    ws.check()
        .map_err(|why| Error::invalid("invalid_workspace", format!("run {run_id}: {why}")))?;
    let repo = ws.repo.clone().unwrap_or_default();
    let gone = || {
        Error::conflict(
            "workspace_repo_gone",
            format!("the repository {repo:?} of run {run_id} is not on its host (moved, deleted, or on another machine)"),
        )
    };
    if repo.is_empty() {
        return Err(gone());
    }
    let repo_path = match allowed_repo(allowed, Path::new(&repo)) {
        Ok(p) => p,
        Err(RepoRefusal::Gone) => return Err(gone()),
        Err(RepoRefusal::NotAllowed) => {
            let why = format!(
                "the repository {repo:?} of run {run_id} is not one a configured agent of its host \
                 works in (agents.NAME.repo): diffs are read only from those"
            );
            return Err(Error::forbidden("workspace_repo_not_allowed", why));
        }
    };
    let repo_path = repo_path.as_path();
    if !repo_path.is_dir() || git(repo_path, &["rev-parse", "--git-dir"]).await.is_err() {
        return Err(gone());
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
            "--no-textconv",
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
            "--no-textconv",
            "--stat",
            "--end-of-options",
            &range,
            "--",
        ],
    )
    .await
    .map_err(failed)?;
    Ok(LinkRunDiff { head, stat, diff })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configured_repositories_resolve_symlinks_and_dots_included() {
        let dir = std::env::temp_dir().join(format!("shepherd-repos-{}", std::process::id()));
        let (repo, other) = (dir.join("repo"), dir.join("other"));
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&repo, dir.join("link")).unwrap();
        std::os::unix::fs::symlink(&other, repo.join("escape")).unwrap();
        let allowed = vec![repo.clone()];
        let real = std::fs::canonicalize(&repo).unwrap();
        assert_eq!(allowed_repo(&allowed, &repo), Ok(real.clone()));
        assert_eq!(allowed_repo(&allowed, &dir.join("link")), Ok(real.clone()));
        assert_eq!(
            allowed_repo(&allowed, &repo.join("sub").join("..")),
            Ok(real)
        );
        for refused in [
            other.clone(),
            repo.join("escape"),
            repo.join("sub"),
            repo.join(".."),
            dir.join("missing"),
            PathBuf::from("repo"),
            PathBuf::from("/"),
        ] {
            assert_eq!(
                allowed_repo(&allowed, &refused),
                Err(RepoRefusal::NotAllowed),
                "{refused:?}"
            );
        }
        // Allowed through a symlinked configuration too.
        assert!(allowed_repo(&[dir.join("link")], &repo).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(allowed_repo(&allowed, &repo), Err(RepoRefusal::Gone));
        assert_eq!(allowed_repo(&allowed, &other), Err(RepoRefusal::NotAllowed));
    }
}
