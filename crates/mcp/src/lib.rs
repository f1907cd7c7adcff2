//! Shepherd as an MCP server: tools to hand out work, watch workers and
//! read transcripts, for any agent that speaks the Model Context Protocol.
//!
//! One [`ShepherdMcp`] handler serves both transports, calling the API
//! through `shepherd-client`. [`serve_stdio`] is `shepherd mcp`: a client of
//! a running server over HTTP with the operator token. [`http_route`] is
//! `/mcp` on the server's own port: the same handler with the client's
//! transport being the server's router, called in-process (see
//! [`in_process`]), with each MCP request's own `Authorization` header.
//! Either way the tools only use the public HTTP API, so auth, validation
//! and error codes are the API's own and the transports behave the same.

pub mod in_process;
mod jsonrpc;
pub mod permission_tool;
mod resources;
mod server;
mod tools;
pub mod wire;

use std::sync::Arc;

use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::MethodRouter;
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;
use shepherd_client::Client;
use tokio_util::sync::CancellationToken;

use in_process::InProcess;
pub use server::ShepherdMcp;

/// Limits on what one MCP answer may carry.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// The most bytes of transcript steps one answer carries
    /// (`SHEPHERD_MCP_MAX_ANSWER_BYTES`, at least 256, default 256 KiB).
    pub max_answer_bytes: usize,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            max_answer_bytes: 256 * 1024,
        }
    }
}

impl McpSettings {
    /// Defaults, overridden by `SHEPHERD_MCP_MAX_ANSWER_BYTES` when set.
    pub fn from_env() -> Self {
        let mut s = McpSettings::default();
        if let Some(n) = std::env::var("SHEPHERD_MCP_MAX_ANSWER_BYTES")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n >= 256)
        {
            s.max_answer_bytes = n;
        }
        s
    }
}

/// `shepherd mcp`: serves MCP on stdin/stdout, talking to the Shepherd
/// server at `server` with `token` (else `SHEPHERD_AUTH_TOKEN`, as the other
/// CLI verbs). Returns when the client closes stdin.
pub async fn serve_stdio(
    server: &str,
    token: Option<&str>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let env_token = std::env::var("SHEPHERD_AUTH_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let api = Client::new(server, token.map(str::to_owned).or(env_token))?;
    let handler = ShepherdMcp::new(api, McpSettings::from_env(), CancellationToken::new());
    let stop = handler.shutdown_token();
    let service = handler.serve(rmcp::transport::io::stdio()).await?;
    let result = service.waiting().await;
    // Subscriptions' watchers end with the session.
    stop.cancel();
    result?;
    Ok(())
}

/// The Streamable HTTP endpoint (`/mcp`), serving each session with a
/// handler that calls `api` (the server's own router) in-process.
/// Sessions end when `shutdown` is cancelled.
///
/// Host and Origin checks are left to the server's own middleware, which
/// applies to every route alike (a bearer token is required off loopback).
pub fn http_route<S: Clone + Send + Sync + 'static>(
    api: Router,
    shutdown: CancellationToken,
) -> MethodRouter<S> {
    let settings = McpSettings::from_env();
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(shutdown.child_token());
    let service = StreamableHttpService::new(
        move || {
            Ok(ShepherdMcp::new(
                Client::with_transport(InProcess::new(api.clone()), None),
                settings.clone(),
                shutdown.child_token(),
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::routing::any(move |req: Request| {
        let service = service.clone();
        async move {
            let delete = req.method() == http::Method::DELETE;
            match jsonrpc::check(req).await {
                Ok(req) => {
                    let mut res = service.handle(req).await.into_response();
                    // ending a session is answered 202 by the transport; MCP
                    // clients (the official Python SDK among them) expect 200
                    // or 204 and log a failure otherwise.
                    if delete && res.status() == http::StatusCode::ACCEPTED {
                        *res.status_mut() = http::StatusCode::NO_CONTENT;
                        *res.body_mut() = axum::body::Body::empty();
                    }
                    res
                }
                Err(refusal) => refusal,
            }
        }
    })
}

/// The largest MCP request body accepted.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
