//! `shepherd migrate-store` with the real binary: a SQLite store filled by
//! a real workload (agents run by the built-in runner, with transcripts;
//! 3000 more runs reported through the connector; a conversation, a
//! session, a webhook) is copied into PostgreSQL; the
//! copy is killed part-way and resumed; two nodes then serve the copy with
//! every task, run and event (same sequence numbers, so cursors resume),
//! and new events continue the numbering. A destination that holds
//! anything else is refused.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use common::{events_after, pg_url, unique, wait_for, Env, Kind, Server};

const WAIT: Duration = Duration::from_secs(60);

fn shepherd(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn pg_client() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_moves_to_postgres_and_two_nodes_serve_it() {
    // The workload, on SQLite.
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file(
        "[agents.echo]\ncommand = [\"sh\", \"-c\", \"cat > /dev/null; echo step one; echo step two\"]\n",
    );
    let s = Server::spawn(&env).await;
    let (st, _) = s
        .post(
            "/api/v1/webhooks",
            None,
            json!({ "url": "http://127.0.0.1:9/h", "events": ["task.*"] }),
        )
        .await;
    assert_eq!(st, 201);
    const TASKS: usize = 60;
    for i in 0..TASKS {
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                None,
                json!({ "vtid": format!("MV-{i}"), "title": "move", "spec": "go", "agent_id": "echo" }),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    wait_for("every run to end", WAIT, || async {
        let (_, list) = s.get("/api/v1/runs?limit=500", None).await;
        let runs = list["runs"].as_array()?.clone();
        (runs.len() >= TASKS && runs.iter().all(|r| r["status"] != "running")).then_some(())
    })
    .await;
    // Many more runs, reported through the connector as a remote worker
    // would (no process each: the bulk of a long-lived store).
    const BULK: usize = 3000;
    let (st, reg) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            None,
            json!({ "worker_id": "bulk-1", "capabilities": ["bulk"] }),
        )
        .await;
    assert_eq!(st, 200, "{reg}");
    let wt = reg["worker_token"].as_str().unwrap().to_owned();
    for i in 0..BULK {
        let vtid = format!("BULK-{i}");
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                None,
                json!({ "vtid": vtid, "title": "bulk", "spec": "s", "capabilities": ["bulk"] }),
            )
            .await;
        assert_eq!(st, 201, "{b}");
        let (st, c) = s
            .post(
                &format!("/api/v1/worker/orchestrator/tasks/{vtid}/claim"),
                Some(&wt),
                json!({}),
            )
            .await;
        assert_eq!(st, 200, "{c}");
        let (st, p) = s
            .post(
                &format!("/api/v1/worker/orchestrator/tasks/{vtid}/progress"),
                Some(&wt),
                json!({ "event": "worker.execution.completed", "claim_token": c["claim_token"], "result": "ok" }),
            )
            .await;
        assert!((200..300).contains(&st), "{p}");
    }
    // A conversation answered by the agent, and a session.
    let (st, r) = s
        .post(
            "/api/v1/resources",
            None,
            json!({ "id": "res-1", "name": "Resource", "agent_id": "echo" }),
        )
        .await;
    assert!((200..300).contains(&st), "{r}");
    let (st, conv) = s
        .post("/api/v1/resources/res-1/conversations", None, json!({}))
        .await;
    assert!((200..300).contains(&st), "{conv}");
    let conv_id = conv["id"].as_str().unwrap().to_owned();
    let (st, m) = s
        .post(
            &format!("/api/v1/conversations/{conv_id}/messages"),
            None,
            json!({ "text": "hello there" }),
        )
        .await;
    assert!((200..300).contains(&st), "{m}");
    let conversation_before = wait_for("the conversation to be idle", WAIT, || async {
        let (_, c) = s
            .get(&format!("/api/v1/conversations/{conv_id}"), None)
            .await;
        (c["state"] == "idle").then_some(c)
    })
    .await;
    let place = env.dir.join("workspace");
    std::fs::create_dir_all(&place).unwrap();
    let (st, session) = s
        .post(
            "/api/v1/sessions",
            None,
            json!({ "location_path": place.canonicalize().unwrap() }),
        )
        .await;
    assert!((200..300).contains(&st), "{session}");
    let session_id = session["id"].as_str().unwrap().to_owned();
    let original = events_after(&s, 0).await;
    let (_, runs_before) = s.get("/api/v1/runs?limit=500", None).await;
    let (_, steps_before) = s
        .get(
            &format!(
                "/api/v1/runs/{}/steps",
                runs_before["runs"][0]["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    s.stop().await;

    // Copy, killed once part-way, then resumed to the end.
    let from = format!("sqlite://{}", env.dir.join("shepherd.db").display());
    let schema = format!("mv_{}", unique()).replace('-', "_");
    let mut child = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args([
            "migrate-store",
            "--from",
            &from,
            "--to",
            &pg_url(),
            "--pg-schema",
            &schema,
            "--batch",
            "5",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pg = pg_client().await;
    let marks =
        format!("SELECT COUNT(*) FROM {schema}.meta WHERE key LIKE 'migrate_store.rowid.%'");
    wait_for("the copy to be under way", WAIT, || async {
        let n: i64 = pg.query_one(marks.as_str(), &[]).await.ok()?.get(0);
        (n >= 3).then_some(())
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let (ok, out, err) = shepherd(&[
        "migrate-store",
        "--from",
        &from,
        "--to",
        &pg_url(),
        "--pg-schema",
        &schema,
        "--batch",
        "50",
    ]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("verified:"), "{out}");
    assert!(out.contains("events") && out.contains("runs"), "{out}");

    // Two nodes serve the copy.
    let node = |name: &str| {
        let mut e = Env::new(Kind::Sqlite);
        e.set("SHEPHERD_DATABASE_URL", &pg_url())
            .set("SHEPHERD_PG_SCHEMA", &schema)
            .set("SHEPHERD_NODE_ID", name);
        e
    };
    let (env_a, env_b) = (node("node-a"), node("node-b"));
    let a = Server::spawn(&env_a).await;
    let b = Server::spawn(&env_b).await;
    let copied = events_after(&b, 0).await;
    let held = copied
        .iter()
        .position(|e| e.0 > original.last().unwrap().0)
        .unwrap_or(copied.len());
    assert_eq!(
        copied[..held],
        original[..],
        "the log came over with its numbers"
    );
    let cursor = original[original.len() / 2].0;
    let resumed = events_after(&a, cursor).await;
    assert_eq!(resumed[0], original[original.len() / 2 + 1]);
    let (_, runs_after) = a.get("/api/v1/runs?limit=500", None).await;
    assert_eq!(runs_after["runs"], runs_before["runs"]);
    let (_, steps_after) = b
        .get(
            &format!(
                "/api/v1/runs/{}/steps",
                runs_before["runs"][0]["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(steps_after, steps_before, "transcripts came over");
    let (_, mut conversation_after) = b
        .get(&format!("/api/v1/conversations/{conv_id}"), None)
        .await;
    // `cursor` is where the log stood when it was read: further on now.
    let mut conversation_before = conversation_before;
    for c in [&mut conversation_after, &mut conversation_before] {
        c.as_object_mut().unwrap().remove("cursor");
    }
    assert_eq!(
        conversation_after, conversation_before,
        "the conversation came over"
    );
    let (st, session_after) = a.get(&format!("/api/v1/sessions/{session_id}"), None).await;
    assert_eq!(st, 200, "{session_after}");
    assert_eq!(session_after["location_path"], session["location_path"]);
    let (st, bulk) = b.get("/api/v1/tasks/BULK-2999", None).await;
    assert_eq!((st, bulk["state"].as_str()), (200, Some("done")), "{bulk}");
    let (st, hooks) = a.get("/api/v1/webhooks", None).await;
    assert_eq!(
        (st, hooks["webhooks"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    // New work continues the numbering, and the other node sees it.
    let (st, _) = a
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "AFTER-1", "title": "t", "spec": "s", "workflow": "simple" }),
        )
        .await;
    assert_eq!(st, 201);
    let (st, _) = b.get("/api/v1/tasks/AFTER-1", None).await;
    assert_eq!(st, 200);
    let last = events_after(&b, 0).await;
    assert!(last.last().unwrap().0 > original.last().unwrap().0);
    a.stop().await;
    b.stop().await;

    // A destination with other data in it is refused.
    let other = format!("mv_other_{}", unique()).replace('-', "_");
    let mut busy = Env::new(Kind::Sqlite);
    busy.set("SHEPHERD_DATABASE_URL", &pg_url())
        .set("SHEPHERD_PG_SCHEMA", &other);
    let s = Server::spawn(&busy).await;
    let (st, _) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "X-1", "title": "t", "spec": "s", "workflow": "simple" }),
        )
        .await;
    assert_eq!(st, 201);
    s.stop().await;
    let (ok, _, err) = shepherd(&[
        "migrate-store",
        "--from",
        &from,
        "--to",
        &pg_url(),
        "--pg-schema",
        &other,
    ]);
    assert!(!ok);
    assert!(err.contains("not empty"), "{err}");
    let (ok, _, err) = shepherd(&["migrate-store", "--from", &pg_url(), "--to", &pg_url()]);
    assert!(!ok);
    assert!(err.contains("--from"), "{err}");
    for s in [&schema, &other] {
        let _ = pg.batch_execute(&format!("DROP SCHEMA {s} CASCADE")).await;
    }
}
