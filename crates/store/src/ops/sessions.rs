//! Sessions (the sessions contract): workspaces and their tabs ("session workers"), the
//! latest process of each PTY tab, and the registry row that makes a PTY tab
//! a worker in the worker registry contract's `list_workers`.
//!
//! Processes themselves live in `shepherd-sessions`; this module only records
//! what happened to them (started, restored, restarted, exited), each change
//! with its event in the same unit of work.

use serde::Serialize;
use shepherd_core::event::payloads::{
    SessionCreated, SessionDeleted, SessionWorkerAdded, SessionWorkerExited, SessionWorkerRemoved,
    SessionWorkerStarted, WorkerClosed, WorkerRegistered, WorkerRegisteredData,
};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::time::Millis;
use shepherd_core::Error;

use super::{emit, hash_token, random_hex, to_json, validate_id, workers};
use crate::params;
use crate::sql::{Db, Row};

/// The `metadata` of a PTY tab's worker row: which kind of tab it is and its
/// process. The fields are in alphabetical order, as the text has always
/// been written.
#[derive(Serialize)]
struct PtyWorkerMetadata<'a> {
    pid: Option<i64>,
    session_worker_type: &'a str,
}

/// The registry's agent id for terminal tabs (agent tabs use their agent's id).
pub const TERMINAL_AGENT: &str = "terminal";
/// The registry's `worker_type` of every PTY tab.
pub const PTY_WORKER_TYPE: &str = shepherd_core::status::WorkerType::Pty.as_str();

/// A session as stored, with its tabs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionRecord {
    pub id: String,
    pub name: String,
    pub location_path: String,
    /// The node whose PTYs the session's processes are.
    pub node_id: String,
    /// Where clients reach that node (`http://host:port`), when known.
    pub node_address: Option<String>,
    pub created_at: Millis,
    pub workers: Vec<SessionWorkerRecord>,
}

/// One tab of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionWorkerRecord {
    pub id: String,
    pub session_id: String,
    /// `agent`, `terminal` or `git-diff`.
    pub kind: String,
    pub name: String,
    pub agent_id: Option<String>,
    pub created_at: Millis,
    /// The latest process's pid (PTY tabs only).
    pub pid: Option<i64>,
    /// Counts the processes this tab has had; changes with each new one.
    pub epoch: i64,
    pub started_at: Option<Millis>,
    /// Set when the latest process ended while its server was up.
    pub exited_at: Option<Millis>,
    pub exit_code: Option<i64>,
    pub exit_signal: Option<String>,
}

impl SessionWorkerRecord {
    /// Whether this tab runs a process in a pseudo-terminal.
    pub fn is_pty(&self) -> bool {
        self.kind != "git-diff"
    }
}

/// A session to create.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub id: String,
    pub name: String,
    pub location_path: String,
    pub node_id: String,
    pub node_address: Option<String>,
}

/// A tab to add; `pid` is that of the process already started for it.
#[derive(Debug, Clone)]
pub struct NewSessionWorker {
    pub id: String,
    pub kind: String,
    pub name: String,
    pub agent_id: Option<String>,
    pub pid: Option<i64>,
}

const SESSION_COLUMNS: &str = "id, name, location_path, node_id, node_address, created_at";
const WORKER_COLUMNS: &str = "id, session_id, type, name, agent_id, created_at, pid, epoch, \
     started_at, exited_at, exit_code, exit_signal";

fn session_from_row(r: &Row) -> Result<SessionRecord, Error> {
    Ok(SessionRecord {
        id: r.string(0)?,
        name: r.string(1)?,
        location_path: r.string(2)?,
        node_id: r.string(3)?,
        node_address: r.opt_string(4)?,
        created_at: r.i64(5)?,
        workers: Vec::new(),
    })
}

fn worker_from_row(r: &Row) -> Result<SessionWorkerRecord, Error> {
    Ok(SessionWorkerRecord {
        id: r.string(0)?,
        session_id: r.string(1)?,
        kind: r.string(2)?,
        name: r.string(3)?,
        agent_id: r.opt_string(4)?,
        created_at: r.i64(5)?,
        pid: r.opt_i64(6)?,
        epoch: r.i64(7)?,
        started_at: r.opt_i64(8)?,
        exited_at: r.opt_i64(9)?,
        exit_code: r.opt_i64(10)?,
        exit_signal: r.opt_string(11)?,
    })
}

fn session_not_found(id: &str) -> Error {
    Error::not_found("session_not_found", format!("no session {id:?}"))
}

fn worker_not_found(session_id: &str, worker_id: &str) -> Error {
    Error::not_found(
        "worker_not_found",
        format!("session {session_id:?} has no worker {worker_id:?}"),
    )
}

async fn workers_of<D: Db>(
    db: &mut D,
    session_id: &str,
) -> Result<Vec<SessionWorkerRecord>, Error> {
    let sql = format!(
        "SELECT {WORKER_COLUMNS} FROM session_workers WHERE session_id = $1 ORDER BY created_at, id"
    );
    db.query(&sql, params![session_id])
        .await?
        .iter()
        .map(worker_from_row)
        .collect()
}

/// The session with its tabs, or 404 `session_not_found`.
pub async fn require<D: Db>(db: &mut D, id: &str) -> Result<SessionRecord, Error> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1");
    let row = db
        .query_opt(&sql, params![id])
        .await?
        .ok_or_else(|| session_not_found(id))?;
    let mut s = session_from_row(&row)?;
    s.workers = workers_of(db, id).await?;
    Ok(s)
}

/// Every session with its tabs, oldest first.
pub async fn list<D: Db>(db: &mut D) -> Result<Vec<SessionRecord>, Error> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at, id");
    let mut sessions: Vec<SessionRecord> = db
        .query(&sql, params![])
        .await?
        .iter()
        .map(session_from_row)
        .collect::<Result<_, _>>()?;
    let sql = format!("SELECT {WORKER_COLUMNS} FROM session_workers ORDER BY created_at, id");
    let all: Vec<SessionWorkerRecord> = db
        .query(&sql, params![])
        .await?
        .iter()
        .map(worker_from_row)
        .collect::<Result<_, _>>()?;
    let index: std::collections::HashMap<String, usize> = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    for w in all {
        if let Some(&i) = index.get(&w.session_id) {
            sessions[i].workers.push(w);
        }
    }
    Ok(sessions)
}

/// One tab of a session, or 404 (`session_not_found` / `worker_not_found`).
pub async fn require_worker<D: Db>(
    db: &mut D,
    session_id: &str,
    worker_id: &str,
) -> Result<(SessionRecord, SessionWorkerRecord), Error> {
    let session = require(db, session_id).await?;
    let worker = session
        .workers
        .iter()
        .find(|w| w.id == worker_id)
        .cloned()
        .ok_or_else(|| worker_not_found(session_id, worker_id))?;
    Ok((session, worker))
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.trim().is_empty() || name.len() > 200 || name.contains('\0') {
        return Err(Error::invalid("invalid_name", "a name is 1-200 bytes"));
    }
    Ok(())
}

pub async fn create<D: Db>(
    db: &mut D,
    now: Millis,
    new: NewSession,
) -> Result<SessionRecord, Error> {
    validate_id("session id", "invalid_session_id", &new.id)?;
    check_name(&new.name)?;
    db.execute(
        "INSERT INTO sessions (id, name, location_path, node_id, node_address, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        params![
            &new.id,
            &new.name,
            &new.location_path,
            &new.node_id,
            &new.node_address,
            now
        ],
    )
    .await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::SESSION_CREATED,
            EventRefs::default().session(Some(new.id.clone())),
            &SessionCreated {
                name: new.name.clone(),
                location_path: new.location_path.clone(),
                node_id: new.node_id.clone(),
            },
        ),
    );
    require(db, &new.id).await
}

/// Adds a tab; a PTY tab also becomes a worker in the registry.
pub async fn add_worker<D: Db>(
    db: &mut D,
    now: Millis,
    session_id: &str,
    new: NewSessionWorker,
) -> Result<SessionWorkerRecord, Error> {
    let session = require(db, session_id).await?;
    validate_id("worker id", "invalid_worker_id", &new.id)?;
    check_name(&new.name)?;
    if !matches!(new.kind.as_str(), "agent" | "terminal" | "git-diff") {
        return Err(Error::invalid(
            "invalid_worker_type",
            format!(
                "type must be agent, terminal or git-diff (got {:?})",
                new.kind
            ),
        ));
    }
    let pty = new.kind != "git-diff";
    let epoch = if pty { 1 } else { 0 };
    let started_at = if pty { Some(now) } else { None };
    db.execute(
        "INSERT INTO session_workers (id, session_id, type, name, agent_id, created_at, pid, epoch, started_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        params![
            &new.id,
            session_id,
            &new.kind,
            &new.name,
            &new.agent_id,
            now,
            new.pid,
            epoch,
            started_at
        ],
    )
    .await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::SESSION_WORKER_ADDED,
            EventRefs::default()
                .session(Some(session_id.to_owned()))
                .worker(&new.id),
            &SessionWorkerAdded {
                kind: new.kind.clone(),
                name: new.name.clone(),
                agent_id: new.agent_id.clone(),
                pid: new.pid,
                epoch,
            },
        ),
    );
    if pty {
        register_pty(db, now, &session, &new).await?;
    }
    let (_, w) = require_worker(db, session_id, &new.id).await?;
    Ok(w)
}

/// The registry row of a PTY tab: `session_id` and `terminal_id` set, a
/// token nobody holds (a PTY never calls the connector).
async fn register_pty<D: Db>(
    db: &mut D,
    now: Millis,
    session: &SessionRecord,
    new: &NewSessionWorker,
) -> Result<(), Error> {
    let agent = new.agent_id.as_deref().unwrap_or(TERMINAL_AGENT);
    workers::ensure_agent(db, now, agent, PTY_WORKER_TYPE).await?;
    let token = hash_token(&format!("pty_{}", random_hex(24)));
    // The tab's process is running when it is recorded (it has a pid), so
    // it is never the worker registry contract's `spawning`: its activity starts now.
    db.execute(
        "INSERT INTO workers (id, agent_id, worker_type, name, project_path, session_id, terminal_id, \
         capabilities, max_concurrent, status, token_hash, metadata, registered_at, last_heartbeat_at, \
         last_activity_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $1, '[]', 1, 'active', $7, $8, $9, $9, $9)",
        params![
            &new.id,
            agent,
            PTY_WORKER_TYPE,
            &new.name,
            &session.location_path,
            &session.id,
            token,
            to_json(&PtyWorkerMetadata {
                pid: new.pid,
                session_worker_type: &new.kind,
            }),
            now
        ],
    )
    .await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::WORKER_REGISTERED,
            EventRefs::default()
                .worker(&new.id)
                .agent(agent)
                .session(Some(session.id.clone())),
            &WorkerRegisteredData::Registered(WorkerRegistered {
                re_registered: false,
                name: Some(new.name.clone()),
                project_path: Some(session.location_path.clone()),
                terminal_id: Some(new.id.clone()),
                worker_type: PTY_WORKER_TYPE.to_owned(),
                capabilities: Vec::new(),
                max_concurrent: 1,
            }),
        ),
    );
    Ok(())
}

/// Why a new process started for an existing tab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartReason {
    /// On attach, because the tab's process no longer existed.
    Restored,
    /// On request (`POST …/restart`).
    Restarted,
}

/// Records a new process for a PTY tab: its pid, the next epoch, and the
/// registry row heard from again.
pub async fn process_started<D: Db>(
    db: &mut D,
    now: Millis,
    session_id: &str,
    worker_id: &str,
    pid: i64,
    reason: StartReason,
    mode: &str,
) -> Result<SessionWorkerRecord, Error> {
    let (_, before) = require_worker(db, session_id, worker_id).await?;
    let epoch = before.epoch + 1;
    db.execute(
        "UPDATE session_workers SET pid = $3, epoch = $4, started_at = $5, exited_at = NULL, \
         exit_code = NULL, exit_signal = NULL WHERE id = $1 AND session_id = $2",
        params![worker_id, session_id, pid, epoch, now],
    )
    .await?;
    db.execute(
        "UPDATE workers SET status = 'active', last_heartbeat_at = $2, closed_at = NULL, metadata = $3 \
         WHERE id = $1",
        params![
            worker_id,
            now,
            to_json(&PtyWorkerMetadata {
                pid: Some(pid),
                session_worker_type: &before.kind,
            })
        ],
    )
    .await?;
    let kind_ = match reason {
        StartReason::Restored => kind::SESSION_WORKER_RESTORED,
        StartReason::Restarted => kind::SESSION_WORKER_RESTARTED,
    };
    emit(
        db,
        now,
        NewEvent::typed(
            kind_,
            EventRefs::default()
                .session(Some(session_id.to_owned()))
                .worker(worker_id),
            &SessionWorkerStarted {
                pid,
                epoch,
                previous_pid: before.pid,
                mode: mode.to_owned(),
            },
        ),
    );
    let (_, w) = require_worker(db, session_id, worker_id).await?;
    Ok(w)
}

/// Records that a tab's process ended while its server was up. An exit of
/// an earlier process (an older `epoch`) changes nothing.
pub async fn process_exited<D: Db>(
    db: &mut D,
    now: Millis,
    session_id: &str,
    worker_id: &str,
    epoch: i64,
    exit_code: Option<i64>,
    signal: Option<i64>,
) -> Result<bool, Error> {
    // The column is text (older rows hold the number written out).
    let signal_text = signal.map(|s| s.to_string());
    let n = db
        .execute(
            "UPDATE session_workers SET exited_at = $4, exit_code = $5, exit_signal = $6 \
             WHERE id = $1 AND session_id = $2 AND epoch = $3 AND exited_at IS NULL",
            params![worker_id, session_id, epoch, now, exit_code, &signal_text],
        )
        .await?;
    if n == 0 {
        return Ok(false);
    }
    emit(
        db,
        now,
        NewEvent::typed(
            kind::SESSION_WORKER_EXITED,
            EventRefs::default()
                .session(Some(session_id.to_owned()))
                .worker(worker_id),
            &SessionWorkerExited {
                epoch: Some(epoch),
                exit_code,
                signal,
                restore_failed: None,
                reason: None,
            },
        ),
    );
    Ok(true)
}

/// Removes a tab; its registry row is closed.
pub async fn remove_worker<D: Db>(
    db: &mut D,
    now: Millis,
    session_id: &str,
    worker_id: &str,
    reason: &str,
) -> Result<SessionWorkerRecord, Error> {
    let (_, w) = require_worker(db, session_id, worker_id).await?;
    db.execute(
        "DELETE FROM session_workers WHERE id = $1 AND session_id = $2",
        params![worker_id, session_id],
    )
    .await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::SESSION_WORKER_REMOVED,
            EventRefs::default()
                .session(Some(session_id.to_owned()))
                .worker(worker_id),
            &SessionWorkerRemoved {
                kind: w.kind.clone(),
                reason: reason.to_owned(),
            },
        ),
    );
    if w.is_pty() {
        let closed = db
            .execute(
                "UPDATE workers SET status = 'terminated', closed_at = $2 WHERE id = $1 AND status <> 'terminated'",
                params![worker_id, now],
            )
            .await?;
        if closed > 0 {
            let agent = w.agent_id.clone().unwrap_or_else(|| TERMINAL_AGENT.into());
            emit(
                db,
                now,
                NewEvent::typed(
                    kind::WORKER_CLOSED,
                    EventRefs::default()
                        .worker(worker_id)
                        .agent(agent)
                        .session(Some(session_id.to_owned())),
                    &WorkerClosed {
                        reason: reason.to_owned(),
                        released_claims: None,
                    },
                ),
            );
        }
    }
    Ok(w)
}

/// Deletes a session and its tabs.
pub async fn delete<D: Db>(db: &mut D, now: Millis, id: &str) -> Result<SessionRecord, Error> {
    let s = require(db, id).await?;
    for w in &s.workers {
        remove_worker(db, now, id, &w.id, "session deleted").await?;
    }
    db.execute("DELETE FROM sessions WHERE id = $1", params![id])
        .await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::SESSION_DELETED,
            EventRefs::default().session(Some(id.to_owned())),
            &SessionDeleted {
                workers: s.workers.len() as i64,
            },
        ),
    );
    Ok(s)
}

/// Marks the registry rows of PTY tabs whose processes run on this node as
/// heard from, so the sweeper does not take them for silent workers.
pub async fn touch_live<D: Db>(
    db: &mut D,
    now: Millis,
    worker_ids: &[String],
) -> Result<(), Error> {
    for id in worker_ids {
        db.defer(
            "UPDATE workers SET last_heartbeat_at = $2 WHERE id = $1 AND status = 'active'",
            params![id, now],
        );
    }
    Ok(())
}

/// Records why a tab's process could not be restored on attach. The tab
/// itself is unchanged: a later attach tries again.
pub async fn restore_failed<D: Db>(
    db: &mut D,
    now: Millis,
    session_id: &str,
    worker_id: &str,
    reason: &str,
) -> Result<(), Error> {
    require_worker(db, session_id, worker_id).await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::SESSION_WORKER_EXITED,
            EventRefs::default()
                .session(Some(session_id.to_owned()))
                .worker(worker_id),
            &SessionWorkerExited {
                epoch: None,
                exit_code: Some(1),
                signal: None,
                restore_failed: Some(true),
                reason: Some(reason.to_owned()),
            },
        ),
    );
    Ok(())
}
