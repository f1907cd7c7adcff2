//! The PostgreSQL store: a connection pool for reads, one writer per node,
//! and `LISTEN/NOTIFY` so that every node hears about every commit.
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
//! (a savepoint each) exactly like the SQLite writer does.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::future::BoxFuture;
use futures::StreamExt;
use shepherd_core::Error;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use crate::sql::{Db, Dialect, Row, Value, CONSTRAINT_VIOLATION, DB_UNAVAILABLE};

const MIGRATIONS: &[(i64, &str)] = &[(1, include_str!("0001_init.sql"))];
/// Advisory lock key that orders event-appending commits (see module docs).
pub const EVENT_LOCK: i64 = 0x5348_4550_0001;
const MIGRATION_LOCK: i64 = 0x5348_4550_0002;
/// The channel every node LISTENs on.
pub const NOTIFY_CHANNEL: &str = "shepherd_events";
const MAX_BATCH: usize = 512;

type Finisher = Box<dyn FnOnce(Option<Error>) + Send>;
type Job = Box<dyn FnOnce(Result<PgDb, Error>) -> BoxFuture<'static, (bool, Finisher)> + Send>;

pub(crate) fn map_err(e: tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        if *code == SqlState::UNIQUE_VIOLATION
            || *code == SqlState::FOREIGN_KEY_VIOLATION
            || *code == SqlState::CHECK_VIOLATION
            || *code == SqlState::NOT_NULL_VIOLATION
        {
            return Error::conflict(CONSTRAINT_VIOLATION, db.message().to_owned());
        }
        if *code == SqlState::ADMIN_SHUTDOWN || *code == SqlState::CANNOT_CONNECT_NOW {
            return Error::unavailable(DB_UNAVAILABLE, db.message().to_owned());
        }
        return Error::internal(format!("postgres: {}: {}", code.code(), db.message()));
    }
    if e.is_closed() {
        return Error::unavailable(DB_UNAVAILABLE, format!("connection closed: {e}"));
    }
    Error::unavailable(DB_UNAVAILABLE, format!("postgres: {e}"))
}

fn pool_err(e: deadpool_postgres::PoolError) -> Error {
    Error::unavailable(
        DB_UNAVAILABLE,
        format!("cannot get a PostgreSQL connection: {e}"),
    )
}

fn closed() -> Error {
    Error::unavailable(DB_UNAVAILABLE, "the store is shut down")
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) => match *ty {
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::BOOL => (*v != 0).to_sql(ty, out),
                _ => v.to_sql(ty, out),
            },
            Value::Text(v) => v.to_sql(ty, out),
            Value::Blob(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

fn convert_row(row: &tokio_postgres::Row) -> Result<Row, Error> {
    let mut vals = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        let bad = |e: tokio_postgres::Error| Error::internal(format!("column {}: {e}", col.name()));
        let v = match *col.type_() {
            Type::INT8 => row
                .try_get::<_, Option<i64>>(i)
                .map_err(bad)?
                .map(Value::Int),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)
                .map_err(bad)?
                .map(|v| Value::Int(v as i64)),
            Type::INT2 => row
                .try_get::<_, Option<i16>>(i)
                .map_err(bad)?
                .map(|v| Value::Int(v as i64)),
            Type::BOOL => row
                .try_get::<_, Option<bool>>(i)
                .map_err(bad)?
                .map(|v| Value::Int(v as i64)),
            Type::BYTEA => row
                .try_get::<_, Option<Vec<u8>>>(i)
                .map_err(bad)?
                .map(Value::Blob),
            _ => row
                .try_get::<_, Option<String>>(i)
                .map_err(bad)?
                .map(Value::Text),
        };
        vals.push(v.unwrap_or(Value::Null));
    }
    Ok(Row(vals))
}

type Pending = BoxFuture<'static, Result<(), Error>>;

/// Starts `fut` now (its request is queued on the connection, in order) and
/// returns it unless it already finished.
fn kick(mut fut: Pending) -> Result<Option<Pending>, Error> {
    let waker = futures::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r.map(|_| None),
        std::task::Poll::Pending => Ok(Some(fut)),
    }
}

/// Starts a simple-protocol statement (transaction control) in order.
fn send_simple(
    client: &Arc<deadpool_postgres::Object>,
    sql: String,
) -> Result<Option<Pending>, Error> {
    let client = client.clone();
    kick(Box::pin(async move {
        client.batch_execute(&sql).await.map_err(map_err)
    }))
}

/// Waits for started statements; returns the first error.
async fn settle(pending: Vec<Pending>, mut first: Option<Error>) -> Result<(), Error> {
    for fut in pending {
        if let Err(e) = fut.await {
            first.get_or_insert(e);
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Prepared statements of one connection, by SQL text.
type StatementCache =
    Arc<std::sync::Mutex<std::collections::HashMap<String, tokio_postgres::Statement>>>;

/// A PostgreSQL connection seen through the portable [`Db`] interface.
///
/// Deferred writes are pipelined: each is sent at once and its answer is
/// collected later, so a unit of work pays round trips only for what it
/// reads. tokio-postgres sends requests in the order they are first polled;
/// a write whose statement is not prepared yet cannot be sent at once, so it
/// raises a barrier: it and everything after it wait their turn, in order.
pub struct PgDb {
    client: Arc<deadpool_postgres::Object>,
    cache: StatementCache,
    pending: Vec<Pending>,
    barrier: bool,
    failed: Option<Error>,
    /// Deferred events, written together as one multi-row INSERT (in the
    /// order they were emitted, which is the order of their `seq`) before
    /// the unit's next statement that waits for an answer.
    events: Vec<Vec<Value>>,
}

async fn prepare(
    client: &deadpool_postgres::Object,
    cache: &StatementCache,
    sql: &str,
) -> Result<tokio_postgres::Statement, Error> {
    if let Some(stmt) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(sql) {
        return Ok(stmt.clone());
    }
    let stmt = client.prepare(sql).await.map_err(map_err)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(sql.to_owned(), stmt.clone());
    Ok(stmt)
}

impl PgDb {
    fn new(client: Arc<deadpool_postgres::Object>) -> Self {
        Self::with_cache(client, StatementCache::default())
    }

    fn with_cache(client: Arc<deadpool_postgres::Object>, cache: StatementCache) -> Self {
        PgDb {
            client,
            cache,
            pending: Vec::new(),
            barrier: false,
            failed: None,
            events: Vec::new(),
        }
    }

    async fn settle(&mut self) -> Result<(), Error> {
        self.barrier = false;
        settle(std::mem::take(&mut self.pending), self.failed.take()).await
    }

    /// Sends the buffered events as one statement (pipelined).
    fn send_events(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.events);
        let sql = crate::log::insert_events_sql(rows.len());
        self.defer(&sql, rows.into_iter().flatten().collect());
    }

    /// Before a statement whose answer is needed now: anything queued behind
    /// a barrier must go first, and an earlier failure ends the unit.
    async fn ready(&mut self) -> Result<(), Error> {
        self.send_events();
        if self.barrier || self.failed.is_some() {
            self.settle().await?;
        }
        Ok(())
    }

    /// After a failed statement: the first error of the unit is the real cause
    /// (an aborted transaction refuses everything after it).
    async fn first_error(&mut self, e: Error) -> Error {
        self.settle().await.err().unwrap_or(e)
    }
}

impl Db for PgDb {
    async fn query(&mut self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, Error> {
        self.ready().await?;
        let result = async {
            let stmt = prepare(&self.client, &self.cache, sql).await?;
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            let rows = self.client.query(&stmt, &refs).await.map_err(map_err)?;
            rows.iter().map(convert_row).collect::<Result<Vec<_>, _>>()
        }
        .await;
        match result {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.first_error(e).await),
        }
    }

    async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, Error> {
        self.ready().await?;
        let result = async {
            let stmt = prepare(&self.client, &self.cache, sql).await?;
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            self.client.execute(&stmt, &refs).await.map_err(map_err)
        }
        .await;
        match result {
            Ok(n) => Ok(n),
            Err(e) => Err(self.first_error(e).await),
        }
    }

    fn defer(&mut self, sql: &str, params: Vec<Value>) {
        if self.failed.is_some() {
            return;
        }
        let client = self.client.clone();
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sql)
            .cloned();
        match (cached, self.barrier) {
            (Some(stmt), false) => {
                let fut: Pending = Box::pin(async move {
                    let refs: Vec<&(dyn ToSql + Sync)> =
                        params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                    client
                        .execute(&stmt, &refs)
                        .await
                        .map_err(map_err)
                        .map(|_| ())
                });
                match kick(fut) {
                    Ok(Some(f)) => self.pending.push(f),
                    Ok(None) => {}
                    Err(e) => self.failed = Some(e),
                }
            }
            _ => {
                // Not sendable yet: it runs, in order, when the unit next waits.
                self.barrier = true;
                let cache = self.cache.clone();
                let sql = sql.to_owned();
                self.pending.push(Box::pin(async move {
                    let stmt = prepare(&client, &cache, &sql).await?;
                    let refs: Vec<&(dyn ToSql + Sync)> =
                        params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
                    client
                        .execute(&stmt, &refs)
                        .await
                        .map_err(map_err)
                        .map(|_| ())
                }));
            }
        }
    }

    async fn flush(&mut self) -> Result<(), Error> {
        self.send_events();
        self.settle().await
    }

    fn defer_event(
        &mut self,
        now: shepherd_core::time::Millis,
        e: &shepherd_core::event::NewEvent,
    ) {
        if self.failed.is_none() {
            self.events.push(crate::log::event_params(now, e));
        }
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct PgOptions {
    pub url: String,
    /// Schema to use instead of `public` (tests use one fresh schema each).
    pub schema: Option<String>,
    pub pool_size: usize,
}

pub struct PgBackend {
    pool: Pool,
    jobs: mpsc::UnboundedSender<Job>,
}

impl PgBackend {
    /// Connects, creates the schema if asked, migrates, and starts the writer
    /// and the listener. `on_commit` is notified after every commit on any node.
    pub async fn open(
        opts: &PgOptions,
        on_commit: Arc<Notify>,
        shutdown: CancellationToken,
    ) -> Result<Self, Error> {
        let mut config: tokio_postgres::Config = opts.url.parse().map_err(|e| {
            Error::invalid("bad_database_url", format!("SHEPHERD_DATABASE_URL: {e}"))
        })?;
        if let Some(schema) = &opts.schema {
            if !schema
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(Error::invalid(
                    "bad_schema",
                    "schema names are letters, digits and _",
                ));
            }
            let (client, conn) = config.connect(NoTls).await.map_err(map_err)?;
            let driver = tokio::spawn(conn);
            client
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await
                .map_err(map_err)?;
            drop(client);
            let _ = driver.await;
            config.options(format!("-c search_path={schema}"));
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(opts.pool_size.max(2))
            .wait_timeout(Some(Duration::from_secs(10)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::internal(format!("pool: {e}")))?;
        migrate(&pool).await?;
        let (jobs, rx) = mpsc::unbounded_channel();
        tokio::spawn(writer_loop(pool.clone(), rx, on_commit.clone()));
        tokio::spawn(listen_loop(config.clone(), on_commit, shutdown));
        Ok(PgBackend { pool, jobs })
    }

    /// Runs `f` inside the node's shared write transaction (see module docs)
    /// and returns once it is committed.
    pub async fn write<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(PgDb) -> BoxFuture<'static, Result<T, Error>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |db: Result<PgDb, Error>| {
            Box::pin(async move {
                let result = match db {
                    Ok(db) => f(db).await,
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
        self.jobs.send(job).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// Runs `f` on a pooled connection inside a read-only, repeatable-read
    /// transaction, so that every statement sees one snapshot.
    pub async fn read<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(PgDb) -> BoxFuture<'static, Result<T, Error>> + Send + 'static,
    {
        let client = Arc::new(self.pool.get().await.map_err(pool_err)?);
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(map_err)?;
        let result = f(PgDb::new(client.clone())).await;
        let end = client.batch_execute("COMMIT").await.map_err(map_err);
        let r = result?;
        end?;
        Ok(r)
    }

    /// Runs `f` on a pooled connection without a transaction: for single
    /// statements, which see one snapshot anyway.
    pub async fn read_plain<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(PgDb) -> BoxFuture<'static, Result<T, Error>> + Send + 'static,
    {
        let client = Arc::new(self.pool.get().await.map_err(pool_err)?);
        f(PgDb::new(client)).await
    }

    pub async fn ping(&self) -> Result<(), Error> {
        let client = self.pool.get().await.map_err(pool_err)?;
        client.batch_execute("SELECT 1").await.map_err(map_err)
    }

    pub fn close(&self) {
        self.pool.close();
    }
}

async fn migrate(pool: &Pool) -> Result<(), Error> {
    let client = pool.get().await.map_err(pool_err)?;
    // Several nodes may start at once; one migrates while the others wait.
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map_err)?;
    let result = async {
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
            )
            .await
            .map_err(map_err)?;
        for (version, sql) in MIGRATIONS {
            let done = client
                .query_opt("SELECT 1 FROM schema_migrations WHERE version = $1", &[version])
                .await
                .map_err(map_err)?
                .is_some();
            if done {
                continue;
            }
            tracing::info!(version, "applying PostgreSQL migration");
            client.batch_execute("BEGIN").await.map_err(map_err)?;
            let applied = async {
                client.batch_execute(sql).await?;
                client
                    .execute(
                        "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                        &[version, &chrono::Utc::now().timestamp_millis()],
                    )
                    .await
            }
            .await;
            match applied {
                Ok(_) => client.batch_execute("COMMIT").await.map_err(map_err)?,
                Err(e) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(map_err(e));
                }
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}

async fn writer_loop(pool: Pool, mut rx: mpsc::UnboundedReceiver<Job>, on_commit: Arc<Notify>) {
    let mut conn: Option<(Arc<deadpool_postgres::Object>, StatementCache)> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (client, cache) = match conn.take() {
            Some((c, cache)) if !c.is_closed() => (c, cache),
            _ => match pool.get().await {
                Ok(c) => (Arc::new(c), StatementCache::default()),
                Err(e) => {
                    let err = pool_err(e);
                    for job in batch {
                        let (_, finish) = job(Err(err.clone())).await;
                        finish(None);
                    }
                    continue;
                }
            },
        };
        run_batch(&client, &cache, batch).await;
        conn = Some((client, cache));
        on_commit.notify_one();
    }
    tracing::debug!("PostgreSQL writer stopped");
}

async fn run_batch(
    client: &Arc<deadpool_postgres::Object>,
    cache: &StatementCache,
    batch: Vec<Job>,
) {
    // Transaction control is pipelined with the units' own statements: a
    // unit costs round trips only for its reads and its final flush.
    let mut control: Vec<Pending> = Vec::new();
    let mut control_error: Option<Error> = None;
    let mut send = |sql: String, control: &mut Vec<Pending>| match send_simple(client, sql) {
        Ok(Some(f)) => control.push(f),
        Ok(None) => {}
        Err(e) => {
            control_error.get_or_insert(e);
        }
    };
    send(
        format!("BEGIN; SELECT pg_advisory_xact_lock({EVENT_LOCK})"),
        &mut control,
    );
    let single = batch.len() == 1;
    let mut finishers = Vec::with_capacity(batch.len());
    let mut any_ok = false;
    for job in batch {
        if !single {
            send("SAVEPOINT unit".into(), &mut control);
        }
        let (ok, finish) = job(Ok(PgDb::with_cache(client.clone(), cache.clone()))).await;
        if !single {
            let end = if ok {
                "RELEASE unit"
            } else {
                "ROLLBACK TO unit; RELEASE unit"
            };
            send(end.into(), &mut control);
        }
        any_ok |= ok;
        finishers.push((ok, finish));
    }
    let end = if single && !any_ok {
        "ROLLBACK".to_owned()
    } else {
        format!("SELECT pg_notify('{NOTIFY_CHANNEL}', ''); COMMIT")
    };
    send(end, &mut control);
    let outcome = settle(control, control_error).await;
    match outcome {
        Ok(()) => {
            for (_, finish) in finishers {
                finish(None);
            }
        }
        Err(err) => {
            tracing::error!(error = %err, "write transaction failed; every unit in the batch is rolled back");
            let _ = client.batch_execute("ROLLBACK").await;
            for (ok, finish) in finishers {
                finish(if ok { Some(err.clone()) } else { None });
            }
        }
    }
}

/// Keeps one connection LISTENing, reconnecting with backoff, and wakes the
/// event pump on every notification (and after every reconnect, to catch up
/// on whatever was committed while it was away).
async fn listen_loop(
    config: tokio_postgres::Config,
    on_commit: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = async {
            let (client, mut conn) = config.connect(NoTls).await?;
            let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
            let listen_sql = format!("LISTEN {NOTIFY_CHANNEL}");
            {
                let listen = client.batch_execute(&listen_sql);
                // The connection must be polled for LISTEN to complete.
                let mut listen = std::pin::pin!(listen);
                loop {
                    tokio::select! {
                        r = &mut listen => { r?; break; }
                        m = messages.next() => match m {
                            Some(Ok(_)) => {}
                            Some(Err(e)) => return Err(e),
                            None => return Ok(()),
                        },
                    }
                }
            }
            on_commit.notify_one();
            while let Some(m) = messages.next().await {
                match m {
                    Ok(AsyncMessage::Notification(_)) => on_commit.notify_one(),
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
            }
            drop(client);
            Ok::<(), tokio_postgres::Error>(())
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = attempt => {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                } else {
                    backoff = Duration::from_millis(100);
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
