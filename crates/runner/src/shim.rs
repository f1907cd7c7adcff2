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

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
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
    /// The agent's command line.
    pub argv: Vec<String>,
    /// The agent's whole environment, when the shim was told it (a shim
    /// started in advance, see [`ShimJob`]); `None`: the shim's own.
    pub env: Option<Vec<(OsString, OsString)>>,
}

/// Runs the shim to its end; returns the process exit code. Synchronous on
/// purpose: it is one loop around one child, with no runtime to fail.
pub fn main(args: ShimArgs) -> i32 {
    let watched = leave_the_runner();
    supervise(args, &watched)
}

/// A shim started in advance ([`ShimJob`]): leaves the runner's session at
/// once, then waits on standard input for the run it is to supervise. An
/// input that ends with no run (its runner stopped) ends it quietly.
/// `parse` turns the job's arguments into the shim's (the command line's
/// parser, which lives with the rest of the command line).
pub fn stand_by(parse: impl FnOnce(Vec<OsString>) -> Result<ShimArgs, String>) -> i32 {
    use std::io::Read;
    let watched = leave_the_runner();
    let mut bytes = Vec::new();
    if std::io::stdin().lock().read_to_end(&mut bytes).is_err() || bytes.is_empty() {
        return 0;
    }
    let job = match ShimJob::decode(&bytes) {
        Ok(job) => job,
        Err(e) => {
            eprintln!("shim: {e}");
            return 2;
        }
    };
    let mut args = match parse(job.args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("shim: {e}");
            return 2;
        }
    };
    // What a shim started for this run has: no input, its messages in the
    // run's `shim.log`, the agent's working directory.
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(args.dir.join("shim.log"));
    let null = File::open("/dev/null");
    // SAFETY: dup2 onto the standard descriptors of this single-threaded
    // process; the sources are open files it owns.
    unsafe {
        use std::os::fd::AsRawFd;
        if let Ok(null) = &null {
            libc::dup2(null.as_raw_fd(), 0);
        }
        if let Ok(log) = &log {
            libc::dup2(log.as_raw_fd(), 2);
        }
    }
    if let Some(cwd) = &job.cwd {
        if let Err(e) = std::env::set_current_dir(cwd) {
            eprintln!("shim: cannot enter {}: {e}", cwd.display());
        }
    }
    args.env = Some(job.env);
    supervise(args, &watched)
}

/// Leaves the runner's session and sets the shim's signals up; returns the
/// signals its loop waits for.
fn leave_the_runner() -> libc::sigset_t {
    // SAFETY: setsid and signal take no pointers; the handlers only store
    // to an atomic or do nothing, which is async-signal-safe.
    unsafe {
        libc::setsid();
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        // A handler, not the default: a child's end must stay pending for
        // `wait_for_news`, never be discarded as an ignored signal.
        libc::signal(libc::SIGCHLD, on_child as *const () as libc::sighandler_t);
        // Handlers that do nothing rather than SIG_IGN: an exec resets a
        // handled signal to its default but keeps an ignored one ignored,
        // so the agent starts with the defaults without a pre_exec (which
        // would turn its posix_spawn into a fork).
        // (SIGPIPE too: Rust's start-up ignores it.)
        for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGPIPE] {
            libc::signal(sig, on_child as *const () as libc::sighandler_t);
        }
    }
    // From here on SIGTERM and SIGCHLD wait, blocked, until the loop asks
    // for them: one that arrives between two looks is never lost.
    let watched = watched_signals();
    // SAFETY: the set is initialised; the old mask is not wanted.
    unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &watched, std::ptr::null_mut());
    }
    watched
}

/// Starts the agent and stays with it to its end.
fn supervise(args: ShimArgs, watched: &libc::sigset_t) -> i32 {
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
    // Shepherd's settings (`shepherd_core::secrets::inherited_settings`)
    // already removed, then the agent's configured `env` and its run's
    // variables added. Removing them here again would undo what the
    // operator set for the agent on purpose. (The shim itself is not
    // dumpable, so other agents cannot read this environment out of it;
    // the agent's exec makes the agent dumpable again.)
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest)
        .stdin(stdin)
        .stdout(out)
        .stderr(err)
        .process_group(0);
    if let Some(env) = &args.env {
        cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    // The agent's umask and an empty signal mask, set around the spawn
    // rather than in a pre_exec: without one the spawn is a posix_spawn,
    // not a fork of the shim. The shim is one thread, so nothing else
    // creates a file meanwhile; a SIGTERM or SIGCHLD that comes in the gap
    // reaches its handler, which the loop reads (TERM) or does not need
    // (it looks at the child before it waits). The signals the shim
    // handles are reset to their defaults by the exec (`leave_the_runner`).
    let spawned = {
        let mut blocked: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: umask and sigprocmask with valid, initialised sets.
        unsafe {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, &mut blocked);
        }
        let own_umask = args
            .umask
            .map(|m| unsafe { libc::umask(m as libc::mode_t) });
        let spawned = cmd.spawn();
        // SAFETY: as above.
        unsafe {
            if let Some(mask) = own_umask {
                libc::umask(mask);
            }
            libc::sigprocmask(libc::SIG_SETMASK, &blocked, std::ptr::null_mut());
        }
        spawned
    };
    let mut child = match spawned {
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
        wait_for_news(watched, next.saturating_duration_since(now));
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

/// What a runner tells a shim it started in advance (`shepherd shim
/// --stand-by`) about the run it is to supervise: the arguments a shim
/// started for the run would have had, the agent's whole environment and
/// its working directory. Written once to the shim's standard input, then
/// closed.
///
/// Each item is a tag byte, its bytes, then a NUL: `a` an argument, `e` an
/// environment variable (`NAME=value`), `c` the working directory. None of
/// them can hold a NUL (the kernel takes them as C strings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShimJob {
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: Option<PathBuf>,
}

impl ShimJob {
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let mut put = |tag: u8, parts: &[&[u8]]| {
            out.push(tag);
            for p in parts {
                out.extend_from_slice(p);
            }
            out.push(0);
        };
        let nul = |b: &[u8]| b.contains(&0);
        for a in &self.args {
            if nul(a.as_bytes()) {
                return Err("an argument holds a NUL".into());
            }
            put(b'a', &[a.as_bytes()]);
        }
        for (k, v) in &self.env {
            let k = k.as_bytes();
            if k.is_empty() || k.contains(&b'=') || nul(k) || nul(v.as_bytes()) {
                return Err("an environment variable cannot be passed on".into());
            }
            put(b'e', &[k, b"=", v.as_bytes()]);
        }
        if let Some(c) = &self.cwd {
            if nul(c.as_os_str().as_bytes()) {
                return Err("the working directory holds a NUL".into());
            }
            put(b'c', &[c.as_os_str().as_bytes()]);
        }
        Ok(out)
    }

    pub fn decode(bytes: &[u8]) -> Result<ShimJob, String> {
        let body = bytes
            .strip_suffix(&[0])
            .ok_or("the run's description is cut short")?;
        let mut job = ShimJob::default();
        for item in body.split(|b| *b == 0) {
            let (tag, rest) = item.split_first().ok_or("an empty item")?;
            let text = OsString::from_vec(rest.to_vec());
            match tag {
                b'a' => job.args.push(text),
                b'e' => {
                    let at = rest
                        .iter()
                        .position(|b| *b == b'=')
                        .filter(|at| *at > 0)
                        .ok_or("an environment variable without a name")?;
                    job.env.push((
                        OsString::from_vec(rest[..at].to_vec()),
                        OsString::from_vec(rest[at + 1..].to_vec()),
                    ));
                }
                b'c' => job.cwd = Some(PathBuf::from(text)),
                other => return Err(format!("an unknown item {:?}", *other as char)),
            }
        }
        Ok(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_reads_back_as_written() {
        let job = ShimJob {
            args: vec![
                "--dir".into(),
                "/r/x".into(),
                "--".into(),
                "a=b c".into(),
                "".into(),
            ],
            env: vec![
                ("PATH".into(), "/bin:/usr/bin".into()),
                ("E".into(), "x=y".into()),
                ("EMPTY".into(), "".into()),
            ],
            cwd: Some("/w/é".into()),
        };
        let bytes = job.encode().unwrap();
        assert_eq!(ShimJob::decode(&bytes).unwrap(), job);
    }

    #[test]
    fn a_job_that_cannot_travel_is_refused_on_both_ends() {
        let bad_arg = ShimJob {
            args: vec![OsString::from_vec(b"a\0b".to_vec())],
            ..ShimJob::default()
        };
        assert!(bad_arg.encode().is_err());
        let bad_name = ShimJob {
            env: vec![("A=B".into(), "v".into())],
            ..ShimJob::default()
        };
        assert!(bad_name.encode().is_err());
        assert!(
            ShimJob::decode(b"a--dir").is_err(),
            "no final NUL: cut short"
        );
        assert!(ShimJob::decode(b"x1\0").is_err(), "unknown tag");
        assert!(ShimJob::decode(b"e=v\0").is_err(), "no name");
    }
}
