//! Adapters turn an agent CLI's stdout into transcript steps, incrementally.
//!
//! A runner owns the agent process; it feeds each stdout line to an
//! [`Adapter`], calls [`Adapter::flush`] when the output goes quiet (it owns
//! the timer) and [`Adapter::finish`] at end of stream. The adapter answers
//! with finished [`TranscriptStep`]s plus side outputs (progress, live
//! status, final result, the agent's own session id).
//!
//! One rule holds for every JSON format: a line that is not understood
//! (invalid JSON, an unknown `type`, the wrong shape) is never dropped and
//! never causes a panic. It is kept as plain text, gathered into an action
//! text step exactly as the `text` format does, and that text is emitted
//! before the next structured output so the order of the stream survives.
//! Agent CLIs change their output between versions; losing a line silently
//! would hide exactly the output someone needs when a run goes wrong.
//!
//! Every adapter [`adapter_for`] makes also meters the agent's token usage
//! and cost ([`crate::usage`]) and reports the run's running total as
//! [`AdapterOutput::Usage`] whenever it changes.
//!
//! Every step leaves an adapter already capped by
//! [`TranscriptStep::truncated`]. Adapters do no I/O and keep no clock.

mod claude_stream_json;
mod codex_json;
mod steps_jsonl;
mod text;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::transcript::TranscriptStep;
use crate::usage::{Usage, UsageMeter};

pub use claude_stream_json::ClaudeStreamJsonAdapter;
pub use codex_json::CodexJsonAdapter;
pub use steps_jsonl::StepsJsonlAdapter;
pub use text::{strip_ansi, TextAdapter, TEXT_BURST_MAX_BYTES, TEXT_BURST_MAX_LINES};

/// Which output format an agent process speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TranscriptFormat {
    /// Shepherd's own format: one [`TranscriptStep`] (or progress, status,
    /// result line) per line. For workers written against Shepherd.
    StepsJsonl,
    /// `claude -p --output-format stream-json --verbose`.
    ClaudeStreamJson,
    /// `codex exec --json`.
    CodexJson,
    /// Anything else: plain output, gathered into text steps.
    Text,
}

impl TranscriptFormat {
    /// Every format, for listing in help text and validation errors.
    pub const ALL: [TranscriptFormat; 4] = [
        TranscriptFormat::StepsJsonl,
        TranscriptFormat::ClaudeStreamJson,
        TranscriptFormat::CodexJson,
        TranscriptFormat::Text,
    ];

    /// The stable name used in configuration and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            TranscriptFormat::StepsJsonl => "steps-jsonl",
            TranscriptFormat::ClaudeStreamJson => "claude-stream-json",
            TranscriptFormat::CodexJson => "codex-json",
            TranscriptFormat::Text => "text",
        }
    }
}

impl fmt::Display for TranscriptFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A format name that is not one of [`TranscriptFormat::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown transcript format {:?}; expected one of ",
            self.0
        )?;
        for (i, format) in TranscriptFormat::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(format.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownFormat {}

impl FromStr for TranscriptFormat {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        TranscriptFormat::ALL
            .into_iter()
            .find(|format| format.as_str() == wanted)
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

/// What an adapter produces from the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum AdapterOutput {
    /// A finished transcript step.
    Step(TranscriptStep),
    /// A progress event the worker reports about itself (`worker.building`).
    Progress {
        event: String,
        message: Option<String>,
        metadata: Option<Value>,
    },
    /// Live status text: what the agent is doing right now.
    Status(String),
    /// The final result text of the run.
    Result(String),
    /// The agent's own conversation id, so the run can be resumed later.
    /// Emitted when first seen and again only if it changes.
    SessionId(String),
    /// The run's token usage and cost so far (a running total, not a delta).
    Usage(Usage),
}

/// Parses one agent's output stream, line by line.
pub trait Adapter: Send {
    /// Takes one line of output (a trailing `\n` or `\r\n` is ignored).
    fn push_line(&mut self, line: &str) -> Vec<AdapterOutput>;

    /// The output went quiet, or the stream ended: emit anything buffered.
    fn flush(&mut self) -> Vec<AdapterOutput>;

    /// End of stream: [`Adapter::flush`], plus a [`AdapterOutput::Result`]
    /// derived from the stream when the format has no explicit result line
    /// (Codex: the last agent message). A runner that only calls `flush`
    /// at the end can get the same from [`Adapter::last_assistant_text`].
    fn finish(&mut self) -> Vec<AdapterOutput> {
        self.flush()
    }

    /// The most recent prose the agent wrote, if any: the natural "answer"
    /// of a run whose format reports no result.
    fn last_assistant_text(&self) -> Option<&str>;

    /// True when nothing is buffered: [`Adapter::flush`] would emit no step.
    /// A runner that dies can carry a run on from exactly such a point (the
    /// output read so far, every step made of it stored) by reading the
    /// output again up to it with a fresh adapter and dropping what that
    /// adapter buffers there: nothing of it is owed.
    fn is_idle(&self) -> bool;
}

/// A fresh adapter for `format`, metering usage.
pub fn adapter_for(format: TranscriptFormat) -> Box<dyn Adapter> {
    let inner: Box<dyn Adapter> = match format {
        TranscriptFormat::StepsJsonl => Box::new(StepsJsonlAdapter::new()),
        TranscriptFormat::ClaudeStreamJson => Box::new(ClaudeStreamJsonAdapter::new()),
        TranscriptFormat::CodexJson => Box::new(CodexJsonAdapter::new()),
        TranscriptFormat::Text => return Box::new(TextAdapter::new()),
    };
    Box::new(Metered {
        inner,
        meter: UsageMeter::new(format),
    })
}

/// An adapter that also reports the usage its lines carry, after what the
/// line itself produced.
struct Metered {
    inner: Box<dyn Adapter>,
    meter: UsageMeter,
}

impl Adapter for Metered {
    fn push_line(&mut self, line: &str) -> Vec<AdapterOutput> {
        let mut out = self.inner.push_line(line);
        if let Some(total) = self.meter.observe(line) {
            out.push(AdapterOutput::Usage(total));
        }
        out
    }

    fn flush(&mut self) -> Vec<AdapterOutput> {
        self.inner.flush()
    }

    fn finish(&mut self) -> Vec<AdapterOutput> {
        self.inner.finish()
    }

    fn last_assistant_text(&self) -> Option<&str> {
        self.inner.last_assistant_text()
    }

    fn is_idle(&self) -> bool {
        self.inner.is_idle()
    }
}

/// Parses a whole recorded stream at once: every line, then
/// [`Adapter::finish`]. With no quiet gaps, text bursts only split at the
/// size limits.
pub fn parse_stream(format: TranscriptFormat, input: &str) -> Vec<AdapterOutput> {
    let mut adapter = adapter_for(format);
    let mut out = Vec::new();
    for line in input.lines() {
        out.extend(adapter.push_line(line));
    }
    out.extend(adapter.finish());
    out
}

/// The steps among `outputs`, in order.
pub fn steps_of(outputs: &[AdapterOutput]) -> Vec<TranscriptStep> {
    outputs
        .iter()
        .filter_map(|output| match output {
            AdapterOutput::Step(step) => Some(step.clone()),
            _ => None,
        })
        .collect()
}

/// Wraps a step for output, applying the transcript size caps.
fn step(step: TranscriptStep) -> AdapterOutput {
    AdapterOutput::Step(step.truncated())
}

/// A line of a JSON format, split into its `type` and the whole object;
/// `None` when the line is not a JSON object with a string `type`.
fn typed_json(line: &str) -> Option<(String, Value)> {
    let value: Value = serde_json::from_str(line.trim()).ok()?;
    let kind = value.get("type")?.as_str()?.to_string();
    Some((kind, value))
}

/// `value[key]` as a string, if it is one.
fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}
