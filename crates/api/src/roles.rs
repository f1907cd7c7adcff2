//! The least role each route needs, in one table: the only place a person's
//! role is checked. Handlers keep their own checks of workers' and runs'
//! scopes (`scope`), and of whose token a request may touch.
//!
//! Every route of the OpenAPI document has a row (a test walks the document),
//! and a route without one refuses every user, so a new route is closed to
//! people until someone decides who may call it.

use axum::http::Method;
use shepherd_core::role::Role;

use Role::{Admin, Operator, Viewer};

/// (method, path as routed, least role). Path parameters may have any
/// name: `{id}` and `{vtid}` are the same segment.
const RULES: &[(&str, &str, Role)] = &[
    // The API's description and the live streams.
    ("GET", "/api/openapi.json", Viewer),
    ("GET", "/api/events", Viewer),
    ("GET", "/api/v1/events", Viewer),
    ("GET", "/api/v1/worker_events", Viewer),
    ("GET", "/metrics", Viewer),
    ("GET", "/healthz", Viewer),
    ("GET", "/readyz", Viewer),
    // Who one is; one's own tokens (another's: admins, checked by the handler).
    ("GET", "/api/v1/me", Viewer),
    // Signing in and out of the web UI (open without a token: `login`).
    ("GET", "/auth/options", Viewer),
    ("POST", "/auth/logout", Viewer),
    ("GET", "/api/v1/tokens", Viewer),
    ("POST", "/api/v1/tokens", Viewer),
    ("DELETE", "/api/v1/tokens/{}", Viewer),
    // Users.
    ("GET", "/api/v1/users", Admin),
    ("POST", "/api/v1/users", Admin),
    ("PATCH", "/api/v1/users/{}", Admin),
    // Agents, workers and their registry.
    ("GET", "/api/v1/agents", Viewer),
    ("GET", "/api/v1/workers", Viewer),
    ("GET", "/api/v1/workflows", Viewer),
    ("GET", "/api/agents/workers", Viewer),
    ("GET", "/api/agents/workers/detail", Viewer),
    ("GET", "/api/channels/status", Viewer),
    // Hosts: where work lives. A runner registers its host as it registers
    // its workers (the host token it is given reaches only the heartbeat).
    ("GET", "/api/v1/hosts", Viewer),
    ("POST", "/api/v1/hosts", Operator),
    ("POST", "/api/v1/hosts/{}/heartbeat", Operator),
    // Deleting branches on a machine is maintenance.
    ("POST", "/api/v1/hosts/{}/prune_branches", Admin),
    // Only the host's own token opens its link (the handler refuses people).
    ("GET", "/api/v1/hosts/{}/link", Operator),
    // Tasks.
    ("GET", "/api/v1/tasks", Viewer),
    ("POST", "/api/v1/tasks", Operator),
    ("GET", "/api/v1/tasks/{}", Viewer),
    ("POST", "/api/v1/tasks/{}/cancel", Operator),
    ("POST", "/api/v1/tasks/{}/dispatch", Operator),
    ("POST", "/api/v1/tasks/{}/events", Operator),
    ("POST", "/api/v1/tasks/{}/retry", Operator),
    // Runs.
    ("GET", "/api/v1/runs", Viewer),
    ("GET", "/api/v1/runs/{}", Viewer),
    ("GET", "/api/v1/runs/{}/diff", Viewer),
    ("GET", "/api/v1/runs/{}/steps", Viewer),
    ("POST", "/api/v1/runs/{}/steps", Operator),
    ("POST", "/api/v1/runs/{}/status", Operator),
    ("POST", "/api/v1/runs/{}/usage", Operator),
    ("POST", "/api/v1/runs/{}/requeue", Operator),
    ("POST", "/api/v1/runs/{}/token", Operator),
    ("GET", "/api/v1/usage", Viewer),
    // The connector (what a worker does; a person may act as one).
    ("POST", "/api/v1/worker/orchestrator/register", Operator),
    ("POST", "/api/v1/worker/orchestrator/deregister", Operator),
    ("POST", "/api/v1/worker/orchestrator/heartbeat", Operator),
    ("POST", "/api/v1/worker/orchestrator/progress", Operator),
    ("POST", "/api/v1/worker/orchestrator/steps", Operator),
    ("GET", "/api/v1/worker/orchestrator/tasks/pending", Viewer),
    ("POST", "/api/v1/worker/orchestrator/tasks/claim", Operator),
    (
        "POST",
        "/api/v1/worker/orchestrator/tasks/{}/claim",
        Operator,
    ),
    (
        "POST",
        "/api/v1/worker/orchestrator/tasks/{}/progress",
        Operator,
    ),
    // Resources, channels and conversations.
    ("GET", "/api/v1/channels", Viewer),
    ("POST", "/api/v1/channels", Operator),
    ("POST", "/api/v1/channels/{}/archive", Operator),
    ("GET", "/api/v1/resources", Viewer),
    ("POST", "/api/v1/resources", Operator),
    ("GET", "/api/v1/resources/{}/conversations", Viewer),
    ("POST", "/api/v1/resources/{}/conversations", Operator),
    ("GET", "/api/v1/conversations/{}", Viewer),
    ("POST", "/api/v1/conversations/{}/activate", Operator),
    ("POST", "/api/v1/conversations/{}/cancel", Operator),
    ("POST", "/api/v1/conversations/{}/messages", Operator),
    // Agents' requests to people.
    ("GET", "/api/v1/input-requests", Viewer),
    ("POST", "/api/v1/input-requests", Operator),
    ("GET", "/api/v1/input-requests/{}", Viewer),
    ("POST", "/api/v1/input-requests/{}/answer", Operator),
    // Webhooks.
    ("GET", "/api/v1/webhooks", Viewer),
    ("POST", "/api/v1/webhooks", Operator),
    ("GET", "/api/v1/webhooks/{}", Viewer),
    ("DELETE", "/api/v1/webhooks/{}", Operator),
    ("GET", "/api/v1/webhooks/{}/deliveries", Viewer),
    // Sessions and terminals: attaching is typing into a shell.
    ("GET", "/api/v1/sessions", Viewer),
    ("POST", "/api/v1/sessions", Operator),
    ("GET", "/api/v1/sessions/{}", Viewer),
    ("DELETE", "/api/v1/sessions/{}", Operator),
    ("POST", "/api/v1/sessions/{}/workers", Operator),
    ("DELETE", "/api/v1/sessions/{}/workers/{}", Operator),
    ("GET", "/api/v1/sessions/{}/workers/{}/diff", Viewer),
    ("POST", "/api/v1/sessions/{}/workers/{}/restart", Operator),
    ("GET", "/ws/session/{}/worker/{}", Operator),
    // MCP: each tool call goes through this table again as the route it uses.
    ("POST", "/mcp", Viewer),
    ("GET", "/mcp", Viewer),
    ("DELETE", "/mcp", Viewer),
];

/// A routed path with every parameter's name left out: `/a/{id}` → `/a/{}`.
pub fn shape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if in_param => {}
            _ => out.push(c),
        }
    }
    out
}

/// The least role a route needs; `None`: no rule, so no user may call it.
/// HEAD is GET's.
pub fn least_role(method: &Method, routed_path: &str) -> Option<Role> {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    let path = shape(routed_path);
    RULES
        .iter()
        .find(|(m, p, _)| *m == method && *p == path)
        .map(|(_, _, r)| *r)
}

/// Every row, for the test that holds the table against the OpenAPI document.
pub fn rules() -> impl Iterator<Item = (&'static str, &'static str, Role)> {
    RULES.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_match_whatever_their_name() {
        assert_eq!(
            shape("/api/v1/tasks/{vtid}/cancel"),
            "/api/v1/tasks/{}/cancel"
        );
        assert_eq!(
            least_role(&Method::POST, "/api/v1/tasks/{id}/cancel"),
            Some(Role::Operator)
        );
        assert_eq!(
            least_role(&Method::HEAD, "/api/v1/tasks"),
            Some(Role::Viewer)
        );
        assert_eq!(least_role(&Method::PUT, "/api/v1/tasks"), None);
        assert_eq!(least_role(&Method::GET, "/api/v1/nothing"), None);
    }

    /// The table and the OpenAPI document name the same routes: a route
    /// added without a rule, or a rule left behind by a removed route,
    /// fails here.
    #[test]
    fn every_documented_route_has_a_rule_and_every_rule_a_route() {
        let doc =
            serde_json::to_value(<crate::openapi::ApiDoc as utoipa::OpenApi>::openapi()).unwrap();
        let mut documented = std::collections::BTreeSet::new();
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for method in ops.as_object().unwrap().keys() {
                let method = method.to_ascii_uppercase();
                if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method.as_str()) {
                    continue;
                }
                let m = Method::from_bytes(method.as_bytes()).unwrap();
                assert!(
                    least_role(&m, path).is_some(),
                    "{method} {path} has no rule in roles::RULES"
                );
                documented.insert((method, shape(path)));
            }
        }
        for (m, p, _) in rules() {
            // MCP is served beside the documented API.
            if p == "/mcp" {
                continue;
            }
            assert!(
                documented.contains(&(m.to_owned(), p.to_owned())),
                "roles::RULES has {m} {p}, which the document does not"
            );
        }
    }

    /// What a viewer may not do: change anything, or attach to a terminal.
    #[test]
    fn a_viewer_reads_and_changes_nothing() {
        for (m, p, r) in rules() {
            // Anyone may manage their own tokens and sign themselves out.
            let own = p.starts_with("/api/v1/tokens") || p == "/auth/logout";
            if m != "GET" && !own && p != "/mcp" {
                assert!(r > Role::Viewer, "a viewer may {m} {p}");
            }
        }
        assert_eq!(
            least_role(&Method::GET, "/ws/session/{sessionId}/worker/{workerId}"),
            Some(Role::Operator)
        );
        assert_eq!(least_role(&Method::GET, "/api/v1/users"), Some(Role::Admin));
    }

    #[test]
    fn each_route_has_one_rule() {
        let mut seen = std::collections::HashSet::new();
        for (m, p, _) in rules() {
            assert!(seen.insert((m, p)), "two rules for {m} {p}");
        }
    }
}
