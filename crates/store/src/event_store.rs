//! The store's event-log operations: appending, reading, tailing and
//! pruning the log, the writer's statistics, and the test hooks that make a
//! unit of work fail or hold its transaction open.

use shepherd_core::event::{EventFilter, NewEvent};
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::any_db::AnyDb;
use crate::sql::{self, Db};
use crate::{log, params, unit, writer_stats, Backend, EventPage, StatementCost, Store, Tail};

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

    /// Like [`Store::append_events`], but the unit of work stays open for
    /// `hold_ms` after appending (PostgreSQL only). Tests use it to make
    /// transactions commit out of sequence order, the case the event log's
    /// ordering guarantee exists for.
    #[doc(hidden)]
    pub async fn append_events_holding(
        &self,
        events: Vec<NewEvent>,
        hold_ms: i64,
    ) -> Result<Vec<i64>, Error> {
        let now = self.now();
        self.write(move |db| {
            Box::pin(async move {
                let mut seqs = Vec::with_capacity(events.len());
                for e in &events {
                    seqs.push(log::append(db, now, e).await?);
                }
                if hold_ms > 0 && db.dialect() == sql::Dialect::Postgres {
                    db.execute("SELECT pg_sleep($1::bigint / 1000.0)", params![hold_ms])
                        .await?;
                }
                Ok(seqs)
            })
        })
        .await
    }

    /// Reads the log's head in a read transaction that then stays open for
    /// `hold_ms`. Tests use it to cut a read short and check that its
    /// connection does not go back to the pool still inside that
    /// transaction, nor is counted free while it is still in use.
    #[doc(hidden)]
    pub async fn read_holding(&self, hold_ms: i64) -> Result<i64, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let head = log::head(db).await?;
                if db.dialect() == sql::Dialect::Postgres {
                    db.query("SELECT pg_sleep($1::bigint / 1000.0)", params![hold_ms])
                        .await?;
                } else {
                    // SQLite reads run on a blocking thread of their own.
                    std::thread::sleep(std::time::Duration::from_millis(hold_ms.max(0) as u64));
                }
                Ok(head)
            })
        })
        .await
    }

    /// Appends `events` in a unit of work whose last deferred write then
    /// fails (a duplicate key). Tests use it to check that a unit fails
    /// whole when a write it did not wait for fails, and that the node's
    /// writer carries on.
    #[doc(hidden)]
    pub async fn append_events_then_fail(&self, events: Vec<NewEvent>) -> Result<(), Error> {
        let now = self.now();
        self.write(move |db| {
            Box::pin(async move {
                for e in &events {
                    log::append_deferred(db, now, e);
                }
                for _ in 0..2 {
                    sql::Db::defer(
                        db,
                        "INSERT INTO meta (key, value) VALUES ('test.duplicate', '')",
                        params![],
                    );
                }
                Ok(())
            })
        })
        .await
    }

    /// Appends each group of `groups` as a unit of work of its own, all in
    /// one batch (one transaction on PostgreSQL; a single group is a lone
    /// write); unit `failing` fails as `how` says. Tests use it to check
    /// that whatever each unit is told matches what was committed.
    #[doc(hidden)]
    pub async fn append_groups_one_failing(
        &self,
        groups: Vec<Vec<NewEvent>>,
        failing: usize,
        how: TestFailure,
    ) -> Result<Vec<Result<(), Error>>, Error> {
        let now = self.now();
        let units: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(i, events)| {
                unit(move |db| {
                    Box::pin(async move {
                        let fails = i == failing;
                        if fails && how == TestFailure::Read {
                            // Both databases refuse it as it runs.
                            sql::Db::query(db, "SELECT abs(-9223372036854775807 - 1)", params![])
                                .await?;
                        }
                        if fails && how == TestFailure::Refusal {
                            sql::Db::query(db, "SELECT COUNT(*) FROM meta", params![]).await?;
                            return Err(Error::conflict("refused", "refused after reading"));
                        }
                        if fails && how == TestFailure::TrustedWrite {
                            sql::Db::trust_deferred_writes(db);
                        }
                        for e in &events {
                            log::append_deferred(db, now, e);
                        }
                        if fails && how == TestFailure::Panic {
                            sql::Db::flush(db).await?;
                            panic!("a unit of work panics after writing (test)");
                        }
                        if fails && matches!(how, TestFailure::Write | TestFailure::TrustedWrite) {
                            for _ in 0..2 {
                                sql::Db::defer(
                                    db,
                                    "INSERT INTO meta (key, value) VALUES ('test.duplicate', '')",
                                    params![],
                                );
                            }
                        }
                        Ok(())
                    })
                })
            })
            .collect::<Vec<_>>();
        if units.len() == 1 {
            // A lone group goes the way of every lone write: run by its
            // caller when the writer is idle, else queued for the writer.
            let unit = units.into_iter().next().expect("one unit");
            return Ok(vec![self.write(unit).await]);
        }
        self.write_many(units).await
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

/// How the failing unit of [`Store::append_groups_one_failing`] fails.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFailure {
    /// A deferred write the database refuses (a duplicate key).
    Write,
    /// The same, after the unit declared that it trusts its writes.
    TrustedWrite,
    /// A read the database refuses, before the unit writes anything.
    Read,
    /// The unit's own refusal after a read, before it writes anything.
    Refusal,
    /// A bug: the unit panics after writing its events.
    Panic,
}
