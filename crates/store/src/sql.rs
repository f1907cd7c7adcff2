//! The seam between domain operations and the two databases.
//!
//! Operations (in `ops/`) are written once against [`Db`], using portable SQL
//! with `$1, $2, …` placeholders and only types both databases agree on:
//! 64-bit integers, text and bytes. Each backend implements `Db` for its own
//! driver; the SQLite side rewrites `$N` to `?N`. Anything a backend does
//! differently (DDL, locking, notification) lives in that backend's module.
//!
//! This module also holds what both backends and the log share about the
//! `events` table's row ([`EventRow`], the insert statements), and what a
//! backend's writer reports upwards ([`CommitSink`]), so that no backend
//! depends on the event log, the hub or the operations.

use std::future::Future;

use shepherd_core::event::{Event, NewEvent};
use shepherd_core::time::Millis;
use shepherd_core::Error;

/// A value bound to or read from a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

/// Text as the databases store it: PostgreSQL cannot hold a NUL character
/// (it refuses the whole statement), so both backends store each one as
/// U+FFFD. An agent whose output contains a NUL still has its run recorded.
pub(crate) fn storable_text(v: &str) -> std::borrow::Cow<'_, str> {
    if v.contains('\0') {
        std::borrow::Cow::Owned(v.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(v as i64)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(v.clone())
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Blob(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        match v {
            Some(v) => v.into(),
            None => Value::Null,
        }
    }
}
impl From<&Option<String>> for Value {
    fn from(v: &Option<String>) -> Self {
        v.clone().into()
    }
}

/// Builds a `Vec<Value>` from anything convertible.
#[macro_export]
macro_rules! params {
    () => { Vec::<$crate::sql::Value>::new() };
    ($($v:expr),+ $(,)?) => { vec![$($crate::sql::Value::from($v)),+] };
}

/// One result row, read by column index.
#[derive(Debug, Clone, Default)]
pub struct Row(pub Vec<Value>);

fn bad_column(idx: usize, want: &str, got: &Value) -> Error {
    Error::internal(format!("column {idx}: expected {want}, found {got:?}"))
}

impl Row {
    fn at(&self, idx: usize) -> Result<&Value, Error> {
        self.0
            .get(idx)
            .ok_or_else(|| Error::internal(format!("column {idx} out of range")))
    }
    pub fn i64(&self, idx: usize) -> Result<i64, Error> {
        match self.at(idx)? {
            Value::Int(v) => Ok(*v),
            other => Err(bad_column(idx, "integer", other)),
        }
    }
    pub fn opt_i64(&self, idx: usize) -> Result<Option<i64>, Error> {
        match self.at(idx)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            other => Err(bad_column(idx, "integer", other)),
        }
    }
    pub fn bool(&self, idx: usize) -> Result<bool, Error> {
        Ok(self.i64(idx)? != 0)
    }
    pub fn string(&self, idx: usize) -> Result<String, Error> {
        match self.at(idx)? {
            Value::Text(v) => Ok(v.clone()),
            other => Err(bad_column(idx, "text", other)),
        }
    }
    pub fn opt_string(&self, idx: usize) -> Result<Option<String>, Error> {
        match self.at(idx)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            other => Err(bad_column(idx, "text", other)),
        }
    }
    pub fn opt_blob(&self, idx: usize) -> Result<Option<Vec<u8>>, Error> {
        match self.at(idx)? {
            Value::Null => Ok(None),
            Value::Blob(v) => Ok(Some(v.clone())),
            other => Err(bad_column(idx, "bytes", other)),
        }
    }
    /// Reads a text column holding one word of a vocabulary (a status, a
    /// purpose); a word outside it is an internal error, not a panic.
    pub fn word<T: std::str::FromStr<Err = String>>(&self, idx: usize) -> Result<T, Error> {
        self.string(idx)?
            .parse()
            .map_err(|e| Error::internal(format!("column {idx}: {e}")))
    }
    /// Parses a JSON text column; a bad document is an internal error, not a panic.
    pub fn json<T: serde::de::DeserializeOwned>(&self, idx: usize) -> Result<T, Error> {
        let s = self.string(idx)?;
        serde_json::from_str(&s)
            .map_err(|e| Error::internal(format!("column {idx}: bad JSON: {e}")))
    }
}

/// Which database a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// The events a unit of work appended, filled in as their INSERTs answer.
pub type Appended = std::sync::Arc<std::sync::Mutex<Vec<Event>>>;

/// One event as the `events` table stores it: the values of
/// [`INSERT_COLUMNS`], and the event itself, whose `seq` the backend fills
/// in once the database drew it (for publishing after the commit).
#[derive(Debug, Clone)]
pub struct EventRow {
    pub(crate) params: Vec<Value>,
    pub(crate) event: Event,
}

impl EventRow {
    pub(crate) fn new(now: Millis, e: &NewEvent) -> EventRow {
        // An event that names no actor is written for the one its unit of
        // work runs for (see `crate::actor`).
        let mut refs = e.refs.clone();
        if refs.actor.is_none() {
            refs.actor =
                Some(crate::actor::current().unwrap_or_else(|| crate::actor::SYSTEM.to_owned()));
        }
        let r = &refs;
        EventRow {
            params: crate::params![
                now,
                e.kind.as_str(),
                &r.agent_id,
                &r.worker_id,
                &r.task_id,
                &r.run_id,
                &r.channel_id,
                &r.conversation_id,
                &r.session_id,
                e.data.to_string(),
                &r.actor
            ],
            event: Event {
                seq: 0,
                ts: now,
                kind: e.kind.clone(),
                refs,
                data: e.data.clone(),
            },
        }
    }
}

/// The columns an event insert writes, in [`EventRow`] order.
pub(crate) const INSERT_COLUMNS: &str =
    "ts, type, agent_id, worker_id, task_id, run_id, channel_id, conversation_id, session_id, data, actor";

/// How many columns [`INSERT_COLUMNS`] names.
pub(crate) const EVENT_COLUMNS: usize = 11;

/// The insert of one event.
pub(crate) const INSERT_EVENT: &str = "INSERT INTO events (ts, type, agent_id, worker_id, \
    task_id, run_id, channel_id, conversation_id, session_id, data, actor) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// [`INSERT_EVENT`], answering with the `seq` drawn.
pub(crate) const INSERT_EVENT_RETURNING: &str =
    "INSERT INTO events (ts, type, agent_id, worker_id, \
    task_id, run_id, channel_id, conversation_id, session_id, data, actor) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING seq";

/// `n` rows of placeholders for [`EventRow`]s (`($1, …, $11), …`), each
/// placeholder followed by `cast` (its column's type), if given.
pub(crate) fn event_rows_sql(n: usize, casts: Option<&[&str; EVENT_COLUMNS]>) -> String {
    event_rows_sql_after(n, 0, casts)
}

/// [`event_rows_sql`] with placeholders numbered after the first `skip`.
pub(crate) fn event_rows_sql_after(
    n: usize,
    skip: usize,
    casts: Option<&[&str; EVENT_COLUMNS]>,
) -> String {
    use std::fmt::Write;
    let mut sql = String::with_capacity(n * 64);
    for i in 0..n {
        sql.push_str(if i == 0 { "(" } else { ", (" });
        for k in 0..EVENT_COLUMNS {
            let sep = if k == 0 { "" } else { ", " };
            let cast = casts.map_or("", |c| c[k]);
            let _ = write!(sql, "{sep}${}{cast}", skip + i * EVENT_COLUMNS + k + 1);
        }
        sql.push(')');
    }
    sql
}

/// `INSERT` of `n` events in one statement (placeholders `$1…$(11n)`).
pub(crate) fn insert_events_sql(n: usize) -> String {
    format!(
        "INSERT INTO events ({INSERT_COLUMNS}) VALUES {}",
        event_rows_sql(n, None)
    )
}

/// `$first, $first+1, …` for `n` parameters: an `IN (…)` list.
pub(crate) fn placeholder_list(first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The read a unit of work will make first, declared when it is queued, so
/// that a writer which runs it together with other units can send that
/// read for all of them at once, right after the transaction's start,
/// instead of one round trip per unit (PostgreSQL; SQLite ignores it).
///
/// `reads` names what the read's answer depends on and `writes` what the
/// unit may change (keys such as `task:T-1`, `worker:w-1`). A prefetched
/// answer is handed to a unit only if every unit before it in the
/// transaction declared its writes and none of them is among its reads:
/// then nothing that could change the answer ran in between (the writer
/// holds the event lock from the transaction's start, so no other writer
/// commits meanwhile). Otherwise, and whenever the unit's first statement
/// is not exactly this read, the unit reads for itself as usual.
#[derive(Debug, Clone)]
pub struct Prefetch {
    pub sql: String,
    pub params: Vec<Value>,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
}

impl Prefetch {
    /// Which prefetched reads of a transaction's units are still true when
    /// each unit runs (see [`Prefetch`]), in the units' order, going by
    /// what they declared; `None` is a unit that declared nothing (it may
    /// change anything).
    pub fn still_valid(units: &[Option<&Prefetch>]) -> Vec<bool> {
        let mut written = Written::default();
        units
            .iter()
            .map(|unit| {
                let valid = unit.is_some_and(|p| written.admits(p));
                written.record(*unit, &[]);
                valid
            })
            .collect()
    }
}

/// What the units run so far in a transaction may have changed.
#[derive(Debug, Default)]
pub struct Written {
    keys: std::collections::HashSet<String>,
    anything: bool,
}

impl Written {
    /// Whether `p`'s prefetched answer is still what it would read now.
    pub fn admits(&self, p: &Prefetch) -> bool {
        !self.anything && p.reads.iter().all(|k| !self.keys.contains(k))
    }

    /// A unit ran: what it declared (`None`: anything) and what it said it
    /// wrote besides ([`Db::wrote`]).
    pub fn record(&mut self, declared: Option<&Prefetch>, extra: &[String]) {
        match declared {
            None => self.anything = true,
            Some(p) => self.keys.extend(p.writes.iter().cloned()),
        }
        self.keys.extend(extra.iter().cloned());
    }
}

/// A connection (inside a transaction when writing) that operations run against.
///
/// Each backend implements it with its own driver, offering only
/// primitives: statements, deferred writes, and the insert of events.
/// Operations are generic over it but instantiated once, for
/// [`crate::any_db::AnyDb`], which dispatches to the backend in use.
///
/// Futures are `Send` so PostgreSQL operations can run on the tokio runtime;
/// the SQLite implementation completes every future on its first poll.
pub trait Db: Send {
    fn query(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send;
    fn execute(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> impl Future<Output = Result<u64, Error>> + Send;
    fn dialect(&self) -> Dialect;

    /// Queues a write whose result is not needed to go on. On PostgreSQL it
    /// is sent at once and pipelined with what follows (no round trip of its
    /// own); on SQLite it runs at once. Its error, if any, is returned by the
    /// next `query`, `execute` or `flush`, and the unit of work fails whole.
    fn defer(&mut self, sql: &str, params: Vec<Value>);

    /// Waits for every deferred write; returns the first error.
    fn flush(&mut self) -> impl Future<Output = Result<(), Error>> + Send;

    /// Appends an event and answers with its sequence number. The backend
    /// keeps the event (with that number) to publish once the unit commits.
    fn insert_event(&mut self, row: EventRow) -> impl Future<Output = Result<i64, Error>> + Send;

    /// Appends an event without waiting for its sequence number (deferred,
    /// like [`Db::defer`]); kept for publishing like [`Db::insert_event`].
    fn defer_event(&mut self, row: EventRow);

    /// Declares that this unit's deferred writes cannot fail for a reason
    /// of its own making: each one is guarded by what the unit read in this
    /// same transaction (under the writer's ordering), so only the database
    /// itself can refuse them. A backend may then go on to the next unit
    /// without waiting for their answers; if one does fail after all, the
    /// whole transaction is rolled back and every unit in it fails (nothing
    /// of it is committed). Call it only after the unit's checks passed.
    fn trust_deferred_writes(&mut self) {}

    /// The unit changed `key` (see [`Prefetch`]) beyond what it declared:
    /// units after it in the transaction must not run on a prefetched read
    /// of it. Backends that do not prefetch ignore it.
    fn wrote(&mut self, _key: String) {}

    /// Whether the unit's first read was answered from a prefetch, made at
    /// the transaction's start, rather than read just now.
    fn read_was_prefetched(&self) -> bool {
        false
    }

    /// A backend that learns the `seq`s of deferred events only from the
    /// database's answers returns where they will be once the unit commits;
    /// then callers need not wait for them inside the unit.
    fn appended_later(&self) -> Option<Appended> {
        None
    }

    /// The first row, if any.
    fn query_opt(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send {
        async move { Ok(self.query(sql, params).await?.into_iter().next()) }
    }
    /// Exactly one row.
    fn query_one(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> impl Future<Output = Result<Row, Error>> + Send {
        async move {
            self.query_opt(sql, params)
                .await?
                .ok_or_else(|| Error::internal("query returned no row"))
        }
    }
}

/// Where a backend's writer reports what it committed. The store's hub
/// implements it; a backend knows nothing else of delivery.
pub(crate) trait CommitSink: Send + Sync + 'static {
    /// The events of one commit, in `seq` order, called after the commit
    /// and before any of its callers hears the outcome.
    fn committed(&self, events: Vec<Event>);
    /// One write transaction: how many units it grouped and how long it took.
    fn batch(&self, units: usize, took: std::time::Duration);
    /// Another node committed (PostgreSQL): the log has news to read.
    fn wake(&self);
    /// Where the SQLite writer times its statements, if anywhere.
    fn statement_costs(&self) -> Option<&crate::statement_costs::StatementCosts> {
        None
    }
}

/// Error codes for database failures that are not the client's fault.
pub(crate) const DB_UNAVAILABLE: &str = "database_unavailable";

/// What the caller of a unit of work that panicked is told. The panic is a
/// bug in the unit; both writers contain it: what the unit wrote is rolled
/// back and the writer goes on serving the other callers.
pub(crate) fn unit_panicked() -> shepherd_core::Error {
    shepherd_core::Error::internal(
        "the write failed unexpectedly and was rolled back (see the server log)",
    )
}
/// A uniqueness or foreign-key rule of the schema refused the write.
pub const CONSTRAINT_VIOLATION: &str = "constraint_violation";

#[cfg(test)]
mod prefetch_tests {
    use super::Prefetch;

    fn unit(reads: &[&str], writes: &[&str]) -> Prefetch {
        Prefetch {
            sql: String::new(),
            params: Vec::new(),
            reads: reads.iter().map(|k| k.to_string()).collect(),
            writes: writes.iter().map(|k| k.to_string()).collect(),
        }
    }

    #[test]
    fn a_prefetched_read_holds_until_an_earlier_unit_may_have_changed_it() {
        let a = unit(&["task:A", "worker:1"], &["task:A", "worker:1", "load"]);
        let b = unit(&["task:B", "worker:2"], &["task:B", "worker:2", "load"]);
        let a_again = unit(&["task:A", "worker:3"], &["task:A", "worker:3"]);
        let reads_load = unit(&["task:C", "load"], &["task:C"]);
        let c = unit(&["task:C", "worker:4"], &["task:C", "worker:4"]);
        // Disjoint units all keep their reads; writes not read do not matter.
        assert_eq!(Prefetch::still_valid(&[Some(&a), Some(&b)]), [true, true]);
        // A unit after one that wrote what it reads reads for itself...
        assert_eq!(
            Prefetch::still_valid(&[Some(&a), Some(&b), Some(&a_again)]),
            [true, true, false]
        );
        assert_eq!(
            Prefetch::still_valid(&[Some(&a), Some(&reads_load)]),
            [true, false]
        );
        // ...and every unit after one that declared nothing does too.
        assert_eq!(
            Prefetch::still_valid(&[Some(&a), None, Some(&c)]),
            [true, false, false]
        );
        // An invalid unit still counts its writes.
        assert_eq!(
            Prefetch::still_valid(&[Some(&a), Some(&a_again), Some(&c), Some(&a)]),
            [true, false, true, false]
        );
    }
}
