//! The one test-support kit of the workspace: what the store's tests, the
//! server's end-to-end tests and the benchmarks would otherwise each write
//! for themselves.
//!
//! - names no other test run uses ([`unique`]), the PostgreSQL database
//!   tests use ([`pg_url`]), a directory removed at the end ([`TempDir`]);
//! - whether a process still runs ([`alive`]);
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
}
