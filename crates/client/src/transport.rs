//! How a [`Client`](crate::Client)'s requests reach the API: a
//! [`Transport`] takes one `http` request and brings back the answer with
//! its body as a stream of bytes (so the event stream can be read as it
//! arrives).
//!
//! [`Http`] is the network, through reqwest. Other transports are the
//! caller's: the server's `/mcp` endpoint plugs in its own router, called
//! in-process, so that this crate needs no server framework and every
//! request, however it travels, meets the API's own authentication,
//! validation and error codes.

use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use crate::{ClientError, Trust};

/// Why a response body could not be read to its end.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A response body, chunk by chunk.
pub type Body = BoxStream<'static, Result<Bytes, BodyError>>;

/// Carries requests to the API.
pub trait Transport: Send + Sync + 'static {
    /// Sends `request`, whose URI is an origin-form path and query
    /// (`/api/v1/tasks?limit=5`), answering the response as it starts to
    /// arrive. An error is a request that got no answer at all.
    fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'_, Result<http::Response<Body>, ClientError>>;

    /// Where requests go, as people read it (`https://host:7700`).
    fn base(&self) -> &str;

    /// Sends `request`, an HTTP/1.1 upgrade (a WebSocket's opening), and
    /// answers the connection it upgraded to. A transport that cannot
    /// upgrade says so.
    fn upgrade(
        &self,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'_, Result<Upgraded, ClientError>> {
        let _ = request;
        Box::pin(async {
            Err(ClientError::config(
                "this transport cannot open a WebSocket",
            ))
        })
    }
}

/// Both directions of an upgraded connection.
pub trait UpgradedIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> UpgradedIo for T {}

/// A connection upgraded from HTTP (a WebSocket's bytes flow over it).
pub type Upgraded = Box<dyn UpgradedIo>;

/// The API of a server over the network.
#[derive(Clone)]
pub struct Http {
    base: String,
    http: reqwest::Client,
}

impl Http {
    /// The server at `base` (a normalised base URL, see
    /// [`normalise_base`](crate::normalise_base)), its certificate checked
    /// against `trust`.
    pub fn new(base: String, trust: &Trust) -> Result<Http, ClientError> {
        let b = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(60));
        let http = trust
            .apply(b)?
            .build()
            .map_err(|e| ClientError::config(format!("cannot set up HTTP: {e}")))?;
        Ok(Http { base, http })
    }
}

impl Transport for Http {
    fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'_, Result<http::Response<Body>, ClientError>> {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let url = format!("{}{}", self.base, parts.uri);
            let res = self
                .http
                .request(parts.method, url)
                .headers(parts.headers)
                .body(body)
                .send()
                .await
                .map_err(|e| ClientError::unreachable(&self.base, &e))?;
            let status = res.status();
            let headers = res.headers().clone();
            let body: Body = res
                .bytes_stream()
                .map_err(|e| Box::new(e) as BodyError)
                .boxed();
            let mut answer = http::Response::new(body);
            *answer.status_mut() = status;
            *answer.headers_mut() = headers;
            Ok(answer)
        })
    }

    fn base(&self) -> &str {
        &self.base
    }

    fn upgrade(
        &self,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'_, Result<Upgraded, ClientError>> {
        Box::pin(async move {
            let (parts, _) = request.into_parts();
            let url = format!("{}{}", self.base, parts.uri);
            // reqwest upgrades over HTTP/1.1 only: the request says so.
            let res = self
                .http
                .request(parts.method, url)
                .version(http::Version::HTTP_11)
                .headers(parts.headers)
                .send()
                .await
                .map_err(|e| ClientError::unreachable(&self.base, &e))?;
            let status = res.status();
            if status != http::StatusCode::SWITCHING_PROTOCOLS {
                let body = res.bytes().await.unwrap_or_default();
                return Err(ClientError::from_response(status, &body));
            }
            let io = res
                .upgrade()
                .await
                .map_err(|e| ClientError::unreachable(&self.base, &e))?;
            Ok(Box::new(io) as Upgraded)
        })
    }
}
