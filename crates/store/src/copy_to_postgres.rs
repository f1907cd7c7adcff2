//! Copying a SQLite store into a PostgreSQL one (`shepherd migrate-store`):
//! every table, every row, events with their sequence numbers, so that a
//! user who outgrows SQLite keeps every run and every client's cursor.
//!
//! Both databases are first brought to this build's schema by opening them
//! as stores; the tables and columns copied are PostgreSQL's (the two
//! backends' migrations keep the same tables and column names), in an
//! order where every referenced table comes first. Rows go in batches, in
//! SQLite's rowid order, each batch in one PostgreSQL transaction together
//! with the table's progress mark (`meta`: `migrate_store.rowid.<table>`),
//! so an interrupted copy resumes after the last committed batch, and a
//! batch copied twice changes nothing (rows are upserted by primary key).
//! At the end the identity sequence is moved past the copied `seq`s, and
//! every table is verified: the same row count and the same SHA-256 of its
//! rows in primary-key order on both sides.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use futures::TryStreamExt;
use rusqlite::types::ValueRef;
use sha2::{Digest, Sha256};
use shepherd_core::Error;
use tokio_postgres::types::ToSql;

use crate::postgres::connect::{connect, map_err};
use crate::postgres::PgOptions;
use crate::sql::Value;
use crate::{Store, StoreConfig};

/// Where the copy stands, for a progress display.
#[derive(Debug, Clone)]
pub enum CopyProgress {
    /// A table's copy starts (or resumes): rows in the source, rows already copied.
    Table {
        table: String,
        total: u64,
        done: u64,
    },
    /// Rows of the current table copied so far.
    Rows { table: String, done: u64 },
    /// Verification of the copy starts.
    Verifying,
}

/// One table as copied and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCopy {
    pub table: String,
    pub rows: u64,
    /// SHA-256 of the table's rows in primary-key order, equal on both sides.
    pub checksum: String,
}

/// Keys of `meta` that are the copy's own bookkeeping, not the store's.
const MARK: &str = "migrate_store.";
/// Tables that must be empty in a destination that is not a copy's resume.
const MUST_BE_EMPTY: &[&str] = &[
    "tasks",
    "runs",
    "events",
    "workers",
    "conversations",
    "sessions",
];
/// PostgreSQL takes at most 65535 parameters a statement.
const MAX_PARAMS: usize = 60_000;

struct Column {
    name: String,
    data_type: String,
    identity: bool,
}

struct Table {
    name: String,
    columns: Vec<Column>,
    primary_key: Vec<String>,
}

fn copy_error(message: impl Into<String>) -> Error {
    Error::invalid("migrate_store_failed", message)
}

fn sqlite_err(e: rusqlite::Error) -> Error {
    copy_error(format!("reading the SQLite database: {e}"))
}

/// Copies the SQLite database at `from` into the PostgreSQL store `to`
/// (its URL and schema), `batch` rows at a time; returns every table's
/// verified row count and checksum.
pub async fn copy_sqlite_to_postgres(
    from: &Path,
    to: &StoreConfig,
    batch: usize,
    mut progress: impl FnMut(CopyProgress),
) -> Result<Vec<TableCopy>, Error> {
    if !from.exists() {
        return Err(Error::not_found(
            "database_not_found",
            format!("no SQLite database at {}", from.display()),
        ));
    }
    // Both at this build's schema.
    Store::open(&StoreConfig::new(format!("sqlite://{}", from.display())))
        .await?
        .close();
    Store::open(to).await?.close();

    let (_, _, pool) = connect(&PgOptions {
        url: to.url.clone(),
        schema: to.pg_schema.clone(),
        pool_size: 2,
        analyze_growing_tables: false,
    })
    .await?;
    let mut pg = pool
        .get()
        .await
        .map_err(|e| copy_error(format!("connecting to PostgreSQL: {e}")))?;
    let source = rusqlite::Connection::open_with_flags(
        from,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sqlite_err)?;
    source
        .busy_timeout(std::time::Duration::from_secs(30))
        .map_err(sqlite_err)?;

    let tables = tables_in_order(&pg).await?;
    for t in &tables {
        check_columns(&source, t)?;
    }
    let identity = std::fs::canonicalize(from)
        .unwrap_or_else(|_| from.to_owned())
        .display()
        .to_string();
    start_or_resume(&pg, &identity).await?;

    for t in &tables {
        copy_table(&source, &mut pg, t, batch.max(1), &mut progress).await?;
    }
    for t in &tables {
        for c in t.columns.iter().filter(|c| c.identity) {
            pg.execute(
                &format!(
                    "SELECT setval(pg_get_serial_sequence($1, $2), \
                     GREATEST((SELECT MAX({c}) FROM {t}), 1), \
                     (SELECT MAX({c}) FROM {t}) IS NOT NULL)",
                    c = c.name,
                    t = t.name
                ),
                &[&t.name, &c.name],
            )
            .await
            .map_err(map_err)?;
        }
    }
    progress(CopyProgress::Verifying);
    let mut report = Vec::new();
    for t in &tables {
        let (rows_src, sum_src) = checksum_sqlite(&source, t)?;
        let (rows_dst, sum_dst) = checksum_postgres(&pg, t).await?;
        if (rows_src, &sum_src) != (rows_dst, &sum_dst) {
            return Err(copy_error(format!(
                "verification failed for table {}: SQLite has {rows_src} rows ({sum_src}), \
                 PostgreSQL {rows_dst} ({sum_dst})",
                t.name
            )));
        }
        report.push(TableCopy {
            table: t.name.clone(),
            rows: rows_src,
            checksum: sum_src,
        });
    }
    pg.execute(
        "INSERT INTO meta (key, value) VALUES ('migrate_store.verified', $1) \
         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        &[&crate::clock::now_ms().to_string()],
    )
    .await
    .map_err(map_err)?;
    Ok(report)
}

/// The destination's tables with their columns and primary keys, every
/// table after the tables it references.
async fn tables_in_order(pg: &tokio_postgres::Client) -> Result<Vec<Table>, Error> {
    let names: Vec<String> = pg
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
             AND table_name <> 'schema_migrations' ORDER BY table_name",
            &[],
        )
        .await
        .map_err(map_err)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut tables = BTreeMap::new();
    for name in &names {
        let columns = pg
            .query(
                "SELECT column_name::text, data_type::text, is_identity::text = 'YES' \
                 FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 \
                 ORDER BY ordinal_position",
                &[name],
            )
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| Column {
                name: r.get(0),
                data_type: r.get(1),
                identity: r.get(2),
            })
            .collect();
        let primary_key = pg
            .query(
                "SELECT a.attname::text FROM pg_index i \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                 WHERE i.indrelid = to_regclass($1) AND i.indisprimary \
                 ORDER BY array_position(i.indkey::int2[], a.attnum)",
                &[name],
            )
            .await
            .map_err(map_err)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        tables.insert(
            name.clone(),
            Table {
                name: name.clone(),
                columns,
                primary_key,
            },
        );
    }
    let mut refs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in pg
        .query(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint \
             WHERE contype = 'f' AND connamespace = current_schema()::regnamespace",
            &[],
        )
        .await
        .map_err(map_err)?
    {
        let (from, to): (String, String) = (r.get(0), r.get(1));
        let strip = |s: String| s.rsplit('.').next().unwrap_or(&s).to_owned();
        refs.entry(strip(from)).or_default().insert(strip(to));
    }
    // Referenced tables first (a table that references itself is fine:
    // its rows go in rowid order).
    let mut ordered = Vec::new();
    let mut placed = BTreeSet::new();
    while !tables.is_empty() {
        let ready: Vec<String> = tables
            .keys()
            .filter(|n| {
                refs.get(*n)
                    .is_none_or(|deps| deps.iter().all(|d| d == *n || placed.contains(d)))
            })
            .cloned()
            .collect();
        if ready.is_empty() {
            return Err(copy_error("the tables' foreign keys form a cycle"));
        }
        for n in ready {
            placed.insert(n.clone());
            ordered.push(tables.remove(&n).expect("listed"));
        }
    }
    Ok(ordered)
}

/// Every column PostgreSQL has must be in the SQLite table too.
fn check_columns(source: &rusqlite::Connection, t: &Table) -> Result<(), Error> {
    let mut stmt = source
        .prepare(&format!("PRAGMA table_info({})", t.name))
        .map_err(sqlite_err)?;
    let have: BTreeSet<String> = stmt
        .query_map([], |r| r.get::<_, String>(1))
        .map_err(sqlite_err)?
        .collect::<Result<_, _>>()
        .map_err(sqlite_err)?;
    let missing: Vec<&str> = t
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .filter(|c| !have.contains(*c))
        .collect();
    if !missing.is_empty() {
        return Err(copy_error(format!(
            "table {} of the SQLite database lacks {missing:?}: the two databases' schemas differ",
            t.name
        )));
    }
    Ok(())
}

/// Records which database this copy comes from, refusing a destination
/// that holds anything else.
async fn start_or_resume(pg: &tokio_postgres::Client, source: &str) -> Result<(), Error> {
    let from: Option<String> = pg
        .query_opt(
            "SELECT value FROM meta WHERE key = 'migrate_store.source'",
            &[],
        )
        .await
        .map_err(map_err)?
        .map(|r| r.get(0));
    match from {
        Some(f) if f == source => return Ok(()),
        Some(f) => {
            return Err(copy_error(format!(
                "the destination holds a copy of another database ({f}); copy into an empty one"
            )))
        }
        None => {}
    }
    for t in MUST_BE_EMPTY {
        let has = pg
            .query_opt(&format!("SELECT 1 FROM {t} LIMIT 1"), &[])
            .await
            .map_err(map_err)?;
        if has.is_some() {
            return Err(copy_error(format!(
                "the destination is not empty (table {t} has rows): copy into an empty database or schema"
            )));
        }
    }
    pg.execute(
        "INSERT INTO meta (key, value) VALUES ('migrate_store.source', $1)",
        &[&source],
    )
    .await
    .map_err(map_err)?;
    Ok(())
}

fn to_value(v: ValueRef<'_>) -> Result<Value, Error> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        ValueRef::Real(r) => {
            return Err(copy_error(format!(
                "a floating-point value ({r}) where the schema has none"
            )))
        }
    })
}

async fn copy_table(
    source: &rusqlite::Connection,
    pg: &mut deadpool_postgres::Object,
    t: &Table,
    batch: usize,
    progress: &mut impl FnMut(CopyProgress),
) -> Result<(), Error> {
    let mark = format!("{MARK}rowid.{}", t.name);
    let mut last: i64 = pg
        .query_opt("SELECT value FROM meta WHERE key = $1", &[&mark])
        .await
        .map_err(map_err)?
        .and_then(|r| r.get::<_, String>(0).parse().ok())
        .unwrap_or(0);
    let total: i64 = source
        .query_row(&format!("SELECT COUNT(*) FROM {}", t.name), [], |r| {
            r.get(0)
        })
        .map_err(sqlite_err)?;
    let mut done: i64 = source
        .query_row(
            &format!("SELECT COUNT(*) FROM {} WHERE rowid <= ?1", t.name),
            [last],
            |r| r.get(0),
        )
        .map_err(sqlite_err)?;
    progress(CopyProgress::Table {
        table: t.name.clone(),
        total: total as u64,
        done: done as u64,
    });
    let cols: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    let per_batch = batch.min(MAX_PARAMS / cols.len().max(1)).max(1);
    let select = format!(
        "SELECT rowid, {} FROM {} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
        cols.join(", "),
        t.name
    );
    let overriding = if t.columns.iter().any(|c| c.identity) {
        " OVERRIDING SYSTEM VALUE"
    } else {
        ""
    };
    let on_conflict = if t.primary_key.is_empty() {
        String::new()
    } else {
        let updates: Vec<String> = cols
            .iter()
            .filter(|c| !t.primary_key.iter().any(|k| k == *c))
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        if updates.is_empty() {
            format!(" ON CONFLICT ({}) DO NOTHING", t.primary_key.join(", "))
        } else {
            format!(
                " ON CONFLICT ({}) DO UPDATE SET {}",
                t.primary_key.join(", "),
                updates.join(", ")
            )
        }
    };
    loop {
        let mut rows: Vec<Vec<Value>> = Vec::with_capacity(per_batch);
        let mut max_rowid = last;
        {
            let mut stmt = source.prepare_cached(&select).map_err(sqlite_err)?;
            let mut it = stmt
                .query(rusqlite::params![last, per_batch as i64])
                .map_err(sqlite_err)?;
            while let Some(r) = it.next().map_err(sqlite_err)? {
                max_rowid = r.get(0).map_err(sqlite_err)?;
                let mut row = Vec::with_capacity(cols.len());
                for i in 0..cols.len() {
                    row.push(to_value(r.get_ref(i + 1).map_err(sqlite_err)?)?);
                }
                rows.push(row);
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let placeholders: Vec<String> = (0..rows.len())
            .map(|r| {
                let one: Vec<String> = (0..cols.len())
                    .map(|c| format!("${}", r * cols.len() + c + 1))
                    .collect();
                format!("({})", one.join(", "))
            })
            .collect();
        let insert = format!(
            "INSERT INTO {} ({}){overriding} VALUES {}{on_conflict}",
            t.name,
            cols.join(", "),
            placeholders.join(", ")
        );
        let params: Vec<&(dyn ToSql + Sync)> = rows
            .iter()
            .flatten()
            .map(|v| v as &(dyn ToSql + Sync))
            .collect();
        let tx = pg.transaction().await.map_err(map_err)?;
        tx.execute(insert.as_str(), &params)
            .await
            .map_err(|e| copy_error(format!("copying into {}: {}", t.name, map_err(e))))?;
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&mark, &max_rowid.to_string()],
        )
        .await
        .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        last = max_rowid;
        done += rows.len() as i64;
        progress(CopyProgress::Rows {
            table: t.name.clone(),
            done: done as u64,
        });
    }
}

/// The order rows are hashed in: the primary key, else every column.
fn order_by(t: &Table, collate: &str) -> String {
    let keys: Vec<&str> = if t.primary_key.is_empty() {
        t.columns.iter().map(|c| c.name.as_str()).collect()
    } else {
        t.primary_key.iter().map(String::as_str).collect()
    };
    keys.iter()
        .map(|k| {
            let text = t
                .columns
                .iter()
                .any(|c| c.name == *k && c.data_type != "bigint");
            // Qualified: the select list casts each column to text under
            // its own name, and a bare name here would sort by that text.
            if text {
                format!("src.{k}{collate}")
            } else {
                format!("src.{k}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `meta` rows that are the copy's own are left out of its verification.
fn filter_of(t: &Table) -> &'static str {
    if t.name == "meta" {
        " WHERE key NOT LIKE 'migrate_store.%'"
    } else {
        ""
    }
}

fn hash_field(h: &mut Sha256, text: Option<&str>) {
    match text {
        None => h.update([0u8]),
        Some(s) => {
            h.update([1u8]);
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn checksum_sqlite(source: &rusqlite::Connection, t: &Table) -> Result<(u64, String), Error> {
    let cols: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    let sql = format!(
        "SELECT {} FROM {} AS src{} ORDER BY {}",
        cols.join(", "),
        t.name,
        filter_of(t),
        order_by(t, "")
    );
    let mut stmt = source.prepare(&sql).map_err(sqlite_err)?;
    let mut it = stmt.query([]).map_err(sqlite_err)?;
    let (mut h, mut n) = (Sha256::new(), 0u64);
    while let Some(r) = it.next().map_err(sqlite_err)? {
        for i in 0..cols.len() {
            let text = match r.get_ref(i).map_err(sqlite_err)? {
                ValueRef::Null => None,
                ValueRef::Integer(v) => Some(v.to_string()),
                ValueRef::Text(s) => Some(String::from_utf8_lossy(s).into_owned()),
                ValueRef::Blob(b) => Some(hex(b)),
                ValueRef::Real(v) => Some(v.to_string()),
            };
            hash_field(&mut h, text.as_deref());
        }
        n += 1;
    }
    Ok((n, hex(&h.finalize())))
}

async fn checksum_postgres(pg: &tokio_postgres::Client, t: &Table) -> Result<(u64, String), Error> {
    let cols: Vec<String> = t
        .columns
        .iter()
        .map(|c| match c.data_type.as_str() {
            "bytea" => format!("encode({}, 'hex')", c.name),
            _ => format!("{}::text", c.name),
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {} AS src{} ORDER BY {}",
        cols.join(", "),
        t.name,
        filter_of(t),
        order_by(t, " COLLATE \"C\"")
    );
    let (mut h, mut n) = (Sha256::new(), 0u64);
    // Row by row as they arrive: the events table of a big database does
    // not fit in memory as one answer.
    let rows = pg
        .query_raw(sql.as_str(), std::iter::empty::<&str>())
        .await
        .map_err(map_err)?;
    futures::pin_mut!(rows);
    while let Some(r) = rows.try_next().await.map_err(map_err)? {
        for i in 0..cols.len() {
            hash_field(&mut h, r.get::<_, Option<&str>>(i));
        }
        n += 1;
    }
    Ok((n, hex(&h.finalize())))
}
