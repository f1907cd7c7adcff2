//! `shepherd backup` and `shepherd restore` with the real binary: a backup
//! taken while the server runs and writes, restored into a new directory
//! and served, keeps every task and every event with its sequence number
//! (so cursors from before the backup still resume); restore refuses a
//! non-empty directory without `--force`; on PostgreSQL the database goes
//! through `pg_dump`/`pg_restore` and the files through `--files-only`.
//! A crafted or damaged archive (links, devices, paths outside, special
//! modes, wrong checksums or format) is refused before the target is
//! touched, and what is restored is private (files 0600, directories 0700).

mod common;

use serde_json::json;
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{events_after, pg_url, task, unique, wait_for, Env, Kind, Server};

/// Runs `shepherd ARGS` with `env`'s variables (its configuration).
fn shepherd(env: &Env, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(args)
        .envs(&env.vars)
        .current_dir(&env.dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A task no configured agent takes (it needs a capability none has), so
/// it stays as it was made.
fn waiting_task(vtid: &str) -> serde_json::Value {
    let mut t = task(vtid, "simple");
    t["capabilities"] = json!(["by-hand"]);
    t
}

async fn create(s: &Server, vtid: &str) {
    let (st, b) = s.post("/api/v1/tasks", None, waiting_task(vtid)).await;
    assert_eq!(st, 201, "{b}");
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_serving_restores_everything_and_cursors_resume() {
    let mut env = Env::new(Kind::Sqlite);
    env.with_config_file(
        "[agents.echo]\ncommand = [\"sh\", \"-c\", \"cat > /dev/null; echo step one; echo step two\"]\n",
    );
    let s = Server::spawn(&env).await;
    for i in 0..20 {
        create(&s, &format!("BK-{i}")).await;
    }
    let (st, _) = s.post("/api/v1/tasks/BK-3/cancel", None, json!({})).await;
    assert!(st == 200 || st == 202);
    // Runs with transcripts, a conversation and a session.
    for i in 0..5 {
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                None,
                json!({ "vtid": format!("RUN-{i}"), "title": "r", "spec": "s", "agent_id": "echo" }),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    let runs_before = wait_for("five runs to end", Duration::from_secs(60), || async {
        let (_, list) = s.get("/api/v1/runs?limit=100", None).await;
        let runs = list["runs"].as_array()?.clone();
        (runs.len() == 5 && runs.iter().all(|r| r["status"] == "done")).then_some(list)
    })
    .await;
    let run_id = runs_before["runs"][0]["id"].as_str().unwrap().to_owned();
    let (_, steps_before) = s.get(&format!("/api/v1/runs/{run_id}/steps"), None).await;
    let (st, r) = s
        .post(
            "/api/v1/resources",
            None,
            json!({ "id": "res-1", "name": "R", "agent_id": "echo" }),
        )
        .await;
    assert!((200..300).contains(&st), "{r}");
    let (_, conv) = s
        .post("/api/v1/resources/res-1/conversations", None, json!({}))
        .await;
    let conv_id = conv["id"].as_str().unwrap().to_owned();
    s.post(
        &format!("/api/v1/conversations/{conv_id}/messages"),
        None,
        json!({ "text": "hello" }),
    )
    .await;
    let mut conversation_before =
        wait_for("an idle conversation", Duration::from_secs(60), || async {
            let (_, c) = s
                .get(&format!("/api/v1/conversations/{conv_id}"), None)
                .await;
            (c["state"] == "idle" && c["messages"].as_array()?.len() == 2).then_some(c)
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
    // Every run, the conversation's too, as the backup will hold them.
    let (_, runs_before) = s.get("/api/v1/runs?limit=100", None).await;
    // A cursor a client holds from before the backup.
    let before = events_after(&s, 0).await;
    let cursor = before[before.len() / 2].0;

    // Writes go on while the backup is taken.
    let writer = {
        let base = s.base.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            for i in 0..40 {
                let res = http
                    .post(format!("{base}/api/v1/tasks"))
                    .json(&waiting_task(&format!("DURING-{i}")))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 201);
            }
        })
    };
    let archive = env.dir.join("backup.tar.gz");
    let archive_s = archive.display().to_string();
    let (ok, out, err) = shepherd(&env, &["backup", &archive_s]);
    writer.await.unwrap();
    assert!(ok, "{out}{err}");
    assert!(out.contains("backed up the database"), "{out}");
    let at_backup_end = events_after(&s, 0).await;
    s.stop().await;

    // Restore refuses a directory with something in it.
    let (ok, _, err) = shepherd(
        &env,
        &[
            "restore",
            &archive_s,
            "--data-dir",
            &env.dir.display().to_string(),
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );

    let mut restored = Env::new(Kind::Sqlite);
    let target = restored.dir.join("restored");
    let (ok, out, err) = shepherd(
        &env,
        &[
            "restore",
            &archive_s,
            "--data-dir",
            &target.display().to_string(),
        ],
    );
    assert!(ok, "{out}{err}");
    // Everything restored is private: files 0600 (0700 if executable),
    // directories 0700.
    for (path, mode, body) in snapshot(&target) {
        let want = if body.is_some() { 0o600 } else { 0o700 };
        assert!(mode == want || mode == 0o700, "{path}: {mode:o}");
    }
    restored.set("SHEPHERD_DATA_DIR", &target.display().to_string());
    let s = Server::spawn(&restored).await;
    // Every task from before the backup, as it was.
    for i in 0..20 {
        let (st, t) = s.get(&format!("/api/v1/tasks/BK-{i}"), None).await;
        assert_eq!(st, 200, "BK-{i}: {t}");
    }
    let (_, cancelled) = s.get("/api/v1/tasks/BK-3", None).await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    let (_, runs_after) = s.get("/api/v1/runs?limit=100", None).await;
    assert_eq!(runs_after, runs_before, "the runs came back");
    let (_, steps_after) = s.get(&format!("/api/v1/runs/{run_id}/steps"), None).await;
    assert_eq!(steps_after, steps_before, "the transcripts came back");
    let (_, mut conversation_after) = s
        .get(&format!("/api/v1/conversations/{conv_id}"), None)
        .await;
    // `cursor` is where the log stood when it was read.
    for c in [&mut conversation_after, &mut conversation_before] {
        c.as_object_mut().unwrap().remove("cursor");
    }
    assert_eq!(
        conversation_after, conversation_before,
        "the conversation came back"
    );
    let (st, session_after) = s
        .get(
            &format!("/api/v1/sessions/{}", session["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(st, 200, "{session_after}");
    assert_eq!(session_after["location_path"], session["location_path"]);
    // The log is one committed state: a prefix of what the server had
    // when the backup ended, at least everything from before it began,
    // with the same sequence numbers.
    let after_restore = events_after(&s, 0).await;
    // What the backup held ends where the restored server's own start-up
    // events begin.
    let held = after_restore
        .iter()
        .rposition(|e| e.1 == "server.recovered")
        .unwrap();
    assert!(held >= before.len(), "{held} < {}", before.len());
    assert_eq!(after_restore[..held], at_backup_end[..held]);
    // A cursor from before the backup resumes where it was.
    let resumed = events_after(&s, cursor).await;
    assert_eq!(
        resumed.first().map(|e| e.0),
        before.iter().find(|e| e.0 > cursor).map(|e| e.0)
    );
    // New events continue the numbering.
    create(&s, "AFTER-1").await;
    let last = events_after(&s, cursor).await;
    assert!(last.last().unwrap().0 > after_restore.last().unwrap().0);
    s.stop().await;

    // --force replaces what the directory held (a stale WAL included).
    std::fs::write(target.join("shepherd.db-wal"), b"stale").unwrap();
    std::fs::write(target.join("junk"), b"x").unwrap();
    let (ok, out, err) = shepherd(
        &env,
        &[
            "restore",
            &archive_s,
            "--data-dir",
            &target.display().to_string(),
            "--force",
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(!target.join("junk").exists());
    assert!(!target.join("shepherd.db-wal").exists());
    let s = Server::spawn(&restored).await;
    let (st, _) = s.get("/api/v1/tasks/BK-19", None).await;
    assert_eq!(st, 200);
    s.stop().await;

    // Not a backup at all.
    let bogus = restored.dir.join("bogus.tar.gz");
    std::fs::write(&bogus, b"not gzip").unwrap();
    let empty = restored.dir.join("empty");
    let (ok, _, err) = shepherd(
        &env,
        &[
            "restore",
            &bogus.display().to_string(),
            "--data-dir",
            &empty.display().to_string(),
        ],
    );
    assert!(!ok, "{err}");
    assert!(is_empty_dir(&empty));
}

/// PostgreSQL: `backup` says to use pg_dump; `pg_dump` + `pg_restore` into a
/// new database and `backup --files-only` + `restore` of the data directory
/// give a server that serves the same tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_goes_through_pg_dump_and_files_only() {
    let env = Env::new(Kind::Postgres);
    let s = Server::spawn(&env).await;
    for i in 0..5 {
        create(&s, &format!("PG-{i}")).await;
    }
    let archive = env.dir.join("files.tar.gz").display().to_string();
    let (ok, _, err) = shepherd(&env, &["backup", &archive]);
    assert!(!ok);
    assert!(
        err.contains("pg_dump") && err.contains("--files-only"),
        "{err}"
    );
    let (ok, out, err) = shepherd(&env, &["backup", "--files-only", &archive]);
    assert!(ok, "{out}{err}");

    let schema = env.vars["SHEPHERD_PG_SCHEMA"].clone();
    let dump = env.dir.join("db.dump").display().to_string();
    let status = Command::new("pg_dump")
        .args([
            "--dbname",
            &pg_url(),
            "--schema",
            &schema,
            "--format",
            "custom",
            "--file",
            &dump,
        ])
        .status()
        .unwrap();
    assert!(status.success());
    s.stop().await;

    let db = format!("restore_{}", unique()).replace('-', "_");
    let base = pg_url();
    let (server_url, _) = base.rsplit_once('/').unwrap();
    let status = Command::new("createdb")
        .args(["--maintenance-db", &base, &db])
        .status()
        .unwrap();
    assert!(status.success());
    let new_url = format!("{server_url}/{db}");
    let status = Command::new("pg_restore")
        .args(["--dbname", &new_url, "--no-owner", &dump])
        .status()
        .unwrap();
    assert!(status.success());

    let mut restored = Env::new(Kind::Postgres);
    let target = restored.dir.join("restored");
    let (ok, out, err) = shepherd(
        &env,
        &[
            "restore",
            &archive,
            "--data-dir",
            &target.display().to_string(),
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("pg_restore"), "{out}");
    restored
        .set("SHEPHERD_DATA_DIR", &target.display().to_string())
        .set("SHEPHERD_DATABASE_URL", &new_url)
        .set("SHEPHERD_PG_SCHEMA", &schema);
    let s = Server::spawn(&restored).await;
    for i in 0..5 {
        let (st, t) = s.get(&format!("/api/v1/tasks/PG-{i}"), None).await;
        assert_eq!(st, 200, "{t}");
    }
    s.stop().await;
    let _ = Command::new("dropdb")
        .args(["--maintenance-db", &base, &db])
        .status();
}

/// One entry of a hand-made archive.
enum Crafted<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a Path),
    HardLink(&'a str, &'a Path),
}

/// A backup archive with the manifest `shepherd backup` writes and then
/// `entries`, as an attacker could craft one.
fn crafted_backup(path: &Path, entries: &[Crafted]) {
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    let manifest = serde_json::to_vec(&json!({
        "format": 1, "shepherd_version": "0.0.0", "created_at": "2026-01-01T00:00:00Z",
        "database": "postgres", "database_file": null,
    }))
    .unwrap();
    let header = |kind: tar::EntryType, size: usize| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size as u64);
        h.set_mode(if kind == tar::EntryType::Directory {
            0o700
        } else {
            0o600
        });
        h
    };
    let mut h = header(tar::EntryType::Regular, manifest.len());
    tar.append_data(&mut h, "shepherd-backup.json", manifest.as_slice())
        .unwrap();
    for e in entries {
        match e {
            Crafted::Dir(name) => {
                let mut h = header(tar::EntryType::Directory, 0);
                tar.append_data(&mut h, name, std::io::empty()).unwrap();
            }
            Crafted::File(name, body) => {
                let mut h = header(tar::EntryType::Regular, body.len());
                tar.append_data(&mut h, name, *body).unwrap();
            }
            Crafted::Symlink(name, to) => {
                let mut h = header(tar::EntryType::Symlink, 0);
                tar.append_link(&mut h, name, to).unwrap();
            }
            Crafted::HardLink(name, to) => {
                let mut h = header(tar::EntryType::Link, 0);
                tar.append_link(&mut h, name, to).unwrap();
            }
        }
    }
    tar.into_inner().unwrap().finish().unwrap();
}

#[test]
fn restore_never_writes_outside_the_data_directory_through_links_in_the_archive() {
    let env = Env::new(Kind::Sqlite);
    let outside = env.dir.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let secret = outside.join("secret");
    std::fs::write(&secret, "keep me").unwrap();
    let attacks: [(&str, Vec<Crafted>); 4] = [
        // A link to a directory outside, then a file through it.
        (
            "file through a link",
            vec![
                Crafted::Symlink("data/x", &outside),
                Crafted::File("data/x/planted", b"owned"),
            ],
        ),
        // A link to a directory outside, then a second link through it.
        (
            "link through a link",
            vec![
                Crafted::Symlink("data/y", &outside),
                Crafted::Symlink("data/y/planted", Path::new("/tmp")),
            ],
        ),
        // A link straight at a file outside, then that name as a file.
        (
            "file over a link",
            vec![
                Crafted::Symlink("data/s", &secret),
                Crafted::File("data/s", b"overwritten"),
            ],
        ),
        // A hard link to a file outside, then that name as a file.
        (
            "hard link",
            vec![
                Crafted::HardLink("data/h", &secret),
                Crafted::File("data/h", b"overwritten"),
            ],
        ),
    ];
    for (i, (what, entries)) in attacks.iter().enumerate() {
        let archive = env.dir.join(format!("evil-{i}.tar.gz"));
        crafted_backup(&archive, entries);
        let target = env.dir.join(format!("restored-{i}"));
        let (_ok, out, err) = shepherd(
            &env,
            &[
                "restore",
                archive.to_str().unwrap(),
                "--data-dir",
                target.to_str().unwrap(),
            ],
        );
        let mut names: Vec<_> = std::fs::read_dir(&outside)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["secret"], "{what}: wrote outside\n{out}{err}");
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            "keep me",
            "{what}: {out}{err}"
        );
    }
    // A hard link is not something a backup holds: refused by name.
    let (ok, _, err) = shepherd(
        &env,
        &[
            "restore",
            env.dir.join("evil-3.tar.gz").to_str().unwrap(),
            "--data-dir",
            env.dir.join("restored-h2").to_str().unwrap(),
        ],
    );
    assert!(!ok && err.contains("is a hard link"), "{err}");
}

/// Every entry under `dir`: its path, mode and (for a file) its bytes; a
/// link shows as mode 0 with what it points to.
fn snapshot(dir: &Path) -> Vec<(String, u32, Option<Vec<u8>>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, u32, Option<Vec<u8>>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_symlink() {
                let to = std::fs::read_link(&path).unwrap();
                out.push((rel, 0, Some(to.into_os_string().into_encoded_bytes())));
            } else if meta.is_dir() {
                out.push((rel, mode, None));
                walk(root, &path, out);
            } else {
                out.push((rel, mode, Some(std::fs::read(&path).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// One raw entry of a crafted archive: any name (`..` and absolute ones
/// too, written straight into the header), any type and mode.
struct Raw {
    name: &'static str,
    kind: tar::EntryType,
    mode: u32,
    body: &'static [u8],
    link: Option<&'static str>,
}

fn raw(name: &'static str, body: &'static [u8]) -> Raw {
    Raw {
        name,
        kind: tar::EntryType::Regular,
        mode: 0o600,
        body,
        link: None,
    }
}

/// What the crafted archive's checksum list says.
#[derive(Clone, Copy, PartialEq)]
enum Sums {
    /// The right checksums.
    Right,
    /// A file's checksum is wrong.
    WrongFile,
    /// The manifest's checksum is wrong.
    WrongManifest,
    /// No checksum list at all.
    Missing,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An archive in the layout `shepherd backup` writes (format `format`),
/// with `entries` as an attacker or a damaged disk could make them.
fn crafted(path: &Path, format: u32, entries: &[Raw], sums: Sums) {
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    let manifest = serde_json::to_vec(&json!({
        "format": format, "shepherd_version": "0.0.0", "created_at": "2026-01-01T00:00:00Z",
        "database": "postgres", "database_file": null,
    }))
    .unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(manifest.len() as u64);
    h.set_mode(0o600);
    tar.append_data(&mut h, "shepherd-backup.json", manifest.as_slice())
        .unwrap();
    let mut files = serde_json::Map::new();
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(e.kind);
        h.set_size(e.body.len() as u64);
        h.set_mode(e.mode);
        let name = &mut h.as_old_mut().name;
        name.fill(0);
        name[..e.name.len()].copy_from_slice(e.name.as_bytes());
        if let Some(to) = e.link {
            h.set_link_name(to).unwrap();
        }
        if matches!(e.kind, tar::EntryType::Char) {
            h.set_device_major(1).unwrap();
            h.set_device_minor(3).unwrap();
        }
        h.set_cksum();
        tar.append(&h, e.body).unwrap();
        if e.kind == tar::EntryType::Regular {
            let mut sum = sha256_hex(e.body);
            if sums == Sums::WrongFile {
                sum = sha256_hex(b"something else");
            }
            files.insert(e.name.into(), sum.into());
        }
    }
    if sums != Sums::Missing {
        let manifest_sum = match sums {
            Sums::WrongManifest => sha256_hex(b"another manifest"),
            _ => sha256_hex(&manifest),
        };
        let list =
            serde_json::to_vec(&json!({ "manifest": manifest_sum, "files": files })).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(list.len() as u64);
        h.set_mode(0o600);
        tar.append_data(&mut h, "shepherd-backup.sha256.json", list.as_slice())
            .unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
}

#[test]
fn a_crafted_or_damaged_archive_is_refused_and_the_old_data_is_left_whole() {
    let env = Env::new(Kind::Sqlite);
    let target = env.dir.join("data");
    let old_seg = target.join("sessions/ses_1/wk_1");
    std::fs::create_dir_all(&old_seg).unwrap();
    std::fs::write(target.join("shepherd.db"), b"the old database").unwrap();
    std::fs::write(old_seg.join("00000000000000000000.seg"), b"old history").unwrap();
    std::fs::write(target.join("node-id"), b"node-old").unwrap();
    let before = snapshot(&target);
    let seg = "data/sessions/ses_1/wk_1/00000000000000000000.seg";
    let dir = |name| Raw {
        name,
        kind: tar::EntryType::Directory,
        mode: 0o755,
        body: b"",
        link: None,
    };
    let special = |kind, link| Raw {
        name: seg,
        kind,
        mode: 0o600,
        body: b"",
        link,
    };
    let cases: Vec<(&str, u32, Vec<Raw>, Sums)> = vec![
        // Format 1 (no checksums) is still read, with every other check.
        (
            "is a symbolic link",
            1,
            vec![special(tar::EntryType::Symlink, Some("/etc/passwd"))],
            Sums::Missing,
        ),
        (
            "is a symbolic link",
            2,
            vec![
                dir("data/sessions"),
                special(tar::EntryType::Symlink, Some("/etc/passwd")),
            ],
            Sums::Right,
        ),
        (
            "is a hard link",
            2,
            vec![special(tar::EntryType::Link, Some("/etc/passwd"))],
            Sums::Right,
        ),
        (
            "is a device",
            2,
            vec![special(tar::EntryType::Char, None)],
            Sums::Right,
        ),
        (
            "is a named pipe",
            2,
            vec![special(tar::EntryType::Fifo, None)],
            Sums::Right,
        ),
        (
            "outside the data directory",
            2,
            vec![raw("data/ok", b"fine"), raw("data/../escape", b"out")],
            Sums::Right,
        ),
        (
            "outside the data directory",
            2,
            vec![raw("/tmp/shepherd-restore-absolute", b"out")],
            Sums::Right,
        ),
        (
            "outside the data directory",
            2,
            vec![raw("elsewhere/x", b"out")],
            Sums::Right,
        ),
        (
            "setuid",
            2,
            vec![Raw {
                mode: 0o4777,
                ..raw("data/runner/tool", b"#!/bin/sh\n")
            }],
            Sums::Right,
        ),
        (
            "does not match its checksum",
            2,
            vec![raw("data/node-id", b"node-new")],
            Sums::WrongFile,
        ),
        (
            "the manifest does not match its checksum",
            2,
            vec![raw("data/node-id", b"node-new")],
            Sums::WrongManifest,
        ),
        (
            "no checksum list",
            2,
            vec![raw("data/node-id", b"node-new")],
            Sums::Missing,
        ),
        (
            "format 99",
            99,
            vec![raw("data/node-id", b"node-new")],
            Sums::Right,
        ),
        (
            "appears twice",
            2,
            vec![raw("data/node-id", b"one"), raw("data/node-id", b"two")],
            Sums::Right,
        ),
    ];
    for (i, (want, format, entries, sums)) in cases.iter().enumerate() {
        let archive = env.dir.join(format!("crafted-{i}.tar.gz"));
        crafted(&archive, *format, entries, *sums);
        let (ok, out, err) = shepherd(
            &env,
            &[
                "restore",
                archive.to_str().unwrap(),
                "--data-dir",
                target.to_str().unwrap(),
                "--force",
            ],
        );
        assert!(!ok, "{want}: restored\n{out}");
        assert!(
            err.contains(want) && err.contains("nothing was restored"),
            "{want}: {err}"
        );
        assert_eq!(snapshot(&target), before, "{want}: the old data changed");
    }
    assert!(!Path::new("/tmp/shepherd-restore-absolute").exists());
    assert!(!env.dir.join("escape").exists());

    // A good archive replaces the old data, private whatever its modes said
    // (only the owner's execute bit is kept: 0777 becomes 0700).
    let archive = env.dir.join("good.tar.gz");
    crafted(
        &archive,
        2,
        &[
            dir("data/sessions"),
            Raw {
                mode: 0o666,
                ..raw(seg, b"new history")
            },
            Raw {
                mode: 0o644,
                ..raw("data/node-id", b"node-new")
            },
            Raw {
                mode: 0o777,
                ..raw("data/runner/tool", b"#!/bin/sh\n")
            },
        ],
        Sums::Right,
    );
    let (ok, out, err) = shepherd(
        &env,
        &[
            "restore",
            archive.to_str().unwrap(),
            "--data-dir",
            target.to_str().unwrap(),
            "--force",
        ],
    );
    assert!(ok, "{out}{err}");
    let body = |b: &[u8]| Some(b.to_vec());
    assert_eq!(
        snapshot(&target),
        vec![
            ("node-id".into(), 0o600, body(b"node-new")),
            ("runner".into(), 0o700, None),
            ("runner/tool".into(), 0o700, body(b"#!/bin/sh\n")),
            ("sessions".into(), 0o700, None),
            ("sessions/ses_1".into(), 0o700, None),
            ("sessions/ses_1/wk_1".into(), 0o700, None),
            (
                "sessions/ses_1/wk_1/00000000000000000000.seg".into(),
                0o600,
                body(b"new history")
            ),
        ]
    );
    let root = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
    assert_eq!(root & 0o077, 0, "{root:o}");
}

#[test]
fn restore_refuses_links_even_inside() {
    let env = Env::new(Kind::Sqlite);
    let archive = env.dir.join("links.tar.gz");
    crafted_backup(
        &archive,
        &[
            Crafted::Dir("data/real"),
            Crafted::File("data/real/f", b"inside"),
            Crafted::Symlink("data/l", Path::new("real")),
        ],
    );
    let target = env.dir.join("restored");
    let (ok, out, err) = shepherd(
        &env,
        &[
            "restore",
            archive.to_str().unwrap(),
            "--data-dir",
            target.to_str().unwrap(),
        ],
    );
    assert!(!ok, "{out}");
    assert!(err.contains("data/l is a symbolic link"), "{err}");
    assert!(is_empty_dir(&target));
}
