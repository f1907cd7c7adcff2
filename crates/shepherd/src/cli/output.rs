//! Helpers every client verb shares: the HTTP client from the global
//! options, errors a person can act on, and JSON output.

use serde::Serialize;
use shepherd_client::{Client, ClientError};

use super::{Global, Output, Result};

/// The client the global options describe (`--server`, `--token`).
pub fn client(g: &Global) -> Result<Client> {
    // `--token` reads SHEPHERD_TOKEN, the variable the server reads too,
    // so one exported variable serves both sides; the server's former name
    // still works here, with a deprecation warning.
    let token = g
        .token
        .clone()
        .or_else(|| crate::config::token_from_env(&|k| std::env::var(k).ok()));
    Client::new(&g.server, token).map_err(explain)
}

/// A client error with a hint where one helps.
pub fn explain(e: ClientError) -> Box<dyn std::error::Error + Send + Sync> {
    match e.status() {
        Some(401) => format!("{e}\nhint: pass --token or set SHEPHERD_TOKEN").into(),
        _ => Box::new(e),
    }
}

pub fn print_json<T: Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Prints a value as `-o json` or `-o yaml` asks (tables are the verb's own).
pub fn print_data<T: Serialize>(output: Output, v: &T) {
    match output {
        Output::Yaml => print!("{}", serde_norway::to_string(v).unwrap_or_default()),
        _ => print_json(v),
    }
}
