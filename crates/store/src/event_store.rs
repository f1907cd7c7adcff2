//! The store's event-log operations: appending, reading, tailing and
//! pruning the log, and the writer's statistics. (The hooks that make a
//! unit of work fail or hold its transaction open are in `test_hooks.rs`.)

use shepherd_core::event::{EventFilter, NewEvent};
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::any_db::AnyDb;
use crate::sql;
use crate::{log, writer_stats, Backend, EventPage, StatementCost, Store, Tail};

/// Sequence numbers of appended events: known inside the unit of work, or
/// only after it committed.
enum Seqs {
    Known(Vec<i64>),
    AfterCommit(sql::Appended),
}

impl Store {
    // ----- the event log -----

    /// Appends events in one unit of work; returns their sequence numbers.
    pub async fn append_events(&self, events: Vec<NewEvent>) -> Result<Vec<i64>, Error> {
        let now = self.now();
        let seqs = self
            .write(move |db| {
                Box::pin(async move {
                    if let Some(appended) = sql::Db::appended_later(db) {
                        // Pipelined: the sequence numbers are read once
                        // committed. An event row breaks no rule of the
                        // schema that this unit could have checked first
                        // (its `seq` is the database's own), so only the
                        // database itself can refuse it: the writer need
                        // not wait for it before the next unit.
                        sql::Db::trust_deferred_writes(db);
                        for e in &events {
                            log::append_deferred(db, now, e);
                        }
                        return Ok(Seqs::AfterCommit(appended));
                    }
                    let mut seqs = Vec::with_capacity(events.len());
                    for e in &events {
                        seqs.push(log::append(db, now, e).await?);
                    }
                    Ok(Seqs::Known(seqs))
                })
            })
            .await?;
        Ok(match seqs {
            Seqs::Known(seqs) => seqs,
            Seqs::AfterCommit(appended) => appended
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|e| e.seq)
                .collect(),
        })
    }

    /// The highest committed sequence number.
    pub async fn head(&self) -> Result<i64, Error> {
        self.read(move |db| Box::pin(log::head(db))).await
    }

    pub async fn pruned_through(&self) -> Result<i64, Error> {
        self.read(move |db| Box::pin(log::pruned_through(db))).await
    }

    /// Events after `after` matching `filter`, oldest first.
    pub async fn read_events(
        &self,
        after: i64,
        filter: &EventFilter,
        limit: i64,
    ) -> Result<EventPage, Error> {
        let filter = filter.clone();
        self.read(move |db| {
            Box::pin(async move { log::read_after(db, after, &filter, limit).await })
        })
        .await
    }

    /// [`Store::read_events`] for a live reader's backfill: on PostgreSQL on
    /// a small pool of its own, so that requests holding the request pool
    /// cannot hold up a subscriber being caught up from the log.
    pub(crate) async fn read_backfill_events(
        &self,
        after: i64,
        filter: &EventFilter,
        limit: i64,
    ) -> Result<EventPage, Error> {
        let filter = filter.clone();
        match &self.inner.backend {
            Backend::Postgres(b) => {
                b.read_backfill(move |db| {
                    Box::pin(async move {
                        log::read_after(&mut AnyDb::Postgres(db), after, &filter, limit).await
                    })
                })
                .await
            }
            Backend::Sqlite(_) => self.read_events(after, &filter, limit).await,
        }
    }

    /// Every event after `after`, oldest first, in one statement: the
    /// event pump's read. Safe without a head bound because events commit
    /// in `seq` order. On PostgreSQL it runs on the delivery connection, not
    /// the pool, so that busy requests cannot stall live events.
    pub(crate) async fn read_new_events(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<shepherd_core::event::Event>, Error> {
        match &self.inner.backend {
            Backend::Postgres(b) => {
                b.read_delivery(move |db| {
                    Box::pin(
                        async move { log::read_new(&mut AnyDb::Postgres(db), after, limit).await },
                    )
                })
                .await
            }
            Backend::Sqlite(_) => {
                self.read(move |db| Box::pin(log::read_new(db, after, limit)))
                    .await
            }
        }
    }

    /// The latest `limit` events matching `filter`, oldest first.
    pub async fn read_latest_events(
        &self,
        filter: &EventFilter,
        limit: i64,
    ) -> Result<EventPage, Error> {
        let filter = filter.clone();
        self.read(move |db| Box::pin(async move { log::read_latest(db, &filter, limit).await }))
            .await
    }

    /// Events at or after a time, oldest first.
    pub async fn read_events_since(
        &self,
        since: Millis,
        filter: &EventFilter,
        limit: i64,
    ) -> Result<EventPage, Error> {
        let filter = filter.clone();
        self.read(move |db| {
            Box::pin(async move { log::read_since_ts(db, since, &filter, limit).await })
        })
        .await
    }

    /// The last event this node has delivered to its live readers.
    pub fn published_through(&self) -> i64 {
        self.hub().last_published()
    }

    /// The writer's batch sizes and commit times so far.
    pub fn writer_stats(&self) -> writer_stats::WriterSnapshot {
        self.hub().writer_stats.snapshot()
    }

    /// Starts timing every statement the SQLite writer runs, per SQL text
    /// (see `store/src/statement_costs.rs`); a PostgreSQL store records
    /// nothing.
    pub fn start_statement_costs(&self) {
        self.hub().statement_costs.start()
    }

    /// Stops the timing [`Store::start_statement_costs`] started and
    /// returns what each statement cost, the costliest first.
    pub fn stop_statement_costs(&self) -> Vec<StatementCost> {
        self.hub().statement_costs.stop()
    }

    /// Wakes its holder whenever events are committed (on this node, or
    /// heard from other nodes), without reading them: for loops that look
    /// at the log again when it changed, such as webhook delivery.
    pub fn commits(&self) -> Commits {
        Commits(self.hub().tx.subscribe())
    }

    /// A live, gap-free reader starting after `cursor`.
    pub fn tail(&self, cursor: i64, filter: EventFilter) -> Tail {
        Tail::new(self.clone(), cursor, filter)
    }

    /// Deletes events older than `cutoff`, in chunks so writers never wait long.
    pub async fn prune_events(&self, cutoff: Millis) -> Result<u64, Error> {
        self.prune_events_with(cutoff, |_| {}).await
    }

    /// [`Store::prune_events`], telling `progress` the running total after
    /// each chunk (for a progress display on a large log).
    pub async fn prune_events_with(
        &self,
        cutoff: Millis,
        mut progress: impl FnMut(u64) + Send,
    ) -> Result<u64, Error> {
        let mut total = 0;
        loop {
            let n = self
                .write(move |db| Box::pin(log::prune_chunk(db, cutoff, 5000)))
                .await?;
            total += n;
            progress(total);
            if n == 0 {
                return Ok(total);
            }
        }
    }

    /// Records a free-form event (server notices such as the recovery report).
    pub async fn record_event(&self, e: NewEvent) -> Result<i64, Error> {
        let now = self.now();
        self.write(move |db| Box::pin(async move { log::append(db, now, &e).await }))
            .await
    }
}

/// See [`Store::commits`].
pub struct Commits(tokio::sync::broadcast::Receiver<std::sync::Arc<crate::hub::Live>>);

impl Commits {
    /// Waits until something was committed since the last call (several
    /// commits wake it once); false once the store is closed.
    pub async fn changed(&mut self) -> bool {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        match self.0.recv().await {
            Ok(_) | Err(RecvError::Lagged(_)) => {
                while !matches!(
                    self.0.try_recv(),
                    Err(TryRecvError::Empty | TryRecvError::Closed)
                ) {}
                true
            }
            Err(RecvError::Closed) => false,
        }
    }
}
