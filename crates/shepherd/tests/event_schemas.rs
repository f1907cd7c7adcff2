//! Every event the server writes matches its schema in the served OpenAPI
//! document, on both stores.
//!
//! One scenario makes the server write every type of event there is: a
//! worker's claims, progress, steps, usage, a retry, cancels and outside
//! events over HTTP; conversations answered by the built-in runner running
//! a scripted agent; terminals in sessions (exit, restart, removal,
//! deletion); then a restart, after which tabs are restored (one restore
//! fails) and a silent worker's claim expires and the worker comes back.
//! Each event of the log, read as the JSON page and as SSE frames, is then
//! validated against `/api/openapi.json` with a JSON Schema validator: an
//! event type without a schema, a missing field, a wrong type, or a field
//! the document does not list fails. Every type in `kind::ALL` must have
//! been seen, so the scenario keeps up with new types.

mod common;
#[path = "common/ws.rs"]
mod ws;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use common::{wait_for, Env, Kind, Server, SseClient, OPERATOR};

const WAIT: Duration = Duration::from_secs(30);
const OP: Option<&str> = Some(OPERATOR);

/// A scripted agent speaking Claude Code's stream-json: it reports a
/// session id (so the conversation records the agent's session) and a few
/// steps; a prompt ending in `slow` keeps it busy until it is cancelled.
const AGENT: &str = r#"#!/usr/bin/env bash
prompt="$(cat)"
session="sess-$$"
emit() { printf '{"type":"assistant","session_id":"%s","message":{"id":"m%s","content":[{"type":"text","text":"%s"}]}}\n' "$session" "$1" "$2"; }
printf '{"type":"system","subtype":"init","session_id":"%s"}\n' "$session"
trap 'exit 143' TERM
case "$(printf '%s' "$prompt" | tail -n 1)" in
  *slow*) n=200 ;;
  *) n=2 ;;
esac
for i in $(seq 1 $n); do
  emit "$i" "step $i"
  if [ $n -gt 2 ]; then sleep 0.1 & wait $!; fi
done
printf '{"type":"result","subtype":"success","session_id":"%s","result":"answered"}\n' "$session"
"#;

async fn ok(s: &Server, path: &str, token: Option<&str>, body: Value) -> Value {
    let (st, b) = s.post(path, token, body).await;
    assert!(st == 200 || st == 201, "{path}: {st} {b}");
    b
}

async fn register(s: &Server, id: &str) -> String {
    let b = ok(
        s,
        "/api/v1/worker/orchestrator/register",
        OP,
        json!({ "worker_id": id, "capabilities": ["typescript"], "name": id,
                "project_path": "/src/app" }),
    )
    .await;
    b["worker_token"].as_str().unwrap().to_owned()
}

/// A task only the test's workers can take (the built-in runner's agents
/// lack the capability).
async fn task(s: &Server, vtid: &str, extra: Value) {
    let mut body = json!({ "vtid": vtid, "title": format!("Task {vtid}"),
                           "capabilities": ["typescript"] });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    ok(s, "/api/v1/tasks", OP, body).await;
}

/// Claims `vtid`; returns (run id, claim token).
async fn claim(s: &Server, token: &str, vtid: &str) -> (String, String) {
    let b = ok(
        s,
        &format!("/api/v1/worker/orchestrator/tasks/{vtid}/claim"),
        Some(token),
        json!({}),
    )
    .await;
    (
        b["run_id"].as_str().unwrap().to_owned(),
        b["claim_token"].as_str().unwrap().to_owned(),
    )
}

async fn progress(s: &Server, token: &str, vtid: &str, body: Value) {
    ok(
        s,
        &format!("/api/v1/worker/orchestrator/tasks/{vtid}/progress"),
        Some(token),
        body,
    )
    .await;
}

async fn events(s: &Server, types: &str) -> Vec<Value> {
    let (st, b) = s
        .get(
            &format!("/api/v1/events?after=0&limit=10000&types={types}"),
            OP,
        )
        .await;
    assert_eq!(st, 200, "{b}");
    b["events"].as_array().unwrap().clone()
}

async fn conversation(s: &Server, id: &str) -> Value {
    let (st, c) = s.get(&format!("/api/v1/conversations/{id}"), OP).await;
    assert_eq!(st, 200, "{c}");
    c
}

async fn idle(s: &Server, id: &str) {
    wait_for("the conversation to be idle", WAIT, || async {
        let c = conversation(s, id).await;
        (c["state"] == "idle").then_some(c)
    })
    .await;
}

fn workdir(env: &Env, name: &str) -> String {
    let d = env.dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap().display().to_string()
}

async fn session(s: &Server, dir: &str) -> String {
    let b = ok(s, "/api/v1/sessions", OP, json!({ "location_path": dir })).await;
    b["id"].as_str().unwrap().to_owned()
}

async fn terminal(s: &Server, sid: &str) -> String {
    let b = ok(
        s,
        &format!("/api/v1/sessions/{sid}/workers"),
        OP,
        json!({ "type": "terminal" }),
    )
    .await;
    b["id"].as_str().unwrap().to_owned()
}

async fn delete(s: &Server, path: &str) {
    let (st, b) = s.call(reqwest::Method::DELETE, path, OP, None).await;
    assert_eq!(st, 200, "{path}: {b}");
}

/// The worker, task and run part: the connector, steps, usage, a
/// retry, an outside event the task's state refuses, cancels, channels.
async fn connector(s: &Server) {
    let w1 = register(s, "w-1").await;
    let w2 = register(s, "w-2").await;
    ok(
        s,
        "/api/v1/channels",
        OP,
        json!({ "id": "general", "name": "#general" }),
    )
    .await;

    task(s, "VTID-1", json!({ "channel_id": "general" })).await;
    let (run, ct) = claim(s, &w1, "VTID-1").await;
    progress(
        s,
        &w1,
        "VTID-1",
        json!({ "event": "worker.execution.started", "message": "starting", "claim_token": ct,
                "metadata": { "pid": 42 } }),
    )
    .await;
    ok(
        s,
        &format!("/api/v1/runs/{run}/steps"),
        Some(&w1),
        json!({ "claim_token": ct, "start_index": 0, "steps": [
            {"type":"action","content":[{"type":"text","text":"Running."},{"type":"tool_call","id":"sh:0","name":"shell","args":"{}"}]},
            {"type":"tool_result","call_id":"sh:0","name":"shell","text":"ok"},
            {"type":"action","content":[{"type":"text","text":"Done."}]}
        ] }),
    )
    .await;
    ok(
        s,
        &format!("/api/v1/runs/{run}/status"),
        Some(&w1),
        json!({ "claim_token": ct, "status": "testing" }),
    )
    .await;
    // An agent that says nothing is reported stuck.
    task(
        s,
        "QUIET-1",
        json!({ "agent_id": "quiet", "capabilities": [] }),
    )
    .await;
    wait_for("run.stuck", Duration::from_secs(30), || async {
        (!events(s, "run.stuck").await.is_empty()).then_some(())
    })
    .await;
    let (st, b) = s
        .post(
            "/api/v1/tasks/QUIET-1/cancel",
            OP,
            json!({ "reason": "quiet" }),
        )
        .await;
    assert!(st < 300, "{b}");
    // The worker asks a person for its run; the operator answers.
    let asked = ok(
        s,
        "/api/v1/input-requests",
        Some(&w1),
        json!({ "run_id": run, "prompt": "Go on?", "options": ["yes", "no"] }),
    )
    .await;
    ok(
        s,
        &format!(
            "/api/v1/input-requests/{}/answer",
            asked["id"].as_str().unwrap()
        ),
        OP,
        json!({ "option": "yes" }),
    )
    .await;
    ok(
        s,
        &format!("/api/v1/runs/{run}/usage"),
        Some(&w1),
        json!({ "claim_token": ct, "usage": { "input_tokens": 10, "output_tokens": 3,
                                              "cost_usd": 0.01 } }),
    )
    .await;
    progress(
        s,
        &w1,
        "VTID-1",
        json!({ "event": "worker.execution.completed", "claim_token": ct, "result": "green" }),
    )
    .await;

    // A failed attempt with another to come.
    task(s, "VTID-2", json!({ "max_attempts": 2, "dispatch": false })).await;
    ok(s, "/api/v1/tasks/VTID-2/dispatch", OP, json!({})).await;
    let (_, ct) = claim(s, &w1, "VTID-2").await;
    progress(
        s,
        &w1,
        "VTID-2",
        json!({ "event": "worker.execution.failed", "message": "boom", "claim_token": ct }),
    )
    .await;

    // Autopilot: an outside event its state does not take, then a cancel
    // with nobody holding the task.
    task(s, "VTID-3", json!({ "workflow": "autopilot" })).await;
    let (st, b) = s
        .post(
            "/api/v1/tasks/VTID-3/events",
            OP,
            json!({ "event": "github.pull_request.opened", "message": "PR #1" }),
        )
        .await;
    assert_eq!(st, 409, "{b}");
    ok(s, "/api/v1/tasks/VTID-3/cancel", OP, json!({})).await;

    // A cancel while a worker holds the task, which then stops.
    task(s, "VTID-4", json!({})).await;
    let (_, ct) = claim(s, &w2, "VTID-4").await;
    ok(
        s,
        "/api/v1/tasks/VTID-4/cancel",
        OP,
        json!({ "reason": "not needed" }),
    )
    .await;
    progress(
        s,
        &w2,
        "VTID-4",
        json!({ "event": "worker.execution.cancelled", "claim_token": ct }),
    )
    .await;

    // A worker leaving with a claim, and an archived channel.
    task(s, "VTID-5", json!({})).await;
    claim(s, &w2, "VTID-5").await;
    ok(
        s,
        "/api/v1/worker/orchestrator/deregister",
        Some(&w2),
        json!({ "reason": "done for today" }),
    )
    .await;
    ok(s, "/api/v1/channels/general/archive", OP, json!({})).await;
}

/// The conversations contract: a resource answered by the configured agent; a reply that
/// records the agent's session; a second conversation; a cancel that drops
/// a queued message.
async fn conversations(s: &Server) {
    for name in ["Leads table", "Leads"] {
        ok(
            s,
            "/api/v1/resources",
            OP,
            json!({ "id": "table-1", "name": name, "agent_id": "chat" }),
        )
        .await;
    }
    let first = ok(s, "/api/v1/resources/table-1/conversations", OP, json!({})).await;
    let first = first["id"].as_str().unwrap().to_owned();
    let send = |id: String, body: Value| async move {
        ok(s, &format!("/api/v1/conversations/{id}/messages"), OP, body).await
    };
    send(first.clone(), json!({ "text": "quick question" })).await;
    idle(s, &first).await;
    assert!(conversation(s, &first).await["agent_session_id"].is_string());

    let second = ok(s, "/api/v1/resources/table-1/conversations", OP, json!({})).await;
    let second = second["id"].as_str().unwrap().to_owned();
    ok(
        s,
        &format!("/api/v1/conversations/{first}/activate"),
        OP,
        json!({}),
    )
    .await;
    send(second.clone(), json!({ "text": "slow" })).await;
    send(
        second.clone(),
        json!({ "text": "then this", "multitask": "enqueue" }),
    )
    .await;
    ok(
        s,
        &format!("/api/v1/conversations/{second}/cancel"),
        OP,
        json!({ "reason": "changed my mind" }),
    )
    .await;
    idle(s, &second).await;
}

/// The sessions contract: a terminal that exits and is restarted, one removed, an empty
/// session deleted. Returns the sessions to restore after a restart: one
/// that can be, one whose directory will be gone.
async fn sessions(s: &Server, env: &Env) -> [(String, String); 2] {
    let sid = session(s, &workdir(env, "work")).await;
    let wid = terminal(s, &sid).await;
    let mut t = ws::connect(&s.base, &sid, &wid, OP).await;
    t.history().await;
    t.type_line("exit 3").await;
    t.wait_exit(WAIT).await;
    wait_for("the exit to be recorded", WAIT, || async {
        let e = events(s, "session.worker.exited").await;
        (!e.is_empty()).then_some(Value::Null)
    })
    .await;
    ok(
        s,
        &format!("/api/v1/sessions/{sid}/workers/{wid}/restart"),
        OP,
        json!({ "mode": "new" }),
    )
    .await;
    let extra = terminal(s, &sid).await;
    delete(s, &format!("/api/v1/sessions/{sid}/workers/{extra}")).await;
    let empty = session(s, &workdir(env, "empty")).await;
    delete(s, &format!("/api/v1/sessions/{empty}")).await;

    let doomed = session(s, &workdir(env, "doomed")).await;
    let doomed_tab = terminal(s, &doomed).await;
    [(sid, wid), (doomed, doomed_tab)]
}

/// Users and their tokens: a user made and changed, a token made and revoked.
async fn people(s: &Server) {
    ok(
        s,
        "/api/v1/users",
        OP,
        json!({ "name": "ann", "role": "operator" }),
    )
    .await;
    let (st, b) = s
        .call(
            reqwest::Method::PATCH,
            "/api/v1/users/ann",
            OP,
            Some(json!({ "role": "viewer" })),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let t = ok(
        s,
        "/api/v1/tokens",
        OP,
        json!({ "name": "t", "user": "ann", "expires_in": "1d" }),
    )
    .await;
    let id = t["id"].as_str().unwrap();
    let (st, _) = s
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/tokens/{id}"),
            OP,
            None,
        )
        .await;
    assert_eq!(st, 204);
}

/// A runner's host registered, and registered again after a restart.
async fn hosts(s: &Server) {
    let mut token = Value::Null;
    for _ in 0..2 {
        let b = ok(
            s,
            "/api/v1/hosts",
            OP,
            json!({ "id": "host-far", "sessions_root": "/srv/far", "agents": ["claude"],
                    "host_token": token }),
        )
        .await;
        token = b["host_token"].clone();
    }
}

/// After a restart: tabs restored on attach (one cannot be), and a worker
/// that goes silent loses its claim, then is heard from again.
async fn after_restart(s: &Server, env: &Env, tabs: &[(String, String); 2]) {
    let (sid, wid) = &tabs[0];
    let mut t = ws::connect(&s.base, sid, wid, OP).await;
    t.history().await;
    std::fs::remove_dir_all(env.dir.join("doomed")).unwrap();
    let (doomed, doomed_tab) = &tabs[1];
    let _ = ws::try_connect(
        &s.base,
        &ws::path(doomed, doomed_tab),
        ws::Opts {
            token: OP,
            ..Default::default()
        },
    )
    .await;
    wait_for("the failed restore", WAIT, || async {
        let e = events(s, "session.worker.exited").await;
        e.iter()
            .any(|e| e["data"]["restore_failed"] == true)
            .then_some(Value::Null)
    })
    .await;

    let w3 = register(s, "w-3").await;
    task(s, "VTID-6", json!({})).await;
    claim(s, &w3, "VTID-6").await;
    wait_for("the silent worker's claim to expire", WAIT, || async {
        let expired = events(s, "worker.claim.expired").await;
        let inactive = events(s, "worker.inactive").await;
        (!expired.is_empty() && !inactive.is_empty()).then_some(Value::Null)
    })
    .await;
    ok(
        s,
        "/api/v1/worker/orchestrator/heartbeat",
        Some(&w3),
        json!({}),
    )
    .await;
}

/// The served document, with `components` at the root so that its `$ref`s
/// resolve, and every event payload (and what it contains) closed to
/// fields it does not list: the server must send no field the document
/// leaves out.
fn event_schemas(doc: &Value) -> Value {
    let mut components = doc["components"].clone();
    let schemas = components["schemas"].as_object_mut().unwrap();
    let families: Vec<String> = schemas["WireEvent"]["oneOf"]
        .as_array()
        .expect("WireEvent is a one-of of the event families")
        .iter()
        .map(|r| name_of(&r["$ref"]))
        .collect();
    let mut todo: Vec<String> = families
        .iter()
        .map(|f| name_of(&schemas[f]["allOf"][1]["properties"]["data"]["$ref"]))
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let schema = schemas
            .get_mut(&name)
            .unwrap_or_else(|| panic!("{name} is not in the document"));
        refs_in(schema, &mut todo);
        if schema.get("properties").is_some() && schema.get("additionalProperties").is_none() {
            schema["additionalProperties"] = json!(false);
        }
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": "#/components/schemas/StreamData",
        "components": components,
    })
}

fn name_of(r: &Value) -> String {
    let r = r.as_str().unwrap_or_else(|| panic!("not a $ref: {r}"));
    r.rsplit('/').next().unwrap().to_owned()
}

fn refs_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    out.push(name_of(x));
                } else {
                    refs_in(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs_in(x, out)),
        _ => {}
    }
}

/// The SSE `event:` names a log type may travel under.
fn sse_names(kind: &str) -> Vec<&str> {
    match kind {
        "run.started" => vec!["worker_started"],
        "run.status" => vec!["worker_status"],
        "run.completed" => vec!["worker_completed"],
        "run.step" => vec!["tool_started", "tool_completed", "run.step"],
        other => vec![other],
    }
}

async fn check(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    let script = env.script("agent.sh", AGENT);
    env.with_config_file(&format!(
        r#"
[agents.chat]
command = ["bash", "{script}"]
transcript = "claude-stream-json"
max_concurrent = 2
[agents.quiet]
command = ["sleep", "30"]
stuck_after = 1
"#
    ));
    let s = Server::start(&env).await;
    connector(&s).await;
    conversations(&s).await;
    let tabs = sessions(&s, &env).await;
    people(&s).await;
    hosts(&s).await;
    s.stop().await;

    // Again on the same database, with heartbeats that lapse within a second.
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "1");
    env.set("SHEPHERD_SWEEP_INTERVAL_SECS", "1");
    let s = Server::start(&env).await;
    after_restart(&s, &env, &tabs).await;

    let (st, doc) = s.get("/api/openapi.json", OP).await;
    assert_eq!(st, 200);
    let schema = event_schemas(&doc);
    let validator = jsonschema::validator_for(&schema).expect("the event schemas compile");
    // Against one family's schema alone, for errors that name the field
    // (a one-of only says that no branch matched).
    let family = |kind: &str| {
        let target =
            doc["components"]["schemas"]["WireEvent"]["discriminator"]["mapping"][kind].as_str()?;
        let mut one = schema.clone();
        one["$ref"] = json!(target);
        Some(jsonschema::validator_for(&one).expect("a family's schema compiles"))
    };
    let invalid = |e: &Value| -> Option<String> {
        validator.iter_errors(e).next()?;
        let kind = e["type"].as_str().unwrap_or_default();
        let errors: Vec<String> = match family(kind) {
            None => vec![format!("no schema for type {kind:?}")],
            Some(v) => v
                .iter_errors(e)
                .map(|err| format!("{} at {}", err, err.instance_path()))
                .collect(),
        };
        Some(format!("{e}\n  {}", errors.join("\n  ")))
    };

    // The JSON page.
    let page = events(&s, "").await;
    // The check can fail: an unknown type, a missing field, a field of the
    // wrong type and a field the document does not list are each refused.
    let step = page.iter().find(|e| e["type"] == "run.step").unwrap();
    assert!(invalid(step).is_none(), "{step}");
    let mut bad = step.clone();
    bad["type"] = json!("run.teleported");
    assert!(invalid(&bad).is_some(), "an unknown type passed");
    let mut bad = step.clone();
    bad["data"].as_object_mut().unwrap().remove("index");
    assert!(invalid(&bad).is_some(), "a missing field passed");
    let mut bad = step.clone();
    bad["data"]["index"] = json!("first");
    assert!(invalid(&bad).is_some(), "a wrong type passed");
    let mut bad = step.clone();
    bad["data"]["colour"] = json!("red");
    assert!(invalid(&bad).is_some(), "an unlisted field passed");
    let mut failures: Vec<String> = page.iter().filter_map(&invalid).collect();
    let seen: BTreeSet<&str> = page.iter().map(|e| e["type"].as_str().unwrap()).collect();

    // The same events as SSE frames.
    let head = page.last().unwrap()["id"].as_i64().unwrap();
    let mut sse = SseClient::connect(&s.base, "/api/events?after=0", OP, None).await;
    let mut frames = 0;
    while let Some(f) = sse.next(WAIT).await {
        frames += 1;
        failures.extend(invalid(&f.data));
        let kind = f.data["type"].as_str().unwrap_or_default();
        assert!(
            sse_names(kind).contains(&f.event.as_str()),
            "{kind} sent as `event: {}`",
            f.event
        );
        if f.id.is_some_and(|id| id >= head) {
            break;
        }
    }
    drop(sse);
    s.stop().await;

    assert!(
        failures.is_empty(),
        "{} events do not match the document:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(frames, page.len(), "one frame per event");
    eprintln!(
        "{kind:?}: {} events of {} types valid",
        page.len(),
        seen.len()
    );
    // A sign-in needs an OpenID provider: the browser suite
    // (web/e2e/oidc.test.mjs, against the real `oidc-provider`) writes
    // these two and reads them back through the event page.
    let needs_a_provider = ["user.login", "user.logout"];
    let missing: Vec<&&str> = shepherd_core::event::kind::ALL
        .iter()
        .filter(|k| !seen.contains(**k) && !needs_a_provider.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "the scenario wrote no {missing:?}: extend it so that every type is checked"
    );
    for progress in [
        "worker.execution.started",
        "worker.execution.completed",
        "worker.execution.failed",
        "worker.execution.cancelled",
    ] {
        assert!(seen.contains(progress), "no {progress}");
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
