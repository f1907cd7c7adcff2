//! Why a call failed, in terms a caller can act on: the server could not
//! be reached (try again), it refused (with its stable code), or the answer
//! was not what the protocol promises.

use http::StatusCode;
use shepherd_protocol::ErrorBody;

#[derive(Debug, Clone)]
pub enum ClientError {
    /// The server could not be reached, or the connection broke.
    Unreachable { message: String },
    /// The server answered with an error status.
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// The answer did not parse as the protocol's type.
    Decode { message: String },
    /// The client is set up wrong (bad address, unreadable CA file).
    Config { message: String },
}

impl ClientError {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        ClientError::Config {
            message: message.into(),
        }
    }

    pub(crate) fn unreachable(base: &str, e: &(dyn std::error::Error + 'static)) -> Self {
        // reqwest's Display hides the cause ("error sending request");
        // the chain says what happened (refused, TLS, DNS).
        let mut msg = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        ClientError::Unreachable {
            message: format!("cannot reach the Shepherd server at {base}: {msg}"),
        }
    }

    pub(crate) fn from_response(status: StatusCode, body: &[u8]) -> Self {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(b) => ClientError::Api {
                status: status.as_u16(),
                code: b.error.code,
                message: b.error.message,
            },
            Err(_) => ClientError::Api {
                status: status.as_u16(),
                code: "http_error".into(),
                message: format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
            },
        }
    }

    /// The stable code: the server's, or `unreachable`, `bad_answer`, `bad_config`.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Unreachable { .. } => "unreachable",
            ClientError::Api { code, .. } => code,
            ClientError::Decode { .. } => "bad_answer",
            ClientError::Config { .. } => "bad_config",
        }
    }

    /// What went wrong, without the code: the server's own message for a
    /// refusal.
    pub fn message(&self) -> &str {
        match self {
            ClientError::Unreachable { message }
            | ClientError::Api { message, .. }
            | ClientError::Decode { message }
            | ClientError::Config { message } => message,
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Worth retrying the same call later: the server was unreachable,
    /// overloaded or failing (5xx), or rate-limited for a reason other than
    /// the worker's own capacity.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Api { status, code, .. } => {
                *status >= 500 || (*status == 429 && code != "worker_at_capacity")
            }
            _ => false,
        }
    }

    /// Retried inside the client for reads: unreachable or a gateway error.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Api { status, .. } => StatusCode::from_u16(*status)
                .map(crate::is_gateway_trouble)
                .unwrap_or(false),
            _ => false,
        }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable { message }
            | ClientError::Decode { message }
            | ClientError::Config { message } => f.write_str(message),
            ClientError::Api {
                status,
                code,
                message,
            } => write!(f, "{message} ({code}, HTTP {status})"),
        }
    }
}

impl std::error::Error for ClientError {}
