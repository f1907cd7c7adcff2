//! Properties of the output adapters over arbitrary input: no line makes
//! any adapter panic, text that is not the format's JSON is kept, never
//! dropped, and escape sequences are stripped as a terminal would.

use proptest::prelude::*;
use shepherd_core::adapters::{adapter_for, strip_ansi, AdapterOutput, TranscriptFormat};

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

/// `strip_ansi` written the plain way, one character at a time through the
/// escape state machine: the reference the run-at-a-time version must match.
fn strip_ansi_per_char(s: &str) -> String {
    #[derive(Clone, Copy)]
    enum St {
        Text,
        Esc,
        EscInter,
        Csi,
        Str,
        StrEsc,
    }
    let mut out = String::new();
    let mut st = St::Text;
    for c in s.chars() {
        st = match (st, c) {
            (St::Text, '\u{1b}') => St::Esc,
            (St::Text, '\u{9b}') => St::Csi,
            (St::Text, c) => {
                if c == '\t' || !c.is_control() {
                    out.push(c);
                }
                St::Text
            }
            (St::Esc, '[') => St::Csi,
            (St::Esc, ']' | 'P' | 'X' | '^' | '_') => St::Str,
            (St::Esc | St::EscInter, ' '..='/') => St::EscInter,
            (St::Esc | St::EscInter, _) => St::Text,
            (St::Csi, '0'..='?' | ' '..='/') => St::Csi,
            (St::Csi, '@'..='~') => St::Text,
            (St::Csi, c) => {
                if !c.is_control() {
                    out.push(c);
                }
                St::Text
            }
            (St::Str, '\u{7}') => St::Text,
            (St::Str, '\u{1b}') => St::StrEsc,
            (St::Str, _) => St::Str,
            (St::StrEsc, _) => St::Text,
        };
    }
    out
}

/// Text dense in what the escape machine looks at: C0 and C1 controls
/// (U+0085 and U+009B are two bytes in UTF-8, U+00A0 shares their first
/// byte), the bytes that open and end sequences, and any character.
fn terminal_text() -> impl Strategy<Value = String> {
    let c = prop_oneof![
        any::<char>(),
        prop::sample::select(vec![
            '\u{1b}', '\u{9b}', '\u{85}', '\u{9f}', '\u{a0}', '\u{7f}', '\u{7}', '\u{0}', '\t',
            '\r', '[', ']', 'P', '_', '^', 'X', '\\', ' ', '/', '0', '?', '@', '~', 'm', 'a', '中',
            '🦀',
        ]),
    ];
    proptest::collection::vec(c, 0..80).prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn strip_ansi_matches_the_per_character_machine(s in terminal_text()) {
        let stripped = strip_ansi(&s);
        let reference = strip_ansi_per_char(&s);
        prop_assert_eq!(stripped.as_ref(), reference.as_str(), "{:?}", s);
        // Nothing to strip: the input itself, not a copy.
        if !s.chars().any(|c| c.is_control() && c != '\t') {
            prop_assert!(matches!(stripped, std::borrow::Cow::Borrowed(_)));
        }
    }
}
