//! Sessions (the sessions contract): workspaces whose tabs are real terminals and
//! interactive agents in pseudo-terminals, restored when a client attaches
//! after anything restarted.
//!
//! - [`manager`]: a server node's sessions: its PTYs and their records,
//!   restore exactly once, restart, removal (with the `store` feature).
//! - [`pty_host`]: the PTYs of a runner's host, which keeps no records: the
//!   server that holds them asks over the host's link.
//! - [`launch`]: what a tab runs and where (the rules every host applies).
//! - [`worker`]: one PTY worker's output hub and process.
//! - [`scrollback`]: the bounded ring in memory and segment files on disk.
//! - [`decoder`]: streaming UTF-8 for output frames.
//! - [`reap`]: ending every process of a PTY's session.
//! - [`git_tab`]: a `git-diff` tab's diff.
//! - [`protocol`]: the WebSocket messages.
//!
//! This crate knows no HTTP; only [`manager`] persists (through the store).

pub mod decoder;
pub mod git_tab;
pub mod launch;
#[cfg(feature = "store")]
pub mod manager;
pub mod protocol;
pub mod pty_host;
pub mod reap;
pub mod scrollback;
pub mod worker;

pub use launch::{AgentSpec, Launcher, AGENT_SESSION_PLACEHOLDER};
#[cfg(feature = "store")]
pub use manager::{ManagerConfig, SessionManager, RESTORE_FAILED};
pub use protocol::{ActivityState, ClientMessage, ServerMessage};
pub use shepherd_protocol::{GitDiff, RestartMode};
pub use worker::Attachment;
