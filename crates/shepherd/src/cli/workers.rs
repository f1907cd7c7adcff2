//! `shepherd workers`: every worker known, live and recovered.

use shepherd_protocol::WorkersQuery;

use crate::render::{ago, opt, table};

use super::output::{client, explain, print_data};
use super::{Global, Output, Result};

pub async fn workers(g: &Global, all: bool) -> Result<()> {
    let c = client(g)?;
    let q = WorkersQuery {
        include_closed: Some(all),
        ..Default::default()
    };
    let v = c.workers(&q).await.map_err(explain)?;
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &v),
        Output::Table => {
            let rows: Vec<Vec<String>> = v
                .workers
                .iter()
                .map(|w| {
                    vec![
                        w.worker_id.clone(),
                        w.agent_id.clone(),
                        w.status.to_string(),
                        w.event_state.to_string(),
                        w.source.to_string(),
                        ago(&w.last_heartbeat_at),
                        opt(&w.project_path),
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
