//! Event-log append throughput: `Store::append_events` on SQLite and
//! PostgreSQL, each measured beside a raw-driver baseline that inserts the
//! same rows through the same driver in the same run.
//!
//! Cases per backend:
//! - `1 appender`: one task, N sequential `append_events` calls (one event
//!   each, one unit of work each, committed before the call returns);
//! - `16 appenders` / `64 appenders`: that many tokio tasks, each appending
//!   sequentially (the store groups concurrent units of work into shared
//!   commits).
//!
//! Baselines ("raw"): a loop of single-row `INSERT INTO events … RETURNING
//! seq`, each in its own autocommit transaction, on a fresh database with the
//! store's own schema (created by opening a `Store` on it, then closing it).
//! SQLite: rusqlite, `journal_mode=WAL`, `synchronous=NORMAL`; the concurrent
//! baseline is one connection per thread (16/64 threads, `busy_timeout`).
//! PostgreSQL: tokio-postgres, a prepared statement; the concurrent baseline
//! is 16/64 separate connections, each inserting in autocommit.
//!
//! Every append is also timed on its own; the table shows the median and the
//! 90th and 99th percentile of those latencies, which tell a slower typical
//! append from a heavier tail (on a small virtual machine, a few appends in
//! ten waiting hundreds of microseconds for a thread or a disk flush).
//!
//! Every case (store and raw) gets a fresh database: a new file under
//! `/tmp/shepherd-bench-<unique>/bench.db` (deleted afterwards), or a new
//! PostgreSQL schema `bench_append_<unique>` (dropped at the end). Each case
//! runs a short untimed warm-up first, then a fixed number of events. Every run is
//! verified afterwards: for the store, the log's head and a full read of the
//! appended range through `read_events` must both equal the number of events
//! appended; for the raw loop, `COUNT(*)` must equal the rows inserted.
//!
//! Run (release mode):
//!
//! ```text
//! cargo bench -p shepherd-store --bench append
//! ```
//!
//! Arguments after `--` select cases by name, e.g.
//! `cargo bench -p shepherd-store --bench append -- sqlite "64 appenders"`.
//!
//! Environment:
//! - `SHEPHERD_BENCH_SCALE` (float, default 1.0) scales every event count;
//! - `SHEPHERD_BENCH_ROUNDS` (default 3): each case runs that many times,
//!   raw and store alternating, each on a fresh database, and the table shows
//!   the median round (a shared machine is noisy);
//! - `SHEPHERD_BENCH_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`);
//!   if that server is unreachable the PostgreSQL rows are skipped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use shepherd_core::event::{EventFilter, EventRefs, NewEvent};
use shepherd_store::{Store, StoreConfig};

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const KIND: &str = "bench.append";
const TASK: &str = "VTID-1";

/// Base event counts (before `SHEPHERD_BENCH_SCALE`).
const SQLITE_SINGLE: f64 = 20_000.0;
const SQLITE_CONCURRENT: f64 = 100_000.0;
const PG_SINGLE: f64 = 5_000.0;
const PG_CONCURRENT: f64 = 20_000.0;
/// Warm-up, as a fraction of the timed count.
const WARMUP_FRACTION: f64 = 0.05;
const CONCURRENCY: [usize; 2] = [16, 64];

const SQLITE_INSERT: &str = "INSERT INTO events (ts, type, agent_id, worker_id, task_id, run_id, \
     channel_id, conversation_id, session_id, data) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING seq";
const PG_INSERT: &str = "INSERT INTO events (ts, type, agent_id, worker_id, task_id, run_id, \
     channel_id, conversation_id, session_id, data) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING seq";

/// The event payload: about 100 bytes of JSON, varying per event.
fn payload(worker: usize, i: u64) -> serde_json::Value {
    json!({
        "appender": worker,
        "n": i,
        "status": "running",
        "step": "compile",
        "detail": "benchmark payload, roughly 100 bytes",
    })
}

fn new_event(worker: usize, i: u64) -> NewEvent {
    NewEvent::new(KIND, EventRefs::default().task(TASK), payload(worker, i))
}

// ----- bookkeeping -----

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `<unix seconds>_<pid>_<n>`: unique per case and per run.
fn unique() -> String {
    format!(
        "{}_{}_{}",
        chrono::Utc::now().timestamp(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A temporary directory holding one SQLite database, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> BenchResult<TempDir> {
        let dir = PathBuf::from(format!("/tmp/shepherd-bench-{}", unique()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
    fn db_path(&self) -> PathBuf {
        self.0.join("bench.db")
    }
    fn url(&self) -> String {
        format!("sqlite://{}", self.db_path().display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What to run: counts scaled by `SHEPHERD_BENCH_SCALE`, and optional name
/// filters from the command line.
struct Plan {
    scale: f64,
    /// Each case runs this many times (raw and store alternating, each on a
    /// fresh database); the table shows the median.
    rounds: usize,
    filters: Vec<String>,
}

impl Plan {
    /// True if no filter was given, or one is part of "backend case impl"
    /// (e.g. `sqlite`, `64 appenders`, `postgres 1 appender store`).
    fn wants(&self, backend: &str, appenders: usize, imp: &str) -> bool {
        let name = format!("{backend} {} {imp}", case_name(appenders));
        self.filters.is_empty() || self.filters.iter().any(|f| name.contains(f.as_str()))
    }
    fn scaled(&self, base: f64) -> u64 {
        ((base * self.scale).round() as u64).max(1)
    }
    /// (per-appender timed count, per-appender warm-up count).
    fn split(&self, base: f64, appenders: usize) -> (u64, u64) {
        let per = (self.scaled(base) / appenders as u64).max(1);
        let warm = ((per as f64 * WARMUP_FRACTION).round() as u64).max(1);
        (per, warm)
    }
}

struct Measurement {
    backend: &'static str,
    case: String,
    imp: &'static str,
    events: u64,
    elapsed: Duration,
    /// The log (store) or table (raw) holds exactly the rows written.
    verified: bool,
    /// Every timed append's latency in microseconds, sorted.
    latency_us: Vec<u64>,
}

impl Measurement {
    fn rate(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }
    /// The `q` quantile of the append latencies, in microseconds.
    fn latency(&self, q: f64) -> u64 {
        let n = self.latency_us.len();
        if n == 0 {
            return 0;
        }
        self.latency_us[((n - 1) as f64 * q).round() as usize]
    }
}

/// Latencies gathered from several appenders, sorted.
fn sorted(parts: Vec<Vec<u64>>) -> Vec<u64> {
    let mut all: Vec<u64> = parts.into_iter().flatten().collect();
    all.sort_unstable();
    all
}

fn micros(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

fn case_name(appenders: usize) -> String {
    if appenders == 1 {
        "1 appender".to_owned()
    } else {
        format!("{appenders} appenders")
    }
}

// ----- the store -----

/// Runs `appenders` tasks, each appending `per` events sequentially through
/// the store; returns the wall time from the common start to the last
/// commit, and every append's latency.
async fn store_appenders(
    store: &Store,
    appenders: usize,
    per: u64,
) -> BenchResult<(Duration, Vec<u64>)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(appenders + 1));
    let mut handles = Vec::with_capacity(appenders);
    for worker in 0..appenders {
        let store = store.clone();
        let barrier = barrier.clone();
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut latency = Vec::with_capacity(per as usize);
            for i in 0..per {
                let t = Instant::now();
                store.append_events(vec![new_event(worker, i)]).await?;
                latency.push(micros(t));
            }
            Ok::<_, shepherd_core::Error>(latency)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut latency = Vec::with_capacity(appenders);
    for h in handles {
        latency.push(h.await??);
    }
    Ok((start.elapsed(), sorted(latency)))
}

/// Counts the events after `after` by reading the log through the store.
async fn count_logged(store: &Store, after: i64) -> BenchResult<u64> {
    let mut cursor = after;
    let mut n = 0u64;
    loop {
        let page = store
            .read_events(cursor, &EventFilter::default(), 1000)
            .await?;
        n += page.events.iter().filter(|e| e.kind == KIND).count() as u64;
        cursor = page.next_cursor;
        if page.next_cursor >= page.head {
            return Ok(n);
        }
    }
}

/// Opens a store on `config`, warms it up, times `appenders × per` appends
/// and verifies that exactly that many events were logged.
async fn bench_store(
    backend: &'static str,
    config: &StoreConfig,
    appenders: usize,
    per: u64,
    warm: u64,
) -> BenchResult<Measurement> {
    let store = Store::open(config).await?;
    store_appenders(&store, appenders, warm).await?;
    let before = store.head().await?;
    let (elapsed, latency_us) = store_appenders(&store, appenders, per).await?;
    let events = appenders as u64 * per;
    let head = store.head().await?;
    let read = count_logged(&store, before).await?;
    let ok = (head - before) as u64 == events && read == events;
    if !ok {
        eprintln!(
            "VERIFY FAILED: {backend} store {}: appended {events}, head moved by {}, read back {read}",
            case_name(appenders),
            head - before
        );
    }
    store.close();
    Ok(Measurement {
        backend,
        case: case_name(appenders),
        imp: "store",
        events,
        elapsed,
        verified: ok,
        latency_us,
    })
}

/// Creates the store's schema (tables, indexes) on a fresh database.
async fn create_schema(config: &StoreConfig) -> BenchResult<()> {
    let store = Store::open(config).await?;
    store.close();
    drop(store);
    // Let the store's background tasks see the shutdown and let go.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

// ----- raw SQLite -----

fn open_raw_sqlite(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

fn raw_sqlite_insert(conn: &rusqlite::Connection, worker: usize, i: u64) -> rusqlite::Result<i64> {
    let mut stmt = conn.prepare_cached(SQLITE_INSERT)?;
    let data = payload(worker, i).to_string();
    stmt.query_row(
        rusqlite::params![
            shepherd_store::now_ms(),
            KIND,
            None::<&str>,
            None::<&str>,
            TASK,
            None::<&str>,
            None::<&str>,
            None::<&str>,
            None::<&str>,
            data
        ],
        |r| r.get(0),
    )
}

/// `threads` threads, each with its own connection, each inserting `per`
/// rows in autocommit after `warm` untimed ones; returns the wall time and
/// every insert's latency.
fn raw_sqlite_threads(
    path: &Path,
    threads: usize,
    per: u64,
    warm: u64,
) -> BenchResult<(Duration, Vec<u64>)> {
    let conns = (0..threads)
        .map(|_| open_raw_sqlite(path))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let barrier = &barrier;
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(worker, conn)| {
                s.spawn(move || -> rusqlite::Result<Vec<u64>> {
                    let warmed = (0..warm)
                        .try_for_each(|i| raw_sqlite_insert(&conn, worker, u64::MAX - i).map(drop));
                    barrier.wait();
                    warmed?;
                    let mut latency = Vec::with_capacity(per as usize);
                    for i in 0..per {
                        let t = Instant::now();
                        raw_sqlite_insert(&conn, worker, i)?;
                        latency.push(micros(t));
                    }
                    Ok(latency)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut latency = Vec::with_capacity(threads);
        for h in handles {
            latency.push(h.join().map_err(|_| "raw SQLite thread panicked")??);
        }
        Ok((start.elapsed(), sorted(latency)))
    })
}

async fn bench_raw_sqlite(appenders: usize, per: u64, warm: u64) -> BenchResult<Measurement> {
    let dir = TempDir::new()?;
    create_schema(&StoreConfig::new(dir.url())).await?;
    let path = dir.db_path();
    let (elapsed, latency_us) = tokio::task::spawn_blocking(move || {
        raw_sqlite_threads(&path, appenders, per, warm).map_err(|e| e.to_string())
    })
    .await??;
    let events = appenders as u64 * per;
    let conn = open_raw_sqlite(&dir.db_path())?;
    let rows: i64 = conn.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))?;
    let ok = rows as u64 == events + appenders as u64 * warm;
    if !ok {
        eprintln!(
            "VERIFY FAILED: sqlite raw {}: {rows} rows",
            case_name(appenders)
        );
    }
    Ok(Measurement {
        backend: "sqlite",
        case: case_name(appenders),
        imp: "raw",
        events,
        elapsed,
        verified: ok,
        latency_us,
    })
}

async fn bench_sqlite(plan: &Plan, out: &mut Vec<Measurement>) -> BenchResult<()> {
    let mut cases = vec![(1usize, SQLITE_SINGLE)];
    cases.extend(CONCURRENCY.iter().map(|&n| (n, SQLITE_CONCURRENT)));
    for (appenders, base) in cases {
        let (per, warm) = plan.split(base, appenders);
        for _ in 0..plan.rounds {
            if plan.wants("sqlite", appenders, "raw") {
                let raw = bench_raw_sqlite(appenders, per, warm).await?;
                report_progress(&raw);
                out.push(raw);
            }
            if plan.wants("sqlite", appenders, "store") {
                let dir = TempDir::new()?;
                let config = StoreConfig::new(dir.url());
                let store = bench_store("sqlite", &config, appenders, per, warm).await?;
                report_progress(&store);
                out.push(store);
            }
            // Give the store's writer thread a moment to exit.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

// ----- raw PostgreSQL -----

async fn pg_connect(url: &str, schema: Option<&str>) -> BenchResult<tokio_postgres::Client> {
    let mut config: tokio_postgres::Config = url.parse()?;
    config.connect_timeout(Duration::from_secs(5));
    if let Some(schema) = schema {
        config.options(format!("-c search_path={schema}"));
    }
    let (client, conn) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

async fn raw_pg_insert(
    client: &tokio_postgres::Client,
    stmt: &tokio_postgres::Statement,
    worker: usize,
    i: u64,
) -> Result<i64, tokio_postgres::Error> {
    let none: Option<&str> = None;
    let data = payload(worker, i).to_string();
    let row = client
        .query_one(
            stmt,
            &[
                &shepherd_store::now_ms(),
                &KIND,
                &none,
                &none,
                &TASK,
                &none,
                &none,
                &none,
                &none,
                &data,
            ],
        )
        .await?;
    Ok(row.get(0))
}

async fn bench_raw_pg(
    url: &str,
    schema: &str,
    appenders: usize,
    per: u64,
    warm: u64,
) -> BenchResult<Measurement> {
    let mut config = StoreConfig::new(url);
    config.pg_schema = Some(schema.to_owned());
    create_schema(&config).await?;
    let mut clients = Vec::with_capacity(appenders);
    for _ in 0..appenders {
        let client = pg_connect(url, Some(schema)).await?;
        let stmt = client.prepare(PG_INSERT).await?;
        clients.push((client, stmt));
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(appenders + 1));
    let mut handles = Vec::with_capacity(appenders);
    for (worker, (client, stmt)) in clients.into_iter().enumerate() {
        let barrier = barrier.clone();
        handles.push(tokio::spawn(async move {
            let mut warmed = Ok(0);
            for i in 0..warm {
                warmed = raw_pg_insert(&client, &stmt, worker, u64::MAX - i).await;
                if warmed.is_err() {
                    break;
                }
            }
            // Wait even after a failure, so that the others are not stuck.
            barrier.wait().await;
            warmed?;
            let mut latency = Vec::with_capacity(per as usize);
            for i in 0..per {
                let t = Instant::now();
                raw_pg_insert(&client, &stmt, worker, i).await?;
                latency.push(micros(t));
            }
            Ok::<_, tokio_postgres::Error>(latency)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut latency = Vec::with_capacity(appenders);
    for h in handles {
        latency.push(h.await??);
    }
    let elapsed = start.elapsed();
    let latency_us = sorted(latency);
    let events = appenders as u64 * per;
    let client = pg_connect(url, Some(schema)).await?;
    let rows: i64 = client
        .query_one("SELECT COUNT(*) FROM events", &[])
        .await?
        .get(0);
    let ok = rows as u64 == events + appenders as u64 * warm;
    if !ok {
        eprintln!(
            "VERIFY FAILED: postgres raw {}: {rows} rows",
            case_name(appenders)
        );
    }
    Ok(Measurement {
        backend: "postgres",
        case: case_name(appenders),
        imp: "raw",
        events,
        elapsed,
        verified: ok,
        latency_us,
    })
}

/// Drops this run's schemas, and those this benchmark left more than an hour
/// ago (an interrupted run); other benchmarks' `bench_*` schemas are left alone.
async fn drop_schemas(url: &str, ours: &[String]) {
    let Ok(client) = pg_connect(url, None).await else {
        eprintln!("could not reconnect to drop the benchmark schemas");
        return;
    };
    let mut names: Vec<String> = ours.to_vec();
    let cutoff = chrono::Utc::now().timestamp() - 3600;
    if let Ok(rows) = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench\\_append\\_%'",
            &[],
        )
        .await
    {
        for row in rows {
            let name: String = row.get(0);
            let ts = name.split('_').nth(2).and_then(|s| s.parse::<i64>().ok());
            if matches!(ts, Some(ts) if ts < cutoff) {
                names.push(name);
            }
        }
    }
    for name in names {
        if let Err(e) = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            .await
        {
            eprintln!("could not drop schema {name}: {e}");
        }
    }
}

async fn bench_pg(url: &str, plan: &Plan, out: &mut Vec<Measurement>) -> BenchResult<()> {
    let mut schemas = Vec::new();
    let result = async {
        let mut cases = vec![(1usize, PG_SINGLE)];
        cases.extend(CONCURRENCY.iter().map(|&n| (n, PG_CONCURRENT)));
        for (appenders, base) in cases {
            let (per, warm) = plan.split(base, appenders);
            for _ in 0..plan.rounds {
                if plan.wants("postgres", appenders, "raw") {
                    let raw_schema = format!("bench_append_{}", unique());
                    schemas.push(raw_schema.clone());
                    let raw = bench_raw_pg(url, &raw_schema, appenders, per, warm).await?;
                    report_progress(&raw);
                    out.push(raw);
                }
                if plan.wants("postgres", appenders, "store") {
                    let store_schema = format!("bench_append_{}", unique());
                    schemas.push(store_schema.clone());
                    let mut config = StoreConfig::new(url);
                    config.pg_schema = Some(store_schema);
                    let store = bench_store("postgres", &config, appenders, per, warm).await?;
                    report_progress(&store);
                    out.push(store);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    }
    .await;
    drop_schemas(url, &schemas).await;
    result
}

// ----- output -----

/// One row per (backend, case, impl), in first-run order: the median round
/// by elapsed time, verified only if every round verified.
fn summarize(runs: Vec<Measurement>) -> Vec<Measurement> {
    let mut groups: Vec<Vec<Measurement>> = Vec::new();
    for m in runs {
        match groups
            .iter_mut()
            .find(|g| g[0].backend == m.backend && g[0].case == m.case && g[0].imp == m.imp)
        {
            Some(g) => g.push(m),
            None => groups.push(vec![m]),
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            let all_ok = g.iter().all(|m| m.verified);
            g.sort_by_key(|m| m.elapsed);
            let mut median = g.swap_remove(g.len() / 2);
            median.verified = all_ok;
            median
        })
        .collect()
}

fn report_progress(m: &Measurement) {
    eprintln!(
        "  done: {:<8} {:<13} {:<5} {:>7} events in {:>7.3}s  (p50 {} us, p90 {} us)",
        m.backend,
        m.case,
        m.imp,
        m.events,
        m.elapsed.as_secs_f64(),
        m.latency(0.5),
        m.latency(0.9)
    );
}

/// The URL with any password replaced, for printing.
fn ratio(rows: &[Measurement], m: &Measurement) -> Option<f64> {
    if m.imp != "store" {
        return None;
    }
    rows.iter()
        .find(|r| r.imp == "raw" && r.backend == m.backend && r.case == m.case)
        .map(|raw| m.rate() / raw.rate())
}

fn print_table(rows: &[Measurement]) {
    println!();
    println!(
        "{:<9} {:<13} {:<6} {:>8} {:>9} {:>11} {:>10} {:>8} {:>8} {:>8}  verified",
        "backend",
        "case",
        "impl",
        "events",
        "seconds",
        "events/s",
        "store/raw",
        "p50 us",
        "p90 us",
        "p99 us"
    );
    println!("{}", "-".repeat(109));
    for m in rows {
        let ratio = ratio(rows, m)
            .map(|r| format!("{r:.2}"))
            .unwrap_or_default();
        let verified = if m.verified { "ok" } else { "FAILED" };
        println!(
            "{:<9} {:<13} {:<6} {:>8} {:>9.3} {:>11.0} {:>10} {:>8} {:>8} {:>8}  {}",
            m.backend,
            m.case,
            m.imp,
            m.events,
            m.elapsed.as_secs_f64(),
            m.rate(),
            ratio,
            m.latency(0.5),
            m.latency(0.9),
            m.latency(0.99),
            verified
        );
    }
}

fn print_goals(rows: &[Measurement]) {
    println!();
    println!("goals:");
    for backend in ["sqlite", "postgres"] {
        if let Some(store) = rows
            .iter()
            .find(|m| m.backend == backend && m.imp == "store" && m.case == case_name(1))
        {
            if let Some(r) = ratio(rows, store) {
                println!(
                    "  {backend:<8} store single appends >= 80% of raw loop: {:>5.1}%  {}",
                    r * 100.0,
                    if r >= 0.8 { "met" } else { "NOT met" }
                );
            }
        }
    }
    let sqlite_raw_single = rows
        .iter()
        .find(|m| m.backend == "sqlite" && m.imp == "raw" && m.case == case_name(1));
    for m in rows
        .iter()
        .filter(|m| m.backend == "sqlite" && m.imp == "store" && m.case != case_name(1))
    {
        if let Some(raw) = sqlite_raw_single {
            println!(
                "  sqlite   store {:<13} vs the raw single loop:  {:>5.2}x",
                m.case,
                m.rate() / raw.rate()
            );
        }
        println!(
            "  sqlite   store {:<13} > 50,000 events/s:   {:>8.0}/s  {}",
            m.case,
            m.rate(),
            if m.rate() > 50_000.0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
}

fn main() -> BenchResult<()> {
    let scale: f64 = match std::env::var("SHEPHERD_BENCH_SCALE") {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("SHEPHERD_BENCH_SCALE={s:?}: {e}"))?,
        Err(_) => 1.0,
    };
    if !(scale > 0.0 && scale.is_finite()) {
        return Err(format!("SHEPHERD_BENCH_SCALE must be a positive number, got {scale}").into());
    }
    let pg_url = std::env::var("SHEPHERD_BENCH_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // `cargo bench` passes `--bench`; other arguments are name filters.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rounds: usize = match std::env::var("SHEPHERD_BENCH_ROUNDS") {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("SHEPHERD_BENCH_ROUNDS={s:?}: {e}"))?,
        Err(_) => 3,
    };
    let rounds = rounds.max(1);
    let plan = Plan {
        scale,
        rounds,
        filters,
    };

    println!("shepherd-store append benchmark");
    println!("cores: {cores} (tokio multi-thread runtime, {cores} worker threads)");
    println!("scale: {scale} (SHEPHERD_BENCH_SCALE)");
    println!("rounds: {rounds} per case, the table shows the median (SHEPHERD_BENCH_ROUNDS)");
    if !plan.filters.is_empty() {
        println!("only: {:?}", plan.filters);
    }
    println!(
        "payload: {} bytes of JSON per event",
        payload(0, 0).to_string().len()
    );

    let rows = runtime.block_on(async {
        let mut rows = Vec::new();
        eprintln!("sqlite: running");
        bench_sqlite(&plan, &mut rows).await?;
        match pg_connect(&pg_url, None).await {
            Ok(client) => {
                drop(client);
                eprintln!(
                    "postgres ({}): running",
                    shepherd_store::redact_url(&pg_url)
                );
                bench_pg(&pg_url, &plan, &mut rows).await?;
            }
            Err(e) => {
                println!(
                    "postgres: unreachable at {} ({e}); skipping the PostgreSQL rows",
                    shepherd_store::redact_url(&pg_url)
                );
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(rows)
    })?;

    let rows = summarize(rows);
    print_table(&rows);
    print_goals(&rows);
    if rows.iter().any(|m| !m.verified) {
        return Err("verification failed (see above)".into());
    }
    Ok(())
}
