//! PTY benchmark: what the WebSocket costs over reading a PTY directly.
//!
//! Starts the binary Cargo built for this bench (`shepherd serve`) as a
//! child process on a free loopback port with a fresh SQLite data directory
//! and `SHELL=/bin/sh`, creates a session with terminal tabs, and measures in
//! the same run:
//!
//! 1. keystroke echo latency: one character sent as an `input` message until
//!    its echo arrives as `output`, beside the same on a PTY this process
//!    opens itself (pty-process, `/bin/sh`), p50 / p99 over
//!    `SHEPHERD_BENCH_KEYS` keystrokes (default 1000);
//! 2. output throughput: `cat` of a `SHEPHERD_BENCH_MIB` MiB file (default
//!    100) through one attached client, beside `cat` of the same file on a
//!    direct PTY read to its end;
//! 3. server memory per idle attached client: the server's VmRSS before and
//!    after `SHEPHERD_BENCH_CLIENTS` clients (default 200) attach to a fresh
//!    terminal and receive their history.
//!
//! 4. the same three through a runner's host: `shepherd runner` (its own
//!    data directory and sessions root, no agents) holds the PTY, and the
//!    client attaches through the server, which relays over the host's
//!    link; echo and throughput beside the local tab's, memory as the
//!    server's and the runner's RSS per idle relayed client.
//!
//! Goals: p99 echo < 5 ms, WebSocket throughput >= half the direct read,
//! < 64 KiB per idle client; through the relay, echo p99 < 5 ms more than
//! the local tab's and throughput >= half of it.
//! Run: `cargo bench -p shepherd --bench pty`.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use shepherd_testkit::Served;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Server {
    served: Served,
    base: String,
    dir: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: SIGTERM to our own child; it ends its PTYs and exits.
        unsafe {
            libc::kill(self.served.pid(), libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.served.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

async fn http(method: reqwest::Method, url: String, body: Value) -> Value {
    let res = reqwest::Client::new()
        .request(method, url)
        .json(&body)
        .send()
        .await
        .expect("request");
    res.json().await.expect("JSON")
}

async fn attach(base: &str, sid: &str, wid: &str) -> Ws {
    let url = format!(
        "{}/ws/session/{sid}/worker/{wid}",
        base.replacen("http://", "ws://", 1)
    );
    let (ws, _) = tokio_tungstenite::connect_async(url).await.expect("attach");
    ws
}

async fn next_json(ws: &mut Ws) -> Value {
    loop {
        match ws.next().await.expect("open").expect("frame") {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            _ => continue,
        }
    }
}

async fn input(ws: &mut Ws, data: &str) {
    ws.send(Message::Text(
        json!({"type": "input", "data": data}).to_string().into(),
    ))
    .await
    .unwrap();
}

/// Reads until nothing arrives for `quiet`; returns the last offset seen.
async fn drain(ws: &mut Ws, quiet: Duration) -> Option<u64> {
    let mut last = None;
    while let Ok(Some(Ok(m))) = tokio::time::timeout(quiet, ws.next()).await {
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if let Some(o) = v["offset"].as_u64() {
                last = Some(o);
            }
        }
    }
    last
}

async fn ws_echo(ws: &mut Ws, keys: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(keys);
    for i in 0..keys {
        if i % 100 == 0 {
            input(ws, "\u{15}").await; // Ctrl-U: keep the line short
            drain(ws, Duration::from_millis(50)).await;
        }
        let t = Instant::now();
        input(ws, "x").await;
        loop {
            let v = next_json(ws).await;
            if v["type"] == "output" && v["data"].as_str().unwrap().contains('x') {
                break;
            }
        }
        out.push(t.elapsed());
    }
    out
}

async fn direct_echo(keys: usize) -> Vec<Duration> {
    let (mut pty, pts) = pty_process::open().unwrap();
    pty.resize(pty_process::Size::new(24, 80)).unwrap();
    let mut child = pty_process::Command::new("/bin/sh").spawn(pts).unwrap();
    let mut buf = vec![0u8; 4096];
    // Let the prompt arrive.
    let _ = tokio::time::timeout(Duration::from_millis(300), pty.read(&mut buf)).await;
    let mut out = Vec::with_capacity(keys);
    for i in 0..keys {
        if i % 100 == 0 {
            pty.write_all(b"\x15").await.unwrap();
            while let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_millis(50), pty.read(&mut buf)).await
            {
            }
        }
        let t = Instant::now();
        pty.write_all(b"x").await.unwrap();
        loop {
            let n = pty.read(&mut buf).await.unwrap();
            if buf[..n].contains(&b'x') {
                break;
            }
        }
        out.push(t.elapsed());
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    out
}

async fn ws_cat(ws: &mut Ws, file: &str, bytes: u64) -> (Duration, u64) {
    drain(ws, Duration::from_millis(100)).await;
    input(ws, "\u{15}").await;
    let start = drain(ws, Duration::from_millis(200)).await.unwrap_or(0);
    let t = Instant::now();
    input(ws, &format!("cat {file}; echo cat-done-$((40+2))\r")).await;
    let mut last;
    let mut tail = String::new();
    loop {
        let v = next_json(ws).await;
        match v["type"].as_str() {
            Some("output") => {
                last = v["offset"].as_u64().unwrap();
                let d = v["data"].as_str().unwrap();
                tail.push_str(&d[d.len().saturating_sub(64)..]);
                if tail.len() > 256 {
                    tail.drain(..tail.len() - 128);
                }
                if tail.contains("cat-done-42") {
                    break;
                }
            }
            Some("history") => {
                // Fell behind the broadcast window and was given the
                // current screen instead; offsets still count every byte.
                eprintln!("the client fell behind and was sent a fresh history");
            }
            _ => {}
        }
    }
    let elapsed = t.elapsed();
    let moved = last - start;
    assert!(
        moved >= bytes,
        "the whole file went through ({moved} < {bytes})"
    );
    (elapsed, moved)
}

async fn direct_cat(file: &str) -> (Duration, u64) {
    let (mut pty, pts) = pty_process::open().unwrap();
    pty.resize(pty_process::Size::new(24, 80)).unwrap();
    let t = Instant::now();
    let mut child = pty_process::Command::new("cat")
        .arg(file)
        .spawn(pts)
        .unwrap();
    let mut buf = vec![0u8; 32 * 1024];
    let mut total = 0u64;
    loop {
        match pty.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n as u64,
        }
    }
    let _ = child.wait().await;
    (t.elapsed(), total)
}

fn main() {
    let keys = env_usize("SHEPHERD_BENCH_KEYS", 1000);
    let mib = env_usize("SHEPHERD_BENCH_MIB", 100);
    let clients = env_usize("SHEPHERD_BENCH_CLIENTS", 200);
    let dir = std::env::temp_dir().join(format!("shepherd-pty-bench-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let file = dir.join("big.txt");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        let line =
            b"the quick brown fox jumps over the lazy dog 0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ\n";
        let mut written = 0usize;
        while written < mib * 1024 * 1024 {
            f.write_all(line).unwrap();
            written += line.len();
        }
    }
    let file_bytes = std::fs::metadata(&file).unwrap().len();
    let served = Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .arg("serve")
            .env("SHEPHERD_DATA_DIR", dir.join("data"))
            .env("SHEPHERD_LISTEN", "127.0.0.1:0")
            .env("SHEPHERD_LOG", "warn")
            .env("SHELL", "/bin/sh")
            .env_remove("SHEPHERD_CONFIG")
            .env_remove("SHEPHERD_DATABASE_URL")
            .env_remove("SHEPHERD_AUTH_TOKEN")
            .current_dir(&dir),
    );
    let server = Server {
        base: served.base.clone(),
        served,
        dir: dir.clone(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !client
            .get(format!("{}/readyz", server.base))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            assert!(Instant::now() < deadline, "server not ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let work = dir.join("work").display().to_string();
        let s = http(
            reqwest::Method::POST,
            format!("{}/api/v1/sessions", server.base),
            json!({"location_path": work}),
        )
        .await;
        let sid = s["id"].as_str().unwrap().to_owned();
        let add = |s: String| {
            let url = format!("{}/api/v1/sessions/{s}/workers", server.base);
            async move { http(reqwest::Method::POST, url, json!({"type": "terminal"})).await }
        };
        let w = add(sid.clone()).await;
        let wid = w["id"].as_str().unwrap().to_owned();
        let mut ws = attach(&server.base, &sid, &wid).await;
        drain(&mut ws, Duration::from_millis(300)).await;

        println!("== PTY benchmark == {keys} keystrokes, {mib} MiB cat, {clients} idle clients");
        let mut via_ws = ws_echo(&mut ws, keys).await;
        let mut direct = direct_echo(keys).await;
        via_ws.sort();
        direct.sort();
        println!(
            "echo latency  WebSocket p50 {} p99 {} max {} | direct PTY p50 {} p99 {} max {}",
            ms(pct(&via_ws, 0.5)),
            ms(pct(&via_ws, 0.99)),
            ms(*via_ws.last().unwrap()),
            ms(pct(&direct, 0.5)),
            ms(pct(&direct, 0.99)),
            ms(*direct.last().unwrap()),
        );

        let path = file.display().to_string();
        let (t_ws, n_ws) = ws_cat(&mut ws, &path, file_bytes).await;
        let (t_direct, n_direct) = direct_cat(&path).await;
        let rate = |n: u64, t: Duration| n as f64 / 1048576.0 / t.as_secs_f64();
        println!(
            "cat throughput  WebSocket {:.1} MiB/s ({} bytes in {:.2} s) | direct PTY {:.1} MiB/s ({} bytes in {:.2} s) | ratio {:.2}",
            rate(n_ws, t_ws),
            n_ws,
            t_ws.as_secs_f64(),
            rate(n_direct, t_direct),
            n_direct,
            t_direct.as_secs_f64(),
            rate(n_ws, t_ws) / rate(n_direct, t_direct),
        );
        drop(ws);

        let idle = add(sid.clone()).await;
        let iid = idle["id"].as_str().unwrap().to_owned();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let pid = server.served.child.id();
        let before = rss_kib(pid);
        let mut conns = Vec::with_capacity(clients);
        for _ in 0..clients {
            let mut c = attach(&server.base, &sid, &iid).await;
            loop {
                if next_json(&mut c).await["type"] == "history" {
                    break;
                }
            }
            conns.push(c);
        }
        // Let allocator caches settle before reading RSS.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = rss_kib(pid);
        println!(
            "idle clients  server RSS {before} KiB -> {after} KiB with {clients} attached: {:.1} KiB per client",
            (after.saturating_sub(before)) as f64 / clients as f64
        );
        drop(conns);

        // The relay: the same tab on a runner's host.
        let far = dir.join("far");
        std::fs::create_dir_all(far.join("work")).unwrap();
        let mut runner = Runner(
            Command::new(env!("CARGO_BIN_EXE_shepherd"))
                .args(["runner", "--server", &server.base])
                .env("SHEPHERD_DATA_DIR", far.join("data"))
                .env("SHEPHERD_SESSIONS_ROOT", far.join("work"))
                .env("SHEPHERD_LOG", "warn")
                .env("SHELL", "/bin/sh")
                .env_remove("SHEPHERD_CONFIG")
                .env_remove("SHEPHERD_AUTH_TOKEN")
                .current_dir(&dir)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("shepherd runner"),
        );
        let far_work = far.join("work").display().to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        let remote = loop {
            let hosts = http(reqwest::Method::GET, format!("{}/api/v1/hosts", server.base), Value::Null).await;
            let host = hosts["hosts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|h| h["kind"] == "runner" && h["online"] == true)
                .and_then(|h| h["id"].as_str().map(str::to_owned));
            if let Some(host) = host {
                let s = http(
                    reqwest::Method::POST,
                    format!("{}/api/v1/sessions", server.base),
                    json!({"location_path": far_work, "host": host}),
                )
                .await;
                // Until its link is open, the host answers host_offline.
                if let Some(id) = s["id"].as_str() {
                    break id.to_owned();
                }
            }
            assert!(Instant::now() < deadline, "the runner's host never took a session");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let rw = add(remote.clone()).await;
        let rwid = rw["id"].as_str().unwrap().to_owned();
        let mut ws = attach(&server.base, &remote, &rwid).await;
        drain(&mut ws, Duration::from_millis(300)).await;
        let mut relayed = ws_echo(&mut ws, keys).await;
        relayed.sort();
        println!(
            "relay echo  p50 {} p99 {} max {} | local tab p50 {} p99 {} | p99 added {}",
            ms(pct(&relayed, 0.5)),
            ms(pct(&relayed, 0.99)),
            ms(*relayed.last().unwrap()),
            ms(pct(&via_ws, 0.5)),
            ms(pct(&via_ws, 0.99)),
            ms(pct(&relayed, 0.99).saturating_sub(pct(&via_ws, 0.99))),
        );
        let (t_relay, n_relay) = ws_cat(&mut ws, &path, file_bytes).await;
        println!(
            "relay cat  {:.1} MiB/s ({} bytes in {:.2} s) | local tab {:.1} MiB/s | ratio {:.2}",
            rate(n_relay, t_relay),
            n_relay,
            t_relay.as_secs_f64(),
            rate(n_ws, t_ws),
            rate(n_relay, t_relay) / rate(n_ws, t_ws),
        );
        drop(ws);
        let idle = add(remote.clone()).await;
        let iid = idle["id"].as_str().unwrap().to_owned();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rpid = runner.0.id();
        let (before, rbefore) = (rss_kib(pid), rss_kib(rpid));
        let mut conns = Vec::with_capacity(clients);
        for _ in 0..clients {
            let mut c = attach(&server.base, &remote, &iid).await;
            loop {
                if next_json(&mut c).await["type"] == "history" {
                    break;
                }
            }
            conns.push(c);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (after, rafter) = (rss_kib(pid), rss_kib(rpid));
        println!(
            "relayed idle clients  server RSS {before} KiB -> {after} KiB ({:.1} KiB per client), runner RSS {rbefore} KiB -> {rafter} KiB ({:.1} KiB per client)",
            (after.saturating_sub(before)) as f64 / clients as f64,
            (rafter.saturating_sub(rbefore)) as f64 / clients as f64,
        );
        drop(conns);
        let _ = runner.0.kill();
        let _ = runner.0.wait();
    });
    drop(server);
}

/// The runner, ended with the bench however it ends.
struct Runner(std::process::Child);

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
