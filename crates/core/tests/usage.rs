//! Usage and cost read from recorded agent output (hand-written in each
//! agent's documented format, under tests/fixtures/usage): Claude Code
//! stream-json, Codex JSON and steps-jsonl `usage` lines.

use shepherd_core::adapters::{parse_stream, AdapterOutput, TranscriptFormat};
use shepherd_core::usage::Usage;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../tests/fixtures/usage/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn usages(format: TranscriptFormat, input: &str) -> Vec<Usage> {
    parse_stream(format, input)
        .into_iter()
        .filter_map(|o| match o {
            AdapterOutput::Usage(u) => Some(u),
            _ => None,
        })
        .collect()
}

#[test]
fn claude_stream_json_counts_each_message_once_and_takes_the_result_totals() {
    let totals = usages(
        TranscriptFormat::ClaudeStreamJson,
        &fixture("claude_usage.jsonl"),
    );
    // A message repeated on two lines counts once, with its latest usage.
    assert_eq!(
        totals[1],
        Usage {
            input_tokens: 12,
            output_tokens: 40,
            cache_read_tokens: 0,
            cache_write_tokens: 1500,
            cost_usd: None
        }
    );
    assert_eq!(
        totals.last().copied().unwrap(),
        Usage {
            input_tokens: 42,
            output_tokens: 46,
            cache_read_tokens: 1500,
            cache_write_tokens: 1500,
            cost_usd: Some(0.0123)
        }
    );
}

#[test]
fn codex_turns_add_up() {
    let totals = usages(TranscriptFormat::CodexJson, &fixture("codex_usage.jsonl"));
    assert_eq!(
        totals,
        vec![
            Usage {
                input_tokens: 2400,
                output_tokens: 120,
                cache_read_tokens: 2000,
                ..Usage::default()
            },
            Usage {
                input_tokens: 2500,
                output_tokens: 140,
                cache_read_tokens: 2000,
                ..Usage::default()
            },
        ]
    );
}

#[test]
fn steps_jsonl_usage_lines_add_up_and_a_bad_one_is_kept_as_text() {
    let input = fixture("steps_usage.jsonl");
    let totals = usages(TranscriptFormat::StepsJsonl, &input);
    assert_eq!(
        totals.last().copied().unwrap(),
        Usage {
            input_tokens: 100,
            output_tokens: 15,
            cache_read_tokens: 7,
            cache_write_tokens: 3,
            cost_usd: Some(0.75)
        }
    );
    let outputs = parse_stream(TranscriptFormat::StepsJsonl, &input);
    let text = format!("{outputs:?}");
    assert!(
        text.contains("many"),
        "the malformed usage line is kept: {text}"
    );
    assert!(
        !text.contains("\"output_tokens\":5"),
        "good usage lines are not transcript text"
    );
}

#[test]
fn text_output_reports_no_usage() {
    assert!(usages(
        TranscriptFormat::Text,
        "{\"type\":\"usage\",\"input_tokens\":3}"
    )
    .is_empty());
}
