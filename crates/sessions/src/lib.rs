//! Sessions (the sessions contract): workspaces whose tabs are real terminals and
//! interactive agents in pseudo-terminals, restored when a client attaches
//! after anything restarted.
//!
//! - [`manager`]: the node's workers, restore exactly once, restart, removal.
//! - [`worker`]: one PTY worker's output hub and process.
//! - [`scrollback`]: the bounded ring in memory and segment files on disk.
//! - [`decoder`]: streaming UTF-8 for output frames.
//! - [`reap`]: ending every process of a PTY's session.
//! - [`protocol`]: the WebSocket messages.
//!
//! This crate knows no HTTP; it persists through the store.

pub mod decoder;
pub mod manager;
pub mod protocol;
pub mod reap;
pub mod scrollback;
pub mod worker;

pub use manager::{
    AgentSpec, Attachment, GitDiff, ManagerConfig, RestartMode, SessionManager, RESTORE_FAILED,
};
pub use protocol::{ActivityState, ClientMessage, ServerMessage};
