//! The PTYs of a runner's host. The server keeps the records of every
//! session (which tabs there are, each one's epoch and last process) and
//! asks the host, over the host's link, to start, attach, restart and stop
//! them; the host holds the processes and each tab's scrollback on its own
//! disk, with the same offsets and epochs a server node's tabs have, so a
//! client resumes exactly where it was whichever side restarted.
//!
//! The host applies its own rules to whatever it is asked: a location must
//! be inside *its* sessions root, an agent must be one of *its* agents, and
//! the ids that name scrollback directories must be plain ids.
//!
//! Like the node's manager, each tab has a slot whose async mutex is held
//! while a process is started for it, so that two attaches at once (through
//! two server nodes, say) restore it once between them.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shepherd_core::Error;
use shepherd_protocol::{GitDiff, HostTab, LiveTab, RestartMode, TabRestore, TabStartReason};
use tokio::sync::mpsc;

use crate::launch::{AgentSpec, Launcher};
use crate::scrollback::{Limits, Scrollback};
use crate::worker::{
    restart_marker, restore_marker, Attachment, ExitInfo, ExitNotice, LaunchSpec, Output,
    PtyProcess,
};

/// A runner host's session settings.
#[derive(Debug, Clone)]
pub struct PtyHostConfig {
    /// Scrollback lives under `data_dir/sessions/`.
    pub data_dir: PathBuf,
    /// No session may live outside it; a host without one holds none.
    pub sessions_root: PathBuf,
    /// The program a terminal tab runs.
    pub shell: String,
    pub agents: BTreeMap<String, AgentSpec>,
    pub kill_grace: Duration,
    pub limits: Limits,
    pub child_umask: Option<u32>,
}

#[derive(Default)]
struct SlotState {
    output: Option<Arc<Output>>,
    process: Option<Arc<PtyProcess>>,
    /// Forgotten by a stop while someone waited for it: whoever gets it
    /// next takes a fresh slot instead (a process started in this one would
    /// be in no map, and nothing would ever end it).
    removed: bool,
}

struct Slot {
    session_id: String,
    state: Arc<tokio::sync::Mutex<SlotState>>,
}

/// The PTYs this host holds.
pub struct PtyHost {
    config: PtyHostConfig,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    exits: mpsc::UnboundedSender<ExitNotice>,
    shutting_down: AtomicBool,
}

/// An id the server sent, refused unless it is a plain id: ids name
/// directories here.
fn check_id(what: &str, code: &'static str, id: &str) -> Result<(), Error> {
    let plain = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        Ok(())
    } else {
        Err(Error::invalid(
            code,
            format!("{what} {id:?} is not a plain id"),
        ))
    }
}

impl PtyHost {
    /// The host, and where the exits of processes that ended by themselves
    /// arrive (to be told to the server).
    pub fn new(config: PtyHostConfig) -> (Arc<PtyHost>, mpsc::UnboundedReceiver<ExitNotice>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let host = Arc::new(PtyHost {
            config,
            slots: Mutex::new(HashMap::new()),
            exits: tx,
            shutting_down: AtomicBool::new(false),
        });
        (host, rx)
    }

    pub fn config(&self) -> &PtyHostConfig {
        &self.config
    }

    fn launcher(&self) -> Launcher<'_> {
        Launcher {
            shell: &self.config.shell,
            agents: &self.config.agents,
            sessions_root: Some(&self.config.sessions_root),
            umask: self.config.child_umask,
        }
    }

    /// Whether an exit is the process's own doing, worth recording.
    pub fn is_news(&self, n: &ExitNotice) -> bool {
        !n.intentional && !self.shutting_down.load(Ordering::SeqCst)
    }

    /// Checks a new session's location (see [`Launcher::check_location`]).
    pub fn check_location(&self, path: &str) -> Result<PathBuf, Error> {
        self.launcher().check_location(path)
    }

    /// The tab's slot, locked; never one a stop has forgotten.
    async fn locked_slot(
        &self,
        tab: &HostTab,
    ) -> Result<tokio::sync::OwnedMutexGuard<SlotState>, Error> {
        loop {
            let slot = self.slot(tab)?;
            let st = slot.state.clone().lock_owned().await;
            if !st.removed {
                return Ok(st);
            }
        }
    }

    fn slot(&self, tab: &HostTab) -> Result<Arc<Slot>, Error> {
        check_id("session", "invalid_session_id", &tab.session_id)?;
        check_id("worker", "invalid_worker_id", &tab.worker_id)?;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        Ok(slots
            .entry(tab.worker_id.clone())
            .or_insert_with(|| {
                Arc::new(Slot {
                    session_id: tab.session_id.clone(),
                    state: Arc::new(tokio::sync::Mutex::new(SlotState::default())),
                })
            })
            .clone())
    }

    fn scrollback_dir(&self, session_id: &str, worker_id: &str) -> PathBuf {
        self.config
            .data_dir
            .join("sessions")
            .join(session_id)
            .join(worker_id)
    }

    /// The tab's output, opened from its scrollback on disk when this host
    /// has not had it in memory yet (it restarted since).
    fn output_of(&self, st: &mut SlotState, tab: &HostTab, epoch: i64) -> Arc<Output> {
        st.output
            .get_or_insert_with(|| {
                let dir = self.scrollback_dir(&tab.session_id, &tab.worker_id);
                let scroll = Scrollback::open(&dir, self.config.limits).unwrap_or_else(|e| {
                    tracing::warn!(dir = %dir.display(), error = %e, "scrollback kept in memory only");
                    Scrollback::in_memory(self.config.limits)
                });
                Output::new(scroll, epoch)
            })
            .clone()
    }

    /// What the tab runs, checked by this host's rules.
    fn spec(&self, tab: &HostTab, continue_: bool) -> Result<LaunchSpec, Error> {
        self.launcher().spec(
            &tab.session_id,
            &tab.location,
            &tab.kind,
            tab.agent_id.as_deref(),
            continue_,
        )
    }

    fn spawn(
        &self,
        tab: &HostTab,
        mut spec: LaunchSpec,
        epoch: i64,
        output: Arc<Output>,
    ) -> Result<Arc<PtyProcess>, Error> {
        spec.env
            .push(("SHEPHERD_WORKER_ID".to_owned(), tab.worker_id.clone()));
        PtyProcess::spawn(
            &spec,
            (tab.session_id.clone(), tab.worker_id.clone()),
            epoch,
            output,
            self.exits.clone(),
            self.config.kill_grace,
        )
        .map_err(|e| Error::invalid("spawn_failed", e))
    }

    /// Starts a tab's process: a new tab's first, or a restart's (the old
    /// process ended first, a marker written into the history). Answers
    /// the new process's id.
    pub async fn start(
        &self,
        tab: &HostTab,
        epoch: i64,
        reason: TabStartReason,
    ) -> Result<i64, Error> {
        let continue_ = matches!(
            reason,
            TabStartReason::Restart {
                mode: RestartMode::Continue
            }
        );
        // The launch is checked before anything is ended.
        let spec = self.spec(tab, continue_)?;
        let mut st = self.locked_slot(tab).await?;
        if let Some(p) = st.process.take() {
            p.terminate(self.config.kill_grace).await;
        }
        let output = self.output_of(&mut st, tab, epoch);
        match reason {
            TabStartReason::New => output.begin_epoch(epoch, None),
            TabStartReason::Restart { mode } => {
                output.begin_epoch(epoch, Some(&restart_marker(mode)))
            }
        }
        let process = self.spawn(tab, spec, epoch, output)?;
        let pid = process.pid as i64;
        st.process = Some(process);
        Ok(pid)
    }

    /// Attaches to a tab. When this host has no process for it (it
    /// restarted since the last one), the records decide: a tab recorded as
    /// ended is shown ended; any other is restored (a marker, a new process
    /// with the agent's `continue_args`), and the new process's id is
    /// answered beside the attachment.
    pub async fn attach(
        &self,
        tab: &HostTab,
        restore: &TabRestore,
    ) -> Result<(Attachment, Option<i64>), Error> {
        let mut st = self.locked_slot(tab).await?;
        let recorded = restore.epoch - 1;
        let output = self.output_of(&mut st, tab, recorded);
        if let Some(p) = st.process.clone() {
            if p.alive() || output.exit_info().is_some() {
                return Ok((
                    Attachment {
                        output,
                        process: Some(p),
                    },
                    None,
                ));
            }
        }
        if let Some(exit) = restore.exited {
            if output.exit_info().is_none() {
                output.exited(ExitInfo {
                    exit_code: exit.exit_code,
                    signal: exit.signal,
                });
            }
            return Ok((
                Attachment {
                    output,
                    process: None,
                },
                None,
            ));
        }
        // Checked first: a restore that cannot start writes no marker.
        let spec = self.spec(tab, true)?;
        if let Some(old) = restore.last_pid {
            crate::reap::kill_leftovers(old as i32, &tab.worker_id, self.config.kill_grace).await;
        }
        output.begin_epoch(restore.epoch, Some(&restore_marker()));
        let process = self.spawn(tab, spec, restore.epoch, output.clone())?;
        let pid = process.pid as i64;
        st.process = Some(process.clone());
        Ok((
            Attachment {
                output,
                process: Some(process),
            },
            Some(pid),
        ))
    }

    /// Ends the processes of one tab, or of every tab of the session when
    /// `worker_id` is `None`; `forget` also deletes their scrollback.
    pub async fn stop(
        &self,
        session_id: &str,
        worker_id: Option<&str>,
        forget: bool,
    ) -> Result<(), Error> {
        check_id("session", "invalid_session_id", session_id)?;
        if let Some(w) = worker_id {
            check_id("worker", "invalid_worker_id", w)?;
        }
        let chosen: Vec<(String, Arc<Slot>)> = {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots
                .iter()
                .filter(|(id, s)| {
                    s.session_id == session_id && worker_id.is_none_or(|w| w == id.as_str())
                })
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect()
        };
        for (id, slot) in chosen {
            let mut st = slot.state.lock().await;
            if let Some(p) = st.process.take() {
                p.terminate(self.config.kill_grace).await;
            }
            if forget {
                st.removed = true;
                self.slots
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
            }
        }
        if forget {
            let dir = match worker_id {
                Some(w) => self.scrollback_dir(session_id, w),
                None => self.config.data_dir.join("sessions").join(session_id),
            };
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(())
    }

    /// A `git-diff` tab's diff of `location`, checked as a launch is.
    pub async fn diff(&self, location: &str) -> Result<GitDiff, Error> {
        crate::git_tab::location_diff(&self.launcher(), location).await
    }

    /// The tabs whose process runs now.
    pub fn live(&self) -> Vec<LiveTab> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .iter()
            .filter(|(_, s)| {
                s.state
                    .try_lock()
                    .map(|st| st.process.as_ref().is_some_and(|p| p.alive()))
                    .unwrap_or(true)
            })
            .map(|(id, s)| LiveTab {
                session_id: s.session_id.clone(),
                worker_id: id.clone(),
            })
            .collect()
    }

    /// Ends every process (they are restored on attach after the next
    /// start); their exits are not news.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let slots: Vec<Arc<Slot>> = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let grace = self.config.kill_grace;
        let mut set = tokio::task::JoinSet::new();
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ServerMessage;

    fn host(root: &std::path::Path) -> Arc<PtyHost> {
        let (h, _exits) = PtyHost::new(PtyHostConfig {
            data_dir: root.join("data"),
            sessions_root: root.join("work"),
            shell: "/bin/sh".into(),
            agents: BTreeMap::new(),
            kill_grace: Duration::from_millis(200),
            limits: Limits::default(),
            child_umask: None,
        });
        h
    }

    fn tab(root: &std::path::Path, worker: &str) -> HostTab {
        HostTab {
            session_id: "ses_1".into(),
            worker_id: worker.into(),
            kind: "terminal".into(),
            agent_id: None,
            location: root.join("work").display().to_string(),
        }
    }

    fn history(att: &Attachment) -> (String, i64) {
        match att.output.subscribe(None).history {
            ServerMessage::History { data, epoch, .. } => (data, epoch),
            _ => unreachable!(),
        }
    }

    #[tokio::test]
    async fn a_host_restores_a_tab_once_and_keeps_its_history() {
        let root = std::env::temp_dir().join(format!("shepherd-ptyhost-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("work")).unwrap();
        let root = root.canonicalize().unwrap();
        let t = tab(&root, "wk_1");
        let h = host(&root);
        let pid = h.start(&t, 1, TabStartReason::New).await.unwrap();
        assert!(pid > 0);
        let restore = TabRestore {
            epoch: 2,
            last_pid: Some(pid),
            exited: None,
        };
        let (att, restored) = h.attach(&t, &restore).await.unwrap();
        assert_eq!(restored, None, "a running tab is only attached");
        att.input(b"echo he''llo\n").await;
        let mut frames = att.output.subscribe(None).frames;
        while !history(&att).0.contains("hello") {
            let _ = frames.recv().await;
        }
        let live: Vec<String> = h.live().into_iter().map(|t| t.worker_id).collect();
        assert_eq!(live, vec!["wk_1".to_owned()]);
        h.shutdown().await;
        drop(att);
        // A new host on the same disk: the history comes back, once, with
        // a restore marker and a new process at the epoch the records say.
        let h2 = host(&root);
        let (att, restored) = h2.attach(&t, &restore).await.unwrap();
        assert!(restored.is_some());
        let (data, epoch) = history(&att);
        assert_eq!(epoch, 2);
        assert_eq!(data.matches("hello\r\n").count(), 1, "{data:?}");
        assert!(data.contains("session restored"), "{data:?}");
        // Attaching again restores nothing more.
        let (_, again) = h2.attach(&t, &restore).await.unwrap();
        assert_eq!(again, None);
        h2.shutdown().await;
        // A tab recorded as ended is shown ended, not started.
        let h3 = host(&root);
        let ended = TabRestore {
            epoch: 3,
            last_pid: None,
            exited: Some(shepherd_protocol::TabExit {
                exit_code: Some(0),
                signal: None,
            }),
        };
        let (att, restored) = h3.attach(&t, &ended).await.unwrap();
        assert!(restored.is_none() && att.process.is_none());
        assert!(att.output.exit_info().is_some());
        h3.stop("ses_1", None, true).await.unwrap();
        assert!(!root.join("data/sessions/ses_1").exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_host_refuses_what_its_own_rules_refuse() {
        let root = std::env::temp_dir().join(format!("shepherd-ptyrules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("work")).unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        let root = root.canonicalize().unwrap();
        let h = host(&root);
        let e = h
            .check_location(&root.join("elsewhere").display().to_string())
            .unwrap_err();
        assert_eq!(e.code, "outside_sessions_root");
        let mut t = tab(&root, "../../etc");
        let e = h.start(&t, 1, TabStartReason::New).await.unwrap_err();
        assert_eq!(e.code, "invalid_worker_id");
        t.worker_id = "wk_2".into();
        t.location = root.join("elsewhere").display().to_string();
        let e = h.start(&t, 1, TabStartReason::New).await.unwrap_err();
        assert_eq!(e.code, "outside_sessions_root");
        t.location = root.join("work").display().to_string();
        t.kind = "agent".into();
        t.agent_id = Some("claude".into());
        let e = h.start(&t, 1, TabStartReason::New).await.unwrap_err();
        assert_eq!(e.code, "agent_not_found");
        assert!(h.live().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }
}
