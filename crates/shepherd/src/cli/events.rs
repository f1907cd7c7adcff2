//! `shepherd events`: a page of the event log, or the live stream with
//! `--follow` (resuming after drops).

use serde_json::{json, Value};
use shepherd_runner::client::{enc, follow_sse, Connector, SseFrame};

use crate::render::{cut, s};

use super::output::client;
use super::{EventsArgs, Global, Output, Result};

fn event_query(e: &EventsArgs) -> String {
    let mut q = String::new();
    for (k, v) in [
        ("task_id", &e.task),
        ("worker_id", &e.worker),
        ("run_id", &e.run),
        ("agent_id", &e.agent),
        ("types", &e.types),
    ] {
        if let Some(v) = v {
            q.push_str(&format!("&{k}={}", enc(v)));
        }
    }
    q
}

fn print_event(g: &Global, name: &str, data: &Value) {
    match g.output {
        Output::Json => println!("{}", json!({ "event": name, "data": data })),
        Output::Table => {
            let ids: Vec<String> = ["task_id", "worker_id", "run_id"]
                .iter()
                .filter_map(|k| {
                    data[*k]
                        .as_str()
                        .map(|v| format!("{}={}", k.trim_end_matches("_id"), cut(v, 14)))
                })
                .collect();
            let detail = match &data["data"] {
                Value::Object(m) if m.contains_key("preview") => s(&m["preview"]),
                Value::Object(m) if m.contains_key("message") && !m["message"].is_null() => {
                    s(&m["message"])
                }
                Value::Object(m) if m.contains_key("to") => format!("→ {}", s(&m["to"])),
                Value::Object(m) if m.contains_key("status") => s(&m["status"]),
                _ => String::new(),
            };
            println!(
                "{:>7}  {}  {:<28} {}  {}",
                s(&data["seq"]),
                s(&data["ts"]),
                name,
                ids.join(" "),
                cut(&detail, 80)
            );
        }
    }
}

/// Follows an SSE path on the server with resume, printing drops to stderr.
pub async fn follow(
    g: &Global,
    path: &str,
    cursor: Option<i64>,
    on_frame: impl FnMut(&SseFrame) -> bool,
) -> Result<()> {
    let token = g.token.clone().or_else(|| {
        std::env::var("SHEPHERD_AUTH_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
    });
    let conn = Connector::new(&g.server, token);
    follow_sse(&conn, path, cursor, on_frame, |msg| eprintln!("({msg})")).await?;
    Ok(())
}

pub async fn events(g: &Global, e: &EventsArgs) -> Result<()> {
    let c = client(g);
    let filter = event_query(e);
    if !e.follow {
        let v = match e.after {
            Some(a) => {
                c.get(&format!("/api/v1/events?after={a}&limit=100{filter}"))
                    .await?
            }
            None => c.get(&format!("/api/v1/events?limit=20{filter}")).await?,
        };
        for ev in v["events"].as_array().into_iter().flatten() {
            print_event(g, ev["type"].as_str().unwrap_or("?"), ev);
        }
        return Ok(());
    }
    let path = format!(
        "/api/events?after={}{}",
        e.after.map(|a| a.to_string()).unwrap_or("now".into()),
        filter
    );
    follow(g, &path, e.after, |f| {
        let data: Value = serde_json::from_str(&f.data).unwrap_or(Value::Null);
        if f.event == "resync" {
            eprintln!("(resync: {})", s(&data["message"]));
        } else {
            print_event(g, &f.event, &data);
        }
        true
    })
    .await
}
