//! A git worktree per run: agents configured with `workspace = "worktree"`
//! run in their own checkout of `repo`, on a new branch
//! `shepherd/<vtid>-<attempt>` made from `base`, so concurrent runs never
//! overwrite each other's files. When the run ends whatever the agent left
//! uncommitted is committed to the branch (nothing is lost), the worktree is
//! removed and the branch is kept for review.
//!
//! A conversation's turns share one branch, `shepherd/conversation-<id>`:
//! each turn checks it out in a worktree of its own and leaves its commits
//! there for the next.
//!
//! Worktrees live under `<data_dir>/worktrees/<run_id>`; a runner that starts
//! finds the ones a crashed predecessor left there and finishes them the
//! same way (commit, remove, keep the branch).

use std::path::{Path, PathBuf};

use serde::Serialize;
use tokio::sync::Mutex;

/// Git serialises writes to a repository's refs and worktree list with lock
/// files and fails (rather than waits) when one is held, so this process
/// makes its worktree changes one at a time.
static GIT_WRITES: Mutex<()> = Mutex::const_new(());

/// Who commits what an agent left uncommitted.
const COMMITTER: [&str; 4] = [
    "-c",
    "user.name=Shepherd",
    "-c",
    "user.email=shepherd@localhost",
];

/// The workspace of one run, as recorded on it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Workspace {
    pub branch: String,
    pub base: String,
    /// The commit the branch started from.
    pub base_commit: String,
    /// The branch's last commit; known once the run has ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    #[serde(skip)]
    pub path: PathBuf,
    /// Recorded on the run so that a server on the same host can serve the
    /// branch's diff.
    pub repo: PathBuf,
}

/// Where a runner keeps its runs' worktrees.
pub fn root(data_dir: &Path) -> PathBuf {
    data_dir.join("worktrees")
}

/// Runs git in `dir`: its stdout as it is, or its stderr (trimmed) as the
/// error. Git may run programs a repository's configuration names (hooks,
/// filters), and an agent can write that configuration: none of them gets
/// Shepherd's own secrets.
pub(crate) async fn git_raw(dir: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let inherited = std::env::vars_os().map(|(name, _)| name);
    for name in shepherd_core::secrets::inherited_settings(inherited) {
        cmd.env_remove(name);
    }
    let out = cmd
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Runs git; its trimmed stdout, or a message with its stderr.
async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    match git_raw(dir, args).await {
        Ok(out) => Ok(out.trim().to_owned()),
        Err(e) => Err(format!("git {}: {e}", args.join(" "))),
    }
}

/// Checks that `repo` is a git repository and `base` (or, without one, the
/// repository's current branch) names a commit; returns the base's name and
/// commit. Errors are the reason a run fails with.
pub async fn resolve_base(repo: &Path, base: Option<&str>) -> Result<(String, String), String> {
    if !repo.is_dir() {
        return Err(format!(
            "workspace repo {} is not a directory",
            repo.display()
        ));
    }
    git(repo, &["rev-parse", "--git-dir"])
        .await
        .map_err(|_| format!("workspace repo {} is not a git repository", repo.display()))?;
    let base = match base {
        Some(b) => b.to_owned(),
        None => git(repo, &["symbolic-ref", "--quiet", "--short", "HEAD"])
            .await
            .map_err(|_| {
                format!(
                    "workspace repo {} has no current branch (detached HEAD); set base",
                    repo.display()
                )
            })?,
    };
    let commit = git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{base}^{{commit}}"),
        ],
    )
    .await
    .map_err(|_| {
        format!(
            "workspace base {base:?} does not exist in {}",
            repo.display()
        )
    })?;
    Ok((base, commit))
}

/// The branch a run works on. Task ids may hold characters a ref cannot.
pub fn branch_name(vtid: &str, attempt: i64) -> String {
    let safe: String = vtid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("shepherd/{}-{attempt}", safe.trim_matches('.'))
}

/// The branch every turn of a conversation works on.
pub fn conversation_branch(conversation_id: &str) -> String {
    let safe: String = conversation_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("shepherd/conversation-{safe}")
}

/// Makes the worktree of one turn of a conversation. The first turn makes
/// the conversation's branch from `base`; later turns check the same branch
/// out again (the previous turn's worktree was removed when it ended, its
/// commits are on the branch), so the agent carries on from its own work.
/// `base_commit` stays where the branch left `base`, so the run's diff is
/// the whole conversation's work so far.
pub async fn create_for_conversation(
    data_dir: &Path,
    repo: &Path,
    base: Option<&str>,
    conversation_id: &str,
    run_id: &str,
) -> Result<Workspace, String> {
    let (base, base_tip) = resolve_base(repo, base).await?;
    let branch = conversation_branch(conversation_id);
    let root = root(data_dir);
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let path = root.join(run_id);
    let path_s = path.to_string_lossy().into_owned();
    let _guard = GIT_WRITES.lock().await;
    let existing = git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("refs/heads/{branch}"),
        ],
    )
    .await
    .ok();
    let base_commit = match existing {
        Some(_) => {
            // A worktree a crashed turn left is finished at start; one still
            // registered here would hold the branch, so git forgets stale ones.
            let _ = git(repo, &["worktree", "prune"]).await;
            git(
                repo,
                &["worktree", "add", "--end-of-options", &path_s, &branch],
            )
            .await?;
            git(
                repo,
                &["merge-base", "--end-of-options", &base_tip, &branch],
            )
            .await
            .unwrap_or(base_tip)
        }
        None => {
            git(
                repo,
                &[
                    "worktree",
                    "add",
                    "-b",
                    &branch,
                    "--end-of-options",
                    &path_s,
                    &base_tip,
                ],
            )
            .await?;
            base_tip
        }
    };
    Ok(Workspace {
        branch,
        base,
        base_commit,
        head: None,
        path,
        repo: repo.to_owned(),
    })
}

/// Makes the run's worktree on a new branch from `base`.
pub async fn create(
    data_dir: &Path,
    repo: &Path,
    base: Option<&str>,
    vtid: &str,
    attempt: i64,
    run_id: &str,
) -> Result<Workspace, String> {
    let (base, base_commit) = resolve_base(repo, base).await?;
    let root = root(data_dir);
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let path = root.join(run_id);
    let path_s = path.to_string_lossy().into_owned();
    let _guard = GIT_WRITES.lock().await;
    let mut branch = branch_name(vtid, attempt);
    // A branch of that name kept from an earlier life of the task (a reset
    // database) is never overwritten: this run gets its own.
    if git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("refs/heads/{branch}"),
        ],
    )
    .await
    .is_ok()
    {
        branch = format!("{branch}-{run_id}");
    }
    git(
        repo,
        &[
            "worktree",
            "add",
            "-b",
            &branch,
            "--end-of-options",
            &path_s,
            &base_commit,
        ],
    )
    .await?;
    Ok(Workspace {
        branch,
        base,
        base_commit,
        head: None,
        path,
        repo: repo.to_owned(),
    })
}

/// Commits what the agent left uncommitted in `path` (a message naming the
/// run), then removes the worktree. Returns the branch's head commit.
pub async fn finish(repo: &Path, path: &Path, message: &str) -> Result<String, String> {
    let _guard = GIT_WRITES.lock().await;
    let head = commit_leftovers(path, message).await;
    let path_s = path.to_string_lossy().into_owned();
    let removed = git(repo, &["worktree", "remove", "--force", &path_s]).await;
    if removed.is_err() && path.exists() {
        // Not a registered worktree any more (or git refuses): the directory
        // still goes, and git forgets it.
        let _ = std::fs::remove_dir_all(path);
    }
    let _ = git(repo, &["worktree", "prune"]).await;
    head
}

async fn commit_leftovers(path: &Path, message: &str) -> Result<String, String> {
    git(path, &["add", "--all"]).await?;
    let dirty = !git(path, &["status", "--porcelain"]).await?.is_empty();
    if dirty {
        let mut args: Vec<&str> = COMMITTER.to_vec();
        args.extend(["commit", "--quiet", "--no-verify", "-m", message]);
        git(path, &args).await?;
    }
    git(path, &["rev-parse", "HEAD"]).await
}

/// Finishes the worktrees a crashed runner left under `data_dir`: their
/// uncommitted changes are committed, the worktrees removed, the branches
/// kept. Returns how many it finished.
pub async fn clean_leftovers(data_dir: &Path, keep: &std::collections::HashSet<String>) -> usize {
    let Ok(entries) = std::fs::read_dir(root(data_dir)) else {
        return 0;
    };
    let mut finished = 0;
    for e in entries.flatten() {
        let path = e.path();
        if !path.is_dir() {
            continue;
        }
        let run_id = e.file_name().to_string_lossy().into_owned();
        if keep.contains(&run_id) {
            continue;
        }
        // The repository the worktree belongs to, from its own metadata.
        let repo = git(
            &path,
            &["rev-parse", "--path-format=absolute", "--git-common-dir"],
        )
        .await
        .ok()
        .map(PathBuf::from)
        .and_then(|common| common.parent().map(Path::to_owned));
        match repo {
            Some(repo) => {
                let msg = format!(
                    "Shepherd run {run_id}: changes left when its runner stopped unexpectedly"
                );
                match finish(&repo, &path, &msg).await {
                    Ok(head) => {
                        tracing::warn!(
                            run_id,
                            head,
                            "finished a worktree left by a previous runner"
                        )
                    }
                    Err(e) => {
                        tracing::warn!(run_id, error = %e, "removed a worktree left by a previous runner; its changes could not be committed")
                    }
                }
            }
            None => {
                let _ = std::fs::remove_dir_all(&path);
                tracing::warn!(
                    run_id,
                    "removed a broken worktree left by a previous runner"
                );
            }
        }
        finished += 1;
    }
    finished
}
