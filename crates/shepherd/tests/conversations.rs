//! Conversations end to end (the conversations contract) with the built-in runner and a
//! scripted agent that speaks Claude Code's stream-json (no API key): the
//! contract's scenarios, load then tail from the cursor, concurrent sends,
//! follow-ups that continue the agent's own session, and a server killed
//! with SIGKILL mid-reply.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use shepherd_protocol::{
    ActionContent, ConversationDetail, ConversationInfo, ConversationPage,
    ConversationStateChanged, ConversationsQuery, MessageInfo, MultitaskMode, ResourceBody,
    ResourceInfo, RunList, RunStep, RunsQuery, SendBody, SendResponse, StepsQuery, TaskListQuery,
    TranscriptStep, WireEvent,
};

use common::{alive, wait_for, Env, Served, Server, SseClient};

/// The scripted agent: records its argv, prompt and pid beside itself,
/// resumes the session `--resume` names (else starts a new one), and writes
/// one assistant message per step; the prompt's last line chooses how many
/// and how fast. On SIGTERM it takes a moment, reports one last step, exits.
const AGENT: &str = r#"#!/usr/bin/env bash
dir="$(dirname "$0")"
args=""; for a in "$@"; do args+="[$a]"; done
echo "$args" >> "$dir/argv.log"
prompt="$(cat)"
printf '%s\n@@END@@\n' "$prompt" >> "$dir/prompts.log"
echo $$ >> "$dir/pids.log"
session="sess-$$-$RANDOM"
while [ $# -gt 0 ]; do if [ "$1" = "--resume" ]; then session="$2"; shift; fi; shift; done
emit() { printf '{"type":"assistant","session_id":"%s","message":{"id":"m%s","content":[{"type":"text","text":"%s"}]}}\n' "$session" "$1" "$2"; }
printf '{"type":"system","subtype":"init","session_id":"%s"}\n' "$session"
trap 'sleep 1; emit stop "stopping after cancel"; exit 143' TERM
case "$(printf '%s' "$prompt" | tail -n 1)" in
  *slow*) n=40; pause=0.2 ;;
  *medium*) n=3; pause=0.3 ;;
  *) n=2; pause=0 ;;
esac
for i in $(seq 1 $n); do
  emit "$i" "step $i of $n"
  if [ "$pause" != 0 ]; then sleep "$pause" & wait $!; fi
done
printf '{"type":"result","subtype":"success","session_id":"%s","result":"answered in %s steps"}\n' "$session" "$n"
"#;

fn agent_config(env: &Env) -> String {
    let script = env.script("agent.sh", AGENT);
    format!(
        r#"
[agents.chat]
command = ["bash", "{script}"]
transcript = "claude-stream-json"
continue_args = ["--resume", "{{agent_session_id}}"]
cancel_grace_secs = 10
max_concurrent = 2
[agents.plain]
command = ["bash", "{script}"]
transcript = "claude-stream-json"
"#
    )
}

async fn conversation(s: &Server, id: &str) -> ConversationDetail {
    let (st, c) = s
        .get_as::<ConversationDetail>(&format!("/api/v1/conversations/{id}"), None)
        .await;
    assert_eq!(st, 200, "{c:?}");
    c
}

async fn idle(s: &Server, id: &str) -> ConversationDetail {
    wait_for(
        "the conversation to be idle",
        Duration::from_secs(30),
        || async {
            let c = conversation(s, id).await;
            (c.state == "idle").then_some(c)
        },
    )
    .await
}

/// Waits until the running reply has at least `n` steps.
async fn steps_at_least(s: &Server, id: &str, n: usize) -> ConversationDetail {
    wait_for(&format!("{n} steps"), Duration::from_secs(30), || async {
        let c = conversation(s, id).await;
        let last = c.messages.last()?;
        (last.role == "agent" && steps(last).len() >= n).then_some(c)
    })
    .await
}

async fn setup(s: &Server, agent: &str) -> String {
    let (st, r) = s
        .post_as::<ResourceInfo>(
            "/api/v1/resources",
            None,
            json!({ "id": "table-1", "name": "Leads table", "agent_id": agent }),
        )
        .await;
    assert_eq!(st, 201, "{r:?}");
    let (st, r) = s
        .post_as::<ResourceInfo>(
            "/api/v1/resources",
            None,
            json!({ "id": "table-1", "name": "Leads", "agent_id": agent }),
        )
        .await;
    assert_eq!((st, r.name.as_str()), (200, "Leads"), "{r:?}");
    new_chat(s).await
}

async fn new_chat(s: &Server) -> String {
    let (st, c) = s
        .post_as::<ConversationInfo>("/api/v1/resources/table-1/conversations", None, json!({}))
        .await;
    assert_eq!(st, 201, "{c:?}");
    assert_eq!((c.state.as_str(), c.active), ("idle", true));
    c.id
}

/// Sends a message; the status and the accepted message.
async fn send(s: &Server, id: &str, body: Value) -> (u16, SendResponse) {
    s.post_as(&format!("/api/v1/conversations/{id}/messages"), None, body)
        .await
}

/// Sends a message, or asks to; the status and the raw answer (a refusal's code).
async fn try_send(s: &Server, id: &str, body: Value) -> (u16, Value) {
    s.post(&format!("/api/v1/conversations/{id}/messages"), None, body)
        .await
}

fn roles(c: &ConversationDetail) -> Vec<String> {
    c.messages
        .iter()
        .map(|m| format!("{}:{}", m.role, m.status))
        .collect()
}

/// A reply's steps (the answer carries them as JSON text).
fn steps(m: &MessageInfo) -> Vec<TranscriptStep> {
    m.steps.parse().expect("the reply's steps")
}

/// The text each step opens with ("" for a step that opens with none).
fn step_texts(m: &MessageInfo) -> Vec<String> {
    steps(m)
        .iter()
        .map(|s| match s {
            TranscriptStep::Action { content } => match content.first() {
                Some(ActionContent::Text { text }) => text.clone(),
                _ => String::new(),
            },
            TranscriptStep::ToolResult { .. } => String::new(),
        })
        .collect()
}

e2e!(contract_scenarios, |kind| async move {
    let mut env = Env::new(kind);
    let config = agent_config(&env);
    env.with_config_file(&config);
    let s = Server::start(&env).await;
    let conv = setup(&s, "chat").await;

    // 1. Send in an idle conversation: processing, then idle with the reply.
    let (st, sent) = send(&s, &conv, json!({ "text": "quick question" })).await;
    assert_eq!(st, 201, "{sent:?}");
    assert_eq!(sent.conversation.state, "processing");
    let c = idle(&s, &conv).await;
    assert_eq!(roles(&c), ["user:sent", "agent:done"]);
    assert_eq!(step_texts(&c.messages[1]), ["step 1 of 2", "step 2 of 2"]);
    assert_eq!(c.messages[1].text.as_deref(), Some("answered in 2 steps"));
    let session = c.agent_session_id.clone().expect("agent session captured");
    // The reply's run carries the resource as its channel (the Workers page).
    let client = s.client(None);
    let run_id = c.messages[1].run_id.as_deref().unwrap();
    let (run, _) = client.run(run_id).await.expect("the reply's run");
    assert_eq!(run.run.channel_id.as_deref(), Some("table-1"));

    // 2. Cancel while processing: partial steps kept, the process is gone.
    let (st, _) = send(&s, &conv, json!({ "text": "slow research" })).await;
    assert_eq!(st, 201);
    steps_at_least(&s, &conv, 3).await;
    let (st, after) = s
        .post_as::<ConversationInfo>(
            &format!("/api/v1/conversations/{conv}/cancel"),
            None,
            json!({ "reason": "enough" }),
        )
        .await;
    assert_eq!((st, after.state.as_str()), (200, "cancelled"), "{after:?}");
    // Cancelled lasts until the run has ended (the agent takes a second to stop).
    let (st, busy) = try_send(&s, &conv, json!({ "text": "quick" })).await;
    assert_eq!(
        (st, busy["error"]["code"].as_str()),
        (409, Some("conversation_busy")),
        "{busy}"
    );
    let c = idle(&s, &conv).await;
    let reply = &c.messages[3];
    assert_eq!(reply.status, "cancelled");
    let texts = step_texts(reply);
    assert!(texts.len() >= 4, "{texts:?}");
    assert_eq!(texts[0], "step 1 of 40");
    assert!(
        texts.iter().any(|t| t == "stopping after cancel"),
        "the step sent while stopping is kept: {texts:?}"
    );
    let pids: Vec<i32> = std::fs::read_to_string(env.dir.join("pids.log"))
        .unwrap()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert!(!alive(*pids.last().unwrap()), "the cancelled agent is gone");

    // The follow-ups resumed the agent's own session with continue_args.
    let argv = std::fs::read_to_string(env.dir.join("argv.log")).unwrap();
    let lines: Vec<&str> = argv.lines().collect();
    assert_eq!(lines[0], "", "the first message runs the plain command");
    assert_eq!(lines[1], format!("[--resume][{session}]"));
    let prompts = std::fs::read_to_string(env.dir.join("prompts.log")).unwrap();
    let prompts: Vec<&str> = prompts.split("\n@@END@@\n").collect();
    assert_eq!(
        prompts[1], "slow research",
        "a continued agent gets the new message alone"
    );

    // 3. New chat while processing: an implicit cancel, the old one preserved.
    let (st, _) = send(&s, &conv, json!({ "text": "slow again" })).await;
    assert_eq!(st, 201);
    steps_at_least(&s, &conv, 2).await;
    let fresh = new_chat(&s).await;
    let old = conversation(&s, &conv).await;
    assert_eq!((old.state.as_str(), old.active), ("cancelled", false));
    let old = idle(&s, &conv).await;
    assert_eq!(old.messages[5].status, "cancelled");
    assert!(step_texts(&old.messages[5]).len() >= 2);
    let mut q = ConversationsQuery {
        limit: Some(1),
        page: None,
    };
    let page = client.conversations("table-1", &q).await.unwrap();
    assert_eq!(page.conversations[0].id, fresh);
    q.page = Some(page.next.clone().unwrap());
    let page2 = client.conversations("table-1", &q).await.unwrap();
    assert_eq!(page2.conversations[0].id, conv);
    assert!(page2.next.is_none());

    // 4. Send while processing: refused by default; enqueue and interrupt on request.
    let (st, _) = send(&s, &fresh, json!({ "text": "medium work" })).await;
    assert_eq!(st, 201);
    let (st, e) = try_send(&s, &fresh, json!({ "text": "quick" })).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("conversation_busy"))
    );
    let (st, q) = send(
        &s,
        &fresh,
        json!({ "text": "quick after", "multitask": "enqueue" }),
    )
    .await;
    assert_eq!((st, q.message.status.as_str()), (201, "queued"), "{q:?}");
    let c = wait_for("both replies", Duration::from_secs(30), || async {
        let c = conversation(&s, &fresh).await;
        (c.state == "idle" && c.messages.len() == 4).then_some(c)
    })
    .await;
    assert_eq!(
        roles(&c),
        ["user:sent", "agent:done", "user:sent", "agent:done"]
    );
    let (st, _) = send(&s, &fresh, json!({ "text": "slow one" })).await;
    assert_eq!(st, 201);
    steps_at_least(&s, &fresh, 2).await;
    let (st, i) = send(
        &s,
        &fresh,
        json!({ "text": "quick instead", "multitask": "interrupt" }),
    )
    .await;
    assert_eq!(
        (st, i.conversation.state.as_str()),
        (201, "cancelled"),
        "{i:?}"
    );
    let c = wait_for(
        "the interrupting reply",
        Duration::from_secs(30),
        || async {
            let c = conversation(&s, &fresh).await;
            (c.state == "idle" && c.messages.len() == 8).then_some(c)
        },
    )
    .await;
    assert_eq!(
        roles(&c)[4..],
        ["user:sent", "agent:cancelled", "user:sent", "agent:done"]
    );
    let (st, e) = try_send(&s, &fresh, json!({ "text": "x", "multitask": "sometimes" })).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (422, Some("invalid_body"))
    );
    let (st, e) = s
        .post(
            &format!("/api/v1/conversations/{fresh}/cancel"),
            None,
            json!({}),
        )
        .await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("conversation_idle"))
    );
    let (st, e) = s.get("/api/v1/conversations/nope", None).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("conversation_not_found"))
    );

    // The resource's runs, by channel; a channel with none gives an empty list.
    let (st, runs) = s
        .get_as::<RunList>("/api/v1/runs?channel_id=table-1", None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(runs.total, 7, "{runs:?}");
    let elsewhere = RunsQuery {
        channel_id: Some("elsewhere".into()),
        ..Default::default()
    };
    let none = client.runs(&elsewhere).await.unwrap();
    assert_eq!(none.runs.len(), 0);
    let of = |channel: &str| TaskListQuery {
        channel_id: Some(channel.into()),
        ..Default::default()
    };
    let tasks = client.tasks(&of("table-1")).await.unwrap();
    assert_eq!(tasks.total, 7);
    let none = client.tasks(&of("elsewhere")).await.unwrap();
    assert_eq!(none.total, 0);
    let (st, e) = s.get("/api/v1/tasks?chanel_id=table-1", None).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );
    let (st, _) = s.get("/api/v1/runs?bogus=1", None).await;
    assert_eq!(st, 400);
    s.stop().await;
});

e2e!(load_then_tail_delivers_each_step_once, |kind| async move {
    let mut env = Env::new(kind);
    let config = agent_config(&env);
    env.with_config_file(&config);
    let s = Server::start(&env).await;
    let conv = setup(&s, "chat").await;
    let (st, _) = send(&s, &conv, json!({ "text": "slow research" })).await;
    assert_eq!(st, 201);
    // Load (DB first)...
    let loaded = steps_at_least(&s, &conv, 2).await;
    let cursor = loaded.cursor;
    let run_id = loaded.active_run_id.clone().expect("a running reply");
    let have = steps(&loaded.messages[1]).len();
    // ...a step commits between the two reads...
    let client = s.client(None);
    wait_for("a step after the load", Duration::from_secs(30), || async {
        let page = client
            .steps(&run_id, &StepsQuery::default())
            .await
            .expect("the run's steps");
        (page.steps.len() > have).then_some(page)
    })
    .await;
    // ...then tail from the cursor: every later step exactly once.
    let mut sse = SseClient::connect(
        &s.base,
        &format!("/api/events?after={cursor}&conversation_id={conv}"),
        None,
        None,
    )
    .await;
    let (st, _) = s
        .post(
            &format!("/api/v1/conversations/{conv}/cancel"),
            None,
            json!({}),
        )
        .await;
    assert_eq!(st, 200);
    let mut indexes = Vec::new();
    loop {
        let f = sse
            .next(Duration::from_secs(30))
            .await
            .expect("events until idle");
        let e: WireEvent = serde_json::from_value(f.data.clone()).expect("an event");
        assert_eq!(
            e.event.refs.conversation_id.as_deref(),
            Some(conv.as_str()),
            "{e:?}"
        );
        assert!(f.id.unwrap() > cursor);
        if e.event.kind == "run.step" {
            let step: RunStep = serde_json::from_value(e.event.data).unwrap();
            indexes.push(step.index);
        } else if e.event.kind == "conversation.state_changed" {
            let change: ConversationStateChanged = serde_json::from_value(e.event.data).unwrap();
            if change.to == "idle" {
                break;
            }
        }
    }
    let c = conversation(&s, &conv).await;
    let total = steps(&c.messages[1]).len() as i64;
    let expected: Vec<i64> = (have as i64..total).collect();
    assert_eq!(indexes, expected, "loaded {have}, tailed the rest once");
    s.stop().await;
});

e2e!(concurrent_sends_accept_one, |kind| async move {
    let mut env = Env::new(kind);
    let config = agent_config(&env);
    env.with_config_file(&config);
    let s = Server::start(&env).await;
    let conv = setup(&s, "chat").await;
    let mut handles = Vec::new();
    for i in 0..32 {
        let (http, url) = (
            s.http.clone(),
            s.url(&format!("/api/v1/conversations/{conv}/messages")),
        );
        handles.push(tokio::spawn(async move {
            let r = http
                .post(url)
                .json(&json!({ "text": format!("quick {i}") }))
                .send()
                .await
                .unwrap();
            let st = r.status().as_u16();
            (st, r.json::<Value>().await.unwrap())
        }));
    }
    let mut accepted = 0;
    for h in handles {
        let (st, b) = h.await.unwrap();
        match st {
            201 => accepted += 1,
            409 => assert_eq!(b["error"]["code"], "conversation_busy"),
            other => panic!("unexpected {other}: {b}"),
        }
    }
    assert_eq!(accepted, 1);
    let c = idle(&s, &conv).await;
    assert_eq!(roles(&c), ["user:sent", "agent:done"]);
    s.stop().await;
});

e2e!(
    without_continue_args_the_spec_carries_the_history,
    |kind| async move {
        let mut env = Env::new(kind);
        let config = agent_config(&env);
        env.with_config_file(&config);
        let s = Server::start(&env).await;
        let conv = setup(&s, "plain").await;
        try_send(&s, &conv, json!({ "text": "first question" })).await;
        idle(&s, &conv).await;
        try_send(&s, &conv, json!({ "text": "second question" })).await;
        idle(&s, &conv).await;
        let argv = std::fs::read_to_string(env.dir.join("argv.log")).unwrap();
        assert_eq!(argv, "\n\n", "no continue arguments");
        let prompts = std::fs::read_to_string(env.dir.join("prompts.log")).unwrap();
        let second = prompts.split("\n@@END@@\n").nth(1).unwrap();
        assert!(second.contains("first question"), "{second}");
        assert!(second.contains("answered in 2 steps"), "{second}");
        assert!(second.ends_with("second question"), "{second}");
        s.stop().await;
    }
);

// ----- the real binary, killed mid-reply -----

/// `shepherd serve` on `listen` (`127.0.0.1:0` first, then the port the
/// first run chose, so that a restart is found at the same address).
fn spawn(env: &Env, listen: &str) -> Served {
    Served::spawn(
        env.serve_command()
            .env("SHEPHERD_LISTEN", listen)
            .stderr(Stdio::inherit()),
    )
}

/// Any JSON answer at `path`; None while the server is not up yet.
async fn get(base: &str, path: &str) -> Option<Value> {
    let r = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

e2e!(
    server_killed_mid_reply_keeps_acknowledged_steps,
    |kind| async move {
        let mut env = Env::new(kind);
        let config = agent_config(&env);
        env.with_config_file(&config);
        let mut child = spawn(&env, "127.0.0.1:0");
        let (base, addr) = (child.base.clone(), child.addr.to_string());
        wait_for("the server", Duration::from_secs(20), || async {
            get(&base, "/readyz").await.map(|_| json!(true))
        })
        .await;
        // No retries of its own: the polls below try again while the server is down.
        let client = shepherd_client::Client::new(&base, None)
            .unwrap()
            .with_retries(0);
        let r = client
            .upsert_resource(&ResourceBody {
                id: "table-1".into(),
                name: "Leads".into(),
                agent_id: "chat".into(),
            })
            .await
            .unwrap();
        assert_eq!(r.id, "table-1");
        let conv = client.create_conversation("table-1").await.unwrap().id;
        let body = SendBody {
            text: "slow research".into(),
            multitask: MultitaskMode::default(),
        };
        client.send_message(&conv, &body).await.unwrap();
        let before = wait_for("steps before the kill", Duration::from_secs(30), || async {
            let c = client.conversation(&conv).await.ok()?;
            (steps(c.messages.get(1)?).len() >= 3).then_some(c)
        })
        .await;
        let acknowledged = step_texts(&before.messages[1]);
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.pid(), libc::SIGKILL) };
        child.child.wait().unwrap();
        let mut child = spawn(&env, &addr);
        let settled = wait_for(
            "the conversation to settle",
            Duration::from_secs(60),
            || async {
                let c = client.conversation(&conv).await.ok()?;
                (c.state == "idle").then_some(c)
            },
        )
        .await;
        // Every step acknowledged before the kill is there, in the first reply.
        let first = &settled.messages[1];
        let kept = step_texts(first);
        assert!(
            kept.len() >= acknowledged.len(),
            "{kept:?} vs {acknowledged:?}"
        );
        assert_eq!(kept[..acknowledged.len()], acknowledged[..]);
        assert_ne!(first.status, "running", "no run is left running");
        // Then it settled: the task went back to the queue and a second run answered.
        let last = settled.messages.last().unwrap().clone();
        assert_eq!(last.role, "agent");
        assert!(
            last.status == "done" || last.text.as_deref().is_some_and(|t| !t.is_empty()),
            "settles with a reason: {last:?}"
        );
        unsafe { libc::kill(child.pid(), libc::SIGTERM) };
        child.child.wait().unwrap();
    }
);

// ----- the command line -----

async fn cli(base: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let (base, args, stdin): (String, Vec<String>, String) = (
        base.to_owned(),
        args.iter().map(|a| a.to_string()).collect(),
        stdin.to_owned(),
    );
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(&args)
            .env("SHEPHERD_SERVER", &base)
            .env_remove("SHEPHERD_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_line_chat_and_conversation_verbs() {
    let mut env = Env::new(common::Kind::Sqlite);
    let config = agent_config(&env);
    env.with_config_file(&config);
    let s = Server::start(&env).await;
    let conv = setup(&s, "chat").await;

    let (ok, out, err) = cli(
        &s.base,
        &[
            "conversation",
            "send",
            &conv,
            "quick from the cli",
            "--wait",
        ],
        "",
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("step 2 of 2"), "{out}");
    assert!(out.contains("agent: answered in 2 steps"), "{out}");

    let (ok, out, err) = cli(&s.base, &["conversation", "show", &conv, "-o", "json"], "").await;
    assert!(ok, "{err}");
    let shown: ConversationDetail = serde_json::from_str(&out).unwrap();
    assert_eq!(roles(&shown), ["user:sent", "agent:done"]);

    let (ok, out, _) = cli(
        &s.base,
        &["conversation", "list", "table-1", "-o", "json"],
        "",
    )
    .await;
    assert!(ok);
    let list: ConversationPage = serde_json::from_str(&out).unwrap();
    assert_eq!(list.conversations[0].id, conv);

    let (ok, _, err) = cli(&s.base, &["conversation", "cancel", &conv], "").await;
    assert!(!ok);
    assert!(err.contains("conversation_idle"), "{err}");

    // The interactive prompt, fed from a pipe.
    let (ok, out, err) = cli(
        &s.base,
        &["chat", "table-1"],
        "quick via chat\n/history\n/new\n",
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("you: quick from the cli"),
        "history shown first: {out}"
    );
    assert!(out.contains("agent: answered in 2 steps"), "{out}");
    assert!(out.contains("new conversation"), "{out}");
    let page = s
        .client(None)
        .conversations("table-1", &ConversationsQuery::default())
        .await
        .unwrap();
    assert_eq!(page.conversations.len(), 2);
    let c = conversation(&s, &conv).await;
    assert_eq!(
        roles(&c),
        ["user:sent", "agent:done", "user:sent", "agent:done"]
    );

    // /history shows times a person reads: local, and how long ago.
    assert!(out.contains("ago)"), "{out}");

    // A unique start of a conversation id names it, as for runs.
    let (ok, out, err) = cli(
        &s.base,
        &["conversation", "show", &conv[..conv.len() - 4]],
        "",
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("conversation {conv}")), "{out}");
    let (ok, _, err) = cli(&s.base, &["conversation", "show", "zzzzzzzz"], "").await;
    assert!(!ok && err.contains("conversation_not_found"), "{err}");

    // /quit while the agent works leaves at once; the reply goes on.
    let (ok, out, err) = cli(&s.base, &["chat", "table-1"], "slow research\n/quit\n").await;
    assert!(ok, "{err}");
    assert!(out.contains("(left; the reply goes on"), "{out}");
    let active = s.client(None).resources().await.unwrap().resources[0]
        .active_conversation_id
        .clone()
        .unwrap();
    // Still working when chat has exited: it did not wait for the reply.
    assert_eq!(conversation(&s, &active).await.state, "processing");
    idle(&s, &active).await;

    let (ok, _, err) = cli(&s.base, &["chat", "no-such-table"], "").await;
    assert!(!ok);
    assert!(err.contains("no resource"), "{err}");
    s.stop().await;
}
