//! Fleet benchmark: a deployment's worth of live agents on one machine,
//! beside a baseline that writes the same steps straight into the store.
//!
//! For each store (SQLite, and PostgreSQL when reachable), in one run:
//!
//! 1. **fleet**: the release binary (`shepherd serve`, its built-in runner
//!    in the same process) with one agent, `ticker`: a bash script that
//!    prints one `steps-jsonl` transcript step every `STEP_MS` (a thought,
//!    then a tool call, then its result, over and over), each carrying the
//!    time it was printed (`@t=<unix seconds.micros>`, bash's
//!    `EPOCHREALTIME`, so printing a step forks nothing). Before any run
//!    starts, `WORKER_SUBS` SSE clients follow the whole event stream as the
//!    web UI's Workers page does (`GET /api/events?after=now`) and
//!    `RUN_SUBS` follow one task each (`&task_id=`). Then `RUNS` tasks are
//!    created, the bench waits until every agent is running under its shim,
//!    waits `WARMUP` s more, and measures for `SECS` s: every step a
//!    subscriber receives is timed from the moment the agent printed it
//!    (same clock), in 10 s windows, so a backlog that grows shows as
//!    latency that grows from window to window; CPU of the server process,
//!    of the shims and agents, of PostgreSQL's processes, of the clients
//!    (this process) and of the machine; memory of the server (VmRSS before
//!    subscribers, with them, and with every agent running) and of the
//!    shims and agents (PSS, so shared libraries are not counted 500
//!    times).
//! 2. **baseline**: a minimal program (this process, nothing else running
//!    in it) opens a fresh store of the same kind, claims `RUNS` runs and
//!    appends the same steps, one `Store::append_steps` call per step on
//!    each run's own schedule of one every `STEP_MS`, for `SECS` s: what
//!    storing those steps costs at least. CPU per step of the server is
//!    judged against it.
//!
//! Goals (issue: "a fleet of agents, live"): no growing backlog over the
//! measured stretch; p99 from an agent printing a step to a subscriber
//! receiving it under 100 ms; server CPU per step at most 2x the
//! baseline's (with PostgreSQL, the database's processes count on both
//! sides).
//!
//! Run:
//!
//! ```text
//! cargo bench -p shepherd --bench fleet
//! ```
//!
//! Knobs: `SHEPHERD_BENCH_RUNS` (500), `SHEPHERD_BENCH_WORKER_SUBS` (200),
//! `SHEPHERD_BENCH_RUN_SUBS` (20), `SHEPHERD_BENCH_SECS` (60),
//! `SHEPHERD_BENCH_WARMUP` (10), `SHEPHERD_BENCH_STEP_MS` (200),
//! `SHEPHERD_BENCH_STORES` (`sqlite,postgres`), `SHEPHERD_BENCH_PG_URL`
//! (default the local `test` database; PostgreSQL is skipped when it cannot
//! be reached), `SHEPHERD_BENCH_BIN` (the server binary).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::{json, Value};
use shepherd_core::transcript::{ActionContent, TranscriptStep};
use shepherd_store::{LeaseRules, NewTask, Registration, Store, StoreConfig};
use shepherd_testkit::Served;

use common::{
    cpu_secs, drop_pg_schema, machine_busy_secs, postgres_cpu, postgres_cpu_since, pss_kb,
    raise_nofile, run_pids, server_binary, status_kb,
};

/// Latency windows are this long.
const WINDOW: Duration = Duration::from_secs(10);
/// Latency histogram buckets are 100 µs wide, up to 10 s (the last bucket
/// holds everything slower).
const BUCKETS: usize = 100_000;
/// The goal for p99 agent → subscriber latency.
const P99_GOAL_MS: f64 = 100.0;
/// How long every agent may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(180);

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("fleet bench: {msg}");
    std::process::exit(1)
}

fn env_u64(k: &str, default: u64) -> u64 {
    match std::env::var(k) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| fail(format!("{k}={v:?} is not a number"))),
        Err(_) => default,
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[derive(Clone)]
struct Opts {
    runs: usize,
    worker_subs: usize,
    run_subs: usize,
    secs: u64,
    warmup: u64,
    step_ms: u64,
    stores: Vec<String>,
    pg_url: String,
}

impl Opts {
    fn parse() -> Opts {
        let opts = Opts {
            runs: env_u64("SHEPHERD_BENCH_RUNS", 500) as usize,
            worker_subs: env_u64("SHEPHERD_BENCH_WORKER_SUBS", 200) as usize,
            run_subs: env_u64("SHEPHERD_BENCH_RUN_SUBS", 20) as usize,
            secs: env_u64("SHEPHERD_BENCH_SECS", 60).max(10),
            warmup: env_u64("SHEPHERD_BENCH_WARMUP", 10),
            step_ms: env_u64("SHEPHERD_BENCH_STEP_MS", 200).max(1),
            stores: std::env::var("SHEPHERD_BENCH_STORES")
                .unwrap_or_else(|_| "sqlite,postgres".into())
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            pg_url: std::env::var("SHEPHERD_BENCH_PG_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
        };
        if opts.runs == 0 {
            fail("SHEPHERD_BENCH_RUNS must be at least 1");
        }
        if opts.run_subs > opts.runs {
            fail("SHEPHERD_BENCH_RUN_SUBS may not exceed SHEPHERD_BENCH_RUNS");
        }
        opts
    }

    /// Steps per second the agents print in all.
    fn nominal_rate(&self) -> f64 {
        self.runs as f64 * 1000.0 / self.step_ms as f64
    }

    fn windows(&self) -> usize {
        self.secs.div_ceil(WINDOW.as_secs()) as usize
    }
}

// ---------------------------------------------------------------------------
// The agent

/// The scripted agent: reads its input, then prints `$1` steps, one every
/// `$2` seconds. `read -t` on a pipe nobody writes to is a sleep that forks
/// nothing; `EPOCHREALTIME` is read by bash itself.
const TICKER: &str = r#"export LC_ALL=C
cat > /dev/null
exec 3<> <(:)
n=0
while [ "$n" -lt "$1" ]; do
  read -t "$2" -u 3
  n=$((n + 1))
  case $((n % 3)) in
    1) printf '{"type":"action","content":[{"type":"text","text":"Looking at the failing test first @t=%s"}]}\n' "$EPOCHREALTIME" ;;
    2) printf '{"type":"action","content":[{"type":"text","text":"Reading the module @t=%s"},{"type":"tool_call","id":"c%d","name":"Read","args":"{\\"path\\":\\"src/lib.rs\\"}"}]}\n' "$EPOCHREALTIME" "$n" ;;
    0) printf '{"type":"tool_result","call_id":"c%d","name":"Read","text":"pub fn answer() -> u32 { 42 } @t=%s"}\n' "$((n - 1))" "$EPOCHREALTIME" ;;
  esac
done
"#;

/// The same three steps, for the baseline (its `@t=` is the append's own
/// start, the moment the baseline "prints" it).
fn baseline_step(n: u64) -> TranscriptStep {
    let t = now_us();
    let at = format!("{}.{:06}", t / 1_000_000, t % 1_000_000);
    match n % 3 {
        1 => TranscriptStep::Action {
            content: vec![ActionContent::Text {
                text: format!("Looking at the failing test first @t={at}"),
            }],
        },
        2 => TranscriptStep::Action {
            content: vec![
                ActionContent::Text {
                    text: format!("Reading the module @t={at}"),
                },
                ActionContent::ToolCall {
                    id: format!("c{n}"),
                    name: "Read".into(),
                    args: r#"{"path":"src/lib.rs"}"#.into(),
                },
            ],
        },
        _ => TranscriptStep::ToolResult {
            call_id: format!("c{}", n - 1),
            name: "Read".into(),
            text: format!("pub fn answer() -> u32 {{ 42 }} @t={at}"),
        },
    }
}

// ---------------------------------------------------------------------------
// Latency, counted by subscribers

/// One kind of subscriber's receipts: a latency histogram and a count per
/// window, shared by every subscriber of that kind.
struct Receipts {
    windows: Vec<Vec<AtomicU64>>,
    counts: Vec<AtomicU64>,
    /// `resync` notices (the server dropped a consumer that fell behind).
    resyncs: AtomicU64,
    /// Streams that ended or failed before the case did.
    broken: AtomicU64,
}

impl Receipts {
    fn new(windows: usize) -> Receipts {
        Receipts {
            windows: (0..windows)
                .map(|_| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect())
                .collect(),
            counts: (0..windows).map(|_| AtomicU64::new(0)).collect(),
            resyncs: AtomicU64::new(0),
            broken: AtomicU64::new(0),
        }
    }

    fn record(&self, clock: &Clock, printed_us: u64) {
        let now = now_us();
        let Some(w) = clock.window(now) else { return };
        if w >= self.counts.len() {
            return;
        }
        let bucket = (now.saturating_sub(printed_us) / 100).min(BUCKETS as u64 - 1) as usize;
        self.windows[w][bucket].fetch_add(1, Ordering::Relaxed);
        self.counts[w].fetch_add(1, Ordering::Relaxed);
    }

    /// `p` (0..1) of window `w`, or of every window with `None`, in ms.
    fn percentile(&self, w: Option<usize>, p: f64) -> f64 {
        let mut hist = vec![0u64; BUCKETS];
        for (i, win) in self.windows.iter().enumerate() {
            if w.is_some_and(|w| w != i) {
                continue;
            }
            for (b, n) in win.iter().enumerate() {
                hist[b] += n.load(Ordering::Relaxed);
            }
        }
        let total: u64 = hist.iter().sum();
        if total == 0 {
            return f64::NAN;
        }
        let rank = ((total as f64) * p).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in hist.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return (b as f64 + 0.5) / 10.0;
            }
        }
        f64::NAN
    }

    fn count(&self, w: usize) -> u64 {
        self.counts[w].load(Ordering::Relaxed)
    }
}

/// When the measured stretch starts (µs since the epoch; 0 until it does).
#[derive(Default)]
struct Clock {
    start_us: AtomicU64,
}

impl Clock {
    fn window(&self, now: u64) -> Option<usize> {
        let start = self.start_us.load(Ordering::Relaxed);
        if start == 0 || now < start {
            return None;
        }
        Some(((now - start) / WINDOW.as_micros() as u64) as usize)
    }
}

/// The printing time in a line holding a step (`@t=SECONDS.MICROS`).
fn printed_at(line: &[u8], finder: &memchr::memmem::Finder<'_>) -> Option<u64> {
    let at = finder.find(line)? + 3;
    let rest = &line[at..];
    let dot = rest.iter().position(|b| *b == b'.')?;
    let secs: u64 = std::str::from_utf8(&rest[..dot]).ok()?.parse().ok()?;
    let micros = rest.get(dot + 1..dot + 7)?;
    let micros: u64 = std::str::from_utf8(micros).ok()?.parse().ok()?;
    Some(secs * 1_000_000 + micros)
}

/// Follows `path` (an `/api/events` query) until `stop`, recording every
/// step it receives; a `resync` is followed from its cursor, as a client
/// must.
async fn subscribe(
    http: reqwest::Client,
    base: String,
    path: String,
    receipts: Arc<Receipts>,
    clock: Arc<Clock>,
    connected: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let finder = memchr::memmem::Finder::new(b"@t=");
    let mut url = format!("{base}{path}");
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        let res = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => r,
            _ => {
                receipts.broken.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        if first {
            connected.fetch_add(1, Ordering::Relaxed);
            first = false;
        }
        let mut stream = res.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        let mut resync_next = false;
        let mut resumed_at = None;
        'read: while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { break };
            buf.extend_from_slice(&chunk);
            let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
                continue;
            };
            for line in buf[..end].split(|b| *b == b'\n') {
                if line.starts_with(b"event: resync") {
                    resync_next = true;
                } else if resync_next && line.starts_with(b"data:") {
                    receipts.resyncs.fetch_add(1, Ordering::Relaxed);
                    let cursor = serde_json::from_slice::<Value>(&line[5..])
                        .ok()
                        .and_then(|v| v["cursor"].as_i64());
                    resumed_at = cursor;
                    break 'read;
                } else if line.starts_with(b"data:") {
                    if let Some(t) = printed_at(line, &finder) {
                        receipts.record(&clock, t);
                    }
                }
            }
            buf.drain(..=end);
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
        match resumed_at {
            Some(cursor) => {
                let sep = if path.contains('?') { '&' } else { '?' };
                let query = path.replace("after=now", "").replace("?&", "?");
                url = format!("{base}{query}{sep}after={cursor}");
            }
            None => {
                if !stop.load(Ordering::Relaxed) {
                    receipts.broken.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Processes

fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|p| cpu_secs(&p.to_string())).sum()
}

fn unique() -> String {
    format!("{}_{}", std::process::id(), now_us())
}

/// Where a case keeps its data: a directory, and for PostgreSQL a schema.
struct Place {
    dir: PathBuf,
    pg: Option<(String, String)>,
}

impl Place {
    fn new(store: &str, opts: &Opts, what: &str) -> Place {
        let stamp = unique();
        let dir = std::env::temp_dir().join(format!("shepherd-bench-fleet-{what}-{stamp}"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(e));
        let pg =
            (store == "postgres").then(|| (opts.pg_url.clone(), format!("fleet_{what}_{stamp}")));
        Place { dir, pg }
    }

    async fn remove(self) {
        if let Some((url, schema)) = &self.pg {
            drop_pg_schema(url, schema).await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// The fleet

struct FleetFigures {
    workers: Arc<Receipts>,
    runs: Arc<Receipts>,
    /// Steps the Workers-stream subscribers received in the stretch, on
    /// average (each sees every step).
    steps: f64,
    wall: f64,
    server_cpu: f64,
    agents_cpu: f64,
    postgres_cpu: f64,
    clients_cpu: f64,
    machine_cpu: f64,
    rss_idle_kb: u64,
    rss_subscribed_kb: u64,
    rss_running_kb: u64,
    shims_pss_kb: u64,
    agents_pss_kb: u64,
    start_secs: f64,
    refused: u64,
}

async fn fleet(store: &str, opts: &Opts, bin: &Path) -> FleetFigures {
    let place = Place::new(store, opts, "server");
    let total_secs = opts.warmup + opts.secs + START_TIMEOUT.as_secs() + 30;
    let steps_each = total_secs * 1000 / opts.step_ms;
    let toml = format!(
        "[agents.ticker]\ncommand = [\"bash\", \"-c\", {}, \"ticker\", \"{steps_each}\", \"{:.3}\"]\n\
         transcript = \"steps-jsonl\"\nmax_concurrent = {}\n",
        serde_json::to_string(TICKER).unwrap_or_default(),
        opts.step_ms as f64 / 1000.0,
        opts.runs
    );
    let config = place.dir.join("shepherd.toml");
    std::fs::write(&config, toml).unwrap_or_else(|e| fail(e));
    let log = place.dir.join("server.log");
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .env("SHEPHERD_LISTEN", "127.0.0.1:0")
        .env("SHEPHERD_DATA_DIR", &place.dir)
        .env("SHEPHERD_CONFIG", &config)
        .env("SHEPHERD_LOG", "warn")
        .env_remove("SHEPHERD_TOKEN")
        .env_remove("SHEPHERD_DATABASE_URL")
        .env_remove("SHEPHERD_PG_SCHEMA")
        .current_dir(&place.dir)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap_or_else(|e| fail(e)));
    if let Some((url, schema)) = &place.pg {
        cmd.env("SHEPHERD_DATABASE_URL", url)
            .env("SHEPHERD_PG_SCHEMA", schema);
    }
    let mut served = Served::try_spawn(&mut cmd).unwrap_or_else(|e| fail(e));
    let pid = served.child.id();
    let base = served.base.clone();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .unwrap_or_else(|e| fail(e));
    wait_for(
        "the built-in runner's worker",
        Duration::from_secs(60),
        || {
            let http = http.clone();
            let base = base.clone();
            async move {
                let Ok(r) = http.get(format!("{base}/api/v1/workers")).send().await else {
                    return false;
                };
                let v: Value = r.json().await.unwrap_or_default();
                v["workers"]
                    .as_array()
                    .is_some_and(|ws| ws.iter().any(|w| w["agent_id"] == "ticker"))
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle_kb = status_kb(pid, "VmRSS").unwrap_or(0);

    // Tasks are named first, so that each run subscriber follows its own.
    let vtids: Vec<String> = (0..opts.runs).map(|i| format!("FLEET-{i}")).collect();
    let clock = Arc::new(Clock::default());
    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicU64::new(0));
    let workers = Arc::new(Receipts::new(opts.windows()));
    let runs = Arc::new(Receipts::new(opts.windows()));
    let mut subs = Vec::new();
    for i in 0..opts.worker_subs + opts.run_subs {
        let (path, receipts) = if i < opts.worker_subs {
            ("/api/events?after=now".to_owned(), workers.clone())
        } else {
            let vtid = &vtids[i - opts.worker_subs];
            (
                format!("/api/events?after=now&task_id={vtid}"),
                runs.clone(),
            )
        };
        subs.push(tokio::spawn(subscribe(
            http.clone(),
            base.clone(),
            path,
            receipts,
            clock.clone(),
            connected.clone(),
            stop.clone(),
        )));
    }
    let want = (opts.worker_subs + opts.run_subs) as u64;
    wait_for(
        "every subscriber to connect",
        Duration::from_secs(60),
        || {
            let c = connected.clone();
            async move { c.load(Ordering::Relaxed) >= want }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_subscribed_kb = status_kb(pid, "VmRSS").unwrap_or(0);

    let started = Instant::now();
    let creators = futures::stream::iter(vtids.iter().cloned())
        .map(|vtid| {
            let http = http.clone();
            let base = base.clone();
            async move {
                let body =
                    json!({ "vtid": vtid, "title": format!("fleet {vtid}"), "agent_id": "ticker" });
                let res = http
                    .post(format!("{base}/api/v1/tasks"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap_or_else(|e| fail(format!("POST /api/v1/tasks: {e}")));
                if !res.status().is_success() {
                    let status = res.status();
                    let text = res.text().await.unwrap_or_default();
                    fail(format!("POST /api/v1/tasks: {status}: {text}"));
                }
            }
        })
        .buffer_unordered(8);
    creators.collect::<Vec<()>>().await;
    let data_dir = place.dir.clone();
    let runs_wanted = opts.runs;
    let mut last_print = Instant::now();
    wait_for("every agent to start", START_TIMEOUT, || {
        let n = run_pids(&data_dir, "agent").len();
        if last_print.elapsed() > Duration::from_secs(5) {
            println!("  {n}/{runs_wanted} agents running");
            last_print = Instant::now();
        }
        async move { n >= runs_wanted }
    })
    .await;
    let start_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(opts.warmup)).await;

    let shims = run_pids(&place.dir, "shim");
    let agents = run_pids(&place.dir, "agent");
    let mut children = shims.clone();
    children.extend(&agents);
    let cpu0 = (
        cpu_secs(&pid.to_string()),
        cpu_of(&children),
        postgres_cpu(),
        cpu_secs("self"),
        machine_busy_secs(),
    );
    let refused0 = refused_per_token(&http, &base).await;
    clock.start_us.store(now_us(), Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(opts.secs)).await;
    let wall = t0.elapsed().as_secs_f64();
    let server_cpu = cpu_secs(&pid.to_string()) - cpu0.0;
    let agents_cpu = cpu_of(&children) - cpu0.1;
    let pg_cpu = if place.pg.is_some() {
        postgres_cpu_since(&cpu0.2)
    } else {
        0.0
    };
    let clients_cpu = cpu_secs("self") - cpu0.3;
    let machine_cpu = machine_busy_secs() - cpu0.4;
    let refused = refused_per_token(&http, &base)
        .await
        .saturating_sub(refused0);
    let rss_running_kb = status_kb(pid, "VmRSS").unwrap_or(0);
    let shims_pss_kb = shims.iter().map(|p| pss_kb(*p)).sum();
    let agents_pss_kb = agents.iter().map(|p| pss_kb(*p)).sum();
    stop.store(true, Ordering::Relaxed);
    for s in subs {
        s.abort();
    }
    let steps = (0..opts.windows()).map(|w| workers.count(w)).sum::<u64>() as f64
        / opts.worker_subs.max(1) as f64;

    // The built-in runner leaves its agents running when the server stops
    // (they outlive a restart); these end with the case.
    for pid in &agents {
        // SAFETY: kill(2) on process groups this case started.
        unsafe {
            libc::kill(-(*pid as i32), libc::SIGKILL);
        }
    }
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let _ = served.child.wait();
    for pid in &shims {
        // SAFETY: kill(2) on shims this case started.
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    place.remove().await;
    FleetFigures {
        workers,
        runs,
        steps,
        wall,
        server_cpu,
        agents_cpu,
        postgres_cpu: pg_cpu,
        clients_cpu,
        machine_cpu,
        rss_idle_kb,
        rss_subscribed_kb,
        rss_running_kb,
        shims_pss_kb,
        agents_pss_kb,
        start_secs,
        refused,
    }
}

/// Requests the server refused with 429 so far (from `/metrics`).
async fn refused_per_token(http: &reqwest::Client, base: &str) -> u64 {
    let Ok(r) = http.get(format!("{base}/metrics")).send().await else {
        return 0;
    };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("shepherd_http_requests_total") && l.contains("status=\"429\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        if start.elapsed() > limit {
            fail(format!("gave up waiting for {what} after {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------
// The baseline

struct BaselineFigures {
    steps: u64,
    wall: f64,
    cpu: f64,
    postgres_cpu: f64,
    append_p50_ms: f64,
    append_p99_ms: f64,
}

fn rules() -> LeaseRules {
    LeaseRules {
        ttl_ms: 3_600_000,
        heartbeat_timeout_ms: 3_600_000,
        not_before: 0,
        cancel_grace_ms: 30_000,
    }
}

async fn baseline(store_kind: &str, opts: &Opts) -> BaselineFigures {
    let place = Place::new(store_kind, opts, "baseline");
    let config = match &place.pg {
        Some((url, schema)) => StoreConfig {
            pg_schema: Some(schema.clone()),
            ..StoreConfig::new(url.clone())
        },
        None => StoreConfig::new(format!(
            "sqlite://{}",
            place.dir.join("shepherd.db").display()
        )),
    };
    let store = Store::open(&config)
        .await
        .unwrap_or_else(|e| fail(format!("open the baseline's store: {e}")));
    store
        .register_worker(Registration {
            worker_id: Some("baseline".into()),
            agent_id: "ticker".into(),
            worker_type: "builtin".into(),
            max_concurrent: opts.runs as i64,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| fail(format!("register: {e}")));
    let mut grants = Vec::new();
    for i in 0..opts.runs {
        let vtid = format!("BASE-{i}");
        store
            .create_task(NewTask {
                vtid: Some(vtid.clone()),
                title: format!("fleet {vtid}"),
                agent_id: Some("ticker".into()),
                dispatch: true,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| fail(format!("create {vtid}: {e}")));
        let g = store
            .claim_task("baseline", &vtid, rules())
            .await
            .unwrap_or_else(|e| fail(format!("claim {vtid}: {e}")));
        grants.push((g.claim.run_id, g.claim_token));
    }
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let period = Duration::from_millis(opts.step_ms);
    let mut tasks = Vec::new();
    for (i, (run_id, token)) in grants.into_iter().enumerate() {
        let (store, stop, counting) = (store.clone(), stop.clone(), counting.clone());
        // Spread over the period, as agents started one after another are.
        let offset = period.mul_f64(i as f64 / opts.runs as f64);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut appended = 0u64;
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut index = 0i64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let step = baseline_step(index as u64 + 1);
                let t = Instant::now();
                store
                    .append_steps(&run_id, &token, None, index, vec![step], rules())
                    .await
                    .unwrap_or_else(|e| fail(format!("append a step: {e}")));
                index += 1;
                if counting.load(Ordering::Relaxed) {
                    appended += 1;
                    latencies.push(t.elapsed().as_micros() as u32);
                }
            }
            (appended, latencies)
        }));
    }
    tokio::time::sleep(Duration::from_secs(opts.warmup.min(10))).await;
    let cpu0 = (cpu_secs("self"), postgres_cpu());
    counting.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(opts.secs)).await;
    counting.store(false, Ordering::Relaxed);
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs("self") - cpu0.0;
    let pg_cpu = if place.pg.is_some() {
        postgres_cpu_since(&cpu0.1)
    } else {
        0.0
    };
    stop.store(true, Ordering::Relaxed);
    let mut steps = 0;
    let mut latencies = Vec::new();
    for t in tasks {
        let (n, l) = t.await.unwrap_or_default();
        steps += n;
        latencies.extend(l);
    }
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(f64::NAN, |us| *us as f64 / 1000.0)
    };
    let (append_p50_ms, append_p99_ms) = (pct(0.5), pct(0.99));
    if let Ok(store) = Arc::try_unwrap(store) {
        store.close();
    }
    place.remove().await;
    BaselineFigures {
        steps,
        wall,
        cpu,
        postgres_cpu: pg_cpu,
        append_p50_ms,
        append_p99_ms,
    }
}

// ---------------------------------------------------------------------------
// Report

fn mib(kb: u64) -> String {
    format!("{:.1} MiB", kb as f64 / 1024.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

/// Prints one store's figures; true when every goal is met.
fn report(store: &str, opts: &Opts, f: &FleetFigures, b: &BaselineFigures) -> bool {
    let nominal = opts.nominal_rate();
    println!(
        "\n{store}: {} runs printing a step every {} ms ({nominal:.0} steps/s), {} Workers-stream \
         and {} single-run subscribers; all agents running {:.1} s after the first create",
        opts.runs, opts.step_ms, opts.worker_subs, opts.run_subs, f.start_secs
    );
    println!("  window   steps/s (per Workers sub)   Workers p50 / p99      single-run p50 / p99");
    for w in 0..opts.windows() {
        let secs = WINDOW
            .as_secs_f64()
            .min(opts.secs as f64 - w as f64 * WINDOW.as_secs_f64());
        let rate = f.workers.count(w) as f64 / opts.worker_subs.max(1) as f64 / secs;
        println!(
            "  {:>3}-{:<3}s {:>10.0}               {:>7.1} / {:>7.1} ms     {:>7.1} / {:>7.1} ms",
            w as u64 * WINDOW.as_secs(),
            (w as u64 + 1) * WINDOW.as_secs(),
            rate,
            f.workers.percentile(Some(w), 0.5),
            f.workers.percentile(Some(w), 0.99),
            f.runs.percentile(Some(w), 0.5),
            f.runs.percentile(Some(w), 0.99),
        );
    }
    let p99 = f
        .workers
        .percentile(None, 0.99)
        .max(f.runs.percentile(None, 0.99));
    let last = opts.windows() - 1;
    let first_p50 = f.workers.percentile(Some(0), 0.5);
    let last_p50 = f.workers.percentile(Some(last), 0.5);
    let received = f.steps / f.wall;
    let no_backlog = last_p50 <= first_p50 * 1.5 + 20.0
        && received >= 0.9 * nominal
        && f.workers.resyncs.load(Ordering::Relaxed) == 0
        && f.runs.resyncs.load(Ordering::Relaxed) == 0;
    println!(
        "  received {received:.0} steps/s of {nominal:.0} printed; resyncs {} (Workers) / {} (runs); \
         broken streams {}; requests refused with 429 {}",
        f.workers.resyncs.load(Ordering::Relaxed),
        f.runs.resyncs.load(Ordering::Relaxed),
        f.workers.broken.load(Ordering::Relaxed) + f.runs.broken.load(Ordering::Relaxed),
        f.refused
    );
    let steps = f.steps.max(1.0);
    let server_per_step = (f.server_cpu + f.postgres_cpu) / steps * 1e6;
    let base_per_step = (b.cpu + b.postgres_cpu) / (b.steps.max(1) as f64) * 1e6;
    println!(
        "  CPU (cores): server {:.2}, shims + agents {:.2}, postgres {:.2}, clients {:.2}, machine {:.2}",
        f.server_cpu / f.wall,
        f.agents_cpu / f.wall,
        f.postgres_cpu / f.wall,
        f.clients_cpu / f.wall,
        f.machine_cpu / f.wall
    );
    println!(
        "  CPU per step: server{} {server_per_step:.0} µs; shims + agents {:.0} µs",
        if f.postgres_cpu > 0.0 {
            " + postgres"
        } else {
            ""
        },
        f.agents_cpu / steps * 1e6
    );
    println!(
        "  baseline: {:.0} steps/s appended straight to the store, append p50 {:.2} ms, p99 {:.2} ms; \
         CPU {:.2} cores{}, {base_per_step:.0} µs per step",
        b.steps as f64 / b.wall,
        b.append_p50_ms,
        b.append_p99_ms,
        (b.cpu + b.postgres_cpu) / b.wall,
        if b.postgres_cpu > 0.0 {
            format!(" (postgres {:.2})", b.postgres_cpu / b.wall)
        } else {
            String::new()
        }
    );
    let subs = (opts.worker_subs + opts.run_subs).max(1) as u64;
    println!(
        "  memory: server {} idle, {} with subscribers ({} per subscriber), {} with every agent \
         running ({} per running agent in the server); per agent outside it: shim {}, agent {} (PSS)",
        mib(f.rss_idle_kb),
        mib(f.rss_subscribed_kb),
        format_args!(
            "{:.0} kB",
            f.rss_subscribed_kb.saturating_sub(f.rss_idle_kb) as f64 / subs as f64
        ),
        mib(f.rss_running_kb),
        format_args!(
            "{:.0} kB",
            f.rss_running_kb.saturating_sub(f.rss_subscribed_kb) as f64 / opts.runs as f64
        ),
        format_args!("{:.0} kB", f.shims_pss_kb as f64 / opts.runs as f64),
        format_args!("{:.0} kB", f.agents_pss_kb as f64 / opts.runs as f64),
    );
    let ratio = server_per_step / base_per_step;
    let p99_ok = p99 < P99_GOAL_MS;
    let cpu_ok = ratio <= 2.0;
    println!("  goals: no growing backlog: {}", verdict(no_backlog));
    println!(
        "         p99 agent -> subscriber {p99:.1} ms (< {P99_GOAL_MS} ms): {}",
        verdict(p99_ok)
    );
    println!(
        "         server CPU per step {ratio:.2}x the baseline's (<= 2x): {}",
        verdict(cpu_ok)
    );
    no_backlog && p99_ok && cpu_ok
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

async fn pg_reachable(url: &str) -> bool {
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await
    .is_ok_and(|r| r.is_ok())
}

fn main() {
    let opts = Opts::parse();
    let Some(bin) = server_binary() else {
        fail(
            "the release binary is missing next to this bench; build it with the same target \
             directory (`cargo build --release`) or set SHEPHERD_BENCH_BIN",
        )
    };
    // Each subscriber is a socket here and one in the server; each agent
    // holds a few descriptors in the server.
    raise_nofile(((opts.worker_subs + opts.run_subs) * 2 + opts.runs * 8 + 1024) as libc::rlim_t);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(e));
    println!(
        "fleet: {} CPU(s), load average {} at the start; server {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        bin.display()
    );
    let mut all_met = true;
    for store in &opts.stores {
        match store.as_str() {
            "sqlite" => {}
            "postgres" => {
                if !rt.block_on(pg_reachable(&opts.pg_url)) {
                    println!("\npostgres: {} is not reachable; skipped", opts.pg_url);
                    continue;
                }
            }
            other => fail(format!("unknown store {other:?} (sqlite, postgres)")),
        }
        println!("\n{store}: fleet case …");
        let f = rt.block_on(fleet(store, &opts, &bin));
        println!("{store}: baseline case …");
        let b = rt.block_on(baseline(store, &opts));
        all_met &= report(store, &opts, &f, &b);
        println!("  load average now {}", load_average());
    }
    println!(
        "\nfleet: {}",
        if all_met {
            "every goal met"
        } else {
            "some goals NOT met (see above)"
        }
    );
}
