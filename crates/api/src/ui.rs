//! The web UI: the built bundle of `web/` (committed under `web/dist`),
//! embedded in the binary and served at `/`.
//!
//! `cargo build` never needs Node: the bundle is compiled in with
//! `include_dir!`. Files under `assets/` have content-hashed names, so they
//! are cached for a year; `index.html` is revalidated on every load (an
//! ETag makes that cheap), so a new binary's UI shows up at once. Any other
//! `GET` that is not an API path is a client-side route and gets
//! `index.html` (SPA fallback). Paths under `/api`, `/ws` and `/mcp`, and
//! every non-`GET` request, keep the API's JSON 404 for a caller with a
//! valid token and its 401 for any other. The shell needs no token: the
//! page asks for one when the API answers 401.

use std::collections::HashMap;
use std::io::Write;
use std::sync::OnceLock;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use include_dir::{include_dir, Dir};

use crate::AppState;

static DIST: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../web/dist");

/// Path prefixes that belong to the API; an unknown path there is a JSON 404,
/// never the UI.
const API_PREFIXES: [&str; 5] = ["/api", "/ws", "/mcp", "/healthz", "/readyz"];

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
const NO_CACHE: &str = "no-cache";
/// The UI talks only to its own origin; agent output is never run as code.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; font-src 'self' data:; connect-src 'self'; \
                   object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// One embedded file, ready to send.
struct Asset {
    bytes: &'static [u8],
    /// The gzip encoding, for text types worth compressing.
    gzip: Option<Vec<u8>>,
    content_type: &'static str,
    etag: String,
    immutable: bool,
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn gzip(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).ok()?;
    let out = enc.finish().ok()?;
    // Only worth it when it saves something.
    (out.len() + 64 < bytes.len()).then_some(out)
}

/// FNV-1a: a stable content hash for ETags, no dependency needed.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

fn collect(dir: &'static Dir<'static>, out: &mut HashMap<String, Asset>) {
    for file in dir.files() {
        let path = file.path().to_string_lossy().replace('\\', "/");
        let ct = content_type(&path);
        let compressible =
            ct.starts_with("text/") || ct == "application/json" || ct == "image/svg+xml";
        out.insert(
            format!("/{path}"),
            Asset {
                bytes: file.contents(),
                gzip: if compressible {
                    gzip(file.contents())
                } else {
                    None
                },
                content_type: ct,
                etag: format!("\"{:016x}\"", fnv1a(file.contents())),
                immutable: path.starts_with("assets/"),
            },
        );
    }
    for sub in dir.dirs() {
        collect(sub, out);
    }
}

/// Every embedded file by URL path, compressed once on first use.
fn assets() -> &'static HashMap<String, Asset> {
    static ASSETS: OnceLock<HashMap<String, Asset>> = OnceLock::new();
    ASSETS.get_or_init(|| {
        let mut map = HashMap::new();
        collect(&DIST, &mut map);
        map
    })
}

fn is_api_path(path: &str) -> bool {
    API_PREFIXES.iter().any(|p| {
        path == *p
            || path
                .strip_prefix(p)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|enc| {
            let mut parts = enc.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| p.trim().replace(' ', "") == "q=0");
            name.eq_ignore_ascii_case("gzip") && !refused
        })
}

fn send(asset: &Asset, method: &Method, headers: &HeaderMap) -> Response {
    let mut res = Response::builder()
        .header(header::CONTENT_TYPE, asset.content_type)
        .header(header::ETAG, &asset.etag)
        .header(header::VARY, "Accept-Encoding")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(
            header::CACHE_CONTROL,
            if asset.immutable { IMMUTABLE } else { NO_CACHE },
        );
    if asset.content_type.starts_with("text/html") {
        res = res
            .header(header::CONTENT_SECURITY_POLICY, CSP)
            .header(header::REFERRER_POLICY, "no-referrer");
    }
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim() == asset.etag || t.trim() == "*")
        });
    if unchanged {
        return res
            .status(StatusCode::NOT_MODIFIED)
            .body(Body::empty())
            .unwrap_or_default();
    }
    let bytes: &[u8] = match &asset.gzip {
        Some(gz) if accepts_gzip(headers) => {
            res = res.header(header::CONTENT_ENCODING, "gzip");
            gz
        }
        _ => asset.bytes,
    };
    res = res.header(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(bytes.to_vec())
    };
    res.body(body).unwrap_or_default()
}

/// The router's fallback: an embedded file, the SPA shell for a client
/// route, or the API's JSON 404.
pub async fn serve(State(state): State<AppState>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path();
    if !(method == Method::GET || method == Method::HEAD) || is_api_path(path) {
        // Without a valid token an unknown route is a 401 like a known one,
        // so probing does not reveal which routes exist.
        return match crate::auth::identify(&state, req.headers()).await {
            Ok(_) => crate::error::not_found().await.into_response(),
            Err(e) => e.into_response(),
        };
    }
    let assets = assets();
    if let Some(asset) = assets.get(path) {
        return send(asset, &method, req.headers());
    }
    // A missing hashed asset is a 404, not HTML a script tag would choke on.
    if path.starts_with("/assets/") {
        return crate::error::not_found().await.into_response();
    }
    match assets.get("/index.html") {
        Some(index) => send(index, &method, req.headers()),
        None => crate::error::not_found().await.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths_are_recognised_by_segment() {
        assert!(is_api_path("/api"));
        assert!(is_api_path("/api/v1/nothing"));
        assert!(is_api_path("/ws/session/a/worker/b"));
        assert!(is_api_path("/mcp"));
        assert!(!is_api_path("/apis"));
        assert!(!is_api_path("/agents/demo/workers"));
        assert!(!is_api_path("/"));
    }

    #[test]
    fn gzip_is_accepted_unless_refused() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("br, gzip, deflate"),
        );
        assert!(accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip;q=0, br"),
        );
        assert!(!accepts_gzip(&h));
    }

    #[test]
    fn the_bundle_has_an_index_and_hashed_assets() {
        let a = assets();
        let index = a
            .get("/index.html")
            .expect("web/dist/index.html is embedded");
        assert!(!index.immutable);
        assert!(a
            .keys()
            .any(|k| k.starts_with("/assets/") && k.ends_with(".js")));
    }
}
