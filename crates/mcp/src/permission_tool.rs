//! `shepherd permission-tool`: the MCP server Claude Code asks for
//! permission through, in headless mode (`--permission-prompt-tool
//! mcp__shepherd__approve`), for an agent configured with
//! `permissions = "ask"`.
//!
//! Claude Code calls the one tool, `approve`, with the tool it wants to run
//! and that tool's exact input; this server turns the call into an input
//! request of the agent's own run (with the run token the runner gave the
//! agent, `SHEPHERD_RUN_TOKEN`), waits for whoever answers first, and
//! answers Claude Code in the form it expects: `{"behavior": "allow",
//! "updatedInput": …}` or `{"behavior": "deny", "message": …}`.
//!
//! Waiting survives the server going away: each wait is a long poll, a
//! failed one is tried again, and the request is asked with a key (Claude
//! Code's tool-use id), so asking again after a lost answer finds the same
//! request instead of asking twice.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use shepherd_client::{Client, ClientError};
use shepherd_protocol as p;

/// The tool's name; Claude Code is given `mcp__shepherd__approve`.
pub use shepherd_protocol::PERMISSION_TOOL as TOOL;

/// What Claude Code sends the permission prompt tool.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ApproveArgs {
    /// The tool Claude Code wants to run.
    pub tool_name: String,
    /// The tool's input, exactly as Claude Code would run it.
    #[serde(default)]
    pub input: Value,
    /// Claude Code's id of this tool use (the request's key, when given).
    #[serde(default)]
    pub tool_use_id: Option<String>,
}

/// What Claude Code expects back (as the text of the tool's answer).
#[derive(Debug, Serialize, PartialEq)]
#[serde(tag = "behavior", rename_all = "lowercase")]
pub enum Verdict {
    Allow {
        #[serde(rename = "updatedInput")]
        updated_input: Value,
    },
    Deny {
        message: String,
    },
}

impl Verdict {
    /// Claude Code's verdict for an ended request.
    pub fn of(request: &p::InputRequest, input: Value) -> Verdict {
        let answer = request.answer.clone().unwrap_or_default();
        let by = request.answered_by.as_deref().unwrap_or("nobody");
        match (request.state, answer.decision) {
            (p::InputState::Answered | p::InputState::Expired, Some(p::Decision::Allow)) => {
                Verdict::Allow {
                    updated_input: input,
                }
            }
            (p::InputState::Withdrawn, _) => Verdict::Deny {
                message: "the run ended before anyone answered".into(),
            },
            (p::InputState::Expired, _) => Verdict::Deny {
                message: answer
                    .message
                    .unwrap_or_else(|| "nobody answered in time".into()),
            },
            _ => Verdict::Deny {
                message: answer
                    .message
                    .map(|m| format!("denied by {by}: {m}"))
                    .unwrap_or_else(|| format!("denied by {by}")),
            },
        }
    }
}

#[derive(Clone)]
pub struct PermissionTool {
    api: Client,
    run_id: Option<String>,
}

impl PermissionTool {
    pub fn new(api: Client, run_id: Option<String>) -> Self {
        PermissionTool {
            api: api.with_retries(3),
            run_id,
        }
    }

    fn tool() -> Tool {
        Tool::new(
            TOOL,
            "Ask a person (through Shepherd) whether a tool call may run; answers allow or deny.",
            Map::new(),
        )
        .with_input_schema::<ApproveArgs>()
        .with_annotations(
            ToolAnnotations::with_title("Ask permission")
                .read_only(true)
                .open_world(false),
        )
    }

    /// Asks, then waits for the answer through restarts of the server.
    pub async fn decide(&self, a: ApproveArgs) -> Result<Verdict, ClientError> {
        let key = a
            .tool_use_id
            .clone()
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| {
                // Without an id: one request per distinct call of this process.
                format!(
                    "{}-{}-{}",
                    a.tool_name,
                    std::process::id(),
                    shepherd_core::token::hash_token(&a.input.to_string())
                )
            });
        let ask = p::AskInput {
            run_id: self.run_id.clone(),
            kind: Some(p::InputKind::Permission),
            key: Some(key),
            tool_name: Some(a.tool_name.clone()),
            tool_input: Some(a.input.clone()),
            prompt: None,
            options: Vec::new(),
        };
        let mut failures = 0u32;
        let request = loop {
            match self.api.ask(&ask).await {
                Ok(r) => break r,
                Err(e) if retryable(&e) => pause(&mut failures, &e).await,
                Err(e) => return Err(e),
            }
        };
        let mut current = request;
        while !current.state.is_final() {
            match self.api.input_request(&current.id, Some(25)).await {
                Ok(r) => {
                    failures = 0;
                    current = r;
                }
                Err(e) if retryable(&e) => pause(&mut failures, &e).await,
                Err(e) => return Err(e),
            }
        }
        Ok(Verdict::of(&current, a.input))
    }
}

fn retryable(e: &ClientError) -> bool {
    e.is_transient() || e.status().is_some_and(|s| s >= 500)
}

async fn pause(failures: &mut u32, e: &ClientError) {
    *failures += 1;
    tracing::debug!(error = %e, "waiting for the server");
    tokio::time::sleep(Duration::from_millis(200 * u64::from((*failures).min(10)))).await;
}

impl ServerHandler for PermissionTool {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("shepherd-permissions", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![Self::tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != TOOL {
            return Err(McpError::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        }
        let args: ApproveArgs =
            serde_json::from_value(Value::Object(request.arguments.unwrap_or_default()))
                .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let result = match self.decide(args).await {
            Ok(v) => CallToolResult::success(vec![ContentBlock::text(
                serde_json::to_string(&v).unwrap_or_default(),
            )]),
            // Claude Code treats a failed permission tool as a refusal.
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!(
                "Shepherd could not ask: {e}"
            ))]),
        };
        Ok(CallToolResponse::from(result))
    }
}

/// `shepherd permission-tool`: serves the tool on stdin/stdout, for the
/// run whose token is `SHEPHERD_RUN_TOKEN` (or `token`).
pub async fn serve_stdio(
    server: &str,
    token: Option<&str>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let run_token = std::env::var("SHEPHERD_RUN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let api = Client::new(server, run_token.or(token.map(str::to_owned)))?;
    let run_id = std::env::var("SHEPHERD_RUN_ID")
        .ok()
        .filter(|r| !r.is_empty());
    let service = PermissionTool::new(api, run_id)
        .serve(rmcp::transport::io::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(state: p::InputState, answer: Option<p::InputAnswer>) -> p::InputRequest {
        p::InputRequest {
            id: "r".into(),
            kind: p::InputKind::Permission,
            run_id: "run".into(),
            task_id: "T".into(),
            vtid: "T".into(),
            agent_id: "a".into(),
            conversation_id: None,
            tool_name: Some("Bash".into()),
            tool_input: None,
            prompt: None,
            options: vec![],
            state,
            answer,
            answered_by: Some("operator".into()),
            created_at: 0,
            answered_at: None,
            expires_at: None,
        }
    }

    #[test]
    fn verdicts_are_what_claude_code_reads() {
        let input = json!({"command": "ls"});
        let allow = Verdict::of(
            &request(
                p::InputState::Answered,
                Some(p::InputAnswer::decided(p::Decision::Allow, None)),
            ),
            input.clone(),
        );
        assert_eq!(
            serde_json::to_value(&allow).unwrap(),
            json!({"behavior": "allow", "updatedInput": {"command": "ls"}})
        );
        let deny = Verdict::of(
            &request(
                p::InputState::Answered,
                Some(p::InputAnswer::decided(
                    p::Decision::Deny,
                    Some("no".into()),
                )),
            ),
            input.clone(),
        );
        assert_eq!(
            serde_json::to_value(&deny).unwrap(),
            json!({"behavior": "deny", "message": "denied by operator: no"})
        );
        let gone = Verdict::of(&request(p::InputState::Withdrawn, None), input);
        assert!(matches!(gone, Verdict::Deny { .. }));
    }
}
