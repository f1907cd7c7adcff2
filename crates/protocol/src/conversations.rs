//! The conversations contract's resources and conversations: the list, one conversation with
//! its messages and steps, sending, cancelling, activating.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use shepherd_core::transcript::{StepsJson, TranscriptStep};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceBody {
    pub id: String,
    /// Display name.
    pub name: String,
    /// The agent its conversations talk to.
    pub agent_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ResourceInfo {
    pub id: String,
    pub name: String,
    pub agent_id: Option<String>,
    pub created_at: String,
    pub archived_at: Option<String>,
    pub active_conversation_id: Option<String>,
    pub processing_conversation_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ResourceList {
    pub resources: Vec<ResourceInfo>,
}

/// A conversation as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ConversationInfo {
    pub id: String,
    pub resource_id: String,
    /// `idle | processing | cancelled`.
    pub state: String,
    /// Whether it is the resource's active conversation.
    pub active: bool,
    pub created_at: String,
    pub updated_at: String,
    /// User messages so far.
    pub messages: i64,
    /// The agent's own conversation id, captured from its output.
    pub agent_session_id: Option<String>,
    /// What it is about: the first line of its first message (at most 80
    /// characters); null before the first message.
    pub title: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ConversationPage {
    pub conversations: Vec<ConversationInfo>,
    /// Pass as `page` for the next (older) page; null on the last.
    pub next: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ConversationsQuery {
    /// 1-200; default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// The `next` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
}

/// One entry of a conversation: a user message, or a run of the agent
/// replying to the message before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct MessageInfo {
    pub id: String,
    /// `user` or `agent`.
    pub role: String,
    /// The user's text, or the reply's result text once the run ended.
    pub text: Option<String>,
    pub run_id: Option<String>,
    /// User: `queued | sent | dropped`; agent: `running | done | failed | cancelled`.
    pub status: String,
    /// The reply's steps (the Workers page contract's `TranscriptStep`), carried as JSON
    /// text: a long conversation is sent without re-serialising each step.
    #[schema(value_type = Vec<TranscriptStep>)]
    #[schemars(with = "Vec<TranscriptStep>")]
    pub steps: StepsJson,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct ConversationDetail {
    pub id: String,
    pub resource_id: String,
    pub state: String,
    pub active: bool,
    /// The run replying now, while processing.
    pub active_run_id: Option<String>,
    /// The event-log cursor this answer is valid at.
    pub cursor: i64,
    pub agent_session_id: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// As in the list: the first line of the first message.
    pub title: Option<String>,
    pub messages: Vec<MessageInfo>,
}

/// What to do with a message sent while the conversation is busy.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum MultitaskMode {
    /// Refuse with 409 `conversation_busy` (the default).
    #[default]
    Reject,
    /// Run it after the current run.
    Enqueue,
    /// Cancel the current run (its partial work kept), then run it.
    Interrupt,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendBody {
    pub text: String,
    #[serde(default)]
    pub multitask: MultitaskMode,
}

/// A user message as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct MessageRecord {
    pub id: String,
    pub conversation_id: String,
    /// 1 for the conversation's first message.
    pub ordinal: i64,
    pub text: String,
    /// `sent` (its run is queued or running) or `queued` (waits for the current run).
    pub status: String,
    /// The task answering it, once sent.
    pub task_id: Option<String>,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct SendResponse {
    pub message: MessageRecord,
    pub conversation: ConversationInfo,
}

// Cancelling a conversation takes the same optional `{reason}` body as
// cancelling a task: `tasks::CancelBody`.
