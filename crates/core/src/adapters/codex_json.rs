//! The `codex-json` format: what `codex exec --json` prints, one JSON event
//! a line.
//!
//! `thread.started` reveals the thread id (for `codex exec resume`). Work is
//! reported as items through `item.started` / `item.updated` /
//! `item.completed`; an item becomes transcript steps once completed:
//!
//! | item                | steps                                               |
//! |---------------------|-----------------------------------------------------|
//! | `agent_message`     | action text                                         |
//! | `reasoning`         | none; its headline becomes live status              |
//! | `command_execution` | `shell` call + result (output, exit code if not 0)  |
//! | `file_change`       | `apply_patch` call + result listing the changes     |
//! | `mcp_tool_call`     | `server.tool` call + result (content or error)      |
//! | `web_search`        | `web_search` call + result placeholder              |
//! | `todo_list`         | none; a progress summary becomes live status        |
//! | `error`             | action text `[error] …`                             |
//!
//! `turn.failed` and top-level `error` events also become `[error]` text.
//! Codex prints no final result line: [`Adapter::finish`] reports the last
//! agent message as the result. An item type this adapter does not know is
//! kept as text when it completes (its started/updated events are skipped
//! so it is not kept twice).

use serde_json::{json, Value};

use super::text::{text_action, TextBuffer};
use super::{step, str_field, typed_json, Adapter, AdapterOutput};
use crate::transcript::{ActionContent, TranscriptStep};

/// Which lifecycle event an item arrived in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Started,
    Updated,
    Completed,
}

/// Adapter for the `codex-json` format.
#[derive(Debug, Default)]
pub struct CodexJsonAdapter {
    text: TextBuffer,
    thread_id: Option<String>,
    last_text: Option<String>,
}

impl CodexJsonAdapter {
    pub fn new() -> Self {
        Self::default()
    }

    /// The outputs of a line this format understands; `None` otherwise.
    fn parse(&mut self, kind: &str, value: &Value) -> Option<Vec<AdapterOutput>> {
        match kind {
            "thread.started" => {
                let id = str_field(value, "thread_id").filter(|id| !id.is_empty())?;
                if self.thread_id.as_deref() == Some(id) {
                    return Some(Vec::new());
                }
                self.thread_id = Some(id.to_string());
                Some(vec![AdapterOutput::SessionId(id.to_string())])
            }
            "turn.started" | "turn.completed" => Some(Vec::new()),
            "turn.failed" => {
                let message = value
                    .get("error")
                    .and_then(|error| str_field(error, "message"))
                    .unwrap_or("turn failed");
                Some(vec![error_step(message)])
            }
            "error" => Some(vec![error_step(str_field(value, "message")?)]),
            "item.started" => self.item(Phase::Started, value.get("item")?),
            "item.updated" => self.item(Phase::Updated, value.get("item")?),
            "item.completed" => self.item(Phase::Completed, value.get("item")?),
            _ => None,
        }
    }

    fn item(&mut self, phase: Phase, item: &Value) -> Option<Vec<AdapterOutput>> {
        let kind = str_field(item, "type")?;
        let done = phase == Phase::Completed;
        let outputs = match kind {
            "agent_message" if done => {
                let text = str_field(item, "text")?;
                if text.trim().is_empty() {
                    Vec::new()
                } else {
                    self.last_text = Some(text.to_string());
                    vec![step(text_action(text.to_string()))]
                }
            }
            "reasoning" if done => {
                let headline = headline(str_field(item, "text")?);
                if headline.is_empty() {
                    Vec::new()
                } else {
                    vec![AdapterOutput::Status(headline)]
                }
            }
            "command_execution" => {
                let command = str_field(item, "command")?;
                match phase {
                    Phase::Started => vec![AdapterOutput::Status(format!("running: {command}"))],
                    Phase::Updated => Vec::new(),
                    Phase::Completed => command_steps(item, command)?,
                }
            }
            "file_change" if done => file_change_steps(item)?,
            "mcp_tool_call" => {
                let server = str_field(item, "server")?;
                let tool = str_field(item, "tool")?;
                let name = format!("{server}.{tool}");
                match phase {
                    Phase::Started => vec![AdapterOutput::Status(format!("calling {name}"))],
                    Phase::Updated => Vec::new(),
                    Phase::Completed => mcp_steps(item, name)?,
                }
            }
            "web_search" => {
                // Newer Codex versions nest the query in `action`.
                let query = str_field(item, "query")
                    .or_else(|| item.get("action").and_then(|a| str_field(a, "query")))
                    .unwrap_or_default();
                match phase {
                    Phase::Started => vec![AdapterOutput::Status(format!("searching: {query}"))],
                    Phase::Updated => Vec::new(),
                    Phase::Completed => tool_pair(
                        item_id(item)?,
                        "web_search".into(),
                        json!({ "query": query }).to_string(),
                        // Codex does not print what the search returned.
                        "[search results not reported by codex]".into(),
                    ),
                }
            }
            "todo_list" => vec![AdapterOutput::Status(todo_summary(item)?)],
            "error" if done => vec![error_step(str_field(item, "message")?)],
            // Not yet finished; the completed event carries the full item.
            "agent_message" | "reasoning" | "file_change" | "error" => Vec::new(),
            // Unknown item type: kept as text once, when it completes.
            _ if done => return None,
            _ => Vec::new(),
        };
        Some(outputs)
    }
}

impl Adapter for CodexJsonAdapter {
    fn push_line(&mut self, line: &str) -> Vec<AdapterOutput> {
        let mut out = Vec::new();
        if line.trim().is_empty() {
            return out;
        }
        match typed_json(line).and_then(|(kind, value)| self.parse(&kind, &value)) {
            Some(outputs) => {
                if !outputs.is_empty() {
                    self.text.flush_into(&mut out);
                }
                out.extend(outputs);
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

    fn finish(&mut self) -> Vec<AdapterOutput> {
        let mut out = self.flush();
        if let Some(text) = &self.last_text {
            out.push(AdapterOutput::Result(text.clone()));
        }
        out
    }

    fn last_assistant_text(&self) -> Option<&str> {
        self.last_text.as_deref()
    }

    fn is_idle(&self) -> bool {
        self.text.is_empty()
    }
}

fn item_id(item: &Value) -> Option<String> {
    str_field(item, "id").map(str::to_string)
}

fn error_step(message: &str) -> AdapterOutput {
    step(text_action(format!("[error] {message}")))
}

/// A tool call action followed by its result.
fn tool_pair(id: String, name: String, args: String, result: String) -> Vec<AdapterOutput> {
    vec![
        step(TranscriptStep::Action {
            content: vec![ActionContent::ToolCall {
                id: id.clone(),
                name: name.clone(),
                args,
            }],
        }),
        step(TranscriptStep::ToolResult {
            call_id: id,
            name,
            text: result,
        }),
    ]
}

/// Appends a bracketed note on its own line.
fn append_note(text: &mut String, note: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(note);
}

fn command_steps(item: &Value, command: &str) -> Option<Vec<AdapterOutput>> {
    let mut result = str_field(item, "aggregated_output")
        .unwrap_or_default()
        .to_string();
    let exit_code = item.get("exit_code").and_then(Value::as_i64);
    match (exit_code, str_field(item, "status")) {
        (Some(code), _) if code != 0 => append_note(&mut result, &format!("[exit code {code}]")),
        (_, Some("declined")) => append_note(&mut result, "[declined]"),
        (None, Some("failed")) => append_note(&mut result, "[failed]"),
        _ => {}
    }
    Some(tool_pair(
        item_id(item)?,
        "shell".into(),
        json!({ "command": command }).to_string(),
        result,
    ))
}

fn file_change_steps(item: &Value) -> Option<Vec<AdapterOutput>> {
    let changes = item.get("changes")?.as_array()?;
    let mut result = changes
        .iter()
        .map(|change| {
            let kind = str_field(change, "kind").unwrap_or("change");
            let path = str_field(change, "path").unwrap_or("?");
            format!("{kind} {path}")
        })
        .collect::<Vec<_>>()
        .join("\n");
    if str_field(item, "status") == Some("failed") {
        append_note(&mut result, "[failed]");
    }
    Some(tool_pair(
        item_id(item)?,
        "apply_patch".into(),
        json!({ "changes": changes }).to_string(),
        result,
    ))
}

fn mcp_steps(item: &Value, name: String) -> Option<Vec<AdapterOutput>> {
    let args = match item.get("arguments") {
        None | Some(Value::Null) => String::from("{}"),
        Some(arguments) => arguments.to_string(),
    };
    let error = item
        .get("error")
        .and_then(|error| str_field(error, "message"));
    let result = if let Some(message) = error {
        format!("[error] {message}")
    } else {
        let result = item.get("result").unwrap_or(&Value::Null);
        let texts: Vec<String> = result
            .get("content")
            .and_then(Value::as_array)
            .map(|blocks| {
                blocks
                    .iter()
                    .map(|block| match str_field(block, "text") {
                        Some(text) => text.to_string(),
                        None => block.to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        match result.get("structured_content") {
            _ if !texts.is_empty() => texts.join("\n"),
            Some(structured) if !structured.is_null() => structured.to_string(),
            _ if str_field(item, "status") == Some("failed") => String::from("[failed]"),
            _ => String::new(),
        }
    };
    Some(tool_pair(item_id(item)?, name, args, result))
}

/// `todo 1/3 done; next: Write the new feature`.
fn todo_summary(item: &Value) -> Option<String> {
    let items = item.get("items")?.as_array()?;
    let done = items
        .iter()
        .filter(|todo| todo.get("completed").and_then(Value::as_bool) == Some(true))
        .count();
    let next = items
        .iter()
        .find(|todo| todo.get("completed").and_then(Value::as_bool) != Some(true))
        .and_then(|todo| str_field(todo, "text"));
    Some(match next {
        Some(next) => format!("todo {done}/{} done; next: {next}", items.len()),
        None => format!("todo {done}/{} done", items.len()),
    })
}

/// The first non-blank line of a reasoning summary, without the `**bold**`
/// markers Codex wraps its headlines in.
fn headline(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default();
    line.trim_matches('*').trim().to_string()
}
