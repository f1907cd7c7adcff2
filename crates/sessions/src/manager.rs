//! The node's sessions: which PTY worker has which process, restore on
//! attach (exactly once), restart, removal, and the end of every process at
//! shutdown. It knows no HTTP; it records what happens through the store.
//!
//! Each worker has a slot whose async mutex is held while a process is
//! started for it, so clients that attach at the same moment after a
//! restart cause one restore between them: the first starts the process,
//! the others find it running.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shepherd_core::Error;
use shepherd_store::{
    NewSession, NewSessionWorker, SessionRecord, SessionWorkerRecord, StartReason, Store,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::launch::{AgentSpec, Launcher};
use crate::scrollback::{Limits, Scrollback};
use crate::worker::{
    restart_marker, restart_mode_name, restore_marker, Attachment, ExitInfo, ExitNotice,
    LaunchSpec, Output, PtyProcess,
};

/// The node's session settings.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Scrollback segments live under `DATA_DIR/sessions/`.
    pub data_dir: PathBuf,
    /// This node: sessions it creates are hosted here.
    pub node_id: String,
    /// Where clients reach this node, told to those asking another node.
    pub node_address: Option<String>,
    /// When set, no session may live outside this directory.
    pub sessions_root: Option<PathBuf>,
    /// The program a terminal tab runs.
    pub shell: String,
    pub agents: BTreeMap<String, AgentSpec>,
    /// Between SIGHUP and SIGKILL when a PTY's processes are ended.
    pub kill_grace: Duration,
    pub limits: Limits,
    /// The umask terminals and agent tabs get (the one the server started
    /// with, before it made its own files private); `None`: the server's.
    pub child_umask: Option<u32>,
}

impl ManagerConfig {
    pub fn new(data_dir: PathBuf, node_id: String) -> Self {
        ManagerConfig {
            data_dir,
            node_id,
            node_address: None,
            sessions_root: None,
            shell: crate::launch::default_shell(),
            agents: BTreeMap::new(),
            kill_grace: Duration::from_secs(2),
            limits: Limits::default(),
            child_umask: None,
        }
    }
}

use shepherd_protocol::{GitDiff, RestartMode};

#[derive(Default)]
struct SlotState {
    output: Option<Arc<Output>>,
    process: Option<Arc<PtyProcess>>,
}

struct Slot {
    state: tokio::sync::Mutex<SlotState>,
}

/// The code of the error an impossible restore answers.
pub const RESTORE_FAILED: &str = "restore_failed";

pub struct SessionManager {
    store: Store,
    config: ManagerConfig,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    exits: mpsc::UnboundedSender<ExitNotice>,
    exits_rx: Mutex<Option<mpsc::UnboundedReceiver<ExitNotice>>>,
    shutting_down: AtomicBool,
}

/// A new session or tab id: `prefix` and 16 random hex digits.
pub fn new_id(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &id[..16])
}

impl SessionManager {
    pub fn new(store: Store, config: ManagerConfig) -> Arc<SessionManager> {
        let (tx, rx) = mpsc::unbounded_channel();
        Arc::new(SessionManager {
            store,
            config,
            slots: Mutex::new(HashMap::new()),
            exits: tx,
            exits_rx: Mutex::new(Some(rx)),
            shutting_down: AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &ManagerConfig {
        &self.config
    }

    /// Records processes that end by themselves and keeps the registry rows
    /// of live PTYs fresh, until `shutdown`; then ends every process.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let rx = self
            .exits_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(mut rx) = rx else { return };
        let mut touch = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(n) = rx.recv() => self.record_exit(n).await,
                _ = touch.tick() => {
                    let live = self.live_workers();
                    if !live.is_empty() {
                        if let Err(e) = self.store.touch_session_workers(live).await {
                            tracing::warn!(error = %e, "could not refresh PTY workers");
                        }
                    }
                }
            }
        }
        self.shutdown().await;
    }

    async fn record_exit(&self, n: ExitNotice) {
        if n.intentional || self.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let r = self
            .store
            .session_process_exited(
                &n.session_id,
                &n.worker_id,
                n.epoch,
                n.info.exit_code,
                n.info.signal.map(i64::from),
            )
            .await;
        if let Err(e) = r {
            if e.code != "session_not_found" && e.code != "worker_not_found" {
                tracing::warn!(error = %e, worker = n.worker_id, "could not record a PTY exit");
            }
        }
    }

    fn live_workers(&self) -> Vec<String> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .filter(|(_, s)| {
                s.state
                    .try_lock()
                    .map(|st| st.process.as_ref().is_some_and(|p| p.alive()))
                    .unwrap_or(true)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Ends every process this node runs (they are restored on attach after
    /// the next start). Exits are not recorded: they were not the processes' own.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let slots: Vec<Arc<Slot>> = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut set = tokio::task::JoinSet::new();
        let grace = self.config.kill_grace;
        for slot in slots {
            set.spawn(async move {
                let st = slot.state.lock().await;
                if let Some(p) = &st.process {
                    p.terminate(grace).await;
                }
            });
        }
        while set.join_next().await.is_some() {}
    }

    fn slot(&self, worker_id: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .entry(worker_id.to_owned())
            .or_insert_with(|| {
                Arc::new(Slot {
                    state: tokio::sync::Mutex::new(SlotState::default()),
                })
            })
            .clone()
    }

    fn scrollback_dir(&self, session_id: &str, worker_id: &str) -> PathBuf {
        self.config
            .data_dir
            .join("sessions")
            .join(session_id)
            .join(worker_id)
    }

    fn output_of(&self, st: &mut SlotState, w: &SessionWorkerRecord) -> Arc<Output> {
        st.output
            .get_or_insert_with(|| {
                let dir = self.scrollback_dir(&w.session_id, &w.id);
                let scroll = Scrollback::open(&dir, self.config.limits).unwrap_or_else(|e| {
                    tracing::warn!(dir = %dir.display(), error = %e, "scrollback kept in memory only");
                    Scrollback::in_memory(self.config.limits)
                });
                Output::new(scroll, w.epoch)
            })
            .clone()
    }

    /// Refuses unless this node hosts the session.
    pub fn check_node(&self, s: &SessionRecord) -> Result<(), Error> {
        if s.node_id == self.config.node_id {
            return Ok(());
        }
        Err(Error::conflict(
            "session_on_other_node",
            format!(
                "session {:?} is hosted by node {:?}{}; ask that node",
                s.id,
                s.node_id,
                s.node_address
                    .as_deref()
                    .map(|a| format!(" at {a}"))
                    .unwrap_or_default()
            ),
        ))
    }

    /// Whether the worker's process is running on this node now.
    pub fn alive(&self, worker_id: &str) -> bool {
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(worker_id)
            .cloned();
        slot.is_some_and(|s| {
            s.state
                .try_lock()
                .map(|st| st.process.as_ref().is_some_and(|p| p.alive()))
                // Locked: a process is being started or ended right now.
                .unwrap_or(false)
        })
    }

    // ----- sessions -----

    fn launcher(&self) -> Launcher<'_> {
        Launcher {
            shell: &self.config.shell,
            agents: &self.config.agents,
            sessions_root: self.config.sessions_root.as_deref(),
            umask: self.config.child_umask,
        }
    }

    /// Checks a location (see [`Launcher::check_location`]).
    pub fn check_location(&self, path: &str) -> Result<PathBuf, Error> {
        self.launcher().check_location(path)
    }

    pub async fn create_session(
        &self,
        name: Option<String>,
        location_path: &str,
    ) -> Result<SessionRecord, Error> {
        let canon = self.check_location(location_path)?;
        let name = name.unwrap_or_else(|| {
            canon
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "session".into())
        });
        self.store
            .create_session(NewSession {
                id: new_id("ses_"),
                name,
                location_path: canon.display().to_string(),
                node_id: self.config.node_id.clone(),
                node_address: self.config.node_address.clone(),
            })
            .await
    }

    /// Ends every process of the session, then deletes it.
    pub async fn delete_session(&self, id: &str) -> Result<SessionRecord, Error> {
        let s = self.store.session(id).await?;
        self.check_node(&s)?;
        for w in &s.workers {
            self.end_worker(&w.id).await;
        }
        let s = self.store.delete_session(id).await?;
        let _ = std::fs::remove_dir_all(self.config.data_dir.join("sessions").join(id));
        Ok(s)
    }

    // ----- workers -----

    fn launch(
        &self,
        s: &SessionRecord,
        kind: &str,
        agent_id: Option<&str>,
        continue_: bool,
    ) -> Result<LaunchSpec, Error> {
        self.launcher()
            .spec(&s.id, &s.location_path, kind, agent_id, continue_)
    }

    fn spawn(
        &self,
        spec: &LaunchSpec,
        session_id: &str,
        worker_id: &str,
        epoch: i64,
        output: Arc<Output>,
    ) -> Result<Arc<PtyProcess>, String> {
        let mut spec = spec.clone();
        spec.env
            .push(("SHEPHERD_WORKER_ID".to_owned(), worker_id.to_owned()));
        PtyProcess::spawn(
            &spec,
            (session_id.to_owned(), worker_id.to_owned()),
            epoch,
            output,
            self.exits.clone(),
            self.config.kill_grace,
        )
    }

    /// Adds a tab; a PTY tab's process starts at once.
    pub async fn add_worker(
        &self,
        session_id: &str,
        kind: &str,
        name: Option<String>,
        agent_id: Option<String>,
    ) -> Result<SessionWorkerRecord, Error> {
        let s = self.store.session(session_id).await?;
        self.check_node(&s)?;
        let name = crate::launch::tab_name(kind, name, agent_id.as_deref())?;
        let id = new_id("wk_");
        if kind == "git-diff" {
            return self
                .store
                .add_session_worker(
                    session_id,
                    NewSessionWorker {
                        id,
                        kind: kind.into(),
                        name,
                        agent_id: None,
                        pid: None,
                    },
                )
                .await;
        }
        let spec = self.launch(&s, kind, agent_id.as_deref(), false)?;
        let slot = self.slot(&id);
        let mut st = slot.state.lock().await;
        let dir = self.scrollback_dir(session_id, &id);
        let scroll = Scrollback::open(&dir, self.config.limits)
            .unwrap_or_else(|_| Scrollback::in_memory(self.config.limits));
        let output = Output::new(scroll, 1);
        let process = self
            .spawn(&spec, session_id, &id, 1, output.clone())
            .map_err(|e| Error::invalid("spawn_failed", e))?;
        let added = self
            .store
            .add_session_worker(
                session_id,
                NewSessionWorker {
                    id: id.clone(),
                    kind: kind.into(),
                    name,
                    agent_id,
                    pid: Some(process.pid as i64),
                },
            )
            .await;
        match added {
            Ok(w) => {
                st.output = Some(output);
                st.process = Some(process);
                Ok(w)
            }
            Err(e) => {
                process.terminate(self.config.kill_grace).await;
                drop(st);
                self.forget(&id);
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    fn forget(&self, worker_id: &str) {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(worker_id);
    }

    async fn end_worker(&self, worker_id: &str) {
        let slot = self.slot(worker_id);
        let mut st = slot.state.lock().await;
        if let Some(p) = st.process.take() {
            p.terminate(self.config.kill_grace).await;
        }
        drop(st);
        self.forget(worker_id);
    }

    /// Ends the tab's processes and removes it.
    pub async fn remove_worker(
        &self,
        session_id: &str,
        worker_id: &str,
    ) -> Result<SessionWorkerRecord, Error> {
        let (s, _) = self.store.session_worker(session_id, worker_id).await?;
        self.check_node(&s)?;
        self.end_worker(worker_id).await;
        let w = self
            .store
            .remove_session_worker(session_id, worker_id)
            .await?;
        let _ = std::fs::remove_dir_all(self.scrollback_dir(session_id, worker_id));
        Ok(w)
    }

    /// Kills the tab's live process (if any) and starts a fresh one.
    pub async fn restart(
        &self,
        session_id: &str,
        worker_id: &str,
        mode: RestartMode,
    ) -> Result<SessionWorkerRecord, Error> {
        let (s, w) = self.store.session_worker(session_id, worker_id).await?;
        self.check_node(&s)?;
        let spec = self.launch(
            &s,
            &w.kind,
            w.agent_id.as_deref(),
            mode == RestartMode::Continue,
        )?;
        let slot = self.slot(worker_id);
        let mut st = slot.state.lock().await;
        if let Some(p) = st.process.take() {
            p.terminate(self.config.kill_grace).await;
        }
        let (_, w) = self.store.session_worker(session_id, worker_id).await?;
        let output = self.output_of(&mut st, &w);
        let mode_name = restart_mode_name(mode);
        let epoch = w.epoch + 1;
        output.begin_epoch(epoch, Some(&restart_marker(mode)));
        let process = self
            .spawn(&spec, session_id, worker_id, epoch, output)
            .map_err(|e| Error::invalid("spawn_failed", e))?;
        match self
            .store
            .session_process_started(
                session_id,
                worker_id,
                process.pid as i64,
                StartReason::Restarted,
                mode_name,
            )
            .await
        {
            Ok(w) => {
                st.process = Some(process);
                Ok(w)
            }
            Err(e) => {
                process.terminate(self.config.kill_grace).await;
                Err(e)
            }
        }
    }

    /// Attaches to a PTY tab, restoring its process first if it does not
    /// exist (and did not end by itself while this server was up). An
    /// impossible restore is recorded and answered with [`RESTORE_FAILED`].
    pub async fn attach(&self, session_id: &str, worker_id: &str) -> Result<Attachment, Error> {
        let (s, w) = self.store.session_worker(session_id, worker_id).await?;
        self.check_node(&s)?;
        if !w.is_pty() {
            return Err(Error::invalid(
                "not_a_terminal",
                format!("worker {worker_id:?} is a {} tab, not a terminal", w.kind),
            ));
        }
        let slot = self.slot(worker_id);
        let mut st = slot.state.lock().await;
        if let Some(p) = st.process.clone() {
            let output = self.output_of(&mut st, &w);
            if p.alive() || output.exit_info().is_some() {
                return Ok(Attachment {
                    output,
                    process: st.process.clone(),
                });
            }
        }
        // Read again under the lock: another attach may have just restored it.
        let (s, w) = self.store.session_worker(session_id, worker_id).await?;
        let output = self.output_of(&mut st, &w);
        if w.exited_at.is_some() {
            if output.exit_info().is_none() {
                output.exited(ExitInfo {
                    exit_code: w.exit_code,
                    signal: w.exit_signal.as_deref().and_then(|s| s.parse().ok()),
                });
            }
            return Ok(Attachment {
                output,
                process: None,
            });
        }
        if let Some(old) = w.pid {
            crate::reap::kill_leftovers(old as i32, worker_id, self.config.kill_grace).await;
        }
        let started = match self.launch(&s, &w.kind, w.agent_id.as_deref(), true) {
            Ok(spec) => {
                let epoch = w.epoch + 1;
                output.begin_epoch(epoch, Some(&restore_marker()));
                self.spawn(&spec, session_id, worker_id, epoch, output.clone())
            }
            Err(e) => Err(e.message),
        };
        let process = match started {
            Ok(p) => p,
            Err(reason) => {
                tracing::warn!(session = session_id, worker = worker_id, %reason, "restore failed");
                self.store
                    .session_restore_failed(session_id, worker_id, &reason)
                    .await?;
                return Err(Error::conflict(RESTORE_FAILED, reason));
            }
        };
        if let Err(e) = self
            .store
            .session_process_started(
                session_id,
                worker_id,
                process.pid as i64,
                StartReason::Restored,
                "continue",
            )
            .await
        {
            process.terminate(self.config.kill_grace).await;
            return Err(e);
        }
        st.process = Some(process);
        Ok(Attachment {
            output,
            process: st.process.clone(),
        })
    }

    /// `git diff` and `git status --porcelain` of a `git-diff` tab's location.
    pub async fn diff(&self, session_id: &str, worker_id: &str) -> Result<GitDiff, Error> {
        let (s, w) = self.store.session_worker(session_id, worker_id).await?;
        self.check_node(&s)?;
        if w.kind != "git-diff" {
            return Err(Error::invalid(
                "not_a_git_diff_worker",
                format!("worker {worker_id:?} is a {} tab", w.kind),
            ));
        }
        crate::git_tab::location_diff(&self.launcher(), &s.location_path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(args: &[&str]) -> AgentSpec {
        AgentSpec {
            interactive_command: vec!["claude".into()],
            continue_args: args.iter().map(|a| a.to_string()).collect(),
            env: Vec::new(),
        }
    }

    #[test]
    fn continue_args_fill_or_drop_the_agent_session_placeholder() {
        let resume = spec(&["--resume", "{agent_session_id}"]);
        assert_eq!(
            resume.continue_args_for(Some("abc-123")),
            vec!["--resume", "abc-123"]
        );
        // No id known: no half-filled `--resume`, no literal placeholder.
        assert!(resume.continue_args_for(None).is_empty());
        assert!(resume.continue_args_for(Some("")).is_empty());
        let plain = spec(&["--continue"]);
        assert_eq!(plain.continue_args_for(None), vec!["--continue"]);
        assert_eq!(plain.continue_args_for(Some("x")), vec!["--continue"]);
        // An id that would be an option of its own is never passed.
        assert!(resume.continue_args_for(Some("--evil=/x")).is_empty());
        assert!(resume.continue_args_for(Some("a b")).is_empty());
    }
}
