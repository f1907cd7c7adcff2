//! A PostgreSQL connection seen through the portable `Db` interface.
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
//! A unit's deferred writes are held back and chained: consecutive writes to
//! different tables go out as one statement (all but the last as CTEs of
//! it), and if the unit's event insert comes next, the chain rides in front
//! of it too. A completion (task, run, run count, events) is one statement,
//! a grant (run, task, events) another. See [`WriteChain`] for why that is
//! the same as sending them one by one.
//!
//! Prepared statements live with their connection (deadpool's per-client
//! cache): a pooled connection prepares a statement once, whether the
//! writer or a reader uses it, and keeps it while the connection lives.
//! Every connection of a store has the same `search_path`, so a statement
//! prepared for one use is valid for all.

use std::sync::Arc;

use bytes::BytesMut;
use deadpool_postgres::ClientWrapper;
use futures::future::BoxFuture;
use shepherd_core::Error;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{IsNull, ToSql, Type};

use super::connect::map_err;
use super::writer::EVENT_LOCK;
use crate::sql::{Appended, Db, Dialect, EventRow, Row, Value};

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

pub(super) type Pending = BoxFuture<'static, Result<(), Error>>;

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

/// Reads the answer of a statement whose request is already on the wire
/// on a task of its own, and returns a future of its outcome.
///
/// Why: tokio-postgres hands each request's answer over through a channel
/// that holds two chunks of messages, and stops reading the connection
/// while one is full. An answer that arrives in more chunks than that (an
/// error is flushed on its own, before the ReadyForQuery behind it) and
/// whose future nobody polls yet would then stall every answer after it,
/// and a unit waiting for a later statement would wait forever, holding
/// the event lock. Reading each answer as it comes keeps the connection
/// moving whatever order the answers are awaited in. Only a request that
/// has gone out whole may be detached: the task sends nothing.
fn detach(fut: Pending) -> Pending {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let task = handle.spawn(fut);
            Box::pin(async move {
                task.await.unwrap_or_else(|e| {
                    Err(Error::internal(format!(
                        "reading a statement's answer failed: {e}"
                    )))
                })
            })
        }
        Err(_) => fut,
    }
}

/// Starts a simple-protocol statement (transaction control) in order.
pub(super) fn send_simple(client: &Conn, sql: String) -> Result<Option<Pending>, Error> {
    let client = client.clone();
    // `batch_execute` writes its whole request on the first poll.
    Ok(kick(Box::pin(async move {
        client.batch_execute(&sql).await.map_err(map_err)
    }))?
    .map(detach))
}

/// Waits for started statements; returns the first error.
pub(super) async fn settle(pending: Vec<Pending>, mut first: Option<Error>) -> Result<(), Error> {
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
pub(super) enum Conn {
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
    event_records: Vec<shepherd_core::event::Event>,
    /// Every event this unit appended, with its `seq`, once its INSERT answered.
    appended: Appended,
    /// Set by the writer when this unit is alone in its transaction: the
    /// unit's final flush does not wait, and the writer collects its
    /// answers together with the COMMIT's (one round trip for the lot).
    pub(super) lone: Option<Arc<LoneUnit>>,
    /// The writer left the transaction's start to this (lone) unit: BEGIN
    /// and the event lock go out just before its first statement, or, if
    /// its only statement is its event insert, the lock is taken inside
    /// that insert and it commits on its own (see [`PgDb::end_unit`]).
    pub(super) unbegun: bool,
    /// Set by the writer when this unit shares its transaction with
    /// others: where a unit that trusts its deferred writes
    /// ([`Db::trust_deferred_writes`]) leaves their answers, which the writer
    /// collects with the COMMIT's instead of the unit waiting for them.
    pub(super) shared: Option<Arc<LoneUnit>>,
    /// The unit called [`Db::trust_deferred_writes`].
    trusted: bool,
    /// The unit's deferred writes not sent yet: they go out as one
    /// statement, in front of the events' INSERT if that comes next, one
    /// answer instead of several. Anything else that goes out sends them
    /// first, so the order on the wire is unchanged.
    held: Option<WriteChain>,
    /// The answer to the read this unit declared it would make first
    /// ([`crate::sql::Prefetch`]), read by the writer together with the
    /// other units' at the transaction's start. Handed out if the unit's
    /// first statement is exactly that read; dropped at any other.
    pub(super) prefetched: Option<Prefetched>,
    /// The unit's first read was answered from [`PgDb::prefetched`].
    read_was_prefetched: bool,
    /// What the unit said it changed beyond what it declared
    /// ([`Db::wrote`]), for the writer to weigh the next units' prefetches.
    wrote: Arc<std::sync::Mutex<Vec<String>>>,
    /// Set by the writer for a unit that shares its transaction: the
    /// statement that opens the unit's savepoint, sent just before its
    /// first write unless the unit trusts its writes by then (see
    /// [`UnitTrace`]).
    pub(super) savepoint: Option<String>,
    /// What the writer needs to know of how the unit went.
    trace: Arc<UnitTrace>,
}

/// What a unit sharing its transaction did, for the writer to end it.
///
/// Savepoints are opened lazily. A unit that fails before it writes has
/// nothing to undo, and a unit that trusts its writes
/// ([`Db::trust_deferred_writes`]) needs no savepoint at all: its checks
/// passed on what it read, so it can only fail if the database does. Most
/// units of the hot path (claims, reports) are one or the other, and each
/// savepoint costs the database a subtransaction and the wire a message.
/// The price: a unit that has no savepoint and fails in the database, or
/// fails after its writes went out, cannot be rolled back alone, so the
/// whole transaction is (as when a trusted write fails).
#[derive(Debug, Default)]
pub(super) struct UnitTrace {
    /// The unit's savepoint went out: the writer releases it, or rolls
    /// the unit back to it.
    pub(super) savepoint: std::sync::atomic::AtomicBool,
    /// A write of the unit went out with no savepoint before it.
    pub(super) bare_write: std::sync::atomic::AtomicBool,
    /// A statement of the unit failed in the database, which aborts the
    /// transaction from there on.
    pub(super) failed_in_db: std::sync::atomic::AtomicBool,
}

impl UnitTrace {
    fn get(flag: &std::sync::atomic::AtomicBool) -> bool {
        flag.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn set(flag: &std::sync::atomic::AtomicBool) {
        flag.store(true, std::sync::atomic::Ordering::Relaxed)
    }
    /// Whether the unit has a savepoint to release or roll back to.
    pub(super) fn has_savepoint(&self) -> bool {
        Self::get(&self.savepoint)
    }
    /// The unit panicked part-way: what it sent, and whether that
    /// succeeded, is unknown. Only its savepoint, if it has one, or
    /// rolling back everything undoes it.
    pub(super) fn panicked(&self) {
        Self::set(&self.bare_write)
    }
    /// Whether a failure of the unit left writes, or an aborted
    /// transaction, that only rolling back everything can undo.
    pub(super) fn failure_spreads(&self) -> bool {
        !self.has_savepoint() && (Self::get(&self.bare_write) || Self::get(&self.failed_in_db))
    }
}

/// A declared read's answer, waiting for the unit's first statement.
pub(super) struct Prefetched {
    pub(super) sql: String,
    pub(super) params: Vec<Value>,
    pub(super) rows: Vec<Row>,
    /// The writer's count of answers handed out.
    pub(super) hits: Arc<std::sync::atomic::AtomicU64>,
}

/// Whether a deferred write can be held in a [`WriteChain`]: a plain
/// UPDATE or INSERT (the statements that take a WITH of their own, or
/// return rows, stay on their own).
fn combinable(sql: &str) -> bool {
    (sql.starts_with("UPDATE ") || sql.starts_with("INSERT INTO "))
        && !sql.contains("RETURNING")
        && !sql.contains(';')
}

/// The table a [`combinable`] write changes.
fn target_table(sql: &str) -> &str {
    let rest = sql
        .strip_prefix("INSERT INTO ")
        .or_else(|| sql.strip_prefix("UPDATE "))
        .unwrap_or(sql);
    rest.split([' ', '(']).next().unwrap_or(rest)
}

/// Whether a write reads nothing but the rows of its own table: no
/// subquery, no `FROM` list of other tables.
fn reads_only_its_table(sql: &str) -> bool {
    !sql.contains("SELECT") && !sql.contains(" FROM ")
}

/// Deferred writes held back to go out as one statement: every write but
/// the last becomes a CTE (`WITH w0 AS (…), w1 AS (…) <last>`), or all of
/// them CTEs of the unit's event insert. PostgreSQL runs a statement's
/// data-modifying CTEs on one snapshot, in no fixed order, so a write joins
/// the chain only when that cannot differ from running the writes one after
/// another:
/// - no two writes of a chain change the same table (a second write to a
///   table sends the chain first), so none changes a row another changed;
/// - every write after the first reads nothing but its own table
///   ([`reads_only_its_table`]), so none reads what an earlier one wrote.
///   (The first may read anything: nothing before it in the chain wrote.)
///
/// Foreign keys are checked at the end of the statement, after every write
/// of it, as they would be after the last of separate statements. A failure
/// fails the whole statement, and with it the unit, as the first failing
/// write of separate statements would.
struct WriteChain {
    /// Each write's text, its `$N` placeholders already shifted past the
    /// parameters of the writes before it.
    writes: Vec<String>,
    params: Vec<Value>,
    tables: Vec<String>,
}

impl WriteChain {
    fn new(sql: &str, params: Vec<Value>) -> Self {
        WriteChain {
            writes: vec![sql.to_owned()],
            params,
            tables: vec![target_table(sql).to_owned()],
        }
    }

    /// Whether `sql` may join the chain (see [`WriteChain`]).
    fn admits(&self, sql: &str) -> bool {
        reads_only_its_table(sql) && !self.tables.iter().any(|t| t == target_table(sql))
    }

    fn push(&mut self, sql: &str, params: Vec<Value>) {
        self.writes.push(shift_placeholders(sql, self.params.len()));
        self.tables.push(target_table(sql).to_owned());
        self.params.extend(params);
    }

    /// `WITH w0 AS (…), … ` for every write but the last when `all` is
    /// false, for every write when it is true (the events' INSERT follows).
    fn ctes(&self, all: bool) -> String {
        let n = if all {
            self.writes.len()
        } else {
            self.writes.len() - 1
        };
        if n == 0 {
            return String::new();
        }
        let parts: Vec<String> = self.writes[..n]
            .iter()
            .enumerate()
            .map(|(i, w)| format!("w{i} AS ({w})"))
            .collect();
        format!("WITH {} ", parts.join(", "))
    }

    /// The chain as one statement of its own.
    fn statement(self) -> (String, Vec<Value>) {
        let sql = format!("{}{}", self.ctes(false), self.writes[self.writes.len() - 1]);
        (sql, self.params)
    }
}

/// `sql` with every `$N` placeholder renumbered `$N+by`. Our statements
/// have no dollar-quoted strings, and no `$` inside their literals.
fn shift_placeholders(sql: &str, by: usize) -> String {
    if by == 0 {
        return sql.to_owned();
    }
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut n = String::new();
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            n.push(d);
        }
        match n.parse::<usize>() {
            Ok(k) => out.push_str(&(k + by).to_string()),
            Err(_) => out.push_str(&n),
        }
    }
    out
}

/// What the writer shares with a unit that is alone in its transaction.
#[derive(Default)]
pub(super) struct LoneUnit {
    /// Answers the unit did not wait for.
    pub(super) pending: std::sync::Mutex<Vec<Pending>>,
    /// What the unit opened, if the writer left that to it.
    opened: std::sync::Mutex<Opened>,
}

/// What a lazily begun unit put on the wire.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opened {
    /// No statement at all: there is nothing to commit.
    #[default]
    Nothing,
    /// A transaction, which the writer commits or rolls back.
    Transaction,
    /// One statement that committed on its own.
    Autocommit,
}

impl LoneUnit {
    pub(super) fn opened(&self) -> Opened {
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
pub(super) fn begin_sql() -> String {
    format!("BEGIN; SELECT pg_advisory_xact_lock({EVENT_LOCK})")
}

/// The insert of `n` events as one statement that takes the event lock
/// itself, before any `seq` is drawn: the lock comes from a materialised
/// CTE that every inserted row is joined with, so no row (and no identity
/// value) exists before the lock is held; autocommit holds it to the commit.
fn autocommit_events_sql(n: usize) -> String {
    const CASTS: [&str; crate::sql::EVENT_COLUMNS] = [
        "::bigint", "::text", "::text", "::text", "::text", "::text", "::text", "::text", "::text",
        "::text", "::text",
    ];
    format!(
        "WITH ordering AS MATERIALIZED (SELECT pg_advisory_xact_lock({EVENT_LOCK})) \
         INSERT INTO events ({cols}) SELECT v.* FROM ordering, (VALUES {rows}) AS v ({cols}) \
         RETURNING seq",
        cols = crate::sql::INSERT_COLUMNS,
        rows = crate::sql::event_rows_sql(n, Some(&CASTS)),
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

/// Sends every read of `reads` at once (tokio-postgres writes requests in
/// the order they are first polled, so they go out back to back) and
/// returns their answers in the same places. The first failure fails the
/// lot: the caller then lets each unit read for itself.
pub(super) async fn prefetch_reads(
    client: &Conn,
    reads: &[Option<&crate::sql::Prefetch>],
) -> Result<Vec<Option<Vec<Row>>>, Error> {
    let mut statements = Vec::with_capacity(reads.len());
    for read in reads {
        statements.push(match read {
            Some(p) => Some(prepare(client, &p.sql).await?),
            None => None,
        });
    }
    let queries = reads
        .iter()
        .zip(&statements)
        .map(|(read, stmt)| async move {
            let (Some(p), Some(stmt)) = (read, stmt) else {
                return Ok(None);
            };
            let refs: Vec<&(dyn ToSql + Sync)> =
                p.params.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            let rows = client
                .query(stmt, &refs)
                .await
                .map_err(|e| stmt_err(client, e))?;
            rows.iter()
                .map(convert_row)
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        });
    futures::future::join_all(queries)
        .await
        .into_iter()
        .collect()
}

impl PgDb {
    pub(super) fn new(client: Conn) -> Self {
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
            shared: None,
            trusted: false,
            held: None,
            prefetched: None,
            read_was_prefetched: false,
            wrote: Arc::default(),
            savepoint: None,
            trace: Arc::default(),
        }
    }

    /// How the unit went, for the writer (see [`UnitTrace`]).
    pub(super) fn trace(&self) -> Arc<UnitTrace> {
        self.trace.clone()
    }

    /// Before a statement that writes: opens the unit's savepoint if the
    /// writer asked for one and the unit does not trust its writes.
    fn before_write(&mut self) {
        let Some(sql) = self.savepoint.take() else {
            return;
        };
        if self.trusted {
            UnitTrace::set(&self.trace.bare_write);
            return;
        }
        // Nothing of the unit is queued behind a barrier yet (only writes
        // raise one, and this is the first), so this goes out in order.
        match send_simple(&self.client, sql) {
            Ok(Some(f)) => self.pending.push(f),
            Ok(None) => {}
            Err(e) => self.failed = Some(e),
        }
        UnitTrace::set(&self.trace.savepoint);
    }

    /// Ends a unit of work that returned `Ok`: its deferred writes must
    /// succeed too. A unit alone in its transaction, or one that trusts its
    /// writes and shares the transaction, hands them to the writer, which
    /// waits for them together with the COMMIT. Any other unit waits for
    /// them here, so that the writer knows whether to release its savepoint
    /// or roll it back.
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
        self.release_held();
        let later = match (&self.lone, &self.shared) {
            (Some(lone), _) => Some(lone),
            (None, Some(shared)) if self.trusted => Some(shared),
            _ => None,
        };
        match later.map(|l| &l.pending) {
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
    /// Where the unit's [`Db::wrote`] keys collect.
    pub(super) fn wrote_keys(&self) -> Arc<std::sync::Mutex<Vec<String>>> {
        self.wrote.clone()
    }

    pub fn appended(&self) -> Appended {
        self.appended.clone()
    }

    /// Sends BEGIN and the event lock if the writer left them to this unit
    /// and they have not gone out: before the unit's first statement.
    fn open(&mut self) {
        // A statement went out before the declared read: that read's
        // prefetched answer may no longer be what it would see.
        self.prefetched = None;
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
        self.release_held();
        self.barrier = false;
        let settled = settle(std::mem::take(&mut self.pending), self.failed.take()).await;
        if settled.is_err() {
            UnitTrace::set(&self.trace.failed_in_db);
        }
        settled
    }

    /// Sends the buffered events as one statement (pipelined); their `seq`s
    /// are recorded in [`PgDb::appended`] when the answer arrives.
    fn send_events(&mut self) {
        static SQL: EventSql = EventSql::new();
        self.send_events_with(&SQL, |n| {
            format!("{} RETURNING seq", crate::sql::insert_events_sql(n))
        });
    }

    /// [`PgDb::send_events`] with the statement `sql(n)` for `n` events.
    fn send_events_with(&mut self, cache: &'static EventSql, sql: fn(usize) -> String) {
        if self.events.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.events);
        let mut records = std::mem::take(&mut self.event_records);
        let (sql, mut params) = match self.held.take() {
            // The held writes ride in front, as CTEs: one statement.
            Some(chain) => {
                let insert = format!(
                    "{}INSERT INTO events ({}) VALUES {} RETURNING seq",
                    chain.ctes(true),
                    crate::sql::INSERT_COLUMNS,
                    crate::sql::event_rows_sql_after(rows.len(), chain.params.len(), None)
                );
                (std::borrow::Cow::Owned(insert), chain.params)
            }
            None => (cache.get(rows.len(), sql), Vec::new()),
        };
        params.extend(rows.into_iter().flatten());
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
        self.send_now(&sql, params, Some(on_rows));
    }

    /// Sends the held writes, if any, as one statement.
    fn release_held(&mut self) {
        if let Some(chain) = self.held.take() {
            let (sql, params) = chain.statement();
            self.send_now(&sql, params, None);
        }
    }

    /// Before a statement whose answer is needed now: anything queued behind
    /// a barrier must go first, and an earlier failure ends the unit.
    async fn ready(&mut self) -> Result<(), Error> {
        self.send_events();
        self.release_held();
        if self.barrier || self.failed.is_some() {
            self.settle().await?;
        }
        Ok(())
    }

    /// After a failed statement: the first error of the unit is the real cause
    /// (an aborted transaction refuses everything after it).
    async fn first_error(&mut self, e: Error) -> Error {
        UnitTrace::set(&self.trace.failed_in_db);
        self.settle().await.err().unwrap_or(e)
    }

    /// Sends a write now if its statement is prepared (else queues it behind
    /// a barrier); `on_rows` receives the rows it returns.
    fn defer_inner(&mut self, sql: &str, params: Vec<Value>, on_rows: Option<OnRows>) {
        if self.failed.is_some() {
            return;
        }
        // Opened now, so that a lone unit's held write is known to need a
        // transaction (see `end_unit`).
        self.open();
        if on_rows.is_none() && combinable(sql) {
            match &mut self.held {
                Some(chain) if chain.admits(sql) => chain.push(sql, params),
                _ => {
                    self.release_held();
                    self.held = Some(WriteChain::new(sql, params));
                }
            }
            return;
        }
        self.release_held();
        self.send_now(sql, params, on_rows);
    }

    /// Sends a write now if its statement is prepared (else queues it behind
    /// a barrier); `on_rows` receives the rows it returns.
    fn send_now(&mut self, sql: &str, params: Vec<Value>, on_rows: Option<OnRows>) {
        if self.failed.is_some() {
            return;
        }
        self.open();
        self.before_write();
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
                if sent.load(std::sync::atomic::Ordering::Relaxed) {
                    // The write is on the wire: only its answer is left.
                    self.pending.push(detach(f))
                } else {
                    // Polled again only in its turn (see `settle`).
                    self.barrier = true;
                    self.pending.push(f)
                }
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
        if let Some(p) = self.prefetched.take() {
            if p.sql == sql && p.params == params {
                p.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.read_was_prefetched = true;
                return Ok(p.rows);
            }
        }
        self.ready().await?;
        self.open();
        // `INSERT … RETURNING` and the like come through here too.
        if !sql.starts_with("SELECT ") {
            self.before_write();
        }
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
        self.before_write();
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

    async fn insert_event(&mut self, mut row: EventRow) -> Result<i64, Error> {
        let seq = self
            .query_one(crate::sql::INSERT_EVENT_RETURNING, row.params)
            .await?
            .i64(0)?;
        row.event.seq = seq;
        self.appended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(row.event);
        Ok(seq)
    }

    fn defer_event(&mut self, row: EventRow) {
        self.prefetched = None;
        if self.failed.is_none() {
            self.events.push(row.params);
            self.event_records.push(row.event);
        }
    }

    fn trust_deferred_writes(&mut self) {
        self.trusted = true;
    }

    fn appended_later(&self) -> Option<Appended> {
        Some(self.appended.clone())
    }

    fn wrote(&mut self, key: String) {
        self.wrote
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(key);
    }

    fn read_was_prefetched(&self) -> bool {
        self.read_was_prefetched
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params;

    #[test]
    fn placeholders_shift_past_the_writes_before() {
        assert_eq!(
            shift_placeholders("UPDATE t SET a = $2, b = $10 WHERE id = $1", 3),
            "UPDATE t SET a = $5, b = $13 WHERE id = $4"
        );
        assert_eq!(
            shift_placeholders("UPDATE t SET a = $1", 0),
            "UPDATE t SET a = $1"
        );
        // A `$` not followed by digits is kept as it is.
        assert_eq!(
            shift_placeholders("SELECT '$' || $1", 1),
            "SELECT '$' || $2"
        );
    }

    #[test]
    fn a_chain_holds_one_write_per_table_and_later_writes_read_only_their_own() {
        let upd_task = "UPDATE tasks SET state = $2 WHERE id = $1";
        let upd_run = "UPDATE runs SET status = $2 WHERE id = $1";
        let count = "INSERT INTO run_counts (agent_id, n) VALUES ($1, 1) \
                     ON CONFLICT (agent_id) DO UPDATE SET n = run_counts.n + 1";
        let reading = "UPDATE workers SET n = (SELECT COUNT(*) FROM runs) WHERE id = $1";
        assert_eq!(target_table(upd_task), "tasks");
        assert_eq!(target_table(count), "run_counts");
        assert_eq!(target_table("INSERT INTO runs(id) VALUES ($1)"), "runs");

        let mut chain = WriteChain::new(upd_task, params!["T", "done"]);
        assert!(chain.admits(upd_run));
        chain.push(upd_run, params!["R", "done"]);
        assert!(chain.admits(count));
        chain.push(count, params!["a"]);
        // A second write to a table already in the chain, and a write that
        // reads another table, must go out after it instead.
        assert!(!chain.admits("UPDATE tasks SET updated_at = $2 WHERE id = $1"));
        assert!(!chain.admits(reading));
        // The first write of a chain may read what it likes.
        let _ = WriteChain::new(reading, params!["w"]);

        assert_eq!(
            chain.ctes(true),
            "WITH w0 AS (UPDATE tasks SET state = $2 WHERE id = $1), \
             w1 AS (UPDATE runs SET status = $4 WHERE id = $3), \
             w2 AS (INSERT INTO run_counts (agent_id, n) VALUES ($5, 1) \
             ON CONFLICT (agent_id) DO UPDATE SET n = run_counts.n + 1) "
        );
        let (sql, params) = chain.statement();
        assert!(sql.starts_with("WITH w0 AS (UPDATE tasks"), "{sql}");
        assert!(sql.ends_with(", w1 AS (UPDATE runs SET status = $4 WHERE id = $3) INSERT INTO run_counts (agent_id, n) VALUES ($5, 1) ON CONFLICT (agent_id) DO UPDATE SET n = run_counts.n + 1"), "{sql}");
        assert_eq!(params.len(), 5);
        // A chain of one is the write itself.
        let (sql, _) = WriteChain::new(upd_task, params!["T", "x"]).statement();
        assert_eq!(sql, upd_task);
    }

    #[test]
    fn only_plain_writes_are_held() {
        assert!(combinable("UPDATE tasks SET a = $1"));
        assert!(combinable("INSERT INTO runs (id) VALUES ($1)"));
        assert!(!combinable(
            "INSERT INTO runs (id) VALUES ($1) RETURNING id"
        ));
        assert!(!combinable("DELETE FROM runs WHERE id = $1"));
        assert!(!combinable("WITH x AS (SELECT 1) UPDATE t SET a = 1"));
        assert!(!combinable("UPDATE t SET a = 1; UPDATE u SET b = 2"));
    }
}
