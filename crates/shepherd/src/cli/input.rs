//! `shepherd ask`, `shepherd inbox` and `shepherd answer`: an agent (or any
//! script it runs) asks a person and waits for the answer; a person lists
//! what agents wait for and answers it.
//!
//! `ask` is written for scripts: the answer alone on stdout, the exit code
//! says whether to go on (0: allowed or answered; 1: denied or expired), and
//! waiting survives a server restart (it asks with a key, so a retry never
//! asks twice, and keeps waiting on the same request).

use std::time::Duration;

use clap::Args;
use shepherd_core::input::{Decision, InputAnswer, InputKind, InputRequest, InputState};
use shepherd_core::time::to_rfc3339;
use shepherd_protocol::{AskInput, InputRequestsQuery};
use shepherd_store::now_ms;

use crate::render::table;

use super::output::{client, explain, print_data};
use super::{Global, Output, Result};

#[derive(Debug, Args)]
pub struct AskArgs {
    /// The question (or, with --permission, what the call is for).
    pub prompt: Option<String>,
    /// An answer to choose from (repeat for each).
    #[arg(long = "option")]
    pub options: Vec<String>,
    /// Ask permission for a call of this tool instead of a question.
    #[arg(long, value_name = "TOOL")]
    pub permission: Option<String>,
    /// The tool call's input, as JSON (with --permission).
    #[arg(long, value_name = "JSON", requires = "permission")]
    pub input: Option<String>,
    /// The run that asks (default: SHEPHERD_RUN_ID, set for every agent).
    #[arg(long, env = "SHEPHERD_RUN_ID")]
    pub run: Option<String>,
    /// Give up after this long (e.g. 90s, 10m); the exit code is then 1.
    #[arg(long)]
    pub timeout: Option<String>,
}

#[derive(Debug, Args)]
pub struct InboxArgs {
    /// Keep the list on screen, redrawn as requests come and go.
    #[arg(long)]
    pub watch: bool,
    /// Also list answered, expired and withdrawn requests.
    #[arg(long)]
    pub all: bool,
    /// Only this run's requests.
    #[arg(long)]
    pub run: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("reply").required(true).args(["allow", "deny", "text", "option"])))]
pub struct AnswerArgs {
    /// The request's id (`shepherd inbox` lists them).
    pub id: String,
    /// Allow what a permission request asks (the agent goes on).
    #[arg(long)]
    pub allow: bool,
    /// Deny what a permission request asks (the agent is told no).
    #[arg(long)]
    pub deny: bool,
    /// A free-text answer to a question.
    #[arg(long)]
    pub text: Option<String>,
    /// One of a question's options.
    #[arg(long)]
    pub option: Option<String>,
    /// Told to the agent with --allow or --deny (why, say).
    #[arg(long)]
    pub message: Option<String>,
}

/// The token `ask` uses: the run's own (SHEPHERD_RUN_TOKEN), unless one was given.
fn ask_global(g: &Global) -> Global {
    let mut g = g.clone();
    if let Ok(t) = std::env::var("SHEPHERD_RUN_TOKEN") {
        if !t.is_empty() {
            g.token = Some(t);
        }
    }
    g
}

pub async fn ask(g: &Global, a: &AskArgs) -> Result<()> {
    let g = ask_global(g);
    let c = client(&g)?;
    let tool_input = match &a.input {
        Some(text) => {
            Some(serde_json::from_str(text).map_err(|e| format!("--input is not JSON: {e}"))?)
        }
        None => a.permission.as_ref().map(|_| serde_json::json!({})),
    };
    if a.permission.is_none() && a.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
        return Err(
            "ask what? e.g. shepherd ask \"Deploy to staging?\" --option yes --option no".into(),
        );
    }
    let deadline = match &a.timeout {
        Some(t) => Some(
            tokio::time::Instant::now()
                + shepherd_core::agent_config::parse_duration(t)
                    .map_err(|e| format!("--timeout: {e}"))?,
        ),
        None => None,
    };
    // A key of this process's own making: a retry after a lost answer
    // (server restarting) finds the request instead of making another.
    let key = format!("ask-{}-{}", std::process::id(), now_ms());
    let ask = AskInput {
        run_id: a.run.clone().filter(|r| !r.is_empty()),
        kind: Some(if a.permission.is_some() {
            InputKind::Permission
        } else {
            InputKind::Question
        }),
        key: Some(key),
        tool_name: a.permission.clone(),
        tool_input,
        prompt: a.prompt.clone(),
        options: a.options.clone(),
    };
    // Asked again (same key) while the server is away: an agent's run
    // outlives a restart of its server, so its question must too.
    let mut waiting = Waiting::default();
    let request = loop {
        match c.ask(&ask).await {
            Ok(r) => break r,
            Err(e)
                if is_restarting(&e)
                    && deadline.is_none_or(|d| tokio::time::Instant::now() < d) =>
            {
                waiting.pause(&c, &e).await
            }
            Err(e) => return Err(explain(e)),
        }
    };
    let done = wait_for_answer(&c, &request.id, deadline).await?;
    let (text, go_on) = match (&done.state, &done.answer) {
        (InputState::Answered | InputState::Expired, Some(answer)) => (
            answer.printed().to_owned(),
            answer.goes_on() && done.state == InputState::Answered,
        ),
        _ => (String::new(), false),
    };
    if !text.is_empty() {
        println!("{text}");
    }
    if done.state != InputState::Answered {
        eprintln!("request {} {}", done.id, done.state);
    }
    if !go_on {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

/// Waits until the request ends (or `deadline`), through server restarts:
/// each wait is a long poll, and a failed one is tried again.
async fn wait_for_answer(
    c: &shepherd_client::Client,
    id: &str,
    deadline: Option<tokio::time::Instant>,
) -> Result<InputRequest> {
    let mut waiting = Waiting::default();
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            let last = c.input_request(id, None).await.map_err(explain)?;
            return Ok(last);
        }
        let wait = left.map_or(25, |l| l.as_secs().clamp(1, 25));
        match c.input_request(id, Some(wait)).await {
            Ok(r) if r.state.is_final() => return Ok(r),
            Ok(_) => waiting = Waiting::default(),
            Err(e) if is_restarting(&e) => waiting.pause(c, &e).await,
            Err(e) => return Err(explain(e)),
        }
    }
}

/// A failure that a server coming back would end: it is unreachable, or
/// answers that it cannot serve yet (5xx).
fn is_restarting(e: &shepherd_client::ClientError) -> bool {
    e.is_transient() || e.status().is_some_and(|s| s >= 500)
}

/// Backing off while the server is away, saying so once on standard error
/// (an agent's log shows why its question took long).
#[derive(Default)]
struct Waiting {
    failures: u32,
}

impl Waiting {
    async fn pause(&mut self, c: &shepherd_client::Client, e: &shepherd_client::ClientError) {
        if self.failures == 0 {
            eprintln!(
                "shepherd ask: the server at {} is not answering ({e}); trying again until it does",
                c.base()
            );
        }
        self.failures += 1;
        tracing::debug!(error = %e, "waiting for the server");
        tokio::time::sleep(Duration::from_millis(
            200 * u64::from(self.failures.min(10)),
        ))
        .await;
    }
}

fn describe(r: &InputRequest) -> String {
    match r.kind {
        InputKind::Permission => {
            let input = r
                .tool_input
                .as_ref()
                .map(|i| serde_json::to_string(i).unwrap_or_default())
                .unwrap_or_default();
            let mut s = format!("{} {}", r.tool_name.as_deref().unwrap_or("?"), input);
            if s.chars().count() > 100 {
                s = s.chars().take(99).collect::<String>() + "…";
            }
            s
        }
        InputKind::Question => {
            let mut s = r.prompt.clone().unwrap_or_default();
            if !r.options.is_empty() {
                s.push_str(&format!(" [{}]", r.options.join(" / ")));
            }
            s
        }
    }
}

fn age(ms: i64) -> String {
    let s = (now_ms() - ms).max(0) / 1000;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

async fn draw_inbox(g: &Global, c: &shepherd_client::Client, a: &InboxArgs) -> Result<()> {
    let list = c
        .input_requests(&InputRequestsQuery {
            state: (!a.all).then(|| InputState::Pending.as_str().to_owned()),
            run_id: a.run.clone(),
            ..Default::default()
        })
        .await
        .map_err(explain)?;
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &list),
        Output::Table => {
            if list.requests.is_empty() {
                println!(
                    "{}",
                    if a.all {
                        "no input requests"
                    } else {
                        "nothing waits for an answer"
                    }
                );
                return Ok(());
            }
            let rows: Vec<Vec<String>> = list
                .requests
                .iter()
                .map(|r| {
                    let mut row = vec![
                        r.id.clone(),
                        age(r.created_at),
                        r.agent_id.clone(),
                        r.vtid.clone(),
                        r.kind.to_string(),
                        describe(r),
                    ];
                    if a.all {
                        row.push(match (&r.state, &r.answer) {
                            (InputState::Pending, _) => "pending".into(),
                            (s, Some(ans)) if !ans.printed().is_empty() => format!(
                                "{s}: {} by {}",
                                ans.printed(),
                                r.answered_by.as_deref().unwrap_or("?")
                            ),
                            (s, _) => s.to_string(),
                        });
                    }
                    row
                })
                .collect();
            let mut head = vec!["ID", "AGE", "AGENT", "TASK", "KIND", "ASKS"];
            if a.all {
                head.push("STATE");
            }
            print!("{}", table(&head, &rows));
            if !a.all {
                println!("answer: shepherd answer ID --allow | --deny | --text T | --option O");
            }
        }
    }
    Ok(())
}

pub async fn inbox(g: &Global, a: &InboxArgs) -> Result<()> {
    let c = client(g)?;
    if a.watch {
        return super::output::watch_redraw(&c, || draw_inbox(g, &c, a)).await;
    }
    draw_inbox(g, &c, a).await
}

pub async fn answer(g: &Global, a: &AnswerArgs) -> Result<()> {
    let c = client(g)?;
    let answer = InputAnswer {
        decision: match (a.allow, a.deny) {
            (true, false) => Some(Decision::Allow),
            (false, true) => Some(Decision::Deny),
            (false, false) => None,
            (true, true) => return Err("--allow or --deny, not both".into()),
        },
        message: a.message.clone(),
        text: a.text.clone(),
        option: a.option.clone(),
    };
    let r = c.answer_input(&a.id, &answer).await.map_err(explain)?;
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &r),
        Output::Table => println!(
            "{} {}: {} (at {})",
            r.id,
            r.state,
            r.answer.as_ref().map(|x| x.printed()).unwrap_or(""),
            r.answered_at.map(to_rfc3339).unwrap_or_default()
        ),
    }
    Ok(())
}
