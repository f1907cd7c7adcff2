//! The WebSocket messages of a PTY worker (seed 004), JSON text frames.

use serde::{Deserialize, Serialize};

/// Server → client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ServerMessage {
    /// Once on attach (and again for a client that fell behind): what the
    /// terminal shows. `offset` counts raw PTY bytes through its end;
    /// `epoch` changes whenever a new process starts.
    History {
        data: String,
        offset: u64,
        epoch: i64,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ClientMessage {
    Input { data: String },
    Resize { cols: u16, rows: u16 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_seed_shapes() {
        let exit = ServerMessage::Exit {
            exit_code: Some(1),
            signal: None,
        };
        assert_eq!(
            exit.to_json(),
            r#"{"type":"exit","exitCode":1,"signal":null}"#
        );
        let a = ServerMessage::Activity {
            state: ActivityState::Idle,
        };
        assert_eq!(a.to_json(), r#"{"type":"activity","state":"idle"}"#);
        let h = ServerMessage::History {
            data: "x".into(),
            offset: 1,
            epoch: 2,
        };
        assert_eq!(
            h.to_json(),
            r#"{"type":"history","data":"x","offset":1,"epoch":2}"#
        );
        let r: ClientMessage =
            serde_json::from_str(r#"{"type":"resize","cols":100,"rows":40}"#).unwrap();
        assert_eq!(
            r,
            ClientMessage::Resize {
                cols: 100,
                rows: 40
            }
        );
    }
}
