//! A guard in front of the Streamable HTTP transport: a POST whose body is
//! not JSON, or not a JSON-RPC 2.0 message, is answered with the JSON-RPC
//! error the specification names (-32700 parse error, -32600 invalid
//! request) instead of the transport's plain-text refusal.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// Passes the request on (its body re-attached), or answers the refusal.
pub async fn check(req: Request) -> Result<Request, Response> {
    if req.method() != Method::POST {
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, super::MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                "the request body is too large",
            )
        })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        refusal(
            StatusCode::BAD_REQUEST,
            -32700,
            &format!("Parse error: {e}"),
        )
    })?;
    if !is_message(&value) {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            -32600,
            "Invalid Request: expected a JSON-RPC 2.0 message (jsonrpc \"2.0\" with a method, result or error)",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// A JSON-RPC 2.0 request, notification or response (or a batch of them).
fn is_message(v: &Value) -> bool {
    match v {
        Value::Array(items) => !items.is_empty() && items.iter().all(is_message),
        Value::Object(m) => {
            m.get("jsonrpc") == Some(&json!("2.0"))
                && (m.get("method").is_some_and(Value::is_string)
                    || m.contains_key("result")
                    || m.contains_key("error"))
        }
        _ => false,
    }
}

fn refusal(status: StatusCode, code: i64, message: &str) -> Response {
    let body =
        json!({ "jsonrpc": "2.0", "id": null, "error": { "code": code, "message": message } });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jsonrpc_messages_pass() {
        assert!(is_message(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        ));
        assert!(is_message(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        ));
        assert!(is_message(
            &json!({"jsonrpc": "2.0", "id": 1, "result": {}})
        ));
        assert!(!is_message(&json!({"id": 1, "method": "tools/list"})));
        assert!(!is_message(&json!({"jsonrpc": "2.0", "id": 1})));
        assert!(!is_message(&json!([])));
        assert!(!is_message(&json!("hello")));
    }
}
