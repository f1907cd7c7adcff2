//! Granting claims: which tasks a worker may take (`pending`), claim by
//! vtid, and claim-next, which picks the best eligible tasks in one read.

use super::*;

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

/// The eligibility query of [`eligible_with`]; its parameters are
/// [`eligible_params`].
fn eligible_sql(dialect: Dialect, worker: &Worker, lock: bool, extra: &str) -> String {
    let can_validate = worker
        .capabilities
        .iter()
        .any(|c| c == workflow::VALIDATOR_CAPABILITY);
    // SQLite without statistics prefers `tasks_queue` for the per-workflow
    // state terms and then sorts every waiting task: name the index.
    let (locking, index) = match dialect {
        Dialect::Postgres if lock => (" FOR UPDATE OF t SKIP LOCKED", ""),
        Dialect::Postgres => ("", ""),
        Dialect::Sqlite => ("", " INDEXED BY tasks_ready"),
    };
    // Two choices here keep the cost of a call near its `limit`, whatever
    // the planner believes about the tables (fresh tables have no
    // statistics, and a wrong guess cost 100-800 ms per call):
    // - the literal `t.state IN (ready states)` lets both databases read
    //   the partial index `tasks_ready` in hand-out order and stop at the
    //   limit, instead of sorting every waiting task;
    // - tasks with an active run are excluded with `NOT IN`, which neither
    //   database turns into a join: the (capacity-bounded) set of active
    //   runs is read once per call and probed as a hash, where an anti-join
    //   was once planned as a full scan of that set per candidate.
    format!(
        "SELECT {TASK_COLUMNS}{extra} FROM tasks t{index} WHERE t.state IN ({}) AND {} \
         AND t.cancel_requested_at IS NULL \
         AND (t.agent_id IS NULL OR t.agent_id = $1) \
         AND {} \
         AND (t.builder_worker_id IS NULL OR t.builder_worker_id <> $4 OR t.state IN ({})) \
         AND t.id NOT IN (SELECT c.task_id FROM runs c WHERE c.released_at IS NULL) \
         AND (t.run_at IS NULL OR t.run_at <= $5) \
         ORDER BY t.priority DESC, t.dispatched_at, t.id LIMIT $2{locking}",
        sql_list(&ready_states()),
        claimable_condition(can_validate),
        capabilities_condition(dialect, "$3"),
        dispatched_states(),
    )
}

fn eligible_params(worker: &Worker, limit: i64, now: Millis) -> Vec<crate::sql::Value> {
    params![
        &worker.agent_id,
        limit,
        crate::ops::to_json(&worker.capabilities),
        &worker.worker_id,
        now
    ]
}

/// How the database runs claim-next's eligibility read for `worker_id`
/// right now, one line per plan line: PostgreSQL's `EXPLAIN ANALYZE`
/// (the query runs, locks included, inside the caller's unit), SQLite's
/// `EXPLAIN QUERY PLAN`. Tests use it to check that a call reads about
/// `limit` tasks, not the whole queue.
#[cfg(feature = "test-hooks")]
pub async fn explain_eligible<D: Db>(
    db: &mut D,
    now: Millis,
    worker_id: &str,
    limit: i64,
) -> Result<Vec<String>, Error> {
    let worker = workers::require_live(db, worker_id).await?;
    let sql = eligible_sql(db.dialect(), &worker, true, "");
    let (explain, column) = match db.dialect() {
        Dialect::Postgres => ("EXPLAIN (ANALYZE, COSTS OFF) ", 0),
        Dialect::Sqlite => ("EXPLAIN QUERY PLAN ", 3),
    };
    let rows = db
        .query(
            &format!("{explain}{sql}"),
            eligible_params(&worker, limit, now),
        )
        .await?;
    rows.iter().map(|r| r.string(column)).collect()
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
    let sql = eligible_sql(db.dialect(), worker, lock, extra);
    let rows = db.query(&sql, eligible_params(worker, limit, now)).await?;
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
    // Asking for work ends the worker registry contract's `spawning`, granted or not.
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
    let mut grants = Vec::with_capacity(candidates.len());
    let mut writes = GrantWrites::default();
    // Each grant's events carry the worker's claim count after it.
    let mut holder = worker;
    for (task, r) in candidates {
        // The agent's limit is reached: what was granted stands.
        if room == Some(0) {
            break;
        }
        let granted = plan_grant(db, now, task, &holder, rules, r.opt_string(0)?, &mut writes)?;
        room = room.map(|n| n - 1);
        holder.active_claims += 1;
        grants.push(granted);
    }
    // Every grant's rows in a few statements, whatever their number.
    writes.write(db, now);
    // The unique index has the last word on "one active claim per task".
    if !grants.is_empty() {
        db.flush().await.map_err(lost_race)?;
    }
    for g in &mut grants {
        g.conversation = crate::ops::conversations::claim_context(db, &g.task).await?;
    }
    Ok(grants)
}

/// The dispatched (builder) states of every workflow, as a SQL list: a
/// worker that built a task may not validate it, but may build it again.
fn dispatched_states() -> String {
    let states: Vec<&str> = workflow::ALL.iter().map(|wf| wf.dispatched_state).collect();
    sql_list(&states)
}

/// Every state in which some workflow's task waits for a worker (its
/// dispatched and review states), without repeats: the states the partial
/// index `tasks_ready` holds (migration 0011 lists them).
pub(crate) fn ready_states() -> Vec<&'static str> {
    let mut states: Vec<&'static str> = Vec::new();
    for wf in workflow::ALL.iter() {
        for s in std::iter::once(wf.dispatched_state).chain(wf.review_state) {
            if !states.contains(&s) {
                states.push(s);
            }
        }
    }
    states
}

/// `'a', 'b'`: states are code constants, never user input.
fn sql_list(states: &[&str]) -> String {
    let quoted: Vec<String> = states.iter().map(|s| format!("'{s}'")).collect();
    quoted.join(", ")
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
    pub conversation: Option<crate::ops::conversations::ClaimConversation>,
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

/// The read a claim makes first, declared so that a writer running it with
/// other units reads it for all of them at once: the task (with its active
/// run and that run's holder) and the claiming worker. A claim writes that
/// task and worker, and, when it ends a lapsed claim first, that claim's
/// holder, which it then reports ([`Db::wrote`]). The agent's load is not
/// among the reads: a claim whose answer came from a prefetch reads the
/// load again itself when the agent has a limit.
pub fn claim_prefetch(worker_id: &str, vtid: &str) -> crate::sql::Prefetch {
    let (task, worker) = (format!("task:{vtid}"), format!("worker:{worker_id}"));
    crate::sql::Prefetch {
        sql: claim_context_sql(),
        params: params![vtid, worker_id],
        reads: vec![task.clone(), worker.clone()],
        writes: vec![task, worker],
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
        if worker.status == WorkerStatus::Terminated {
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
                db.wrote(format!("worker:{}", active.claim.worker_id));
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
        let limit = r.opt_i64(at + 9)?;
        let running = match limit {
            // Read at the transaction's start: units before this one may
            // have started or ended runs of the agent since.
            Some(_) if db.read_was_prefetched() => db
                .query_one(
                    &format!("SELECT {}", runs::running_count_sql("$1")),
                    params![&worker.agent_id],
                )
                .await?
                .i64(0)?,
            _ => r.i64(at + 10)?,
        };
        break (task, worker, limit, running, r.opt_string(at + 11)?);
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
    // Every check passed on what this transaction read, and no other claim
    // can come between: the writer runs units one after another (SQLite's
    // one connection; PostgreSQL's writer holds the log's ordering lock
    // from its first statement). So the grant's writes cannot fail on
    // their own account, and need no savepoint of their own to undo.
    db.trust_deferred_writes();
    let mut writes = GrantWrites::default();
    let mut granted = plan_grant(db, now, task, &worker, rules, snapshot, &mut writes)?;
    writes.write(db, now);
    workers::touch(db, worker_id, worker.last_activity_at, now);
    // The unique index has the last word on "one active claim per task".
    if confirm {
        db.flush().await.map_err(lost_race)?;
    }
    granted.conversation = crate::ops::conversations::claim_context(db, &granted.task).await?;
    Ok(granted)
}

/// The rows a set of grants writes, collected by [`plan_grant`] and
/// written together by [`GrantWrites::write`]: claim-next grants up to 100
/// tasks in one unit, and one INSERT and one UPDATE cost the database far
/// less than 100 of each.
#[derive(Default)]
struct GrantWrites {
    runs: Vec<runs::NewRun>,
    /// Per granted task: its id, attempt count, builder and new state.
    tasks: Vec<(String, i64, Option<String>, String)>,
}

impl GrantWrites {
    /// Writes the runs and the tasks' new states (pipelined). The tasks
    /// first: the runs' INSERT then travels with them (see the PostgreSQL
    /// writer's chains), and its unique index has the last word on "one
    /// active claim per task".
    fn write<D: Db>(self, db: &mut D, now: Millis) {
        match (db.dialect(), self.tasks.len()) {
            (_, 0) => {}
            // SQLite runs statements in-process: one per task costs little,
            // and its VALUES lists have no column names to join on.
            (Dialect::Sqlite, _) | (_, 1) => {
                for (vtid, attempt, builder, state) in &self.tasks {
                    db.defer(
                        "UPDATE tasks SET attempts = $2, builder_worker_id = $3, state = $4, updated_at = $5, run_at = NULL WHERE id = $1",
                        params![vtid, *attempt, builder, state, now],
                    );
                }
            }
            (Dialect::Postgres, n) => {
                let rows: Vec<String> = (0..n)
                    .map(|i| {
                        let k = 2 + i * 4;
                        format!(
                            "(${k}::text, ${}::bigint, ${}::text, ${}::text)",
                            k + 1,
                            k + 2,
                            k + 3
                        )
                    })
                    .collect();
                let sql = format!(
                    "UPDATE tasks SET attempts = v.attempts, builder_worker_id = v.builder, \
                     state = v.state, updated_at = $1, run_at = NULL \
                     FROM (VALUES {}) AS v (id, attempts, builder, state) WHERE tasks.id = v.id",
                    rows.join(", ")
                );
                let mut values = params![now];
                for (vtid, attempt, builder, state) in self.tasks {
                    values.extend(params![vtid, attempt, builder, state]);
                }
                db.defer(&sql, values);
            }
        }
        runs::insert_runs(db, self.runs);
    }
}

/// Grants `task` to `worker`, whose right to it the caller has checked:
/// records the events now and adds the run row (which is the claim) and
/// the task's new state to `writes`, for the caller to write. The grant's
/// `conversation` is left for the caller to read once the writes are
/// confirmed.
fn plan_grant<D: Db>(
    db: &mut D,
    now: Millis,
    mut task: Task,
    worker: &Worker,
    rules: &LeaseRules,
    snapshot: Option<String>,
    writes: &mut GrantWrites,
) -> Result<Grant, Error> {
    let (vtid, worker_id) = (task.vtid.clone(), worker.worker_id.as_str());
    let vtid = vtid.as_str();
    let wf = workflow_of(&task)?;
    let purpose = if wf.awaits_validator(&task.state) {
        ClaimPurpose::Validate
    } else {
        ClaimPurpose::Build
    };
    let attempt = task.attempts + 1;
    let claim_id = new_uuid();
    let token = format!("sct_{}", random_hex(16));
    let expires_at = now + rules.ttl_ms;
    let lease = runs::Lease {
        claim_id: &claim_id,
        // Stored hashed, like worker tokens: a database dump or backup
        // does not hand out the right to report on a running claim.
        token_hash: crate::ops::hash_token(&token),
        expires_at,
    };
    let run = runs::new_run(db, now, &task, worker, purpose, attempt, lease);
    let run_id = run.id.clone();
    writes.runs.push(run);
    let builder = if purpose == ClaimPurpose::Build {
        Some(worker_id.to_owned())
    } else {
        task.builder_worker_id.clone()
    };
    let new_state = if purpose == ClaimPurpose::Build {
        wf.claimed_state
    } else {
        task.state.as_str()
    }
    .to_owned();
    writes
        .tasks
        .push((vtid.to_owned(), attempt, builder.clone(), new_state.clone()));
    let refs = EventRefs::default()
        .task(vtid)
        .worker(worker_id)
        .run(&run_id)
        .agent(&worker.agent_id)
        .channel(task.channel_id.clone())
        .conversation(task.conversation_id.clone());
    // The worker's claim count after the grant: the worker registry contract's `worker_active`
    // is this event when it is 1 (no event of its own is stored).
    emit(
        db,
        now,
        NewEvent::typed(
            kind::CLAIM_GRANTED,
            refs.clone(),
            &ClaimGranted {
                claim_id: claim_id.clone(),
                attempt,
                expires_at,
                purpose,
                worker_active_claims: Some(worker.active_claims + 1),
            },
        ),
    );
    if new_state != task.state {
        let mut r = refs.clone();
        r.agent_id = task.agent_id.clone();
        emit(
            db,
            now,
            NewEvent::typed(
                kind::TASK_STATE_CHANGED,
                r,
                &TaskStateChanged {
                    from: task.state.clone(),
                    to: new_state.to_owned(),
                    cause: "claimed".to_owned(),
                },
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
            purpose,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The eligibility query can read `tasks_ready` only if its state list
    /// covers every ready state: a workflow added without a migration that
    /// widens the index would silently fall back to sorting the whole queue.
    #[test]
    fn the_ready_index_holds_every_ready_state() {
        let expected = format!("WHERE state IN ({})", sql_list(&ready_states()));
        for (backend, sql) in [
            (
                "postgres",
                include_str!("../../postgres/0011_tasks_ready.sql"),
            ),
            ("sqlite", include_str!("../../sqlite/0011_tasks_ready.sql")),
        ] {
            assert!(
                sql.contains(&expected),
                "{backend}/0011_tasks_ready.sql does not say `{expected}`"
            );
        }
    }
}
