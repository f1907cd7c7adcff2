//! Reading an agent's output as lines, whatever bytes it writes.
//!
//! Agents print what they like: binary junk, a Latin-1 file, one 50 MB line
//! of minified JSON. A reader that stops at the first invalid UTF-8
//! sequence would stop draining the pipe, and the agent would then die of
//! SIGPIPE with its transcript cut. So bytes are read as they come, invalid
//! sequences become U+FFFD, and a line longer than the bound is handed on in
//! pieces (cut between characters, never inside one).

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line handed on in one piece.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Lines of `reader`, decoded lossily, each at most `max` bytes.
pub struct LossyLines<R> {
    reader: R,
    max: usize,
    buf: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> LossyLines<R> {
    pub fn new(reader: R, max: usize) -> Self {
        LossyLines {
            reader,
            max: max.max(4),
            buf: Vec::new(),
        }
    }

    /// The next line without its `\n` (or `\r\n`), `None` at the end.
    pub async fn next_line(&mut self) -> std::io::Result<Option<String>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let rest = std::mem::take(&mut self.buf);
                return Ok(Some(decode(&rest)));
            }
            let room = self.max - self.buf.len();
            let window = &available[..available.len().min(room)];
            if let Some(i) = window.iter().position(|&b| b == b'\n') {
                self.buf.extend_from_slice(&window[..i]);
                self.reader.consume(i + 1);
                if self.buf.last() == Some(&b'\r') {
                    self.buf.pop();
                }
                let line = std::mem::take(&mut self.buf);
                return Ok(Some(decode(&line)));
            }
            let n = window.len();
            self.buf.extend_from_slice(window);
            self.reader.consume(n);
            if self.buf.len() >= self.max {
                // Hand on what fits, keeping a character that straddles the
                // cut for the next piece.
                let cut = char_boundary_before_end(&self.buf);
                let rest = self.buf.split_off(cut);
                let piece = std::mem::replace(&mut self.buf, rest);
                return Ok(Some(decode(&piece)));
            }
        }
    }
}

pub(crate) fn decode(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Where to cut `buf` so that a multi-byte character begun in its last three
/// bytes and not yet complete is left whole for later.
pub(crate) fn char_boundary_before_end(buf: &[u8]) -> usize {
    let len = buf.len();
    for back in 1..=3.min(len) {
        let b = buf[len - back];
        let needed = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            0x80..=0xBF => continue, // a continuation byte: look further back
            _ => return len,         // ASCII or invalid: nothing pending
        };
        return if back < needed { len - back } else { len };
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(input: &[u8], max: usize) -> Vec<String> {
        let mut lines = LossyLines::new(tokio::io::BufReader::with_capacity(7, input), max);
        let mut out = Vec::new();
        while let Some(l) = lines.next_line().await.unwrap() {
            out.push(l);
        }
        out
    }

    #[tokio::test]
    async fn invalid_bytes_become_replacement_characters_and_reading_goes_on() {
        let input = b"first\n\xff\xfe binary \xc3\n\xe2\x82\xac euro\r\nlast without newline";
        assert_eq!(
            all(input, 1024).await,
            [
                "first",
                "\u{FFFD}\u{FFFD} binary \u{FFFD}",
                "\u{20AC} euro",
                "last without newline"
            ]
        );
    }

    #[tokio::test]
    async fn long_lines_are_cut_between_characters() {
        // 'é' is two bytes: a cut every 5 bytes must never split one.
        let input = "aéééééé\nb".as_bytes();
        let lines = all(input, 5).await;
        assert_eq!(lines.concat(), "aééééééb");
        assert!(lines.iter().all(|l| !l.contains('\u{FFFD}')), "{lines:?}");
        assert!(lines.iter().all(|l| l.len() <= 5), "{lines:?}");
    }

    #[tokio::test]
    async fn empty_lines_are_kept() {
        assert_eq!(all(b"a\n\nb\n", 64).await, ["a", "", "b"]);
    }
}

/// Properties over arbitrary output: whatever bytes an agent writes, in
/// whatever chunks the pipe delivers them, reading never fails or panics
/// and nothing is dropped.
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn read_all(input: &[u8], max: usize, chunk: usize) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let reader = tokio::io::BufReader::with_capacity(chunk, input);
            let mut lines = LossyLines::new(reader, max);
            let mut out = Vec::new();
            while let Some(l) = lines.next_line().await.unwrap() {
                out.push(l);
            }
            out
        })
    }

    /// What reading must give when no line is longer than the bound: the
    /// input split at `\n`, the `\r` of a `\r\n` dropped, each line decoded
    /// lossily; a final newline ends the last line without opening one.
    fn reference(input: &[u8]) -> Vec<String> {
        let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
        let unterminated = lines.pop().filter(|l| !l.is_empty());
        let mut out: Vec<String> = lines
            .into_iter()
            .map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)).into_owned())
            .collect();
        out.extend(unterminated.map(|l| String::from_utf8_lossy(l).into_owned()));
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_bytes_are_read_whole_in_any_chunks(
            input in proptest::collection::vec(
                prop_oneof![any::<u8>(), Just(b'\n'), Just(b'\r'), Just(0xE2u8)],
                0..400,
            ),
            chunk in 1usize..64,
        ) {
            let got = read_all(&input, input.len() + 8, chunk);
            prop_assert_eq!(got, reference(&input));
        }

        #[test]
        fn long_lines_lose_nothing_and_respect_the_bound(
            text in "[a-z\u{e9}\u{20ac}\u{1f600}\n]{0,300}",
            max in 4usize..40,
            chunk in 1usize..64,
        ) {
            let got = read_all(text.as_bytes(), max, chunk);
            prop_assert_eq!(got.concat(), text.replace('\n', ""));
            for piece in &got {
                prop_assert!(piece.len() <= max, "{:?} is over {}", piece, max);
                prop_assert!(!piece.contains('\u{FFFD}'), "{:?} was cut inside a character", piece);
            }
        }

        #[test]
        fn no_ascii_byte_is_dropped_or_invented_at_any_bound(
            input in proptest::collection::vec(
                any::<u8>().prop_filter("no CR", |b| *b != b'\r'),
                0..600,
            ),
            max in 0usize..50,
            chunk in 1usize..64,
        ) {
            let got = read_all(&input, max, chunk);
            let ascii_in: Vec<u8> = input
                .iter()
                .copied()
                .filter(|b| b.is_ascii() && *b != b'\n')
                .collect();
            let ascii_out: Vec<u8> = got
                .concat()
                .bytes()
                .filter(u8::is_ascii)
                .collect();
            prop_assert_eq!(ascii_out, ascii_in);
        }
    }
}
