//! Hosts: where work lives (server nodes, and runners' machines that
//! registered themselves), their list, a runner's registration and its
//! heartbeat.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use shepherd_core::status::HostKind;

/// How much a host may take on, and how much it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HostCapacity {
    /// Runs it may hold at once (its agents' limits summed); null: not
    /// declared.
    pub slots: Option<i64>,
    /// Runs its workers hold now.
    pub running: i64,
}

/// A host as `GET /api/v1/hosts` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HostView {
    pub id: String,
    pub name: String,
    pub kind: HostKind,
    /// Seen within one heartbeat timeout.
    pub online: bool,
    pub last_seen_at: String,
    pub registered_at: String,
    /// The agents it runs.
    pub agents: Vec<String>,
    /// Where its sessions may live; null: it hosts none.
    pub sessions_root: Option<String>,
    /// How many sessions it holds.
    pub sessions: i64,
    pub capacity: HostCapacity,
    /// A server node's advertised URL; null for a runner, which is reached
    /// only through the connection it opens itself.
    pub address: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HostList {
    pub hosts: Vec<HostView>,
}

/// What a runner says about its host when it registers it.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct RegisterHostBody {
    /// The id it had before (kept in its data directory); a new one is
    /// made when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A name for people (the machine's host name, say); the id when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where its sessions may live (absolute); absent: it hosts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions_root: Option<String>,
    /// The agents it runs.
    #[serde(default)]
    pub agents: Vec<String>,
    /// Runs it may hold at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<i64>,
    /// Registering an `id` that is already a host's: the token that host
    /// was last given, proving this is the same runner come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_token: Option<String>,
    /// Admins only: take over an existing host without its token (its
    /// runner moved, or lost its data directory). The host's current link
    /// is closed and its old token stops working.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
    /// A new host registered by a non-admin: the server's
    /// `host_enrollment_token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enrollment_token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RegisterHostResponse {
    pub host: HostView,
    /// The host's own bearer token, shown once: it may only say the host is
    /// there and serve the host's own sessions. Registering again replaces it.
    pub host_token: String,
    pub heartbeat_interval_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HostHeartbeatResponse {
    pub host: HostView,
}

/// A message on a host's link: the one WebSocket a runner's host opens to
/// the server (`GET /api/v1/hosts/{id}/link`), which carries every request
/// the server has for that host and every answer, each paired by `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LinkMessage {
    /// The server asks the host something.
    Request { id: u64, request: LinkRequest },
    /// The host answers the request with that `id`.
    Reply { id: u64, reply: LinkReply },
    /// Server to host: the client of an attached tab's stream left.
    Detach { stream: u64 },
    /// Host to server: nothing more follows on this stream (its process
    /// ended, or the tab was removed).
    StreamEnd { stream: u64 },
    /// Host to server: something the server records.
    Event { event: HostEvent },
}

/// What a host tells the server without being asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HostEvent {
    /// The PTY tabs whose process is running on the host, sent each time
    /// its link opens (the server stops those it no longer knows).
    Live { tabs: Vec<LiveTab> },
    /// A tab's process ended by itself.
    TabExited {
        session_id: String,
        worker_id: String,
        epoch: i64,
        exit_code: Option<i64>,
        signal: Option<i32>,
    },
}

/// A tab whose process runs on a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct LiveTab {
    pub session_id: String,
    pub worker_id: String,
}

/// A PTY tab as the host that holds it needs to know it (the server keeps
/// the records and sends what a start needs each time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HostTab {
    pub session_id: String,
    pub worker_id: String,
    /// `terminal` or `agent`.
    pub kind: String,
    pub agent_id: Option<String>,
    /// The session's location on the host (checked again before a start).
    pub location: String,
}

/// Why a tab's process is started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum TabStartReason {
    /// A new tab.
    New,
    /// A person restarted it (its old process, if any, is ended first).
    Restart { mode: crate::RestartMode },
}

/// How a tab's last process ended, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TabExit {
    pub exit_code: Option<i64>,
    pub signal: Option<i32>,
}

/// What an attach does when the host has no process for the tab (it
/// restarted since): what the records say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TabRestore {
    /// The epoch a restored process starts (the recorded one plus one).
    pub epoch: i64,
    /// The last recorded process, whose leftovers are ended first.
    pub last_pid: Option<i64>,
    /// Recorded as ended by itself: shown ended, not restored.
    pub exited: Option<TabExit>,
}

/// Where an attaching client's history resumes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ResumePoint {
    pub offset: u64,
    pub epoch: i64,
}

/// What the server may ask of a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum LinkRequest {
    /// The diff of a worktree run whose repository is on the host: the
    /// host reads it only from a repository one of its agents names.
    RunDiff {
        run_id: String,
        workspace: shepherd_core::model::RunWorkspace,
    },
    /// Check a new session's location against the host's sessions root;
    /// answers the directory it leads to.
    SessionLocation { path: String },
    /// Start a tab's process (a new tab, or a restart).
    TabStart {
        tab: HostTab,
        epoch: i64,
        reason: TabStartReason,
    },
    /// Attach `stream` to a tab, restoring its process first when the host
    /// has none; the host then sends the tab's frames on `stream`.
    TabAttach {
        stream: u64,
        tab: HostTab,
        resume: Option<ResumePoint>,
        restore: TabRestore,
    },
    /// End a tab's processes (every tab of the session when `worker_id` is
    /// absent); `forget` also deletes their scrollback.
    TabStop {
        session_id: String,
        worker_id: Option<String>,
        forget: bool,
    },
    /// A `git-diff` tab: the diff and status of the session's location.
    SessionDiff { location: String },
    /// Delete branches worktree runs made on the host (only `shepherd/*`
    /// branches of repositories its own agents name).
    PruneBranches { branches: Vec<BranchToPrune> },
}

/// A branch a worktree run made, to be deleted where its repository is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchToPrune {
    pub repo: String,
    pub branch: String,
    /// The run that last used it.
    pub run_id: String,
}

/// `POST /api/v1/hosts/{id}/prune_branches`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneBranchesBody {
    pub branches: Vec<BranchToPrune>,
}

/// A branch left in place, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct KeptBranch {
    pub branch: BranchToPrune,
    pub reason: String,
}

/// What a prune of branches did on one host.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
pub struct PruneBranchesReport {
    pub removed: Vec<BranchToPrune>,
    /// Refused (not a branch Shepherd makes, not an agent's repository) or
    /// failed; a branch already gone is in neither list.
    pub kept: Vec<KeptBranch>,
}

/// A host's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum LinkReply {
    RunDiff(LinkRunDiff),
    /// The directory a session's location leads to.
    Location {
        path: String,
    },
    /// The tab's new process.
    TabStarted {
        pid: i64,
    },
    /// The stream is attached; `restored_pid` is the process the attach
    /// started, if it had to.
    TabAttached {
        restored_pid: Option<i64>,
    },
    GitDiff(crate::GitDiff),
    Pruned(PruneBranchesReport),
    /// Done, nothing to say.
    Done,
    /// Refused or failed, as the API would answer it.
    Failed {
        status: u16,
        code: String,
        message: String,
    },
}

/// A run's diff as the host read it (the server adds the run and its
/// workspace).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct LinkRunDiff {
    pub head: String,
    pub stat: String,
    pub diff: String,
}
