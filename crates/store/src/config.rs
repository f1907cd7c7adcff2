//! Which database the store opens and how: [`StoreConfig`], the parsing of
//! `SHEPHERD_DATABASE_URL`, and the redaction of its secrets for log lines.

use std::path::PathBuf;

use shepherd_core::Error;

use crate::{Clock, SecretsKey, SyncMode};

/// Which database to open and how.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `sqlite://PATH`, `sqlite::memory:` is not supported (the pump and the
    /// readers need a file), or `postgres://…` / `postgresql://…`.
    pub url: String,
    pub sqlite_sync: SyncMode,
    /// PostgreSQL only: use this schema (created if missing) instead of `public`.
    pub pg_schema: Option<String>,
    pub pg_pool_size: usize,
    /// PostgreSQL only: analyse tables that outgrew their planner
    /// statistics, without waiting for autovacuum (on by default; see
    /// `postgres::statistics`). Off, the tables' statistics are autovacuum's
    /// alone, as a test of plans on a fresh database needs.
    pub pg_analyze_growing_tables: bool,
    /// What every operation takes as "now"; [`Clock::system`] by default.
    pub clock: Clock,
    /// The key stored secrets are sealed with (see `sealed`). `None` (the
    /// default, for tests and tools) keeps new ones in clear; the server
    /// always gives one.
    pub secrets_key: Option<SecretsKey>,
}

impl StoreConfig {
    pub fn new(url: impl Into<String>) -> Self {
        StoreConfig {
            url: url.into(),
            sqlite_sync: SyncMode::Normal,
            pg_schema: None,
            pg_pool_size: 16,
            pg_analyze_growing_tables: true,
            clock: Clock::system(),
            secrets_key: None,
        }
    }
}

/// What kind of database a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite(PathBuf),
    Postgres(String),
}

/// Parses `SHEPHERD_DATABASE_URL`.
pub fn parse_database_url(url: &str) -> Result<DatabaseUrl, Error> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(DatabaseUrl::Postgres(url.to_owned()));
    }
    if let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let path = rest.split('?').next().unwrap_or_default();
        if path.is_empty() || path == ":memory:" {
            return Err(Error::invalid(
                "bad_database_url",
                "SHEPHERD_DATABASE_URL: a SQLite URL needs a file path, e.g. sqlite://./shepherd-data/shepherd.db",
            ));
        }
        return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
    }
    Err(Error::invalid(
        "bad_database_url",
        format!("SHEPHERD_DATABASE_URL: unsupported scheme in {url:?}; use sqlite://PATH or postgres://…"),
    ))
}

/// A database URL fit for a log line: the password is hidden wherever a URL
/// can carry one (`user:pass@`, `?password=`, `&sslpassword=`), and so is
/// every value of a `key=value` connection string's secret keys.
pub fn redact_url(url: &str) -> String {
    const SECRET_KEYS: [&str; 3] = ["password", "sslpassword", "passfile"];
    let is_secret = |key: &str| SECRET_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k));
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match (base.find("://"), base.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &base[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &base[..s + 3], &creds[..c], &base[at..]),
                None => base.to_owned(),
            }
        }
        // A libpq key=value string: `host=h user=u password=secret`.
        _ if !base.contains("://") && base.contains('=') => base
            .split_whitespace()
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret(k) => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => base.to_owned(),
    };
    if let Some(q) = query {
        out.push('?');
        let params: Vec<String> = q
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret(k) => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        assert_eq!(
            parse_database_url("sqlite://./data/x.db").unwrap(),
            DatabaseUrl::Sqlite("./data/x.db".into())
        );
        assert!(matches!(
            parse_database_url("postgres://u@h/db"),
            Ok(DatabaseUrl::Postgres(_))
        ));
        assert_eq!(
            parse_database_url("mysql://x").unwrap_err().code,
            "bad_database_url"
        );
        assert_eq!(
            parse_database_url("sqlite::memory:").unwrap_err().code,
            "bad_database_url"
        );
        assert_eq!(
            redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
    }

    #[test]
    fn redacts_passwords_wherever_a_url_carries_them() {
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=secret&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("postgresql://u:p@h/db?SSLPASSWORD=k"),
            "postgresql://u:***@h/db?SSLPASSWORD=***"
        );
        assert_eq!(
            redact_url("host=h user=u password=secret dbname=d"),
            "host=h user=u password=*** dbname=d"
        );
        assert_eq!(redact_url("sqlite://./x.db"), "sqlite://./x.db");
        // TLS parameters are kept (they say how to connect), secrets are not.
        assert_eq!(
            redact_url(
                "postgres://u:pw@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&password=pw"
            ),
            "postgres://u:***@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&password=***"
        );
        for url in [
            "postgres://u:hunter2@h/db",
            "postgres://h/db?password=hunter2",
            "host=h password=hunter2",
        ] {
            assert!(!redact_url(url).contains("hunter2"), "{url}");
        }
    }
}
