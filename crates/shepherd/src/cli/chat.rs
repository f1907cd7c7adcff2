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
use crate::render::{cut, local_when, table};
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
        /// The resource's id (`shepherd resource list`).
        resource: String,
        /// At most this many, newest first (1 to 200).
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// A conversation's messages and the agent's replies.
    Show {
        /// The conversation's id, or a unique start of it.
        id: String,
        /// Print every step of every reply.
        #[arg(long)]
        full: bool,
    },
    /// Send a message; with --wait, stream the reply until it ends.
    Send {
        /// The conversation's id, or a unique start of it.
        id: String,
        /// The message.
        text: String,
        /// If the conversation is busy: run after the current run, or cancel it first.
        #[arg(long, value_enum)]
        multitask: Option<MultitaskArg>,
        /// Follow the reply as it is written, until the conversation is idle.
        #[arg(long)]
        wait: bool,
    },
    /// Cancel the run in progress (its partial work is kept).
    Cancel {
        /// The conversation's id, or a unique start of it.
        id: String,
    },
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

/// Accepts a unique start of a conversation id, as run ids are: looked
/// for through every resource's conversations.
async fn resolve_conversation(c: &Client, id: &str) -> Result<String> {
    match c.conversation(id).await {
        Ok(_) => return Ok(id.to_owned()),
        Err(e) if e.status() == Some(404) && id.len() >= 4 => {}
        Err(e) => return Err(explain(e)),
    }
    let mut matches = Vec::new();
    'resources: for r in c.resources().await.map_err(explain)?.resources {
        let mut q = page(200);
        loop {
            let p = c.conversations(&r.id, &q).await.map_err(explain)?;
            matches.extend(
                p.conversations
                    .into_iter()
                    .map(|cv| cv.id)
                    .filter(|cv| cv.starts_with(id)),
            );
            if matches.len() > 1 {
                break 'resources;
            }
            match p.next {
                Some(next) => q.page = Some(next),
                None => break,
            }
        }
    }
    crate::cli::output::the_one_match(id, "conversation", &matches)
}

pub async fn conversation(g: &Global, cmd: &ConversationCommand) -> Result<()> {
    let c = client(g)?;
    let resolved = match cmd {
        ConversationCommand::Show { id, .. }
        | ConversationCommand::Send { id, .. }
        | ConversationCommand::Cancel { id } => Some(resolve_conversation(&c, id).await?),
        ConversationCommand::List { .. } => None,
    };
    let id = resolved.as_deref().unwrap_or_default();
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
        ConversationCommand::Show { full, .. } => {
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
            text,
            multitask,
            wait,
            ..
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
                stream_reply(g, &c, id, before.cursor, None).await?;
            }
        }
        ConversationCommand::Cancel { .. } => {
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
                local_when(&c.updated_at),
                c.title.as_deref().map(|t| cut(t, 50)).unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &["ID", "STATE", "ACTIVE", "MESSAGES", "UPDATED", "TITLE"],
        &rows,
    )
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

/// How a reply's tail ended.
#[derive(Debug, PartialEq, Eq)]
enum Tail {
    /// The conversation went idle.
    Idle,
    /// `/quit` was typed while the agent worked (the reply goes on).
    Quit,
}

/// Tails the conversation from `cursor` until it is idle, printing steps as
/// they land. The first Ctrl-C cancels the run; the tail goes on until the
/// run has really ended (the partial reply is kept). With the prompt's
/// `lines`, `/quit` typed meanwhile leaves at once, and other lines wait in
/// `typed_ahead` for the prompt.
async fn stream_reply(
    g: &Global,
    c: &Client,
    id: &str,
    cursor: i64,
    mut lines: Option<(&mut tokio::sync::mpsc::Receiver<String>, &mut Vec<String>)>,
) -> Result<Tail> {
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
    let mut input_open = lines.is_some();
    loop {
        tokio::select! {
            r = &mut follow => {
                r?;
                break;
            }
            line = async {
                match lines.as_mut() {
                    Some((rx, _)) => rx.recv().await,
                    None => std::future::pending().await,
                }
            }, if input_open => match line {
                Some(l) if is_quit(&l) => {
                    println!("(left; the reply goes on: shepherd conversation show {id})");
                    return Ok(Tail::Quit);
                }
                Some(l) => {
                    if let Some((_, ahead)) = lines.as_mut() {
                        ahead.push(l);
                    }
                }
                None => input_open = false,
            },
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
    Ok(Tail::Idle)
}

fn is_quit(line: &str) -> bool {
    matches!(line.trim(), "/quit" | "/exit")
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
    let mut lines = stdin_lines();
    let mut typed_ahead: Vec<String> = Vec::new();
    if d.state != "idle"
        && stream_reply(g, &c, &id, d.cursor, Some((&mut lines, &mut typed_ahead))).await?
            == Tail::Quit
    {
        return Ok(());
    }
    loop {
        if !typed_ahead.is_empty() {
            let line = typed_ahead.remove(0);
            println!("\n> {line}");
            match handle_line(g, &c, a, &mut id, &line, &mut lines, &mut typed_ahead).await? {
                Tail::Quit => return Ok(()),
                Tail::Idle => continue,
            }
        }
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
        if handle_line(g, &c, a, &mut id, &line, &mut lines, &mut typed_ahead).await? == Tail::Quit
        {
            return Ok(());
        }
    }
}

/// One line typed at the prompt: a command, or a message to send (then its
/// reply is followed until the conversation is idle or `/quit` is typed).
async fn handle_line(
    g: &Global,
    c: &Client,
    a: &ChatArgs,
    id: &mut String,
    line: &str,
    lines: &mut tokio::sync::mpsc::Receiver<String>,
    typed_ahead: &mut Vec<String>,
) -> Result<Tail> {
    let text = line.trim();
    match text {
        "" => {}
        "/quit" | "/exit" => return Ok(Tail::Quit),
        "/new" => {
            *id = new_conversation(c, &a.resource).await?;
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
            let before = load(c, id).await?;
            let body = SendBody {
                text: text.to_owned(),
                multitask: MultitaskMode::Reject,
            };
            match c.send_message(id, &body).await {
                Ok(_) => {
                    return stream_reply(g, c, id, before.cursor, Some((lines, typed_ahead))).await
                }
                Err(e) => eprintln!("{e}"),
            }
        }
    }
    Ok(Tail::Idle)
}
