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

use shepherd_client::Client;
use shepherd_core::status::HostKind;
use shepherd_core::time::{to_rfc3339, Millis};
use shepherd_protocol::{BranchToPrune, PruneBranchesBody, PruneBranchesReport};
use shepherd_runner::branch_prune::prune_branches;

use super::Result;

/// The branch's last use: `None` while a run on it is still running.
struct Use {
    ended: Option<Millis>,
    running: bool,
    run_id: String,
    /// Where its repository is: a runner's host, or this machine (none).
    runner_host: Option<String>,
}

/// Deletes the branches of runs that ended before `cutoff`, on this machine
/// and, through the server at `server`, on every runner's host the server
/// has a link to; prints each one it removed and each it kept.
pub async fn prune(
    store: &shepherd_store::Store,
    repos: &[std::path::PathBuf],
    server: Option<Client>,
    cutoff: Millis,
) -> Result<()> {
    let runners: BTreeMap<String, bool> = store
        .list_hosts()
        .await?
        .into_iter()
        .map(|h| (h.id, h.kind == HostKind::Runner))
        .collect();
    let mut uses: BTreeMap<(String, String), Use> = BTreeMap::new();
    for row in store.run_workspaces().await? {
        let w = row.workspace;
        let Some(repo) = w.repo.clone() else { continue };
        if !w.branch.starts_with("shepherd/") {
            continue;
        }
        let runner_host = row
            .host_id
            .filter(|h| runners.get(h).copied().unwrap_or(false));
        let u = uses.entry((repo, w.branch.clone())).or_insert(Use {
            ended: None,
            running: false,
            run_id: row.run_id.clone(),
            runner_host: runner_host.clone(),
        });
        if row.status == "running" {
            u.running = true;
        }
        if row.ended > u.ended {
            u.ended = row.ended;
            u.run_id = row.run_id;
            u.runner_host = runner_host;
        }
    }
    // Each branch goes to the host its last run's repository is on.
    let mut by_host: BTreeMap<Option<String>, Vec<(BranchToPrune, Millis)>> = BTreeMap::new();
    for ((repo, branch), u) in uses {
        let Some(ended) = u.ended.filter(|e| !u.running && *e < cutoff) else {
            continue;
        };
        let b = BranchToPrune {
            repo,
            branch,
            run_id: u.run_id,
        };
        by_host.entry(u.runner_host).or_default().push((b, ended));
    }
    let (mut removed, mut kept) = (0, 0);
    for (host, branches) in by_host {
        let ended: BTreeMap<String, Millis> = branches
            .iter()
            .map(|(b, e)| (b.run_id.clone(), *e))
            .collect();
        let list: Vec<BranchToPrune> = branches.into_iter().map(|(b, _)| b).collect();
        let where_ = host
            .as_deref()
            .map(|h| format!(" on host {h}"))
            .unwrap_or_default();
        let report = match &host {
            None => prune_branches(repos, list).await,
            Some(h) => match ask(server.as_ref(), h, list).await {
                Ok(r) => r,
                Err(why) => {
                    println!("kept the branches on host {h}: {why}");
                    continue;
                }
            },
        };
        for b in &report.removed {
            removed += 1;
            let when = ended
                .get(&b.run_id)
                .map(|e| to_rfc3339(*e))
                .unwrap_or_default();
            println!(
                "removed branch {} from {}{where_} (run {}, ended {when})",
                b.branch, b.repo, b.run_id
            );
        }
        for k in &report.kept {
            kept += 1;
            println!(
                "kept branch {} in {}{where_}: {}",
                k.branch.branch, k.branch.repo, k.reason
            );
        }
    }
    println!(
        "pruned {removed} branches{}",
        if kept > 0 {
            format!(" ({kept} kept)")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Asks the server to have runner host `host` delete `branches`.
async fn ask(
    server: Option<&Client>,
    host: &str,
    branches: Vec<BranchToPrune>,
) -> std::result::Result<PruneBranchesReport, String> {
    let server = server.ok_or("no server to reach it through")?;
    server
        .prune_host_branches(host, &PruneBranchesBody { branches })
        .await
        .map_err(|e| e.to_string())
}
