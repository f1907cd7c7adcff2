//! Token usage and cost of a run, as the agents report it: Claude Code's
//! stream-json (`usage` on each assistant message, totals and
//! `total_cost_usd` on its result), Codex's `turn.completed` token counts,
//! and steps-jsonl `{"type":"usage",…}` lines (each field optional;
//! successive lines add up).
//!
//! A [`UsageMeter`] watches a run's output lines and keeps the run's running
//! total; adapters report that total (never a delta), so the last report
//! is always the whole truth and a lost report costs nothing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapters::TranscriptFormat;

/// What a run has used so far.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// In US dollars; `None` while the agent has reported no cost.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

impl Usage {
    /// Adds `other` to this total.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }

    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// A token count: a non-negative integer, or absent. `Err` for a wrong shape.
fn count(v: &Value, key: &str) -> Result<u64, ()> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(n) => n.as_u64().ok_or(()),
    }
}

/// A steps-jsonl `usage` line's object as a usage increment; `None` when a
/// field has the wrong type (the line is then kept as text).
pub fn from_steps_line(v: &Value) -> Option<Usage> {
    let cost_usd = match v.get("cost_usd") {
        None | Some(Value::Null) => None,
        Some(c) => Some(c.as_f64().filter(|c| c.is_finite() && *c >= 0.0)?),
    };
    Some(Usage {
        input_tokens: count(v, "input_tokens").ok()?,
        output_tokens: count(v, "output_tokens").ok()?,
        cache_read_tokens: count(v, "cache_read_tokens").ok()?,
        cache_write_tokens: count(v, "cache_write_tokens").ok()?,
        cost_usd,
    })
}

/// Claude's `usage` object (Anthropic API names).
fn from_claude(u: &Value) -> Usage {
    Usage {
        input_tokens: count(u, "input_tokens").unwrap_or(0),
        output_tokens: count(u, "output_tokens").unwrap_or(0),
        cache_read_tokens: count(u, "cache_read_input_tokens").unwrap_or(0),
        cache_write_tokens: count(u, "cache_creation_input_tokens").unwrap_or(0),
        cost_usd: None,
    }
}

/// Keeps a run's usage total from its output lines.
#[derive(Debug)]
pub struct UsageMeter {
    format: TranscriptFormat,
    total: Usage,
    /// Claude repeats a message's usage on every line of that message: the
    /// latest per message id counts, once.
    claude_messages: Vec<(String, Usage)>,
    /// Claude's result carries its session's own totals: they replace the
    /// sum of that session's messages.
    claude_final: Option<Usage>,
}

impl UsageMeter {
    pub fn new(format: TranscriptFormat) -> Self {
        UsageMeter {
            format,
            total: Usage::default(),
            claude_messages: Vec::new(),
            claude_final: None,
        }
    }

    pub fn total(&self) -> Usage {
        self.total
    }

    /// Looks at one output line; the new total when it changed.
    pub fn observe(&mut self, line: &str) -> Option<Usage> {
        let v: Value = serde_json::from_str(line.trim()).ok()?;
        let kind = v.get("type")?.as_str()?;
        let before = self.total;
        match (self.format, kind) {
            (TranscriptFormat::StepsJsonl, "usage") => self.total.add(&from_steps_line(&v)?),
            (TranscriptFormat::ClaudeStreamJson, "assistant") => {
                let message = v.get("message")?;
                let usage = from_claude(message.get("usage")?);
                let id = message.get("id").and_then(Value::as_str).unwrap_or("");
                match self.claude_messages.iter_mut().find(|(m, _)| m == id) {
                    Some((_, u)) if !id.is_empty() => *u = usage,
                    _ => self.claude_messages.push((id.to_owned(), usage)),
                }
                self.total_claude();
            }
            (TranscriptFormat::ClaudeStreamJson, "result") => {
                let mut usage = v.get("usage").map(from_claude).unwrap_or_default();
                if usage.is_empty() {
                    usage = self.sum_claude_messages();
                }
                usage.cost_usd = v.get("total_cost_usd").and_then(Value::as_f64);
                let mut sessions = self.claude_final.unwrap_or_default();
                sessions.add(&usage);
                self.claude_final = Some(sessions);
                self.claude_messages.clear();
                self.total_claude();
            }
            (TranscriptFormat::CodexJson, "turn.completed") => {
                let u = v.get("usage")?;
                self.total.add(&Usage {
                    input_tokens: count(u, "input_tokens").unwrap_or(0),
                    output_tokens: count(u, "output_tokens").unwrap_or(0),
                    cache_read_tokens: count(u, "cached_input_tokens").unwrap_or(0),
                    cache_write_tokens: 0,
                    cost_usd: None,
                });
            }
            _ => return None,
        }
        (self.total != before).then_some(self.total)
    }

    fn sum_claude_messages(&self) -> Usage {
        let mut sum = Usage::default();
        for (_, u) in &self.claude_messages {
            sum.add(u);
        }
        sum
    }

    /// A result ends one `claude -p` session; messages after it (a resumed
    /// conversation in the same output) add to it.
    fn total_claude(&mut self) {
        let mut total = self.claude_final.unwrap_or_default();
        total.add(&self.sum_claude_messages());
        self.total = total;
    }
}
