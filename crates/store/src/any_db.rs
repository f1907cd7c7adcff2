//! The one connection type every operation runs against.
//!
//! Operations (`log.rs`, `ops/`) are generic over [`Db`], but the store only
//! ever hands them an [`AnyDb`], which forwards each primitive to the backend
//! in use. So each operation is compiled once, not once per backend, and a
//! backend adds no code to the operations beyond its own primitives. The
//! cost is one `match` per statement, which is nothing beside the statement.

use shepherd_core::Error;

use crate::postgres::PgDb;
use crate::sql::{Appended, Db, Dialect, EventRow, Row, Value};
use crate::sqlite::SqliteDb;

/// A backend's connection, borrowed for one unit of work or one read.
pub enum AnyDb<'u> {
    Sqlite(&'u mut SqliteDb),
    Postgres(&'u mut PgDb),
}

/// Forwards a call to whichever backend the connection belongs to.
macro_rules! forward {
    ($self:expr, $db:ident => $call:expr) => {
        match $self {
            AnyDb::Sqlite($db) => $call,
            AnyDb::Postgres($db) => $call,
        }
    };
}

impl Db for AnyDb<'_> {
    async fn query(&mut self, sql: &str, params: Vec<Value>) -> Result<Vec<Row>, Error> {
        forward!(self, db => db.query(sql, params).await)
    }

    async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, Error> {
        forward!(self, db => db.execute(sql, params).await)
    }

    fn dialect(&self) -> Dialect {
        forward!(self, db => db.dialect())
    }

    fn defer(&mut self, sql: &str, params: Vec<Value>) {
        forward!(self, db => db.defer(sql, params))
    }

    async fn flush(&mut self) -> Result<(), Error> {
        forward!(self, db => db.flush().await)
    }

    async fn insert_event(&mut self, row: EventRow) -> Result<i64, Error> {
        forward!(self, db => db.insert_event(row).await)
    }

    fn defer_event(&mut self, row: EventRow) {
        forward!(self, db => db.defer_event(row))
    }

    fn trust_deferred_writes(&mut self) {
        forward!(self, db => db.trust_deferred_writes())
    }

    fn appended_later(&self) -> Option<Appended> {
        forward!(self, db => db.appended_later())
    }

    fn wrote(&mut self, key: String) {
        forward!(self, db => db.wrote(key))
    }

    fn read_was_prefetched(&self) -> bool {
        forward!(self, db => db.read_was_prefetched())
    }
}
