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
