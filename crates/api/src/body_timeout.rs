//! A request's body must arrive within `SHEPHERD_BODY_TIMEOUT`, or it
//! answers 408 `body_timeout`.
//!
//! Why: a client that sends its header and then trickles its body (or stops)
//! would otherwise hold a request slot for as long as it likes, and a
//! handful of such clients hold every slot, so the operator's own requests
//! are shed. The body is read here, under the deadline and the body limit,
//! before any handler runs; the handler then reads it from memory. Bodies
//! are small JSON documents bounded by `SHEPHERD_BODY_LIMIT_BYTES`, which
//! every handler reads whole anyway, so nothing is buffered that was not
//! buffered before.

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use shepherd_core::{Error, ErrorKind};

use crate::error::ApiError;
use crate::AppState;

/// The layer.
pub async fn read_body_in_time(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if req.body().is_end_stream() {
        return Ok(next.run(req).await);
    }
    let (parts, body) = req.into_parts();
    let limit = state.settings.body_limit_bytes;
    let timeout = state.settings.body_timeout;
    let bytes = match tokio::time::timeout(timeout, read_bounded(body, limit)).await {
        Ok(read) => read?,
        Err(_) => {
            return Err(Error::new(
                ErrorKind::Timeout,
                "body_timeout",
                format!(
                    "the request body did not arrive within {} s (SHEPHERD_BODY_TIMEOUT)",
                    timeout.as_secs_f64()
                ),
            )
            .into())
        }
    };
    Ok(next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await)
}

/// The whole body, or 413 once it passes `limit` bytes.
async fn read_bounded(body: Body, limit: usize) -> Result<bytes::Bytes, Error> {
    let mut stream = body.into_data_stream();
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            Error::bad_request("bad_body", format!("could not read the request body: {e}"))
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(Error::new(
                ErrorKind::TooLarge,
                "payload_too_large",
                format!("request body is larger than the {limit} bytes the server accepts"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}
