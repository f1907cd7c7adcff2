//! `shepherd resource add|list|show`: the resources conversations belong to
//! (a project, a repository: each talks to one agent), through the API.

use clap::Subcommand;
use shepherd_protocol::{ResourceBody, ResourceInfo};

use crate::render::{ago, cut, opt, table};

use super::output::{client, explain, print_data};
use super::{Global, Output, Result};

#[derive(Debug, Subcommand)]
pub enum ResourceCommand {
    /// Create a resource, or rename it and change its agent.
    Add {
        /// Its id (letters, digits, `-`, `_`, `.`), used in URLs.
        id: String,
        /// The agent its conversations talk to (an `[agents.*]` name).
        #[arg(long)]
        agent: String,
        /// A display name (default: the id).
        #[arg(long)]
        name: Option<String>,
    },
    /// List resources with their agent and active conversation.
    List,
    /// Show one resource and its conversations.
    Show {
        /// The resource's id.
        id: String,
    },
}

fn rows(list: &[ResourceInfo]) -> Vec<Vec<String>> {
    list.iter()
        .map(|r| {
            vec![
                r.id.clone(),
                r.name.clone(),
                opt(&r.agent_id),
                r.active_conversation_id.clone().unwrap_or_default(),
                if r.processing_conversation_id.is_some() {
                    "working"
                } else if r.archived_at.is_some() {
                    "archived"
                } else {
                    "idle"
                }
                .into(),
            ]
        })
        .collect()
}

const HEADERS: [&str; 5] = ["RESOURCE", "NAME", "AGENT", "ACTIVE CONVERSATION", "STATE"];

pub async fn run(g: &Global, cmd: &ResourceCommand) -> Result<()> {
    let c = client(g)?;
    match cmd {
        ResourceCommand::Add { id, agent, name } => {
            let r = c
                .upsert_resource(&ResourceBody {
                    id: id.clone(),
                    name: name.clone().unwrap_or_else(|| id.clone()),
                    agent_id: agent.clone(),
                })
                .await
                .map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &r),
                Output::Table => println!(
                    "resource {} ({}) talks to agent {}; chat: shepherd chat {}",
                    r.id,
                    r.name,
                    opt(&r.agent_id),
                    r.id
                ),
            }
        }
        ResourceCommand::List => {
            let list = c.resources().await.map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &list),
                Output::Table if list.resources.is_empty() => println!(
                    "no resources yet: make one with `shepherd resource add ID --agent NAME`"
                ),
                Output::Table => print!("{}", table(&HEADERS, &rows(&list.resources))),
            }
        }
        ResourceCommand::Show { id } => {
            let list = c.resources().await.map_err(explain)?;
            let Some(r) = list.resources.into_iter().find(|r| &r.id == id) else {
                return Err(format!("no resource has the id {id:?} (resource_not_found)").into());
            };
            let conversations = c
                .conversations(&r.id, &Default::default())
                .await
                .map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => {
                    #[derive(serde::Serialize)]
                    struct Shown<'a> {
                        resource: &'a ResourceInfo,
                        conversations: &'a shepherd_protocol::ConversationPage,
                    }
                    print_data(
                        g.output,
                        &Shown {
                            resource: &r,
                            conversations: &conversations,
                        },
                    );
                }
                Output::Table => {
                    print!("{}", table(&HEADERS, &rows(std::slice::from_ref(&r))));
                    let convs: Vec<Vec<String>> = conversations
                        .conversations
                        .iter()
                        .map(|cv| {
                            vec![
                                cv.id.clone(),
                                cv.state.clone(),
                                if cv.active { "yes" } else { "" }.into(),
                                ago(&cv.updated_at),
                                cv.title.as_deref().map(|t| cut(t, 50)).unwrap_or_default(),
                            ]
                        })
                        .collect();
                    if convs.is_empty() {
                        println!("no conversations yet");
                    } else {
                        println!();
                        print!(
                            "{}",
                            table(
                                &["CONVERSATION", "STATE", "ACTIVE", "UPDATED", "TITLE"],
                                &convs
                            )
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
