//! What a run directory keeps for the next runner with the same data
//! directory: `run.json` (the assignment and where the run started, written
//! before the shim starts) and `reader.json` (how far this runner read the
//! agent's output and what it had not yet delivered, written when it leaves
//! the agent running under its shim).
//!
//! Both are read back by a runner that starts after a restart
//! ([`super::adopt`]), possibly a newer build than the one that wrote them:
//! a field added later needs `#[serde(default)]` (as `skip_steps` and
//! `workspace` have) so that what an older runner left still reads.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use shepherd_core::usage::Usage;

use super::Assignment;
use crate::shim::RunFiles;
use crate::worktree::Workspace;

/// How far a runner had read a run when it left, and what it had not yet
/// delivered: the next runner with the same data directory carries on from
/// exactly there, so no line of the agent's output is read twice or lost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct ReaderState {
    pub(super) out_offset: u64,
    pub(super) err_offset: u64,
    pub(super) delivered: u64,
    pub(super) session_id: Option<String>,
    pub(super) usage: Option<Usage>,
    pub(super) usage_total: Usage,
    pub(super) result: Option<String>,
    pub(super) progress: Vec<(String, Option<String>, Value)>,
    pub(super) status: Option<String>,
    pub(super) out_tail: String,
    pub(super) err_tail: String,
    /// Steps the adapter makes again before it reaches new output: those
    /// already in the spool when the output is read again from its start.
    #[serde(default)]
    pub(super) skip_steps: u64,
}

/// What a run directory's `run.json` holds: the assignment, and what the
/// next runner needs to carry the run on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedRun {
    pub agent: String,
    pub worker_id: String,
    pub assignment: Assignment,
    /// Wall-clock start (ms), so the agent's timeout spans a restart.
    pub started_ms: u64,
    #[serde(default)]
    pub workspace: Option<SavedWorkspace>,
}

/// A worktree run's workspace, with the paths [`Workspace`] does not serialize.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedWorkspace {
    pub branch: String,
    pub base: String,
    pub base_commit: String,
    pub path: PathBuf,
    pub repo: PathBuf,
}

impl SavedWorkspace {
    pub(super) fn of(w: &Workspace) -> SavedWorkspace {
        SavedWorkspace {
            branch: w.branch.clone(),
            base: w.base.clone(),
            base_commit: w.base_commit.clone(),
            path: w.path.clone(),
            repo: w.repo.clone(),
        }
    }

    pub(super) fn workspace(&self) -> Workspace {
        Workspace {
            branch: self.branch.clone(),
            base: self.base.clone(),
            base_commit: self.base_commit.clone(),
            head: None,
            path: self.path.clone(),
            repo: self.repo.clone(),
        }
    }
}

impl SavedRun {
    pub fn load(run: &RunFiles) -> Option<SavedRun> {
        let text = std::fs::read_to_string(run.path("run.json")).ok()?;
        serde_json::from_str(&text).ok()
    }
}
