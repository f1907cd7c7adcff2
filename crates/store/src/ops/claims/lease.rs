//! A claim's lease over time: heartbeats extend it, a release or an expiry
//! ends it (with its run), deregistration gives up every claim, and the
//! sweep expires what lapsed.

use super::*;

/// Ends a claim and its run, once. Returns false if it was already released.
/// With `holder` (read in this same transaction, so the claim is known to be
/// active) nothing needs to be read again.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release<D: Db>(
    db: &mut D,
    now: Millis,
    claim: &Claim,
    reason: &str,
    run_status: RunStatus,
    result: Option<String>,
    expired: bool,
    holder: Option<Holder>,
) -> Result<bool, Error> {
    const RELEASE: &str =
        "UPDATE runs SET released_at = $2, release_reason = $3 WHERE id = $1 AND released_at IS NULL";
    let (agent_id, remaining, run) = match holder {
        // Known active in this transaction: the run's final update releases
        // the claim too (one row, one statement).
        Some(h) => (h.agent_id, h.active_claims - 1, Some(h.run)),
        None => {
            // Conditional, so that two sweepers (or a sweeper and a
            // heartbeat) end a claim once.
            if db
                .execute(RELEASE, params![&claim.run_id, now, reason])
                .await?
                == 0
            {
                return Ok(false);
            }
            let w = workers::require(db, &claim.worker_id).await?;
            (w.agent_id, w.active_claims, None)
        }
    };
    let refs = EventRefs::default()
        .task(&claim.vtid)
        .worker(&claim.worker_id)
        .run(&claim.run_id)
        .agent(&agent_id);
    // The worker's claim count after the release: the worker registry contract's `worker_idle`
    // is this event when it is 0 (no event of its own is stored).
    emit(
        db,
        now,
        NewEvent::typed(
            if expired {
                kind::CLAIM_EXPIRED
            } else {
                kind::CLAIM_RELEASED
            },
            refs,
            &ClaimReleased {
                claim_id: claim.id.clone(),
                purpose: claim.purpose,
                reason: reason.to_owned(),
                worker_active_claims: Some(remaining),
            },
        ),
    );
    runs::finish(db, now, &claim.run_id, run_status, result, reason, run).await?;
    Ok(true)
}

/// Expires `claim` if its lease lapsed; the task goes back to the queue.
async fn expire_if_lapsed<D: Db>(
    db: &mut D,
    now: Millis,
    claim: &Claim,
    rules: &LeaseRules,
) -> Result<bool, Error> {
    if now < rules.not_before {
        return Ok(false);
    }
    let worker = workers::require(db, &claim.worker_id).await?;
    let Some(reason) = lapse_reason(
        now,
        rules,
        claim,
        worker.last_heartbeat_at,
        worker.status.as_str(),
    ) else {
        return Ok(false);
    };
    expire(db, now, claim, &reason).await
}

/// Ends a claim whose worker lost it, and puts the task back in the queue.
pub(crate) async fn expire<D: Db>(
    db: &mut D,
    now: Millis,
    claim: &Claim,
    reason: &str,
) -> Result<bool, Error> {
    if !release(db, now, claim, reason, RunStatus::Failed, None, true, None).await? {
        return Ok(false);
    }
    let mut task = tasks::require(db, &claim.vtid).await?;
    let wf = workflow_of(&task)?;
    if wf.is_final(&task.state) {
        return Ok(true);
    }
    let refs = EventRefs::default()
        .worker(&claim.worker_id)
        .run(&claim.run_id);
    if task.cancel_requested_at.is_some() {
        set_state(
            db,
            now,
            &mut task,
            workflow::CANCELLED,
            "claim expired",
            refs,
        )
        .await?;
        return Ok(true);
    }
    // A lost claim is a failed attempt for a task with a retry policy.
    let decision = retries::decide(&task, true, true, now);
    let to = retries::state_after(wf, claim, decision, retries::back_to(wf, claim));
    set_state(db, now, &mut task, to, "claim expired", refs).await?;
    retries::record(
        db,
        now,
        &mut task,
        claim,
        &format!("claim lost: {reason}"),
        decision,
    )
    .await?;
    Ok(true)
}

/// A claim as reported back to its worker on each heartbeat.
#[derive(Debug, Clone)]
pub struct HeldClaim {
    pub vtid: String,
    pub run_id: String,
    pub expires_at: Millis,
    pub cancel_requested: bool,
}

/// Records a heartbeat, extends the worker's claims, and reports them.
pub async fn heartbeat<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    rules: &LeaseRules,
) -> Result<(Worker, Vec<HeldClaim>), Error> {
    let worker = workers::require_live(db, worker_id).await?;
    db.defer(
        "UPDATE workers SET last_heartbeat_at = $2, status = 'active' WHERE id = $1",
        params![worker_id, now],
    );
    // A heartbeat is hearing from the worker: it is no longer `spawning`.
    db.defer(workers::TOUCH_ACTIVITY, params![worker_id, now]);
    if worker.status == WorkerStatus::Inactive {
        emit(
            db,
            now,
            NewEvent::typed(
                kind::WORKER_REGISTERED,
                EventRefs::default()
                    .worker(worker_id)
                    .agent(&worker.agent_id),
                &WorkerRegisteredData::Resumed(WorkerResumed { resumed: true }),
            ),
        );
    }
    // A lapsed lease is lapsed whoever touches it first: a heartbeat that
    // arrives after the timeout (or the TTL) but before the sweeper ends the
    // claim, as the sweeper would have, instead of reviving it. Whether a
    // late worker keeps its work must not depend on sweep timing.
    let sql = format!(
        "SELECT {CLAIM_COLUMNS} FROM runs c WHERE c.worker_id = $1 AND c.released_at IS NULL"
    );
    for r in &db.query(&sql, params![worker_id]).await? {
        let claim = claim_from_row(r)?;
        if let Some(reason) = lapse_reason(
            now,
            rules,
            &claim,
            worker.last_heartbeat_at,
            worker.status.as_str(),
        ) {
            expire(db, now, &claim, &reason).await?;
        }
    }
    db.defer(
        "UPDATE runs SET expires_at = $2 WHERE worker_id = $1 AND released_at IS NULL AND expires_at < $2",
        params![worker_id, now + rules.ttl_ms],
    );
    let rows = db
        .query(
            "SELECT c.task_id, c.id, c.expires_at, c.cancel_requested_at FROM runs c \
             WHERE c.worker_id = $1 AND c.released_at IS NULL ORDER BY c.started_at, c.id",
            params![worker_id],
        )
        .await?;
    let claims = rows
        .iter()
        .map(|r| {
            Ok(HeldClaim {
                vtid: r.string(0)?,
                run_id: r.string(1)?,
                expires_at: r.i64(2)?,
                cancel_requested: r.opt_i64(3)?.is_some(),
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let worker = workers::require(db, worker_id).await?;
    Ok((worker, claims))
}

/// A worker leaves: its claims are released (tasks back to the queue) and
/// its token stops working.
pub async fn deregister<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    reason: Option<String>,
) -> Result<Worker, Error> {
    let worker = workers::require_live(db, worker_id).await?;
    let sql = format!(
        "SELECT {CLAIM_COLUMNS} FROM runs c WHERE c.worker_id = $1 AND c.released_at IS NULL"
    );
    let held = db.query(&sql, params![worker_id]).await?;
    db.defer(
        "UPDATE workers SET status = 'terminated', closed_at = $2 WHERE id = $1",
        params![worker_id, now],
    );
    for r in &held {
        let c = claim_from_row(r)?;
        expire(db, now, &c, "worker deregistered").await?;
    }
    emit(
        db,
        now,
        NewEvent::typed(
            kind::WORKER_CLOSED,
            EventRefs::default()
                .worker(worker_id)
                .agent(&worker.agent_id)
                .session(worker.session_id.clone()),
            &WorkerClosed {
                reason: reason.unwrap_or_else(|| "deregistered".into()),
                released_claims: Some(held.len() as i64),
            },
        ),
    );
    workers::require(db, worker_id).await
}

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub expired: u64,
    pub cancelled: u64,
    pub workers_inactive: u64,
}

/// Expires lapsed claims, ends cancelled runs whose grace period is over and
/// marks silent workers inactive. Safe to run on several nodes at once: each
/// release is conditional on the claim still being active.
pub async fn sweep<D: Db>(
    db: &mut D,
    now: Millis,
    rules: &LeaseRules,
) -> Result<SweepReport, Error> {
    let mut report = SweepReport::default();
    // Candidates only: `lapse_reason` decides. A claim granted after its
    // holder's last heartbeat is silent only since its grant (its run's
    // start), so a quiet worker's fresh claim is not selected (and, at the
    // LIMIT, does not crowd out claims that did lapse).
    let sql = format!(
        "SELECT {CLAIM_COLUMNS}, c.cancel_requested_at FROM runs c \
         JOIN workers w ON w.id = c.worker_id \
         WHERE c.released_at IS NULL AND (c.expires_at < $1 \
         OR (w.last_heartbeat_at < $2 AND c.started_at < $2) OR c.cancel_requested_at < $3) \
         ORDER BY c.started_at, c.id LIMIT 500"
    );
    let rows = db
        .query(
            &sql,
            params![
                now,
                now - rules.heartbeat_timeout_ms,
                now - rules.cancel_grace_ms
            ],
        )
        .await?;
    for r in &rows {
        let c = claim_from_row(r)?;
        let cancel_at = r.opt_i64(9)?;
        if matches!(cancel_at, Some(t) if t < now - rules.cancel_grace_ms) {
            if release(
                db,
                now,
                &c,
                "cancel grace period ended",
                RunStatus::Cancelled,
                None,
                false,
                None,
            )
            .await?
            {
                let mut task = tasks::require(db, &c.vtid).await?;
                let refs = EventRefs::default().worker(&c.worker_id).run(&c.run_id);
                set_state(db, now, &mut task, workflow::CANCELLED, "cancelled", refs).await?;
                report.cancelled += 1;
            }
            continue;
        }
        if expire_if_lapsed(db, now, &c, rules).await? {
            report.expired += 1;
        }
    }
    if now >= rules.not_before {
        let silent = db
            .query(
                "SELECT id, agent_id FROM workers WHERE status = 'active' AND last_heartbeat_at < $1",
                params![now - rules.heartbeat_timeout_ms],
            )
            .await?;
        for r in &silent {
            let id = r.string(0)?;
            let n = db
                .execute(
                    "UPDATE workers SET status = 'inactive' WHERE id = $1 AND status = 'active'",
                    params![&id],
                )
                .await?;
            if n > 0 {
                emit(
                    db,
                    now,
                    NewEvent::typed(
                        kind::WORKER_INACTIVE,
                        EventRefs::default().worker(&id).agent(r.string(1)?),
                        &WorkerInactive {
                            reason: "heartbeats lapsed".to_owned(),
                        },
                    ),
                );
                report.workers_inactive += 1;
            }
        }
    }
    Ok(report)
}
