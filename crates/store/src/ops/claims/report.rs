//! Reports under a claim: a progress report is fenced against the active
//! claim and its lease, then moves the task through its workflow and ends
//! the run when the report finishes it.

use super::*;

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
    progress_context_where("c.worker_id", "t.id = $1")
}

/// [`progress_context_sql`] for `n` tasks at once (`$2…$(n+1)`), reported
/// on by worker `$1`. The holder's claim count is that worker's, counted
/// once for all rows: it is only used for a report its holder made (any
/// other is refused before it counts), so a row held by another worker
/// may carry a count that is not its holder's.
fn progress_context_many_sql(n: usize) -> String {
    let list = crate::sql::placeholder_list(2, n);
    progress_context_where("$1", &format!("t.id IN ({list})"))
}

/// The context read; `holder` names the worker whose active claims it counts.
fn progress_context_where(holder: &str, filter: &str) -> String {
    format!(
        "SELECT {TASK_COLUMNS}, c.claim_id, c.worker_id, c.id, c.purpose, c.started_at, c.expires_at, c.claim_token, \
         w.last_heartbeat_at, w.status, c.status, c.step_count, c.agent_id, c.channel_id, w.agent_id, \
         (SELECT COUNT(*) FROM runs c2 WHERE c2.worker_id = {holder} AND c2.released_at IS NULL), \
         c.conversation_id, w.last_activity_at, c.pending_input \
         FROM tasks t LEFT JOIN runs c ON c.task_id = t.id AND c.released_at IS NULL \
         LEFT JOIN workers w ON w.id = c.worker_id \
         WHERE {filter}"
    )
}

/// What the reports of one batch (one worker's, run in one transaction,
/// one after another, with nothing else in between: see
/// [`crate::Store::progress_batch`]) read together: the first of them to
/// run reads every report's task, claim and holder in one statement, and
/// each report then takes its own row instead of a round trip of its own.
///
/// A row read at the batch's start is still true when its report runs,
/// except for what the batch's earlier reports changed: a report moves only
/// its own task and run, so a task named twice is read afresh the second
/// time (its row was taken by the first), and the worker's claim count and
/// activity, which every report of the batch shares, are corrected here.
pub(crate) struct BatchReads {
    worker_id: String,
    vtids: Vec<String>,
    state: std::sync::Mutex<BatchState>,
}

#[derive(Default)]
struct BatchState {
    /// `None` until the first report reads; a row is taken by its task's first report.
    rows: Option<std::collections::HashMap<String, Row>>,
    /// Runs the batch's earlier reports ended: the holder's claim count read
    /// at the start is that much too high.
    ended: i64,
    /// An earlier report recorded the worker's activity at this time.
    active_at: Option<Millis>,
}

impl BatchReads {
    pub(crate) fn new(worker_id: &str, vtids: Vec<String>) -> Self {
        BatchReads {
            worker_id: worker_id.to_owned(),
            vtids,
            state: std::sync::Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `vtid`'s task with its holder, from the batch's read when it still
    /// holds it, corrected for what earlier reports of the batch changed.
    async fn task_with_holder<D: Db>(&self, db: &mut D, vtid: &str) -> Result<Context, Error> {
        if self.state().rows.is_none() {
            let rows = db
                .query(
                    &progress_context_many_sql(self.vtids.len()),
                    std::iter::once(&self.worker_id)
                        .chain(&self.vtids)
                        .map(crate::sql::Value::from)
                        .collect(),
                )
                .await?;
            let mut by_vtid = std::collections::HashMap::with_capacity(rows.len());
            for r in rows {
                by_vtid.insert(r.string(0)?, r);
            }
            self.state().rows = Some(by_vtid);
        }
        let (row, ended, active_at) = {
            let mut state = self.state();
            let row = state.rows.as_mut().and_then(|rows| rows.remove(vtid));
            (row, state.ended, state.active_at)
        };
        let Some(row) = row else {
            return task_with_holder(db, vtid).await;
        };
        let (task, mut active) = context_from_row(&row, vtid)?;
        if let Some((_, holder)) = &mut active {
            holder.active_claims -= ended;
            if active_at.is_some() {
                holder.last_activity_at = active_at;
            }
        }
        Ok((task, active))
    }

    /// A report of the batch was applied: what it changed that the rows
    /// read at the start do not show. A move under the claim recorded the
    /// worker's activity (see [`workers::touch`]); a rejected event did not.
    fn applied(&self, now: Millis, applied: &Applied, ended_run: bool) {
        let mut state = self.state();
        state.ended += i64::from(ended_run);
        if matches!(applied, Applied::Moved { .. }) {
            state.active_at = Some(now);
        }
    }
}

/// A task with its active claim and what ending that claim needs.
type Context = (Task, Option<(ActiveClaim, Holder)>);

/// The read [`progress`] makes first, declared so that a writer running
/// the report with other units reads it for all of them at once. A report
/// reads its task (with its run) and, when it is accepted, its own worker;
/// it writes no other task, run or worker. (Ending a run changes its
/// agent's load, which no declared read covers: see [`super::claim_prefetch`].)
pub fn progress_prefetch(worker_id: &str, vtid: &str) -> crate::sql::Prefetch {
    let (task, worker) = (format!("task:{vtid}"), format!("worker:{worker_id}"));
    crate::sql::Prefetch {
        sql: progress_context_sql(),
        params: params![vtid],
        reads: vec![task.clone(), worker.clone()],
        writes: vec![task, worker],
    }
}

/// Reads a task with its active claim and what ending that claim needs.
async fn task_with_holder<D: Db>(db: &mut D, vtid: &str) -> Result<Context, Error> {
    let r = db
        .query_opt(&progress_context_sql(), params![vtid])
        .await?
        .ok_or_else(|| Error::not_found("task_not_found", format!("no task {vtid:?}")))?;
    context_from_row(&r, vtid)
}

/// A row of [`progress_context_sql`].
fn context_from_row(r: &Row, vtid: &str) -> Result<Context, Error> {
    let task = task_from_row(&slice(r, 0, TASK_WIDTH))?;
    let at = TASK_WIDTH;
    let active = match active_from(r, at, vtid)? {
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
                    status: r.word(at + 9)?,
                    step_count: r.i64(at + 10)?,
                    refs,
                    pending_input: r.i64(at + 17)?,
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
pub(crate) async fn progress<D: Db>(
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
    batch: Option<&BatchReads>,
) -> Result<Applied, Error> {
    let (task, active) = match batch {
        Some(batch) => batch.task_with_holder(db, vtid).await?,
        None => task_with_holder(db, vtid).await?,
    };
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
                    Some(t) => crate::ops::claim_token_matches(t, &a.token),
                    // The contract's request shape has no token. It is enough
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
    // What the server later hands to git or to an agent's command line is
    // checked before anything is written.
    let agent_session = crate::ops::conversations::reported_agent_session(&task, &metadata)?;
    let workspace = crate::ops::runs::reported_workspace(&metadata)?;
    // The report is fenced and the task's state known from this
    // transaction's read (taken under the writer's ordering lock): what it
    // writes next only updates rows that read found, and inserts rows keyed
    // by this run, which only ends once.
    db.trust_deferred_writes();
    if let Some(sid) = &agent_session {
        crate::ops::conversations::note_agent_session(db, now, &task, sid).await?;
    }
    if let Some(w) = &workspace {
        crate::ops::runs::record_workspace(db, &fenced.0.claim.run_id, w);
    }
    let (applied, ended_run) = apply_event(
        db,
        now,
        task,
        Some(fenced),
        event,
        message,
        metadata,
        result,
    )
    .await?;
    if let Some(batch) = batch {
        batch.applied(now, &applied, ended_run);
    }
    Ok(applied)
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
/// the run and the claim when the event finishes them; says whether it
/// ended a run.
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
) -> Result<(Applied, bool), Error> {
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
                NewEvent::typed(
                    kind::TASK_TRANSITION_REJECTED,
                    refs,
                    &TransitionRejected {
                        event: event.to_owned(),
                        state: task.state.clone(),
                        message: message.clone(),
                        metadata: metadata.clone(),
                    },
                ),
            )
            .await?;
            Ok((Applied::Rejected { task, seq }, false))
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
                NewEvent::typed(
                    event,
                    refs.clone(),
                    &ProgressRecorded {
                        from: from.to_owned(),
                        to: to.to_owned(),
                        message: message.clone(),
                        metadata: metadata.clone(),
                        result: result.clone(),
                        external,
                    },
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
                        // account of why (the Workers page contract shows the failure's text).
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
                            status,
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
            Ok((Applied::Moved { task, from, seq }, ended))
        }
    }
}
