//! Terminal output: aligned tables, relative times, readable transcripts.

use serde_json::Value;
use shepherd_core::time::parse_iso8601;

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
pub fn ago(ts: &Value) -> String {
    let Some(ms) = ts.as_str().and_then(parse_iso8601) else {
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

pub fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Renders one transcript step for a terminal; long text is cut to
/// `max_lines` unless `full`.
pub fn step(step: &Value, full: bool, max_lines: usize) -> String {
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
    match step["type"].as_str() {
        Some("action") => {
            for c in step["content"].as_array().into_iter().flatten() {
                match c["type"].as_str() {
                    Some("text") => clip(c["text"].as_str().unwrap_or(""), &mut out),
                    Some("tool_call") => {
                        out.push_str(&format!(
                            "  ▶ {} {}\n",
                            c["name"].as_str().unwrap_or("?"),
                            cut(c["args"].as_str().unwrap_or(""), 100)
                        ));
                    }
                    _ => {}
                }
            }
        }
        Some("tool_result") => {
            out.push_str(&format!("  ✓ {}\n", step["name"].as_str().unwrap_or("?")));
            clip(step["text"].as_str().unwrap_or(""), &mut out);
        }
        _ => out.push_str(&format!("  {step}\n")),
    }
    out
}
