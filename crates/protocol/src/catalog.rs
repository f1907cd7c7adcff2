//! Read-only catalogues and small resources: workflows, agents, channels,
//! health.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use shepherd_core::model::{Agent, Channel};
use shepherd_core::workflow::{Transition, Workflow};

/// One row of a workflow's transition table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct TransitionInfo {
    pub event_types: Vec<String>,
    /// States this applies from; `["*"]` means every non-final state.
    pub from_states: Vec<String>,
    pub to_state: String,
    /// An action the server performs on entering `to_state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_action: Option<String>,
    pub description: String,
}

/// A workflow: its states and its transition table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkflowInfo {
    pub name: String,
    pub draft_state: String,
    pub dispatched_state: String,
    pub claimed_state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_state: Option<String>,
    pub final_states: Vec<String>,
    pub states: Vec<String>,
    pub transitions: Vec<TransitionInfo>,
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

impl From<&Transition> for TransitionInfo {
    fn from(t: &Transition) -> Self {
        TransitionInfo {
            event_types: strings(t.event_types),
            from_states: strings(t.from_states),
            to_state: t.to_state.into(),
            trigger_action: t.trigger_action.map(String::from),
            description: t.description.into(),
        }
    }
}

impl From<&Workflow> for WorkflowInfo {
    fn from(w: &Workflow) -> Self {
        WorkflowInfo {
            name: w.name.into(),
            draft_state: w.draft_state.into(),
            dispatched_state: w.dispatched_state.into(),
            claimed_state: w.claimed_state.into(),
            review_state: w.review_state.map(String::from),
            final_states: strings(w.final_states),
            states: strings(w.states),
            transitions: w.transitions.iter().map(TransitionInfo::from).collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WorkflowList {
    pub workflows: Vec<WorkflowInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct AgentList {
    pub agents: Vec<Agent>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelBody {
    pub id: String,
    /// Display name, e.g. `#general`.
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ChannelListQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_archived: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ChannelList {
    pub channels: Vec<Channel>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct Ready {
    pub status: String,
    /// `sqlite` or `postgres`.
    pub database: String,
}
