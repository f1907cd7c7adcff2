//! The run transcript: the ordered list of steps an agent took during a run
//! (what it said, which tools it called, what those tools returned).
//!
//! The JSON shape of [`TranscriptStep`] is a contract shared with workers,
//! the API and agents that resume a conversation from a stored transcript, so
//! it must not change. Everything else here keeps transcripts bounded
//! (truncation caps, size guards) and well-formed (closing dangling tool
//! calls), and packs them into the compact blob the stores keep.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::io::Read;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};

/// Longest tool result text kept in a transcript. Tool output (test logs,
/// file dumps) is the bulk of any transcript; beyond this it stops helping a
/// reader or a resuming agent and only bloats storage.
pub const MAX_TOOL_RESULT_BYTES: usize = 50 * 1024;

/// Longest tool call argument string kept. Arguments are usually small; the
/// large ones are whole-file writes whose content also shows up elsewhere.
pub const MAX_TOOL_ARGS_BYTES: usize = 2 * 1024;

/// [`decompress`] refuses to inflate a blob beyond this many bytes, so a
/// corrupt or hostile blob (a "zip bomb") cannot exhaust memory.
pub const MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// Longest [`StepSummary::preview`], in bytes. Summaries go into event
/// payloads, and the event log must stay small.
pub const PREVIEW_MAX_BYTES: usize = 200;

/// One step of a run: either something the agent did, or what a tool
/// returned to it.
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TranscriptStep {
    /// One turn of the agent: text it wrote and tool calls it made, in order.
    Action { content: Vec<ActionContent> },
    /// The output of one tool call, paired to it by `call_id`.
    ToolResult {
        call_id: String,
        name: String,
        text: String,
    },
}

/// One item of an [`TranscriptStep::Action`].
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ActionContent {
    /// Prose written by the agent.
    Text { text: String },
    /// A tool invocation. `args` is the arguments as a JSON string, kept as a
    /// string so that any tool's argument shape (or a truncated one) fits.
    ToolCall {
        id: String,
        name: String,
        args: String,
    },
}

/// A small, bounded description of a step, for event payloads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepSummary {
    /// `"action"` or `"tool_result"`.
    pub kind: &'static str,
    /// The first tool called by an action, or the tool a result belongs to.
    pub tool_name: Option<String>,
    /// Every tool call id in an action, or the one id a result answers.
    pub call_ids: Vec<String>,
    /// At most [`PREVIEW_MAX_BYTES`] bytes of the step's text, whitespace
    /// collapsed so it reads as one line.
    pub preview: String,
}

/// Why a transcript blob could not be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranscriptError {
    /// The blob is not a readable gzip stream.
    Gzip(String),
    /// The blob inflated, but is not a JSON array of steps.
    Json(String),
    /// The blob would inflate beyond `limit` bytes.
    TooLarge { limit: usize },
}

impl fmt::Display for TranscriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranscriptError::Gzip(e) => write!(f, "transcript blob is not valid gzip: {e}"),
            TranscriptError::Json(e) => write!(f, "transcript blob is not valid step JSON: {e}"),
            TranscriptError::TooLarge { limit } => {
                write!(f, "transcript blob inflates beyond {limit} bytes")
            }
        }
    }
}

impl std::error::Error for TranscriptError {}

/// The largest index `<= i` that lies on a char boundary of `s`.
///
/// `str::floor_char_boundary` is not available at the workspace's minimum
/// Rust version, hence this helper.
fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    // A char is at most 4 bytes, so a boundary is at most 3 steps back.
    let mut i = i;
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn truncation_marker(shown: usize, total: usize) -> String {
    format!("\n…[truncated: {shown} of {total} bytes shown]")
}

/// Cuts `s` to at most `max_bytes` bytes on a char boundary, appending a
/// visible marker such as `\n…[truncated: 51150 of 80000 bytes shown]` so a
/// reader knows text is missing.
///
/// Room for the marker is reserved inside `max_bytes`, so the result fits
/// the cap, except when `max_bytes` is smaller than the marker itself
/// (about 45 bytes): then the result is the marker alone and is slightly
/// over. Because a result that fits is returned unchanged, applying the
/// function twice gives the same text. Text that already fits is borrowed,
/// not copied.
pub fn truncate_utf8(s: &str, max_bytes: usize) -> Cow<'_, str> {
    if s.len() <= max_bytes {
        return Cow::Borrowed(s);
    }
    let total = s.len();
    // The marker is sized with `total` as the shown count: `shown <= total`,
    // so this is an upper bound on the real marker's length.
    let reserve = truncation_marker(total, total).len();
    let keep = floor_char_boundary(s, max_bytes.saturating_sub(reserve));
    let kept = s.get(..keep).unwrap_or_default();
    let mut out = String::with_capacity(keep + reserve);
    out.push_str(kept);
    out.push_str(&truncation_marker(keep, total));
    Cow::Owned(out)
}

/// Owned-string form of [`truncate_utf8`] that avoids a copy when nothing
/// is cut.
fn cap(s: String, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        s
    } else {
        truncate_utf8(&s, max_bytes).into_owned()
    }
}

/// A one-line preview: whitespace runs collapsed to one space, then cut to
/// at most `max_bytes` bytes (ending in `…` when cut).
fn preview(s: &str, max_bytes: usize) -> String {
    let mut out = String::new();
    let mut cut = false;
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        // Stop early: only the first `max_bytes` bytes matter and the input
        // may be a 50 KB tool result.
        if out.len() > max_bytes {
            cut = true;
            break;
        }
    }
    if cut {
        let ellipsis = "…";
        let keep = floor_char_boundary(&out, max_bytes.saturating_sub(ellipsis.len()));
        out.truncate(keep);
        out.push_str(ellipsis);
    }
    out
}

impl TranscriptStep {
    /// Applies the size caps: tool result text to [`MAX_TOOL_RESULT_BYTES`],
    /// tool call arguments to [`MAX_TOOL_ARGS_BYTES`]. Agent text is left as
    /// is. Idempotent.
    pub fn truncated(self) -> Self {
        match self {
            TranscriptStep::Action { content } => TranscriptStep::Action {
                content: content
                    .into_iter()
                    .map(|item| match item {
                        ActionContent::ToolCall { id, name, args } => ActionContent::ToolCall {
                            id,
                            name,
                            args: cap(args, MAX_TOOL_ARGS_BYTES),
                        },
                        text => text,
                    })
                    .collect(),
            },
            TranscriptStep::ToolResult {
                call_id,
                name,
                text,
            } => TranscriptStep::ToolResult {
                call_id,
                name,
                text: cap(text, MAX_TOOL_RESULT_BYTES),
            },
        }
    }

    /// A bounded summary of this step for event payloads.
    pub fn step_summary(&self) -> StepSummary {
        match self {
            TranscriptStep::Action { content } => {
                let mut tool_name = None;
                let mut call_ids = Vec::new();
                let mut first_text = None;
                let mut first_call = None;
                for item in content {
                    match item {
                        ActionContent::Text { text } => {
                            if first_text.is_none() && !text.trim().is_empty() {
                                first_text = Some(text.as_str());
                            }
                        }
                        ActionContent::ToolCall { id, name, args } => {
                            if tool_name.is_none() {
                                tool_name = Some(name.clone());
                                first_call = Some((name.as_str(), args.as_str()));
                            }
                            call_ids.push(id.clone());
                        }
                    }
                }
                let preview = match (first_text, first_call) {
                    (Some(text), _) => preview(text, PREVIEW_MAX_BYTES),
                    (None, Some((name, args))) => {
                        // Only a prefix of the arguments can be shown anyway;
                        // avoid copying 2 KB of them to show 200 bytes.
                        let end = floor_char_boundary(args, PREVIEW_MAX_BYTES + 1);
                        let args = args.get(..end).unwrap_or_default();
                        preview(&format!("{name} {args}"), PREVIEW_MAX_BYTES)
                    }
                    (None, None) => String::new(),
                };
                StepSummary {
                    kind: "action",
                    tool_name,
                    call_ids,
                    preview,
                }
            }
            TranscriptStep::ToolResult {
                call_id,
                name,
                text,
            } => StepSummary {
                kind: "tool_result",
                tool_name: Some(name.clone()),
                call_ids: vec![call_id.clone()],
                preview: preview(text, PREVIEW_MAX_BYTES),
            },
        }
    }
}

/// Serialises steps as a JSON array and gzips it: the form stores keep.
pub fn compress(steps: &[TranscriptStep]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    // Steps hold only strings, so serialising cannot fail, and writing into
    // a Vec never does; an error here would be a bug, not bad input.
    serde_json::to_writer(&mut encoder, steps).expect("serialising steps into memory cannot fail");
    encoder.finish().expect("gzip into memory cannot fail")
}

/// Reads back a blob made by [`compress`], refusing to inflate beyond
/// [`MAX_DECOMPRESSED_BYTES`].
pub fn decompress(blob: &[u8]) -> Result<Vec<TranscriptStep>, TranscriptError> {
    decompress_with_limit(blob, MAX_DECOMPRESSED_BYTES)
}

/// [`decompress`] with an explicit inflated-size limit in bytes.
pub fn decompress_with_limit(
    blob: &[u8],
    limit: usize,
) -> Result<Vec<TranscriptStep>, TranscriptError> {
    let json = inflate(blob, limit)?;
    serde_json::from_slice(&json).map_err(|e| TranscriptError::Json(e.to_string()))
}

/// Steps kept as the JSON array text they are stored in, so that a long
/// conversation is sent to a client without parsing and re-serialising
/// every step: a finished reply's blob inflates straight into this. It
/// serialises as that text, byte for byte what serialising the parsed
/// `Vec<TranscriptStep>` gives, because [`compress`] wrote it that way.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepsJson(Box<serde_json::value::RawValue>);

impl StepsJson {
    /// The JSON of typed steps.
    pub fn from_steps(steps: &[TranscriptStep]) -> Self {
        let text = serde_json::to_string(steps).expect("serialising steps cannot fail");
        Self::from_json(text).expect("serialised steps are a JSON array")
    }

    /// Wraps JSON text that must be an array. Its syntax is checked (a
    /// scan, no allocation per step); the shape of each step is not, which
    /// is why only text made from typed steps should come here.
    pub fn from_json(text: String) -> Result<Self, TranscriptError> {
        let raw = serde_json::value::RawValue::from_string(text)
            .map_err(|e| TranscriptError::Json(e.to_string()))?;
        if !raw.get().starts_with('[') {
            return Err(TranscriptError::Json("steps are not a JSON array".into()));
        }
        Ok(Self(raw))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// Parses the steps (clients that show them).
    pub fn parse(&self) -> Result<Vec<TranscriptStep>, TranscriptError> {
        serde_json::from_str(self.0.get()).map_err(|e| TranscriptError::Json(e.to_string()))
    }
}

impl Default for StepsJson {
    fn default() -> Self {
        Self::from_steps(&[])
    }
}

impl PartialEq for StepsJson {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// [`decompress`] without parsing: the blob's JSON as [`StepsJson`], with
/// the same size limit.
pub fn decompress_json(blob: &[u8]) -> Result<StepsJson, TranscriptError> {
    let json = inflate(blob, MAX_DECOMPRESSED_BYTES)?;
    let text = String::from_utf8(json).map_err(|e| TranscriptError::Json(e.to_string()))?;
    StepsJson::from_json(text)
}

fn inflate(blob: &[u8], limit: usize) -> Result<Vec<u8>, TranscriptError> {
    if blob.is_empty() {
        return Err(TranscriptError::Gzip("empty blob".into()));
    }
    let mut json = Vec::new();
    // Read one byte past the limit: getting it proves the blob is too large
    // without ever holding more than limit + 1 bytes.
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    GzDecoder::new(blob)
        .take(cap)
        .read_to_end(&mut json)
        .map_err(|e| TranscriptError::Gzip(e.to_string()))?;
    if json.len() > limit {
        return Err(TranscriptError::TooLarge { limit });
    }
    Ok(json)
}

/// Appends a synthetic result for every tool call that has no later result,
/// so the transcript is well-formed: agents that resume a conversation
/// reject a tool call without an answer. The result text is
/// `[no result: {reason}]`. Idempotent: after one call, every tool call has
/// a later result.
pub fn close_dangling_tool_calls(steps: &mut Vec<TranscriptStep>, reason: &str) {
    // Walk backwards so `answered` always holds the ids of results that come
    // after the step being looked at.
    let mut answered: HashSet<&str> = HashSet::new();
    let mut dangling: Vec<(String, String)> = Vec::new();
    let mut closed: HashSet<&str> = HashSet::new();
    for step in steps.iter().rev() {
        match step {
            TranscriptStep::ToolResult { call_id, .. } => {
                answered.insert(call_id);
            }
            TranscriptStep::Action { content } => {
                for item in content.iter().rev() {
                    if let ActionContent::ToolCall { id, name, .. } = item {
                        // One synthetic result answers every call with that
                        // id, so a repeated id is closed once.
                        if !answered.contains(id.as_str()) && closed.insert(id) {
                            dangling.push((id.clone(), name.clone()));
                        }
                    }
                }
            }
        }
    }
    // Collected back to front; close them in the order they were called.
    for (call_id, name) in dangling.into_iter().rev() {
        steps.push(TranscriptStep::ToolResult {
            call_id,
            name,
            text: format!("[no result: {reason}]"),
        });
    }
}
