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

/// The id a unique start `id` names, from the ids found starting with it:
/// none is `<what>_not_found`, several ask for more characters.
pub fn the_one_match(id: &str, what: &str, matches: &[String]) -> Result<String> {
    match matches {
        [one] => Ok(one.clone()),
        [] => Err(format!("no {what} {id:?} ({what}_not_found)").into()),
        many => Err(format!(
            "{id:?} is ambiguous: it starts {} {what}s ({}, …); give more characters",
            many.len(),
            many[..2].join(", ")
        )
        .into()),
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

/// `--watch`: draws, then draws again after each batch of events from the
/// server's event stream (a burst of events costs one redraw: the notify
/// keeps one wake-up, not a count). On a terminal each drawing replaces the
/// last; piped, drawings follow one another, separated by a blank line.
pub async fn watch_redraw<F, Fut>(c: &Client, mut draw: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    use std::io::{IsTerminal, Write};
    use std::sync::Arc;
    // Events after this head are news to the first drawing.
    let head = c.head().await.map_err(explain)?;
    let changed = Arc::new(tokio::sync::Notify::new());
    let mut follower = {
        let (c, changed) = (c.clone(), changed.clone());
        tokio::spawn(async move {
            c.follow(
                &shepherd_protocol::EventStreamQuery::default(),
                shepherd_client::Start::After(head),
                |_| {
                    changed.notify_one();
                    true
                },
                |why| eprintln!("watch: {why}"),
            )
            .await
        })
    };
    let tty = std::io::stdout().is_terminal();
    let mut first = true;
    loop {
        if tty {
            // Home and clear, as `watch(1)` does.
            print!("\x1b[H\x1b[2J");
        } else if !first {
            println!();
        }
        first = false;
        draw().await?;
        let _ = std::io::stdout().flush();
        tokio::select! {
            _ = changed.notified() => {}
            r = &mut follower => {
                return match r {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(explain(e)),
                    Err(e) => Err(format!("watch: {e}").into()),
                };
            }
        }
    }
}
