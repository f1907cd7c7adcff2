//! Usage and cost end to end, on both stores: a scripted agent replays a
//! recorded Claude Code stream-json sample and its usage lands on the run;
//! steps-jsonl `usage` lines add up, and `max_cost_usd` stops a run that
//! passes it with reason `budget_exceeded`; bad usage reports are refused;
//! `GET /api/v1/usage` and `shepherd usage` sum what was stored.

mod common;

use std::time::{Duration, Instant};

use serde_json::json;
use shepherd_protocol::{Run, Task, Usage, UsageQuery, UsageReport};

use common::typed::runs_of;
use common::{Env, Kind, Server};

/// The newest run of task `vtid`, once the task is in one of `states`.
async fn run_of(s: &Server, vtid: &str, states: &[&str]) -> Run {
    let client = s.client(None);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (t, _) = client.task(vtid).await.expect("the task");
        if states.contains(&t.task.state.as_str()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{vtid} never reached {states:?}: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    runs_of(s, vtid).await.into_iter().next().expect("a run")
}

/// `GET /api/v1/usage` grouped by `group_by`, since `since`.
async fn usage(s: &Server, group_by: Option<&str>, since: Option<&str>) -> UsageReport {
    let q = UsageQuery {
        group_by: group_by.map(str::to_owned),
        since: since.map(str::to_owned),
    };
    s.client(None).usage(&q).await.expect("the usage report")
}

async fn usage_is_stored_and_budget_enforced(kind: Kind) {
    let mut env = Env::new(kind);
    let sample = format!(
        "{}/../../tests/fixtures/usage/claude_usage.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let pids = env.dir.join("spender.pid");
    let spender = env.script(
        "spender.sh",
        &format!(
            "cat > /dev/null\necho $$ > {}\necho '{{\"type\":\"usage\",\"input_tokens\":10,\"cost_usd\":0.6}}'\necho '{{\"type\":\"usage\",\"output_tokens\":4,\"cost_usd\":0.6}}'\nsleep 30\necho never\n",
            pids.display()
        ),
    );
    env.with_config_file(&format!(
        r#"
[agents.claude]
command = ["bash", "-c", "cat > /dev/null; cat {sample}"]
transcript = "claude-stream-json"
[agents.spender]
command = ["bash", "{spender}"]
transcript = "steps-jsonl"
max_cost_usd = 1.0
cancel_grace_secs = 2
"#
    ));
    let s = Server::start(&env).await;
    for (vtid, agent) in [("U-1", "claude"), ("U-2", "spender")] {
        let (st, b) = s
            .post_as::<Task>(
                "/api/v1/tasks",
                None,
                json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": agent }),
            )
            .await;
        assert_eq!(st, 201, "{b:?}");
    }
    let run = run_of(&s, "U-1", &["done", "failed"]).await;
    assert_eq!(run.status, "done", "{run:?}");
    // Every field: `Usage` refuses unknown ones.
    assert_eq!(
        run.usage,
        Some(Usage {
            input_tokens: 42,
            output_tokens: 46,
            cache_read_tokens: 1500,
            cache_write_tokens: 1500,
            cost_usd: Some(0.0123),
        }),
        "{run:?}"
    );
    let (detail, _) = s.client(None).run(&run.id).await.unwrap();
    assert_eq!(detail.run.usage.map(|u| u.output_tokens), Some(46));

    let started = Instant::now();
    let run = run_of(&s, "U-2", &["cancelled", "failed", "done"]).await;
    assert_eq!(run.status, "cancelled", "{run:?}");
    assert!(
        run.result
            .as_deref()
            .unwrap_or("")
            .starts_with("budget_exceeded"),
        "{run:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the run was stopped, not left to finish"
    );
    let spent = run.usage.expect("the run's usage");
    assert_eq!(spent.output_tokens, 4);
    assert_eq!(spent.input_tokens, 10);
    assert!((spent.cost_usd.unwrap() - 1.2).abs() < 1e-9);

    // Reports the server refuses: raw, for their codes.
    let id = run.id.as_str();
    let (st, b) = s
        .post(
            &format!("/api/v1/runs/{id}/usage"),
            None,
            json!({ "claim_token": "x", "usage": { "cost_usd": -1.0 } }),
        )
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (422, Some("invalid_usage"))
    );
    let (st, b) = s
        .post(
            &format!("/api/v1/runs/{id}/usage"),
            None,
            json!({ "claim_token": "x", "usage": { "input_tokens": 1 } }),
        )
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (409, Some("claim_stale")),
        "{b}"
    );
    let (st, _) = s
        .post(
            "/api/v1/runs/no-such-run/usage",
            None,
            json!({ "claim_token": "x", "usage": {} }),
        )
        .await;
    assert_eq!(st, 404);
    let (st, _) = s
        .post(
            &format!("/api/v1/runs/{id}/usage"),
            None,
            json!({ "claim_token": "x", "usage": { "tokens": 1 } }),
        )
        .await;
    assert_eq!(st, 422, "unknown usage fields are refused");

    // The stored usage, summed.
    let (st, by_agent) = s
        .get_as::<UsageReport>("/api/v1/usage?group_by=agent", None)
        .await;
    assert_eq!(st, 200, "{by_agent:?}");
    assert_eq!(by_agent.runs, 2, "{by_agent:?}");
    assert_eq!(by_agent.total.input_tokens, 52, "{by_agent:?}");
    assert_eq!(by_agent.total.output_tokens, 50, "{by_agent:?}");
    assert!((by_agent.total.cost_usd.unwrap() - 1.2123).abs() < 1e-9);
    let groups = &by_agent.groups;
    // The costlier agent first.
    assert_eq!(groups[0].key, "spender", "{by_agent:?}");
    assert_eq!(groups[1].key, "claude");
    assert_eq!(groups[1].usage.cache_read_tokens, 1500);
    assert_eq!(groups[1].runs, 1);
    let by_task = usage(&s, Some("task"), Some("7d")).await;
    let keys: Vec<&str> = by_task.groups.iter().map(|g| g.key.as_str()).collect();
    assert_eq!(keys, ["U-2", "U-1"], "{by_task:?}");
    assert!(by_task.since.is_some());
    let by_day = usage(&s, Some("day"), None).await;
    let day = &by_day.groups[0].key;
    assert_eq!(day.len(), 10, "{by_day:?}");
    assert_eq!(by_day.groups[0].runs, 2);
    let later = usage(&s, None, Some("2999-01-01T00:00:00Z")).await;
    assert_eq!(later.runs, 0, "runs before `since` are left out: {later:?}");
    assert!(later.groups.is_empty(), "{later:?}");
    for (q, code) in [
        ("group_by=week", "invalid_group_by"),
        ("since=yesterday", "invalid_since"),
        ("since=7", "invalid_since"),
    ] {
        let (st, b) = s.get(&format!("/api/v1/usage?{q}"), None).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (400, Some(code)),
            "{q}: {b}"
        );
    }
    // The command line reads the same.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args([
            "usage", "--by", "task", "--since", "1d", "--server", &s.base,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("U-1") && text.contains("U-2") && text.contains("TOTAL"),
        "{text}"
    );
    assert!(text.contains("$1.21"), "{text}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_on_sqlite() {
    usage_is_stored_and_budget_enforced(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_on_postgres() {
    usage_is_stored_and_budget_enforced(Kind::Postgres).await;
}

/// Runs whose agent reports no tokens (a script, a shell) leave `shepherd
/// usage` saying so, not printing a table of zeros that reads as "free".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_says_when_no_run_reported_any() {
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file(
        "[agents.quiet]\ncommand = [\"sh\", \"-c\", \"cat > /dev/null; echo done\"]\n",
    );
    let s = Server::start(&env).await;
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "Q-1", "title": "quiet", "agent_id": "quiet" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    run_of(&s, "Q-1", &["done"]).await;
    for (args, want) in [
        (vec!["usage"], "no run reported usage"),
        (vec!["usage", "--since", "1d"], "no run started since"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(&args)
            .args(["--server", &s.base])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {text}");
        assert!(
            text.contains(want) && !text.contains("TOTAL"),
            "{args:?}: {text}"
        );
    }
    s.stop().await;
}
