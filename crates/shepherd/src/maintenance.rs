//! Background loops of a server node: the lease sweeper, input requests'
//! timeouts and stuck runs, event retention and transcript pruning. Each loop selects on the shutdown token, so shutdown
//! never waits for a timer.

use std::time::Duration;

use shepherd_api::AppState;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;

const DAY_MS: i64 = 24 * 3600 * 1000;

pub fn start(
    tracker: &TaskTracker,
    state: &AppState,
    config: &Config,
    host_id: &str,
    token: CancellationToken,
) {
    // This node says it is there, a few times per heartbeat timeout, so the
    // host list shows it online (and offline once it stops saying so).
    {
        let state = state.clone();
        let token = token.clone();
        let host_id = host_id.to_owned();
        let every =
            (config.heartbeat_timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Err(e) = state.store.host_seen(&host_id).await {
                    tracing::warn!(error = %e, "cannot record that this node is there");
                }
            }
        });
    }
    // Sweeper: expires lapsed claims, ends cancels whose grace is over.
    {
        let state = state.clone();
        let every = config.sweep_interval;
        let token = token.clone();
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
                match state.store.sweep(state.lease_rules()).await {
                    Ok(r) if r.expired + r.cancelled + r.workers_inactive > 0 => {
                        tracing::info!(
                            expired = r.expired,
                            cancelled = r.cancelled,
                            inactive = r.workers_inactive,
                            "sweep"
                        )
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "sweep failed"),
                }
            }
        });
    }
    // Input requests whose agent's `ask_timeout` passed end with its
    // `on_timeout` answer, and quiet runs are reported stuck (checked every
    // second: cheap reads when nothing is due).
    {
        let state = state.clone();
        let token = token.clone();
        let stuck_after: Vec<(String, i64)> = state
            .settings
            .agent_stuck_after
            .iter()
            .map(|(a, d)| (a.clone(), d.as_millis() as i64))
            .collect();
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                match state.store.expire_input_requests().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(expired = n, "input requests timed out"),
                    Err(e) => tracing::warn!(error = %e, "input request expiry failed"),
                }
                if !stuck_after.is_empty() {
                    match state.store.mark_stuck_runs(&stuck_after).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(runs = n, "runs reported stuck"),
                        Err(e) => tracing::warn!(error = %e, "stuck-run check failed"),
                    }
                }
            }
        });
    }
    // Snapshots of every worker, for the worker registry contract's `worker_events` consumers.
    {
        let state = state.clone();
        let every = config.snapshot_interval;
        let token = token.clone();
        tracker.spawn(async move {
            loop {
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Err(e) = state.store.snapshot_workers("periodic").await {
                    tracing::warn!(error = %e, "worker snapshot failed");
                }
            }
        });
    }
    // Retention: events and (optionally) transcripts, checked hourly.
    let events_days = config.event_retention_days;
    let transcript_days = config.transcript_retention_days;
    if events_days > 0 || transcript_days > 0 {
        let state = state.clone();
        tracker.spawn(async move {
            let mut first = true;
            loop {
                let wait = if first {
                    Duration::from_secs(30)
                } else {
                    Duration::from_secs(3600)
                };
                first = false;
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(wait) => {}
                }
                let now = shepherd_store::now_ms();
                if events_days > 0 {
                    match state
                        .store
                        .prune_events(now - events_days as i64 * DAY_MS)
                        .await
                    {
                        Ok(0) => {}
                        Ok(n) => {
                            tracing::info!(removed = n, days = events_days, "pruned old events")
                        }
                        Err(e) => tracing::warn!(error = %e, "event retention failed"),
                    }
                }
                if transcript_days > 0 {
                    match state
                        .store
                        .prune_transcripts(now - transcript_days as i64 * DAY_MS)
                        .await
                    {
                        Ok((0, _)) => {}
                        Ok((n, bytes)) => tracing::info!(runs = n, bytes, "pruned old transcripts"),
                        Err(e) => tracing::warn!(error = %e, "transcript retention failed"),
                    }
                }
            }
        });
    }
}
