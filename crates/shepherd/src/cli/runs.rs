//! `shepherd runs`: list runs and show one with its transcript.

use serde_json::json;
use shepherd_runner::client::enc;

use crate::render::{ago, cut, s, table};

use super::output::{client, print_json};
use super::{Global, Output, Result, RunsCommand};

pub async fn runs(g: &Global, cmd: &RunsCommand) -> Result<()> {
    let c = client(g);
    match cmd {
        RunsCommand::List {
            agent,
            status,
            vtid,
            search,
            limit,
        } => {
            let mut q = format!("/api/v1/runs?limit={limit}");
            for (k, v) in [
                ("agent_id", agent),
                ("status", status),
                ("vtid", vtid),
                ("q", search),
            ] {
                if let Some(v) = v {
                    q.push_str(&format!("&{k}={}", enc(v)));
                }
            }
            let v = c.get(&q).await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    let runs = v["runs"].as_array().cloned().unwrap_or_default();
                    let rows: Vec<Vec<String>> = runs
                        .iter()
                        .map(|r| {
                            let live = if r["status"] == "running" {
                                s(&r["live_status"])
                            } else {
                                String::new()
                            };
                            vec![
                                s(&r["id"]),
                                s(&r["status"]),
                                s(&r["vtid"]),
                                s(&r["agent_id"]),
                                ago(&r["started_at"]),
                                s(&r["step_count"]),
                                cut(&format!("{} {}", s(&r["task"]), live), 50),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table(
                            &["RUN", "STATUS", "TASK", "AGENT", "STARTED", "STEPS", "TITLE"],
                            &rows
                        )
                    );
                    println!("{} of {} shown", runs.len(), s(&v["total"]));
                }
            }
        }
        RunsCommand::Show { id, full } => {
            let v = c.get(&format!("/api/v1/runs/{}", enc(id))).await?;
            let steps = c.get(&format!("/api/v1/runs/{}/steps", enc(id))).await?;
            match g.output {
                Output::Json => print_json(&json!({ "run": v, "steps": steps["steps"] })),
                Output::Table => {
                    println!("run {}  ({})", s(&v["id"]), s(&v["status"]));
                    println!("task:    {}  {}", s(&v["vtid"]), s(&v["task"]));
                    println!("agent:   {} · {}", s(&v["agent_id"]), s(&v["worker_type"]));
                    println!(
                        "started: {} ({})",
                        s(&v["started_at"]),
                        ago(&v["started_at"])
                    );
                    if !v["completed_at"].is_null() {
                        println!("ended:   {}", s(&v["completed_at"]));
                    }
                    if let Some(r) = v["result"].as_str() {
                        println!("result:  {}", cut(r, 200));
                    }
                    let list = steps["steps"].as_array().cloned().unwrap_or_default();
                    println!("\nTranscript ({} steps):", list.len());
                    for st in &list {
                        print!("{}", crate::render::step(&st["step"], *full, 12));
                    }
                }
            }
        }
    }
    Ok(())
}
