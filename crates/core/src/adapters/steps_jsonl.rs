//! The `steps-jsonl` format: Shepherd's own line protocol for workers that
//! report their transcript directly.
//!
//! Each line is one of:
//! - a [`TranscriptStep`] as JSON (`{"type":"action",…}`, `{"type":"tool_result",…}`);
//! - `{"type":"progress","event":"worker.building","message":"…","metadata":{…}}`
//!   (`message` and `metadata` optional);
//! - `{"type":"status","text":"…"}`;
//! - `{"type":"result","text":"…"}`;
//! - `{"type":"usage","input_tokens":N,"output_tokens":N,"cache_read_tokens":N,
//!   "cache_write_tokens":N,"cost_usd":X}` (each field optional; successive
//!   lines add up; metered by [`crate::usage::UsageMeter`], no step).
//!
//! Anything else is kept as text, per the rule in the module above.

use serde_json::Value;

use super::text::TextBuffer;
use super::{step, str_field, typed_json, Adapter, AdapterOutput};
use crate::transcript::{ActionContent, TranscriptStep};

/// Adapter for the `steps-jsonl` format.
#[derive(Debug, Default)]
pub struct StepsJsonlAdapter {
    text: TextBuffer,
    last_text: Option<String>,
}

impl StepsJsonlAdapter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The outputs of a line this format understands; `None` otherwise.
    fn parse(&mut self, line: &str) -> Option<AdapterOutput> {
        let (kind, value) = typed_json(line)?;
        match kind.as_str() {
            "action" | "tool_result" => {
                let parsed: TranscriptStep = serde_json::from_value(value).ok()?;
                self.remember_text(&parsed);
                Some(step(parsed))
            }
            "progress" => {
                let event = str_field(&value, "event").filter(|e| !e.is_empty())?;
                let message = match value.get("message") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(m)) => Some(m.clone()),
                    // A message of the wrong type means a wrong-shape line.
                    Some(_) => return None,
                };
                let metadata = match value.get("metadata") {
                    None | Some(Value::Null) => None,
                    Some(m) => Some(m.clone()),
                };
                Some(AdapterOutput::Progress {
                    event: event.to_string(),
                    message,
                    metadata,
                })
            }
            "status" => Some(AdapterOutput::Status(
                str_field(&value, "text")?.to_string(),
            )),
            "result" => Some(AdapterOutput::Result(
                str_field(&value, "text")?.to_string(),
            )),
            _ => None,
        }
    }

    fn remember_text(&mut self, parsed: &TranscriptStep) {
        if let TranscriptStep::Action { content } = parsed {
            let texts: Vec<&str> = content
                .iter()
                .filter_map(|item| match item {
                    ActionContent::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            if !texts.is_empty() {
                self.last_text = Some(texts.join("\n\n"));
            }
        }
    }
}

impl Adapter for StepsJsonlAdapter {
    fn push_line(&mut self, line: &str) -> Vec<AdapterOutput> {
        let mut out = Vec::new();
        if line.trim().is_empty() {
            return out;
        }
        if let Some(("usage", value)) = typed_json(line).as_ref().map(|(k, v)| (k.as_str(), v)) {
            if crate::usage::from_steps_line(value).is_some() {
                return out;
            }
        }
        match self.parse(line) {
            Some(output) => {
                self.text.flush_into(&mut out);
                out.push(output);
            }
            None => self.text.push_into(line, &mut out),
        }
        out
    }

    fn flush(&mut self) -> Vec<AdapterOutput> {
        let mut out = Vec::new();
        self.text.flush_into(&mut out);
        out
    }

    fn last_assistant_text(&self) -> Option<&str> {
        self.last_text.as_deref()
    }

    fn is_idle(&self) -> bool {
        self.text.is_empty()
    }
}
