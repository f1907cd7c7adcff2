//! `shepherd webhooks add|list|rm|deliveries`: the operator's view of webhook
//! subscriptions, through the server's API.

use clap::{Args, Subcommand};
use shepherd_protocol::{CreateWebhook, WebhookDeliveriesQuery};

use crate::render::table;

use super::output::{client, explain, print_data};
use super::{Global, Output, Result};

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Subscribe a URL to events; prints the signing secret (shown once).
    Add(AddWebhook),
    /// List subscriptions with their state and cursor.
    List,
    /// Delete a subscription made through the API.
    Rm {
        /// The subscription's id (`shepherd webhooks list`).
        id: String,
    },
    /// A subscription's delivery attempts, newest first.
    Deliveries {
        /// The subscription's id (`shepherd webhooks list`).
        id: String,
        /// How many attempts (1 to 500).
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
}

#[derive(Debug, Args)]
pub struct AddWebhook {
    /// Where deliveries are POSTed (http or https).
    pub url: String,
    /// An event type, a wildcard (`run.*`), `run.failed` or `task.finished`;
    /// repeat for each (default: input.requested, run.stuck, run.failed,
    /// task.finished).
    #[arg(long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// Sign with this `whsec_…` secret instead of a new one.
    #[arg(long)]
    pub secret: Option<String>,
    /// `standard` (default) or `slack`.
    #[arg(long)]
    pub format: Option<String>,
    /// Let deliveries go to loopback and private addresses (admin only).
    #[arg(long)]
    pub allow_private: bool,
}

pub async fn run(g: &Global, cmd: &WebhookCommand) -> Result<()> {
    let c = client(g)?;
    match cmd {
        WebhookCommand::Add(a) => {
            let made = c
                .create_webhook(&CreateWebhook {
                    url: a.url.clone(),
                    events: (!a.events.is_empty()).then(|| a.events.clone()),
                    secret: a.secret.clone(),
                    format: a.format.clone(),
                    allow_private: a.allow_private,
                })
                .await
                .map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &made),
                Output::Table => {
                    println!(
                        "{} → {} ({})",
                        made.webhook.id,
                        made.webhook.url,
                        made.webhook.events.join(", ")
                    );
                    println!("secret: {}", made.secret);
                    println!("(shown this once: give it to the receiver to verify deliveries)");
                }
            }
        }
        WebhookCommand::List => {
            let list = c.webhooks().await.map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &list),
                Output::Table if list.webhooks.is_empty() => println!("no webhooks"),
                Output::Table => {
                    let rows: Vec<Vec<String>> = list
                        .webhooks
                        .iter()
                        .map(|w| {
                            vec![
                                w.id.clone(),
                                w.state.clone(),
                                w.format.clone(),
                                w.source.clone(),
                                w.cursor.to_string(),
                                w.events.join(","),
                                w.url.clone(),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table(
                            &["ID", "STATE", "FORMAT", "FROM", "CURSOR", "EVENTS", "URL"],
                            &rows
                        )
                    );
                }
            }
        }
        WebhookCommand::Rm { id } => {
            c.delete_webhook(id).await.map_err(explain)?;
            if g.output == Output::Table {
                println!("deleted {id}");
            }
        }
        WebhookCommand::Deliveries { id, limit } => {
            let list = c
                .webhook_deliveries(
                    id,
                    &WebhookDeliveriesQuery {
                        limit: Some(*limit),
                    },
                )
                .await
                .map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &list),
                Output::Table if list.deliveries.is_empty() => println!("no deliveries yet"),
                Output::Table => {
                    let rows: Vec<Vec<String>> = list
                        .deliveries
                        .iter()
                        .map(|d| {
                            vec![
                                d.started_at.clone(),
                                d.seq.to_string(),
                                d.kind.clone(),
                                d.attempt.to_string(),
                                d.outcome.clone(),
                                d.http_status.map(|s| s.to_string()).unwrap_or_default(),
                                match (&d.error, &d.next_attempt_at) {
                                    (Some(e), Some(next)) => format!("{e}; next try {next}"),
                                    (Some(e), None) => e.clone(),
                                    (None, _) => String::new(),
                                },
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table(
                            &["AT", "SEQ", "EVENT", "TRY", "OUTCOME", "HTTP", "DETAIL"],
                            &rows
                        )
                    );
                }
            }
        }
    }
    Ok(())
}
