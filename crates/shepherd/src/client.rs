//! A small HTTP client for the CLI verbs: bearer auth, JSON in and out, and
//! server errors turned into readable messages with their codes.

use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// An error as the CLI shows it.
#[derive(Debug)]
pub struct ClientError {
    pub code: String,
    pub message: String,
    pub status: Option<StatusCode>,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "{} ({}, HTTP {})", self.message, self.code, s.as_u16()),
            None => write!(f, "{} ({})", self.message, self.code),
        }
    }
}
impl std::error::Error for ClientError {}

impl Client {
    pub fn new(base: &str, token: Option<String>) -> Client {
        Client {
            base: base.trim_end_matches('/').to_owned(),
            token,
            http: reqwest::Client::new(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        let res = req.send().await.map_err(|e| ClientError {
            code: "unreachable".into(),
            message: format!("cannot reach the Shepherd server at {}: {e}", self.base),
            status: None,
        })?;
        let status = res.status();
        let body: Value = res.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        let err = &body["error"];
        Err(ClientError {
            code: err["code"].as_str().unwrap_or("http_error").to_owned(),
            message: err["message"]
                .as_str()
                .unwrap_or("request failed")
                .to_owned(),
            status: Some(status),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(self.request(Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.send(self.request(Method::POST, path).json(body)).await
    }
}
