//! Worktree agents with a real git repository made in a temp directory and
//! scripted agents: concurrent runs get their own worktrees and branches and
//! do not see each other's files; each branch holds the agent's changes,
//! uncommitted ones included; the worktree is gone after the run and after
//! its runner is killed with SIGKILL; a repo that is not a git repository or
//! a base that does not exist fails the run with its reason; the run records
//! its workspace, the diff route and `shepherd runs diff` serve its branch,
//! and `shepherd prune --branches-older-than` removes old branches.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use shepherd_protocol::{
    ClaimResponse, ConversationInfo, RegisterResponse, ResourceInfo, RunDiff, RunsQuery,
    SendResponse, Task,
};

use common::typed::{runs_of, task_in};
use common::{wait_for, Env, Kind, Proc, Server};

/// Runs git in `dir`; its trimmed stdout, or None when it fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A repository on branch `main` with one commit.
fn make_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]).expect("git init");
    std::fs::write(repo.join("README"), "base\n").unwrap();
    git(&repo, &["add", "README"]).unwrap();
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "base",
        ],
    )
    .expect("first commit");
    repo
}

/// Creates a task; the status and the task.
async fn create(s: &Server, token: Option<&str>, body: Value) -> (u16, Task) {
    s.post_as("/api/v1/tasks", token, body).await
}

/// The worktrees git knows for `repo` (the main checkout included).
fn worktrees(repo: &Path) -> usize {
    git(repo, &["worktree", "list", "--porcelain"])
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_work_in_their_own_worktrees_and_branches() {
    let mut env = Env::new(Kind::Sqlite);
    let repo = make_repo(&env.dir);
    let marks = env.dir.join("marks");
    std::fs::create_dir_all(marks.join("started")).unwrap();
    // Each run commits one file and leaves another uncommitted, then waits
    // until both runs are in their worktrees and notes what it sees.
    let script = env.script(
        "agent.sh",
        &format!(
            r#"cat > /dev/null
set -e
echo "$SHEPHERD_TASK_ID" > "own-$SHEPHERD_TASK_ID.txt"
git add "own-$SHEPHERD_TASK_ID.txt"
git -c user.name=agent -c user.email=agent@t commit -qm "agent work on $SHEPHERD_TASK_ID"
echo left > "left-$SHEPHERD_TASK_ID.txt"
touch "{m}/started/$SHEPHERD_TASK_ID"
for i in $(seq 1 300); do [ "$(ls {m}/started | wc -l)" -ge 2 ] && break; sleep 0.1; done
ls > "{m}/$SHEPHERD_TASK_ID.seen"
pwd > "{m}/$SHEPHERD_TASK_ID.pwd"
echo "$SHEPHERD_WORKSPACE_BRANCH" > "{m}/$SHEPHERD_TASK_ID.branch"
"#,
            m = marks.display()
        ),
    );
    env.with_config_file(&format!(
        "[agents.coder]\ncommand = [\"bash\", \"{script}\"]\nmax_concurrent = 2\nworkspace = \"worktree\"\nrepo = \"{}\"\n",
        repo.display()
    ));
    let s = Server::start(&env).await;
    for vtid in ["WT-1", "WT-2"] {
        let (st, b) = create(
            &s,
            None,
            json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": "coder" }),
        )
        .await;
        assert_eq!(st, 201, "{b:?}");
    }
    for vtid in ["WT-1", "WT-2"] {
        let t = task_in(&s, vtid, &["done", "failed"], Duration::from_secs(60)).await;
        assert_eq!(t.task.state, "done", "{t:?}");
    }
    let read = |f: String| std::fs::read_to_string(marks.join(f)).unwrap();
    let (pwd1, pwd2) = (read("WT-1.pwd".into()), read("WT-2.pwd".into()));
    assert_ne!(pwd1, pwd2, "each run has its own worktree");
    for (me, other, pwd) in [("WT-1", "WT-2", &pwd1), ("WT-2", "WT-1", &pwd2)] {
        let pwd = PathBuf::from(pwd.trim());
        assert!(
            pwd.starts_with(env.dir.join("worktrees")),
            "{pwd:?} is under the data directory"
        );
        assert!(!pwd.exists(), "the worktree {pwd:?} is gone after the run");
        let seen = read(format!("{me}.seen"));
        assert!(seen.contains(&format!("own-{me}.txt")), "{seen}");
        assert!(seen.contains("README"), "the worktree starts from base");
        assert!(
            !seen.contains(other),
            "{me} saw the other run's files: {seen}"
        );
        let branch = format!("shepherd/{me}-1");
        assert_eq!(read(format!("{me}.branch")).trim(), branch);
        // The branch holds the committed file and the uncommitted one.
        assert_eq!(
            git(&repo, &["show", &format!("{branch}:own-{me}.txt")]).as_deref(),
            Some(me)
        );
        assert_eq!(
            git(&repo, &["show", &format!("{branch}:left-{me}.txt")]).as_deref(),
            Some("left"),
            "uncommitted changes are committed to the branch"
        );
        assert!(git(&repo, &["show", &format!("{branch}:own-{other}.txt")]).is_none());
        let runs = runs_of(&s, me).await;
        let run_id = runs[0].id.as_str();
        let message = git(&repo, &["log", "-1", "--format=%s", &branch]).unwrap();
        assert!(message.contains(run_id), "{message} names the run");
        assert_eq!(
            git(&repo, &["rev-parse", &format!("{branch}~2")]),
            git(&repo, &["rev-parse", "main"]),
            "the branch starts at base"
        );
        // The run's end records its workspace.
        let (task, _) = s.client(None).task(me).await.unwrap();
        let completed: Vec<_> = task
            .events
            .iter()
            .filter(|e| e.kind == "worker.execution.completed")
            .collect();
        let text = format!("{completed:?}");
        assert!(text.contains(&branch), "{text}");
        let head = git(&repo, &["rev-parse", &branch]).unwrap();
        assert!(text.contains(&head), "the head commit is recorded: {text}");
    }
    assert_eq!(worktrees(&repo), 1, "only the main checkout is left");
    assert!(
        git(&repo, &["status", "--porcelain"]).unwrap().is_empty(),
        "the main checkout is untouched"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repo_that_is_not_git_or_a_missing_base_fails_the_run_with_its_reason() {
    let mut env = Env::new(Kind::Sqlite);
    let repo = make_repo(&env.dir);
    let plain = env.dir.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    env.with_config_file(&format!(
        r#"
[agents.nogit]
command = ["bash", "-c", "cat > /dev/null; echo ran"]
workspace = "worktree"
repo = "{plain}"
[agents.nobase]
command = ["bash", "-c", "cat > /dev/null; echo ran"]
workspace = "worktree"
repo = "{repo}"
base = "no-such-branch"
"#,
        plain = plain.display(),
        repo = repo.display()
    ));
    let s = Server::start(&env).await;
    for (vtid, agent) in [("NG-1", "nogit"), ("NB-1", "nobase")] {
        let (st, b) = create(
            &s,
            None,
            json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": agent }),
        )
        .await;
        assert_eq!(st, 201, "{b:?}");
    }
    for (vtid, reason) in [
        ("NG-1", "is not a git repository"),
        ("NB-1", "\"no-such-branch\" does not exist"),
    ] {
        task_in(&s, vtid, &["failed"], Duration::from_secs(30)).await;
        let runs = runs_of(&s, vtid).await;
        let result = runs[0].result.as_deref().unwrap_or_default();
        assert_eq!(runs[0].status, "failed");
        assert!(result.contains(reason), "{vtid}: {result}");
    }
    assert_eq!(
        git(&repo, &["branch", "--list", "shepherd/*"]).unwrap(),
        "",
        "no branch for runs that never started"
    );
    s.stop().await;
}

fn spawn_runner(env: &Env, server: &str, data: &Path) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .args(["runner", "--server", server, "--data-dir"])
            .arg(data)
            .envs(&env.vars)
            .env("SHEPHERD_RUNNER_HEARTBEAT_SECS", "1")
            .env("SHEPHERD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_left_by_a_killed_runner_is_committed_and_removed_at_the_next_start() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "120")
        .set("SHEPHERD_SWEEP_INTERVAL_SECS", "1");
    let repo = make_repo(&env.dir);
    let started = env.dir.join("started");
    // The first attempt writes a file and hangs; the second finishes.
    let script = env.script(
        "agent.sh",
        &format!(
            "cat > /dev/null\nif [ ! -e {m} ]; then echo partial > partial.txt; pwd > {m}; sleep 60; fi\necho second > second.txt\n",
            m = started.display()
        ),
    );
    let server = Server::start(&env).await;
    let mut runner_env = Env::new(Kind::Sqlite);
    runner_env.with_config_file(&format!(
        "[agents.coder]\ncommand = [\"bash\", \"{script}\"]\nworkspace = \"worktree\"\nrepo = \"{}\"\n",
        repo.display()
    ));
    let data = env.dir.join("runner-data");
    server
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "CR-1", "title": "crash", "agent_id": "coder", "external": true }),
        )
        .await;
    let mut a = spawn_runner(&runner_env, &server.base, &data);
    wait_for(
        "the first attempt to start",
        Duration::from_secs(20),
        || async { started.exists().then_some(Value::Null) },
    )
    .await;
    let first = PathBuf::from(std::fs::read_to_string(&started).unwrap().trim());
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    assert!(first.exists(), "a SIGKILLed runner leaves its worktree");
    // The host went down with it: the agent's shim and group are gone too,
    // so the next runner cannot carry the run on (a live shim it would).
    let runs_dir = data.join("runner").join("runs");
    let run_dir = std::fs::read_dir(&runs_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let pid_in = |name: &str| -> i32 {
        std::fs::read_to_string(run_dir.join(name))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (shim, agent) = (pid_in("shim"), pid_in("agent"));
    // SAFETY: plain kill(2) calls on processes this test started.
    unsafe {
        libc::kill(shim, libc::SIGKILL);
        libc::kill(-agent, libc::SIGKILL);
    }
    wait_for("the shim to die", Duration::from_secs(10), || async {
        (!std::path::Path::new(&format!("/proc/{shim}")).exists()
            || std::fs::read_to_string(format!("/proc/{shim}/stat"))
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(true))
        .then_some(Value::Null)
    })
    .await;
    let _b = spawn_runner(&runner_env, &server.base, &data);
    task_in(&server, "CR-1", &["done"], Duration::from_secs(30)).await;
    assert!(!first.exists(), "the next runner removed {first:?}");
    assert_eq!(
        git(&repo, &["show", "shepherd/CR-1-1:partial.txt"]).as_deref(),
        Some("partial"),
        "the lost run's changes are kept on its branch"
    );
    assert_eq!(
        git(&repo, &["show", "shepherd/CR-1-2:second.txt"]).as_deref(),
        Some("second")
    );
    assert_eq!(worktrees(&repo), 1);
    server.stop().await;
}

/// Runs the `shepherd` binary with the test's environment; (success, stdout).
fn shepherd(env: &Env, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(args)
        .envs(&env.vars)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), text)
}

/// The run records its workspace; the diff route and `shepherd runs diff`
/// serve the branch against its base; `shepherd prune --branches-older-than`
/// removes the branch of an ended run; each missing piece has its code.
async fn workspace_diff_and_prune(kind: Kind) {
    let mut env = Env::new(kind);
    let repo = make_repo(&env.dir);
    let script = env.script(
        "agent.sh",
        "cat > /dev/null\necho changed > README\necho new > added.txt\n",
    );
    env.with_config_file(&format!(
        "[agents.coder]\ncommand = [\"bash\", \"{script}\"]\nworkspace = \"worktree\"\nrepo = \"{}\"\n\
         [agents.plain]\ncommand = [\"bash\", \"-c\", \"cat > /dev/null; echo hi\"]\n",
        repo.display()
    ));
    let s = Server::start(&env).await;
    for (vtid, agent) in [("D-1", "coder"), ("P-1", "plain")] {
        let (st, b) = create(
            &s,
            None,
            json!({ "vtid": vtid, "title": vtid, "spec": "go", "agent_id": agent }),
        )
        .await;
        assert_eq!(st, 201, "{b:?}");
    }
    for vtid in ["D-1", "P-1"] {
        let t = task_in(&s, vtid, &["done", "failed"], Duration::from_secs(60)).await;
        assert_eq!(t.task.state, "done", "{t:?}");
    }
    let run = runs_of(&s, "D-1").await[0].clone();
    let id = run.id.clone();
    let base_commit = git(&repo, &["rev-parse", "main"]).unwrap();
    let head = git(&repo, &["rev-parse", "shepherd/D-1-1"]).unwrap();
    // Raw: the whole record on the wire, no key more or less.
    let (_, detail) = s.get(&format!("/api/v1/runs/{id}"), None).await;
    assert_eq!(
        detail["run"]["workspace"],
        json!({ "branch": "shepherd/D-1-1", "base": "main", "base_commit": base_commit,
                "head": head, "repo": repo.display().to_string() }),
        "{detail}"
    );
    assert_eq!(
        run.workspace.as_ref().map(|w| w.branch.as_str()),
        Some("shepherd/D-1-1"),
        "lists carry it too"
    );

    let (st, d) = s
        .get_as::<RunDiff>(&format!("/api/v1/runs/{id}/diff"), None)
        .await;
    assert_eq!(st, 200, "{d:?}");
    assert_eq!(d.head, head);
    let diff = &d.diff;
    assert!(
        diff.contains("+changed") && diff.contains("-base"),
        "{diff}"
    );
    assert!(
        diff.contains("+new") && diff.contains("added.txt"),
        "{diff}"
    );
    assert!(d.stat.contains("2 files changed"), "{d:?}");

    // A prefix names the run: the shortest that no other run shares (run
    // ids are time-ordered, so runs started in the same millisecond share
    // most of theirs), and never under 8 characters.
    let q = RunsQuery {
        limit: Some(100),
        ..Default::default()
    };
    let all = s.client(None).runs(&q).await.unwrap();
    let shared = all
        .runs
        .iter()
        .map(|r| r.id.as_str())
        .filter(|other| *other != id)
        .map(|other| {
            other
                .chars()
                .zip(id.chars())
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0);
    let prefix = &id[..(shared + 1).max(8)];
    let (ok, text) = shepherd(&env, &["runs", "diff", prefix, "--server", &s.base]);
    assert!(ok);
    assert!(
        text.contains("+changed") && text.contains("shepherd/D-1-1"),
        "{text}"
    );
    assert!(
        !text.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
    let (_, show) = shepherd(&env, &["runs", "show", &id, "--server", &s.base]);
    assert!(show.contains("branch:  shepherd/D-1-1"), "{show}");

    // Refusals: raw, for their codes.
    let code = |b: &Value| b["error"]["code"].as_str().map(str::to_owned);
    let plain = runs_of(&s, "P-1").await[0].id.clone();
    let (st, b) = s.get(&format!("/api/v1/runs/{plain}/diff"), None).await;
    assert_eq!(
        (st, code(&b).as_deref()),
        (422, Some("run_has_no_workspace"))
    );
    let (st, b) = s.get("/api/v1/runs/no-such-run/diff", None).await;
    assert_eq!((st, code(&b).as_deref()), (404, Some("run_not_found")));

    // A branch younger than the retention stays; an older one goes.
    let (ok, text) = shepherd(&env, &["prune", "--branches-older-than", "1d"]);
    assert!(ok, "{text}");
    assert!(text.contains("pruned 0 branches"), "{text}");
    assert!(git(&repo, &["rev-parse", "--verify", "shepherd/D-1-1"]).is_some());
    let (ok, text) = shepherd(&env, &["prune", "--branches-older-than", "0s"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("removed branch shepherd/D-1-1") && text.contains("pruned 1 branches"),
        "{text}"
    );
    assert!(git(&repo, &["rev-parse", "--verify", "shepherd/D-1-1"]).is_none());
    assert!(
        git(&repo, &["rev-parse", "--verify", "main"]).is_some(),
        "only shepherd/* goes"
    );
    let (st, b) = s.get(&format!("/api/v1/runs/{id}/diff"), None).await;
    assert_eq!(
        (st, code(&b).as_deref()),
        (409, Some("workspace_branch_gone"))
    );
    std::fs::remove_dir_all(&repo).unwrap();
    let (st, b) = s.get(&format!("/api/v1/runs/{id}/diff"), None).await;
    assert_eq!(
        (st, code(&b).as_deref()),
        (409, Some("workspace_repo_gone"))
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_diff_and_prune_on_sqlite() {
    workspace_diff_and_prune(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_diff_and_prune_on_postgres() {
    workspace_diff_and_prune(Kind::Postgres).await;
}

/// A conversation keeps one branch across its turns: the second turn starts
/// from the first turn's work (left uncommitted, committed at its end) and
/// both runs record the same branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_keeps_one_branch_across_its_turns() {
    let mut env = Env::new(Kind::Sqlite);
    let repo = make_repo(&env.dir);
    let marks = env.dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let script = env.script(
        "agent.sh",
        &format!(
            "cat > /dev/null\nn=$(ls | grep -c '^turn-')\nls > {m}/seen-$n\npwd > {m}/pwd-$n\necho \"turn $((n+1))\" > turn-$((n+1)).txt\necho done\n",
            m = marks.display()
        ),
    );
    env.with_config_file(&format!(
        "[agents.coder]\ncommand = [\"bash\", \"{script}\"]\nworkspace = \"worktree\"\nrepo = \"{}\"\n",
        repo.display()
    ));
    let s = Server::start(&env).await;
    let (st, r) = s
        .post_as::<ResourceInfo>(
            "/api/v1/resources",
            None,
            json!({ "id": "repo-1", "name": "Repo", "agent_id": "coder" }),
        )
        .await;
    assert_eq!(st, 201, "{r:?}");
    let (st, c) = s
        .post_as::<ConversationInfo>("/api/v1/resources/repo-1/conversations", None, json!({}))
        .await;
    assert_eq!(st, 201, "{c:?}");
    let conv = c.id;
    let client = s.client(None);
    let mut run_ids = Vec::new();
    for (turn, text) in [(1, "first"), (2, "second")] {
        let (st, b) = s
            .post_as::<SendResponse>(
                &format!("/api/v1/conversations/{conv}/messages"),
                None,
                json!({ "text": text }),
            )
            .await;
        assert_eq!(st, 201, "{b:?}");
        let c = wait_for("the reply", Duration::from_secs(60), || async {
            let c = client.conversation(&conv).await.ok()?;
            (c.state == "idle" && c.messages.len() == turn * 2).then_some(c)
        })
        .await;
        let reply = &c.messages[turn * 2 - 1];
        assert_eq!(reply.status, "done", "{c:?}");
        run_ids.push(reply.run_id.clone().unwrap());
    }
    let seen = std::fs::read_to_string(marks.join("seen-1")).unwrap();
    assert!(
        seen.contains("turn-1.txt"),
        "the second turn starts from the first turn's work: {seen}"
    );
    let (p0, p1) = (
        std::fs::read_to_string(marks.join("pwd-0")).unwrap(),
        std::fs::read_to_string(marks.join("pwd-1")).unwrap(),
    );
    assert!(!PathBuf::from(p0.trim()).exists() && !PathBuf::from(p1.trim()).exists());
    let branch = format!("shepherd/conversation-{conv}");
    for f in ["turn-1.txt", "turn-2.txt"] {
        assert!(
            git(&repo, &["show", &format!("{branch}:{f}")]).is_some(),
            "{f} is on {branch}"
        );
    }
    let base = git(&repo, &["rev-parse", "main"]).unwrap();
    for id in &run_ids {
        let (d, _) = client.run(id).await.unwrap();
        let workspace = d.run.workspace.as_ref();
        assert_eq!(
            workspace.map(|w| w.branch.as_str()),
            Some(branch.as_str()),
            "{d:?}"
        );
        assert_eq!(
            workspace.map(|w| w.base_commit.as_str()),
            Some(base.as_str())
        );
    }
    let diff = client.run_diff(&run_ids[1]).await.unwrap();
    let text = &diff.diff;
    assert!(
        text.contains("+turn 1") && text.contains("+turn 2"),
        "{text}"
    );
    assert_eq!(worktrees(&repo), 1);
    assert_eq!(
        git(&repo, &["branch", "--list", "shepherd/*"])
            .unwrap()
            .lines()
            .count(),
        1,
        "one branch for the whole conversation"
    );
    s.stop().await;
}

/// A worker that holds a claim reports a workspace; returns the answer.
async fn report_workspace(
    s: &Server,
    token: &str,
    vtid: &str,
    claim_token: &str,
    metadata: Value,
) -> (u16, Value) {
    s.post(
        &format!("/api/v1/worker/orchestrator/tasks/{vtid}/progress"),
        Some(token),
        json!({ "event": "worker.building", "claim_token": claim_token, "metadata": metadata }),
    )
    .await
}

/// A worker token is not the operator: the repository, branch and commits
/// it reports for its run reach git only when they are what a configured
/// agent works in and cannot be read as options. Another repository on the
/// host (with a secret committed), reached directly, through a symlink in
/// the configured repository or through `..`, is refused (403
/// `workspace_repo_not_allowed`) to the worker and the operator alike; a
/// `base_commit` of `--output=…` is refused when reported (422
/// `invalid_workspace`) and no file is written; an agent session id that
/// would be an option on the next turn's command line is refused (422
/// `invalid_agent_session_id`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cannot_point_the_diff_at_another_repository_or_hand_git_options() {
    use common::OPERATOR;
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    let repo = make_repo(&env.dir);
    let other = env.dir.join("other");
    let secret = make_repo(&other);
    std::fs::write(secret.join("secret.txt"), "the-secret-value\n").unwrap();
    git(&secret, &["add", "secret.txt"]).unwrap();
    git(
        &secret,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "secret",
        ],
    )
    .unwrap();
    let secret_base = git(&secret, &["rev-parse", "main~1"]).unwrap();
    std::os::unix::fs::symlink(&secret, repo.join("door")).unwrap();
    env.with_config_file(&format!(
        "[agents.coder]\ncommand = [\"bash\", \"-c\", \"cat > /dev/null\"]\nworkspace = \"worktree\"\nrepo = \"{}\"\n",
        repo.display()
    ));
    let s = Server::start(&env).await;
    let op = Some(OPERATOR);
    let (st, b) = s
        .post_as::<RegisterResponse>(
            "/api/v1/worker/orchestrator/register",
            op,
            json!({ "worker_id": "intruder", "capabilities": ["intrude"], "max_concurrent": 4 }),
        )
        .await;
    assert_eq!(st, 200, "{b:?}");
    let token = b.worker_token;
    // Tasks only this worker can take (the built-in agent lacks the capability).
    let mut claims = Vec::new();
    for vtid in ["IN-1", "IN-2", "IN-3", "IN-4"] {
        let (st, b) = create(
            &s,
            op,
            json!({ "vtid": vtid, "title": vtid, "capabilities": ["intrude"] }),
        )
        .await;
        assert_eq!(st, 201, "{b:?}");
        let (st, g) = s
            .post_as::<ClaimResponse>(
                &format!("/api/v1/worker/orchestrator/tasks/{vtid}/claim"),
                Some(&token),
                json!({}),
            )
            .await;
        assert_eq!(st, 200, "{g:?}");
        claims.push((vtid, g.run_id, g.claim_token));
    }
    // Refusals: raw, for their codes (and the whole body, for a leak).
    let code = |b: &Value| b["error"]["code"].as_str().unwrap_or_default().to_owned();

    // Another repository: named outright, through a symlink inside the
    // configured one, and through `..` from it.
    let ways = [
        secret.display().to_string(),
        repo.join("door").display().to_string(),
        format!("{}/../other/repo", repo.display()),
    ];
    for ((vtid, run_id, claim), path) in claims.iter().zip(&ways) {
        let ws = json!({ "workspace": { "branch": "main", "base": "main",
            "base_commit": secret_base, "repo": path } });
        let (st, b) = report_workspace(&s, &token, vtid, claim, ws).await;
        assert_eq!(st, 200, "{b}");
        for who in [Some(token.as_str()), op] {
            let (st, d) = s.get(&format!("/api/v1/runs/{run_id}/diff"), who).await;
            assert!(
                !d.to_string().contains("the-secret-value"),
                "{path}: the secret leaked: {d}"
            );
            assert_eq!(
                (st, code(&d).as_str()),
                (403, "workspace_repo_not_allowed"),
                "{path}: {d}"
            );
        }
    }

    // A commit that git would read as an option writes no file.
    let (vtid, run_id, claim) = &claims[3];
    let base = git(&repo, &["rev-parse", "main"]).unwrap();
    let out = env.dir.join("pwned");
    for (branch, base_commit, head) in [
        ("main", format!("--output={}", out.display()), None),
        (
            "main",
            base.clone(),
            Some(format!("--output={}", out.display())),
        ),
        ("--output=/tmp/x", base.clone(), None),
        ("@{-1}", base.clone(), None),
    ] {
        let ws = json!({ "workspace": { "branch": branch, "base": "main",
            "base_commit": base_commit, "head": head, "repo": repo.display().to_string() } });
        let (st, b) = report_workspace(&s, &token, vtid, claim, ws.clone()).await;
        let (dst, d) = s.get(&format!("/api/v1/runs/{run_id}/diff"), op).await;
        let written: Vec<_> = std::fs::read_dir(&env.dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n.to_string_lossy().starts_with("pwned"))
            .collect();
        assert!(written.is_empty(), "{ws}: git wrote {written:?}");
        assert_eq!(
            (st, code(&b).as_str()),
            (422, "invalid_workspace"),
            "{ws}: {b}"
        );
        assert_eq!(
            (dst, code(&d).as_str()),
            (422, "run_has_no_workspace"),
            "nothing of {ws} was recorded: {d}"
        );
    }

    // The agent's own session id is the next turn's argument, never an option.
    for bad in ["--evil=/x", "-x", "a b", "x\n--evil"] {
        let (st, b) =
            report_workspace(&s, &token, vtid, claim, json!({ "agent_session_id": bad })).await;
        assert_eq!(
            (st, code(&b).as_str()),
            (422, "invalid_agent_session_id"),
            "{bad:?}: {b}"
        );
    }
    // The configured repository is still served.
    let ws = json!({ "workspace": { "branch": "main", "base": "main",
        "base_commit": base, "repo": repo.display().to_string() } });
    let (st, b) = report_workspace(&s, &token, vtid, claim, ws).await;
    assert_eq!(st, 200, "{b}");
    let (st, d) = s
        .get(&format!("/api/v1/runs/{run_id}/diff"), Some(&token))
        .await;
    assert_eq!(st, 200, "{d}");
    s.stop().await;
}
