//! The command line: `shepherd serve` and `migrate` run the server side;
//! the other verbs talk to a running server over HTTP, in the manner of
//! `gh` and `kubectl` (tables for people, `-o json` for scripts).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use shepherd_runner::client::{follow_sse, Connector, SseFrame};

use crate::client::{Client, ClientError};
use crate::config::Config;
use crate::render::{ago, cut, s, table};
use shepherd_runner::client::enc;

#[derive(Debug, Parser)]
#[command(
    name = "shepherd",
    version,
    about = "A durable control plane for long-running AI agent workers",
    long_about = "Shepherd queues work for agents, hands it to workers safely, records every step \
they take and streams it live. `shepherd serve` runs the server; the other commands talk to it.",
    after_help = "Examples:\n  shepherd serve\n  shepherd task add \"Fix the flaky test\" --spec-file spec.md\n  \
shepherd task list\n  shepherd task watch VTID-00001\n  shepherd events --follow --types 'worker.*'"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub global: Global,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Server to talk to.
    #[arg(
        long,
        global = true,
        env = "SHEPHERD_SERVER",
        default_value = "http://127.0.0.1:7700"
    )]
    pub server: String,
    /// Bearer token (the operator token, or a worker token).
    #[arg(long, global = true, env = "SHEPHERD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Configuration file (serve, migrate, prune).
    #[arg(long, global = true, env = "SHEPHERD_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (HTTP API, event stream, background loops).
    Serve {
        /// Address to listen on (overrides SHEPHERD_LISTEN).
        #[arg(long)]
        listen: Option<String>,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Run the configured agents against a server elsewhere (as workers).
    Runner {
        /// Where process-group records and step spools live (default: SHEPHERD_DATA_DIR).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Create, list, inspect, cancel and watch tasks.
    #[command(subcommand)]
    Task(TaskCommand),
    /// List and inspect runs and their transcripts.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Print events; with --follow, keep streaming (resumes after drops).
    Events(EventsArgs),
    /// Talk to a resource's agent: type a message, watch the steps stream.
    Chat(crate::chat_cli::ChatArgs),
    /// List, show, send to and cancel conversations.
    #[command(subcommand)]
    Conversation(crate::chat_cli::ConversationCommand),
    /// List workers (live and recovered).
    Workers {
        /// Include workers that have closed.
        #[arg(long)]
        all: bool,
    },
    /// Remove old data on purpose (transcripts, events).
    Prune {
        /// Null transcripts of runs that ended longer ago than this (e.g. 30d, 12h).
        #[arg(long, value_parser = parse_age)]
        transcripts_older_than: Option<Duration>,
        /// Delete events older than this (e.g. 90d).
        #[arg(long, value_parser = parse_age)]
        events_older_than: Option<Duration>,
    },
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task (dispatched at once unless --draft).
    Add {
        title: String,
        /// The spec, as markdown text.
        #[arg(long, conflicts_with = "spec_file")]
        spec: Option<String>,
        /// Read the spec from a file (`-` for stdin).
        #[arg(long)]
        spec_file: Option<PathBuf>,
        #[arg(long)]
        vtid: Option<String>,
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        priority: i64,
        /// Required capability (repeatable).
        #[arg(long = "capability", short = 'c')]
        capabilities: Vec<String>,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        channel: Option<String>,
        /// simple (default) or autopilot.
        #[arg(long)]
        workflow: Option<String>,
        /// Leave it as a draft; dispatch later.
        #[arg(long)]
        draft: bool,
    },
    /// List tasks, newest first.
    List {
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Show one task with its claims and recent events.
    Show { vtid: String },
    /// Dispatch a draft.
    Dispatch { vtid: String },
    /// Cancel a task (the worker holding it is told at once).
    Cancel {
        vtid: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Follow a task's state changes and its runs' steps until it ends.
    Watch { vtid: String },
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first.
    List {
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        vtid: Option<String>,
        /// Search task titles.
        #[arg(long)]
        search: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Show a run and its transcript.
    Show {
        id: String,
        /// Do not cut long output.
        #[arg(long)]
        full: bool,
    },
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Keep streaming new events.
    #[arg(short, long)]
    pub follow: bool,
    /// Start after this cursor (default: the last 20 events, or now with --follow).
    #[arg(long)]
    pub after: Option<i64>,
    #[arg(long)]
    pub task: Option<String>,
    #[arg(long)]
    pub worker: Option<String>,
    #[arg(long)]
    pub run: Option<String>,
    #[arg(long)]
    pub agent: Option<String>,
    /// Comma-separated types; `worker.*` matches a prefix.
    #[arg(long)]
    pub types: Option<String>,
}

fn parse_age(s: &str) -> std::result::Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a number with a unit such as 30d, got {s:?}"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" | "" => n * 86400,
        "w" => n * 7 * 86400,
        _ => return Err(format!("unknown unit {unit:?}; use s, m, h, d or w")),
    };
    Ok(Duration::from_secs(secs))
}

fn init_tracing(config: &Config) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(&config.log).unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    if config.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Runs a parsed command line; returns the process exit code.
pub fn main(cli: Cli) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = crate::server::anyhow_like::Result<T>;

fn load_config(global: &Global) -> Result<Config> {
    Ok(Config::load(global.config.as_deref())?)
}

async fn run(cli: Cli) -> Result<()> {
    let g = &cli.global;
    match &cli.command {
        Command::Serve { listen } => {
            let mut config = load_config(g)?;
            if let Some(l) = listen {
                config.listen = l.parse().map_err(|_| ClientError {
                    code: "bad_listen".into(),
                    message: format!("--listen: expected HOST:PORT, got {l:?}"),
                    status: None,
                })?;
            }
            init_tracing(&config);
            config.check_exposure()?;
            let listener = tokio::net::TcpListener::bind(config.listen)
                .await
                .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
            crate::server::run(config, listener, crate::server::shutdown_signal()).await
        }
        Command::Runner { data_dir } => {
            let config = load_config(g)?;
            init_tracing(&config);
            if config.agents.is_empty() {
                return Err(
                    "no agents configured: declare [agents.NAME] tables in shepherd.toml".into(),
                );
            }
            let token = g.token.clone().or_else(|| config.auth_token.clone());
            let mut rc = shepherd_runner::RunnerConfig::new(
                &g.server,
                token,
                config.agents.clone(),
                data_dir.clone().unwrap_or_else(|| config.data_dir.clone()),
            );
            rc.heartbeat_interval = config.runner_heartbeat;
            rc.cancel_grace = config.cancel_grace;
            let stop = tokio_util::sync::CancellationToken::new();
            let signal_stop = stop.clone();
            tokio::spawn(async move {
                crate::server::shutdown_signal().await;
                signal_stop.cancel();
            });
            tracing::info!(
                server = g.server,
                agents = config.agents.len(),
                "runner starting"
            );
            shepherd_runner::run(rc, stop).await.map_err(|e| e.into())
        }
        Command::Migrate => {
            let config = load_config(g)?;
            init_tracing(&config);
            let store = shepherd_store::Store::open(&config.store_config()).await?;
            println!(
                "migrations applied ({}: {})",
                store.backend_name(),
                store.url()
            );
            store.close();
            Ok(())
        }
        Command::Prune {
            transcripts_older_than,
            events_older_than,
        } => {
            let config = load_config(g)?;
            if transcripts_older_than.is_none() && events_older_than.is_none() {
                return Err(
                    "nothing to prune: give --transcripts-older-than and/or --events-older-than"
                        .into(),
                );
            }
            let store = shepherd_store::Store::open(&config.store_config()).await?;
            let now = shepherd_store::now_ms();
            if let Some(age) = transcripts_older_than {
                let (runs, bytes) = store
                    .prune_transcripts(now - age.as_millis() as i64)
                    .await?;
                println!(
                    "pruned transcripts of {runs} runs, freeing {} (run rows kept)",
                    human_bytes(bytes)
                );
            }
            if let Some(age) = events_older_than {
                let n = store.prune_events(now - age.as_millis() as i64).await?;
                println!("pruned {n} events");
            }
            store.close();
            Ok(())
        }
        Command::Task(t) => task(g, t).await,
        Command::Runs(r) => runs(g, r).await,
        Command::Events(e) => events(g, e).await,
        Command::Workers { all } => workers(g, *all).await,
        Command::Chat(a) => crate::chat_cli::chat(g, a).await,
        Command::Conversation(c) => crate::chat_cli::conversation(g, c).await,
    }
}

fn human_bytes(b: i64) -> String {
    match b {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / 1024.0 / 1024.0),
    }
}

fn client(g: &Global) -> Client {
    let token = g.token.clone().or_else(|| {
        std::env::var("SHEPHERD_AUTH_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    });
    Client::new(&g.server, token)
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn task_rows(tasks: &[Value]) -> Vec<Vec<String>> {
    tasks
        .iter()
        .map(|t| {
            vec![
                s(&t["vtid"]),
                s(&t["state"]),
                s(&t["priority"]),
                s(&t["agent_id"]),
                ago(&t["created_at"]),
                cut(&s(&t["title"]), 60),
            ]
        })
        .collect()
}

async fn task(g: &Global, cmd: &TaskCommand) -> Result<()> {
    let c = client(g);
    match cmd {
        TaskCommand::Add {
            title,
            spec,
            spec_file,
            vtid,
            priority,
            capabilities,
            agent,
            channel,
            workflow,
            draft,
        } => {
            let spec = match (spec, spec_file) {
                (Some(s), _) => s.clone(),
                (None, Some(p)) if p.as_os_str() == "-" => {
                    std::io::read_to_string(std::io::stdin())?
                }
                (None, Some(p)) => std::fs::read_to_string(p)
                    .map_err(|e| format!("--spec-file {}: {e}", p.display()))?,
                (None, None) => String::new(),
            };
            let body = json!({
                "vtid": vtid, "title": title, "spec": spec, "priority": priority, "capabilities": capabilities,
                "agent_id": agent, "channel_id": channel, "workflow": workflow, "dispatch": !draft,
            });
            let t = c.post("/api/v1/tasks", &body).await?;
            match g.output {
                Output::Json => print_json(&t),
                Output::Table => println!(
                    "created {} ({}, {})",
                    s(&t["vtid"]),
                    s(&t["state"]),
                    s(&t["workflow"])
                ),
            }
        }
        TaskCommand::List {
            state,
            agent,
            limit,
        } => {
            let mut q = format!("/api/v1/tasks?limit={limit}");
            if let Some(s) = state {
                q.push_str(&format!("&state={}", enc(s)));
            }
            if let Some(a) = agent {
                q.push_str(&format!("&agent_id={}", enc(a)));
            }
            let v = c.get(&q).await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    let tasks = v["tasks"].as_array().cloned().unwrap_or_default();
                    if tasks.is_empty() {
                        println!(
                            "No tasks. Create one with: shepherd task add \"TITLE\" --spec \"...\""
                        );
                    } else {
                        print!(
                            "{}",
                            table(
                                &["VTID", "STATE", "PRIO", "AGENT", "CREATED", "TITLE"],
                                &task_rows(&tasks)
                            )
                        );
                        println!("{} of {} shown", tasks.len(), s(&v["total"]));
                    }
                }
            }
        }
        TaskCommand::Show { vtid } => {
            let v = c.get(&format!("/api/v1/tasks/{}", enc(vtid))).await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    println!("{}  {}", s(&v["vtid"]), s(&v["title"]));
                    println!(
                        "state:     {} (workflow {})",
                        s(&v["state"]),
                        s(&v["workflow"])
                    );
                    println!(
                        "priority:  {}   agent: {}   attempts: {}",
                        s(&v["priority"]),
                        s(&v["agent_id"]),
                        s(&v["attempts"])
                    );
                    println!(
                        "created:   {} ({})",
                        s(&v["created_at"]),
                        ago(&v["created_at"])
                    );
                    if let Some(caps) = v["capabilities"].as_array().filter(|c| !c.is_empty()) {
                        println!(
                            "needs:     {}",
                            caps.iter().map(s).collect::<Vec<_>>().join(", ")
                        );
                    }
                    let claims = v["claims"].as_array().cloned().unwrap_or_default();
                    if !claims.is_empty() {
                        println!("\nClaims:");
                        let rows: Vec<Vec<String>> = claims
                            .iter()
                            .map(|c| {
                                vec![
                                    s(&c["worker_id"]),
                                    s(&c["purpose"]),
                                    s(&c["run_id"]),
                                    ago(&c["claimed_at"]),
                                    s(&c["release_reason"]),
                                ]
                            })
                            .collect();
                        print!(
                            "{}",
                            table(
                                &["WORKER", "PURPOSE", "RUN", "CLAIMED", "RELEASED BECAUSE"],
                                &rows
                            )
                        );
                    }
                    let events = v["events"].as_array().cloned().unwrap_or_default();
                    if !events.is_empty() {
                        println!("\nRecent events:");
                        for e in events.iter().rev().take(15).rev() {
                            println!("  {:>6}  {}  {}", s(&e["seq"]), s(&e["ts"]), s(&e["type"]));
                        }
                    }
                    if let Some(spec) = v["spec"].as_str().filter(|s| !s.is_empty()) {
                        println!(
                            "\nSpec:\n{}",
                            spec.lines()
                                .take(20)
                                .map(|l| format!("  {l}"))
                                .collect::<Vec<_>>()
                                .join("\n")
                        );
                    }
                }
            }
        }
        TaskCommand::Dispatch { vtid } => {
            let t = c
                .post(&format!("/api/v1/tasks/{}/dispatch", enc(vtid)), &json!({}))
                .await?;
            match g.output {
                Output::Json => print_json(&t),
                Output::Table => println!("dispatched {} ({})", s(&t["vtid"]), s(&t["state"])),
            }
        }
        TaskCommand::Cancel { vtid, reason } => {
            let v = c
                .post(
                    &format!("/api/v1/tasks/{}/cancel", enc(vtid)),
                    &json!({ "reason": reason }),
                )
                .await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    if v["cancelled"] == json!(true) {
                        println!("cancelled {vtid}");
                    } else {
                        let p = &v["pending_worker"];
                        println!(
                            "cancel requested: worker {} is stopping run {} (grace {}s)",
                            s(&p["worker_id"]),
                            s(&p["run_id"]),
                            s(&p["grace_secs"])
                        );
                    }
                }
            }
        }
        TaskCommand::Watch { vtid } => watch_task(g, &c, vtid).await?,
    }
    Ok(())
}

async fn runs(g: &Global, cmd: &RunsCommand) -> Result<()> {
    let c = client(g);
    match cmd {
        RunsCommand::List {
            agent,
            status,
            vtid,
            search,
            limit,
        } => {
            let mut q = format!("/api/v1/runs?limit={limit}");
            for (k, v) in [
                ("agent_id", agent),
                ("status", status),
                ("vtid", vtid),
                ("q", search),
            ] {
                if let Some(v) = v {
                    q.push_str(&format!("&{k}={}", enc(v)));
                }
            }
            let v = c.get(&q).await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    let runs = v["runs"].as_array().cloned().unwrap_or_default();
                    let rows: Vec<Vec<String>> = runs
                        .iter()
                        .map(|r| {
                            let live = if r["status"] == "running" {
                                s(&r["live_status"])
                            } else {
                                String::new()
                            };
                            vec![
                                s(&r["id"]),
                                s(&r["status"]),
                                s(&r["vtid"]),
                                s(&r["agent_id"]),
                                ago(&r["started_at"]),
                                s(&r["step_count"]),
                                cut(&format!("{} {}", s(&r["task"]), live), 50),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table(
                            &["RUN", "STATUS", "TASK", "AGENT", "STARTED", "STEPS", "TITLE"],
                            &rows
                        )
                    );
                    println!("{} of {} shown", runs.len(), s(&v["total"]));
                }
            }
        }
        RunsCommand::Show { id, full } => {
            let v = c.get(&format!("/api/v1/runs/{}", enc(id))).await?;
            let steps = c.get(&format!("/api/v1/runs/{}/steps", enc(id))).await?;
            match g.output {
                Output::Json => print_json(&json!({ "run": v, "steps": steps["steps"] })),
                Output::Table => {
                    println!("run {}  ({})", s(&v["id"]), s(&v["status"]));
                    println!("task:    {}  {}", s(&v["vtid"]), s(&v["task"]));
                    println!("agent:   {} · {}", s(&v["agent_id"]), s(&v["worker_type"]));
                    println!(
                        "started: {} ({})",
                        s(&v["started_at"]),
                        ago(&v["started_at"])
                    );
                    if !v["completed_at"].is_null() {
                        println!("ended:   {}", s(&v["completed_at"]));
                    }
                    if let Some(r) = v["result"].as_str() {
                        println!("result:  {}", cut(r, 200));
                    }
                    let list = steps["steps"].as_array().cloned().unwrap_or_default();
                    println!("\nTranscript ({} steps):", list.len());
                    for st in &list {
                        print!("{}", crate::render::step(&st["step"], *full, 12));
                    }
                }
            }
        }
    }
    Ok(())
}

async fn workers(g: &Global, all: bool) -> Result<()> {
    let c = client(g);
    let v = c
        .get(&format!("/api/v1/workers?include_closed={all}"))
        .await?;
    match g.output {
        Output::Json => print_json(&v),
        Output::Table => {
            let ws = v["workers"].as_array().cloned().unwrap_or_default();
            let rows: Vec<Vec<String>> = ws
                .iter()
                .map(|w| {
                    vec![
                        s(&w["worker_id"]),
                        s(&w["agent_id"]),
                        s(&w["status"]),
                        s(&w["event_state"]),
                        s(&w["source"]),
                        ago(&w["last_heartbeat_at"]),
                        s(&w["project_path"]),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &[
                        "WORKER",
                        "AGENT",
                        "STATUS",
                        "STATE",
                        "SOURCE",
                        "HEARTBEAT",
                        "PROJECT"
                    ],
                    &rows
                )
            );
        }
    }
    Ok(())
}

fn event_query(e: &EventsArgs) -> String {
    let mut q = String::new();
    for (k, v) in [
        ("task_id", &e.task),
        ("worker_id", &e.worker),
        ("run_id", &e.run),
        ("agent_id", &e.agent),
        ("types", &e.types),
    ] {
        if let Some(v) = v {
            q.push_str(&format!("&{k}={}", enc(v)));
        }
    }
    q
}

fn print_event(g: &Global, name: &str, data: &Value) {
    match g.output {
        Output::Json => println!("{}", json!({ "event": name, "data": data })),
        Output::Table => {
            let ids: Vec<String> = ["task_id", "worker_id", "run_id"]
                .iter()
                .filter_map(|k| {
                    data[*k]
                        .as_str()
                        .map(|v| format!("{}={}", k.trim_end_matches("_id"), cut(v, 14)))
                })
                .collect();
            let detail = match &data["data"] {
                Value::Object(m) if m.contains_key("preview") => s(&m["preview"]),
                Value::Object(m) if m.contains_key("message") && !m["message"].is_null() => {
                    s(&m["message"])
                }
                Value::Object(m) if m.contains_key("to") => format!("→ {}", s(&m["to"])),
                Value::Object(m) if m.contains_key("status") => s(&m["status"]),
                _ => String::new(),
            };
            println!(
                "{:>7}  {}  {:<28} {}  {}",
                s(&data["seq"]),
                s(&data["ts"]),
                name,
                ids.join(" "),
                cut(&detail, 80)
            );
        }
    }
}

/// Follows an SSE path on the server with resume, printing drops to stderr.
async fn follow(
    g: &Global,
    path: &str,
    cursor: Option<i64>,
    on_frame: impl FnMut(&SseFrame) -> bool,
) -> Result<()> {
    let token = g.token.clone().or_else(|| {
        std::env::var("SHEPHERD_AUTH_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    });
    let conn = Connector::new(&g.server, token);
    follow_sse(&conn, path, cursor, on_frame, |msg| eprintln!("({msg})")).await?;
    Ok(())
}

async fn events(g: &Global, e: &EventsArgs) -> Result<()> {
    let c = client(g);
    let filter = event_query(e);
    if !e.follow {
        let v = match e.after {
            Some(a) => {
                c.get(&format!("/api/v1/events?after={a}&limit=100{filter}"))
                    .await?
            }
            None => c.get(&format!("/api/v1/events?limit=20{filter}")).await?,
        };
        for ev in v["events"].as_array().into_iter().flatten() {
            print_event(g, ev["type"].as_str().unwrap_or("?"), ev);
        }
        return Ok(());
    }
    let path = format!(
        "/api/events?after={}{}",
        e.after.map(|a| a.to_string()).unwrap_or("now".into()),
        filter
    );
    follow(g, &path, e.after, |f| {
        let data: Value = serde_json::from_str(&f.data).unwrap_or(Value::Null);
        if f.event == "resync" {
            eprintln!("(resync: {})", s(&data["message"]));
        } else {
            print_event(g, &f.event, &data);
        }
        true
    })
    .await
}

async fn watch_task(g: &Global, c: &Client, vtid: &str) -> Result<()> {
    let path = format!("/api/v1/tasks/{}", enc(vtid));
    let res = c
        .request(reqwest::Method::GET, &path)
        .send()
        .await
        .map_err(|e| format!("cannot reach {}: {e}", c.base()))?;
    let cursor: i64 = res
        .headers()
        .get("x-shepherd-cursor")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let status = res.status();
    let task: Value = res.json().await.unwrap_or_default();
    if !status.is_success() {
        return Err(format!(
            "{} ({})",
            s(&task["error"]["message"]),
            s(&task["error"]["code"])
        )
        .into());
    }
    let finals = ["done", "failed", "cancelled"];
    println!("{}  {}  [{}]", vtid, s(&task["title"]), s(&task["state"]));
    if finals.contains(&task["state"].as_str().unwrap_or("")) {
        return Ok(());
    }
    let events_path = format!("/api/events?task_id={}", enc(vtid));
    let mut finished = false;
    let mut pending_steps: Vec<String> = Vec::new();
    follow(g, &events_path, Some(cursor), |f| {
        let data: Value = serde_json::from_str(&f.data).unwrap_or(Value::Null);
        match data["type"].as_str().unwrap_or("") {
            "task.state_changed" => {
                println!(
                    "→ {}  ({})",
                    s(&data["data"]["to"]),
                    s(&data["data"]["cause"])
                );
                if finals.contains(&data["data"]["to"].as_str().unwrap_or("")) {
                    finished = true;
                }
            }
            "run.step" => {
                if let Some(run) = data["run_id"].as_str() {
                    pending_steps.push(run.to_owned());
                }
                println!(
                    "  · [{}] {}",
                    s(&data["data"]["kind"]),
                    cut(&s(&data["data"]["preview"]), 100)
                );
            }
            "run.status" => println!("  … {}", s(&data["data"]["status"])),
            "run.started" => println!(
                "run {} started by {}",
                s(&data["run_id"]),
                s(&data["worker_id"])
            ),
            "run.completed" => println!(
                "run {} ended {}",
                s(&data["run_id"]),
                s(&data["data"]["status"])
            ),
            "worker.claim.expired" => println!("! claim expired: {}", s(&data["data"]["reason"])),
            "task.cancel_requested" => println!("! cancel requested"),
            other
                if !other.is_empty()
                    && other.contains('.')
                    && data["data"]["message"].is_string() =>
            {
                println!("  {other}: {}", s(&data["data"]["message"]))
            }
            _ => {}
        }
        if g.output == Output::Json {
            println!("{data}");
        }
        !finished
    })
    .await
}
