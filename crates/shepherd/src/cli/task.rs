//! `shepherd task`: add, list, show, dispatch, cancel and watch tasks.

use serde_json::{json, Value};
use shepherd_runner::client::enc;

use crate::client::Client;
use crate::render::{ago, cut, s, table};

use super::events::follow;
use super::output::{client, print_json};
use super::{Global, Output, Result, TaskCommand};

fn task_rows(tasks: &[Value]) -> Vec<Vec<String>> {
    tasks
        .iter()
        .map(|t| {
            vec![
                s(&t["vtid"]),
                s(&t["state"]),
                s(&t["priority"]),
                s(&t["agent_id"]),
                ago(&t["created_at"]),
                cut(&s(&t["title"]), 60),
            ]
        })
        .collect()
}

pub async fn task(g: &Global, cmd: &TaskCommand) -> Result<()> {
    let c = client(g);
    match cmd {
        TaskCommand::Add {
            title,
            spec,
            spec_file,
            vtid,
            priority,
            capabilities,
            agent,
            channel,
            workflow,
            draft,
        } => {
            let spec = match (spec, spec_file) {
                (Some(s), _) => s.clone(),
                (None, Some(p)) if p.as_os_str() == "-" => {
                    std::io::read_to_string(std::io::stdin())?
                }
                (None, Some(p)) => std::fs::read_to_string(p)
                    .map_err(|e| format!("--spec-file {}: {e}", p.display()))?,
                (None, None) => String::new(),
            };
            let body = json!({
                "vtid": vtid, "title": title, "spec": spec, "priority": priority, "capabilities": capabilities,
                "agent_id": agent, "channel_id": channel, "workflow": workflow, "dispatch": !draft,
            });
            let t = c.post("/api/v1/tasks", &body).await?;
            match g.output {
                Output::Json => print_json(&t),
                Output::Table => println!(
                    "created {} ({}, {})",
                    s(&t["vtid"]),
                    s(&t["state"]),
                    s(&t["workflow"])
                ),
            }
        }
        TaskCommand::List {
            state,
            agent,
            limit,
        } => {
            let mut q = format!("/api/v1/tasks?limit={limit}");
            if let Some(s) = state {
                q.push_str(&format!("&state={}", enc(s)));
            }
            if let Some(a) = agent {
                q.push_str(&format!("&agent_id={}", enc(a)));
            }
            let v = c.get(&q).await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    let tasks = v["tasks"].as_array().cloned().unwrap_or_default();
                    if tasks.is_empty() {
                        println!(
                            "No tasks. Create one with: shepherd task add \"TITLE\" --spec \"...\""
                        );
                    } else {
                        print!(
                            "{}",
                            table(
                                &["VTID", "STATE", "PRIO", "AGENT", "CREATED", "TITLE"],
                                &task_rows(&tasks)
                            )
                        );
                        println!("{} of {} shown", tasks.len(), s(&v["total"]));
                    }
                }
            }
        }
        TaskCommand::Show { vtid } => {
            let v = c.get(&format!("/api/v1/tasks/{}", enc(vtid))).await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    println!("{}  {}", s(&v["vtid"]), s(&v["title"]));
                    println!(
                        "state:     {} (workflow {})",
                        s(&v["state"]),
                        s(&v["workflow"])
                    );
                    println!(
                        "priority:  {}   agent: {}   attempts: {}",
                        s(&v["priority"]),
                        s(&v["agent_id"]),
                        s(&v["attempts"])
                    );
                    println!(
                        "created:   {} ({})",
                        s(&v["created_at"]),
                        ago(&v["created_at"])
                    );
                    if let Some(caps) = v["capabilities"].as_array().filter(|c| !c.is_empty()) {
                        println!(
                            "needs:     {}",
                            caps.iter().map(s).collect::<Vec<_>>().join(", ")
                        );
                    }
                    let claims = v["claims"].as_array().cloned().unwrap_or_default();
                    if !claims.is_empty() {
                        println!("\nClaims:");
                        let rows: Vec<Vec<String>> = claims
                            .iter()
                            .map(|c| {
                                vec![
                                    s(&c["worker_id"]),
                                    s(&c["purpose"]),
                                    s(&c["run_id"]),
                                    ago(&c["claimed_at"]),
                                    s(&c["release_reason"]),
                                ]
                            })
                            .collect();
                        print!(
                            "{}",
                            table(
                                &["WORKER", "PURPOSE", "RUN", "CLAIMED", "RELEASED BECAUSE"],
                                &rows
                            )
                        );
                    }
                    let events = v["events"].as_array().cloned().unwrap_or_default();
                    if !events.is_empty() {
                        println!("\nRecent events:");
                        for e in events.iter().rev().take(15).rev() {
                            println!("  {:>6}  {}  {}", s(&e["seq"]), s(&e["ts"]), s(&e["type"]));
                        }
                    }
                    if let Some(spec) = v["spec"].as_str().filter(|s| !s.is_empty()) {
                        println!(
                            "\nSpec:\n{}",
                            spec.lines()
                                .take(20)
                                .map(|l| format!("  {l}"))
                                .collect::<Vec<_>>()
                                .join("\n")
                        );
                    }
                }
            }
        }
        TaskCommand::Dispatch { vtid } => {
            let t = c
                .post(&format!("/api/v1/tasks/{}/dispatch", enc(vtid)), &json!({}))
                .await?;
            match g.output {
                Output::Json => print_json(&t),
                Output::Table => println!("dispatched {} ({})", s(&t["vtid"]), s(&t["state"])),
            }
        }
        TaskCommand::Cancel { vtid, reason } => {
            let v = c
                .post(
                    &format!("/api/v1/tasks/{}/cancel", enc(vtid)),
                    &json!({ "reason": reason }),
                )
                .await?;
            match g.output {
                Output::Json => print_json(&v),
                Output::Table => {
                    if v["cancelled"] == json!(true) {
                        println!("cancelled {vtid}");
                    } else {
                        let p = &v["pending_worker"];
                        println!(
                            "cancel requested: worker {} is stopping run {} (grace {}s)",
                            s(&p["worker_id"]),
                            s(&p["run_id"]),
                            s(&p["grace_secs"])
                        );
                    }
                }
            }
        }
        TaskCommand::Watch { vtid } => watch_task(g, &c, vtid).await?,
    }
    Ok(())
}

async fn watch_task(g: &Global, c: &Client, vtid: &str) -> Result<()> {
    let path = format!("/api/v1/tasks/{}", enc(vtid));
    let res = c
        .request(reqwest::Method::GET, &path)
        .send()
        .await
        .map_err(|e| format!("cannot reach {}: {e}", c.base()))?;
    let cursor: i64 = res
        .headers()
        .get("x-shepherd-cursor")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let status = res.status();
    let task: Value = res.json().await.unwrap_or_default();
    if !status.is_success() {
        return Err(format!(
            "{} ({})",
            s(&task["error"]["message"]),
            s(&task["error"]["code"])
        )
        .into());
    }
    let finals = ["done", "failed", "cancelled"];
    println!("{}  {}  [{}]", vtid, s(&task["title"]), s(&task["state"]));
    if finals.contains(&task["state"].as_str().unwrap_or("")) {
        return Ok(());
    }
    let events_path = format!("/api/events?task_id={}", enc(vtid));
    let mut finished = false;
    let mut pending_steps: Vec<String> = Vec::new();
    follow(g, &events_path, Some(cursor), |f| {
        let data: Value = serde_json::from_str(&f.data).unwrap_or(Value::Null);
        match data["type"].as_str().unwrap_or("") {
            "task.state_changed" => {
                println!(
                    "→ {}  ({})",
                    s(&data["data"]["to"]),
                    s(&data["data"]["cause"])
                );
                if finals.contains(&data["data"]["to"].as_str().unwrap_or("")) {
                    finished = true;
                }
            }
            "run.step" => {
                if let Some(run) = data["run_id"].as_str() {
                    pending_steps.push(run.to_owned());
                }
                println!(
                    "  · [{}] {}",
                    s(&data["data"]["kind"]),
                    cut(&s(&data["data"]["preview"]), 100)
                );
            }
            "run.status" => println!("  … {}", s(&data["data"]["status"])),
            "run.started" => println!(
                "run {} started by {}",
                s(&data["run_id"]),
                s(&data["worker_id"])
            ),
            "run.completed" => println!(
                "run {} ended {}",
                s(&data["run_id"]),
                s(&data["data"]["status"])
            ),
            "worker.claim.expired" => println!("! claim expired: {}", s(&data["data"]["reason"])),
            "task.cancel_requested" => println!("! cancel requested"),
            other
                if !other.is_empty()
                    && other.contains('.')
                    && data["data"]["message"].is_string() =>
            {
                println!("  {other}: {}", s(&data["data"]["message"]))
            }
            _ => {}
        }
        if g.output == Output::Json {
            println!("{data}");
        }
        !finished
    })
    .await
}
