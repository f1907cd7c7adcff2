//! `/mcp` over real HTTP, as raw JSON-RPC: the MCP caller's own token is
//! what the tools act with (a worker token may not submit work; the
//! operator's may), and a session without a token is refused before MCP.

mod common;

use common::{Env, Kind, Server, OPERATOR};
use serde_json::{json, Value};

/// One MCP session at `/mcp` with a bearer token.
struct McpSession<'a> {
    server: &'a Server,
    token: String,
    session: Option<String>,
}

impl McpSession<'_> {
    async fn send(&mut self, message: Value) -> (u16, Option<Value>) {
        let mut req = self
            .server
            .http
            .post(self.server.url("/mcp"))
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .json(&message);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        if let Some(s) = res.headers().get("mcp-session-id") {
            self.session = Some(s.to_str().unwrap().to_owned());
        }
        let text = res.text().await.unwrap();
        // An answer comes as JSON or as server-sent events; the response is
        // the event whose `id` matches the request's.
        let answer = if let Ok(v) = serde_json::from_str::<Value>(&text) {
            Some(v)
        } else {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|v| v.get("id").is_some() && v.get("id") == message.get("id"))
        };
        (status, answer)
    }

    async fn open<'a>(server: &'a Server, token: &str) -> McpSession<'a> {
        let mut s = McpSession {
            server,
            token: token.to_owned(),
            session: None,
        };
        let (status, init) = s
            .send(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "rust-test", "version": "1"}}}),
            )
            .await;
        assert_eq!(status, 200, "{init:?}");
        assert_eq!(init.unwrap()["result"]["serverInfo"]["name"], "shepherd");
        let (status, _) = s
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(status, 202);
        s
    }

    async fn call_tool(&mut self, id: i64, name: &str, args: Value) -> Value {
        let (status, answer) = self
            .send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": name, "arguments": args}}))
            .await;
        assert_eq!(status, 200);
        answer.expect("an answer")["result"].clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_act_with_the_mcp_callers_own_token_sqlite() {
    tools_act_with_the_mcp_callers_own_token(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_act_with_the_mcp_callers_own_token_postgres() {
    tools_act_with_the_mcp_callers_own_token(Kind::Postgres).await;
}

async fn tools_act_with_the_mcp_callers_own_token(kind: Kind) {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let (code, reg) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({"worker_id": "w-mcp", "agent_id": "manual"}),
        )
        .await;
    assert_eq!(code, 200, "{reg}");
    let worker_token = reg["worker_token"].as_str().unwrap();

    let mut as_worker = McpSession::open(&s, worker_token).await;
    let r = as_worker
        .call_tool(2, "submit_task", json!({"title": "not mine to give"}))
        .await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], "operator_only");
    // Reading is allowed to a worker, as over REST.
    let r = as_worker.call_tool(3, "list_workers", json!({})).await;
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["structuredContent"]["workers"][0]["worker_id"], "w-mcp");

    let mut as_operator = McpSession::open(&s, OPERATOR).await;
    let r = as_operator
        .call_tool(
            2,
            "submit_task",
            json!({"title": "mine", "agent": "manual"}),
        )
        .await;
    assert_eq!(r["isError"], false, "{r}");
    let vtid = r["structuredContent"]["vtid"].as_str().unwrap();
    // An agent nobody declares is a typo unless the caller says otherwise.
    let r = as_operator
        .call_tool(
            40,
            "submit_task",
            json!({"title": "typo", "agent": "manaul"}),
        )
        .await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(
        r["structuredContent"]["error"]["code"], "unknown_agent",
        "{r}"
    );
    let r = as_operator
        .call_tool(
            41,
            "submit_task",
            json!({"title": "for later", "agent": "outside", "external": true}),
        )
        .await;
    assert_eq!(r["isError"], false, "{r}");
    let (_, task) = s
        .get(&format!("/api/v1/tasks/{vtid}"), Some(OPERATOR))
        .await;
    assert_eq!(task["title"], "mine");

    // A viewer's tools are held to the route table: reading, yes; work, no.
    let (st, _) = s
        .post(
            "/api/v1/users",
            Some(OPERATOR),
            json!({"name": "vic", "role": "viewer"}),
        )
        .await;
    assert_eq!(st, 201);
    let (st, t) = s
        .post(
            "/api/v1/tokens",
            Some(OPERATOR),
            json!({"name": "mcp", "user": "vic"}),
        )
        .await;
    assert_eq!(st, 201, "{t}");
    let mut as_viewer = McpSession::open(&s, t["token"].as_str().unwrap()).await;
    let r = as_viewer
        .call_tool(
            2,
            "submit_task",
            json!({"title": "not for a viewer", "agent": "manual"}),
        )
        .await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["code"], "forbidden", "{r}");
    let r = as_viewer.call_tool(3, "list_workers", json!({})).await;
    assert_eq!(r["isError"], false, "{r}");

    // An unknown tool is a JSON-RPC error, not a tool result.
    let (status, answer) = as_operator
        .send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                     "params": {"name": "rm_rf", "arguments": {}}}))
        .await;
    assert_eq!(status, 200);
    let answer: Value = answer.unwrap();
    assert_eq!(answer["error"]["code"], -32602, "{answer}");

    // No token, no MCP: refused by the API's own auth before any session.
    let res = s
        .http
        .post(s.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    s.stop().await;
}
