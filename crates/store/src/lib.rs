//! Shepherd's persistence: one store, two databases.
//!
//! [`Store`] is the only way the rest of Shepherd touches data. It is chosen
//! from the database URL (`sqlite://…` embedded, `postgres://…` for several
//! nodes) and offers domain operations, each of which changes tables and
//! appends the events that describe the change in one transaction.
//!
//! Operations are written once (in `log.rs` and `ops/`) against the small
//! `sql::Db` seam and compiled once, for one connection type
//! (`any_db::AnyDb`) that forwards to the backend in use; [`Store::write`]
//! and [`Store::read`] run them. Each backend (`sqlite/`, `postgres/`) owns
//! its driver, its migrations, its transaction and locking strategy, and
//! offers only primitives (statements, deferred writes, the event insert,
//! commit); it knows nothing of the event log, the hub or the operations.
//! Only this crate contains SQL.
//!
//! This file holds the store itself (opening, the unit-of-work runners,
//! closing); its operations are `impl Store` blocks in one file per entity
//! (`task_store.rs`, `claim_store.rs`, `run_store.rs`, `worker_store.rs`,
//! `event_store.rs`, `channel_store.rs`, `conversation_store.rs`,
//! `session_store.rs`), the clock is in `clock.rs`, and the configuration
//! with database URL parsing and redaction in `config.rs`.

pub mod actor;
mod any_db;
mod clock;
mod config;
mod copy_to_postgres;
pub mod hub;
mod inflated;
pub(crate) mod log;
mod migrations;
mod ops;
mod postgres;
mod sealed;
pub(crate) mod sql;
mod sqlite;
mod statement_costs;
pub mod writer_stats;

// The operations of `Store`, one `impl Store` file per entity; each runs
// operations of `ops/` (or `log.rs`) as units of work or consistent reads.
mod channel_store;
mod claim_store;
mod conversation_store;
mod event_store;
pub use event_store::Commits;
mod host_store;
mod input_store;
mod login_store;
mod run_store;
mod session_store;
mod task_store;
mod user_store;
// Only for tests, benchmarks and examples (see the module).
#[cfg(feature = "test-hooks")]
mod test_hooks;
mod webhook_store;
mod worker_store;

pub use statement_costs::StatementCost;

use std::sync::Arc;

use any_db::AnyDb;
use futures::future::BoxFuture;
use shepherd_core::time::Millis;
use shepherd_core::Error;
use tokio_util::sync::CancellationToken;

pub use claim_store::ProgressReport;
pub use clock::{now_ms, Clock};
pub use config::{parse_database_url, redact_url, DatabaseUrl, StoreConfig};
pub use copy_to_postgres::{copy_sqlite_to_postgres, CopyProgress, TableCopy};
pub use hub::{Tail, TailItem, BROADCAST_CAPACITY};
pub use log::EventPage;
pub use ops::claims::{Grant, HeldClaim, LeaseRules, SweepReport};
pub use ops::conversations::{
    ClaimConversation, Conversation, ConversationView, Message, MessageView, Multitask, Resource,
    SendOutcome,
};
pub use ops::hosts::{
    new_host_id, HostClaim, HostDeclaration, HostRegistration, HOST_TOKEN_PREFIX,
};
pub use ops::input_requests::{InputFilter, NewInputRequest};
pub use ops::logins::{
    LoginAttempt, NewWebSession, SessionLifetimes, SignIn, WebSession, LOGIN_ATTEMPT_TTL_MS,
};
pub use ops::random_hex;
pub use ops::runs::{RunFilter, RunWorkspaceRow, StepsAck};
pub use ops::sessions::{
    NewSession, NewSessionWorker, SessionRecord, SessionWorkerRecord, StartReason,
};
pub use ops::tasks::{Applied, CancelOutcome, NewTask, TaskDetail, TaskFilter};
pub use ops::usage::UsageRow;
pub use ops::users::{TokenRow, UserChange, UserRow, BUILTIN_ADMIN, LAST_USED_GRANULARITY_MS};
pub use ops::webhooks::{Attempt as WebhookAttempt, NewWebhook, WebhookRow};
pub use ops::workers::{Registration, WorkerFilter};
pub use postgres::PgOptions;
/// The PostgreSQL advisory lock that orders event-log commits: anything else
/// that appends to the log must take it (transaction-scoped) before its first
/// `seq` is drawn.
pub use postgres::EVENT_LOCK as POSTGRES_EVENT_LOCK;
pub use run_store::StepAppend;
pub use sealed::{is_sealed, SecretsKey, SEALED_PREFIX};
pub use sqlite::backup::backup as backup_sqlite;
pub use sqlite::SyncMode;
#[cfg(feature = "test-hooks")]
pub use test_hooks::TestFailure;
pub use webhook_store::{new_webhook_id, new_webhook_secret};

use postgres::PgBackend;
use sqlite::SqliteBackend;

enum Backend {
    Sqlite(SqliteBackend),
    Postgres(PgBackend),
}

struct Inner {
    backend: Backend,
    hub: Arc<hub::Hub>,
    shutdown: CancellationToken,
    url: String,
    /// What every operation takes as "now" (see [`Store::now`]).
    clock: Clock,
    /// How stored secrets are sealed and opened (see `sealed`).
    sealer: sealed::Sealer,
}

/// The hub hears of every commit from the backend's writer.
impl sql::CommitSink for hub::Hub {
    fn committed(&self, events: Vec<shepherd_core::event::Event>) {
        self.publish_committed(events);
    }
    fn batch(&self, units: usize, took: std::time::Duration) {
        self.writer_stats.record(units, took);
    }
    fn wake(&self) {
        self.wake.notify_one();
    }
    fn statement_costs(&self) -> Option<&statement_costs::StatementCosts> {
        Some(&self.statement_costs)
    }
}

/// Gives a unit of work for [`Store::write_many`] its higher-ranked
/// signature: a closure that is not passed straight to a generic call does
/// not get one inferred.
fn unit<T, F>(f: F) -> F
where
    F: for<'a, 'u> FnOnce(&'a mut AnyDb<'u>) -> BoxFuture<'a, Result<T, Error>>,
{
    f
}

/// One page of a list: the items, how many match in all, and the log's
/// cursor the page is valid at (tail after it for what changed since).
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: i64,
    pub cursor: i64,
}

/// A whole list and the log's cursor it is valid at.
#[derive(Debug, Clone)]
pub struct Listing<T> {
    pub items: Vec<T>,
    pub cursor: i64,
}

/// One page of a resource's conversations, newest first.
#[derive(Debug, Clone)]
pub struct ConversationPage {
    pub conversations: Vec<Conversation>,
    /// The `before` token of the next (older) page; `None` on the last.
    pub next_before: Option<String>,
    /// The log's cursor the page is valid at.
    pub cursor: i64,
}

/// The store. Cheap to clone; all clones share one backend.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl Store {
    /// Opens the database named by the configuration, applies migrations and
    /// starts the writer and the event pump. Must be called inside a tokio runtime.
    pub async fn open(config: &StoreConfig) -> Result<Store, Error> {
        let hub = Arc::new(hub::Hub::new());
        let published: Arc<dyn sql::CommitSink> = hub.clone();
        let shutdown = CancellationToken::new();
        let backend = match parse_database_url(&config.url)? {
            DatabaseUrl::Sqlite(path) => {
                let sync = config.sqlite_sync;
                let b = tokio::task::spawn_blocking(move || {
                    SqliteBackend::open(&path, sync, published)
                })
                .await
                .map_err(|e| Error::internal(format!("open task failed: {e}")))??;
                Backend::Sqlite(b)
            }
            DatabaseUrl::Postgres(url) => {
                let opts = PgOptions {
                    url,
                    schema: config.pg_schema.clone(),
                    pool_size: config.pg_pool_size,
                    analyze_growing_tables: config.pg_analyze_growing_tables,
                };
                Backend::Postgres(PgBackend::open(&opts, published, shutdown.clone()).await?)
            }
        };
        let store = Store {
            inner: Arc::new(Inner {
                backend,
                hub,
                shutdown: shutdown.clone(),
                url: redact_url(&config.url),
                clock: config.clock.clone(),
                sealer: sealed::Sealer::new(config.secrets_key.clone()),
            }),
        };
        // Before the store is handed out, so before anything can be written
        // through it (see `hub::pump`).
        let head = match store.head().await {
            Ok(head) => head,
            Err(e) => {
                store.close();
                return Err(e);
            }
        };
        store.hub().start(head);
        tokio::spawn(hub::pump(store.clone(), shutdown));
        // Before anything reads a secret: the key is the database's, and no
        // secret stays in clear.
        if store.inner.sealer.has_key() {
            let (sealer, now) = (store.sealer(), store.now());
            let sealed = store
                .write(move |db| {
                    Box::pin(
                        async move { ops::stored_secrets::seal_at_open(db, &sealer, now).await },
                    )
                })
                .await;
            match sealed {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(secrets = n, "sealed the secrets stored in clear");
                    // Their old pages must not linger in SQLite's WAL.
                    if let Backend::Sqlite(b) = &store.inner.backend {
                        if let Err(e) = b.truncate_wal().await {
                            tracing::warn!(error = %e, "the WAL still holds the secrets' clear pages");
                        }
                    }
                }
                Err(e) => {
                    store.close();
                    return Err(e);
                }
            }
        }
        Ok(store)
    }

    /// How this store seals and opens its secrets.
    pub(crate) fn sealer(&self) -> sealed::Sealer {
        self.inner.sealer.clone()
    }

    /// "Now" for this store's operations: the system clock, unless a test
    /// fixed it with `Store::set_clock` (a test hook).
    pub fn now(&self) -> Millis {
        self.inner.clock.now()
    }

    /// Runs `f` as one unit of work on the node's writer and returns once
    /// it is committed (grouped with other units into one transaction, in a
    /// savepoint of its own). An `Err` from `f`, or from a write it
    /// deferred, rolls the unit back alone.
    ///
    /// SQLite runs it on the writer thread, where every future completes
    /// on its first poll; PostgreSQL on the tokio runtime.
    pub(crate) async fn write<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a, 'u> FnOnce(&'a mut AnyDb<'u>) -> BoxFuture<'a, Result<T, Error>>
            + Send
            + 'static,
    {
        self.write_prefetched(None, f).await
    }

    /// [`Store::write`] for a unit whose first statement may be the read
    /// `prefetch` declares: a PostgreSQL writer that runs it with other
    /// units reads it for all of them in one round trip (SQLite ignores it).
    pub(crate) async fn write_prefetched<T, F>(
        &self,
        prefetch: Option<sql::Prefetch>,
        f: F,
    ) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a, 'u> FnOnce(&'a mut AnyDb<'u>) -> BoxFuture<'a, Result<T, Error>>
            + Send
            + 'static,
    {
        let actor = actor::current();
        match &self.inner.backend {
            Backend::Sqlite(b) => {
                b.write(move |db| {
                    futures::executor::block_on(actor::within(actor, f(&mut AnyDb::Sqlite(db))))
                })
                .await
            }
            Backend::Postgres(b) => {
                b.write_prefetched(prefetch, move |db| {
                    Box::pin(actor::within(actor, async move {
                        f(&mut AnyDb::Postgres(db)).await
                    }))
                })
                .await
            }
        }
    }

    /// Runs every unit of `units`, in order, in one transaction, each in a
    /// savepoint of its own: one that fails is rolled back alone and the
    /// others still commit. Returns each unit's outcome, in order.
    pub(crate) async fn write_many<T, F>(
        &self,
        units: Vec<F>,
    ) -> Result<Vec<Result<T, Error>>, Error>
    where
        T: Send + 'static,
        F: for<'a, 'u> FnOnce(&'a mut AnyDb<'u>) -> BoxFuture<'a, Result<T, Error>>
            + Send
            + 'static,
    {
        let acting = actor::current();
        match &self.inner.backend {
            Backend::Sqlite(b) => {
                let units = units.into_iter().map(|f| {
                    let actor = acting.clone();
                    move |db: &mut sqlite::SqliteDb| {
                        futures::executor::block_on(actor::within(actor, f(&mut AnyDb::Sqlite(db))))
                    }
                });
                b.write_many(units.collect()).await
            }
            Backend::Postgres(b) => {
                /// Gives a closure its higher-ranked signature (not inferred
                /// for one that is not passed straight to a generic call).
                fn pg_unit<T, F>(f: F) -> F
                where
                    F: for<'a> FnOnce(&'a mut postgres::PgDb) -> BoxFuture<'a, Result<T, Error>>,
                {
                    f
                }
                let units = units.into_iter().map(|f| {
                    let actor = acting.clone();
                    pg_unit(move |db| {
                        Box::pin(actor::within(actor, async move {
                            f(&mut AnyDb::Postgres(db)).await
                        }))
                    })
                });
                b.write_many(units.collect()).await
            }
        }
    }

    /// Runs `f` on a consistent snapshot (a read transaction on a pooled
    /// connection).
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'a, 'u> FnOnce(&'a mut AnyDb<'u>) -> BoxFuture<'a, Result<T, Error>>
            + Send
            + 'static,
    {
        match &self.inner.backend {
            Backend::Sqlite(b) => {
                b.read(move |db| futures::executor::block_on(f(&mut AnyDb::Sqlite(db))))
                    .await
            }
            Backend::Postgres(b) => {
                b.read(move |db| Box::pin(async move { f(&mut AnyDb::Postgres(db)).await }))
                    .await
            }
        }
    }

    pub(crate) fn hub(&self) -> &hub::Hub {
        &self.inner.hub
    }

    /// The database URL with any password removed, for logs.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    pub fn backend_name(&self) -> &'static str {
        match self.inner.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Stops background tasks and closes connections. Queued writes finish first.
    pub fn close(&self) {
        self.inner.shutdown.cancel();
        if let Backend::Postgres(b) = &self.inner.backend {
            b.close();
        }
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<(), Error> {
        match &self.inner.backend {
            Backend::Postgres(b) => b.ping().await,
            Backend::Sqlite(_) => self
                .read(move |db| Box::pin(log::head(db)))
                .await
                .map(|_| ()),
        }
    }
}
