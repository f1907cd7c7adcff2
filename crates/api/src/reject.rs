//! Framework rejections in the standard error shape.
//!
//! Handlers answer errors through [`crate::error::ApiError`], but some
//! answers are made before or around them: axum's method router (an empty
//! 405), its path extractor (a plain-text 400 for a parameter that is not
//! UTF-8), body limits, and the MCP transport. Clients should parse one
//! shape only, so this outermost layer rewrites every error response that
//! is not JSON into `{"error":{"code","message"}}`, with a code chosen by
//! status, and it refuses over-long URIs and undecodable paths itself, with
//! their own codes, before any route sees them.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shepherd_core::{Error, ErrorKind};

use crate::error::ApiError;

/// The longest URI (path and query) served. Longer ones answer 414 here;
/// hyper itself refuses URIs over 64 KiB before any layer runs.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// A framework rejection body is a short sentence; more is not read.
const MAX_REJECTION_BODY: usize = 4 * 1024;

/// The stable code of an error answered with `status` by something other
/// than a handler.
pub fn code_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "route_not_found",
        405 => "method_not_allowed",
        406 => "not_acceptable",
        408 => "request_timeout",
        409 => "conflict",
        411 => "length_required",
        413 => "payload_too_large",
        414 => "uri_too_long",
        415 => "unsupported_media_type",
        422 => "invalid_body",
        429 => "too_many_requests",
        431 => "headers_too_large",
        503 => "unavailable",
        s if s >= 500 => "internal",
        _ => "bad_request",
    }
}

/// Whether a URI path is UTF-8 once its `%XX` escapes are decoded.
fn decoded_path_is_utf8(path: &str) -> bool {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    std::str::from_utf8(&out).is_ok()
}

fn error_response(kind: ErrorKind, code: &'static str, message: String) -> Response {
    ApiError::from(Error::new(kind, code, message)).into_response()
}

/// The layer: refuses what no route can serve, and reshapes non-JSON errors.
pub async fn uniform_errors(req: Request, next: Next) -> Response {
    let uri_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > MAX_URI_BYTES {
        let mut res = error_response(
            ErrorKind::BadRequest,
            "uri_too_long",
            format!("the request URI is {uri_len} bytes; at most {MAX_URI_BYTES} are accepted"),
        );
        *res.status_mut() = StatusCode::URI_TOO_LONG;
        return res;
    }
    if !decoded_path_is_utf8(req.uri().path()) {
        return error_response(
            ErrorKind::BadRequest,
            "invalid_path",
            "the request path is not valid UTF-8 once percent-decoded".into(),
        );
    }
    let res = next.run(req).await;
    if res.status().as_u16() < 400
        || is_json(&res)
        || res.extensions().get::<PageForPeople>().is_some()
    {
        return res;
    }
    reshape(res).await
}

/// Marks an error answer that is a page for a person's browser (a sign-in
/// that failed), which keeps its HTML: it carries its stable code too.
#[derive(Debug, Clone, Copy)]
pub struct PageForPeople;

fn is_json(res: &Response) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.split(';').next().unwrap_or("").trim();
            ct.eq_ignore_ascii_case("application/json") || ct.ends_with("+json")
        })
}

/// Rewrites a non-JSON error: same status and headers (`Allow` on a 405),
/// a JSON body whose message is the original text when there was one.
async fn reshape(res: Response) -> Response {
    let (mut parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_BODY)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let status = parts.status;
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_owned()
    } else {
        text
    };
    let detail = shepherd_protocol::ErrorBody {
        error: shepherd_protocol::ErrorDetail {
            code: code_of(status).to_owned(),
            message,
        },
    };
    let bytes = serde_json::to_vec(&detail).unwrap_or_default();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_judged_after_percent_decoding() {
        assert!(decoded_path_is_utf8("/api/v1/tasks/T-1"));
        assert!(decoded_path_is_utf8("/api/v1/tasks/%C3%A9"));
        assert!(decoded_path_is_utf8("/api/v1/tasks/100%"));
        assert!(decoded_path_is_utf8("/a%2"));
        assert!(!decoded_path_is_utf8("/api/v1/tasks/%ff"));
        assert!(!decoded_path_is_utf8("/api/v1/tasks/%C3"));
    }

    #[test]
    fn codes_are_stable() {
        assert_eq!(
            code_of(StatusCode::METHOD_NOT_ALLOWED),
            "method_not_allowed"
        );
        assert_eq!(code_of(StatusCode::URI_TOO_LONG), "uri_too_long");
        assert_eq!(code_of(StatusCode::BAD_GATEWAY), "internal");
    }
}
