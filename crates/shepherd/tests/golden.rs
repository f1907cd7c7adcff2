//! Golden wire tests: the JSON of every contract route (docs/contracts.md), pinned.
//!
//! One scenario drives the connector (register, pending, claim,
//! progress, heartbeat), the Workers page's run list and detail, the worker registry's workers
//! and worker events, tasks, runs, channels, the event page, the SSE frames
//! and the error bodies, on both stores. Each answer is recorded with its
//! status; volatile values (times, ids, tokens, sequence numbers) are
//! replaced by placeholders, everything else (field names, types, `null`
//! versus absent, vocabularies) is compared with `tests/golden/wire.json`.
//! Both stores must produce the same file.
//!
//! A deliberate change of the wire updates the file with
//! `SHEPHERD_UPDATE_GOLDEN=1 cargo test -p shepherd --test golden sqlite`
//! in its own commit, so the diff shows exactly what changed.

mod common;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Map, Value};

use common::{Env, Kind, Server, SseClient, OPERATOR};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/wire.json");

/// Keys whose text is random (tokens, digests).
const SECRET_KEYS: &[&str] = &["worker_token", "claim_token", "spec_snapshot_id"];

/// Keys whose numbers are sequence numbers or cursors.
const SEQ_KEYS: &[&str] = &[
    "id",
    "seq",
    "event_id",
    "next_cursor",
    "last_event_id",
    "next_after",
];

/// Replaces volatile values by placeholders that keep their JSON type.
fn normalise(v: &Value, key: Option<&str>) -> Value {
    let secret = key.is_some_and(|k| SECRET_KEYS.contains(&k));
    let seq = key.is_some_and(|k| SEQ_KEYS.contains(&k));
    // Clock readings in milliseconds (inside event data).
    let ms = key.is_some_and(|k| k.ends_with("_at") || k == "ts");
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalise(v, Some(k))))
                .collect::<Map<_, _>>(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| normalise(x, key)).collect()),
        Value::Number(_) if seq => json!("<int>"),
        Value::Number(_) if ms => json!("<ms>"),
        Value::String(_) if secret => json!("<string>"),
        Value::String(s) => Value::String(scrub(s)),
        other => other.clone(),
    }
}

/// Times and UUIDs inside a text (messages quote them).
fn scrub(s: &str) -> String {
    let time = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
        .expect("regex");
    let uuid = regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        .expect("regex");
    let s = time.replace_all(s, "<time>");
    uuid.replace_all(&s, "<uuid>").into_owned()
}

/// Records every call of the scenario in order.
struct Recorder<'a> {
    s: &'a Server,
    calls: Vec<Value>,
}

impl Recorder<'_> {
    async fn call(
        &mut self,
        label: &str,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Value {
        let (status, b) = self.s.call(method.clone(), path, token, body).await;
        self.calls.push(json!({
            "call": format!("{label}: {method} {}", scrub(path)),
            "status": status,
            "body": normalise(&b, None),
        }));
        b
    }

    async fn get(&mut self, label: &str, path: &str, token: Option<&str>) -> Value {
        self.call(label, Method::GET, path, token, None).await
    }

    async fn post(&mut self, label: &str, path: &str, token: Option<&str>, body: Value) -> Value {
        self.call(label, Method::POST, path, token, Some(body))
            .await
    }
}

fn steps() -> Value {
    json!([
        {"type":"action","content":[{"type":"text","text":"I'll run the test suite."},{"type":"tool_call","id":"shell:0","name":"shell","args":"{\"command\":\"pytest\"}"}]},
        {"type":"tool_result","call_id":"shell:0","name":"shell","text":"12 passed, 0 failed"},
        {"type":"action","content":[{"type":"text","text":"All 12 tests passed."}]}
    ])
}

/// Drives every contract route once; returns the recorded calls and SSE frames.
async fn scenario(kind: Kind) -> Value {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let mut r = Recorder {
        s: &s,
        calls: Vec::new(),
    };
    let op = Some(OPERATOR);

    // Errors: missing token, unknown route, malformed body.
    r.get("no token", "/api/v1/tasks", None).await;
    r.get("unknown route", "/api/v1/nope", op).await;
    r.post(
        "unknown field",
        "/api/v1/tasks",
        op,
        json!({"title": "x", "colour": "red"}),
    )
    .await;
    r.get("health", "/healthz", None).await;

    // The connector contract: register.
    let reg = r
        .post(
            "register",
            "/api/v1/worker/orchestrator/register",
            op,
            json!({ "worker_id": "w-1", "capabilities": ["typescript"], "max_concurrent": 1,
                    "name": "builder", "project_path": "/src/app", "session_id": "sess-1" }),
        )
        .await;
    let w1 = reg["worker_token"].as_str().expect("token").to_owned();
    let w1 = Some(w1.as_str());
    r.post(
        "register as a worker",
        "/api/v1/worker/orchestrator/register",
        w1,
        json!({ "worker_id": "w-x" }),
    )
    .await;
    let reg2 = r
        .post(
            "register second",
            "/api/v1/worker/orchestrator/register",
            op,
            json!({ "worker_id": "w-2", "capabilities": ["typescript"] }),
        )
        .await;
    let w2 = reg2["worker_token"].as_str().expect("token").to_owned();
    let w2 = Some(w2.as_str());

    // Channels.
    r.post(
        "channel upsert",
        "/api/v1/channels",
        op,
        json!({ "id": "general", "name": "#general" }),
    )
    .await;
    r.get("channel list", "/api/v1/channels", op).await;

    // Tasks.
    r.post(
        "task create",
        "/api/v1/tasks",
        op,
        json!({ "vtid": "VTID-1", "title": "Run the tests", "spec": "# Tests\nRun them.",
                "capabilities": ["typescript"], "channel_id": "general", "priority": 5 }),
    )
    .await;
    r.post(
        "task create draft",
        "/api/v1/tasks",
        op,
        json!({ "vtid": "VTID-2", "title": "Break things", "dispatch": false }),
    )
    .await;
    r.post(
        "task dispatch",
        "/api/v1/tasks/VTID-2/dispatch",
        op,
        json!({}),
    )
    .await;
    r.post(
        "task create exists",
        "/api/v1/tasks",
        op,
        json!({ "vtid": "VTID-2", "title": "again" }),
    )
    .await;
    r.get("task list", "/api/v1/tasks", op).await;
    r.get("task list bad state", "/api/v1/tasks?state=sleeping", op)
        .await;

    // The connector contract: pending, claim, heartbeat, progress.
    r.get("pending", "/api/v1/worker/orchestrator/tasks/pending", w1)
        .await;
    r.get(
        "pending without worker",
        "/api/v1/worker/orchestrator/tasks/pending",
        op,
    )
    .await;
    r.post(
        "claim as another worker",
        "/api/v1/worker/orchestrator/tasks/VTID-1/claim",
        w1,
        json!({ "worker_id": "w-2" }),
    )
    .await;
    let claim = r
        .post(
            "claim",
            "/api/v1/worker/orchestrator/tasks/VTID-1/claim",
            w1,
            json!({ "worker_id": "w-1" }),
        )
        .await;
    let ct = claim["claim_token"].as_str().expect("claim").to_owned();
    let run_id = claim["run_id"].as_str().expect("run").to_owned();
    r.post(
        "claim taken",
        "/api/v1/worker/orchestrator/tasks/VTID-1/claim",
        w2,
        json!({}),
    )
    .await;
    r.post(
        "heartbeat",
        "/api/v1/worker/orchestrator/heartbeat",
        w1,
        json!({ "worker_id": "w-1", "active_vtid": "VTID-1" }),
    )
    .await;
    let progress = |event: &str, message: Option<&str>| json!({ "event": event, "message": message, "claim_token": ct });
    r.post(
        "progress started",
        "/api/v1/worker/orchestrator/tasks/VTID-1/progress",
        w1,
        progress("worker.execution.started", Some("starting")),
    )
    .await;
    r.post(
        "progress unknown",
        "/api/v1/worker/orchestrator/tasks/VTID-1/progress",
        w1,
        progress("worker.teleported", None),
    )
    .await;

    // Steps and status under the claim.
    let steps_path = format!("/api/v1/runs/{run_id}/steps");
    let all = steps();
    r.post(
        "steps append",
        &steps_path,
        w1,
        json!({ "claim_token": ct, "start_index": 0, "steps": all.as_array().unwrap()[..2] }),
    )
    .await;
    r.post(
        "steps retry",
        &steps_path,
        w1,
        json!({ "claim_token": ct, "start_index": 0, "steps": all }),
    )
    .await;
    r.post(
        "steps gap",
        &steps_path,
        w1,
        json!({ "claim_token": ct, "start_index": 9, "steps": all }),
    )
    .await;
    r.post(
        "run status",
        &format!("/api/v1/runs/{run_id}/status"),
        w1,
        json!({ "claim_token": ct, "status": "running pytest" }),
    )
    .await;

    // The Workers page contract while running.
    r.get(
        "seed list running",
        "/api/agents/workers?agent_id=default&limit=50&offset=0",
        op,
    )
    .await;
    r.get(
        "seed detail running",
        &format!("/api/agents/workers/detail?agent_id=default&worker_id={run_id}"),
        op,
    )
    .await;
    r.get(
        "seed list bad status",
        "/api/agents/workers?status=exploded",
        op,
    )
    .await;
    r.get(
        "seed list bad agent",
        "/api/agents/workers?agent_id=ghost",
        op,
    )
    .await;

    // The worker registry contract while active.
    r.get("workers", "/api/v1/workers", op).await;

    r.post(
        "progress completed",
        "/api/v1/worker/orchestrator/tasks/VTID-1/progress",
        w1,
        json!({ "event": "worker.execution.completed", "message": "all green",
                "claim_token": ct, "result": "All 12 tests passed." }),
    )
    .await;
    r.post(
        "progress after the end",
        "/api/v1/worker/orchestrator/tasks/VTID-1/progress",
        w1,
        progress("worker.execution.started", None),
    )
    .await;

    // A failed run.
    let claim2 = r
        .post(
            "claim second",
            "/api/v1/worker/orchestrator/tasks/VTID-2/claim",
            w1,
            json!({}),
        )
        .await;
    let ct2 = claim2["claim_token"].as_str().expect("claim").to_owned();
    let run2 = claim2["run_id"].as_str().expect("run").to_owned();
    r.post(
        "progress failed",
        "/api/v1/worker/orchestrator/tasks/VTID-2/progress",
        w1,
        json!({ "event": "worker.execution.failed", "message": "boom", "claim_token": ct2 }),
    )
    .await;

    // A cancel with a worker holding the task, and one without.
    r.post(
        "task create third",
        "/api/v1/tasks",
        op,
        json!({ "vtid": "VTID-3", "title": "Long job" }),
    )
    .await;
    r.post(
        "claim third",
        "/api/v1/worker/orchestrator/tasks/VTID-3/claim",
        w2,
        json!({}),
    )
    .await;
    r.post(
        "cancel held",
        "/api/v1/tasks/VTID-3/cancel",
        op,
        json!({ "reason": "no longer needed" }),
    )
    .await;
    r.post(
        "heartbeat with cancel",
        "/api/v1/worker/orchestrator/heartbeat",
        w2,
        json!({}),
    )
    .await;
    r.post(
        "task create fourth",
        "/api/v1/tasks",
        op,
        json!({ "vtid": "VTID-4", "title": "Never mind", "workflow": "autopilot" }),
    )
    .await;
    r.post(
        "outside event",
        "/api/v1/tasks/VTID-4/events",
        op,
        json!({ "event": "github.pull_request.opened", "message": "PR #1" }),
    )
    .await;
    r.post("cancel free", "/api/v1/tasks/VTID-4/cancel", op, json!({}))
        .await;
    r.post(
        "cancel finished",
        "/api/v1/tasks/VTID-4/cancel",
        op,
        json!({}),
    )
    .await;

    // The Workers page contract after the end.
    r.get("seed list", "/api/agents/workers", op).await;
    r.get(
        "seed detail done",
        &format!("/api/agents/workers/detail?worker_id={run_id}"),
        op,
    )
    .await;
    r.get(
        "seed detail failed",
        &format!("/api/agents/workers/detail?worker_id={run2}"),
        op,
    )
    .await;
    r.get(
        "seed detail missing",
        "/api/agents/workers/detail?worker_id=nope",
        op,
    )
    .await;

    // Runs.
    r.get("runs list", "/api/v1/runs?status=done", op).await;
    r.get("run", &format!("/api/v1/runs/{run_id}"), op).await;
    r.get("run steps", &format!("{steps_path}?after=0"), op)
        .await;

    // Tasks again.
    r.get("task show", "/api/v1/tasks/VTID-1", op).await;
    r.get("task missing", "/api/v1/tasks/VTID-404", op).await;
    r.get("workflows", "/api/v1/workflows", op).await;
    r.get("agents", "/api/v1/agents", op).await;

    // The worker registry contract.
    r.get("workers all", "/api/v1/workers?include_closed=true", op)
        .await;
    r.get(
        "worker events",
        "/api/v1/worker_events?since=0&include_summary=true&include_snapshot=true",
        op,
    )
    .await;
    r.get(
        "worker events bad since",
        "/api/v1/worker_events?since=yesterday",
        op,
    )
    .await;

    // Channels, leaving.
    r.post(
        "channel archive",
        "/api/v1/channels/general/archive",
        op,
        json!({}),
    )
    .await;
    r.post(
        "channel archive again",
        "/api/v1/channels/general/archive",
        op,
        json!({}),
    )
    .await;
    r.post(
        "deregister",
        "/api/v1/worker/orchestrator/deregister",
        w1,
        json!({ "reason": "done for today" }),
    )
    .await;

    // The event log, as a page and as SSE frames.
    let page = r
        .get("event page", "/api/v1/events?after=0&limit=1000", op)
        .await;
    let head = page["events"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|e| e["seq"].as_i64())
        .expect("events");
    let mut sse = SseClient::connect(&s.base, "/api/events?after=0", op, None).await;
    let mut frames = Vec::new();
    while let Some(f) = sse.next(Duration::from_secs(10)).await {
        frames.push(json!({ "event": f.event, "data": normalise(&f.data, None) }));
        if f.id.is_some_and(|id| id >= head) {
            break;
        }
    }
    drop(sse);
    let calls = std::mem::take(&mut r.calls);
    s.stop().await;
    json!({ "calls": calls, "sse": frames })
}

async fn check(kind: Kind) {
    let got = scenario(kind).await;
    let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
    if std::env::var("SHEPHERD_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(std::path::Path::new(GOLDEN).parent().unwrap()).unwrap();
        std::fs::write(GOLDEN, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(GOLDEN)
        .expect("golden file; create it with SHEPHERD_UPDATE_GOLDEN=1");
    if want != text {
        let out = std::env::temp_dir().join(format!("shepherd-golden-{kind:?}.json"));
        std::fs::write(&out, &text).unwrap();
        let first = want
            .lines()
            .zip(text.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .map(|(i, (a, b))| format!("line {}: want {a:?}, got {b:?}", i + 1))
            .unwrap_or_else(|| "lengths differ".into());
        panic!(
            "the wire changed on {kind:?} ({first}); full answer in {}; diff it against {GOLDEN}",
            out.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    check(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    check(Kind::Postgres).await;
}
