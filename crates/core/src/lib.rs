//! The domain of Shepherd: what tasks, claims, runs, workers and events *are*,
//! and the rules that move them from state to state.
//!
//! This crate does no I/O. It never reads a clock (callers pass `now`), never
//! touches a file, a socket or a database. Everything here is a pure function
//! or a plain type, so the stores and the HTTP layer can share one meaning of
//! every word without sharing any machinery.

pub mod actor_names;
pub mod adapters;
pub mod agent_config;
pub mod claiming;
pub mod cmdline;
pub mod defaults;
pub mod error;
pub mod event;
pub mod input;
pub mod model;
pub mod pace;
pub mod retry;
pub mod role;
pub mod secrets;
pub mod status;
pub mod time;
pub mod token;
pub mod transcript;
pub mod usage;
pub mod webhook_events;
pub mod webhook_signature;
pub mod webhook_target;
pub mod workflow;

pub use error::{Error, ErrorKind, Result};
