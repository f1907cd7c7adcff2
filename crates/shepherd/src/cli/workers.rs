//! `shepherd workers`: every worker known, live and recovered.

use crate::render::{ago, s, table};

use super::output::{client, print_json};
use super::{Global, Output, Result};

pub async fn workers(g: &Global, all: bool) -> Result<()> {
    let c = client(g);
    let v = c
        .get(&format!("/api/v1/workers?include_closed={all}"))
        .await?;
    match g.output {
        Output::Json => print_json(&v),
        Output::Table => {
            let ws = v["workers"].as_array().cloned().unwrap_or_default();
            let rows: Vec<Vec<String>> = ws
                .iter()
                .map(|w| {
                    vec![
                        s(&w["worker_id"]),
                        s(&w["agent_id"]),
                        s(&w["status"]),
                        s(&w["event_state"]),
                        s(&w["source"]),
                        ago(&w["last_heartbeat_at"]),
                        s(&w["project_path"]),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &[
                        "WORKER",
                        "AGENT",
                        "STATUS",
                        "STATE",
                        "SOURCE",
                        "HEARTBEAT",
                        "PROJECT"
                    ],
                    &rows
                )
            );
        }
    }
    Ok(())
}
