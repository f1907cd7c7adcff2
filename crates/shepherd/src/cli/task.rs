//! `shepherd task`: add, list, show, dispatch, cancel and watch tasks.

use shepherd_client::{Client, Start};
use shepherd_core::event::kind;
use shepherd_protocol::{
    CancelBody, Claim, CreateTask, EventStreamQuery, RunCompleted, RunStatusChanged, RunStep, Task,
    TaskListQuery, TaskStateChanged, WireEvent, WorkersQuery,
};

use crate::render::{ago, cut, opt, table, when};

use super::args::AddTask;
use super::events::follow;
use super::output::{client, explain, print_data, watch_redraw};
use super::{Global, Output, Result, TaskCommand};

fn task_rows(tasks: &[Task]) -> Vec<Vec<String>> {
    tasks
        .iter()
        .map(|t| {
            vec![
                t.vtid.clone(),
                t.state.clone(),
                t.priority.to_string(),
                opt(&t.agent_id),
                ago(&shepherd_core::time::to_rfc3339(t.created_at)),
                cut(&t.title, 60),
            ]
        })
        .collect()
}

/// Whether any live worker could take the task (its agent and capabilities).
async fn takers(c: &Client, t: &Task) -> Result<bool> {
    let workers = c
        .workers(&WorkersQuery {
            agent_id: t.agent_id.clone(),
            ..Default::default()
        })
        .await
        .map_err(explain)?;
    Ok(workers.workers.iter().any(|w| {
        w.registry_status == "active" && t.capabilities.iter().all(|c| w.capabilities.contains(c))
    }))
}

fn warn_no_takers(t: &Task) {
    eprintln!(
        "warning: no live worker can take {} now (agent {}, needs [{}]); it waits until one registers",
        t.vtid,
        t.agent_id.as_deref().unwrap_or("any"),
        t.capabilities.join(", ")
    );
}

pub async fn task(g: &Global, cmd: &TaskCommand) -> Result<()> {
    let c = client(g)?;
    match cmd {
        TaskCommand::Add(args) => add(g, &c, args).await,
        TaskCommand::List {
            state,
            agent,
            limit,
            watch,
        } => {
            let q = TaskListQuery {
                state: state.clone(),
                agent_id: agent.clone(),
                limit: Some(*limit),
                offset: None,
                ..Default::default()
            };
            list(g, &c, &q, *watch).await
        }
        TaskCommand::Show { vtid } => show(g, &c, vtid).await,
        TaskCommand::Dispatch { vtid } => {
            let t = c.dispatch(vtid).await.map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &t),
                Output::Table => println!("dispatched {} ({})", t.vtid, t.state),
            }
            Ok(())
        }
        TaskCommand::Cancel { vtid, reason } => cancel(g, &c, vtid, reason.clone()).await,
        TaskCommand::Watch { vtid } => watch_task(g, &c, vtid).await,
        TaskCommand::Retry { vtid } => {
            let t = c.retry_task(vtid).await.map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &t),
                Output::Table => println!("{vtid} is {} again: back in the queue", t.state),
            }
            Ok(())
        }
    }
}

/// `shepherd task add`: creates the task, then warns when no live worker
/// could take it (it would wait in the queue for ever).
async fn add(g: &Global, c: &Client, args: &AddTask) -> Result<()> {
    let spec = match (&args.spec, &args.spec_file) {
        (Some(s), _) => s.clone(),
        (None, Some(p)) if p.as_os_str() == "-" => std::io::read_to_string(std::io::stdin())?,
        (None, Some(p)) => {
            std::fs::read_to_string(p).map_err(|e| format!("--spec-file {}: {e}", p.display()))?
        }
        (None, None) => String::new(),
    };
    let body = CreateTask {
        vtid: args.vtid.clone(),
        title: args.title.clone(),
        spec,
        priority: args.priority,
        capabilities: args.capabilities.clone(),
        agent_id: args.agent.clone(),
        external: args.external,
        channel_id: args.channel.clone(),
        workflow: args.workflow.clone(),
        dispatch: Some(!args.draft),
        max_attempts: args.max_attempts,
        retry_backoff: None,
        run_at: args.delay.map(|d| {
            chrono::Utc::now().timestamp_millis()
                + i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2)
        }),
    };
    let t = c.create_task(&body).await.map_err(explain)?;
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &t),
        Output::Table => println!("created {} ({}, {})", t.vtid, t.state, t.workflow),
    }
    if !args.draft && !takers(c, &t).await.unwrap_or(true) {
        warn_no_takers(&t);
    }
    Ok(())
}

/// `shepherd task list`, once or redrawn as tasks change (`--watch`).
async fn list(g: &Global, c: &Client, q: &TaskListQuery, watch: bool) -> Result<()> {
    let draw = move || async move {
        let v = c.tasks(q).await.map_err(explain)?;
        match g.output {
            Output::Json | Output::Yaml => print_data(g.output, &v),
            Output::Table if v.tasks.is_empty() => {
                println!("No tasks. Create one with: shepherd task add \"TITLE\" --spec \"...\"")
            }
            Output::Table => {
                print!(
                    "{}",
                    table(
                        &["VTID", "STATE", "PRIO", "AGENT", "CREATED", "TITLE"],
                        &task_rows(&v.tasks)
                    )
                );
                println!("{} of {} shown", v.tasks.len(), v.total);
            }
        }
        Ok(())
    };
    if watch {
        watch_redraw(c, draw).await
    } else {
        draw().await
    }
}

/// `shepherd task show`: the task, its claims, recent events and spec.
async fn show(g: &Global, c: &Client, vtid: &str) -> Result<()> {
    let (v, _) = c.task(vtid).await.map_err(explain)?;
    if !matches!(g.output, Output::Table) {
        print_data(g.output, &v);
        return Ok(());
    }
    let t = &v.task;
    println!("{}  {}", t.vtid, t.title);
    println!("state:     {} (workflow {})", t.state, t.workflow);
    println!(
        "priority:  {}   agent: {}   attempts: {}",
        t.priority,
        opt(&t.agent_id),
        t.attempts
    );
    println!(
        "created:   {}",
        when(&shepherd_core::time::to_rfc3339(t.created_at))
    );
    if !t.capabilities.is_empty() {
        println!("needs:     {}", t.capabilities.join(", "));
    }
    if !v.claims.is_empty() {
        println!("\nClaims:");
        print!(
            "{}",
            table(
                &["WORKER", "PURPOSE", "RUN", "CLAIMED", "RELEASED BECAUSE"],
                &claim_rows(&v.claims)
            )
        );
    }
    if !v.events.is_empty() {
        println!("\nRecent events:");
        for e in v.events.iter().rev().take(15).rev() {
            println!(
                "  {:>6}  {}  {}",
                e.seq,
                shepherd_core::time::to_rfc3339(e.ts),
                e.kind
            );
        }
    }
    if !t.spec.is_empty() {
        let head: Vec<String> = t.spec.lines().take(20).map(|l| format!("  {l}")).collect();
        println!("\nSpec:\n{}", head.join("\n"));
    }
    Ok(())
}

fn claim_rows(claims: &[Claim]) -> Vec<Vec<String>> {
    claims
        .iter()
        .map(|c| {
            vec![
                c.worker_id.clone(),
                c.purpose.to_string(),
                c.run_id.clone(),
                ago(&shepherd_core::time::to_rfc3339(c.claimed_at)),
                opt(&c.release_reason),
            ]
        })
        .collect()
}

/// `shepherd task cancel`: says whether the task ended at once or a worker
/// is stopping its run.
async fn cancel(g: &Global, c: &Client, vtid: &str, reason: Option<String>) -> Result<()> {
    let v = c
        .cancel(vtid, &CancelBody { reason })
        .await
        .map_err(explain)?;
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &v),
        Output::Table => match &v.pending_worker {
            None => println!("cancelled {vtid}"),
            Some(p) => println!(
                "cancel requested: worker {} is stopping run {} (grace {}s)",
                p.worker_id, p.run_id, p.grace_secs
            ),
        },
    }
    Ok(())
}

/// The end of a watched task, as the command's outcome: done is success,
/// anything else an error with its reason.
fn outcome(vtid: &str, state: &str, reason: Option<&str>) -> Result<()> {
    match state {
        "done" => Ok(()),
        other => Err(format!(
            "task {vtid} ended {other}{}",
            reason.map(|r| format!(": {r}")).unwrap_or_default()
        )
        .into()),
    }
}

async fn watch_task(g: &Global, c: &Client, vtid: &str) -> Result<()> {
    let (task, cursor) = c.task(vtid).await.map_err(explain)?;
    let finals = ["done", "failed", "cancelled"];
    let t = &task.task;
    println!("{}  {}  [{}]", vtid, t.title, t.state);
    if finals.contains(&t.state.as_str()) {
        let reason = task.events.iter().rev().find_map(|e| {
            e.data
                .get("message")
                .and_then(|m| m.as_str())
                .map(String::from)
        });
        return outcome(vtid, &t.state, reason.as_deref());
    }
    if !takers(c, t).await.unwrap_or(true) {
        warn_no_takers(t);
    }
    let query = EventStreamQuery {
        task_id: Some(vtid.to_owned()),
        ..Default::default()
    };
    let mut end: Option<(String, Option<String>)> = None;
    let mut last_reason: Option<String> = None;
    follow(g, &query, Start::After(cursor), |f| {
        let Ok(e) = f.parse::<WireEvent>() else {
            return true;
        };
        let ev = &e.event;
        let data = || ev.data.clone();
        match ev.kind.as_str() {
            kind::TASK_STATE_CHANGED => {
                if let Ok(d) = serde_json::from_value::<TaskStateChanged>(data()) {
                    println!("→ {}  ({})", d.to, d.cause);
                    if finals.contains(&d.to.as_str()) {
                        end = Some((d.to, last_reason.clone()));
                    }
                }
            }
            kind::RUN_STEP => {
                if let Ok(d) = serde_json::from_value::<RunStep>(data()) {
                    println!("  · [{}] {}", d.kind, cut(&d.preview, 100));
                }
            }
            kind::RUN_STATUS => {
                if let Ok(d) = serde_json::from_value::<RunStatusChanged>(data()) {
                    println!("  … {}", d.status);
                }
            }
            kind::RUN_STARTED => println!(
                "run {} started by {}",
                opt(&ev.refs.run_id),
                opt(&ev.refs.worker_id)
            ),
            kind::RUN_COMPLETED => {
                if let Ok(d) = serde_json::from_value::<RunCompleted>(data()) {
                    println!("run {} ended {}", opt(&ev.refs.run_id), d.status);
                    if let Some(r) = d.result.filter(|_| d.status != "done") {
                        last_reason = Some(r);
                    }
                }
            }
            kind::CLAIM_EXPIRED => {
                let reason = ev.data.get("reason").and_then(|r| r.as_str()).unwrap_or("");
                println!("! claim expired: {reason}");
            }
            kind::TASK_CANCEL_REQUESTED => println!("! cancel requested"),
            other if other.contains('.') => {
                if let Some(m) = ev.data.get("message").and_then(|m| m.as_str()) {
                    println!("  {other}: {m}");
                    if other.ends_with(".failed") {
                        last_reason = Some(m.to_owned());
                    }
                }
            }
            _ => {}
        }
        if g.output == Output::Json {
            println!("{}", serde_json::to_string(&e).unwrap_or_default());
        }
        end.is_none()
    })
    .await?;
    match end {
        Some((state, reason)) => outcome(vtid, &state, reason.as_deref()),
        None => Ok(()),
    }
}
