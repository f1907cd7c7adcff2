//! The one client of Shepherd's API, used by the runner, the CLI and the
//! MCP server alike (and by anyone writing a worker in Rust).
//!
//! Every route has a typed method whose answer parses into the protocol
//! crate's types; nothing reads a response by string index. Calls carry the
//! bearer token; idempotent reads are retried with jittered exponential
//! backoff when the server cannot be reached or answers 502-504; `https://`
//! servers work through rustls, trusting the Mozilla roots plus the CA in
//! `SHEPHERD_CA_CERT` when it is set. [`Client::follow`] reads the event
//! stream and resumes after drops (see [`sse`]). Requests travel over HTTP,
//! or by any other [`Transport`] (the server's `/mcp` endpoint calls its own
//! router in-process).

pub mod error;
pub mod sse;
pub mod transport;

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use futures::StreamExt;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use shepherd_protocol as p;

pub use error::ClientError;
/// The TLS library whose configuration [`Trust::tls_config`] holds.
pub use rustls;
pub use sse::{Frame, Frames, Start};
pub use transport::{Http, Transport};

/// Environment variable naming a PEM file of a CA certificate to trust.
pub const CA_CERT_ENV: &str = "SHEPHERD_CA_CERT";

/// Percent-encodes a path segment.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Turns what a person typed (`localhost:7700`, `https://h/`) into a base URL.
pub fn normalise_base(server: &str) -> Result<String, ClientError> {
    let s = server.trim().trim_end_matches('/');
    if s.is_empty() {
        return Err(ClientError::config("the server address is empty"));
    }
    let with_scheme = if s.contains("://") {
        s.to_owned()
    } else {
        format!("http://{s}")
    };
    let url = reqwest::Url::parse(&with_scheme).map_err(|e| {
        ClientError::config(format!(
            "{server:?} is not a server address ({e}); expected e.g. http://127.0.0.1:7700"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ClientError::config(format!(
            "{server:?}: only http:// and https:// servers are supported"
        )));
    }
    Ok(with_scheme)
}

/// A bearer-authenticated client of one server, over a [`Transport`]:
/// HTTP unless the caller brings another.
#[derive(Clone)]
pub struct Client {
    transport: Arc<dyn Transport>,
    credentials: Option<Credentials>,
    /// Attempts for a retried call beyond the first.
    retries: usize,
}

/// What the requests say about who sends them.
#[derive(Clone)]
enum Credentials {
    /// A bearer token. Its header is made per request, so a token no header
    /// can carry fails the call that would send it.
    Token(String),
    /// An `Authorization` header passed on as another request carried it.
    Header(HeaderValue),
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base())
            .field("token", &self.credentials.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// What an `https://` server's certificate is checked against.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// PEM files of CA certificates trusted besides the Mozilla roots
    /// (every certificate in each file).
    pub ca_files: Vec<String>,
    /// A whole rustls configuration used instead (then `ca_files` is not
    /// read): how the built-in runner trusts its own server's certificate.
    pub tls_config: Option<rustls::ClientConfig>,
}

impl Trust {
    /// The Mozilla roots plus the CA in `SHEPHERD_CA_CERT`, when it is set.
    pub fn from_env() -> Trust {
        Trust {
            ca_files: std::env::var(CA_CERT_ENV)
                .ok()
                .filter(|p| !p.trim().is_empty())
                .into_iter()
                .collect(),
            tls_config: None,
        }
    }

    /// The same trust as a rustls configuration, for connections made
    /// without reqwest (the CLI's session WebSocket): the Mozilla roots
    /// plus every certificate in the CA files.
    pub fn rustls_config(&self) -> Result<rustls::ClientConfig, ClientError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        if let Some(config) = &self.tls_config {
            return Ok(config.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for path in &self.ca_files {
            let pem = std::fs::read(path).map_err(|e| {
                ClientError::config(format!("{CA_CERT_ENV}={path}: cannot read: {e}"))
            })?;
            let not_pem =
                || ClientError::config(format!("{CA_CERT_ENV}={path}: not a PEM certificate"));
            let mut any = false;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                roots
                    .add(cert.map_err(|_| not_pem())?)
                    .map_err(|_| not_pem())?;
                any = true;
            }
            if !any {
                return Err(not_pem());
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        Ok(rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::config(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }

    /// Sets up `builder`'s TLS to trust this; an unreadable CA file, or
    /// one without a certificate, is an error naming it.
    pub fn apply(
        &self,
        builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, ClientError> {
        if let Some(config) = &self.tls_config {
            return Ok(builder.use_preconfigured_tls(config.clone()));
        }
        let mut b = builder.use_rustls_tls();
        for path in &self.ca_files {
            let pem = std::fs::read(path).map_err(|e| {
                ClientError::config(format!("{CA_CERT_ENV}={path}: cannot read: {e}"))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| {
                    ClientError::config(format!("{CA_CERT_ENV}={path}: not a PEM certificate"))
                })?;
            for cert in certs {
                b = b.add_root_certificate(cert);
            }
        }
        Ok(b)
    }
}

impl Client {
    /// A client of `server` (scheme optional) with `token`; reads
    /// `SHEPHERD_CA_CERT` for an extra CA to trust.
    pub fn new(server: &str, token: Option<String>) -> Result<Client, ClientError> {
        Client::with_trust(server, token, &Trust::from_env())
    }

    /// As [`Client::new`], trusting the PEM CA certificate at `ca_path` too.
    pub fn with_ca(
        server: &str,
        token: Option<String>,
        ca_path: Option<&str>,
    ) -> Result<Client, ClientError> {
        let trust = Trust {
            ca_files: ca_path.map(str::to_owned).into_iter().collect(),
            tls_config: None,
        };
        Client::with_trust(server, token, &trust)
    }

    /// A client of `server` that checks its certificate against `trust`.
    pub fn with_trust(
        server: &str,
        token: Option<String>,
        trust: &Trust,
    ) -> Result<Client, ClientError> {
        let http = Http::new(normalise_base(server)?, trust)?;
        Client::over(Arc::new(http), token)
    }

    /// A client of the server `transport` reaches, already shared (a
    /// server's own router, handed to the runner it embeds), with `token`.
    pub fn over(
        transport: Arc<dyn Transport>,
        token: Option<String>,
    ) -> Result<Client, ClientError> {
        let client = Client::with_shared(transport, token);
        // A token no header can carry is refused now, not at the first call.
        client.authorization()?;
        Ok(client)
    }

    /// A client whose requests travel by `transport`, with `token`.
    pub fn with_transport(transport: impl Transport, token: Option<String>) -> Client {
        Client::with_shared(Arc::new(transport), token)
    }

    fn with_shared(transport: Arc<dyn Transport>, token: Option<String>) -> Client {
        Client {
            transport,
            credentials: token.filter(|t| !t.is_empty()).map(Credentials::Token),
            retries: 3,
        }
    }

    /// The same server, acting with another token (a worker's own).
    pub fn with_token(&self, token: String) -> Client {
        Client {
            credentials: Some(Credentials::Token(token)),
            ..self.clone()
        }
    }

    /// The same server, acting with the `Authorization` header another
    /// request carried, passed on as it is (none: no credentials). How a
    /// proxy of the API keeps its caller's identity.
    pub fn with_authorization(&self, authorization: Option<HeaderValue>) -> Client {
        Client {
            credentials: authorization.map(Credentials::Header),
            ..self.clone()
        }
    }

    /// How often a retryable read is tried again (default 3).
    pub fn with_retries(mut self, retries: usize) -> Client {
        self.retries = retries;
        self
    }

    pub fn base(&self) -> &str {
        self.transport.base()
    }

    pub fn has_token(&self) -> bool {
        self.credentials.is_some()
    }

    fn authorization(&self) -> Result<Option<HeaderValue>, ClientError> {
        match &self.credentials {
            None => Ok(None),
            Some(Credentials::Header(h)) => Ok(Some(h.clone())),
            Some(Credentials::Token(t)) => {
                let mut h = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    ClientError::config("the token has characters a header cannot carry")
                })?;
                h.set_sensitive(true);
                Ok(Some(h))
            }
        }
    }

    /// A request for `uri` (path and query) with the credentials, and
    /// `body` as JSON.
    fn request(
        &self,
        method: Method,
        uri: &str,
        body: Option<&Bytes>,
    ) -> Result<http::Request<Bytes>, ClientError> {
        let mut b = http::Request::builder().method(method).uri(uri);
        if let Some(a) = self.authorization()? {
            b = b.header(AUTHORIZATION, a);
        }
        if body.is_some() {
            b = b.header(CONTENT_TYPE, "application/json");
        }
        b.body(body.cloned().unwrap_or_default())
            .map_err(|e| ClientError::config(format!("cannot make a request of {uri:?}: {e}")))
    }

    /// Opens a WebSocket at `path` with the credentials: the upgraded
    /// connection, for a WebSocket library to speak over.
    pub async fn open_websocket(&self, path: &str) -> Result<transport::Upgraded, ClientError> {
        let mut b = http::Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "websocket")
            .header(http::header::SEC_WEBSOCKET_VERSION, "13")
            .header(http::header::SEC_WEBSOCKET_KEY, websocket_key());
        if let Some(a) = self.authorization()? {
            b = b.header(AUTHORIZATION, a);
        }
        let req = b
            .body(Bytes::new())
            .map_err(|e| ClientError::config(format!("cannot make a request of {path:?}: {e}")))?;
        self.transport.upgrade(req).await
    }

    /// Reads a response body to its end.
    async fn read_body(&self, mut body: transport::Body) -> Result<Vec<u8>, ClientError> {
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| ClientError::unreachable(self.base(), e.as_ref()))?;
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// Sends once; answers the parsed body and the cursor header.
    async fn send_once<T: DeserializeOwned>(
        &self,
        method: &Method,
        uri: &str,
        body: Option<&Bytes>,
    ) -> Result<(T, Option<i64>), ClientError> {
        let req = self.request(method.clone(), uri, body)?;
        let res = self.transport.send(req).await?;
        let status = res.status();
        let cursor = res
            .headers()
            .get(p::CURSOR_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(p::parse_cursor);
        let bytes = self.read_body(res.into_body()).await?;
        if !status.is_success() {
            return Err(ClientError::from_response(status, &bytes));
        }
        // A 204 has no body: it reads as `null`, which `()` accepts.
        let bytes = if bytes.is_empty() {
            b"null".to_vec()
        } else {
            bytes
        };
        let body = serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            message: format!("unexpected answer from the server ({status}): {e}"),
        })?;
        Ok((body, cursor))
    }

    /// Sends, retrying with jittered backoff while the failure is
    /// transient and `retry` allows it.
    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        uri: &str,
        body: Option<Bytes>,
        retry: bool,
    ) -> Result<(T, Option<i64>), ClientError> {
        let once = || self.send_once(&method, uri, body.as_ref());
        if !retry || self.retries == 0 {
            return once().await;
        }
        let policy = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(200))
            .with_max_delay(Duration::from_secs(3))
            .with_max_times(self.retries)
            .with_jitter();
        once.retry(policy)
            .when(ClientError::is_transient)
            .notify(|e, after| tracing::debug!(error = %e, ?after, "retrying"))
            .await
    }

    async fn get<T: DeserializeOwned, Q: Serialize>(
        &self,
        path: &str,
        query: &Q,
    ) -> Result<T, ClientError> {
        let uri = with_query(path, query)?;
        Ok(self.send(Method::GET, &uri, None, true).await?.0)
    }

    async fn fetch<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        Ok(self.send(Method::GET, path, None, true).await?.0)
    }

    /// A read and the event-log cursor its answer is valid at (0 when the
    /// route gives none).
    async fn fetch_with_cursor<T: DeserializeOwned>(
        &self,
        uri: &str,
    ) -> Result<(T, i64), ClientError> {
        let (t, c) = self.send(Method::GET, uri, None, true).await?;
        Ok((t, c.unwrap_or(0)))
    }

    async fn post<T: DeserializeOwned, B: Serialize>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| ClientError::config(format!("cannot encode the body for {path}: {e}")))?;
        Ok(self
            .send(Method::POST, path, Some(Bytes::from(body)), false)
            .await?
            .0)
    }

    async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        Ok(self.send(Method::DELETE, path, None, false).await?.0)
    }

    // ----- health -----

    pub async fn health(&self) -> Result<p::Health, ClientError> {
        self.fetch("/healthz").await
    }

    pub async fn ready(&self) -> Result<p::Ready, ClientError> {
        self.fetch("/readyz").await
    }

    /// The OpenAPI document, as JSON.
    pub async fn openapi(&self) -> Result<serde_json::Value, ClientError> {
        self.fetch("/api/openapi.json").await
    }

    // ----- hosts -----

    /// Every host: server nodes and runners' hosts, online or not.
    pub async fn hosts(&self) -> Result<p::HostList, ClientError> {
        self.fetch("/api/v1/hosts").await
    }

    /// Registers a runner's host (the operator token); the answer carries
    /// the host's own token.
    pub async fn register_host(
        &self,
        b: &p::RegisterHostBody,
    ) -> Result<p::RegisterHostResponse, ClientError> {
        self.post("/api/v1/hosts", b).await
    }

    /// Says the host is still there (its host token).
    pub async fn host_heartbeat(&self, id: &str) -> Result<p::HostHeartbeatResponse, ClientError> {
        let path = format!("/api/v1/hosts/{}/heartbeat", enc(id));
        self.post(&path, &serde_json::Map::new()).await
    }

    // ----- the connector -----

    pub async fn register(&self, b: &p::RegisterBody) -> Result<p::RegisterResponse, ClientError> {
        self.post("/api/v1/worker/orchestrator/register", b).await
    }

    pub async fn pending(&self, q: &p::PendingQuery) -> Result<p::PendingResponse, ClientError> {
        self.get("/api/v1/worker/orchestrator/tasks/pending", q)
            .await
    }

    pub async fn claim(
        &self,
        vtid: &str,
        b: &p::WorkerBody,
    ) -> Result<p::ClaimResponse, ClientError> {
        self.post(
            &format!("/api/v1/worker/orchestrator/tasks/{}/claim", enc(vtid)),
            b,
        )
        .await
    }

    /// Claims the next tasks this worker may take (up to `max`).
    pub async fn claim_next(
        &self,
        b: &p::ClaimNextBody,
    ) -> Result<p::ClaimNextResponse, ClientError> {
        self.post("/api/v1/worker/orchestrator/tasks/claim", b)
            .await
    }

    /// Several progress reports in one call, each applied or refused on its own.
    pub async fn progress_batch(
        &self,
        b: &p::ProgressBatchBody,
    ) -> Result<p::ProgressBatchResponse, ClientError> {
        self.post("/api/v1/worker/orchestrator/progress", b).await
    }

    /// Several runs' steps in one request (see [`p::StepBatchBody`]).
    pub async fn append_steps_batch(
        &self,
        b: &p::StepBatchBody,
    ) -> Result<p::StepBatchResponse, ClientError> {
        self.post("/api/v1/worker/orchestrator/steps", b).await
    }

    pub async fn progress(
        &self,
        vtid: &str,
        b: &p::ProgressBody,
    ) -> Result<p::EventApplied, ClientError> {
        self.post(
            &format!("/api/v1/worker/orchestrator/tasks/{}/progress", enc(vtid)),
            b,
        )
        .await
    }

    pub async fn heartbeat(
        &self,
        b: &p::HeartbeatBody,
    ) -> Result<p::HeartbeatResponse, ClientError> {
        self.post("/api/v1/worker/orchestrator/heartbeat", b).await
    }

    pub async fn deregister(
        &self,
        b: &p::DeregisterBody,
    ) -> Result<p::DeregisterResponse, ClientError> {
        self.post("/api/v1/worker/orchestrator/deregister", b).await
    }

    // ----- tasks -----

    pub async fn create_task(&self, b: &p::CreateTask) -> Result<p::Task, ClientError> {
        self.post("/api/v1/tasks", b).await
    }

    pub async fn tasks(&self, q: &p::TaskListQuery) -> Result<p::TaskList, ClientError> {
        self.get("/api/v1/tasks", q).await
    }

    /// A task, and the event-log cursor its data is valid at.
    pub async fn task(&self, vtid: &str) -> Result<(p::TaskDetail, i64), ClientError> {
        self.fetch_with_cursor(&format!("/api/v1/tasks/{}", enc(vtid)))
            .await
    }

    pub async fn dispatch(&self, vtid: &str) -> Result<p::Task, ClientError> {
        self.post(
            &format!("/api/v1/tasks/{}/dispatch", enc(vtid)),
            &serde_json::Map::new(),
        )
        .await
    }

    pub async fn cancel(
        &self,
        vtid: &str,
        b: &p::CancelBody,
    ) -> Result<p::CancelResponse, ClientError> {
        self.post(&format!("/api/v1/tasks/{}/cancel", enc(vtid)), b)
            .await
    }

    pub async fn task_event(
        &self,
        vtid: &str,
        b: &p::OutsideEvent,
    ) -> Result<p::EventApplied, ClientError> {
        self.post(&format!("/api/v1/tasks/{}/events", enc(vtid)), b)
            .await
    }

    pub async fn workflows(&self) -> Result<p::WorkflowList, ClientError> {
        self.fetch("/api/v1/workflows").await
    }

    pub async fn agents(&self) -> Result<p::AgentList, ClientError> {
        self.fetch("/api/v1/agents").await
    }

    // ----- runs (the Workers page contract and v1) -----

    pub async fn workers_page_runs(
        &self,
        q: &p::WorkersPageQuery,
    ) -> Result<p::WorkerListResponse, ClientError> {
        self.get("/api/agents/workers", q).await
    }

    pub async fn workers_page_run(
        &self,
        q: &p::WorkersPageDetailQuery,
    ) -> Result<p::WorkerDetailResponse, ClientError> {
        self.get("/api/agents/workers/detail", q).await
    }

    pub async fn runs(&self, q: &p::RunsQuery) -> Result<p::RunList, ClientError> {
        self.get("/api/v1/runs", q).await
    }

    /// A run, and the event-log cursor its data is valid at.
    pub async fn run(&self, run_id: &str) -> Result<(p::RunDetail, i64), ClientError> {
        self.fetch_with_cursor(&format!("/api/v1/runs/{}", enc(run_id)))
            .await
    }

    // ----- input requests -----

    /// Asks a person (a permission or a question) for a run. Retried: a
    /// request with a `key` is asked once however often it is sent.
    pub async fn ask(&self, b: &p::AskInput) -> Result<p::InputRequest, ClientError> {
        let body = serde_json::to_vec(b)
            .map_err(|e| ClientError::config(format!("cannot encode the request: {e}")))?;
        Ok(self
            .send(
                Method::POST,
                "/api/v1/input-requests",
                Some(Bytes::from(body)),
                b.key.is_some(),
            )
            .await?
            .0)
    }

    pub async fn input_requests(
        &self,
        q: &p::InputRequestsQuery,
    ) -> Result<p::InputRequestList, ClientError> {
        self.get("/api/v1/input-requests", q).await
    }

    /// One request; with `wait` seconds, held until it is answered or the
    /// wait ends (keep it under the transport's 60 s read timeout).
    pub async fn input_request(
        &self,
        id: &str,
        wait: Option<u64>,
    ) -> Result<p::InputRequest, ClientError> {
        let q = p::InputRequestQuery { wait };
        self.get(&format!("/api/v1/input-requests/{}", enc(id)), &q)
            .await
    }

    pub async fn answer_input(
        &self,
        id: &str,
        answer: &p::InputAnswer,
    ) -> Result<p::InputRequest, ClientError> {
        self.post(
            &format!("/api/v1/input-requests/{}/answer", enc(id)),
            answer,
        )
        .await
    }

    // ----- people and their tokens -----

    /// Who this client's token is.
    pub async fn me(&self) -> Result<p::Me, ClientError> {
        self.fetch("/api/v1/me").await
    }

    pub async fn create_user(&self, b: &p::CreateUser) -> Result<p::User, ClientError> {
        self.post("/api/v1/users", b).await
    }

    pub async fn users(&self) -> Result<p::UserList, ClientError> {
        self.fetch("/api/v1/users").await
    }

    pub async fn update_user(&self, name: &str, b: &p::UpdateUser) -> Result<p::User, ClientError> {
        let body = serde_json::to_vec(b)
            .map_err(|e| ClientError::config(format!("cannot encode the change: {e}")))?;
        Ok(self
            .send(
                Method::PATCH,
                &format!("/api/v1/users/{}", enc(name)),
                Some(Bytes::from(body)),
                false,
            )
            .await?
            .0)
    }

    /// Makes a token; the answer holds its secret, shown this once.
    pub async fn create_token(&self, b: &p::CreateToken) -> Result<p::CreatedToken, ClientError> {
        self.post("/api/v1/tokens", b).await
    }

    pub async fn tokens(&self) -> Result<p::TokenList, ClientError> {
        self.fetch("/api/v1/tokens").await
    }

    pub async fn revoke_token(&self, id: &str) -> Result<(), ClientError> {
        self.delete(&format!("/api/v1/tokens/{}", enc(id))).await
    }

    // ----- webhooks -----

    /// Subscribes a URL; the answer carries the secret, shown this once.
    pub async fn create_webhook(
        &self,
        b: &p::CreateWebhook,
    ) -> Result<p::CreatedWebhook, ClientError> {
        self.post("/api/v1/webhooks", b).await
    }

    pub async fn webhooks(&self) -> Result<p::WebhookList, ClientError> {
        self.fetch("/api/v1/webhooks").await
    }

    pub async fn webhook(&self, id: &str) -> Result<p::Webhook, ClientError> {
        self.fetch(&format!("/api/v1/webhooks/{}", enc(id))).await
    }

    pub async fn delete_webhook(&self, id: &str) -> Result<(), ClientError> {
        self.delete(&format!("/api/v1/webhooks/{}", enc(id))).await
    }

    /// A subscription's delivery attempts, newest first.
    pub async fn webhook_deliveries(
        &self,
        id: &str,
        q: &p::WebhookDeliveriesQuery,
    ) -> Result<p::WebhookDeliveryList, ClientError> {
        self.get(&format!("/api/v1/webhooks/{}/deliveries", enc(id)), q)
            .await
    }

    /// The run token a running run's agent asks with, for the claim's holder.
    pub async fn run_token(
        &self,
        run_id: &str,
        claim_token: &str,
    ) -> Result<p::RunToken, ClientError> {
        let b = p::RunTokenRequest {
            claim_token: claim_token.to_owned(),
        };
        Ok(self
            .send(
                Method::POST,
                &format!("/api/v1/runs/{}/token", enc(run_id)),
                Some(Bytes::from(serde_json::to_vec(&b).unwrap_or_default())),
                true,
            )
            .await?
            .0)
    }

    /// A worktree run's diff against its base.
    pub async fn run_diff(&self, run_id: &str) -> Result<p::RunDiff, ClientError> {
        self.fetch(&format!("/api/v1/runs/{}/diff", enc(run_id)))
            .await
    }

    /// Stored usage summed per agent, task or day.
    pub async fn usage(&self, q: &p::UsageQuery) -> Result<p::UsageReport, ClientError> {
        self.get("/api/v1/usage", q).await
    }

    pub async fn steps(
        &self,
        run_id: &str,
        q: &p::StepsQuery,
    ) -> Result<p::StepsPage, ClientError> {
        self.get(&format!("/api/v1/runs/{}/steps", enc(run_id)), q)
            .await
    }

    pub async fn append_steps(
        &self,
        run_id: &str,
        b: &p::AppendSteps,
    ) -> Result<p::AppendAck, ClientError> {
        self.post(&format!("/api/v1/runs/{}/steps", enc(run_id)), b)
            .await
    }

    pub async fn set_status(
        &self,
        run_id: &str,
        b: &p::SetStatus,
    ) -> Result<p::StatusAck, ClientError> {
        self.post(&format!("/api/v1/runs/{}/status", enc(run_id)), b)
            .await
    }

    /// Gives a run's task back to the queue (its agent did not survive).
    pub async fn requeue_run(
        &self,
        run_id: &str,
        b: &p::RequeueRun,
    ) -> Result<p::Task, ClientError> {
        self.post(&format!("/api/v1/runs/{}/requeue", enc(run_id)), b)
            .await
    }

    /// Makes a failed or cancelled task runnable again (operator).
    pub async fn retry_task(&self, vtid: &str) -> Result<p::Task, ClientError> {
        self.post(
            &format!("/api/v1/tasks/{}/retry", enc(vtid)),
            &serde_json::Map::new(),
        )
        .await
    }

    /// Reports a run's usage so far (its running total).
    pub async fn set_usage(
        &self,
        run_id: &str,
        b: &p::SetUsage,
    ) -> Result<p::UsageAck, ClientError> {
        self.post(&format!("/api/v1/runs/{}/usage", enc(run_id)), b)
            .await
    }

    // ----- the worker registry: workers, events, channels -----

    pub async fn workers(&self, q: &p::WorkersQuery) -> Result<p::WorkerInfoList, ClientError> {
        self.get("/api/v1/workers", q).await
    }

    pub async fn worker_events(
        &self,
        q: &p::WorkerEventsQuery,
    ) -> Result<p::WorkerEventsResponse, ClientError> {
        self.get("/api/v1/worker_events", q).await
    }

    /// A page of the event log, and the log's head when it was read.
    pub async fn events(&self, q: &p::EventPageQuery) -> Result<(p::EventPage, i64), ClientError> {
        self.fetch_with_cursor(&with_query("/api/v1/events", q)?)
            .await
    }

    pub async fn channels(&self, q: &p::ChannelListQuery) -> Result<p::ChannelList, ClientError> {
        self.get("/api/v1/channels", q).await
    }

    pub async fn upsert_channel(&self, b: &p::ChannelBody) -> Result<p::Channel, ClientError> {
        self.post("/api/v1/channels", b).await
    }

    pub async fn archive_channel(&self, id: &str) -> Result<p::Channel, ClientError> {
        self.post(
            &format!("/api/v1/channels/{}/archive", enc(id)),
            &serde_json::Map::new(),
        )
        .await
    }

    // ----- resources and conversations (the conversations contract) -----

    pub async fn resources(&self) -> Result<p::ResourceList, ClientError> {
        self.fetch("/api/v1/resources").await
    }

    pub async fn upsert_resource(
        &self,
        b: &p::ResourceBody,
    ) -> Result<p::ResourceInfo, ClientError> {
        self.post("/api/v1/resources", b).await
    }

    pub async fn create_conversation(
        &self,
        resource: &str,
    ) -> Result<p::ConversationInfo, ClientError> {
        self.post(
            &format!("/api/v1/resources/{}/conversations", enc(resource)),
            &serde_json::Map::new(),
        )
        .await
    }

    pub async fn conversations(
        &self,
        resource: &str,
        q: &p::ConversationsQuery,
    ) -> Result<p::ConversationPage, ClientError> {
        self.get(
            &format!("/api/v1/resources/{}/conversations", enc(resource)),
            q,
        )
        .await
    }

    pub async fn conversation(&self, id: &str) -> Result<p::ConversationDetail, ClientError> {
        self.fetch(&format!("/api/v1/conversations/{}", enc(id)))
            .await
    }

    pub async fn send_message(
        &self,
        id: &str,
        b: &p::SendBody,
    ) -> Result<p::SendResponse, ClientError> {
        self.post(&format!("/api/v1/conversations/{}/messages", enc(id)), b)
            .await
    }

    pub async fn cancel_conversation(
        &self,
        id: &str,
        b: &p::CancelBody,
    ) -> Result<p::ConversationInfo, ClientError> {
        self.post(&format!("/api/v1/conversations/{}/cancel", enc(id)), b)
            .await
    }

    pub async fn activate_conversation(
        &self,
        id: &str,
    ) -> Result<p::ConversationInfo, ClientError> {
        self.post(
            &format!("/api/v1/conversations/{}/activate", enc(id)),
            &serde_json::Map::new(),
        )
        .await
    }

    // ----- sessions (the sessions contract) -----

    /// Has runner host `host` delete worktree runs' branches (admin).
    pub async fn prune_host_branches(
        &self,
        host: &str,
        b: &p::PruneBranchesBody,
    ) -> Result<p::PruneBranchesReport, ClientError> {
        self.post(&format!("/api/v1/hosts/{}/prune_branches", enc(host)), b)
            .await
    }

    pub async fn create_session(&self, b: &p::CreateSession) -> Result<p::Session, ClientError> {
        self.post("/api/v1/sessions", b).await
    }

    pub async fn sessions(&self) -> Result<p::SessionList, ClientError> {
        self.fetch("/api/v1/sessions").await
    }

    pub async fn session(&self, id: &str) -> Result<p::Session, ClientError> {
        self.fetch(&format!("/api/v1/sessions/{}", enc(id))).await
    }

    /// Deletes a session (never retried), answering it as it was.
    pub async fn delete_session(&self, id: &str) -> Result<p::Session, ClientError> {
        self.delete(&format!("/api/v1/sessions/{}", enc(id))).await
    }

    pub async fn add_session_worker(
        &self,
        session: &str,
        b: &p::AddWorker,
    ) -> Result<p::SessionWorker, ClientError> {
        self.post(&format!("/api/v1/sessions/{}/workers", enc(session)), b)
            .await
    }

    pub async fn remove_session_worker(
        &self,
        session: &str,
        worker: &str,
    ) -> Result<p::SessionWorker, ClientError> {
        self.delete(&format!(
            "/api/v1/sessions/{}/workers/{}",
            enc(session),
            enc(worker)
        ))
        .await
    }

    pub async fn restart_session_worker(
        &self,
        session: &str,
        worker: &str,
        b: &p::RestartWorker,
    ) -> Result<p::SessionWorker, ClientError> {
        self.post(
            &format!(
                "/api/v1/sessions/{}/workers/{}/restart",
                enc(session),
                enc(worker)
            ),
            b,
        )
        .await
    }

    pub async fn session_diff(
        &self,
        session: &str,
        worker: &str,
    ) -> Result<p::GitDiff, ClientError> {
        self.fetch(&format!(
            "/api/v1/sessions/{}/workers/{}/diff",
            enc(session),
            enc(worker)
        ))
        .await
    }

    /// The head of the event log now (the cursor a "from now" stream starts at).
    pub async fn head(&self) -> Result<i64, ClientError> {
        let q = p::EventPageQuery {
            limit: Some(1),
            ..Default::default()
        };
        Ok(self.events(&q).await?.1)
    }
}

/// `path` with `query` (a protocol query type) as its query string.
fn with_query<Q: Serialize>(path: &str, query: &Q) -> Result<String, ClientError> {
    let q = serde_urlencoded::to_string(query)
        .map_err(|e| ClientError::config(format!("cannot encode the query for {path}: {e}")))?;
    Ok(if q.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{q}")
    })
}

/// Whether a status means "the server could not answer now".
pub(crate) fn is_gateway_trouble(s: StatusCode) -> bool {
    matches!(
        s,
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
    )
}

/// A WebSocket opening's key: 16 random bytes, base64. The key only proves
/// the answer is a WebSocket server's; it needs no secrecy.
fn websocket_key() -> String {
    use std::io::Read;
    let mut raw = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        raw = t.to_le_bytes();
    }
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(raw)
}
