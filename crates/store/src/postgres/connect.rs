//! Connecting: the database URL (with its TLS parameters, see `tls`), the
//! schema a deployment uses, the connection pool, and what driver errors
//! mean to the rest of Shepherd.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use shepherd_core::Error;
use tokio_postgres::error::SqlState;

use super::tls;
use crate::sql::{CONSTRAINT_VIOLATION, DB_UNAVAILABLE};

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct PgOptions {
    pub url: String,
    /// Schema to use instead of `public` (tests use one fresh schema each).
    pub schema: Option<String>,
    pub pool_size: usize,
    /// See `StoreConfig::pg_analyze_growing_tables`.
    pub analyze_growing_tables: bool,
}

/// Parses the URL (and its TLS parameters), creates the schema if one is
/// asked for, and builds the pool; every pooled connection, and the
/// returned configuration, uses that schema. Connects once only if it has
/// a schema to create: the pool connects when first used.
pub(crate) async fn connect(
    opts: &PgOptions,
) -> Result<(tokio_postgres::Config, tls::MakeRustls, Pool), Error> {
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
    let pool = pool(&config, &tls, opts.pool_size.max(2))?;
    Ok((config, tls, pool))
}

/// A pool of up to `size` connections to `config` (connected when first used).
pub(super) fn pool(
    config: &tokio_postgres::Config,
    tls: &tls::MakeRustls,
    size: usize,
) -> Result<Pool, Error> {
    let manager = Manager::from_config(
        config.clone(),
        tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(Duration::from_secs(10)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| Error::internal(format!("pool: {e}")))
}

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
        // Class 28, "invalid authorization specification": the server turned
        // the connection away (a wrong password, no client certificate, no
        // pg_hba.conf entry). The database is unusable as configured, as
        // when it cannot be reached, not a fault of the request.
        if code.code().starts_with("28") {
            return Error::unavailable(
                DB_UNAVAILABLE,
                format!(
                    "PostgreSQL refused authentication ({}): {}",
                    code.code(),
                    db.message()
                ),
            );
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
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
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
             sslrootcert=PATH, to the system's trust store with sslrootcert=system, or to a \
             public root if none is given; verify-full also checks that it names the host)",
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

pub(super) fn pool_err(e: deadpool_postgres::PoolError) -> Error {
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

pub(super) fn closed() -> Error {
    Error::unavailable(DB_UNAVAILABLE, "the store is shut down")
}
