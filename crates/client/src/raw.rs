//! Untyped JSON calls, for routes whose wire types live beside their
//! handlers (the conversation and session routes' types are in
//! `shepherd-api` and `shepherd-sessions`): the
//! caller deserialises the answer itself.

use serde_json::Value;

use crate::{Client, ClientError};

impl Client {
    /// `GET path` (with any query already in it), the body as JSON.
    pub async fn get_value(&self, path: &str) -> Result<Value, ClientError> {
        self.fetch(path).await
    }

    /// `POST path` with a JSON body (never retried: it may not be idempotent).
    pub async fn post_value(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.post(path, body).await
    }

    /// `DELETE path`, the body as JSON (never retried).
    pub async fn delete_value(&self, path: &str) -> Result<Value, ClientError> {
        Ok(self
            .send(reqwest::Method::DELETE, path, None, None, false)
            .await?
            .0)
    }
}
