//! The WebSocket messages of a PTY tab (the sessions contract), JSON text frames.

use serde::{Deserialize, Serialize};

/// Server → client.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ServerMessage {
    /// Once on attach (and again for a client that fell behind): what the
    /// terminal shows. `offset` counts raw PTY bytes through its end;
    /// `epoch` changes whenever a new process starts. `start` is the offset
    /// where `data` begins: a resuming client continues its screen only when
    /// `start` equals the offset it asked for (same epoch); otherwise `data`
    /// is the whole retained screen and replaces what it shows.
    History {
        data: String,
        offset: u64,
        epoch: i64,
        start: u64,
    },
    Output {
        data: String,
        offset: u64,
    },
    /// `active` while output came within the last few seconds, else `idle`.
    Activity {
        state: ActivityState,
    },
    #[serde(rename_all = "camelCase")]
    Exit {
        exit_code: Option<i64>,
        /// The number of the signal that ended the process, if one did.
        signal: Option<i32>,
    },
    /// A message the server could not act on.
    Error {
        code: String,
        message: String,
    },
}

/// Client → server.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ClientMessage {
    Input { data: String },
    Resize { cols: u16, rows: u16 },
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ActivityState {
    Active,
    Idle,
}

impl ServerMessage {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}
