//! Input requests end to end: agents run by the built-in runner ask a
//! person with `shepherd ask` (the real binary, with the run token the
//! runner gives them), and people answer through the API, on both stores.
//! Covers the first answer winning under concurrent answers, the agent's
//! policy rules, timeouts, cancellation withdrawing a request, what a run
//! token may and may not do, the unhappy paths, and a server `kill -9`
//! while an agent waits.

mod common;

use std::time::Duration;

use serde_json::{json, Value};
use shepherd_core::input::{InputRequest, InputState};
use shepherd_protocol as p;

use common::{wait_for, Env, Kind, Server};

const WAIT: Duration = Duration::from_secs(30);
const SHEPHERD: &str = env!("CARGO_BIN_EXE_shepherd");

/// A configuration whose agent `asker` runs `script` (sh) with `shepherd`
/// on its PATH-less command line as `$SHEPHERD_BIN`.
fn with_agent(env: &mut Env, script: &str, extra: &str) {
    let path = env.script("asker.sh", script);
    env.with_config_file(&format!(
        r#"
[agents.asker]
command = ["sh", "{path}"]
env = {{ SHEPHERD_BIN = "{SHEPHERD}", OUT = "{out}" }}
{extra}
"#,
        out = env.dir.join("out.txt").display()
    ));
}

async fn create(s: &Server, vtid: &str) {
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": vtid, "title": "ask", "spec": "go", "agent_id": "asker" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
}

/// Waits for `n` pending requests of task `vtid`.
async fn pending(s: &Server, vtid: &str, n: usize) -> Vec<InputRequest> {
    let c = s.client(None);
    wait_for(&format!("{n} pending requests of {vtid}"), WAIT, || async {
        let q = p::InputRequestsQuery {
            state: Some("pending".into()),
            vtid: Some(vtid.into()),
            ..Default::default()
        };
        let list = c.input_requests(&q).await.ok()?;
        (list.requests.len() == n).then_some(list.requests)
    })
    .await
}

/// What the agent wrote to `out.txt`, once it wrote `done`.
async fn agent_output(env: &Env) -> String {
    let out = env.dir.join("out.txt");
    wait_for("the agent's output", WAIT, || async {
        let text = std::fs::read_to_string(&out).ok()?;
        text.contains("done").then_some(text)
    })
    .await
}

async fn answer(s: &Server, id: &str, body: Value) -> (u16, Value) {
    s.post(&format!("/api/v1/input-requests/{id}/answer"), None, body)
        .await
}

e2e!(
    a_question_is_answered_once_and_reaches_the_agent,
    |kind| async move {
        let mut env = Env::new(kind);
        with_agent(
            &mut env,
            "$SHEPHERD_BIN ask 'Deploy to staging?' --option yes --option no > \"$OUT.tmp\"; \
         echo \"exit=$?\" >> \"$OUT.tmp\"; echo done >> \"$OUT.tmp\"; mv \"$OUT.tmp\" \"$OUT\"\n",
            "",
        );
        let s = Server::start(&env).await;
        create(&s, "ASK-1").await;
        let reqs = pending(&s, "ASK-1", 1).await;
        let r = &reqs[0];
        assert_eq!(r.kind.as_str(), "question");
        assert_eq!(r.prompt.as_deref(), Some("Deploy to staging?"));
        assert_eq!(r.options, vec!["yes", "no"]);
        assert_eq!(r.agent_id, "asker");
        // The run shows what it waits for, and keeps running.
        let run = common::typed::runs_of(&s, "ASK-1").await.remove(0);
        assert_eq!(run.status.as_str(), "running");
        assert_eq!(run.pending_input, 1);
        assert!(
            run.live_status
                .as_deref()
                .unwrap_or("")
                .contains("Deploy to staging?"),
            "{:?}",
            run.live_status
        );

        // Unhappy answers first: nothing changes.
        for bad in [
            json!({ "option": "maybe" }),
            json!({ "decision": "allow" }),
            json!({ "text": "a", "option": "yes" }),
            json!({}),
        ] {
            let (st, b) = answer(&s, &r.id, bad.clone()).await;
            assert_eq!(
                (st, b["error"]["code"].as_str()),
                (422, Some("invalid_answer")),
                "{bad}"
            );
        }
        let (st, b) = answer(&s, "no-such-request", json!({ "text": "x" })).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (404, Some("input_request_not_found"))
        );

        // Two devices answer at once: one wins, the other is told.
        let (a, b) = tokio::join!(
            answer(&s, &r.id, json!({ "option": "yes" })),
            answer(&s, &r.id, json!({ "option": "no" }))
        );
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(statuses, [200, 409], "{a:?} {b:?}");
        let (won, lost) = if a.0 == 200 { (a.1, b.1) } else { (b.1, a.1) };
        assert_eq!(lost["error"]["code"], "already_answered");
        let chosen = won["answer"]["option"].as_str().unwrap().to_owned();
        assert_eq!(won["answered_by"], "admin");
        assert_eq!(won["state"], "answered");

        let out = agent_output(&env).await;
        assert_eq!(out.lines().next(), Some(chosen.as_str()), "{out}");
        assert!(out.contains("exit=0"), "{out}");
        common::typed::task_in(&s, "ASK-1", &["done"], WAIT).await;
        let run = common::typed::runs_of(&s, "ASK-1").await.remove(0);
        assert_eq!(run.pending_input, 0);

        // Both events are in the log, in order, about the run.
        let (_, page) = s
            .get(
                &format!("/api/v1/events?run_id={}&types=input.*", run.id),
                None,
            )
            .await;
        let kinds: Vec<&str> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["input.requested", "input.answered"], "{page}");
        s.stop().await;
    }
);

e2e!(
    rules_answer_at_once_and_a_denial_exits_one,
    |kind| async move {
        let mut env = Env::new(kind);
        with_agent(
            &mut env,
            r#"ask() { $SHEPHERD_BIN ask --permission "$1" --input "$2" "why"; echo "exit=$?"; }
{ ask Bash '{"command":"git status --short"}'; ask Bash '{"command":"rm -rf build"}'; ask Write '{"file_path":"a.txt","content":"x"}'; echo done; } > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
"#,
            r#"allow = ["Read", "Bash(git status:*)"]
deny = ["Bash(rm:*)"]"#,
        );
        let s = Server::start(&env).await;
        create(&s, "RULE-1").await;
        // The first two were answered by rules; the third waits for a person.
        let reqs = pending(&s, "RULE-1", 1).await;
        assert_eq!(reqs[0].tool_name.as_deref(), Some("Write"));
        assert_eq!(
            reqs[0].tool_input,
            Some(json!({"file_path": "a.txt", "content": "x"}))
        );
        let (st, b) = answer(
            &s,
            &reqs[0].id,
            json!({ "decision": "deny", "message": "not in this repo" }),
        )
        .await;
        assert_eq!(st, 200, "{b}");
        let out = agent_output(&env).await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines,
            ["allow", "exit=0", "deny", "exit=1", "deny", "exit=1", "done"],
            "{out}"
        );
        let list: p::InputRequestList =
            s.get_as("/api/v1/input-requests?vtid=RULE-1", None).await.1;
        let by: Vec<Option<&str>> = list
            .requests
            .iter()
            .rev()
            .map(|r| r.answered_by.as_deref())
            .collect();
        assert_eq!(
            by,
            [
                Some("rule:Bash(git status:*)"),
                Some("rule:Bash(rm:*)"),
                Some("admin")
            ]
        );
        s.stop().await;
    }
);

e2e!(
    a_timeout_expires_and_a_cancel_withdraws,
    |kind| async move {
        let mut env = Env::new(kind);
        with_agent(
            &mut env,
            "$SHEPHERD_BIN ask --permission Bash --input '{\"command\":\"make\"}' > \"$OUT.tmp\"; \
         echo \"exit=$?\" >> \"$OUT.tmp\"; echo done >> \"$OUT.tmp\"; mv \"$OUT.tmp\" \"$OUT\"; \
         $SHEPHERD_BIN ask 'still there?'\n",
            "ask_timeout = \"1s\"\non_timeout = \"allow\"",
        );
        let s = Server::start(&env).await;
        create(&s, "TIME-1").await;
        // Nobody answers: after a second the request expires with the agent's
        // on_timeout answer, which `shepherd ask` reports as expiry (exit 1).
        let out = agent_output(&env).await;
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["allow", "exit=1", "done"],
            "{out}"
        );
        let list: p::InputRequestList = s
            .get_as("/api/v1/input-requests?vtid=TIME-1&state=expired", None)
            .await
            .1;
        assert_eq!(list.requests.len(), 1);
        assert_eq!(list.requests[0].answered_by.as_deref(), Some("timeout"));
        // The second question also times out, so answer it first? No: cancel the
        // task while it waits; its request is withdrawn, and answering it is refused.
        let q = wait_for("the second question", WAIT, || async {
            let list: p::InputRequestList =
                s.get_as("/api/v1/input-requests?vtid=TIME-1", None).await.1;
            list.requests
                .into_iter()
                .find(|r| r.prompt.as_deref() == Some("still there?"))
        })
        .await;
        let (st, b) = s
            .post(
                "/api/v1/tasks/TIME-1/cancel",
                None,
                json!({ "reason": "enough" }),
            )
            .await;
        assert!(st == 200 || st == 202, "{st} {b}");
        let gone = wait_for("the question to end", WAIT, || async {
            let r: InputRequest = s
                .get_as(&format!("/api/v1/input-requests/{}", q.id), None)
                .await
                .1;
            r.state.is_final().then_some(r)
        })
        .await;
        // A question expires without an answer, or is withdrawn by the cancel,
        // whichever comes first; either way nobody can answer it now.
        assert!(
            matches!(gone.state, InputState::Withdrawn | InputState::Expired),
            "{gone:?}"
        );
        let (st, b) = answer(&s, &q.id, json!({ "text": "yes" })).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (409, Some("already_answered"))
        );
        s.stop().await;
    }
);

/// A worker of the connector with one claimed run: its run token.
async fn claimed_run(s: &Server, vtid: &str, worker: &str) -> (String, String, String) {
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": vtid, "title": "t", "spec": "s", "workflow": "simple" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, reg) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            None,
            json!({ "worker_id": worker, "capabilities": [], "max_concurrent": 2 }),
        )
        .await;
    assert_eq!(st, 200, "{reg}");
    let (st, claim) = s
        .post(
            &format!("/api/v1/worker/orchestrator/tasks/{vtid}/claim"),
            None,
            json!({ "worker_id": worker }),
        )
        .await;
    assert_eq!(st, 200, "{claim}");
    let run_id = claim["run_id"].as_str().expect("run id").to_owned();
    let token = claim["claim_token"]
        .as_str()
        .expect("claim token")
        .to_owned();
    let (st, t) = s
        .post(
            &format!("/api/v1/runs/{run_id}/token"),
            None,
            json!({ "claim_token": token }),
        )
        .await;
    assert_eq!(st, 200, "{t}");
    (run_id, t["token"].as_str().unwrap().to_owned(), token)
}

e2e!(
    a_run_token_asks_for_its_own_run_and_nothing_else,
    |kind| async move {
        let env = Env::new(kind);
        let s = Server::start(&env).await;
        let (run_a, token_a, claim_a) = claimed_run(&s, "SCOPE-1", "w-a").await;
        let (run_b, _, _) = claimed_run(&s, "SCOPE-2", "w-b").await;
        let t = Some(token_a.as_str());

        // It asks for its own run (named or not), never for another's.
        let (st, r) = s
            .post(
                "/api/v1/input-requests",
                t,
                json!({ "prompt": "ok?", "key": "k1" }),
            )
            .await;
        assert_eq!(st, 201, "{r}");
        assert_eq!(r["run_id"], run_a.as_str());
        let (st, again) = s
            .post(
                "/api/v1/input-requests",
                t,
                json!({ "prompt": "ok?", "key": "k1" }),
            )
            .await;
        assert_eq!(
            (st, &again["id"]),
            (201, &r["id"]),
            "the same key asks once"
        );
        // A status the worker reports while the run waits does not hide the wait.
        let (st, b) = s
            .post(
                &format!("/api/v1/runs/{run_a}/status"),
                None,
                json!({ "claim_token": claim_a, "status": "compiling" }),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let (_, run) = s.get(&format!("/api/v1/runs/{run_a}"), None).await;
        assert_eq!(
            run["run"]["live_status"], "waiting for an answer: ok?",
            "{run}"
        );
        let (st, b) = s
            .post(
                "/api/v1/input-requests",
                t,
                json!({ "run_id": run_b, "prompt": "x" }),
            )
            .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (403, Some("not_your_run"))
        );
        // It reads its run and requests; nothing else, and it cannot answer.
        assert_eq!(s.get(&format!("/api/v1/runs/{run_a}"), t).await.0, 200);
        assert_eq!(s.get(&format!("/api/v1/runs/{run_b}"), t).await.0, 403);
        let (st, list) = s.get("/api/v1/input-requests", t).await;
        assert_eq!(st, 200);
        assert_eq!(list["requests"].as_array().unwrap().len(), 1);
        for path in [
            "/api/v1/tasks",
            "/api/v1/workers",
            "/api/v1/events",
            "/api/v1/sessions",
        ] {
            let (st, b) = s.get(path, t).await;
            assert_eq!(
                (st, b["error"]["code"].as_str()),
                (403, Some("forbidden")),
                "{path}"
            );
        }
        let id = r["id"].as_str().unwrap();
        let (st, b) = answer_as(&s, id, t, json!({ "text": "yes" })).await;
        assert_eq!((st, b["error"]["code"].as_str()), (403, Some("forbidden")));
        // A forged token (another run's id, the same signature) is nobody.
        let forged = token_a.replace(&run_a, &run_b);
        assert_eq!(s.get("/api/v1/input-requests", Some(&forged)).await.0, 401);
        // Another worker's token neither reads, asks for nor answers a run it
        // does not hold; the holder's own token answers it.
        let (st, other) = s
            .post(
                "/api/v1/worker/orchestrator/register",
                None,
                json!({ "worker_id": "w-other", "capabilities": [], "max_concurrent": 1 }),
            )
            .await;
        assert_eq!(st, 200, "{other}");
        let other = Some(other["worker_token"].as_str().unwrap().to_owned());
        let o = other.as_deref();
        let (st, _) = s.get(&format!("/api/v1/input-requests/{id}"), o).await;
        assert_eq!(st, 403);
        let (st, _) = s.get("/api/v1/input-requests", o).await;
        assert_eq!(st, 403, "a worker lists only runs it names and holds");
        let (st, _) = s
            .get(&format!("/api/v1/input-requests?run_id={run_a}"), o)
            .await;
        assert_eq!(st, 403);
        let (st, _) = s
            .post(
                "/api/v1/input-requests",
                o,
                json!({ "run_id": run_a, "prompt": "x" }),
            )
            .await;
        assert_eq!(st, 403);
        let (st, _) = answer_as(&s, id, o, json!({ "text": "no" })).await;
        assert_eq!(st, 403);
        let (st, still) = s.get(&format!("/api/v1/input-requests/{id}"), None).await;
        assert_eq!((st, &still["state"]), (200, &json!("pending")), "{still}");

        // Malformed requests.
        for (body, code) in [
            (json!({ "prompt": "" }), "invalid_input_request"),
            (json!({ "kind": "permission" }), "invalid_input_request"),
            (
                json!({ "prompt": "p", "options": ["a", "a"] }),
                "invalid_input_request",
            ),
            (
                json!({ "prompt": "p", "tool_input": {} }),
                "invalid_input_request",
            ),
        ] {
            let (st, b) = s.post("/api/v1/input-requests", t, body.clone()).await;
            assert_eq!(
                (st, b["error"]["code"].as_str()),
                (422, Some(code)),
                "{body}"
            );
        }
        let (st, b) = s.get("/api/v1/input-requests?state=waiting", None).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (400, Some("invalid_state"))
        );
        // A run that ended withdrew its pending request, and cannot ask again.
        let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/tasks/SCOPE-1/progress",
            None,
            json!({ "worker_id": "w-a", "claim_token": claim_a, "event": "worker.execution.failed" }),
        )
        .await;
        assert_eq!(st, 200, "{b}");
        let (_, gone) = s.get(&format!("/api/v1/input-requests/{id}"), None).await;
        assert_eq!(gone["state"], "withdrawn", "{gone}");
        let (st, b) = s
            .post("/api/v1/input-requests", t, json!({ "prompt": "again?" }))
            .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (409, Some("run_not_running")),
            "{b}"
        );
        let (_, run) = s.get(&format!("/api/v1/runs/{run_a}"), None).await;
        assert_eq!(run["run"]["pending_input"], 0, "{run}");
        s.stop().await;
    }
);

async fn answer_as(s: &Server, id: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    s.post(&format!("/api/v1/input-requests/{id}/answer"), token, body)
        .await
}

/// The server is killed (`kill -9`) while an agent waits for an answer;
/// started again on the same data, it keeps the request, the agent (alive
/// under its shim) keeps waiting, and an answer given now reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_request_survives_kill_9_of_the_server() {
    let mut env = Env::new(Kind::Sqlite);
    with_agent(
        &mut env,
        "$SHEPHERD_BIN ask 'Ship it?' > \"$OUT.tmp\"; echo \"exit=$?\" >> \"$OUT.tmp\"; \
         echo done >> \"$OUT.tmp\"; mv \"$OUT.tmp\" \"$OUT\"\n",
        "",
    );
    // One address for both servers: the agent was told where its server is.
    let listen = format!("127.0.0.1:{}", common::free_port());
    let mut s = Server::spawn_at(&env, &listen).await;
    create(&s, "KILL-1").await;
    let before = pending(&s, "KILL-1", 1).await.remove(0);
    let child = s.child.take().expect("a spawned server");
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.pid(), libc::SIGKILL);
    }
    drop(child);
    drop(s);
    // The same data directory and database: the next server adopts the run.
    let s = Server::spawn_at(&env, &listen).await;
    let after: InputRequest = s
        .get_as(&format!("/api/v1/input-requests/{}", before.id), None)
        .await
        .1;
    assert_eq!(after.state, InputState::Pending);
    let (st, b) = answer(&s, &before.id, json!({ "text": "ship it" })).await;
    assert_eq!(st, 200, "{b}");
    let out = agent_output(&env).await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["ship it", "exit=0", "done"],
        "{out}"
    );
    common::typed::task_in(&s, "KILL-1", &["done"], WAIT).await;
    s.stop().await;
}

/// The server is down when an agent asks (a restart longer than a few
/// seconds): `shepherd ask` keeps asking until the server is back, the
/// question is asked once, and its answer reaches the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_while_the_server_is_down_waits_for_it() {
    let mut env = Env::new(Kind::Sqlite);
    let go = env.dir.join("go");
    let started = env.dir.join("started");
    with_agent(
        &mut env,
        &format!(
            "touch {started}\nwhile [ ! -e {go} ]; do sleep 0.05; done\n\
             $SHEPHERD_BIN ask 'Ship it?' > \"$OUT.tmp\"; echo \"exit=$?\" >> \"$OUT.tmp\"; \
             echo done >> \"$OUT.tmp\"; mv \"$OUT.tmp\" \"$OUT\"\n",
            started = started.display(),
            go = go.display()
        ),
        "",
    );
    let listen = format!("127.0.0.1:{}", common::free_port());
    let mut s = Server::spawn_at(&env, &listen).await;
    create(&s, "DOWN-1").await;
    wait_for("the agent to start", WAIT, || async {
        started.exists().then_some(())
    })
    .await;
    let child = s.child.take().expect("a spawned server");
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.pid(), libc::SIGKILL);
    }
    drop(child);
    drop(s);
    // The agent asks now, and the server stays away for five seconds.
    std::fs::write(&go, b"").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let s = Server::spawn_at(&env, &listen).await;
    let asked = pending(&s, "DOWN-1", 1).await.remove(0);
    let (st, b) = answer(&s, &asked.id, json!({ "text": "ship it" })).await;
    assert_eq!(st, 200, "{b}");
    let out = agent_output(&env).await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["ship it", "exit=0", "done"],
        "{out}"
    );
    common::typed::task_in(&s, "DOWN-1", &["done"], WAIT).await;
    let all = s
        .client(None)
        .input_requests(&p::InputRequestsQuery {
            vtid: Some("DOWN-1".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.requests.len(), 1, "asked once: {:?}", all.requests);
    s.stop().await;
}

/// `on_budget = "ask"`: passing `max_cost_usd` asks whether to go on;
/// "continue" raises the budget by as much again, "stop" stops the run as
/// a plain budget does. A quiet agent with `stuck_after` is reported once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_asks_and_a_quiet_run_is_reported_stuck() {
    let mut env = Env::new(Kind::Sqlite);
    let spender = env.script(
        "spender.sh",
        "cat > /dev/null\n\
         echo '{\"type\":\"usage\",\"cost_usd\":0.6}'\n\
         while [ ! -e \"$NEXT\" ]; do sleep 0.05; done\n\
         echo '{\"type\":\"usage\",\"cost_usd\":0.6}'\n\
         sleep 60\n",
    );
    let next = env.dir.join("next");
    env.with_config_file(&format!(
        r#"
[agents.spender]
command = ["bash", "{spender}"]
transcript = "steps-jsonl"
max_cost_usd = 0.5
on_budget = "ask"
cancel_grace_secs = 1
env = {{ NEXT = "{next}" }}
[agents.quiet]
command = ["sleep", "60"]
stuck_after = 1
"#,
        next = next.display()
    ));
    let s = Server::start(&env).await;
    for (vtid, agent) in [("B-1", "spender"), ("Q-1", "quiet")] {
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                None,
                json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": agent }),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    // $0.60 of $0.50: a question, and the run goes on meanwhile.
    let q = pending(&s, "B-1", 1).await.remove(0);
    assert_eq!(q.options, vec!["continue", "stop"]);
    assert!(
        q.prompt.as_deref().unwrap().contains("$0.60 of $0.50"),
        "{q:?}"
    );
    let (st, b) = answer(&s, &q.id, json!({ "option": "continue" })).await;
    assert_eq!(st, 200, "{b}");
    // $1.20 of $1.00: asked again; stop ends it as a budget does.
    std::fs::write(&next, "").unwrap();
    let q2 = wait_for("the second budget question", WAIT, || async {
        let list: p::InputRequestList = s
            .get_as("/api/v1/input-requests?vtid=B-1&state=pending", None)
            .await
            .1;
        list.requests.into_iter().find(|r| r.id != q.id)
    })
    .await;
    assert!(q2.prompt.as_deref().unwrap().contains("of $1.00"), "{q2:?}");
    let (st, b) = answer(&s, &q2.id, json!({ "option": "stop" })).await;
    assert_eq!(st, 200, "{b}");
    let run = wait_for("the spender to be stopped", WAIT, || async {
        let run = common::typed::runs_of(&s, "B-1").await.remove(0);
        (run.status.as_str() != "running").then_some(run)
    })
    .await;
    assert!(
        run.result
            .as_deref()
            .unwrap_or("")
            .starts_with("budget_exceeded"),
        "{run:?}"
    );

    // The quiet agent: one run.stuck, not one a second.
    let stuck = wait_for("run.stuck", WAIT, || async {
        let (_, page) = s.get("/api/v1/events?types=run.stuck", None).await;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(stuck[0]["task_id"], "Q-1");
    assert!(
        stuck[0]["data"]["quiet_ms"].as_i64().unwrap() >= 1000,
        "{stuck:?}"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (_, page) = s.get("/api/v1/events?types=run.stuck", None).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 1, "{page}");
    s.stop().await;
}
