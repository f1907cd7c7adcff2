//! What one claim+complete cycle costs the embedded SQLite store: units of
//! work per group commit, time in the writer's transactions, and bytes and
//! write calls the process sends to the file system (WAL frames plus the
//! checkpoints that copy them into the database file), measured rather
//! than estimated.
//!
//! ```text
//! cargo run --release -p shepherd-store --example sqlite_cycle_cost -- [CYCLES] [WORKERS]
//! ```
//!
//! It then lists the writer's time per cycle statement by statement
//! (`Store::start_statement_costs`), transaction control included: `COMMIT`
//! is where SQLite writes the WAL frames of the group commit.
//!
//! The database is a new file in a temporary directory, removed at the end.
//! Bytes and calls come from `/proc/self/io` (`wchar`, `syscw`), so they
//! cover every thread of this process: the writer, the checkpointer, and
//! nothing else that writes while the cycles run. CPU time per cycle (the
//! process's, and its SQLite threads') comes from `/proc/self/stat` and
//! `/proc/self/task/*/stat`: on a shared machine it varies far less from
//! run to run than cycles per second does.

mod common;

use common::R;
use shepherd_store::{Store, StoreConfig};

/// (bytes written, write calls) by this process so far.
fn written() -> R<(u64, u64)> {
    let io = std::fs::read_to_string("/proc/self/io")?;
    let field = |name: &str| -> u64 {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Ok((field("wchar:"), field("syscw:")))
}

/// CPU seconds used so far by (this whole process, SQLite's threads: the
/// writer and the checkpointer, whose names `comm` cuts to the same 15
/// characters). CPU time per cycle moves far less than cycles per second
/// when other work shares the machine, so it is what to compare between
/// two builds on a busy host.
fn cpu_used() -> (f64, f64) {
    let process = shepherd_testkit::cpu_secs_in(std::path::Path::new("/proc/self/stat"));
    let mut sqlite = 0.0;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("shepherd-sqlite") {
            sqlite += shepherd_testkit::cpu_secs_in(&task.path().join("stat"));
        }
    }
    (process, sqlite)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> R<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cycles: usize = args.first().map_or(Ok(4000), |s| s.parse())?;
    let workers: usize = args.get(1).map_or(Ok(16), |s| s.parse())?;
    let dir = std::env::temp_dir().join(format!("shepherd-sqlite-cycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}", dir.join("shepherd.db").display());

    let per = cycles.div_ceil(workers);
    let store = Store::open(&StoreConfig::new(url.clone())).await?;
    common::seed(&store, workers, per).await?;

    let stats0 = store.writer_stats();
    store.start_statement_costs();
    let io0 = written()?;
    let cpu0 = cpu_used();
    let elapsed = common::run_cycles(&store, workers, per)
        .await?
        .as_secs_f64();
    let io1 = written()?;
    let cpu1 = cpu_used();
    let stats1 = store.writer_stats();
    let statements = store.stop_statement_costs();
    store.close();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);

    let done = (per * workers) as f64;
    let batches = (stats1.batches - stats0.batches) as f64;
    let units = (stats1.units - stats0.units) as f64;
    println!(
        "SQLite, {} cycles by {workers} worker(s) in {elapsed:.2}s: {:.0} cycles/s",
        per * workers,
        done / elapsed
    );
    println!(
        "group commits: {:.2} per cycle, {:.1} units each; {:.0} µs in transactions per cycle \
         ({:.0}% of the run)",
        batches / done,
        units / batches,
        (stats1.commit_seconds - stats0.commit_seconds) * 1e6 / done,
        (stats1.commit_seconds - stats0.commit_seconds) * 100.0 / elapsed
    );
    println!(
        "CPU per cycle: {:.0} µs in this process, {:.0} µs of it in SQLite's threads \
         (writer and checkpointer)",
        (cpu1.0 - cpu0.0) * 1e6 / done,
        (cpu1.1 - cpu0.1) * 1e6 / done
    );
    // The slowest transactions: every unit queued behind one waits it out.
    let buckets = shepherd_store::writer_stats::COMMIT_BUCKETS;
    let slow: Vec<String> = [0.005, 0.01, 0.025]
        .iter()
        .map(|bound| {
            let over: u64 = buckets
                .iter()
                .enumerate()
                .filter(|(_, b)| **b > *bound)
                .map(|(i, _)| stats1.commit_counts[i] - stats0.commit_counts[i])
                .sum::<u64>()
                + (stats1.commit_counts[buckets.len()] - stats0.commit_counts[buckets.len()]);
            format!("{over} over {:.0} ms", bound * 1000.0)
        })
        .collect();
    println!("transactions: {}", slow.join(", "));
    println!(
        "written: {:.1} KiB in {:.1} write calls per cycle",
        (io1.0 - io0.0) as f64 / 1024.0 / done,
        (io1.1 - io0.1) as f64 / done
    );
    let timed: f64 = statements.iter().map(|s| s.time.as_secs_f64()).sum();
    println!(
        "the writer's statements: {:.0} µs per cycle; the costliest:",
        timed * 1e6 / done
    );
    for s in statements.iter().take(12) {
        let sql: String = s.sql.split_whitespace().collect::<Vec<_>>().join(" ");
        let sql: String = sql.chars().take(72).collect();
        println!(
            "  {:>6.1} µs/cycle {:>5.2} calls/cycle {:>6.1} µs each  {sql}",
            s.time.as_secs_f64() * 1e6 / done,
            s.calls as f64 / done,
            s.time.as_secs_f64() * 1e6 / s.calls as f64,
        );
    }
    Ok(())
}
