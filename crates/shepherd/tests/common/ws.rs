//! A real WebSocket client for PTY workers (tokio-tungstenite), reading the
//! the sessions contract messages and collecting what the terminal showed.

#![allow(dead_code)]

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

pub type Stream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How to connect.
#[derive(Default, Clone)]
pub struct Opts<'a> {
    pub token: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub protocols: Option<&'a str>,
    pub query: Option<String>,
    /// A `Host` header instead of the URL's.
    pub host: Option<&'a str>,
}

pub struct Term {
    pub ws: Stream,
    /// Everything shown so far: history then output.
    pub screen: String,
    pub offset: u64,
    pub epoch: Option<i64>,
    pub exit: Option<Value>,
    pub messages: Vec<Value>,
    /// The subprotocol the server selected.
    pub protocol: Option<String>,
}

pub fn path(session: &str, worker: &str) -> String {
    format!("/ws/session/{session}/worker/{worker}")
}

/// Connects; Err carries the HTTP status of a refused handshake.
pub async fn try_connect(base: &str, path: &str, o: Opts<'_>) -> Result<Term, u16> {
    let mut url = format!("{}{}", base.replacen("http://", "ws://", 1), path);
    if let Some(q) = &o.query {
        url.push('?');
        url.push_str(q);
    }
    let mut req = url.into_client_request().unwrap();
    if let Some(t) = o.token {
        req.headers_mut().insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
    }
    if let Some(host) = o.host {
        req.headers_mut()
            .insert("host", HeaderValue::from_str(host).unwrap());
    }
    if let Some(origin) = o.origin {
        req.headers_mut()
            .insert("origin", HeaderValue::from_str(origin).unwrap());
    }
    if let Some(p) = o.protocols {
        req.headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_str(p).unwrap());
    }
    match tokio_tungstenite::connect_async(req).await {
        Ok((ws, res)) => Ok(Term {
            ws,
            screen: String::new(),
            offset: 0,
            epoch: None,
            exit: None,
            messages: Vec::new(),
            protocol: res
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        }),
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => Err(res.status().as_u16()),
        Err(e) => panic!("websocket connect failed: {e}"),
    }
}

pub async fn connect(base: &str, session: &str, worker: &str, token: Option<&str>) -> Term {
    try_connect(
        base,
        &path(session, worker),
        Opts {
            token,
            ..Default::default()
        },
    )
    .await
    .expect("websocket handshake")
}

impl Term {
    /// The next message, or None on close or after `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        loop {
            let msg = tokio::time::timeout(wait, self.ws.next()).await.ok()??;
            match msg.ok()? {
                Message::Text(t) => {
                    let v: Value = serde_json::from_str(t.as_str()).expect("JSON message");
                    match v["type"].as_str() {
                        Some("history") => {
                            self.screen.push_str(v["data"].as_str().unwrap());
                            self.offset = v["offset"].as_u64().unwrap();
                            self.epoch = v["epoch"].as_i64();
                        }
                        Some("output") => {
                            self.screen.push_str(v["data"].as_str().unwrap());
                            let off = v["offset"].as_u64().unwrap();
                            assert!(off > self.offset, "offsets only grow");
                            self.offset = off;
                        }
                        Some("exit") => self.exit = Some(v.clone()),
                        _ => {}
                    }
                    self.messages.push(v.clone());
                    return Some(v);
                }
                Message::Close(_) => return None,
                _ => continue,
            }
        }
    }

    /// Reads until the screen contains `needle`; panics after `wait`.
    pub async fn wait_for(&mut self, needle: &str, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while !self.screen.contains(needle) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || self.next(left).await.is_none() {
                panic!("{needle:?} did not appear; screen so far:\n{}", self.screen);
            }
        }
    }

    /// Reads until the shell shows a prompt (`$ ` or `# `) after the last
    /// `after` on the screen (anywhere when `after` is empty), as a person
    /// waits for the prompt before typing: a shell may drop what was typed
    /// while it was still starting.
    pub async fn wait_prompt(&mut self, after: &str, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let from = match after {
                "" => 0,
                a => self
                    .screen
                    .rfind(a)
                    .map_or(self.screen.len(), |i| i + a.len()),
            };
            let tail = &self.screen[from..];
            if tail.contains("$ ") || tail.contains("# ") {
                return;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || self.next(left).await.is_none() {
                panic!("no prompt after {after:?}; screen so far:\n{}", self.screen);
            }
        }
    }

    /// Reads until an `exit` message arrives; returns it.
    pub async fn wait_exit(&mut self, wait: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + wait;
        while self.exit.is_none() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() || self.next(left).await.is_none() {
                break;
            }
        }
        self.exit.clone().expect("an exit message")
    }

    /// Reads until the history message (the first) has arrived.
    pub async fn history(&mut self) -> Value {
        loop {
            let v = self
                .next(Duration::from_secs(20))
                .await
                .expect("a history message");
            if v["type"] == "history" {
                return v;
            }
        }
    }

    pub async fn send(&mut self, v: Value) {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn type_line(&mut self, line: &str) {
        self.send(json!({"type": "input", "data": format!("{line}\r")}))
            .await;
    }

    /// Waits for the server to close the socket.
    pub async fn closed(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.next(left).await.is_none() {
                return true;
            }
        }
    }
}

/// Live (not zombie) processes whose session id is `sid`.
pub fn session_members(sid: i64) -> Vec<i64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f[0] != "Z" && f[3].parse::<i64>().ok() == Some(sid) {
            out.push(pid);
        }
    }
    out
}

/// Polls until `f` holds; panics with `what` after `wait`.
pub async fn eventually(what: &str, wait: Duration, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + wait;
    while !f() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
