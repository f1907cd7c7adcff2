//! The `shepherd` binary's library: configuration, the server's wiring and
//! background loops, and the command-line client. `main.rs` only parses the
//! command line and calls in here.

pub mod cli;
pub mod config;
pub mod maintenance;
pub mod own_secrets;
pub mod private_data;
pub mod render;
pub mod server;
pub mod session_host;
pub mod webhooks;
