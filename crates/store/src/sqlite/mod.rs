//! The embedded SQLite store: one file, WAL, one writer thread, a read pool.
//!
//! SQLite allows one writer at a time, and several pooled connections that
//! each begin a write end in "database is locked". So every write goes to a
//! single thread that owns the only write connection. It takes whatever units
//! of work are queued, runs them in one transaction (each that writes
//! without trusting its writes inside its own savepoint, so one failing unit
//! rolls back alone: see `db::UnitSavepoint`), commits once, and only then
//! answers the callers. Group commit is what makes many concurrent
//! appenders fast without splitting any change from its events.
//!
//! Durability: with `synchronous=NORMAL` (the default) a committed
//! transaction is in the WAL file before the caller hears "ok", so a
//! `kill -9` of the server loses nothing acknowledged; a power cut can lose
//! the last transactions not yet checkpointed. `synchronous=FULL`
//! (`SHEPHERD_SQLITE_SYNC=full`) fsyncs the WAL at every commit.
//!
//! `db` is the connection seen through the portable `Db` interface,
//! `migrate` the schema migrations applied at open.

pub mod backup;
mod checkpoints;
mod db;
mod migrate;
mod wal_appends;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use shepherd_core::event::Event;
use shepherd_core::Error;
use tokio::sync::{oneshot, Semaphore};

pub use db::SqliteDb;
use db::{map_err, UnitSavepoint};

use crate::sql::{CommitSink, DB_UNAVAILABLE};

const READERS: usize = 4;
/// Upper bound of units of work grouped into one commit.
const MAX_BATCH: usize = 512;

/// How hard SQLite tries to survive power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// fsync at checkpoints only: survives process crashes, not power loss.
    Normal,
    /// fsync the WAL at every commit.
    Full,
}

type Finisher = Box<dyn FnOnce(Option<Error>) + Send>;
/// A unit of work. It is handed the connection, or the reason it cannot run
/// (so that it can still answer its caller), and returns whether it succeeded
/// plus the callback that delivers its answer once the commit outcome is known.
type Job = Box<dyn FnOnce(Result<&mut SqliteDb, Error>) -> (bool, Finisher, Vec<Event>) + Send>;

/// Where the writer reports each commit (its events, in commit order).
pub(crate) type Published = Arc<dyn CommitSink>;

pub struct SqliteBackend {
    jobs: std::sync::mpsc::Sender<Vec<Job>>,
    readers: Arc<Mutex<Vec<SqliteDb>>>,
    permits: Arc<Semaphore>,
    path: std::path::PathBuf,
    sync: SyncMode,
}

fn closed() -> Error {
    Error::unavailable(DB_UNAVAILABLE, "the store is shut down")
}

/// Why a whole batch was rolled back, for each of its units that had
/// succeeded: nothing of the transaction was committed.
fn rolled_back(why: &str) -> Error {
    Error::unavailable(
        DB_UNAVAILABLE,
        format!("{why}; nothing of the transaction was committed: try again"),
    )
}

/// Turns off SQLite's memory statistics, process-wide, before its first
/// connection opens. They cost a global mutex on every allocation SQLite
/// makes, and Shepherd never reads them. (Called later, after SQLite has
/// initialised, the setting is refused and nothing changes.)
fn configure_sqlite() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a documented start-up option taking one int argument; it
        // changes nothing if SQLite is already initialised.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::os::raw::c_int,
            );
        }
    });
}

fn open_conn(path: &Path, read_only: bool, sync: SyncMode) -> Result<Connection, Error> {
    configure_sqlite();
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let cannot_open = |e: &dyn std::fmt::Display| {
        Error::unavailable(
            DB_UNAVAILABLE,
            format!("cannot open SQLite database {}: {e}", path.display()),
        )
    };
    let conn = if read_only {
        Connection::open_with_flags(path, flags)
    } else {
        // Connections that write hand each commit's WAL frames to the
        // kernel in one call (see `wal_appends`).
        wal_appends::register().map_err(|rc| cannot_open(&rusqlite::ffi::Error::new(rc)))?;
        Connection::open_with_flags_and_vfs(path, flags, wal_appends::NAME)
    }
    .map_err(|e| cannot_open(&e))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(map_err)?;
    let sync = match sync {
        SyncMode::Normal => "NORMAL",
        SyncMode::Full => "FULL",
    };
    if !read_only {
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(map_err)?;
    }
    conn.pragma_update(None, "synchronous", sync)
        .map_err(map_err)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(map_err)?;
    // Savepoint journals (one per grouped unit of work) stay in memory:
    // past 64 KiB SQLite would spill each one to a temporary file, and a
    // claim or a completion touches more pages than that.
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(map_err)?;
    if !read_only {
        // The writer's 32 MiB of page cache keeps the hot B-tree pages (the
        // right edges of the log's indexes, the queue) in memory instead of
        // re-reading them out of the WAL. Readers keep SQLite's default.
        conn.pragma_update(None, "cache_size", -32768)
            .map_err(map_err)?;
        // A row rewritten in place (a secret sealed where it was stored in
        // clear) leaves no old copy in its page's free space: SQLite zeroes
        // what it frees wherever that costs no extra write.
        conn.pragma_update(None, "secure_delete", "FAST")
            .map_err(map_err)?;
    }
    conn.set_prepared_statement_cache_capacity(128);
    Ok(conn)
}

impl SqliteBackend {
    /// Opens (creating if needed) the database file, applies migrations and
    /// starts the writer thread, which sends the events of every commit to
    /// `publish` (a single writer commits in `seq` order, so no read-back is needed).
    pub fn open(path: &Path, sync: SyncMode, publish: Published) -> Result<Self, Error> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Error::unavailable(
                        DB_UNAVAILABLE,
                        format!("cannot create {}: {e}", dir.display()),
                    )
                })?;
            }
        }
        let mut writer = open_conn(path, false, sync)?;
        migrate::migrate(&mut writer)?;
        let mut readers = Vec::new();
        for _ in 0..READERS {
            readers.push(SqliteDb::new(open_conn(path, true, sync)?));
        }
        // Checkpoints move WAL pages into the database file, on a thread of
        // their own: the writer's commits only say when one is due.
        let (writer_end, _) =
            checkpoints::start(open_conn(path, false, sync)?, checkpoints::Policy::DEFAULT)?;
        let (jobs, rx) = std::sync::mpsc::channel::<Vec<Job>>();
        std::thread::Builder::new()
            .name("shepherd-sqlite-writer".into())
            .spawn(move || {
                yield_to_request_threads();
                // The checkpoint thread stops when this thread ends.
                checkpoints::install_on_writer(&writer, writer_end);
                let db = SqliteDb::new(writer).timed_by(publish.clone());
                writer_loop(db, rx, publish)
            })
            .map_err(|e| Error::internal(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteBackend {
            jobs,
            readers: Arc::new(Mutex::new(readers)),
            permits: Arc::new(Semaphore::new(READERS)),
            path: path.to_owned(),
            sync,
        })
    }

    /// Copies the WAL into the database file and empties it, so that no
    /// page version older than the last commit stays in either file (after
    /// secrets stored in clear were sealed). Best effort: a reader that
    /// holds an old snapshot keeps the WAL as it is.
    pub async fn truncate_wal(&self) -> Result<(), Error> {
        let (path, sync) = (self.path.clone(), self.sync);
        tokio::task::spawn_blocking(move || {
            let conn = open_conn(&path, false, sync)?;
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .map_err(map_err)
        })
        .await
        .map_err(|e| Error::internal(format!("checkpoint task failed: {e}")))?
    }

    /// Runs `f` on the write connection, inside a transaction shared with
    /// other queued units of work, and returns once the commit is durable.
    pub async fn write<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteDb) -> Result<T, Error> + Send + 'static,
    {
        let (job, rx) = unit_job(f);
        self.jobs.send(vec![job]).map_err(|_| closed())?;
        // A queued unit is always run, even while the store closes; its
        // answer is lost only if the unit panicked, which rolled it back.
        rx.await.map_err(|_| crate::sql::unit_panicked())?
    }

    /// Runs every unit of `units`, in order, in one transaction: one that
    /// fails is rolled back alone (to its savepoint) and the others still
    /// commit, unless it trusted its writes and failed after making them,
    /// which rolls back all (see `db::UnitSavepoint`). Returns each unit's
    /// outcome, in order.
    pub async fn write_many<T, F>(&self, units: Vec<F>) -> Result<Vec<Result<T, Error>>, Error>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteDb) -> Result<T, Error> + Send + 'static,
    {
        let (jobs, answers): (Vec<Job>, Vec<_>) = units.into_iter().map(unit_job).unzip();
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        // One message: the writer takes the group whole into one batch.
        self.jobs.send(jobs).map_err(|_| closed())?;
        let mut out = Vec::with_capacity(answers.len());
        for rx in answers {
            out.push(rx.await.map_err(|_| crate::sql::unit_panicked())?);
        }
        Ok(out)
    }

    /// Runs `f` on a pooled read connection, inside one read transaction so
    /// that every statement sees the same snapshot.
    pub async fn read<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteDb) -> Result<T, Error> + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| closed())?;
        let readers = self.readers.clone();
        // The permit travels with the connection: a caller that gives up
        // (a client hung up) drops this future, but the blocking task runs
        // on with the connection, and only when it is back in the pool may
        // another read count on finding one there.
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut db = readers
                .lock()
                .map_err(|_| Error::internal("reader pool poisoned"))?
                .pop()
                .ok_or_else(|| Error::internal("reader pool empty"))?;
            let result = (|| {
                db.begin_unit(false);
                db.control("BEGIN").map_err(map_err)?;
                let r = f(&mut db);
                let end = db.control("COMMIT").map_err(map_err);
                let r = r?;
                end?;
                Ok(r)
            })();
            if let Ok(mut pool) = readers.lock() {
                pool.push(db);
            }
            result
        })
        .await
        .map_err(|e| Error::internal(format!("read task failed: {e}")))?
    }
}

/// Wraps a unit of work as a writer job and the channel of its outcome.
fn unit_job<T, F>(f: F) -> (Job, oneshot::Receiver<Result<T, Error>>)
where
    T: Send + 'static,
    F: FnOnce(&mut SqliteDb) -> Result<T, Error> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move |db: Result<&mut SqliteDb, Error>| {
        let (result, events) = match db {
            Ok(db) => {
                let r = f(db).and_then(|v| db.check().map(|_| v));
                (r, db.take_events())
            }
            Err(e) => (Err(e), Vec::new()),
        };
        let ok = result.is_ok();
        let finish: Finisher = Box::new(move |commit_error| {
            let _ = tx.send(match commit_error {
                Some(e) => Err(e),
                None => result,
            });
        });
        (ok, finish, if ok { events } else { Vec::new() })
    });
    (job, rx)
}

/// Marks the calling thread (the writer) `SCHED_BATCH`: it keeps its fair
/// share of CPU, but its wake-up no longer preempts a runtime thread in the
/// middle of serving live streams. A group commit loses nothing by starting
/// a moment later, while a stream preempted mid-write delays every event
/// queued behind it. Measured on 2 cores at 2,000 events/s to 1,000 SSE
/// subscribers, four alternating pairs: delivery p99 38-71 ms instead of
/// 63-107 ms, and claim+complete cycles/s unchanged at 1 and 16 workers.
#[cfg(target_os = "linux")]
fn yield_to_request_threads() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: changes only the calling thread's policy; `param` outlives
    // the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "writer thread stays SCHED_OTHER");
    }
}

#[cfg(not(target_os = "linux"))]
fn yield_to_request_threads() {}

fn writer_loop(mut db: SqliteDb, rx: std::sync::mpsc::Receiver<Vec<Job>>, publish: Published) {
    while let Some(mut batch) = next_job(&rx) {
        // A group sent together stays together, even past MAX_BATCH.
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(jobs) => batch.extend(jobs),
                Err(_) => break,
            }
        }
        let (units, started) = (batch.len(), std::time::Instant::now());
        run_batch(&mut db, batch, &publish);
        publish.batch(units, started.elapsed());
    }
    tracing::debug!("SQLite writer stopped");
}

/// The next unit of work, waiting asleep for it. (Spinning awake for the
/// next one saved a wake-up per commit but burned CPU the fan-out to live
/// subscribers needs on a small machine; measured, it bought no latency.)
fn next_job(rx: &std::sync::mpsc::Receiver<Vec<Job>>) -> Option<Vec<Job>> {
    rx.recv().ok()
}

fn run_batch(db: &mut SqliteDb, batch: Vec<Job>, publish: &Published) {
    if let Err(e) = db.control("BEGIN IMMEDIATE") {
        let err = map_err(e);
        tracing::error!(error = %err, "cannot begin a write transaction");
        for job in batch {
            let (_, finish, _) = job(Err(err.clone()));
            finish(None);
        }
        return;
    }
    let single = batch.len() == 1;
    let mut finishers = Vec::with_capacity(batch.len());
    let mut events = Vec::new();
    let mut any_ok = false;
    // The first failure that no savepoint could contain: nothing commits.
    let mut spread: Option<Error> = None;
    let mut jobs = batch.into_iter();
    for job in jobs.by_ref() {
        // Savepoints are opened by the unit itself, lazily (see `UnitSavepoint`).
        db.begin_unit(!single);
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Ok(&mut *db))));
        let Ok((ok, finish, unit_events)) = run else {
            // A bug in the unit. What it wrote cannot be told apart from
            // the rest, so nothing commits; its caller hears of it through
            // its answer, dropped with the unit (`sql::unit_panicked`). The writer
            // thread goes on serving.
            tracing::error!("a unit of work panicked; its whole transaction is rolled back");
            spread.get_or_insert_with(|| {
                rolled_back("a unit of work sharing this transaction failed unexpectedly")
            });
            break;
        };
        match db.savepoint {
            UnitSavepoint::Open => {
                let end = if ok {
                    db.control("RELEASE unit")
                } else {
                    db.control("ROLLBACK TO unit")
                        .and_then(|_| db.control("RELEASE unit"))
                };
                if let Err(e) = end {
                    spread.get_or_insert(map_err(e));
                }
            }
            UnitSavepoint::Bare if !ok => {
                spread.get_or_insert_with(|| {
                    rolled_back(
                        "a unit of work sharing this transaction failed after writing \
                         without a savepoint",
                    )
                });
            }
            _ => {}
        }
        any_ok |= ok;
        events.extend(unit_events);
        finishers.push((ok, finish));
        // Some failures (a full disk, an I/O error) make SQLite roll back
        // the whole transaction by itself. The units after it would then
        // run outside any transaction, each committing on its own: stop.
        if db.conn.is_autocommit() {
            spread.get_or_insert_with(|| {
                rolled_back("the database rolled the write transaction back by itself")
            });
            break;
        }
    }
    if let Some(err) = spread {
        tracing::warn!(error = %err, "every unit in the batch is rolled back");
        if !db.conn.is_autocommit() {
            if let Err(e) = db.control("ROLLBACK") {
                tracing::error!(error = %e, "rollback failed");
            }
        }
        // A unit that failed on its own keeps its own error.
        for (ok, finish) in finishers {
            finish(ok.then(|| err.clone()));
        }
        for job in jobs {
            let (_, finish, _) = job(Err(err.clone()));
            finish(None);
        }
        return;
    }
    let commit = if single && !any_ok {
        db.control("ROLLBACK").map_err(map_err)
    } else {
        db.control("COMMIT").map_err(map_err)
    };
    match commit {
        Ok(()) => {
            // Live subscribers hear of the commit before its callers do.
            if !events.is_empty() {
                publish.committed(events);
            }
            for (_, finish) in finishers {
                finish(None);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "commit failed; every unit in the batch is rolled back");
            let _ = db.conn.execute_batch("ROLLBACK");
            for (ok, finish) in finishers {
                finish(if ok { Some(e.clone()) } else { None });
            }
        }
    }
}
