//! The PostgreSQL store: a connection pool for reads, one writer per node,
//! and `LISTEN/NOTIFY` so that every node hears about every commit.
//!
//! By job:
//! - `connect`: the URL, TLS (`tls`), the schema and the connection pool;
//! - `migrate`: schema migrations, one node at a time;
//! - `db`: [`PgDb`], a connection through the portable `Db` interface, with
//!   pipelined writes and the event insert;
//! - `writer`: the node's writer, group commit and the ordering lock that
//!   keeps the log in commit order across nodes;
//! - `delivery`: the LISTEN connection that wakes the event pump, and how
//!   nodes learn of each other (peers);
//! - `statistics`: analyses tables that outgrew their planner statistics,
//!   so that the writer's cached plans follow a new deployment's growth.
//!
//! This module ties them together ([`PgBackend`]) and runs reads: on a
//! pooled connection in a repeatable-read snapshot, or, for the event
//! pump, on the delivery connection. Live readers' backfills (a subscriber
//! caught up from the log) have a small pool of their own, so that request
//! load cannot starve live delivery.

pub(crate) mod connect;
mod db;
mod delivery;
mod migrate;
mod statistics;
mod tls;
mod writer;

use std::sync::Arc;

use deadpool_postgres::Pool;
use futures::future::BoxFuture;
use shepherd_core::Error;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use connect::PgOptions;
pub use db::PgDb;
pub use delivery::Peers;
pub use writer::EVENT_LOCK;

use crate::sql::{CommitSink, DB_UNAVAILABLE};
use connect::{closed, map_err, pool_err};
use db::Conn;
use delivery::{DeliverySlot, DELIVERY_WAIT};
use writer::{unit_job, InlineRun, Job, Writer, WriterContext};

/// Where the writer reports each commit (its events, in commit order).
pub(crate) type Published = Arc<dyn CommitSink>;

/// Connections of the backfill pool (see [`PgBackend::read_backfill`]).
const BACKFILL_POOL_SIZE: usize = 2;

pub struct PgBackend {
    pool: Pool,
    /// Live readers' backfills, apart from requests.
    backfill: Pool,
    jobs: mpsc::UnboundedSender<Job>,
    /// Read here only by the test hooks (`Store::peer_state`); the writer
    /// holds its own handle.
    #[cfg_attr(not(feature = "test-hooks"), allow(dead_code))]
    peers: Arc<Peers>,
    writer: Arc<Writer>,
    delivery: DeliverySlot,
}

/// A pooled connection inside a read transaction whose caller may go away
/// before COMMIT. If it does, the connection must not go back to the pool
/// still inside that transaction (the next user would read an old snapshot):
/// a task rolls it back first, and the connection returns to the pool only
/// when that task lets go of it. Outside a runtime it is closed instead.
struct OpenRead(Option<Arc<deadpool_postgres::Object>>);

impl Drop for OpenRead {
    fn drop(&mut self) {
        let Some(client) = self.0.take() else {
            return;
        };
        // Out of the pool for good: dropping it closes the connection.
        let close = |client: Arc<deadpool_postgres::Object>| {
            if let Ok(object) = Arc::try_unwrap(client) {
                drop(deadpool_postgres::Object::take(object));
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    if client.batch_execute("ROLLBACK").await.is_err() {
                        close(client);
                    }
                });
            }
            Err(_) => close(client),
        }
    }
}

impl PgBackend {
    /// Connects, creates the schema if asked, migrates, and starts the writer
    /// and the listener. The writer publishes this node's commits to
    /// `published`; the listener wakes its pump for other nodes' commits.
    pub async fn open(
        opts: &PgOptions,
        published: Published,
        shutdown: CancellationToken,
    ) -> Result<Self, Error> {
        let (config, tls, pool) = connect::connect(opts).await?;
        migrate::migrate(&pool).await?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let node = {
            let mut id = [0u8; 8];
            // getrandom only fails when the OS has no entropy source at all.
            getrandom::fill(&mut id).expect("the operating system's random source");
            id.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let on_commit = published.clone();
        let peers = Arc::new(Peers::default());
        let channel = delivery::notify_channel(opts.schema.as_deref());
        let writer = Arc::new(Writer {
            pool: pool.clone(),
            ctx: WriterContext {
                published,
                node: node.clone(),
                channel: channel.clone(),
                peers: peers.clone(),
                prefetch_hits: Arc::default(),
            },
            slot: Arc::default(),
            queued: Default::default(),
            owed_notify: tokio::sync::Notify::new(),
        });
        tokio::spawn(writer::writer_loop(writer.clone(), rx));
        // Named, like the delivery connection, apart from the request pool.
        let mut backfill_config = config.clone();
        backfill_config.application_name(format!(
            "{} backfill",
            config.get_application_name().unwrap_or("shepherd")
        ));
        let backfill = connect::pool(&backfill_config, &tls, BACKFILL_POOL_SIZE)?;
        let delivery = DeliverySlot::new(tokio::sync::watch::Sender::new(None));
        // Named, so that operators can tell it from the pool's connections.
        let mut delivery_config = config.clone();
        delivery_config.application_name(format!(
            "{} events",
            config.get_application_name().unwrap_or("shepherd")
        ));
        tokio::spawn(delivery::listen_loop(
            delivery::Listener {
                config: delivery_config,
                tls,
                channel: channel.clone(),
                node: node.clone(),
                on_commit,
                peers: peers.clone(),
                delivery: delivery.clone(),
            },
            shutdown.clone(),
        ));
        if opts.analyze_growing_tables {
            tokio::spawn(statistics::refresh_loop(pool.clone(), shutdown.clone()));
        }
        tokio::spawn(delivery::announce_loop(
            pool.clone(),
            channel,
            node,
            shutdown,
        ));
        Ok(PgBackend {
            pool,
            backfill,
            jobs,
            peers,
            writer,
            delivery,
        })
    }

    /// Units that ran on a read the writer prefetched for them.
    #[cfg(feature = "test-hooks")]
    pub fn prefetch_hits(&self) -> u64 {
        self.writer
            .ctx
            .prefetch_hits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What this node knows of other nodes on the same database.
    #[cfg(feature = "test-hooks")]
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// Runs `f` inside the node's shared write transaction (see module docs)
    /// and returns once it is committed. A unit that declares the read it
    /// makes first (`prefetch`) and is queued behind other units gets that
    /// read's answer from the writer instead of waiting for a round trip of
    /// its own (see [`crate::sql::Prefetch`]).
    pub async fn write_prefetched<T, F>(
        &self,
        prefetch: Option<crate::sql::Prefetch>,
        f: F,
    ) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut PgDb) -> BoxFuture<'a, Result<T, Error>> + Send + 'static,
    {
        let (job, rx) = unit_job(f, prefetch);
        let writer = &self.writer;
        let idle = writer.queued.load(std::sync::atomic::Ordering::Acquire) == 0;
        match writer.slot.clone().try_lock_owned() {
            Ok(guard) if idle && !self.jobs.is_closed() => {
                let mut run = InlineRun {
                    guard: Some(guard),
                    writer: writer.clone(),
                };
                if let Some(slot) = run.guard.as_deref_mut() {
                    writer.run(slot, vec![job]).await;
                }
            }
            other => {
                drop(other);
                writer
                    .queued
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                if self.jobs.send(job).is_err() {
                    writer
                        .queued
                        .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                    return Err(closed());
                }
            }
        }
        rx.await.map_err(|_| closed())?
    }

    /// Runs every unit of `units`, in order, in one transaction on the
    /// writer's connection, each in a savepoint of its own: one that fails
    /// is rolled back alone and the others still commit. Returns each unit's
    /// outcome, in order.
    pub async fn write_many<T, F>(&self, units: Vec<F>) -> Result<Vec<Result<T, Error>>, Error>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut PgDb) -> BoxFuture<'a, Result<T, Error>> + Send + 'static,
    {
        let (jobs, answers): (Vec<Job>, Vec<_>) =
            units.into_iter().map(|f| unit_job(f, None)).unzip();
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if self.jobs.is_closed() {
            return Err(closed());
        }
        // The group runs on this task as one batch: waiting for the slot
        // (behind whatever the writer task is running) keeps it whole.
        let writer = &self.writer;
        let guard = writer.slot.clone().lock_owned().await;
        let mut run = InlineRun {
            guard: Some(guard),
            writer: writer.clone(),
        };
        if let Some(slot) = run.guard.as_deref_mut() {
            writer.run(slot, jobs).await;
        }
        drop(run);
        let mut out = Vec::with_capacity(answers.len());
        for rx in answers {
            out.push(rx.await.map_err(|_| closed())?);
        }
        Ok(out)
    }

    /// Runs `f` on a pooled connection inside a read-only, repeatable-read
    /// transaction, so that every statement sees one snapshot.
    pub async fn read<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut PgDb) -> BoxFuture<'a, Result<T, Error>> + Send + 'static,
    {
        Self::read_on(&self.pool, f).await
    }

    /// [`PgBackend::read`] on the backfill pool: a live reader that fell
    /// behind (or starts from a cursor) reads the log there, so it is
    /// caught up however many requests hold the request pool. Backfills
    /// queue behind one another instead, and each page is short.
    pub async fn read_backfill<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut PgDb) -> BoxFuture<'a, Result<T, Error>> + Send + 'static,
    {
        Self::read_on(&self.backfill, f).await
    }

    async fn read_on<T, F>(pool: &Pool, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut PgDb) -> BoxFuture<'a, Result<T, Error>> + Send + 'static,
    {
        let client = Arc::new(pool.get().await.map_err(pool_err)?);
        let mut open = OpenRead(Some(client.clone()));
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(map_err)?;
        let result = f(&mut PgDb::new(Conn::Pooled(client.clone()))).await;
        let end = client.batch_execute("COMMIT").await.map_err(map_err);
        open.0 = None;
        let r = result?;
        end?;
        Ok(r)
    }

    /// Runs `f` on the store's delivery connection, outside the pool, so
    /// that the event pump reads the log however busy the pool is. While
    /// that connection is being re-established it waits for it, for at most
    /// [`DELIVERY_WAIT`].
    pub async fn read_delivery<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a> FnOnce(&'a mut PgDb) -> BoxFuture<'a, Result<T, Error>> + Send + 'static,
    {
        let mut up = self.delivery.subscribe();
        let wait = up.wait_for(|c| c.as_ref().is_some_and(|c| !c.is_closed()));
        let client = match tokio::time::timeout(DELIVERY_WAIT, wait).await {
            Ok(Ok(c)) => c.clone(),
            _ => None,
        }
        .ok_or_else(|| {
            Error::unavailable(
                DB_UNAVAILABLE,
                "the event delivery connection is reconnecting",
            )
        })?;
        f(&mut PgDb::new(Conn::Own(client))).await
    }

    pub async fn ping(&self) -> Result<(), Error> {
        let client = self.pool.get().await.map_err(pool_err)?;
        client.batch_execute("SELECT 1").await.map_err(map_err)
    }

    pub fn close(&self) {
        self.pool.close();
        self.backfill.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{Db, Value};

    /// Commits go nowhere: these tests read the database itself.
    struct Ignore;

    impl CommitSink for Ignore {
        fn committed(&self, _: Vec<shepherd_core::event::Event>) {}
        fn batch(&self, _: usize, _: std::time::Duration) {}
        fn wake(&self) {}
    }

    /// A fresh schema on the test database, opened as a store backend.
    async fn backend(pool_size: usize) -> (PgBackend, CancellationToken) {
        let url = std::env::var("SHEPHERD_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        // `t_<unix time>_…`: the test harness drops such schemas once old.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let schema = format!(
            "t_{}_{}_unit{}",
            chrono::Utc::now().timestamp(),
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let shutdown = CancellationToken::new();
        let opts = PgOptions {
            url,
            schema: Some(schema),
            pool_size,
            analyze_growing_tables: true,
        };
        let b = PgBackend::open(&opts, Arc::new(Ignore), shutdown.clone())
            .await
            .expect("open PostgreSQL");
        (b, shutdown)
    }

    /// The statements every pooled connection holds prepared for `sql`, by
    /// (name, time prepared): all connections are taken at once, so each
    /// is asked.
    async fn prepared_on_each_connection(b: &PgBackend, sql: &str) -> Vec<Vec<(String, String)>> {
        let mut conns = Vec::new();
        for _ in 0..b.pool.status().max_size {
            conns.push(b.pool.get().await.expect("pooled connection"));
        }
        let mut out = Vec::new();
        for c in &conns {
            let rows = c
                .query(
                    "SELECT name, prepare_time::text FROM pg_prepared_statements WHERE statement = $1",
                    &[&sql],
                )
                .await
                .expect("pg_prepared_statements");
            out.push(rows.iter().map(|r| (r.get(0), r.get(1))).collect());
        }
        out
    }

    /// Reads used to prepare every statement on each call (a fresh cache
    /// per read, its statements closed when the read ended). Now a pooled
    /// connection keeps what it prepared: after many reads each connection
    /// holds the statement at most once, and more reads prepare nothing new.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_reuse_their_connections_prepared_statements() {
        const SQL: &str = "SELECT count(*) FROM events WHERE seq > $1";
        let (b, shutdown) = backend(2).await;
        let read =
            || b.read(|db| Box::pin(async move { db.query(SQL, vec![Value::Int(0)]).await }));
        for _ in 0..10 {
            read().await.expect("read");
        }
        let first = prepared_on_each_connection(&b, SQL).await;
        let total: usize = first.iter().map(Vec::len).sum();
        assert!(total >= 1, "no connection kept the statement: {first:?}");
        assert!(
            first.iter().all(|c| c.len() <= 1),
            "a connection prepared it twice: {first:?}"
        );
        for _ in 0..10 {
            read().await.expect("read");
        }
        let again = prepared_on_each_connection(&b, SQL).await;
        for (before, after) in first.iter().zip(&again) {
            // A connection that had it still has the very same statement.
            if !before.is_empty() {
                assert_eq!(before, after, "re-prepared: {first:?} then {again:?}");
            }
        }
        assert!(again.iter().all(|c| c.len() <= 1), "{again:?}");
        b.close();
        shutdown.cancel();
    }

    /// Backfill reads do not wait for the request pool: with every pooled
    /// connection held by requests, a backfill still reads at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn backfills_read_while_requests_hold_the_pool() {
        let (b, shutdown) = backend(2).await;
        let mut held = Vec::new();
        for _ in 0..b.pool.status().max_size {
            held.push(b.pool.get().await.expect("pooled connection"));
        }
        fn count(db: &mut PgDb) -> BoxFuture<'_, Result<Vec<crate::sql::Row>, Error>> {
            Box::pin(async move { db.query("SELECT count(*) FROM events", vec![]).await })
        }
        let quick = std::time::Duration::from_secs(2);
        assert!(
            tokio::time::timeout(quick, b.read(count)).await.is_err(),
            "a request read waits for the held pool"
        );
        let rows = tokio::time::timeout(quick, b.read_backfill(count))
            .await
            .expect("a backfill does not wait for the request pool")
            .expect("backfill read");
        assert_eq!(rows.len(), 1);
        drop(held);
        b.close();
        shutdown.cancel();
    }

    /// A kept statement whose table changed shape fails once per connection
    /// that kept it, then is prepared afresh; without that, each of those
    /// connections would fail the same read until it was closed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_statement_outdated_by_a_migration_is_prepared_again() {
        const SQL: &str = "SELECT * FROM meta ORDER BY key";
        let (b, shutdown) = backend(2).await;
        b.pool
            .get()
            .await
            .unwrap()
            .batch_execute("INSERT INTO meta (key, value) VALUES ('test.row', 'x')")
            .await
            .unwrap();
        let read = || b.read(|db| Box::pin(async move { db.query(SQL, vec![]).await }));
        for _ in 0..4 {
            read().await.expect("read");
        }
        {
            let c = b.pool.get().await.unwrap();
            c.batch_execute("ALTER TABLE meta ADD COLUMN added_later TEXT")
                .await
                .unwrap();
        }
        let mut failures = 0;
        for _ in 0..8 {
            if let Err(e) = read().await {
                assert!(e.message.contains("cached plan"), "{e:?}");
                failures += 1;
            }
        }
        assert!(failures <= 2, "{failures} of 8 reads failed");
        let rows = read().await.expect("read after the change");
        assert!(
            !rows.is_empty() && rows.iter().all(|r| r.0.len() == 3),
            "the new column is read"
        );
        b.close();
        shutdown.cancel();
    }
}
