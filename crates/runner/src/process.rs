//! Agent processes: each in its own process group, killed as a group.
//! Group records are what runners before the shim wrote: a runner that
//! finds any still ends those groups (agents now run under `shim`).

use std::path::{Path, PathBuf};

/// Sends `sig` to every process of group `pgid`. False if the group is gone.
pub fn signal_group(pgid: i32, sig: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid addresses a process group; no memory is involved.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Whether any process of the group still exists.
pub fn group_alive(pgid: i32) -> bool {
    signal_group(pgid, 0)
}

/// The start time of a process (field 22 of /proc/PID/stat), used to tell a
/// recorded process from an unrelated one that reused its pid.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Records of running process groups, one file per run.
#[derive(Debug, Clone)]
pub struct GroupRecords {
    dir: PathBuf,
}

impl GroupRecords {
    pub fn new(data_dir: &Path) -> std::io::Result<GroupRecords> {
        let dir = data_dir.join("runner").join("process-groups");
        std::fs::create_dir_all(&dir)?;
        Ok(GroupRecords { dir })
    }

    pub fn record(&self, run_id: &str, pgid: i32) {
        let line = format!("{pgid} {}\n", start_time(pgid).unwrap_or(0));
        if let Err(e) = std::fs::write(self.dir.join(run_id), line) {
            tracing::warn!(error = %e, run_id, "cannot record the process group");
        }
    }

    pub fn forget(&self, run_id: &str) {
        let _ = std::fs::remove_file(self.dir.join(run_id));
    }

    /// Kills every recorded group that is still alive (left by a runner that
    /// died) and forgets all records. Returns (run id, pgid) of those killed.
    pub fn reap_orphans(&self) -> Vec<(String, i32)> {
        let mut killed = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return killed;
        };
        for entry in entries.flatten() {
            let run_id = entry.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut parts = text.split_whitespace();
            let pgid: i32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            let started: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            // The leader may be gone while others of its group live on; only
            // trust the record if the leader is absent or is the same process.
            let same = match start_time(pgid) {
                Some(t) => started == 0 || t == started,
                None => true,
            };
            if pgid > 1 && same && group_alive(pgid) {
                signal_group(pgid, libc::SIGKILL);
                tracing::warn!(
                    run_id,
                    pgid,
                    "killed an agent process group left behind by a runner that died"
                );
                killed.push((run_id.clone(), pgid));
            }
            let _ = std::fs::remove_file(entry.path());
        }
        killed
    }
}

/// The worker ids this runner registered, so that the next runner started
/// from the same data directory can release what a dead one held.
#[derive(Debug, Clone)]
pub struct WorkerRecords {
    dir: PathBuf,
}

impl WorkerRecords {
    pub fn new(data_dir: &Path) -> std::io::Result<WorkerRecords> {
        let dir = data_dir.join("runner").join("workers");
        std::fs::create_dir_all(&dir)?;
        Ok(WorkerRecords { dir })
    }

    pub fn record(&self, worker_id: &str) {
        if let Err(e) = std::fs::write(self.dir.join(worker_id), b"") {
            tracing::warn!(error = %e, worker_id, "cannot record the worker");
        }
    }

    pub fn forget(&self, worker_id: &str) {
        let _ = std::fs::remove_file(self.dir.join(worker_id));
    }

    /// Every recorded worker id, forgetting them.
    pub fn take_all(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut ids = Vec::new();
        for entry in entries.flatten() {
            ids.push(entry.file_name().to_string_lossy().into_owned());
            let _ = std::fs::remove_file(entry.path());
        }
        ids
    }
}

/// Wakes when one process ends, through a pidfd: a runner holding hundreds
/// of quiet agents waits on their shims instead of looking at each one
/// every second.
pub struct ProcessEnd {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl ProcessEnd {
    /// Watches `pid` if it is still the process that started at `started`
    /// (its start time, see [`start_time`]); `None` if it is gone, was
    /// replaced, or the kernel has no pidfds (the caller then looks itself).
    pub fn watch(pid: i32, started: Option<u64>) -> Option<ProcessEnd> {
        use std::os::fd::FromRawFd;
        if pid <= 1 {
            return None;
        }
        // SAFETY: pidfd_open takes a pid and flags, no memory.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, libc::PIDFD_NONBLOCK) };
        if raw < 0 {
            return None;
        }
        // SAFETY: the descriptor was just opened and is owned by no one else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw as i32) };
        // Checked after the open: the descriptor now names one process for
        // good, and this says it is the one meant, not a reuse of its pid.
        if started.is_some() && start_time(pid) != started {
            return None;
        }
        // SAFETY: the OwnedFd stays open and names the same pidfd for as
        // long as the AsyncFd holds it; nothing else has its number.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .ok()
        .map(|fd| ProcessEnd { fd })
    }

    /// Returns once the process has ended (a zombie counts as ended).
    pub async fn ended(&self) {
        // A pidfd turns readable for good when its process ends; the guard
        // is kept ready so every later call returns at once.
        let _ = self.fd.readable().await;
    }
}
