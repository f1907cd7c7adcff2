//! `shepherd shim`: the small supervisor that owns one agent process.
//!
//! A runner (the one inside `shepherd serve` included) is not a good parent
//! for an agent: when it stops, a graceful restart included, its children
//! would lose the one process that can learn their exit status. So each run
//! gets a shim, started in its own session, which starts the agent in its
//! own process group, gives it files rather than pipes for its output, waits
//! for it and writes its exit status next to that output. A runner, this one
//! or the next with the same data directory, reads those files.
//!
//! The shim also keeps a dead node from running work it no longer holds:
//! the runner writes the time into the run's lease file while it lives, and
//! a shim whose lease is older than its timeout (shorter than the server's
//! heartbeat timeout) ends its agent's group and exits, before the server
//! can hand the task to someone else.
//!
//! Files of a run directory (`<data_dir>/runner/runs/<run_id>/`):
//! `run.json` (what the runner needs to carry on), `stdin`, `out`, `err`,
//! `shim` (`pid starttime` of the shim), `agent` (the agent's pid, which is
//! its process group), `lease`, `exit` (written last, atomically),
//! `reader.json` (how far a runner that left had read), `steps.jsonl`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::process::{group_alive, signal_group, start_time};

/// How an agent ended, as the shim saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The exit code, if the agent exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The agent could not be started (why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The shim ended the agent because no runner renewed its lease.
    #[serde(default)]
    pub lease_expired: bool,
}

/// The files of one run's directory.
#[derive(Debug, Clone)]
pub struct RunFiles {
    pub dir: PathBuf,
}

impl RunFiles {
    pub fn root(data_dir: &Path) -> PathBuf {
        data_dir.join("runner").join("runs")
    }

    pub fn new(data_dir: &Path, run_id: &str) -> RunFiles {
        RunFiles {
            dir: Self::root(data_dir).join(run_id),
        }
    }

    pub fn at(dir: PathBuf) -> RunFiles {
        RunFiles { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The agent's exit, once the shim has written it.
    pub fn exit(&self) -> Option<ExitRecord> {
        let text = std::fs::read_to_string(self.path("exit")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The agent's process group, once the shim has started it.
    pub fn agent_pgid(&self) -> Option<i32> {
        std::fs::read_to_string(self.path("agent"))
            .ok()?
            .trim()
            .parse()
            .ok()
            .filter(|p: &i32| *p > 1)
    }

    /// The shim's pid, if the recorded process is alive and is the shim
    /// (same start time: a reused pid is not mistaken for it).
    pub fn live_shim(&self) -> Option<i32> {
        let (pid, started) = self.shim_record()?;
        if pid <= 1 {
            return None;
        }
        // A zombie (exited, not yet reaped by its old parent) is not alive.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let state = stat[stat.rfind(')')? + 2..].chars().next()?;
        (start_time(pid) == Some(started) && state != 'Z').then_some(pid)
    }

    /// The start time the shim recorded for itself, if the record names
    /// `pid` (a shim just spawned may not have written it yet).
    pub fn recorded_shim_start(&self, pid: i32) -> Option<u64> {
        self.shim_record()
            .and_then(|(recorded, started)| (recorded == pid).then_some(started))
    }

    /// What the shim wrote of itself: its pid and start time.
    fn shim_record(&self) -> Option<(i32, u64)> {
        let text = std::fs::read_to_string(self.path("shim")).ok()?;
        let mut parts = text.split_whitespace();
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }

    /// Renews the lease: a runner is alive and supervising this run.
    pub fn touch_lease(&self) {
        let _ = write_atomic(&self.path("lease"), now_ms().to_string().as_bytes());
    }

    fn lease_ms(&self) -> Option<u64> {
        std::fs::read_to_string(self.path("lease"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Writes a file so that readers see all of it or none of it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
    }
    std::fs::rename(tmp, path)
}

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

/// How the shim was asked to run.
#[derive(Debug, Clone)]
pub struct ShimArgs {
    pub dir: PathBuf,
    /// SIGTERM to SIGKILL, when the runner asks the agent to stop.
    pub grace: Duration,
    /// How old the lease may grow before the agent is ended.
    pub lease_timeout: Duration,
    /// The agent's umask; `None`: the shim's own. The shim's files (the
    /// agent's output) stay under the runner's private mask.
    pub umask: Option<u32>,
    pub argv: Vec<String>,
}

/// Runs the shim to its end; returns the process exit code. Synchronous on
/// purpose: it is one loop around one child, with no runtime to fail.
pub fn main(args: ShimArgs) -> i32 {
    // SAFETY: setsid and signal take no pointers; the handlers only store
    // to an atomic or do nothing, which is async-signal-safe.
    unsafe {
        libc::setsid();
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        // A handler, not the default: a child's end must stay pending for
        // `wait_for_news`, never be discarded as an ignored signal.
        libc::signal(libc::SIGCHLD, on_child as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
    // From here on SIGTERM and SIGCHLD wait, blocked, until the loop asks
    // for them: one that arrives between two looks is never lost.
    let watched = watched_signals();
    // SAFETY: the set is initialised; the old mask is not wanted.
    unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &watched, std::ptr::null_mut());
    }
    let run = RunFiles::at(args.dir.clone());
    let me = std::process::id() as i32;
    let started = start_time(me).unwrap_or(0);
    if let Err(e) = write_atomic(&run.path("shim"), format!("{me} {started}\n").as_bytes()) {
        eprintln!("shim: cannot record itself: {e}");
        return 1;
    }
    let record = |r: &ExitRecord| {
        let bytes = serde_json::to_vec(r).unwrap_or_default();
        if let Err(e) = write_atomic(&run.path("exit"), &bytes) {
            eprintln!("shim: cannot write the exit status: {e}");
        }
    };
    let Some((program, rest)) = args.argv.split_first() else {
        record(&ExitRecord {
            code: None,
            signal: None,
            error: Some("no command".into()),
            lease_expired: false,
        });
        return 1;
    };
    let open_out = |name: &str| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(run.path(name))
    };
    let (out, err) = match (open_out("out"), open_out("err")) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            record(&ExitRecord {
                code: None,
                signal: None,
                error: Some(format!("cannot open the output files: {e}")),
                lease_expired: false,
            });
            return 1;
        }
    };
    let stdin = match File::open(run.path("stdin")) {
        Ok(f) => Stdio::from(f),
        Err(_) => Stdio::null(),
    };
    // The environment passes on as the runner gave it to the shim:
    // Shepherd's secrets (`shepherd_core::secrets::SECRET_ENV`) already
    // removed, then the agent's configured `env` added. Removing them here
    // again would undo what the operator set for the agent on purpose.
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest)
        .stdin(stdin)
        .stdout(out)
        .stderr(err)
        .process_group(0);
    // SAFETY: only async-signal-safe calls between fork and exec: the agent
    // gets the default dispositions back, not the shim's, and its umask.
    let umask = args.umask;
    unsafe {
        cmd.pre_exec(move || {
            if let Some(mask) = umask {
                libc::umask(mask as libc::mode_t);
            }
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::signal(libc::SIGCHLD, libc::SIG_DFL);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            record(&ExitRecord {
                code: None,
                signal: None,
                error: Some(format!("cannot start {program:?}: {e}")),
                lease_expired: false,
            });
            return 1;
        }
    };
    let pgid = child.id() as i32;
    let _ = write_atomic(&run.path("agent"), format!("{pgid}\n").as_bytes());
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut lease_expired = false;
    // The lease is read when it would run out, not on a tick: a renewal
    // only pushes that moment later, so reading earlier could only find it
    // still good. An idle shim then wakes about once per lease timeout
    // (at most every LEASE_LOOK_MAX, should the wall clock jump), and
    // hundreds of them run at once on a busy host.
    let mut next_lease_look = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                use std::os::unix::process::ExitStatusExt;
                // Nothing of the group outlives the run.
                if group_alive(pgid) {
                    signal_group(pgid, libc::SIGKILL);
                }
                record(&ExitRecord {
                    code: status.code(),
                    signal: status.signal(),
                    error: None,
                    lease_expired,
                });
                return 0;
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("shim: waiting for the agent: {e}");
            }
        }
        let now = Instant::now();
        if TERM.swap(false, Ordering::SeqCst) && kill_at.is_none() {
            signal_group(pgid, libc::SIGTERM);
            kill_at = Some(now + args.grace);
        }
        if kill_at.is_none() && now >= next_lease_look {
            let lease_age = run
                .lease_ms()
                .map(|t| Duration::from_millis(now_ms().saturating_sub(t)));
            let left = lease_age.and_then(|age| args.lease_timeout.checked_sub(age));
            next_lease_look = now
                + left
                    .unwrap_or_default()
                    .clamp(Duration::from_millis(20), LEASE_LOOK_MAX);
            if lease_age.is_none_or(|age| age > args.lease_timeout) {
                eprintln!("shim: no runner renewed the lease in time; ending the agent");
                lease_expired = true;
                signal_group(pgid, libc::SIGTERM);
                kill_at = Some(now + args.grace.min(Duration::from_secs(2)));
            }
        }
        if let Some(at) = kill_at {
            if now >= at && !killed {
                signal_group(pgid, libc::SIGKILL);
                killed = true;
            }
        }
        let next = match kill_at {
            Some(at) if !killed => at,
            Some(_) => now + Duration::from_millis(500),
            None => next_lease_look,
        };
        wait_for_news(&watched, next.saturating_duration_since(now));
    }
}

/// The longest a shim goes without reading its lease.
const LEASE_LOOK_MAX: Duration = Duration::from_secs(30);

extern "C" fn on_child(_: libc::c_int) {}

/// SIGTERM (the runner asks the agent to stop) and SIGCHLD (the agent
/// ended): what the shim's loop waits for.
fn watched_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set before anything reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    }
}

/// Sleeps until a watched signal arrives or `at_most` passes, whichever is
/// first. An idle shim wakes only for its lease look (once per lease
/// timeout, at most [`LEASE_LOOK_MAX`] apart), not on a fixed short tick.
fn wait_for_news(watched: &libc::sigset_t, at_most: Duration) {
    let at_most = at_most.max(Duration::from_millis(1));
    let timeout = libc::timespec {
        tv_sec: at_most.as_secs() as libc::time_t,
        tv_nsec: at_most.subsec_nanos() as libc::c_long,
    };
    // SAFETY: both pointers are valid for the call; the info is not wanted.
    let got = unsafe { libc::sigtimedwait(watched, std::ptr::null_mut(), &timeout) };
    if got == libc::SIGTERM {
        TERM.store(true, Ordering::SeqCst);
    }
}
