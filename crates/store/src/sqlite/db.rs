//! A SQLite connection seen through the portable [`Db`] interface.
//!
//! SQLite runs in-process, so every primitive completes at once: a deferred
//! write simply runs, and its error is kept for the unit's next statement.
//! The connection belongs to the [`SqliteDb`] for its whole life (the writer
//! thread keeps one, the read pool a few), and per-unit state is reset by
//! [`SqliteDb::begin_unit`].

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Connection;
use shepherd_core::event::Event;
use shepherd_core::Error;

use crate::sql::{Db, Dialect, EventRow, Row, Value, CONSTRAINT_VIOLATION, DB_UNAVAILABLE};

pub(crate) fn map_err(e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode;
    if let rusqlite::Error::SqliteFailure(f, msg) = &e {
        let text = msg.clone().unwrap_or_else(|| f.to_string());
        return match f.code {
            ErrorCode::ConstraintViolation => Error::conflict(CONSTRAINT_VIOLATION, text),
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                Error::unavailable(DB_UNAVAILABLE, text)
            }
            ErrorCode::DiskFull | ErrorCode::CannotOpen | ErrorCode::ReadOnly => {
                Error::unavailable(DB_UNAVAILABLE, text)
            }
            _ => Error::internal(format!("sqlite: {text}")),
        };
    }
    Error::internal(format!("sqlite: {e}"))
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Text(v) => match crate::sql::storable_text(v) {
                std::borrow::Cow::Borrowed(v) => {
                    ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes()))
                }
                std::borrow::Cow::Owned(v) => ToSqlOutput::Owned(rusqlite::types::Value::Text(v)),
            },
            Value::Blob(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
        })
    }
}

/// Rewrites PostgreSQL-style `$N` placeholders to SQLite's `?N`.
fn translate(sql: &str) -> String {
    sql.replace('$', "?")
}

/// A SQLite connection and the state of the unit of work running on it.
pub struct SqliteDb {
    pub(super) conn: Connection,
    /// The first failure of a deferred write, reported at the next call.
    failed: Option<Error>,
    /// Events this unit appended, published by the writer once committed.
    events: Vec<Event>,
    /// How the unit shares its transaction (see [`UnitSavepoint`]).
    pub(super) savepoint: UnitSavepoint,
    /// The unit called [`Db::trust_deferred_writes`].
    trusted: bool,
    /// The writer's: where it times its statements when asked to.
    sink: Option<super::Published>,
}

/// The savepoint of a unit of work that shares its transaction with
/// others, opened lazily, as on PostgreSQL.
///
/// A unit that fails before it writes has nothing to undo, and a unit that
/// trusts its writes ([`Db::trust_deferred_writes`]) checked everything on
/// what it read, under the single writer, so only the database itself can
/// make those writes fail. Neither needs a savepoint, and a savepoint is
/// not free here: every page the unit changes is first copied into the
/// savepoint's journal (4 KiB each, in memory), and it costs two
/// statements. The hot path's units (claims, reports, step batches) are
/// all one or the other. The price: a unit that wrote without a savepoint
/// and then failed cannot be rolled back alone, so the writer rolls back
/// the whole transaction and tells every unit so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum UnitSavepoint {
    /// The unit has the transaction to itself: its failure rolls back all.
    #[default]
    Alone,
    /// It shares the transaction and has not written yet.
    NotYet,
    /// Its savepoint is open: the writer releases it or rolls back to it.
    Open,
    /// It trusted its writes and wrote without a savepoint.
    Bare,
}

impl UnitSavepoint {
    /// Before a statement of the unit that writes: opens its savepoint if
    /// it shares its transaction, has none yet and does not trust its writes.
    fn before_write(&mut self, conn: &Connection, trusted: bool) -> Result<(), Error> {
        if *self != UnitSavepoint::NotYet {
            return Ok(());
        }
        if trusted {
            *self = UnitSavepoint::Bare;
            return Ok(());
        }
        conn.prepare_cached("SAVEPOINT unit")
            .and_then(|mut s| s.execute([]))
            .map_err(map_err)?;
        *self = UnitSavepoint::Open;
        Ok(())
    }
}

impl SqliteDb {
    pub(super) fn new(conn: Connection) -> Self {
        SqliteDb {
            conn,
            failed: None,
            events: Vec::new(),
            savepoint: UnitSavepoint::Alone,
            trusted: false,
            sink: None,
        }
    }

    /// The writer's connection: its statements are timed while the
    /// store's statement tally is on (see `statement_costs`).
    pub(super) fn timed_by(mut self, sink: super::Published) -> Self {
        self.sink = Some(sink);
        self
    }

    fn timer(&self) -> Option<std::time::Instant> {
        self.sink.as_ref()?.statement_costs()?.started()
    }

    fn timed(&self, sql: &str, since: Option<std::time::Instant>) {
        if let (Some(since), Some(costs)) =
            (since, self.sink.as_ref().and_then(|s| s.statement_costs()))
        {
            costs.record(sql, since);
        }
    }

    /// Runs a transaction-control statement through the statement cache (it
    /// is run for every unit of work; parsing it each time shows in profiles).
    pub(super) fn control(&self, sql: &str) -> Result<(), rusqlite::Error> {
        let since = self.timer();
        let result = self.conn.prepare_cached(sql)?.execute([]).map(|_| ());
        self.timed(sql, since);
        result
    }

    /// Forgets what an earlier unit left (a deferred failure, its events,
    /// its trust); `shared` when the unit shares its transaction.
    pub(super) fn begin_unit(&mut self, shared: bool) {
        self.failed = None;
        self.events.clear();
        self.trusted = false;
        self.savepoint = if shared {
            UnitSavepoint::NotYet
        } else {
            UnitSavepoint::Alone
        };
    }

    /// Before a statement that writes: see [`UnitSavepoint::before_write`].
    fn before_write(&mut self) -> Result<(), Error> {
        self.savepoint.before_write(&self.conn, self.trusted)
    }

    /// The unit's deferred failure, if any: it fails the unit.
    pub(super) fn check(&mut self) -> Result<(), Error> {
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The events the unit appended, in `seq` order.
    pub(super) fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    fn run_query(&mut self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, Error> {
        let since = self.timer();
        let rows = self.run_query_untimed(sql, params);
        self.timed(sql, since);
        rows
    }

    fn run_query_untimed(&mut self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, Error> {
        let mut stmt = self.conn.prepare_cached(&translate(sql)).map_err(map_err)?;
        // `INSERT … RETURNING` and the like come through here too.
        if !stmt.readonly() {
            self.savepoint.before_write(&self.conn, self.trusted)?;
        }
        let cols = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(map_err)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(map_err)? {
            let mut vals = Vec::with_capacity(cols);
            for i in 0..cols {
                vals.push(match r.get_ref(i).map_err(map_err)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(v) => Value::Int(v),
                    ValueRef::Real(v) => Value::Int(v as i64),
                    ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Value::Blob(b.to_vec()),
                });
            }
            out.push(Row(vals));
        }
        Ok(out)
    }

    fn run_execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, Error> {
        let since = self.timer();
        let n = self.run_execute_untimed(sql, params);
        self.timed(sql, since);
        n
    }

    fn run_execute_untimed(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, Error> {
        self.before_write()?;
        let mut stmt = self.conn.prepare_cached(&translate(sql)).map_err(map_err)?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params.iter()))
            .map_err(map_err)?;
        Ok(n as u64)
    }

    /// Inserts an event; its `seq` is the row id SQLite drew.
    fn run_insert_event(&mut self, mut row: EventRow) -> Result<i64, Error> {
        self.run_execute(crate::sql::INSERT_EVENT, row.params)?;
        let seq = self.conn.last_insert_rowid();
        row.event.seq = seq;
        self.events.push(row.event);
        Ok(seq)
    }
}

impl Db for SqliteDb {
    async fn query(&mut self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, Error> {
        self.check()?;
        self.run_query(sql, params)
    }
    async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, Error> {
        self.check()?;
        self.run_execute(sql, params)
    }
    fn defer(&mut self, sql: &str, params: Vec<Value>) {
        if self.failed.is_none() {
            if let Err(e) = self.run_execute(sql, params) {
                self.failed = Some(e);
            }
        }
    }
    async fn flush(&mut self) -> Result<(), Error> {
        self.check()
    }
    async fn insert_event(&mut self, row: EventRow) -> Result<i64, Error> {
        self.check()?;
        self.run_insert_event(row)
    }
    fn defer_event(&mut self, row: EventRow) {
        if self.failed.is_none() {
            if let Err(e) = self.run_insert_event(row) {
                self.failed = Some(e);
            }
        }
    }
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }
    fn trust_deferred_writes(&mut self) {
        self.trusted = true;
    }
}
