//! Which events a webhook subscription receives and what it is sent: the
//! names a subscriber may ask for (the event log's types, prefix wildcards
//! such as `run.*`, and two derived names, `run.failed` and
//! `task.finished`), and the delivery bodies in the `standard` and `slack`
//! formats. Pure, so the server, the CLI and the tests share one meaning.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::event::Event;
use crate::workflow::{CANCELLED, DONE, FAILED};
use crate::{Error, Result};

/// A `run.completed` whose status is `failed`.
pub const RUN_FAILED: &str = "run.failed";
/// A `task.state_changed` into a terminal state (done, failed, cancelled).
pub const TASK_FINISHED: &str = "task.finished";

/// What a subscription receives when it names no events: the moments a
/// person usually wants to hear about.
pub const DEFAULT_EVENTS: &[&str] = &["input.requested", "run.stuck", RUN_FAILED, TASK_FINISHED];

/// Most event names one subscription may list.
pub const MAX_EVENTS: usize = 64;
/// Longest event name or pattern.
const MAX_EVENT_LEN: usize = 128;

/// Checks a subscription's event list: names of letters, digits, `_`, `-`
/// and `.`, optionally ending in `.*` (or `*` alone for every event).
pub fn validate_events(events: &[String]) -> Result<()> {
    if events.is_empty() || events.len() > MAX_EVENTS {
        return Err(bad_events(format!(
            "a webhook lists 1 to {MAX_EVENTS} event names"
        )));
    }
    for name in events {
        let stem = if name == "*" {
            continue;
        } else {
            name.strip_suffix(".*").unwrap_or(name)
        };
        let ok = !stem.is_empty()
            && name.len() <= MAX_EVENT_LEN
            && stem
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !stem.starts_with('.')
            && !stem.ends_with('.')
            && !stem.contains("..");
        if !ok {
            return Err(bad_events(format!(
                "{name:?} is not an event name (`run.completed`) or a prefix wildcard (`run.*`)"
            )));
        }
    }
    Ok(())
}

fn bad_events(message: String) -> Error {
    Error::invalid("invalid_webhook_events", message)
}

/// The names an event is known by: its own type, and a derived name when
/// it is a failed run or a task reaching its end.
pub fn names_of(event: &Event) -> Vec<&str> {
    let mut names = vec![event.kind.as_str()];
    match event.kind.as_str() {
        "run.completed" if event.data.get("status").and_then(Value::as_str) == Some(FAILED) => {
            names.push(RUN_FAILED)
        }
        "task.state_changed" => {
            let to = event.data.get("to").and_then(Value::as_str);
            if matches!(to, Some(s) if s == DONE || s == FAILED || s == CANCELLED) {
                names.push(TASK_FINISHED)
            }
        }
        _ => {}
    }
    names
}

fn pattern_matches(pattern: &str, name: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix('*') {
        // `run.*` matches `run.completed` and `run.failed`, not `runs.x`.
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// The name an event is delivered under for a subscription, or `None` when
/// the subscription does not want it. A derived name wins when the
/// subscription asked for it, so `run.failed` subscribers see `run.failed`.
pub fn delivered_name<'a>(patterns: &[String], event: &'a Event) -> Option<&'a str> {
    let names = names_of(event);
    names
        .iter()
        .rev()
        .find(|name| patterns.iter().any(|p| pattern_matches(p, name)))
        .copied()
}

/// A delivery's body in the `standard` format.
#[derive(Debug, Clone, Serialize)]
pub struct StandardBody<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub timestamp: String,
    pub data: Value,
}

/// The event's payload with the ids it concerns added (`run_id`, `task_id`,
/// …); the payload's own fields win on a clash.
pub fn data_with_refs(event: &Event) -> Value {
    let mut data = match &event.data {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        other => {
            let mut map = Map::new();
            map.insert("value".into(), other.clone());
            map
        }
    };
    if let Ok(Value::Object(refs)) = serde_json::to_value(&event.refs) {
        for (key, value) in refs {
            data.entry(key).or_insert(value);
        }
    }
    data.entry("seq").or_insert(Value::from(event.seq));
    Value::Object(data)
}

/// The `standard` body for an event delivered under `name`.
pub fn standard_body(name: &str, event: &Event) -> Vec<u8> {
    let body = StandardBody {
        kind: name,
        timestamp: crate::time::to_rfc3339(event.ts),
        data: data_with_refs(event),
    };
    serde_json::to_vec(&body).expect("a JSON value serializes")
}

/// The `slack` body: `{"text": …}` with a one-line summary, which a Slack
/// incoming webhook posts as a message.
pub fn slack_body(name: &str, event: &Event) -> Vec<u8> {
    serde_json::to_vec(&SlackBody {
        text: summary(name, event),
    })
    .expect("a JSON value serializes")
}

/// A delivery's body in the `slack` format.
#[derive(Debug, Clone, Serialize)]
pub struct SlackBody {
    pub text: String,
}

/// A readable one-line summary of an event.
pub fn summary(name: &str, event: &Event) -> String {
    let field = |key: &str| event.data.get(key).and_then(Value::as_str);
    let refs = &event.refs;
    let mut subject = Vec::new();
    if let Some(task) = &refs.task_id {
        subject.push(format!("task {task}"));
    }
    if let Some(run) = &refs.run_id {
        subject.push(format!("run {run}"));
    }
    if subject.is_empty() {
        if let Some(worker) = &refs.worker_id {
            subject.push(format!("worker {worker}"));
        }
    }
    let subject = if subject.is_empty() {
        String::new()
    } else {
        format!(" ({})", subject.join(", "))
    };
    let detail = match name {
        "run.completed" | RUN_FAILED => {
            let status = field("status").unwrap_or("?");
            match field("reason").filter(|r| !r.is_empty()) {
                Some(reason) => format!(": {status}, {}", one_line(reason)),
                None => format!(": {status}"),
            }
        }
        "task.state_changed" | TASK_FINISHED => format!(
            ": {} → {}",
            field("from").unwrap_or("?"),
            field("to").unwrap_or("?")
        ),
        _ => ["prompt", "tool_name", "reason", "title"]
            .iter()
            .find_map(|key| field(key))
            .map(|text| format!(": {}", one_line(text)))
            .unwrap_or_default(),
    };
    format!("Shepherd {name}{subject}{detail}")
}

/// At most 200 characters on one line: a chat message, not a transcript.
fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut out: String = flat.chars().take(200).collect();
    if flat.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventRefs;
    use serde_json::json;

    fn event(kind: &str, data: Value) -> Event {
        Event {
            seq: 5,
            ts: 1_700_000_000_000,
            kind: kind.into(),
            refs: EventRefs::default().task("t1").run("r1"),
            data,
        }
    }

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn failed_run_is_also_run_failed() {
        let failed = event("run.completed", json!({"status": "failed", "reason": "x"}));
        let done = event("run.completed", json!({"status": "done", "reason": ""}));
        assert_eq!(names_of(&failed), ["run.completed", RUN_FAILED]);
        assert_eq!(names_of(&done), ["run.completed"]);
        assert_eq!(
            delivered_name(&list(&[RUN_FAILED]), &failed),
            Some(RUN_FAILED)
        );
        assert_eq!(delivered_name(&list(&[RUN_FAILED]), &done), None);
        assert_eq!(
            delivered_name(&list(&["run.completed"]), &failed),
            Some("run.completed")
        );
    }

    #[test]
    fn terminal_task_state_is_task_finished() {
        for to in ["done", "failed", "cancelled"] {
            let e = event(
                "task.state_changed",
                json!({"from": "claimed", "to": to, "cause": "c"}),
            );
            assert_eq!(
                delivered_name(&list(&[TASK_FINISHED]), &e),
                Some(TASK_FINISHED)
            );
        }
        let e = event(
            "task.state_changed",
            json!({"from": "pending", "to": "claimed", "cause": "c"}),
        );
        assert_eq!(delivered_name(&list(&[TASK_FINISHED]), &e), None);
    }

    #[test]
    fn wildcards_match_by_prefix_only() {
        let e = event("run.stuck", json!({}));
        assert_eq!(delivered_name(&list(&["run.*"]), &e), Some("run.stuck"));
        assert_eq!(delivered_name(&list(&["*"]), &e), Some("run.stuck"));
        assert_eq!(delivered_name(&list(&["ru.*", "task.*"]), &e), None);
    }

    #[test]
    fn event_lists_are_validated() {
        assert!(validate_events(&list(DEFAULT_EVENTS)).is_ok());
        assert!(validate_events(&list(&["run.*", "*", "worker.execution.failed"])).is_ok());
        for bad in [
            &[][..],
            &[""],
            &["run."],
            &[".*"],
            &["run..x"],
            &["run *"],
            &["a*"],
        ] {
            let err = validate_events(&list(bad)).unwrap_err();
            assert_eq!(err.code, "invalid_webhook_events", "{bad:?}");
        }
    }

    #[test]
    fn standard_body_carries_type_timestamp_and_refs() {
        let e = event(
            "run.completed",
            json!({"status": "failed", "reason": "boom"}),
        );
        let body: Value = serde_json::from_slice(&standard_body(RUN_FAILED, &e)).unwrap();
        assert_eq!(body["type"], RUN_FAILED);
        assert_eq!(body["timestamp"], "2023-11-14T22:13:20.000Z");
        assert_eq!(body["data"]["status"], "failed");
        assert_eq!(body["data"]["run_id"], "r1");
        assert_eq!(body["data"]["task_id"], "t1");
        assert_eq!(body["data"]["seq"], 5);
    }

    #[test]
    fn slack_body_is_one_readable_line() {
        let e = event(
            "run.completed",
            json!({"status": "failed", "reason": "tests\nfailed"}),
        );
        let body: Value = serde_json::from_slice(&slack_body(RUN_FAILED, &e)).unwrap();
        assert_eq!(
            body["text"],
            "Shepherd run.failed (task t1, run r1): failed, tests failed"
        );
    }
}
