//! `shepherd migrate-store --from sqlite:PATH --to postgres://…`: copies a
//! SQLite store into an empty PostgreSQL one, with a progress bar per
//! table, resumable after an interruption (run it again), verified table by
//! table at the end (see `store/src/copy_to_postgres.rs`).

use shepherd_store::{CopyProgress, DatabaseUrl, StoreConfig};

use super::admin::progress;
use super::Result;
use crate::render::table;

pub async fn migrate_store(
    from: &str,
    to: &str,
    pg_schema: Option<String>,
    batch: usize,
) -> Result<()> {
    let source = match shepherd_store::parse_database_url(from)? {
        DatabaseUrl::Sqlite(path) => path,
        DatabaseUrl::Postgres(_) => {
            return Err(
                "--from is the SQLite database to copy: sqlite:PATH or sqlite://PATH".into(),
            )
        }
    };
    if !matches!(
        shepherd_store::parse_database_url(to)?,
        DatabaseUrl::Postgres(_)
    ) {
        return Err("--to is the PostgreSQL database to copy into: postgres://…".into());
    }
    let mut dest = StoreConfig::new(to);
    dest.pg_schema = pg_schema;
    println!(
        "copying {} into {}{} (stop the server first; run this again to resume)",
        source.display(),
        crate::config::redact_url(to),
        dest.pg_schema
            .as_deref()
            .map(|s| format!(", schema {s}"))
            .unwrap_or_default()
    );
    let mut bar: Option<indicatif::ProgressBar> = None;
    let report = shepherd_store::copy_sqlite_to_postgres(&source, &dest, batch, |p| match p {
        CopyProgress::Table { table, total, done } => {
            if let Some(b) = bar.take() {
                b.finish();
            }
            let b = indicatif::ProgressBar::new(total);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{msg:>22} [{bar:30}] {pos}/{len} rows ({elapsed})",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(table);
            b.set_position(done);
            bar = Some(b);
        }
        CopyProgress::Rows { done, .. } => {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        }
        CopyProgress::Verifying => {
            if let Some(b) = bar.take() {
                b.finish();
            }
            bar = Some(progress("verifying every table".into(), true));
        }
    })
    .await;
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    let report = report?;
    let rows: Vec<Vec<String>> = report
        .iter()
        .map(|t| {
            vec![
                t.table.clone(),
                t.rows.to_string(),
                t.checksum[..16].to_owned(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["TABLE", "ROWS", "SHA-256 (both sides)"], &rows)
    );
    println!(
        "verified: {} tables, {} rows, the same on both sides. Serve it: \
SHEPHERD_DATABASE_URL={} shepherd serve",
        report.len(),
        report.iter().map(|t| t.rows).sum::<u64>(),
        crate::config::redact_url(to)
    );
    Ok(())
}
