//! Fault suite: the real `shepherd serve` binary killed with SIGKILL, and
//! (PostgreSQL) its database connections terminated, while workers create,
//! claim, write steps and report progress. Every write the server
//! acknowledged is there exactly once afterwards, every task and run
//! settles, agents of the built-in runner live through each kill and end
//! with every transcript line once, and an SSE client resuming with
//! `Last-Event-ID` sees every event once, in order. Also: clients that hang
//! up mid-request do not break the requests of others.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use common::{alive, pg_url, unique, wait_for, wait_ready, Env, Kind, Served, OPERATOR};

/// Rounds of load, each ended by a fault.
const ROUNDS: usize = 3;
/// Concurrent workers writing during each round.
const LOADERS: usize = 4;
/// Lines each agent prints, one every 100 ms.
const AGENT_LINES: u32 = 30;

/// The real binary, restarted on the same data and the same address: the
/// first start binds port 0, later ones the port it chose.
struct Node {
    env: Env,
    listen: String,
    base: String,
    child: Option<Served>,
    http: reqwest::Client,
}

impl Node {
    fn new(env: Env) -> Node {
        Node {
            env,
            listen: "127.0.0.1:0".to_owned(),
            base: String::new(),
            child: None,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        }
    }

    async fn start(&mut self) {
        let served = Served::spawn(
            self.env
                .serve_command()
                .env("SHEPHERD_LISTEN", &self.listen)
                // The binary's own shim, as in production.
                .env_remove("SHEPHERD_SHIM_PROGRAM")
                .stderr(Stdio::inherit()),
        );
        self.listen = served.addr.to_string();
        self.base = served.base.clone();
        self.child = Some(served);
        wait_ready(&self.http, &self.base).await;
    }

    /// SIGKILL: no shutdown code runs.
    fn kill9(&mut self) {
        if let Some(mut p) = self.child.take() {
            p.child.kill().unwrap();
            p.child.wait().unwrap();
        }
    }
}

/// Sends until the server answers (it may be down for a restart); returns
/// the status and body of the first answer.
/// A run's stored steps (up to 500), as the operator reads them.
async fn run_steps(http: &reqwest::Client, base: &str, run_id: &str) -> Vec<Value> {
    let (_, page) = send(
        http,
        reqwest::Method::GET,
        &format!("{base}/api/v1/runs/{run_id}/steps?limit=500"),
        OPERATOR,
        None,
    )
    .await;
    match page["steps"].as_array() {
        Some(steps) => steps.clone(),
        None => panic!("steps of {run_id}: {page}"),
    }
}

/// A worker's heartbeat, which must be accepted.
async fn heartbeat(http: &reqwest::Client, base: &str, token: &str, worker_id: &str) {
    let (st, b) = send(
        http,
        reqwest::Method::POST,
        &format!("{base}/api/v1/worker/orchestrator/heartbeat"),
        token,
        Some(&json!({ "worker_id": worker_id })),
    )
    .await;
    assert_eq!(st, 200, "{b}");
}

async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut req = http.request(method.clone(), url).bearer_auth(token);
        if let Some(b) = body {
            req = req.json(b);
        }
        if let Ok(res) = req.send().await {
            let st = res.status().as_u16();
            // A body cut by the kill is an answer nobody received.
            if let Ok(text) = res.text().await {
                return (st, serde_json::from_str(&text).unwrap_or(Value::Null));
            }
        }
        assert!(Instant::now() < deadline, "no answer from {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the server acknowledged to the workers.
#[derive(Default)]
struct Acks {
    /// Tasks whose creation answered 201.
    created: BTreeSet<String>,
    /// Runs whose three steps answered 200, with their texts.
    steps: BTreeMap<String, Vec<String>>,
    /// Tasks whose completion report answered ok.
    completed: BTreeSet<String>,
    /// Any 5xx other than 503 seen while the server was up.
    errors: Vec<String>,
}

fn step(text: &str) -> Value {
    json!({ "type": "action", "content": [{ "type": "text", "text": text }] })
}

/// One worker's loop: create a task, heartbeat, claim the next task, write
/// its steps, complete it; every answer recorded.
async fn load(base: String, i: usize, stop: Arc<AtomicBool>, acks: Arc<Mutex<Acks>>) -> usize {
    use reqwest::Method;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let worker = format!("loader-{i}");
    let (st, b) = send(
        &http,
        Method::POST,
        &format!("{base}/api/v1/worker/orchestrator/register"),
        OPERATOR,
        Some(&json!({ "worker_id": worker, "capabilities": ["fault"], "max_concurrent": 1000 })),
    )
    .await;
    assert_eq!(st, 200, "{b}");
    let tok = b["worker_token"].as_str().unwrap().to_owned();
    let note = |st: u16, what: &str, b: &Value| {
        if st >= 500 && st != 503 {
            acks.lock()
                .unwrap()
                .errors
                .push(format!("{what}: {st} {b}"));
        }
    };
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let vtid = format!("F{i}-{n}");
        let body = json!({ "vtid": vtid, "title": vtid, "spec": "fault load",
                           "workflow": "simple", "capabilities": ["fault"] });
        let (st, b) = send(
            &http,
            Method::POST,
            &format!("{base}/api/v1/tasks"),
            OPERATOR,
            Some(&body),
        )
        .await;
        note(st, "create", &b);
        if st == 201 {
            acks.lock().unwrap().created.insert(vtid.clone());
        }
        let (st, b) = send(
            &http,
            Method::POST,
            &format!("{base}/api/v1/worker/orchestrator/heartbeat"),
            &tok,
            Some(&json!({ "worker_id": worker })),
        )
        .await;
        note(st, "heartbeat", &b);
        let (st, b) = send(
            &http,
            Method::POST,
            &format!("{base}/api/v1/worker/orchestrator/tasks/claim"),
            &tok,
            Some(&json!({ "max": 1 })),
        )
        .await;
        note(st, "claim", &b);
        let Some(c) = b["claims"].as_array().and_then(|c| c.first()).cloned() else {
            continue;
        };
        let run_id = c["run_id"].as_str().unwrap().to_owned();
        let ct = c["claim_token"].as_str().unwrap().to_owned();
        let claimed = c["vtid"].as_str().unwrap().to_owned();
        let texts: Vec<String> = (0..3).map(|k| format!("{claimed} step {k}")).collect();
        let steps: Vec<Value> = texts.iter().map(|t| step(t)).collect();
        let (st, b) = send(
            &http,
            Method::POST,
            &format!("{base}/api/v1/runs/{run_id}/steps"),
            &tok,
            Some(&json!({ "claim_token": ct, "start_index": 0, "steps": steps })),
        )
        .await;
        note(st, "steps", &b);
        if st == 200 {
            acks.lock().unwrap().steps.insert(run_id.clone(), texts);
        }
        let (st, b) = send(
            &http,
            Method::POST,
            &format!("{base}/api/v1/worker/orchestrator/tasks/{claimed}/progress"),
            &tok,
            Some(
                &json!({ "event": "worker.execution.completed", "claim_token": ct,
                          "result": "ok" }),
            ),
        )
        .await;
        note(st, "progress", &b);
        if st == 200 && b["ok"] == true {
            acks.lock().unwrap().completed.insert(claimed);
        }
    }
    n
}

/// An SSE client of `task.created` that reconnects with `Last-Event-ID`
/// whenever the stream breaks; returns every (id, vtid) it received.
async fn follow(base: String, stop: Arc<AtomicBool>, seen: Arc<Mutex<Vec<(i64, String)>>>) {
    let http = reqwest::Client::new();
    while !stop.load(Ordering::Relaxed) {
        let mut req = http
            .get(format!("{base}/api/events?types=task.created&after=0"))
            .bearer_auth(OPERATOR);
        if let Some((last, _)) = seen.lock().unwrap().last() {
            req = req.header("Last-Event-ID", last.to_string());
        }
        let Ok(res) = req.send().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if res.status().as_u16() != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let mut stream = res.bytes_stream();
        let mut buf = String::new();
        loop {
            let next = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
            let chunk = match next {
                Err(_) if stop.load(Ordering::Relaxed) => return,
                Err(_) => continue,
                Ok(Some(Ok(c))) => c,
                Ok(_) => break,
            };
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(pos) = buf.find("\n\n") {
                let block: String = buf.drain(..pos + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim().parse::<i64>().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if let (Some(id), true) = (id, event == "task.created") {
                    let v: Value = serde_json::from_str(&data).expect("event data is JSON");
                    seen.lock()
                        .unwrap()
                        .push((id, v["task_id"].as_str().unwrap().to_owned()));
                }
            }
        }
    }
}

/// Ends every PostgreSQL connection of the server (found by the
/// `application_name` its URL carries).
async fn terminate_backends(app: &str) -> u64 {
    let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    rows.len() as u64
}

async fn kill_rounds(kind: Kind) {
    let mut env = Env::new(kind);
    let app = format!("faults_{}", unique());
    if kind == Kind::Postgres {
        let url = format!("{}?application_name={app}", pg_url());
        env.set("SHEPHERD_DATABASE_URL", &url);
    }
    let pid_dir = env.dir.join("pids");
    // The agents end only once released, so they are alive at every kill.
    let release = env.dir.join("release");
    std::fs::create_dir_all(&pid_dir).unwrap();
    let script = env.script(
        "agent.sh",
        &format!(
            r#"echo $$ > {pids}/$$.pid
for i in $(seq 1 {AGENT_LINES}); do
  echo "{{\"type\":\"action\",\"content\":[{{\"type\":\"text\",\"text\":\"line $i\"}}]}}"
  sleep 0.1
done
while [ ! -e {release} ]; do sleep 0.1; done
"#,
            pids = pid_dir.display(),
            release = release.display()
        ),
    );
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "4")
        .set("SHEPHERD_SWEEP_INTERVAL_SECS", "1")
        .set("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .with_config_file(&format!(
            "[agents.slow]\ncommand = [\"sh\", \"{script}\"]\ntranscript = \"steps-jsonl\"\nmax_concurrent = 2\n"
        ));
    let mut node = Node::new(env);
    node.start().await;
    let base = node.base.clone();
    let http = node.http.clone();

    // Two agent tasks for the built-in runner, running across the kills.
    let agents = ["AG-1", "AG-2"];
    for vtid in agents {
        let (st, b) = send(
            &http,
            reqwest::Method::POST,
            &format!("{base}/api/v1/tasks"),
            OPERATOR,
            Some(&json!({ "vtid": vtid, "title": vtid, "spec": "run", "agent_id": "slow" })),
        )
        .await;
        assert_eq!(st, 201, "{b}");
    }
    wait_for("both agents to start", Duration::from_secs(30), || async {
        (std::fs::read_dir(&pid_dir).unwrap().count() == agents.len()).then_some(Value::Null)
    })
    .await;
    let agent_pids: Vec<i32> = std::fs::read_dir(&pid_dir)
        .unwrap()
        .map(|e| {
            std::fs::read_to_string(e.unwrap().path())
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(Mutex::new(Acks::default()));
    let sse_stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sse = tokio::spawn(follow(base.clone(), sse_stop.clone(), seen.clone()));
    let loaders: Vec<_> = (0..LOADERS)
        .map(|i| tokio::spawn(load(base.clone(), i, stop.clone(), acks.clone())))
        .collect();

    let mut survivors = 0;
    let mut terminated = 0;
    for round in 0..ROUNDS {
        // Let a good amount of work be acknowledged before each fault.
        let before = acks.lock().unwrap().created.len();
        wait_for("load to make progress", Duration::from_secs(30), || {
            let acks = acks.clone();
            async move { (acks.lock().unwrap().created.len() >= before + 50).then_some(Value::Null) }
        })
        .await;
        if kind == Kind::Postgres && round == 1 {
            // The database drops the server's connections instead.
            terminated += terminate_backends(&app).await;
            let more = acks.lock().unwrap().created.len() + 20;
            wait_for("load to go on after the connections ended", Duration::from_secs(30), || {
                let acks = acks.clone();
                async move { (acks.lock().unwrap().created.len() >= more).then_some(Value::Null) }
            })
            .await;
        }
        node.kill9();
        survivors += agent_pids.iter().filter(|p| alive(**p)).count();
        node.start().await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut iterations = 0;
    for l in loaders {
        iterations += l.await.unwrap();
    }
    let acks = std::mem::take(&mut *acks.lock().unwrap());
    assert!(acks.errors.is_empty(), "server errors: {:?}", acks.errors);
    if kind == Kind::Postgres {
        assert!(terminated > 0, "no connection of the server was terminated");
    }
    // Every agent was alive after every kill.
    assert_eq!(survivors, ROUNDS * agents.len(), "agents outlive each kill");
    std::fs::write(&release, "").unwrap();

    // Drain: a fresh worker takes every task left over (claims whose
    // answer was lost in a kill lapse and go back to the queue) and
    // completes it.
    let (st, b) = send(
        &http,
        reqwest::Method::POST,
        &format!("{base}/api/v1/worker/orchestrator/register"),
        OPERATOR,
        Some(&json!({ "worker_id": "drainer", "capabilities": ["fault"], "max_concurrent": 1000 })),
    )
    .await;
    assert_eq!(st, 200, "{b}");
    let dtok = b["worker_token"].as_str().unwrap().to_owned();
    let tasks = wait_for("every task to settle", Duration::from_secs(60), || {
        let (http, base, dtok) = (http.clone(), base.clone(), dtok.clone());
        async move {
            // Like any worker, the drainer heartbeats: a lease whose holder
            // stays silent past the heartbeat timeout (4 s here) lapses, and
            // its reports are refused then, swept or not.
            heartbeat(&http, &base, &dtok, "drainer").await;
            let (_, b) = send(
                &http,
                reqwest::Method::POST,
                &format!("{base}/api/v1/worker/orchestrator/tasks/claim"),
                &dtok,
                Some(&json!({ "max": 100 })),
            )
            .await;
            for (i, c) in b["claims"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                if i % 10 == 9 {
                    heartbeat(&http, &base, &dtok, "drainer").await;
                }
                let (st, r) = send(
                    &http,
                    reqwest::Method::POST,
                    &format!(
                        "{base}/api/v1/worker/orchestrator/tasks/{}/progress",
                        c["vtid"].as_str().unwrap()
                    ),
                    &dtok,
                    Some(&json!({ "event": "worker.execution.completed",
                                  "claim_token": c["claim_token"], "result": "drained" })),
                )
                .await;
                assert_eq!(st, 200, "{r}");
            }
            let (_, page) = send(
                &http,
                reqwest::Method::GET,
                &format!("{base}/api/v1/tasks?limit=500"),
                OPERATOR,
                None,
            )
            .await;
            let tasks = page["tasks"].as_array()?.clone();
            tasks
                .iter()
                .all(|t| t["state"] == "done")
                .then_some(Value::Array(tasks))
        }
    })
    .await;
    let tasks = tasks.as_array().unwrap();
    assert!(tasks.len() < 500, "the page holds every task");

    // Every acknowledged creation is there, once.
    let mut count: HashMap<String, usize> = HashMap::new();
    for t in tasks {
        *count
            .entry(t["vtid"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(count.values().all(|n| *n == 1), "a task listed twice");
    for v in &acks.created {
        assert!(count.contains_key(v), "acknowledged task {v} lost");
    }
    // Every acknowledged completion ended its task (checked above: all
    // done) and acknowledged steps are there exactly once, in order.
    for (run_id, want) in &acks.steps {
        let texts: Vec<String> = run_steps(&http, &base, run_id)
            .await
            .iter()
            .map(|s| s["step"]["content"][0]["text"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(&texts, want, "steps of run {run_id}");
    }
    // No run is left active.
    let (_, runs) = send(
        &http,
        reqwest::Method::GET,
        &format!("{base}/api/v1/runs?limit=500"),
        OPERATOR,
        None,
    )
    .await;
    for r in runs["runs"].as_array().unwrap() {
        let status = r["status"].as_str().unwrap();
        assert_ne!(status, "running", "a run left active: {r}");
    }
    // The agents' runs: one each, every line once.
    for vtid in agents {
        let (_, runs) = send(
            &http,
            reqwest::Method::GET,
            &format!("{base}/api/v1/runs?vtid={vtid}"),
            OPERATOR,
            None,
        )
        .await;
        let runs = runs["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{vtid}: one run, carried through: {runs:?}");
        let run_id = runs[0]["id"].as_str().unwrap();
        assert_eq!(runs[0]["status"], "done", "{vtid}: {}", runs[0]);
        let texts: Vec<String> = run_steps(&http, &base, run_id)
            .await
            .iter()
            .filter_map(|s| s["step"]["content"][0]["text"].as_str().map(str::to_owned))
            .collect();
        let want: Vec<String> = (1..=AGENT_LINES).map(|i| format!("line {i}")).collect();
        assert_eq!(texts, want, "{vtid}: every line exactly once, in order");
    }

    // The SSE client saw every task's creation once, in order.
    wait_for("the stream to catch up", Duration::from_secs(20), || {
        let (seen, n) = (seen.clone(), count.len());
        async move { (seen.lock().unwrap().len() >= n).then_some(Value::Null) }
    })
    .await;
    sse_stop.store(true, Ordering::Relaxed);
    sse.await.unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert!(
        seen.windows(2).all(|w| w[0].0 < w[1].0),
        "event ids strictly increase (no repeat)"
    );
    let streamed: BTreeSet<&str> = seen.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(streamed.len(), seen.len(), "a creation streamed twice");
    let stored: BTreeSet<&str> = count.keys().map(String::as_str).collect();
    assert_eq!(streamed, stored, "every creation streamed once");

    eprintln!(
        "faults {kind:?}: {ROUNDS} kills, {iterations} iterations, {} tasks ({} acknowledged), \
         {} step batches and {} completions acknowledged, 0 lost, 0 doubled, \
         {} connections terminated, {} agent survivals, {} events streamed",
        tasks.len(),
        acks.created.len(),
        acks.steps.len(),
        acks.completed.len(),
        terminated,
        survivors,
        seen.len()
    );
    node.kill9();
}

e2e!(kill9_under_load_loses_and_doubles_nothing, kill_rounds);
