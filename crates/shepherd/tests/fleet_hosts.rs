//! Hosts, on both stores: the server node lists itself; a runner registers
//! its host with the operator token and gets a host token that reaches
//! nothing but its own heartbeat; and the real `shepherd runner`, started
//! with a sessions root and no agents, in its own data directory and HOME,
//! is a host that goes offline when killed and comes back as the same host,
//! without ever listening for a connection; a run's diff whose repository
//! is only on a runner's host is read there, through the host's link.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shepherd_protocol as p;

use common::{Env, Kind, Proc, Server, OPERATOR};

const WAIT: Duration = Duration::from_secs(30);

async fn hosts(s: &Server) -> Vec<p::HostView> {
    let (st, list) = s
        .get_as::<p::HostList>("/api/v1/hosts", Some(OPERATOR))
        .await;
    assert_eq!(st, 200);
    list.hosts
}

/// Waits until `f` holds of the host list; returns that list.
async fn hosts_until(
    s: &Server,
    what: &str,
    f: impl Fn(&[p::HostView]) -> bool,
) -> Vec<p::HostView> {
    let start = Instant::now();
    loop {
        let list = hosts(s).await;
        if f(&list) {
            return list;
        }
        assert!(start.elapsed() < WAIT, "{what}: {list:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn registry_over_http(kind: Kind) {
    let mut env = Env::new(kind);
    let root = env.dir.join("work");
    std::fs::create_dir_all(&root).unwrap();
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_NODE_ID", "node-main")
        .set("SHEPHERD_SESSIONS_ROOT", &root.display().to_string());
    let s = Server::start(&env).await;

    // The node is a host itself, online, with its sessions root.
    let list = hosts(&s).await;
    assert_eq!(list.len(), 1, "{list:?}");
    let node = &list[0];
    assert_eq!(
        (node.id.as_str(), node.kind),
        ("node-main", p::HostKind::Server)
    );
    assert!(node.online);
    assert_eq!(node.sessions_root.as_deref(), Some(root.to_str().unwrap()));
    assert!(node
        .address
        .as_deref()
        .is_some_and(|a| a.starts_with("http://")));

    // A runner registers its host.
    let (st, reg) = s
        .post_as::<p::RegisterHostResponse>(
            "/api/v1/hosts",
            Some(OPERATOR),
            json!({ "id": "host-far", "name": "far away", "sessions_root": "/srv/far",
                    "agents": ["claude"], "slots": 3 }),
        )
        .await;
    assert_eq!(st, 201);
    assert_eq!(reg.host.kind, p::HostKind::Runner);
    // Pruning on a host with no link keeps every branch, and says why.
    let (st, report) = s
        .post_as::<p::PruneBranchesReport>(
            "/api/v1/hosts/host-far/prune_branches",
            Some(OPERATOR),
            json!({ "branches": [{ "repo": "/srv/far/repo", "branch": "shepherd/x", "run_id": "r1" }] }),
        )
        .await;
    assert_eq!(st, 200);
    assert!(report.removed.is_empty());
    assert!(report.kept[0].reason.contains("offline"), "{report:?}");
    assert!(reg.host.online);
    assert_eq!(reg.host.capacity.slots, Some(3));
    let host_token = reg.host_token.clone();

    // Its token says it is there, for itself only.
    let (st, beat) = s
        .post(
            "/api/v1/hosts/host-far/heartbeat",
            Some(&host_token),
            json!({}),
        )
        .await;
    assert_eq!(st, 200, "{beat}");
    assert_eq!(beat["host"]["id"], "host-far");
    let (st, err) = s
        .post(
            "/api/v1/hosts/node-main/heartbeat",
            Some(&host_token),
            json!({}),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("not_your_host"))
    );
    // ...and reaches nothing else: not the list, not tasks, not the
    // connector, not a session, not registering hosts.
    for (method, path) in [
        ("GET", "/api/v1/hosts"),
        ("GET", "/api/v1/tasks"),
        ("POST", "/api/v1/tasks"),
        ("GET", "/api/v1/sessions"),
        ("POST", "/api/v1/hosts"),
        ("POST", "/api/v1/worker/orchestrator/register"),
        ("GET", "/api/v1/events"),
        ("POST", "/api/v1/hosts/host-far/prune_branches"),
    ] {
        let body = (method == "POST").then(|| json!({}));
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let (st, err) = s.call(method.clone(), path, Some(&host_token), body).await;
        assert_eq!(
            (st, err["error"]["code"].as_str()),
            (403, Some("forbidden")),
            "{method} {path}: {err}"
        );
    }

    // Only the host's own token opens its link: not a person (whoever
    // holds it reads what the server asks and answers for the host), not
    // another host; a plain GET is told it is a WebSocket.
    let (st, err) = s.get("/api/v1/hosts/host-far/link", Some(OPERATOR)).await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("not_your_host"))
    );
    let (_, other) = s
        .post_as::<p::RegisterHostResponse>(
            "/api/v1/hosts",
            Some(OPERATOR),
            json!({ "id": "host-other" }),
        )
        .await;
    let (st, err) = s
        .get("/api/v1/hosts/host-far/link", Some(&other.host_token))
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("not_your_host"))
    );
    let (st, err) = s
        .get("/api/v1/hosts/host-far/link", Some(&host_token))
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (400, Some("websocket_required"))
    );

    // A worker token may neither register a host nor beat for one.
    let (st, w) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": "w-far", "agent_id": "claude", "host_id": "host-far" }),
        )
        .await;
    assert_eq!(st, 200, "{w}");
    let worker_token = w["worker_token"].as_str().unwrap().to_owned();
    let (st, err) = s
        .post(
            "/api/v1/hosts",
            Some(&worker_token),
            json!({ "id": "host-w" }),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("operator_only"))
    );
    let (st, err) = s
        .post(
            "/api/v1/hosts/host-far/heartbeat",
            Some(&worker_token),
            json!({}),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("not_your_host"))
    );
    // Nor have branches deleted on a host.
    let (st, err) = s
        .post(
            "/api/v1/hosts/host-far/prune_branches",
            Some(&worker_token),
            json!({ "branches": [] }),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (403, Some("operator_only"))
    );
    // The worker is listed on its host.
    let (_, workers) = s
        .get_as::<p::WorkerInfoList>("/api/v1/workers", Some(OPERATOR))
        .await;
    let far = workers
        .workers
        .iter()
        .find(|w| w.worker_id == "w-far")
        .unwrap();
    assert_eq!(far.host_id.as_deref(), Some("host-far"));
    // A worker naming an unknown host is refused, and not registered.
    let (st, err) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": "w-lost", "agent_id": "claude", "host_id": "host-nowhere" }),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (404, Some("host_not_found"))
    );

    // Bad registrations: the standard error shape, nothing written.
    for (body, status, code) in [
        (json!({ "id": "bad id" }), 422, "invalid_host_id"),
        (json!({ "id": "h-x", "name": "" }), 422, "invalid_host_name"),
        (
            json!({ "id": "h-x", "sessions_root": "rel" }),
            422,
            "invalid_sessions_root",
        ),
        (json!({ "id": "h-x", "slots": -2 }), 422, "invalid_slots"),
        (json!({ "id": "node-main" }), 409, "host_kind_conflict"),
    ] {
        let (st, err) = s.post("/api/v1/hosts", Some(OPERATOR), body.clone()).await;
        assert_eq!(
            (st, err["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }
    let (st, _) = s
        .post(
            "/api/v1/hosts",
            Some(OPERATOR),
            json!({ "id": "h-x", "colour": "red" }),
        )
        .await;
    assert!(st == 400 || st == 422, "an unknown field: {st}");
    let (st, err) = s
        .post(
            "/api/v1/hosts/host-nowhere/heartbeat",
            Some(OPERATOR),
            json!({}),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (404, Some("host_not_found"))
    );
    let ids: Vec<String> = hosts(&s).await.into_iter().map(|h| h.id).collect();
    assert_eq!(ids, ["node-main", "host-far", "host-other"]);

    // Registering again takes the host's current token (even an admin's
    // registration: only an explicit replace goes without), and replaces
    // it: the old one is refused.
    let (st, err) = s
        .post(
            "/api/v1/hosts",
            Some(OPERATOR),
            json!({ "id": "host-far", "name": "far away" }),
        )
        .await;
    assert_eq!(
        (st, err["error"]["code"].as_str()),
        (409, Some("host_exists")),
        "{err}"
    );
    let (st, again) = s
        .post_as::<p::RegisterHostResponse>(
            "/api/v1/hosts",
            Some(OPERATOR),
            json!({ "id": "host-far", "name": "far away", "host_token": host_token }),
        )
        .await;
    assert_eq!(st, 201);
    let (st, _) = s
        .post(
            "/api/v1/hosts/host-far/heartbeat",
            Some(&host_token),
            json!({}),
        )
        .await;
    assert_eq!(st, 401);
    let (st, _) = s
        .post(
            "/api/v1/hosts/host-far/heartbeat",
            Some(&again.host_token),
            json!({}),
        )
        .await;
    assert_eq!(st, 200);

    // The log says who registered it, each time.
    let (_, page) = s
        .get("/api/v1/events?types=host.registered", Some(OPERATOR))
        .await;
    let far: Vec<&Value> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"]["host_id"] == "host-far")
        .collect();
    assert_eq!(far.len(), 2, "{page}");
    assert_eq!(far[0]["data"]["re_registered"], false);
    assert_eq!(far[1]["data"]["re_registered"], true);
    assert_eq!(far[1]["actor"], "admin");
    s.stop().await;
}

#[tokio::test]
async fn registry_over_http_sqlite() {
    registry_over_http(Kind::Sqlite).await;
}

#[tokio::test]
async fn registry_over_http_postgres() {
    registry_over_http(Kind::Postgres).await;
}

/// `shepherd runner` with its own data directory and HOME.
fn runner(base: &str, data_dir: &std::path::Path, root: &std::path::Path) -> Proc {
    common::runner_host(base, data_dir, root, None)
}

/// What `shepherd hosts` prints (with the operator token).
fn hosts_cli(base: &str, extra: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["hosts", "--server", base])
        .args(extra)
        .env("SHEPHERD_TOKEN", OPERATOR)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The TCP sockets a process listens on (inodes of its descriptors that
/// /proc/net/tcp{,6} shows in state LISTEN).
fn listening_sockets(pid: u32) -> Vec<String> {
    let mut mine = std::collections::HashSet::new();
    // Both processes were started with `SHEPHERD_DUMPABLE=1`: a process
    // that is not dumpable shows its descriptors to root alone.
    {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the process's descriptors");
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let t = target.display().to_string();
                if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    mine.insert(inode.to_owned());
                }
            }
        }
    }
    let mut listening = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // Columns: sl local rem st ... uid timeout inode.
            if cols.len() > 9 && cols[3] == "0A" && mine.contains(cols[9]) {
                listening.push(cols[1].to_owned());
            }
        }
    }
    listening
}

async fn a_runner_host_comes_and_goes(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "3")
        .set("SHEPHERD_DUMPABLE", "1");
    let s = Server::spawn(&env).await;
    // The runner's machine: its own data directory, HOME and sessions root.
    let far = env.dir.join("far-host");
    let root = far.join("work");
    std::fs::create_dir_all(&root).unwrap();
    let mut r = runner(&s.base, &far.join("data"), &root);

    let list = hosts_until(&s, "the runner's host online", |l| {
        l.iter().any(|h| h.kind == p::HostKind::Runner && h.online)
    })
    .await;
    let host = list
        .iter()
        .find(|h| h.kind == p::HostKind::Runner)
        .unwrap()
        .clone();
    assert_eq!(host.sessions_root.as_deref(), Some(root.to_str().unwrap()));
    assert!(host.agents.is_empty());
    assert_eq!(
        host.address, None,
        "a runner is reached through its own connection"
    );
    // It dials out and listens for nobody.
    let pid = r.0.id();
    assert_eq!(listening_sockets(pid), Vec::<String>::new());
    // (The check itself sees a listener: the server's.)
    let server_pid = s.child.as_ref().unwrap().pid() as u32;
    assert!(!listening_sockets(server_pid).is_empty());

    // The command line says so too.
    let (table, json) = (hosts_cli(&s.base, &[]), hosts_cli(&s.base, &["-o", "json"]));
    let listed: p::HostList = serde_json::from_str(&json).unwrap();
    assert!(
        listed.hosts.iter().any(|h| h.id == host.id && h.online),
        "{json}"
    );
    let line = table
        .lines()
        .find(|l| l.starts_with(&host.id))
        .unwrap_or_default();
    assert!(
        line.contains("runner") && line.contains("online"),
        "{table}"
    );
    assert!(line.contains(root.to_str().unwrap()), "{table}");

    // Killed: offline once a heartbeat timeout has passed, still listed.
    r.0.kill().unwrap();
    r.0.wait().unwrap();
    let list = hosts_until(&s, "the runner's host offline", |l| {
        l.iter().any(|h| h.id == host.id && !h.online)
    })
    .await;
    assert_eq!(list.len(), 2);
    let table = hosts_cli(&s.base, &[]);
    let line = table
        .lines()
        .find(|l| l.starts_with(&host.id))
        .unwrap_or_default();
    assert!(line.contains("offline, seen"), "{table}");

    // Started again with its data directory: the same host, online again.
    let _r = runner(&s.base, &far.join("data"), &root);
    let list = hosts_until(&s, "the same host back online", |l| {
        l.iter().any(|h| h.id == host.id && h.online)
    })
    .await;
    let back = list.iter().find(|h| h.id == host.id).unwrap();
    assert_eq!(back.registered_at, host.registered_at);
    assert_eq!(
        list.iter()
            .filter(|h| h.kind == p::HostKind::Runner)
            .count(),
        1
    );
    let (_, page) = s
        .get("/api/v1/events?types=host.registered", Some(OPERATOR))
        .await;
    let flags: Vec<Value> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["re_registered"].clone())
        .collect();
    assert_eq!(flags, [json!(false), json!(true)]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_host_comes_and_goes_sqlite() {
    a_runner_host_comes_and_goes(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_host_comes_and_goes_postgres() {
    a_runner_host_comes_and_goes(Kind::Postgres).await;
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// A worktree run on a runner's host: its repository exists only there (the
/// server has no agent naming it, so it would read nothing itself), and its
/// diff is read through the host's link; with the runner gone the answer
/// says the host is offline.
async fn a_run_diff_is_read_on_the_runners_host(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "5");
    let s = Server::spawn(&env).await;
    let far = env.dir.join("far-host");
    let (root, repo) = (far.join("work"), far.join("repo"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "base\n").unwrap();
    git(&repo, &["add", "README"]);
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
    );
    // The agent also names a textconv filter for its file in the
    // repository's shared configuration (its worktree reaches it): reading
    // the diff must not run it.
    let filtered = far.join("textconv-ran");
    let script = far.join("agent.sh");
    std::fs::write(
        &script,
        format!(
            r#"cat > /dev/null
echo 'written far away' > FAR.md
common=$(git rev-parse --git-common-dir)
mkdir -p "$common/info"
echo '*.md diff=leak' >> "$common/info/attributes"
git config diff.leak.textconv "sh -c 'env > {}; cat "\$0"'"
"#,
            filtered.display()
        ),
    )
    .unwrap();
    let config = far.join("runner.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.coder]\ncommand = [\"bash\", \"{}\"]\nworkspace = \"worktree\"\nrepo = \"{}\"\n",
            script.display(),
            repo.display()
        ),
    )
    .unwrap();
    let mut r = common::runner_host(&s.base, &far.join("data"), &root, Some(&config));
    let list = hosts_until(&s, "the runner's host online", |l| {
        l.iter().any(|h| h.kind == p::HostKind::Runner && h.online)
    })
    .await;
    let host = list.iter().find(|h| h.kind == p::HostKind::Runner).unwrap();
    assert_eq!(host.agents, ["coder"]);

    let (st, b) = s
        .post(
            "/api/v1/tasks",
            Some(OPERATOR),
            json!({ "vtid": "FAR-1", "title": "far", "spec": "go", "agent_id": "coder" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let op = s.client(Some(OPERATOR));
    let t = common::wait_for("FAR-1 to end", WAIT, || async {
        let (t, _) = op.task("FAR-1").await.ok()?;
        ["done", "failed"]
            .contains(&t.task.state.as_str())
            .then_some(t)
    })
    .await;
    assert_eq!(t.task.state, "done", "{t:?}");
    let q = p::RunsQuery {
        vtid: Some("FAR-1".into()),
        ..Default::default()
    };
    let run = op.runs(&q).await.unwrap().runs.remove(0);
    let path = format!("/api/v1/runs/{}/diff", run.id);
    let (st, d) = s.get_as::<p::RunDiff>(&path, Some(OPERATOR)).await;
    assert_eq!(st, 200);
    assert!(d.diff.contains("+written far away"), "{}", d.diff);
    assert!(d.stat.contains("FAR.md"), "{}", d.stat);
    assert!(
        !filtered.exists(),
        "reading the diff ran the repository's textconv filter"
    );
    assert_eq!(d.workspace.repo.as_deref(), Some(repo.to_str().unwrap()));

    // The runner is gone: its host cannot be asked.
    r.0.kill().unwrap();
    r.0.wait().unwrap();
    let start = Instant::now();
    loop {
        let (st, err) = s.get(&path, Some(OPERATOR)).await;
        if st == 503 {
            assert_eq!(err["error"]["code"], "host_offline", "{err}");
            break;
        }
        assert!(start.elapsed() < WAIT, "the diff still answers {st}: {err}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Back with its data directory: the same host, asked again.
    let _r = common::runner_host(&s.base, &far.join("data"), &root, Some(&config));
    let start = Instant::now();
    loop {
        let (st, _) = s.get(&path, Some(OPERATOR)).await;
        if st == 200 {
            break;
        }
        assert!(start.elapsed() < WAIT, "the diff is not served again: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // `shepherd prune` on the server's machine reaches the runner's host:
    // the run's branch goes from the repository there.
    let branch = d.workspace.branch.clone();
    assert!(branch_exists(&repo, &branch));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["prune", "--branches-older-than", "1s"])
        .envs(&env.vars)
        .env("SHEPHERD_ADVERTISE_URL", &s.base)
        .current_dir(&env.dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let host_id = host.id.clone();
    assert!(
        text.contains(&format!(
            "removed branch {branch} from {} on host {host_id}",
            repo.display()
        )),
        "{text}"
    );
    assert!(!branch_exists(&repo, &branch));
    // Only an admin may ask it; the host token may not.
    let (st, _) = s
        .post(
            &format!("/api/v1/hosts/{host_id}/prune_branches"),
            None,
            json!({ "branches": [] }),
        )
        .await;
    assert_eq!(st, 401);
    s.stop().await;
}

fn branch_exists(repo: &std::path::Path, branch: &str) -> bool {
    std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_diff_is_read_on_the_runners_host_sqlite() {
    a_run_diff_is_read_on_the_runners_host(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_diff_is_read_on_the_runners_host_postgres() {
    a_run_diff_is_read_on_the_runners_host(Kind::Postgres).await;
}
