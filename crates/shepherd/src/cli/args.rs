//! The command line's grammar: every verb, option and its help text.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    /// Configuration file (serve, migrate, prune, config).
    #[arg(long, global = true, env = "SHEPHERD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Whether `--server` was given on the command line (not the default,
    /// not SHEPHERD_SERVER): the server-side verbs refuse it.
    #[arg(skip)]
    pub server_given: bool,
}

impl Cli {
    /// Parses the process's arguments, noting where `--server` came from.
    pub fn parse_args() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().get_matches();
        let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        // A global option is recorded on the deepest subcommand it reached.
        let mut m = &matches;
        while let Some((_, sub)) = m.subcommand() {
            m = sub;
        }
        cli.global.server_given =
            m.value_source("server") == Some(clap::parser::ValueSource::CommandLine);
        cli
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Columns for people.
    Table,
    /// JSON, for scripts (one object per line when streaming).
    Json,
    /// YAML, as `kubectl -o yaml` (one document per event when streaming).
    Yaml,
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
    /// Sessions: workspaces with terminal, agent and git-diff tabs.
    #[command(subcommand)]
    Session(crate::session_cli::SessionCommand),
    /// Attach this terminal to a session's tab (detach: Ctrl-] then d).
    Attach(crate::session_cli::AttachArgs),
    /// Serve MCP on stdin/stdout for an agent, as a client of the server
    /// (--server, --token): `claude mcp add shepherd -- shepherd mcp`.
    Mcp,
    /// Supervise one agent process for a runner (started by the runner).
    #[command(hide = true)]
    Shim {
        /// The run's directory in the runner's data directory.
        #[arg(long)]
        dir: PathBuf,
        /// SIGTERM to SIGKILL when asked to stop, in milliseconds.
        #[arg(long, default_value_t = 30_000)]
        grace_ms: u64,
        /// End the agent if no runner renews the lease for this long (ms).
        #[arg(long, default_value_t = 270_000)]
        lease_timeout_ms: u64,
        /// The agent's command line.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Print the effective configuration: each setting's value and where it
    /// came from (file, environment or default), secrets as `***`.
    Config,
    /// Print a shell completion script: `shepherd completion bash > ~/.local/share/bash-completion/completions/shepherd`.
    Completion {
        /// bash, zsh or fish (elvish and powershell work too).
        shell: clap_complete::Shell,
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

impl Command {
    /// Whether this verb only prints something and exits (so it too should
    /// end quietly when piped into `head`).
    pub fn only_prints(&self) -> bool {
        matches!(self, Command::Config | Command::Completion { .. })
    }

    /// Whether this verb talks to a server (rather than being one).
    pub fn is_client(&self) -> bool {
        matches!(
            self,
            Command::Task(_) | Command::Runs(_) | Command::Events(_) | Command::Workers { .. }
        )
    }
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task (dispatched at once unless --draft).
    Add {
        /// A one-line title (the agent receives it with the spec).
        title: String,
        /// The spec, as markdown text.
        #[arg(long, conflicts_with = "spec_file")]
        spec: Option<String>,
        /// Read the spec from a file (`-` for stdin).
        #[arg(long)]
        spec_file: Option<PathBuf>,
        /// The task's id (default: one is generated).
        #[arg(long)]
        vtid: Option<String>,
        /// Higher runs first; negative is allowed.
        #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
        priority: i64,
        /// Required capability (repeatable).
        #[arg(long = "capability", short = 'c')]
        capabilities: Vec<String>,
        /// The agent that runs it (an `[agents.*]` name).
        #[arg(long)]
        agent: Option<String>,
        /// The channel (resource) it belongs to.
        #[arg(long)]
        channel: Option<String>,
        /// simple (default) or autopilot.
        #[arg(long)]
        workflow: Option<String>,
        /// Leave it as a draft; dispatch later.
        #[arg(long)]
        draft: bool,
        /// Attempts in all before it ends failed (failed, timed-out and
        /// lost runs are retried after a backoff); default: the agent's.
        #[arg(long)]
        max_attempts: Option<i64>,
        /// Not claimable before this long from now (e.g. 10m, 2h).
        #[arg(long, value_parser = parse_age)]
        delay: Option<Duration>,
    },
    /// List tasks, newest first.
    List {
        /// Only tasks in this state (e.g. pending, running, done, failed).
        #[arg(long)]
        state: Option<String>,
        /// Only tasks for this agent.
        #[arg(long)]
        agent: Option<String>,
        /// At most this many.
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
        /// Why, recorded with the cancel and shown to the worker.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Follow a task's state changes and its runs' steps until it ends.
    Watch { vtid: String },
    /// Retry a failed task: it goes back to the queue (operator).
    Retry { vtid: String },
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, newest first.
    List {
        /// Only runs of this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only runs with this status: running, done, failed or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this task.
        #[arg(long)]
        vtid: Option<String>,
        /// Search task titles.
        #[arg(long)]
        search: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Show a run and its transcript.
    Show {
        /// The run's id, or a unique prefix of it.
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
    /// Only events of this task (vtid).
    #[arg(long)]
    pub task: Option<String>,
    /// Only events of this worker.
    #[arg(long)]
    pub worker: Option<String>,
    /// Only events of this run.
    #[arg(long)]
    pub run: Option<String>,
    /// Only events that name this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Comma-separated types; `worker.*` matches a prefix.
    #[arg(long)]
    pub types: Option<String>,
}

pub fn parse_age(s: &str) -> std::result::Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a number with a unit such as 30d, got {s:?}"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        "w" => n * 7 * 86400,
        // A bare number is refused: 30 could be seconds or days.
        "" => {
            return Err(format!(
                "{s:?} has no unit; write e.g. {n}d (s, m, h, d or w)"
            ))
        }
        _ => return Err(format!("unknown unit {unit:?}; use s, m, h, d or w")),
    };
    Ok(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_age_needs_a_unit() {
        assert_eq!(parse_age("30d").unwrap(), Duration::from_secs(30 * 86400));
        assert_eq!(parse_age("2h").unwrap(), Duration::from_secs(7200));
        let e = parse_age("30").unwrap_err();
        assert!(e.contains("no unit"), "{e}");
        assert!(parse_age("30y").is_err());
    }
}
