//! Helpers every client verb shares: the HTTP client from the global
//! options, and JSON output.

use serde_json::Value;

use crate::client::Client;

use super::Global;

pub fn client(g: &Global) -> Client {
    let token = g.token.clone().or_else(|| {
        std::env::var("SHEPHERD_AUTH_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    });
    Client::new(&g.server, token)
}

pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
