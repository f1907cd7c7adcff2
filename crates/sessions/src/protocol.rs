//! The WebSocket messages of a PTY worker (the sessions contract): defined in the
//! protocol crate with every other wire shape, re-exported here.

pub use shepherd_protocol::{ActivityState, ClientMessage, ServerMessage};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_contract_shapes() {
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
            start: 0,
        };
        assert_eq!(
            h.to_json(),
            r#"{"type":"history","data":"x","offset":1,"epoch":2,"start":0}"#
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
