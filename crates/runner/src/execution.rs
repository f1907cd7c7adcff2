//! One run: start the agent process, turn its output into steps, deliver
//! them (surviving server restarts), obey cancel and timeout, report the end.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use shepherd_core::adapters::{adapter_for, AdapterOutput, TranscriptFormat};
use shepherd_core::usage::Usage;
use shepherd_core::workflow;
use tokio::io::{AsyncWriteExt, BufReader};

use crate::lines::{LossyLines, MAX_LINE_BYTES};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::AgentConfig;
use crate::process::{signal_group, GroupRecords};
use crate::spool::Spool;
use crate::worktree::{self, Workspace};
use shepherd_client::{Client, ClientError};
use shepherd_protocol::{AppendSteps, ProgressBody, SetStatus, TranscriptStep};

/// What the server handed over with a claim.
#[derive(Debug, Clone)]
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
            if let Some((argv, stdin)) = agent.continue_argv(
                &c.message,
                &self.vtid,
                &self.run_id,
                c.agent_session_id.as_deref(),
            ) {
                return (argv, stdin.then(|| c.message.clone()));
            }
        }
        let (argv, stdin) = agent.argv(&self.spec, &self.vtid, &self.run_id);
        (argv, stdin.then(|| self.spec.clone()))
    }
}

/// Everything a run needs from its runner.
pub struct RunContext {
    pub agent_name: String,
    pub agent: AgentConfig,
    pub connector: Client,
    pub records: GroupRecords,
    pub spool_dir: PathBuf,
    pub spool_cap_bytes: u64,
    /// How long the output must be quiet before buffered text becomes a step.
    pub quiet_gap: Duration,
    pub default_cancel_grace: Duration,
    /// The runner's data directory (worktrees of worktree agents live there).
    pub data_dir: PathBuf,
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
}

const STEP_BATCH: usize = 50;
const TAIL_BYTES: usize = 4000;

enum Line {
    Out(String),
    Err(String),
    OutClosed,
    ErrClosed,
}

struct Outbox {
    spool: Spool,
    progress: VecDeque<(String, Option<String>, Value)>,
    status: Option<String>,
    claim_lost: bool,
    /// The agent's own conversation id, reported with the end of the run.
    session_id: Option<String>,
    /// Usage not yet reported (the running total).
    usage: Option<Usage>,
    /// The run's usage so far.
    usage_total: Usage,
}

impl Outbox {
    fn is_empty(&self) -> bool {
        self.spool.pending() == 0
            && self.progress.is_empty()
            && self.status.is_none()
            && self.usage.is_none()
    }
}

/// Sends what is waiting, in order: steps, then progress, then live status.
/// Returns Err only when the server is unreachable (try again later).
async fn deliver(ctx: &RunContext, a: &Assignment, out: &mut Outbox) -> Result<(), ClientError> {
    while out.spool.pending() > 0 && !out.claim_lost {
        let (first, batch) =
            out.spool
                .next_batch(STEP_BATCH)
                .map_err(|e| ClientError::Unreachable {
                    message: format!("spool: {e}"),
                })?;
        let count = batch.len() as u64;
        let steps: Result<Vec<TranscriptStep>, _> =
            batch.into_iter().map(serde_json::from_value).collect();
        let steps = match steps {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(run_id = a.run_id, error = %e, first, "spooled steps are not transcript steps; skipping them");
                out.spool.acknowledge(first + count);
                continue;
            }
        };
        let body = AppendSteps {
            claim_token: a.claim_token.clone(),
            start_index: first as i64,
            steps,
        };
        match ctx.connector.append_steps(&a.run_id, &body).await {
            Ok(ack) => out
                .spool
                .acknowledge(u64::try_from(ack.next_index).unwrap_or(first + count)),
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) if e.code() == "claim_stale" || e.code() == "not_your_claim" => {
                out.claim_lost = true;
            }
            Err(e) => {
                // A batch the server will never take (it refused it as
                // invalid): skip it rather than wedge the run, and say so.
                tracing::error!(run_id = a.run_id, error = %e, first, "steps refused; skipping them");
                out.spool.acknowledge(first + count);
            }
        }
    }
    while let Some((event, message, metadata)) = out.progress.front().cloned() {
        if out.claim_lost {
            break;
        }
        let body = ProgressBody {
            event: event.clone(),
            message: message.clone(),
            metadata,
            claim_token: Some(a.claim_token.clone()),
            ..Default::default()
        };
        match ctx.connector.progress(&a.vtid, &body).await {
            Ok(_) => {}
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) if e.code() == "claim_stale" => out.claim_lost = true,
            Err(e) => tracing::warn!(run_id = a.run_id, event, error = %e, "progress refused"),
        }
        out.progress.pop_front();
    }
    if let Some(text) = out.status.clone() {
        let body = SetStatus {
            claim_token: a.claim_token.clone(),
            status: text.clone(),
        };
        match ctx.connector.set_status(&a.run_id, &body).await {
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) if e.code() == "claim_stale" => out.claim_lost = true,
            _ => {}
        }
        if out.status.as_deref() == Some(text.as_str()) {
            out.status = None;
        }
    }
    if let Some(usage) = out.usage.filter(|_| !out.claim_lost) {
        let body = shepherd_protocol::SetUsage {
            claim_token: a.claim_token.clone(),
            usage,
        };
        match ctx.connector.set_usage(&a.run_id, &body).await {
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) if e.code() == "claim_stale" => out.claim_lost = true,
            Err(e) => tracing::warn!(run_id = a.run_id, error = %e, "usage refused"),
            Ok(_) => {}
        }
        if out.usage == Some(usage) {
            out.usage = None;
        }
    }
    Ok(())
}

fn push_tail(tail: &mut String, line: &str) {
    tail.push_str(line);
    tail.push('\n');
    if tail.len() > TAIL_BYTES * 2 {
        let mut cut = tail.len() - TAIL_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail.drain(..cut);
    }
}

fn tail_of(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.trim_end().to_owned();
    }
    let mut cut = s.len() - max;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    format!("…{}", s[cut..].trim_end())
}

/// Runs the assignment to its end and reports it. Never panics on agent behaviour.
pub async fn execute(
    ctx: Arc<RunContext>,
    a: Assignment,
    cancel: CancellationToken,
    shutdown: CancellationToken,
) -> Ending {
    let format = ctx.agent.format();
    let mut adapter = adapter_for(format);
    let mut outbox = Outbox {
        spool: match Spool::create(&ctx.spool_dir, &a.run_id, ctx.spool_cap_bytes) {
            Ok(s) => s,
            Err(e) => {
                return spawn_failed(
                    &ctx,
                    &a,
                    format!("cannot create the step spool: {e}"),
                    &shutdown,
                )
                .await
            }
        },
        progress: VecDeque::new(),
        status: None,
        claim_lost: false,
        session_id: None,
        usage: None,
        usage_total: Usage::default(),
    };
    let (argv, stdin_text) = a.command(&ctx.agent);
    let spec_on_stdin = stdin_text.is_some();
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(&ctx.agent.env)
        .env("SHEPHERD_TASK_ID", &a.vtid)
        .env("SHEPHERD_RUN_ID", &a.run_id)
        .env("SHEPHERD_TASK_TITLE", &a.title)
        .env("SHEPHERD_AGENT", &ctx.agent_name)
        .stdin(if spec_on_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &ctx.agent.cwd {
        cmd.current_dir(cwd);
    }
    let mut workspace: Option<Workspace> = None;
    if let Some((repo, base)) = ctx.agent.worktree_repo() {
        match worktree::create(&ctx.data_dir, repo, base, &a.vtid, a.attempt, &a.run_id).await {
            Ok(w) => {
                cmd.current_dir(&w.path)
                    .env("SHEPHERD_WORKSPACE_BRANCH", &w.branch);
                workspace = Some(w);
            }
            Err(reason) => return spawn_failed(&ctx, &a, reason, &shutdown).await,
        }
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            if let Some(w) = &mut workspace {
                end_workspace(w, &a, "not started").await;
            }
            return spawn_failed(
                &ctx,
                &a,
                format!("cannot start {:?}: {e}", argv[0]),
                &shutdown,
            )
            .await;
        }
    };
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    ctx.records.record(&a.run_id, pgid);
    tracing::info!(
        run_id = a.run_id,
        vtid = a.vtid,
        pgid,
        agent = ctx.agent_name,
        "agent process started"
    );
    if let Some(mut stdin) = child.stdin.take() {
        let spec = stdin_text.unwrap_or_default();
        tokio::spawn(async move {
            let _ = stdin.write_all(spec.as_bytes()).await;
            let _ = stdin.shutdown().await;
        });
    }
    outbox.progress.push_back((
        workflow::EXECUTION_STARTED.into(),
        Some(format!("{} started", ctx.agent_name)),
        json!({ "pgid": pgid, "workspace": workspace }),
    ));

    // Output readers feed one channel; a bounded one, so a full spool (or a
    // slow server) pushes back on the agent instead of growing memory.
    let (tx, mut rx) = mpsc::channel::<Line>(256);
    if let Some(stdout) = child.stdout.take() {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = LossyLines::new(BufReader::new(stdout), MAX_LINE_BYTES);
            while let Ok(Some(l)) = lines.next_line().await {
                if tx.send(Line::Out(l)).await.is_err() {
                    break;
                }
            }
            let _ = tx.send(Line::OutClosed).await;
        });
    }
    if let Some(stderr) = child.stderr.take() {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = LossyLines::new(BufReader::new(stderr), MAX_LINE_BYTES);
            while let Ok(Some(l)) = lines.next_line().await {
                if tx.send(Line::Err(l)).await.is_err() {
                    break;
                }
            }
            let _ = tx.send(Line::ErrClosed).await;
        });
    }
    drop(tx);

    let timeout = ctx.agent.timeout_secs.map(Duration::from_secs);
    let grace = ctx
        .agent
        .cancel_grace_secs
        .map(Duration::from_secs)
        .unwrap_or(ctx.default_cancel_grace);
    let started = tokio::time::Instant::now();
    let mut out_tail = String::new();
    let mut err_tail = String::new();
    let mut result: Option<String> = None;
    let mut stopping: Option<(Ending, tokio::time::Instant)> = None;
    let mut killed = false;
    let mut exit: Option<std::process::ExitStatus> = None;
    let mut out_open = true;
    let mut err_open = true;
    let mut last_output = tokio::time::Instant::now();
    let mut pending_quiet_flush = false;
    let mut next_delivery = tokio::time::Instant::now();
    let mut unreachable_logged = false;
    let tick = Duration::from_millis(100);

    let conversation = a.conversation.is_some();
    let handle_outputs = |outputs: Vec<AdapterOutput>,
                          outbox: &mut Outbox,
                          result: &mut Option<String>| {
        for o in outputs {
            match o {
                AdapterOutput::Step(s) => {
                    if let Ok(v) = serde_json::to_value(&s) {
                        if let Err(e) = outbox.spool.push(&v) {
                            tracing::error!(error = %e, "cannot spool a step");
                        }
                    }
                }
                AdapterOutput::Progress {
                    event,
                    message,
                    metadata,
                } => outbox
                    .progress
                    .push_back((event, message, metadata.unwrap_or(Value::Null))),
                AdapterOutput::Status(s) => outbox.status = Some(s),
                AdapterOutput::Result(r) => *result = Some(r),
                AdapterOutput::SessionId(id) => {
                    // A conversation stores the id at once, so that a run
                    // that never reports its end still leaves it behind.
                    if conversation && outbox.session_id.as_deref() != Some(id.as_str()) {
                        outbox.progress.push_back((
                            "worker.building".into(),
                            Some("agent session".into()),
                            json!({ "agent_session_id": id }),
                        ));
                    }
                    outbox.session_id = Some(id)
                }
                AdapterOutput::Usage(u) => {
                    outbox.usage = Some(u);
                    outbox.usage_total = u;
                }
            }
        }
    };

    loop {
        // Stop reading output while the spool is over its bound.
        let can_read = (out_open || err_open) && !outbox.spool.is_full();
        tokio::select! {
            line = rx.recv(), if can_read => match line {
                Some(Line::Out(l)) => {
                    push_tail(&mut out_tail, &l);
                    let outs = adapter.push_line(&l);
                    handle_outputs(outs, &mut outbox, &mut result);
                    last_output = tokio::time::Instant::now();
                    pending_quiet_flush = true;
                }
                Some(Line::Err(l)) => {
                    push_tail(&mut err_tail, &l);
                    if format == TranscriptFormat::Text {
                        let outs = adapter.push_line(&l);
                        handle_outputs(outs, &mut outbox, &mut result);
                        last_output = tokio::time::Instant::now();
                        pending_quiet_flush = true;
                    }
                }
                Some(Line::OutClosed) => out_open = false,
                Some(Line::ErrClosed) => err_open = false,
                None => {
                    out_open = false;
                    err_open = false;
                }
            },
            status = child.wait(), if exit.is_none() => {
                exit = status.ok();
                if exit.is_none() {
                    exit = Some(std::process::ExitStatus::default());
                }
            }
            _ = cancel.cancelled(), if stopping.is_none() => {
                tracing::info!(run_id = a.run_id, pgid, "cancel: SIGTERM to the process group");
                signal_group(pgid, libc::SIGTERM);
                stopping = Some((Ending::Cancelled, tokio::time::Instant::now() + grace));
            }
            _ = shutdown.cancelled(), if stopping.is_none() => {
                signal_group(pgid, libc::SIGTERM);
                stopping = Some((Ending::Signalled(libc::SIGTERM), tokio::time::Instant::now() + grace.min(Duration::from_secs(5))));
            }
            _ = tokio::time::sleep(tick) => {}
        }
        let now = tokio::time::Instant::now();
        if let (Some(t), None) = (timeout, &stopping) {
            if now.duration_since(started) > t {
                tracing::info!(
                    run_id = a.run_id,
                    pgid,
                    "timeout: SIGTERM to the process group"
                );
                signal_group(pgid, libc::SIGTERM);
                stopping = Some((
                    Ending::TimedOut(t.as_secs()),
                    now + grace.min(Duration::from_secs(10)),
                ));
            }
        }
        if let Some((_, deadline)) = &stopping {
            if now >= *deadline && !killed {
                tracing::info!(
                    run_id = a.run_id,
                    pgid,
                    "grace over: SIGKILL to the process group"
                );
                signal_group(pgid, libc::SIGKILL);
                killed = true;
            }
        }
        if pending_quiet_flush && now.duration_since(last_output) >= ctx.quiet_gap {
            let outs = adapter.flush();
            handle_outputs(outs, &mut outbox, &mut result);
            pending_quiet_flush = false;
        }
        if now >= next_delivery && !outbox.is_empty() {
            match deliver(&ctx, &a, &mut outbox).await {
                Ok(()) => {
                    if unreachable_logged {
                        tracing::info!(
                            run_id = a.run_id,
                            "server reachable again; steps delivered"
                        );
                        unreachable_logged = false;
                    }
                }
                Err(e) => {
                    if !unreachable_logged {
                        tracing::warn!(run_id = a.run_id, error = %e, pending = outbox.spool.pending(), "server unreachable; steps kept on disk");
                        unreachable_logged = true;
                    }
                    next_delivery = now + Duration::from_millis(500);
                }
            }
        }
        if let (Some(max), Some(cost), None) = (
            ctx.agent.max_cost_usd,
            outbox.usage_total.cost_usd,
            &stopping,
        ) {
            if cost > max {
                let reason =
                    format!("budget_exceeded: cost ${cost:.4} passed max_cost_usd ${max:.4}");
                tracing::info!(
                    run_id = a.run_id,
                    pgid,
                    reason,
                    "SIGTERM to the process group"
                );
                signal_group(pgid, libc::SIGTERM);
                stopping = Some((Ending::BudgetExceeded(reason), now + grace));
            }
        }
        if outbox.claim_lost && stopping.is_none() {
            tracing::warn!(
                run_id = a.run_id,
                "claim lost (expired or re-granted): stopping the agent"
            );
            signal_group(pgid, libc::SIGKILL);
            stopping = Some((Ending::ClaimLost, now));
            killed = true;
        }
        if exit.is_some() && !out_open && !err_open {
            break;
        }
        if exit.is_some() && stopping.is_some() && killed {
            // Output pipes may be held open by stray descendants; the group is dead.
            while let Ok(l) = rx.try_recv() {
                if let Line::Out(l) = l {
                    let outs = adapter.push_line(&l);
                    handle_outputs(outs, &mut outbox, &mut result);
                }
            }
            break;
        }
    }
    // Make sure nothing of the group survives the run.
    if crate::process::group_alive(pgid) {
        signal_group(pgid, libc::SIGKILL);
    }
    ctx.records.forget(&a.run_id);
    if let Some(w) = &mut workspace {
        let how = match &stopping {
            Some((e, _)) => format!("{e:?}"),
            None => format!("exit {:?}", exit.and_then(|s| s.code())),
        };
        end_workspace(w, &a, &how).await;
    }
    let outs = adapter.finish();
    handle_outputs(outs, &mut outbox, &mut result);

    let status = exit.unwrap_or_default();
    let ending = match stopping {
        Some((e, _)) => e,
        None => match status.code() {
            Some(c) => Ending::Exited(c),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Ending::Signalled(status.signal().unwrap_or(0))
            }
        },
    };
    let result_text = result
        .or_else(|| adapter.last_assistant_text().map(str::to_owned))
        .or_else(|| Some(tail_of(&out_tail, 2000)).filter(|s| !s.is_empty()));
    // Deliver every step before the end, however long the server is away.
    let mut waited = false;
    while !outbox.is_empty() && !outbox.claim_lost {
        if deliver(&ctx, &a, &mut outbox).await.is_err() {
            if !waited {
                tracing::warn!(
                    run_id = a.run_id,
                    "waiting for the server to deliver the last steps"
                );
                waited = true;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = shutdown.cancelled() => break,
            }
        }
    }
    if outbox.claim_lost {
        return Ending::ClaimLost;
    }
    let reason = match &ending {
        Ending::Exited(0) => String::new(),
        Ending::Exited(c) => format!("exit code {c}: {}", tail_of(&err_tail, 500)),
        Ending::Signalled(s) => format!("killed by signal {s}"),
        Ending::TimedOut(t) => format!("timed out after {t}s"),
        Ending::Cancelled => "cancelled".into(),
        Ending::ClaimLost => "claim lost".into(),
        Ending::SpawnFailed(r) | Ending::BudgetExceeded(r) => r.clone(),
    };
    let metadata = json!({
        "session_id": outbox.session_id,
        "ending": format!("{ending:?}"),
        "workspace": workspace,
        "usage": (!outbox.usage_total.is_empty()).then_some(outbox.usage_total),
        // An exit code the agent does not retry on makes the failure final.
        "retryable": match ending {
            Ending::Exited(c) if c != 0 => ctx.agent.retries_exit_code(c),
            _ => true,
        },
    });
    report_end(
        &ctx,
        &a,
        &ending,
        result_text.as_deref(),
        &reason,
        metadata,
        &shutdown,
    )
    .await;
    tracing::info!(run_id = a.run_id, ?ending, "run ended");
    ending
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
        Ending::ClaimLost => return,
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
