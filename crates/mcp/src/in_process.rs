//! The API as `/mcp` reaches it: the server's own axum router, called
//! in-process as a tower service, plugged into the client crate as a
//! [`Transport`]. A tool's request so meets the same authentication,
//! validation and error codes as any REST client's, without a socket and
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
pub struct InProcess(pub Router);

impl Transport for InProcess {
    fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'_, Result<http::Response<Chunks>, ClientError>> {
        let router = self.0.clone();
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
        "in-process"
    }
}
