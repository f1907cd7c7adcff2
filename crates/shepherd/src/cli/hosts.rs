//! `shepherd hosts`: the machines work lives on, whether each is there, and
//! what it holds.

use crate::render::{ago, table};

use super::output::{client, explain, print_data};
use super::{Global, Output, Result};

pub async fn hosts(g: &Global) -> Result<()> {
    let v = client(g)?.hosts().await.map_err(explain)?;
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &v),
        Output::Table => {
            let rows: Vec<Vec<String>> = v
                .hosts
                .iter()
                .map(|h| {
                    let state = if h.online {
                        "online".to_owned()
                    } else {
                        format!("offline, seen {}", ago(&h.last_seen_at))
                    };
                    let runs = match h.capacity.slots {
                        Some(slots) => format!("{}/{slots}", h.capacity.running),
                        None => h.capacity.running.to_string(),
                    };
                    let sessions = match &h.sessions_root {
                        Some(root) => format!("{} in {root}", h.sessions),
                        None => "-".to_owned(),
                    };
                    vec![
                        h.id.clone(),
                        h.name.clone(),
                        h.kind.to_string(),
                        state,
                        runs,
                        sessions,
                        if h.agents.is_empty() {
                            "-".to_owned()
                        } else {
                            h.agents.join(",")
                        },
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &["HOST", "NAME", "KIND", "STATE", "RUNS", "SESSIONS", "AGENTS"],
                    &rows
                )
            );
        }
    }
    Ok(())
}
