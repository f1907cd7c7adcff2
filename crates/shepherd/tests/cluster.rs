//! Several nodes on one PostgreSQL database: two real `shepherd serve`
//! processes, each with its own data directory and built-in runner, share
//! one queue. Tasks created on either node each run to `done` exactly once;
//! event-stream clients on both nodes (resuming with `Last-Event-ID`, and
//! failing over to the surviving node) see every event of the log exactly
//! once, in order, the same sequence everywhere; and a node killed with
//! SIGKILL mid-run loses nothing acknowledged: its workers fall silent,
//! their claims expire and the other node runs the tasks, while the dead
//! node's shims end their agents.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use common::{alive, free_port, wait_for, Env, Kind, Proc, SseClient};

const TASKS: usize = 500;
/// The agent's `max_concurrent`: its runs at once across the cluster (and
/// each node's runner opens that many slots).
const SLOTS: usize = 6;

/// The nodes a client may talk to; node 0 is the one that gets killed.
struct Nodes {
    base: [String; 2],
    alive: [AtomicBool; 2],
}

/// What one event-stream client saw, over all its connections.
#[derive(Default)]
struct Seen {
    ids: Vec<i64>,
    names: Vec<String>,
    /// Frames without an id or `resync` frames: neither may happen here.
    oddities: Vec<String>,
    connections: usize,
}

/// Follows `/api/events` from the start of the log on node `home` (on node
/// 1 once `home` is dead), reconnecting with `Last-Event-ID` after every
/// `reconnect_every` events (0: only when the connection ends or idles),
/// until it has seen the event `stop_at` names.
async fn follow(
    nodes: Arc<Nodes>,
    home: usize,
    reconnect_every: usize,
    stop_at: Arc<AtomicI64>,
) -> Seen {
    let mut seen = Seen::default();
    let mut last = 0i64;
    let reached = |last: i64| {
        let stop = stop_at.load(Ordering::SeqCst);
        stop > 0 && last >= stop
    };
    while !reached(last) {
        let node = if nodes.alive[home].load(Ordering::SeqCst) {
            home
        } else {
            1
        };
        let Some(mut client) =
            SseClient::try_connect(&nodes.base[node], "/api/events", None, Some(last)).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        seen.connections += 1;
        let mut this_connection = 0;
        // Ends on a closed connection, an idle one (it resumes right
        // away), or after `reconnect_every` events.
        while let Some(frame) = client.next(Duration::from_secs(2)).await {
            let Some(id) = frame.id.filter(|_| frame.event != "resync") else {
                seen.oddities
                    .push(format!("{} {}", frame.event, frame.data));
                continue;
            };
            seen.ids.push(id);
            seen.names.push(frame.event);
            last = id;
            this_connection += 1;
            if reached(last) || (reconnect_every > 0 && this_connection >= reconnect_every) {
                break;
            }
        }
    }
    seen
}

/// Prints the nodes' logs when the test fails (their directories go with it).
struct LogsOnFailure(Vec<std::path::PathBuf>);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.0 {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(60).collect();
                eprintln!("--- {} (last lines)", p.display());
                for l in tail.iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

async fn get(http: &reqwest::Client, url: String) -> Option<Value> {
    http.get(url).send().await.ok()?.json().await.ok()
}

/// Every event of the log after `after`, up to and including `through`.
async fn log_ids(http: &reqwest::Client, base: &str, through: i64) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut after = 0;
    loop {
        let page = get(
            http,
            format!("{base}/api/v1/events?after={after}&limit=5000"),
        )
        .await
        .expect("event page");
        let events = page["events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            return ids;
        }
        for e in &events {
            let id = e["id"].as_i64().expect("event id");
            if id > through {
                return ids;
            }
            ids.push(id);
        }
        after = page["next_cursor"].as_i64().expect("next_cursor");
    }
}

/// Every run, newest first.
async fn all_runs(http: &reqwest::Client, base: &str) -> Vec<Value> {
    let mut runs = Vec::new();
    loop {
        let page = get(
            http,
            format!("{base}/api/v1/runs?limit=500&offset={}", runs.len()),
        )
        .await
        .expect("runs page");
        let batch = page["runs"].as_array().cloned().unwrap_or_default();
        if batch.is_empty() {
            return runs;
        }
        runs.extend(batch);
    }
}

async fn done_count(http: &reqwest::Client, base: &str) -> Option<i64> {
    get(http, format!("{base}/api/v1/tasks?state=done&limit=1")).await?["total"].as_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_share_one_queue_and_survive_a_kill() {
    // Node 0's environment names the database schema both nodes use.
    let mut envs = [Env::new(Kind::Postgres), Env::new(Kind::Sqlite)];
    let shared: Vec<(String, String)> = [
        "SHEPHERD_DATABASE_URL",
        "SHEPHERD_PG_SCHEMA",
        "SHEPHERD_PG_POOL_SIZE",
    ]
    .iter()
    .map(|k| (k.to_string(), envs[0].vars[*k].clone()))
    .collect();
    let pids = envs[0].dir.join("agent-pids");
    let _logs = LogsOnFailure(envs.iter().map(|e| e.dir.join("serve.log")).collect());
    let mut bases = Vec::new();
    let mut procs = Vec::new();
    for (i, env) in envs.iter_mut().enumerate() {
        for (k, v) in &shared {
            env.set(k, v);
        }
        // Every agent records its pid (one short append each), says which
        // task it did and finishes after a moment; once the node's `hang`
        // file exists, its agents hang instead (the ones a kill catches).
        let script = env.script(
            "agent.sh",
            &format!(
                "echo $$ >> {pids}\nif [ -e {hang} ]; then sleep 60; fi\nsleep 0.2\necho \"did $SHEPHERD_TASK_ID\"\n",
                pids = pids.display(),
                hang = env.dir.join("hang").display()
            ),
        );
        // Told before it starts: its peers are given its advertised URL.
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        // Short leases, so that the dead node's claims move on within
        // seconds: heartbeats every second, silent workers lapse after 4 s,
        // their shims end the agents after 3 s, sweeps every second.
        env.set("SHEPHERD_NODE_ID", &format!("node-{i}"))
            .set("SHEPHERD_LISTEN", &format!("127.0.0.1:{port}"))
            .set("SHEPHERD_ADVERTISE_URL", &base)
            .set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "4")
            .set("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
            .set("SHEPHERD_SWEEP_INTERVAL_SECS", "1")
            .with_config_file(&format!(
                "[agents.scripted]\ncommand = [\"sh\", \"{script}\"]\nmax_concurrent = {SLOTS}\n"
            ));
        let log = std::fs::File::create(env.dir.join("serve.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .arg("serve")
            .envs(&env.vars)
            .env_remove("SHEPHERD_SHIM_PROGRAM")
            .current_dir(&env.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn shepherd serve");
        procs.push(Proc(child));
        bases.push(base);
    }
    let http = reqwest::Client::new();
    for base in &bases {
        wait_for("the node to be ready", Duration::from_secs(30), || async {
            let ok = http
                .get(format!("{base}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            ok.then_some(Value::Null)
        })
        .await;
    }
    let nodes = Arc::new(Nodes {
        base: [bases[0].clone(), bases[1].clone()],
        alive: [AtomicBool::new(true), AtomicBool::new(true)],
    });
    let stop_at = Arc::new(AtomicI64::new(0));
    // Two clients per node: one that stays connected, one that reconnects
    // every 250 events. Node 0's fail over to node 1 when it dies.
    let clients: Vec<_> = [(0, 0), (0, 250), (1, 0), (1, 250)]
        .into_iter()
        .map(|(home, every)| tokio::spawn(follow(nodes.clone(), home, every, stop_at.clone())))
        .collect();

    // Tasks created on both nodes in turn, eight requests at a time; every
    // one is acknowledged (201) before the kill.
    let created: Vec<u16> = futures::stream::iter(0..TASKS)
        .map(|i| {
            let (http, base) = (http.clone(), bases[i % 2].clone());
            async move {
                http.post(format!("{base}/api/v1/tasks"))
                    .json(&json!({
                        "vtid": format!("CL-{i}"), "title": "cluster", "spec": "go",
                        "agent_id": "scripted"
                    }))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(
        created.iter().all(|s| *s == 201),
        "every task created: {created:?}"
    );

    // Mid-run: a fifth of the tasks done. From then on node 0's agents
    // hang, so that the kill finds it holding runs whose agents would
    // outlive it if nothing ended them.
    wait_for(
        "a fifth of the tasks done",
        Duration::from_secs(90),
        || async {
            (done_count(&http, &bases[1]).await? >= (TASKS / 5) as i64).then_some(Value::Null)
        },
    )
    .await;
    let dead_instance = std::fs::read_to_string(envs[0].dir.join("runner").join("instance"))
        .expect("node 0's runner instance")
        .trim()
        .to_owned();
    let dead_worker = format!("scripted@{dead_instance}");
    let hang_from = chrono::Utc::now().timestamp_millis();
    std::fs::write(envs[0].dir.join("hang"), "").unwrap();
    // `max_concurrent` limits the agent across the cluster: the hanging
    // runs take over the agent's slots one by one. Half of them will do.
    wait_for(
        "node 0 to hold hanging runs",
        Duration::from_secs(30),
        || async {
            let running = get(
                &http,
                format!("{}/api/v1/runs?status=running&limit=500", bases[0]),
            )
            .await?;
            let hanging = running["runs"]
                .as_array()?
                .iter()
                .filter(|r| {
                    r["worker_id"] == dead_worker.as_str()
                        && r["started_at"]
                            .as_str()
                            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                            .is_some_and(|t| t.timestamp_millis() > hang_from)
                })
                .count();
            (hanging >= SLOTS / 2).then_some(Value::Null)
        },
    )
    .await;
    nodes.alive[0].store(false, Ordering::SeqCst);
    // SAFETY: kill(2) on this test's own child.
    unsafe {
        libc::kill(procs[0].0.id() as i32, libc::SIGKILL);
    }
    let _ = procs[0].0.wait();

    wait_for(
        "every task done on the surviving node",
        Duration::from_secs(120),
        || async { (done_count(&http, &bases[1]).await? == TASKS as i64).then_some(Value::Null) },
    )
    .await;

    // Each task done exactly once: one successful run each, and the runs
    // the dead node held ended as lost, not done.
    let runs = all_runs(&http, &bases[1]).await;
    let mut done_runs: BTreeMap<String, usize> = BTreeMap::new();
    let mut lost_on_dead_node = 0;
    for r in &runs {
        let vtid = r["vtid"].as_str().unwrap().to_owned();
        if r["status"] == "done" {
            *done_runs.entry(vtid).or_default() += 1;
        } else if r["worker_id"].as_str().is_some_and(|w| w == dead_worker) {
            lost_on_dead_node += 1;
            assert_eq!(r["status"], "failed", "a run of the dead node: {r}");
        } else {
            panic!("a run of the surviving node did not end done: {r}");
        }
    }
    assert_eq!(done_runs.len(), TASKS, "every task has a successful run");
    let twice: Vec<_> = done_runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "tasks done more than once: {twice:?}");
    assert!(
        lost_on_dead_node >= SLOTS / 2,
        "the kill caught node 0 with its hanging runs in flight (their claims moved on): {lost_on_dead_node}"
    );
    let by_node: HashSet<bool> = runs
        .iter()
        .filter(|r| r["status"] == "done")
        .map(|r| r["worker_id"] == dead_worker.as_str())
        .collect();
    assert_eq!(by_node.len(), 2, "both nodes ran tasks");

    // The dead node's shims end their agents once their lease lapses.
    wait_for("every agent to end", Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let living: Vec<i32> = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| alive(*p))
            .collect();
        living.is_empty().then_some(Value::Null)
    })
    .await;

    // Every client, on either node, saw the log exactly once, in order.
    let head = get(&http, format!("{}/api/v1/events?limit=1", bases[1]))
        .await
        .expect("latest event")["events"][0]["id"]
        .as_i64()
        .expect("an event id");
    stop_at.store(head, Ordering::SeqCst);
    let log = log_ids(&http, &bases[1], head).await;
    assert!(
        log.len() > TASKS * 4,
        "the log holds the run: {} events",
        log.len()
    );
    let mut sequences = Vec::new();
    for (i, client) in clients.into_iter().enumerate() {
        let seen = tokio::time::timeout(Duration::from_secs(60), client)
            .await
            .unwrap_or_else(|_| panic!("client {i} reaches the log's head"))
            .unwrap();
        assert!(seen.oddities.is_empty(), "client {i}: {:?}", seen.oddities);
        let (ids, names): (Vec<i64>, Vec<String>) = seen
            .ids
            .iter()
            .zip(&seen.names)
            .filter(|(id, _)| **id <= head)
            .map(|(id, n)| (*id, n.clone()))
            .unzip();
        let first_bad = ids.iter().zip(&log).position(|(a, b)| a != b);
        assert!(
            ids == log,
            "client {i} ({} connections) saw {} events, the log holds {}; first difference at {first_bad:?}",
            seen.connections,
            ids.len(),
            log.len()
        );
        if i % 2 == 1 {
            assert!(
                seen.connections > 1,
                "client {i} resumed with Last-Event-ID"
            );
        }
        sequences.push(names);
    }
    assert!(
        sequences.windows(2).all(|w| w[0] == w[1]),
        "every client saw the same events under the same names"
    );
}
