//! Tasks: creation, dispatch, listing, cancel, and events from outside any
//! worker that drive a task's workflow.

use serde_json::Value;
use shepherd_core::event::payloads::{
    CancelRequested, ChannelChanged, TaskCreated, TaskDispatched, TaskStateChanged,
};
use shepherd_core::event::{kind, Event, EventFilter, EventRefs, NewEvent};
use shepherd_core::model::{Claim, Task};
use shepherd_core::retry::{self, RetryBackoff, RetryPolicy};
use shepherd_core::time::Millis;
use shepherd_core::workflow::{self, Workflow};
use shepherd_core::Error;

use super::{claims, emit, new_uuid, to_json, validate_id};
use crate::params;
use crate::sql::{Db, Row, Value as SqlValue};

/// What a client asks for when creating a task.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    pub vtid: Option<String>,
    pub title: String,
    pub spec: String,
    pub priority: i64,
    pub capabilities: Vec<String>,
    pub agent_id: Option<String>,
    pub channel_id: Option<String>,
    pub workflow: Option<String>,
    pub dispatch: bool,
    /// Set only by conversations: the conversation whose message this answers.
    pub conversation_id: Option<String>,
    /// Attempts in all; without it (and without `retry_backoff`) the task
    /// takes its agent's default policy, if the agent has one.
    pub max_attempts: Option<i64>,
    pub retry_backoff: Option<RetryBackoff>,
    /// Not claimable before this instant (a delayed task).
    pub run_at: Option<Millis>,
}

pub(crate) const TASK_COLUMNS: &str = "t.id, t.title, t.spec, t.priority, t.capabilities, t.agent_id, t.channel_id, \
    t.workflow, t.state, t.spec_snapshot_id, t.dispatched_at, t.builder_worker_id, t.cancel_requested_at, \
    t.attempts, t.created_at, t.updated_at, t.conversation_id, \
    t.max_attempts, t.retry_backoff, t.run_at, t.failures";

pub(crate) fn task_from_row(r: &Row) -> Result<Task, Error> {
    Ok(Task {
        vtid: r.string(0)?,
        title: r.string(1)?,
        spec: r.string(2)?,
        priority: r.i64(3)?,
        capabilities: r.json(4)?,
        agent_id: r.opt_string(5)?,
        channel_id: r.opt_string(6)?,
        workflow: r.string(7)?,
        state: r.string(8)?,
        spec_snapshot_id: r.opt_string(9)?,
        dispatched_at: r.opt_i64(10)?,
        builder_worker_id: r.opt_string(11)?,
        cancel_requested_at: r.opt_i64(12)?,
        attempts: r.i64(13)?,
        created_at: r.i64(14)?,
        updated_at: r.i64(15)?,
        conversation_id: r.opt_string(16)?,
        max_attempts: r.opt_i64(17)?,
        retry_backoff: opt_json(r, 18)?,
        run_at: r.opt_i64(19)?,
        failures: opt_json(r, 20)?.unwrap_or_default(),
    })
}

/// A nullable JSON text column.
fn opt_json<T: serde::de::DeserializeOwned>(r: &Row, idx: usize) -> Result<Option<T>, Error> {
    match r.opt_string(idx)? {
        None => Ok(None),
        Some(_) => r.json(idx).map(Some),
    }
}

pub fn workflow_of(task: &Task) -> Result<&'static Workflow, Error> {
    workflow::by_name(&task.workflow).ok_or_else(|| {
        Error::internal(format!(
            "task {} has unknown workflow {:?}",
            task.vtid, task.workflow
        ))
    })
}

pub async fn get<D: Db>(db: &mut D, vtid: &str) -> Result<Option<Task>, Error> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks t WHERE t.id = $1");
    match db.query_opt(&sql, params![vtid]).await? {
        Some(r) => Ok(Some(task_from_row(&r)?)),
        None => Ok(None),
    }
}

/// Whether a task with this id exists (a look-up in the primary key alone).
async fn exists<D: Db>(db: &mut D, vtid: &str) -> Result<bool, Error> {
    Ok(db
        .query_opt("SELECT 1 FROM tasks WHERE id = $1", params![vtid])
        .await?
        .is_some())
}

/// Several tasks in one statement, by vtid (a missing one is absent).
pub(crate) async fn get_many<D: Db>(
    db: &mut D,
    vtids: &[String],
) -> Result<std::collections::HashMap<String, Task>, Error> {
    if vtids.is_empty() {
        return Ok(Default::default());
    }
    let list = crate::sql::placeholder_list(1, vtids.len());
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks t WHERE t.id IN ({list})");
    let rows = db
        .query(&sql, vtids.iter().map(crate::sql::Value::from).collect())
        .await?;
    let mut out = std::collections::HashMap::with_capacity(rows.len());
    for r in rows {
        let task = task_from_row(&r)?;
        out.insert(task.vtid.clone(), task);
    }
    Ok(out)
}

pub async fn require<D: Db>(db: &mut D, vtid: &str) -> Result<Task, Error> {
    get(db, vtid)
        .await?
        .ok_or_else(|| Error::not_found("task_not_found", format!("no task {vtid:?}")))
}

fn task_refs(task: &Task) -> EventRefs {
    let mut refs = EventRefs::default()
        .task(&task.vtid)
        .channel(task.channel_id.clone())
        .conversation(task.conversation_id.clone());
    refs.agent_id = task.agent_id.clone();
    refs
}

/// Moves a task to `to` (if different) and records `task.state_changed`.
pub(crate) async fn set_state<D: Db>(
    db: &mut D,
    now: Millis,
    task: &mut Task,
    to: &str,
    cause: &str,
    extra: EventRefs,
) -> Result<(), Error> {
    if task.state == to {
        return Ok(());
    }
    db.defer(
        "UPDATE tasks SET state = $2, updated_at = $3 WHERE id = $1",
        params![&task.vtid, to, now],
    );
    let mut refs = task_refs(task);
    refs.worker_id = extra.worker_id;
    refs.run_id = extra.run_id;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::TASK_STATE_CHANGED,
            refs,
            &TaskStateChanged {
                from: task.state.clone(),
                to: to.to_owned(),
                cause: cause.to_owned(),
            },
        ),
    );
    task.state = to.to_owned();
    task.updated_at = now;
    if task.conversation_id.is_some() && workflow_of(task)?.is_final(to) {
        super::conversations::task_finished(db, now, task).await?;
    }
    Ok(())
}

async fn next_vtid<D: Db>(db: &mut D) -> Result<String, Error> {
    loop {
        let current = db
            .query_opt(
                "SELECT value FROM meta WHERE key = 'vtid_counter'",
                params![],
            )
            .await?
            .map(|r| r.string(0))
            .transpose()?
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0);
        let next = current + 1;
        db.defer(
            "INSERT INTO meta (key, value) VALUES ('vtid_counter', $1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![next.to_string()],
        );
        let vtid = format!("VTID-{next:05}");
        if !exists(db, &vtid).await? {
            return Ok(vtid);
        }
    }
}

/// Makes sure a channel row exists for an id a client named.
pub(crate) async fn ensure_channel<D: Db>(
    db: &mut D,
    now: Millis,
    channel_id: &str,
) -> Result<(), Error> {
    let n = db
        .execute(
            "INSERT INTO channels (id, name, created_at) VALUES ($1, $1, $2) ON CONFLICT (id) DO NOTHING",
            params![channel_id, now],
        )
        .await?;
    if n > 0 {
        emit(
            db,
            now,
            NewEvent::typed(
                kind::CHANNEL_CREATED,
                EventRefs::default().channel(Some(channel_id.to_owned())),
                &ChannelChanged {
                    name: channel_id.to_owned(),
                    agent_id: None,
                },
            ),
        );
    }
    Ok(())
}

pub async fn create<D: Db>(db: &mut D, now: Millis, new: NewTask) -> Result<Task, Error> {
    if new.title.trim().is_empty() {
        return Err(Error::invalid("invalid_title", "title must not be empty"));
    }
    if new.title.len() > 500 {
        return Err(Error::invalid(
            "invalid_title",
            "title must be at most 500 bytes",
        ));
    }
    if !(-1_000_000..=1_000_000).contains(&new.priority) {
        return Err(Error::invalid(
            "invalid_priority",
            "priority must be between -1000000 and 1000000",
        ));
    }
    super::validate_capabilities(&new.capabilities)?;
    let wf_name = new.workflow.clone().unwrap_or_else(|| "simple".into());
    let wf = workflow::by_name(&wf_name).ok_or_else(|| {
        Error::invalid(
            "unknown_workflow",
            format!("unknown workflow {wf_name:?}; known: simple, autopilot"),
        )
    })?;
    if let Some(a) = &new.agent_id {
        validate_id("agent_id", "invalid_agent_id", a)?;
    }
    if let Some(c) = &new.channel_id {
        validate_id("channel_id", "invalid_channel_id", c)?;
        ensure_channel(db, now, c).await?;
    }
    let (max_attempts, retry_backoff) = retry_settings(db, &new).await?;
    let vtid = match &new.vtid {
        Some(v) => {
            validate_id("vtid", "invalid_vtid", v)?;
            if exists(db, v).await? {
                return Err(Error::conflict(
                    "task_exists",
                    format!("task {v:?} already exists"),
                ));
            }
            v.clone()
        }
        None => next_vtid(db).await?,
    };
    // The row as reading it back would give it (the insert is deferred,
    // and a read of what was just written would cost a statement per task):
    // text as the database stores it, every other column at its default.
    let stored = |s: String| match crate::sql::storable_text(&s) {
        std::borrow::Cow::Borrowed(_) => s,
        std::borrow::Cow::Owned(replaced) => replaced,
    };
    let mut task = Task {
        vtid: stored(vtid),
        title: stored(new.title),
        spec: stored(new.spec),
        priority: new.priority,
        capabilities: new.capabilities,
        agent_id: new.agent_id.map(stored),
        channel_id: new.channel_id.map(stored),
        workflow: wf.name.to_owned(),
        state: wf.draft_state.to_owned(),
        spec_snapshot_id: None,
        dispatched_at: None,
        builder_worker_id: None,
        cancel_requested_at: None,
        attempts: 0,
        created_at: now,
        updated_at: now,
        conversation_id: new.conversation_id.map(stored),
        max_attempts,
        retry_backoff,
        run_at: new.run_at,
        failures: Vec::new(),
    };
    db.defer(
        "INSERT INTO tasks (id, title, spec, priority, capabilities, agent_id, channel_id, workflow, state, \
         attempts, created_at, updated_at, conversation_id, max_attempts, retry_backoff, run_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, $10, $10, $11, $12, $13, $14)",
        params![
            &task.vtid,
            &task.title,
            &task.spec,
            task.priority,
            to_json(&task.capabilities),
            &task.agent_id,
            &task.channel_id,
            wf.name,
            wf.draft_state,
            now,
            &task.conversation_id,
            task.max_attempts,
            task.retry_backoff.as_ref().map(to_json),
            task.run_at
        ],
    );
    emit(
        db,
        now,
        NewEvent::typed(
            kind::TASK_CREATED,
            task_refs(&task),
            &TaskCreated {
                title: task.title.clone(),
                priority: task.priority,
                workflow: task.workflow.clone(),
                capabilities: task.capabilities.clone(),
                state: task.state.clone(),
            },
        ),
    );
    if new.dispatch {
        dispatch_loaded(db, now, &mut task).await?;
    }
    Ok(task)
}

/// The retry policy a new task gets: its own, or else its agent's default.
/// Resolved once, at creation, so the task shows the policy it runs under.
async fn retry_settings<D: Db>(
    db: &mut D,
    new: &NewTask,
) -> Result<(Option<i64>, Option<RetryBackoff>), Error> {
    if let Some(n) = new.max_attempts {
        retry::validate_max_attempts(n).map_err(|m| Error::invalid("invalid_max_attempts", m))?;
    }
    if let Some(b) = &new.retry_backoff {
        b.validate()
            .map_err(|m| Error::invalid("invalid_retry_backoff", m))?;
    }
    if let Some(at) = new.run_at {
        if !(0..=253_402_300_799_000).contains(&at) {
            return Err(Error::invalid("invalid_run_at", "run_at is out of range"));
        }
    }
    if new.max_attempts.is_some() || new.retry_backoff.is_some() {
        return Ok((new.max_attempts, new.retry_backoff));
    }
    let Some(agent) = &new.agent_id else {
        return Ok((None, None));
    };
    let row = db
        .query_opt(
            "SELECT max_attempts, retry_backoff FROM agents WHERE id = $1",
            params![agent],
        )
        .await?;
    match row {
        Some(r) => Ok((r.opt_i64(0)?, opt_json(&r, 1)?)),
        None => Ok((None, None)),
    }
}

/// The policy a task runs under, if it has one.
pub(crate) fn policy_of(task: &Task) -> Option<RetryPolicy> {
    task.max_attempts.map(|max_attempts| RetryPolicy {
        max_attempts,
        backoff: task.retry_backoff.unwrap_or_default(),
    })
}

/// Dispatches a draft: freezes its spec in a snapshot and offers it to workers.
pub async fn dispatch<D: Db>(db: &mut D, now: Millis, vtid: &str) -> Result<Task, Error> {
    let mut task = require(db, vtid).await?;
    dispatch_loaded(db, now, &mut task).await?;
    Ok(task)
}

async fn dispatch_loaded<D: Db>(db: &mut D, now: Millis, task: &mut Task) -> Result<(), Error> {
    let wf = workflow_of(task)?;
    if task.state != wf.draft_state {
        return Err(Error::conflict(
            "already_dispatched",
            format!(
                "task {} is {:?}; only a draft can be dispatched",
                task.vtid, task.state
            ),
        ));
    }
    freeze_spec(db, now, task);
    set_state(
        db,
        now,
        task,
        wf.dispatched_state,
        "dispatched",
        EventRefs::default(),
    )
    .await
}

/// Freezes a task's spec in a snapshot and stamps it dispatched now (its
/// place in the hand-out order), with its `task.dispatched` event.
pub(crate) fn freeze_spec<D: Db>(db: &mut D, now: Millis, task: &mut Task) {
    let snapshot = new_uuid();
    db.defer(
        "INSERT INTO spec_snapshots (id, task_id, spec, created_at) VALUES ($1, $2, $3, $4)",
        params![&snapshot, &task.vtid, &task.spec, now],
    );
    db.defer(
        "UPDATE tasks SET spec_snapshot_id = $2, dispatched_at = $3 WHERE id = $1",
        params![&task.vtid, &snapshot, now],
    );
    task.spec_snapshot_id = Some(snapshot.clone());
    task.dispatched_at = Some(now);
    emit(
        db,
        now,
        NewEvent::typed(
            kind::TASK_DISPATCHED,
            task_refs(task),
            &TaskDispatched {
                spec_snapshot_id: snapshot,
                priority: task.priority,
            },
        ),
    );
}

/// Which tasks to list.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub state: Option<String>,
    pub agent_id: Option<String>,
    pub channel_id: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

pub async fn list<D: Db>(db: &mut D, f: &TaskFilter) -> Result<(Vec<Task>, i64), Error> {
    let mut cond = String::from(" WHERE 1 = 1");
    let mut args = Vec::new();
    if let Some(s) = &f.state {
        args.push(SqlValue::Text(s.clone()));
        cond.push_str(&format!(" AND t.state = ${}", args.len()));
    }
    if let Some(a) = &f.agent_id {
        args.push(SqlValue::Text(a.clone()));
        cond.push_str(&format!(" AND t.agent_id = ${}", args.len()));
    }
    if let Some(c) = &f.channel_id {
        args.push(SqlValue::Text(c.clone()));
        cond.push_str(&format!(" AND t.channel_id = ${}", args.len()));
    }
    let total = db
        .query_one(&format!("SELECT COUNT(*) FROM tasks t{cond}"), args.clone())
        .await?
        .i64(0)?;
    args.push(SqlValue::Int(f.limit));
    args.push(SqlValue::Int(f.offset));
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM tasks t{cond} ORDER BY t.created_at DESC, t.id DESC LIMIT ${} OFFSET ${}",
        args.len() - 1,
        args.len()
    );
    let tasks = db
        .query(&sql, args)
        .await?
        .iter()
        .map(task_from_row)
        .collect::<Result<_, _>>()?;
    Ok((tasks, total))
}

/// A task with its claims and its latest events.
#[derive(Debug, Clone)]
pub struct TaskDetail {
    pub task: Task,
    pub claims: Vec<Claim>,
    pub events: Vec<Event>,
}

pub async fn detail<D: Db>(db: &mut D, vtid: &str, events: i64) -> Result<TaskDetail, Error> {
    let task = require(db, vtid).await?;
    let claims = claims::for_task(db, vtid).await?;
    let filter = EventFilter {
        task_id: Some(vtid.to_owned()),
        ..Default::default()
    };
    let events = crate::log::read_latest(db, &filter, events).await?.events;
    Ok(TaskDetail {
        task,
        claims,
        events,
    })
}

/// Outcome of a cancel request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Nobody held it: it is cancelled now.
    Cancelled,
    /// A worker holds it: the worker is told and has the grace period to stop.
    Requested { worker_id: String, run_id: String },
}

pub async fn cancel<D: Db>(
    db: &mut D,
    now: Millis,
    vtid: &str,
    reason: Option<String>,
) -> Result<(Task, CancelOutcome), Error> {
    let mut task = require(db, vtid).await?;
    let wf = workflow_of(&task)?;
    if wf.is_final(&task.state) {
        return Err(Error::conflict(
            "task_finished",
            format!("task {vtid} is already {}", task.state),
        ));
    }
    let reason = reason.unwrap_or_else(|| "cancelled by the operator".into());
    match claims::active_for_task(db, vtid).await? {
        Some(claim) => {
            if task.cancel_requested_at.is_none() {
                db.defer(
                    "UPDATE tasks SET cancel_requested_at = $2, updated_at = $2 WHERE id = $1",
                    params![vtid, now],
                );
                db.defer(
                    "UPDATE runs SET cancel_requested_at = $2 WHERE id = $1 AND cancel_requested_at IS NULL",
                    params![&claim.run_id, now],
                );
                task.cancel_requested_at = Some(now);
                let refs = task_refs(&task).worker(&claim.worker_id).run(&claim.run_id);
                emit(
                    db,
                    now,
                    NewEvent::typed(
                        kind::TASK_CANCEL_REQUESTED,
                        refs,
                        &CancelRequested {
                            reason: reason.clone(),
                        },
                    ),
                );
            }
            Ok((
                task,
                CancelOutcome::Requested {
                    worker_id: claim.worker_id,
                    run_id: claim.run_id,
                },
            ))
        }
        None => {
            db.defer(
                "UPDATE tasks SET cancel_requested_at = $2 WHERE id = $1",
                params![vtid, now],
            );
            task.cancel_requested_at = Some(now);
            emit(
                db,
                now,
                NewEvent::typed(
                    kind::TASK_CANCEL_REQUESTED,
                    task_refs(&task),
                    &CancelRequested {
                        reason: reason.clone(),
                    },
                ),
            );
            set_state(
                db,
                now,
                &mut task,
                workflow::CANCELLED,
                "cancelled",
                EventRefs::default(),
            )
            .await?;
            Ok((task, CancelOutcome::Cancelled))
        }
    }
}

/// Result of applying an event to a task's workflow.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The event moved the task (possibly to the same state).
    Moved { task: Task, from: String, seq: i64 },
    /// Recorded, but the workflow does not allow it from the current state.
    Rejected { task: Task, seq: i64 },
}

/// Records an event about a task and applies it to the workflow, without
/// any claim (external events such as `github.pull_request.opened`).
pub async fn external_event<D: Db>(
    db: &mut D,
    now: Millis,
    vtid: &str,
    event: &str,
    message: Option<String>,
    metadata: Value,
) -> Result<Applied, Error> {
    let task = require(db, vtid).await?;
    Ok(
        claims::apply_event(db, now, task, None, event, message, metadata, None)
            .await?
            .0,
    )
}
