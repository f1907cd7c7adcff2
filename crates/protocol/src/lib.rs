//! The wire: every request body, query, response body and event payload of
//! Shepherd's HTTP API, as types.
//!
//! This crate is the single source of the JSON shapes. The server (`api`)
//! builds its responses from these types and nothing else; the client crate
//! parses responses into them; the OpenAPI document and the JSON Schemas
//! (for MCP tool outputs) are generated from their derives. The records the
//! domain already defines (tasks, claims, runs, workers, agents, channels,
//! events, transcript steps) are re-exported from `shepherd-core`, where
//! they also derive their schemas.
//!
//! Field names and values are the contracts' exactly (docs/contracts.md); a golden test
//! (`crates/shepherd/tests/golden.rs`) pins the JSON of every contract route.

pub mod catalog;
pub mod connector;
pub mod conversations;
pub mod error;
pub mod events;
pub mod hosts;
pub mod input;
pub mod link_stream;
pub mod pty;
pub mod runs;
pub mod sessions;
pub mod tasks;
pub mod usage;
pub mod users;
pub mod webhooks;
pub mod workers;

pub use shepherd_core::event::{Event, EventRefs};
pub use shepherd_core::model::{Agent, Channel, Claim, ClaimConversation, Host, Run, Task, Worker};
pub use shepherd_core::status::{
    ClaimPurpose, EventState, HostKind, RunStatus, SessionStatus, WorkerEventType, WorkerSource,
    WorkerStatus,
};
pub use shepherd_core::transcript::{ActionContent, TranscriptStep};

pub use catalog::*;
pub use connector::*;
pub use conversations::*;
pub use error::*;
pub use events::*;
pub use hosts::*;
pub use input::*;
pub use pty::*;
pub use runs::*;
pub use sessions::*;
pub use tasks::*;
pub use usage::*;
pub use users::*;
pub use webhooks::*;
pub use workers::*;

/// Response header carrying the event-log cursor a response's data is valid at.
pub const CURSOR_HEADER: &str = "x-shepherd-cursor";

/// Heartbeat cadence the server asks of workers (the connector contract: every 30 s).
pub const HEARTBEAT_INTERVAL_SECS: u64 = 30;
