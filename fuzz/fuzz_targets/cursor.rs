//! Cursors as clients send them (`Last-Event-ID`, `?after=`, an SSE
//! frame's `id:`), through the one parser every side uses, and the event
//! type filter (`?types=`, a trailing `*` a prefix) matched against them.
//! Nothing may panic; a cursor read is never negative and reads back the
//! same from its own text.
//!
//! Input: the cursor text, then optionally `\n` and a `types` list.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shepherd_core::event::EventFilter;
use shepherd_protocol::parse_cursor;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (cursor, types) = text.split_once('\n').unwrap_or((text, ""));
    if let Some(n) = parse_cursor(cursor) {
        assert!(n >= 0, "{cursor:?} read as {n}");
        assert_eq!(parse_cursor(&n.to_string()), Some(n));
    }
    let filter = EventFilter {
        kinds: types
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        ..EventFilter::default()
    };
    for kind in types
        .split([',', '*', ' '])
        .chain([cursor, "task.created", ""])
    {
        let _ = filter.matches_kind(kind);
    }
});
