//! The connector protocol as a client: the only way the runner talks to a
//! server, exactly as any external worker would. Also a resumable SSE reader.

use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// Why a call failed.
#[derive(Debug, Clone)]
pub enum CallError {
    /// The server could not be reached (or answered 5xx/503): try again later.
    Unreachable(String),
    /// The server refused the call: retrying the same call will not help.
    Refused {
        status: u16,
        code: String,
        message: String,
    },
}

impl CallError {
    pub fn code(&self) -> &str {
        match self {
            CallError::Unreachable(_) => "unreachable",
            CallError::Refused { code, .. } => code,
        }
    }
    pub fn is_retryable(&self) -> bool {
        matches!(self, CallError::Unreachable(_))
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(m) => write!(f, "server unreachable: {m}"),
            CallError::Refused {
                status,
                code,
                message,
            } => write!(f, "{message} ({code}, HTTP {status})"),
        }
    }
}

impl std::error::Error for CallError {}

/// Percent-encodes a path segment or query value.
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A bearer-authenticated JSON client for one server.
#[derive(Clone)]
pub struct Connector {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Connector {
    pub fn new(base: &str, token: Option<String>) -> Connector {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap_or_default();
        Connector {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http,
        }
    }

    /// The same server, acting with another token (a worker's own).
    pub fn with_token(&self, token: String) -> Connector {
        Connector {
            token: Some(token),
            ..self.clone()
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CallError> {
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let res = req
            .send()
            .await
            .map_err(|e| CallError::Unreachable(e.to_string()))?;
        let status = res.status();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
                && body["error"]["code"] != "worker_at_capacity"
        {
            return Err(CallError::Unreachable(format!(
                "HTTP {}: {}",
                status.as_u16(),
                body["error"]["message"]
            )));
        }
        Err(CallError::Refused {
            status: status.as_u16(),
            code: body["error"]["code"]
                .as_str()
                .unwrap_or("http_error")
                .to_owned(),
            message: body["error"]["message"]
                .as_str()
                .unwrap_or("refused")
                .to_owned(),
        })
    }

    pub async fn post(&self, path: &str, body: Value) -> Result<Value, CallError> {
        self.call(Method::POST, path, Some(&body)).await
    }

    pub async fn get(&self, path: &str) -> Result<Value, CallError> {
        self.call(Method::GET, path, None).await
    }

    pub async fn steps(
        &self,
        run_id: &str,
        claim_token: &str,
        start_index: u64,
        steps: &[Value],
    ) -> Result<Value, CallError> {
        self.post(
            &format!("/api/v1/runs/{run_id}/steps"),
            json!({ "claim_token": claim_token, "start_index": start_index, "steps": steps }),
        )
        .await
    }

    pub async fn progress(
        &self,
        vtid: &str,
        claim_token: &str,
        event: &str,
        message: Option<&str>,
        metadata: Value,
        result: Option<&str>,
    ) -> Result<Value, CallError> {
        self.post(
            &format!("/api/v1/worker/orchestrator/tasks/{vtid}/progress"),
            json!({ "event": event, "message": message, "metadata": metadata, "claim_token": claim_token, "result": result }),
        )
        .await
    }

    pub async fn status(
        &self,
        run_id: &str,
        claim_token: &str,
        text: &str,
    ) -> Result<Value, CallError> {
        self.post(
            &format!("/api/v1/runs/{run_id}/status"),
            json!({ "claim_token": claim_token, "status": text }),
        )
        .await
    }
}

impl Connector {
    /// Reports a run's usage so far (its running total).
    pub async fn usage(
        &self,
        run_id: &str,
        claim_token: &str,
        usage: &shepherd_core::usage::Usage,
    ) -> Result<Value, CallError> {
        self.post(
            &format!("/api/v1/runs/{run_id}/usage"),
            json!({ "claim_token": claim_token, "usage": usage }),
        )
        .await
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct SseFrame {
    pub id: Option<i64>,
    pub event: String,
    pub data: String,
}

/// Follows an SSE stream, reconnecting with `Last-Event-ID` after a drop,
/// until `on_frame` returns false or `stop` resolves. `on_error` hears about
/// refusals (bad filter, bad token) and drops.
pub async fn follow_sse(
    c: &Connector,
    path: &str,
    mut cursor: Option<i64>,
    mut on_frame: impl FnMut(&SseFrame) -> bool,
    mut on_drop: impl FnMut(&str),
) -> Result<(), CallError> {
    let mut backoff = Duration::from_millis(250);
    loop {
        let mut req = c
            .http
            .get(format!("{}{}", c.base, path))
            .header("accept", "text/event-stream")
            .timeout(Duration::from_secs(365 * 24 * 3600));
        if let Some(t) = &c.token {
            req = req.bearer_auth(t);
        }
        if let Some(id) = cursor {
            req = req.header("last-event-id", id.to_string());
        }
        match req.send().await {
            Ok(res) if res.status().is_success() => {
                backoff = Duration::from_millis(250);
                let mut stream = res.bytes_stream();
                let mut buf = String::new();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                while let Some(chunk) = stream.next().await {
                    let Ok(chunk) = chunk else { break };
                    buf.push_str(&String::from_utf8_lossy(&chunk));
                    while let Some(pos) = buf.find('\n') {
                        let line = buf[..pos].trim_end_matches('\r').to_owned();
                        buf.drain(..=pos);
                        if line.is_empty() {
                            if !data.is_empty() {
                                let frame = SseFrame {
                                    id,
                                    event: if event.is_empty() {
                                        "message".into()
                                    } else {
                                        event.clone()
                                    },
                                    data: data.clone(),
                                };
                                if let Some(i) = frame.id {
                                    cursor = Some(i);
                                }
                                if !on_frame(&frame) {
                                    return Ok(());
                                }
                            }
                            id = None;
                            event.clear();
                            data.clear();
                        } else if let Some(v) = line.strip_prefix("id:") {
                            id = v.trim().parse().ok();
                        } else if let Some(v) = line.strip_prefix("event:") {
                            event = v.trim().to_owned();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            if !data.is_empty() {
                                data.push('\n');
                            }
                            data.push_str(v.strip_prefix(' ').unwrap_or(v));
                        }
                    }
                }
                on_drop(&format!(
                    "connection lost; resuming after {}",
                    cursor
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "now".into())
                ));
            }
            Ok(res) if res.status().is_client_error() => {
                let status = res.status().as_u16();
                let body: Value = res.json().await.unwrap_or_default();
                return Err(CallError::Refused {
                    status,
                    code: body["error"]["code"]
                        .as_str()
                        .unwrap_or("http_error")
                        .to_owned(),
                    message: body["error"]["message"]
                        .as_str()
                        .unwrap_or("refused")
                        .to_owned(),
                });
            }
            Ok(res) => on_drop(&format!("HTTP {}", res.status().as_u16())),
            Err(e) => on_drop(&format!("cannot reach {}: {e}", c.base)),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
