//! No line of an agent's transcript is lost or doubled when the process
//! reading it dies outright: agents in each transcript format print
//! numbered answers (in bursts, with quiet gaps, `text` on both of its
//! streams) while the server that runs them (the built-in runner), or a
//! `shepherd runner` on its own, is killed with SIGKILL again and again;
//! once they end, each run's steps hold every answer exactly once, in order.

mod common;

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use shepherd_protocol::{ActionContent, RunsQuery, StepsPage, StepsQuery, TranscriptStep};

use common::{wait_for, wait_ready, Env, Kind, Proc, Served};

/// Answers each agent prints.
const ANSWERS: u32 = 60;
/// How many times the reading process is killed during the runs.
const KILLS: usize = 3;

/// The agents: name, transcript format, and the shell command that prints
/// answer `$i` in that format.
const AGENTS: [(&str, &str, &str); 4] = [
    (
        "plain",
        "text",
        // Every fifth answer on standard error, which `text` reads too.
        r#"if [ $((i % 5)) -eq 0 ]; then echo "answer $i" >&2; else echo "answer $i"; fi"#,
    ),
    (
        "steps",
        "steps-jsonl",
        r#"echo "{\"type\":\"action\",\"content\":[{\"type\":\"text\",\"text\":\"answer $i\"}]}""#,
    ),
    (
        "claude",
        "claude-stream-json",
        r#"echo "{\"type\":\"assistant\",\"message\":{\"id\":\"m$i\",\"content\":[{\"type\":\"text\",\"text\":\"answer $i\"}]}}""#,
    ),
    (
        "codex",
        "codex-json",
        r#"echo "{\"type\":\"item.completed\",\"item\":{\"id\":\"i$i\",\"type\":\"agent_message\",\"text\":\"answer $i\"}}""#,
    ),
];

/// The configuration holding the four agents, each printing its answers
/// in bursts of three with a quiet gap (longer than the runner's) after each.
fn agents_config(env: &Env) -> String {
    let mut toml = String::new();
    for (name, format, print) in AGENTS {
        let script = env.script(
            &format!("{name}.sh"),
            &format!(
                "i=1\nwhile [ $i -le {ANSWERS} ]; do\n  {print}\n  \
                 if [ $((i % 3)) -eq 0 ]; then sleep 0.7; else sleep 0.05; fi\n  \
                 i=$((i + 1))\ndone\n"
            ),
        );
        toml.push_str(&format!(
            "[agents.{name}]\ncommand = [\"sh\", \"{script}\"]\ntranscript = \"{format}\"\n\n"
        ));
    }
    toml
}

/// The number of an `answer N` line.
fn number(answer: &str) -> u32 {
    answer.trim_start_matches("answer ").parse().unwrap_or(0)
}

/// Every `answer N` line in the steps, in order.
fn answers(page: &StepsPage) -> Vec<String> {
    let mut out = Vec::new();
    for step in &page.steps {
        if let TranscriptStep::Action { content } = &step.step {
            for item in content {
                if let ActionContent::Text { text } = item {
                    out.extend(
                        text.lines()
                            .filter(|l| l.starts_with("answer "))
                            .map(str::to_owned),
                    );
                }
            }
        }
    }
    out
}

/// Steps of a run, all of them (far fewer than the page's limit).
const ALL: StepsQuery = StepsQuery {
    after: None,
    limit: Some(1000),
};

/// How many steps each of the four runs holds, by task; empty while the
/// server is away.
async fn steps_so_far(client: &shepherd_client::Client) -> Vec<(String, i64)> {
    let Ok(runs) = client.runs(&RunsQuery::default()).await else {
        return Vec::new();
    };
    let mut counts: Vec<(String, i64)> = runs
        .runs
        .iter()
        .map(|r| (r.vtid.clone(), r.step_count))
        .collect();
    counts.sort();
    counts
}

/// Waits until each of the four runs holds at least two steps more than in
/// `than`: every agent is printing and what it prints is being read, so the
/// next kill lands in the middle of every run.
async fn more_steps(
    client: &shepherd_client::Client,
    than: &[(String, i64)],
) -> Vec<(String, i64)> {
    wait_for("more steps", Duration::from_secs(30), || async {
        let now = steps_so_far(client).await;
        let grown = now.len() == AGENTS.len()
            && now.iter().all(|(vtid, n)| {
                let before = than.iter().find(|(v, _)| v == vtid).map_or(0, |b| b.1);
                *n >= before + 2
            });
        grown.then_some(now)
    })
    .await
}

/// Posts one task per agent; `external` ones wait for a `shepherd runner`.
async fn submit(http: &reqwest::Client, base: &str, external: bool) {
    for (name, _, _) in AGENTS {
        let r = http
            .post(format!("{base}/api/v1/tasks"))
            .json(&json!({
                "vtid": format!("CT-{name}"),
                "title": format!("answers from {name}"),
                "spec": "print the answers",
                "agent_id": name,
                "external": external,
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
    }
}

/// Waits for the four tasks to be done, then checks every run's answers.
async fn every_answer_once(client: &shepherd_client::Client) {
    for (name, format, _) in AGENTS {
        let vtid = format!("CT-{name}");
        let done = wait_for("the task to be done", Duration::from_secs(90), || async {
            let (t, _) = client.task(&vtid).await.ok()?;
            matches!(t.task.state.as_str(), "done" | "failed").then_some(t)
        })
        .await;
        assert_eq!(done.task.state, "done", "{format}: {:?}", done.task);
        let runs = client
            .runs(&RunsQuery {
                vtid: Some(vtid.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(runs.runs.len(), 1, "{format}: one run, carried on");
        let page = client.steps(&runs.runs[0].id, &ALL).await.unwrap();
        let got = answers(&page);
        // Standard output and standard error are two files, read side by
        // side: each stream's lines keep their order, not the two together.
        let on_err = |a: &String| format == "text" && number(a).is_multiple_of(5);
        let want: Vec<String> = (1..=ANSWERS).map(|i| format!("answer {i}")).collect();
        for stream in [false, true] {
            let of = |v: &[String]| -> Vec<String> {
                v.iter().filter(|a| on_err(a) == stream).cloned().collect()
            };
            assert_eq!(
                of(&got),
                of(&want),
                "{format}: every answer exactly once, in order (stderr: {stream}); all: {got:?}"
            );
        }
        assert_eq!(got.len(), want.len(), "{format}: {got:?}");
    }
}

/// `shepherd serve` running the agents itself, killed with SIGKILL while
/// they print, and started again on the same address each time.
async fn server_killed(kind: Kind) {
    let mut env = Env::new(kind);
    let config = agents_config(&env);
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "60")
        .set("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
        .with_config_file(&config);
    let spawn = |listen: &str| {
        Served::spawn(
            env.serve_command()
                .env("SHEPHERD_LISTEN", listen)
                .stderr(Stdio::inherit()),
        )
    };
    let http = reqwest::Client::new();
    let mut server = spawn("127.0.0.1:0");
    let (base, addr) = (server.base.clone(), server.addr.to_string());
    wait_ready(&http, &base).await;
    // No retries of its own: the waits try again while the server is down.
    let client = shepherd_client::Client::new(&base, None)
        .unwrap()
        .with_retries(0);
    submit(&http, &base, false).await;
    let mut seen = Vec::new();
    for _ in 0..KILLS {
        seen = more_steps(&client, &seen).await;
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        // The agents print on meanwhile, and the quiet gaps pass.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        server = spawn(&addr);
        wait_ready(&http, &base).await;
    }
    every_answer_once(&client).await;
    drop(server);
}

e2e!(
    answers_survive_repeated_kills_of_the_server,
    |kind| async move { server_killed(kind).await }
);

/// A `shepherd runner` on its own data directory, killed with SIGKILL
/// while its agents print, and started again each time; the server stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_survive_repeated_kills_of_a_runner() {
    let env = Env::new(Kind::Sqlite);
    let mut runner_env = Env::new(Kind::Sqlite);
    let config = agents_config(&runner_env);
    runner_env.with_config_file(&config);
    let server = Served::spawn(env.serve_command().stderr(Stdio::inherit()));
    let base = server.base.clone();
    let http = reqwest::Client::new();
    wait_ready(&http, &base).await;
    let client = shepherd_client::Client::new(&base, None)
        .unwrap()
        .with_retries(0);
    let data = runner_env.dir.join("runner-data");
    let spawn_runner = || {
        Proc(
            std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
                .args(["runner", "--server", &base, "--data-dir"])
                .arg(&data)
                .envs(&runner_env.vars)
                .env("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        )
    };
    submit(&http, &base, true).await;
    let mut runner = spawn_runner();
    let mut seen = Vec::new();
    for _ in 0..KILLS {
        seen = more_steps(&client, &seen).await;
        runner.0.kill().unwrap();
        runner.0.wait().unwrap();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        runner = spawn_runner();
    }
    every_answer_once(&client).await;
    drop(runner);
    drop(server);
}
