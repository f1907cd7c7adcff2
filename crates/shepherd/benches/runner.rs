//! Runner overhead benchmark: how much slower is running trivial tasks
//! through Shepherd's built-in runner than spawning the same program in a
//! loop?
//!
//! In one run, this measures:
//!
//! 1. baselines: `std::process::Command::new("true").status()` N times
//!    sequentially and split over 4 threads; for attribution also N
//!    runner-style spawns (`tokio::process`, own process group, piped
//!    stdin/stdout/stderr, spec written to stdin), sequentially and 4 at a
//!    time;
//! 2. for `max_concurrent` = 1 and 4 (one fresh server each, with its own
//!    temporary data directory and SQLite file): the real server started
//!    in-process (`shepherd::server::run` on `127.0.0.1:0`) with an agent
//!    `noop` whose command is `true`. Once the built-in runner's worker is
//!    listed by `GET /api/v1/workers` and one untimed warm-up task is done,
//!    N tasks are created through `POST /api/v1/tasks` (4 concurrent
//!    creators) and `GET /api/v1/tasks?state=done&limit=1` is polled every
//!    20 ms until all are `done`. Time runs from the first create to the
//!    poll that sees the last task done; no task may end `failed`.
//!
//! It prints tasks/s for every case, the ratio runner time / baseline time
//! (the sequential baseline for `max_concurrent = 1`, the 4-thread one for
//! 4), and the per-task overhead (runner time - baseline time) / N. To show
//! where the time goes, it then reads the event log
//! (`GET /api/v1/events?types=run.*,...`, millisecond timestamps) and breaks
//! each task's life into phases: claim -> `running` (the runner creates the
//! spool, spawns the process and reports `worker.execution.started` on its
//! first wake-up, which for `true` is the exit or end of output), `running`
//! -> `run.completed` (the runner reports `worker.execution.completed`), and
//! the runner's idle gap between one run's end and the next claim. Gaps near
//! the runner's 2 s poll interval or its 100 ms tick would show up there.
//! It also reports CPU time of this process (server + runner + client) by
//! thread, and every request the server handled during the timed part (from
//! the server's own `shepherd::http` debug log line: count per task and mean
//! server-side time per request kind).
//!
//! Run:
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo bench -p shepherd --bench runner
//! ```
//!
//! Last, a runner holding quiet agents: `SHEPHERD_BENCH_IDLE_AGENTS`
//! (default 200; 0 skips it) agents running `sleep 600`, each under its
//! shim, and the CPU the server with its built-in runner and the shims use
//! over 10 s once all have started (the goal: under 1% of one core in all).
//!
//! Knobs: `SHEPHERD_BENCH_TASKS` (default 200), `SHEPHERD_BENCH_SLOTS`
//! (comma-separated `max_concurrent` values, default `1,4`), `RUST_LOG`
//! (server log filter, default `warn`).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{cpu_secs, run_pids};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Concurrent HTTP clients creating tasks.
const CREATORS: usize = 4;
/// Threads (or concurrent spawns) of the parallel baselines.
const BASELINE_THREADS: usize = 4;
/// How often the client asks how many tasks are done.
const POLL_EVERY: Duration = Duration::from_millis(20);
/// Gives up on a case after this long.
const CASE_TIMEOUT: Duration = Duration::from_secs(600);
/// The agent every task goes to.
const AGENT: &str = "noop";

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("runner bench: {msg}");
    std::process::exit(1)
}

struct Opts {
    tasks: usize,
    slots: Vec<usize>,
}

impl Opts {
    fn from_env() -> Opts {
        let tasks = match std::env::var("SHEPHERD_BENCH_TASKS") {
            Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| {
                fail(format!(
                    "SHEPHERD_BENCH_TASKS: expected a whole number, got {v:?}"
                ))
            }),
            _ => 200,
        };
        let slots = match std::env::var("SHEPHERD_BENCH_SLOTS") {
            Ok(v) if !v.trim().is_empty() => v
                .split(',')
                .map(|s| {
                    s.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .unwrap_or_else(|| {
                            fail(format!(
                                "SHEPHERD_BENCH_SLOTS: expected numbers 1..=1000, got {v:?}"
                            ))
                        })
                })
                .collect(),
            _ => vec![1, 4],
        };
        Opts {
            tasks: tasks.max(1),
            slots,
        }
    }
}

// ---------------------------------------------------------------------------
// CPU accounting

/// User + system CPU seconds of this process (all threads) and of its
/// waited-for children.
fn cpu_now() -> (f64, f64) {
    let get = |who| {
        // SAFETY: getrusage with a valid, owned, zeroed struct.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut u) } != 0 {
            return 0.0;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
}

/// CPU seconds of each live thread of this process, by thread id: (name, secs).
fn thread_cpu() -> HashMap<u32, (String, f64)> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        // After the name: utime and stime are fields 14 and 15 of the line.
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        out.insert(tid, (name, ticks as f64 / hz));
    }
    out
}

/// CPU seconds per thread name used between two [`thread_cpu`] readings,
/// largest first.
fn thread_cpu_delta(
    before: &HashMap<u32, (String, f64)>,
    after: &HashMap<u32, (String, f64)>,
) -> Vec<(String, f64)> {
    let mut by_name: HashMap<String, f64> = HashMap::new();
    for (tid, (name, secs)) in after {
        let was = before.get(tid).map(|b| b.1).unwrap_or(0.0);
        *by_name.entry(name.clone()).or_default() += secs - was;
    }
    let mut v: Vec<(String, f64)> = by_name.into_iter().filter(|x| x.1 > 0.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// CPU seconds used (self, children) since `start`.
fn cpu_since(start: (f64, f64)) -> (f64, f64) {
    let now = cpu_now();
    (now.0 - start.0, now.1 - start.1)
}

// ---------------------------------------------------------------------------
// Baselines

/// `true` via `std::process::Command::status`, `n` times over `threads` threads.
fn std_spawns(n: usize, threads: usize) -> Duration {
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let share = n / threads + usize::from(t < n % threads);
            s.spawn(move || {
                for _ in 0..share {
                    let st = Command::new("true")
                        .status()
                        .unwrap_or_else(|e| fail(format!("cannot run `true`: {e}")));
                    assert!(st.success(), "`true` failed: {st}");
                }
            });
        }
    });
    started.elapsed()
}

/// One spawn the way the runner does it: own process group, piped stdio,
/// the spec written to stdin, both outputs read to the end, then waited for.
async fn runner_style_spawn() {
    let mut child = tokio::process::Command::new("true")
        .env("SHEPHERD_TASK_ID", "T-1")
        .env("SHEPHERD_RUN_ID", "r1")
        .env("SHEPHERD_AGENT", AGENT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| fail(format!("cannot run `true`: {e}")));
    if let Some(mut stdin) = child.stdin.take() {
        tokio::spawn(async move {
            let _ = stdin.write_all(b"").await;
            let _ = stdin.shutdown().await;
        });
    }
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (r1, r2, st) = tokio::join!(
        out.read_to_end(&mut a),
        err.read_to_end(&mut b),
        child.wait()
    );
    let _ = (r1, r2);
    let st = st.unwrap_or_else(|e| fail(format!("waiting for `true`: {e}")));
    assert!(st.success(), "`true` failed: {st}");
}

/// `n` runner-style spawns, `parallel` at a time.
async fn tokio_spawns(n: usize, parallel: usize) -> Duration {
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..parallel {
        let share = n / parallel + usize::from(t < n % parallel);
        handles.push(tokio::spawn(async move {
            for _ in 0..share {
                runner_style_spawn().await;
            }
        }));
    }
    for h in handles {
        h.await.unwrap_or_else(|e| fail(format!("spawner: {e}")));
    }
    started.elapsed()
}

// ---------------------------------------------------------------------------
// Server-side request accounting

/// Requests the server handled, by method and path pattern: (count, total
/// server-side milliseconds). Filled from the server's own per-request
/// `shepherd::http` debug log line.
static REQUESTS: Mutex<BTreeMap<String, (u64, f64)>> = Mutex::new(BTreeMap::new());

/// Counts the server's request log lines into [`REQUESTS`].
struct RequestCounter;

#[derive(Default)]
struct RequestFields {
    method: String,
    path: String,
    elapsed_ms: f64,
}

impl tracing::field::Visit for RequestFields {
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        if field.name() == "elapsed_ms" {
            self.elapsed_ms = value;
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "path" {
            self.path = value.to_owned();
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "method" => self.method = format!("{value:?}"),
            "path" if self.path.is_empty() => self.path = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RequestCounter {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if event.metadata().target() != "shepherd::http" {
            return;
        }
        let mut f = RequestFields::default();
        event.record(&mut f);
        // Ids (task ids, run ids) become `{id}` so that paths group.
        let pattern: Vec<&str> = f
            .path
            .split('/')
            .map(|seg| {
                if seg != "v1" && seg.chars().any(|c| c.is_ascii_digit()) {
                    "{id}"
                } else {
                    seg
                }
            })
            .collect();
        let key = format!("{} {}", f.method, pattern.join("/"));
        let mut m = REQUESTS.lock().unwrap_or_else(|e| e.into_inner());
        let e = m.entry(key).or_default();
        e.0 += 1;
        e.1 += f.elapsed_ms;
    }
}

fn take_requests() -> BTreeMap<String, (u64, f64)> {
    std::mem::take(&mut *REQUESTS.lock().unwrap_or_else(|e| e.into_inner()))
}

// ---------------------------------------------------------------------------
// HTTP helpers

struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    async fn get(&self, path: &str) -> Value {
        let url = format!("{}{path}", self.base);
        let res = self
            .http
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| fail(format!("GET {path}: {e}")));
        let status = res.status();
        let body: Value = res
            .json()
            .await
            .unwrap_or_else(|e| fail(format!("GET {path}: bad JSON: {e}")));
        if !status.is_success() {
            fail(format!("GET {path}: {status}: {body}"));
        }
        body
    }

    async fn create_task(&self, title: &str) -> String {
        let res = self
            .http
            .post(format!("{}/api/v1/tasks", self.base))
            .json(&json!({ "title": title, "agent_id": AGENT }))
            .send()
            .await
            .unwrap_or_else(|e| fail(format!("POST /api/v1/tasks: {e}")));
        let status = res.status();
        let body: Value = res
            .json()
            .await
            .unwrap_or_else(|e| fail(format!("POST /api/v1/tasks: bad JSON: {e}")));
        if status.as_u16() != 201 {
            fail(format!("POST /api/v1/tasks: {status}: {body}"));
        }
        body["vtid"].as_str().unwrap_or_default().to_owned()
    }

    async fn total_in(&self, state: &str) -> usize {
        let v = self
            .get(&format!("/api/v1/tasks?state={state}&limit=1"))
            .await;
        v["total"].as_u64().unwrap_or(0) as usize
    }

    /// Every event of `types`, oldest first.
    async fn all_events(&self, types: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after = 0i64;
        loop {
            let page = self
                .get(&format!(
                    "/api/v1/events?after={after}&limit=10000&types={types}"
                ))
                .await;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            if events.is_empty() {
                break;
            }
            after = events
                .iter()
                .filter_map(|e| e["seq"].as_i64())
                .max()
                .unwrap_or(after);
            out.extend(events);
        }
        out
    }
}

// ---------------------------------------------------------------------------
// One server with the runner

struct CaseResult {
    slots: usize,
    wall: Duration,
    /// When the last create was answered (from the first create).
    created: Duration,
    cpu_self: f64,
    cpu_children: f64,
    /// CPU seconds by thread name during the timed part.
    cpu_threads: Vec<(String, f64)>,
    /// Requests the server handled during the timed part.
    requests: BTreeMap<String, (u64, f64)>,
    phases: Phases,
}

/// Distribution of per-task phase durations, from event timestamps (ms).
#[derive(Default)]
struct Phases {
    /// First `task.created` -> last `run.completed` of the timed tasks.
    span_ms: i64,
    claim_to_running: Vec<i64>,
    running_to_completed: Vec<i64>,
    claim_to_completed: Vec<i64>,
    /// With one slot: previous `run.completed` -> next claim.
    idle_gap: Vec<i64>,
    /// Time between consecutive `run.completed` events.
    completion_interval: Vec<i64>,
    /// Highest number of runs in flight at once.
    max_in_flight: usize,
}

fn unique_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "shepherd-bench-runner-{tag}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| fail(format!("cannot create {}: {e}", dir.display())));
    dir
}

fn load_config(dir: &Path, slots: usize, command: &str) -> shepherd::config::Config {
    let file = dir.join("shepherd.toml");
    std::fs::write(
        &file,
        format!("[agents.{AGENT}]\ncommand = {command}\nmax_concurrent = {slots}\n"),
    )
    .unwrap_or_else(|e| fail(format!("cannot write {}: {e}", file.display())));
    let map: HashMap<&str, String> = [
        ("SHEPHERD_CONFIG", file.display().to_string()),
        ("SHEPHERD_DATA_DIR", dir.display().to_string()),
        ("SHEPHERD_LOG", "warn".to_owned()),
    ]
    .into_iter()
    .collect();
    shepherd::config::Config::load_with(None, &|k| map.get(k).cloned())
        .unwrap_or_else(|e| fail(format!("configuration: {e}")))
}

async fn wait_until<F, Fut>(what: &str, within: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !f().await {
        if Instant::now() > deadline {
            fail(format!("timed out waiting for {what}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn runner_case(slots: usize, n: usize) -> CaseResult {
    let dir = unique_dir(&format!("mc{slots}"));
    let (api, stop_tx, server) = start_server(load_config(&dir, slots, "[\"true\"]")).await;
    // One untimed task: the pipeline works, connections and caches are warm,
    // and the runner's event-stream subscription is up.
    let warmup = api.create_task("warm-up").await;
    wait_until("the warm-up task", Duration::from_secs(30), || async {
        api.total_in("done").await == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let api = std::sync::Arc::new(api);
    take_requests();
    let threads0 = thread_cpu();
    let cpu0 = cpu_now();
    let t0 = Instant::now();
    let mut creators = Vec::new();
    for c in 0..CREATORS.min(n) {
        let api = api.clone();
        creators.push(tokio::spawn(async move {
            let mut i = c;
            while i < n {
                api.create_task(&format!("bench task {i}")).await;
                i += CREATORS;
            }
            t0.elapsed()
        }));
    }
    let target = n + 1;
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if api.total_in("done").await >= target {
            break;
        }
        if t0.elapsed() > CASE_TIMEOUT {
            fail(format!(
                "max_concurrent={slots}: not all tasks done after {CASE_TIMEOUT:?}"
            ));
        }
    }
    let wall = t0.elapsed();
    let (cpu_self, cpu_children) = cpu_since(cpu0);
    let cpu_threads = thread_cpu_delta(&threads0, &thread_cpu());
    let requests = take_requests();
    let mut created = Duration::ZERO;
    for c in creators {
        created = created.max(c.await.unwrap_or_else(|e| fail(format!("creator: {e}"))));
    }
    let failed = api.total_in("failed").await;
    if failed != 0 {
        fail(format!("max_concurrent={slots}: {failed} task(s) failed"));
    }

    let events = api
        .all_events("task.created,task.state_changed,worker.claim.granted,run.*")
        .await;
    let phases = phases_of(&events, &warmup, n, slots);

    stop_server(stop_tx, server).await;
    let _ = std::fs::remove_dir_all(&dir);
    CaseResult {
        slots,
        wall,
        created,
        cpu_self,
        cpu_children,
        cpu_threads,
        requests,
        phases,
    }
}

type ServerTask = tokio::task::JoinHandle<Result<(), String>>;

/// The real server in this process on `127.0.0.1:0`, once the built-in
/// runner's worker is listed.
async fn start_server(
    config: shepherd::config::Config,
) -> (Api, tokio::sync::oneshot::Sender<()>, ServerTask) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| fail(format!("bind: {e}")));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| fail(format!("local_addr: {e}")));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        shepherd::server::run(config, listener, async move {
            let _ = stop_rx.await;
        })
        .await
        .map_err(|e| e.to_string())
    });
    let api = Api {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap_or_else(|e| fail(format!("HTTP client: {e}"))),
        base: format!("http://{addr}"),
    };
    wait_until("the runner's worker", Duration::from_secs(30), || async {
        let v = api.get("/api/v1/workers").await;
        v["workers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|w| w["agent_id"] == AGENT)
    })
    .await;
    (api, stop_tx, server)
}

async fn stop_server(stop_tx: tokio::sync::oneshot::Sender<()>, server: ServerTask) {
    let _ = stop_tx.send(());
    match tokio::time::timeout(Duration::from_secs(30), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => eprintln!("server ended with an error: {e}"),
        Ok(Err(e)) => eprintln!("server task: {e}"),
        Err(_) => eprintln!("server did not stop within 30 s"),
    }
}

// ---------------------------------------------------------------------------
// A runner holding quiet agents

/// How long the quiet agents' CPU is measured.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

struct IdleResult {
    agents: usize,
    server_cpu: f64,
    shims_cpu: f64,
}

/// `n` agents that print nothing (`sleep`), all running under their shims:
/// the CPU the server with its built-in runner and the shims use over
/// [`IDLE_WINDOW`], a few seconds after the last one started.
async fn idle_case(n: usize) -> IdleResult {
    let dir = unique_dir("idle");
    let (api, stop_tx, server) = start_server(load_config(&dir, n, "[\"sleep\", \"600\"]")).await;
    for i in 0..n {
        api.create_task(&format!("quiet agent {i}")).await;
    }
    wait_until("every quiet agent to start", CASE_TIMEOUT, || async {
        run_pids(&dir, "agent").len() >= n
    })
    .await;
    // Past the loops' busy time after a start.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let shims = run_pids(&dir, "shim");
    let shims0: f64 = shims.iter().map(|p| cpu_secs(&p.to_string())).sum();
    let self0 = cpu_now().0;
    tokio::time::sleep(IDLE_WINDOW).await;
    let server_cpu = (cpu_now().0 - self0) / IDLE_WINDOW.as_secs_f64();
    let shims_cpu = (shims.iter().map(|p| cpu_secs(&p.to_string())).sum::<f64>() - shims0)
        / IDLE_WINDOW.as_secs_f64();
    // The built-in runner leaves its agents running when the server stops;
    // these end with the case.
    for pgid in run_pids(&dir, "agent") {
        // SAFETY: kill(2) on a process group this case started.
        unsafe {
            libc::kill(-(pgid as i32), libc::SIGKILL);
        }
    }
    stop_server(stop_tx, server).await;
    for pid in shims {
        // SAFETY: kill(2) on a shim this case started.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    IdleResult {
        agents: n,
        server_cpu,
        shims_cpu,
    }
}

#[derive(Default, Clone, Copy)]
struct TaskTimes {
    created: Option<i64>,
    claimed: Option<i64>,
    running: Option<i64>,
    completed: Option<i64>,
}

fn phases_of(events: &[Value], warmup: &str, n: usize, slots: usize) -> Phases {
    let ms = |e: &Value| {
        e["ts"]
            .as_str()
            .and_then(shepherd_core::time::parse_iso8601)
            .unwrap_or(0)
    };
    let mut tasks: HashMap<String, TaskTimes> = HashMap::new();
    for e in events {
        let Some(vtid) = e["task_id"].as_str() else {
            continue;
        };
        if vtid == warmup {
            continue;
        }
        let t = tasks.entry(vtid.to_owned()).or_default();
        let at = ms(e);
        match e["type"].as_str().unwrap_or("") {
            "task.created" => t.created = Some(at),
            "run.started" => t.claimed = Some(at),
            "run.completed" => t.completed = Some(at),
            "task.state_changed" if e["data"]["to"] == "running" => t.running = Some(at),
            _ => {}
        }
    }
    if tasks.len() != n {
        eprintln!(
            "note: the event log names {} timed tasks, expected {n}",
            tasks.len()
        );
    }
    let all: Vec<TaskTimes> = tasks.into_values().collect();
    let mut p = Phases::default();
    let first_created = all.iter().filter_map(|t| t.created).min().unwrap_or(0);
    let last_completed = all.iter().filter_map(|t| t.completed).max().unwrap_or(0);
    p.span_ms = last_completed - first_created;
    for t in &all {
        if let (Some(c), Some(r)) = (t.claimed, t.running) {
            p.claim_to_running.push(r - c);
        }
        if let (Some(r), Some(d)) = (t.running, t.completed) {
            p.running_to_completed.push(d - r);
        }
        if let (Some(c), Some(d)) = (t.claimed, t.completed) {
            p.claim_to_completed.push(d - c);
        }
    }
    let mut by_claim: Vec<(i64, i64)> = all
        .iter()
        .filter_map(|t| Some((t.claimed?, t.completed?)))
        .collect();
    by_claim.sort();
    if slots == 1 {
        for w in by_claim.windows(2) {
            p.idle_gap.push(w[1].0 - w[0].1);
        }
    }
    let mut ends: Vec<i64> = by_claim.iter().map(|x| x.1).collect();
    ends.sort();
    for w in ends.windows(2) {
        p.completion_interval.push(w[1] - w[0]);
    }
    // Runs in flight: +1 at claim, -1 at completion (ends first on ties).
    let mut marks: Vec<(i64, i32)> = by_claim
        .iter()
        .flat_map(|&(c, d)| [(c, 1), (d, -1)])
        .collect();
    marks.sort_by_key(|&(t, d)| (t, d));
    let mut now = 0i32;
    for (_, d) in marks {
        now += d;
        p.max_in_flight = p.max_in_flight.max(now.max(0) as usize);
    }
    p
}

/// (median, p90, max, mean) of a sample.
fn stats(v: &[i64]) -> Option<(i64, i64, i64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    let mean = s.iter().sum::<i64>() as f64 / s.len() as f64;
    Some((at(0.5), at(0.9), s[s.len() - 1], mean))
}

// ---------------------------------------------------------------------------
// Report

struct Row {
    case: String,
    secs: f64,
    baseline_secs: f64,
}

fn main() {
    // The built-in runner starts each agent under `shepherd shim`, and in
    // this process the current executable is the bench: name the real binary.
    if std::env::var_os("SHEPHERD_SHIM_PROGRAM").is_none() {
        std::env::set_var("SHEPHERD_SHIM_PROGRAM", env!("CARGO_BIN_EXE_shepherd"));
    }
    let opts = Opts::from_env();
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(tracing_subscriber::EnvFilter::new(filter)),
        )
        .with(
            RequestCounter.with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("shepherd::http", tracing::Level::DEBUG),
            ),
        )
        .try_init();
    let n = opts.tasks;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format!("tokio runtime: {e}")));
    let cpus = std::thread::available_parallelism()
        .map(|c| c.get())
        .unwrap_or(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "runner overhead: {n} tasks running `true`; {cpus} CPU(s), load average {}\n",
        load.join(" ")
    );

    // Warm the page cache and the fork path.
    std_spawns(20, 1);
    let base_seq = std_spawns(n, 1).as_secs_f64();
    let base_par = std_spawns(n, BASELINE_THREADS).as_secs_f64();
    let (tok_seq, tok_par) = rt.block_on(async {
        tokio_spawns(20, 1).await;
        (
            tokio_spawns(n, 1).await.as_secs_f64(),
            tokio_spawns(n, BASELINE_THREADS).await.as_secs_f64(),
        )
    });

    let mut results = Vec::new();
    for &slots in &opts.slots {
        results.push(rt.block_on(runner_case(slots, n)));
    }

    let mut rows = vec![
        Row {
            case: "baseline: std spawn `true`, sequential".into(),
            secs: base_seq,
            baseline_secs: base_seq,
        },
        Row {
            case: format!("baseline: std spawn `true`, {BASELINE_THREADS} threads"),
            secs: base_par,
            baseline_secs: base_par,
        },
        Row {
            case: "ref: runner-style tokio spawn, sequential".into(),
            secs: tok_seq,
            baseline_secs: base_seq,
        },
        Row {
            case: format!("ref: runner-style tokio spawn, {BASELINE_THREADS} at once"),
            secs: tok_par,
            baseline_secs: base_par,
        },
    ];
    for r in &results {
        rows.push(Row {
            case: format!("runner: max_concurrent={}", r.slots),
            secs: r.wall.as_secs_f64(),
            baseline_secs: if r.slots == 1 { base_seq } else { base_par },
        });
    }
    let w = rows.iter().map(|r| r.case.len()).max().unwrap_or(4).max(4);
    println!(
        "{:<w$}  {:>5}  {:>8}  {:>9}  {:>17}",
        "case", "tasks", "seconds", "tasks/s", "ratio vs baseline"
    );
    println!("{}", "-".repeat(w + 47));
    for r in &rows {
        println!(
            "{:<w$}  {:>5}  {:>8.3}  {:>9.1}  {:>16.2}x",
            r.case,
            n,
            r.secs,
            n as f64 / r.secs,
            r.secs / r.baseline_secs
        );
    }
    println!(
        "\nratio = seconds / seconds of the baseline it is compared with: the \
         sequential one for max_concurrent=1, the {BASELINE_THREADS}-thread one otherwise."
    );
    println!("\nper-task overhead = (runner seconds - baseline seconds) / {n}:");
    for r in &results {
        let wall = r.wall.as_secs_f64();
        let (b, name) = if r.slots == 1 {
            (base_seq, "sequential")
        } else {
            (base_par, "4-thread")
        };
        let mut line = format!(
            "  max_concurrent={}: {:.2} ms vs the {name} baseline",
            r.slots,
            (wall - b) / n as f64 * 1000.0
        );
        if r.slots != 1 {
            line.push_str(&format!(
                "; {:.2} ms vs the sequential one",
                (wall - base_seq) / n as f64 * 1000.0
            ));
        }
        println!("{line}");
    }

    println!("\nwhere the time goes (event-log timestamps, ms; median / p90 / max / mean):");
    for r in &results {
        let p = &r.phases;
        let wall = r.wall.as_secs_f64();
        println!(
            "  max_concurrent={}: all {n} creates answered after {:.3} s; first create -> last \
             run.completed {} ms (wall incl. 20 ms polling {:.0} ms); at most {} runs in flight",
            r.slots,
            r.created.as_secs_f64(),
            p.span_ms,
            wall * 1000.0,
            p.max_in_flight
        );
        println!(
            "    CPU: this process {:.2} s ({:.0}% of one CPU, {:.2} ms/task), children {:.2} s",
            r.cpu_self,
            r.cpu_self / wall * 100.0,
            r.cpu_self / n as f64 * 1000.0,
            r.cpu_children
        );
        let named: f64 = r.cpu_threads.iter().map(|x| x.1).sum();
        let mut by_thread: Vec<String> = r
            .cpu_threads
            .iter()
            .map(|(name, secs)| format!("{name} {secs:.2} s"))
            .collect();
        if r.cpu_self - named > 0.005 {
            by_thread.push(format!("exited threads {:.2} s", r.cpu_self - named));
        }
        println!("    CPU by thread: {}", by_thread.join(", "));
        let total: u64 = r.requests.values().map(|x| x.0).sum();
        println!(
            "    HTTP requests served: {total} ({:.1}/task); per task, with mean server time:",
            total as f64 / n as f64
        );
        for (key, (count, ms)) in &r.requests {
            println!(
                "      {key:<62} {:>5.2}/task  {:>6.3} ms",
                *count as f64 / n as f64,
                ms / *count as f64
            );
        }
        for (name, v) in [
            (
                "claim -> running (spool, spawn, exit, execution.started)",
                &p.claim_to_running,
            ),
            (
                "running -> run.completed (exit, execution.completed)",
                &p.running_to_completed,
            ),
            ("claim -> run.completed", &p.claim_to_completed),
            ("run.completed -> next claim (runner idle)", &p.idle_gap),
            (
                "interval between run.completed events",
                &p.completion_interval,
            ),
        ] {
            if let Some((med, p90, max, mean)) = stats(v) {
                println!("    {name:<58} {med:>5} / {p90:>5} / {max:>5} / {mean:>7.2}");
            }
        }
        if r.slots == 1 {
            let stalls = p.idle_gap.iter().filter(|g| **g >= 90).count();
            println!(
                "    gaps >= 90 ms between a run's end and the next claim: {stalls} (a 100 ms \
                 tick or the 2 s poll would show here)"
            );
        }
    }
    let idle_agents = std::env::var("SHEPHERD_BENCH_IDLE_AGENTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(200);
    if idle_agents > 0 {
        let r = rt.block_on(idle_case(idle_agents));
        println!(
            "\nquiet agents: {} running `sleep 600`, CPU over {} s as % of one core: \
             server + built-in runner {:.2}%, shims {:.2}%, in all {:.2}% (goal: under 1%)",
            r.agents,
            IDLE_WINDOW.as_secs(),
            r.server_cpu * 100.0,
            r.shims_cpu * 100.0,
            (r.server_cpu + r.shims_cpu) * 100.0
        );
    }
}
