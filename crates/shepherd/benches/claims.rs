//! Claim+complete throughput: how many "claim a pending task, then complete
//! it" cycles per second Shepherd sustains on SQLite and on PostgreSQL, with
//! 1, 4 and 16 concurrent workers, through three paths measured in the same
//! run by the same driver:
//!
//! - `store`: in-process, `Store::claim_task` then `Store::progress(…,
//!   "worker.execution.completed", …)` (simple workflow: pending → claimed →
//!   done);
//! - `http`: the real server (`shepherd::server::run` on `127.0.0.1:0`, in
//!   this process), driven through `POST …/tasks/{vtid}/claim` and
//!   `POST …/tasks/{vtid}/progress`, one keep-alive `reqwest::Client` per
//!   worker;
//! - `baseline`: the same two transactions on a bare table
//!   `bench_tasks(id text primary key, state text, worker text)` through the
//!   raw driver: `SELECT … WHERE state = 'pending' AND id = $1 [FOR UPDATE SKIP
//!   LOCKED] LIMIT 1` + `UPDATE … SET state = 'claimed'`, commit; then
//!   `UPDATE … SET state = 'done'`, commit. PostgreSQL: tokio-postgres, one
//!   connection per worker. SQLite: rusqlite, WAL, `synchronous=NORMAL`,
//!   `BEGIN IMMEDIATE` per transaction, one connection per worker thread
//!   (`busy_timeout`).
//!
//! Each worker works through its own pre-assigned list of tasks
//! (`B-{worker}-{n}`, after a short untimed warm-up on `W-{worker}-{n}`), so
//! the cycle cost is measured, not contention for the same task. Tasks (and
//! rows) are created before timing starts; on PostgreSQL every case's schema
//! is then analysed (`ANALYZE`), as the baselines' tables are. Every case gets a fresh database
//! (a file under `/tmp/shepherd-bench-claims-<unique>/`, removed afterwards,
//! or a PostgreSQL schema `bench_<unique>`, dropped at the end). After each
//! case every task must have ended `done` (the table's `verified` column);
//! failed cycles are counted and the first few errors printed.
//!
//! - `claim-next`: in-process, `Store::claim_next` with `max` = 100 from a
//!   shared queue, then one `progress` completion per run (`claim-next-batch`:
//!   all of a claim's completions in one `Store::progress_batch`);
//! - `claim-next-http`: the same over the real server:
//!   `POST …/tasks/claim {"worker_id", "max": 100}`, then one
//!   `POST …/tasks/{vtid}/progress` per run;
//! - `baseline-next`: the bare-SQL form of claim-next on the same
//!   `bench_tasks` table, one autocommit statement per step: `UPDATE … SET
//!   state = 'claimed' WHERE id IN (SELECT id … WHERE state = 'pending' ORDER
//!   BY id LIMIT 100 [FOR UPDATE SKIP LOCKED]) RETURNING id`, then one
//!   `UPDATE … SET state = 'done'` per row (SQLite: each in `BEGIN
//!   IMMEDIATE` … `COMMIT`). The claim-next rows' "vs baseline" is over it.
//!
//! The table also gives the HTTP rows as a ratio of their in-process
//! counterparts (`http` over `store`, `claim-next-http` over `claim-next`).
//!
//! - `claim-next-far` (PostgreSQL, 16 workers): `claim-next` with the store
//!   connected through a delaying TCP proxy (`delay_proxy`, 1 ms per round
//!   trip, half each way; `SHEPHERD_BENCH_FAR_MS` changes it), compared with
//!   graphile_worker behind the same proxy.
//!
//! The run ends with the write path's goals, each a ratio from this run.
//!
//! Every row also gives the whole machine's busy CPU per cycle during its
//! timed cycles (`/proc/stat`: this process and PostgreSQL alike).
//!
//! With `SHEPHERD_BENCH_ABSURD=/path/to/absurd` (the peer harness's Absurd
//! driver) the run ends with Absurd at 16 workers claiming one task per call
//! and 100 per call, with the PostgreSQL claim-by-id and claim-next rows as
//! ratios of it (`SHEPHERD_BENCH_ABSURD_DB` overrides its `--db`). Absurd
//! drains a backlog as deep as the Shepherd case it is set against (its
//! claim reads every pending task, so its rate depends on the depth).
//!
//! With `SHEPHERD_BENCH_GRAPHILE=/path/to/graphile` (the peer harness's
//! binary, built on its own, never part of this workspace) the run ends with
//! graphile_worker's LocalQueue at the same worker counts and Shepherd's
//! PostgreSQL rates as ratios of it (`SHEPHERD_BENCH_GRAPHILE_DB` overrides
//! its `--db`).
//!
//! Run (release mode):
//!
//! ```text
//! cargo bench -p shepherd --bench claims
//! ```
//!
//! Arguments after `--` select cases by name ("backend path N workers"), e.g.
//! `cargo bench -p shepherd --bench claims -- sqlite "16 workers"` or
//! `-- "postgres store"`.
//!
//! Environment:
//! - `SHEPHERD_BENCH_SCALE` (float, default 1.0) scales every cycle count;
//! - `SHEPHERD_BENCH_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`);
//!   if that server is unreachable the PostgreSQL rows are skipped.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use shepherd_store::{Applied, LeaseRules, NewTask, Registration, Store, StoreConfig, TaskFilter};
use tokio::sync::{oneshot, Barrier};

mod delay_proxy;
use delay_proxy::{upstream_of, url_via, DelayProxy};

type BenchError = Box<dyn std::error::Error + Send + Sync>;
type BenchResult<T> = Result<T, BenchError>;

const WORKERS: [usize; 3] = [1, 4, 16];
const COMPLETED: &str = "worker.execution.completed";
/// Prefixes of the timed and the warm-up tasks.
const TIMED: &str = "B";
const WARM: &str = "W";
/// Warm-up cycles per worker, as a fraction of its timed cycles (at least 2).
const WARMUP_FRACTION: f64 = 0.05;
/// Concurrent requests while creating tasks (untimed).
const SETUP_CONCURRENCY: usize = 16;
/// Errors kept (per case) to print.
const ERROR_SAMPLES: usize = 3;

const RULES: LeaseRules = LeaseRules {
    ttl_ms: 3_600_000,
    heartbeat_timeout_ms: 300_000,
    not_before: 0,
    cancel_grace_ms: 30_000,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Baseline,
    Store,
    Http,
    /// In-process claim-next (`max` = [`CLAIM_NEXT_MAX`]), one completion per run.
    ClaimNext,
    /// In-process claim-next, each batch's completions in one `progress_batch`.
    ClaimNextBatch,
    /// Claim-next over HTTP, one progress call per run.
    ClaimNextHttp,
    /// Bare-SQL claim-next: one statement claims up to [`CLAIM_NEXT_MAX`]
    /// rows, one statement completes each.
    BaselineNext,
    /// In-process claim-next (as [`Route::ClaimNext`]) with PostgreSQL
    /// behind a [`DelayProxy`] that adds [`far_round_trip`] to every round trip.
    ClaimNextFar,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Baseline => "baseline",
            Route::Store => "store",
            Route::Http => "http",
            Route::ClaimNext => "claim-next",
            Route::ClaimNextBatch => "claim-next-batch",
            Route::ClaimNextHttp => "claim-next-http",
            Route::BaselineNext => "baseline-next",
            Route::ClaimNextFar => "claim-next-far",
        }
    }

    /// The bare-SQL case this route is compared with.
    fn baseline(self) -> Route {
        match self {
            Route::ClaimNext
            | Route::ClaimNextBatch
            | Route::ClaimNextHttp
            | Route::ClaimNextFar => Route::BaselineNext,
            _ => Route::Baseline,
        }
    }

    /// The in-process case an HTTP route is compared with.
    fn in_process(self) -> Option<Route> {
        match self {
            Route::Http => Some(Route::Store),
            Route::ClaimNextHttp => Some(Route::ClaimNext),
            _ => None,
        }
    }
}

/// Total timed cycles per case at scale 1.0, split evenly between the
/// workers. Sized so that each case runs for about 3-6 s at the speeds
/// measured on 2026-11-28 (2 cores, shared); raise them if the store gets
/// much faster. A case much shorter than that measures its own start: on
/// PostgreSQL, the first seconds of a case run on plans made for its empty
/// tables, until the store analyses them (`postgres/statistics.rs`).
fn base_cycles(backend: Backend, route: Route, workers: usize) -> f64 {
    match (backend, route, workers) {
        (Backend::Sqlite, Route::Baseline, _) => 50_000.0,
        (Backend::Sqlite, Route::Store, _) => 8_000.0,
        (Backend::Sqlite, Route::Http, _) => 6_000.0,
        (Backend::Postgres, Route::Baseline, 1) => 4_000.0,
        (Backend::Postgres, Route::Baseline, 4) => 10_000.0,
        (Backend::Postgres, Route::Baseline, _) => 20_000.0,
        (Backend::Postgres, Route::Store, 1) => 2_400.0,
        (Backend::Postgres, Route::Store, 4) => 4_000.0,
        (Backend::Postgres, Route::Store, _) => 6_000.0,
        (Backend::Postgres, Route::Http, 1) => 2_000.0,
        (Backend::Postgres, Route::Http, 4) => 3_200.0,
        (Backend::Postgres, Route::Http, _) => 5_000.0,
        (Backend::Sqlite, Route::ClaimNext | Route::ClaimNextBatch, _) => 10_000.0,
        (Backend::Postgres, Route::ClaimNext | Route::ClaimNextBatch, _) => 8_000.0,
        (Backend::Sqlite, Route::ClaimNextHttp, _) => 10_000.0,
        (Backend::Postgres, Route::ClaimNextHttp, _) => 8_000.0,
        (Backend::Sqlite, Route::BaselineNext, _) => 50_000.0,
        (Backend::Postgres, Route::BaselineNext, _) => 40_000.0,
        (Backend::Sqlite, Route::ClaimNextFar, _) => 0.0,
        (Backend::Postgres, Route::ClaimNextFar, _) => 5_000.0,
    }
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

fn task_id(prefix: &str, worker: usize, n: u64) -> String {
    format!("{prefix}-{worker}-{n}")
}

fn worker_id(worker: usize) -> String {
    format!("bench-worker-{worker}")
}

/// Every task of a case: each worker's warm-up list, then its timed list.
fn all_task_ids(workers: usize, per: u64, warm: u64) -> Vec<String> {
    let mut ids = Vec::with_capacity(workers * (per + warm) as usize);
    for w in 0..workers {
        ids.extend((0..warm).map(|n| task_id(WARM, w, n)));
        ids.extend((0..per).map(|n| task_id(TIMED, w, n)));
    }
    ids
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> BenchResult<TempDir> {
        let dir = std::env::temp_dir().join(format!("shepherd-bench-claims-{}", unique()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
    fn db_path(&self) -> PathBuf {
        self.0.join("bench.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Failed cycles of one case, with the first few messages.
#[derive(Debug, Default)]
struct Tally {
    errors: u64,
    samples: Vec<String>,
}

impl Tally {
    fn record(&mut self, outcome: Result<(), String>) {
        if let Err(e) = outcome {
            self.errors += 1;
            if self.samples.len() < ERROR_SAMPLES {
                self.samples.push(e);
            }
        }
    }
    fn merge(&mut self, other: Tally) {
        self.errors += other.errors;
        for s in other.samples {
            if self.samples.len() < ERROR_SAMPLES {
                self.samples.push(s);
            }
        }
    }
}

/// What to run: counts scaled by `SHEPHERD_BENCH_SCALE`, and optional name
/// filters from the command line.
struct Plan {
    scale: f64,
    filters: Vec<String>,
}

impl Plan {
    fn wants(&self, backend: Backend, route: Route, workers: usize) -> bool {
        let name = case_name(backend, route, workers);
        self.filters.is_empty() || self.filters.iter().any(|f| name.contains(f.as_str()))
    }
    /// (timed cycles per worker, warm-up cycles per worker).
    fn split(&self, backend: Backend, route: Route, workers: usize) -> (u64, u64) {
        let total = (base_cycles(backend, route, workers) * self.scale).round() as u64;
        let per = (total / workers as u64).max(1);
        let warm = ((per as f64 * WARMUP_FRACTION).round() as u64).max(2);
        (per, warm)
    }
}

impl Plan {
    /// Tasks in the shared queue of a claim-next case.
    fn total(&self, backend: Backend, route: Route, workers: usize) -> u64 {
        ((base_cycles(backend, route, workers) * self.scale).round() as u64).max(1)
    }
}

fn case_name(backend: Backend, route: Route, workers: usize) -> String {
    let w = if workers == 1 { "worker" } else { "workers" };
    format!("{} {} {workers} {w}", backend.name(), route.name())
}

struct Measurement {
    backend: Backend,
    route: Route,
    workers: usize,
    cycles: u64,
    elapsed: Duration,
    /// Failed cycles, warm-up included.
    errors: u64,
    error_samples: Vec<String>,
    /// Every task of the case (warm-up included) ended `done`.
    verified: bool,
    /// The machine's busy CPU time during the timed cycles (all processes:
    /// this one and PostgreSQL), from `/proc/stat`.
    busy: Option<Duration>,
}

impl Measurement {
    /// Busy CPU microseconds per cycle, over the whole machine.
    fn cpu_us_per_cycle(&self) -> Option<f64> {
        self.busy
            .map(|b| b.as_secs_f64() * 1e6 / self.cycles.max(1) as f64)
    }

    fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }
    /// Mean time one worker spends on one cycle.
    fn latency_ms(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1000.0 * self.workers as f64 / self.cycles as f64
    }
}

/// The machine's busy CPU time so far (user, nice, system, irq, softirq and
/// steal over every core, from the first line of `/proc/stat`), in clock
/// ticks of 1/100 s; `None` where there is no `/proc/stat`.
fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal …
    let pick = |i: usize| fields.get(i).copied().unwrap_or(0);
    Some(pick(0) + pick(1) + pick(2) + pick(5) + pick(6) + pick(7))
}

/// Clock ticks per second in `/proc/stat` (USER_HZ, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// The start of a timed window: wall time and the machine's busy CPU.
struct Clock {
    at: Instant,
    busy: Option<u64>,
}

/// What a timed window took.
struct Timed {
    elapsed: Duration,
    busy: Option<Duration>,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            busy: busy_ticks(),
            at: Instant::now(),
        }
    }

    fn stop(&self) -> Timed {
        let elapsed = self.at.elapsed();
        let busy = self
            .busy
            .zip(busy_ticks())
            .map(|(a, b)| Duration::from_secs_f64(b.saturating_sub(a) as f64 / TICKS_PER_SEC));
        Timed { elapsed, busy }
    }
}

/// Spawns `workers` tasks; each does its warm-up, waits at the barrier, then
/// runs its timed cycles. Returns the time from the common start to the last
/// worker's end, and the merged error tally.
async fn drive<F, Fut>(workers: usize, spawn_worker: F) -> BenchResult<(Timed, Tally)>
where
    F: Fn(usize, Arc<Barrier>) -> Fut,
    Fut: Future<Output = Tally> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(workers + 1));
    let handles: Vec<_> = (0..workers)
        .map(|w| tokio::spawn(spawn_worker(w, barrier.clone())))
        .collect();
    barrier.wait().await;
    let start = Clock::start();
    let mut tally = Tally::default();
    for h in handles {
        tally.merge(h.await?);
    }
    Ok((start.stop(), tally))
}

/// One worker's loop: `warm` untimed cycles, the barrier, `per` timed ones.
/// Failures are tallied, never fatal, so that every worker reaches the barrier.
async fn worker_loop<C, Fut>(
    worker: usize,
    per: u64,
    warm: u64,
    barrier: Arc<Barrier>,
    mut cycle: C,
) -> Tally
where
    C: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let mut tally = Tally::default();
    for n in 0..warm {
        tally.record(cycle(task_id(WARM, worker, n)).await);
    }
    barrier.wait().await;
    for n in 0..per {
        tally.record(cycle(task_id(TIMED, worker, n)).await);
    }
    tally
}

fn report_case(m: &Measurement) {
    eprintln!(
        "  done: {:<30} {:>6} cycles in {:>7.3}s  {:>8.0}/s{}{}",
        case_name(m.backend, m.route, m.workers),
        m.cycles,
        m.elapsed.as_secs_f64(),
        m.rate(),
        if m.errors > 0 {
            format!("  {} ERRORS", m.errors)
        } else {
            String::new()
        },
        if m.verified { "" } else { "  VERIFY FAILED" },
    );
    for s in &m.error_samples {
        eprintln!("        error: {s}");
    }
}

// ----- the store -----

async fn store_cycle(store: &Store, worker: &str, vtid: &str) -> Result<(), String> {
    let grant = store
        .claim_task(worker, vtid, RULES)
        .await
        .map_err(|e| format!("claim {vtid}: {e}"))?;
    if grant.claim.run_id.is_empty() {
        return Err(format!("claim {vtid}: no run id"));
    }
    let applied = store
        .progress(
            worker,
            vtid,
            Some(grant.claim_token),
            COMPLETED,
            None,
            json!({}),
            None,
            RULES,
        )
        .await
        .map_err(|e| format!("complete {vtid}: {e}"))?;
    match applied {
        Applied::Moved { task, .. } if task.state == "done" => Ok(()),
        Applied::Moved { task, .. } => Err(format!("complete {vtid}: ended {:?}", task.state)),
        Applied::Rejected { task, .. } => Err(format!(
            "complete {vtid}: rejected in state {:?}",
            task.state
        )),
    }
}

/// Counts tasks in `state` (or all tasks) through the store.
async fn store_count(store: &Store, state: Option<&str>) -> BenchResult<i64> {
    let shepherd_store::Page { total, .. } = store
        .list_tasks(TaskFilter {
            state: state.map(str::to_owned),
            limit: 1,
            ..Default::default()
        })
        .await?;
    Ok(total)
}

async fn bench_store(
    backend: Backend,
    config: StoreConfig,
    workers: usize,
    per: u64,
    warm: u64,
) -> BenchResult<Measurement> {
    let store = Store::open(&config).await?;
    for w in 0..workers {
        store
            .register_worker(Registration {
                worker_id: Some(worker_id(w)),
                agent_id: "default".into(),
                worker_type: "builtin".into(),
                max_concurrent: 1,
                ..Default::default()
            })
            .await?;
    }
    let ids = all_task_ids(workers, per, warm);
    let expected = ids.len() as i64;
    let created: Vec<Result<_, _>> = futures::stream::iter(ids)
        .map(|vtid| {
            let store = store.clone();
            async move {
                store
                    .create_task(NewTask {
                        title: format!("bench {vtid}"),
                        spec: "claim and complete".into(),
                        vtid: Some(vtid),
                        dispatch: true,
                        ..Default::default()
                    })
                    .await
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await;
    for r in created {
        r?;
    }
    analyze_seeded(pg_of_store(&config)).await?;
    let (timed, tally) = drive(workers, |w, barrier| {
        let store = store.clone();
        let worker = worker_id(w);
        worker_loop(w, per, warm, barrier, move |vtid| {
            let (store, worker) = (store.clone(), worker.clone());
            async move { store_cycle(&store, &worker, &vtid).await }
        })
    })
    .await?;
    let done = store_count(&store, Some("done")).await?;
    let all = store_count(&store, None).await?;
    store.close();
    let m = Measurement {
        backend,
        route: Route::Store,
        workers,
        cycles: per * workers as u64,
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == expected && all == expected,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {expected} tasks done ({all} tasks in all)");
    }
    report_case(&m);
    Ok(m)
}

// ----- claim-next -----

/// Claims per claim-next call, as graphile's LocalQueue fetches jobs.
const CLAIM_NEXT_MAX: i64 = 100;

/// A shared queue of `total` tasks drained by `workers` workers, each
/// claiming up to [`CLAIM_NEXT_MAX`] at a time with `Store::claim_next` and
/// completing each run with its own `progress` call, or (`batched`) all of
/// a claim's runs with one `progress_batch`. Each cycle is one task.
async fn bench_claim_next(
    backend: Backend,
    config: StoreConfig,
    workers: usize,
    total: u64,
    route: Route,
) -> BenchResult<Measurement> {
    let batched = route == Route::ClaimNextBatch;
    let store = Store::open(&config).await?;
    for w in 0..workers {
        store
            .register_worker(Registration {
                worker_id: Some(worker_id(w)),
                agent_id: "default".into(),
                worker_type: "builtin".into(),
                max_concurrent: CLAIM_NEXT_MAX,
                ..Default::default()
            })
            .await?;
    }
    let created: Vec<Result<_, _>> = futures::stream::iter(0..total)
        .map(|n| {
            let store = store.clone();
            async move {
                store
                    .create_task(NewTask {
                        title: format!("bench Q-{n}"),
                        spec: "claim and complete".into(),
                        vtid: Some(format!("Q-{n}")),
                        dispatch: true,
                        ..Default::default()
                    })
                    .await
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await;
    for r in created {
        r?;
    }
    analyze_seeded(pg_of_store(&config)).await?;
    let done_count = Arc::new(AtomicU64::new(0));
    let (timed, tally) = drive(workers, |w, barrier| {
        let (store, worker, done_count) = (store.clone(), worker_id(w), done_count.clone());
        async move {
            barrier.wait().await;
            let mut tally = Tally::default();
            loop {
                let grants = match store.claim_next(&worker, CLAIM_NEXT_MAX, RULES).await {
                    Ok(g) => g,
                    Err(e) => {
                        tally.record(Err(format!("claim-next: {e}")));
                        break;
                    }
                };
                if grants.is_empty() {
                    break;
                }
                if batched {
                    let reports = grants
                        .into_iter()
                        .map(|g| shepherd_store::ProgressReport {
                            vtid: g.task.vtid,
                            claim_token: Some(g.claim_token),
                            event: COMPLETED.into(),
                            message: None,
                            metadata: json!({}),
                            result: None,
                        })
                        .collect();
                    match store.progress_batch(&worker, reports, RULES).await {
                        Ok(results) => {
                            for r in results {
                                match r {
                                    Ok(_) => {
                                        done_count.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(e) => tally.record(Err(format!("complete: {e}"))),
                                }
                            }
                        }
                        Err(e) => tally.record(Err(format!("progress batch: {e}"))),
                    }
                } else {
                    for g in grants {
                        let r = store
                            .progress(
                                &worker,
                                &g.task.vtid,
                                Some(g.claim_token),
                                COMPLETED,
                                None,
                                json!({}),
                                None,
                                RULES,
                            )
                            .await;
                        match r {
                            Ok(_) => {
                                done_count.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => tally.record(Err(format!("complete {}: {e}", g.task.vtid))),
                        }
                    }
                }
            }
            tally
        }
    })
    .await?;
    let done = store_count(&store, Some("done")).await?;
    let all = store_count(&store, None).await?;
    store.close();
    let m = Measurement {
        backend,
        route,
        workers,
        cycles: done_count.load(Ordering::Relaxed),
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == total as i64 && all == total as i64,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {total} tasks done ({all} tasks in all)");
    }
    report_case(&m);
    Ok(m)
}

// ----- HTTP -----

/// The real server, running in this process on `127.0.0.1:0`.
struct Server {
    base: String,
    stop: Option<oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<Result<(), String>>,
}

impl Server {
    async fn start(vars: HashMap<String, String>) -> BenchResult<Server> {
        let config = shepherd::config::Config::load_with(None, &|k| vars.get(k).cloned())?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            shepherd::server::run(config, listener, async move {
                let _ = stopped.await;
            })
            .await
            .map_err(|e| e.to_string())
        });
        let probe = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if handle.is_finished() {
                return Err(match handle.await? {
                    Err(e) => format!("the server stopped at start-up: {e}").into(),
                    Ok(()) => "the server stopped at start-up".into(),
                });
            }
            let ready = probe.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            if Instant::now() > deadline {
                return Err("the server did not become ready within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Server {
            base,
            stop: Some(stop),
            handle,
        })
    }

    async fn stop(mut self) -> BenchResult<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(30), &mut self.handle).await {
            Ok(joined) => joined?.map_err(BenchError::from),
            Err(_) => {
                self.handle.abort();
                Err("the server did not stop within 30 s".into())
            }
        }
    }
}

/// POSTs `body` and returns the JSON answer, or an error naming the status.
async fn post_json(
    client: &reqwest::Client,
    url: String,
    body: &Value,
    what: &str,
) -> Result<Value, String> {
    let resp = client
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let status = resp.status();
    let answer: Value = resp.json().await.map_err(|e| format!("{what}: {e}"))?;
    if !status.is_success() {
        return Err(format!("{what}: HTTP {status}: {answer}"));
    }
    Ok(answer)
}

async fn http_cycle(
    client: &reqwest::Client,
    base: &str,
    worker: &str,
    vtid: &str,
) -> Result<(), String> {
    let url = format!("{base}/api/v1/worker/orchestrator/tasks/{vtid}");
    let grant = post_json(
        client,
        format!("{url}/claim"),
        &json!({ "worker_id": worker }),
        &format!("claim {vtid}"),
    )
    .await?;
    let token = grant["claim_token"]
        .as_str()
        .ok_or_else(|| format!("claim {vtid}: no claim_token in {grant}"))?;
    if !grant["run_id"].is_string() {
        return Err(format!("claim {vtid}: no run_id in {grant}"));
    }
    let applied = post_json(
        client,
        format!("{url}/progress"),
        &json!({ "worker_id": worker, "event": COMPLETED, "claim_token": token }),
        &format!("complete {vtid}"),
    )
    .await?;
    if applied["state"] != "done" {
        return Err(format!("complete {vtid}: answered {applied}"));
    }
    Ok(())
}

/// Counts tasks in `state` (or all tasks) through `GET /api/v1/tasks`.
async fn http_count(client: &reqwest::Client, base: &str, state: Option<&str>) -> BenchResult<i64> {
    let mut url = format!("{base}/api/v1/tasks?limit=1");
    if let Some(s) = state {
        url.push_str(&format!("&state={s}"));
    }
    let resp = client.get(url).send().await?;
    let status = resp.status();
    let body: Value = resp.json().await?;
    body["total"]
        .as_i64()
        .ok_or_else(|| format!("GET /api/v1/tasks: HTTP {status}: {body}").into())
}

/// The PostgreSQL database and schema a store opened with `config` uses.
fn pg_of_store(config: &StoreConfig) -> Option<(&str, &str)> {
    Some((config.url.as_str(), config.pg_schema.as_deref()?))
}

/// The PostgreSQL database and schema a server started with `vars` uses.
fn pg_of(vars: &HashMap<String, String>) -> Option<(&str, &str)> {
    Some((
        vars.get("SHEPHERD_DATABASE_URL")?.as_str(),
        vars.get("SHEPHERD_PG_SCHEMA")?.as_str(),
    ))
}

/// Gives PostgreSQL's planner statistics on a case's freshly seeded
/// schema, as the bare baselines' table gets them. A deployment's tables
/// are analysed by autovacuum within a minute of their first writes and
/// again as they grow; a case lasts seconds, so without this every case
/// would measure plans made for tables the planner believes empty.
async fn analyze_seeded(pg: Option<(&str, &str)>) -> BenchResult<()> {
    if let Some((url, schema)) = pg {
        let client = pg_connect(url, None).await?;
        let tables: String = client
            .query_one(
                "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') \
                 FROM pg_tables WHERE schemaname = $1",
                &[&schema],
            )
            .await?
            .get(0);
        client.batch_execute(&format!("ANALYZE {tables}")).await?;
    }
    Ok(())
}

/// Environment for the server: a data directory, quiet logs, and for
/// PostgreSQL the database and a fresh schema. An empty configuration file in
/// `dir` keeps any `shepherd.toml` in the working directory out of the way.
fn server_vars(dir: &Path, pg: Option<(&str, &str)>) -> BenchResult<HashMap<String, String>> {
    let file = dir.join("shepherd.toml");
    std::fs::write(&file, "")?;
    let mut vars = HashMap::new();
    vars.insert("SHEPHERD_CONFIG".to_owned(), file.display().to_string());
    vars.insert("SHEPHERD_DATA_DIR".to_owned(), dir.display().to_string());
    vars.insert("SHEPHERD_LOG".to_owned(), "warn".to_owned());
    if let Some((url, schema)) = pg {
        vars.insert("SHEPHERD_DATABASE_URL".to_owned(), url.to_owned());
        vars.insert("SHEPHERD_PG_SCHEMA".to_owned(), schema.to_owned());
    }
    Ok(vars)
}

async fn bench_http(
    backend: Backend,
    vars: HashMap<String, String>,
    workers: usize,
    per: u64,
    warm: u64,
) -> BenchResult<Measurement> {
    let server = Server::start(vars.clone()).await?;
    let base = server.base.clone();
    let setup = reqwest::Client::new();
    for w in 0..workers {
        post_json(
            &setup,
            format!("{base}/api/v1/worker/orchestrator/register"),
            &json!({ "worker_id": worker_id(w) }),
            "register",
        )
        .await?;
    }
    let ids = all_task_ids(workers, per, warm);
    let expected = ids.len() as i64;
    let created: Vec<Result<_, _>> = futures::stream::iter(ids)
        .map(|vtid| {
            let (setup, url) = (setup.clone(), format!("{base}/api/v1/tasks"));
            async move {
                let body = json!({ "vtid": vtid, "title": format!("bench {vtid}"), "spec": "claim and complete" });
                post_json(&setup, url, &body, &format!("create {vtid}")).await
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await;
    for r in created {
        r?;
    }
    analyze_seeded(pg_of(&vars)).await?;
    let (timed, tally) = drive(workers, |w, barrier| {
        // One client (and so one keep-alive connection) per worker.
        let client = reqwest::Client::new();
        let (base, worker) = (base.clone(), worker_id(w));
        worker_loop(w, per, warm, barrier, move |vtid| {
            let (client, base, worker) = (client.clone(), base.clone(), worker.clone());
            async move { http_cycle(&client, &base, &worker, &vtid).await }
        })
    })
    .await?;
    let done = http_count(&setup, &base, Some("done")).await?;
    let all = http_count(&setup, &base, None).await?;
    drop(setup);
    server.stop().await?;
    let m = Measurement {
        backend,
        route: Route::Http,
        workers,
        cycles: per * workers as u64,
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == expected && all == expected,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {expected} tasks done ({all} tasks in all)");
    }
    report_case(&m);
    Ok(m)
}

/// [`bench_claim_next`] over HTTP: a shared queue of `total` tasks drained
/// by `workers` workers, each claiming up to [`CLAIM_NEXT_MAX`] per
/// `POST …/tasks/claim` and completing each run with its own progress call.
async fn bench_claim_next_http(
    backend: Backend,
    vars: HashMap<String, String>,
    workers: usize,
    total: u64,
) -> BenchResult<Measurement> {
    use shepherd_protocol::connector::{ClaimNextResponse, EventApplied};
    let server = Server::start(vars.clone()).await?;
    let base = server.base.clone();
    let setup = reqwest::Client::new();
    for w in 0..workers {
        post_json(
            &setup,
            format!("{base}/api/v1/worker/orchestrator/register"),
            &json!({ "worker_id": worker_id(w), "max_concurrent": CLAIM_NEXT_MAX }),
            "register",
        )
        .await?;
    }
    let created: Vec<Result<_, _>> = futures::stream::iter(0..total)
        .map(|n| {
            let (setup, url) = (setup.clone(), format!("{base}/api/v1/tasks"));
            async move {
                let body = json!({ "vtid": format!("Q-{n}"), "title": format!("bench Q-{n}"), "spec": "claim and complete" });
                post_json(&setup, url, &body, &format!("create Q-{n}")).await
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .collect()
        .await;
    for r in created {
        r?;
    }
    analyze_seeded(pg_of(&vars)).await?;
    let done_count = Arc::new(AtomicU64::new(0));
    let (timed, tally) = drive(workers, |w, barrier| {
        let client = reqwest::Client::new();
        let (base, worker, done_count) = (base.clone(), worker_id(w), done_count.clone());
        async move {
            barrier.wait().await;
            let mut tally = Tally::default();
            let orchestrator = format!("{base}/api/v1/worker/orchestrator/tasks");
            loop {
                let answer = post_json(
                    &client,
                    format!("{orchestrator}/claim"),
                    &json!({ "worker_id": worker, "max": CLAIM_NEXT_MAX }),
                    "claim-next",
                )
                .await
                .and_then(|v| {
                    serde_json::from_value::<ClaimNextResponse>(v)
                        .map_err(|e| format!("claim-next: {e}"))
                });
                let claims = match answer {
                    Ok(a) => a.claims,
                    Err(e) => {
                        tally.record(Err(e));
                        break;
                    }
                };
                if claims.is_empty() {
                    break;
                }
                for c in claims {
                    let body =
                        json!({ "worker_id": worker, "event": COMPLETED, "claim_token": c.claim_token });
                    let r = post_json(
                        &client,
                        format!("{orchestrator}/{}/progress", c.vtid),
                        &body,
                        &format!("complete {}", c.vtid),
                    )
                    .await
                    .and_then(|v| {
                        serde_json::from_value::<EventApplied>(v)
                            .map_err(|e| format!("complete {}: {e}", c.vtid))
                    });
                    match r {
                        Ok(p) if p.state == "done" => {
                            done_count.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(p) => tally.record(Err(format!("complete {}: ended {:?}", c.vtid, p.state))),
                        Err(e) => tally.record(Err(e)),
                    }
                }
            }
            tally
        }
    })
    .await?;
    let done = http_count(&setup, &base, Some("done")).await?;
    let all = http_count(&setup, &base, None).await?;
    drop(setup);
    server.stop().await?;
    let m = Measurement {
        backend,
        route: Route::ClaimNextHttp,
        workers,
        cycles: done_count.load(Ordering::Relaxed),
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == total as i64 && all == total as i64,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {total} tasks done ({all} tasks in all)");
    }
    report_case(&m);
    Ok(m)
}

// ----- baseline: SQLite through rusqlite -----

const SQLITE_SELECT: &str =
    "SELECT id FROM bench_tasks WHERE state = 'pending' AND id = ?1 LIMIT 1";
const SQLITE_CLAIM: &str = "UPDATE bench_tasks SET state = 'claimed', worker = ?2 WHERE id = ?1";
const SQLITE_DONE: &str =
    "UPDATE bench_tasks SET state = 'done' WHERE id = ?1 AND state = 'claimed' AND worker = ?2";

fn sqlite_open(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(60))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

fn sqlite_cycle(conn: &rusqlite::Connection, worker: &str, id: &str) -> rusqlite::Result<bool> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let claimed = (|| {
        let found = conn
            .prepare_cached(SQLITE_SELECT)?
            .query_row([id], |r| r.get::<_, String>(0))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        if found.is_none() {
            return Ok(false);
        }
        conn.prepare_cached(SQLITE_CLAIM)?.execute([id, worker])?;
        Ok(true)
    })();
    if !matches!(claimed, Ok(true)) {
        let _ = conn.execute_batch("ROLLBACK");
        return claimed;
    }
    conn.execute_batch("COMMIT")?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let done = conn.prepare_cached(SQLITE_DONE)?.execute([id, worker]);
    if !matches!(done, Ok(1)) {
        let _ = conn.execute_batch("ROLLBACK");
        return done.map(|_| false);
    }
    conn.execute_batch("COMMIT")?;
    Ok(true)
}

fn sqlite_outcome(r: rusqlite::Result<bool>, id: &str) -> Result<(), String> {
    match r {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{id}: not pending, or not claimed by this worker")),
        Err(e) => Err(format!("{id}: {e}")),
    }
}

/// Threads with one connection each; returns the timed span and the tally.
fn sqlite_threads(path: &Path, workers: usize, per: u64, warm: u64) -> BenchResult<(Timed, Tally)> {
    let conns = (0..workers)
        .map(|_| sqlite_open(path))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let barrier = std::sync::Barrier::new(workers + 1);
    std::thread::scope(|s| {
        let barrier = &barrier;
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(w, conn)| {
                s.spawn(move || {
                    let worker = worker_id(w);
                    let mut tally = Tally::default();
                    for n in 0..warm {
                        let id = task_id(WARM, w, n);
                        tally.record(sqlite_outcome(sqlite_cycle(&conn, &worker, &id), &id));
                    }
                    barrier.wait();
                    for n in 0..per {
                        let id = task_id(TIMED, w, n);
                        tally.record(sqlite_outcome(sqlite_cycle(&conn, &worker, &id), &id));
                    }
                    tally
                })
            })
            .collect();
        barrier.wait();
        let start = Clock::start();
        let mut tally = Tally::default();
        for h in handles {
            tally.merge(h.join().map_err(|_| "a baseline thread panicked")?);
        }
        Ok((start.stop(), tally))
    })
}

fn sqlite_baseline(path: &Path, workers: usize, per: u64, warm: u64) -> BenchResult<Measurement> {
    let ids = all_task_ids(workers, per, warm);
    let expected = ids.len() as i64;
    {
        let mut conn = sqlite_open(path)?;
        conn.execute_batch(
            "CREATE TABLE bench_tasks (id TEXT PRIMARY KEY, state TEXT NOT NULL, worker TEXT)",
        )?;
        let tx = conn.transaction()?;
        {
            let mut insert =
                tx.prepare("INSERT INTO bench_tasks (id, state) VALUES (?1, 'pending')")?;
            for id in &ids {
                insert.execute([id])?;
            }
        }
        tx.commit()?;
    }
    let (timed, tally) = sqlite_threads(path, workers, per, warm)?;
    let conn = sqlite_open(path)?;
    let done: i64 = conn.query_row(
        "SELECT COUNT(*) FROM bench_tasks WHERE state = 'done'",
        [],
        |r| r.get(0),
    )?;
    let m = Measurement {
        backend: Backend::Sqlite,
        route: Route::Baseline,
        workers,
        cycles: per * workers as u64,
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == expected,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {expected} rows done");
    }
    report_case(&m);
    Ok(m)
}

// ----- baseline: PostgreSQL through tokio-postgres -----

const PG_SELECT: &str =
    "SELECT id FROM bench_tasks WHERE state = 'pending' AND id = $1 FOR UPDATE SKIP LOCKED LIMIT 1";
const PG_CLAIM: &str = "UPDATE bench_tasks SET state = 'claimed', worker = $2 WHERE id = $1";
const PG_DONE: &str =
    "UPDATE bench_tasks SET state = 'done' WHERE id = $1 AND state = 'claimed' AND worker = $2";

/// The bare baselines' queue: a fresh schema with one `bench_tasks` table
/// holding `ids` as pending rows, analysed. Returns the admin connection.
async fn pg_seed_bench_tasks(
    url: &str,
    schema: &str,
    ids: &[String],
) -> BenchResult<tokio_postgres::Client> {
    let admin = pg_connect(url, None).await?;
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.bench_tasks \
             (id TEXT PRIMARY KEY, state TEXT NOT NULL, worker TEXT)"
        ))
        .await?;
    admin
        .execute(
            &format!(
                "INSERT INTO {schema}.bench_tasks (id, state) SELECT unnest($1::text[]), 'pending'"
            ),
            &[&ids],
        )
        .await?;
    admin
        .batch_execute(&format!("ANALYZE {schema}.bench_tasks"))
        .await?;
    Ok(admin)
}

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

struct PgWorker {
    client: tokio_postgres::Client,
    select: tokio_postgres::Statement,
    claim: tokio_postgres::Statement,
    done: tokio_postgres::Statement,
}

impl PgWorker {
    async fn connect(url: &str, schema: &str) -> BenchResult<PgWorker> {
        let client = pg_connect(url, Some(schema)).await?;
        let select = client.prepare(PG_SELECT).await?;
        let claim = client.prepare(PG_CLAIM).await?;
        let done = client.prepare(PG_DONE).await?;
        Ok(PgWorker {
            client,
            select,
            claim,
            done,
        })
    }

    async fn cycle(&mut self, worker: &str, id: &str) -> Result<(), String> {
        let fail = |e: tokio_postgres::Error| format!("{id}: {e}");
        let tx = self.client.transaction().await.map_err(fail)?;
        if tx
            .query_opt(&self.select, &[&id])
            .await
            .map_err(fail)?
            .is_none()
        {
            return Err(format!("{id}: not pending"));
        }
        tx.execute(&self.claim, &[&id, &worker])
            .await
            .map_err(fail)?;
        tx.commit().await.map_err(fail)?;
        let tx = self.client.transaction().await.map_err(fail)?;
        if tx
            .execute(&self.done, &[&id, &worker])
            .await
            .map_err(fail)?
            != 1
        {
            return Err(format!("{id}: not claimed by this worker"));
        }
        tx.commit().await.map_err(fail)
    }
}

async fn pg_baseline(
    url: &str,
    schema: &str,
    workers: usize,
    per: u64,
    warm: u64,
) -> BenchResult<Measurement> {
    let ids = all_task_ids(workers, per, warm);
    let expected = ids.len() as i64;
    let admin = pg_seed_bench_tasks(url, schema, &ids).await?;
    let mut conns = Vec::with_capacity(workers);
    for _ in 0..workers {
        conns.push(PgWorker::connect(url, schema).await?);
    }
    let conns: Vec<_> = conns
        .into_iter()
        .map(|c| Arc::new(tokio::sync::Mutex::new(c)))
        .collect();
    let (timed, tally) = drive(workers, |w, barrier| {
        let conn = conns[w].clone();
        let worker = worker_id(w);
        worker_loop(w, per, warm, barrier, move |id| {
            let (conn, worker) = (conn.clone(), worker.clone());
            async move { conn.lock().await.cycle(&worker, &id).await }
        })
    })
    .await?;
    drop(conns);
    let done: i64 = admin
        .query_one(
            &format!("SELECT COUNT(*) FROM {schema}.bench_tasks WHERE state = 'done'"),
            &[],
        )
        .await?
        .get(0);
    let m = Measurement {
        backend: Backend::Postgres,
        route: Route::Baseline,
        workers,
        cycles: per * workers as u64,
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == expected,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {expected} rows done");
    }
    report_case(&m);
    Ok(m)
}

// ----- baseline-next: bare-SQL claim-next -----

const SQLITE_NEXT: &str = "UPDATE bench_tasks SET state = 'claimed', worker = ?1 WHERE id IN \
     (SELECT id FROM bench_tasks WHERE state = 'pending' ORDER BY id LIMIT ?2) RETURNING id";
const PG_NEXT: &str = "UPDATE bench_tasks SET state = 'claimed', worker = $1 WHERE id IN \
     (SELECT id FROM bench_tasks WHERE state = 'pending' ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED) \
     RETURNING id";

/// Creates `bench_tasks` holding `Q-0 … Q-(total-1)`, all pending.
fn queue_ids(total: u64) -> Vec<String> {
    (0..total).map(|n| format!("Q-{n:08}")).collect()
}

fn sqlite_baseline_next(path: &Path, workers: usize, total: u64) -> BenchResult<Measurement> {
    let ids = queue_ids(total);
    {
        let mut conn = sqlite_open(path)?;
        conn.execute_batch(
            "CREATE TABLE bench_tasks (id TEXT PRIMARY KEY, state TEXT NOT NULL, worker TEXT)",
        )?;
        let tx = conn.transaction()?;
        {
            let mut insert =
                tx.prepare("INSERT INTO bench_tasks (id, state) VALUES (?1, 'pending')")?;
            for id in &ids {
                insert.execute([id])?;
            }
        }
        tx.commit()?;
    }
    let conns = (0..workers)
        .map(|_| sqlite_open(path))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let barrier = std::sync::Barrier::new(workers + 1);
    let cycles = AtomicU64::new(0);
    let (timed, tally) = std::thread::scope(|s| {
        let (barrier, cycles) = (&barrier, &cycles);
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(w, conn)| {
                s.spawn(move || {
                    let worker = worker_id(w);
                    let mut tally = Tally::default();
                    barrier.wait();
                    loop {
                        let claimed = (|| {
                            conn.execute_batch("BEGIN IMMEDIATE")?;
                            let ids = conn
                                .prepare_cached(SQLITE_NEXT)?
                                .query_map(rusqlite::params![worker, CLAIM_NEXT_MAX], |r| {
                                    r.get::<_, String>(0)
                                })?
                                .collect::<rusqlite::Result<Vec<_>>>();
                            match ids {
                                Ok(ids) => {
                                    conn.execute_batch("COMMIT")?;
                                    Ok(ids)
                                }
                                Err(e) => {
                                    let _ = conn.execute_batch("ROLLBACK");
                                    Err(e)
                                }
                            }
                        })();
                        let ids = match claimed {
                            Ok(ids) if ids.is_empty() => break,
                            Ok(ids) => ids,
                            Err(e) => {
                                tally.record(Err(format!("claim-next: {e}")));
                                break;
                            }
                        };
                        for id in ids {
                            let done = (|| {
                                conn.execute_batch("BEGIN IMMEDIATE")?;
                                let n = conn.prepare_cached(SQLITE_DONE)?.execute([&id, &worker]);
                                match n {
                                    Ok(n) => {
                                        conn.execute_batch("COMMIT")?;
                                        Ok(n == 1)
                                    }
                                    Err(e) => {
                                        let _ = conn.execute_batch("ROLLBACK");
                                        Err(e)
                                    }
                                }
                            })();
                            if matches!(done, Ok(true)) {
                                cycles.fetch_add(1, Ordering::Relaxed);
                            }
                            tally.record(sqlite_outcome(done, &id));
                        }
                    }
                    tally
                })
            })
            .collect();
        barrier.wait();
        let start = Clock::start();
        let mut tally = Tally::default();
        for h in handles {
            tally.merge(h.join().map_err(|_| "a baseline thread panicked")?);
        }
        Ok::<_, BenchError>((start.stop(), tally))
    })?;
    let conn = sqlite_open(path)?;
    let done: i64 = conn.query_row(
        "SELECT COUNT(*) FROM bench_tasks WHERE state = 'done'",
        [],
        |r| r.get(0),
    )?;
    let m = Measurement {
        backend: Backend::Sqlite,
        route: Route::BaselineNext,
        workers,
        cycles: cycles.load(Ordering::Relaxed),
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == total as i64,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {total} rows done");
    }
    report_case(&m);
    Ok(m)
}

async fn pg_baseline_next(
    url: &str,
    schema: &str,
    workers: usize,
    total: u64,
) -> BenchResult<Measurement> {
    let ids = queue_ids(total);
    let admin = pg_seed_bench_tasks(url, schema, &ids).await?;
    let mut conns = Vec::with_capacity(workers);
    for _ in 0..workers {
        let client = pg_connect(url, Some(schema)).await?;
        let next = client.prepare(PG_NEXT).await?;
        let done = client.prepare(PG_DONE).await?;
        conns.push((client, next, done));
    }
    let conns: Vec<_> = conns
        .into_iter()
        .map(|c| std::sync::Mutex::new(Some(c)))
        .collect();
    let cycles = Arc::new(AtomicU64::new(0));
    let (timed, tally) = drive(workers, |w, barrier| {
        let (client, next, done) = conns[w]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .expect("one connection per worker");
        let (worker, cycles) = (worker_id(w), cycles.clone());
        async move {
            barrier.wait().await;
            let mut tally = Tally::default();
            loop {
                // Autocommit: each statement is its own transaction.
                let ids = match client.query(&next, &[&worker, &CLAIM_NEXT_MAX]).await {
                    Ok(rows) if rows.is_empty() => break,
                    Ok(rows) => rows
                        .iter()
                        .map(|r| r.get::<_, String>(0))
                        .collect::<Vec<_>>(),
                    Err(e) => {
                        tally.record(Err(format!("claim-next: {e}")));
                        break;
                    }
                };
                for id in ids {
                    match client.execute(&done, &[&id, &worker]).await {
                        Ok(1) => {
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => tally.record(Err(format!("{id}: not claimed by this worker"))),
                        Err(e) => tally.record(Err(format!("{id}: {e}"))),
                    }
                }
            }
            tally
        }
    })
    .await?;
    let done: i64 = admin
        .query_one(
            &format!("SELECT COUNT(*) FROM {schema}.bench_tasks WHERE state = 'done'"),
            &[],
        )
        .await?
        .get(0);
    let m = Measurement {
        backend: Backend::Postgres,
        route: Route::BaselineNext,
        workers,
        cycles: cycles.load(Ordering::Relaxed),
        elapsed: timed.elapsed,
        busy: timed.busy,
        errors: tally.errors,
        error_samples: tally.samples,
        verified: done == total as i64,
    };
    if !m.verified {
        eprintln!("  verify: {done} of {total} rows done");
    }
    report_case(&m);
    Ok(m)
}

// ----- the two backends -----

async fn bench_sqlite(plan: &Plan, out: &mut Vec<Measurement>) -> BenchResult<()> {
    let b = Backend::Sqlite;
    for workers in WORKERS {
        if plan.wants(b, Route::Baseline, workers) {
            let (per, warm) = plan.split(b, Route::Baseline, workers);
            let dir = TempDir::new()?;
            let path = dir.db_path();
            let m = tokio::task::spawn_blocking(move || {
                sqlite_baseline(&path, workers, per, warm).map_err(|e| e.to_string())
            })
            .await??;
            out.push(m);
        }
        if plan.wants(b, Route::Store, workers) {
            let (per, warm) = plan.split(b, Route::Store, workers);
            let dir = TempDir::new()?;
            let config = StoreConfig::new(format!("sqlite://{}", dir.db_path().display()));
            out.push(bench_store(b, config, workers, per, warm).await?);
        }
        if plan.wants(b, Route::Http, workers) {
            let (per, warm) = plan.split(b, Route::Http, workers);
            let dir = TempDir::new()?;
            let vars = server_vars(&dir.0, None)?;
            out.push(bench_http(b, vars, workers, per, warm).await?);
        }
        if plan.wants(b, Route::BaselineNext, workers) {
            let total = plan.total(b, Route::BaselineNext, workers);
            let dir = TempDir::new()?;
            let path = dir.db_path();
            let m = tokio::task::spawn_blocking(move || {
                sqlite_baseline_next(&path, workers, total).map_err(|e| e.to_string())
            })
            .await??;
            out.push(m);
        }
        for route in [Route::ClaimNext, Route::ClaimNextBatch] {
            if plan.wants(b, route, workers) {
                let total = plan.total(b, route, workers);
                let dir = TempDir::new()?;
                let config = StoreConfig::new(format!("sqlite://{}", dir.db_path().display()));
                out.push(bench_claim_next(b, config, workers, total, route).await?);
            }
        }
        if plan.wants(b, Route::ClaimNextHttp, workers) {
            let total = plan.total(b, Route::ClaimNextHttp, workers);
            let dir = TempDir::new()?;
            let vars = server_vars(&dir.0, None)?;
            out.push(bench_claim_next_http(b, vars, workers, total).await?);
        }
        // Let the store's writer thread exit before the next case.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn bench_pg(url: &str, plan: &Plan, out: &mut Vec<Measurement>) -> BenchResult<()> {
    let b = Backend::Postgres;
    let mut schemas = Vec::new();
    let result = async {
        for workers in WORKERS {
            if plan.wants(b, Route::Baseline, workers) {
                let (per, warm) = plan.split(b, Route::Baseline, workers);
                let schema = format!("bench_{}", unique());
                schemas.push(schema.clone());
                out.push(pg_baseline(url, &schema, workers, per, warm).await?);
            }
            if plan.wants(b, Route::Store, workers) {
                let (per, warm) = plan.split(b, Route::Store, workers);
                let schema = format!("bench_{}", unique());
                schemas.push(schema.clone());
                let mut config = StoreConfig::new(url);
                config.pg_schema = Some(schema);
                out.push(bench_store(b, config, workers, per, warm).await?);
            }
            if plan.wants(b, Route::Http, workers) {
                let (per, warm) = plan.split(b, Route::Http, workers);
                let schema = format!("bench_{}", unique());
                schemas.push(schema.clone());
                let dir = TempDir::new()?;
                let vars = server_vars(&dir.0, Some((url, &schema)))?;
                out.push(bench_http(b, vars, workers, per, warm).await?);
            }
            if plan.wants(b, Route::BaselineNext, workers) {
                let total = plan.total(b, Route::BaselineNext, workers);
                let schema = format!("bench_{}", unique());
                schemas.push(schema.clone());
                out.push(pg_baseline_next(url, &schema, workers, total).await?);
            }
            for route in [Route::ClaimNext, Route::ClaimNextBatch] {
                if plan.wants(b, route, workers) {
                    let total = plan.total(b, route, workers);
                    let schema = format!("bench_{}", unique());
                    schemas.push(schema.clone());
                    let mut config = StoreConfig::new(url);
                    config.pg_schema = Some(schema);
                    out.push(bench_claim_next(b, config, workers, total, route).await?);
                }
            }
            // The goal is set at 16 workers; the far case runs only there.
            if workers == 16 && plan.wants(b, Route::ClaimNextFar, workers) {
                let total = plan.total(b, Route::ClaimNextFar, workers);
                let schema = format!("bench_{}", unique());
                schemas.push(schema.clone());
                let proxy = DelayProxy::start(upstream_of(url)?, far_round_trip() / 2)?;
                let mut config = StoreConfig::new(&url_via(url, proxy.addr())?);
                config.pg_schema = Some(schema);
                out.push(bench_claim_next(b, config, workers, total, Route::ClaimNextFar).await?);
            }
            if plan.wants(b, Route::ClaimNextHttp, workers) {
                let total = plan.total(b, Route::ClaimNextHttp, workers);
                let schema = format!("bench_{}", unique());
                schemas.push(schema.clone());
                let dir = TempDir::new()?;
                let vars = server_vars(&dir.0, Some((url, &schema)))?;
                out.push(bench_claim_next_http(b, vars, workers, total).await?);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok::<(), BenchError>(())
    }
    .await;
    // Let closed pools hang up before their schemas go.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop_schemas(url, &schemas).await;
    result
}

async fn drop_schemas(url: &str, schemas: &[String]) {
    let client = match pg_connect(url, None).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("could not reconnect to drop the benchmark schemas {schemas:?}: {e}");
            return;
        }
    };
    for schema in schemas {
        if let Err(e) = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await
        {
            eprintln!("could not drop schema {schema}: {e}");
        }
    }
}

// ----- output -----

/// The URL with any password replaced, for printing.
fn vs_baseline(rows: &[Measurement], m: &Measurement) -> Option<f64> {
    if matches!(
        m.route,
        Route::Baseline | Route::BaselineNext | Route::ClaimNextFar
    ) {
        return None;
    }
    let base = m.route.baseline();
    rows.iter()
        .find(|r| r.route == base && r.backend == m.backend && r.workers == m.workers)
        .map(|base| m.rate() / base.rate())
}

/// An HTTP row's rate over its in-process counterpart's.
fn vs_in_process(rows: &[Measurement], m: &Measurement) -> Option<f64> {
    let inner = m.route.in_process()?;
    rows.iter()
        .find(|r| r.route == inner && r.backend == m.backend && r.workers == m.workers)
        .map(|r| m.rate() / r.rate())
}

fn print_table(rows: &[Measurement]) {
    println!();
    println!(
        "{:<9} {:<16} {:>7} {:>7} {:>8} {:>9} {:>10} {:>12} {:>11} {:>10} {:>7}  verified",
        "backend",
        "path",
        "workers",
        "cycles",
        "seconds",
        "cycles/s",
        "ms/cycle",
        "vs baseline",
        "vs in-proc",
        "cpu µs/cyc",
        "errors"
    );
    println!("{}", "-".repeat(127));
    for m in rows {
        let ratio = vs_baseline(rows, m)
            .map(|r| format!("{r:.2}x"))
            .unwrap_or_default();
        let inner = vs_in_process(rows, m)
            .map(|r| format!("{r:.2}x"))
            .unwrap_or_default();
        println!(
            "{:<9} {:<16} {:>7} {:>7} {:>8.3} {:>9.0} {:>10.3} {:>12} {:>11} {:>10} {:>7}  {}",
            m.backend.name(),
            m.route.name(),
            m.workers,
            m.cycles,
            m.elapsed.as_secs_f64(),
            m.rate(),
            m.latency_ms(),
            ratio,
            inner,
            m.cpu_us_per_cycle()
                .map(|c| format!("{c:.0}"))
                .unwrap_or_default(),
            m.errors,
            if m.verified { "ok" } else { "FAILED" }
        );
    }
    println!();
    println!("ms/cycle: mean time one worker spends on one claim+complete cycle (workers × seconds / cycles).");
    println!("cpu µs/cyc: the whole machine's busy CPU time during the timed cycles (/proc/stat: this process, PostgreSQL and anything else running), per cycle.");
    println!("vs baseline: over `baseline` (claim-next rows: over `baseline-next`); vs in-proc: an HTTP row over its in-process row.");
    println!(
        "errors: failed cycles, warm-up included; verified: every task of the case ended `done`."
    );
    for m in rows.iter().filter(|m| !m.error_samples.is_empty()) {
        println!(
            "{}: {} errors, e.g.:",
            case_name(m.backend, m.route, m.workers),
            m.errors
        );
        for s in &m.error_samples {
            println!("  {s}");
        }
    }
}

/// Graphile rates of this run (jobs/s), when its binary was given.
#[derive(Default)]
struct Graphile {
    /// (workers, LocalQueue, LocalQueue with batched completion).
    near: Vec<(usize, f64, f64)>,
    /// LocalQueue at 16 workers behind the same delay as `claim-next-far`.
    far: Option<f64>,
    /// The machine's busy CPU per job of LocalQueue at 16 workers.
    cpu_us_per_job: Option<f64>,
}

/// The write-path goals, each a ratio from this run (absolute figures
/// drift by 2x from day to day on the machines this runs on).
fn print_goals(rows: &[Measurement], graphile: &Graphile, absurd: &Absurd) {
    let rate = |backend: Backend, route: Route| {
        rows.iter()
            .find(|m| m.backend == backend && m.route == route && m.workers == 16)
            .filter(|m| m.verified && m.errors == 0)
            .map(Measurement::rate)
    };
    let pg = |route| rate(Backend::Postgres, route);
    let g16 = graphile.near.iter().find(|(w, _, _)| *w == 16);
    let div = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    let pg_cpu = |route| {
        rows.iter()
            .find(|m| m.backend == Backend::Postgres && m.route == route && m.workers == 16)
            .and_then(Measurement::cpu_us_per_cycle)
    };
    let absurd_rate = |r: &Option<PeerRun>| r.as_ref().map(|r| r.rate);
    let goals: [(&str, Option<f64>, f64, &str); 10] = [
        (
            "postgres store (claim-by-vtid + complete) over bare two-transaction baseline",
            div(pg(Route::Store), pg(Route::Baseline)),
            0.6,
            "x",
        ),
        (
            "postgres claim-next (max 100) over graphile LocalQueue",
            div(pg(Route::ClaimNext), g16.map(|g| g.1)),
            1.0,
            "x",
        ),
        (
            "postgres claim-next-batch over graphile with batched completion",
            div(pg(Route::ClaimNextBatch), g16.map(|g| g.2)),
            0.5,
            "x",
        ),
        (
            "postgres http over store",
            div(pg(Route::Http), pg(Route::Store)),
            0.7,
            "x",
        ),
        (
            "postgres claim-next-http over claim-next",
            div(pg(Route::ClaimNextHttp), pg(Route::ClaimNext)),
            0.7,
            "x",
        ),
        (
            "sqlite store cycles/s",
            rate(Backend::Sqlite, Route::Store),
            5_000.0,
            "/s",
        ),
        (
            "postgres claim-next (max 100) over Absurd claiming 100 at a time",
            div(pg(Route::ClaimNext), absurd_rate(&absurd.hundred)),
            1.0,
            "x",
        ),
        (
            "postgres http (claim by id + complete) over Absurd claiming one at a time",
            div(pg(Route::Http), absurd_rate(&absurd.one)),
            5.0,
            "x",
        ),
        (
            "postgres claim-next's CPU per cycle over graphile LocalQueue's per job",
            div(pg_cpu(Route::ClaimNext), graphile.cpu_us_per_job),
            2.5,
            "x at most",
        ),
        (
            "postgres claim-next-far over graphile LocalQueue, same delay",
            div(pg(Route::ClaimNextFar), graphile.far),
            0.5,
            "x",
        ),
    ];
    println!();
    println!(
        "goals at 16 workers (far: {:.1} ms added per round trip to PostgreSQL):",
        far_round_trip().as_secs_f64() * 1000.0
    );
    for (name, value, goal, unit) in goals {
        let (shown, verdict) = match value {
            Some(v) if unit == "x at most" => (
                format!("{v:.2}x"),
                if v <= goal { "met" } else { "NOT met" },
            ),
            Some(v) if unit == "x" => (
                format!("{v:.2}x"),
                if v >= goal { "met" } else { "NOT met" },
            ),
            Some(v) => (
                format!("{v:.0}/s"),
                if v >= goal { "met" } else { "NOT met" },
            ),
            None => ("-".to_owned(), "not measured in this run"),
        };
        let want = if unit == "x at most" {
            format!("<= {goal}x")
        } else if unit == "x" {
            format!(">= {goal}x")
        } else {
            format!(">= {goal:.0}/s")
        };
        println!("  {name:<78} {want:>10} {shown:>9}  {verdict}");
    }
}

/// What the far cases add to every round trip to PostgreSQL: 1 ms, or
/// `SHEPHERD_BENCH_FAR_MS` (half of it in each direction).
fn far_round_trip() -> Duration {
    std::env::var("SHEPHERD_BENCH_FAR_MS")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map_or(Duration::from_millis(1), |ms| {
            Duration::from_secs_f64(ms / 1000.0)
        })
}

/// One run of a peer queue's binary: its rate, read from the `key=` field of
/// its result line, and the machine's busy CPU per job during its timed
/// drain. The drain is the `seconds=` it reports, ending when the result
/// line is printed (the peers print it right after the drain, before
/// dropping their database); `/proc/stat` is sampled every 10 ms meanwhile.
struct PeerRun {
    rate: f64,
    cpu_us_per_job: Option<f64>,
}

fn run_peer(mut cmd: std::process::Command, key: &str, jobs: u64) -> Result<PeerRun, String> {
    use std::io::BufRead;
    let shown = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(b) = busy_ticks() {
                    samples.push((Instant::now(), b));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            samples
        })
    };
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut result = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| e.to_string())?;
        if result.is_none() && line.contains(&format!("{key}=")) {
            result = Some((Instant::now(), line));
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.join().map_err(|_| "the CPU sampler panicked")?;
    let Some((ended, line)) = result else {
        return Err(format!(
            "{shown} printed no {key} (exit {}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    };
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse::<f64>().ok())
    };
    let rate = field(key).ok_or_else(|| format!("{shown}: unreadable {key} in {line:?}"))?;
    let cpu_us_per_job = field("seconds").and_then(|secs| {
        let began = ended.checked_sub(Duration::from_secs_f64(secs))?;
        let at = |t: Instant| {
            samples
                .iter()
                .rev()
                .find(|(when, _)| *when <= t)
                .map(|s| s.1)
        };
        let (a, b) = (at(began)?, at(ended)?);
        Some(b.saturating_sub(a) as f64 / TICKS_PER_SEC * 1e6 / jobs as f64)
    });
    Ok(PeerRun {
        rate,
        cpu_us_per_job,
    })
}

/// Absurd (a durable-execution peer that keeps runs and their history in
/// PostgreSQL) at 16 workers, claiming one task per call and 100 per call.
#[derive(Default)]
struct Absurd {
    one: Option<PeerRun>,
    hundred: Option<PeerRun>,
}

/// Runs the peer harness's Absurd binary (`SHEPHERD_BENCH_ABSURD`, built
/// outside this workspace) and prints Shepherd's 16-worker PostgreSQL rows
/// of this run as ratios of it.
fn run_absurd(bin: &str, plan: &Plan, rows: &[Measurement]) -> Absurd {
    let db = std::env::var("SHEPHERD_BENCH_ABSURD_DB")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let run = |qty: u32, tasks: u64| {
        let tasks = tasks.max(100);
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["--tasks", &tasks.to_string(), "--concurrency", "16"])
            .args(["--qty", &qty.to_string(), "--db", &db]);
        run_peer(cmd, "tasks_per_sec", tasks)
    };
    let rate = |route: Route| {
        rows.iter()
            .find(|m| m.backend == Backend::Postgres && m.route == route && m.workers == 16)
            .map(Measurement::rate)
    };
    println!();
    println!("Absurd ({bin}), PostgreSQL, 16 workers, same machine, same run:");
    let mut absurd = Absurd::default();
    // Each of Absurd's runs drains a backlog exactly as deep as the timed
    // part of the Shepherd case its ratio is read against (claim by id over
    // HTTP: its tasks are all pending when timing starts, and all done when
    // it ends; claim-next: its shared queue). Absurd's `claim_task` reads
    // every pending task, so its rate falls as the backlog grows (the peer
    // harness's README: about 3 ms per claim at 2,000 pending, 23 ms at
    // 20,000): a shallower or deeper backlog than Shepherd's would bias the
    // ratio one way or the other.
    let (per, _) = plan.split(Backend::Postgres, Route::Http, 16);
    for (qty, tasks, routes) in [
        (1, per * 16, [Route::Store, Route::Http]),
        (
            100,
            plan.total(Backend::Postgres, Route::ClaimNext, 16),
            [Route::ClaimNext, Route::ClaimNextHttp],
        ),
    ] {
        match run(qty, tasks) {
            Ok(r) => {
                let ratios: Vec<String> = routes
                    .iter()
                    .map(|&route| match rate(route) {
                        Some(v) => format!("{} {:.2}x", route.name(), v / r.rate),
                        None => format!("{} -", route.name()),
                    })
                    .collect();
                println!(
                    "  claiming {qty:>3} per call, {tasks} pending: {:>8.0} tasks/s, {} µs CPU per task; {}",
                    r.rate,
                    r.cpu_us_per_job
                        .map(|c| format!("{c:.0}"))
                        .unwrap_or_else(|| "-".into()),
                    ratios.join(", ")
                );
                if qty == 1 {
                    absurd.one = Some(r);
                } else {
                    absurd.hundred = Some(r);
                }
            }
            Err(e) => println!("  claiming {qty:>3} per call failed: {e}"),
        }
    }
    absurd
}

/// Runs the peer queue `graphile_worker` (a separate binary, built outside
/// this workspace; see `SHEPHERD_BENCH_GRAPHILE`) at each worker count and
/// prints Shepherd's PostgreSQL rows of this run as ratios of it.
/// `--local-queue` claims up to 100 jobs per query and completes each job
/// on its own; `--complete-batch-ms 1` batches completions (not durable:
/// a crash loses them).
fn run_graphile(bin: &str, plan: &Plan, rows: &[Measurement]) -> Graphile {
    let default_db = "postgres://postgres@127.0.0.1:5432/postgres".to_owned();
    let db = std::env::var("SHEPHERD_BENCH_GRAPHILE_DB").unwrap_or(default_db);
    let graphile_db = db.as_str();
    let run_with_cpu = |workers: usize, batched: bool, db: &str| -> Result<PeerRun, String> {
        let jobs = ((20_000.0 * plan.scale).round() as u64).max(100);
        let mut cmd = std::process::Command::new(bin);
        cmd.args([
            "--jobs",
            &jobs.to_string(),
            "--concurrency",
            &workers.to_string(),
        ])
        .args(["--mode", "run", "--local-queue"]);
        if batched {
            cmd.args(["--complete-batch-ms", "1"]);
        }
        cmd.args(["--db", db]);
        run_peer(cmd, "jobs_per_sec", jobs)
    };
    let cpu_16 = std::cell::Cell::new(None);
    let run = |workers: usize, batched: bool, db: &str| -> Result<f64, String> {
        let r = run_with_cpu(workers, batched, db)?;
        if workers == 16 && !batched && db == graphile_db {
            cpu_16.set(r.cpu_us_per_job);
        }
        Ok(r.rate)
    };
    let rate = |route: Route, workers: usize| {
        rows.iter()
            .find(|m| m.backend == Backend::Postgres && m.route == route && m.workers == workers)
            .map(Measurement::rate)
    };
    let ratio = |a: Option<f64>, b: f64| a.map(|a| format!("{:.2}x", a / b)).unwrap_or_default();
    println!();
    println!("graphile_worker ({bin}), PostgreSQL, same machine, same run:");
    println!(
        "{:>7} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "workers",
        "graphile/s",
        "g-batched/s",
        "store",
        "http",
        "claim-next",
        "cn-http",
        "cn-batch",
        "bare-next"
    );
    let mut graphile = Graphile::default();
    for workers in WORKERS {
        let (g, gb) = match (run(workers, false, &db), run(workers, true, &db)) {
            (Ok(g), Ok(gb)) => (g, gb),
            (Err(e), _) | (_, Err(e)) => {
                println!("{workers:>7} graphile failed: {e}");
                continue;
            }
        };
        println!(
            "{:>7} {:>12.0} {:>12.0} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            workers,
            g,
            gb,
            ratio(rate(Route::Store, workers), g),
            ratio(rate(Route::Http, workers), g),
            ratio(rate(Route::ClaimNext, workers), g),
            ratio(rate(Route::ClaimNextHttp, workers), g),
            ratio(rate(Route::ClaimNextBatch, workers), gb),
            ratio(rate(Route::BaselineNext, workers), g),
        );
        graphile.near.push((workers, g, gb));
    }
    // The far comparison: graphile behind the same kind of delay as
    // Shepherd's `claim-next-far` row.
    if rate(Route::ClaimNextFar, 16).is_some() {
        let far = upstream_of(&db)
            .and_then(|up| DelayProxy::start(up, far_round_trip() / 2).map_err(|e| e.to_string()))
            .and_then(|proxy| {
                let r = run(16, false, &url_via(&db, proxy.addr())?);
                drop(proxy);
                r
            });
        match far {
            Ok(g) => {
                println!(
                    "{:>7} {:>12.0} (far: {:.1} ms added per round trip) claim-next-far: {}",
                    16,
                    g,
                    far_round_trip().as_secs_f64() * 1000.0,
                    ratio(rate(Route::ClaimNextFar, 16), g)
                );
                graphile.far = Some(g);
            }
            Err(e) => println!("     16 graphile (far) failed: {e}"),
        }
    }
    println!("store, http, claim-next, cn-http, bare-next (the bare-SQL claim-next): cycles/s over graphile LocalQueue's jobs/s; cn-batch: over graphile with batched completion.");
    graphile.cpu_us_per_job = cpu_16.get();
    if let Some(c) = graphile.cpu_us_per_job {
        println!("graphile LocalQueue at 16 workers: {c:.0} µs of the machine's busy CPU per job (/proc/stat during its drain).");
    }
    graphile
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
    let plan = Plan { scale, filters };

    println!("shepherd claim+complete benchmark");
    println!("cores: {cores} (tokio multi-thread runtime, {cores} worker threads; server, store and workers share it)");
    println!("scale: {scale} (SHEPHERD_BENCH_SCALE)");
    if !plan.filters.is_empty() {
        println!("only: {:?}", plan.filters);
    }

    let rows = runtime.block_on(async {
        let mut rows = Vec::new();
        eprintln!("sqlite: running");
        bench_sqlite(&plan, &mut rows).await?;
        match pg_connect(&pg_url, None).await {
            Ok(client) => {
                let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
                drop(client);
                println!(
                    "postgres: {} (server {version})",
                    shepherd_store::redact_url(&pg_url)
                );
                eprintln!("postgres: running");
                bench_pg(&pg_url, &plan, &mut rows).await?;
            }
            Err(e) => {
                println!(
                    "postgres: unreachable at {} ({e}); skipping the PostgreSQL rows",
                    shepherd_store::redact_url(&pg_url)
                );
            }
        }
        Ok::<_, BenchError>(rows)
    })?;

    print_table(&rows);
    let graphile = match std::env::var("SHEPHERD_BENCH_GRAPHILE") {
        Ok(bin) => run_graphile(&bin, &plan, &rows),
        Err(_) => {
            println!();
            println!("graphile_worker: not run (set SHEPHERD_BENCH_GRAPHILE to the peer harness's binary)");
            Graphile::default()
        }
    };
    let absurd = match std::env::var("SHEPHERD_BENCH_ABSURD") {
        Ok(bin) => run_absurd(&bin, &plan, &rows),
        Err(_) => {
            println!();
            println!("Absurd: not run (set SHEPHERD_BENCH_ABSURD to the peer harness's binary)");
            Absurd::default()
        }
    };
    print_goals(&rows, &graphile, &absurd);
    if rows.iter().any(|m| !m.verified || m.errors > 0) {
        return Err("some cycles failed or did not verify (see above)".into());
    }
    Ok(())
}
