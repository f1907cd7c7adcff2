//! The API as `/mcp` and `serve`'s built-in runner reach it: the server's
//! own axum router, called in-process as a tower service, plugged into the
//! client crate as a [`Transport`]. A request so meets the same
//! authentication, validation, limits and error codes as any REST
//! client's, without a socket (no TCP, no HTTP encoding either way) and
//! without the client crate knowing about axum.

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use shepherd_client::transport::{Body as Chunks, BodyError};
use shepherd_client::{ClientError, Transport};
use tower::ServiceExt;

/// The serving process's own router (every route, behind its auth).
pub struct InProcess {
    router: Router,
    base: String,
}

impl InProcess {
    /// `router`, whose callers need no address of it (`/mcp`'s tools).
    pub fn new(router: Router) -> Self {
        InProcess {
            router,
            base: "in-process".into(),
        }
    }

    /// `router`, which also serves at `base` (`http://127.0.0.1:7700`): the
    /// address a runner hands on to its agents, which call over the network.
    pub fn serving_at(router: Router, base: String) -> Self {
        InProcess { router, base }
    }
}

impl Transport for InProcess {
    fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'_, Result<http::Response<Chunks>, ClientError>> {
        let router = self.router.clone();
        Box::pin(async move {
            let response = router
                .oneshot(request.map(Body::from))
                .await
                .unwrap_or_else(|never| match never {});
            Ok(response.map(|body| {
                body.into_data_stream()
                    .map_err(|e| Box::new(e) as BodyError)
                    .boxed()
            }))
        })
    }

    fn base(&self) -> &str {
        &self.base
    }
}
