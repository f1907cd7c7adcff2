//! Upgrades: a database frozen at schema migration 0011, filled by a real
//! workload of the shepherd of that time (`fixtures/v0011`, made by
//! `scripts/make-upgrade-fixture.sh`), is served by this build on both
//! stores. Every later migration must apply to it, and the tasks, runs,
//! steps and events that shepherd served must read back the same (fields
//! added since may appear beside them); what the later migrations added
//! (input requests, webhooks) must work on it.

mod common;

use std::path::PathBuf;

use serde_json::{json, Value};

use common::{pg_url, unique, Env, Kind, Server};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v0011")
        .join(name)
}

/// Whether everything in `old` is in `new` as it was: objects may have
/// gained keys, nothing else may differ. Returns where it differs.
fn kept(old: &Value, new: &Value, at: &str) -> Result<(), String> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            for (k, v) in o {
                let here = format!("{at}.{k}");
                match n.get(k) {
                    Some(nv) => kept(v, nv, &here)?,
                    None => return Err(format!("{here} is gone (was {v})")),
                }
            }
            Ok(())
        }
        (Value::Array(o), Value::Array(n)) if o.len() == n.len() => o
            .iter()
            .zip(n)
            .enumerate()
            .try_for_each(|(i, (a, b))| kept(a, b, &format!("{at}[{i}]"))),
        (a, b) if a == b => Ok(()),
        (a, b) => Err(format!("{at}: was {a}, now {b}")),
    }
}

async fn all_events(s: &Server) -> Vec<Value> {
    let (mut out, mut after) = (Vec::new(), 0);
    loop {
        let (st, page) = s
            .get(&format!("/api/v1/events?after={after}&limit=1000"), None)
            .await;
        assert_eq!(st, 200, "{page}");
        let events = page["events"].as_array().unwrap().clone();
        if events.is_empty() {
            return out;
        }
        out.extend(events);
        after = page["next_cursor"].as_i64().unwrap();
    }
}

/// Reads back what the old shepherd served and checks it is kept; then
/// uses what later migrations added.
async fn reads_back(s: &Server, expected: &Value) {
    let (_, tasks) = s.get("/api/v1/tasks?limit=100", None).await;
    kept(&expected["tasks"], &tasks["tasks"], "tasks").unwrap();
    let (_, runs) = s.get("/api/v1/runs?limit=100", None).await;
    kept(&expected["runs"], &runs["runs"], "runs").unwrap();
    assert!(!expected["runs"].as_array().unwrap().is_empty());
    for (id, steps) in expected["steps"].as_object().unwrap() {
        let (st, now) = s.get(&format!("/api/v1/runs/{id}/steps"), None).await;
        assert_eq!(st, 200);
        kept(steps, &now, &format!("steps of {id}")).unwrap();
    }
    // The old log, then this server's own start-up events after it.
    let old = expected["events"].as_array().unwrap();
    let now = all_events(s).await;
    assert!(now.len() > old.len());
    kept(
        &Value::Array(old.clone()),
        &Value::Array(now[..old.len()].to_vec()),
        "events",
    )
    .unwrap();
    assert!(now[old.len()]["id"].as_i64() > old.last().unwrap()["id"].as_i64());

    // What migrations 0012 and 0013 added works on the upgraded database.
    let (st, _) = s.get("/api/v1/input-requests", None).await;
    assert_eq!(st, 200);
    let (st, made) = s
        .post(
            "/api/v1/webhooks",
            None,
            json!({ "url": "http://127.0.0.1:9/h" }),
        )
        .await;
    assert_eq!(st, 201, "{made}");
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "UP-NEW", "title": "after the upgrade", "spec": "s", "workflow": "simple" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_database_from_migration_0011_upgrades_and_reads_back() {
    let env = Env::new(Kind::Sqlite);
    std::fs::copy(fixture("shepherd.db"), env.dir.join("shepherd.db")).unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected-sqlite.json")).unwrap())
            .unwrap();
    let s = Server::spawn(&env).await;
    reads_back(&s, &expected).await;
    s.stop().await;
    // And a second start finds nothing left to do.
    let s = Server::spawn(&env).await;
    let (st, _) = s.get("/api/v1/tasks/UP-NEW", None).await;
    assert_eq!(st, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_migration_0011_upgrades_and_reads_back() {
    let schema = format!("up_{}", unique()).replace('-', "_");
    let dump = std::fs::read_to_string(fixture("postgres.sql"))
        .unwrap()
        .replace("fixture_0011", &schema);
    let (pg, conn) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    pg.batch_execute(&dump).await.unwrap();
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected-postgres.json")).unwrap())
            .unwrap();
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_DATABASE_URL", &pg_url())
        .set("SHEPHERD_PG_SCHEMA", &schema);
    let s = Server::spawn(&env).await;
    reads_back(&s, &expected).await;
    s.stop().await;
    let _ = pg
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await;
}

#[test]
fn kept_allows_new_fields_and_nothing_else() {
    let old = json!({ "a": 1, "b": [{ "c": "x" }] });
    assert!(kept(
        &old,
        &json!({ "a": 1, "b": [{ "c": "x", "d": 2 }], "e": 3 }),
        ""
    )
    .is_ok());
    assert!(kept(&old, &json!({ "a": 2, "b": [{ "c": "x" }] }), "").is_err());
    assert!(kept(&old, &json!({ "b": [{ "c": "x" }] }), "").is_err());
    assert!(kept(&old, &json!({ "a": 1, "b": [] }), "").is_err());
}
