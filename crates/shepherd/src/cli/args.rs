//! The command line's grammar: every verb, option and its help text.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::ArgValueCandidates;

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
    /// The client options in their older place, before the verb
    /// (`shepherd --server URL task list`); they apply to client verbs only.
    #[command(flatten)]
    pub before_verb: BeforeVerb,
    /// What the verb runs with: the options wherever they were given.
    #[arg(skip)]
    pub global: Global,
}

/// The options every verb runs with, gathered from wherever they were given.
#[derive(Debug, Clone, Default)]
pub struct Global {
    /// The server a client verb talks to.
    pub server: String,
    /// Bearer token (the operator token, or a worker token).
    pub token: Option<String>,
    pub output: Output,
    /// Configuration file (server-side verbs).
    pub config: Option<PathBuf>,
    /// Whether a server was named on the command line (not the default,
    /// not SHEPHERD_SERVER): the server-side verbs refuse it.
    pub server_given: bool,
}

/// `--server`, `--token` and `-o` given before the verb. Hidden: the help
/// shows them on the client verbs, where they belong.
#[derive(Debug, Args)]
pub struct BeforeVerb {
    #[arg(long, hide = true)]
    pub server: Option<String>,
    #[arg(long, hide = true)]
    pub token: Option<String>,
    #[arg(long, hide = true)]
    pub token_file: Option<PathBuf>,
    #[arg(short = 'o', long, value_enum, hide = true)]
    pub output: Option<Output>,
    /// Configuration file (serve, migrate, runner, prune, config).
    #[arg(long, global = true, env = "SHEPHERD_CONFIG", help_heading = GLOBAL_OPTIONS)]
    pub config: Option<PathBuf>,
}

/// How a verb that talks to a server reaches it. Shown under their own
/// heading in each verb's help, apart from the verb's own options.
#[derive(Debug, Args, Clone)]
pub struct ConnectionFlags {
    /// Server to talk to.
    #[arg(
        long,
        global = true,
        env = "SHEPHERD_SERVER",
        default_value = "http://127.0.0.1:7700",
        help_heading = GLOBAL_OPTIONS
    )]
    pub server: String,
    /// Bearer token (the operator token, or a worker token). On the command
    /// line it is visible to other users (`ps`): prefer SHEPHERD_TOKEN or
    /// --token-file.
    #[arg(
        long,
        global = true,
        env = "SHEPHERD_TOKEN",
        hide_env_values = true,
        help_heading = GLOBAL_OPTIONS
    )]
    pub token: Option<String>,
    /// Read the bearer token from this file (its first line; keep it mode 600).
    #[arg(
        long,
        global = true,
        env = "SHEPHERD_TOKEN_FILE",
        help_heading = GLOBAL_OPTIONS
    )]
    pub token_file: Option<PathBuf>,
}

/// The heading of the options every verb of a kind shares.
const GLOBAL_OPTIONS: &str = "Global options";

/// The options of every verb that talks to a server and prints a result.
#[derive(Debug, Args, Clone)]
pub struct ClientFlags {
    #[command(flatten)]
    pub connection: ConnectionFlags,
    /// Output format.
    #[arg(
        short = 'o',
        long,
        global = true,
        value_enum,
        default_value_t = Output::Table,
        help_heading = GLOBAL_OPTIONS
    )]
    pub output: Output,
}

/// `-o` for the server-side verbs that print a result.
#[derive(Debug, Args, Clone)]
pub struct OutputFlag {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

impl Cli {
    /// Parses the process's arguments and gathers the options (see [`Global`]).
    pub fn parse_args() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().get_matches();
        let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        // A global option is recorded on the deepest subcommand it reached.
        let mut m = &matches;
        while let Some((_, sub)) = m.subcommand() {
            m = sub;
        }
        // (`value_source` panics for an option the verb does not have.)
        let on_command_line = |m: &clap::ArgMatches, id: &str| {
            m.try_get_raw(id).is_ok_and(|v| v.is_some())
                && m.value_source(id) == Some(clap::parser::ValueSource::CommandLine)
        };
        let after_verb = on_command_line(m, "server");
        cli.gather(after_verb);
        // Before the verb or after it (a global option's value is also
        // propagated to the other level, so the source says which it was).
        let typed = TokenSources {
            token: on_command_line(&matches, "token") || on_command_line(m, "token"),
            token_file: on_command_line(&matches, "token_file") || on_command_line(m, "token_file"),
        };
        if let Err(e) = cli.resolve_token(typed) {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        cli
    }

    /// Settles [`Global::token`]: `--token` typed on the command line, else
    /// the file `--token-file` (or SHEPHERD_TOKEN_FILE) names, else
    /// SHEPHERD_TOKEN. A token typed on the command line works but is
    /// visible to every user of the machine (`ps`, `/proc/PID/cmdline`):
    /// said on stderr. Both typed is refused: which one was meant?
    pub fn resolve_token(&mut self, typed: TokenSources) -> std::result::Result<(), String> {
        let file = self
            .command
            .client_flags()
            .and_then(|c| c.token_file.clone())
            .or_else(|| self.before_verb.token_file.clone());
        if typed.token && typed.token_file {
            return Err("give --token or --token-file, not both".into());
        }
        if typed.token {
            eprintln!(
                "warning: a token given with --token is visible to other users of this machine (ps, /proc); set SHEPHERD_TOKEN or use --token-file instead"
            );
            return Ok(());
        }
        if let Some(path) = file {
            self.global.token = Some(read_token_file(&path)?);
        }
        Ok(())
    }

    /// Fills [`Cli::global`]: options after the verb win over the same
    /// options before it, which win over the environment and defaults.
    pub fn gather(&mut self, server_after_verb: bool) {
        let b = &self.before_verb;
        let mut g = Global {
            server: "http://127.0.0.1:7700".into(),
            config: b.config.clone(),
            server_given: server_after_verb || b.server.is_some(),
            ..Global::default()
        };
        if let Some(c) = self.command.client_flags() {
            g.server = c.server.clone();
            g.token = c.token.clone();
        }
        if let Some(o) = self.command.client_output() {
            g.output = o;
        }
        if let Some(o) = self.command.output_flag() {
            g.output = o.output;
        }
        if !server_after_verb {
            if let Some(s) = &b.server {
                g.server = s.clone();
            }
        }
        if g.token.is_none() {
            g.token = b.token.clone();
        }
        if let Some(o) = b.output {
            if g.output == Output::Table {
                g.output = o;
            }
        }
        if let Command::Prune {
            server: Some(s), ..
        } = &self.command
        {
            g.server = s.clone();
            g.server_given = true;
        }
        self.global = g;
    }
}

/// Which token options were typed on the command line (not taken from the
/// environment).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenSources {
    pub token: bool,
    pub token_file: bool,
}

/// The token in `path`: its content without the line end (or surrounding
/// blanks) an editor or `echo` leaves. A file other users may read is
/// used, with a warning: the token is only as private as the file.
pub fn read_token_file(path: &std::path::Path) -> std::result::Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--token-file {shown}: cannot read it: {e}"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("--token-file {shown}: the file is empty"));
    }
    if token.contains(['\n', '\r']) {
        return Err(format!(
            "--token-file {shown}: the file holds more than one line; it should hold the token alone"
        ));
    }
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            eprintln!(
                "warning: --token-file {shown} is open to other users (mode {mode:o}); make it private: chmod 600 {shown}"
            );
        }
    }
    Ok(token.to_owned())
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Columns for people.
    #[default]
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
        #[command(flatten)]
        client: ConnectionFlags,
        /// Where process-group records and step spools live (default: SHEPHERD_DATA_DIR).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Take over this data directory's host id although another runner
        /// registered it (needs an admin's token): that runner's link is
        /// closed and its host token stops working.
        #[arg(long)]
        replace_host: bool,
    },
    /// Create, list, inspect, cancel and watch tasks.
    Task {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: TaskCommand,
    },
    /// List and inspect runs and their transcripts.
    Runs {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: RunsCommand,
    },
    /// Print events; with --follow, keep streaming (resumes after drops).
    Events {
        #[command(flatten)]
        client: ClientFlags,
        #[command(flatten)]
        args: EventsArgs,
    },
    /// Token usage and cost of runs, summed per agent, task or day.
    Usage {
        #[command(flatten)]
        client: ClientFlags,
        #[command(flatten)]
        args: crate::cli::usage::UsageArgs,
    },
    /// Talk to a resource's agent: type a message, watch the steps stream.
    Chat {
        #[command(flatten)]
        client: ClientFlags,
        #[command(flatten)]
        args: crate::cli::chat::ChatArgs,
    },
    /// List, show, send to and cancel conversations.
    Conversation {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: crate::cli::chat::ConversationCommand,
    },
    /// List hosts: server nodes and runners' machines, online or not.
    Hosts {
        #[command(flatten)]
        client: ClientFlags,
    },
    /// List workers (live and recovered).
    Workers {
        #[command(flatten)]
        client: ClientFlags,
        /// Include workers that have closed.
        #[arg(long)]
        all: bool,
    },
    /// Sessions: workspaces with terminal, agent and git-diff tabs.
    Session {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: crate::cli::session::SessionCommand,
    },
    /// Attach this terminal to a session's tab (detach: Ctrl-] then d).
    Attach {
        #[command(flatten)]
        client: ConnectionFlags,
        #[command(flatten)]
        args: crate::cli::session::AttachArgs,
    },
    /// Ask a person and wait for the answer (for agents and their scripts):
    /// prints the answer alone; exit 0 on allow or an answer, 1 on deny or expiry.
    Ask {
        #[command(flatten)]
        client: ConnectionFlags,
        #[command(flatten)]
        args: crate::cli::input::AskArgs,
    },
    /// What agents wait for: pending permission requests and questions.
    Inbox {
        #[command(flatten)]
        client: ClientFlags,
        #[command(flatten)]
        args: crate::cli::input::InboxArgs,
    },
    /// Answer an agent's request: --allow, --deny, --text or --option.
    Answer {
        #[command(flatten)]
        client: ClientFlags,
        #[command(flatten)]
        args: crate::cli::input::AnswerArgs,
    },
    /// Resources, which conversations belong to: add, list, show.
    Resource {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: crate::cli::resources::ResourceCommand,
    },
    /// Users and their roles: add, list, set-role, disable, enable (admins).
    Users {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: crate::cli::users::UserCommand,
    },
    /// Personal access tokens: create, list, revoke.
    Tokens {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: crate::cli::users::TokenCommand,
    },
    /// Webhook subscriptions: add, list, rm, and each one's deliveries.
    Webhooks {
        #[command(flatten)]
        client: ClientFlags,
        #[command(subcommand)]
        cmd: crate::cli::webhooks::WebhookCommand,
    },
    /// Serve MCP on stdin/stdout for an agent, as a client of the server
    /// (--server, --token): `claude mcp add shepherd -- shepherd mcp`.
    Mcp {
        #[command(flatten)]
        client: ConnectionFlags,
    },
    /// The MCP server Claude Code asks for permission through
    /// (`permissions = "ask"`; the runner configures it).
    #[command(hide = true)]
    PermissionTool {
        #[command(flatten)]
        client: ConnectionFlags,
    },
    /// Supervise one agent process for a runner (started by the runner).
    #[command(hide = true)]
    Shim(ShimFlags),
    /// Print the effective configuration: each setting's value and where it
    /// came from (file, environment or default), secrets as `***`.
    Config {
        #[command(flatten)]
        output: OutputFlag,
    },
    /// Print a shell completion script: `shepherd completion bash > ~/.local/share/bash-completion/completions/shepherd`.
    /// It asks `shepherd` (on PATH) as you type, so task, run and session ids
    /// and agent names come from the server (SHEPHERD_SERVER, SHEPHERD_TOKEN).
    Completion {
        /// bash, zsh or fish (elvish and powershell work too).
        shell: clap_complete::Shell,
    },
    /// Back up the database and the data directory into one archive, while
    /// the server runs (run on the server's machine, with its configuration).
    Backup {
        /// The archive to write (.tar.gz).
        file: PathBuf,
        /// Only the data directory (the database is PostgreSQL: pg_dump it).
        #[arg(long)]
        files_only: bool,
        /// Accepted only to refuse it clearly: backup works on the files.
        #[arg(long, hide = true)]
        server: Option<String>,
    },
    /// Restore a `shepherd backup` archive into a data directory.
    Restore {
        /// The archive `shepherd backup` wrote.
        file: PathBuf,
        /// Where to restore (empty, or replaced with --force).
        #[arg(long)]
        data_dir: PathBuf,
        /// Replace what the directory holds.
        #[arg(long)]
        force: bool,
    },
    /// Copy a SQLite store into an empty PostgreSQL database: every task,
    /// run, transcript and event (with its sequence number), verified at the
    /// end. Stop the server first; run it again to resume an interrupted copy.
    MigrateStore {
        /// The SQLite database: sqlite:PATH or sqlite://PATH.
        #[arg(long)]
        from: String,
        /// The PostgreSQL database: postgres://….
        #[arg(long)]
        to: String,
        /// The PostgreSQL schema to copy into (as SHEPHERD_PG_SCHEMA).
        #[arg(long)]
        pg_schema: Option<String>,
        /// Rows per transaction.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Remove old data on purpose (transcripts, events).
    Prune {
        /// Null transcripts of runs that ended longer ago than this (e.g. 30d, 12h).
        #[arg(long, value_parser = parse_age)]
        transcripts_older_than: Option<Duration>,
        /// Delete events older than this (e.g. 90d).
        #[arg(long, value_parser = parse_age)]
        events_older_than: Option<Duration>,
        /// Delete `shepherd/*` branches of worktree runs that ended longer ago than this.
        #[arg(long, value_parser = parse_age)]
        branches_older_than: Option<Duration>,
        #[command(flatten)]
        output: OutputFlag,
        /// Accepted only to refuse it clearly: prune works on a database.
        #[arg(long, hide = true)]
        server: Option<String>,
    },
}

impl Command {
    /// Whether this verb only prints something and exits (so it too should
    /// end quietly when piped into `head`).
    pub fn only_prints(&self) -> bool {
        matches!(self, Command::Config { .. } | Command::Completion { .. })
    }

    /// Whether this verb talks to a server (rather than being one).
    pub fn is_client(&self) -> bool {
        matches!(
            self,
            Command::Task { .. }
                | Command::Runs { .. }
                | Command::Events { .. }
                | Command::Workers { .. }
                | Command::Hosts { .. }
                | Command::Usage { .. }
        )
    }

    /// How a verb that talks to a server reaches it.
    pub fn client_flags(&self) -> Option<&ConnectionFlags> {
        match self {
            Command::Runner { client, .. }
            | Command::Attach { client, .. }
            | Command::Ask { client, .. }
            | Command::PermissionTool { client }
            | Command::Mcp { client } => Some(client),
            _ => self.printing_client_flags().map(|c| &c.connection),
        }
    }

    /// The `-o` of a verb that talks to a server and prints a result.
    pub fn client_output(&self) -> Option<Output> {
        self.printing_client_flags().map(|c| c.output)
    }

    fn printing_client_flags(&self) -> Option<&ClientFlags> {
        match self {
            Command::Task { client, .. }
            | Command::Runs { client, .. }
            | Command::Events { client, .. }
            | Command::Chat { client, .. }
            | Command::Conversation { client, .. }
            | Command::Workers { client, .. }
            | Command::Hosts { client }
            | Command::Usage { client, .. }
            | Command::Session { client, .. }
            | Command::Inbox { client, .. }
            | Command::Answer { client, .. }
            | Command::Webhooks { client, .. }
            | Command::Users { client, .. }
            | Command::Tokens { client, .. }
            | Command::Resource { client, .. } => Some(client),
            _ => None,
        }
    }

    /// `-o` of a server-side verb that has one.
    pub fn output_flag(&self) -> Option<&OutputFlag> {
        match self {
            Command::Config { output } | Command::Prune { output, .. } => Some(output),
            _ => None,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task (dispatched at once unless --draft).
    Add(AddTask),
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
        /// Keep the list on screen and redraw it whenever an event arrives
        /// (from the event stream, not by polling); Ctrl-C ends it.
        #[arg(short, long)]
        watch: bool,
    },
    /// Show one task with its claims and recent events.
    Show {
        /// The task's id (VTID-…).
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::tasks))]
        vtid: String,
    },
    /// Dispatch a draft.
    Dispatch {
        /// The task's id (VTID-…).
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::tasks))]
        vtid: String,
    },
    /// Cancel a task (the worker holding it is told at once).
    Cancel {
        /// The task's id (VTID-…).
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::tasks))]
        vtid: String,
        /// Why, recorded with the cancel and shown to the worker.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Follow a task's state changes and its runs' steps until it ends.
    Watch {
        /// The task's id (VTID-…).
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::tasks))]
        vtid: String,
    },
    /// Retry a failed or cancelled task: it goes back to the queue (operator).
    Retry {
        /// The task's id (VTID-…).
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::tasks))]
        vtid: String,
    },
}

/// `shepherd task add`'s arguments.
#[derive(Debug, Args)]
pub struct AddTask {
    /// A one-line title (the agent is asked it when the task has no spec).
    pub title: String,
    /// The spec, as markdown text.
    #[arg(long, conflicts_with = "spec_file")]
    pub spec: Option<String>,
    /// Read the spec from a file (`-` for stdin).
    #[arg(long)]
    pub spec_file: Option<PathBuf>,
    /// The task's id (default: one is generated).
    #[arg(long)]
    pub vtid: Option<String>,
    /// Higher runs first; negative is allowed.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i64,
    /// Required capability (repeatable).
    #[arg(long = "capability", short = 'c')]
    pub capabilities: Vec<String>,
    /// The agent that runs it (an `[agents.*]` name, or one a registered
    /// worker declares; see --external).
    #[arg(long, add = ArgValueCandidates::new(crate::cli::completion::agents))]
    pub agent: Option<String>,
    /// The agent is an outside worker's that has not registered yet: accept
    /// it although no one declares it now (the task waits for the worker).
    #[arg(long, requires = "agent")]
    pub external: bool,
    /// The channel (resource) it belongs to.
    #[arg(long)]
    pub channel: Option<String>,
    /// simple (default) or autopilot.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Leave it as a draft; dispatch later.
    #[arg(long)]
    pub draft: bool,
    /// Attempts in all before it ends failed (failed, timed-out and
    /// lost runs are retried after a backoff); default: the agent's.
    #[arg(long)]
    pub max_attempts: Option<i64>,
    /// Not claimable before this long from now (e.g. 10m, 2h).
    #[arg(long, value_parser = parse_age)]
    pub delay: Option<Duration>,
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
        /// Keep the list on screen and redraw it whenever an event arrives
        /// (from the event stream, not by polling); Ctrl-C ends it.
        #[arg(short, long)]
        watch: bool,
    },
    /// Show a run and its transcript.
    Show {
        /// The run's id, or a unique prefix of it.
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::runs))]
        id: String,
        /// Do not cut long output.
        #[arg(long)]
        full: bool,
    },
    /// Print a worktree run's diff against its base (colour on a terminal).
    Diff {
        /// The run's id, or a unique prefix of it.
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::runs))]
        id: String,
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
    /// Only changes made by this actor: a user's name, worker:<id>,
    /// run:<id> or system.
    #[arg(long)]
    pub actor: Option<String>,
    /// Comma-separated types; `worker.*` matches a prefix.
    #[arg(long)]
    pub types: Option<String>,
}

pub use shepherd_core::time::parse_age;

/// A umask in octal (`22`, `022`, `0077`).
pub fn parse_umask(s: &str) -> std::result::Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("expected an octal umask such as 022, got {s:?}"))
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

    /// Every option and argument of every verb says what it is in `--help`,
    /// and verbs that print nothing but a stream or a terminal offer no `-o`.
    #[test]
    fn every_argument_is_described_and_only_printing_verbs_take_o() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.is_hide_set() {
                    continue;
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let cli = Cli::command();
        let mut missing = Vec::new();
        walk(&cli, "shepherd", &mut missing);
        assert!(missing.is_empty(), "undescribed: {missing:#?}");
        for verb in ["attach", "mcp", "ask", "runner"] {
            let sub = cli.find_subcommand(verb).unwrap();
            assert!(
                sub.get_arguments().all(|a| a.get_id() != "output"),
                "{verb} offers -o"
            );
        }
    }
}

/// `shepherd shim`'s arguments: what the runner tells the shim of one run.
#[derive(Debug, Clone, clap::Args)]
pub struct ShimFlags {
    /// Wait on standard input for the run to supervise: a shim a runner
    /// starts in advance, so that a claimed run need not wait for one.
    #[arg(long, conflicts_with_all = ["dir", "argv"])]
    pub stand_by: bool,
    /// The run's directory in the runner's data directory.
    #[arg(long, required_unless_present = "stand_by")]
    pub dir: Option<PathBuf>,
    /// SIGTERM to SIGKILL when asked to stop, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub grace_ms: u64,
    /// End the agent if no runner renews the lease for this long (ms).
    #[arg(long, default_value_t = 270_000)]
    pub lease_timeout_ms: u64,
    /// The agent's umask, in octal (default: the shim's own).
    #[arg(long, value_parser = parse_umask)]
    pub umask: Option<u32>,
    /// The agent's command line.
    #[arg(last = true, required_unless_present = "stand_by")]
    pub argv: Vec<String>,
}

/// `shepherd shim` alone, for [`ShimFlags::parse_if_shim`].
#[derive(Debug, Parser)]
#[command(name = "shepherd shim")]
struct ShimOnly {
    #[command(flatten)]
    flags: ShimFlags,
}

impl ShimFlags {
    /// The shim's arguments when this process is `shepherd shim`, parsed
    /// without building the whole command line: the shim's start is on
    /// the way from a claim to the agent's first step, and clap building
    /// every verb's arguments cost about a millisecond of it.
    pub fn parse_if_shim() -> Option<ShimFlags> {
        let mut args = std::env::args_os();
        let program = args.next()?;
        if args.next()? != "shim" {
            return None;
        }
        let rest = std::iter::once(program).chain(args);
        Some(ShimOnly::parse_from(rest).flags)
    }

    /// The arguments a runner sent a shim started in advance.
    pub fn parse_job(
        args: Vec<std::ffi::OsString>,
    ) -> Result<shepherd_runner::shim::ShimArgs, String> {
        let all = std::iter::once("shepherd shim".into()).chain(args);
        let flags = ShimOnly::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .flags;
        if flags.stand_by {
            return Err("a run's arguments cannot ask to stand by".into());
        }
        flags.to_shim_args()
    }

    /// The shim's own arguments, as its supervisor loop takes them.
    pub fn to_shim_args(&self) -> Result<shepherd_runner::shim::ShimArgs, String> {
        let dir = self.dir.clone().ok_or("no run directory (--dir)")?;
        Ok(shepherd_runner::shim::ShimArgs {
            dir,
            grace: std::time::Duration::from_millis(self.grace_ms),
            lease_timeout: std::time::Duration::from_millis(self.lease_timeout_ms),
            umask: self.umask,
            argv: self.argv.clone(),
            env: None,
        })
    }
}
