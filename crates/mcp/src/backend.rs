//! How the MCP tools reach Shepherd: always through its public HTTP API.
//!
//! Over stdio (`shepherd mcp`) the API is a remote server reached with
//! `reqwest` and the operator token. Over Streamable HTTP (`/mcp`) it is the
//! server's own axum [`Router`], called in-process as a tower service with
//! the MCP caller's `Authorization` header forwarded. Either way a tool's
//! request goes through the same authentication, validation and error codes
//! as any REST client's, so the two transports cannot drift apart.

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tower::ServiceExt;

/// Response header carrying the event-log cursor a response is valid at.
const CURSOR_HEADER: &str = "x-shepherd-cursor";

/// Where API requests go.
#[derive(Clone)]
pub enum Backend {
    /// A server elsewhere, at `base` (`http://host:port`).
    Remote { http: reqwest::Client, base: String },
    /// The serving process's own router.
    InProcess(Router),
}

/// The API as one caller sees it: a backend plus that caller's credentials.
#[derive(Clone)]
pub struct Api {
    backend: Backend,
    authorization: Option<HeaderValue>,
}

/// An error answered by the API (or met on the way to it), with the API's
/// stable code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: String,
    pub message: String,
    /// The HTTP status, when the API answered at all.
    pub status: Option<u16>,
}

impl ApiError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ApiError {
            code: code.to_owned(),
            message: message.into(),
            status: None,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for ApiError {}

/// A successful answer: its JSON body and the cursor it is valid at.
#[derive(Debug)]
pub struct Reply {
    pub body: Value,
    pub cursor: Option<i64>,
}

impl Reply {
    /// Reads the body as `T`; a mismatch means the API and this crate
    /// disagree on a shape, which is a bug to report rather than hide.
    pub fn parse<T: DeserializeOwned>(self) -> Result<T, ApiError> {
        serde_json::from_value(self.body).map_err(|e| {
            ApiError::new(
                "unexpected_response",
                format!("the API answered an unexpected shape: {e}"),
            )
        })
    }
}

/// One server-sent event from `/api/events`.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub event: String,
    pub data: String,
}

impl Api {
    pub fn new(backend: Backend, authorization: Option<HeaderValue>) -> Self {
        Api {
            backend,
            authorization,
        }
    }

    /// The same API with other credentials.
    pub fn with_authorization(&self, authorization: Option<HeaderValue>) -> Self {
        Api {
            backend: self.backend.clone(),
            authorization,
        }
    }

    /// A remote server at `base`, with an optional bearer token; an
    /// `https://` server is trusted as by the CLI and the runner: the web
    /// roots, plus the CA in `SHEPHERD_CA_CERT` when it is set.
    pub fn remote(base: &str, token: Option<&str>) -> Result<Self, ApiError> {
        Self::remote_trusting(base, token, &shepherd_client::Trust::from_env())
    }

    /// As [`Api::remote`], checking the server's certificate against `trust`.
    pub fn remote_trusting(
        base: &str,
        token: Option<&str>,
        trust: &shepherd_client::Trust,
    ) -> Result<Self, ApiError> {
        let authorization = match token {
            Some(t) => Some(HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                ApiError::new(
                    "invalid_token",
                    "the token has characters a header cannot carry",
                )
            })?),
            None => None,
        };
        let http = trust
            .apply(reqwest::Client::builder())
            .and_then(|b| {
                b.build().map_err(|e| shepherd_client::ClientError::Config {
                    message: format!("cannot set up HTTP: {e}"),
                })
            })
            .map_err(|e| ApiError::new("bad_config", e.to_string()))?;
        Ok(Api::new(
            Backend::Remote {
                http,
                base: base.trim_end_matches('/').to_owned(),
            },
            authorization,
        ))
    }

    pub async fn get(&self, path: &str) -> Result<Reply, ApiError> {
        self.call(Method::GET, path, None).await
    }

    /// `POST path` with a protocol request body.
    pub async fn post<B: serde::Serialize>(&self, path: &str, body: &B) -> Result<Reply, ApiError> {
        let body = serde_json::to_value(body)
            .map_err(|e| ApiError::new("internal", format!("request body: {e}")))?;
        self.call(Method::POST, path, Some(&body)).await
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Reply, ApiError> {
        let (status, cursor, bytes) = match &self.backend {
            Backend::Remote { http, base } => {
                let mut req = http.request(method, format!("{base}{path}"));
                if let Some(a) = &self.authorization {
                    req = req.header(AUTHORIZATION, a.clone());
                }
                if let Some(b) = body {
                    req = req.json(b);
                }
                let res = req.send().await.map_err(|e| {
                    ApiError::new(
                        "unreachable",
                        format!("cannot reach the Shepherd server at {base}: {}", causes(&e)),
                    )
                })?;
                let status = res.status();
                let cursor = cursor_of(res.headers());
                let bytes = res.bytes().await.map_err(|e| {
                    ApiError::new(
                        "unreachable",
                        format!("reading the answer failed: {}", causes(&e)),
                    )
                })?;
                (status, cursor, bytes)
            }
            Backend::InProcess(router) => {
                let res = router
                    .clone()
                    .oneshot(self.request(method, path, body)?)
                    .await
                    .map_err(|e| ApiError::new("internal", e.to_string()))?;
                let status = res.status();
                let cursor = cursor_of(res.headers());
                let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
                    .await
                    .map_err(|e| ApiError::new("internal", e.to_string()))?;
                (status, cursor, bytes)
            }
        };
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| {
                ApiError::new(
                    "unexpected_response",
                    format!("the API answered HTTP {status} with a body that is not JSON: {e}"),
                )
            })?
        };
        if status.is_success() {
            return Ok(Reply { body, cursor });
        }
        Err(error_of(status, &body))
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Request<Body>, ApiError> {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(a) = &self.authorization {
            b = b.header(AUTHORIZATION, a.clone());
        }
        let body = match body {
            Some(v) => {
                b = b.header(CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(v).unwrap_or_default())
            }
            None => Body::empty(),
        };
        b.body(body)
            .map_err(|e| ApiError::new("bad_request", format!("cannot build the request: {e}")))
    }

    /// Follows `/api/events` with the given query (filters and `after`),
    /// yielding events until the server ends the stream or drops.
    pub async fn events(&self, query: &str) -> Result<BoxStream<'static, SseEvent>, ApiError> {
        let path = format!("/api/events?{query}");
        let bytes: BoxStream<'static, Result<Bytes, String>> = match &self.backend {
            Backend::Remote { http, base } => {
                let mut req = http
                    .get(format!("{base}{path}"))
                    .header(ACCEPT, "text/event-stream");
                if let Some(a) = &self.authorization {
                    req = req.header(AUTHORIZATION, a.clone());
                }
                let res = req.send().await.map_err(|e| {
                    ApiError::new(
                        "unreachable",
                        format!("cannot reach the Shepherd server at {base}: {}", causes(&e)),
                    )
                })?;
                if !res.status().is_success() {
                    let status = res.status();
                    let body = res.json().await.unwrap_or(Value::Null);
                    return Err(error_of(status, &body));
                }
                res.bytes_stream().map_err(|e| e.to_string()).boxed()
            }
            Backend::InProcess(router) => {
                let mut req = self.request(Method::GET, &path, None)?;
                req.headers_mut()
                    .insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
                let res = router
                    .clone()
                    .oneshot(req)
                    .await
                    .map_err(|e| ApiError::new("internal", e.to_string()))?;
                if !res.status().is_success() {
                    let status = res.status();
                    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
                        .await
                        .unwrap_or_default();
                    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    return Err(error_of(status, &body));
                }
                res.into_body()
                    .into_data_stream()
                    .map_err(|e| e.to_string())
                    .boxed()
            }
        };
        Ok(sse_events(bytes))
    }
}

/// Builds `?a=1&b=x` from the pairs that have a value, percent-encoded.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so a
/// value is safe as a query value or a path segment.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An error with its causes: reqwest's own message ("error sending
/// request") hides why (refused, a certificate not trusted, DNS).
fn causes(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

fn cursor_of(headers: &http::HeaderMap) -> Option<i64> {
    headers
        .get(CURSOR_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(shepherd_protocol::parse_cursor)
}

fn error_of(status: StatusCode, body: &Value) -> ApiError {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Inner,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        code: String,
        message: String,
    }
    match serde_json::from_value::<Body>(body.clone()) {
        Ok(b) => ApiError {
            code: b.error.code,
            message: b.error.message,
            status: Some(status.as_u16()),
        },
        Err(_) => ApiError {
            code: "http_error".into(),
            message: format!("the API answered HTTP {status}"),
            status: Some(status.as_u16()),
        },
    }
}

/// Splits a byte stream into server-sent events (`id:`, `event:`, `data:`
/// lines, a blank line ending each). Comments and `retry:` are skipped; the
/// stream ends at the first transport error.
pub fn sse_events(
    bytes: BoxStream<'static, Result<Bytes, String>>,
) -> BoxStream<'static, SseEvent> {
    futures::stream::unfold(
        (bytes, Vec::<u8>::new(), Vec::<SseEvent>::new()),
        |(mut bytes, mut buf, mut ready)| async move {
            loop {
                if !ready.is_empty() {
                    let e = ready.remove(0);
                    return Some((e, (bytes, buf, ready)));
                }
                match bytes.next().await {
                    Some(Ok(chunk)) => {
                        buf.extend_from_slice(&chunk);
                        ready.extend(take_frames(&mut buf));
                    }
                    _ => return None,
                }
            }
        },
    )
    .boxed()
}

/// Takes every complete frame out of `buf`, leaving a partial one behind.
fn take_frames(buf: &mut Vec<u8>) -> Vec<SseEvent> {
    let mut out = Vec::new();
    loop {
        let Some(end) = buf.windows(2).position(|w| w == b"\n\n") else {
            return out;
        };
        let frame: Vec<u8> = buf.drain(..end + 2).collect();
        let text = String::from_utf8_lossy(&frame);
        let mut e = SseEvent {
            id: None,
            event: "message".into(),
            data: String::new(),
        };
        let mut any = false;
        for line in text.lines() {
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            match field {
                "id" => {
                    e.id = value.parse().ok();
                    any = true;
                }
                "event" => {
                    e.event = value.to_owned();
                    any = true;
                }
                "data" => {
                    if !e.data.is_empty() {
                        e.data.push('\n');
                    }
                    e.data.push_str(value);
                    any = true;
                }
                _ => {}
            }
        }
        if any {
            out.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_encoded_and_absent_ones_left_out() {
        assert_eq!(
            query(&[
                ("since", Some("2026-01-01T00:00:00+01:00".into())),
                ("limit", None),
                ("q", Some("a b/é".into()))
            ]),
            "?since=2026-01-01T00%3A00%3A00%2B01%3A00&q=a%20b%2F%C3%A9"
        );
        assert_eq!(query(&[("a", None)]), "");
    }

    #[test]
    fn frames_split_across_chunks_are_joined() {
        let mut buf =
            b"id: 7\nevent: run.step\ndata: {\"a\":1}\n\n: keepalive\n\nid: 8\nda".to_vec();
        let got = take_frames(&mut buf);
        assert_eq!(
            got,
            vec![SseEvent {
                id: Some(7),
                event: "run.step".into(),
                data: "{\"a\":1}".into()
            }]
        );
        assert_eq!(buf, b"id: 8\nda");
        buf.extend_from_slice(b"ta: x\ndata: y\n\n");
        let got = take_frames(&mut buf);
        assert_eq!(got[0].id, Some(8));
        assert_eq!(got[0].data, "x\ny");
        assert!(buf.is_empty());
    }
}
