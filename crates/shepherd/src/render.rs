//! Terminal output: aligned tables, relative times, readable transcripts.

use shepherd_core::time::parse_iso8601;
use shepherd_core::transcript::{ActionContent, TranscriptStep};

/// Prints rows as an aligned table with a header.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut parts = Vec::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                parts.push(c.to_string());
            } else {
                parts.push(format!("{c:<w$}", w = widths[i]));
            }
        }
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(headers.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// Shortens text to `max` characters with an ellipsis.
pub fn cut(s: &str, max: usize) -> String {
    let one_line = s.replace(['\n', '\r'], " ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut t: String = one_line.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// "3m ago" style, from an RFC 3339 string.
pub fn ago(ts: &str) -> String {
    let Some(ms) = parse_iso8601(ts) else {
        return "-".into();
    };
    let secs = (chrono::Utc::now().timestamp_millis() - ms) / 1000;
    match secs {
        s if s < 0 => "just now".into(),
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{}m ago", s / 60),
        s if s < 86400 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86400),
    }
}

/// Absolute and relative, for a person reading one record:
/// `2026-11-26 14:03:12 UTC (3m ago)`.
pub fn when(ts: &str) -> String {
    match parse_iso8601(ts).and_then(chrono::DateTime::from_timestamp_millis) {
        Some(t) => format!("{} ({})", t.format("%Y-%m-%d %H:%M:%S UTC"), ago(ts)),
        None => "-".into(),
    }
}

/// An instant in the machine's local time zone, to the minute, with how
/// long ago it was: for lists a person scans (`2026-11-26 15:03 (3m ago)`).
pub fn local_when(ts: &str) -> String {
    match parse_iso8601(ts).and_then(chrono::DateTime::from_timestamp_millis) {
        Some(t) => format!(
            "{} ({})",
            t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M"),
            ago(ts)
        ),
        None => "-".into(),
    }
}

/// An optional text, `-` when absent.
pub fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".into())
}

/// Renders one transcript step for a terminal; long text is cut to
/// `max_lines` unless `full`.
pub fn step(step: &TranscriptStep, full: bool, max_lines: usize) -> String {
    let mut out = String::new();
    let clip = |text: &str, out: &mut String| {
        let lines: Vec<&str> = text.lines().collect();
        let show = if full {
            lines.len()
        } else {
            lines.len().min(max_lines)
        };
        for l in &lines[..show] {
            out.push_str("    ");
            out.push_str(l);
            out.push('\n');
        }
        if show < lines.len() {
            out.push_str(&format!(
                "    … {} more lines (use --full to see all)\n",
                lines.len() - show
            ));
        }
    };
    match step {
        TranscriptStep::Action { content } => {
            for c in content {
                match c {
                    ActionContent::Text { text } => clip(text, &mut out),
                    ActionContent::ToolCall { name, args, .. } => {
                        out.push_str(&format!("  ▶ {name} {}\n", cut(args, 100)));
                    }
                }
            }
        }
        TranscriptStep::ToolResult { name, text, .. } => {
            // The transcript format has no error flag: a result that reports
            // a non-zero exit or an error is marked as failed, not done.
            let mark = if looks_failed(text) { '✗' } else { '✓' };
            out.push_str(&format!("  {mark} {name}\n"));
            clip(text, &mut out);
        }
    }
    out
}

/// Whether a tool result reads as a failure (a non-zero exit code, an error).
fn looks_failed(text: &str) -> bool {
    let last = text
        .trim_end()
        .lines()
        .last()
        .unwrap_or("")
        .to_ascii_lowercase();
    (last.contains("exit code") && !last.contains("exit code 0"))
        || text.trim_start().to_ascii_lowercase().starts_with("error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_tool_results_are_not_checked() {
        let failed = TranscriptStep::ToolResult {
            call_id: "shell:0".into(),
            name: "shell".into(),
            text: "boom\n(exit code 2)".into(),
        };
        assert!(step(&failed, false, 5).contains("✗ shell"));
        let ok = TranscriptStep::ToolResult {
            call_id: "shell:1".into(),
            name: "shell".into(),
            text: "12 passed".into(),
        };
        assert!(step(&ok, false, 5).contains("✓ shell"));
    }
}
