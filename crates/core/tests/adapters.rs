//! Tests of the output adapters against recorded sample streams
//! (tests/fixtures at the workspace root) and hand-made edge cases.

use serde_json::{json, Value};
use shepherd_core::adapters::{
    adapter_for, parse_stream, steps_of, strip_ansi, AdapterOutput, TranscriptFormat,
    TEXT_BURST_MAX_BYTES, TEXT_BURST_MAX_LINES,
};
use shepherd_core::transcript::{
    close_dangling_tool_calls, ActionContent, TranscriptStep, MAX_TOOL_RESULT_BYTES,
};

macro_rules! fixture {
    ($path:literal) => {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/",
            $path
        ))
        .expect(concat!("fixture ", $path))
    };
}

const CLAUDE_SESSION: &str = "8f3c2a1e-5b7d-4e2a-9c61-0d4f7e8b2a13";
const CLAUDE_FINAL: &str = "Fixed `parse_iso` in `app/dates.py`: it now maps a trailing `Z` to `+00:00` before calling `fromisoformat`, which Python 3.10 needs. All 12 tests pass.";
const CODEX_THREAD: &str = "0199a213-81c0-7800-8aa1-bbab2a035a53";
const CODEX_FINAL: &str = "Fixed `parse_iso` in app/dates.py to accept a trailing `Z` (mapped to `+00:00` before `fromisoformat`). All 12 tests pass.";

// ---- helpers -------------------------------------------------------------

fn text(t: &str) -> ActionContent {
    ActionContent::Text { text: t.into() }
}

fn call(id: &str, name: &str, args: Value) -> ActionContent {
    ActionContent::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.to_string(),
    }
}

fn action(content: Vec<ActionContent>) -> TranscriptStep {
    TranscriptStep::Action { content }
}

fn note(t: &str) -> TranscriptStep {
    action(vec![text(t)])
}

fn result(call_id: &str, name: &str, text: &str) -> TranscriptStep {
    TranscriptStep::ToolResult {
        call_id: call_id.into(),
        name: name.into(),
        text: text.into(),
    }
}

fn out(step: TranscriptStep) -> AdapterOutput {
    AdapterOutput::Step(step)
}

fn status(s: &str) -> AdapterOutput {
    AdapterOutput::Status(s.into())
}

/// Rewrites tool call arguments into one canonical JSON spelling, so tests
/// compare argument values, not the key order `serde_json` happens to use.
/// Usage reports are left out: tests/usage.rs checks them.
fn canonical(outputs: Vec<AdapterOutput>) -> Vec<AdapterOutput> {
    outputs
        .into_iter()
        .filter(|output| !matches!(output, AdapterOutput::Usage(_)))
        .map(|output| match output {
            AdapterOutput::Step(TranscriptStep::Action { content }) => {
                AdapterOutput::Step(TranscriptStep::Action {
                    content: content
                        .into_iter()
                        .map(|item| match item {
                            ActionContent::ToolCall { id, name, args } => {
                                let args = serde_json::from_str::<Value>(&args)
                                    .map_or(args, |value| value.to_string());
                                ActionContent::ToolCall { id, name, args }
                            }
                            other => other,
                        })
                        .collect(),
                })
            }
            other => other,
        })
        .collect()
}

fn canonical_steps(steps: Vec<TranscriptStep>) -> Vec<TranscriptStep> {
    steps_of(&canonical(steps.into_iter().map(out).collect()))
}

fn side_outputs(outputs: &[AdapterOutput]) -> Vec<AdapterOutput> {
    outputs
        .iter()
        .filter(|output| !matches!(output, AdapterOutput::Step(_)))
        .cloned()
        .collect()
}

/// Every tool result answers an earlier tool call of the same name, and
/// every call is answered: the transcript is well-formed as produced.
fn assert_well_formed(steps: &[TranscriptStep]) {
    let mut calls: Vec<(String, String)> = Vec::new();
    for step in steps {
        match step {
            TranscriptStep::Action { content } => {
                for item in content {
                    if let ActionContent::ToolCall { id, name, .. } = item {
                        calls.push((id.clone(), name.clone()));
                    }
                }
            }
            TranscriptStep::ToolResult { call_id, name, .. } => {
                assert!(
                    calls.contains(&(call_id.clone(), name.clone())),
                    "result {call_id} ({name}) answers no earlier call"
                );
            }
        }
    }
    let mut closed = steps.to_vec();
    close_dangling_tool_calls(&mut closed, "test");
    assert_eq!(closed.len(), steps.len(), "a tool call was left dangling");
}

/// Inserts `(index, step)` pairs, indices counted in the original list.
fn with_inserted(
    mut list: Vec<AdapterOutput>,
    mut inserts: Vec<(usize, AdapterOutput)>,
) -> Vec<AdapterOutput> {
    inserts.sort_by_key(|(index, _)| std::cmp::Reverse(*index));
    for (index, item) in inserts {
        list.insert(index, item);
    }
    list
}

fn nth_line(input: &str, n: usize) -> &str {
    input.lines().nth(n).expect("line exists")
}

// ---- formats -------------------------------------------------------------

#[test]
fn format_names_round_trip() {
    for (format, name) in [
        (TranscriptFormat::StepsJsonl, "steps-jsonl"),
        (TranscriptFormat::ClaudeStreamJson, "claude-stream-json"),
        (TranscriptFormat::CodexJson, "codex-json"),
        (TranscriptFormat::Text, "text"),
    ] {
        assert_eq!(format.to_string(), name);
        assert_eq!(name.parse::<TranscriptFormat>(), Ok(format));
        assert_eq!(
            serde_json::to_value(format).expect("serialises"),
            json!(name)
        );
        let back: TranscriptFormat = serde_json::from_value(json!(name)).expect("deserialises");
        assert_eq!(back, format);
    }
    let error = "claude".parse::<TranscriptFormat>().expect_err("unknown");
    let message = error.to_string();
    assert!(message.contains("\"claude\""), "{message}");
    assert!(message.contains("claude-stream-json"), "{message}");
}

// ---- claude-stream-json --------------------------------------------------

fn claude_basic_steps() -> Vec<TranscriptStep> {
    vec![
        action(vec![
            text("I'll start by running the test suite to see what fails."),
            call(
                "toolu_01A1b2C3d4E5f6G7h8I9j0K",
                "Bash",
                json!({"command": "cd ~/app && pytest -q", "description": "Run the test suite"}),
            ),
        ]),
        result(
            "toolu_01A1b2C3d4E5f6G7h8I9j0K",
            "Bash",
            "..F.........\n=================================== FAILURES ===================================\n________________________________ test_parse_iso ________________________________\n\n    def test_parse_iso():\n>       assert parse_iso(\"2024-05-01T12:00:00Z\").tzinfo is not None\nE       ValueError: Invalid isoformat string: '2024-05-01T12:00:00Z'\n\ntests/test_dates.py:7: ValueError\n=========================== short test summary info ============================\nFAILED tests/test_dates.py::test_parse_iso - ValueError: Invalid isoformat string: '2024-05-01T12:00:00Z'\n1 failed, 11 passed in 0.38s",
        ),
        action(vec![
            text("`parse_iso` rejects the trailing `Z`. Let me look at it."),
            call(
                "toolu_01B2c3D4e5F6g7H8i9J0k1L",
                "Read",
                json!({"file_path": "/home/dev/app/app/dates.py"}),
            ),
        ]),
        // Array content, joined.
        result(
            "toolu_01B2c3D4e5F6g7H8i9J0k1L",
            "Read",
            "     1\timport datetime\n     2\t\n     3\t\n     4\tdef parse_iso(value: str) -> datetime.datetime:\n     5\t    \"\"\"Parses an ISO 8601 timestamp such as 2024-05-01T12:00:00Z.\"\"\"\n     6\t    return datetime.datetime.fromisoformat(value)\n",
        ),
        // The thinking block is skipped.
        action(vec![call(
            "toolu_01C3d4E5f6G7h8I9j0K1l2M",
            "Edit",
            json!({
                "file_path": "/home/dev/app/app/dates.py",
                "old_string": "    return datetime.fromisoformat(value)",
                "new_string": "    return datetime.fromisoformat(value.replace(\"Z\", \"+00:00\"))"
            }),
        )]),
        result(
            "toolu_01C3d4E5f6G7h8I9j0K1l2M",
            "Edit",
            "[error] <tool_use_error>String to replace not found in file.\nString:     return datetime.fromisoformat(value)</tool_use_error>",
        ),
        action(vec![call(
            "toolu_01D4e5F6g7H8i9J0k1L2m3N",
            "Edit",
            json!({
                "file_path": "/home/dev/app/app/dates.py",
                "old_string": "    return datetime.datetime.fromisoformat(value)",
                "new_string": "    return datetime.datetime.fromisoformat(value.replace(\"Z\", \"+00:00\"))"
            }),
        )]),
        result(
            "toolu_01D4e5F6g7H8i9J0k1L2m3N",
            "Edit",
            "The file /home/dev/app/app/dates.py has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n     4\tdef parse_iso(value: str) -> datetime.datetime:\n     5\t    \"\"\"Parses an ISO 8601 timestamp such as 2024-05-01T12:00:00Z.\"\"\"\n     6\t    return datetime.datetime.fromisoformat(value.replace(\"Z\", \"+00:00\"))",
        ),
        action(vec![call(
            "toolu_01E5f6G7h8I9j0K1l2M3n4O",
            "Bash",
            json!({"command": "cd ~/app && pytest -q", "description": "Re-run the test suite"}),
        )]),
        result(
            "toolu_01E5f6G7h8I9j0K1l2M3n4O",
            "Bash",
            "............\n12 passed in 0.41s",
        ),
        note(CLAUDE_FINAL),
    ]
}

#[test]
fn claude_basic_stream() {
    let outputs = canonical(parse_stream(
        TranscriptFormat::ClaudeStreamJson,
        &fixture!("claude-stream-json/basic.jsonl"),
    ));
    assert_eq!(steps_of(&outputs), canonical_steps(claude_basic_steps()));
    assert_eq!(
        side_outputs(&outputs),
        vec![
            AdapterOutput::SessionId(CLAUDE_SESSION.into()),
            AdapterOutput::Result(CLAUDE_FINAL.into()),
        ]
    );
    // The session id is known before any step.
    assert_eq!(outputs[0], AdapterOutput::SessionId(CLAUDE_SESSION.into()));
    assert_eq!(
        outputs.last(),
        Some(&AdapterOutput::Result(CLAUDE_FINAL.into()))
    );
    assert_well_formed(&steps_of(&outputs));
}

#[test]
fn claude_last_assistant_text_is_the_final_message() {
    let mut adapter = adapter_for(TranscriptFormat::ClaudeStreamJson);
    for line in fixture!("claude-stream-json/basic.jsonl").lines() {
        adapter.push_line(line);
    }
    assert_eq!(adapter.last_assistant_text(), Some(CLAUDE_FINAL));
    assert!(adapter.flush().is_empty(), "nothing left buffered");
}

#[test]
fn claude_malformed_lines_are_kept_as_text_in_order() {
    let input = fixture!("claude-stream-json/malformed.jsonl");
    let outputs = canonical(parse_stream(TranscriptFormat::ClaudeStreamJson, &input));

    let mut expected = canonical_steps(claude_basic_steps());
    // Inserted from the back so earlier indices stay valid.
    expected.insert(11, note(r#"{"type":"assistant","message":"overloaded"}"#));
    expected.insert(4, note(nth_line(&input, 8))); // the torn line
    expected.insert(2, note(nth_line(&input, 5))); // the unknown type
    expected.insert(
        0,
        note("Update available: 2.0.14 -> 2.0.21. Run `claude update` to install."),
    );
    assert_eq!(steps_of(&outputs), expected);
    assert!(nth_line(&input, 5).contains("rate_limit_event"));
    assert!(serde_json::from_str::<Value>(nth_line(&input, 8)).is_err());

    assert_eq!(
        side_outputs(&outputs),
        vec![
            AdapterOutput::SessionId(CLAUDE_SESSION.into()),
            AdapterOutput::Result(CLAUDE_FINAL.into()),
        ]
    );
    assert_well_formed(&steps_of(&outputs));
}

#[test]
fn claude_blocks_of_one_message_merge_into_one_action() {
    let mut adapter = adapter_for(TranscriptFormat::ClaudeStreamJson);
    let text_line = r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Listing."}]},"session_id":"s1"}"#;
    let partial = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1},"session_id":"s1"}"#;
    let tool_line = r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]},"session_id":"s1"}"#;
    let next_line = r#"{"type":"assistant","message":{"id":"msg_2","role":"assistant","content":[{"type":"text","text":"Next."}]},"session_id":"s1"}"#;

    assert_eq!(
        adapter.push_line(text_line),
        vec![AdapterOutput::SessionId("s1".into())]
    );
    assert!(adapter.push_line(partial).is_empty());
    assert!(adapter.push_line(tool_line).is_empty());
    // A different message ends the first one.
    let merged = action(vec![
        text("Listing."),
        call("t1", "Bash", json!({"command": "ls"})),
    ]);
    assert_eq!(canonical(adapter.push_line(next_line)), vec![out(merged)]);
    // A quiet gap emits what is pending.
    assert_eq!(adapter.flush(), vec![out(note("Next."))]);
    assert_eq!(adapter.last_assistant_text(), Some("Next."));
}

#[test]
fn claude_user_content_and_unusual_results() {
    let lines = [
        r#"{"type":"user","message":{"role":"user","content":"Please also update the changelog."}}"#,
        r#"{"type":"assistant","message":{"id":"m","content":[{"type":"thinking","thinking":"hmm"}]}}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_gone","content":[{"type":"text","text":"part one"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}},{"type":"text","text":"part two"}]},{"type":"text","text":"[Request interrupted by user for tool use]"}]}}"#,
        r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":30,"session_id":"s9"}"#,
    ];
    let mut adapter = adapter_for(TranscriptFormat::ClaudeStreamJson);
    let mut outputs = Vec::new();
    for line in lines {
        outputs.extend(adapter.push_line(line));
    }
    outputs.extend(adapter.finish());
    assert_eq!(
        outputs,
        vec![
            out(note("[user] Please also update the changelog.")),
            out(result(
                "toolu_gone",
                "unknown",
                "part one\n[image]\npart two"
            )),
            out(note("[user] [Request interrupted by user for tool use]")),
            AdapterOutput::SessionId("s9".into()),
            AdapterOutput::Result("[error_max_turns]".into()),
        ]
    );
    // Thinking alone is no prose.
    assert_eq!(adapter.last_assistant_text(), None);
}

#[test]
fn claude_tool_results_are_capped() {
    let huge = "z".repeat(MAX_TOOL_RESULT_BYTES * 2);
    let line = json!({
        "type": "user",
        "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": huge}
        ]}
    })
    .to_string();
    let outputs = adapter_for(TranscriptFormat::ClaudeStreamJson).push_line(&line);
    match outputs.as_slice() {
        [AdapterOutput::Step(TranscriptStep::ToolResult { text, .. })] => {
            assert!(text.len() <= MAX_TOOL_RESULT_BYTES);
            assert!(text.contains("[truncated: "));
        }
        other => panic!("expected one tool result, got {other:?}"),
    }
}

// ---- codex-json ----------------------------------------------------------

fn codex_basic_outputs() -> Vec<AdapterOutput> {
    let failing = "..F.........\nFAILED tests/test_dates.py::test_parse_iso - ValueError: Invalid isoformat string: '2024-05-01T12:00:00Z'\n1 failed, 11 passed in 0.38s\n";
    let sed = "bash -lc \"sed -n '1,40p' app/dates.py\"";
    let query = "python 3.10 datetime fromisoformat Z suffix";
    vec![
        AdapterOutput::SessionId(CODEX_THREAD.into()),
        status("Planning test run"),
        out(note("I'll run the test suite first.")),
        status("running: bash -lc 'pytest -q'"),
        out(action(vec![call(
            "item_2",
            "shell",
            json!({"command": "bash -lc 'pytest -q'"}),
        )])),
        out(result(
            "item_2",
            "shell",
            &format!("{failing}[exit code 1]"),
        )),
        status("todo 1/3 done; next: Fix parse_iso for a trailing Z"),
        status(&format!("running: {sed}")),
        out(action(vec![call("item_4", "shell", json!({ "command": sed }))])),
        out(result(
            "item_4",
            "shell",
            "import datetime\n\n\ndef parse_iso(value: str) -> datetime.datetime:\n    \"\"\"Parses an ISO 8601 timestamp such as 2024-05-01T12:00:00Z.\"\"\"\n    return datetime.datetime.fromisoformat(value)\n",
        )),
        status(&format!("searching: {query}")),
        out(action(vec![call(
            "item_5",
            "web_search",
            json!({ "query": query }),
        )])),
        out(result(
            "item_5",
            "web_search",
            "[search results not reported by codex]",
        )),
        status("calling docs.search"),
        out(action(vec![call(
            "item_6",
            "docs.search",
            json!({"query": "fromisoformat", "version": "3.10"}),
        )])),
        out(result(
            "item_6",
            "docs.search",
            "datetime.fromisoformat(date_string): Changed in version 3.11: accepts most ISO 8601 formats, including a Z suffix.",
        )),
        out(action(vec![call(
            "item_7",
            "apply_patch",
            json!({"changes": [
                {"path": "/home/dev/app/app/dates.py", "kind": "update"},
                {"path": "/home/dev/app/tests/test_dates_utc.py", "kind": "add"}
            ]}),
        )])),
        out(result(
            "item_7",
            "apply_patch",
            "update /home/dev/app/app/dates.py\nadd /home/dev/app/tests/test_dates_utc.py",
        )),
        status("todo 2/3 done; next: Re-run the suite"),
        status("running: bash -lc 'pytest -q'"),
        out(action(vec![call(
            "item_8",
            "shell",
            json!({"command": "bash -lc 'pytest -q'"}),
        )])),
        out(result("item_8", "shell", "............\n12 passed in 0.41s\n")),
        status("todo 3/3 done"),
        out(note(CODEX_FINAL)),
        // No result line in the format: finish() reports the last message.
        AdapterOutput::Result(CODEX_FINAL.into()),
    ]
}

#[test]
fn codex_basic_stream() {
    let outputs = canonical(parse_stream(
        TranscriptFormat::CodexJson,
        &fixture!("codex-json/basic.jsonl"),
    ));
    assert_eq!(outputs, canonical(codex_basic_outputs()));
    assert_well_formed(&steps_of(&outputs));
}

#[test]
fn codex_flush_is_not_the_end() {
    let mut adapter = adapter_for(TranscriptFormat::CodexJson);
    for line in fixture!("codex-json/basic.jsonl").lines() {
        adapter.push_line(line);
    }
    // A quiet gap must not report a result; the runner may still read the
    // last message itself.
    assert!(adapter.flush().is_empty());
    assert_eq!(adapter.last_assistant_text(), Some(CODEX_FINAL));
    assert_eq!(
        adapter.finish(),
        vec![AdapterOutput::Result(CODEX_FINAL.into())]
    );
}

#[test]
fn codex_malformed_lines_are_kept_as_text_in_order() {
    let input = fixture!("codex-json/malformed.jsonl");
    let outputs = canonical(parse_stream(TranscriptFormat::CodexJson, &input));
    assert!(serde_json::from_str::<Value>(nth_line(&input, 12)).is_err());
    let expected = with_inserted(
        canonical(codex_basic_outputs()),
        vec![
            (0, out(note("Reading prompt from stdin..."))),
            (
                3,
                out(note(
                    r#"{"type":"session.configured","model":"gpt-5-codex","reasoning_effort":"medium"}"#,
                )),
            ),
            (
                6,
                out(note(
                    "[error] stream disconnected before completion; retrying 1/5",
                )),
            ),
            (10, out(note(nth_line(&input, 12)))),
            (16, out(note(nth_line(&input, 17)))),
        ],
    );
    assert_eq!(outputs, expected);
    assert!(nth_line(&input, 17).contains("collab_tool_call"));
    assert_well_formed(&steps_of(&outputs));
}

#[test]
fn codex_failures_become_error_text() {
    let lines = [
        r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"rm -rf /","aggregated_output":"","exit_code":null,"status":"declined"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"github","tool":"create_pr","arguments":null,"result":null,"error":{"message":"401 Unauthorized"},"status":"failed"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_2","type":"error","message":"command timed out"}}"#,
        r#"{"type":"turn.failed","error":{"message":"usage limit reached"}}"#,
    ];
    let mut adapter = adapter_for(TranscriptFormat::CodexJson);
    let mut outputs = Vec::new();
    for line in lines {
        outputs.extend(adapter.push_line(line));
    }
    outputs.extend(adapter.finish());
    assert_eq!(
        canonical(outputs),
        canonical(vec![
            out(action(vec![call(
                "item_0",
                "shell",
                json!({"command": "rm -rf /"})
            )])),
            out(result("item_0", "shell", "[declined]")),
            out(action(vec![call("item_1", "github.create_pr", json!({}))])),
            out(result(
                "item_1",
                "github.create_pr",
                "[error] 401 Unauthorized"
            )),
            out(note("[error] command timed out")),
            out(note("[error] usage limit reached")),
        ])
    );
    // No agent message: no result to report.
    assert_eq!(adapter.last_assistant_text(), None);
}

// ---- steps-jsonl ---------------------------------------------------------

#[test]
fn steps_jsonl_basic_stream() {
    let input = fixture!("steps-jsonl/basic.jsonl");
    let mut adapter = adapter_for(TranscriptFormat::StepsJsonl);
    let mut outputs = Vec::new();
    for line in input.lines() {
        outputs.extend(adapter.push_line(line));
    }
    outputs.extend(adapter.finish());

    let progress = |event: &str, message: &str, metadata: Value| AdapterOutput::Progress {
        event: event.into(),
        message: Some(message.into()),
        metadata: Some(metadata),
    };
    let raw_call = |id: &str, name: &str, args: &str| ActionContent::ToolCall {
        id: id.into(),
        name: name.into(),
        args: args.into(),
    };
    assert_eq!(
        outputs,
        vec![
            progress(
                "worker.execution.started",
                "Starting task tsk_01JD4ZQ8",
                json!({"task_id": "tsk_01JD4ZQ8", "attempt": 1}),
            ),
            status("Cloning acme/app"),
            progress(
                "worker.building",
                "Installing dependencies",
                json!({"tool": "pip", "packages": 37}),
            ),
            out(action(vec![
                text("I'll run the test suite."),
                raw_call("shell:0", "shell", r#"{"command":"cd ~/app && pytest"}"#),
            ])),
            out(result("shell:0", "shell", "1 failed, 11 passed")),
            out(note("warning: worker heartbeat delayed 12s")),
            out(action(vec![
                text("Fixing `parse_iso` to accept a trailing Z."),
                raw_call(
                    "edit:1",
                    "edit",
                    r#"{"path":"app/dates.py","old":"fromisoformat(value)","new":"fromisoformat(value.replace(\"Z\", \"+00:00\"))"}"#,
                ),
            ])),
            out(result("edit:1", "edit", "updated app/dates.py")),
            // Two unusable lines in a row make one text burst.
            out(note(&format!(
                "{}\n{}",
                nth_line(&input, 8),
                nth_line(&input, 9)
            ))),
            out(action(vec![raw_call(
                "shell:2",
                "shell",
                r#"{"command":"cd ~/app && pytest"}"#,
            )])),
            out(result("shell:2", "shell", "12 passed, 0 failed")),
            out(note("All 12 tests passed.")),
            progress(
                "worker.pr.created",
                "Opened pull request #17",
                json!({"url": "https://github.com/acme/app/pull/17", "number": 17}),
            ),
            status("Waiting for CI"),
            AdapterOutput::Result(
                "Opened https://github.com/acme/app/pull/17: parse_iso accepts a trailing Z; 12/12 tests pass."
                    .into(),
            ),
        ]
    );
    assert!(nth_line(&input, 8).contains(r#""call_id":7"#));
    assert!(nth_line(&input, 9).contains("heartbeat"));
    assert_eq!(adapter.last_assistant_text(), Some("All 12 tests passed."));
    assert_well_formed(&steps_of(&outputs));
}

#[test]
fn steps_jsonl_progress_fields_are_optional_but_typed() {
    let mut adapter = adapter_for(TranscriptFormat::StepsJsonl);
    assert_eq!(
        adapter.push_line(r#"{"type":"progress","event":"worker.idle"}"#),
        vec![AdapterOutput::Progress {
            event: "worker.idle".into(),
            message: None,
            metadata: None,
        }]
    );
    // A message that is not a string, or no event: wrong shape, kept as text.
    for line in [
        r#"{"type":"progress","event":"worker.idle","message":5}"#,
        r#"{"type":"progress","message":"no event"}"#,
        r#"{"type":"status","text":null}"#,
    ] {
        assert!(adapter.push_line(line).is_empty());
        assert_eq!(adapter.flush(), vec![out(note(line))]);
    }
}

// ---- text ----------------------------------------------------------------

const TEXT_BURST_ONE: &str = "==> Building acme/app\nCollecting dependencies... done\n\nwarning: unused variable `tz` in app/dates.py:12";
const TEXT_BURST_TWO: &str = "Compiled 14 modules in 3.2s\n\n\nRunning tests\ntests/test_dates.py ............ [100%]\n12 passed in 0.41s ✅\nRésumé: 全部通过";

#[test]
fn text_stream_without_gaps_is_one_step() {
    let outputs = parse_stream(TranscriptFormat::Text, &fixture!("text/basic.txt"));
    assert_eq!(
        outputs,
        vec![out(note(&format!("{TEXT_BURST_ONE}\n{TEXT_BURST_TWO}")))]
    );
}

#[test]
fn text_quiet_gaps_split_bursts() {
    let input = fixture!("text/basic.txt");
    let mut adapter = adapter_for(TranscriptFormat::Text);
    let mut outputs = Vec::new();
    for (n, line) in input.lines().enumerate() {
        outputs.extend(adapter.push_line(line));
        if n == 3 {
            outputs.extend(adapter.flush());
        }
    }
    outputs.extend(adapter.flush());
    assert!(adapter.flush().is_empty());
    assert_eq!(
        outputs,
        vec![out(note(TEXT_BURST_ONE)), out(note(TEXT_BURST_TWO))]
    );
    assert_eq!(adapter.last_assistant_text(), Some(TEXT_BURST_TWO));
}

#[test]
fn text_bursts_split_at_the_line_limit() {
    let mut adapter = adapter_for(TranscriptFormat::Text);
    let mut outputs = Vec::new();
    for n in 0..(2 * TEXT_BURST_MAX_LINES + 50) {
        outputs.extend(adapter.push_line(&format!("line {n}")));
    }
    assert_eq!(outputs.len(), 2, "two full bursts emitted without a flush");
    outputs.extend(adapter.flush());
    let bursts: Vec<usize> = steps_of(&outputs)
        .iter()
        .map(|step| match step {
            TranscriptStep::Action { content } => match content.as_slice() {
                [ActionContent::Text { text }] => text.lines().count(),
                other => panic!("unexpected content {other:?}"),
            },
            other => panic!("unexpected step {other:?}"),
        })
        .collect();
    assert_eq!(bursts, vec![TEXT_BURST_MAX_LINES, TEXT_BURST_MAX_LINES, 50]);
}

#[test]
fn text_bursts_split_at_the_byte_limit() {
    let mut adapter = adapter_for(TranscriptFormat::Text);
    let line = "x".repeat(1000);
    let mut outputs = Vec::new();
    let mut pushed = 0;
    while outputs.is_empty() {
        outputs = adapter.push_line(&line);
        pushed += 1;
    }
    // 8 lines (8007 bytes with newlines) fit; the 9th exceeds 8 KiB.
    assert_eq!(pushed, 9);
    match outputs.as_slice() {
        [AdapterOutput::Step(TranscriptStep::Action { content })] => match content.as_slice() {
            [ActionContent::Text { text }] => {
                assert!(text.len() > TEXT_BURST_MAX_BYTES);
                assert_eq!(text.lines().count(), 9);
            }
            other => panic!("unexpected content {other:?}"),
        },
        other => panic!("unexpected outputs {other:?}"),
    }
}

#[test]
fn text_one_enormous_line_is_capped() {
    let mut adapter = adapter_for(TranscriptFormat::Text);
    let outputs = adapter.push_line(&"日".repeat(MAX_TOOL_RESULT_BYTES));
    match outputs.as_slice() {
        [AdapterOutput::Step(TranscriptStep::Action { content })] => match content.as_slice() {
            [ActionContent::Text { text }] => {
                assert!(text.len() <= MAX_TOOL_RESULT_BYTES);
                assert!(text.contains("[truncated: "));
            }
            other => panic!("unexpected content {other:?}"),
        },
        other => panic!("unexpected outputs {other:?}"),
    }
}

#[test]
fn text_lines_read_as_a_terminal_shows_them() {
    let mut adapter = adapter_for(TranscriptFormat::Text);
    for line in [
        "",
        "   ",
        "\x1b[2K",
        "hello\r\n",
        "progress 10%\rprogress 50%\rprogress 100%\r",
        "\tindented\x07 with bell",
        "",
        "",
    ] {
        assert!(adapter.push_line(line).is_empty());
    }
    assert_eq!(
        adapter.flush(),
        vec![out(note("hello\nprogress 100%\n\tindented with bell"))]
    );
    // Blank lines alone make no step.
    adapter.push_line("");
    adapter.push_line("\x1b[0m");
    assert!(adapter.flush().is_empty());
}

#[test]
fn ansi_sequences_are_stripped() {
    let cases = [
        ("\x1b[1;31mred\x1b[0m plain", "red plain"),
        ("\x1b]8;;https://example.com\x07link\x1b]8;;\x07", "link"),
        ("\x1b]0;title\x1b\\after", "after"),
        ("a\x1b7b\x1b8c", "abc"),
        ("\x1b(Bcharset", "charset"),
        ("\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"),
        ("cut off \x1b[38;5", "cut off "),
        ("\u{9b}31mc1 csi", "c1 csi"),
        ("emoji 🦀 and 中文", "emoji 🦀 and 中文"),
    ];
    for (input, expected) in cases {
        assert_eq!(strip_ansi(input), expected, "input {input:?}");
    }
    assert!(matches!(
        strip_ansi("tab\tkept"),
        std::borrow::Cow::Borrowed("tab\tkept")
    ));
}

// ---- robustness ----------------------------------------------------------

const JSON_FORMATS: [TranscriptFormat; 3] = [
    TranscriptFormat::StepsJsonl,
    TranscriptFormat::ClaudeStreamJson,
    TranscriptFormat::CodexJson,
];

/// Lines no JSON format understands: each must come back as text.
const UNUSABLE_LINES: [&str; 14] = [
    "null",
    "42",
    "[]",
    "{}",
    r#"{"type":null}"#,
    r#"{"type":"assistant"}"#,
    r#"{"type":"user","message":{"content":42}}"#,
    r#"{"type":"result"}"#,
    r#"{"type":"item.completed"}"#,
    r#"{"type":"item.completed","item":{"type":"command_execution"}}"#,
    r#"{"type":"item.completed","item":{"type":"file_change","id":"x"}}"#,
    r#"{"type":"thread.started"}"#,
    r#"{"type":"tool_result","call_id":"c"}"#,
    "{\"type\":\"action\",\"content\":[{\"type\":\"text\"",
];

#[test]
fn unusable_lines_are_never_dropped() {
    for format in JSON_FORMATS {
        for line in UNUSABLE_LINES {
            let mut adapter = adapter_for(format);
            let mut outputs = adapter.push_line(line);
            outputs.extend(adapter.finish());
            assert_eq!(outputs, vec![out(note(line))], "{format}: {line}");
        }
    }
}

#[test]
fn no_input_panics_any_adapter() {
    let fixtures = [
        fixture!("claude-stream-json/basic.jsonl"),
        fixture!("claude-stream-json/malformed.jsonl"),
        fixture!("codex-json/basic.jsonl"),
        fixture!("codex-json/malformed.jsonl"),
        fixture!("steps-jsonl/basic.jsonl"),
        fixture!("text/basic.txt"),
    ];
    let odd = [
        r#"{"type":"assistant","message":{"content":[1,null,{"type":"tool_use"},{"type":"text","text":7}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result"},{"type":"tool_result","tool_use_id":"x","content":{"a":1},"is_error":"yes"}]}}"#,
        r#"{"type":"item.completed","item":{"id":1,"type":"mcp_tool_call","server":"s","tool":"t","result":{"content":"x"}}}"#,
        r#"{"type":"item.updated","item":{"type":"todo_list","items":[null,{"text":3}]}}"#,
        r#"{"type":"system"}"#,
        "\x1b]unterminated osc",
        "\u{feff}{\"type\":\"status\",\"text\":\"bom\"}",
        "\0\0\0",
    ];
    for format in TranscriptFormat::ALL {
        let mut adapter = adapter_for(format);
        for input in &fixtures {
            for line in input.lines() {
                // Every prefix, as a torn pipe would deliver it.
                for (end, _) in line.char_indices().step_by(7) {
                    adapter.push_line(&line[..end]);
                }
                adapter.push_line(line);
            }
            adapter.flush();
        }
        for line in odd {
            adapter.push_line(line);
        }
        adapter.finish();
    }
}
