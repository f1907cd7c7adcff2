//! Claims: the lease of one task by one worker, with an expiry and a fencing
//! token. Granting, progress under a claim, heartbeats, release, expiry.
//!
//! The database enforces at most one active claim per task (a unique index
//! over `task_id` where `released_at IS NULL`). Every progress report is
//! checked against the active claim: a worker whose claim expired (and was
//! perhaps granted to another) is refused with `claim_stale` and changes
//! nothing. That is the fencing the older queues lacked.

use serde_json::{json, Value};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::{Claim, Task, Worker};
use shepherd_core::time::Millis;
use shepherd_core::workflow::{self, Outcome};
use shepherd_core::Error;

use super::tasks::{self, set_state, task_from_row, workflow_of, Applied, TASK_COLUMNS};
use super::{emit, new_uuid, random_hex, runs, workers};
use crate::params;
use crate::sql::{Db, Row};

/// Timing rules for leases.
#[derive(Debug, Clone, Copy)]
pub struct LeaseRules {
    /// A claim lasts this long unless extended by heartbeats.
    pub ttl_ms: i64,
    /// A worker silent this long loses its claims.
    pub heartbeat_timeout_ms: i64,
    /// Nothing expires before this instant: downtime of the server does not
    /// count against workers (start time + heartbeat timeout).
    pub not_before: Millis,
    /// After a cancel request, the worker has this long to stop.
    pub cancel_grace_ms: i64,
}

const CLAIM_COLUMNS: &str =
    "c.id, c.task_id, c.worker_id, c.run_id, c.purpose, c.claimed_at, c.expires_at, c.released_at, c.release_reason";

fn claim_from_row(r: &Row) -> Result<Claim, Error> {
    Ok(Claim {
        id: r.string(0)?,
        vtid: r.string(1)?,
        worker_id: r.string(2)?,
        run_id: r.string(3)?,
        purpose: r.string(4)?,
        claimed_at: r.i64(5)?,
        expires_at: r.i64(6)?,
        released_at: r.opt_i64(7)?,
        release_reason: r.opt_string(8)?,
    })
}

/// An active claim with its fencing token.
#[derive(Debug, Clone)]
pub struct ActiveClaim {
    pub claim: Claim,
    pub token: String,
}

pub async fn for_task<D: Db>(db: &mut D, vtid: &str) -> Result<Vec<Claim>, Error> {
    let sql = format!(
        "SELECT {CLAIM_COLUMNS} FROM claims c WHERE c.task_id = $1 ORDER BY c.claimed_at, c.id"
    );
    db.query(&sql, params![vtid])
        .await?
        .iter()
        .map(claim_from_row)
        .collect()
}

pub async fn active_for_task<D: Db>(db: &mut D, vtid: &str) -> Result<Option<Claim>, Error> {
    Ok(active_with_token(db, vtid).await?.map(|a| a.claim))
}

pub(crate) async fn active_with_token<D: Db>(
    db: &mut D,
    vtid: &str,
) -> Result<Option<ActiveClaim>, Error> {
    let sql = format!("SELECT {CLAIM_COLUMNS}, c.token FROM claims c WHERE c.task_id = $1 AND c.released_at IS NULL");
    match db.query_opt(&sql, params![vtid]).await? {
        Some(r) => Ok(Some(ActiveClaim {
            claim: claim_from_row(&r)?,
            token: r.string(9)?,
        })),
        None => Ok(None),
    }
}

/// The active claim of a run, for step and status calls fenced by token.
pub(crate) async fn active_for_run<D: Db>(
    db: &mut D,
    run_id: &str,
) -> Result<Option<ActiveClaim>, Error> {
    let sql = format!("SELECT {CLAIM_COLUMNS}, c.token FROM claims c WHERE c.run_id = $1 AND c.released_at IS NULL");
    match db.query_opt(&sql, params![run_id]).await? {
        Some(r) => Ok(Some(ActiveClaim {
            claim: claim_from_row(&r)?,
            token: r.string(9)?,
        })),
        None => Ok(None),
    }
}

fn has_capabilities(worker: &Worker, needed: &[String]) -> Vec<String> {
    needed
        .iter()
        .filter(|c| !worker.capabilities.contains(c))
        .cloned()
        .collect()
}

/// Whether `worker` may take `task` now, ignoring capacity and existing claims.
fn eligibility(worker: &Worker, task: &Task) -> Result<(), Error> {
    let wf = workflow_of(task)?;
    if task.cancel_requested_at.is_some() {
        return Err(Error::conflict(
            "task_cancelled",
            format!("task {} is being cancelled", task.vtid),
        ));
    }
    if !wf.is_claimable(&task.state) {
        let code = if task.state == wf.draft_state {
            "task_not_dispatched"
        } else {
            "task_not_claimable"
        };
        return Err(Error::conflict(
            code,
            format!(
                "task {} is {:?} and cannot be claimed",
                task.vtid, task.state
            ),
        ));
    }
    if let Some(agent) = &task.agent_id {
        if agent != &worker.agent_id {
            return Err(Error::forbidden(
                "wrong_agent",
                format!(
                    "task {} is for agent {agent:?}; this worker is {:?}",
                    task.vtid, worker.agent_id
                ),
            ));
        }
    }
    let mut needed = task.capabilities.clone();
    if wf.awaits_validator(&task.state) {
        needed.push(workflow::VALIDATOR_CAPABILITY.to_owned());
    }
    let missing = has_capabilities(worker, &needed);
    if !missing.is_empty() {
        return Err(Error::forbidden(
            "missing_capabilities",
            format!(
                "worker lacks capabilities {missing:?} required by task {}",
                task.vtid
            ),
        ));
    }
    if wf.awaits_validator(&task.state)
        && task.builder_worker_id.as_deref() == Some(worker.worker_id.as_str())
    {
        return Err(Error::forbidden(
            "validator_is_builder",
            format!(
                "worker {} built task {} and cannot validate it",
                worker.worker_id, task.vtid
            ),
        ));
    }
    Ok(())
}

/// SQL condition selecting tasks waiting in a claimable state of their workflow.
fn claimable_condition() -> String {
    let parts: Vec<String> = workflow::ALL
        .iter()
        .map(|wf| {
            let mut states = vec![format!("'{}'", wf.dispatched_state)];
            if let Some(r) = wf.review_state {
                states.push(format!("'{r}'"));
            }
            format!(
                "(t.workflow = '{}' AND t.state IN ({}))",
                wf.name,
                states.join(", ")
            )
        })
        .collect();
    format!("({})", parts.join(" OR "))
}

/// Tasks the worker may claim now, best first (priority, then age).
pub async fn pending<D: Db>(db: &mut D, worker_id: &str, limit: i64) -> Result<Vec<Task>, Error> {
    let worker = workers::require_live(db, worker_id).await?;
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM tasks t WHERE {} AND t.cancel_requested_at IS NULL \
         AND (t.agent_id IS NULL OR t.agent_id = $1) \
         AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.task_id = t.id AND c.released_at IS NULL) \
         ORDER BY t.priority DESC, t.dispatched_at, t.id LIMIT $2",
        claimable_condition()
    );
    // Capability rules are checked here rather than in SQL; fetch a margin.
    let rows = db
        .query(&sql, params![&worker.agent_id, (limit * 4).max(100)])
        .await?;
    let mut out = Vec::new();
    for r in &rows {
        let t = task_from_row(r)?;
        if eligibility(&worker, &t).is_ok() {
            out.push(t);
            if out.len() as i64 >= limit {
                break;
            }
        }
    }
    Ok(out)
}

/// What a successful claim hands the worker.
#[derive(Debug, Clone)]
pub struct Grant {
    pub task: Task,
    pub claim: Claim,
    pub claim_token: String,
    /// The spec as frozen at dispatch.
    pub spec: String,
}

pub async fn claim<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    vtid: &str,
    rules: &LeaseRules,
) -> Result<Grant, Error> {
    let worker = workers::require_live(db, worker_id).await?;
    let mut task = tasks::require(db, vtid).await?;
    // Sweep what this claim touches: a lapsed lease on this task ends here.
    if let Some(active) = active_with_token(db, vtid).await? {
        expire_if_lapsed(db, now, &active.claim, rules).await?;
        task = tasks::require(db, vtid).await?;
    }
    if let Some(active) = active_for_task(db, vtid).await? {
        let msg = if active.worker_id == worker_id {
            "Task already claimed by this worker"
        } else {
            "Task already claimed by another worker"
        };
        return Err(Error::conflict("already_claimed", msg));
    }
    eligibility(&worker, &task)?;
    if worker.active_claims >= worker.max_concurrent {
        return Err(Error::capacity(
            "worker_at_capacity",
            format!(
                "worker {worker_id} already holds {} of {} claims",
                worker.active_claims, worker.max_concurrent
            ),
        ));
    }
    let agent_limit = db
        .query_opt(
            "SELECT max_concurrent FROM agents WHERE id = $1",
            params![&worker.agent_id],
        )
        .await?
        .map(|r| r.opt_i64(0))
        .transpose()?
        .flatten();
    if let Some(limit) = agent_limit {
        let running = db
            .query_one(
                "SELECT COUNT(*) FROM runs WHERE agent_id = $1 AND status = 'running'",
                params![&worker.agent_id],
            )
            .await?
            .i64(0)?;
        if running >= limit {
            return Err(Error::capacity(
                "agent_at_capacity",
                format!(
                    "agent {} already runs {running} of {limit}",
                    worker.agent_id
                ),
            ));
        }
    }
    let wf = workflow_of(&task)?;
    let purpose = if wf.awaits_validator(&task.state) {
        "validate"
    } else {
        "build"
    };
    let attempt = task.attempts + 1;
    let run_id = runs::create(db, now, &task, &worker, purpose, attempt).await?;
    let claim_id = new_uuid();
    let token = format!("sct_{}", random_hex(16));
    let expires_at = now + rules.ttl_ms;
    let inserted = db
        .execute(
            "INSERT INTO claims (id, task_id, worker_id, run_id, token, purpose, claimed_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            params![&claim_id, vtid, worker_id, &run_id, &token, purpose, now, expires_at],
        )
        .await;
    if let Err(e) = inserted {
        // Another node won the race; the unique index refused this claim.
        if e.code == crate::sql::CONSTRAINT_VIOLATION {
            return Err(Error::conflict(
                "already_claimed",
                "Task already claimed by another worker",
            ));
        }
        return Err(e);
    }
    db.execute(
        "UPDATE tasks SET attempts = $2, updated_at = $3 WHERE id = $1",
        params![vtid, attempt, now],
    )
    .await?;
    task.attempts = attempt;
    if purpose == "build" {
        db.execute(
            "UPDATE tasks SET builder_worker_id = $2 WHERE id = $1",
            params![vtid, worker_id],
        )
        .await?;
        task.builder_worker_id = Some(worker_id.to_owned());
    }
    db.execute(
        "UPDATE workers SET last_activity_at = $2 WHERE id = $1",
        params![worker_id, now],
    )
    .await?;
    let refs = EventRefs::default()
        .task(vtid)
        .worker(worker_id)
        .run(&run_id)
        .agent(&worker.agent_id)
        .channel(task.channel_id.clone());
    emit(
        db,
        now,
        NewEvent::new(
            kind::CLAIM_GRANTED,
            refs.clone(),
            json!({ "claim_id": claim_id, "purpose": purpose, "attempt": attempt, "expires_at": expires_at }),
        ),
    )
    .await?;
    if worker.active_claims == 0 {
        emit(
            db,
            now,
            NewEvent::new(
                kind::WORKER_ACTIVE,
                EventRefs::default()
                    .worker(worker_id)
                    .agent(&worker.agent_id)
                    .session(worker.session_id.clone()),
                json!({ "vtid": vtid, "run_id": run_id }),
            ),
        )
        .await?;
    }
    if purpose == "build" {
        set_state(db, now, &mut task, wf.claimed_state, "claimed", refs).await?;
    }
    let spec = match &task.spec_snapshot_id {
        Some(id) => db
            .query_opt("SELECT spec FROM spec_snapshots WHERE id = $1", params![id])
            .await?
            .map(|r| r.string(0))
            .transpose()?
            .unwrap_or_else(|| task.spec.clone()),
        None => task.spec.clone(),
    };
    Ok(Grant {
        claim: Claim {
            id: claim_id,
            vtid: vtid.to_owned(),
            worker_id: worker_id.to_owned(),
            run_id,
            purpose: purpose.to_owned(),
            claimed_at: now,
            expires_at,
            released_at: None,
            release_reason: None,
        },
        claim_token: token,
        task,
        spec,
    })
}

/// Checks that `worker_id` (with `claim_token`, when given) holds the active
/// claim on `vtid`; otherwise `claim_stale`.
pub(crate) async fn fence<D: Db>(
    db: &mut D,
    worker_id: &str,
    vtid: &str,
    claim_token: Option<&str>,
) -> Result<ActiveClaim, Error> {
    let stale = || {
        Error::conflict(
            "claim_stale",
            format!("worker {worker_id} does not hold the active claim on {vtid} (expired, released or re-granted)"),
        )
    };
    let active = active_with_token(db, vtid).await?.ok_or_else(stale)?;
    if active.claim.worker_id != worker_id {
        return Err(stale());
    }
    if let Some(t) = claim_token {
        if t != active.token {
            return Err(stale());
        }
    }
    Ok(active)
}

/// A progress report from the worker holding the claim.
#[allow(clippy::too_many_arguments)]
pub async fn progress<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    vtid: &str,
    claim_token: Option<&str>,
    event: &str,
    message: Option<String>,
    metadata: Value,
    result: Option<String>,
) -> Result<Applied, Error> {
    workers::require(db, worker_id).await?;
    let task = tasks::require(db, vtid).await?;
    let wf = workflow_of(&task)?;
    if wf.apply(&task.state, event) == Outcome::Unknown {
        return Err(Error::invalid(
            "unknown_event",
            format!("workflow {:?} does not know event {event:?}", wf.name),
        ));
    }
    let active = fence(db, worker_id, vtid, claim_token).await?;
    apply_event(
        db,
        now,
        task,
        Some(active),
        event,
        message,
        metadata,
        result,
    )
    .await
}

/// Applies `event` to the task's workflow, recording it either way, and ends
/// the run and the claim when the event finishes them.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn apply_event<D: Db>(
    db: &mut D,
    now: Millis,
    mut task: Task,
    active: Option<ActiveClaim>,
    event: &str,
    message: Option<String>,
    metadata: Value,
    result: Option<String>,
) -> Result<Applied, Error> {
    let wf = workflow_of(&task)?;
    let mut refs = EventRefs::default()
        .task(&task.vtid)
        .channel(task.channel_id.clone());
    refs.agent_id = task.agent_id.clone();
    let (active, external) = match active {
        Some(a) => (Some(a), false),
        None => (active_with_token(db, &task.vtid).await?, true),
    };
    if let Some(a) = &active {
        refs.worker_id = Some(a.claim.worker_id.clone());
        refs.run_id = Some(a.claim.run_id.clone());
    }
    match wf.apply(&task.state, event) {
        Outcome::Unknown => Err(Error::invalid(
            "unknown_event",
            format!("workflow {:?} does not know event {event:?}", wf.name),
        )),
        Outcome::NotFromHere => {
            let seq = emit(
                db,
                now,
                NewEvent::new(
                    kind::TASK_TRANSITION_REJECTED,
                    refs,
                    json!({ "event": event, "state": task.state, "message": message, "metadata": metadata }),
                ),
            )
            .await?;
            Ok(Applied::Rejected { task, seq })
        }
        Outcome::Move { to, trigger } => {
            let from = task.state.clone();
            let seq = emit(
                db,
                now,
                NewEvent::new(
                    event,
                    refs.clone(),
                    json!({
                        "message": message, "metadata": metadata, "from": from, "to": to,
                        "result": result, "external": external,
                    }),
                ),
            )
            .await?;
            if let Some(a) = &active {
                if !external {
                    db.execute(
                        "UPDATE workers SET last_activity_at = $2 WHERE id = $1",
                        params![&a.claim.worker_id, now],
                    )
                    .await?;
                    db.execute(
                        "UPDATE runs SET last_step_at = $2 WHERE id = $1",
                        params![&a.claim.run_id, now],
                    )
                    .await?;
                }
            }
            set_state(db, now, &mut task, to, event, refs.clone()).await?;
            // Does this event end the run that holds the task?
            let ending = if event == workflow::EXECUTION_FAILED {
                Some(("failed", "failed"))
            } else if event == workflow::EXECUTION_CANCELLED || to == workflow::CANCELLED {
                Some(("cancelled", "cancelled"))
            } else if trigger == Some("validate") {
                Some(("done", "completed; awaiting validation"))
            } else if event == workflow::VALIDATOR_PASSED || event == workflow::VALIDATOR_FAILED {
                Some(("done", "validated"))
            } else if wf.is_final(to) {
                Some(("done", "completed"))
            } else {
                None
            };
            if let (Some((status, reason)), Some(a)) = (ending, &active) {
                release(db, now, &a.claim, reason, status, result.clone(), false).await?;
            }
            if trigger == Some("rework") || trigger == Some("validate") {
                db.execute(
                    "UPDATE tasks SET cancel_requested_at = NULL WHERE id = $1 AND cancel_requested_at IS NULL",
                    params![&task.vtid],
                )
                .await?;
            }
            Ok(Applied::Moved { task, from, seq })
        }
    }
}

/// Ends a claim and its run, once. Returns false if it was already released.
pub(crate) async fn release<D: Db>(
    db: &mut D,
    now: Millis,
    claim: &Claim,
    reason: &str,
    run_status: &str,
    result: Option<String>,
    expired: bool,
) -> Result<bool, Error> {
    let n = db
        .execute(
            "UPDATE claims SET released_at = $2, release_reason = $3 WHERE id = $1 AND released_at IS NULL",
            params![&claim.id, now, reason],
        )
        .await?;
    if n == 0 {
        return Ok(false);
    }
    let worker = workers::require(db, &claim.worker_id).await?;
    let refs = EventRefs::default()
        .task(&claim.vtid)
        .worker(&claim.worker_id)
        .run(&claim.run_id)
        .agent(&worker.agent_id);
    emit(
        db,
        now,
        NewEvent::new(
            if expired {
                kind::CLAIM_EXPIRED
            } else {
                kind::CLAIM_RELEASED
            },
            refs,
            json!({ "claim_id": claim.id, "reason": reason, "purpose": claim.purpose }),
        ),
    )
    .await?;
    runs::finish(db, now, &claim.run_id, run_status, result, reason).await?;
    if worker.active_claims == 0 {
        emit(
            db,
            now,
            NewEvent::new(
                kind::WORKER_IDLE,
                EventRefs::default()
                    .worker(&claim.worker_id)
                    .agent(&worker.agent_id)
                    .session(worker.session_id.clone()),
                json!({ "released": claim.vtid }),
            ),
        )
        .await?;
    }
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
    let silent_for = now - worker.last_heartbeat_at;
    let reason = if worker.status == "terminated" {
        "worker deregistered".to_owned()
    } else if silent_for > rules.heartbeat_timeout_ms {
        format!("no heartbeat for {}s", silent_for / 1000)
    } else if claim.expires_at < now {
        "claim TTL passed without renewal".to_owned()
    } else {
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
    if !release(db, now, claim, reason, "failed", None, true).await? {
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
    let back_to = if task.cancel_requested_at.is_some() {
        workflow::CANCELLED
    } else if claim.purpose == "validate" {
        wf.review_state.unwrap_or(wf.dispatched_state)
    } else {
        wf.dispatched_state
    };
    set_state(db, now, &mut task, back_to, "claim expired", refs).await?;
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
    db.execute(
        "UPDATE workers SET last_heartbeat_at = $2, status = 'active' WHERE id = $1",
        params![worker_id, now],
    )
    .await?;
    if worker.status == "inactive" {
        emit(
            db,
            now,
            NewEvent::new(
                kind::WORKER_REGISTERED,
                EventRefs::default()
                    .worker(worker_id)
                    .agent(&worker.agent_id),
                json!({ "resumed": true }),
            ),
        )
        .await?;
    }
    db.execute(
        "UPDATE claims SET expires_at = $2 WHERE worker_id = $1 AND released_at IS NULL AND expires_at < $2",
        params![worker_id, now + rules.ttl_ms],
    )
    .await?;
    let rows = db
        .query(
            "SELECT c.task_id, c.run_id, c.expires_at, r.cancel_requested_at FROM claims c \
             JOIN runs r ON r.id = c.run_id WHERE c.worker_id = $1 AND c.released_at IS NULL ORDER BY c.claimed_at",
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
        "SELECT {CLAIM_COLUMNS} FROM claims c WHERE c.worker_id = $1 AND c.released_at IS NULL"
    );
    let held = db.query(&sql, params![worker_id]).await?;
    db.execute(
        "UPDATE workers SET status = 'terminated', closed_at = $2 WHERE id = $1",
        params![worker_id, now],
    )
    .await?;
    for r in &held {
        let c = claim_from_row(r)?;
        expire(db, now, &c, "worker deregistered").await?;
    }
    emit(
        db,
        now,
        NewEvent::new(
            kind::WORKER_CLOSED,
            EventRefs::default().worker(worker_id).agent(&worker.agent_id).session(worker.session_id.clone()),
            json!({ "reason": reason.unwrap_or_else(|| "deregistered".into()), "released_claims": held.len() }),
        ),
    )
    .await?;
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
    let sql = format!(
        "SELECT {CLAIM_COLUMNS}, r.cancel_requested_at FROM claims c \
         JOIN workers w ON w.id = c.worker_id JOIN runs r ON r.id = c.run_id \
         WHERE c.released_at IS NULL AND (c.expires_at < $1 OR w.last_heartbeat_at < $2 OR r.cancel_requested_at < $3) \
         ORDER BY c.claimed_at LIMIT 500"
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
                "cancelled",
                None,
                false,
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
                    NewEvent::new(
                        kind::WORKER_INACTIVE,
                        EventRefs::default().worker(&id).agent(r.string(1)?),
                        json!({ "reason": "heartbeats lapsed" }),
                    ),
                )
                .await?;
                report.workers_inactive += 1;
            }
        }
    }
    Ok(report)
}
