//! Fault suite, misbehaving clients (both stores): clients that hang up
//! mid-request by the hundred while others work normally, and SSE
//! subscribers that stop reading while the log is flooded (other
//! subscribers unaffected, server memory bounded, the stopped ones told to
//! resync when they read again, or dropped after the send timeout if they
//! never do).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use shepherd_core::event::{EventRefs, NewEvent};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::{
    task, wait_for, wait_ready, Env, Kind, Served, Server, SseClient, MARKER_TYPE, OPERATOR,
};

/// Clients hanging up mid-request, concurrently.
const ABORTERS: usize = 64;
/// Clients working normally meanwhile, and their rounds of three requests.
const NORMAL: usize = 4;
const ROUNDS: usize = 25;
/// Tasks in the list the abandoned requests ask for.
const SEEDED: usize = 400;

/// Sends a heavy list request and hangs up a few milliseconds later,
/// again and again until `stop`.
async fn abort_loop(addr: String, i: usize, stop: Arc<AtomicBool>, aborted: Arc<AtomicUsize>) {
    let req = format!(
        "GET /api/v1/tasks?limit=500 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR}\r\n\r\n"
    );
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let Ok(mut sock) = tokio::net::TcpStream::connect(&addr).await else {
            continue;
        };
        if sock.write_all(req.as_bytes()).await.is_err() {
            continue;
        }
        // 1 to 40 ms: some before the server has read the request, most
        // while its database read is under way.
        tokio::time::sleep(Duration::from_millis(((i * 7 + n) % 40 + 1) as u64)).await;
        drop(sock);
        aborted.fetch_add(1, Ordering::Relaxed);
    }
}

async fn clients_hanging_up_mid_request(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    // Every client here holds the one operator token, and the hang-ups alone
    // keep 64 of its requests in flight: the cap per token would refuse some
    // normal ones by design (`slow_clients.rs` tests that cap), which is not
    // what this test is about.
    env.set("SHEPHERD_MAX_REQUESTS_PER_TOKEN", "0");
    let s = Server::start(&env).await;
    // A list worth reading: the aborted requests ask for all of it.
    for i in 0..SEEDED {
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                Some(OPERATOR),
                task(&format!("A-{i}"), "simple"),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    let mut tokens = Vec::new();
    for i in 0..NORMAL {
        let (st, b) = s
            .post(
                "/api/v1/worker/orchestrator/register",
                Some(OPERATOR),
                json!({ "worker_id": format!("normal-{i}") }),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        tokens.push(b["worker_token"].as_str().unwrap().to_owned());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let aborted = Arc::new(AtomicUsize::new(0));
    let addr = s.base.trim_start_matches("http://").to_owned();
    let aborters: Vec<_> = (0..ABORTERS)
        .map(|i| tokio::spawn(abort_loop(addr.clone(), i, stop.clone(), aborted.clone())))
        .collect();
    // The normal clients start once the hang-ups are under way.
    wait_for("clients to hang up", Duration::from_secs(30), || {
        let aborted = aborted.clone();
        async move { (aborted.load(Ordering::Relaxed) >= ABORTERS).then_some(Value::Null) }
    })
    .await;
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let answered = Arc::new(AtomicUsize::new(0));
    let normal: Vec<_> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, tok)| {
            let (base, failures, answered) = (s.base.clone(), failures.clone(), answered.clone());
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .timeout(Duration::from_secs(30))
                    .build()
                    .unwrap();
                for r in 0..ROUNDS {
                    let vtid = format!("N-{i}-{r}");
                    let calls = [
                        (
                            http.post(format!("{base}/api/v1/tasks"))
                                .bearer_auth(OPERATOR)
                                .json(&task(&vtid, "simple")),
                            201,
                            "create",
                        ),
                        (
                            http.get(format!("{base}/api/v1/tasks?limit=50"))
                                .bearer_auth(OPERATOR),
                            200,
                            "list",
                        ),
                        (
                            http.post(format!("{base}/api/v1/worker/orchestrator/heartbeat"))
                                .bearer_auth(&tok)
                                .json(&json!({})),
                            200,
                            "heartbeat",
                        ),
                    ];
                    for (req, want, what) in calls {
                        match req.send().await {
                            Ok(res) if res.status().as_u16() == want => {
                                answered.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(res) => {
                                let st = res.status().as_u16();
                                let body = res.text().await.unwrap_or_default();
                                failures
                                    .lock()
                                    .unwrap()
                                    .push(format!("{what}: {st} {body}"));
                            }
                            Err(e) => failures.lock().unwrap().push(format!("{what}: {e}")),
                        }
                    }
                }
            })
        })
        .collect();
    for n in normal {
        n.await.unwrap();
    }
    let during = aborted.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for a in aborters {
        a.await.unwrap();
    }
    let failures = std::mem::take(&mut *failures.lock().unwrap());
    assert!(
        failures.is_empty(),
        "{} of {} normal requests failed while clients hung up: {:?}",
        failures.len(),
        NORMAL * ROUNDS * 3,
        &failures[..failures.len().min(10)]
    );
    assert_eq!(answered.load(Ordering::Relaxed), NORMAL * ROUNDS * 3);
    // And afterwards.
    let (st, b) = s.get("/api/v1/tasks?limit=500", Some(OPERATOR)).await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["total"], SEEDED + NORMAL * ROUNDS, "{}", b["total"]);
    eprintln!(
        "{kind:?}: {} normal requests answered as expected while {during} requests were abandoned mid-way",
        NORMAL * ROUNDS * 3
    );
    s.stop().await;
}

e2e!(
    clients_hanging_up_mid_request,
    clients_hanging_up_mid_request
);

/// Subscribers that stop reading.
const SLOW: usize = 8;
/// The flood: batches of events, each followed by a marker.
const BATCHES: usize = 40;
const PER_BATCH: usize = 2000;

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// An SSE subscriber with a tiny receive buffer that reads the response
/// head and then nothing.
async fn slow_subscriber(addr: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut sock = socket.connect(addr.parse().unwrap()).await.unwrap();
    let req = format!(
        "GET /api/events?after=now HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OPERATOR}\r\n\r\n"
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = sock.read(&mut byte).await.unwrap();
        assert_eq!(n, 1, "the stream closed before its head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    sock
}

/// What a stopped subscriber's stream holds when it reads again.
#[derive(Debug, PartialEq)]
enum Reread {
    /// What the server had handed to its connection, then a `resync`
    /// notice (its reason), then the end of the response.
    Resync(String),
    /// Every event of the flood, in order and without a gap, through the
    /// last marker: a stream the server itself let fall behind while it
    /// waited for events (too busy to keep up) catches up from the log at
    /// its client's pace, and so owes it no resync when the client is slow
    /// afterwards. Under a heavily loaded machine this is what a stopped
    /// subscriber can get.
    CaughtUp,
}

/// Takes an HTTP/1.1 chunked body apart as it arrives.
#[derive(Default)]
struct Dechunk {
    raw: Vec<u8>,
    /// Bytes of the current chunk still to come (then its CRLF).
    left: Option<usize>,
    ended: bool,
}

impl Dechunk {
    /// Moves what `raw` holds of the body into `out`.
    fn drain(&mut self, out: &mut Vec<u8>) {
        loop {
            match self.left {
                None => {
                    let Some(eol) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                        return;
                    };
                    let line = String::from_utf8_lossy(&self.raw[..eol]).into_owned();
                    let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                        .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
                    self.raw.drain(..eol + 2);
                    if size == 0 {
                        self.ended = true;
                        return;
                    }
                    self.left = Some(size);
                }
                Some(n) => {
                    if self.raw.len() < n + 2 {
                        return;
                    }
                    out.extend_from_slice(&self.raw[..n]);
                    assert_eq!(&self.raw[n..n + 2], b"\r\n", "chunk not followed by CRLF");
                    self.raw.drain(..n + 2);
                    self.left = None;
                }
            }
        }
    }
}

/// Reads a stopped subscriber's stream from where it stopped, checking
/// that what it holds is the flood in order without a gap, until a
/// `resync` notice (and the end of the response) or the last marker.
async fn read_after_stop(sock: &mut tokio::net::TcpStream) -> Reread {
    let mut chunked = Dechunk::default();
    let mut body = Vec::new();
    let mut last_id: Option<i64> = None;
    let mut resync: Option<String> = None;
    let mut total = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let Ok(read) = tokio::time::timeout_at(deadline, sock.read(&mut chunk)).await else {
            panic!(
                "no resync notice and not caught up: the stream went silent after {total} bytes, last event {last_id:?}"
            );
        };
        let n = read.unwrap();
        total += n;
        assert!(
            n > 0,
            "the connection closed after {total} bytes, last event {last_id:?}, resync {resync:?}"
        );
        chunked.raw.extend_from_slice(&chunk[..n]);
        chunked.drain(&mut body);
        // Complete frames only; the rest waits for the next read.
        while let Some(end) = body.windows(2).position(|w| w == b"\n\n") {
            let frame = String::from_utf8(body.drain(..end + 2).collect()).expect("UTF-8 frame");
            let field = |name: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
                    .map(str::to_owned)
            };
            let data = field("data").map(|d| serde_json::from_str::<Value>(&d).expect("JSON data"));
            match field("event").as_deref() {
                // A keep-alive comment.
                None => {}
                Some("resync") => {
                    assert!(resync.is_none(), "a second resync");
                    resync = Some(
                        data.unwrap()["reason"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    );
                }
                Some(kind) => {
                    assert!(resync.is_none(), "{kind} after the resync notice");
                    let id: i64 = field("id").expect("an event's id").parse().unwrap();
                    if let Some(prev) = last_id {
                        assert_eq!(id, prev + 1, "a gap or a repeat after event {prev}");
                    }
                    last_id = Some(id);
                    let last_marker = data.unwrap()["data"]["batch"] == BATCHES - 1;
                    if kind == MARKER_TYPE && last_marker {
                        return Reread::CaughtUp;
                    }
                }
            }
        }
        if let Some(reason) = &resync {
            if chunked.ended {
                assert!(body.is_empty(), "bytes after the resync notice");
                return Reread::Resync(reason.clone());
            }
        }
    }
}

async fn slow_sse_consumers(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    let server = Served::spawn(env.serve_command().stderr(std::process::Stdio::inherit()));
    let (addr, base) = (server.addr.to_string(), server.base.clone());
    let pid = server.child.id();
    wait_ready(&reqwest::Client::new(), &base).await;

    let mut slow = Vec::new();
    for _ in 0..SLOW {
        slow.push(slow_subscriber(&addr).await);
    }
    let mut fast = SseClient::connect(
        &base,
        &format!("/api/events?after=now&types={MARKER_TYPE}"),
        Some(OPERATOR),
        None,
    )
    .await;
    let rss_before = rss_kb(pid);

    // Another writer floods the log; the server publishes what it reads.
    let writer = shepherd_store::Store::open(&env.store_config())
        .await
        .unwrap();
    let pad = "x".repeat(200);
    let mut peak = rss_before;
    for batch in 0..BATCHES {
        flood(&writer, batch, &pad).await;
        writer
            .append_events(vec![NewEvent::new(
                MARKER_TYPE,
                EventRefs::default(),
                json!({ "batch": batch }),
            )])
            .await
            .unwrap();
        peak = peak.max(rss_kb(pid));
    }
    // The subscriber that reads gets every marker, in order, and no resync.
    for want in 0..BATCHES {
        let f = fast
            .next(Duration::from_secs(30))
            .await
            .expect("the reading subscriber keeps receiving");
        assert_eq!(f.event, MARKER_TYPE, "{:?}", f.data);
        assert_eq!(f.data["data"]["batch"], want, "{:?}", f.data);
        peak = peak.max(rss_kb(pid));
    }
    // Requests are served meanwhile.
    let http = reqwest::Client::new();
    let res = http
        .get(format!("{base}/api/v1/tasks"))
        .bearer_auth(OPERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    peak = peak.max(rss_kb(pid));

    // Buffering the flood for each stopped subscriber would cost each of
    // them the whole flood (tens of MB); the server holds at most a chunk
    // per connection and the one shared ring.
    let flood_kb = (BATCHES * PER_BATCH * 300 / 1024) as u64;
    let growth = peak.saturating_sub(rss_before);
    assert!(
        growth < flood_kb * 3,
        "server memory grew {growth} kB with {SLOW} stopped subscribers and a {flood_kb} kB flood"
    );

    // Each stopped subscriber, reading again, gets what was already on its
    // connection, then `resync`, and its stream ends; or, if the server had
    // already fallen behind on its own before the subscriber stopped, every
    // event from the log (see `Reread::CaughtUp`). Either way nothing is
    // lost, doubled or reordered.
    let mut resynced = 0;
    for sock in slow.iter_mut() {
        match read_after_stop(sock).await {
            Reread::Resync(reason) => {
                assert_eq!(reason, "slow_consumer");
                resynced += 1;
            }
            Reread::CaughtUp => {}
        }
    }
    drop(slow);
    // Their stream slots are given back.
    wait_for(
        "the stopped streams to be released",
        Duration::from_secs(20),
        || {
            let (http, base) = (http.clone(), base.clone());
            async move {
                let text = http
                    .get(format!("{base}/metrics"))
                    .bearer_auth(OPERATOR)
                    .send()
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                text.lines()
                    .any(|l| l == "shepherd_sse_clients 1")
                    .then_some(Value::Null)
            }
        },
    )
    .await;
    eprintln!(
        "{kind:?}: {SLOW} stopped subscribers ({resynced} told to resync, the others caught up), {} events flooded ({flood_kb} kB): server RSS {rss_before} kB -> peak {peak} kB",
        BATCHES * (PER_BATCH + 1)
    );
    writer.close();
    drop(server);
}

e2e!(slow_sse_consumers, slow_sse_consumers);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_again_is_dropped_after_the_send_timeout() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR)
        .set("SHEPHERD_SEND_TIMEOUT", "2s");
    let s = Server::start(&env).await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let stuck = slow_subscriber(&addr).await;
    let sse_clients = |s: &Server| {
        let (http, url) = (s.http.clone(), s.url("/metrics"));
        async move {
            let text = http
                .get(url)
                .bearer_auth(OPERATOR)
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            text.lines()
                .find_map(|l| l.strip_prefix("shepherd_sse_clients "))
                .and_then(|v| v.parse::<i64>().ok())
        }
    };
    assert_eq!(sse_clients(&s).await, Some(1));
    // Enough to fill the server's send buffer and the client's window.
    let writer = shepherd_store::Store::open(&env.store_config())
        .await
        .unwrap();
    let pad = "x".repeat(200);
    for batch in 0..10 {
        flood(&writer, batch, &pad).await;
    }
    // The connection stays open on the client's side, but the server gives
    // up on it and frees its stream.
    wait_for(
        "the stuck stream to be dropped",
        Duration::from_secs(60),
        || {
            let n = sse_clients(&s);
            async move { (n.await == Some(0)).then_some(Value::Null) }
        },
    )
    .await;
    drop(stuck);
    writer.close();
    s.stop().await;
}

/// Appends one batch of `PER_BATCH` padded `test.flood` events through
/// another store on the same database.
async fn flood(writer: &shepherd_store::Store, batch: usize, pad: &str) {
    let events: Vec<NewEvent> = (0..PER_BATCH)
        .map(|i| {
            NewEvent::new(
                "test.flood",
                EventRefs::default(),
                json!({ "batch": batch, "i": i, "pad": pad }),
            )
        })
        .collect();
    writer.append_events(events).await.unwrap();
}
