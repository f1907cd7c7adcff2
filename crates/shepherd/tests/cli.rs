//! The command line as a person meets it, driving the real binary: shell
//! completion, `-o yaml`, `shepherd config`, `prune`'s refusals and
//! report, and the message for a PostgreSQL database that does not exist.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use common::{pg_url, unique, Env, Kind, Server};

/// Runs the binary in `dir` with only the given `SHEPHERD_*` variables.
fn shepherd(dir: &Path, vars: &[(&str, &str)], args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shepherd"));
    cmd.args(args).current_dir(dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("SHEPHERD_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shepherd-cli-{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn completion_scripts_for_each_shell() {
    let dir = scratch();
    for (shell, marker) in [
        ("bash", "complete -o nospace"),
        ("zsh", "#compdef shepherd"),
        ("fish", "complete --keep-order"),
    ] {
        let (ok, out, err) = shepherd(&dir, &[], &["completion", shell]);
        assert!(ok, "{shell}: {err}");
        assert!(out.contains(marker), "{shell} script lacks {marker:?}");
        // It asks the binary as the line is typed.
        assert!(out.contains("_SHEPHERD_COMPLETE"), "{shell}: {out}");
    }
    let (ok, _, err) = shepherd(&dir, &[], &["completion", "tcsh"]);
    assert!(!ok && err.contains("tcsh"), "{err}");
}

/// What the shell gets for `shepherd WORDS…<TAB>`, asked the way fish's
/// script asks (one candidate per line, then a tab and its description).
fn complete(dir: &Path, server: &str, words: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["--", "shepherd"])
        .args(words)
        .current_dir(dir)
        .env("_SHEPHERD_COMPLETE", "fish")
        .env("SHEPHERD_SERVER", server)
        .env_remove("SHEPHERD_TOKEN")
        .env_remove("SHEPHERD_AUTH_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

/// Completion offers the verbs, and names from the server: task ids, run
/// ids, sessions and agents; with no server it offers nothing, quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_offers_names_from_the_server() {
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file(
        "[agents.echoer]\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo hi\"]\n",
    );
    let s = Server::start(&env).await;
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            None,
            json!({ "vtid": "CMP-1", "title": "complete me", "agent_id": "echoer" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let project = env.dir.join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let (st, b) = s
        .post(
            "/api/v1/sessions",
            None,
            json!({ "name": "cmp-session", "location_path": project.display().to_string() }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let dir = env.dir.clone();
    let base = s.base.clone();
    tokio::task::block_in_place(|| {
        let verbs = complete(&dir, &base, &["ta"]);
        assert!(verbs.contains(&"task".to_owned()), "{verbs:?}");
        let tasks = complete(&dir, &base, &["task", "show", "CMP"]);
        assert_eq!(tasks, ["CMP-1"]);
        let agents = complete(&dir, &base, &["task", "add", "x", "--agent", "ec"]);
        assert_eq!(agents, ["echoer"]);
        let sessions = complete(&dir, &base, &["attach", "cmp"]);
        assert_eq!(sessions, ["cmp-session"]);
        let none = complete(&dir, "http://127.0.0.1:9", &["task", "show", "CMP"]);
        assert!(none.is_empty(), "{none:?}");
    });
}

#[test]
fn config_prints_sources_hides_secrets_and_refuses_unknown_keys() {
    let dir = scratch();
    std::fs::write(
        dir.join("shepherd.toml"),
        "database_url = \"postgres://app:hunter2@db.example.com/shepherd\"\nclaim_ttl_secs = 90\n",
    )
    .unwrap();
    let (ok, out, err) = shepherd(
        &dir,
        &[("SHEPHERD_TOKEN", "a-secret-token-0123456789")],
        &["config"],
    );
    assert!(ok, "{err}");
    let line = |k: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in {out}"))
            .to_owned()
    };
    assert!(
        line("claim_ttl").contains("1m 30s") && line("claim_ttl").contains("file shepherd.toml")
    );
    assert!(line("auth_token").contains("env SHEPHERD_TOKEN"));
    assert!(line("listen").ends_with("default"));
    assert!(
        !out.contains("hunter2") && !out.contains("a-secret-token"),
        "{out}"
    );
    // The same as data, in both formats.
    let (ok, json_out, _) = shepherd(&dir, &[], &["config", "-o", "json"]);
    assert!(ok);
    let rows: Vec<Value> = serde_json::from_str(&json_out).unwrap();
    let ttl = rows.iter().find(|r| r["key"] == "claim_ttl").unwrap();
    assert_eq!(ttl["source"]["kind"], "file");
    let (ok, yaml_out, _) = shepherd(&dir, &[], &["config", "-o", "yaml"]);
    assert!(ok);
    let from_yaml: Vec<Value> = serde_norway::from_str(&yaml_out).unwrap();
    assert_eq!(from_yaml, rows);

    std::fs::write(dir.join("typo.toml"), "claim_tll = \"5m\"\n").unwrap();
    let (ok, _, err) = shepherd(&dir, &[], &["config", "--config", "typo.toml"]);
    assert!(!ok);
    assert!(
        err.contains("unknown key `claim_tll`") && err.contains("typo.toml"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_shows_parse_back_from_yaml() {
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let mut body = common::task("Y-1", "simple");
    // A title YAML would misread if it were not quoted.
    body["title"] = json!("yes: a title with: colons # and a hash");
    let (st, b) = s.post("/api/v1/tasks", None, body).await;
    assert!(st < 300, "{st} {b}");
    let dir = env.dir.clone();
    let base = s.base.clone();
    tokio::task::block_in_place(|| {
        let vars = [("SHEPHERD_SERVER", base.as_str())];
        for args in [
            &["task", "list"][..],
            &["task", "show", "Y-1"],
            &["runs", "list"],
        ] {
            let all: Vec<&str> = args.iter().copied().chain(["-o", "json"]).collect();
            let (ok, json_out, err) = shepherd(&dir, &vars, &all);
            assert!(ok, "{args:?}: {err}");
            let all: Vec<&str> = args.iter().copied().chain(["-o", "yaml"]).collect();
            let (ok, yaml_out, err) = shepherd(&dir, &vars, &all);
            assert!(ok, "{args:?}: {err}");
            let from_json: Value = serde_json::from_str(&json_out).unwrap();
            let from_yaml: Value = serde_norway::from_str(&yaml_out)
                .unwrap_or_else(|e| panic!("{args:?}: {e}\n{yaml_out}"));
            assert_eq!(from_yaml, from_json, "{args:?}");
        }
    });
}

/// `shepherd resource add|list|show`: made from the command line, refused
/// with the API's code for an unknown agent, shown with its conversations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_made_listed_and_shown_from_the_command_line() {
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file("[agents.helper]\ncommand = [\"cat\"]\n");
    let s = Server::start(&env).await;
    let dir = env.dir.clone();
    let base = s.base.clone();
    tokio::task::block_in_place(|| {
        let vars = [("SHEPHERD_SERVER", base.as_str())];
        let (ok, out, err) = shepherd(&dir, &vars, &["resource", "list"]);
        assert!(ok && out.contains("no resources yet"), "{out}{err}");
        let (ok, _, err) = shepherd(
            &dir,
            &vars,
            &["resource", "add", "docs", "--agent", "nobody"],
        );
        assert!(!ok && err.contains("unknown_agent"), "{err}");
        let (ok, out, err) = shepherd(
            &dir,
            &vars,
            &[
                "resource", "add", "docs", "--agent", "helper", "--name", "The docs",
            ],
        );
        assert!(
            ok && out.contains("resource docs (The docs) talks to agent helper"),
            "{out}{err}"
        );
        let (ok, out, err) = shepherd(&dir, &vars, &["resource", "list"]);
        assert!(
            ok && out.contains("docs") && out.contains("helper"),
            "{out}{err}"
        );
        let (ok, out, err) = shepherd(&dir, &vars, &["resource", "show", "docs", "-o", "json"]);
        assert!(ok, "{err}");
        let shown: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(shown["resource"]["name"], "The docs");
        assert_eq!(shown["conversations"]["conversations"], json!([]));
        let (ok, _, err) = shepherd(&dir, &vars, &["resource", "show", "nope"]);
        assert!(!ok && err.contains("resource_not_found"), "{err}");
    });
}

#[test]
fn prune_names_its_database_and_refuses_what_it_cannot_do() {
    let dir = scratch();
    let data = dir.join("data");
    let data_s = data.display().to_string();
    let vars = [("SHEPHERD_DATA_DIR", data_s.as_str())];
    // No database there: say so rather than create an empty one.
    let (ok, _, err) = shepherd(&dir, &vars, &["prune", "--events-older-than", "30d"]);
    assert!(!ok && err.contains("no database at"), "{err}");
    assert!(!data.join("shepherd.db").exists());
    // A server is not something prune can act through.
    let (ok, _, err) = shepherd(
        &dir,
        &vars,
        &[
            "prune",
            "--events-older-than",
            "30d",
            "--server",
            "http://127.0.0.1:1",
        ],
    );
    assert!(!ok && err.contains("not through a server"), "{err}");
    // A bare number could be seconds or days.
    let (ok, _, err) = shepherd(&dir, &vars, &["prune", "--transcripts-older-than", "30"]);
    assert!(!ok && err.contains("no unit"), "{err}");

    let (ok, _, err) = shepherd(&dir, &vars, &["migrate"]);
    assert!(ok, "{err}");
    let (ok, out, err) = shepherd(&dir, &vars, &["prune", "--events-older-than", "30d"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&data.join("shepherd.db").display().to_string()),
        "{out}"
    );
    let (ok, out, err) = shepherd(
        &dir,
        &vars,
        &[
            "prune",
            "--events-older-than",
            "30d",
            "--transcripts-older-than",
            "1d",
            "-o",
            "json",
        ],
    );
    assert!(ok, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(report["events"], 0);
    assert_eq!(report["transcripts"]["runs"], 0);
    assert!(report["database"].as_str().unwrap().contains("shepherd.db"));
}

#[test]
fn a_missing_postgres_database_is_named_with_a_fix() {
    let dir = scratch();
    let name = format!("shepherd_missing_{}", unique());
    let base = pg_url();
    let url = format!("{}/{name}", base.rsplit_once('/').unwrap().0);
    let (ok, _, err) = shepherd(&dir, &[("SHEPHERD_DATABASE_URL", &url)], &["migrate"]);
    assert!(!ok);
    assert!(
        err.contains(&name) && err.contains(&format!("createdb {name}")),
        "{err}"
    );
}

/// Every line of a log written as JSON, parsed; panics on one that is not.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

fn has(lines: &[Value], level: &str, text: &str) -> bool {
    lines.iter().any(|l| {
        l["level"] == level
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(text))
    })
}

#[test]
fn what_is_said_before_the_logger_exists_follows_the_log_format() {
    let dir = scratch();
    let data = dir.join("data").display().to_string();
    let deprecated = "SHEPHERD_AUTH_TOKEN is deprecated";
    // A warning found while loading the configuration, before the logger.
    let mut vars = vec![
        ("SHEPHERD_DATA_DIR", data.as_str()),
        ("SHEPHERD_AUTH_TOKEN", "0123456789abcdef"),
        ("SHEPHERD_LOG_FORMAT", "json"),
    ];
    let (ok, _, err) = shepherd(&dir, &vars, &["migrate"]);
    assert!(ok, "{err}");
    assert!(has(&json_lines(&err), "WARN", deprecated), "{err}");
    // In text, it is a log line too, said once.
    vars[2].1 = "text";
    let (ok, _, err) = shepherd(&dir, &vars, &["migrate"]);
    assert!(ok, "{err}");
    assert_eq!(err.matches(deprecated).count(), 1, "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains("WARN") && l.contains(deprecated)),
        "{err}"
    );
    // A verb that does not log still says it, plainly.
    let (ok, _, err) = shepherd(&dir, &vars, &["config"]);
    assert!(
        ok && err.contains(&format!("warning: {deprecated}")),
        "{err}"
    );

    // A failure after the logger is up goes through it.
    vars[2].1 = "json";
    let (ok, _, err) = shepherd(&dir, &vars, &["runner"]);
    assert!(!ok);
    assert!(
        has(&json_lines(&err), "ERROR", "no agents configured"),
        "{err}"
    );
    // A configuration that does not load leaves no logger to choose the
    // format: the variable alone still makes the error JSON.
    let bad = [
        ("SHEPHERD_LOG_FORMAT", "json"),
        ("SHEPHERD_SQLITE_SYNC", "sometimes"),
    ];
    for verb in ["serve", "migrate"] {
        let (ok, _, err) = shepherd(&dir, &bad, &[verb]);
        assert!(!ok);
        assert!(
            has(&json_lines(&err), "ERROR", "SHEPHERD_SQLITE_SYNC"),
            "{verb}: {err}"
        );
    }
    let (ok, _, err) = shepherd(&dir, &bad[1..], &["serve"]);
    assert!(
        !ok && err.starts_with("error: SHEPHERD_SQLITE_SYNC"),
        "{err}"
    );
}

#[test]
fn server_verbs_do_not_offer_client_options() {
    let dir = scratch();
    for verb in ["serve", "migrate"] {
        let (ok, help, err) = shepherd(&dir, &[], &[verb, "--help"]);
        assert!(ok, "{err}");
        for flag in ["--server", "--token", "--output"] {
            assert!(
                !help.contains(flag),
                "`{verb} --help` lists {flag}:\n{help}"
            );
        }
    }
    // Client verbs still have them, after the verb as before it.
    let (ok, help, _) = shepherd(&dir, &[], &["task", "list", "--help"]);
    assert!(
        ok && help.contains("--server") && help.contains("--output"),
        "{help}"
    );
    let (ok, _, err) = shepherd(&dir, &[], &["--server", "http://127.0.0.1:1", "serve"]);
    assert!(
        !ok && err.contains("--server is for the verbs that talk to a server"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_list_watch_redraws_when_an_event_arrives() {
    use std::io::BufRead;
    let env = Env::new(Kind::Sqlite);
    let s = Server::start(&env).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["task", "list", "--watch", "-o", "json", "--server", &s.base])
        .env_remove("SHEPHERD_TOKEN")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Duration::from_secs(30);
    // The first drawing: an empty list (a pretty JSON object ends with `}`).
    let mut first = Vec::new();
    loop {
        let line =
            tokio::task::block_in_place(|| rx.recv_timeout(deadline)).expect("the first drawing");
        let end = line == "}";
        first.push(line);
        if end {
            break;
        }
    }
    let first: Value = serde_json::from_str(&first.join("\n")).unwrap();
    assert_eq!(first["tasks"].as_array().map(Vec::len), Some(0), "{first}");
    // A new task is an event: the list is drawn again, with it.
    let (st, b) = s
        .post("/api/v1/tasks", None, common::task("W-1", "simple"))
        .await;
    assert!(st < 300, "{st} {b}");
    loop {
        let line = tokio::task::block_in_place(|| rx.recv_timeout(deadline))
            .expect("a drawing with the new task");
        if line.contains("\"W-1\"") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_come_from_a_file_or_the_environment_and_the_command_line_warns() {
    use std::os::unix::fs::PermissionsExt;
    const TOKEN: &str = "operator-token-from-a-file-0123";
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", TOKEN);
    let s = Server::start(&env).await;
    let dir = env.dir.clone();
    let base = s.base.clone();
    // As `echo TOKEN > file` writes it: a line end follows.
    let file = dir.join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file_s = file.display().to_string();
    let warned = |err: &str| err.contains("visible to other users");
    tokio::task::block_in_place(|| {
        let server = [("SHEPHERD_SERVER", base.as_str())];
        // Without a token: refused.
        let (ok, _, err) = shepherd(&dir, &server, &["task", "list"]);
        assert!(!ok && err.contains("401"), "{err}");
        // --token-file, after the verb or before it: no warning.
        for args in [
            &["task", "list", "--token-file", &file_s][..],
            &["--token-file", &file_s, "task", "list"],
        ] {
            let (ok, _, err) = shepherd(&dir, &server, args);
            assert!(ok, "{args:?}: {err}");
            assert!(!warned(&err) && !err.contains("warning"), "{args:?}: {err}");
        }
        // SHEPHERD_TOKEN_FILE and SHEPHERD_TOKEN: no warning either.
        let (ok, _, err) = shepherd(
            &dir,
            &[
                ("SHEPHERD_SERVER", base.as_str()),
                ("SHEPHERD_TOKEN_FILE", &file_s),
            ],
            &["task", "list"],
        );
        assert!(ok && !err.contains("warning"), "{err}");
        let (ok, _, err) = shepherd(
            &dir,
            &[
                ("SHEPHERD_SERVER", base.as_str()),
                ("SHEPHERD_TOKEN", TOKEN),
            ],
            &["task", "list"],
        );
        assert!(ok && !warned(&err), "{err}");
        // --token still works, and says it can be seen.
        for args in [
            &["task", "list", "--token", TOKEN][..],
            &["--token", TOKEN, "task", "list"],
        ] {
            let (ok, _, err) = shepherd(&dir, &server, args);
            assert!(ok && warned(&err), "{args:?}: {err}");
        }
        // A file other users can read is used, with a warning.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (ok, _, err) = shepherd(&dir, &server, &["task", "list", "--token-file", &file_s]);
        assert!(ok && err.contains("chmod 600"), "{err}");
        // Refusals: both given, a missing or empty file.
        let (ok, _, err) = shepherd(
            &dir,
            &server,
            &["task", "list", "--token", TOKEN, "--token-file", &file_s],
        );
        assert!(!ok && err.contains("not both"), "{err}");
        let missing = dir.join("missing").display().to_string();
        let (ok, _, err) = shepherd(&dir, &server, &["task", "list", "--token-file", &missing]);
        assert!(!ok && err.contains("cannot read it"), "{err}");
        std::fs::write(&file, "\n").unwrap();
        let (ok, _, err) = shepherd(&dir, &server, &["task", "list", "--token-file", &file_s]);
        assert!(!ok && err.contains("empty"), "{err}");
    });
    s.stop().await;
}

/// `task add TITLE` without a spec: the agent is asked the title, on its
/// command line (`{spec}`) or on standard input; never an empty prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_only_task_gives_the_agent_its_title() {
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file(
        "[agents.argued]\ncommand = [\"sh\", \"-c\", \"printf 'asked: %s\\\\n' \\\"$0\\\"\", \"{spec}\"]\n\
         [agents.piped]\ncommand = [\"sh\", \"-c\", \"printf 'asked: %s\\\\n' \\\"$(cat)\\\"\"]\n",
    );
    let s = Server::start(&env).await;
    let dir = env.dir.clone();
    let base = s.base.clone();
    for agent in ["argued", "piped"] {
        let vtid = format!("TT-{agent}");
        tokio::task::block_in_place(|| {
            let vars = [("SHEPHERD_SERVER", base.as_str())];
            let (ok, out, err) = shepherd(
                &dir,
                &vars,
                &[
                    "task",
                    "add",
                    "Fix the flaky test",
                    "--agent",
                    agent,
                    "--vtid",
                    &vtid,
                ],
            );
            assert!(ok, "{out}{err}");
        });
        common::typed::task_in(&s, &vtid, &["done"], std::time::Duration::from_secs(20)).await;
        let runs = common::typed::runs_of(&s, &vtid).await;
        assert_eq!(
            runs[0].result.as_deref(),
            Some("asked: Fix the flaky test"),
            "{agent}: {runs:?}"
        );
    }
    s.stop().await;
}
