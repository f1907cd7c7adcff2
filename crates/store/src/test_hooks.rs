//! Hooks for tests, benchmarks and examples: they fix the store's clock,
//! make a unit of work fail or hold its transaction open, overwrite a
//! transcript, and read the writer's and the delivery connection's counters.
//! Built only with the `test-hooks` feature, which the dev-dependencies of
//! `shepherd-store` and `shepherd` turn on, so a server built for use has
//! none of them.

use shepherd_core::event::NewEvent;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::ops::claims;
use crate::sql::{self, Db};
use crate::{log, params, unit, Backend, Store};

impl Store {
    /// Tests only: fixes the clock every operation of this store (and its
    /// clones) reads at `at`, or gives it back to the system with `None`
    /// (the same as [`Clock::set`](crate::Clock::set) on the clock it was opened with).
    /// Nothing in the store waits on this clock; it only stamps and
    /// compares times, so moving it is how a test lets leases lapse.
    #[doc(hidden)]
    pub fn set_clock(&self, at: Option<Millis>) {
        self.inner.clock.set(at);
    }

    /// PostgreSQL only: whether this node has heard another node on the
    /// same database recently, and how many commit notifications it sent.
    #[doc(hidden)]
    pub fn peer_state(&self) -> Option<(bool, u64)> {
        match &self.inner.backend {
            Backend::Postgres(b) => Some((b.peers().present(), b.peers().notifies())),
            Backend::Sqlite(_) => None,
        }
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

    /// Appends `events` as deferred writes and then, in the same unit, reads
    /// the log's head before the unit ends, so that the events' answer is
    /// still unread when the read is sent. Tests use it with enough events
    /// that the answer comes in several chunks.
    #[doc(hidden)]
    pub async fn append_events_then_read(&self, events: Vec<NewEvent>) -> Result<i64, Error> {
        let now = self.now();
        self.write(move |db| {
            Box::pin(async move {
                for e in &events {
                    log::append_deferred(db, now, e);
                }
                sql::Db::query(db, "SELECT 1", params![]).await?;
                log::head(db).await
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

    /// Units of work that ran on a read their PostgreSQL writer prefetched
    /// for them (see `sql::Prefetch`); always 0 on SQLite.
    #[doc(hidden)]
    pub fn prefetch_hits(&self) -> u64 {
        match &self.inner.backend {
            Backend::Sqlite(_) => 0,
            Backend::Postgres(b) => b.prefetch_hits(),
        }
    }

    /// How the database runs claim-next's eligibility read for `worker_id`
    /// now, one line per plan line (see `ops::claims::explain_eligible`).
    /// Tests use it to check that a call reads about `limit` tasks.
    #[doc(hidden)]
    pub async fn explain_claim_next(
        &self,
        worker_id: &str,
        limit: i64,
    ) -> Result<Vec<String>, Error> {
        let (now, id) = (self.now(), worker_id.to_owned());
        self.write(move |db| {
            Box::pin(async move { claims::explain_eligible(db, now, &id, limit).await })
        })
        .await
    }

    /// Test and benchmark aid: overwrites a run's transcript blob.
    #[doc(hidden)]
    pub async fn overwrite_transcript(&self, run_id: &str, blob: Vec<u8>) -> Result<(), Error> {
        let id = run_id.to_owned();
        self.write(move |db| {
            Box::pin(async move {
                db.execute(
                    "INSERT INTO run_transcripts (run_id, blob) VALUES ($1, $2) \
                 ON CONFLICT (run_id) DO UPDATE SET blob = excluded.blob",
                    params![&id, blob],
                )
                .await?;
                db.execute(
                    "UPDATE runs SET has_transcript = 1 WHERE id = $1",
                    params![&id],
                )
                .await?;
                Ok(())
            })
        })
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
