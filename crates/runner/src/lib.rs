//! The runner: runs configured agents as real processes and reports to a
//! Shepherd server through the worker connector protocol only (register,
//! poll, claim, heartbeat, steps, progress), exactly as an external worker
//! would. `shepherd serve` starts one in-process for the agents in its
//! configuration; `shepherd runner --server URL` runs the same code on
//! another host.
//!
//! Each agent becomes one registered worker with `max_concurrent` slots.
//! Cancel reaches a run at once through the server's event stream (and is
//! repeated in heartbeat answers). Agent processes run in their own process
//! groups, recorded in the data directory; a runner that starts finds and
//! kills any group a dead predecessor left behind.

pub mod agent;
pub mod execution;
pub mod lines;
pub mod process;
pub mod spool;
pub mod worktree;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use agent::AgentConfig;
use execution::{execute, Assignment, RunContext};
use process::{GroupRecords, WorkerRecords};
use shepherd_client::{Client, Start};
use shepherd_protocol as p;

/// How a runner is set up.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    pub server: String,
    /// The operator token (registration needs it where one is configured).
    pub token: Option<String>,
    pub agents: BTreeMap<String, AgentConfig>,
    /// Where process-group records and step spools live.
    pub data_dir: PathBuf,
    pub heartbeat_interval: Duration,
    pub poll_interval: Duration,
    pub quiet_gap: Duration,
    pub cancel_grace: Duration,
    pub spool_cap_bytes: u64,
    /// Distinguishes this runner's workers from others' (host name by default).
    pub name: String,
}

impl RunnerConfig {
    pub fn new(
        server: &str,
        token: Option<String>,
        agents: BTreeMap<String, AgentConfig>,
        data_dir: PathBuf,
    ) -> Self {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "host".into());
        RunnerConfig {
            server: server.to_owned(),
            token,
            agents,
            data_dir,
            heartbeat_interval: Duration::from_secs(30),
            poll_interval: Duration::from_secs(2),
            quiet_gap: Duration::from_millis(500),
            cancel_grace: Duration::from_secs(30),
            spool_cap_bytes: 64 * 1024 * 1024,
            name: host,
        }
    }
}

type Cancels = Arc<Mutex<HashMap<String, CancellationToken>>>;

/// Runs until `shutdown` is cancelled: then stops taking work, stops its
/// agents, reports them and deregisters.
pub async fn run(config: RunnerConfig, shutdown: CancellationToken) -> Result<(), String> {
    for (name, agent) in &config.agents {
        agent.validate(name)?;
    }
    let records = GroupRecords::new(&config.data_dir)
        .map_err(|e| format!("{}: {e}", config.data_dir.display()))?;
    let reaped = records.reap_orphans();
    if !reaped.is_empty() {
        tracing::warn!(
            count = reaped.len(),
            "ended agent processes left by a previous runner"
        );
    }
    // Only now that their processes are gone: finish the worktrees of runs
    // that died with their runner (commit leftovers, keep the branches).
    let finished = worktree::clean_leftovers(&config.data_dir).await;
    if finished > 0 {
        tracing::warn!(
            count = finished,
            "finished worktrees left by a previous runner"
        );
    }
    for (name, agent) in &config.agents {
        if let Some((repo, base)) = agent.worktree_repo() {
            if let Err(e) = worktree::resolve_base(repo, base).await {
                tracing::warn!(agent = name, "agents.{name}: {e}; its runs will fail");
            }
        }
    }
    let operator = Client::new(&config.server, config.token.clone()).map_err(|e| e.to_string())?;
    // Workers a previous runner registered from this data directory lost
    // their processes with it: release their claims now rather than after
    // the heartbeat timeout, so their tasks go straight back to the queue.
    let registry = WorkerRecords::new(&config.data_dir)
        .map_err(|e| format!("{}: {e}", config.data_dir.display()))?;
    for old in registry.take_all() {
        let body = p::DeregisterBody {
            worker_id: Some(old.clone()),
            reason: Some(
                "its runner stopped without deregistering; its processes were ended".into(),
            ),
        };
        match operator.deregister(&body).await {
            Ok(_) => tracing::warn!(
                worker_id = old,
                "deregistered a worker left by a previous runner; its tasks are back in the queue"
            ),
            Err(e) => tracing::debug!(worker_id = old, error = %e, "previous worker already gone"),
        }
    }
    let tracker = TaskTracker::new();
    let cancels: Cancels = Arc::default();
    let wake = Arc::new(Notify::new());
    let instance = format!("{}-{}", config.name, std::process::id());
    let mut workers = Vec::new();
    for (name, agent) in &config.agents {
        let worker_id = format!("{name}@{instance}");
        let token = register(&operator, &worker_id, name, agent, &shutdown).await?;
        registry.record(&worker_id);
        tracing::info!(
            worker_id,
            agent = name,
            slots = agent.slots(),
            "runner worker registered"
        );
        let ctx = Arc::new(RunContext {
            agent_name: name.clone(),
            agent: agent.clone(),
            connector: operator.with_token(token),
            records: records.clone(),
            spool_dir: config.data_dir.join("runner").join("spool"),
            spool_cap_bytes: config.spool_cap_bytes,
            quiet_gap: config.quiet_gap,
            default_cancel_grace: config.cancel_grace,
            data_dir: config.data_dir.clone(),
        });
        workers.push((worker_id.clone(), ctx.clone()));
        tracker.spawn(claim_loop(
            worker_id.clone(),
            ctx.clone(),
            cancels.clone(),
            wake.clone(),
            tracker.clone(),
            config.poll_interval,
            shutdown.clone(),
        ));
        tracker.spawn(heartbeat_loop(
            worker_id,
            ctx,
            cancels.clone(),
            config.heartbeat_interval,
            shutdown.clone(),
        ));
    }
    let ids: Vec<String> = workers.iter().map(|(w, _)| w.clone()).collect();
    tracker.spawn(follow_events(
        operator.clone(),
        ids,
        cancels.clone(),
        wake.clone(),
        shutdown.clone(),
    ));
    tracker.close();
    shutdown.cancelled().await;
    tracing::info!("runner stopping: ending agent processes");
    tracker.wait().await;
    for (worker_id, ctx) in workers {
        let body = p::DeregisterBody {
            worker_id: Some(worker_id.clone()),
            reason: Some("runner stopped".into()),
        };
        let done = ctx.connector.deregister(&body).await;
        if done.is_ok() {
            registry.forget(&worker_id);
        }
    }
    Ok(())
}

async fn register(
    operator: &Client,
    worker_id: &str,
    name: &str,
    agent: &AgentConfig,
    shutdown: &CancellationToken,
) -> Result<String, String> {
    let body = p::RegisterBody {
        worker_id: Some(worker_id.to_owned()),
        agent_id: Some(name.to_owned()),
        worker_type: Some(agent.worker_type().to_owned()),
        capabilities: agent.capabilities.clone(),
        max_concurrent: Some(agent.slots()),
        name: Some(name.to_owned()),
        project_path: agent.cwd.as_ref().map(|c| c.display().to_string()),
        ..Default::default()
    };
    let mut backoff = Duration::from_millis(200);
    loop {
        match operator.register(&body).await {
            Ok(v) => return Ok(v.worker_token),
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "cannot reach the server to register; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return Err("stopped before registering".into()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(format!("registering agent {name}: {e}")),
        }
    }
}

/// Polls for work and claims it while slots are free.
async fn claim_loop(
    worker_id: String,
    ctx: Arc<RunContext>,
    cancels: Cancels,
    wake: Arc<Notify>,
    tracker: TaskTracker,
    poll: Duration,
    shutdown: CancellationToken,
) {
    let slots = ctx.agent.slots() as usize;
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let freed = Arc::new(Notify::new());
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        let mut claimed_any = false;
        let free = slots.saturating_sub(running.load(std::sync::atomic::Ordering::SeqCst));
        if free > 0 {
            // One call claims the best tasks for every free slot: no
            // list-then-claim race with other workers.
            let body = p::ClaimNextBody {
                worker_id: Some(worker_id.clone()),
                max: Some(free as i64),
            };
            match ctx.connector.claim_next(&body).await {
                Ok(v) => {
                    for c in v.claims {
                        claimed_any = true;
                        let a = Assignment {
                            vtid: c.vtid,
                            run_id: c.run_id,
                            claim_token: c.claim_token,
                            title: c.title,
                            spec: c.spec,
                            conversation: c.conversation,
                            attempt: c.attempt,
                        };
                        let token = shutdown.child_token();
                        cancels
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(a.run_id.clone(), token.clone());
                        running.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let (ctx, cancels, running, freed, stop) = (
                            ctx.clone(),
                            cancels.clone(),
                            running.clone(),
                            freed.clone(),
                            shutdown.clone(),
                        );
                        tracker.spawn(async move {
                            let run_id = a.run_id.clone();
                            execute(ctx, a, token, stop).await;
                            cancels
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .remove(&run_id);
                            running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                            freed.notify_one();
                        });
                    }
                }
                // Includes max_above_capacity: a claim the server still
                // counts (its completion not yet delivered) frees up later.
                Err(e) => tracing::debug!(error = %e, "claiming tasks failed"),
            }
        }
        if claimed_any {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.notified() => {}
            _ = freed.notified() => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Heartbeats; the answer repeats any cancel request for our runs.
async fn heartbeat_loop(
    worker_id: String,
    ctx: Arc<RunContext>,
    cancels: Cancels,
    every: Duration,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        let body = p::HeartbeatBody {
            worker_id: Some(worker_id.clone()),
            active_vtid: None,
        };
        match ctx.connector.heartbeat(&body).await {
            Ok(v) => {
                for c in v.claims.iter().filter(|c| c.cancel_requested) {
                    cancel_run(&cancels, &c.run_id);
                }
            }
            Err(e) => tracing::debug!(error = %e, "heartbeat failed"),
        }
    }
}

fn cancel_run(cancels: &Cancels, run_id: &str) {
    if let Some(t) = cancels
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(run_id)
    {
        if !t.is_cancelled() {
            tracing::info!(run_id, "cancel requested");
            t.cancel();
        }
    }
}

/// Follows the server's events: cancels of our runs act at once, and new
/// work wakes the claim loops without waiting for the next poll.
async fn follow_events(
    c: Client,
    worker_ids: Vec<String>,
    cancels: Cancels,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let query = p::EventStreamQuery {
        types: Some("task.cancel_requested,task.dispatched,task.state_changed,worker.claim.released,worker.claim.expired".into()),
        ..Default::default()
    };
    let follow = c.follow(
        &query,
        Start::Now,
        |f| {
            let Ok(e) = f.parse::<p::WireEvent>() else {
                return true;
            };
            let e = e.event;
            match e.kind.as_str() {
                shepherd_core::event::kind::TASK_CANCEL_REQUESTED => {
                    let ours = e
                        .refs
                        .worker_id
                        .as_deref()
                        .is_some_and(|w| worker_ids.iter().any(|x| x == w));
                    if let (true, Some(run)) = (ours, e.refs.run_id.as_deref()) {
                        cancel_run(&cancels, run);
                    }
                }
                _ => wake.notify_waiters(),
            }
            true
        },
        |msg| tracing::debug!(msg, "event stream interrupted"),
    );
    tokio::select! {
        _ = shutdown.cancelled() => {}
        r = follow => if let Err(e) = r { tracing::warn!(error = %e, "cannot follow the event stream; relying on heartbeats") },
    }
}
