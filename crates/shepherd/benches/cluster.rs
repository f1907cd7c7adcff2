//! Two server nodes on one PostgreSQL database against one node alone.
//!
//! `cargo bench -p shepherd --bench cluster` (PostgreSQL from
//! `SHEPHERD_BENCH_PG_URL`, default the local `test` database; each case
//! gets a fresh schema, dropped afterwards). Both nodes are the real server
//! (`shepherd::server::run`) in this process, each with its own store, writer,
//! LISTEN connection and event pump, exactly as two processes would have.
//!
//! 1. Throughput: HTTP workers claim the next task (`tasks/claim`, `max` 1)
//!    and complete it, all on one node, then the same number split across
//!    two nodes. Tasks/s for each, and the ratio.
//! 2. Fan-out across nodes: event-stream subscribers split across both
//!    nodes while tasks are created on the first at a steady rate. For each
//!    delivery, latency from the event's commit timestamp to its arrival,
//!    per node; and the second node's extra latency per event (its arrival
//!    against the mean arrival of the same event on the first node): what
//!    LISTEN/NOTIFY plus the pump's read of the log cost.
//!
//! Knobs: `CLUSTER_BENCH_WORKERS` (16), `CLUSTER_BENCH_TASKS` (4000),
//! `CLUSTER_BENCH_SUBSCRIBERS` per node (100), `CLUSTER_BENCH_RATE` tasks/s
//! (200), `CLUSTER_BENCH_SECS` (10).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::oneshot;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const COMPLETED: &str = "worker.execution.completed";

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn unique() -> String {
    format!(
        "{}_{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
        std::process::id()
    )
}

/// One node: the real server in this process on `127.0.0.1:0`.
struct Node {
    base: String,
    stop: Option<oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<Result<(), String>>,
    _dir: TempDir,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Node {
    async fn start(url: &str, schema: &str, name: &str) -> BenchResult<Node> {
        let dir = std::env::temp_dir().join(format!("shepherd-cluster-bench-{}-{name}", unique()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("shepherd.toml");
        std::fs::write(&file, "")?;
        let mut vars = HashMap::new();
        for (k, v) in [
            ("SHEPHERD_CONFIG", file.display().to_string()),
            ("SHEPHERD_DATA_DIR", dir.display().to_string()),
            ("SHEPHERD_LOG", "warn".into()),
            ("SHEPHERD_DATABASE_URL", url.into()),
            ("SHEPHERD_PG_SCHEMA", schema.into()),
            ("SHEPHERD_NODE_ID", name.into()),
            // The nodes of one database share its secrets key.
            (
                "SHEPHERD_SECRETS_KEY_FILE",
                std::env::temp_dir()
                    .join(format!("shepherd-cluster-bench-{schema}.key"))
                    .display()
                    .to_string(),
            ),
            ("SHEPHERD_MAX_REQUESTS", "0".into()),
            ("SHEPHERD_MAX_REQUESTS_PER_TOKEN", "0".into()),
        ] {
            vars.insert(k.to_owned(), v);
        }
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
                return Err(format!("node {name} stopped at start-up: {:?}", handle.await?).into());
            }
            if probe
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("node {name} not ready within 30 s").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Node {
            base,
            stop: Some(stop),
            handle,
            _dir: TempDir(dir),
        })
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), &mut self.handle).await;
    }
}

/// Starts `n` nodes on one fresh schema.
async fn nodes(url: &str, n: usize) -> BenchResult<(String, Vec<Node>)> {
    let schema = format!("cb_{}", unique());
    let mut out = Vec::new();
    for i in 0..n {
        out.push(Node::start(url, &schema, &format!("node-{i}")).await?);
    }
    Ok((schema, out))
}

async fn drop_schema(url: &str, schema: &str) {
    if let Ok((client, conn)) = tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
}

async fn post(client: &reqwest::Client, url: String, body: &Value) -> Result<Value, String> {
    let resp = client
        .post(&url)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let v: Value = resp.json().await.map_err(|e| format!("{url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: HTTP {status}: {v}"));
    }
    Ok(v)
}

async fn create_tasks(base: &str, prefix: &str, n: usize) -> BenchResult<()> {
    let client = reqwest::Client::new();
    let results: Vec<Result<Value, String>> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, url) = (client.clone(), format!("{base}/api/v1/tasks"));
            async move {
                let body =
                    json!({ "vtid": format!("{prefix}-{i}"), "title": "bench", "spec": "go" });
                post(&client, url, &body).await
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(())
}

/// One worker: claims the next task and completes it until none is left.
async fn worker(base: String, id: String) -> Result<u64, String> {
    let client = reqwest::Client::new();
    post(
        &client,
        format!("{base}/api/v1/worker/orchestrator/register"),
        &json!({ "worker_id": id }),
    )
    .await?;
    let mut done = 0;
    loop {
        let answer = post(
            &client,
            format!("{base}/api/v1/worker/orchestrator/tasks/claim"),
            &json!({ "worker_id": id, "max": 1 }),
        )
        .await?;
        let Some(grant) = answer["claims"].as_array().and_then(|c| c.first()).cloned() else {
            return Ok(done);
        };
        let vtid = grant["vtid"].as_str().ok_or("no vtid")?;
        let applied = post(
            &client,
            format!("{base}/api/v1/worker/orchestrator/tasks/{vtid}/progress"),
            &json!({ "worker_id": id, "event": COMPLETED, "claim_token": grant["claim_token"] }),
        )
        .await?;
        if applied["state"] != "done" {
            return Err(format!("complete {vtid}: {applied}"));
        }
        done += 1;
    }
}

/// Tasks/s with `workers` workers spread over `n` nodes.
async fn throughput(url: &str, n: usize, workers: usize, tasks: usize) -> BenchResult<f64> {
    let (schema, nodes) = nodes(url, n).await?;
    create_tasks(&nodes[0].base, "T", tasks).await?;
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| tokio::spawn(worker(nodes[w % n].base.clone(), format!("w{w}"))))
        .collect();
    let mut done = 0;
    for h in handles {
        done += h.await??;
    }
    let elapsed = start.elapsed();
    for node in nodes {
        node.stop().await;
    }
    drop_schema(url, &schema).await;
    if done != tasks as u64 {
        return Err(format!("{done} of {tasks} tasks completed").into());
    }
    Ok(done as f64 / elapsed.as_secs_f64())
}

/// Unix time in milliseconds, fractional.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

/// Follows `/api/events` from `after` until `stop`; returns (id, arrival ms).
async fn subscribe(
    base: String,
    after: i64,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<(i64, f64)> {
    let mut seen = Vec::new();
    let Ok(resp) = reqwest::Client::new()
        .get(format!("{base}/api/events?after={after}"))
        .send()
        .await
    else {
        return seen;
    };
    let mut stream = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = stop.cancelled() => return seen,
            c = stream.next() => match c {
                Some(Ok(c)) => c,
                _ => return seen,
            },
        };
        let at = now_ms();
        buf.extend_from_slice(&chunk);
        // Only whole frames; their `id:` lines are all this needs.
        let Some(end) = buf.windows(2).rposition(|w| w == b"\n\n") else {
            continue;
        };
        for line in buf[..end].split(|b| *b == b'\n') {
            if let Some(id) = line.strip_prefix(b"id:") {
                if let Some(id) = std::str::from_utf8(id)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                {
                    seen.push((id, at));
                }
            }
        }
        buf.drain(..end + 2);
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "p50 {:>7.2} ms  p99 {:>7.2} ms  ({} deliveries)",
        pct(&v, 0.5),
        pct(&v, 0.99),
        v.len()
    )
}

async fn fan_out(url: &str, subscribers: usize, rate: usize, secs: usize) -> BenchResult<()> {
    let (schema, nodes) = nodes(url, 2).await?;
    let client = reqwest::Client::new();
    let head = client
        .get(format!("{}/api/v1/events?limit=1", nodes[0].base))
        .send()
        .await?
        .json::<Value>()
        .await?["events"][0]["id"]
        .as_i64()
        .unwrap_or(0);
    let stop = tokio_util::sync::CancellationToken::new();
    let subs: Vec<_> = (0..2 * subscribers)
        .map(|i| {
            let node = i % 2;
            let h = tokio::spawn(subscribe(nodes[node].base.clone(), head, stop.clone()));
            (node, h)
        })
        .collect();
    // Let every subscriber connect (and both nodes hear each other).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let total = rate * secs;
    let every = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut creates = Vec::with_capacity(total);
    for i in 0..total {
        tick.tick().await;
        let (client, url) = (client.clone(), format!("{}/api/v1/tasks", nodes[0].base));
        creates.push(tokio::spawn(async move {
            let body = json!({ "vtid": format!("F-{i}"), "title": "fan-out", "spec": "go" });
            post(&client, url, &body).await
        }));
    }
    for c in creates {
        c.await??;
    }
    let reached = total as f64 / started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    // Commit timestamps of every event since the start.
    let mut ts: HashMap<i64, f64> = HashMap::new();
    let mut after = head;
    loop {
        let page: Value = client
            .get(format!(
                "{}/api/v1/events?after={after}&limit=5000",
                nodes[0].base
            ))
            .send()
            .await?
            .json()
            .await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            break;
        }
        for e in &events {
            let t = e["ts"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.timestamp_micros() as f64 / 1000.0);
            if let (Some(id), Some(t)) = (e["id"].as_i64(), t) {
                ts.insert(id, t);
            }
        }
        after = page["next_cursor"].as_i64().unwrap_or(after);
    }
    let mut arrivals: [Vec<Vec<(i64, f64)>>; 2] = [Vec::new(), Vec::new()];
    for (node, h) in subs {
        arrivals[node].push(h.await?);
    }
    let events = ts.len();
    let mut complete = [0usize; 2];
    let mut latency: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    // Mean arrival of each event on the first node.
    let mut first: HashMap<i64, (f64, usize)> = HashMap::new();
    for (node, subs) in arrivals.iter().enumerate() {
        for seen in subs {
            let ids: Vec<i64> = seen.iter().map(|(id, _)| *id).collect();
            let want: Vec<i64> = {
                let mut w: Vec<i64> = ts.keys().copied().collect();
                w.sort_unstable();
                w
            };
            if ids == want {
                complete[node] += 1;
            }
            for (id, at) in seen {
                if let Some(t) = ts.get(id) {
                    latency[node].push(at - t);
                }
                if node == 0 {
                    let e = first.entry(*id).or_default();
                    e.0 += at;
                    e.1 += 1;
                }
            }
        }
    }
    let mut extra = Vec::new();
    for seen in &arrivals[1] {
        for (id, at) in seen {
            if let Some((sum, n)) = first.get(id) {
                extra.push(at - sum / *n as f64);
            }
        }
    }
    println!(
        "fan-out: {subscribers} subscribers per node, tasks created on node 0 at {reached:.0}/s (asked {rate}/s) for {secs} s, {events} events"
    );
    println!(
        "  every event once, in order: node 0 {}/{subscribers} subscribers, node 1 {}/{subscribers}",
        complete[0], complete[1]
    );
    println!(
        "  node 0 (creates):  commit -> arrival  {}",
        summary(latency[0].clone())
    );
    println!(
        "  node 1 (NOTIFY):   commit -> arrival  {}",
        summary(latency[1].clone())
    );
    println!(
        "  node 1 extra over node 0, per event:   {}",
        summary(extra)
    );
    for node in nodes {
        node.stop().await;
    }
    drop_schema(url, &schema).await;
    Ok(())
}

fn main() -> BenchResult<()> {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let url = std::env::var("SHEPHERD_BENCH_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let workers = knob("CLUSTER_BENCH_WORKERS", 16);
    let tasks = knob("CLUSTER_BENCH_TASKS", 4000);
    let subscribers = knob("CLUSTER_BENCH_SUBSCRIBERS", 100);
    let rate = knob("CLUSTER_BENCH_RATE", 200);
    let secs = knob("CLUSTER_BENCH_SECS", 10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        println!("cluster bench: PostgreSQL, {workers} HTTP workers (claim-next max 1 + complete), {tasks} tasks");
        let one = throughput(&url, 1, workers, tasks).await?;
        println!("  one node:  {one:>8.0} tasks/s");
        let two = throughput(&url, 2, workers, tasks).await?;
        println!("  two nodes: {two:>8.0} tasks/s  ({:.2}x one node)", two / one);
        fan_out(&url, subscribers, rate, secs).await
    })
}
