//! `shepherd usage`: token usage and cost of runs summed per agent, task or
//! day (`GET /api/v1/usage`), and the short usage text lists and details
//! show.

use clap::{Args, ValueEnum};
use shepherd_core::usage::Usage;
use shepherd_protocol::UsageQuery;

use crate::render::table;

use super::output::{client, explain, print_data};
use super::{Global, Output, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GroupBy {
    Agent,
    Task,
    Day,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// Sum per agent, task or day.
    #[arg(long, value_enum, default_value = "agent")]
    pub by: GroupBy,
    /// Only runs started in this window (e.g. 7d, 12h) or since an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
}

/// Tokens in a short form: 950, 12.3k, 4.1M.
pub fn tokens(n: u64) -> String {
    match n {
        n if n < 1_000 => n.to_string(),
        n if n < 1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        n => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// `$0.0123`, or `-` while no cost was reported.
pub fn cost(u: &Usage) -> String {
    match u.cost_usd {
        Some(c) if c < 1.0 => format!("${c:.4}"),
        Some(c) => format!("${c:.2}"),
        None => "-".into(),
    }
}

/// One line for a run: `12.3k in · 800 out · $0.0123`.
pub fn summary(u: &Usage) -> String {
    let mut s = format!(
        "{} in · {} out",
        tokens(u.input_tokens),
        tokens(u.output_tokens)
    );
    if u.cache_read_tokens + u.cache_write_tokens > 0 {
        s.push_str(&format!(
            " · cache {} read / {} write",
            tokens(u.cache_read_tokens),
            tokens(u.cache_write_tokens)
        ));
    }
    if u.cost_usd.is_some() {
        s.push_str(&format!(" · {}", cost(u)));
    }
    s
}

pub async fn usage(g: &Global, a: &UsageArgs) -> Result<()> {
    let c = client(g)?;
    let by = match a.by {
        GroupBy::Agent => "agent",
        GroupBy::Task => "task",
        GroupBy::Day => "day",
    };
    let q = UsageQuery {
        group_by: Some(by.into()),
        since: a.since.clone(),
    };
    let v = c.usage(&q).await.map_err(explain)?;
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &v),
        Output::Table if v.runs == 0 => {
            // A table of zeros would read as "it cost nothing", when the
            // agents (scripts, shells) simply report no tokens.
            match &v.since {
                Some(since) => println!("no run started since {since} reported usage"),
                None => println!("no run reported usage"),
            }
        }
        Output::Table => {
            let row = |key: &str, runs: i64, u: &Usage| {
                vec![
                    key.to_owned(),
                    runs.to_string(),
                    tokens(u.input_tokens),
                    tokens(u.output_tokens),
                    tokens(u.cache_read_tokens),
                    tokens(u.cache_write_tokens),
                    cost(u),
                ]
            };
            let mut rows: Vec<Vec<String>> = v
                .groups
                .iter()
                .map(|gr| row(&gr.key, gr.runs, &gr.usage))
                .collect();
            rows.push(row("TOTAL", v.runs, &v.total));
            print!(
                "{}",
                table(
                    &[
                        &by.to_uppercase(),
                        "RUNS",
                        "INPUT",
                        "OUTPUT",
                        "CACHE READ",
                        "CACHE WRITE",
                        "COST"
                    ],
                    &rows
                )
            );
            if let Some(since) = &v.since {
                println!("runs started since {since}");
            }
        }
    }
    Ok(())
}
