//! The node's writer: group commit, and the lock that keeps the event log in
//! commit order.
//!
//! Ordering. A PostgreSQL sequence value is taken before commit, so a reader
//! tailing `WHERE seq > last` could skip an event whose transaction commits
//! after one with a higher number. Shepherd makes that impossible: every
//! write transaction first takes one transaction-scoped advisory lock
//! ([`EVENT_LOCK`]) and only then takes sequence values. The lock is held
//! until commit, so transactions that append events commit one after the
//! other, in the order of their sequence numbers, across all nodes. Once a
//! reader sees `seq = n`, every event below `n` is already visible.
//!
//! Serialising commits would be slow if every small change paid for its own
//! commit, so each node groups queued units of work into one transaction
//! (a savepoint each) exactly like the SQLite writer does. A unit that
//! finds the writer idle (nothing queued, its connection free) runs on its
//! caller's task instead of being handed to the writer task and back
//! ([`Writer`]); if that caller goes away part-way, the connection is rolled
//! back at once, so the unit commits nothing and the lock is released.
//!
//! The writer hands what it committed to the store (`CommitSink`), which
//! broadcasts it to this node's live readers; NOTIFY (at most one per
//! [`NOTIFY_INTERVAL`], carrying the node's id so that its own listener
//! ignores it, and only while other nodes are present: see `delivery`)
//! tells the other nodes, whose pumps then read the log.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use futures::future::BoxFuture;
use futures::FutureExt;
use shepherd_core::Error;
use tokio::sync::{mpsc, oneshot, Notify};

use super::connect::{map_err, pool_err};
use super::db::{
    begin_sql, prefetch_reads, send_simple, settle, Conn, LoneUnit, Opened, Pending, PgDb,
    Prefetched,
};
use super::delivery::Peers;
use super::Published;
use crate::sql::{Appended, Prefetch};

/// Advisory lock key that orders event-appending commits (see "Ordering"
/// above).
pub const EVENT_LOCK: i64 = 0x5348_4550_0001;

const MAX_BATCH: usize = 512;

type Finisher = Box<dyn FnOnce(Option<Error>) + Send>;
type JobFn = Box<dyn FnOnce(Result<PgDb, Error>) -> BoxFuture<'static, (bool, Finisher)> + Send>;

/// A unit of work queued for the writer, with the read it declared it
/// will make first, if any (see [`Prefetch`]).
pub(super) struct Job {
    run: JobFn,
    prefetch: Option<Prefetch>,
}

/// The node's writer: one connection, shared by the writer task and by
/// callers that find it idle.
///
/// A unit of work that arrives while the writer is idle (nothing queued,
/// connection free) runs on the caller's own task: the same hops as a query
/// on a plain connection, with no hand-over to the writer task and back.
/// Units that arrive while it is busy queue for the writer task, which runs
/// them together in one transaction (group commit), as before.
pub(super) struct Writer {
    pub(super) pool: Pool,
    pub(super) ctx: WriterContext,
    pub(super) slot: Arc<tokio::sync::Mutex<WriterSlot>>,
    /// Units sent to the writer task that it has not taken yet.
    pub(super) queued: std::sync::atomic::AtomicUsize,
    /// Tells the writer task that a NOTIFY is owed (see [`NOTIFY_INTERVAL`]).
    pub(super) owed_notify: Notify,
}

/// The writer's connection and what goes with it.
#[derive(Default)]
pub(super) struct WriterSlot {
    conn: Option<Conn>,
    last_notify: Option<tokio::time::Instant>,
    /// A commit was made without the NOTIFY other nodes are owed.
    owed: bool,
    /// A unit running on a caller's task was dropped before it finished:
    /// the connection may still be inside its transaction, holding the
    /// event lock. Whoever takes the slot next rolls it back first.
    dirty: bool,
}

impl WriterSlot {
    /// Ends whatever a dropped unit left open. Requests a dropped unit had
    /// already queued on the connection still run, in order, before this.
    async fn clean(&mut self) {
        if !self.dirty {
            return;
        }
        if let Some(client) = &self.conn {
            if let Err(e) = client.batch_execute("ROLLBACK").await {
                tracing::warn!(error = %map_err(e), "writer connection reset failed; replacing it");
                self.conn = None;
            }
        }
        // Only now: a caller dropped during the ROLLBACK leaves it dirty.
        self.dirty = false;
    }

    /// Sends the NOTIFY owed to other nodes, if any.
    async fn send_owed(&mut self, ctx: &WriterContext) {
        if !std::mem::take(&mut self.owed) {
            return;
        }
        self.last_notify = Some(tokio::time::Instant::now());
        if let Some(client) = &self.conn {
            if let Err(e) = client.batch_execute(&ctx.notify_sql()).await {
                // Other nodes still catch up by polling.
                tracing::warn!(error = %map_err(e), "NOTIFY failed");
            }
        }
    }
}

impl Writer {
    /// Runs `batch` as one transaction on the slot's connection (getting one
    /// from the pool if needed, and first rolling back whatever a dropped
    /// unit left open) and keeps the NOTIFY bookkeeping. Until it returns,
    /// the slot is marked dirty: if it is dropped part-way, whoever holds
    /// the slot next (or [`InlineRun`]'s task) rolls the connection back.
    pub(super) async fn run(&self, slot: &mut WriterSlot, batch: Vec<Job>) {
        slot.clean().await;
        slot.dirty = true;
        self.run_clean(slot, batch).await;
        slot.dirty = false;
        if slot.owed {
            // The writer task keeps the timer that sends it.
            self.owed_notify.notify_one();
        }
    }

    async fn run_clean(&self, slot: &mut WriterSlot, batch: Vec<Job>) {
        let client = match slot.conn.take() {
            Some(c) if !c.is_closed() => c,
            _ => match self.pool.get().await {
                Ok(c) => Conn::Pooled(Arc::new(c)),
                Err(e) => {
                    let err = pool_err(e);
                    for job in batch {
                        let (_, finish) = (job.run)(Err(err.clone())).await;
                        finish(None);
                    }
                    return;
                }
            },
        };
        slot.conn = Some(client.clone());
        let peers = self.ctx.peers.present();
        let notify = peers
            && slot
                .last_notify
                .is_none_or(|at| at.elapsed() >= NOTIFY_INTERVAL);
        let (units, started) = (batch.len(), std::time::Instant::now());
        let committed = run_batch(&client, batch, &self.ctx, notify).await;
        self.ctx.published.batch(units, started.elapsed());
        if committed && peers {
            if notify {
                slot.last_notify = Some(tokio::time::Instant::now());
            } else {
                slot.owed = true;
            }
        }
    }
}

/// The writer slot held by a caller running its own unit. If the caller's
/// future is dropped part-way, the slot stays marked dirty and a task is
/// spawned to roll the connection back at once, so that an idle node does
/// not sit on the event lock.
pub(super) struct InlineRun {
    pub(super) guard: Option<tokio::sync::OwnedMutexGuard<WriterSlot>>,
    pub(super) writer: Arc<Writer>,
}

impl Drop for InlineRun {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        if !guard.dirty {
            return;
        }
        let writer = self.writer.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                guard.clean().await;
                // Its COMMIT may have gone out before the caller left:
                // other nodes are owed a NOTIFY, which nobody sent.
                if writer.ctx.peers.present() {
                    guard.owed = true;
                    writer.owed_notify.notify_one();
                }
            });
        }
    }
}

/// What the writer needs besides its connection pool.
pub(super) struct WriterContext {
    pub(super) published: Published,
    /// The NOTIFY payload of this node's commits, so that its own listener
    /// can ignore them (the writer already handed those events over).
    pub(super) node: String,
    pub(super) channel: String,
    pub(super) peers: Arc<Peers>,
    /// Units that ran on a prefetched read instead of a round trip of
    /// their own (see [`Prefetch`]).
    pub(super) prefetch_hits: Arc<std::sync::atomic::AtomicU64>,
}

impl WriterContext {
    fn notify_sql(&self) -> String {
        self.peers
            .notifies
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("SELECT pg_notify('{}', '{}')", self.channel, self.node)
    }
}

/// Other nodes hear of this node's commits at most this late. Sending a
/// NOTIFY with every commit costs the database about a sixth of a small
/// commit's work (it wakes every listening session), so a commit made
/// within this interval of the last notification leaves one owed, which
/// the writer sends when the interval is up.
pub(super) const NOTIFY_INTERVAL: Duration = Duration::from_millis(5);

/// Wraps a unit of work as a writer job and the channel of its outcome.
pub(super) fn unit_job<T, F>(
    f: F,
    prefetch: Option<Prefetch>,
) -> (Job, oneshot::Receiver<Result<T, Error>>)
where
    T: Send + 'static,
    F: for<'a> FnOnce(&'a mut PgDb) -> BoxFuture<'a, Result<T, Error>> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let run: JobFn = Box::new(move |db: Result<PgDb, Error>| {
        Box::pin(async move {
            let result = match db {
                // Deferred writes belong to the unit: it succeeds only if they do.
                Ok(mut db) => {
                    let trace = db.trace();
                    match AssertUnwindSafe(f(&mut db)).catch_unwind().await {
                        Ok(Ok(v)) => db.end_unit().await.map(|_| v),
                        Ok(Err(e)) => Err(e),
                        // A bug in the unit. Caught here, it neither ends
                        // the writer task (every later write would find the
                        // store shut down) nor unwinds a caller that runs
                        // the writer inline with the connection mid-batch.
                        // The writer rolls back what the unit sent.
                        Err(_) => {
                            tracing::error!(
                                "a unit of work panicked; what it wrote is rolled back"
                            );
                            trace.panicked();
                            Err(crate::sql::unit_panicked())
                        }
                    }
                }
                Err(e) => Err(e),
            };
            let ok = result.is_ok();
            let finish: Finisher = Box::new(move |commit_error| {
                let _ = tx.send(match commit_error {
                    Some(e) => Err(e),
                    None => result,
                });
            });
            (ok, finish)
        })
    });
    (Job { run, prefetch }, rx)
}

/// Runs the units queued while the writer was busy, as many as are queued
/// in one transaction each time, and sends owed NOTIFYs on time.
pub(super) async fn writer_loop(writer: Arc<Writer>, mut rx: mpsc::UnboundedReceiver<Job>) {
    let take = |writer: &Writer| {
        writer
            .queued
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    };
    loop {
        let owed_at = {
            let slot = writer.slot.lock().await;
            match (slot.owed, slot.last_notify) {
                (true, Some(at)) => Some(at + NOTIFY_INTERVAL),
                (true, None) => Some(tokio::time::Instant::now()),
                _ => None,
            }
        };
        let next = tokio::select! {
            job = rx.recv() => job,
            _ = writer.owed_notify.notified() => continue,
            _ = tokio::time::sleep_until(owed_at.unwrap_or_else(tokio::time::Instant::now)), if owed_at.is_some() => {
                let mut slot = writer.slot.lock().await;
                slot.clean().await;
                slot.send_owed(&writer.ctx).await;
                continue;
            }
        };
        let Some(first) = next else { break };
        take(&writer);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => {
                    take(&writer);
                    batch.push(job)
                }
                Err(_) => break,
            }
        }
        writer.run(&mut *writer.slot.lock().await, batch).await;
    }
    let mut slot = writer.slot.lock().await;
    slot.clean().await;
    slot.send_owed(&writer.ctx).await;
    tracing::debug!("PostgreSQL writer stopped");
}

/// Runs one write transaction; true if it committed something. With
/// `notify`, the commit carries this node's NOTIFY.
async fn run_batch(client: &Conn, batch: Vec<Job>, ctx: &WriterContext, notify: bool) -> bool {
    // Transaction control is pipelined with the units' own statements: a
    // unit costs round trips only for its reads and its final flush.
    let mut control = Control::new(client);
    let single = batch.len() == 1;
    // A lone unit begins its own transaction, and may need none (see
    // `PgDb::end_unit`); a NOTIFY needs one to ride on.
    let lazy_begin = single && !notify;
    if !lazy_begin {
        control.send(begin_sql());
    }
    // A lone unit's answers, or those of the units that trust their writes.
    let lone: Arc<LoneUnit> = Arc::default();
    let mut finishers: Vec<(bool, Finisher, Appended)> = Vec::with_capacity(batch.len());
    let mut any_ok = false;
    // Savepoints released and not yet said so, sent in front of the next
    // message that goes out anyway (a unit's SAVEPOINT, or the COMMIT): a
    // unit that runs inside a savepoint not yet released is merged into
    // the transaction with it, which is what RELEASE does anyway. A unit's
    // savepoint is opened only when it writes without trusting its writes
    // (see `UnitTrace`). Each has its own name: if a trusted unit's write
    // fails, the statements after it fail too, and a later unit's ROLLBACK
    // TO then names a savepoint that never came to exist, so it cannot undo
    // the failure; the transaction stays aborted and commits nothing (see
    // [`Db::trust_deferred_writes`]).
    let mut ended = String::new();
    // The first failure that no savepoint could contain: nothing commits.
    let mut spread: Option<Error> = None;
    let mut prefetched = if single {
        Vec::new()
    } else {
        let declared: Vec<Option<&Prefetch>> = batch.iter().map(|j| j.prefetch.as_ref()).collect();
        prefetch_batch(client, &declared, &mut control, &mut ended).await
    }
    .into_iter();
    // Checked again as the units run: a unit may say it wrote more than
    // it declared ([`crate::sql::Db::wrote`]).
    let mut written = crate::sql::Written::default();
    for (i, job) in batch.into_iter().enumerate() {
        let mut db = PgDb::new(client.clone());
        if single {
            // Nothing to roll back to: its answers can wait for the COMMIT's.
            db.lone = Some(lone.clone());
            db.unbegun = lazy_begin;
        } else {
            db.shared = Some(lone.clone());
            db.savepoint = Some(format!("{ended}SAVEPOINT u{i}"));
        }
        let trace = db.trace();
        let rows = prefetched.next().flatten();
        if let (Some(rows), Some(p)) = (rows, &job.prefetch) {
            if written.admits(p) {
                db.prefetched = Some(Prefetched {
                    sql: p.sql.clone(),
                    params: p.params.clone(),
                    rows,
                    hits: ctx.prefetch_hits.clone(),
                });
            }
        }
        let appended = db.appended();
        let wrote = db.wrote_keys();
        let (ok, finish) = (job.run)(Ok(db)).await;
        written.record(
            job.prefetch.as_ref(),
            &wrote.lock().unwrap_or_else(|p| p.into_inner()),
        );
        if !single {
            if trace.has_savepoint() {
                // Its SAVEPOINT carried the releases owed until then.
                ended.clear();
                if ok {
                    ended.push_str(&format!("RELEASE u{i}; "));
                } else {
                    // Before the next unit's first statement.
                    control.send(format!("ROLLBACK TO u{i}; RELEASE u{i}"));
                }
            } else if !ok && trace.failure_spreads() && spread.is_none() {
                spread = Some(Error::unavailable(
                    crate::sql::DB_UNAVAILABLE,
                    "a unit of work sharing this transaction failed in a way that cannot be \
                     rolled back alone; nothing of the transaction was committed: try again",
                ));
            }
        }
        any_ok |= ok;
        finishers.push((ok, finish, appended));
    }
    let opened = if lazy_begin {
        lone.opened()
    } else {
        Opened::Transaction
    };
    if opened == Opened::Transaction {
        let end = if !any_ok || spread.is_some() {
            "ROLLBACK".to_owned()
        } else if notify {
            format!("{ended}{}; COMMIT", ctx.notify_sql())
        } else {
            format!("{ended}COMMIT")
        };
        control.send(end);
    }
    // The units' own writes first: if one failed, that is the error, and
    // the COMMIT behind it failed (or rolled back) only because of it.
    let pending = std::mem::take(&mut *lone.pending.lock().unwrap_or_else(|p| p.into_inner()));
    let unit_outcome = match (settle(pending, None).await, spread) {
        (Ok(()), Some(e)) => Err(e),
        (outcome, _) => outcome,
    };
    let outcome = settle(control.pending, control.error).await;
    match (unit_outcome, outcome) {
        (Ok(()), Ok(())) => {
            publish_and_finish(ctx, finishers);
            // A lone unit that sent nothing committed nothing.
            any_ok && opened != Opened::Nothing
        }
        (Err(err), _) => {
            // Even after a lone autocommit statement: whatever state the
            // connection was in, it leaves this batch outside a transaction.
            let _ = client.batch_execute("ROLLBACK").await;
            if !single {
                tracing::warn!(error = %err, "a unit's failure could not be rolled back alone (a trusted write failed, or a unit without a savepoint failed after writing); every unit in the batch is rolled back");
            }
            // A unit that failed on its own keeps its own error.
            for (ok, finish, _) in finishers {
                finish(ok.then(|| err.clone()));
            }
            false
        }
        (Ok(()), Err(err)) => {
            tracing::error!(error = %err, "write transaction failed; every unit in the batch is rolled back");
            let _ = client.batch_execute("ROLLBACK").await;
            for (ok, finish, _) in finishers {
                finish(if ok { Some(err.clone()) } else { None });
            }
            false
        }
    }
}

/// A batch's transaction control (BEGIN, savepoint releases, COMMIT): sent
/// without waiting, its answers settled once at the end; the first error
/// to send is kept for then.
struct Control<'a> {
    client: &'a Conn,
    pending: Vec<Pending>,
    error: Option<Error>,
}

impl<'a> Control<'a> {
    fn new(client: &'a Conn) -> Self {
        Control {
            client,
            pending: Vec::new(),
            error: None,
        }
    }

    fn send(&mut self, sql: String) {
        match send_simple(self.client, sql) {
            Ok(Some(f)) => self.pending.push(f),
            Ok(None) => {}
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }
}

/// The units' declared first reads, sent together (one round trip for all
/// of them) in a savepoint of their own: if one fails, the units read for
/// themselves and the transaction goes on. Leaves in `ended` the release
/// the next statement must carry.
async fn prefetch_batch(
    client: &Conn,
    declared: &[Option<&Prefetch>],
    control: &mut Control<'_>,
    ended: &mut String,
) -> Vec<Option<Vec<crate::sql::Row>>> {
    if declared.iter().all(Option::is_none) {
        return Vec::new();
    }
    let valid = Prefetch::still_valid(declared);
    let wanted: Vec<Option<&Prefetch>> = declared
        .iter()
        .zip(&valid)
        .map(|(p, ok)| p.filter(|_| *ok))
        .collect();
    if !wanted.iter().any(Option::is_some) {
        return Vec::new();
    }
    control.send("SAVEPOINT prefetch".to_owned());
    match prefetch_reads(client, &wanted).await {
        Ok(rows) => {
            *ended = "RELEASE prefetch; ".to_owned();
            rows
        }
        Err(e) => {
            tracing::debug!(error = %e, "prefetched reads failed; each unit reads for itself");
            *ended = "ROLLBACK TO prefetch; RELEASE prefetch; ".to_owned();
            Vec::new()
        }
    }
}

/// After a commit: live subscribers hear of the committed units' events
/// (in sequence order) before the units' callers get their answers.
fn publish_and_finish(ctx: &WriterContext, finishers: Vec<(bool, Finisher, Appended)>) {
    let mut events = Vec::new();
    for (ok, _, appended) in &finishers {
        if *ok {
            let appended = appended.lock().unwrap_or_else(|p| p.into_inner());
            events.extend(appended.iter().cloned());
        }
    }
    if !events.is_empty() {
        events.sort_unstable_by_key(|e| e.seq);
        ctx.published.committed(events);
    }
    for (_, finish, _) in finishers {
        finish(None);
    }
}
