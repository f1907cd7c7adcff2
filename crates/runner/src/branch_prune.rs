//! Deleting the branches worktree runs left behind, on the host whose disk
//! holds their repositories: `shepherd prune --branches-older-than` on the
//! server's machine, and a runner's host when the server asks over its link.
//! Which branches is decided by the runs' records; what may be deleted is
//! decided here, by the host: only `shepherd/*` branches with well-formed
//! names, only in a repository one of *its* agents names
//! (`workspace_diff::allowed_repo`), always after `--end-of-options`.

use std::path::{Path, PathBuf};

use shepherd_protocol::{BranchToPrune, KeptBranch, PruneBranchesReport};

use crate::workspace_diff::{allowed_repo, RepoRefusal};
use crate::worktree::git_raw;

/// Deletes each branch it may; says which it removed and which it kept.
pub async fn prune_branches(
    repos: &[PathBuf],
    branches: Vec<BranchToPrune>,
) -> PruneBranchesReport {
    let mut report = PruneBranchesReport::default();
    for b in branches {
        let keep = |reason: String| KeptBranch {
            branch: b.clone(),
            reason,
        };
        if !b.branch.starts_with("shepherd/")
            || shepherd_core::cmdline::check_branch_name(&b.branch).is_err()
        {
            report.kept.push(keep("not a branch Shepherd makes".into()));
            continue;
        }
        let repo = match allowed_repo(repos, Path::new(&b.repo)) {
            Ok(p) => p,
            // Gone: nothing to delete.
            Err(RepoRefusal::Gone) => continue,
            Err(RepoRefusal::NotAllowed) => {
                report
                    .kept
                    .push(keep("not the repository of a configured agent".into()));
                continue;
            }
        };
        let head = format!("refs/heads/{}", b.branch);
        let verify = [
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &head,
        ];
        if git_raw(&repo, &verify).await.is_err() {
            // Deleted by hand or by an earlier prune.
            continue;
        }
        match git_raw(&repo, &["branch", "-D", "--end-of-options", &b.branch]).await {
            Ok(_) => report.removed.push(b),
            Err(e) => report.kept.push(keep(e)),
        }
    }
    report
}
