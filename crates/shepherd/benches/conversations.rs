//! Conversation benchmark (the conversations contract), two measurements in one run.
//!
//! 1. **Load then tail**, on SQLite and (when reachable) PostgreSQL: a
//!    conversation of 200 user messages whose replies hold 10,000 steps in
//!    all (199 finished replies of 50 steps, stored as transcript blobs,
//!    and one running reply of 50 steps in step rows), seeded over HTTP
//!    exactly as a worker would. Each sample is the contract's client load
//!    sequence against the real server on `127.0.0.1:0`:
//!    `GET /api/v1/conversations/{id}` (body read and parsed), then
//!    `GET /api/events?after=<cursor>&conversation_id=<id>` until its
//!    response headers arrive (the tail is live). Reported: p50/p90/p99 of
//!    the load's body received, the load parsed by the client, and
//!    load-then-tail. After each sample the worker
//!    appends one step and the sample waits for it on the tail (not
//!    timed), so the running reply grows by one step per sample.
//! 2. **Send → first step** with the built-in runner: an agent that prints
//!    one `steps-jsonl` step and exits. Time from `POST …/messages` to the
//!    `run.step` event on an SSE stream opened before the send, against a
//!    baseline in the same run: spawning the same program directly and
//!    reading its first line.
//!
//! Run: `cargo bench -p shepherd --bench conversations`. Knobs:
//! `SHEPHERD_BENCH_SAMPLES` (default 200; 0 skips the load), `SHEPHERD_BENCH_SENDS` (default
//! 50), `SHEPHERD_BENCH_PG_URL` (default the local `test` database; the
//! PostgreSQL case is skipped if it cannot connect).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde_json::{json, Value};

const MESSAGES: usize = 200;
const STEPS_PER_REPLY: usize = 50;

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("conversations bench: {msg}");
    std::process::exit(1)
}

fn env_usize(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}_{nanos}", std::process::id())
}

fn pg_url() -> String {
    std::env::var("SHEPHERD_BENCH_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

struct Server {
    base: String,
    dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<()>,
}

async fn start(vars: Vec<(&str, String)>, agents_toml: &str) -> Server {
    let dir = std::env::temp_dir().join(format!("shepherd-bench-conv-{}", unique()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(e));
    let file = dir.join("shepherd.toml");
    std::fs::write(&file, agents_toml).unwrap_or_else(|e| fail(e));
    let mut map: HashMap<String, String> =
        vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    map.insert("SHEPHERD_CONFIG".into(), file.display().to_string());
    map.insert("SHEPHERD_DATA_DIR".into(), dir.display().to_string());
    map.insert("SHEPHERD_LOG".into(), "warn".into());
    let config = shepherd::config::Config::load_with(None, &|k| map.get(k).cloned())
        .unwrap_or_else(|e| fail(format!("configuration: {e}")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| fail(e));
    let base = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| fail(e))
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(async move {
        if let Err(e) = shepherd::server::run(config, listener, async move {
            let _ = rx.await;
        })
        .await
        {
            fail(format!("server: {e}"));
        }
    });
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        if Instant::now() > deadline {
            fail("server did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Server {
        base,
        dir,
        stop: Some(tx),
        handle,
    }
}

impl Server {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), self.handle).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn post(http: &reqwest::Client, url: String, body: Value) -> Value {
    let r = http
        .post(&url)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| fail(e));
    let status = r.status();
    let v: Value = r.json().await.unwrap_or_default();
    if !status.is_success() {
        fail(format!("{url}: {status} {v}"));
    }
    v
}

fn step(text: String) -> Value {
    json!({ "type": "action", "content": [{ "type": "text", "text": text }] })
}

/// A live SSE response, read frame by frame.
struct Tail {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: String,
    /// When each event read so far arrived, by type (the first of each).
    arrivals: HashMap<String, Instant>,
}

impl Tail {
    async fn open(http: &reqwest::Client, url: String) -> Tail {
        let r = http.get(url).send().await.unwrap_or_else(|e| fail(e));
        if !r.status().is_success() {
            fail(format!("SSE: {}", r.status()));
        }
        Tail {
            stream: r.bytes_stream().boxed(),
            buf: String::new(),
            arrivals: HashMap::new(),
        }
    }

    /// The next event of type `kind` (its JSON).
    async fn next_of(&mut self, kind: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            while let Some(pos) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..pos + 2).collect();
                for line in block.lines() {
                    if let Some(d) = line.strip_prefix("data: ") {
                        let v: Value = serde_json::from_str(d).unwrap_or_default();
                        if let Some(t) = v["type"].as_str() {
                            self.arrivals
                                .entry(t.to_owned())
                                .or_insert_with(Instant::now);
                        }
                        if v["type"] == kind {
                            return v;
                        }
                    }
                }
            }
            let chunk = tokio::time::timeout_at(deadline.into(), self.stream.next())
                .await
                .unwrap_or_else(|_| fail(format!("no {kind} event in time")))
                .unwrap_or_else(|| fail("event stream ended"))
                .unwrap_or_else(|e| fail(e));
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn percentiles(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
    format!(
        "p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  (n={})",
        at(0.50),
        at(0.90),
        at(0.99),
        v[v.len() - 1],
        v.len()
    )
}

async fn load_then_tail(name: &str, vars: Vec<(&str, String)>, samples: usize) {
    let s = start(vars, "").await;
    let http = reqwest::Client::new();
    let b = &s.base;
    let reg = post(
        &http,
        format!("{b}/api/v1/worker/orchestrator/register"),
        json!({ "worker_id": "bench-worker", "agent_id": "bench", "max_concurrent": 1 }),
    )
    .await;
    let worker_token = reg["worker_token"].as_str().unwrap_or_default().to_owned();
    post(
        &http,
        format!("{b}/api/v1/resources"),
        json!({ "id": "bench-table", "name": "Bench table", "agent_id": "bench" }),
    )
    .await;
    let conv = post(
        &http,
        format!("{b}/api/v1/resources/bench-table/conversations"),
        json!({}),
    )
    .await["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let seeding = Instant::now();
    let mut live = (String::new(), String::new(), 0usize);
    for i in 0..MESSAGES {
        let sent = post(
            &http,
            format!("{b}/api/v1/conversations/{conv}/messages"),
            json!({ "text": format!("Research rows {}-{}", i * 10, i * 10 + 9) }),
        )
        .await;
        let vtid = sent["message"]["task_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let claim = http
            .post(format!("{b}/api/v1/worker/orchestrator/tasks/{vtid}/claim"))
            .bearer_auth(&worker_token)
            .json(&json!({}))
            .send()
            .await
            .unwrap_or_else(|e| fail(e))
            .json::<Value>()
            .await
            .unwrap_or_else(|e| fail(e));
        let run_id = claim["run_id"].as_str().unwrap_or_default().to_owned();
        let token = claim["claim_token"].as_str().unwrap_or_default().to_owned();
        let steps: Vec<Value> = (0..STEPS_PER_REPLY)
            .map(|k| {
                step(format!(
                    "row {k}: looked it up, found a plausible answer with some detail"
                ))
            })
            .collect();
        let r = http
            .post(format!("{b}/api/v1/runs/{run_id}/steps"))
            .bearer_auth(&worker_token)
            .json(&json!({ "claim_token": token, "start_index": 0, "steps": steps }))
            .send()
            .await
            .unwrap_or_else(|e| fail(e));
        if !r.status().is_success() {
            fail(format!("steps: {}", r.status()));
        }
        if i + 1 < MESSAGES {
            let r = http
                .post(format!("{b}/api/v1/worker/orchestrator/tasks/{vtid}/progress"))
                .bearer_auth(&worker_token)
                .json(&json!({ "event": "worker.execution.completed", "claim_token": token, "result": "ten rows done" }))
                .send()
                .await
                .unwrap_or_else(|e| fail(e));
            if !r.status().is_success() {
                fail(format!("progress: {}", r.status()));
            }
        } else {
            live = (run_id, token, STEPS_PER_REPLY);
        }
    }
    println!(
        "{name}: seeded {MESSAGES} messages, {} steps in {:.1} s",
        MESSAGES * STEPS_PER_REPLY,
        seeding.elapsed().as_secs_f64()
    );
    let (run_id, token, mut next_index) = live;
    let mut body_ms = Vec::with_capacity(samples);
    let mut body_bytes = 0;
    let mut load_ms = Vec::with_capacity(samples);
    let mut total_ms = Vec::with_capacity(samples);
    for i in 0..samples + 5 {
        let t0 = Instant::now();
        let body = http
            .get(format!("{b}/api/v1/conversations/{conv}"))
            .send()
            .await
            .unwrap_or_else(|e| fail(e))
            .bytes()
            .await
            .unwrap_or_else(|e| fail(e));
        let t_body = t0.elapsed();
        // Parsed as the shipped client parses it: into the protocol's typed
        // detail, finished replies' steps kept as their JSON text.
        let detail: shepherd_protocol::ConversationDetail =
            serde_json::from_slice(&body).unwrap_or_else(|e| fail(e));
        let t_load = t0.elapsed();
        if detail.messages.len() < MESSAGES {
            fail(format!("load returned {} messages", detail.messages.len()));
        }
        let cursor = detail.cursor;
        let mut tail = Tail::open(
            &http,
            format!("{b}/api/events?after={cursor}&conversation_id={conv}"),
        )
        .await;
        let t_tail = t0.elapsed();
        if i >= 5 {
            body_ms.push(t_body.as_secs_f64() * 1000.0);
            body_bytes = body.len();
            load_ms.push(t_load.as_secs_f64() * 1000.0);
            total_ms.push(t_tail.as_secs_f64() * 1000.0);
        }
        // A step committed after the load arrives on the tail.
        let r = http
            .post(format!("{b}/api/v1/runs/{run_id}/steps"))
            .bearer_auth(&worker_token)
            .json(&json!({ "claim_token": token, "start_index": next_index, "steps": [step(format!("live {i}"))] }))
            .send()
            .await
            .unwrap_or_else(|e| fail(e));
        if !r.status().is_success() {
            fail(format!("live step: {}", r.status()));
        }
        let got = tail.next_of("run.step").await;
        if got["data"]["index"].as_i64() != Some(next_index as i64) {
            fail(format!("tail delivered {got} instead of step {next_index}"));
        }
        next_index += 1;
    }
    println!(
        "{name}: body received       {}  ({} KiB)",
        percentiles(body_ms),
        body_bytes / 1024
    );
    println!("{name}: load (parsed)       {}", percentiles(load_ms));
    println!("{name}: load then tail      {}", percentiles(total_ms));
    s.stop().await;
}

const TRIVIAL_AGENT: &str =
    r#"cat > /dev/null; echo '{"type":"action","content":[{"type":"text","text":"first step"}]}'"#;

async fn send_to_first_step(sends: usize) {
    let toml = format!(
        "[agents.trivial]\ncommand = [\"bash\", \"-c\", {}]\ntranscript = \"steps-jsonl\"\n",
        serde_json::to_string(TRIVIAL_AGENT).unwrap_or_default()
    );
    let s = start(Vec::new(), &toml).await;
    let http = reqwest::Client::new();
    let b = &s.base;
    post(
        &http,
        format!("{b}/api/v1/resources"),
        json!({ "id": "bench-table", "name": "Bench table", "agent_id": "trivial" }),
    )
    .await;
    let conv = post(
        &http,
        format!("{b}/api/v1/resources/bench-table/conversations"),
        json!({}),
    )
    .await["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut runner_ms = Vec::new();
    // Where the time goes: the send to each event a client sees on the way.
    let mut phases: HashMap<String, Vec<f64>> = HashMap::new();
    for i in 0..sends + 3 {
        let mut tail = Tail::open(
            &http,
            format!("{b}/api/events?after=now&conversation_id={conv}"),
        )
        .await;
        let t0 = Instant::now();
        post(
            &http,
            format!("{b}/api/v1/conversations/{conv}/messages"),
            json!({ "text": format!("message {i}") }),
        )
        .await;
        tail.next_of("run.step").await;
        if i >= 3 {
            runner_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
            for (kind, at) in &tail.arrivals {
                let ms = at.duration_since(t0).as_secs_f64() * 1000.0;
                phases.entry(kind.clone()).or_default().push(ms);
            }
        }
        // The conversation is idle again before the next send.
        loop {
            let e = tail.next_of("conversation.state_changed").await;
            if e["data"]["to"] == "idle" {
                break;
            }
        }
    }
    s.stop().await;
    let mut direct_ms = Vec::new();
    for i in 0..sends + 3 {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let t0 = Instant::now();
        let mut child = tokio::process::Command::new("bash")
            .args(["-c", TRIVIAL_AGENT])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| fail(e));
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(b"message").await;
        }
        let out = child.stdout.take().unwrap_or_else(|| fail("no stdout"));
        let mut lines = tokio::io::BufReader::new(out).lines();
        let _ = lines.next_line().await;
        if i >= 3 {
            direct_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        let _ = child.wait().await;
    }
    println!(
        "send → first step through the runner   {}",
        percentiles(runner_ms)
    );
    let mut phases: Vec<(String, Vec<f64>)> = phases.into_iter().collect();
    phases.sort_by(|a, b| median(&a.1).total_cmp(&median(&b.1)));
    for (kind, ms) in phases {
        println!("  on the way: send → {kind:<27} {}", percentiles(ms));
    }
    println!(
        "spawn → first line, same agent direct   {}",
        percentiles(direct_ms)
    );
}

fn main() {
    // The built-in runner starts each agent under `shepherd shim`, and in
    // this process the current executable is the bench: name the real binary.
    if std::env::var_os("SHEPHERD_SHIM_PROGRAM").is_none() {
        std::env::set_var("SHEPHERD_SHIM_PROGRAM", env!("CARGO_BIN_EXE_shepherd"));
    }
    let samples = env_usize("SHEPHERD_BENCH_SAMPLES", 200);
    let sends = env_usize("SHEPHERD_BENCH_SENDS", 50);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(e));
    let cpus = std::thread::available_parallelism()
        .map(|c| c.get())
        .unwrap_or(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "conversations: {MESSAGES} messages, {} steps; {cpus} CPU(s), load average {}",
        MESSAGES * STEPS_PER_REPLY,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    rt.block_on(async {
        // `SHEPHERD_BENCH_SAMPLES=0` measures the send alone.
        if samples > 0 {
            load_then_tail("sqlite", Vec::new(), samples).await;
        }
        let pg_reachable = samples > 0
            && tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
                .await
                .is_ok();
        if pg_reachable {
            let schema = format!("bench_conv_{}", unique());
            load_then_tail(
                "postgres",
                vec![
                    ("SHEPHERD_DATABASE_URL", pg_url()),
                    ("SHEPHERD_PG_SCHEMA", schema.clone()),
                ],
                samples,
            )
            .await;
            if let Ok((client, conn)) =
                tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls).await
            {
                tokio::spawn(conn);
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .await;
            }
        } else if samples > 0 {
            println!("postgres: skipped ({} unreachable)", pg_url());
        }
        send_to_first_step(sends).await;
    });
}
