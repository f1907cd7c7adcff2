//! Claims: the lease of one task by one worker, with an expiry and a fencing
//! token. Granting, progress under a claim, heartbeats, release, expiry.
//!
//! The database enforces at most one active claim per task (a unique index
//! over `task_id` where `released_at IS NULL`). Every progress report is
//! checked against the active claim: a worker whose claim expired (and was
//! perhaps granted to another) is refused with `claim_stale` and changes
//! nothing. That is the fencing the older queues lacked.

use serde_json::{json, Value};
use shepherd_core::claiming;
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::{Claim, Task, Worker};
use shepherd_core::status::RunStatus;
use shepherd_core::time::Millis;
use shepherd_core::workflow::{self, Outcome};
use shepherd_core::Error;

use super::tasks::{self, set_state, task_from_row, workflow_of, Applied, TASK_COLUMNS};
use super::workers::WORKER_COLUMNS;
use super::{emit, emit_returning, new_uuid, random_hex, retries, runs, workers};
use crate::params;
use crate::sql::Appended;
use crate::sql::{Db, Dialect, Row};

pub use shepherd_core::claiming::LeaseRules;

/// A claim's columns, read from its run row (aliased `c`): a run is one
/// claim attempt, and the claim's time is the run's start.
const CLAIM_COLUMNS: &str =
    "c.claim_id, c.task_id, c.worker_id, c.id, c.purpose, c.started_at, c.expires_at, c.released_at, c.release_reason";

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
        "SELECT {CLAIM_COLUMNS} FROM runs c WHERE c.task_id = $1 AND c.claim_id IS NOT NULL \
         ORDER BY c.started_at, c.claim_id"
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
    let sql = format!("SELECT {CLAIM_COLUMNS}, c.claim_token FROM runs c WHERE c.task_id = $1 AND c.released_at IS NULL");
    match db.query_opt(&sql, params![vtid]).await? {
        Some(r) => Ok(Some(ActiveClaim {
            claim: claim_from_row(&r)?,
            token: r.string(9)?,
        })),
        None => Ok(None),
    }
}

/// The active claim of a run, for step and status calls fenced by token,
/// with its holder's last heartbeat and registry status (whether its lease
/// lapsed).
pub(crate) async fn active_for_run<D: Db>(
    db: &mut D,
    run_id: &str,
) -> Result<Option<(ActiveClaim, i64, String)>, Error> {
    let sql = format!(
        "SELECT {CLAIM_COLUMNS}, c.claim_token, w.last_heartbeat_at, w.status FROM runs c \
         JOIN workers w ON w.id = c.worker_id WHERE c.id = $1 AND c.released_at IS NULL"
    );
    match db.query_opt(&sql, params![run_id]).await? {
        Some(r) => Ok(Some((
            ActiveClaim {
                claim: claim_from_row(&r)?,
                token: r.string(9)?,
            },
            r.i64(10)?,
            r.string(11)?,
        ))),
        None => Ok(None),
    }
}

/// Whether `worker` may take `task` now, ignoring capacity and existing
/// claims (the rule itself: [`claiming::eligibility`]).
fn eligibility(worker: &Worker, task: &Task, now: Millis) -> Result<(), Error> {
    claiming::eligibility(workflow_of(task)?, worker, task, now)
}

/// Whether `worker` may take `task` now (the rules of a claim, without
/// capacity): what a worker token may read of a task it does not hold.
/// A delayed task the worker could take once it is due counts too.
pub fn may_take(worker: &Worker, task: &Task) -> bool {
    eligibility(worker, task, task.run_at.unwrap_or(0).max(crate::now_ms())).is_ok()
}

/// SQL condition selecting tasks waiting in a claimable state of their
/// workflow; review states only for a worker that can validate.
fn claimable_condition(can_validate: bool) -> String {
    let parts: Vec<String> = workflow::ALL
        .iter()
        .map(|wf| {
            let mut states = vec![format!("'{}'", wf.dispatched_state)];
            if let (Some(r), true) = (wf.review_state, can_validate) {
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

/// SQL condition: every capability the task needs (a JSON array) is among
/// `$caps` (the worker's, a JSON array). Done in the query, not after it:
/// a page of tasks this worker cannot take must not hide those it can.
fn capabilities_condition(dialect: Dialect, caps: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!(
            "NOT EXISTS (SELECT 1 FROM json_each(t.capabilities) need \
             WHERE need.value NOT IN (SELECT have.value FROM json_each({caps}) have))"
        ),
        Dialect::Postgres => format!("t.capabilities::jsonb <@ ({caps}::text)::jsonb"),
    }
}

/// Tasks the worker may claim now, best first (priority, then age), and
/// whether this is the first the server hears from the worker since it
/// registered (the caller then records it: see [`workers::mark_heard`]).
pub async fn pending<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    limit: i64,
) -> Result<(bool, Vec<Task>), Error> {
    let worker = workers::require_live(db, worker_id).await?;
    let first = worker.last_activity_at.is_none();
    Ok((first, eligible(db, now, &worker, limit, false).await?))
}

/// The `limit` best tasks `worker` may claim now. With `lock` (PostgreSQL
/// only) the rows are locked for the rest of the transaction and rows
/// another transaction holds are skipped: concurrent claimers on other
/// nodes each take different tasks instead of queueing behind one another.
async fn eligible<D: Db>(
    db: &mut D,
    now: Millis,
    worker: &Worker,
    limit: i64,
    lock: bool,
) -> Result<Vec<Task>, Error> {
    Ok(eligible_with(db, now, worker, limit, lock, "")
        .await?
        .into_iter()
        .map(|(task, _)| task)
        .collect())
}

/// [`eligible`], each task with the row's columns after the task's (`extra`:
/// more columns of `tasks t` or of scalar subqueries; `$1` is the worker's
/// agent).
async fn eligible_with<D: Db>(
    db: &mut D,
    now: Millis,
    worker: &Worker,
    limit: i64,
    lock: bool,
    extra: &str,
) -> Result<Vec<(Task, Row)>, Error> {
    let can_validate = worker
        .capabilities
        .iter()
        .any(|c| c == workflow::VALIDATOR_CAPABILITY);
    let locking = if lock && db.dialect() == Dialect::Postgres {
        " FOR UPDATE OF t SKIP LOCKED"
    } else {
        ""
    };
    let sql = format!(
        "SELECT {TASK_COLUMNS}{extra} FROM tasks t WHERE {} AND t.cancel_requested_at IS NULL \
         AND (t.agent_id IS NULL OR t.agent_id = $1) \
         AND {} \
         AND (t.builder_worker_id IS NULL OR t.builder_worker_id <> $4 OR t.state IN ({})) \
         AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.task_id = t.id AND c.released_at IS NULL) \
         AND (t.run_at IS NULL OR t.run_at <= $5) \
         ORDER BY t.priority DESC, t.dispatched_at, t.id LIMIT $2{locking}",
        claimable_condition(can_validate),
        capabilities_condition(db.dialect(), "$3"),
        dispatched_states(),
    );
    let rows = db
        .query(
            &sql,
            params![
                &worker.agent_id,
                limit,
                super::to_json(&worker.capabilities),
                &worker.worker_id,
                now
            ],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let t = task_from_row(&slice(r, 0, TASK_WIDTH))?;
        // The query applies every rule; this is a guard, not a filter.
        if eligibility(worker, &t, now).is_ok() {
            out.push((t, slice(r, TASK_WIDTH, r.0.len() - TASK_WIDTH)));
        }
    }
    Ok(out)
}

/// Claims up to `max` of the best tasks `worker_id` may take now (priority,
/// then age; agent, capabilities and the validator rule respected), in one
/// unit of work: a worker needs no list-then-claim round trips, and two
/// workers never race for the same task. `max` must be between 1 and the
/// worker's free capacity. Fewer (or no) grants when fewer tasks are
/// eligible or the agent's limit is reached.
pub async fn claim_next<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    max: i64,
    rules: &LeaseRules,
) -> Result<Vec<Grant>, Error> {
    let worker = workers::require_live(db, worker_id).await?;
    // Asking for work ends seed 001's `spawning`, granted or not.
    workers::touch(db, worker_id, worker.last_activity_at, now);
    let free = (worker.max_concurrent - worker.active_claims).max(0);
    if max < 1 {
        return Err(Error::invalid(
            "invalid_max",
            format!("max must be at least 1 (got {max})"),
        ));
    }
    if max > free {
        return Err(Error::invalid(
            "max_above_capacity",
            format!(
                "max {max} exceeds worker {worker_id}'s free capacity {free} ({} of {} claims held)",
                worker.active_claims, worker.max_concurrent
            ),
        ));
    }
    // One read finds the tasks (locked on PostgreSQL, so concurrent
    // claimers skip them), their dispatched specs and the agent's limit and
    // load; every grant after it is a pipelined write. Granting task by
    // task through `claim` would read the same rules again once per task,
    // one round trip each, while the unit holds the writer.
    let running = runs::running_count_sql("$1");
    let extra = format!(
        ", (SELECT s.spec FROM spec_snapshots s WHERE s.id = t.spec_snapshot_id), \
         (SELECT a.max_concurrent FROM agents a WHERE a.id = $1), \
         CASE WHEN (SELECT a.max_concurrent FROM agents a WHERE a.id = $1) IS NULL THEN 0 ELSE {running} END"
    );
    let candidates = eligible_with(db, now, &worker, max, true, &extra).await?;
    let mut room = match candidates.first() {
        Some((_, r)) => match r.opt_i64(1)? {
            Some(limit) => Some((limit - r.i64(2)?).max(0)),
            None => None,
        },
        None => None,
    };
    let mut worker = worker;
    let mut grants = Vec::with_capacity(candidates.len());
    for (task, r) in candidates {
        // The agent's limit is reached: what was granted stands.
        if room == Some(0) {
            break;
        }
        let granted = grant(db, now, task, &worker, rules, r.opt_string(0)?).await?;
        room = room.map(|n| n - 1);
        worker.active_claims += 1;
        worker.last_activity_at = Some(now);
        grants.push(granted);
    }
    // The unique index has the last word on "one active claim per task".
    if !grants.is_empty() {
        db.flush().await.map_err(lost_race)?;
    }
    for g in &mut grants {
        g.conversation = super::conversations::claim_context(db, &g.task).await?;
    }
    Ok(grants)
}

/// The dispatched (builder) states of every workflow, as a SQL list: a
/// worker that built a task may not validate it, but may build it again.
fn dispatched_states() -> String {
    let states: Vec<String> = workflow::ALL
        .iter()
        .map(|wf| format!("'{}'", wf.dispatched_state))
        .collect();
    states.join(", ")
}

/// What a successful claim hands the worker.
#[derive(Debug, Clone)]
pub struct Grant {
    pub task: Task,
    pub claim: Claim,
    pub claim_token: String,
    /// The spec as frozen at dispatch.
    pub spec: String,
    /// For a conversation's task: what the worker needs to continue it.
    pub conversation: Option<super::conversations::ClaimConversation>,
}

/// Everything a claim decision needs, read in one statement: the task, the
/// worker, the task's active claim (and its holder's liveness), the agent's
/// limit and load (counted only for an agent with a limit), and the
/// dispatched spec.
fn claim_context_sql() -> String {
    let running = runs::running_count_sql("w.agent_id");
    format!(
        "SELECT {TASK_COLUMNS}, {WORKER_COLUMNS}, \
         c.claim_id, c.worker_id, c.id, c.purpose, c.started_at, c.expires_at, c.claim_token, \
         cw.last_heartbeat_at, cw.status, a.max_concurrent, \
         CASE WHEN a.max_concurrent IS NULL THEN 0 ELSE {running} END, \
         s.spec \
         FROM tasks t JOIN workers w ON w.id = $2 \
         LEFT JOIN runs c ON c.task_id = t.id AND c.released_at IS NULL \
         LEFT JOIN workers cw ON cw.id = c.worker_id \
         LEFT JOIN agents a ON a.id = w.agent_id \
         LEFT JOIN spec_snapshots s ON s.id = t.spec_snapshot_id \
         WHERE t.id = $1"
    )
}

/// Columns `from..from+len` of a row, as a row of their own.
fn slice(r: &Row, from: usize, len: usize) -> Row {
    Row(r.0.iter().skip(from).take(len).cloned().collect())
}

const TASK_WIDTH: usize = 21;
const WORKER_WIDTH: usize = 16;

/// An active claim with its holder's last heartbeat and registry status.
type ActiveWithHolder = (ActiveClaim, Option<i64>, Option<String>);

/// An active claim read together with its holder's liveness.
fn active_from(r: &Row, at: usize, vtid: &str) -> Result<Option<ActiveWithHolder>, Error> {
    let Some(id) = r.opt_string(at)? else {
        return Ok(None);
    };
    let claim = Claim {
        id,
        vtid: vtid.to_owned(),
        worker_id: r.string(at + 1)?,
        run_id: r.string(at + 2)?,
        purpose: r.string(at + 3)?,
        claimed_at: r.i64(at + 4)?,
        expires_at: r.i64(at + 5)?,
        released_at: None,
        release_reason: None,
    };
    let token = r.string(at + 6)?;
    Ok(Some((
        ActiveClaim { claim, token },
        r.opt_i64(at + 7)?,
        r.opt_string(at + 8)?,
    )))
}

/// Why a lease lapsed, if it did. The one rule for every path that touches
/// a claim (claim, heartbeat, report, sweep): a lapsed lease is lapsed
/// whoever touches it first, so no outcome depends on sweep timing.
pub(crate) fn lapse_reason(
    now: Millis,
    rules: &LeaseRules,
    claim: &Claim,
    last_heartbeat: i64,
    status: &str,
) -> Option<String> {
    claiming::lapse(now, rules, claim.expires_at, last_heartbeat, status).map(|l| l.to_string())
}

/// Claims `vtid` for `worker_id` inside a larger unit of work: the grant's
/// writes are confirmed before it returns (a lost race for the task's one
/// active claim is `already_claimed` here, not a failure of the whole unit).
pub async fn claim<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    vtid: &str,
    rules: &LeaseRules,
) -> Result<Grant, Error> {
    claim_inner(db, now, worker_id, vtid, rules, true).await
}

/// Claims `vtid` as a unit of work of its own. Where writes are pipelined
/// (PostgreSQL) the unit does not wait for its own writes: they are
/// confirmed with the commit, one round trip fewer per claim. The unit then
/// ends in `constraint_violation` if another claim won the race for the
/// task; the caller reports that as `already_claimed` ([`lost_race`]).
pub async fn claim_alone<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    vtid: &str,
    rules: &LeaseRules,
) -> Result<Grant, Error> {
    let pipelined = db.appended_later().is_some();
    claim_inner(db, now, worker_id, vtid, rules, !pipelined).await
}

/// What a claim's unit of work answers when the database's unique index on
/// active claims refused its grant: another claim won the race.
pub fn lost_race(e: Error) -> Error {
    if e.code == crate::sql::CONSTRAINT_VIOLATION {
        Error::conflict("already_claimed", "Task already claimed by another worker")
    } else {
        e
    }
}

async fn claim_inner<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    vtid: &str,
    rules: &LeaseRules,
    confirm: bool,
) -> Result<Grant, Error> {
    let sql = claim_context_sql();
    let mut swept = false;
    let (task, worker, agent_limit, agent_running, snapshot) = loop {
        let Some(r) = db.query_opt(&sql, params![vtid, worker_id]).await? else {
            // Say which of the two is missing.
            workers::require_live(db, worker_id).await?;
            tasks::require(db, vtid).await?;
            return Err(Error::internal("claim context vanished"));
        };
        let task = task_from_row(&slice(&r, 0, TASK_WIDTH))?;
        let worker = workers::worker_from_row(&slice(&r, TASK_WIDTH, WORKER_WIDTH))?;
        if worker.status == "terminated" {
            return Err(Error::conflict(
                "worker_terminated",
                format!("worker {worker_id:?} has deregistered; register again"),
            ));
        }
        let at = TASK_WIDTH + WORKER_WIDTH;
        if let Some((active, heartbeat, status)) = active_from(&r, at, vtid)? {
            // Sweep what this claim touches: a lapsed lease on this task ends here.
            let lapsed = lapse_reason(
                now,
                rules,
                &active.claim,
                heartbeat.unwrap_or(0),
                status.as_deref().unwrap_or(""),
            );
            if let (Some(reason), false) = (lapsed, swept) {
                expire(db, now, &active.claim, &reason).await?;
                swept = true;
                continue;
            }
            let msg = if active.claim.worker_id == worker_id {
                "Task already claimed by this worker"
            } else {
                "Task already claimed by another worker"
            };
            return Err(Error::conflict("already_claimed", msg));
        }
        break (
            task,
            worker,
            r.opt_i64(at + 9)?,
            r.i64(at + 10)?,
            r.opt_string(at + 11)?,
        );
    };
    eligibility(&worker, &task, now)?;
    if worker.active_claims >= worker.max_concurrent {
        return Err(Error::capacity(
            "worker_at_capacity",
            format!(
                "worker {worker_id} already holds {} of {} claims",
                worker.active_claims, worker.max_concurrent
            ),
        ));
    }
    if let Some(limit) = agent_limit {
        if agent_running >= limit {
            return Err(Error::capacity(
                "agent_at_capacity",
                format!(
                    "agent {} already runs {agent_running} of {limit}",
                    worker.agent_id
                ),
            ));
        }
    }
    if !confirm {
        // Every check passed on what this transaction read, and the writer
        // holds the log's ordering lock from its first statement, so no
        // other claim can come between: the grant's writes cannot fail on
        // their own account.
        db.trust_deferred_writes();
    }
    let mut granted = grant(db, now, task, &worker, rules, snapshot).await?;
    // The unique index has the last word on "one active claim per task".
    if confirm {
        db.flush().await.map_err(lost_race)?;
    }
    granted.conversation = super::conversations::claim_context(db, &granted.task).await?;
    Ok(granted)
}

/// Grants `task` to `worker`, whose right to it the caller has checked:
/// the run row (which is the claim), the task's new state and the events,
/// all pipelined. The grant's `conversation` is left for the caller to read
/// once the writes are confirmed.
async fn grant<D: Db>(
    db: &mut D,
    now: Millis,
    mut task: Task,
    worker: &Worker,
    rules: &LeaseRules,
    snapshot: Option<String>,
) -> Result<Grant, Error> {
    let (vtid, worker_id) = (task.vtid.clone(), worker.worker_id.as_str());
    let vtid = vtid.as_str();
    let wf = workflow_of(&task)?;
    let purpose = if wf.awaits_validator(&task.state) {
        "validate"
    } else {
        "build"
    };
    let attempt = task.attempts + 1;
    let claim_id = new_uuid();
    let token = format!("sct_{}", random_hex(16));
    let expires_at = now + rules.ttl_ms;
    let lease = runs::Lease {
        claim_id: &claim_id,
        // Stored hashed, like worker tokens: a database dump or backup
        // does not hand out the right to report on a running claim.
        token_hash: super::hash_token(&token),
        expires_at,
    };
    let run_id = runs::create(db, now, &task, worker, purpose, attempt, lease).await?;
    let builder = if purpose == "build" {
        Some(worker_id.to_owned())
    } else {
        task.builder_worker_id.clone()
    };
    let new_state = if purpose == "build" {
        wf.claimed_state
    } else {
        task.state.as_str()
    }
    .to_owned();
    db.defer(
        "UPDATE tasks SET attempts = $2, builder_worker_id = $3, state = $4, updated_at = $5, run_at = NULL WHERE id = $1",
        params![vtid, attempt, &builder, &new_state, now],
    );
    workers::touch(db, worker_id, worker.last_activity_at, now);
    let refs = EventRefs::default()
        .task(vtid)
        .worker(worker_id)
        .run(&run_id)
        .agent(&worker.agent_id)
        .channel(task.channel_id.clone())
        .conversation(task.conversation_id.clone());
    // The worker's claim count after the grant: seed 001's `worker_active`
    // is this event when it is 1 (no event of its own is stored).
    emit(
        db,
        now,
        NewEvent::new(
            kind::CLAIM_GRANTED,
            refs.clone(),
            json!({
                "claim_id": claim_id, "purpose": purpose, "attempt": attempt, "expires_at": expires_at,
                "worker_active_claims": worker.active_claims + 1,
            }),
        ),
    );
    if new_state != task.state {
        let mut r = refs.clone();
        r.agent_id = task.agent_id.clone();
        emit(
            db,
            now,
            NewEvent::new(
                kind::TASK_STATE_CHANGED,
                r,
                json!({ "from": task.state, "to": new_state, "cause": "claimed" }),
            ),
        );
    }
    task.attempts = attempt;
    task.run_at = None;
    task.builder_worker_id = builder;
    task.state = new_state;
    task.updated_at = now;
    let spec = snapshot.unwrap_or_else(|| task.spec.clone());
    Ok(Grant {
        conversation: None,
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

/// What ending a claim needs to know about its holder and its run, when the
/// caller read it in the same transaction.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub agent_id: String,
    /// Claims the worker holds, this one included.
    pub active_claims: i64,
    /// The worker's last recorded activity.
    pub last_activity_at: Option<Millis>,
    /// The worker's last heartbeat and registry status: whether its lease lapsed.
    pub last_heartbeat_at: i64,
    pub status: String,
    pub run: runs::RunInfo,
}

/// The task with its active claim, holder and run, in one statement.
fn progress_context_sql() -> String {
    format!(
        "SELECT {TASK_COLUMNS}, c.claim_id, c.worker_id, c.id, c.purpose, c.started_at, c.expires_at, c.claim_token, \
         w.last_heartbeat_at, w.status, c.status, c.step_count, c.agent_id, c.channel_id, w.agent_id, \
         (SELECT COUNT(*) FROM runs c2 WHERE c2.worker_id = c.worker_id AND c2.released_at IS NULL), \
         c.conversation_id, w.last_activity_at \
         FROM tasks t LEFT JOIN runs c ON c.task_id = t.id AND c.released_at IS NULL \
         LEFT JOIN workers w ON w.id = c.worker_id \
         WHERE t.id = $1"
    )
}

/// Reads a task with its active claim and what ending that claim needs.
async fn task_with_holder<D: Db>(
    db: &mut D,
    vtid: &str,
) -> Result<(Task, Option<(ActiveClaim, Holder)>), Error> {
    let r = db
        .query_opt(&progress_context_sql(), params![vtid])
        .await?
        .ok_or_else(|| Error::not_found("task_not_found", format!("no task {vtid:?}")))?;
    let task = task_from_row(&slice(&r, 0, TASK_WIDTH))?;
    let at = TASK_WIDTH;
    let active = match active_from(&r, at, vtid)? {
        None => None,
        Some((active, heartbeat, status)) => {
            let run_channel = r.opt_string(at + 12)?;
            let run_agent = r.string(at + 11)?;
            let refs = EventRefs::default()
                .run(&active.claim.run_id)
                .task(vtid)
                .worker(&active.claim.worker_id)
                .agent(&run_agent)
                .channel(run_channel)
                .conversation(r.opt_string(at + 15)?);
            let holder = Holder {
                run: runs::RunInfo {
                    status: r.string(at + 9)?,
                    step_count: r.i64(at + 10)?,
                    refs,
                },
                agent_id: r.string(at + 13)?,
                active_claims: r.i64(at + 14)?,
                last_activity_at: r.opt_i64(at + 16)?,
                last_heartbeat_at: heartbeat.unwrap_or(0),
                status: status.unwrap_or_default(),
            };
            Some((active, holder))
        }
    };
    Ok((task, active))
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
    rules: &LeaseRules,
) -> Result<Applied, Error> {
    let (task, active) = task_with_holder(db, vtid).await?;
    let wf = workflow_of(&task)?;
    if wf.apply(&task.state, event) == Outcome::Unknown {
        return Err(Error::invalid(
            "unknown_event",
            format!("workflow {:?} does not know event {event:?}", wf.name),
        ));
    }
    let stale = || {
        Error::conflict(
            "claim_stale",
            format!("worker {worker_id} does not hold the active claim on {vtid} (expired, released or re-granted)"),
        )
    };
    let fenced = match active {
        Some((a, h))
            if a.claim.worker_id == worker_id
                && match claim_token {
                    Some(t) => super::claim_token_matches(t, &a.token),
                    // The seed's request shape has no token. It is enough
                    // only while the worker has held one claim on the task:
                    // after a claim lapsed and was re-granted to the same
                    // worker, a token-less report could come from its old
                    // attempt, so it must name the claim it means.
                    None => claims_held_on(db, worker_id, vtid).await? == 1,
                } =>
        {
            (a, h)
        }
        _ => {
            // Unknown workers get a clearer answer than "stale".
            workers::require(db, worker_id).await?;
            return Err(stale());
        }
    };
    // The holder's own lease lapsed (not yet ended by a sweep, heartbeat or
    // claim): its report is refused as the sweeper would have refused it.
    // Nothing is written here, the refusal rolls back; whoever touches the
    // claim next (sweep, heartbeat, claim) ends it under the same rule.
    if let Some(reason) = lapse_reason(
        now,
        rules,
        &fenced.0.claim,
        fenced.1.last_heartbeat_at,
        &fenced.1.status,
    ) {
        return Err(Error::conflict(
            "claim_stale",
            format!(
                "the claim of worker {worker_id} on {vtid} lapsed ({reason}); claim the task again"
            ),
        ));
    }
    // The report is fenced and the task's state known from this
    // transaction's read (taken under the writer's ordering lock): what it
    // writes next only updates rows that read found, and inserts rows keyed
    // by this run, which only ends once.
    db.trust_deferred_writes();
    super::conversations::note_agent_session(db, now, &task, &metadata).await?;
    super::runs::record_workspace(db, &fenced.0.claim.run_id, &metadata);
    apply_event(
        db,
        now,
        task,
        Some(fenced),
        event,
        message,
        metadata,
        result,
    )
    .await
}

/// How many claims (active or not) `worker_id` has held on `vtid`.
async fn claims_held_on<D: Db>(db: &mut D, worker_id: &str, vtid: &str) -> Result<i64, Error> {
    db.query_one(
        "SELECT COUNT(*) FROM runs WHERE task_id = $1 AND worker_id = $2 AND claim_id IS NOT NULL",
        params![vtid, worker_id],
    )
    .await?
    .i64(0)
}

/// The `seq` an [`Applied`] reports: the first event its unit of work
/// appended. Where the backend learns `seq`s only as the database answers
/// (PostgreSQL), the unit does not wait for it: the event is sent with the
/// unit's other writes, and [`settle_seq`] fills the number in once the unit
/// has committed. That saves a round trip on every progress report.
async fn emit_first<D: Db>(db: &mut D, now: Millis, e: NewEvent) -> Result<i64, Error> {
    if db.appended_later().is_some() {
        emit(db, now, e);
        Ok(SEQ_AFTER_COMMIT)
    } else {
        emit_returning(db, now, e).await
    }
}

/// Placeholder for a `seq` known only after commit (never a real `seq`).
const SEQ_AFTER_COMMIT: i64 = -1;

/// Fills in the `seq` of an [`Applied`] whose event was appended without
/// waiting (see [`emit_first`]), from what its committed unit appended.
pub(crate) fn settle_seq(mut applied: Applied, appended: Option<Appended>) -> Applied {
    let slot = match &mut applied {
        Applied::Moved { seq, .. } | Applied::Rejected { seq, .. } => seq,
    };
    if *slot == SEQ_AFTER_COMMIT {
        if let Some(appended) = appended {
            let events = appended.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(first) = events.iter().map(|e| e.seq).min() {
                *slot = first;
            }
        }
    }
    applied
}

/// Applies `event` to the task's workflow, recording it either way, and ends
/// the run and the claim when the event finishes them.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn apply_event<D: Db>(
    db: &mut D,
    now: Millis,
    mut task: Task,
    active: Option<(ActiveClaim, Holder)>,
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
        None => match task_with_holder(db, &task.vtid).await?.1 {
            Some(a) => (Some(a), true),
            None => (None, true),
        },
    };
    if let Some((a, _)) = &active {
        refs.worker_id = Some(a.claim.worker_id.clone());
        refs.run_id = Some(a.claim.run_id.clone());
    }
    match wf.apply(&task.state, event) {
        Outcome::Unknown => Err(Error::invalid(
            "unknown_event",
            format!("workflow {:?} does not know event {event:?}", wf.name),
        )),
        Outcome::NotFromHere => {
            let seq = emit_first(
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
            // A failed attempt may be retried instead of ending the task.
            let retry = match &active {
                Some((a, _)) if event == workflow::EXECUTION_FAILED => {
                    let retryable = retries::retryable(&metadata);
                    let d = retries::decide(&task, false, retryable, now);
                    Some((a.claim.clone(), d))
                }
                _ => None,
            };
            let to = match &retry {
                Some((c, d)) => retries::state_after(wf, c, *d, to),
                None => to,
            };
            let seq = emit_first(
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
            set_state(db, now, &mut task, to, event, refs.clone()).await?;
            if let Some((c, d)) = &retry {
                let reason = result
                    .clone()
                    .or_else(|| message.clone())
                    .unwrap_or_default();
                retries::record(db, now, &mut task, c, &reason, *d).await?;
            }
            // Does this event end the run that holds the task?
            let ending = claiming::run_ending(wf, event, to, trigger);
            let mut ended = false;
            if let Some((a, holder)) = active {
                if !external {
                    workers::touch(db, &a.claim.worker_id, holder.last_activity_at, now);
                }
                match ending {
                    Some(claiming::RunEnding { status, reason }) => {
                        ended = true;
                        // A run that did not succeed keeps the worker's own
                        // account of why (seed 000 shows the failure's text).
                        let result = result.clone().or_else(|| {
                            (status != RunStatus::Done)
                                .then(|| message.clone().filter(|m| !m.is_empty()))
                                .flatten()
                        });
                        release(
                            db,
                            now,
                            &a.claim,
                            reason,
                            status.as_str(),
                            result,
                            false,
                            Some(holder),
                        )
                        .await?;
                    }
                    None if !external => {
                        db.defer(
                            "UPDATE runs SET last_step_at = $2 WHERE id = $1",
                            params![&a.claim.run_id, now],
                        );
                    }
                    None => {}
                }
            }
            // A run that ends while a cancel is pending (its worker finished
            // instead of stopping) must not leave the task waiting where
            // nobody can move it: a task being cancelled is not claimable,
            // and the sweeper only ends cancels that a worker still holds.
            if ended && task.cancel_requested_at.is_some() && !wf.is_final(&task.state) {
                set_state(db, now, &mut task, workflow::CANCELLED, "cancelled", refs).await?;
            }
            Ok(Applied::Moved { task, from, seq })
        }
    }
}

/// Ends a claim and its run, once. Returns false if it was already released.
/// With `holder` (read in this same transaction, so the claim is known to be
/// active) nothing needs to be read again.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release<D: Db>(
    db: &mut D,
    now: Millis,
    claim: &Claim,
    reason: &str,
    run_status: &str,
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
    // The worker's claim count after the release: seed 001's `worker_idle`
    // is this event when it is 0 (no event of its own is stored).
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
            json!({
                "claim_id": claim.id, "reason": reason, "purpose": claim.purpose,
                "worker_active_claims": remaining,
            }),
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
    let Some(reason) = lapse_reason(now, rules, claim, worker.last_heartbeat_at, &worker.status)
    else {
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
    if !release(db, now, claim, reason, "failed", None, true, None).await? {
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
        if let Some(reason) =
            lapse_reason(now, rules, &claim, worker.last_heartbeat_at, &worker.status)
        {
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
        NewEvent::new(
            kind::WORKER_CLOSED,
            EventRefs::default()
                .worker(worker_id)
                .agent(&worker.agent_id)
                .session(worker.session_id.clone()),
            json!({ "reason": reason.unwrap_or_else(|| "deregistered".into()), "released_claims": held.len() }),
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
    let sql = format!(
        "SELECT {CLAIM_COLUMNS}, c.cancel_requested_at FROM runs c \
         JOIN workers w ON w.id = c.worker_id \
         WHERE c.released_at IS NULL AND (c.expires_at < $1 OR w.last_heartbeat_at < $2 OR c.cancel_requested_at < $3) \
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
                "cancelled",
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
                    NewEvent::new(
                        kind::WORKER_INACTIVE,
                        EventRefs::default().worker(&id).agent(r.string(1)?),
                        json!({ "reason": "heartbeats lapsed" }),
                    ),
                );
                report.workers_inactive += 1;
            }
        }
    }
    Ok(report)
}
