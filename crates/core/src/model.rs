//! Records: tasks, workers, claims, runs and agents as the system knows
//! them. The stores produce them, the HTTP layer serialises them and the CLI
//! reads them back, so the JSON shape is defined once, here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::{serde_ms, Millis};

/// A unit of work (the connector contract's VTID).
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Task {
    pub vtid: String,
    pub title: String,
    pub spec: String,
    pub priority: i64,
    pub capabilities: Vec<String>,
    pub agent_id: Option<String>,
    pub channel_id: Option<String>,
    pub workflow: String,
    pub state: String,
    pub spec_snapshot_id: Option<String>,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub dispatched_at: Option<Millis>,
    /// The worker that last built it; it may not validate its own work.
    pub builder_worker_id: Option<String>,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub cancel_requested_at: Option<Millis>,
    pub attempts: i64,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub created_at: Millis,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub updated_at: Millis,
    /// The conversation whose message this task answers, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Attempts in all before the task ends `failed`; absent: one, and a
    /// lapsed claim puts the task back in the queue without counting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i64>,
    /// The wait between attempts (with `max_attempts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<crate::retry::RetryBackoff>,
    /// Not claimable before this instant: a delayed task, or the next
    /// attempt after a failure.
    #[serde(
        default,
        with = "serde_ms::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub run_at: Option<Millis>,
    /// Every attempt that failed, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<crate::retry::AttemptFailure>,
}

/// The claim's `conversation` object (the conversations contract): a follow-up continues the
/// agent's own conversation when it can.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct ClaimConversation {
    pub conversation_id: String,
    pub resource_id: String,
    /// The agent's own id for this conversation, captured from its output.
    pub agent_session_id: Option<String>,
    /// The new user message alone (the spec also holds the earlier turns).
    pub message: String,
    /// 1 for the conversation's first message.
    pub turn: i64,
}

/// A lease of one task by one worker.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Claim {
    pub id: String,
    pub vtid: String,
    pub worker_id: String,
    pub run_id: String,
    /// `build` or `validate`.
    pub purpose: crate::status::ClaimPurpose,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub claimed_at: Millis,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub expires_at: Millis,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub released_at: Option<Millis>,
    pub release_reason: Option<String>,
}

/// A registered worker (the connector contract's registry row, with the worker registry contract's fields).
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Worker {
    pub worker_id: String,
    pub agent_id: String,
    pub worker_type: String,
    pub name: Option<String>,
    pub project_path: Option<String>,
    pub session_id: Option<String>,
    pub terminal_id: Option<String>,
    pub capabilities: Vec<String>,
    pub max_concurrent: i64,
    /// Registry status: `active | inactive | terminated`.
    pub status: crate::status::WorkerStatus,
    #[schema(value_type = Object)]
    pub metadata: Value,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub registered_at: Millis,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub last_heartbeat_at: Millis,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub last_activity_at: Option<Millis>,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub closed_at: Option<Millis>,
    /// Claims it holds now.
    pub active_claims: i64,
    /// The host it runs on, when its runner registered as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
}

/// A place work lives: a server node, or a runner's machine that registered
/// itself. Whether it is online is the reader's judgement of `last_seen_at`
/// against the heartbeat timeout; nothing is written when a host goes quiet.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Host {
    pub id: String,
    pub name: String,
    pub kind: crate::status::HostKind,
    /// A server node's advertised URL; none for a runner (it is reached only
    /// through the connection it opens).
    pub address: Option<String>,
    /// Where its sessions may live; none: it hosts no sessions.
    pub sessions_root: Option<String>,
    /// The agents it runs.
    pub agents: Vec<String>,
    /// How many runs it may hold at once (its agents' limits summed); none:
    /// not declared.
    pub slots: Option<i64>,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub registered_at: Millis,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub last_seen_at: Millis,
    /// Sessions it holds.
    pub sessions: i64,
    /// Runs its workers hold now.
    pub running: i64,
    /// A runner's host: the server node it last opened its link to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_node: Option<String>,
}

/// A configured kind of worker.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Agent {
    pub id: String,
    pub worker_type: String,
    pub capabilities: Vec<String>,
    pub max_concurrent: Option<i64>,
    /// `config` or `registration`.
    pub source: String,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub created_at: Millis,
    /// Runs of this agent now running.
    pub running: i64,
}

/// One execution of a task by a worker (the Workers page contract's `worker_runs` row).
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Run {
    pub id: String,
    pub vtid: String,
    /// The task's title.
    pub task: String,
    pub channel_id: Option<String>,
    pub channel_name: Option<String>,
    pub worker_id: String,
    pub agent_id: String,
    pub worker_type: String,
    pub attempt: i64,
    pub purpose: crate::status::ClaimPurpose,
    /// `running | done | failed | cancelled`.
    pub status: crate::status::RunStatus,
    pub result: Option<String>,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub started_at: Millis,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub completed_at: Option<Millis>,
    pub live_status: Option<String>,
    pub tool_calls: i64,
    pub active_tool: Option<String>,
    pub step_count: i64,
    pub has_transcript: bool,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub cancel_requested_at: Option<Millis>,
    /// The conversation this run replies in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Tokens and cost the agent reported; `None` until it reports any.
    #[serde(default)]
    pub usage: Option<crate::usage::Usage>,
    /// The git worktree branch the run worked on (worktree agents only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<RunWorkspace>,
    /// Input requests of this run waiting for a person (its `live_status`
    /// says for what).
    #[serde(default)]
    pub pending_input: i64,
}

/// Where a worktree run did its work: a branch of `repo` made from `base`.
/// The branch is kept after the run, so its diff against `base_commit` is
/// the run's work.
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct RunWorkspace {
    pub branch: String,
    /// The ref the branch was made from, as configured.
    pub base: String,
    /// The commit the branch started from.
    pub base_commit: String,
    /// The branch's last commit; known once the run has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The repository on the runner's host; the server reads diffs from it
    /// when it is on the same host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
}

impl RunWorkspace {
    /// Checks what reaches git when the server reads the run's diff: the
    /// branch is a branch name by git's rules, `base_commit` and `head` are
    /// full object ids (see [`crate::cmdline`]). The reason, when refused.
    pub fn check(&self) -> Result<(), String> {
        crate::cmdline::check_branch_name(&self.branch)
            .map_err(|why| format!("workspace.branch {:?}: {why}", self.branch))?;
        let commits = std::iter::once(("base_commit", Some(&self.base_commit)))
            .chain(std::iter::once(("head", self.head.as_ref())));
        for (key, value) in commits {
            if let Some(v) = value.filter(|v| !crate::cmdline::is_object_id(v)) {
                return Err(format!(
                    "workspace.{key} {v:?}: a full git object id (40 or 64 hex digits)"
                ));
            }
        }
        Ok(())
    }
}

/// A channel (the conversations contract's resource, the Workers page contract's `channel_id`): what runs and
/// conversations belong to.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct Channel {
    pub id: String,
    /// Display name, e.g. `#general`.
    pub name: String,
    #[serde(with = "serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub created_at: Millis,
    #[serde(with = "serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub archived_at: Option<Millis>,
    /// Runs that belong to it.
    pub runs: i64,
}
