//! Overload benchmark: 2,000 concurrent keep-alive connections against the
//! real `shepherd serve`, on SQLite and on PostgreSQL.
//!
//! Each connection sends one request at a time, the next as soon as the
//! answer is in, a mix of task creations (40%), task lists (40%, `limit=20`)
//! and worker heartbeats (20%, fifty registered workers). A 503 carrying
//! `Retry-After` is the server shedding load as designed: the connection
//! waits what it was told (±50%, so that shed clients do not return in
//! step) and goes on. Anything else that is not the expected answer (another
//! status, a broken connection, a malformed response) is an error.
//!
//! Reported per database: requests served per second, p50 / p99 / max of the
//! served requests' latency (request written to answer read, on the client),
//! 503s with `Retry-After`, other errors, and per-operation latency; then,
//! from the server's `/metrics`, its own count of shed requests and the
//! writer's mean batch. Goal (issue 18): no error other than 503 with
//! `Retry-After`, and p99 of the requests served under 1 s.
//!
//! The server is the binary next to this bench (`<target>/release/shepherd`
//! under `cargo bench`), or `SHEPHERD_BENCH_BIN`. It runs with its defaults
//! (request cap, worker reserve, backlog) and an operator token; each
//! database starts empty (a fresh SQLite directory, a fresh PostgreSQL
//! schema that is dropped afterwards).
//!
//! ```text
//! cargo bench -p shepherd --bench load
//! ```
//!
//! Environment: `SHEPHERD_BENCH_SCALE` (float, default 1: connections =
//! 2,000 x scale, at least 4), `SHEPHERD_BENCH_SECS` (measured seconds per
//! database, default 10, after 2 s of warm-up), `SHEPHERD_BENCH_PG_URL`
//! (default `postgres://postgres@127.0.0.1:5432/test`; the PostgreSQL row is
//! skipped if it is unreachable), `SHEPHERD_BENCH_ONLY=sqlite|postgres`.
//! The open-files limit is raised for the bench and the server it starts.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{drop_pg_schema_blocking, raise_nofile, server_binary};
use shepherd_testkit::Served;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

const TOKEN: &str = "load-bench-operator-token-0123456789";
const WARMUP: Duration = Duration::from_secs(2);
const WORKERS: usize = 50;
/// Connections being opened at the same time.
const CONNECT_PARALLELISM: usize = 64;
/// Served-request latency goal.
const P99_GOAL: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Create,
    List,
    Heartbeat,
}

impl Op {
    const ALL: [Op; 3] = [Op::Create, Op::List, Op::Heartbeat];

    /// The mix: 4 creations, 4 lists, 2 heartbeats in every 10 requests.
    fn nth(n: usize) -> Op {
        match n % 10 {
            0..=3 => Op::Create,
            4..=7 => Op::List,
            _ => Op::Heartbeat,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Op::Create => "create task",
            Op::List => "list tasks",
            Op::Heartbeat => "heartbeat",
        }
    }

    fn expected(self) -> u16 {
        match self {
            Op::Create => 201,
            Op::List | Op::Heartbeat => 200,
        }
    }
}

struct Opts {
    conns: usize,
    secs: u64,
    pg_url: String,
    only: Option<String>,
}

impl Opts {
    fn parse() -> Opts {
        let scale: f64 = match std::env::var("SHEPHERD_BENCH_SCALE") {
            Ok(v) if !v.trim().is_empty() => match v.trim().parse() {
                Ok(s) if s > 0.0 => s,
                _ => fail(&format!(
                    "SHEPHERD_BENCH_SCALE: expected a positive number, got {v:?}"
                )),
            },
            _ => 1.0,
        };
        let secs = match std::env::var("SHEPHERD_BENCH_SECS") {
            Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| {
                fail(&format!(
                    "SHEPHERD_BENCH_SECS: expected whole seconds, got {v:?}"
                ))
            }),
            _ => 10,
        };
        Opts {
            conns: ((2000.0 * scale).round() as usize).max(4),
            secs,
            pg_url: std::env::var("SHEPHERD_BENCH_PG_URL")
                .ok()
                .filter(|v| !v.trim().is_empty())
                .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into()),
            only: std::env::var("SHEPHERD_BENCH_ONLY")
                .ok()
                .filter(|v| !v.trim().is_empty()),
        }
    }
}

fn fail(e: &str) -> ! {
    eprintln!("load bench failed: {e}");
    std::process::exit(1)
}

fn stamp() -> String {
    format!(
        "{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0)
    )
}

/// The server under test; stopped (SIGTERM, then SIGKILL) and cleaned up on drop.
struct Server {
    served: Served,
    addr: String,
    dir: PathBuf,
    log: PathBuf,
    pg: Option<(String, String)>,
}

impl Server {
    fn spawn(bin: &PathBuf, pg_url: Option<&str>) -> Server {
        let stamp = stamp();
        let dir = std::env::temp_dir().join(format!("shepherd-load-bench-{stamp}"));
        std::fs::create_dir_all(&dir).expect("create the temp data directory");
        let log = std::env::temp_dir().join(format!("shepherd-load-bench-{stamp}.log"));
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .env("SHEPHERD_LISTEN", "127.0.0.1:0")
            .env("SHEPHERD_DATA_DIR", &dir)
            .env("SHEPHERD_LOG", "warn")
            .env("SHEPHERD_TOKEN", TOKEN)
            .env_remove("SHEPHERD_CONFIG")
            .env_remove("SHEPHERD_AUTH_TOKEN")
            .env_remove("SHEPHERD_DATABASE_URL")
            .env_remove("SHEPHERD_PG_SCHEMA")
            .env_remove("SHEPHERD_MAX_REQUESTS")
            .env_remove("SHEPHERD_MAX_WORKER_REQUESTS")
            // The bench's clients stand for many people but share one
            // token, which the cap per token would mostly answer with 429.
            .env("SHEPHERD_MAX_REQUESTS_PER_TOKEN", "0")
            .env_remove("SHEPHERD_LISTEN_BACKLOG")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create the server log file"));
        let mut pg = None;
        if let Some(url) = pg_url {
            let schema = format!("load_bench_{stamp}");
            cmd.env("SHEPHERD_DATABASE_URL", url)
                .env("SHEPHERD_PG_SCHEMA", &schema);
            pg = Some((url.to_owned(), schema));
        }
        let served = Served::spawn(&mut cmd);
        Server {
            addr: served.addr.to_string(),
            served,
            dir,
            log,
            pg,
        }
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(st)) = self.served.child.try_wait() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Err(format!("the server exited during start-up ({st}):\n{log}"));
            }
            if let Ok(mut c) = Conn::open(&self.addr).await {
                if let Ok(r) = c.call("GET", "/readyz", None, None).await {
                    if r.status == 200 {
                        return Ok(());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err("the server did not become ready within 60 s".into())
    }

    fn rss_kb(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.served.child.id()))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.served.child.id() as i32, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.served.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.served.child.kill();
        let _ = self.served.child.wait();
        if let Some((url, schema)) = self.pg.take() {
            // On a thread of its own: this may run inside the bench's runtime.
            let _ = std::thread::spawn(move || drop_pg_schema_blocking(&url, &schema)).join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.log);
    }
}

async fn pg_reachable(url: &str) -> Result<(), String> {
    let connect = tokio_postgres::connect(url, tokio_postgres::NoTls);
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok((client, conn))) => {
            tokio::spawn(conn);
            client
                .batch_execute("SELECT 1")
                .await
                .map_err(|e| e.to_string())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

// ---------------------------------------------------------------------------
// A minimal HTTP/1.1 keep-alive client: one request at a time per connection.

struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: Vec<u8>,
}

struct Conn {
    sock: TcpStream,
    buf: Vec<u8>,
    host: String,
}

impl Conn {
    async fn open(addr: &str) -> std::io::Result<Conn> {
        let sock = TcpStream::connect(addr).await?;
        sock.set_nodelay(true)?;
        Ok(Conn {
            sock,
            buf: Vec::with_capacity(8 * 1024),
            host: addr.to_owned(),
        })
    }

    async fn call(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Result<Answer, String> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            ));
        } else {
            req.push_str("\r\n");
        }
        self.sock
            .write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        self.read_answer().await
    }

    async fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self
            .sock
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed by the server".into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    async fn read_answer(&mut self) -> Result<Answer, String> {
        let head_end = loop {
            if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                break p;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("malformed status line in {head:?}"))?;
        let (mut length, mut chunked, mut retry_after, mut close) = (None, false, None, false);
        for l in lines {
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = v.parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                "retry-after" => retry_after = v.parse().ok(),
                "connection" => close = v.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        self.buf.drain(..head_end + 4);
        let body = if chunked {
            // Until the last chunk (the server's JSON answers are small).
            loop {
                if let Some(p) = find(&self.buf, b"0\r\n\r\n") {
                    let b: Vec<u8> = self.buf.drain(..p + 5).collect();
                    break b;
                }
                self.fill().await?;
            }
        } else {
            let n = length.unwrap_or(0);
            while self.buf.len() < n {
                self.fill().await?;
            }
            self.buf.drain(..n).collect()
        };
        if close {
            return Err(format!("the server closed the connection after {status}"));
        }
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------
// The load

#[derive(Default)]
struct ConnStats {
    /// Served requests' latency (µs), per operation.
    served: [Vec<u32>; 3],
    shed: u64,
    errors: u64,
    reconnects: u64,
    /// A few examples of the errors, for the report.
    samples: Vec<String>,
}

async fn connection(
    c: usize,
    addr: Arc<str>,
    tokens: Arc<Vec<String>>,
    connecting: Arc<Semaphore>,
    opened: Arc<AtomicUsize>,
    mut start: tokio::sync::watch::Receiver<bool>,
    window: (Arc<AtomicBool>, Arc<AtomicBool>),
) -> ConnStats {
    let (measuring, done) = window;
    let mut stats = ConnStats::default();
    let mut conn = {
        let _slot = connecting.acquire().await;
        loop {
            match Conn::open(&addr).await {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    };
    opened.fetch_add(1, Ordering::Relaxed);
    let _ = start.wait_for(|go| *go).await;
    let mut n = c; // offsets the mix between connections
    while !done.load(Ordering::Relaxed) {
        n += 1;
        let op = Op::nth(n);
        let body;
        let (method, path, token, body) = match op {
            Op::Create => {
                body = format!(
                    "{{\"vtid\":\"L{c}-{n}\",\"title\":\"load\",\"spec\":\"load bench\",\"workflow\":\"simple\"}}"
                );
                ("POST", "/api/v1/tasks", TOKEN, Some(body.as_str()))
            }
            Op::List => ("GET", "/api/v1/tasks?limit=20", TOKEN, None),
            Op::Heartbeat => (
                "POST",
                "/api/v1/worker/orchestrator/heartbeat",
                tokens[c % tokens.len()].as_str(),
                Some("{}"),
            ),
        };
        let counted = measuring.load(Ordering::Relaxed);
        let sent = Instant::now();
        let answer = conn.call(method, path, Some(token), body).await;
        let took = sent.elapsed();
        let counted = counted && measuring.load(Ordering::Relaxed);
        match answer {
            Ok(a) if a.status == op.expected() => {
                if counted {
                    stats.served[op as usize].push(took.as_micros().min(u32::MAX as u128) as u32);
                }
            }
            Ok(a) if a.status == 503 && a.retry_after.is_some() => {
                if counted {
                    stats.shed += 1;
                }
                // What a well-behaved client does: wait as told, spread out.
                let secs = a.retry_after.unwrap_or(1).max(1) as f64;
                let jitter = 0.5 + ((c * 7919 + n * 104_729) % 1000) as f64 / 1000.0;
                tokio::time::sleep(Duration::from_secs_f64(secs * jitter)).await;
            }
            Ok(a) => {
                if counted {
                    stats.errors += 1;
                    if stats.samples.len() < 3 {
                        let body = String::from_utf8_lossy(&a.body);
                        stats.samples.push(format!(
                            "{}: {} {}",
                            op.name(),
                            a.status,
                            body.chars().take(160).collect::<String>()
                        ));
                    }
                }
            }
            Err(e) => {
                if counted {
                    stats.errors += 1;
                    if stats.samples.len() < 3 {
                        stats.samples.push(format!("{}: {e}", op.name()));
                    }
                }
                stats.reconnects += 1;
                conn = loop {
                    if done.load(Ordering::Relaxed) {
                        return stats;
                    }
                    match Conn::open(&addr).await {
                        Ok(c) => break c,
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                };
            }
        }
    }
    stats
}

struct Row {
    backend: String,
    conns: usize,
    secs: f64,
    served: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
    per_op: Vec<(Op, usize, Duration, Duration)>,
    shed: u64,
    errors: u64,
    reconnects: u64,
    samples: Vec<String>,
    server_shed: Option<f64>,
    writer_batch: Option<f64>,
    rss_mb: f64,
}

fn percentile(sorted: &[u32], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Duration::from_micros(sorted[i] as u64)
}

/// A sample of the server's `/metrics`.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

async fn run_one(bin: &PathBuf, pg_url: Option<&str>, opts: &Opts) -> Result<Row, String> {
    let backend = if pg_url.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    let mut server = Server::spawn(bin, pg_url);
    server.wait_ready().await?;
    let addr: Arc<str> = server.addr.clone().into();

    // Fifty workers, and a list worth reading.
    let mut setup = Conn::open(&addr).await.map_err(|e| e.to_string())?;
    let mut tokens = Vec::new();
    for w in 0..WORKERS {
        let body = format!("{{\"worker_id\":\"load-{w}\"}}");
        let a = setup
            .call(
                "POST",
                "/api/v1/worker/orchestrator/register",
                Some(TOKEN),
                Some(&body),
            )
            .await?;
        let v: serde_json::Value = serde_json::from_slice(&a.body).map_err(|e| e.to_string())?;
        let tok = v["worker_token"]
            .as_str()
            .ok_or_else(|| format!("register answered {}: {v}", a.status))?;
        tokens.push(tok.to_owned());
    }
    for i in 0..100 {
        let body = format!(
            "{{\"vtid\":\"SEED-{i}\",\"title\":\"seed\",\"spec\":\"seed\",\"workflow\":\"simple\"}}"
        );
        let a = setup
            .call("POST", "/api/v1/tasks", Some(TOKEN), Some(&body))
            .await?;
        if a.status != 201 {
            return Err(format!("seeding a task answered {}", a.status));
        }
    }
    let tokens = Arc::new(tokens);

    eprint!("{backend}: opening {} connections… ", opts.conns);
    let connecting = Arc::new(Semaphore::new(CONNECT_PARALLELISM));
    let opened_count = Arc::new(AtomicUsize::new(0));
    let (start, start_rx) = tokio::sync::watch::channel(false);
    let measuring = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let opened = Instant::now();
    let tasks: Vec<_> = (0..opts.conns)
        .map(|c| {
            tokio::spawn(connection(
                c,
                addr.clone(),
                tokens.clone(),
                connecting.clone(),
                opened_count.clone(),
                start_rx.clone(),
                (measuring.clone(), done.clone()),
            ))
        })
        .collect();
    while opened_count.load(Ordering::Relaxed) < opts.conns {
        if opened.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "only {} of {} connections opened within 120 s",
                opened_count.load(Ordering::Relaxed),
                opts.conns
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "done in {:.1?}; warming up {WARMUP:?}, then measuring {} s",
        opened.elapsed(),
        opts.secs
    );
    let _ = start.send(true);
    tokio::time::sleep(WARMUP).await;
    measuring.store(true, Ordering::Relaxed);
    let measured = Instant::now();
    tokio::time::sleep(Duration::from_secs(opts.secs)).await;
    measuring.store(false, Ordering::Relaxed);
    let secs = measured.elapsed().as_secs_f64();
    let rss_mb = server.rss_kb() as f64 / 1024.0;
    done.store(true, Ordering::Relaxed);

    let mut all = ConnStats::default();
    for t in tasks {
        let s = t.await.map_err(|e| e.to_string())?;
        for (a, b) in all.served.iter_mut().zip(s.served) {
            a.extend(b);
        }
        all.shed += s.shed;
        all.errors += s.errors;
        all.reconnects += s.reconnects;
        for x in s.samples {
            if all.samples.len() < 5 {
                all.samples.push(x);
            }
        }
    }
    let mut every: Vec<u32> = all.served.iter().flatten().copied().collect();
    every.sort_unstable();
    let per_op = Op::ALL
        .iter()
        .map(|op| {
            let v = &mut all.served[*op as usize];
            v.sort_unstable();
            (*op, v.len(), percentile(v, 0.5), percentile(v, 0.99))
        })
        .collect();

    // The server's own view.
    let (mut server_shed, mut writer_batch) = (None, None);
    if let Ok(mut c) = Conn::open(&addr).await {
        if let Ok(a) = c.call("GET", "/metrics", Some(TOKEN), None).await {
            let text = String::from_utf8_lossy(&a.body);
            server_shed = metric(&text, "shepherd_http_shed_requests_total");
            if let (Some(units), Some(n)) = (
                metric(&text, "shepherd_writer_batch_units_sum"),
                metric(&text, "shepherd_writer_batch_units_count"),
            ) {
                writer_batch = (n > 0.0).then(|| units / n);
            }
        }
    }
    drop(server);
    Ok(Row {
        backend: backend.into(),
        conns: opts.conns,
        secs,
        served: every.len(),
        p50: percentile(&every, 0.5),
        p99: percentile(&every, 0.99),
        max: every
            .last()
            .map_or(Duration::ZERO, |m| Duration::from_micros(*m as u64)),
        per_op,
        shed: all.shed,
        errors: all.errors,
        reconnects: all.reconnects,
        samples: all.samples,
        server_shed,
        writer_batch,
        rss_mb,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "{:<9} {:>6} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>7} {:>10} {:>9} {:>8}",
        "database",
        "conns",
        "served",
        "req/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "503+R-A",
        "errors",
        "reconnects",
        "batch avg",
        "RSS MB"
    );
    for r in rows {
        println!(
            "{:<9} {:>6} {:>9} {:>9.0} {:>8} {:>8} {:>8} {:>9} {:>7} {:>10} {:>9} {:>8.0}",
            r.backend,
            r.conns,
            r.served,
            r.served as f64 / r.secs,
            ms(r.p50),
            ms(r.p99),
            ms(r.max),
            r.shed,
            r.errors,
            r.reconnects,
            r.writer_batch.map_or("-".into(), |b| format!("{b:.1}")),
            r.rss_mb
        );
    }
    println!();
    println!(
        "{:<9} {:<12} {:>9} {:>9} {:>8} {:>8}",
        "database", "operation", "served", "req/s", "p50 ms", "p99 ms"
    );
    for r in rows {
        for (op, n, p50, p99) in &r.per_op {
            println!(
                "{:<9} {:<12} {:>9} {:>9.0} {:>8} {:>8}",
                r.backend,
                op.name(),
                n,
                *n as f64 / r.secs,
                ms(*p50),
                ms(*p99)
            );
        }
    }
    println!();
    for r in rows {
        let ok = r.errors == 0 && r.p99 < P99_GOAL && r.served > 0;
        println!(
            "{}: {} (goal: no error but 503 with Retry-After, p99 of served < {} ms); server counted {} shed",
            r.backend,
            if ok { "PASS" } else { "FAIL" },
            P99_GOAL.as_millis(),
            r.server_shed.map_or("?".into(), |s| format!("{s:.0}"))
        );
        for s in &r.samples {
            println!("  error sample: {s}");
        }
    }
}

fn main() {
    let opts = Opts::parse();
    let nofile = raise_nofile(opts.conns as libc::rlim_t * 2 + 1024);
    let Some(bin) = server_binary() else {
        eprintln!(
            "load bench: no shepherd binary next to {} (set SHEPHERD_BENCH_BIN, or build it \
             with the same target directory: cargo build --release)",
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        std::process::exit(2);
    };
    if (nofile as usize) < opts.conns + 64 {
        fail(&format!(
            "the open-files limit is {nofile}, too low for {} connections (raise the hard limit)",
            opts.conns
        ));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("== Load benchmark: keep-alive connections against shepherd serve ==");
    println!(
        "{} connections; mix 40% create task / 40% list tasks / 20% worker heartbeat; \
         {} s measured after {} s warm-up; server {}; {cpus} CPUs shared by server and clients; \
         open-files limit {nofile}",
        opts.conns,
        opts.secs,
        WARMUP.as_secs(),
        bin.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("bench runtime");
    let rows = rt.block_on(async {
        let mut rows = Vec::new();
        let want = |b: &str| opts.only.as_deref().is_none_or(|o| o == b);
        if want("sqlite") {
            match run_one(&bin, None, &opts).await {
                Ok(r) => rows.push(r),
                Err(e) => fail(&format!("sqlite: {e}")),
            }
        }
        if want("postgres") {
            match pg_reachable(&opts.pg_url).await {
                Ok(()) => match run_one(&bin, Some(&opts.pg_url), &opts).await {
                    Ok(r) => rows.push(r),
                    Err(e) => fail(&format!("postgres: {e}")),
                },
                Err(e) => println!(
                    "postgres: unreachable at {} ({e}); skipping its row",
                    shepherd_store::redact_url(&opts.pg_url)
                ),
            }
        }
        rows
    });
    print_table(&rows);
}
