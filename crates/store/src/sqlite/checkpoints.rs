//! Checkpoints (copying the WAL's pages into the database file), kept
//! mostly off the writer thread.
//!
//! By default SQLite checkpoints inside the COMMIT that makes the WAL pass
//! `wal_autocheckpoint` frames, on the committing connection: for Shepherd
//! that is the one writer thread, which then copies every page written
//! since the last checkpoint and fsyncs the database file (the kernel's
//! write-back of all of it) while every queued unit of work waits. Profiled
//! under steady claim-and-complete load, that was a tenth of the writer's
//! time, on the thread all writes go through, with the other core idle.
//!
//! Only the writer can end a WAL, though. A checkpoint on another
//! connection copies frames while the writer appends new ones, so under
//! load it never finds the WAL fully copied at the moment the writer starts
//! a transaction, which is when SQLite starts the WAL over; the file would
//! grow without end. So the work is split:
//! - the writer's connection reports the WAL's length after each commit (a
//!   WAL hook, [`wal_grew`]); each time it passes another
//!   [`Policy::wake_every`] frames, the checkpoint thread is woken and
//!   copies what is there, on its own connection, beside the writer;
//! - at [`Policy::writer_checkpoints_at`] frames (SQLite's limit before)
//!   the writer checkpoints itself, as before, so that its next transaction
//!   starts the WAL over. By then the thread has copied, and fsynced, all
//!   but the last stretch, so the writer's share is small.
//!
//! The thread also checkpoints on a timer, which folds in the WAL of a
//! quiet stretch.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::hooks::Wal;
use rusqlite::Connection;
use shepherd_core::Error;

/// When checkpoints happen.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// The checkpoint thread is woken each time the WAL passes another
    /// multiple of this many frames (pages).
    pub wake_every: u32,
    /// WAL frames past which the writer checkpoints itself (and so starts
    /// the WAL over).
    pub writer_checkpoints_at: u32,
    /// The checkpoint thread's timer.
    pub every: Duration,
}

impl Policy {
    /// The WAL stays within 20,000 frames (80 MB with 4 KiB pages), as it
    /// did with SQLite's own checkpoints; the thread copies it in quarters.
    pub(crate) const DEFAULT: Policy = Policy {
        wake_every: 5_000,
        writer_checkpoints_at: 20_000,
        every: Duration::from_millis(500),
    };
}

/// What the writer and the checkpoint thread share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Checkpoints by the checkpoint thread, woken by a commit or its timer.
    pub by_thread: AtomicU64,
    /// Checkpoints by the writer itself, past `writer_checkpoints_at`.
    pub by_writer: AtomicU64,
    /// Held by whoever checkpoints. SQLite refuses a second checkpoint
    /// while one runs (and never waits in `PASSIVE` mode): without this,
    /// the thread, woken again and again, could keep the writer's own
    /// checkpoint (the one that ends the WAL) refused commit after commit.
    turn: std::sync::Mutex<()>,
}

impl Shared {
    fn turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the writer thread's WAL hook needs.
struct WriterSide {
    wake: SyncSender<()>,
    policy: Policy,
    counts: Arc<Shared>,
    /// The WAL's length at the last commit.
    frames: std::cell::Cell<u32>,
}

thread_local! {
    /// Set on the writer thread only: SQLite's WAL hook is a plain
    /// function, called on the thread that commits.
    static WRITER_SIDE: RefCell<Option<WriterSide>> = const { RefCell::new(None) };
}

/// The writer's end: hand it to [`install_on_writer`] on the writer thread.
pub(crate) struct WriterEnd {
    side: WriterSide,
}

/// Starts the checkpoint thread on `conn` (a read-write connection of its
/// own). It stops once the returned [`WriterEnd`] is gone: dropped, or
/// installed on the writer thread and that thread has ended.
pub(crate) fn start(conn: Connection, policy: Policy) -> Result<(WriterEnd, Arc<Shared>), Error> {
    // One pending wake-up is enough: a checkpoint covers the whole WAL.
    let (wake, woken) = std::sync::mpsc::sync_channel::<()>(1);
    let counts = Arc::new(Shared::default());
    let thread_counts = counts.clone();
    std::thread::Builder::new()
        .name("shepherd-sqlite-checkpoint".into())
        .spawn(move || checkpoint_loop(&conn, &woken, policy.every, &thread_counts))
        .map_err(|e| Error::internal(format!("cannot start the checkpoint thread: {e}")))?;
    let side = WriterSide {
        wake,
        policy,
        counts: counts.clone(),
        frames: std::cell::Cell::new(0),
    };
    Ok((WriterEnd { side }, counts))
}

fn checkpoint_loop(conn: &Connection, woken: &Receiver<()>, every: Duration, counts: &Shared) {
    // Woken by a commit, or timed out: either way, a checkpoint is due.
    while let Ok(()) | Err(RecvTimeoutError::Timeout) = woken.recv_timeout(every) {
        let _turn = counts.turn();
        match conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)") {
            Ok(()) => {
                counts.by_thread.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!(error = %e, "checkpoint skipped"),
        }
    }
}

/// Makes `conn` (the writer's connection, used on this thread only) report
/// its WAL's growth to the checkpoint thread instead of checkpointing in
/// its own commits. Replaces SQLite's `wal_autocheckpoint`.
pub(crate) fn install_on_writer(conn: &Connection, end: WriterEnd) {
    WRITER_SIDE.with(|s| *s.borrow_mut() = Some(end.side));
    conn.wal_hook(Some(wal_grew));
}

/// SQLite's WAL hook on the writer's connection: called after each commit
/// with the WAL's length in frames. Never fails the commit (it is already
/// durable); a checkpoint that cannot finish now is simply retried later.
fn wal_grew(wal: &Wal, frames: std::os::raw::c_int) -> rusqlite::Result<()> {
    let frames = u32::try_from(frames).unwrap_or(0);
    WRITER_SIDE.with(|s| {
        let side = s.borrow();
        let Some(side) = side.as_ref() else {
            return;
        };
        let before = side.frames.replace(frames);
        let every = side.policy.wake_every.max(1);
        if frames >= side.policy.writer_checkpoints_at {
            // Waits for a checkpoint of the thread to end: it leaves little
            // to copy. If this one fails anyway, the next commit tries again.
            let _turn = side.counts.turn();
            if wal.checkpoint().is_ok() {
                side.counts.by_writer.fetch_add(1, Ordering::Relaxed);
            }
        } else if frames / every > before / every {
            // Full: a wake-up is already pending. Disconnected: the store
            // is closing. Either way there is nothing to do.
            let _ = side.wake.try_send(());
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &std::path::Path) -> Connection {
        let c = Connection::open(path).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "synchronous", "NORMAL").unwrap();
        c
    }

    /// A database with one table, its checkpoint thread started with
    /// `policy`, and `body` run on a writer thread with the hook installed
    /// (as the store's writer thread runs). Returns the counts and the
    /// database's path (with the directory that keeps it).
    fn on_writer(
        policy: Policy,
        body: impl FnOnce(&Connection, &std::path::Path, &Shared) + Send + 'static,
    ) -> (Arc<Shared>, std::path::PathBuf, shepherd_testkit::TempDir) {
        let dir = shepherd_testkit::TempDir::new("checkpoints");
        let path = dir.0.join("c.db");
        let writer = open(&path);
        writer
            .execute_batch("CREATE TABLE t (a INTEGER PRIMARY KEY, b BLOB)")
            .unwrap();
        let (end, counts) = start(open(&path), policy).unwrap();
        let (shared, at) = (counts.clone(), path.clone());
        std::thread::spawn(move || {
            install_on_writer(&writer, end);
            body(&writer, &at, &shared);
        })
        .join()
        .unwrap();
        (counts, path, dir)
    }

    /// Commits one transaction that dirties about `pages` pages.
    fn write_pages(c: &Connection, pages: usize) {
        c.execute_batch("BEGIN").unwrap();
        for _ in 0..pages {
            c.execute("INSERT INTO t (b) VALUES (zeroblob(3500))", [])
                .unwrap();
        }
        c.execute_batch("COMMIT").unwrap();
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(
                std::time::Instant::now() < until,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A WAL frame: a 24-byte header and a page (SQLite's default 4 KiB).
    const FRAME_BYTES: u64 = 24 + 4096;

    /// The WAL file's length in frames: the most it ever held, since
    /// SQLite starts a WAL over by overwriting it, not by truncating it.
    fn frames_in_wal(path: &std::path::Path) -> u64 {
        let wal = path.with_extension("db-wal");
        std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0) / FRAME_BYTES
    }

    #[test]
    fn a_long_wal_wakes_the_checkpoint_thread_and_the_writer_never_checkpoints() {
        // The timer alone would not fire during the test.
        let policy = Policy {
            wake_every: 50,
            writer_checkpoints_at: 1_000_000,
            every: Duration::from_secs(3600),
        };
        on_writer(policy, |writer, path, counts| {
            // Below the mark: nobody checkpoints.
            write_pages(writer, 10);
            std::thread::sleep(Duration::from_millis(100));
            let quiet = counts.by_thread.load(Ordering::Relaxed);
            // Past it: the checkpoint thread does, the writer does not.
            write_pages(writer, 80);
            wait_for("a checkpoint by the thread", || {
                counts.by_thread.load(Ordering::Relaxed) > 0
            });
            assert_eq!(quiet, 0, "checkpointed below the mark");
            assert_eq!(counts.by_writer.load(Ordering::Relaxed), 0);
            // Everything was copied: the next commit starts the WAL over,
            // instead of growing it.
            let before = frames_in_wal(path);
            for _ in 0..5 {
                write_pages(writer, 10);
            }
            assert!(
                frames_in_wal(path) <= before,
                "the WAL grew from {before} frames to {}",
                frames_in_wal(path)
            );
        });
    }

    #[test]
    fn the_writer_checkpoints_itself_only_past_the_backstop() {
        let policy = Policy {
            wake_every: 1_000_000,
            writer_checkpoints_at: 40,
            every: Duration::from_secs(3600),
        };
        on_writer(policy, |writer, _, counts| {
            write_pages(writer, 10);
            assert_eq!(counts.by_writer.load(Ordering::Relaxed), 0);
            write_pages(writer, 60);
            assert_eq!(counts.by_writer.load(Ordering::Relaxed), 1);
            assert_eq!(counts.by_thread.load(Ordering::Relaxed), 0);
        });
    }

    #[test]
    fn under_steady_writes_the_wal_stays_within_the_writers_limit() {
        let policy = Policy {
            wake_every: 25,
            writer_checkpoints_at: 100,
            every: Duration::from_secs(3600),
        };
        // Back to back, as under load: the thread's checkpoints race the
        // writer's appends and cannot end the WAL themselves.
        let (counts, path, _dir) = on_writer(policy, |writer, _, _| {
            for _ in 0..300 {
                write_pages(writer, 5);
            }
        });
        assert!(counts.by_thread.load(Ordering::Relaxed) > 0);
        assert!(counts.by_writer.load(Ordering::Relaxed) > 0);
        // 1,500 pages were written; the file holds at most the writer's
        // limit and the commit that passed it.
        let frames = frames_in_wal(&path);
        assert!(frames <= 110, "the WAL grew to {frames} frames");
    }

    #[test]
    fn a_reader_on_an_old_snapshot_holds_the_wal_until_it_lets_go() {
        let policy = Policy {
            wake_every: 1_000_000,
            writer_checkpoints_at: 40,
            every: Duration::from_secs(3600),
        };
        on_writer(policy, |writer, path, counts| {
            // A slow read (a client paging through a long history) keeps
            // the snapshot it began with: no checkpoint may copy past it,
            // so the WAL cannot start over and outgrows the limit.
            let reader = open(path);
            reader.execute_batch("BEGIN").unwrap();
            let _: i64 = reader
                .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
                .unwrap();
            for _ in 0..30 {
                write_pages(writer, 5);
            }
            assert!(counts.by_writer.load(Ordering::Relaxed) > 0);
            let held = frames_in_wal(path);
            assert!(held > 100, "the WAL holds only {held} frames");
            // Once it lets go, the writer's next checkpoint ends the WAL:
            // as much again is written, and the file grows by at most the
            // one commit made before that checkpoint.
            reader.execute_batch("COMMIT").unwrap();
            for _ in 0..30 {
                write_pages(writer, 5);
            }
            let after = frames_in_wal(path);
            assert!(
                after <= held + 10,
                "the WAL kept growing: {held} -> {after} frames"
            );
        });
    }

    #[test]
    fn the_thread_stops_with_the_writer_end() {
        let dir = shepherd_testkit::TempDir::new("checkpoints");
        let path = dir.0.join("c.db");
        let _keep = open(&path);
        let policy = Policy {
            every: Duration::from_millis(10),
            ..Policy::DEFAULT
        };
        let (end, counts) = start(open(&path), policy).unwrap();
        wait_for("a timed checkpoint", || {
            counts.by_thread.load(Ordering::Relaxed) > 0
        });
        drop(end);
        // Stopped: the count settles.
        std::thread::sleep(Duration::from_millis(50));
        let settled = counts.by_thread.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(counts.by_thread.load(Ordering::Relaxed), settled);
    }
}
