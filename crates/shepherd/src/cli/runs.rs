//! `shepherd runs`: list runs and show one with its transcript.

use serde::Serialize;
use shepherd_protocol::{IndexedStep, RunDetail, RunsQuery, StepsQuery};

use crate::render::{ago, cut, table, when};

use super::output::{client, explain, print_data, watch_redraw};
use super::{Global, Output, Result, RunsCommand};

/// `runs show -o json`: the run and its steps.
#[derive(Serialize)]
struct RunWithSteps {
    run: RunDetail,
    steps: Vec<IndexedStep>,
}

pub async fn runs(g: &Global, cmd: &RunsCommand) -> Result<()> {
    let c = client(g)?;
    match cmd {
        RunsCommand::List {
            agent,
            status,
            vtid,
            search,
            limit,
            watch,
        } => {
            let q = RunsQuery {
                agent_id: agent.clone(),
                status: status.clone(),
                vtid: vtid.clone(),
                q: search.clone(),
                limit: Some(*limit),
                offset: None,
                ..Default::default()
            };
            let (c, q) = (&c, &q);
            let draw = move || async move {
                let v = c.runs(q).await.map_err(explain)?;
                match g.output {
                    Output::Json | Output::Yaml => print_data(g.output, &v),
                    Output::Table => {
                        let rows: Vec<Vec<String>> = v
                            .runs
                            .iter()
                            .map(|r| {
                                let live = match (&r.live_status, r.status.as_str()) {
                                    (Some(l), "running") => l.as_str(),
                                    _ => "",
                                };
                                // Once pruned, the steps are gone: say so rather
                                // than show a count nobody can read.
                                let steps = if r.step_count > 0
                                    && !r.has_transcript
                                    && r.status != "running"
                                {
                                    "pruned".to_owned()
                                } else {
                                    r.step_count.to_string()
                                };
                                vec![
                                    r.id.clone(),
                                    r.status.to_string(),
                                    r.vtid.clone(),
                                    r.agent_id.clone(),
                                    ago(&shepherd_core::time::to_rfc3339(r.started_at)),
                                    steps,
                                    r.usage.as_ref().map(super::usage::cost).unwrap_or_default(),
                                    cut(&format!("{} {live}", r.task), 50),
                                ]
                            })
                            .collect();
                        print!(
                            "{}",
                            table(
                                &[
                                    "RUN", "STATUS", "TASK", "AGENT", "STARTED", "STEPS", "COST",
                                    "TITLE"
                                ],
                                &rows
                            )
                        );
                        println!("{} of {} shown", v.runs.len(), v.total);
                    }
                }
                Ok(())
            };
            if *watch {
                watch_redraw(c, draw).await?;
            } else {
                draw().await?;
            }
        }
        RunsCommand::Show { id, full } => {
            let id = resolve_run(&c, id).await?;
            let (v, _) = c.run(&id).await.map_err(explain)?;
            let steps = c
                .steps(&id, &StepsQuery::default())
                .await
                .map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(
                    g.output,
                    &RunWithSteps {
                        run: v,
                        steps: steps.steps,
                    },
                ),
                Output::Table => {
                    let d = &v.detail;
                    println!("run {}  ({})", d.id, d.status);
                    println!("task:    {}  {}", d.vtid, d.task);
                    println!("agent:   {} · {}", d.agent_id, d.worker_type);
                    println!("started: {}", when(&d.started_at));
                    if let Some(end) = &d.completed_at {
                        println!("ended:   {}", when(end));
                    }
                    if let Some(r) = &d.result {
                        println!("result:  {}", cut(r, 200));
                    }
                    if let Some(u) = &v.run.usage {
                        println!("usage:   {}", super::usage::summary(u));
                    }
                    if let Some(w) = &v.run.workspace {
                        println!(
                            "branch:  {} (from {} at {}{})",
                            w.branch,
                            w.base,
                            w.base_commit.chars().take(12).collect::<String>(),
                            w.head
                                .as_ref()
                                .map(|h| format!(
                                    ", head {}",
                                    h.chars().take(12).collect::<String>()
                                ))
                                .unwrap_or_default()
                        );
                    }
                    if let Some(l) = d.live_status.as_ref().filter(|_| d.status == "running") {
                        println!("now:     {l}");
                    }
                    if steps.steps.is_empty() && v.run.step_count > 0 {
                        println!(
                            "\nTranscript: pruned ({} steps were recorded; `shepherd prune` removed them)",
                            v.run.step_count
                        );
                    } else {
                        println!("\nTranscript ({} steps):", steps.steps.len());
                        for st in &steps.steps {
                            print!("{}", crate::render::step(&st.step, *full, 12));
                        }
                    }
                }
            }
        }
        RunsCommand::Diff { id } => return diff(g, id).await,
    }
    Ok(())
}

/// Accepts a unique prefix of a run id, as `git` and `docker` do.
pub async fn resolve_run(c: &shepherd_client::Client, id: &str) -> Result<String> {
    match c.run(id).await {
        Ok(_) => return Ok(id.to_owned()),
        Err(e) if e.status() == Some(404) && id.len() >= 4 => {}
        Err(e) => return Err(explain(e)),
    }
    let mut matches = Vec::new();
    let mut offset = 0;
    loop {
        let page = c
            .runs(&RunsQuery {
                limit: Some(500),
                offset: Some(offset),
                ..Default::default()
            })
            .await
            .map_err(explain)?;
        let n = page.runs.len() as i64;
        matches.extend(
            page.runs
                .into_iter()
                .map(|r| r.id)
                .filter(|r| r.starts_with(id)),
        );
        offset += n;
        if n < 500 || offset >= page.total || matches.len() > 1 {
            break;
        }
    }
    super::output::the_one_match(id, "run", &matches)
}

/// `shepherd runs diff RUN`: the run's branch against the commit it started
/// from, printed whole (no pager), coloured only when stdout is a terminal.
pub async fn diff(g: &Global, id: &str) -> Result<()> {
    let c = client(g)?;
    let id = resolve_run(&c, id).await?;
    let d = c.run_diff(&id).await.map_err(explain)?;
    if g.output != Output::Table {
        print_data(g.output, &d);
        return Ok(());
    }
    use std::io::{IsTerminal, Write};
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let mut out = std::io::stdout().lock();
    let w = &d.workspace;
    let short = |c: &str| c.chars().take(12).collect::<String>();
    writeln!(
        out,
        "# run {}  branch {}  {}..{} (base {})",
        d.run_id,
        w.branch,
        short(&w.base_commit),
        short(&d.head),
        w.base
    )?;
    if d.diff.is_empty() {
        writeln!(out, "# no changes")?;
        return Ok(());
    }
    for line in d.diff.lines() {
        let paint = if !colour {
            None
        } else if line.starts_with("+++") || line.starts_with("---") || line.starts_with("diff ") {
            Some("1")
        } else if line.starts_with('+') {
            Some("32")
        } else if line.starts_with('-') {
            Some("31")
        } else if line.starts_with("@@") {
            Some("36")
        } else {
            None
        };
        match paint {
            Some(code) => writeln!(out, "\x1b[{code}m{line}\x1b[0m")?,
            None => writeln!(out, "{line}")?,
        }
    }
    Ok(())
}
