//! `shepherd chat RESOURCE` and `shepherd conversation …`: talking to a
//! resource's agent from a terminal.
//!
//! Chat follows the contract's load sequence: it loads the active conversation
//! (messages and steps, with the cursor the answer is valid at), then tails
//! the event stream from that cursor while the agent works, so nothing is
//! shown twice or missed. Ctrl-C while the agent works cancels the run (its
//! partial work stays in the history); at the prompt it quits.

use clap::{Args, Subcommand, ValueEnum};
use shepherd_client::{Client, Start};
use shepherd_core::transcript::{ActionContent, TranscriptStep};
use shepherd_protocol::{
    CancelBody, ConversationDetail, ConversationInfo, ConversationStateChanged, ConversationsQuery,
    EventStreamQuery, MessageInfo, MultitaskMode, RunCompleted, RunStatusChanged, RunStep,
    SendBody, WireEvent,
};

use crate::cli::output::{explain, print_data};
use crate::cli::{Global, Output};
use crate::render::{cut, table};
use crate::server::anyhow_like::Result;

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The resource to talk about (its agent answers).
    pub resource: String,
    /// Start a new conversation instead of continuing the active one.
    #[arg(long)]
    pub new: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConversationCommand {
    /// A resource's conversations, newest first.
    List {
        resource: String,
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// A conversation's messages and the agent's replies.
    Show {
        id: String,
        /// Print every step of every reply.
        #[arg(long)]
        full: bool,
    },
    /// Send a message; with --wait, stream the reply until it ends.
    Send {
        id: String,
        text: String,
        /// If the conversation is busy: run after the current run, or cancel it first.
        #[arg(long, value_enum)]
        multitask: Option<MultitaskArg>,
        #[arg(long)]
        wait: bool,
    },
    /// Cancel the run in progress (its partial work is kept).
    Cancel { id: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MultitaskArg {
    Enqueue,
    Interrupt,
}

fn client(g: &Global) -> Result<Client> {
    crate::cli::output::client(g)
}

async fn load(c: &Client, id: &str) -> Result<ConversationDetail> {
    c.conversation(id).await.map_err(explain)
}

fn page(limit: i64) -> ConversationsQuery {
    ConversationsQuery {
        limit: Some(limit),
        page: None,
    }
}

pub async fn conversation(g: &Global, cmd: &ConversationCommand) -> Result<()> {
    let c = client(g)?;
    match cmd {
        ConversationCommand::List { resource, limit } => {
            let p = c
                .conversations(resource, &page(*limit))
                .await
                .map_err(explain)?;
            if g.output != Output::Table {
                print_data(g.output, &p);
                return Ok(());
            }
            print!("{}", history_table(&p.conversations));
        }
        ConversationCommand::Show { id, full } => {
            let d = load(&c, id).await?;
            if g.output != Output::Table {
                print_data(g.output, &d);
                return Ok(());
            }
            println!(
                "conversation {}  resource {}  [{}]{}",
                d.id,
                d.resource_id,
                d.state,
                if d.active { "  active" } else { "" }
            );
            for m in &d.messages {
                print_message(m, *full);
            }
        }
        ConversationCommand::Send {
            id,
            text,
            multitask,
            wait,
        } => {
            let before = load(&c, id).await?;
            let body = SendBody {
                text: text.clone(),
                multitask: match multitask {
                    None => MultitaskMode::Reject,
                    Some(MultitaskArg::Enqueue) => MultitaskMode::Enqueue,
                    Some(MultitaskArg::Interrupt) => MultitaskMode::Interrupt,
                },
            };
            let sent = c.send_message(id, &body).await.map_err(explain)?;
            if g.output != Output::Table && !wait {
                print_data(g.output, &sent);
                return Ok(());
            }
            if g.output == Output::Table {
                println!(
                    "message {} {} (conversation {})",
                    sent.message.ordinal, sent.message.status, sent.conversation.state
                );
            }
            if *wait {
                stream_reply(g, &c, id, before.cursor).await?;
            }
        }
        ConversationCommand::Cancel { id } => {
            let after = c
                .cancel_conversation(id, &CancelBody::default())
                .await
                .map_err(explain)?;
            if g.output != Output::Table {
                print_data(g.output, &after);
                return Ok(());
            }
            println!("conversation {} is {}", after.id, after.state);
        }
    }
    Ok(())
}

fn history_table(list: &[ConversationInfo]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                c.id.clone(),
                c.state.clone(),
                if c.active { "*".into() } else { String::new() },
                c.messages.to_string(),
                c.created_at.clone(),
            ]
        })
        .collect();
    table(&["ID", "STATE", "ACTIVE", "MESSAGES", "CREATED"], &rows)
}

fn step_line(step: &TranscriptStep) -> String {
    let text = match step {
        TranscriptStep::Action { content } => content
            .iter()
            .map(|i| match i {
                ActionContent::ToolCall { name, .. } => format!("{name}(…)"),
                ActionContent::Text { text } => text.clone(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        TranscriptStep::ToolResult { text, .. } => text.clone(),
    };
    cut(&text.replace('\n', " "), 110)
}

fn print_message(m: &MessageInfo, full: bool) {
    if m.role == "user" {
        let mark = if m.status == "sent" {
            String::new()
        } else {
            format!(" ({})", m.status)
        };
        println!("\nyou{mark}: {}", m.text.as_deref().unwrap_or(""));
        return;
    }
    let steps = m.steps.parse().unwrap_or_else(|e| {
        eprintln!("  · (the server sent steps that cannot be read: {e})");
        Vec::new()
    });
    let shown = if full { steps.len() } else { 5 };
    let skip = steps.len().saturating_sub(shown);
    if skip > 0 {
        println!("  · … {skip} earlier steps");
    }
    for s in steps.iter().skip(skip) {
        println!("  · {}", step_line(s));
    }
    match m.status.as_str() {
        "running" => println!("agent: (working…)"),
        "done" => println!("agent: {}", m.text.as_deref().unwrap_or("")),
        other => println!(
            "agent ({other}): {}",
            m.text.as_deref().unwrap_or("no reply")
        ),
    }
}

/// Tails the conversation from `cursor` until it is idle, printing steps as
/// they land. The first Ctrl-C cancels the run; the tail goes on until the
/// run has really ended (the partial reply is kept).
async fn stream_reply(g: &Global, c: &Client, id: &str, cursor: i64) -> Result<()> {
    let query = EventStreamQuery {
        conversation_id: Some(id.to_owned()),
        ..Default::default()
    };
    let json_out = g.output == Output::Json;
    let follow = c.follow(
        &query,
        Start::After(cursor),
        |f| {
            let Ok(e) = f.parse::<WireEvent>() else {
                return true;
            };
            if json_out {
                println!("{}", f.data);
            }
            let data = || e.event.data.clone();
            match e.event.kind.as_str() {
                "conversation.state_changed" => {
                    let Ok(d) = serde_json::from_value::<ConversationStateChanged>(data()) else {
                        return true;
                    };
                    if !json_out && d.to == "cancelled" {
                        println!("(cancelling…)");
                    }
                    return d.to != "idle";
                }
                "run.step" if !json_out => {
                    if let Ok(d) = serde_json::from_value::<RunStep>(data()) {
                        println!("  · {}", cut(&d.preview.replace('\n', " "), 110));
                    }
                }
                "run.status" if !json_out => {
                    if let Ok(d) = serde_json::from_value::<RunStatusChanged>(data()) {
                        println!("  … {}", d.status);
                    }
                }
                "run.completed" if !json_out => {
                    if let Ok(d) = serde_json::from_value::<RunCompleted>(data()) {
                        if d.status.as_str() != "done" {
                            println!("(run {}: {})", d.status.as_str(), d.reason);
                        }
                    }
                }
                _ => {}
            }
            true
        },
        |msg| eprintln!("({msg})"),
    );
    tokio::pin!(follow);
    let mut cancelled = false;
    loop {
        tokio::select! {
            r = &mut follow => {
                r?;
                break;
            }
            _ = tokio::signal::ctrl_c(), if !cancelled => {
                cancelled = true;
                if let Err(e) = c.cancel_conversation(id, &CancelBody::default()).await {
                    eprintln!("cancel: {e}");
                }
            }
        }
    }
    if !json_out {
        let d = load(c, id).await?;
        if let Some(m) = d.messages.iter().rev().find(|m| m.role == "agent") {
            match m.status.as_str() {
                "done" => println!("agent: {}", m.text.as_deref().unwrap_or("")),
                other => println!("agent ({other}): {}", m.text.as_deref().unwrap_or("")),
            }
        }
    }
    Ok(())
}

/// Finds the resource's active conversation, or starts one.
async fn open_conversation(c: &Client, resource: &str, new: bool) -> Result<String> {
    let list = c.resources().await.map_err(explain)?;
    let Some(r) = list.resources.iter().find(|r| r.id == resource) else {
        return Err(format!(
            "no resource {resource:?}; create one with POST /api/v1/resources {{id, name, agent_id}}"
        )
        .into());
    };
    if let (Some(id), false) = (&r.active_conversation_id, new) {
        return Ok(id.clone());
    }
    new_conversation(c, resource).await
}

async fn new_conversation(c: &Client, resource: &str) -> Result<String> {
    let info = c.create_conversation(resource).await.map_err(explain)?;
    Ok(info.id)
}

/// Lines typed at the terminal, read on a thread of their own (a blocking
/// read must not hold a runtime thread); the channel closes at end of input.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The interactive prompt.
pub async fn chat(g: &Global, a: &ChatArgs) -> Result<()> {
    let c = client(g)?;
    let mut id = open_conversation(&c, &a.resource, a.new).await?;
    let d = load(&c, &id).await?;
    println!(
        "conversation {} on {} (/new starts another, /history lists them, /quit leaves; Ctrl-C cancels a reply)",
        d.id, d.resource_id
    );
    for m in &d.messages {
        print_message(m, false);
    }
    if d.state != "idle" {
        stream_reply(g, &c, &id, d.cursor).await?;
    }
    let mut lines = stdin_lines();
    loop {
        {
            use std::io::Write;
            let mut out = std::io::stdout();
            let _ = write!(out, "\n> ");
            let _ = out.flush();
        }
        let line = tokio::select! {
            l = lines.recv() => l,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = line else {
            println!();
            return Ok(());
        };
        let text = line.trim();
        match text {
            "" => continue,
            "/quit" | "/exit" => return Ok(()),
            "/new" => {
                id = new_conversation(&c, &a.resource).await?;
                println!("new conversation {id}");
            }
            "/history" => {
                let p = c
                    .conversations(&a.resource, &page(20))
                    .await
                    .map_err(explain)?;
                print!("{}", history_table(&p.conversations));
            }
            _ => {
                let before = load(&c, &id).await?;
                let body = SendBody {
                    text: text.to_owned(),
                    multitask: MultitaskMode::Reject,
                };
                match c.send_message(&id, &body).await {
                    Ok(_) => stream_reply(g, &c, &id, before.cursor).await?,
                    Err(e) => eprintln!("{e}"),
                }
            }
        }
    }
}
