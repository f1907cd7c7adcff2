//! The `text` format: plain terminal output gathered into action text steps,
//! one step per burst of output.
//!
//! The runner decides where a burst ends (it calls `flush` after a quiet
//! gap); a burst also ends on its own once it grows past
//! [`TEXT_BURST_MAX_LINES`] lines or [`TEXT_BURST_MAX_BYTES`] bytes, so a
//! chatty process still produces steps of readable size. The same buffer
//! keeps the lines the JSON formats do not understand.

use std::borrow::Cow;

use super::{step, Adapter, AdapterOutput};
use crate::transcript::{truncate_utf8, ActionContent, TranscriptStep, MAX_TOOL_RESULT_BYTES};

/// A burst is emitted once it holds this many lines.
pub const TEXT_BURST_MAX_LINES: usize = 200;

/// A burst is emitted once its text exceeds this many bytes.
pub const TEXT_BURST_MAX_BYTES: usize = 8 * 1024;

/// Removes terminal escape sequences (colours, cursor movement, window
/// titles) and other control characters except tab, keeping the text.
///
/// A small state machine: CSI (`ESC [` … final byte), OSC and the other
/// string sequences (`ESC ]` … BEL or `ESC \`), and two-byte escapes. A
/// sequence cut off at the end of the line is dropped.
pub fn strip_ansi(s: &str) -> Cow<'_, str> {
    let Some(first) = next_control(s) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len());
    out.push_str(&s[..first]);
    let mut rest = &s[first..];
    let mut state = State::Text;
    loop {
        // Plain text is copied a run at a time, up to the next control
        // character: per character, this was most of the time a line took.
        if matches!(state, State::Text) {
            let run = next_control(rest).unwrap_or(rest.len());
            out.push_str(&rest[..run]);
            rest = &rest[run..];
        }
        let mut chars = rest.chars();
        let Some(c) = chars.next() else {
            break;
        };
        rest = chars.as_str();
        state = state.next(c, &mut out);
    }
    Cow::Owned(out)
}

/// The byte offset of the first control character other than tab
/// (`char::is_control`: U+0000..U+001F, U+007F, and U+0080..U+009F, which
/// UTF-8 writes as 0xC2 0x80..=0x9F), by bytes, without decoding.
fn next_control(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            0x00..=0x08 | 0x0a..=0x1f | 0x7f => return Some(i),
            0xc2 if matches!(b.get(i + 1), Some(0x80..=0x9f)) => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Where [`strip_ansi`] is in an escape sequence.
#[derive(Clone, Copy)]
enum State {
    Text,
    Escape,
    EscapeIntermediate,
    Csi,
    Str,
    StrEscape,
}

impl State {
    /// Takes one character: appends it to `out` if it is shown text.
    fn next(self, c: char, out: &mut String) -> State {
        match self {
            State::Text => match c {
                '\u{1b}' => State::Escape,
                '\u{9b}' => State::Csi,
                '\t' => {
                    out.push(c);
                    State::Text
                }
                c if c.is_control() => State::Text,
                c => {
                    out.push(c);
                    State::Text
                }
            },
            State::Escape => match c {
                '[' => State::Csi,
                // OSC, DCS, SOS, PM, APC: all run to a string terminator.
                ']' | 'P' | 'X' | '^' | '_' => State::Str,
                ' '..='/' => State::EscapeIntermediate,
                // Any other byte completes a two-byte escape (`ESC 7`, `ESC M`).
                _ => State::Text,
            },
            State::EscapeIntermediate => match c {
                ' '..='/' => State::EscapeIntermediate,
                _ => State::Text,
            },
            State::Csi => match c {
                // Parameter and intermediate bytes.
                '0'..='?' | ' '..='/' => State::Csi,
                // The final byte ends the sequence.
                '@'..='~' => State::Text,
                // Malformed sequence: drop what was seen, keep this char.
                c => {
                    if !c.is_control() {
                        out.push(c);
                    }
                    State::Text
                }
            },
            State::Str => match c {
                '\u{7}' => State::Text,
                '\u{1b}' => State::StrEscape,
                _ => State::Str,
            },
            // `ESC \` is the terminator; anything else after ESC ends the
            // string too, since terminals treat a new escape that way.
            State::StrEscape => State::Text,
        }
    }
}

/// A raw output line as a terminal would show it: line ending removed,
/// only the text after the last carriage return (progress bars redraw the
/// line with `\r`), escape sequences stripped.
fn clean_line(raw: &str) -> String {
    let line = raw.trim_end_matches(['\n', '\r']);
    let line = line.rsplit('\r').next().unwrap_or(line);
    strip_ansi(line).into_owned()
}

/// Lines waiting to become one action text step.
#[derive(Debug, Default)]
pub(crate) struct TextBuffer {
    text: String,
    lines: usize,
}

impl TextBuffer {
    /// Adds a raw line. Returns the burst's text when this line made it
    /// reach a size limit. Blank lines are kept inside a burst but never
    /// start one.
    pub(crate) fn push(&mut self, raw: &str) -> Option<String> {
        let line = clean_line(raw);
        if self.lines == 0 && line.trim().is_empty() {
            return None;
        }
        // One enormous line (a minified bundle, a base64 blob) must not make
        // an enormous step; cap it like a tool result.
        let line = truncate_utf8(&line, MAX_TOOL_RESULT_BYTES);
        if self.lines > 0 {
            self.text.push('\n');
        }
        self.text.push_str(&line);
        self.lines += 1;
        if self.lines >= TEXT_BURST_MAX_LINES || self.text.len() > TEXT_BURST_MAX_BYTES {
            self.take()
        } else {
            None
        }
    }

    /// True when no line waits for the burst to end.
    pub(crate) fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// Ends the burst, returning its text unless it is blank.
    pub(crate) fn take(&mut self) -> Option<String> {
        let text = std::mem::take(&mut self.text);
        self.lines = 0;
        let trimmed = text.trim_end();
        if trimmed.is_empty() {
            None
        } else if trimmed.len() == text.len() {
            Some(text)
        } else {
            Some(trimmed.to_string())
        }
    }

    /// Ends the burst, appending its step (if any) to `out`. JSON adapters
    /// call this before any structured output to keep the stream's order.
    pub(crate) fn flush_into(&mut self, out: &mut Vec<AdapterOutput>) {
        if let Some(text) = self.take() {
            out.push(text_step(text));
        }
    }

    /// Adds a raw line, appending a step to `out` if a limit was reached.
    pub(crate) fn push_into(&mut self, raw: &str, out: &mut Vec<AdapterOutput>) {
        if let Some(text) = self.push(raw) {
            out.push(text_step(text));
        }
    }
}

/// An action holding one text item.
pub(crate) fn text_action(text: String) -> TranscriptStep {
    TranscriptStep::Action {
        content: vec![ActionContent::Text { text }],
    }
}

fn text_step(text: String) -> AdapterOutput {
    step(text_action(text))
}

/// Adapter for the `text` format.
#[derive(Debug, Default)]
pub struct TextAdapter {
    buffer: TextBuffer,
    last_text: Option<String>,
}

impl TextAdapter {
    pub fn new() -> Self {
        Self::default()
    }

    fn emit(&mut self, text: Option<String>) -> Vec<AdapterOutput> {
        match text {
            Some(text) => {
                self.last_text = Some(text.clone());
                vec![text_step(text)]
            }
            None => Vec::new(),
        }
    }
}

impl Adapter for TextAdapter {
    fn push_line(&mut self, line: &str) -> Vec<AdapterOutput> {
        let text = self.buffer.push(line);
        self.emit(text)
    }

    fn flush(&mut self) -> Vec<AdapterOutput> {
        let text = self.buffer.take();
        self.emit(text)
    }

    fn last_assistant_text(&self) -> Option<&str> {
        self.last_text.as_deref()
    }

    fn is_idle(&self) -> bool {
        self.buffer.is_empty()
    }
}
