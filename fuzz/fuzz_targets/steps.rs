//! The run steps request (`POST /api/v1/runs/{id}/steps`, protocol
//! `AppendSteps`) decoded from arbitrary bytes, then put through what the
//! store does with each step (caps, summary, the stored JSON, the gzip
//! blob, the raw JSON text sent to clients). Nothing may panic; capping is
//! idempotent and within bounds; whatever is accepted reads back equal.
//! The same bytes are also read as a stored transcript blob, which must be
//! refused cleanly when it is not one.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shepherd_core::transcript::{
    compress, decompress, decompress_with_limit, ActionContent, StepsJson, TranscriptStep,
    MAX_TOOL_ARGS_BYTES, MAX_TOOL_RESULT_BYTES, PREVIEW_MAX_BYTES,
};
use shepherd_protocol::AppendSteps;

fuzz_target!(|data: &[u8]| {
    let _ = decompress_with_limit(data, 1 << 20);

    let Ok(body) = serde_json::from_slice::<AppendSteps>(data) else {
        return;
    };
    // The API refuses more than this before the store sees them.
    if body.steps.len() > 1000 {
        return;
    }
    let mut stored = Vec::with_capacity(body.steps.len());
    for step in body.steps {
        let step = step.truncated();
        assert_eq!(step.clone().truncated(), step, "capping is not idempotent");
        match &step {
            TranscriptStep::Action { content } => {
                for c in content {
                    if let ActionContent::ToolCall { args, .. } = c {
                        assert!(args.len() <= MAX_TOOL_ARGS_BYTES, "args over the cap");
                    }
                }
            }
            TranscriptStep::ToolResult { text, .. } => {
                assert!(
                    text.len() <= MAX_TOOL_RESULT_BYTES,
                    "tool result over the cap"
                );
            }
        }
        let summary = step.step_summary();
        assert!(
            summary.preview.len() <= PREVIEW_MAX_BYTES,
            "preview of {} bytes",
            summary.preview.len()
        );
        let row = serde_json::to_string(&step).expect("a step serialises");
        let back: TranscriptStep = serde_json::from_str(&row).expect("a stored step reads back");
        assert_eq!(back, step, "a stored step reads back different");
        stored.push(step);
    }
    let blob = compress(&stored);
    assert_eq!(decompress(&blob).expect("a blob reads back"), stored);
    let raw = StepsJson::from_steps(&stored);
    assert_eq!(raw.as_str(), serde_json::to_string(&stored).unwrap());
    assert_eq!(raw.parse().expect("raw steps parse"), stored);
});
