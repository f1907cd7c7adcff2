//! What one claim+complete cycle costs PostgreSQL: statements sent and rows
//! written, per table, measured rather than estimated.
//!
//! The run uses a database of its own (created, then dropped) with
//! `log_statement = all` set on that database only, so the server log holds
//! exactly this program's statements; rows come from `pg_stat_user_tables`
//! (read after the store's connections closed, which flushes their counts).
//!
//! ```text
//! cargo run -p shepherd-store --example cycle_cost -- [CYCLES] [WORKERS]
//! ```
//!
//! Environment: `SHEPHERD_COUNT_PG` (server URL without a database, default
//! `postgres://postgres@127.0.0.1:5432`), `SHEPHERD_COUNT_PG_LOG` (the
//! server's log file, default `/var/log/postgresql/postgresql-15-main.log`;
//! reading it needs the rights of the server's log group).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

mod common;

use common::R;
use shepherd_store::{Store, StoreConfig};

async fn admin(url: &str) -> R<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Rows inserted, updated (of which HOT) and deleted, per table.
async fn row_counts(url: &str) -> R<BTreeMap<String, [i64; 4]>> {
    let c = admin(url).await?;
    let rows = c
        .query(
            "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del \
             FROM pg_stat_user_tables WHERE schemaname = 'public'",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), [r.get(1), r.get(2), r.get(3), r.get(4)]))
        .collect())
}

fn log_len(path: &str) -> R<u64> {
    Ok(std::fs::metadata(path)?.len())
}

/// Statements this database's sessions sent after `from` in the server log:
/// (protocol messages logged, SQL statements in them).
fn statements_since(path: &str, from: u64, db: &str) -> R<(u64, u64, BTreeMap<String, u64>)> {
    let mut f = std::fs::File::open(path)?;
    f.seek(SeekFrom::Start(from))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let (mut messages, mut statements) = (0, 0);
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines() {
        let Some(at) = line
            .find("LOG:  statement: ")
            .map(|i| (i + 17, true))
            .or_else(|| line.find("LOG:  execute ").map(|i| (i + 14, false)))
        else {
            continue;
        };
        let sql = &line[at.0..];
        let sql = if at.1 {
            sql
        } else {
            sql.split_once(": ").map_or(sql, |(_, s)| s)
        };
        // Our own markers and the reads of this program are not the store's.
        if sql.contains("cycle_cost_marker") {
            continue;
        }
        let _ = db;
        messages += 1;
        for part in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            statements += 1;
            let head: String = part
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            *kinds.entry(head).or_default() += 1;
        }
    }
    Ok((messages, statements, kinds))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> R<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cycles: usize = args.first().map_or(Ok(200), |s| s.parse())?;
    let workers: usize = args.get(1).map_or(Ok(1), |s| s.parse())?;
    let server = std::env::var("SHEPHERD_COUNT_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
    let log = std::env::var("SHEPHERD_COUNT_PG_LOG")
        .unwrap_or_else(|_| "/var/log/postgresql/postgresql-15-main.log".into());
    let name = format!("cycle_cost_{}", std::process::id());
    let root = admin(&format!("{server}/postgres")).await?;
    root.batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let url = format!("{server}/{name}");

    let per = cycles.div_ceil(workers);
    let store = Store::open(&StoreConfig::new(url.clone())).await?;
    common::seed(&store, workers, per).await?;
    store.close();
    drop(store);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let before = row_counts(&url).await?;
    root.batch_execute(&format!("ALTER DATABASE {name} SET log_statement = 'all'"))
        .await?;
    let from = log_len(&log)?;

    let store = Store::open(&StoreConfig::new(url.clone())).await?;
    let stats0 = store.writer_stats();
    let elapsed = common::run_cycles(&store, workers, per).await?;
    let stats1 = store.writer_stats();
    let prefetched = store.prefetch_hits();
    store.close();
    drop(store);
    // Closed sessions have flushed their statistics; give the log a moment.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    root.batch_execute(&format!("ALTER DATABASE {name} RESET log_statement"))
        .await?;
    let (messages, statements, kinds) = statements_since(&log, from, &name)?;
    let after = row_counts(&url).await?;
    let done = (per * workers) as f64;

    println!(
        "PostgreSQL, {} cycles by {workers} worker(s) in {:.2}s",
        per * workers,
        elapsed.as_secs_f64()
    );
    let batches = (stats1.batches - stats0.batches) as f64;
    println!(
        "group commits: {:.2} per cycle, {:.1} units each; {:.0} µs in transactions per cycle \
         ({:.0}% of the run; logging every statement slows it)",
        batches / done,
        (stats1.units - stats0.units) as f64 / batches,
        (stats1.commit_seconds - stats0.commit_seconds) * 1e6 / done,
        (stats1.commit_seconds - stats0.commit_seconds) * 100.0 / elapsed.as_secs_f64()
    );
    println!(
        "units run on a prefetched read: {:.2} per cycle (a claim and a completion each)",
        prefetched as f64 / done
    );
    println!(
        "statements per cycle: {:.2} (in {:.2} protocol messages)",
        statements as f64 / done,
        messages as f64 / done
    );
    for (k, n) in &kinds {
        println!("  {:>7.2}  {k}", *n as f64 / done);
    }
    println!("rows per cycle (inserted / updated (HOT) / deleted):");
    let mut total = [0i64; 4];
    for (table, a) in &after {
        let b = before.get(table).copied().unwrap_or_default();
        let d: Vec<i64> = (0..4).map(|i| a[i] - b[i]).collect();
        if d.iter().all(|v| *v == 0) {
            continue;
        }
        for i in 0..4 {
            total[i] += d[i];
        }
        println!(
            "  {table:<16} {:>6.2} / {:>6.2} ({:>5.2}) / {:>6.2}",
            d[0] as f64 / done,
            d[1] as f64 / done,
            d[2] as f64 / done,
            d[3] as f64 / done
        );
    }
    println!(
        "  {:<16} {:>6.2} / {:>6.2} ({:>5.2}) / {:>6.2}",
        "total",
        total[0] as f64 / done,
        total[1] as f64 / done,
        total[2] as f64 / done,
        total[3] as f64 / done
    );
    let c = admin(&url).await?;
    let idx = c
        .query(
            "SELECT tablename::text, COUNT(*) FROM pg_indexes WHERE schemaname = 'public' \
             AND tablename IN ('tasks','claims','runs','run_counts','workers','events') \
             GROUP BY tablename ORDER BY tablename",
            &[],
        )
        .await?;
    let idx: Vec<String> = idx
        .iter()
        .map(|r| format!("{}={}", r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect();
    println!("indexes: {}", idx.join(" "));
    drop(c);
    root.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await?;
    Ok(())
}
