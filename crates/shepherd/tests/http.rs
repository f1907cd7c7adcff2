//! End-to-end over real HTTP, on both databases: the connector contract flow with
//! tokens, the Workers page contract's run routes, error codes, the OpenAPI document, and
//! server-sent events that resume without gaps or duplicates.

mod common;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use common::{task, Env, Kind, Server, SseClient, OPERATOR};

async fn register(s: &Server, id: &str, caps: &[&str]) -> String {
    register_as(s, None, id, caps).await
}

async fn register_as(s: &Server, operator: Option<&str>, id: &str, caps: &[&str]) -> String {
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            operator,
            json!({ "worker_id": id, "capabilities": caps, "max_concurrent": 1 }),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["ok"], true);
    b["worker_token"].as_str().unwrap().to_owned()
}

async fn progress(
    s: &Server,
    tok: &str,
    vtid: &str,
    claim_token: &str,
    event: &str,
) -> (u16, Value) {
    s.post(
        &format!("/api/v1/worker/orchestrator/tasks/{vtid}/progress"),
        Some(tok),
        json!({ "event": event, "message": format!("{event}!"), "claim_token": claim_token }),
    )
    .await
}

e2e!(
    connector_flow_with_tokens_runs_and_transcripts,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
        let s = Server::start(&env).await;
        // Without a token: 401; health stays open.
        assert_eq!(s.get("/api/v1/tasks", None).await.0, 401);
        assert_eq!(s.get("/api/v1/tasks", Some("wrong")).await.0, 401);
        assert_eq!(s.get("/healthz", None).await.0, 200);
        assert_eq!(s.get("/readyz", None).await.0, 200);

        let builder = register_as(
            &s,
            Some(OPERATOR),
            "claude-code-session-abc123",
            &["typescript"],
        )
        .await;
        let validator = register_as(
            &s,
            Some(OPERATOR),
            "validator-1",
            &["typescript", "validator"],
        )
        .await;
        // A worker token cannot register workers or create tasks.
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/register",
                Some(&builder),
                json!({ "worker_id": "x" }),
            )
            .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (403, Some("operator_only"))
        );
        let mut t = task("VTID-01180", "autopilot");
        t["capabilities"] = json!(["typescript"]);
        t["channel_id"] = json!("general");
        let (st, created) = s.post("/api/v1/tasks", Some(OPERATOR), t).await;
        assert_eq!(st, 201, "{created}");
        assert_eq!(created["state"], "in_progress");

        let (st, pending) = s
            .get("/api/v1/worker/orchestrator/tasks/pending", Some(&builder))
            .await;
        assert_eq!(st, 200);
        assert_eq!(pending["tasks"][0]["vtid"], "VTID-01180");
        assert_eq!(pending["tasks"][0]["state"], "in_progress");
        for key in ["title", "dispatched_at", "spec_snapshot_id", "priority"] {
            assert!(!pending["tasks"][0][key].is_null(), "pending lacks {key}");
        }
        // A worker may act only as itself.
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/VTID-01180/claim",
                Some(&builder),
                json!({ "worker_id": "validator-1" }),
            )
            .await;
        assert_eq!(
            (st, b["error"]["code"].as_str(), b["claimed"].as_bool()),
            (403, Some("not_your_worker"), Some(false))
        );

        let (st, claim) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/VTID-01180/claim",
                Some(&builder),
                json!({ "worker_id": "claude-code-session-abc123" }),
            )
            .await;
        assert_eq!(st, 200, "{claim}");
        assert_eq!(
            (claim["ok"].as_bool(), claim["claimed"].as_bool()),
            (Some(true), Some(true))
        );
        assert!(claim["spec"].as_str().unwrap().starts_with("# VTID-01180"));
        let ct = claim["claim_token"].as_str().unwrap().to_owned();
        let run_id = claim["run_id"].as_str().unwrap().to_owned();
        let (st, again) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/VTID-01180/claim",
                Some(&validator),
                json!({}),
            )
            .await;
        assert_eq!(
            (st, again["error"]["code"].as_str()),
            (409, Some("already_claimed")),
            "{again}"
        );

        // Steps while running: a retry is harmless, a gap is refused.
        let steps = json!([
            {"type":"action","content":[{"type":"text","text":"I'll run the test suite."},{"type":"tool_call","id":"shell:0","name":"shell","args":"{\"command\":\"cd ~/app && pytest\"}"}]},
            {"type":"tool_result","call_id":"shell:0","name":"shell","text":"12 passed, 0 failed"},
            {"type":"action","content":[{"type":"text","text":"All 12 tests passed."}]}
        ]);
        let path = format!("/api/v1/runs/{run_id}/steps");
        let (st, ack) = s.post(&path, Some(&builder), json!({ "claim_token": ct, "start_index": 0, "steps": steps.as_array().unwrap()[..2] })).await;
        assert_eq!((st, ack["accepted"].as_i64()), (200, Some(2)), "{ack}");
        let (st, ack) = s
            .post(
                &path,
                Some(&builder),
                json!({ "claim_token": ct, "start_index": 0, "steps": steps }),
            )
            .await;
        assert_eq!(
            (st, ack["accepted"].as_i64(), ack["duplicates"].as_i64()),
            (200, Some(1), Some(2)),
            "{ack}"
        );
        let (st, gap) = s
            .post(
                &path,
                Some(&builder),
                json!({ "claim_token": ct, "start_index": 9, "steps": steps }),
            )
            .await;
        assert_eq!((st, gap["error"]["code"].as_str()), (409, Some("step_gap")));
        let (st, _) = s
            .post(
                &format!("/api/v1/runs/{run_id}/status"),
                Some(&builder),
                json!({ "claim_token": ct, "status": "running pytest" }),
            )
            .await;
        assert_eq!(st, 200);

        // The Workers page contract list while running: live overlay from the database.
        let (st, list) = s
            .get(
                "/api/agents/workers?agent_id=default&limit=50&offset=0",
                Some(OPERATOR),
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(list["total"], 1);
        let item = &list["workers"][0];
        for key in [
            "id",
            "task",
            "status",
            "worker_type",
            "channel_id",
            "channel_name",
            "started_at",
            "completed_at",
            "has_transcript",
            "live_status",
            "tool_calls",
        ] {
            assert!(item.get(key).is_some(), "list item lacks {key}");
        }
        assert_eq!(item["live_status"], "running pytest");
        assert_eq!(item["tool_calls"], 1);
        assert_eq!(item["channel_name"], "general");
        let (_, running) = s
            .get(
                &format!("/api/agents/workers/detail?agent_id=default&worker_id={run_id}"),
                Some(OPERATOR),
            )
            .await;
        assert!(running["transcript"].is_null(), "null while running");
        let (_, live_steps) = s
            .get(
                &format!("/api/v1/runs/{run_id}/steps?after=0"),
                Some(OPERATOR),
            )
            .await;
        assert_eq!(live_steps["steps"].as_array().unwrap().len(), 2);

        assert_eq!(
            progress(&s, &builder, "VTID-01180", &ct, "worker.execution.started")
                .await
                .0,
            200
        );
        let (st, b) = progress(
            &s,
            &builder,
            "VTID-01180",
            &ct,
            "worker.execution.completed",
        )
        .await;
        assert_eq!(
            (st, b["error"]["code"].as_str(), b["ok"].as_bool()),
            (409, Some("invalid_transition"), Some(false))
        );
        let (st, b) = progress(&s, &builder, "VTID-01180", &ct, "worker.teleported").await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (422, Some("unknown_event"))
        );
        assert_eq!(
            progress(&s, &builder, "VTID-01180", &ct, "worker.building")
                .await
                .1["state"],
            "building"
        );
        // An outside event drives the workflow like progress does.
        let (st, b) = s
            .post(
                "/api/v1/tasks/VTID-01180/events",
                Some(OPERATOR),
                json!({ "event": "github.pull_request.opened" }),
            )
            .await;
        assert_eq!((st, b["state"].as_str()), (200, Some("pr_created")), "{b}");
        assert_eq!(
            progress(
                &s,
                &builder,
                "VTID-01180",
                &ct,
                "worker.execution.completed"
            )
            .await
            .1["state"],
            "reviewing"
        );

        // The builder's run is done, its transcript compacted and identical.
        let (st, detail) = s
            .get(
                &format!("/api/agents/workers/detail?agent_id=default&worker_id={run_id}"),
                Some(OPERATOR),
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(detail["status"], "done");
        assert_eq!(
            detail["transcript"], steps,
            "the contract's transcript round-trips unchanged"
        );
        let (_, list) = s
            .get("/api/agents/workers?status=done", Some(OPERATOR))
            .await;
        assert_eq!(list["workers"][0]["live_status"], Value::Null);
        assert_eq!(list["workers"][0]["tool_calls"], 0);
        assert_eq!(list["workers"][0]["has_transcript"], true);

        // Governance gate.
        let (st, v) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/VTID-01180/claim",
                Some(&validator),
                json!({}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        let vt = v["claim_token"].as_str().unwrap();
        let (st, hb) = s
            .post(
                "/api/v1/worker/orchestrator/heartbeat",
                Some(&validator),
                json!({ "worker_id": "validator-1", "active_vtid": "VTID-01180" }),
            )
            .await;
        assert_eq!(
            (st, hb["claims"][0]["vtid"].as_str()),
            (200, Some("VTID-01180"))
        );
        assert_eq!(hb["claims"][0]["cancel_requested"], false);
        let (_, done) = progress(&s, &validator, "VTID-01180", vt, "validator.passed").await;
        assert_eq!(done["state"], "done");
        let (_, t) = s.get("/api/v1/tasks/VTID-01180", Some(OPERATOR)).await;
        assert_eq!(t["state"], "done");
        assert_eq!(t["claims"].as_array().unwrap().len(), 2);
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/deregister",
                Some(&builder),
                json!({}),
            )
            .await;
        assert_eq!((st, b["status"].as_str()), (200, Some("terminated")));
        assert_eq!(
            s.get("/api/v1/worker/orchestrator/tasks/pending", Some(&builder))
                .await
                .0,
            401,
            "a dead token"
        );
        s.stop().await;
    }
);

e2e!(bad_input_gets_clear_codes, |kind: Kind| async move {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_BODY_LIMIT_BYTES", "4096");
    let s = Server::start(&env).await;
    let raw = |body: &'static str| {
        let http = s.http.clone();
        let url = s.url("/api/v1/tasks");
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let st = r.status().as_u16();
            (st, r.json::<Value>().await.unwrap_or_default())
        }
    };
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or("").to_owned();
    let (st, b) = raw("{\"title\":").await;
    assert_eq!((st, code(&b).as_str()), (400, "malformed_json"));
    let (st, b) = raw("{\"title\":\"x\",\"colour\":\"red\"}").await;
    assert_eq!((st, code(&b).as_str()), (422, "invalid_body"));
    let (st, b) = raw("{\"title\":\"\"}").await;
    assert_eq!((st, code(&b).as_str()), (422, "invalid_title"));
    let (st, b) = raw("{\"title\":\"x\",\"capabilities\":[\"\"]}").await;
    assert_eq!((st, code(&b).as_str()), (422, "invalid_capabilities"));
    let (st, b) = raw("{\"title\":\"x\",\"priority\":2000000}").await;
    assert_eq!((st, code(&b).as_str()), (422, "invalid_priority"));
    let big = format!("{{\"title\":\"{}\"}}", "x".repeat(10_000));
    let r = s
        .http
        .post(s.url("/api/v1/tasks"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    let b: Value = r.json().await.unwrap();
    assert_eq!((st, code(&b).as_str()), (413, "payload_too_large"));
    for (path, status, c) in [
        ("/api/v1/nope", 404, "route_not_found"),
        ("/api/v1/tasks/VTID-404", 404, "task_not_found"),
        ("/api/v1/tasks?limit=0", 400, "invalid_limit"),
        ("/api/v1/tasks?limit=-5", 400, "invalid_limit"),
        ("/api/v1/tasks?offset=-1", 400, "invalid_offset"),
        ("/api/v1/tasks?limit=abc", 400, "invalid_query"),
        ("/api/v1/tasks?state=sleeping", 400, "invalid_state"),
        ("/api/agents/workers?status=exploded", 400, "invalid_status"),
        ("/api/agents/workers?limit=100000", 400, "invalid_limit"),
        ("/api/agents/workers?agent_id=ghost", 404, "agent_not_found"),
        (
            "/api/agents/workers/detail?worker_id=nope",
            404,
            "run_not_found",
        ),
        ("/api/v1/runs/nope/steps", 404, "run_not_found"),
        (
            "/api/v1/worker_events?since=yesterday",
            400,
            "invalid_since",
        ),
        ("/api/events?after=-3", 400, "invalid_cursor"),
        (
            "/api/v1/worker/orchestrator/tasks/pending",
            400,
            "missing_worker_id",
        ),
        (
            "/api/v1/worker/orchestrator/tasks/pending?worker_id=ghost",
            404,
            "worker_not_found",
        ),
    ] {
        let (st, b) = s.get(path, None).await;
        assert_eq!((st, code(&b)), (status, c.to_string()), "{path}: {b}");
    }
    let (st, b) = s.post("/api/v1/tasks", None, task("DUP-1", "simple")).await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s.post("/api/v1/tasks", None, task("DUP-1", "simple")).await;
    assert_eq!((st, code(&b).as_str()), (409, "task_exists"));
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "title": "x", "workflow": "waterfall" }),
        )
        .await;
    assert_eq!((st, code(&b).as_str()), (422, "unknown_workflow"));
    let (st, b) = s
        .post("/api/v1/tasks/DUP-1/dispatch", None, json!({}))
        .await;
    assert_eq!((st, code(&b).as_str()), (409, "already_dispatched"));
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/tasks/DUP-1/claim",
            None,
            json!({ "worker_id": "ghost" }),
        )
        .await;
    assert_eq!(
        (
            st,
            code(&b).as_str(),
            b["claimed"].as_bool(),
            b["ok"].as_bool()
        ),
        (404, "worker_not_found", Some(false), Some(false))
    );
    assert!(
        b["reason"].is_string(),
        "the connector contract's fields kept: {b}"
    );
    s.stop().await;
});

e2e!(
    corrupt_transcript_is_a_clear_error,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        register(&s, "w", &[]).await;
        s.post("/api/v1/tasks", None, task("T-1", "simple")).await;
        let (_, c) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/T-1/claim",
                None,
                json!({ "worker_id": "w" }),
            )
            .await;
        let run_id = c["run_id"].as_str().unwrap().to_owned();
        let ct = c["claim_token"].as_str().unwrap().to_owned();
        s.post(&format!("/api/v1/runs/{run_id}/steps"), None, json!({ "claim_token": ct, "start_index": 0, "steps": [{"type":"action","content":[]}] })).await;
        s.post(
            "/api/v1/worker/orchestrator/tasks/T-1/progress",
            None,
            json!({ "worker_id": "w", "event": "worker.execution.completed", "claim_token": ct }),
        )
        .await;
        // Damage the blob behind the server's back.
        let store = shepherd_store::Store::open(&env.store_config())
            .await
            .unwrap();
        store
            .overwrite_transcript(&run_id, b"not gzip at all".to_vec())
            .await
            .unwrap();
        store.close();
        let (st, b) = s
            .get(
                &format!("/api/agents/workers/detail?worker_id={run_id}"),
                None,
            )
            .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (500, Some("transcript_corrupt")),
            "{b}"
        );
        let (st, list) = s.get("/api/agents/workers", None).await;
        assert_eq!(
            (st, list["total"].as_i64()),
            (200, Some(1)),
            "other routes keep working"
        );
        s.stop().await;
    }
);

e2e!(claim_next_and_batched_progress, |kind: Kind| async move {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": "batcher", "max_concurrent": 3 }),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let tok = b["worker_token"].as_str().unwrap().to_owned();
    let claim_next =
        |body: Value| s.post("/api/v1/worker/orchestrator/tasks/claim", Some(&tok), body);
    // Nothing queued: an empty list, not an error.
    let (st, b) = claim_next(json!({})).await;
    assert_eq!(
        (st, b["ok"].clone(), b["claims"].clone()),
        (200, json!(true), json!([])),
        "{b}"
    );
    for (vtid, priority) in [("N-1", 1), ("N-2", 7), ("N-3", 3)] {
        let mut t = task(vtid, "simple");
        t["priority"] = json!(priority);
        let (st, b) = s.post("/api/v1/tasks", Some(OPERATOR), t).await;
        assert_eq!(st, 201, "{b}");
    }
    // Bad max values: 422 with a code, nothing claimed.
    for (max, code) in [
        (0, "invalid_max"),
        (-1, "invalid_max"),
        (4, "max_above_capacity"),
    ] {
        let (st, b) = claim_next(json!({ "max": max })).await;
        assert_eq!(st, 422, "{b}");
        assert_eq!(b["error"]["code"], code, "{b}");
        assert_eq!(b["claimed"], false, "{b}");
    }
    let (st, b) = claim_next(json!({ "max": "two" })).await;
    assert!(st == 400 || st == 422, "{st} {b}");
    let (st, b) = claim_next(json!({ "max": 2 })).await;
    assert_eq!(st, 200, "{b}");
    let claims = b["claims"].as_array().unwrap().clone();
    let vtids: Vec<&str> = claims.iter().map(|c| c["vtid"].as_str().unwrap()).collect();
    assert_eq!(vtids, vec!["N-2", "N-3"], "priority first");
    for c in &claims {
        for field in [
            "spec",
            "claim_expires_at",
            "run_id",
            "claim_token",
            "purpose",
            "state",
        ] {
            assert!(c.get(field).is_some(), "{field} missing in {c}");
        }
        assert_eq!(c["claimed"], true);
    }
    // Another worker's token may not claim for this worker.
    let other = register_as(&s, Some(OPERATOR), "other", &[]).await;
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/tasks/claim",
            Some(&other),
            json!({ "worker_id": "batcher" }),
        )
        .await;
    assert_eq!(st, 403, "{b}");

    let t2 = claims[0]["claim_token"].as_str().unwrap();
    let t3 = claims[1]["claim_token"].as_str().unwrap();
    let batch = |body: Value| s.post("/api/v1/worker/orchestrator/progress", Some(&tok), body);
    let (st, b) = batch(json!({ "reports": [] })).await;
    assert_eq!(
        (st, b["error"]["code"].clone()),
        (422, json!("invalid_reports")),
        "{b}"
    );
    let (st, b) = batch(json!({ "reports": [{ "vtid": "N-2" }] })).await;
    assert!(st == 400 || st == 422, "missing event: {st} {b}");
    let (st, b) = batch(json!({ "reports": [
            { "vtid": "N-2", "claim_token": t2, "event": "worker.execution.started" },
            { "vtid": "N-3", "claim_token": "sct_nope", "event": "worker.execution.completed" },
            { "vtid": "N-2", "claim_token": t2, "event": "" },
            { "vtid": "N-2", "claim_token": t2, "event": "worker.execution.completed", "result": "fine" },
            { "vtid": "N-3", "claim_token": t3, "event": "worker.execution.completed" },
        ] }))
        .await;
    assert_eq!(st, 200, "{b}");
    let results = b["results"].as_array().unwrap();
    let summary: Vec<(String, bool, Value, Value)> = results
        .iter()
        .map(|r| {
            (
                r["vtid"].as_str().unwrap().to_owned(),
                r["ok"].as_bool().unwrap(),
                r["state"].clone(),
                r["error"]["code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("N-2".into(), true, json!("running"), Value::Null),
            ("N-3".into(), false, Value::Null, json!("claim_stale")),
            ("N-2".into(), false, Value::Null, json!("invalid_event")),
            ("N-2".into(), true, json!("done"), Value::Null),
            ("N-3".into(), true, json!("done"), Value::Null),
        ],
        "{b}"
    );
    assert!(results[0]["event_id"].as_i64().unwrap() > 0);
    let (_, t) = s.get("/api/v1/tasks/N-1", Some(OPERATOR)).await;
    assert_eq!(t["state"], "pending", "{t}");
    s.stop().await;
});

e2e!(
    a_waiting_claim_takes_work_the_moment_it_comes_with_its_run_token,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
        let s = Server::start(&env).await;
        let tok = register_as(&s, Some(OPERATOR), "waiter", &[]).await;
        let claim =
            |body: Value| s.post("/api/v1/worker/orchestrator/tasks/claim", Some(&tok), body);
        for bad in [json!(-1), json!(30_001)] {
            let (st, b) = claim(json!({ "wait_ms": bad })).await;
            assert_eq!(
                (st, b["error"]["code"].as_str(), b["claimed"].clone()),
                (422, Some("invalid_wait_ms"), json!(false)),
                "{b}"
            );
        }
        // Nothing comes: the answer is empty once the wait is over, not before.
        let t0 = std::time::Instant::now();
        let (st, b) = claim(json!({ "wait_ms": 300 })).await;
        assert_eq!((st, b["claims"].clone()), (200, json!([])), "{b}");
        assert!(
            t0.elapsed() >= std::time::Duration::from_millis(290),
            "{:?}",
            t0.elapsed()
        );
        // Work created while a claim waits is claimed by it, long before its
        // wait is over.
        let t0 = std::time::Instant::now();
        let waiting = claim(json!({ "wait_ms": 20_000, "with_run_token": true }));
        let create = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let (st, b) = s
                .post("/api/v1/tasks", Some(OPERATOR), task("W-1", "simple"))
                .await;
            assert_eq!(st, 201, "{b}");
        };
        let ((st, b), ()) = tokio::join!(waiting, create);
        assert_eq!(st, 200, "{b}");
        assert_eq!(b["claims"][0]["vtid"], "W-1", "{b}");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the claim waited out its wait: {:?}",
            t0.elapsed()
        );
        // The run token asked for with the claim is the token route's.
        let run_id = b["claims"][0]["run_id"].as_str().unwrap().to_owned();
        let claim_token = b["claims"][0]["claim_token"].as_str().unwrap().to_owned();
        let (st, t) = s
            .post(
                &format!("/api/v1/runs/{run_id}/token"),
                Some(&tok),
                json!({ "claim_token": claim_token }),
            )
            .await;
        assert_eq!(st, 200, "{t}");
        assert_eq!(b["claims"][0]["run_token"], t["token"], "{b} {t}");
        // A task that comes back to the queue wakes a waiting claim too; a
        // claim that did not ask for run tokens gets none.
        let other = register_as(&s, Some(OPERATOR), "other", &[]).await;
        let waiting = s.post(
            "/api/v1/worker/orchestrator/tasks/claim",
            Some(&other),
            json!({ "wait_ms": 20_000 }),
        );
        let requeue = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let (st, b) = s
                .post(
                    &format!("/api/v1/runs/{run_id}/requeue"),
                    Some(&tok),
                    json!({ "claim_token": claim_token }),
                )
                .await;
            assert_eq!(st, 200, "{b}");
        };
        let ((st, b), ()) = tokio::join!(waiting, requeue);
        assert_eq!(
            (st, b["claims"][0]["vtid"].as_str()),
            (200, Some("W-1")),
            "{b}"
        );
        assert!(b["claims"][0].get("run_token").is_none(), "{b}");
        s.stop().await;
    }
);

e2e!(
    step_batches_append_each_runs_steps_on_their_own,
    |kind: Kind| async move {
        let mut env = Env::new(kind);
        env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
        let s = Server::start(&env).await;
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/register",
                Some(OPERATOR),
                json!({ "worker_id": "stepper", "max_concurrent": 2 }),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let tok = b["worker_token"].as_str().unwrap().to_owned();
        let other = register_as(&s, Some(OPERATOR), "bystander", &[]).await;
        for vtid in ["S-1", "S-2"] {
            let (st, b) = s
                .post("/api/v1/tasks", Some(OPERATOR), task(vtid, "simple"))
                .await;
            assert_eq!(st, 201, "{b}");
        }
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/claim",
                Some(&tok),
                json!({ "max": 2 }),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let claims = b["claims"].as_array().unwrap().clone();
        let run = |i: usize| claims[i]["run_id"].as_str().unwrap().to_owned();
        let token = |i: usize| claims[i]["claim_token"].as_str().unwrap().to_owned();
        let text =
            |t: &str| json!({ "type": "action", "content": [{ "type": "text", "text": t }] });
        let batch = |who: String, body: Value| {
            let s = &s;
            async move {
                s.post("/api/v1/worker/orchestrator/steps", Some(&who), body)
                    .await
            }
        };

        // Bad batches: refused whole, nothing stored.
        let (st, b) = batch(tok.clone(), json!({ "runs": [] })).await;
        assert_eq!(
            (st, b["error"]["code"].clone()),
            (422, json!("invalid_runs")),
            "{b}"
        );
        let many: Vec<Value> = (0..1001).map(|i| text(&format!("s{i}"))).collect();
        let (st, b) = batch(
        tok.clone(),
        json!({ "runs": [{ "run_id": run(0), "claim_token": token(0), "start_index": 0, "steps": many }] }),
    )
    .await;
        assert_eq!(
            (st, b["error"]["code"].clone()),
            (422, json!("invalid_runs")),
            "{b}"
        );
        let (st, b) = batch(tok.clone(), json!({ "runs": [{ "run_id": run(0) }] })).await;
        assert!(st == 400 || st == 422, "missing fields: {st} {b}");
        // Another worker may not send for this one, by its token or by naming it.
        let (st, b) = batch(
        other.clone(),
        json!({ "worker_id": "stepper", "runs": [{ "run_id": run(0), "claim_token": token(0), "start_index": 0, "steps": [text("x")] }] }),
    )
    .await;
        assert_eq!(
            (st, b["error"]["code"].clone()),
            (403, json!("not_your_worker")),
            "{b}"
        );
        let (st, b) = batch(
        other.clone(),
        json!({ "runs": [{ "run_id": run(0), "claim_token": token(0), "start_index": 0, "steps": [text("x")] }] }),
    )
    .await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(
            b["results"][0]["ok"], false,
            "a claim another worker holds: {b}"
        );

        // Each run on its own: stored, stale, gap, unknown, a retried batch.
        let (st, b) = batch(
        tok.clone(),
        json!({ "runs": [
            { "run_id": run(0), "claim_token": token(0), "start_index": 0, "steps": [text("a0"), text("a1")] },
            { "run_id": run(1), "claim_token": "sct_nope", "start_index": 0, "steps": [text("b0")] },
            { "run_id": run(1), "claim_token": token(1), "start_index": 3, "steps": [text("b3")] },
            { "run_id": "r-missing", "claim_token": token(1), "start_index": 0, "steps": [text("c")] },
            { "run_id": run(1), "claim_token": token(1), "start_index": 0, "steps": [text("b0")] },
            { "run_id": run(0), "claim_token": token(0), "start_index": 1, "steps": [text("a1"), text("a2")] },
        ] }),
    )
    .await;
        assert_eq!(st, 200, "{b}");
        let summary: Vec<(bool, Value, Value, Value, Value)> = b["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["ok"].as_bool().unwrap(),
                    r["next_index"].clone(),
                    r["duplicates"].clone(),
                    r["status"].clone(),
                    r["error"]["code"].clone(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (true, json!(2), json!(0), Value::Null, Value::Null),
                (
                    false,
                    Value::Null,
                    Value::Null,
                    json!(409),
                    json!("claim_stale")
                ),
                (
                    false,
                    Value::Null,
                    Value::Null,
                    json!(409),
                    json!("step_gap")
                ),
                (
                    false,
                    Value::Null,
                    Value::Null,
                    json!(404),
                    json!("run_not_found")
                ),
                (true, json!(1), json!(0), Value::Null, Value::Null),
                (true, json!(3), json!(1), Value::Null, Value::Null),
            ],
            "{b}"
        );
        // What was stored is what the runs' own transcripts hold, once each.
        for (i, want) in [(0, vec!["a0", "a1", "a2"]), (1, vec!["b0"])] {
            let (st, b) = s
                .get(&format!("/api/v1/runs/{}/steps", run(i)), Some(OPERATOR))
                .await;
            assert_eq!(st, 200, "{b}");
            let texts: Vec<String> = b["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|st| {
                    st["step"]["content"][0]["text"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            assert_eq!(texts, want, "{b}");
        }
        s.stop().await;
    }
);

#[tokio::test]
async fn openapi_names_every_route() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let (st, doc) = s.get("/api/openapi.json", None).await;
    assert_eq!(st, 200);
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/healthz",
        "/readyz",
        "/api/openapi.json",
        "/api/events",
        "/api/v1/events",
        "/api/v1/tasks",
        "/api/v1/tasks/{vtid}",
        "/api/v1/tasks/{vtid}/dispatch",
        "/api/v1/tasks/{vtid}/cancel",
        "/api/v1/tasks/{vtid}/events",
        "/api/v1/workflows",
        "/api/v1/agents",
        "/api/v1/worker/orchestrator/register",
        "/api/v1/worker/orchestrator/tasks/pending",
        "/api/v1/worker/orchestrator/tasks/{vtid}/claim",
        "/api/v1/worker/orchestrator/tasks/{vtid}/progress",
        "/api/v1/worker/orchestrator/tasks/claim",
        "/api/v1/worker/orchestrator/progress",
        "/api/v1/worker/orchestrator/steps",
        "/api/v1/worker/orchestrator/heartbeat",
        "/api/v1/worker/orchestrator/deregister",
        "/api/agents/workers",
        "/api/agents/workers/detail",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/runs/{run_id}/steps",
        "/api/v1/runs/{run_id}/status",
        "/api/v1/workers",
        "/api/v1/worker_events",
    ] {
        assert!(paths.contains_key(p), "OpenAPI lacks {p}");
        // Every documented path is served (not the JSON 404 of unknown routes).
        let concrete = p
            .replace("{vtid}", "X")
            .replace("{run_id}", "X")
            .replace("{id}", "X");
        let r = s
            .http
            .request(Method::OPTIONS, s.url(&concrete))
            .send()
            .await
            .unwrap();
        let b: Value = r.json().await.unwrap_or_default();
        assert_ne!(
            b["error"]["code"], "route_not_found",
            "{p} is documented but not served"
        );
    }
    s.stop().await;
}

e2e!(
    sse_resumes_with_last_event_id_without_gaps_or_duplicates,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let (_, first) = s.post("/api/v1/tasks", None, task("S-0", "simple")).await;
        assert_eq!(first["vtid"], "S-0");
        // Hydrate, then tail from the cursor the read was valid at.
        let r = s.http.get(s.url("/api/v1/tasks")).send().await.unwrap();
        let cursor: i64 = r.headers()["x-shepherd-cursor"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let mut sse = SseClient::connect(
            &s.base,
            &format!("/api/events?after={cursor}&types=task.created"),
            None,
            None,
        )
        .await;
        for i in 1..=3 {
            s.post("/api/v1/tasks", None, task(&format!("S-{i}"), "simple"))
                .await;
        }
        let mut seen = Vec::new();
        for _ in 0..3 {
            let f = sse.next(Duration::from_secs(5)).await.expect("live event");
            assert_eq!(f.event, "task.created");
            seen.push((
                f.id.unwrap(),
                f.data["task_id"].as_str().unwrap().to_owned(),
            ));
        }
        let last = seen.last().unwrap().0;
        drop(sse);
        // Missed while disconnected.
        for i in 4..=9 {
            s.post("/api/v1/tasks", None, task(&format!("S-{i}"), "simple"))
                .await;
        }
        let mut sse =
            SseClient::connect(&s.base, "/api/events?types=task.created", None, Some(last)).await;
        for i in 10..=11 {
            s.post("/api/v1/tasks", None, task(&format!("S-{i}"), "simple"))
                .await;
        }
        for _ in 4..=11 {
            let f = sse
                .next(Duration::from_secs(5))
                .await
                .expect("resumed event");
            seen.push((
                f.id.unwrap(),
                f.data["task_id"].as_str().unwrap().to_owned(),
            ));
        }
        assert!(
            sse.next(Duration::from_millis(300)).await.is_none(),
            "nothing twice"
        );
        let ids: Vec<String> = seen.iter().map(|(_, t)| t.clone()).collect();
        let expected: Vec<String> = (1..=11).map(|i| format!("S-{i}")).collect();
        assert_eq!(ids, expected, "exactly the missed ones, in order");
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0));
        s.stop().await;
    }
);

e2e!(
    run_activity_uses_the_workers_page_names,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        register(&s, "w", &[]).await;
        s.post("/api/v1/tasks", None, task("N-1", "simple")).await;
        let mut sse =
            SseClient::connect(&s.base, "/api/events?after=0&types=run.*", None, None).await;
        let (_, c) = s
            .post(
                "/api/v1/worker/orchestrator/tasks/N-1/claim",
                None,
                json!({ "worker_id": "w" }),
            )
            .await;
        let (run, ct) = (
            c["run_id"].as_str().unwrap(),
            c["claim_token"].as_str().unwrap(),
        );
        s.post(
            &format!("/api/v1/runs/{run}/status"),
            None,
            json!({ "claim_token": ct, "status": "thinking" }),
        )
        .await;
        s.post(
        &format!("/api/v1/runs/{run}/steps"),
        None,
        json!({ "claim_token": ct, "start_index": 0, "steps": [
            {"type":"action","content":[{"type":"tool_call","id":"c1","name":"shell","args":"{}"}]},
            {"type":"tool_result","call_id":"c1","name":"shell","text":"ok"}
        ]}),
    )
    .await;
        s.post("/api/v1/worker/orchestrator/tasks/N-1/progress", None, json!({ "worker_id": "w", "event": "worker.execution.completed", "claim_token": ct, "result": "all good" })).await;
        let mut names = Vec::new();
        while let Some(f) = sse.next(Duration::from_secs(3)).await {
            names.push(f.event.clone());
            if f.event == "worker_completed" {
                assert_eq!(f.data["data"]["status"], "done");
                assert_eq!(f.data["data"]["result"], "all good");
                break;
            }
        }
        assert_eq!(
            names,
            vec![
                "worker_started",
                "worker_status",
                "tool_started",
                "tool_completed",
                "worker_completed"
            ]
        );
        s.stop().await;
    }
);

e2e!(
    types_filter_accepts_the_workers_page_names,
    |kind: Kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let (st, b) = s.post("/api/v1/tasks", None, task("TY-1", "simple")).await;
        assert_eq!(st, 201, "{b}");
        let reg = s
            .post(
                "/api/v1/worker/orchestrator/register",
                None,
                json!({ "worker_id": "ty-w" }),
            )
            .await
            .1;
        let tok = reg["worker_token"].as_str().unwrap().to_owned();
        let c = s
            .post(
                "/api/v1/worker/orchestrator/tasks/TY-1/claim",
                Some(&tok),
                json!({}),
            )
            .await
            .1;
        let ct = c["claim_token"].as_str().unwrap();
        assert_eq!(
            progress(&s, &tok, "TY-1", ct, "worker.execution.completed")
                .await
                .0,
            200
        );
        // The SSE name and the log type select the same events.
        let by_name = s
            .get("/api/v1/events?after=0&types=worker_completed", None)
            .await
            .1;
        let by_type = s
            .get("/api/v1/events?after=0&types=run.completed", None)
            .await
            .1;
        assert_eq!(by_name["events"].as_array().unwrap().len(), 1, "{by_name}");
        assert_eq!(by_name["events"], by_type["events"]);
        s.stop().await;
    }
);

e2e!(
    a_worker_is_spawning_until_it_polls_or_heartbeats,
    |kind: Kind| async move {
        let s = Server::start(&Env::new(kind)).await;
        let status = |id: &'static str| {
            let s = &s;
            async move {
                let (st, list) = s.get("/api/v1/workers", None).await;
                assert_eq!(st, 200, "{list}");
                list["workers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|w| w["worker_id"] == id)
                    .map(|w| w["status"].clone())
                    .unwrap_or(Value::Null)
            }
        };
        // Registered, not yet heard from: the worker registry contract's `spawning`.
        let poller = register(&s, "w-poll", &[]).await;
        let beater = register(&s, "w-beat", &[]).await;
        assert_eq!(status("w-poll").await, "spawning");
        assert_eq!(status("w-beat").await, "spawning");
        // The first poll and the first heartbeat each end it.
        let (st, b) = s
            .get(
                "/api/v1/worker/orchestrator/tasks/pending?worker_id=w-poll",
                Some(&poller),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(status("w-poll").await, "ready");
        assert_eq!(status("w-beat").await, "spawning");
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/heartbeat",
                Some(&beater),
                json!({ "worker_id": "w-beat", "active_vtid": "VTID-NONE" }),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(status("w-beat").await, "ready");
        // Registering again is a new process: spawning again.
        register(&s, "w-beat", &[]).await;
        assert_eq!(status("w-beat").await, "spawning");
        s.stop().await;
    }
);

/// A typo in a task's agent or in an event type is refused with a code that
/// says what is wrong, by the API and by the CLI, instead of a task that
/// waits for ever or a filter that silently matches nothing.
async fn unknown_agents_and_event_types_are_refused(kind: Kind) {
    let env = Env::new(kind);
    let s = Server::start(&env).await;
    let with_agent =
        |vtid: &str, agent: &str| json!({ "vtid": vtid, "title": "typo", "agent_id": agent });
    let (st, b) = s
        .post("/api/v1/tasks", None, with_agent("UA-1", "nosuchagent"))
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (422, Some("unknown_agent")),
        "{b}"
    );
    assert!(
        b["error"]["message"].as_str().unwrap().contains("external"),
        "{b}"
    );
    let (st, _) = s.get("/api/v1/tasks/UA-1", None).await;
    assert_eq!(st, 404, "nothing was written");
    // An outside worker's agent, before it registers: said so, accepted.
    let mut external = with_agent("UA-2", "later");
    external["external"] = json!(true);
    let (st, b) = s.post("/api/v1/tasks", None, external).await;
    assert_eq!(st, 201, "{b}");
    assert_eq!(b["agent_id"], "later");
    // Once a worker declares an agent, tasks for it need no flag.
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            None,
            json!({ "worker_id": "w-ua", "agent_id": "declared" }),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, b) = s
        .post("/api/v1/tasks", None, with_agent("UA-3", "declared"))
        .await;
    assert_eq!(st, 201, "{b}");

    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(args)
            .args(["--server", &s.base])
            .env_remove("SHEPHERD_TOKEN")
            .env_remove("SHEPHERD_AUTH_TOKEN")
            .output()
            .unwrap()
    };
    let out = cli(&[
        "task",
        "add",
        "typo",
        "--agent",
        "nosuchagent",
        "--vtid",
        "UA-4",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("unknown_agent"),
        "{err}"
    );
    let out = cli(&[
        "task",
        "add",
        "later",
        "--agent",
        "gone",
        "--external",
        "--vtid",
        "UA-5",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for path in [
        "/api/v1/events?types=nosuch.type",
        "/api/v1/events?types=task.created,nosuch.type",
        "/api/events?types=nosuch.type",
        "/api/events?types=nosuch.*",
    ] {
        let (st, b) = s.get(path, None).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (400, Some("unknown_event_type")),
            "{path}: {b}"
        );
        let message = b["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("task.created") && message.contains("worker_completed"),
            "{message}"
        );
    }
    for path in [
        "/api/v1/events?types=task.created",
        "/api/v1/events?types=run.*,worker_completed",
        "/api/v1/events?types=worker.active",
    ] {
        let (st, b) = s.get(path, None).await;
        assert_eq!(st, 200, "{path}: {b}");
    }
    let out = cli(&["events", "--types", "nosuch.type"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("nosuch.type"),
        "{err}"
    );
    s.stop().await;
}

e2e!(
    unknown_agents_and_event_types_are_refused_by_the_api_and_the_cli,
    |kind| async move { unknown_agents_and_event_types_are_refused(kind).await }
);
