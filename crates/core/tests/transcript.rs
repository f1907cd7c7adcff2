//! Tests of the transcript contract: the exact JSON shape, the size caps,
//! the compressed blob and closing dangling tool calls.

use std::borrow::Cow;

use shepherd_core::transcript::{
    self, close_dangling_tool_calls, compress, decompress, decompress_with_limit, truncate_utf8,
    ActionContent, StepSummary, StepsJson, TranscriptError, TranscriptStep, MAX_DECOMPRESSED_BYTES,
    MAX_TOOL_ARGS_BYTES, MAX_TOOL_RESULT_BYTES, PREVIEW_MAX_BYTES,
};

const EXAMPLE: &str = r#"[{"type":"action","content":[{"type":"text","text":"I'll run the test suite."},{"type":"tool_call","id":"shell:0","name":"shell","args":"{\"command\":\"cd ~/app && pytest\"}"}]},{"type":"tool_result","call_id":"shell:0","name":"shell","text":"12 passed, 0 failed"},{"type":"action","content":[{"type":"text","text":"All 12 tests passed."}]}]"#;

fn text(t: &str) -> ActionContent {
    ActionContent::Text { text: t.into() }
}

fn call(id: &str, name: &str, args: &str) -> ActionContent {
    ActionContent::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.into(),
    }
}

fn action(content: Vec<ActionContent>) -> TranscriptStep {
    TranscriptStep::Action { content }
}

fn result(call_id: &str, name: &str, text: &str) -> TranscriptStep {
    TranscriptStep::ToolResult {
        call_id: call_id.into(),
        name: name.into(),
        text: text.into(),
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

#[test]
fn example_parses_into_the_expected_steps() {
    let steps: Vec<TranscriptStep> = serde_json::from_str(EXAMPLE).expect("example parses");
    assert_eq!(
        steps,
        vec![
            action(vec![
                text("I'll run the test suite."),
                call("shell:0", "shell", r#"{"command":"cd ~/app && pytest"}"#),
            ]),
            result("shell:0", "shell", "12 passed, 0 failed"),
            action(vec![text("All 12 tests passed.")]),
        ]
    );
}

#[test]
fn example_round_trips_through_compress_byte_for_byte() {
    let steps: Vec<TranscriptStep> = serde_json::from_str(EXAMPLE).expect("example parses");
    assert_eq!(serde_json::to_string(&steps).expect("serialises"), EXAMPLE);

    let blob = compress(&steps);
    assert_eq!(&blob[..2], &[0x1f, 0x8b], "blob is gzip");
    let back = decompress(&blob).expect("decompresses");
    assert_eq!(back, steps);
    assert_eq!(serde_json::to_string(&back).expect("serialises"), EXAMPLE);

    // The blob inflates to exactly the contract JSON.
    let mut inflated = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&blob[..]), &mut inflated)
        .expect("inflates");
    assert_eq!(inflated, EXAMPLE);
}

#[test]
fn empty_transcript_round_trips() {
    let blob = compress(&[]);
    assert_eq!(decompress(&blob).expect("decompresses"), Vec::new());
}

#[test]
fn corrupt_blobs_are_errors_not_panics() {
    assert!(matches!(decompress(b""), Err(TranscriptError::Gzip(_))));
    assert!(matches!(
        decompress(b"definitely not gzip"),
        Err(TranscriptError::Gzip(_))
    ));

    let steps: Vec<TranscriptStep> = serde_json::from_str(EXAMPLE).expect("example parses");
    let blob = compress(&steps);
    // Cut off mid-stream.
    assert!(matches!(
        decompress(&blob[..blob.len() / 2]),
        Err(TranscriptError::Gzip(_))
    ));
    // Flipped bytes in the payload: gzip's CRC or inflate catches it.
    let mut flipped = blob.clone();
    for byte in flipped.iter_mut().skip(12).take(8) {
        *byte ^= 0xff;
    }
    assert!(decompress(&flipped).is_err());

    // Valid gzip, invalid content.
    assert!(matches!(
        decompress(&gzip(b"{not json")),
        Err(TranscriptError::Json(_))
    ));
    assert!(matches!(
        decompress(&gzip(br#"[{"type":"teleport"}]"#)),
        Err(TranscriptError::Json(_))
    ));
    assert!(matches!(
        decompress(&gzip(br#"{"type":"action","content":[]}"#)),
        Err(TranscriptError::Json(_))
    ));
}

#[test]
fn errors_say_which_layer_failed() {
    let gzip_error = decompress(b"nope").expect_err("not gzip");
    assert!(gzip_error.to_string().contains("gzip"), "{gzip_error}");
    let json_error = decompress(&gzip(b"[1]")).expect_err("not steps");
    assert!(json_error.to_string().contains("JSON"), "{json_error}");
    let large = TranscriptError::TooLarge { limit: 10 };
    assert!(large.to_string().contains("10 bytes"), "{large}");
}

#[test]
fn decompress_refuses_to_inflate_past_the_limit() {
    let steps = vec![result("c", "shell", &"x".repeat(1000))];
    let blob = compress(&steps);
    assert!(matches!(
        decompress_with_limit(&blob, 100),
        Err(TranscriptError::TooLarge { limit: 100 })
    ));
    let exact = serde_json::to_vec(&steps).expect("serialises").len();
    assert_eq!(decompress_with_limit(&blob, exact).expect("fits"), steps);
    assert!(matches!(
        decompress_with_limit(&blob, exact - 1),
        Err(TranscriptError::TooLarge { .. })
    ));
}

#[test]
fn decompress_guards_against_a_gzip_bomb() {
    // 64 MiB + 1 byte of spaces gzips to about 64 KiB.
    let bomb = gzip(&vec![b' '; MAX_DECOMPRESSED_BYTES + 1]);
    assert!(bomb.len() < 1024 * 1024);
    assert_eq!(
        decompress(&bomb),
        Err(TranscriptError::TooLarge {
            limit: MAX_DECOMPRESSED_BYTES
        })
    );
}

#[test]
fn truncate_leaves_short_text_borrowed() {
    assert!(matches!(truncate_utf8("hello", 5), Cow::Borrowed("hello")));
    assert!(matches!(truncate_utf8("", 0), Cow::Borrowed("")));
}

#[test]
fn truncate_cuts_within_the_cap_and_says_so() {
    let long = "a".repeat(1000);
    let cut = truncate_utf8(&long, 100);
    assert!(cut.len() <= 100, "{} bytes", cut.len());
    let marker = cut.find("\n…[truncated: ").expect("has marker");
    assert!(long.starts_with(&cut[..marker]));
    assert!(cut.ends_with(&format!("[truncated: {marker} of 1000 bytes shown]")));
    // Applying it again changes nothing.
    assert_eq!(truncate_utf8(&cut, 100), cut);
}

#[test]
fn truncate_smaller_than_the_marker_keeps_only_the_marker() {
    let cut = truncate_utf8("abcdefghij", 3);
    assert_eq!(cut, "\n…[truncated: 0 of 10 bytes shown]");
}

/// Every cap from 0 to past the end on text made of multi-byte chars: the
/// cut is on a char boundary, the kept part is a prefix, and the marker
/// states the kept length.
fn check_all_caps(s: &str) {
    for max in 0..=s.len() + 2 {
        let cut = truncate_utf8(s, max);
        if s.len() <= max {
            assert_eq!(cut, s);
            continue;
        }
        let marker_at = cut.find("\n…[truncated: ").expect("has marker");
        let kept = &cut[..marker_at];
        assert!(s.starts_with(kept), "cap {max}: not a prefix");
        assert!(s.is_char_boundary(kept.len()));
        assert!(cut.ends_with(&format!("{} of {} bytes shown]", kept.len(), s.len())));
        if kept.is_empty() {
            continue;
        }
        assert!(cut.len() <= max, "cap {max}: {} bytes", cut.len());
        // As much as fits beside the longest possible marker: one more char
        // would not have.
        let total = s.len();
        let reserve = format!("\n…[truncated: {total} of {total} bytes shown]").len();
        let next = s[kept.len()..].chars().next().map_or(0, char::len_utf8);
        assert!(
            kept.len() + next > max - reserve,
            "cap {max}: cut too early"
        );
    }
}

#[test]
fn truncate_is_utf8_safe_for_emoji() {
    // 4-byte chars after an ASCII run, so boundaries fall mid-char.
    let s = format!("{}{}", "x".repeat(41), "😀🦀🎉👍🏽".repeat(6));
    check_all_caps(&s);
}

#[test]
fn truncate_is_utf8_safe_for_cjk() {
    // 3-byte chars, mixed with 2-byte ones.
    let s = format!("{}{}", "日本語のテキスト", "é中文字符ñ".repeat(8));
    check_all_caps(&s);
}

#[test]
fn truncated_caps_tool_results_and_args_only() {
    let big_text = "agent prose ".repeat(10_000);
    let big_args = format!(r#"{{"content":"{}"}}"#, "y".repeat(5000));
    let big_output = "0123456789abcdef🦀".repeat(4000);
    let step = action(vec![text(&big_text), call("c1", "write", &big_args)]).truncated();
    match &step {
        TranscriptStep::Action { content } => {
            assert_eq!(content[0], text(&big_text), "agent text is not capped");
            match &content[1] {
                ActionContent::ToolCall { id, name, args } => {
                    assert_eq!((id.as_str(), name.as_str()), ("c1", "write"));
                    assert!(args.len() <= MAX_TOOL_ARGS_BYTES);
                    assert!(args.starts_with(r#"{"content":"yyy"#));
                    assert!(args.contains("[truncated: "));
                }
                other => panic!("expected a tool call, got {other:?}"),
            }
        }
        other => panic!("expected an action, got {other:?}"),
    }
    // Idempotent.
    assert_eq!(step.clone().truncated(), step);

    let step = result("c1", "shell", &big_output).truncated();
    match &step {
        TranscriptStep::ToolResult { text, .. } => {
            assert!(text.len() <= MAX_TOOL_RESULT_BYTES);
            assert!(
                text.len() > MAX_TOOL_RESULT_BYTES - 100,
                "keeps nearly the cap"
            );
            assert!(text.ends_with(&format!("of {} bytes shown]", big_output.len())));
        }
        other => panic!("expected a tool result, got {other:?}"),
    }
    assert_eq!(step.clone().truncated(), step);

    // Small steps pass through untouched.
    let small = result("c1", "shell", "ok");
    assert_eq!(small.clone().truncated(), small);
}

#[test]
fn summary_of_an_action() {
    let step = action(vec![
        text("  I'll run\n\nthe   test suite.  "),
        call("shell:0", "shell", r#"{"command":"pytest"}"#),
        call("read:1", "read", r#"{"path":"a.py"}"#),
    ]);
    assert_eq!(
        step.step_summary(),
        StepSummary {
            kind: "action",
            tool_name: Some("shell".into()),
            call_ids: vec!["shell:0".into(), "read:1".into()],
            preview: "I'll run the test suite.".into(),
        }
    );
}

#[test]
fn summary_of_a_tool_only_action_previews_the_call() {
    let step = action(vec![call("shell:0", "shell", r#"{"command":"pytest -q"}"#)]);
    let summary = step.step_summary();
    assert_eq!(summary.preview, r#"shell {"command":"pytest -q"}"#);
    assert_eq!(summary.call_ids, vec!["shell:0".to_string()]);

    let empty = action(vec![]).step_summary();
    assert_eq!(
        (empty.kind, empty.tool_name, empty.preview.as_str()),
        ("action", None, "")
    );
}

#[test]
fn summary_of_a_tool_result() {
    let summary = result("shell:0", "shell", "12 passed,\n0 failed").step_summary();
    assert_eq!(
        summary,
        StepSummary {
            kind: "tool_result",
            tool_name: Some("shell".into()),
            call_ids: vec!["shell:0".into()],
            preview: "12 passed, 0 failed".into(),
        }
    );
    let json = serde_json::to_value(&summary).expect("serialises");
    assert_eq!(json["kind"], "tool_result");
}

#[test]
fn summary_preview_is_bounded_and_utf8_safe() {
    for filler in ["a", "é", "中", "🦀"] {
        for lead in 0..4 {
            let long = format!("{}{}", "b".repeat(lead), filler.repeat(300));
            for step in [
                result("c", "shell", &long),
                action(vec![text(&long)]),
                action(vec![call("c", "shell", &long)]),
            ] {
                let preview = step.step_summary().preview;
                assert!(
                    preview.len() <= PREVIEW_MAX_BYTES,
                    "{} bytes",
                    preview.len()
                );
                assert!(preview.len() > PREVIEW_MAX_BYTES - 8, "uses the room");
                assert!(preview.ends_with('…'));
            }
        }
    }
}

#[test]
fn dangling_tool_calls_get_a_synthetic_result() {
    let mut steps = vec![
        action(vec![
            text("Running two things."),
            call("a", "shell", "{}"),
            call("b", "read", "{}"),
        ]),
        result("a", "shell", "ok"),
        action(vec![call("c", "edit", "{}")]),
    ];
    close_dangling_tool_calls(&mut steps, "worker lost");
    assert_eq!(steps.len(), 5);
    assert_eq!(steps[3], result("b", "read", "[no result: worker lost]"));
    assert_eq!(steps[4], result("c", "edit", "[no result: worker lost]"));

    // Idempotent.
    let before = steps.clone();
    close_dangling_tool_calls(&mut steps, "again");
    assert_eq!(steps, before);
}

#[test]
fn a_result_before_its_call_does_not_count() {
    let mut steps = vec![
        result("x", "shell", "stale"),
        action(vec![call("x", "shell", "{}")]),
    ];
    close_dangling_tool_calls(&mut steps, "cancelled");
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2], result("x", "shell", "[no result: cancelled]"));
}

#[test]
fn a_repeated_dangling_id_is_closed_once() {
    let mut steps = vec![
        action(vec![call("x", "shell", "{}")]),
        action(vec![call("x", "shell", "{}")]),
    ];
    close_dangling_tool_calls(&mut steps, "timeout");
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2], result("x", "shell", "[no result: timeout]"));
}

#[test]
fn a_well_formed_transcript_is_left_alone() {
    let mut steps: Vec<TranscriptStep> = serde_json::from_str(EXAMPLE).expect("example parses");
    let before = steps.clone();
    close_dangling_tool_calls(&mut steps, "unused");
    assert_eq!(steps, before);
    let mut empty = Vec::new();
    close_dangling_tool_calls(&mut empty, "unused");
    assert!(empty.is_empty());
}

#[test]
fn a_blob_inflates_to_the_json_serialising_its_steps_gives() {
    let steps = vec![
        TranscriptStep::Action {
            content: vec![
                ActionContent::Text {
                    text: "quote \" newline \n tab \t é ✓".into(),
                },
                ActionContent::ToolCall {
                    id: "c1".into(),
                    name: "grep".into(),
                    args: r#"{"q":"x"}"#.into(),
                },
            ],
        },
        TranscriptStep::ToolResult {
            call_id: "c1".into(),
            name: "grep".into(),
            text: "\u{1}control\u{7f}".into(),
        },
    ];
    let raw = transcript::decompress_json(&transcript::compress(&steps)).unwrap();
    // The wire: embedding the raw text gives the bytes the typed steps give.
    assert_eq!(raw.as_str(), serde_json::to_string(&steps).unwrap());
    assert_eq!(
        serde_json::to_string(&raw).unwrap(),
        serde_json::to_string(&steps).unwrap()
    );
    assert_eq!(raw.parse().unwrap(), steps);
    assert_eq!(StepsJson::from_steps(&steps), raw);
    assert_eq!(StepsJson::default().as_str(), "[]");
    // Not an array, not JSON, not gzip: refused, never passed on.
    assert!(StepsJson::from_json("{}".into()).is_err());
    assert!(StepsJson::from_json("[1,".into()).is_err());
    assert!(transcript::decompress_json(b"nope").is_err());
}
