//! Wake-ups when a run's files change, so that an agent's output reaches
//! the server as soon as it is written instead of at the next poll.
//!
//! The shim writes the agent's output to files (the durable record a later
//! runner reads on from), so the followers of those files are told of each
//! write by inotify: one instance for the whole runner (instances are a
//! scarce per-user resource, 128 by default, while a runner may hold
//! hundreds of runs), one watch per run directory, shared by the run's two
//! followers. An event for the directory's `out`, `err`, `exit` or `agent` wakes
//! every task waiting on that directory; the lease file the runner touches
//! wakes nobody.
//!
//! Followers still look on a slow timer of their own (two seconds, doubling
//! while their looks find nothing, up to thirty): a wake-up lost to a full
//! inotify queue (which is then reported as an overflow and wakes everyone)
//! or a file system without inotify costs latency, never output.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use std::pin::Pin;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The files whose changes matter to a run's followers, and `agent`,
/// which the runner waits for before it follows the output.
const WATCHED_NAMES: [&str; 4] = ["out", "err", "exit", "agent"];

/// The runner's one inotify instance and the directories it watches.
pub struct FileEvents {
    watches: Mutex<Watches>,
    dirs: Mutex<HashMap<WatchDescriptor, Watched>>,
}

struct Watched {
    notify: Arc<Notify>,
    /// Followers holding a [`DirWatch`] on it; the watch goes with the last.
    users: usize,
}

impl FileEvents {
    /// Starts the runner's inotify instance and the task that hands its
    /// events out; `None` (and followers poll) where inotify cannot start.
    pub fn start(stop: CancellationToken) -> Option<Arc<FileEvents>> {
        let inotify = match Inotify::init() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "inotify unavailable: agents' output is read by polling");
                return None;
            }
        };
        let stream = match inotify.into_event_stream(vec![0u8; 64 * 1024]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "inotify unavailable: agents' output is read by polling");
                return None;
            }
        };
        let events = Arc::new(FileEvents {
            watches: Mutex::new(stream.watches()),
            dirs: Mutex::new(HashMap::new()),
        });
        let dispatch = events.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            loop {
                let event = tokio::select! {
                    e = stream.next() => e,
                    _ = stop.cancelled() => break,
                };
                match event {
                    Some(Ok(e)) => dispatch.deliver(&e.wd, e.mask, e.name.as_deref()),
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "inotify stopped: agents' output is read by polling");
                        break;
                    }
                    None => break,
                }
            }
            // Whoever waits now falls back on the timer.
            dispatch.wake_all();
        });
        Some(events)
    }

    /// Watches `dir` for the run files' changes; `None` if it cannot be
    /// watched (gone, or the watch limit is reached).
    pub fn watch(self: &Arc<Self>, dir: &Path) -> Option<DirWatch> {
        // A write to `out` or `err` is a MODIFY; `exit` arrives by rename
        // (MOVED_TO). Creations and closes would only add events (the lease
        // is renewed through a temporary file) that wake nobody.
        let mask = WatchMask::MODIFY | WatchMask::MOVED_TO;
        let wd = match lock(&self.watches).add(dir, mask) {
            Ok(wd) => wd,
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "cannot watch a run directory: polling it");
                return None;
            }
        };
        let mut dirs = lock(&self.dirs);
        let watched = dirs.entry(wd.clone()).or_insert_with(|| Watched {
            notify: Arc::new(Notify::new()),
            users: 0,
        });
        watched.users += 1;
        Some(DirWatch {
            notify: watched.notify.clone(),
            wd,
            events: self.clone(),
        })
    }

    fn deliver(&self, wd: &WatchDescriptor, mask: EventMask, name: Option<&OsStr>) {
        if mask.contains(EventMask::Q_OVERFLOW) {
            self.wake_all();
            return;
        }
        let mut dirs = lock(&self.dirs);
        if mask.contains(EventMask::IGNORED) {
            // The directory is gone (the kernel dropped the watch, and may
            // hand its number to a new one): wake its followers to find out.
            if let Some(w) = dirs.remove(wd) {
                w.notify.notify_waiters();
            }
            return;
        }
        let relevant = name
            .and_then(OsStr::to_str)
            .is_some_and(|n| WATCHED_NAMES.contains(&n));
        if let (true, Some(w)) = (relevant, dirs.get(wd)) {
            w.notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        for w in lock(&self.dirs).values() {
            w.notify.notify_waiters();
        }
    }
}

/// One follower's interest in a run directory; dropping it gives the watch
/// up once no follower of that directory is left.
pub struct DirWatch {
    notify: Arc<Notify>,
    wd: WatchDescriptor,
    events: Arc<FileEvents>,
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        let mut dirs = lock(&self.events.dirs);
        let last = match dirs.get_mut(&self.wd) {
            // The same watch, not a later one that reuses its number.
            Some(w) if Arc::ptr_eq(&w.notify, &self.notify) => {
                w.users -= 1;
                w.users == 0
            }
            _ => false,
        };
        if last {
            dirs.remove(&self.wd);
            drop(dirs);
            let _ = lock(&self.events.watches).remove(self.wd.clone());
        }
    }
}

/// The next change of a watched directory, asked for before the caller
/// looks at its files: a change between the look and the wait still
/// counts. Pin it, [`arm`] it, look, then await [`changed`]; without a
/// watch it never comes.
pub type NextChange<'a> = Option<Notified<'a>>;

/// The next change of `watch`'s directory, not yet armed.
pub fn next_change(watch: Option<&DirWatch>) -> NextChange<'_> {
    watch.map(|w| w.notify.notified())
}

/// Registers interest in the change, so none is missed from here on.
pub fn arm(next: Pin<&mut NextChange<'_>>) {
    if let Some(n) = next.as_pin_mut() {
        n.enable();
    }
}

/// Returns once the armed change has come; never without a watch.
pub async fn changed(next: Pin<&mut NextChange<'_>>) {
    match next.as_pin_mut() {
        Some(n) => n.await,
        None => std::future::pending().await,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_write_to_out_wakes_a_waiter_and_the_lease_does_not() {
        let dir = std::env::temp_dir().join(format!("shepherd-file-events-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stop = CancellationToken::new();
        let events = FileEvents::start(stop.clone()).expect("inotify");
        let watch = events.watch(&dir).expect("a watch");

        let woken = |name: &'static str| {
            let notify = watch.notify.clone();
            let path = dir.join(name);
            async move {
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                std::fs::write(&path, b"x\n").unwrap();
                tokio::time::timeout(Duration::from_millis(500), notified)
                    .await
                    .is_ok()
            }
        };
        assert!(!woken("lease").await, "the lease file wakes nobody");
        assert!(woken("out").await, "a write to out wakes its follower");
        assert!(woken("exit").await, "the exit record wakes its follower");

        // The last follower gone, the watch goes with it.
        drop(watch);
        assert!(lock(&events.dirs).is_empty());
        stop.cancel();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
