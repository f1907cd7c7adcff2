//! Conversations on resources (the conversations contract).
//!
//! A resource is a channel row with the agent its conversations talk to. A
//! conversation is an ordered list of user messages; the agent's reply to a
//! message is the runs of the task that message created, so a reply's steps
//! are that run's transcript. State follows the contract's machine:
//! `idle → processing` when a message is accepted, `processing → idle` when
//! the task ends, `processing → cancelled → idle` on cancel (idle only once
//! the run has really ended). The database holds the rules that matter
//! under concurrency: one processing and one active conversation per
//! resource (partial unique indexes), and a send moves a conversation out of
//! `idle` with a conditional update, so of many concurrent sends one wins.
//!
//! Every change appends an event carrying the conversation and the resource
//! (as `channel_id`); tasks and runs of a conversation carry its id too, so
//! one filter follows a whole conversation.
//!
//! The operations are split by what they act on: `resources` (the
//! channels conversations live on), `lifecycle` (a conversation's rows and
//! its state machine), `messages` (sending, queueing and starting the run
//! that answers a message) and `history` (everything persisted of a
//! conversation, as a client loads it).

mod history;
mod lifecycle;
mod messages;
mod resources;

use shepherd_core::event::EventRefs;

pub use history::{load, ConversationView, MessageView};
pub use lifecycle::{activate, cancel, create, list, Conversation};
pub(crate) use lifecycle::{note_agent_session, reported_agent_session, task_finished};
pub(crate) use messages::claim_context;
pub use messages::{send, ClaimConversation, Message, Multitask, SendOutcome};
pub use resources::{resource_list, resource_upsert, Resource};

/// The references every conversation event carries: the conversation and
/// its resource (as `channel_id`).
fn refs(c: &Conversation) -> EventRefs {
    EventRefs::default()
        .channel(Some(c.resource_id.clone()))
        .conversation(Some(c.id.clone()))
}
