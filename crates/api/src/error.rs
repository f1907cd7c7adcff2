//! The one error type every handler returns, and the JSON extractor that
//! turns malformed bodies into it.
//!
//! Every error answers `{"error": {"code": "...", "message": "..."}}` with a
//! status chosen by its kind. Internal failures are logged in full and
//! answered with a generic message: clients never see SQL or stack traces.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use shepherd_core::{Error, ErrorKind};
use shepherd_protocol::ErrorDetail;

/// An error on its way to becoming an HTTP response.
#[derive(Debug)]
pub struct ApiError {
    pub error: Error,
    /// Extra top-level fields kept for compatibility with a seed's error
    /// shape (the connector contract's `ok`, `claimed`, `reason`).
    pub extra: Option<Map<String, Value>>,
}

impl ApiError {
    /// Adds top-level fields (a struct of the protocol crate) beside `error`.
    pub fn with_fields(mut self, fields: impl Serialize) -> Self {
        if let Ok(Value::Object(m)) = serde_json::to_value(fields) {
            self.extra = Some(m);
        }
        self
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError { error, extra: None }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Capacity => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Misdirected => StatusCode::MISDIRECTED_REQUEST,
        ErrorKind::Timeout => StatusCode::REQUEST_TIMEOUT,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(self.error.kind);
        let message = match self.error.kind {
            ErrorKind::Internal => {
                tracing::error!(code = self.error.code, error = %self.error.message, "internal error");
                "internal error; see the server log".to_owned()
            }
            ErrorKind::Unavailable => {
                tracing::warn!(code = self.error.code, error = %self.error.message, "service unavailable");
                self.error.message
            }
            _ => self.error.message,
        };
        let mut body = self.extra.unwrap_or_default();
        let detail = ErrorDetail {
            code: self.error.code.to_string(),
            message,
        };
        body.insert(
            "error".into(),
            serde_json::to_value(detail).unwrap_or_default(),
        );
        (status, Json(Value::Object(body))).into_response()
    }
}

/// `Json<T>` whose rejections are [`ApiError`]s with stable codes.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection).into()),
        }
    }
}

fn json_rejection(r: JsonRejection) -> Error {
    match r {
        JsonRejection::JsonDataError(e) => Error::invalid("invalid_body", e.body_text()),
        JsonRejection::JsonSyntaxError(e) => Error::bad_request("malformed_json", e.body_text()),
        JsonRejection::MissingJsonContentType(_) => Error::new(
            ErrorKind::BadRequest,
            "unsupported_media_type",
            "expected a request body with Content-Type: application/json",
        ),
        JsonRejection::BytesRejection(e) => {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Error::new(
                    ErrorKind::TooLarge,
                    "payload_too_large",
                    "request body is larger than the server accepts",
                )
            } else {
                Error::bad_request("bad_body", e.body_text())
            }
        }
        other => Error::bad_request("bad_body", other.body_text()),
    }
}

/// `Query<T>` whose rejections are [`ApiError`]s with stable codes.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(QueryRejection::FailedToDeserializeQueryString(e)) => {
                Err(Error::bad_request("invalid_query", e.body_text()).into())
            }
            Err(e) => Err(Error::bad_request("invalid_query", e.body_text()).into()),
        }
    }
}

pub async fn not_found() -> ApiError {
    Error::not_found("route_not_found", "no such route").into()
}
