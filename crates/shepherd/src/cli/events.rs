//! `shepherd events`: a page of the event log, or the live stream with
//! `--follow` (resuming after drops from the last event received, or from
//! the head read when following began).

use serde_json::Value;
use shepherd_client::{Frame, Start};
use shepherd_protocol::{EventPageQuery, EventStreamQuery, Resync, WireEvent};

use crate::render::cut;

use super::output::{client, explain};
use super::{EventsArgs, Global, Output, Result};

fn detail(data: &Value) -> String {
    let field = |k: &str| data.get(k).filter(|v| !v.is_null());
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(p) = field("preview") {
        text(p)
    } else if let Some(m) = field("message") {
        text(m)
    } else if let Some(to) = field("to") {
        format!("→ {}", text(to))
    } else if let Some(s) = field("status") {
        text(s)
    } else {
        String::new()
    }
}

pub fn print_event(g: &Global, name: &str, e: &WireEvent) {
    match g.output {
        Output::Json => println!(
            "{}",
            serde_json::to_string(&serde_json::json!({ "event": name, "data": e }))
                .unwrap_or_default()
        ),
        // One YAML document per event, so a stream parses as a multi-document file.
        Output::Yaml => print!(
            "---\n{}",
            serde_norway::to_string(&serde_json::json!({ "event": name, "data": e }))
                .unwrap_or_default()
        ),
        Output::Table => {
            let r = &e.event.refs;
            let ids: Vec<String> = [
                ("task", &r.task_id),
                ("worker", &r.worker_id),
                ("run", &r.run_id),
                ("by", &r.actor),
            ]
            .iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| format!("{k}={}", cut(v, 14))))
            .collect();
            println!(
                "{:>7}  {}  {:<28} {}  {}",
                e.event.seq,
                shepherd_core::time::to_rfc3339(e.event.ts),
                name,
                ids.join(" "),
                cut(&detail(&e.event.data), 80)
            );
        }
    }
}

/// Follows the event stream with resume, printing drops to stderr.
pub async fn follow(
    g: &Global,
    query: &EventStreamQuery,
    start: Start,
    on_frame: impl FnMut(&Frame) -> bool,
) -> Result<()> {
    let c = client(g)?;
    c.follow(query, start, on_frame, |msg| eprintln!("({msg})"))
        .await
        .map_err(explain)
}

pub async fn events(g: &Global, e: &EventsArgs) -> Result<()> {
    let c = client(g)?;
    let types = e.types.clone();
    if !e.follow {
        let q = EventPageQuery {
            after: e.after.map(|a| a.to_string()),
            limit: Some(if e.after.is_some() { 100 } else { 20 }),
            agent_id: e.agent.clone(),
            worker_id: e.worker.clone(),
            task_id: e.task.clone(),
            run_id: e.run.clone(),
            channel_id: None,
            actor: e.actor.clone(),
            types,
        };
        let (page, _) = c.events(&q).await.map_err(explain)?;
        for ev in &page.events {
            print_event(g, &ev.event.kind, ev);
        }
        return Ok(());
    }
    let q = EventStreamQuery {
        agent_id: e.agent.clone(),
        worker_id: e.worker.clone(),
        task_id: e.task.clone(),
        run_id: e.run.clone(),
        actor: e.actor.clone(),
        types,
        ..Default::default()
    };
    let start = e.after.map(Start::After).unwrap_or(Start::Now);
    follow(g, &q, start, |f| {
        if f.event == "resync" {
            if let Ok(r) = f.parse::<Resync>() {
                eprintln!("(resync: {})", r.message);
            }
        } else if let Ok(ev) = f.parse::<WireEvent>() {
            print_event(g, &f.event, &ev);
        }
        true
    })
    .await
}
