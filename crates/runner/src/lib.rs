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
//! groups under a `shepherd shim` each ([`shim`]); a runner that starts
//! carries on the runs a previous one left to live shims, and gives back
//! to the queue those whose agent is gone.

pub mod branch_prune;
pub mod execution;
pub mod file_events;
pub mod host;
pub mod host_link;
pub mod lines;
pub mod process;
pub mod shim;
pub mod spare_shim;
pub mod spool;
pub mod step_courier;
mod work_news;
pub mod workspace_diff;
pub mod worktree;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use execution::{execute, Assignment, Ending, RunContext, SavedRun};
use file_events::FileEvents;
use process::{GroupRecords, WorkerRecords};
use shepherd_client::{Client, Start};
pub use shepherd_core::agent_config::AgentConfig;
use shepherd_protocol as p;
use work_news::{NewsReader, WorkNews};

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
    /// The program whose `shim` verb supervises each agent (this binary).
    pub shim_program: PathBuf,
    /// How old a run's lease may grow before its shim ends the agent: less
    /// than the server's heartbeat timeout, so that the agents of a dead
    /// node stop before their claims can be granted again.
    pub lease_timeout: Duration,
    /// On stop, leave agents running under their shims for the next runner
    /// with this data directory (the built-in runner of `serve`).
    pub detach_on_stop: bool,
    /// What the server's certificate is checked against: the web roots and
    /// `SHEPHERD_CA_CERT` by default; the built-in runner of an HTTPS
    /// `serve` trusts its own listener's certificate instead.
    pub trust: shepherd_client::Trust,
    /// The umask agents get (the one the process started with, before it
    /// made its own files private); `None`: the process's own.
    pub child_umask: Option<u32>,
    /// Which host its workers run on.
    pub host: HostMode,
    /// How its requests reach the server: `None`, over the network to
    /// `server`. The built-in runner of `serve` calls that server's own
    /// router in-process instead (the same authentication, checks and
    /// limits, without a socket); its agents still get `server`'s address.
    pub transport: Option<SharedTransport>,
}

/// A transport the runner's requests take (see [`RunnerConfig::transport`]).
#[derive(Clone)]
pub struct SharedTransport(pub std::sync::Arc<dyn shepherd_client::Transport>);

impl std::fmt::Debug for SharedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SharedTransport")
            .field(&self.0.base())
            .finish()
    }
}

/// Which host a runner's workers run on.
#[derive(Debug, Clone, Default)]
pub enum HostMode {
    /// None said (a runner embedded somewhere that is no host).
    #[default]
    Unnamed,
    /// A host the server already knows: the built-in runner of `serve`
    /// runs on its own server node.
    Known(String),
    /// This machine registers itself as a host first, and says it is
    /// there for as long as the runner runs (`shepherd runner`).
    Register(host::HostSetup),
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
            heartbeat_interval: shepherd_core::defaults::RUNNER_HEARTBEAT,
            poll_interval: shepherd_core::defaults::RUNNER_POLL,
            quiet_gap: Duration::from_millis(500),
            cancel_grace: shepherd_core::defaults::CANCEL_GRACE,
            spool_cap_bytes: 64 * 1024 * 1024,
            name: host,
            shim_program: std::env::var_os("SHEPHERD_SHIM_PROGRAM")
                .map(PathBuf::from)
                .or_else(|| std::env::current_exe().ok())
                .unwrap_or_else(|| PathBuf::from("shepherd")),
            lease_timeout: Duration::from_secs(270),
            detach_on_stop: false,
            trust: shepherd_client::Trust::from_env(),
            child_umask: None,
            host: HostMode::Unnamed,
            transport: None,
        }
    }

    /// The shims' lease timeout for a server heartbeat timeout: one
    /// heartbeat interval shorter (the last heartbeat may be that much
    /// older than the last lease renewal), and never under two seconds.
    pub fn set_heartbeat_timeout(&mut self, heartbeat_timeout: Duration) {
        self.lease_timeout = heartbeat_timeout
            .saturating_sub(self.heartbeat_interval)
            .max(Duration::from_secs(2));
    }
}

/// This runner's name for itself, kept in the data directory: a runner
/// started again with it acts as the same workers, so that the claims of
/// runs it re-adopts are still its own.
fn instance_name(config: &RunnerConfig) -> String {
    let path = config.data_dir.join("runner").join("instance");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let name = text.trim();
        if !name.is_empty() {
            return name.to_owned();
        }
    }
    let name = format!("{}-{}", config.name, std::process::id());
    if let Err(e) = shim::write_atomic(&path, name.as_bytes()) {
        tracing::warn!(error = %e, "cannot record the runner's instance name");
    }
    name
}

/// Runs a previous runner left: those whose shim lives (or wrote the
/// agent's exit) are carried on; the others lost their agent with the host.
fn leftover_runs(
    data_dir: &std::path::Path,
) -> (Vec<execution::SavedRun>, Vec<execution::SavedRun>) {
    let (mut live, mut lost) = (Vec::new(), Vec::new());
    let Ok(entries) = std::fs::read_dir(shim::RunFiles::root(data_dir)) else {
        return (live, lost);
    };
    for e in entries.flatten() {
        let run = shim::RunFiles::at(e.path());
        match execution::SavedRun::load(&run) {
            Some(saved) if run.live_shim().is_some() || run.exit().is_some() => live.push(saved),
            Some(saved) => {
                // No shim and no exit status: whatever is left of the
                // agent's group must not run on unsupervised.
                if let Some(pgid) = run.agent_pgid() {
                    process::signal_group(pgid, libc::SIGKILL);
                }
                lost.push(saved)
            }
            None => {
                let _ = std::fs::remove_dir_all(&run.dir);
            }
        }
    }
    (live, lost)
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
    let (mut live, lost) = recover_leftovers(&config, &records).await;
    let operator = match &config.transport {
        Some(SharedTransport(transport)) => {
            Client::over(transport.clone(), config.token.clone()).map_err(|e| e.to_string())?
        }
        None => Client::with_trust(&config.server, config.token.clone(), &config.trust)
            .map_err(|e| e.to_string())?,
    };
    // Workers a previous runner registered from this data directory lost
    // their processes with it: release their claims now rather than after
    // the heartbeat timeout, so their tasks go straight back to the queue.
    let registry = WorkerRecords::new(&config.data_dir)
        .map_err(|e| format!("{}: {e}", config.data_dir.display()))?;
    let instance = instance_name(&config);
    let current: Vec<String> = config
        .agents
        .keys()
        .map(|name| format!("{name}@{instance}"))
        .collect();
    deregister_previous(&operator, &registry, &current).await;
    let tracker = TaskTracker::new();
    let host_id = match &config.host {
        HostMode::Unnamed => None,
        HostMode::Known(id) => Some(id.clone()),
        HostMode::Register(setup) => {
            register_host(&config, setup, &operator, &tracker, &shutdown).await?
        }
    };
    // Its dispatcher ends when this function returns (the guard), after
    // the runs it wakes have stopped.
    let events_stop = CancellationToken::new();
    let _events_stop = events_stop.clone().drop_guard();
    let file_events = FileEvents::start(events_stop);
    let shims = spare_shim::SpareShims::new(config.shim_program.clone());
    if !config.agents.is_empty() {
        shims.refill();
    }
    let shared = SharedByRuns {
        records: records.clone(),
        file_events,
        shims,
    };
    let cancels: Cancels = Arc::default();
    let wake = WorkNews::new();
    // The log's head before any claim loop asks for work: the event stream
    // starts after it, so a task made between a loop's first claim and the
    // stream's connection still wakes that loop.
    let head = match operator.head().await {
        Ok(h) => Start::After(h),
        Err(e) => {
            tracing::debug!(error = %e, "no log head; following from when the stream connects");
            Start::Now
        }
    };
    let detached = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for (name, agent) in &config.agents {
        let worker_id = format!("{name}@{instance}");
        let token = register(
            &operator,
            &worker_id,
            name,
            agent,
            host_id.as_deref(),
            &shutdown,
        )
        .await?;
        registry.record(&worker_id);
        tracing::info!(
            worker_id,
            agent = name,
            slots = agent.slots(),
            "runner worker registered"
        );
        let ctx = Arc::new(run_context(
            &config,
            name,
            agent,
            operator.with_token(token),
            &worker_id,
            &shared,
        ));
        workers.push((worker_id.clone(), ctx.clone()));
        let (mine, rest): (Vec<_>, Vec<_>) =
            live.into_iter().partition(|r| r.worker_id == worker_id);
        live = rest;
        for saved in lost.iter().filter(|r| r.worker_id == worker_id) {
            requeue_lost(&ctx, saved).await;
        }
        tracker.spawn(claim_loop(
            worker_id.clone(),
            ctx.clone(),
            mine,
            detached.clone(),
            cancels.clone(),
            wake.listen(),
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
    end_runs_of_departed_workers(&config.data_dir, live.iter().chain(lost.iter()), &current);
    let ids: Vec<String> = workers.iter().map(|(w, _)| w.clone()).collect();
    // A host without agents has no runs to hear of.
    if !ids.is_empty() {
        tracker.spawn(follow_events(
            operator.clone(),
            ids,
            cancels.clone(),
            wake.clone(),
            head,
            shutdown.clone(),
        ));
    }
    tracker.close();
    shutdown.cancelled().await;
    // Said once, when it is known what happens to the agents: they are not
    // ended by a stop, their shims keep them running.
    tracker.wait().await;
    if detached.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        // The workers keep their claims for the next start (heartbeats
        // resume within the start grace).
        tracing::info!(
            runs = detached.load(std::sync::atomic::Ordering::SeqCst),
            "runner stopped; its running agents go on under their shims and the next start takes them back"
        );
        return Ok(());
    }
    tracing::info!("runner stopped with no agent running; its workers leave the server");
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

/// What a previous runner on this data directory left: its orphaned agent
/// processes are ended, the worktrees of runs that died with it finished,
/// and its saved runs sorted into those whose agent still lives (`live`,
/// carried on) and those whose agent is gone (`lost`, given back).
async fn recover_leftovers(
    config: &RunnerConfig,
    records: &GroupRecords,
) -> (Vec<SavedRun>, Vec<SavedRun>) {
    let reaped = records.reap_orphans();
    if !reaped.is_empty() {
        tracing::warn!(
            count = reaped.len(),
            "ended agent processes left by a previous runner"
        );
    }
    let (live, lost) = leftover_runs(&config.data_dir);
    // Only now that their processes are gone: finish the worktrees of runs
    // that died with their runner (commit leftovers, keep the branches);
    // those of runs carried on stay.
    let keep: std::collections::HashSet<String> =
        live.iter().map(|r| r.assignment.run_id.clone()).collect();
    let finished = worktree::clean_leftovers(&config.data_dir, &keep).await;
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
    (live, lost)
}

/// Workers a previous runner registered from this data directory lost
/// their processes with it: their claims are released now rather than
/// after the heartbeat timeout, so their tasks go straight back to the
/// queue. Those in `current` are registered again, keeping their claims.
async fn deregister_previous(operator: &Client, registry: &WorkerRecords, current: &[String]) {
    for old in registry.take_all() {
        if current.contains(&old) {
            continue;
        }
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
}

/// Runs of workers this runner no longer has (the agent left the
/// configuration): nothing can carry them on, so their agents are killed
/// and their files removed.
fn end_runs_of_departed_workers<'a>(
    data_dir: &std::path::Path,
    saved: impl Iterator<Item = &'a SavedRun>,
    current: &[String],
) {
    for saved in saved.filter(|r| !current.contains(&r.worker_id)) {
        let run = shim::RunFiles::new(data_dir, &saved.assignment.run_id);
        if let Some(pgid) = run.agent_pgid() {
            process::signal_group(pgid, libc::SIGKILL);
        }
        tracing::warn!(
            run_id = saved.assignment.run_id,
            worker_id = saved.worker_id,
            "a run left by a worker this runner no longer has was ended"
        );
        let _ = std::fs::remove_dir_all(&run.dir);
    }
}

/// What all the runs of this runner share, whichever worker they are for.
struct SharedByRuns {
    records: GroupRecords,
    file_events: Option<Arc<FileEvents>>,
    shims: Arc<spare_shim::SpareShims>,
}

/// What the runs of one of this runner's workers need from it.
fn run_context(
    config: &RunnerConfig,
    name: &str,
    agent: &AgentConfig,
    connector: Client,
    worker_id: &str,
    shared: &SharedByRuns,
) -> RunContext {
    RunContext {
        agent_name: name.to_owned(),
        agent: agent.clone(),
        steps: step_courier::StepCourier::start(connector.clone(), worker_id.to_owned()),
        connector,
        records: shared.records.clone(),
        worker_id: worker_id.to_owned(),
        shim_program: config.shim_program.clone(),
        shims: shared.shims.clone(),
        lease_timeout: config.lease_timeout,
        detach_on_stop: config.detach_on_stop,
        child_umask: config.child_umask,
        spool_dir: config.data_dir.join("runner").join("spool"),
        spool_cap_bytes: config.spool_cap_bytes,
        quiet_gap: config.quiet_gap,
        default_cancel_grace: config.cancel_grace,
        data_dir: config.data_dir.clone(),
        file_events: shared.file_events.clone(),
    }
}

/// Registers this machine as a host, and keeps saying it is there; returns
/// its id (none: the server is older than hosts, and the runner works as
/// it did before them).
async fn register_host(
    config: &RunnerConfig,
    setup: &host::HostSetup,
    operator: &Client,
    tracker: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<Option<String>, String> {
    let id = host::host_id(&config.data_dir)?;
    let body = p::RegisterHostBody {
        id: Some(id.clone()),
        name: Some(setup.name.clone()),
        sessions_root: setup.sessions_root.as_ref().map(|r| {
            std::path::absolute(r)
                .unwrap_or_else(|_| r.clone())
                .display()
                .to_string()
        }),
        agents: config.agents.keys().cloned().collect(),
        slots: (!config.agents.is_empty())
            .then(|| config.agents.values().map(AgentConfig::slots).sum()),
        host_token: None,
        replace: setup.replace,
        enrollment_token: setup.enrollment_token.clone(),
    };
    let (host, client) = match host::register(operator, &body, &config.data_dir, shutdown).await? {
        Some(registered) => registered,
        None if config.agents.is_empty() => {
            return Err("the server knows no hosts (it is older than this runner): \
a runner without agents has nothing to do there"
                .into())
        }
        None => {
            tracing::warn!("the server knows no hosts (it is older than this runner): running agents without a host");
            return Ok(None);
        }
    };
    // The heartbeats replace the client when they register again; the link
    // reconnects with the newest.
    let (client_tx, client_rx) = tokio::sync::watch::channel(client);
    tracing::info!(
        host = host.id,
        name = host.name,
        sessions_root = host.sessions_root.as_deref().unwrap_or("-"),
        agents = host.agents.len(),
        "host registered"
    );
    // A replace is done once: coming back later, the runner proves itself
    // with the token it was given.
    let body = p::RegisterHostBody {
        replace: false,
        ..body
    };
    tracker.spawn(host::heartbeat_loop(
        operator.clone(),
        body,
        config.data_dir.clone(),
        client_tx,
        id.clone(),
        config.heartbeat_interval,
        shutdown.clone(),
    ));
    let repos = config
        .agents
        .values()
        .filter_map(|a| a.worktree_repo().map(|(repo, _)| repo.to_owned()))
        .collect();
    let id_for_link = id.clone();
    let sessions = setup.sessions_root.as_ref().map(|root| {
        use shepherd_sessions::pty_host::{PtyHost, PtyHostConfig};
        PtyHost::new(PtyHostConfig {
            data_dir: config.data_dir.clone(),
            sessions_root: std::path::absolute(root).unwrap_or_else(|_| root.clone()),
            shell: shepherd_sessions::launch::default_shell(),
            agents: config
                .agents
                .iter()
                .map(|(name, a)| (name.clone(), shepherd_sessions::AgentSpec::from(a)))
                .collect(),
            kill_grace: Duration::from_secs(2),
            limits: Default::default(),
            child_umask: config.child_umask,
        })
    });
    let pty = sessions.as_ref().map(|(p, _)| p.clone());
    let link = Arc::new(host_link::LinkServer::new(repos, pty.clone()));
    if let Some((_, exits)) = sessions {
        tracker.spawn(link.clone().forward_exits(exits, shutdown.clone()));
    }
    let link_shutdown = shutdown.clone();
    tracker.spawn(async move {
        host_link::keep_open(client_rx, id_for_link, link, link_shutdown).await;
        // A stopping host ends its tabs' processes; each is restored on
        // its next attach, as a server node's are.
        if let Some(p) = pty {
            p.shutdown().await;
        }
    });
    Ok(Some(id))
}

async fn register(
    operator: &Client,
    worker_id: &str,
    name: &str,
    agent: &AgentConfig,
    host_id: Option<&str>,
    shutdown: &CancellationToken,
) -> Result<String, String> {
    let body = p::RegisterBody {
        host_id: host_id.map(str::to_owned),
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

/// What a run holds while it runs: a place in the agent's slots and the
/// token that cancels it.
struct Slot {
    cancels: Cancels,
    running: Arc<std::sync::atomic::AtomicUsize>,
    freed: Arc<Notify>,
    detached: Arc<std::sync::atomic::AtomicUsize>,
    tracker: TaskTracker,
}

impl Slot {
    /// Runs `run` (a new or an adopted run) in a slot: registers its cancel
    /// token, counts it while it runs, and frees the slot (waking the claim
    /// loop) when it ends. The token is not a child of the runner's
    /// shutdown: stopping the runner is not a cancel.
    fn start<F, Fut>(&self, run_id: String, run: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = Ending> + Send + 'static,
    {
        let token = CancellationToken::new();
        self.cancels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(run_id.clone(), token.clone());
        self.running
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let fut = run(token);
        let (cancels, running, freed, detached) = (
            self.cancels.clone(),
            self.running.clone(),
            self.freed.clone(),
            self.detached.clone(),
        );
        self.tracker.spawn(async move {
            if fut.await == Ending::Detached {
                detached.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            cancels
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&run_id);
            running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            freed.notify_one();
        });
    }
}

/// Polls for work and claims it while slots are free.
#[allow(clippy::too_many_arguments)]
async fn claim_loop(
    worker_id: String,
    ctx: Arc<RunContext>,
    adopted: Vec<execution::SavedRun>,
    detached: Arc<std::sync::atomic::AtomicUsize>,
    cancels: Cancels,
    mut wake: NewsReader,
    tracker: TaskTracker,
    poll: Duration,
    shutdown: CancellationToken,
) {
    let slots = ctx.agent.slots() as usize;
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let freed = Arc::new(Notify::new());
    let slot = Slot {
        cancels: cancels.clone(),
        running: running.clone(),
        freed: freed.clone(),
        detached,
        tracker,
    };
    for saved in adopted {
        let (ctx, stop) = (ctx.clone(), shutdown.clone());
        let run_id = saved.assignment.run_id.clone();
        slot.start(run_id, move |token| {
            execution::adopt(ctx, saved, token, stop)
        });
    }
    // Until a server refuses it (one from before claims could wait).
    let mut long_poll = true;
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        // What has been said so far is answered by the claim below; news
        // from now on wakes the wait after it.
        wake.mark_read();
        let mut claimed_any = false;
        let mut waited = false;
        let free = slots.saturating_sub(running.load(std::sync::atomic::Ordering::SeqCst));
        if free > 0 {
            // One call claims the best tasks for every free slot: no
            // list-then-claim race with other workers. It waits on the
            // server for work (a long poll): a new task is claimed the
            // moment it is committed, not when a paced event stream
            // passes the news on.
            let body = p::ClaimNextBody {
                worker_id: Some(worker_id.clone()),
                max: Some(free as i64),
                wait_ms: long_poll.then(|| (poll.as_millis() as i64).min(p::MAX_CLAIM_WAIT_MS)),
                // The agent's run token comes with its claim: one round
                // trip fewer between the claim and the agent's start.
                with_run_token: long_poll.then_some(true),
            };
            let asked = tokio::time::Instant::now();
            let claimed = tokio::select! {
                r = ctx.connector.claim_next(&body) => r,
                // Dropped mid-wait: a task granted in that instant is
                // not lost, its claim expires and it goes back.
                _ = shutdown.cancelled() => break,
            };
            match claimed {
                Err(e) if long_poll && refuses_wait(&e) => {
                    tracing::info!("the server cannot hold a claim open; polling instead");
                    long_poll = false;
                    continue;
                }
                Ok(v) => {
                    // An empty answer that came early (the server is
                    // stopping) is followed by the usual pause.
                    waited = body
                        .wait_ms
                        .is_some_and(|ms| asked.elapsed() >= Duration::from_millis(ms as u64) / 2);
                    for c in v.claims {
                        claimed_any = true;
                        let run_token = c.run_token;
                        let a = Assignment {
                            vtid: c.vtid,
                            run_id: c.run_id,
                            claim_token: c.claim_token,
                            title: c.title,
                            spec: c.spec,
                            conversation: c.conversation,
                            attempt: c.attempt,
                        };
                        let (ctx, stop) = (ctx.clone(), shutdown.clone());
                        slot.start(a.run_id.clone(), move |token| {
                            execute(ctx, a, run_token, token, stop)
                        });
                    }
                }
                // Includes max_above_capacity: a claim the server still
                // counts (its completion not yet delivered) frees up later.
                Err(e) => tracing::debug!(error = %e, "claiming tasks failed"),
            }
        }
        if claimed_any || waited {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = wake.next() => {}
            _ = freed.notified() => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
}

/// Whether a claim was refused for its `wait_ms` or `with_run_token` (a
/// server from before claims could wait knows neither field).
fn refuses_wait(e: &shepherd_client::ClientError) -> bool {
    matches!(e, shepherd_client::ClientError::Api { code, message, .. }
        if code == "invalid_body"
            && (message.contains("wait_ms") || message.contains("with_run_token")))
}

/// Heartbeats; the answer repeats any cancel request for our runs.
async fn heartbeat_loop(
    worker_id: String,
    ctx: Arc<RunContext>,
    cancels: Cancels,
    every: Duration,
    shutdown: CancellationToken,
) {
    // The first at once: claims carried over from a previous start are
    // renewed before anything else.
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
        }
        first = false;
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

/// A run whose agent did not survive (no shim, no exit status: the host
/// went down): its task goes back to the queue with reason `server_restart`
/// rather than ending failed or cancelled.
async fn requeue_lost(ctx: &RunContext, saved: &execution::SavedRun) {
    let a = &saved.assignment;
    let body = p::RequeueRun {
        claim_token: a.claim_token.clone(),
        reason: Some(p::REQUEUE_SERVER_RESTART.to_owned()),
    };
    match ctx.connector.requeue_run(&a.run_id, &body).await {
        Ok(_) => tracing::warn!(
            run_id = a.run_id,
            vtid = a.vtid,
            "the agent of this run did not survive the restart; its task is back in the queue"
        ),
        Err(e) => {
            tracing::warn!(run_id = a.run_id, error = %e, "could not put a lost run's task back in the queue")
        }
    }
    let run = shim::RunFiles::new(&ctx.data_dir, &a.run_id);
    let _ = std::fs::remove_dir_all(&run.dir);
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
    wake: WorkNews,
    start: Start,
    shutdown: CancellationToken,
) {
    let query = p::EventStreamQuery {
        types: Some("task.cancel_requested,task.dispatched,task.state_changed,worker.claim.released,worker.claim.expired".into()),
        ..Default::default()
    };
    let follow = c.follow(
        &query,
        start,
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
                _ => wake.tell(),
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
