//! A streaming UTF-8 decoder for PTY output.
//!
//! A read from a PTY can end in the middle of a multi-byte character; the
//! bytes of that character wait for the next read instead of becoming two
//! replacement characters. Bytes that can never be valid UTF-8 become
//! U+FFFD, as `String::from_utf8_lossy` would.

/// Decodes a byte stream chunk by chunk.
#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    /// The start of a character the last chunk ended inside (at most 3 bytes).
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many bytes wait for the rest of their character.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Decodes `chunk`, keeping an incomplete trailing character for later.
    pub fn decode(&mut self, chunk: &[u8]) -> String {
        let joined;
        let bytes: &[u8] = if self.pending.is_empty() {
            chunk
        } else {
            let mut v = std::mem::take(&mut self.pending);
            v.extend_from_slice(chunk);
            joined = v;
            &joined
        };
        let keep = incomplete_tail(bytes);
        let (complete, tail) = bytes.split_at(bytes.len() - keep);
        let text = String::from_utf8_lossy(complete).into_owned();
        self.pending = tail.to_vec();
        text
    }
}

/// The length of an incomplete (but so far valid) character at the end.
fn incomplete_tail(bytes: &[u8]) -> usize {
    // A character is at most 4 bytes: look at the last 3 for its lead byte.
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: keep looking for the lead
        }
        let needed = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        if needed <= back {
            return 0;
        }
        // Only hold it back if what follows the lead could still be valid.
        let tail = &bytes[bytes.len() - back..];
        return match std::str::from_utf8(tail) {
            Err(e) if e.error_len().is_none() => back,
            _ => 0,
        };
    }
    0
}

/// Decodes a slice cut out of a stream at an arbitrary byte: leading
/// continuation bytes (the end of a character cut off) are dropped.
pub fn decode_from_cut(bytes: &[u8]) -> String {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| **b & 0b1100_0000 == 0b1000_0000)
        .count();
    String::from_utf8_lossy(&bytes[skip..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_reads_waits_for_its_end() {
        let euro = "€".as_bytes(); // 3 bytes
        let mut d = Utf8Stream::new();
        assert_eq!(d.decode(&[b'a', euro[0]]), "a");
        assert_eq!(d.pending(), 1);
        assert_eq!(d.decode(&euro[1..2]), "");
        assert_eq!(d.decode(&[euro[2], b'b']), "€b");
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut d = Utf8Stream::new();
        assert_eq!(d.decode(&[b'x', 0xFF, b'y']), "x\u{FFFD}y");
        // A lead byte followed by a non-continuation is invalid at once.
        assert_eq!(d.decode(&[0xE2, b'z']), "\u{FFFD}z");
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn every_split_of_mixed_text_decodes_to_the_original() {
        let text = "héllo wörld — 😀 日本語";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut d = Utf8Stream::new();
            let mut out = d.decode(&bytes[..cut]);
            out.push_str(&d.decode(&bytes[cut..]));
            assert_eq!(out, text, "cut at {cut}");
        }
    }

    #[test]
    fn a_cut_slice_drops_the_end_of_a_cut_character() {
        let bytes = "€x".as_bytes();
        assert_eq!(decode_from_cut(&bytes[1..]), "x");
        assert_eq!(decode_from_cut(bytes), "€x");
    }
}
