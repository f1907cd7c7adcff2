//! The binary messages of a host's link: the bytes of attached tabs'
//! streams, kept out of JSON so that a frame the host rendered reaches the
//! client as it is, without being quoted and unquoted on the way.
//!
//! Every binary message starts with its stream's id (8 bytes, big-endian).
//! From host to server the rest is one frame of the sessions contract
//! (a `ServerMessage`'s JSON, sent to the client unchanged). From server
//! to host a tag byte follows: [`TAG_INPUT`] and the bytes to type, or
//! [`TAG_RESIZE`] and the new size (columns, rows: 2 bytes each).

/// Input for the PTY follows.
pub const TAG_INPUT: u8 = 0;
/// A new size follows.
pub const TAG_RESIZE: u8 = 1;

/// A frame for the client of `stream`.
pub fn frame_packet(stream: u64, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(json);
    out
}

/// A frame's stream and the frame; `None` for a message too short to be one.
pub fn split_frame(packet: &[u8]) -> Option<(u64, &[u8])> {
    let (id, rest) = packet.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*id), rest))
}

/// What a client sends a tab, on its way to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TabInput {
    Bytes(Vec<u8>),
    Resize { cols: u16, rows: u16 },
}

impl TabInput {
    pub fn packet(&self, stream: u64) -> Vec<u8> {
        let mut out = stream.to_be_bytes().to_vec();
        match self {
            TabInput::Bytes(b) => {
                out.push(TAG_INPUT);
                out.extend_from_slice(b);
            }
            TabInput::Resize { cols, rows } => {
                out.push(TAG_RESIZE);
                out.extend_from_slice(&cols.to_be_bytes());
                out.extend_from_slice(&rows.to_be_bytes());
            }
        }
        out
    }

    /// Reads a server-to-host message; `None` for one that is malformed.
    pub fn parse(packet: &[u8]) -> Option<(u64, TabInput)> {
        let (stream, rest) = split_frame(packet)?;
        let (&tag, body) = rest.split_first()?;
        let input = match tag {
            TAG_INPUT => TabInput::Bytes(body.to_vec()),
            TAG_RESIZE => {
                let (cols, rows) = body.split_first_chunk::<2>()?;
                let rows: [u8; 2] = rows.try_into().ok()?;
                TabInput::Resize {
                    cols: u16::from_be_bytes(*cols),
                    rows: u16::from_be_bytes(rows),
                }
            }
            _ => return None,
        };
        Some((stream, input))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_read_back_as_written() {
        let f = frame_packet(7, br#"{"type":"output"}"#);
        assert_eq!(split_frame(&f), Some((7, &br#"{"type":"output"}"#[..])));
        assert_eq!(split_frame(&[1, 2, 3]), None);
        for input in [
            TabInput::Bytes(b"ls\r".to_vec()),
            TabInput::Bytes(Vec::new()),
            TabInput::Resize { cols: 300, rows: 1 },
        ] {
            let p = input.packet(u64::MAX - 1);
            assert_eq!(TabInput::parse(&p), Some((u64::MAX - 1, input)));
        }
        // A truncated resize, an unknown tag, nothing after the id.
        let mut short = TabInput::Resize { cols: 1, rows: 2 }.packet(1);
        short.pop();
        assert_eq!(TabInput::parse(&short), None);
        assert_eq!(TabInput::parse(&[0, 0, 0, 0, 0, 0, 0, 1, 9]), None);
        assert_eq!(TabInput::parse(&1u64.to_be_bytes()), None);
    }
}
