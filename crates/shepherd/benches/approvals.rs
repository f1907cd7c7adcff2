//! Approvals benchmark: how fast a person learns of an agent's request,
//! and how fast the agent goes on once answered; and a full inbox.
//!
//! Against the real server on `127.0.0.1:0`, on SQLite and (when reachable)
//! PostgreSQL. An asking run holds a run token, as an agent does:
//!
//! 1. **Request → inbox**: the asker posts a request; a person's SSE stream
//!    (opened before, filtered to `input.requested`, as the web UI's
//!    Inbox follows it) receives it. Timed from the POST's start to the
//!    frame's arrival.
//! 2. **Answer → agent resumes**: the asker waits in the long poll
//!    (`GET /api/v1/input-requests/{id}?wait=25`, what `shepherd ask` and
//!    the permission tool do); the person answers. Timed from the answer's
//!    POST to the long poll's return.
//! 3. **A full inbox**: 1,000 pending requests; the Inbox's list query
//!    (`state=pending&limit=1000`) timed, then each answered in turn
//!    (latency per answer), then the list again.
//!
//! Goals (issue 36): 1 and 2 under 100 ms at p50 and p99 on loopback.
//!
//! Run: `cargo bench -p shepherd --bench approvals`. Knobs:
//! `SHEPHERD_BENCH_SAMPLES` (default 200), `SHEPHERD_BENCH_PENDING`
//! (default 1000), `SHEPHERD_BENCH_PG_URL` (PostgreSQL; skipped when it
//! cannot connect).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shepherd_client::{Client, Start};
use shepherd_protocol as p;
use shepherd_testkit::{pg_url, unique, TempDir};

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("approvals bench: {msg}");
    std::process::exit(1)
}

fn env_usize(k: &str, default: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn report(what: &str, mut xs: Vec<Duration>) {
    xs.sort();
    println!(
        "  {what:<34} n={:<5} p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
        xs.len(),
        pct(&xs, 0.5),
        pct(&xs, 0.9),
        pct(&xs, 0.99),
        pct(&xs, 1.0)
    );
}

struct Served {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: tokio::task::JoinHandle<()>,
    _dir: TempDir,
}

async fn start(vars: Vec<(&str, String)>) -> Served {
    let dir = TempDir::new("shepherd-bench-approvals");
    let mut map: HashMap<String, String> =
        vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    map.insert("SHEPHERD_DATA_DIR".into(), dir.0.display().to_string());
    map.insert("SHEPHERD_LOG".into(), "warn".into());
    let config = shepherd::config::Config::load_with(None, &|k| map.get(k).cloned())
        .unwrap_or_else(|e| fail(format!("configuration: {e}")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| fail(e));
    let base = format!("http://{}", listener.local_addr().unwrap());
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
    let c = Client::new(&base, None).unwrap_or_else(|e| fail(e));
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.ready().await.is_err() {
        if Instant::now() > deadline {
            fail("the server did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Served {
        base,
        stop: Some(tx),
        handle,
        _dir: dir,
    }
}

impl Served {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = self.handle.await;
    }
}

/// A claimed run of an outside worker, and the run token its agent asks with.
async fn asking_run(op: &Client, vtid: &str) -> String {
    op.create_task(&p::CreateTask {
        vtid: Some(vtid.into()),
        title: "approvals bench".into(),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| fail(format!("task: {e}")));
    let worker = format!("bench-{vtid}");
    op.register(&p::RegisterBody {
        worker_id: Some(worker.clone()),
        max_concurrent: Some(1),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| fail(format!("register: {e}")));
    let claim = op
        .claim(
            vtid,
            &p::WorkerBody {
                worker_id: Some(worker),
            },
        )
        .await
        .unwrap_or_else(|e| fail(format!("claim: {e}")));
    op.run_token(&claim.run_id, &claim.claim_token)
        .await
        .unwrap_or_else(|e| fail(format!("run token: {e}")))
        .token
}

fn question(key: String) -> p::AskInput {
    p::AskInput {
        run_id: None,
        kind: Some(p::InputKind::Question),
        key: Some(key),
        tool_name: None,
        tool_input: None,
        prompt: Some("Go on?".into()),
        options: vec!["yes".into(), "no".into()],
    }
}

fn yes() -> p::InputAnswer {
    p::InputAnswer {
        option: Some("yes".into()),
        ..Default::default()
    }
}

async fn bench(label: &str, vars: Vec<(&str, String)>) {
    let samples = env_usize("SHEPHERD_BENCH_SAMPLES", 200);
    let pending = env_usize("SHEPHERD_BENCH_PENDING", 1000);
    let s = start(vars).await;
    let op = Client::new(&s.base, None).unwrap_or_else(|e| fail(e));
    let token = asking_run(&op, &format!("APPROVE-{}", unique())).await;
    let agent = Client::new(&s.base, Some(token)).unwrap_or_else(|e| fail(e));

    // The person's Inbox stream: each input.requested, with when it came.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let head = op.head().await.unwrap_or_else(|e| fail(e));
    let follower = {
        let op = op.clone();
        tokio::spawn(async move {
            let q = p::EventStreamQuery {
                types: Some("input.requested".into()),
                ..Default::default()
            };
            let _ = op
                .follow(
                    &q,
                    Start::After(head),
                    |frame| {
                        let at = Instant::now();
                        if let Ok(e) = frame.parse::<p::Event>() {
                            if let Ok(d) = serde_json::from_value::<p::InputRequested>(e.data) {
                                let _ = seen_tx.send((d.request.id, at));
                            }
                        }
                        true
                    },
                    |_| {},
                )
                .await;
        })
    };

    println!("{label}:");
    let (mut to_inbox, mut to_resume) = (Vec::new(), Vec::new());
    for i in 0..samples {
        let t0 = Instant::now();
        let r = agent
            .ask(&question(format!("q{i}")))
            .await
            .unwrap_or_else(|e| fail(format!("ask: {e}")));
        // The agent waits in the long poll, as `shepherd ask` does.
        let waiter = {
            let (agent, id) = (agent.clone(), r.id.clone());
            tokio::spawn(async move {
                let done = agent.input_request(&id, Some(25)).await;
                (done, Instant::now())
            })
        };
        let (id, at) = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv())
            .await
            .unwrap_or_else(|_| fail("the request never reached the stream"))
            .unwrap_or_else(|| fail("the stream ended"));
        if id != r.id {
            fail(format!("the stream showed {id}, expected {}", r.id));
        }
        to_inbox.push(at - t0);
        // Let the long poll settle into its wait before answering.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t2 = Instant::now();
        op.answer_input(&r.id, &yes())
            .await
            .unwrap_or_else(|e| fail(format!("answer: {e}")));
        let (done, t3) = waiter.await.unwrap_or_else(|e| fail(e));
        let done = done.unwrap_or_else(|e| fail(format!("long poll: {e}")));
        if done.state != p::InputState::Answered {
            fail(format!("the long poll returned {:?}", done.state));
        }
        to_resume.push(t3 - t2);
    }
    report("request → inbox stream", to_inbox);
    report("answer → agent resumes", to_resume);
    follower.abort();

    // A full inbox.
    let t = Instant::now();
    let mut ids = Vec::with_capacity(pending);
    for i in 0..pending {
        ids.push(
            agent
                .ask(&question(format!("p{i}")))
                .await
                .unwrap_or_else(|e| fail(format!("ask: {e}")))
                .id,
        );
    }
    let asked = t.elapsed();
    println!(
        "  {pending} requests asked in {:.2} s ({:.0}/s)",
        asked.as_secs_f64(),
        pending as f64 / asked.as_secs_f64()
    );
    let list_q = p::InputRequestsQuery {
        state: Some("pending".into()),
        limit: Some(1000),
        ..Default::default()
    };
    let mut lists = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let l = op
            .input_requests(&list_q)
            .await
            .unwrap_or_else(|e| fail(format!("list: {e}")));
        lists.push(t.elapsed());
        if l.requests.len() != pending.min(1000) {
            fail(format!("listed {} of {pending}", l.requests.len()));
        }
    }
    report(&format!("list {pending} pending"), lists);
    let mut answers = Vec::new();
    for id in &ids {
        let t = Instant::now();
        op.answer_input(id, &yes())
            .await
            .unwrap_or_else(|e| fail(format!("answer: {e}")));
        answers.push(t.elapsed());
    }
    report("answer one of a full inbox", answers);
    let t = Instant::now();
    let l = op.input_requests(&list_q).await.unwrap_or_else(|e| fail(e));
    println!(
        "  list after answering all: {} pending, {:.2} ms",
        l.requests.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    s.stop().await;
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    bench("SQLite", vec![]).await;
    let url = std::env::var("SHEPHERD_BENCH_PG_URL").unwrap_or_else(|_| pg_url());
    let reachable = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .is_ok();
    if reachable {
        bench(
            "PostgreSQL",
            vec![
                ("SHEPHERD_DATABASE_URL", url),
                ("SHEPHERD_PG_SCHEMA", format!("bench_{}", unique())),
            ],
        )
        .await;
    } else {
        println!("PostgreSQL: skipped (cannot connect to {url})");
    }
}
