//! The `Origin` rule (PRODUCT.md decision 10): a request that carries an
//! `Origin` header must come from the server's own origin or from one the
//! operator listed in `SHEPHERD_ALLOWED_ORIGINS`, on every route and even on
//! loopback.
//!
//! Why even on loopback: a browser visiting any web site can open a
//! WebSocket or send a simple POST to `127.0.0.1:7700`. Without a token
//! configured, such a request would act as the operator, and a terminal
//! session is arbitrary command execution (cross-site WebSocket hijacking).
//! Browsers always send `Origin` on WebSocket handshakes and cross-origin
//! requests, and cannot forge it; non-browser clients usually send none and
//! are judged by their token alone.

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use shepherd_core::Error;

use crate::error::ApiError;
use crate::AppState;

/// Refuses a request whose `Origin` is neither the server's own nor allowed.
pub async fn check_origin(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(origin) = req.headers().get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !origin_allowed(origin, req.headers(), &state.settings.allowed_origins) {
            return Err(Error::forbidden(
                "origin_not_allowed",
                format!(
                    "requests from origin {origin:?} are not allowed; \
                     list it in SHEPHERD_ALLOWED_ORIGINS to allow it"
                ),
            )
            .into());
        }
    }
    Ok(next.run(req).await)
}

/// Whether `origin` (the header's value) is the server's own origin, judged
/// by the request's `Host`, or one of `allowed` (compared without a trailing
/// slash and case-insensitively, as origins are).
pub fn origin_allowed(origin: &str, headers: &HeaderMap, allowed: &[String]) -> bool {
    let origin = origin.trim_end_matches('/');
    if allowed
        .iter()
        .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin))
    {
        return true;
    }
    // `null` (sandboxed frames, file:// pages) is never the server's own.
    let Some(authority) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    !host.is_empty() && authority.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn host(h: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(HOST, HeaderValue::from_str(h).unwrap());
        m
    }

    #[test]
    fn own_origin_is_allowed() {
        assert!(origin_allowed(
            "http://127.0.0.1:7700",
            &host("127.0.0.1:7700"),
            &[]
        ));
        assert!(origin_allowed(
            "https://Shepherd.example:443/",
            &host("shepherd.example:443"),
            &[]
        ));
    }

    #[test]
    fn foreign_origins_are_refused() {
        let h = host("127.0.0.1:7700");
        assert!(!origin_allowed("http://evil.example", &h, &[]));
        assert!(!origin_allowed("http://127.0.0.1:7701", &h, &[]));
        assert!(!origin_allowed("null", &h, &[]));
        assert!(!origin_allowed(
            "http://127.0.0.1:7700",
            &HeaderMap::new(),
            &[]
        ));
    }

    #[test]
    fn listed_origins_are_allowed() {
        let allowed = vec!["https://ui.example.com".to_string()];
        let h = host("127.0.0.1:7700");
        assert!(origin_allowed("https://ui.example.com", &h, &allowed));
        assert!(!origin_allowed("https://ui.example.com.evil", &h, &allowed));
    }
}
