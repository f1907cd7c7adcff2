//! The MCP handler: capabilities, the tool catalogue and dispatch, and the
//! resource methods, each answered through the HTTP API as the caller.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::header::AUTHORIZATION;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use shepherd_client::Client;
use tokio_util::sync::CancellationToken;

use crate::McpSettings;

/// Serves one MCP session (stdio: the process; HTTP: one `Mcp-Session-Id`).
#[derive(Clone)]
pub struct ShepherdMcp {
    /// The API with this session's default credentials (stdio's token).
    api: Client,
    pub(crate) settings: McpSettings,
    /// Resource subscriptions of this session: URI → its watcher's stop.
    pub(crate) subscriptions: Arc<Mutex<HashMap<String, CancellationToken>>>,
    /// Ends the session's watchers (server shutdown or session end).
    shutdown: CancellationToken,
}

impl ShepherdMcp {
    /// A session calling the API through `api`. Its reads are not retried:
    /// a tool reports a failure at once and its caller decides what next.
    pub fn new(api: Client, settings: McpSettings, shutdown: CancellationToken) -> Self {
        ShepherdMcp {
            api: api.with_retries(0),
            settings,
            subscriptions: Arc::default(),
            shutdown,
        }
    }

    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The API as the caller of this request: over HTTP, with the very
    /// `Authorization` header the MCP request carried (the `/mcp` route has
    /// already checked it), so a worker token stays a worker token.
    pub(crate) fn api_for(&self, ctx: &RequestContext<RoleServer>) -> Client {
        match ctx.extensions.get::<http::request::Parts>() {
            Some(parts) => self
                .api
                .with_authorization(parts.headers.get(AUTHORIZATION).cloned()),
            None => self.api.clone(),
        }
    }
}

impl Drop for ShepherdMcp {
    fn drop(&mut self) {
        // The last clone of a session's handler going away ends its watchers.
        if Arc::strong_count(&self.subscriptions) == 1 {
            self.shutdown.cancel();
        }
    }
}

impl ServerHandler for ShepherdMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("shepherd", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Shepherd queues work for AI agent workers and records every step they take. \
Use submit_task to hand out work, wait_for_task to wait for it, get_transcript to read \
what the agent did; send_message and cancel_conversation talk to a resource's agent in a \
conversation; list_workers and worker_events watch the fleet (pass next_cursor back \
as `since` to page through events exactly once).",
            )
    }

    /// Resource subscriptions (`resources/subscribe`) exist only before the
    /// 2026-07-28 revision, so this server stops at the last one with them.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(
            &ProtocolVersion::LATEST_WITH_INITIALIZE,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(crate::tools::catalogue()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let api = self.api_for(&context);
        crate::tools::call(self, &api, request, &context)
            .await
            .map(CallToolResponse::from)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        crate::resources::list(&self.api_for(&context)).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            crate::resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        crate::resources::read(self, &self.api_for(&context), &request.uri)
            .await
            .map(ReadResourceResponse::from)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let api = self.api_for(&context);
        crate::resources::subscribe(self, api, context.peer.clone(), request.uri).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let stop = self
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.uri);
        if let Some(stop) = stop {
            stop.cancel();
        }
        Ok(())
    }
}
