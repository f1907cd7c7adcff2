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
//! (a savepoint each) exactly like the SQLite writer does. A unit that
//! finds the writer idle (nothing queued, its connection free) runs on its
//! caller's task instead of being handed to the writer task and back
//! ([`Writer`]); if that caller goes away part-way, the connection is rolled
//! back at once, so the unit commits nothing and the lock is released.
//!
//! Round trips. Writes whose answers a unit does not need are pipelined
//! (see [`PgDb`]), event INSERTs return their `seq`s to the writer rather than
//! to the unit, and a unit alone in its transaction does not wait for its own
//! writes: the writer collects their answers with the COMMIT's, so a small
//! write is one round trip. A lone unit also sends BEGIN and the lock itself,
//! just before its first statement; if its only write is its events (a plain
//! append), it sends no BEGIN at all but one autocommit INSERT that takes the
//! lock inside the statement before drawing any `seq`
//! ([`autocommit_events_sql`]): the same one statement and one answer as an
//! INSERT without any of this machinery.
//!
//! The writer broadcasts what it committed to this node's live readers
//! itself (see `hub`); NOTIFY (at most one per [`NOTIFY_INTERVAL`],
//! carrying the node's id so that its own listener ignores it) tells the
//! other nodes, whose pumps then read the log.
//!
//! Peers. A node alone on its database has nobody to tell, and a NOTIFY
//! costs the database a good part of a small commit. So every node
//! announces itself ([`ANNOUNCE_INTERVAL`]) on the same channel, and the
//! writer sends commit notifications only while it has heard another node
//! within [`PEER_TTL`]. A node that starts announces itself at once; until
//! the others hear it (milliseconds), its pump's periodic read of the log
//! covers what they commit.
//!
//! Delivery. The LISTEN connection is also the event pump's: it is not part
//! of the pool, so requests that hold every pooled connection cannot hold up
//! live events (see [`PgBackend::read_delivery`]). It reconnects with
//! backoff when it is lost.
//!
//! Prepared statements live with their connection (deadpool's per-client
//! cache): a pooled connection prepares a statement once, whether the
//! writer or a reader uses it, and keeps it while the connection lives.
//! Every connection of a store has the same `search_path`, so a statement
//! prepared for one use is valid for all.

mod tls;

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use deadpool_postgres::{ClientWrapper, Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::future::BoxFuture;
use futures::StreamExt;
use shepherd_core::event::Event;
use shepherd_core::Error;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{IsNull, ToSql, Type};
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use crate::sql::{Appended, Db, Dialect, Row, Value, CONSTRAINT_VIOLATION, DB_UNAVAILABLE};

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("0001_init.sql")),
    (2, include_str!("0002_sessions.sql")),
    (3, include_str!("0003_conversations.sql")),
    (4, include_str!("0004_run_usage.sql")),
    (5, include_str!("0005_retries.sql")),
    (8, include_str!("0008_run_workspace.sql")),
    (9, include_str!("0009_claims_in_runs.sql")),
    (10, include_str!("0010_run_counts_by_worker.sql")),
];
/// Advisory lock key that orders event-appending commits (see module docs).
pub const EVENT_LOCK: i64 = 0x5348_4550_0001;
const MIGRATION_LOCK: i64 = 0x5348_4550_0002;
/// The channel every node LISTENs on (in the default schema; see
/// [`notify_channel`]).
pub const NOTIFY_CHANNEL: &str = "shepherd_events";
/// The channel of the nodes sharing one schema. Notifications are
/// database-wide, so deployments in separate schemas of one database use
/// separate channels and do not wake (or count as peers of) each other.
pub fn notify_channel(schema: Option<&str>) -> String {
    match schema {
        None => NOTIFY_CHANNEL.to_owned(),
        // Channel names are at most 63 bytes: name, "_", schema.
        Some(s) if NOTIFY_CHANNEL.len() + 1 + s.len() <= 63 => format!("{NOTIFY_CHANNEL}_{s}"),
        Some(s) => format!("{NOTIFY_CHANNEL}_{}", &crate::ops::hash_token(s)[..32]),
    }
}

/// Payload prefix of a node's announcement (not a commit).
const ANNOUNCE_PREFIX: &str = "node:";
/// How often a node announces itself to the others.
const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(5);
/// A node that announced itself this recently still counts as a peer.
const PEER_TTL: Duration = Duration::from_secs(20);

/// When this node last heard another node on [`NOTIFY_CHANNEL`], and how
/// many commit notifications it has sent.
#[derive(Debug, Default)]
pub struct Peers {
    heard_at: std::sync::Mutex<Option<std::time::Instant>>,
    notifies: std::sync::atomic::AtomicU64,
}

impl Peers {
    fn heard(&self) {
        *self.heard_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }
    /// Whether another node has been heard within [`PEER_TTL`].
    pub fn present(&self) -> bool {
        self.heard_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < PEER_TTL)
    }
    /// Commit notifications sent so far.
    pub fn notifies(&self) -> u64 {
        self.notifies.load(std::sync::atomic::Ordering::Relaxed)
    }
}

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
        if *code == SqlState::INVALID_CATALOG_NAME {
            return missing_database(db.message());
        }
        if *code == SqlState::ADMIN_SHUTDOWN || *code == SqlState::CANNOT_CONNECT_NOW {
            return Error::unavailable(DB_UNAVAILABLE, db.message().to_owned());
        }
        return Error::internal(format!("postgres: {}: {}", code.code(), db.message()));
    }
    if e.is_closed() {
        return Error::unavailable(DB_UNAVAILABLE, format!("connection closed: {e}"));
    }
    Error::unavailable(DB_UNAVAILABLE, format!("postgres: {}", describe(&e)))
}

/// An error with its causes: the driver's own text ("error performing TLS
/// handshake") leaves out the reason, which is in its source.
fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    if text.contains("invalid peer certificate") {
        text.push_str(
            " (with sslmode=verify-ca or verify-full the server's certificate must chain to \
             sslrootcert=PATH, or to a public root if none is given; verify-full also checks \
             that it names the host)",
        );
    }
    text
}

/// A database that does not exist: name it and say how to create it,
/// rather than the driver's bare "db error".
fn missing_database(message: &str) -> Error {
    // PostgreSQL says: database "NAME" does not exist.
    let name = message.split('"').nth(1).unwrap_or("NAME");
    Error::unavailable(
        DB_UNAVAILABLE,
        format!(
            "{message}: create it with `createdb {name}`, or point SHEPHERD_DATABASE_URL at an existing database"
        ),
    )
}

fn pool_err(e: deadpool_postgres::PoolError) -> Error {
    // The connection's own error (a missing database, a refused password)
    // says more than the pool's wrapper around it.
    if let deadpool_postgres::PoolError::Backend(e) = e {
        if e.as_db_error().is_some() {
            return map_err(e);
        }
        return Error::unavailable(
            DB_UNAVAILABLE,
            format!("cannot get a PostgreSQL connection: {}", describe(&e)),
        );
    }
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
            Value::Text(v) => crate::sql::storable_text(v).as_ref().to_sql(ty, out),
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
fn send_simple(client: &Conn, sql: String) -> Result<Option<Pending>, Error> {
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

/// A connection a [`PgDb`] runs on: one of the pool's, or the store's own
/// delivery connection. Either way it carries its prepared statements.
#[derive(Clone)]
enum Conn {
    Pooled(Arc<deadpool_postgres::Object>),
    Own(Arc<ClientWrapper>),
}

impl std::ops::Deref for Conn {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        match self {
            Conn::Pooled(c) => c,
            Conn::Own(c) => c,
        }
    }
}

/// A PostgreSQL connection seen through the portable [`Db`] interface.
///
/// Deferred writes are pipelined: each is sent at once and its answer is
/// collected later, so a unit of work pays round trips only for what it
/// reads. tokio-postgres sends requests in the order they are first polled;
/// a write whose statement is not prepared yet cannot be sent at once, so it
/// raises a barrier: it and everything after it wait their turn, in order.
pub struct PgDb {
    client: Conn,
    pending: Vec<Pending>,
    barrier: bool,
    failed: Option<Error>,
    /// Deferred events, written together as one multi-row INSERT (in the
    /// order they were emitted, which is the order of their `seq`) before
    /// the unit's next statement that waits for an answer.
    events: Vec<Vec<Value>>,
    /// What those events are, to be matched with the `seq`s the INSERT returns.
    event_records: Vec<Event>,
    /// Every event this unit appended, with its `seq`, once its INSERT answered.
    appended: Appended,
    /// Set by the writer when this unit is alone in its transaction: the
    /// unit's final flush does not wait, and the writer collects its
    /// answers together with the COMMIT's (one round trip for the lot).
    lone: Option<Arc<LoneUnit>>,
    /// The writer left the transaction's start to this (lone) unit: BEGIN
    /// and the event lock go out just before its first statement, or, if
    /// its only statement is its event insert, the lock is taken inside
    /// that insert and it commits on its own (see [`PgDb::end_unit`]).
    unbegun: bool,
}

/// What the writer shares with a unit that is alone in its transaction.
#[derive(Default)]
struct LoneUnit {
    /// Answers the unit did not wait for.
    pending: std::sync::Mutex<Vec<Pending>>,
    /// What the unit opened, if the writer left that to it.
    opened: std::sync::Mutex<Opened>,
}

/// What a lazily begun unit put on the wire.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// No statement at all: there is nothing to commit.
    #[default]
    Nothing,
    /// A transaction, which the writer commits or rolls back.
    Transaction,
    /// One statement that committed on its own.
    Autocommit,
}

impl LoneUnit {
    fn opened(&self) -> Opened {
        *self.opened.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn set_opened(&self, o: Opened) {
        *self.opened.lock().unwrap_or_else(|p| p.into_inner()) = o;
    }
}

/// The text of an event insert for each row count, built once: a unit
/// rarely appends more than a few events, and building and hashing the
/// statement text was a visible part of a small append's cost.
struct EventSql([std::sync::OnceLock<String>; 16]);

impl EventSql {
    const fn new() -> Self {
        EventSql([const { std::sync::OnceLock::new() }; 16])
    }

    fn get(&'static self, n: usize, build: fn(usize) -> String) -> std::borrow::Cow<'static, str> {
        match self.0.get(n) {
            Some(cell) => cell.get_or_init(|| build(n)).as_str().into(),
            None => build(n).into(),
        }
    }
}

/// What every write transaction starts with (see the module docs).
fn begin_sql() -> String {
    format!("BEGIN; SELECT pg_advisory_xact_lock({EVENT_LOCK})")
}

/// The insert of `n` events as one statement that takes the event lock
/// itself, before any `seq` is drawn: the lock comes from a materialised
/// CTE that every inserted row is joined with, so no row (and no identity
/// value) exists before the lock is held; autocommit holds it to the commit.
fn autocommit_events_sql(n: usize) -> String {
    const CASTS: [&str; 10] = [
        "::bigint", "::text", "::text", "::text", "::text", "::text", "::text", "::text", "::text",
        "::text",
    ];
    format!(
        "WITH ordering AS MATERIALIZED (SELECT pg_advisory_xact_lock({EVENT_LOCK})) \
         INSERT INTO events ({cols}) SELECT v.* FROM ordering, (VALUES {rows}) AS v ({cols}) \
         RETURNING seq",
        cols = crate::log::INSERT_COLUMNS,
        rows = crate::log::event_rows_sql(n, Some(&CASTS)),
    )
}

/// The connection's prepared statement for `sql`, prepared now if it has
/// none. A hit answers without waiting.
async fn prepare(client: &ClientWrapper, sql: &str) -> Result<tokio_postgres::Statement, Error> {
    client.prepare_cached(sql).await.map_err(map_err)
}

/// [`map_err`] for a prepared statement's run. A table whose columns
/// changed under a kept statement (a newer node migrated) makes PostgreSQL
/// refuse it ("cached plan must not change result type"): the connection
/// forgets its statements, so that the next use prepares them afresh.
fn stmt_err(client: &ClientWrapper, e: tokio_postgres::Error) -> Error {
    if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) {
        client.statement_cache.clear();
    }
    map_err(e)
}

impl PgDb {
    fn new(client: Conn) -> Self {
        PgDb {
            client,
            pending: Vec::new(),
            barrier: false,
            failed: None,
            events: Vec::new(),
            event_records: Vec::new(),
            appended: Appended::default(),
            lone: None,
            unbegun: false,
        }
    }

    /// Ends a unit of work that returned `Ok`: its deferred writes must
    /// succeed too. A unit alone in its transaction hands them to the
    /// writer, which waits for them together with the COMMIT.
    ///
    /// A lazily begun unit whose only statement is its event insert sends
    /// that insert alone, in autocommit, with the event lock inside it: the
    /// same single statement and single answer as a plain INSERT.
    pub(crate) async fn end_unit(&mut self) -> Result<(), Error> {
        match &self.lone {
            // `unbegun` still set: nothing has gone out yet.
            Some(lone) if self.unbegun && !self.events.is_empty() => {
                self.unbegun = false;
                lone.set_opened(Opened::Autocommit);
                static SQL: EventSql = EventSql::new();
                self.send_events_with(&SQL, autocommit_events_sql);
            }
            _ => self.send_events(),
        }
        match self.lone.as_ref().map(|l| &l.pending) {
            // Only writes already on the wire can be handed over: one queued
            // behind a barrier would be sent after the writer's COMMIT,
            // outside the transaction.
            Some(later) if !self.barrier && self.failed.is_none() => {
                later
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .append(&mut self.pending);
                Ok(())
            }
            _ => self.settle().await,
        }
    }

    /// The events this unit appended; complete once the unit has committed.
    pub fn appended(&self) -> Appended {
        self.appended.clone()
    }

    /// Sends BEGIN and the event lock if the writer left them to this unit
    /// and they have not gone out: before the unit's first statement.
    fn open(&mut self) {
        if !std::mem::take(&mut self.unbegun) {
            return;
        }
        if let Some(lone) = &self.lone {
            lone.set_opened(Opened::Transaction);
        }
        match send_simple(&self.client, begin_sql()) {
            Ok(Some(f)) => self.pending.push(f),
            Ok(None) => {}
            Err(e) => self.failed = Some(e),
        }
    }

    async fn settle(&mut self) -> Result<(), Error> {
        self.barrier = false;
        settle(std::mem::take(&mut self.pending), self.failed.take()).await
    }

    /// Sends the buffered events as one statement (pipelined); their `seq`s
    /// are recorded in [`PgDb::appended`] when the answer arrives.
    fn send_events(&mut self) {
        static SQL: EventSql = EventSql::new();
        self.send_events_with(&SQL, |n| {
            format!("{} RETURNING seq", crate::log::insert_events_sql(n))
        });
    }

    /// [`PgDb::send_events`] with the statement `sql(n)` for `n` events.
    fn send_events_with(&mut self, cache: &'static EventSql, sql: fn(usize) -> String) {
        if self.events.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.events);
        let mut records = std::mem::take(&mut self.event_records);
        let sql = cache.get(rows.len(), sql);
        let appended = self.appended.clone();
        let on_rows: OnRows = Box::new(move |rows| {
            let mut seqs = Vec::with_capacity(rows.len());
            for row in &rows {
                seqs.push(row.try_get::<_, i64>(0).map_err(map_err)?);
            }
            // Rows of one INSERT take their `seq`s in VALUES order, under the
            // event lock; sorting does not depend on the order of RETURNING.
            seqs.sort_unstable();
            if seqs.len() != records.len() {
                return Err(Error::internal(
                    "event insert returned a wrong number of rows",
                ));
            }
            for (e, seq) in records.iter_mut().zip(seqs) {
                e.seq = seq;
            }
            appended
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(records);
            Ok(())
        });
        self.defer_inner(&sql, rows.into_iter().flatten().collect(), Some(on_rows));
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

    /// Sends a write now if its statement is prepared (else queues it behind
    /// a barrier); `on_rows` receives the rows it returns.
    fn defer_inner(&mut self, sql: &str, params: Vec<Value>, on_rows: Option<OnRows>) {
        if self.failed.is_some() {
            return;
        }
        self.open();
        let client = self.client.clone();
        let run = |client: Conn,
                   stmt: tokio_postgres::Statement,
                   params: Vec<Value>,
                   on_rows: Option<OnRows>| async move {
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            match on_rows {
                Some(f) => f(client
                    .query(&stmt, &refs)
                    .await
                    .map_err(|e| stmt_err(&client, e))?),
                None => client
                    .execute(&stmt, &refs)
                    .await
                    .map_err(|e| stmt_err(&client, e))
                    .map(|_| ()),
            }
        };
        // Set once the statement is prepared, that is, once the write
        // itself has been sent.
        let sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sql = sql.to_owned();
        let write: Pending = Box::pin({
            let sent = sent.clone();
            async move {
                let stmt = prepare(&client, &sql).await?;
                sent.store(true, std::sync::atomic::Ordering::Relaxed);
                run(client, stmt, params, on_rows).await
            }
        });
        if self.barrier {
            // It runs, in order, when the unit next waits.
            self.pending.push(write);
            return;
        }
        // A prepared statement is sent at once; one that still has to be
        // prepared raises a barrier: it and everything after it wait their
        // turn, in order.
        match kick(write) {
            Ok(Some(f)) => {
                if !sent.load(std::sync::atomic::Ordering::Relaxed) {
                    self.barrier = true;
                }
                self.pending.push(f)
            }
            Ok(None) => {}
            Err(e) => self.failed = Some(e),
        }
    }
}

/// What a deferred statement does with the rows it returns.
type OnRows = Box<dyn FnOnce(Vec<tokio_postgres::Row>) -> Result<(), Error> + Send>;

impl Db for PgDb {
    async fn query(&mut self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, Error> {
        self.ready().await?;
        self.open();
        let result = async {
            let stmt = prepare(&self.client, sql).await?;
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            let rows = self
                .client
                .query(&stmt, &refs)
                .await
                .map_err(|e| stmt_err(&self.client, e))?;
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
        self.open();
        let result = async {
            let stmt = prepare(&self.client, sql).await?;
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            self.client
                .execute(&stmt, &refs)
                .await
                .map_err(|e| stmt_err(&self.client, e))
        }
        .await;
        match result {
            Ok(n) => Ok(n),
            Err(e) => Err(self.first_error(e).await),
        }
    }

    fn defer(&mut self, sql: &str, params: Vec<Value>) {
        self.defer_inner(sql, params, None);
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
            self.event_records.push(record(0, now, e));
        }
    }

    fn note_event(
        &mut self,
        seq: i64,
        now: shepherd_core::time::Millis,
        e: &shepherd_core::event::NewEvent,
    ) {
        self.appended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record(seq, now, e));
    }

    fn appended_later(&self) -> Option<Appended> {
        Some(self.appended.clone())
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
}

fn record(seq: i64, now: shepherd_core::time::Millis, e: &shepherd_core::event::NewEvent) -> Event {
    Event {
        seq,
        ts: now,
        kind: e.kind.clone(),
        refs: e.refs.clone(),
        data: e.data.clone(),
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
    peers: Arc<Peers>,
    writer: Arc<Writer>,
    delivery: DeliverySlot,
}

/// The delivery connection (see "Delivery" in the module docs), while it is up.
type DeliverySlot = Arc<tokio::sync::watch::Sender<Option<Arc<ClientWrapper>>>>;

/// How long the event pump waits for the delivery connection to come back
/// before its read fails (and is retried).
const DELIVERY_WAIT: Duration = Duration::from_secs(5);

/// The node's writer: one connection, shared by the writer task and by
/// callers that find it idle.
///
/// A unit of work that arrives while the writer is idle (nothing queued,
/// connection free) runs on the caller's own task: the same hops as a query
/// on a plain connection, with no hand-over to the writer task and back.
/// Units that arrive while it is busy queue for the writer task, which runs
/// them together in one transaction (group commit), as before.
struct Writer {
    pool: Pool,
    ctx: WriterContext,
    slot: Arc<tokio::sync::Mutex<WriterSlot>>,
    /// Units sent to the writer task that it has not taken yet.
    queued: std::sync::atomic::AtomicUsize,
    /// Tells the writer task that a NOTIFY is owed (see [`NOTIFY_INTERVAL`]).
    owed_notify: Notify,
}

/// The writer's connection and what goes with it.
#[derive(Default)]
struct WriterSlot {
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
    async fn run(&self, slot: &mut WriterSlot, batch: Vec<Job>) {
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
                        let (_, finish) = job(Err(err.clone())).await;
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
        let stats = &self.ctx.published.writer_stats;
        stats.record(units, started.elapsed());
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
struct InlineRun {
    guard: Option<tokio::sync::OwnedMutexGuard<WriterSlot>>,
    writer: Arc<Writer>,
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

/// Where the writer publishes the events of each commit (see `hub`).
pub type Published = Arc<crate::hub::Hub>;

/// What the writer needs besides its connection pool.
struct WriterContext {
    published: Published,
    /// The NOTIFY payload of this node's commits, so that its own listener
    /// can ignore them (the writer already handed those events over).
    node: String,
    channel: String,
    peers: Arc<Peers>,
}

impl WriterContext {
    fn notify_sql(&self) -> String {
        self.peers
            .notifies
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("SELECT pg_notify('{}', '{}')", self.channel, self.node)
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
        let (url, tls) = tls::split_url(&opts.url)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            Error::invalid(
                "bad_database_url",
                format!("SHEPHERD_DATABASE_URL: {}", describe(&e)),
            )
        })?;
        config.ssl_mode(tls.driver_mode());
        let tls = tls.connector()?;
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
            let (client, conn) = config.connect(tls.clone()).await.map_err(map_err)?;
            let driver = tokio::spawn(conn);
            // `IF NOT EXISTS` does not cover a concurrent creator: of nodes
            // started together on a fresh schema, all but one get a unique
            // violation (or "duplicate schema") once the first commits. The
            // schema is there either way.
            if let Err(e) = client
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .await
            {
                let raced = e.code().is_some_and(|c| {
                    *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_SCHEMA
                });
                if !raced {
                    return Err(map_err(e));
                }
            }
            drop(client);
            let _ = driver.await;
            config.options(format!("-c search_path={schema}"));
        }
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
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
        let node = crate::ops::random_hex(8);
        let on_commit = published.wake.clone();
        let peers = Arc::new(Peers::default());
        let channel = notify_channel(opts.schema.as_deref());
        let writer = Arc::new(Writer {
            pool: pool.clone(),
            ctx: WriterContext {
                published,
                node: node.clone(),
                channel: channel.clone(),
                peers: peers.clone(),
            },
            slot: Arc::default(),
            queued: Default::default(),
            owed_notify: Notify::new(),
        });
        tokio::spawn(writer_loop(writer.clone(), rx));
        let delivery = DeliverySlot::new(tokio::sync::watch::Sender::new(None));
        // Named, so that operators can tell it from the pool's connections.
        let mut delivery_config = config.clone();
        delivery_config.application_name(format!(
            "{} events",
            config.get_application_name().unwrap_or("shepherd")
        ));
        tokio::spawn(listen_loop(
            Listener {
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
        tokio::spawn(announce_loop(pool.clone(), channel, node, shutdown));
        Ok(PgBackend {
            pool,
            jobs,
            peers,
            writer,
            delivery,
        })
    }

    /// What this node knows of other nodes on the same database.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// Runs `f` inside the node's shared write transaction (see module docs)
    /// and returns once it is committed.
    pub async fn write<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(PgDb) -> BoxFuture<'static, Result<T, Error>> + Send + 'static,
    {
        let (job, rx) = unit_job(f);
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
        F: FnOnce(PgDb) -> BoxFuture<'static, Result<T, Error>> + Send + 'static,
    {
        let (jobs, answers): (Vec<Job>, Vec<_>) = units.into_iter().map(unit_job).unzip();
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
        F: FnOnce(PgDb) -> BoxFuture<'static, Result<T, Error>> + Send + 'static,
    {
        let client = Arc::new(self.pool.get().await.map_err(pool_err)?);
        let mut open = OpenRead(Some(client.clone()));
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .map_err(map_err)?;
        let result = f(PgDb::new(Conn::Pooled(client.clone()))).await;
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
        F: FnOnce(PgDb) -> BoxFuture<'static, Result<T, Error>> + Send + 'static,
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
        f(PgDb::new(Conn::Own(client))).await
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

/// Other nodes hear of this node's commits at most this late. Sending a
/// NOTIFY with every commit costs the database about a sixth of a small
/// commit's work (it wakes every listening session), so a commit made
/// within this interval of the last notification leaves one owed, which
/// the writer sends when the interval is up.
const NOTIFY_INTERVAL: Duration = Duration::from_millis(5);

/// Runs the units queued while the writer was busy, as many as are queued
/// in one transaction each time, and sends owed NOTIFYs on time.
/// Wraps a unit of work as a writer job and the channel of its outcome.
fn unit_job<T, F>(f: F) -> (Job, oneshot::Receiver<Result<T, Error>>)
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
    (job, rx)
}

async fn writer_loop(writer: Arc<Writer>, mut rx: mpsc::UnboundedReceiver<Job>) {
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
    let mut control: Vec<Pending> = Vec::new();
    let mut control_error: Option<Error> = None;
    let mut send = |sql: String, control: &mut Vec<Pending>| match send_simple(client, sql) {
        Ok(Some(f)) => control.push(f),
        Ok(None) => {}
        Err(e) => {
            control_error.get_or_insert(e);
        }
    };
    let single = batch.len() == 1;
    // A lone unit begins its own transaction, and may need none (see
    // `PgDb::end_unit`); a NOTIFY needs one to ride on.
    let lazy_begin = single && !notify;
    if !lazy_begin {
        send(begin_sql(), &mut control);
    }
    let lone: Arc<LoneUnit> = Arc::default();
    let mut finishers = Vec::with_capacity(batch.len());
    let mut any_ok = false;
    for job in batch {
        if !single {
            send("SAVEPOINT unit".into(), &mut control);
        }
        let mut db = PgDb::new(client.clone());
        if single {
            // Nothing to roll back to: its answers can wait for the COMMIT's.
            db.lone = Some(lone.clone());
            db.unbegun = lazy_begin;
        }
        let appended = db.appended();
        let (ok, finish) = job(Ok(db)).await;
        if !single {
            let end = if ok {
                "RELEASE unit"
            } else {
                "ROLLBACK TO unit; RELEASE unit"
            };
            send(end.into(), &mut control);
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
        let end = if !any_ok {
            "ROLLBACK".to_owned()
        } else if notify {
            format!("{}; COMMIT", ctx.notify_sql())
        } else {
            "COMMIT".to_owned()
        };
        send(end, &mut control);
    }
    // A lone unit's own writes first: if one failed, that is the unit's
    // error, and the COMMIT behind it failed only because of it.
    let pending = std::mem::take(&mut *lone.pending.lock().unwrap_or_else(|p| p.into_inner()));
    let unit_outcome = settle(pending, None).await;
    let outcome = settle(control, control_error).await;
    match (unit_outcome, outcome) {
        (Ok(()), Ok(())) => {
            let mut events = Vec::new();
            for (ok, _, appended) in &finishers {
                if *ok {
                    let appended = appended.lock().unwrap_or_else(|p| p.into_inner());
                    events.extend(appended.iter().cloned());
                }
            }
            // Live subscribers hear of the commit before its callers do.
            if !events.is_empty() {
                events.sort_unstable_by_key(|e| e.seq);
                ctx.published.publish_committed(events);
            }
            for (_, finish, _) in finishers {
                finish(None);
            }
            // A lone unit that sent nothing committed nothing.
            any_ok && opened != Opened::Nothing
        }
        (Err(err), _) => {
            // Even after a lone autocommit statement: whatever state the
            // connection was in, it leaves this batch outside a transaction.
            let _ = client.batch_execute("ROLLBACK").await;
            for (_, finish, _) in finishers {
                finish(Some(err.clone()));
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

/// What the delivery connection's task needs.
struct Listener {
    config: tokio_postgres::Config,
    tls: tls::MakeRustls,
    channel: String,
    node: String,
    on_commit: Arc<Notify>,
    peers: Arc<Peers>,
    delivery: DeliverySlot,
}

/// Keeps the delivery connection up, LISTENing, and handed to the event
/// pump (reconnecting with backoff), and wakes the pump on every
/// notification (and after every reconnect, to catch up on whatever was
/// committed while it was away).
async fn listen_loop(l: Listener, shutdown: CancellationToken) {
    let own_announcement = format!("{ANNOUNCE_PREFIX}{}", l.node);
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut listened = false;
        let attempt = async {
            let (client, mut conn) = l.config.connect(l.tls.clone()).await?;
            // A task drives the connection (the pump's queries go through
            // it too) and hands on what the server sends unasked.
            let (tx, mut notes) = mpsc::unbounded_channel();
            let driver = tokio::spawn(async move {
                let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                while let Some(m) = messages.next().await {
                    let end = m.is_err();
                    if tx.send(m).is_err() || end {
                        break;
                    }
                }
            });
            // Dropping the wrapper stops the driver, which closes the connection.
            let client = Arc::new(ClientWrapper::new(client, driver));
            client
                .batch_execute(&format!("LISTEN {}", l.channel))
                .await?;
            listened = true;
            l.delivery.send_replace(Some(client.clone()));
            l.on_commit.notify_one();
            while let Some(m) = notes.recv().await {
                match m {
                    // This node's writer publishes its own commits.
                    Ok(AsyncMessage::Notification(n))
                        if n.payload() == l.node || n.payload() == own_announcement => {}
                    Ok(AsyncMessage::Notification(n))
                        if n.payload().starts_with(ANNOUNCE_PREFIX) =>
                    {
                        l.peers.heard()
                    }
                    Ok(AsyncMessage::Notification(_)) => {
                        l.peers.heard();
                        l.on_commit.notify_one()
                    }
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), tokio_postgres::Error>(())
        };
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => None,
            r = attempt => Some(r),
        };
        l.delivery.send_replace(None);
        let Some(outcome) = outcome else { return };
        if listened {
            // It was up: the first retry comes quickly.
            backoff = Duration::from_millis(100);
        }
        match outcome {
            Err(e) => {
                tracing::warn!(error = %describe(&e), "event delivery connection lost; reconnecting")
            }
            Ok(()) => tracing::warn!("event delivery connection closed; reconnecting"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Tells the other nodes on this database that this one is here (see
/// "Peers" in the module docs): at once, then every [`ANNOUNCE_INTERVAL`].
async fn announce_loop(pool: Pool, channel: String, node: String, shutdown: CancellationToken) {
    let sql = format!("SELECT pg_notify('{channel}', '{ANNOUNCE_PREFIX}{node}')");
    loop {
        match pool.get().await {
            Ok(client) => {
                if let Err(e) = client.batch_execute(&sql).await {
                    tracing::debug!(error = %map_err(e), "node announcement failed");
                }
            }
            Err(e) => tracing::debug!(error = %pool_err(e), "node announcement skipped"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(ANNOUNCE_INTERVAL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::Db;

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
        };
        let hub = Arc::new(crate::hub::Hub::new());
        let b = PgBackend::open(&opts, hub, shutdown.clone())
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
            || b.read(|mut db| Box::pin(async move { db.query(SQL, vec![Value::Int(0)]).await }));
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
        let read = || b.read(|mut db| Box::pin(async move { db.query(SQL, vec![]).await }));
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

    #[test]
    fn notify_channels_fit_and_separate_schemas() {
        assert_eq!(notify_channel(None), "shepherd_events");
        assert_eq!(notify_channel(Some("team_a")), "shepherd_events_team_a");
        let long = "s".repeat(60);
        let c = notify_channel(Some(&long));
        assert!(c.len() <= 63, "{c}");
        assert_ne!(c, notify_channel(Some(&"s".repeat(61))));
    }
}
