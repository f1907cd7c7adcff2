//! The one test-support kit of the workspace: what the store's tests, the
//! server's end-to-end tests and the benchmarks would otherwise each write
//! for themselves.
//!
//! - names no other test run uses ([`unique`]), the PostgreSQL database
//!   tests use ([`pg_url`]), a directory removed at the end ([`TempDir`]);
//! - whether a process still runs ([`alive`]) and the CPU time it or one
//!   of its threads has used ([`cpu_secs_in`]);
//! - polling with a deadline instead of sleeping a fixed time
//!   ([`wait_for`]);
//! - the real `shepherd serve` as a child process, bound to port 0, with
//!   the address it chose read back from what it prints ([`Served`]):
//!   asking the system for a free port and handing it over races with
//!   every other process that binds one in between, so [`free_port`] is
//!   only for processes that must be told their port.

mod served;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use served::Served;

/// The PostgreSQL database tests create their schemas in
/// (`SHEPHERD_TEST_PG_URL`, default the local server's `test` database).
pub fn pg_url() -> String {
    std::env::var("SHEPHERD_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name no other test of any run uses: the time (which also tells how
/// old a leftover is), this process and a counter.
pub fn unique() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "{secs}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Which database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A directory removed with everything in it when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new, empty directory under the system's temporary directory.
    pub fn new(prefix: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", unique()));
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether process `pid` is running: a zombie (exited, not yet reaped)
/// counts as dead, which `/proc/PID/stat`'s state field tells.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// CPU seconds (user and system) that a `/proc/.../stat` file reports: a
/// process's (`/proc/PID/stat`, its threads that ended included) or one
/// thread's (`/proc/self/task/TID/stat`). 0 when the file cannot be read
/// (the process or thread has gone).
pub fn cpu_secs_in(stat_path: &std::path::Path) -> f64 {
    let Ok(text) = std::fs::read_to_string(stat_path) else {
        return 0.0;
    };
    // The command name, in parentheses, may itself hold spaces and ')'.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else {
        return 0.0;
    };
    // Counting from the state (field 3): utime and stime are fields 14 and 15.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 / hz as f64
}

/// A loopback port free a moment ago, for a process that must be told its
/// address before it starts (a PostgreSQL cluster; a cluster node whose
/// advertised URL its peers are given). Another process may take the port
/// in between, so a server that can bind port 0 and say where it listens
/// is started with [`Served`] instead.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Calls `f` until it returns `Some`, at most `within`; panics naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id() as i32;
        child.wait().expect("reap");
        assert!(!alive(pid));
    }

    #[test]
    fn unique_names_differ() {
        assert_ne!(unique(), unique());
    }

    #[test]
    fn cpu_time_grows_while_this_thread_computes_and_a_missing_file_reads_zero() {
        let me = std::path::PathBuf::from("/proc/thread-self/stat");
        let whole = std::path::Path::new("/proc/self/stat");
        let (start, process_start) = (cpu_secs_in(&me), cpu_secs_in(whole));
        let wall = Instant::now();
        let mut x = 1u64;
        // Busy until the kernel has charged 100 ms of CPU to this thread: a
        // wrong field (a start time, a page count) would not move like this.
        while cpu_secs_in(&me) < start + 0.1 {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            std::hint::black_box(x);
            assert!(
                wall.elapsed() < Duration::from_secs(30),
                "CPU time never grew"
            );
        }
        // The process's total counts it too (the kernel scales the two
        // sums separately, so they agree only to a few ticks).
        let grew = cpu_secs_in(whole) - process_start;
        assert!(grew >= 0.07, "the process's total grew only {grew} s");
        assert_eq!(
            cpu_secs_in(std::path::Path::new("/proc/no-such-process/stat")),
            0.0
        );
    }
}
