//! Properties of the output adapters over arbitrary input: no line makes
//! any adapter panic, and text that is not the format's JSON is kept, never
//! dropped.

use proptest::prelude::*;
use shepherd_core::adapters::{adapter_for, AdapterOutput, TranscriptFormat};

fn run(format: TranscriptFormat, lines: &[String]) -> Vec<AdapterOutput> {
    let mut a = adapter_for(format);
    let mut out = Vec::new();
    for l in lines {
        out.extend(a.push_line(l));
    }
    out.extend(a.finish());
    let _ = a.last_assistant_text();
    out
}

/// Lines that look like each format's JSON, broken JSON, control bytes,
/// ANSI escapes and replacement characters.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[{}\\[\\]\":,a-z0-9 \\\\]{0,60}",
        Just(r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]}}"#.to_owned()),
        Just(r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}}"#.to_owned()),
        Just(r#"{"type":"item.completed","item":{"type":"agent_message","text":"hi"}}"#.to_owned()),
        Just(r#"{"type":"result","result":"done","usage":{"input_tokens":1}}"#.to_owned()),
        Just("\u{1b}[31mred\u{1b}[0m \u{FFFD}\u{0}".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_line_makes_an_adapter_panic(lines in proptest::collection::vec(line(), 0..40)) {
        for format in TranscriptFormat::ALL {
            run(format, &lines);
        }
    }

    #[test]
    fn plain_text_lines_are_kept(words in proptest::collection::vec("x[a-z]{1,20}", 1..20)) {
        for format in TranscriptFormat::ALL {
            let out = format!("{:?}", run(format, &words));
            for w in &words {
                prop_assert!(out.contains(w.as_str()), "{:?} dropped {:?}: {}", format, w, out);
            }
        }
    }
}
