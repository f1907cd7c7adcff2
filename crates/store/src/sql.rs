//! The seam between domain operations and the two databases.
//!
//! Operations (in `ops/`) are written once against [`Db`], using portable SQL
//! with `$1, $2, …` placeholders and only types both databases agree on:
//! 64-bit integers, text and bytes. Each backend implements `Db` for its own
//! driver; the SQLite side rewrites `$N` to `?N`. Anything a backend does
//! differently (DDL, locking, notification) lives in that backend's module.

use std::future::Future;

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
pub type Appended = std::sync::Arc<std::sync::Mutex<Vec<shepherd_core::event::Event>>>;

/// A connection (inside a transaction when writing) that operations run against.
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

    /// Appends an event without waiting for its sequence number (deferred).
    /// A backend that publishes committed events itself records it here.
    fn defer_event(
        &mut self,
        now: shepherd_core::time::Millis,
        e: &shepherd_core::event::NewEvent,
    ) {
        self.defer(crate::log::INSERT_EVENT, crate::log::event_params(now, e));
    }

    /// A backend that learns the `seq`s of deferred events only from the
    /// database's answers returns where they will be once the unit commits;
    /// then callers need not wait for them inside the unit.
    fn appended_later(&self) -> Option<Appended> {
        None
    }

    /// Called after an event was appended with a known sequence number.
    fn note_event(
        &mut self,
        _seq: i64,
        _now: shepherd_core::time::Millis,
        _e: &shepherd_core::event::NewEvent,
    ) {
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

/// Error codes for database failures that are not the client's fault.
pub(crate) const DB_UNAVAILABLE: &str = "database_unavailable";
/// A uniqueness or foreign-key rule of the schema refused the write.
pub const CONSTRAINT_VIOLATION: &str = "constraint_violation";
