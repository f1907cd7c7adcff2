//! Every transcript adapter fed arbitrary agent output, line by line, with
//! quiet-gap flushes at arbitrary points: none may panic, every step must
//! leave already capped, a line that is not JSON must be kept as text, and
//! the agent's session id is only re-announced when it changes.
//!
//! Input: one control byte (which lines are followed by a flush), then the
//! output, split at `\n` and decoded lossily as the runner does.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shepherd_core::adapters::{adapter_for, strip_ansi, AdapterOutput, TranscriptFormat};
use shepherd_core::transcript::{ActionContent, TranscriptStep};

/// What the text buffer keeps of a raw line (see `adapters/text.rs`): the
/// part after the last carriage return, escape sequences stripped.
fn shown(raw: &str) -> String {
    let line = raw.trim_end_matches(['\n', '\r']);
    let line = line.rsplit('\r').next().unwrap_or(line);
    strip_ansi(line).trim().to_owned()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flushes, output)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(output);
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    // Per line: is it JSON, and what the text buffer would keep of it.
    let expected: Vec<(bool, String)> = lines
        .iter()
        .map(|l| {
            let is_json = serde_json::from_str::<serde_json::Value>(l.trim()).is_ok();
            (is_json, shown(l))
        })
        .collect();
    for format in TranscriptFormat::ALL {
        let mut adapter = adapter_for(format);
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            out.extend(adapter.push_line(line));
            if flushes & (1 << (i % 8)) != 0 {
                out.extend(adapter.flush());
            }
        }
        out.extend(adapter.finish());
        let _ = adapter.last_assistant_text();

        let mut kept = String::new();
        let mut session: Option<&str> = None;
        for o in &out {
            match o {
                AdapterOutput::Step(step) => {
                    assert_eq!(
                        &step.clone().truncated(),
                        step,
                        "{format}: a step left the adapter uncapped"
                    );
                    if let TranscriptStep::Action { content } = step {
                        for c in content {
                            if let ActionContent::Text { text } = c {
                                kept.push_str(text);
                                kept.push('\n');
                            }
                        }
                    }
                }
                AdapterOutput::SessionId(id) => {
                    assert_ne!(session, Some(id.as_str()), "{format}: session id repeated");
                    session = Some(id);
                }
                _ => {}
            }
        }
        // Kept lines come out in the order they went in, so each is looked
        // for after the previous one (linear, and it checks the order too).
        let mut from = 0;
        for (line, (is_json, shown)) in lines.iter().zip(&expected) {
            if *is_json && format != TranscriptFormat::Text {
                continue;
            }
            // Longer lines are capped like a tool result; their start is
            // still there, but checking that is not worth the time.
            if shown.is_empty() || shown.len() > 4096 {
                continue;
            }
            match kept[from..].find(shown.as_str()) {
                Some(at) => from += at + shown.len(),
                None => {
                    panic!("{format}: line {line:?} was dropped or reordered; kept text: {kept:?}")
                }
            }
        }
    }
});
