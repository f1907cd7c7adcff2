//! The `claude-stream-json` format: what Claude Code prints with
//! `claude -p --output-format stream-json --verbose`, one JSON object a line.
//!
//! - `system` / `init` reveals the `session_id` (for `--resume`);
//! - `assistant` carries a message's content blocks: `text` and `tool_use`
//!   become one action (thinking is skipped). Claude Code often prints each
//!   block of one message on its own line, repeating the message `id`; those
//!   lines are merged back into one action, which is therefore emitted when
//!   the next other line arrives or on flush;
//! - `user` carries `tool_result` blocks (each becomes a tool result, named
//!   after the `tool_use` it answers) and sometimes plain text;
//! - `result` carries the final result text;
//! - `stream_event` (partial deltas, only with `--include-partial-messages`)
//!   is ignored: the complete message follows as an `assistant` line.

use std::collections::HashMap;

use serde_json::Value;

use super::text::{text_action, TextBuffer};
use super::{step, str_field, typed_json, Adapter, AdapterOutput};
use crate::transcript::{truncate_utf8, ActionContent, TranscriptStep, MAX_TOOL_ARGS_BYTES};

/// Name given to a tool result whose `tool_use` was never seen (the stream
/// was cut, or the call came from before a resume).
const UNKNOWN_TOOL: &str = "unknown";

/// An action being assembled from the lines of one assistant message.
#[derive(Debug)]
struct PendingAction {
    message_id: Option<String>,
    content: Vec<ActionContent>,
}

/// What one understood line amounts to.
enum Parsed {
    /// Content blocks of an assistant message.
    Assistant {
        message_id: Option<String>,
        content: Vec<ActionContent>,
    },
    /// The outputs of any other line (possibly none).
    Outputs(Vec<AdapterOutput>),
}

/// Adapter for the `claude-stream-json` format.
#[derive(Debug, Default)]
pub struct ClaudeStreamJsonAdapter {
    text: TextBuffer,
    pending: Option<PendingAction>,
    /// `tool_use` id → tool name, so results can be named.
    tool_names: HashMap<String, String>,
    session_id: Option<String>,
    last_text: Option<String>,
}

impl ClaudeStreamJsonAdapter {
    pub fn new() -> Self {
        Self::default()
    }

    fn emit_pending(&mut self, out: &mut Vec<AdapterOutput>) {
        if let Some(pending) = self.pending.take() {
            if !pending.content.is_empty() {
                out.push(step(TranscriptStep::Action {
                    content: pending.content,
                }));
            }
        }
    }

    /// A `SessionId` output when the line reveals a new session id.
    fn note_session(&mut self, value: &Value) -> Option<AdapterOutput> {
        let id = str_field(value, "session_id").filter(|id| !id.is_empty())?;
        if self.session_id.as_deref() == Some(id) {
            return None;
        }
        self.session_id = Some(id.to_string());
        Some(AdapterOutput::SessionId(id.to_string()))
    }

    fn parse(&mut self, kind: &str, value: &Value) -> Option<Parsed> {
        match kind {
            "system" => {
                let subtype = str_field(value, "subtype")?;
                let outputs = match subtype {
                    "compact_boundary" => vec![AdapterOutput::Status("context compacted".into())],
                    // `init` only matters for its session id, handled by the
                    // caller; hook and status chatter carries nothing for
                    // the transcript.
                    _ => Vec::new(),
                };
                Some(Parsed::Outputs(outputs))
            }
            "assistant" => {
                let message = value.get("message")?;
                let message_id = str_field(message, "id").map(str::to_string);
                let content = self.assistant_content(message.get("content")?)?;
                Some(Parsed::Assistant {
                    message_id,
                    content,
                })
            }
            "user" => {
                let content = value.get("message")?.get("content")?;
                self.user_content(content).map(Parsed::Outputs)
            }
            "result" => {
                let text = match str_field(value, "result") {
                    Some(result) => result.to_string(),
                    // Error results (`error_max_turns`, …) may carry no
                    // text; name the failure instead.
                    None => {
                        let subtype = str_field(value, "subtype")?;
                        let errors: Vec<&str> = value
                            .get("errors")
                            .and_then(Value::as_array)
                            .map(|errors| errors.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        if errors.is_empty() {
                            format!("[{subtype}]")
                        } else {
                            format!("[{subtype}] {}", errors.join("; "))
                        }
                    }
                };
                Some(Parsed::Outputs(vec![AdapterOutput::Result(text)]))
            }
            "stream_event" => Some(Parsed::Outputs(Vec::new())),
            _ => None,
        }
    }

    /// An assistant message's content as action items.
    fn assistant_content(&mut self, content: &Value) -> Option<Vec<ActionContent>> {
        let blocks = match content {
            Value::String(text) => return Some(non_empty_text(text).into_iter().collect()),
            Value::Array(blocks) => blocks,
            _ => return None,
        };
        let mut items = Vec::new();
        for block in blocks {
            match str_field(block, "type") {
                Some("text") => {
                    items.extend(str_field(block, "text").and_then(non_empty_text));
                }
                Some("tool_use") => {
                    let id = str_field(block, "id");
                    let name = str_field(block, "name");
                    if let (Some(id), Some(name)) = (id, name) {
                        self.tool_names.insert(id.to_string(), name.to_string());
                        let args = match block.get("input") {
                            Some(input) if !input.is_null() => input.to_string(),
                            _ => String::from("{}"),
                        };
                        items.push(ActionContent::ToolCall {
                            id: id.to_string(),
                            name: name.to_string(),
                            args,
                        });
                    } else {
                        items.push(block_as_text(block));
                    }
                }
                // Private reasoning; not part of the visible transcript.
                Some("thinking") | Some("redacted_thinking") => {}
                // Server-side tools and future block types: kept verbatim
                // rather than lost.
                _ => items.push(block_as_text(block)),
            }
        }
        Some(items)
    }

    /// A user message's content as outputs: tool results, and text notes.
    fn user_content(&self, content: &Value) -> Option<Vec<AdapterOutput>> {
        let blocks = match content {
            Value::String(text) => {
                return Some(
                    user_note(text)
                        .map(|note| step(text_action(note)))
                        .into_iter()
                        .collect(),
                );
            }
            Value::Array(blocks) => blocks,
            _ => return None,
        };
        let mut outputs = Vec::new();
        // Consecutive text blocks make one note.
        let mut notes: Vec<String> = Vec::new();
        for block in blocks {
            let tool_use_id = str_field(block, "tool_use_id");
            match (str_field(block, "type"), tool_use_id) {
                (Some("tool_result"), Some(call_id)) => {
                    flush_notes(&mut notes, &mut outputs);
                    let name = self
                        .tool_names
                        .get(call_id)
                        .map_or(UNKNOWN_TOOL, String::as_str);
                    let mut text = result_text(block.get("content"));
                    if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                        text.insert_str(0, "[error] ");
                    }
                    outputs.push(step(TranscriptStep::ToolResult {
                        call_id: call_id.to_string(),
                        name: name.to_string(),
                        text,
                    }));
                }
                (Some("text"), _) => {
                    notes.extend(str_field(block, "text").and_then(user_note));
                }
                // Images and future block types: kept verbatim.
                _ => notes.push(format!("[user] {}", block_json(block))),
            }
        }
        flush_notes(&mut notes, &mut outputs);
        Some(outputs)
    }

    /// Remembers the pending action's prose as the latest assistant text.
    fn remember_text(&mut self) {
        let Some(pending) = &self.pending else {
            return;
        };
        let texts: Vec<&str> = pending
            .content
            .iter()
            .filter_map(|item| match item {
                ActionContent::Text { text } => Some(text.as_str()),
                ActionContent::ToolCall { .. } => None,
            })
            .collect();
        if !texts.is_empty() {
            self.last_text = Some(texts.join("\n\n"));
        }
    }
}

impl Adapter for ClaudeStreamJsonAdapter {
    fn push_line(&mut self, line: &str) -> Vec<AdapterOutput> {
        let mut out = Vec::new();
        if line.trim().is_empty() {
            return out;
        }
        let understood =
            typed_json(line).and_then(|(kind, value)| Some((self.parse(&kind, &value)?, value)));
        let Some((parsed, value)) = understood else {
            // Not understood: the pending action came first in the stream.
            self.emit_pending(&mut out);
            self.text.push_into(line, &mut out);
            return out;
        };
        let session = self.note_session(&value);
        match parsed {
            Parsed::Assistant {
                message_id,
                content,
            } => {
                self.text.flush_into(&mut out);
                let same_message = match (&self.pending, &message_id) {
                    (Some(pending), Some(id)) => pending.message_id.as_ref() == Some(id),
                    _ => false,
                };
                match &mut self.pending {
                    Some(pending) if same_message => pending.content.extend(content),
                    _ => {
                        self.emit_pending(&mut out);
                        self.pending = Some(PendingAction {
                            message_id,
                            content,
                        });
                    }
                }
                self.remember_text();
                out.extend(session);
            }
            Parsed::Outputs(outputs) => {
                if !outputs.is_empty() {
                    self.emit_pending(&mut out);
                    self.text.flush_into(&mut out);
                }
                out.extend(session);
                out.extend(outputs);
            }
        }
        out
    }

    fn flush(&mut self) -> Vec<AdapterOutput> {
        let mut out = Vec::new();
        self.emit_pending(&mut out);
        self.text.flush_into(&mut out);
        out
    }

    fn last_assistant_text(&self) -> Option<&str> {
        self.last_text.as_deref()
    }

    fn is_idle(&self) -> bool {
        self.text.is_empty() && self.pending.is_none()
    }
}

fn non_empty_text(text: &str) -> Option<ActionContent> {
    if text.trim().is_empty() {
        None
    } else {
        Some(ActionContent::Text {
            text: text.to_string(),
        })
    }
}

/// Text from the user side, marked so it is not mistaken for the agent's.
fn user_note(text: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() {
        None
    } else {
        Some(format!("[user] {text}"))
    }
}

fn flush_notes(notes: &mut Vec<String>, outputs: &mut Vec<AdapterOutput>) {
    if !notes.is_empty() {
        outputs.push(step(text_action(notes.join("\n"))));
        notes.clear();
    }
}

/// A content block this adapter has no mapping for, as compact JSON, capped
/// like tool arguments (it may hold an inline image).
fn block_json(block: &Value) -> String {
    let json = block.to_string();
    truncate_utf8(&json, MAX_TOOL_ARGS_BYTES).into_owned()
}

fn block_as_text(block: &Value) -> ActionContent {
    ActionContent::Text {
        text: block_json(block),
    }
}

/// A `tool_result` block's content: a string, or an array of blocks whose
/// texts are joined by newlines.
fn result_text(content: Option<&Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(
                |block| match (str_field(block, "type"), str_field(block, "text")) {
                    (Some("text"), Some(text)) => text.to_string(),
                    (Some("image"), _) => String::from("[image]"),
                    _ => block.to_string(),
                },
            )
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}
