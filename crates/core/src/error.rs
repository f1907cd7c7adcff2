//! One error type for the whole system.
//!
//! Every failure that can reach a client carries a stable, machine-readable
//! `code` (snake_case) and a `kind` that decides the HTTP status. The kinds
//! are few; the codes are listed once, with what each means, in [`codes`]
//! (the OpenAPI document's list comes from there), so tests and clients
//! match on exact codes.

pub mod codes;

use std::fmt;

/// What sort of failure this is; the HTTP layer maps each to one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Malformed input (400).
    BadRequest,
    /// Missing or wrong credentials (401).
    Unauthorized,
    /// Authenticated but not allowed (403).
    Forbidden,
    /// The thing named does not exist (404).
    NotFound,
    /// The request conflicts with current state (409).
    Conflict,
    /// Body too large (413).
    TooLarge,
    /// Well-formed but semantically invalid (422).
    Invalid,
    /// A limit was reached; retry later (429).
    Capacity,
    /// The request names a host this server is not known by (421).
    Misdirected,
    /// The client took too long to send its request (408).
    Timeout,
    /// A dependency (the database) is unavailable (503).
    Unavailable,
    /// A bug or an unexpected failure (500). Never used for bad input.
    Internal,
}

/// An error with a stable code, a human message and a kind.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub code: &'static str,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        debug_assert!(
            codes::is_listed(code),
            "error code {code:?} is missing from shepherd_core::error::codes"
        );
        Error {
            kind,
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, code, message)
    }
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, code, message)
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, code, message)
    }
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, code, message)
    }
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, code, message)
    }
    pub fn capacity(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Capacity, code, message)
    }
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, code, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, "internal", message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}
