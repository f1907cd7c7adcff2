//! What both cycle-cost examples do: register workers, queue their tasks,
//! and run claim+complete cycles, each worker through its own tasks.

use serde_json::json;
use shepherd_store::{Applied, LeaseRules, NewTask, Registration, Store};

pub type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub const RULES: LeaseRules = LeaseRules {
    ttl_ms: 3_600_000,
    heartbeat_timeout_ms: 300_000,
    not_before: 0,
    cancel_grace_ms: 30_000,
};

/// Registers `workers` workers (`w0`, `w1`, …) and `per` dispatched tasks
/// for each (`T-<worker>-<n>`).
pub async fn seed(store: &Store, workers: usize, per: usize) -> R<()> {
    for w in 0..workers {
        store
            .register_worker(Registration {
                worker_id: Some(format!("w{w}")),
                agent_id: "default".into(),
                worker_type: "builtin".into(),
                max_concurrent: 1,
                ..Default::default()
            })
            .await?;
        for n in 0..per {
            store
                .create_task(NewTask {
                    vtid: Some(format!("T-{w}-{n}")),
                    title: "t".into(),
                    spec: "s".into(),
                    workflow: Some("simple".into()),
                    dispatch: true,
                    ..Default::default()
                })
                .await?;
        }
    }
    Ok(())
}

/// Each worker claims and completes its `per` tasks, all workers at once;
/// returns how long that took.
pub async fn run_cycles(store: &Store, workers: usize, per: usize) -> R<std::time::Duration> {
    let t0 = std::time::Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            for n in 0..per {
                let vtid = format!("T-{w}-{n}");
                let worker = format!("w{w}");
                let g = store.claim_task(&worker, &vtid, RULES).await?;
                let a = store
                    .progress(
                        &worker,
                        &vtid,
                        Some(g.claim_token),
                        "worker.execution.completed",
                        None,
                        json!({}),
                        None,
                        RULES,
                    )
                    .await?;
                if !matches!(a, Applied::Moved { .. }) {
                    return Err(format!("{vtid} not moved").into());
                }
            }
            R::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(t0.elapsed())
}
