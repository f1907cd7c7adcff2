//! The sessions contract's sessions over REST: workspaces, their tabs, and the
//! `git-diff` tab's diff.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// Defaults to the directory's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An existing directory on the host, inside `SHEPHERD_SESSIONS_ROOT` when set.
    pub location_path: String,
    /// The host the session lives on (an id from `GET /api/v1/hosts`): a
    /// runner's host holds its PTYs itself. Default: the server node that
    /// received the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddWorker {
    /// `agent`, `terminal` or `git-diff`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For `agent`: the name of an `[agents.*]` entry with an `interactive_command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
}

/// `restart`'s mode: a fresh process, or the agent's `continue_args`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RestartMode {
    New,
    Continue,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartWorker {
    /// `new` starts afresh; `continue` adds the agent's `continue_args`.
    pub mode: RestartMode,
}

/// One tab of a session: a PTY (`agent`, `terminal`) or `git-diff`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionWorker {
    pub id: String,
    /// `agent`, `terminal` or `git-diff`.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub agent_id: Option<String>,
    pub created_at: String,
    /// The latest process's pid (PTY tabs).
    pub pid: Option<i64>,
    /// Whether that process runs now (a stopped tab is restored when a client attaches).
    pub alive: bool,
    /// Changes with each new process of the tab.
    pub epoch: i64,
    /// Set when the process ended by itself while the server was up.
    pub exit_code: Option<i64>,
    pub exited_at: Option<String>,
}

/// A workspace with its tabs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct Session {
    pub id: String,
    pub name: String,
    pub location_path: String,
    pub created_at: String,
    /// The node that hosts the session's processes.
    pub node_id: String,
    pub node_address: Option<String>,
    pub workers: Vec<SessionWorker>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SessionList {
    pub sessions: Vec<Session>,
    pub count: usize,
}

/// The body of a 409 `session_on_other_node`, besides `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct OtherNode {
    pub node_id: String,
    /// Where the hosting node is reached, when it said.
    pub address: Option<String>,
}

/// The body of a 503 `host_offline` for a session on a runner's host,
/// besides `error`: which host, and when it was last heard from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct HostOffline {
    pub host_id: String,
    pub host_name: String,
    pub last_seen_at: String,
}

/// What `git-diff` tabs show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct GitDiff {
    /// `git diff` of the location.
    pub diff: String,
    /// `git status --porcelain` of the location.
    pub status: String,
}
