//! The supervision loop: follows a run whose agent runs under its shim, from
//! its start (or its re-adoption by a runner that started later) to its end,
//! or until this runner leaves it to the next one.
//!
//! One task per run does everything in turn: read the agent's output and
//! feed it to the adapter, deliver what the outbox holds, watch the shim,
//! renew the lease, and enforce cancel, shutdown, timeout, budget and the
//! claim. The run's state belongs to this one task, so nothing is locked,
//! and a run's effects happen in the order the loop meets them. The loop
//! wakes at least every [`TICK`] (every [`IDLE_TICK`] while the agent is
//! quiet) for what has no event of its own (a shim killed outright, the
//! clocks).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use shepherd_core::adapters::{adapter_for, Adapter, TranscriptFormat};
use shepherd_protocol as p;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::outbox::Outbox;
use super::replay::Replayed;
use super::saved::ReaderState;
use super::tail::{follow, push_tail, tail_of, Line};
use super::{end_workspace, now_ms, report_end, Assignment, Ending, RunContext};
use crate::file_events::FileEvents;
use crate::process::{signal_group, ProcessEnd};
use crate::shim::{write_atomic, ExitRecord, RunFiles};
use crate::spool::Spool;
use crate::worktree::Workspace;

/// How long the loop waits for a line before it looks at the rest, while
/// something is under way.
const TICK: Duration = Duration::from_millis(100);
/// The same while the agent is quiet and its shim cannot be watched (no
/// pidfd): the loop looks at the shim and the clocks each second, and a
/// line, a cancel or the shutdown wakes it at once. With a watched shim a
/// quiet loop sleeps until its lease or its timeout is due (at most
/// [`QUIET_TICK`]): a runner holding hundreds of quiet agents then wakes a
/// few dozen times a second, not hundreds.
const IDLE_TICK: Duration = Duration::from_secs(1);
/// The budget question's answers (`on_budget = "ask"`).
const BUDGET_CONTINUE: &str = "continue";
const BUDGET_STOP: &str = "stop";
/// How long after the agent's last output the loop counts as busy.
const BUSY_AFTER_OUTPUT: Duration = Duration::from_secs(2);
/// How often the loop looks whether the shim is still alive while the
/// agent's output is open. Each look reads three files, and the loop turns
/// for every line an agent prints: with hundreds of agents printing, looking
/// at every turn was an eighth of the runner's CPU (four times a second,
/// still a twentieth). Once both outputs are closed the exit is near, and
/// the loop looks at every turn.
const SHIM_LOOK: Duration = Duration::from_secs(1);
/// The longest a quiet loop with a watched shim sleeps.
const QUIET_TICK: Duration = Duration::from_secs(30);

/// A run whose shim has been started, or found alive after a restart.
pub(super) struct Started {
    pub(super) run: RunFiles,
    pub(super) spool: Spool,
    pub(super) workspace: Option<Workspace>,
    /// Wall-clock start (ms), so the agent's timeout spans a restart.
    pub(super) started_ms: u64,
    /// The shim's pid; 0 when there is none to signal.
    pub(super) shim_pid: i32,
    /// The output read again up to where the run is followed on from,
    /// after its runner died (see [`super::replay`]).
    pub(super) replayed: Option<Replayed>,
}

/// Follows a started run to its end (or until this runner leaves it).
pub(super) async fn supervise(
    ctx: Arc<RunContext>,
    a: Assignment,
    started: Started,
    st: ReaderState,
    cancel: CancellationToken,
    shutdown: CancellationToken,
) -> Ending {
    let readers = CancellationToken::new();
    let mut lines = start_followers(&started.run, &st, &ctx.file_events, &readers);
    let mut s = Supervisor::new(ctx, a, started, st);
    loop {
        // Stop reading output while the spool is over its bound.
        let can_read = (s.out.open || s.err.open) && !s.outbox.spool.is_full();
        tokio::select! {
            line = lines.recv(), if can_read => s.read(line),
            _ = cancel.cancelled(), if s.stopping.is_none() => s.cancel(),
            _ = shutdown.cancelled(), if s.stopping.is_none() && !s.leaving => s.shut_down(),
            _ = shim_ended(&s.shim_end), if s.exit.is_none() && !s.shim_ended => s.shim_ended = true,
            _ = tokio::time::sleep(s.tick(Instant::now())) => {}
        }
        let now = Instant::now();
        if s.leaving && s.exit.is_none() {
            break;
        }
        s.watch_shim(now);
        s.renew_lease(now);
        s.enforce_timeout(now);
        s.kill_after_grace(now);
        s.flush_when_quiet(now);
        s.deliver_when_due(now).await;
        s.enforce_budget(now).await;
        s.stop_if_claim_lost(now);
        if s.exit.is_some() && !s.out.open && !s.err.open {
            break;
        }
    }
    readers.cancel();
    if s.leaving {
        return s.leave().await;
    }
    s.end(&shutdown).await
}

/// Returns when the watched shim has ended; never without one.
async fn shim_ended(end: &Option<ProcessEnd>) {
    match end {
        Some(end) => end.ended().await,
        None => std::future::pending().await,
    }
}

/// Starts following the run's `out` and `err` from where the state says
/// they were read to; both hand their lines to the one receiver returned.
fn start_followers(
    run: &RunFiles,
    st: &ReaderState,
    events: &Option<Arc<FileEvents>>,
    stop: &CancellationToken,
) -> mpsc::Receiver<Line> {
    let (tx, rx) = mpsc::channel::<Line>(256);
    tokio::spawn(follow(
        run.path("out"),
        st.out_offset,
        run.clone(),
        tx.clone(),
        false,
        events.clone(),
        stop.clone(),
    ));
    tokio::spawn(follow(
        run.path("err"),
        st.err_offset,
        run.clone(),
        tx,
        true,
        events.clone(),
        stop.clone(),
    ));
    rx
}

/// One of the agent's output streams, as far as it has been read.
struct Stream {
    /// The offset just past the last line read.
    offset: u64,
    /// The last few kilobytes read (for the result and failure reason).
    tail: String,
    /// False once its follower has read it to the end.
    open: bool,
}

/// Everything the loop keeps between its turns.
struct Supervisor {
    ctx: Arc<RunContext>,
    a: Assignment,
    run: RunFiles,
    workspace: Option<Workspace>,
    started_ms: u64,
    shim_pid: i32,
    format: TranscriptFormat,
    adapter: Box<dyn Adapter>,
    outbox: Outbox,
    out: Stream,
    err: Stream,
    timeout: Option<Duration>,
    grace: Duration,
    last_output: Instant,
    /// Output came since the adapter was last flushed.
    pending_quiet_flush: bool,
    next_delivery: Instant,
    /// "Server unreachable" was logged and "reachable again" was not yet.
    unreachable_logged: bool,
    lease_touched: Instant,
    /// Wakes the loop when the shim ends; `None` when the kernel cannot
    /// watch it, and the loop looks each [`SHIM_LOOK`] instead.
    shim_end: Option<ProcessEnd>,
    /// The watched shim has ended: look at every turn until the exit is read.
    shim_ended: bool,
    /// When the loop next looks whether the shim lives (see [`SHIM_LOOK`]).
    next_shim_look: Instant,
    /// Why the agent is being stopped, and when its grace ends.
    stopping: Option<(Ending, Instant)>,
    /// The group got its SIGKILL.
    killed: bool,
    exit: Option<ExitRecord>,
    /// This runner stops and leaves the agent to the next one.
    leaving: bool,
    /// The cost the run may reach: `max_cost_usd`, raised by each
    /// "continue" answer to the budget question (`on_budget = "ask"`).
    budget: Option<f64>,
    /// How many times the budget was raised (the budget questions' keys).
    budget_raises: u32,
    /// The budget question waiting for its answer, and when to look again.
    budget_question: Option<(String, Instant)>,
}

impl Supervisor {
    fn new(ctx: Arc<RunContext>, a: Assignment, started: Started, st: ReaderState) -> Supervisor {
        let format = ctx.agent.format();
        let mut outbox = Outbox {
            spool: started.spool,
            progress: st.progress.into_iter().collect(),
            status: st.status,
            claim_lost: false,
            session_id: st.session_id,
            usage: st.usage,
            usage_total: st.usage_total,
            result: st.result,
            skip_steps: st.skip_steps,
        };
        let timeout = ctx.agent.timeout_secs.map(Duration::from_secs);
        let grace = ctx.cancel_grace();
        let now = Instant::now();
        let shim_end = ProcessEnd::watch(
            started.shim_pid,
            started.run.recorded_shim_start(started.shim_pid),
        );
        let (adapter, out_tail, err_tail) = match started.replayed {
            Some(r) => {
                // What the output said before the point it is read on
                // from: no steps (the spool has those).
                outbox.take(r.outputs, &a, (st.out_offset, st.err_offset), true);
                (r.adapter, r.out_tail, r.err_tail)
            }
            None => (adapter_for(format), st.out_tail, st.err_tail),
        };
        Supervisor {
            a,
            run: started.run,
            workspace: started.workspace,
            started_ms: started.started_ms,
            shim_pid: started.shim_pid,
            shim_end,
            shim_ended: false,
            format,
            adapter,
            outbox,
            out: Stream {
                offset: st.out_offset,
                tail: out_tail,
                open: true,
            },
            err: Stream {
                offset: st.err_offset,
                tail: err_tail,
                open: true,
            },
            timeout,
            grace,
            last_output: now,
            pending_quiet_flush: false,
            next_delivery: now,
            unreachable_logged: false,
            lease_touched: now,
            next_shim_look: now,
            stopping: None,
            killed: false,
            exit: None,
            leaving: false,
            budget: ctx.agent.max_cost_usd,
            budget_raises: 0,
            budget_question: None,
            ctx,
        }
    }

    /// The agent's process group (0 before the shim has started it).
    fn group(&self) -> i32 {
        self.run.agent_pgid().unwrap_or(0)
    }

    /// Asks the agent to stop through its shim (which passes SIGTERM on to
    /// the group), with `deadline` the end of its grace.
    fn terminate(&mut self, ending: Ending, deadline: Instant) {
        signal_pid(self.shim_pid, libc::SIGTERM);
        self.stopping = Some((ending, deadline));
    }

    /// Takes one line (or the end of a stream) from the followers. Standard
    /// error is a transcript only for text agents; it is always kept in the
    /// tail, for the failure reason.
    /// How long the loop may sleep before it looks at the clocks again.
    fn tick(&self, now: Instant) -> Duration {
        let busy = self.stopping.is_some()
            || self.leaving
            || self.pending_quiet_flush
            || !self.outbox.is_empty()
            || now.duration_since(self.last_output) < BUSY_AFTER_OUTPUT;
        if busy {
            return TICK;
        }
        if self.shim_end.is_none() || self.budget_question.is_some() {
            return IDLE_TICK;
        }
        // A watched shim wakes the loop when it ends, a line or a cancel
        // when they come: a quiet agent needs it only for its lease and
        // its timeout.
        let lease_due = (self.lease_touched + self.lease_every()).saturating_duration_since(now);
        let timeout_due = self.timeout.map_or(QUIET_TICK, |t| {
            let spent = now_ms().saturating_sub(self.started_ms);
            Duration::from_millis((t.as_millis() as u64).saturating_sub(spent) + 1)
        });
        lease_due.min(timeout_due).clamp(TICK, QUIET_TICK)
    }

    /// How often the lease is renewed: eight times per lease timeout,
    /// between once a second and once every thirty.
    fn lease_every(&self) -> Duration {
        (self.ctx.lease_timeout / 8).clamp(Duration::from_secs(1), Duration::from_secs(30))
    }

    fn read(&mut self, line: Option<Line>) {
        match line {
            Some(Line::Out(l, end)) => {
                push_tail(&mut self.out.tail, &l);
                // The offset first: the steps this line completes are
                // marked as made with it read.
                self.out.offset = end;
                let outs = self.adapter.push_line(&l);
                self.take(outs);
                self.last_output = Instant::now();
                self.pending_quiet_flush = true;
            }
            Some(Line::Err(l, end)) => {
                push_tail(&mut self.err.tail, &l);
                self.err.offset = end;
                if self.format == TranscriptFormat::Text {
                    let outs = self.adapter.push_line(&l);
                    self.take(outs);
                    self.last_output = Instant::now();
                    self.pending_quiet_flush = true;
                }
            }
            Some(Line::OutClosed) => self.out.open = false,
            Some(Line::ErrClosed) => self.err.open = false,
            None => {
                self.out.open = false;
                self.err.open = false;
            }
        }
    }

    /// Hands what the adapter made to the outbox, marked with how far the
    /// output has been read and whether the adapter now holds nothing.
    fn take(&mut self, outs: Vec<shepherd_core::adapters::AdapterOutput>) {
        let idle = self.adapter.is_idle();
        self.outbox
            .take(outs, &self.a, (self.out.offset, self.err.offset), idle);
    }

    /// The run was cancelled.
    fn cancel(&mut self) {
        tracing::info!(
            run_id = self.a.run_id,
            shim = self.shim_pid,
            "cancel: SIGTERM to the agent through its shim"
        );
        self.terminate(Ending::Cancelled, Instant::now() + self.grace);
    }

    /// The runner is stopping: leave the agent to its shim (the built-in
    /// runner, whose server restarts) or stop it, with a shorter grace.
    fn shut_down(&mut self) {
        if self.ctx.detach_on_stop {
            self.leaving = true;
        } else {
            let deadline = Instant::now() + self.grace.min(Duration::from_secs(5));
            self.terminate(Ending::Signalled(libc::SIGTERM), deadline);
        }
    }

    /// Reads the agent's exit once the shim has recorded it.
    fn watch_shim(&mut self, now: Instant) {
        if self.exit.is_some() {
            return;
        }
        let outputs_open = self.out.open || self.err.open;
        if outputs_open && self.shim_end.is_some() && !self.shim_ended {
            return;
        }
        if outputs_open && self.shim_end.is_none() && now < self.next_shim_look {
            return;
        }
        self.next_shim_look = now + SHIM_LOOK;
        self.exit = self.run.exit();
        if self.exit.is_none() && self.shim_pid > 0 && self.run.live_shim().is_none() {
            // The shim writes the exit before it ends: it may have done
            // both between the read above and this check. Read again
            // before taking a finished agent for a killed one.
            self.exit = self.run.exit();
            if self.exit.is_some() {
                return;
            }
            // The shim died without a word (killed): nothing will
            // write the exit status; the agent's group goes with it.
            signal_group(self.group(), libc::SIGKILL);
            self.exit = Some(ExitRecord {
                code: None,
                signal: Some(libc::SIGKILL),
                error: Some("its shim was killed".into()),
                lease_expired: false,
            });
            let _ = write_atomic(
                &self.run.path("exit"),
                &serde_json::to_vec(&self.exit).unwrap_or_default(),
            );
        }
    }

    /// Tells the shim that a runner still holds the run (a shim whose lease
    /// grows old ends its agent): see [`Supervisor::lease_every`]. Each
    /// renewal writes a file, and a runner holding hundreds of runs renewed
    /// each every second spent a seventh of its CPU on it.
    fn renew_lease(&mut self, now: Instant) {
        if now.duration_since(self.lease_touched) >= self.lease_every() {
            self.run.touch_lease();
            self.lease_touched = now;
        }
    }

    /// The agent's `timeout_secs`, counted from the run's wall-clock start
    /// so that it spans a restart.
    fn enforce_timeout(&mut self, now: Instant) {
        if let (Some(t), None) = (self.timeout, &self.stopping) {
            if now_ms().saturating_sub(self.started_ms) > t.as_millis() as u64 {
                tracing::info!(
                    run_id = self.a.run_id,
                    "timeout: SIGTERM to the agent through its shim"
                );
                let deadline = now + self.grace.min(Duration::from_secs(10));
                self.terminate(Ending::TimedOut(t.as_secs()), deadline);
            }
        }
    }

    /// An agent still there when its grace is over loses its whole group.
    fn kill_after_grace(&mut self, now: Instant) {
        if let Some((_, deadline)) = &self.stopping {
            if now >= *deadline && !self.killed {
                let pgid = self.group();
                tracing::info!(
                    run_id = self.a.run_id,
                    pgid,
                    "grace over: SIGKILL to the process group"
                );
                signal_group(pgid, libc::SIGKILL);
                self.killed = true;
            }
        }
    }

    /// Output quiet for the quiet gap: what the adapter buffers becomes steps.
    fn flush_when_quiet(&mut self, now: Instant) {
        if self.pending_quiet_flush && now.duration_since(self.last_output) >= self.ctx.quiet_gap {
            let outs = self.adapter.flush();
            self.take(outs);
            self.pending_quiet_flush = false;
        }
    }

    /// Delivers what waits, unless the server was unreachable less than half
    /// a second ago; says once when it goes away and once when it is back.
    async fn deliver_when_due(&mut self, now: Instant) {
        if now < self.next_delivery || self.outbox.is_empty() {
            return;
        }
        match self.outbox.deliver(&self.ctx, &self.a).await {
            Ok(()) => {
                if self.unreachable_logged {
                    tracing::info!(
                        run_id = self.a.run_id,
                        "server reachable again; steps delivered"
                    );
                    self.unreachable_logged = false;
                }
            }
            Err(e) => {
                if !self.unreachable_logged {
                    tracing::warn!(run_id = self.a.run_id, error = %e, pending = self.outbox.spool.pending(), "server unreachable; steps kept on disk");
                    self.unreachable_logged = true;
                }
                self.next_delivery = now + Duration::from_millis(500);
            }
        }
    }

    /// The agent's `max_cost_usd`, against the cost it reported so far:
    /// past it the agent is stopped, or with `on_budget = "ask"` a person is
    /// asked whether to go on (the agent keeps working meanwhile).
    async fn enforce_budget(&mut self, now: Instant) {
        let (Some(max), Some(budget), Some(cost), None) = (
            self.ctx.agent.max_cost_usd,
            self.budget,
            self.outbox.usage_total.cost_usd,
            &self.stopping,
        ) else {
            return;
        };
        if cost <= budget {
            return;
        }
        let reason = format!("budget_exceeded: cost ${cost:.4} passed max_cost_usd ${budget:.4}");
        if !self.ctx.agent.asks_at_budget() {
            tracing::info!(
                run_id = self.a.run_id,
                reason,
                "SIGTERM to the agent through its shim"
            );
            self.terminate(Ending::BudgetExceeded(reason), now + self.grace);
            return;
        }
        match self.budget_question.take() {
            None => {
                // The key makes asking again (after a failed call, or by the
                // next runner after a restart) find the same question.
                let ask = p::AskInput {
                    run_id: Some(self.a.run_id.clone()),
                    kind: Some(p::InputKind::Question),
                    key: Some(format!("budget-{}", self.budget_raises)),
                    tool_name: None,
                    tool_input: None,
                    prompt: Some(format!(
                        "Spent ${cost:.2} of ${budget:.2}; continue with another ${max:.2}?"
                    )),
                    options: vec![BUDGET_CONTINUE.into(), BUDGET_STOP.into()],
                };
                match self.ctx.connector.ask(&ask).await {
                    Ok(q) => self.budget_question = Some((q.id, now)),
                    Err(e) => {
                        tracing::warn!(run_id = self.a.run_id, error = %e, "cannot ask about the budget yet")
                    }
                }
            }
            Some((id, next)) if now < next => self.budget_question = Some((id, next)),
            Some((id, _)) => match self.ctx.connector.input_request(&id, None).await {
                Ok(q) if q.state == p::InputState::Pending => {
                    self.budget_question = Some((id, now + Duration::from_secs(1)));
                }
                Ok(q) => {
                    let go_on = q.state == p::InputState::Answered
                        && q.answer.as_ref().and_then(|a| a.option.as_deref())
                            == Some(BUDGET_CONTINUE);
                    if go_on {
                        self.budget = Some(budget + max);
                        self.budget_raises += 1;
                        tracing::info!(
                            run_id = self.a.run_id,
                            budget = budget + max,
                            "budget raised"
                        );
                    } else {
                        tracing::info!(
                            run_id = self.a.run_id,
                            reason,
                            "budget not raised: SIGTERM to the agent"
                        );
                        self.terminate(Ending::BudgetExceeded(reason), now + self.grace);
                    }
                }
                Err(e) => {
                    tracing::debug!(run_id = self.a.run_id, error = %e, "budget question unreadable for now");
                    self.budget_question = Some((id, now + Duration::from_secs(1)));
                }
            },
        }
    }

    /// The server gave the task to someone else: this agent must not go on
    /// working on it, so its group is killed at once, without grace.
    fn stop_if_claim_lost(&mut self, now: Instant) {
        if self.outbox.claim_lost && self.stopping.is_none() {
            tracing::warn!(
                run_id = self.a.run_id,
                "claim lost (expired or re-granted): stopping the agent"
            );
            signal_group(self.group(), libc::SIGKILL);
            self.stopping = Some((Ending::ClaimLost, now));
            self.killed = true;
        }
    }

    /// The agent runs on under its shim; the next runner started with this
    /// data directory carries the run on from exactly here.
    async fn leave(mut self) -> Ending {
        let outs = self.adapter.flush();
        self.take(outs);
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.outbox.deliver(&self.ctx, &self.a),
        )
        .await;
        let state = ReaderState {
            out_offset: self.out.offset,
            err_offset: self.err.offset,
            delivered: self.outbox.spool.delivered(),
            session_id: self.outbox.session_id.clone(),
            usage: self.outbox.usage,
            usage_total: self.outbox.usage_total,
            result: self.outbox.result.take(),
            progress: self.outbox.progress.iter().cloned().collect(),
            status: self.outbox.status.clone(),
            out_tail: std::mem::take(&mut self.out.tail),
            err_tail: std::mem::take(&mut self.err.tail),
            skip_steps: self.outbox.skip_steps,
        };
        let saved = serde_json::to_vec(&state)
            .map_err(std::io::Error::other)
            .and_then(|b| write_atomic(&self.run.path("reader.json"), &b));
        if let Err(e) = saved {
            tracing::error!(run_id = self.a.run_id, error = %e, "cannot record how far the run was read");
        }
        self.outbox.spool.keep();
        tracing::info!(
            run_id = self.a.run_id,
            "left running under its shim for the next start"
        );
        Ending::Detached
    }

    /// The run is over: nothing of the agent is left, its worktree is
    /// committed, every step is delivered, and the end is reported.
    async fn end(mut self, shutdown: &CancellationToken) -> Ending {
        self.kill_leftovers();
        self.end_workspace().await;
        let outs = self.adapter.finish();
        self.take(outs);
        let ending = self.ending();
        let result = self.result_text();
        self.deliver_everything(shutdown).await;
        if self.outbox.claim_lost {
            self.discard();
            return Ending::ClaimLost;
        }
        let reason = reason(&ending, &self.err.tail);
        let metadata = self.end_metadata(&ending);
        report_end(
            &self.ctx,
            &self.a,
            &ending,
            result.as_deref(),
            &reason,
            metadata,
            shutdown,
        )
        .await;
        let run_id = self.a.run_id.clone();
        self.discard();
        tracing::info!(run_id, ?ending, "run ended");
        ending
    }

    /// Makes sure nothing of the group survives the run.
    fn kill_leftovers(&self) {
        let pgid = self.group();
        if crate::process::group_alive(pgid) {
            signal_group(pgid, libc::SIGKILL);
        }
    }

    /// Commits what the agent left in its worktree (a worktree agent only).
    async fn end_workspace(&mut self) {
        if let Some(w) = &mut self.workspace {
            let how = match &self.stopping {
                Some((e, _)) => format!("{e:?}"),
                None => format!("exit {:?}", self.exit.as_ref().and_then(|s| s.code)),
            };
            end_workspace(w, &self.a, &how).await;
        }
    }

    /// How the run ended: why it was stopped, if it was, or else what the
    /// shim recorded (no record at all counts as a SIGKILL).
    fn ending(&mut self) -> Ending {
        let status = self.exit.take().unwrap_or(ExitRecord {
            code: None,
            signal: Some(libc::SIGKILL),
            error: None,
            lease_expired: false,
        });
        match self.stopping.take() {
            Some((e, _)) => e,
            None => match (&status.error, status.code, status.lease_expired) {
                (Some(e), _, _) if status.signal.is_none() => Ending::SpawnFailed(e.clone()),
                (_, _, true) => Ending::LeaseExpired,
                (_, Some(c), _) => Ending::Exited(c),
                _ => Ending::Signalled(status.signal.unwrap_or(0)),
            },
        }
    }

    /// The run's answer: the result the agent reported, else its last prose,
    /// else the end of its output.
    fn result_text(&mut self) -> Option<String> {
        self.outbox
            .result
            .take()
            .or_else(|| self.adapter.last_assistant_text().map(str::to_owned))
            .or_else(|| Some(tail_of(&self.out.tail, 2000)).filter(|s| !s.is_empty()))
    }

    /// Delivers every step before the end, however long the server is away
    /// (until the runner stops).
    async fn deliver_everything(&mut self, shutdown: &CancellationToken) {
        let mut waited = false;
        while !self.outbox.is_empty() && !self.outbox.claim_lost {
            if self.outbox.deliver(&self.ctx, &self.a).await.is_err() {
                if !waited {
                    tracing::warn!(
                        run_id = self.a.run_id,
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
    }

    /// What the end's progress event carries besides its message.
    fn end_metadata(&self, ending: &Ending) -> Value {
        json!({
            "session_id": self.outbox.session_id,
            "ending": format!("{ending:?}"),
            "workspace": self.workspace,
            "usage": (!self.outbox.usage_total.is_empty()).then_some(self.outbox.usage_total),
            // An exit code the agent does not retry on makes the failure final.
            "retryable": match ending {
                Ending::Exited(c) if *c != 0 => self.ctx.agent.retries_exit_code(*c),
                _ => true,
            },
        })
    }

    /// Removes the run directory: the spool first (its own file), then the
    /// rest. Nothing of the run is needed any more.
    fn discard(self) {
        let Supervisor { outbox, run, .. } = self;
        drop(outbox);
        let _ = std::fs::remove_dir_all(&run.dir);
    }
}

/// The end's message: empty for success, else why it failed.
fn reason(ending: &Ending, err_tail: &str) -> String {
    match ending {
        Ending::Exited(0) => String::new(),
        Ending::Exited(c) => format!("exit code {c}: {}", tail_of(err_tail, 500)),
        Ending::Signalled(s) => format!("killed by signal {s}"),
        Ending::TimedOut(t) => format!("timed out after {t}s"),
        Ending::Cancelled => "cancelled".into(),
        Ending::ClaimLost => "claim lost".into(),
        Ending::LeaseExpired => {
            "ended by its shim: no runner renewed its lease within the timeout".into()
        }
        Ending::Detached => String::new(),
        Ending::SpawnFailed(r) | Ending::BudgetExceeded(r) => r.clone(),
    }
}

fn signal_pid(pid: i32, sig: i32) {
    if pid > 1 {
        // SAFETY: kill(2) on one process; no memory is involved.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}
