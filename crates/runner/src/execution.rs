//! One run: start the agent process, turn its output into steps, deliver
//! them (surviving server restarts), obey cancel and timeout, report the end.
//!
//! This file holds what a run is (its assignment, context and ending), how
//! it starts ([`execute`]) or is carried on after a restart ([`adopt`]), and
//! how its end is reported. What happens between start and end lives in
//! submodules: `supervise` (the loop that follows the agent), `tail` (its
//! output files, followed as they grow), `outbox` (what waits for the
//! server) and `saved` (what a run directory keeps for the next runner).

mod outbox;
mod replay;
mod saved;
mod supervise;
mod tail;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use shepherd_client::Client;
use shepherd_core::workflow;
use shepherd_protocol::ProgressBody;
use tokio_util::sync::CancellationToken;

use crate::process::GroupRecords;
use crate::shim::{write_atomic, RunFiles};
use crate::spool::Spool;
use crate::worktree::{self, Workspace};
use saved::ReaderState;
pub use saved::{SavedRun, SavedWorkspace};
use shepherd_core::agent_config::AgentConfig;

use crate::file_events::{self, FileEvents};
use supervise::{supervise, Started};

/// What the server handed over with a claim.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Assignment {
    pub vtid: String,
    pub run_id: String,
    pub claim_token: String,
    /// The task's title (given to the agent when there is no spec).
    pub title: String,
    pub spec: String,
    /// Set when the task answers a conversation's message.
    pub conversation: Option<ConversationTurn>,
    /// Which attempt at the task this run is (1 for the first).
    pub attempt: i64,
}

/// The claim's `conversation` object: what a follow-up needs to continue
/// the agent's own conversation.
pub type ConversationTurn = shepherd_protocol::ClaimConversation;

impl Assignment {
    /// The command line and the text for stdin (if the command does not
    /// take `{spec}`): a follow-up continues the agent's own conversation
    /// when the agent can; otherwise the spec carries the earlier turns.
    fn command(&self, agent: &AgentConfig) -> (Vec<String>, Option<String>) {
        if let Some(c) = self.conversation.as_ref().filter(|c| c.turn > 1) {
            if let Some(Err(why)) = c
                .agent_session_id
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(shepherd_core::cmdline::check_agent_session_id)
            {
                tracing::warn!(agent_session_id = ?c.agent_session_id, %why, "ignored the conversation's agent session id");
            }
            if let Some((argv, stdin)) = agent.continue_argv(
                &c.message,
                &self.vtid,
                &self.run_id,
                c.agent_session_id.as_deref(),
            ) {
                return (argv, stdin.then(|| c.message.clone()));
            }
        }
        let prompt = self.prompt();
        let (argv, stdin) = agent.argv(prompt, &self.vtid, &self.run_id);
        (argv, stdin.then(|| prompt.to_owned()))
    }

    /// What the agent is asked to do: the spec, or the title when the task
    /// has no spec (`task add "Fix the flaky test"`); never an empty prompt,
    /// which some agents refuse outright (`claude -p ""`).
    fn prompt(&self) -> &str {
        if self.spec.trim().is_empty() {
            &self.title
        } else {
            &self.spec
        }
    }
}

/// Everything a run needs from its runner.
pub struct RunContext {
    pub agent_name: String,
    pub agent: AgentConfig,
    pub connector: Client,
    /// Carries this worker's runs' steps to the server together.
    pub steps: crate::step_courier::StepCourier,
    pub records: GroupRecords,
    /// The worker this runner acts as for the agent.
    pub worker_id: String,
    /// The program that runs `shim` (this binary).
    pub shim_program: PathBuf,
    /// Starts the runs' shims, a spare one first.
    pub shims: Arc<crate::spare_shim::SpareShims>,
    /// How old a run's lease may grow before its shim ends the agent.
    pub lease_timeout: Duration,
    /// On stop, leave agents running under their shims (the built-in
    /// runner, whose server restarts) rather than stopping them.
    pub detach_on_stop: bool,
    /// The umask the shim gives the agent (its own files stay private).
    pub child_umask: Option<u32>,
    pub spool_dir: PathBuf,
    pub spool_cap_bytes: u64,
    /// How long the output must be quiet before buffered text becomes a step.
    pub quiet_gap: Duration,
    pub default_cancel_grace: Duration,
    /// The runner's data directory (worktrees of worktree agents live there).
    pub data_dir: PathBuf,
    /// Wake-ups when a run's output files change; `None`: followers poll.
    pub file_events: Option<Arc<FileEvents>>,
}

impl RunContext {
    /// How long an agent has between SIGTERM and SIGKILL.
    fn cancel_grace(&self) -> Duration {
        self.agent
            .cancel_grace_secs
            .map(Duration::from_secs)
            .unwrap_or(self.default_cancel_grace)
    }
}

/// How the process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    Signalled(i32),
    TimedOut(u64),
    Cancelled,
    /// The claim was lost (expired and re-granted): stop, report nothing.
    ClaimLost,
    SpawnFailed(String),
    /// The reported cost passed the agent's `max_cost_usd` (the reason).
    BudgetExceeded(String),
    /// The shim ended the agent: no runner renewed its lease in time.
    LeaseExpired,
    /// This runner stopped and left the agent running under its shim.
    Detached,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs the assignment to its end and reports it. Never panics on agent behaviour.
/// `run_token` is the agent's token if the claim brought it.
pub async fn execute(
    ctx: Arc<RunContext>,
    a: Assignment,
    run_token: Option<String>,
    cancel: CancellationToken,
    shutdown: CancellationToken,
) -> Ending {
    let run = RunFiles::new(&ctx.data_dir, &a.run_id);
    let started = match start(&ctx, &a, run, run_token).await {
        Ok(s) => s,
        Err(reason) => return spawn_failed(&ctx, &a, reason, &shutdown).await,
    };
    let pgid = agent_group(&started.run, &ctx.file_events).await;
    tracing::info!(
        run_id = a.run_id,
        vtid = a.vtid,
        pgid,
        shim = started.shim_pid,
        agent = ctx.agent_name,
        "agent process started"
    );
    let mut st = ReaderState::default();
    if pgid > 0 {
        st.progress.push((
            workflow::EXECUTION_STARTED.into(),
            Some(format!("{} started", ctx.agent_name)),
            json!({ "pgid": pgid, "workspace": started.workspace }),
        ));
    }
    supervise(ctx, a, started, st, cancel, shutdown).await
}

/// Everything before the agent runs: the run directory with its spool and
/// the agent's stdin, the shim's command, the worktree, `run.json`, and the
/// shim itself. On failure the run directory is gone again (a worktree's
/// changes are committed first) and the reason is what the server is told.
async fn start(
    ctx: &RunContext,
    a: &Assignment,
    run: RunFiles,
    run_token: Option<String>,
) -> Result<Started, String> {
    let spool = open_run_dir(ctx, &run)?;
    let (argv, stdin_text) = a.command(&ctx.agent);
    if let Some(text) = &stdin_text {
        if let Err(e) = std::fs::write(run.path("stdin"), text) {
            remove_run_dir(&run, spool);
            return Err(format!("cannot write the spec: {e}"));
        }
    }
    // The agent's own credential for asking a person (`shepherd ask`, the
    // permission tool): good for this run only. A server too old to make
    // one leaves the agent without it, not without a run.
    let run_token = match run_token {
        Some(t) => Some(t),
        None => match ctx.connector.run_token(&a.run_id, &a.claim_token).await {
            Ok(t) => Some(t.token),
            Err(e) => {
                tracing::warn!(run_id = a.run_id, error = %e, "no run token for the agent");
                None
            }
        },
    };
    let mut argv = argv;
    if let Err(e) = ask_permissions_through_shepherd(ctx, &run, &mut argv, run_token.as_deref()) {
        remove_run_dir(&run, spool);
        return Err(e);
    }
    let mut cmd = shim_command(ctx, a, &run, &argv);
    if let Some(t) = &run_token {
        cmd.env("SHEPHERD_RUN_TOKEN", t)
            .env("SHEPHERD_SERVER", ctx.connector.base())
            // Claude Code gives an MCP tool call this long (ms) before it
            // gives up; a person may take hours to answer.
            .env("MCP_TOOL_TIMEOUT", PERMISSION_WAIT_MS.to_string());
    }
    let mut workspace = match make_workspace(ctx, a).await {
        Ok(w) => w,
        Err(reason) => {
            remove_run_dir(&run, spool);
            return Err(reason);
        }
    };
    if let Some(w) = &workspace {
        cmd.current_dir(&w.path)
            .env("SHEPHERD_WORKSPACE_BRANCH", &w.branch);
    }
    let saved = SavedRun {
        agent: ctx.agent_name.clone(),
        worker_id: ctx.worker_id.clone(),
        assignment: a.clone(),
        started_ms: now_ms(),
        workspace: workspace.as_ref().map(SavedWorkspace::of),
    };
    let written = serde_json::to_vec(&saved)
        .map_err(std::io::Error::other)
        .and_then(|b| write_atomic(&run.path("run.json"), &b))
        .map_err(|e| format!("cannot record the run: {e}"));
    run.touch_lease();
    let spawned = match written {
        Ok(()) => ctx.shims.start_shim(cmd).await,
        Err(e) => Err(e),
    };
    let shim_pid = match spawned {
        Ok(pid) => pid,
        Err(reason) => {
            if let Some(w) = &mut workspace {
                end_workspace(w, a, "not started").await;
            }
            remove_run_dir(&run, spool);
            return Err(reason);
        }
    };
    Ok(Started {
        run,
        spool,
        workspace,
        started_ms: saved.started_ms,
        shim_pid,
        replayed: None,
    })
}

/// How long Claude Code waits for the permission tool (ms): a week.
const PERMISSION_WAIT_MS: u64 = 7 * 24 * 3600 * 1000;

/// `permissions = "ask"` on a Claude Code agent: its permission prompts go
/// to `shepherd permission-tool` (an MCP server over stdio, this binary),
/// which asks a person through the server. The MCP configuration is a file
/// in the run's private directory, not an argument: it holds the run token,
/// and arguments are visible to every user (`ps`).
fn ask_permissions_through_shepherd(
    ctx: &RunContext,
    run: &RunFiles,
    argv: &mut Vec<String>,
    run_token: Option<&str>,
) -> Result<(), String> {
    use shepherd_core::adapters::TranscriptFormat;
    if !ctx.agent.asks_permissions() || ctx.agent.format() != TranscriptFormat::ClaudeStreamJson {
        return Ok(());
    }
    let Some(token) = run_token else {
        return Err("permissions = \"ask\" needs a run token, and the server gave none".into());
    };
    let config = serde_json::json!({
        "mcpServers": {
            shepherd_protocol::PERMISSION_TOOL_SERVER: {
                "type": "stdio",
                "command": ctx.shim_program.display().to_string(),
                "args": ["permission-tool"],
                "env": {
                    "SHEPHERD_SERVER": ctx.connector.base(),
                    "SHEPHERD_RUN_TOKEN": token,
                },
            }
        }
    });
    let path = run.path("mcp.json");
    write_atomic(&path, config.to_string().as_bytes())
        .map_err(|e| format!("cannot write the permission tool's configuration: {e}"))?;
    argv.extend([
        "--permission-prompt-tool".to_owned(),
        format!(
            "mcp__{}__{}",
            shepherd_protocol::PERMISSION_TOOL_SERVER,
            shepherd_protocol::PERMISSION_TOOL
        ),
        "--mcp-config".to_owned(),
        path.display().to_string(),
    ]);
    Ok(())
}

/// Creates the run directory and its step spool.
fn open_run_dir(ctx: &RunContext, run: &RunFiles) -> Result<Spool, String> {
    std::fs::create_dir_all(&run.dir)
        .map_err(|e| format!("cannot create the run directory: {e}"))?;
    Spool::create(&run.dir, "steps", ctx.spool_cap_bytes).map_err(|e| {
        let _ = std::fs::remove_dir_all(&run.dir);
        format!("cannot create the step spool: {e}")
    })
}

/// Removes the directory of a run that did not start, the spool first.
fn remove_run_dir(run: &RunFiles, spool: Spool) {
    drop(spool);
    let _ = std::fs::remove_dir_all(&run.dir);
}

/// The command that starts `shepherd shim` for this run, with the agent's
/// command line after `--`, in its own session, without Shepherd's secrets.
fn shim_command(
    ctx: &RunContext,
    a: &Assignment,
    run: &RunFiles,
    argv: &[String],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&ctx.shim_program);
    cmd.arg("shim")
        .arg("--dir")
        .arg(&run.dir)
        .arg("--grace-ms")
        .arg(ctx.cancel_grace().as_millis().to_string())
        .arg("--lease-timeout-ms")
        .arg(ctx.lease_timeout.as_millis().to_string());
    if let Some(mask) = ctx.child_umask {
        cmd.arg("--umask").arg(format!("{mask:o}"));
    }
    cmd.arg("--").args(argv);
    // Shepherd's own settings stay with Shepherd: neither the shim nor the
    // agent under it inherits any `SHEPHERD_*` variable (the secrets, and
    // the ones that lead to the configuration file and the database); the
    // shim passes its environment on. Removed before the agent's configured
    // `env` is added, so the operator can still hand an agent one of them
    // on purpose; what the agent is told about its run is set below.
    let inherited = std::env::vars_os().map(|(name, _)| name);
    for name in shepherd_core::secrets::inherited_settings(inherited) {
        cmd.env_remove(name);
    }
    // The client's trust, so that `shepherd ask` reaches a server whose
    // certificate a private CA signed (a path, not a secret).
    if let Some(ca) = std::env::var_os(shepherd_client::CA_CERT_ENV) {
        cmd.env(shepherd_client::CA_CERT_ENV, ca);
    }
    cmd.envs(&ctx.agent.env)
        .env("SHEPHERD_TASK_ID", &a.vtid)
        .env("SHEPHERD_RUN_ID", &a.run_id)
        .env("SHEPHERD_TASK_TITLE", &a.title)
        .env("SHEPHERD_AGENT", &ctx.agent_name)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    match std::fs::File::create(run.path("shim.log")) {
        Ok(f) => cmd.stderr(f),
        Err(_) => cmd.stderr(Stdio::null()),
    };
    // The shim leads its own session, so that nothing aimed at the
    // runner's group or terminal reaches it or its agent: it calls setsid
    // itself, first thing. Not in a `pre_exec` here: that makes the spawn
    // a fork of the whole runner (the built-in one is the server), 2 ms on
    // the way from the claim to the agent's first step, where without it
    // the spawn is a vfork-style posix_spawn. A signal to the runner's
    // group in the millisecond before the shim's setsid (a Ctrl-C at that
    // instant) ends the shim before its agent starts: the run then has
    // neither a shim nor an exit status and goes back to the queue, as
    // after a host crash.
    if let Some(cwd) = &ctx.agent.cwd {
        cmd.current_dir(cwd);
    }
    cmd
}

/// The run's own git worktree, for an agent configured with a `repo`: a
/// conversation's turns share one branch, a task's attempts each have theirs.
async fn make_workspace(ctx: &RunContext, a: &Assignment) -> Result<Option<Workspace>, String> {
    let Some((repo, base)) = ctx.agent.worktree_repo() else {
        return Ok(None);
    };
    let made = match &a.conversation {
        Some(c) => {
            worktree::create_for_conversation(
                &ctx.data_dir,
                repo,
                base,
                &c.conversation_id,
                &a.run_id,
            )
            .await
        }
        None => worktree::create(&ctx.data_dir, repo, base, &a.vtid, a.attempt, &a.run_id).await,
    };
    made.map(Some)
}

/// The agent's group, once the shim has started it; 0 if the shim recorded
/// a failure instead, or said nothing within 10 seconds.
async fn agent_group(run: &RunFiles, events: &Option<Arc<FileEvents>>) -> i32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The run's output is not followed until the group is known, so this
    // wait is on the way from the claim to the first step: the shim's
    // rename of `agent` wakes it (a poll, looking often at first, where
    // inotify cannot). Backing off from 1 ms, the looks at 3 and 7 ms
    // came after the agent had already printed.
    let watch = events.as_ref().and_then(|e| e.watch(&run.dir));
    let mut pause = Duration::from_millis(1);
    loop {
        let mut renamed = std::pin::pin!(file_events::next_change(watch.as_ref()));
        file_events::arm(renamed.as_mut());
        if let Some(p) = run.agent_pgid() {
            return p;
        }
        if run.exit().is_some() || tokio::time::Instant::now() > deadline {
            return 0;
        }
        tokio::select! {
            _ = file_events::changed(renamed.as_mut()) => {}
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// Carries on a run a previous runner left to its shim: reads what the
/// agent wrote meanwhile from where that runner stopped, and ends the run
/// with the agent's real exit status.
pub async fn adopt(
    ctx: Arc<RunContext>,
    saved: SavedRun,
    cancel: CancellationToken,
    shutdown: CancellationToken,
) -> Ending {
    let run = RunFiles::new(&ctx.data_dir, &saved.assignment.run_id);
    run.touch_lease();
    let left: Option<ReaderState> = std::fs::read_to_string(run.path("reader.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    // The state describes the moment its runner left; once this runner reads
    // on, it is stale. Removed, so that if this runner dies without leaving
    // (SIGKILL, power loss) the next one does not resume from an old offset.
    let _ = std::fs::remove_file(run.path("reader.json"));
    let crashed = left.is_none();
    let mut st = left.unwrap_or_default();
    let a = saved.assignment;
    let spool = match Spool::reopen(&run.dir, "steps", ctx.spool_cap_bytes, st.delivered) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(run_id = a.run_id, error = %e, "cannot reopen the step spool; starting it afresh");
            match Spool::create(&run.dir, "steps", ctx.spool_cap_bytes) {
                Ok(s) => s,
                Err(e) => {
                    return spawn_failed(&ctx, &a, format!("step spool: {e}"), &shutdown).await
                }
            }
        }
    };
    let mut replayed = None;
    if crashed {
        // The runner before died without recording how far it had read: the
        // output is read on from where the spool's last idle step was made
        // (the start, if none was). The steps the adapter makes between that
        // point and new output are those the spool holds after it (the JSON
        // formats make the same steps from the same lines); they are
        // skipped. The spool is sent again from its start (the server
        // stores each index once).
        let (made, from) = spool
            .resume_point()
            .map_or((0, (0, 0)), |(made, at)| (made, (at.out, at.err)));
        match replay::replay(&run, ctx.agent.format(), from) {
            Ok(r) => {
                st.out_offset = from.0;
                st.err_offset = from.1;
                st.skip_steps = spool.total() - made;
                replayed = Some(r);
            }
            Err(e) => {
                tracing::error!(run_id = a.run_id, error = %e, "cannot read the run's output again up to its last step; reading it from its start");
                st.skip_steps = spool.total();
            }
        }
    }
    let shim_pid = run.live_shim().unwrap_or(0);
    tracing::info!(
        run_id = a.run_id,
        vtid = a.vtid,
        shim = shim_pid,
        from = st.out_offset,
        "re-adopted a run left running by a previous runner"
    );
    let workspace = saved.workspace.as_ref().map(SavedWorkspace::workspace);
    let started = Started {
        run,
        spool,
        workspace,
        started_ms: saved.started_ms,
        shim_pid,
        replayed,
    };
    supervise(ctx, a, started, st, cancel, shutdown).await
}

/// Commits what the agent left in its worktree, removes the worktree and
/// records the branch's head. A failure is logged: the run's own ending
/// stands.
async fn end_workspace(w: &mut Workspace, a: &Assignment, how: &str) {
    let message = format!(
        "Shepherd run {} (task {}, attempt {}): changes left uncommitted ({how})",
        a.run_id, a.vtid, a.attempt
    );
    match worktree::finish(&w.repo, &w.path, &message).await {
        Ok(head) => w.head = Some(head),
        Err(e) => {
            tracing::error!(run_id = a.run_id, branch = w.branch, error = %e, "could not commit the run's leftover changes")
        }
    }
}

/// Reports a run that never started and says how it ended.
async fn spawn_failed(
    ctx: &RunContext,
    a: &Assignment,
    reason: String,
    shutdown: &CancellationToken,
) -> Ending {
    let ending = Ending::SpawnFailed(reason.clone());
    // A run that could not start (no such repository or base) would fail
    // the same way again: not worth a retry.
    let metadata = serde_json::json!({ "retryable": false });
    report_end(ctx, a, &ending, None, &reason, metadata, shutdown).await;
    ending
}

/// How long a stopping runner keeps trying to report the end of a run to a
/// server that does not answer.
pub const STOPPING_REPORT_WINDOW: Duration = Duration::from_secs(10);

/// Reports the end of a run, retrying while the server is away; once the
/// runner is stopping, only for [`STOPPING_REPORT_WINDOW`], so that a
/// SIGTERM while the server is down ends the runner instead of hanging.
#[allow(clippy::too_many_arguments)]
async fn report_end(
    ctx: &RunContext,
    a: &Assignment,
    ending: &Ending,
    result: Option<&str>,
    reason: &str,
    metadata: Value,
    shutdown: &CancellationToken,
) {
    let (event, result) = match ending {
        Ending::Exited(0) => (workflow::EXECUTION_COMPLETED, result.map(str::to_owned)),
        Ending::Cancelled | Ending::BudgetExceeded(_) => {
            (workflow::EXECUTION_CANCELLED, Some(reason.to_owned()))
        }
        Ending::ClaimLost | Ending::Detached => return,
        _ => (workflow::EXECUTION_FAILED, Some(reason.to_owned())),
    };
    let mut event = event.to_owned();
    let mut backoff = Duration::from_millis(200);
    let mut give_up_at: Option<tokio::time::Instant> = None;
    for _ in 0..600 {
        let body = ProgressBody {
            event: event.clone(),
            message: Some(reason.to_owned()).filter(|r| !r.is_empty()),
            metadata: metadata.clone(),
            claim_token: Some(a.claim_token.clone()),
            result: result.clone(),
            worker_id: None,
        };
        match ctx.connector.progress(&a.vtid, &body).await {
            Ok(_) => return,
            Err(e) if e.is_retryable() => {
                if shutdown.is_cancelled() {
                    let deadline = *give_up_at.get_or_insert_with(|| {
                        tokio::time::Instant::now() + STOPPING_REPORT_WINDOW
                    });
                    if tokio::time::Instant::now() >= deadline {
                        tracing::warn!(
                            run_id = a.run_id,
                            vtid = a.vtid,
                            error = %e,
                            "stopping while the server is unreachable: the end of this run is not reported; \
                             its steps stay in the spool and its claim lapses after the heartbeat timeout \
                             (or at once when a runner starts again with this data directory)"
                        );
                        return;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled(), if give_up_at.is_none() => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e)
                if (e.code() == "invalid_transition" || e.code() == "unknown_event")
                    && event != workflow::EXECUTION_FAILED =>
            {
                // The workflow did not accept "completed" from where the
                // agent left the task; the run cannot end well.
                tracing::warn!(run_id = a.run_id, error = %e, "completion refused by the workflow; reporting failure");
                event = workflow::EXECUTION_FAILED.into();
            }
            Err(e) => {
                tracing::warn!(run_id = a.run_id, error = %e, "could not report the end of the run");
                return;
            }
        }
    }
}
