//! `shepherd prune --branches-older-than AGE`: deletes the `shepherd/*`
//! branches worktree runs left in their repositories once the runs that used
//! them ended longer ago than AGE. The runs' recorded workspaces say which
//! branch of which repository each run made, so only branches Shepherd made
//! are touched; a branch a conversation still works on (a running run) is
//! kept. The run rows keep their workspace record, and the diff route
//! answers `workspace_branch_gone` for them afterwards.
//!
//! The recorded workspaces are what workers reported, so only repositories
//! a configured agent names are touched (the rule of the diff route,
//! `shepherd_runner::workspace_diff`), only well-formed branch names are
//! given to git, and always after `--end-of-options`.

use std::collections::BTreeMap;
use std::path::Path;

use shepherd_core::time::{to_rfc3339, Millis};
use shepherd_runner::workspace_diff::{allowed_repo, RepoRefusal};

use super::Result;

fn git(repo: &Path, args: &[&str]) -> std::result::Result<String, String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// The branch's last use: `None` while a run on it is still running.
struct Use {
    ended: Option<Millis>,
    running: bool,
    run_id: String,
}

/// Deletes the branches of runs that ended before `cutoff`; prints each one
/// it removed and each it could not.
pub async fn prune(
    store: &shepherd_store::Store,
    repos: &[std::path::PathBuf],
    cutoff: Millis,
) -> Result<()> {
    let mut uses: BTreeMap<(String, String), Use> = BTreeMap::new();
    for (run_id, status, ended, w) in store.run_workspaces().await? {
        let Some(repo) = w.repo.clone() else { continue };
        if !w.branch.starts_with("shepherd/")
            || shepherd_core::cmdline::check_branch_name(&w.branch).is_err()
        {
            continue;
        }
        let u = uses.entry((repo, w.branch.clone())).or_insert(Use {
            ended: None,
            running: false,
            run_id: run_id.clone(),
        });
        if status == "running" {
            u.running = true;
        }
        if ended > u.ended {
            u.ended = ended;
            u.run_id = run_id;
        }
    }
    let (mut removed, mut failed) = (0, 0);
    for ((repo, branch), u) in uses {
        let Some(ended) = u.ended.filter(|e| !u.running && *e < cutoff) else {
            continue;
        };
        let repo_path = match allowed_repo(repos, Path::new(&repo)) {
            Ok(p) => p,
            // Gone: nothing to delete.
            Err(RepoRefusal::Gone) => continue,
            Err(RepoRefusal::NotAllowed) => {
                println!(
                    "kept branch {branch} in {repo}: not the repository of a configured agent"
                );
                continue;
            }
        };
        let repo_path = repo_path.as_path();
        let exists = git(
            repo_path,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                &format!("refs/heads/{branch}"),
            ],
        );
        if exists.is_err() {
            // Deleted by hand or by an earlier prune, or the repository is gone.
            continue;
        }
        match git(repo_path, &["branch", "-D", "--end-of-options", &branch]) {
            Ok(_) => {
                removed += 1;
                println!(
                    "removed branch {branch} from {repo} (run {}, ended {})",
                    u.run_id,
                    to_rfc3339(ended)
                );
            }
            Err(e) => {
                failed += 1;
                println!("kept branch {branch} in {repo}: {e}");
            }
        }
    }
    println!(
        "pruned {removed} branches{}",
        if failed > 0 {
            format!(" ({failed} could not be deleted)")
        } else {
            String::new()
        }
    );
    Ok(())
}
