//! One PTY worker: its output hub (history, live fan-out, activity, exit)
//! and the process currently behind it.
//!
//! The [`Output`] outlives processes: a restore or restart starts a new
//! process (a new `epoch`) writing into the same history. Every attached
//! client receives the same pre-rendered frames from one broadcast channel:
//! the PTY reader never waits for a client, and a client that falls out of
//! the channel's bounded window is given a fresh `history` instead of the
//! frames it missed.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc, watch};

use crate::decoder::{decode_from_cut, Utf8Stream};
use crate::protocol::{ActivityState, ServerMessage};
use crate::scrollback::Scrollback;

/// Output within this long counts as activity.
pub const ACTIVE_FOR: Duration = Duration::from_secs(2);
/// Frames a client may fall behind before it is sent a fresh history.
pub const CLIENT_WINDOW: usize = 128;
/// The largest PTY read (and so the largest `output` frame).
const READ_CHUNK: usize = 64 * 1024;

/// A frame rendered once for every client.
#[derive(Debug, Clone)]
pub struct Frame {
    pub json: Arc<str>,
    /// The process ended; nothing follows until a new epoch.
    pub is_exit: bool,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub exit_code: Option<i64>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    pub fn message(&self) -> ServerMessage {
        ServerMessage::Exit {
            exit_code: self.exit_code,
            signal: self.signal,
        }
    }
}

struct OutState {
    scroll: Scrollback,
    decoder: Utf8Stream,
    epoch: i64,
    activity: ActivityState,
    exit: Option<ExitInfo>,
}

/// A worker's history and live frames.
pub struct Output {
    state: Mutex<OutState>,
    tx: broadcast::Sender<Frame>,
}

/// What a client gets when it attaches.
pub struct Subscription {
    pub history: ServerMessage,
    pub activity: ActivityState,
    pub exit: Option<ExitInfo>,
    pub frames: broadcast::Receiver<Frame>,
}

fn frame(msg: &ServerMessage, is_exit: bool) -> Frame {
    Frame {
        json: msg.to_json().into(),
        is_exit,
    }
}

impl Output {
    pub fn new(scroll: Scrollback, epoch: i64) -> Arc<Output> {
        let (tx, _) = broadcast::channel(CLIENT_WINDOW);
        Arc::new(Output {
            state: Mutex::new(OutState {
                scroll,
                decoder: Utf8Stream::new(),
                epoch,
                activity: ActivityState::Idle,
                exit: None,
            }),
            tx,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends process output and sends it to every client.
    pub fn push(&self, bytes: &[u8]) {
        let mut st = self.lock();
        st.scroll.push(bytes);
        let data = st.decoder.decode(bytes);
        let offset = st.scroll.end() - st.decoder.pending() as u64;
        if st.activity == ActivityState::Idle {
            st.activity = ActivityState::Active;
            let _ = self.tx.send(frame(
                &ServerMessage::Activity {
                    state: ActivityState::Active,
                },
                false,
            ));
        }
        if !data.is_empty() {
            let _ = self
                .tx
                .send(frame(&ServerMessage::Output { data, offset }, false));
        }
    }

    fn set_idle(&self) {
        let mut st = self.lock();
        if st.activity == ActivityState::Active {
            st.activity = ActivityState::Idle;
            let _ = self.tx.send(frame(
                &ServerMessage::Activity {
                    state: ActivityState::Idle,
                },
                false,
            ));
        }
    }

    /// Records the end of the current process and tells every client.
    pub fn exited(&self, info: ExitInfo) {
        let mut st = self.lock();
        st.exit = Some(info);
        let _ = self.tx.send(frame(&info.message(), true));
    }

    /// A new process begins: a new epoch, no exit yet, and an optional
    /// marker line written into the history (and so counted in offsets).
    pub fn begin_epoch(&self, epoch: i64, marker: Option<&str>) {
        {
            let mut st = self.lock();
            st.epoch = epoch;
            st.exit = None;
            st.decoder = Utf8Stream::new();
        }
        if let Some(m) = marker {
            self.push(m.as_bytes());
        }
    }

    pub fn epoch(&self) -> i64 {
        self.lock().epoch
    }

    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.lock().exit
    }

    /// The history to send and the live frames after it, taken under one
    /// lock so that nothing falls between them or arrives twice. A client
    /// that names the current `epoch` and an offset still in memory gets only
    /// what follows that offset.
    pub fn subscribe(&self, resume: Option<(u64, i64)>) -> Subscription {
        let st = self.lock();
        let end = st.scroll.end() - st.decoder.pending() as u64;
        let from = match resume {
            Some((offset, epoch))
                if epoch == st.epoch && offset >= st.scroll.start() && offset <= end =>
            {
                offset
            }
            _ => st.scroll.start(),
        };
        let data = decode_from_cut(&st.scroll.range(from, end));
        Subscription {
            history: ServerMessage::History {
                data,
                offset: end,
                epoch: st.epoch,
                start: from,
            },
            activity: st.activity,
            exit: st.exit,
            frames: self.tx.subscribe(),
        }
    }

    /// Clients attached right now.
    pub fn clients(&self) -> usize {
        self.tx.receiver_count()
    }
}

/// A client's handle on an attached worker.
pub struct Attachment {
    pub output: Arc<Output>,
    pub process: Option<Arc<PtyProcess>>,
}

impl Attachment {
    pub async fn input(&self, bytes: &[u8]) {
        if let Some(p) = self.process.as_ref().filter(|p| p.alive()) {
            if let Err(e) = p.input(bytes).await {
                tracing::debug!(error = %e, "PTY input failed");
            }
        }
    }

    pub async fn resize(&self, cols: u16, rows: u16) {
        if let Some(p) = self.process.as_ref().filter(|p| p.alive()) {
            if let Err(e) = p.resize(cols, rows).await {
                tracing::debug!(error = %e, "PTY resize failed");
            }
        }
    }
}

fn now_rfc3339() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    shepherd_core::time::to_rfc3339(ms)
}

/// The line written into a tab's history when a process is restored.
pub fn restore_marker() -> String {
    format!(
        "\r\n\x1b[2m[shepherd] session restored at {}; this is a new process\x1b[0m\r\n",
        now_rfc3339()
    )
}

/// How a restart's mode is named in records and markers.
pub fn restart_mode_name(mode: shepherd_protocol::RestartMode) -> &'static str {
    match mode {
        shepherd_protocol::RestartMode::New => "new",
        shepherd_protocol::RestartMode::Continue => "continue",
    }
}

/// The line written into a tab's history when it is restarted.
pub fn restart_marker(mode: shepherd_protocol::RestartMode) -> String {
    let name = restart_mode_name(mode);
    format!(
        "\r\n\x1b[2m[shepherd] restarted ({name}) at {}\x1b[0m\r\n",
        now_rfc3339()
    )
}

/// What to run in the PTY.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: std::path::PathBuf,
    pub env: Vec<(String, String)>,
    pub cols: u16,
    pub rows: u16,
    /// The process's umask; `None`: the server's own.
    pub umask: Option<u32>,
}

/// Opens `dir` (the manager's check resolved it: a path without links) and
/// confirms that the descriptor is that very directory: a link put on its
/// path since the check is refused, not followed.
fn open_checked_dir(dir: &Path) -> Result<std::fs::File, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| {
            format!(
                "cannot open the session's location {}: {e}; nothing was started",
                dir.display()
            )
        })?;
    // Where the descriptor really is (Linux): a directory on the path
    // replaced by a link since the check shows here.
    if let Ok(actual) = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())) {
        if actual != dir {
            return Err(format!(
                "the session's location {} changed while a process was starting (it led to {}); nothing was started",
                dir.display(),
                actual.display()
            ));
        }
    }
    Ok(f)
}

/// Sent to the manager when a process ends.
#[derive(Debug, Clone)]
pub struct ExitNotice {
    pub session_id: String,
    pub worker_id: String,
    pub epoch: i64,
    pub info: ExitInfo,
    /// The server ended it (removal, restart, shutdown): not the process's own doing.
    pub intentional: bool,
}

/// The process behind a worker.
pub struct PtyProcess {
    pub pid: i32,
    pub epoch: i64,
    writer: tokio::sync::Mutex<pty_process::OwnedWritePty>,
    intentional: AtomicBool,
    done: watch::Receiver<bool>,
}

impl PtyProcess {
    /// Starts `spec` in a new PTY (the child leads a new session).
    pub fn spawn(
        spec: &LaunchSpec,
        ids: (String, String),
        epoch: i64,
        output: Arc<Output>,
        exits: mpsc::UnboundedSender<ExitNotice>,
        kill_grace: Duration,
    ) -> Result<Arc<PtyProcess>, String> {
        let (pty, pts) = pty_process::open().map_err(|e| format!("cannot open a PTY: {e}"))?;
        pty.resize(pty_process::Size::new(spec.rows, spec.cols))
            .map_err(|e| format!("cannot size the PTY: {e}"))?;
        let mut cmd = pty_process::Command::new(&spec.program)
            .args(&spec.args)
            .current_dir(&spec.cwd);
        // A terminal or agent tab inherits none of Shepherd's settings:
        // not its secrets (what it prints is kept in scrollback), nor the
        // ones that lead to its configuration and database. The spec's env
        // comes after: what the tab is told about itself, and an agent's
        // configured `env`, which may set one on purpose.
        let inherited = std::env::vars_os().map(|(name, _)| name);
        for name in shepherd_core::secrets::inherited_settings(inherited) {
            cmd = cmd.env_remove(name);
        }
        for (k, v) in &spec.env {
            cmd = cmd.env(k, v);
        }
        // The process starts in the directory the manager checked, not in
        // whatever its path leads to by the time the child runs: the
        // directory is opened now, confirmed to be the one checked, and the
        // child moves into it through the descriptor.
        let dir = open_checked_dir(&spec.cwd)?;
        let dir_fd = dir.as_raw_fd();
        let umask = spec.umask;
        // SAFETY: between fork and exec only fchdir(2) and umask(2), both
        // async-signal-safe; the descriptor stays open until after spawn.
        cmd = unsafe {
            cmd.pre_exec(move || {
                if libc::fchdir(dir_fd) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(mask) = umask {
                    libc::umask(mask as libc::mode_t);
                }
                Ok(())
            })
        };
        let mut child = cmd
            .spawn(pts)
            .map_err(|e| format!("cannot start {:?}: {e}", spec.program))?;
        drop(dir);
        let pid = child.id().map(|p| p as i32).unwrap_or(0);
        let (mut reader, writer) = pty.into_split();
        let (done_tx, done) = watch::channel(false);
        let process = Arc::new(PtyProcess {
            pid,
            epoch,
            writer: tokio::sync::Mutex::new(writer),
            intentional: AtomicBool::new(false),
            done,
        });
        let (reader_done_tx, mut reader_done) = watch::channel(false);
        let out = output.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; READ_CHUNK];
            let mut idle_at: Option<tokio::time::Instant> = None;
            loop {
                let idle = async {
                    match idle_at {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    r = reader.read(&mut buf) => match r {
                        Ok(0) | Err(_) => break, // EIO once every slave side is closed
                        Ok(n) => {
                            // Take what else is ready now into the same frame:
                            // fast output makes fewer, larger frames, and a
                            // keystroke's echo is not held back.
                            let mut filled = n;
                            while filled < buf.len() {
                                match reader.read(&mut buf[filled..]).now_or_never() {
                                    Some(Ok(m)) if m > 0 => filled += m,
                                    _ => break,
                                }
                            }
                            out.push(&buf[..filled]);
                            idle_at = Some(tokio::time::Instant::now() + ACTIVE_FOR);
                        }
                    },
                    _ = idle => {
                        out.set_idle();
                        idle_at = None;
                    }
                }
            }
            out.set_idle();
            let _ = reader_done_tx.send(true);
        });
        let p = process.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            // Background jobs of the session must not outlive its leader.
            crate::reap::kill_session(pid, kill_grace).await;
            // Let the last output reach the history before the exit frame.
            let _ = tokio::time::timeout(Duration::from_millis(500), reader_done.wait_for(|d| *d))
                .await;
            let info = match status {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    ExitInfo {
                        exit_code: s.code().map(i64::from),
                        signal: s.signal(),
                    }
                }
                Err(_) => ExitInfo {
                    exit_code: Some(1),
                    signal: None,
                },
            };
            output.exited(info);
            let _ = done_tx.send(true);
            let _ = exits.send(ExitNotice {
                session_id: ids.0,
                worker_id: ids.1,
                epoch,
                info,
                intentional: p.intentional.load(Ordering::SeqCst),
            });
        });
        Ok(process)
    }

    pub async fn input(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock().await;
        w.write_all(bytes).await?;
        w.flush().await
    }

    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), String> {
        let w = self.writer.lock().await;
        w.resize(pty_process::Size::new(rows, cols))
            .map_err(|e| e.to_string())
    }

    pub fn alive(&self) -> bool {
        !*self.done.borrow()
    }

    /// Ends every process of this PTY's session and waits until the exit
    /// has been handled.
    pub async fn terminate(&self, grace: Duration) {
        self.intentional.store(true, Ordering::SeqCst);
        crate::reap::kill_session(self.pid, grace).await;
        let mut done = self.done.clone();
        let _ = tokio::time::timeout(grace + Duration::from_secs(3), done.wait_for(|d| *d)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrollback::Limits;

    #[test]
    fn a_location_is_opened_only_as_the_directory_checked() {
        let root = std::env::temp_dir().join(format!("shepherd-cwd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let real = root.join("real");
        std::fs::create_dir_all(real.join("inner")).unwrap();
        let real = real.canonicalize().unwrap();
        std::os::unix::fs::symlink(&real, root.join("link")).unwrap();
        std::os::unix::fs::symlink(real.join("inner"), root.join("last")).unwrap();
        assert!(open_checked_dir(&real.join("inner")).is_ok());
        // A link as the last component is not followed.
        let e = open_checked_dir(&root.join("last")).unwrap_err();
        assert!(e.contains("nothing was started"), "{e}");
        // A link on the way is seen through the descriptor.
        let e = open_checked_dir(&root.join("link/inner")).unwrap_err();
        assert!(e.contains("changed while a process was starting"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_client_too_far_behind_loses_its_place_but_not_the_screen() {
        let out = Output::new(Scrollback::in_memory(Limits::default()), 1);
        let mut slow = out.subscribe(None).frames;
        let mut fast = out.subscribe(None).frames;
        for i in 0..CLIENT_WINDOW * 2 {
            out.push(format!("line {i}\r\n").as_bytes());
            // The fast client keeps up; the writer never waits for the slow one.
            while fast.try_recv().is_ok() {}
        }
        assert!(matches!(
            slow.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
        // What it is sent instead: a history holding everything, at the live offset.
        let fresh = out.subscribe(None);
        let ServerMessage::History { data, offset, .. } = fresh.history else {
            panic!("a history");
        };
        assert!(data.starts_with("line 0\r\n") && data.ends_with("line 255\r\n"));
        assert_eq!(offset as usize, data.len());
    }

    #[test]
    fn history_and_live_frames_neither_overlap_nor_leave_a_gap() {
        let out = Output::new(Scrollback::in_memory(Limits::default()), 3);
        out.push("héllo ".as_bytes());
        out.push(&"wörld".as_bytes()[..2]); // ends inside "ö"
        let mut sub = out.subscribe(None);
        let ServerMessage::History {
            data,
            offset,
            epoch,
            start,
        } = sub.history
        else {
            panic!("a history");
        };
        assert_eq!((data.as_str(), offset, epoch, start), ("héllo w", 8, 3, 0));
        out.push(&"wörld".as_bytes()[2..]);
        let mut live = String::new();
        while let Ok(f) = sub.frames.try_recv() {
            let v: serde_json::Value = serde_json::from_str(&f.json).unwrap();
            if v["type"] == "output" {
                live.push_str(v["data"].as_str().unwrap());
                assert_eq!(v["offset"], 13);
            }
        }
        assert_eq!(live, "örld");
        // Resuming at the history's offset gives nothing twice.
        // (`start` says it continues there.)
        let again = out.subscribe(Some((8, 3)));
        assert!(matches!(
            again.history,
            ServerMessage::History { ref data, start: 8, .. } if data == "örld"
        ));
        // A resume from another epoch gets the whole screen, from its start.
        let other = out.subscribe(Some((8, 2)));
        assert!(matches!(
            other.history,
            ServerMessage::History { ref data, start: 0, .. } if data == "héllo wörld"
        ));
    }
}
