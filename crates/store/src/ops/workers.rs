//! Worker registry: registration, heartbeats, deregistration, listing.

use serde_json::Value;
use shepherd_core::event::payloads::{AgentUpserted, WorkerRegistered, WorkerRegisteredData};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::Worker;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use super::{emit, hash_token, random_hex, to_json, validate_id};
use crate::params;
use crate::sql::{Db, Row};

/// Records that a worker did something (`$2` = now). At most once a second:
/// the time serves "stuck for N minutes" checks, and skipping the write
/// keeps a busy worker's row from being rewritten by every call it makes.
pub(crate) const TOUCH_ACTIVITY: &str = "UPDATE workers SET last_activity_at = $2 \
     WHERE id = $1 AND (last_activity_at IS NULL OR last_activity_at + 1000 < $2)";

/// Records a worker's activity ([`TOUCH_ACTIVITY`]) unless `last`, its
/// activity as read in this transaction, shows the statement would change
/// nothing: a busy worker's cycles then send no statement at all.
pub(crate) fn touch<D: Db>(db: &mut D, worker_id: &str, last: Option<Millis>, now: Millis) {
    if last.is_none_or(|t| t + 1000 < now) {
        db.defer(TOUCH_ACTIVITY, params![worker_id, now]);
    }
}

/// Records that a worker that had not been heard from since registering
/// polled (the read-only poll cannot write; this runs once per worker).
pub async fn mark_heard<D: Db>(db: &mut D, now: Millis, worker_id: &str) -> Result<(), Error> {
    db.defer(
        "UPDATE workers SET last_activity_at = $2 WHERE id = $1 AND last_activity_at IS NULL",
        params![worker_id, now],
    );
    Ok(())
}

/// What a worker says about itself when registering.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    pub worker_id: Option<String>,
    pub agent_id: String,
    pub worker_type: String,
    pub name: Option<String>,
    pub project_path: Option<String>,
    pub session_id: Option<String>,
    pub terminal_id: Option<String>,
    pub capabilities: Vec<String>,
    pub max_concurrent: i64,
    pub metadata: Value,
    /// The host it runs on (a registered host's id).
    pub host_id: Option<String>,
}

pub(crate) const WORKER_COLUMNS: &str = "w.id, w.agent_id, w.worker_type, w.name, w.project_path, w.session_id, \
    w.terminal_id, w.capabilities, w.max_concurrent, w.status, w.metadata, w.registered_at, w.last_heartbeat_at, \
    w.last_activity_at, w.closed_at, \
    (SELECT COUNT(*) FROM runs c WHERE c.worker_id = w.id AND c.released_at IS NULL), w.host_id";

pub(crate) fn worker_from_row(r: &Row) -> Result<Worker, Error> {
    Ok(Worker {
        worker_id: r.string(0)?,
        agent_id: r.string(1)?,
        worker_type: r.string(2)?,
        name: r.opt_string(3)?,
        project_path: r.opt_string(4)?,
        session_id: r.opt_string(5)?,
        terminal_id: r.opt_string(6)?,
        capabilities: r.json(7)?,
        max_concurrent: r.i64(8)?,
        status: r.word(9)?,
        metadata: r.json(10)?,
        registered_at: r.i64(11)?,
        last_heartbeat_at: r.i64(12)?,
        last_activity_at: r.opt_i64(13)?,
        closed_at: r.opt_i64(14)?,
        active_claims: r.i64(15)?,
        host_id: r.opt_string(16)?,
    })
}

pub async fn get<D: Db>(db: &mut D, worker_id: &str) -> Result<Option<Worker>, Error> {
    let sql = format!("SELECT {WORKER_COLUMNS} FROM workers w WHERE w.id = $1");
    match db.query_opt(&sql, params![worker_id]).await? {
        Some(r) => Ok(Some(worker_from_row(&r)?)),
        None => Ok(None),
    }
}

/// The worker, or 404 `worker_not_found`.
pub async fn require<D: Db>(db: &mut D, worker_id: &str) -> Result<Worker, Error> {
    get(db, worker_id).await?.ok_or_else(|| {
        Error::not_found(
            "worker_not_found",
            format!("no worker {worker_id:?} is registered"),
        )
    })
}

/// The worker, if it may still act (not terminated).
pub async fn require_live<D: Db>(db: &mut D, worker_id: &str) -> Result<Worker, Error> {
    let w = require(db, worker_id).await?;
    if w.status == shepherd_core::status::WorkerStatus::Terminated {
        return Err(Error::conflict(
            "worker_terminated",
            format!("worker {worker_id:?} has deregistered; register again"),
        ));
    }
    Ok(w)
}

/// Makes sure an agent row exists (agents first seen through registration).
/// An agent first seen as a session tab's (`pty`) takes the worker type of
/// the first worker that registers it to take tasks.
pub async fn ensure_agent<D: Db>(
    db: &mut D,
    now: Millis,
    agent_id: &str,
    worker_type: &str,
) -> Result<(), Error> {
    let inserted = db
        .execute(
            "INSERT INTO agents (id, worker_type, capabilities, max_concurrent, source, created_at, updated_at) \
             VALUES ($1, $2, '[]', NULL, 'registration', $3, $3) \
             ON CONFLICT (id) DO UPDATE SET worker_type = excluded.worker_type, updated_at = excluded.updated_at \
             WHERE agents.worker_type = 'pty' AND excluded.worker_type <> 'pty'",
            params![agent_id, worker_type, now],
        )
        .await?;
    if inserted > 0 {
        emit(
            db,
            now,
            NewEvent::typed(
                kind::AGENT_UPSERTED,
                EventRefs::default().agent(agent_id),
                &AgentUpserted {
                    source: "registration".to_owned(),
                    worker_type: worker_type.to_owned(),
                    // Left out: a registered agent has no configured limit.
                    max_concurrent: None,
                },
            ),
        );
    }
    Ok(())
}

/// Registers (or re-registers) a worker; returns it and its new token.
pub async fn register<D: Db>(
    db: &mut D,
    now: Millis,
    reg: Registration,
) -> Result<(Worker, String), Error> {
    let worker_id = match reg.worker_id.clone() {
        Some(id) => id,
        None => format!("worker-{}", random_hex(6)),
    };
    validate_id("worker_id", "invalid_worker_id", &worker_id)?;
    validate_id("agent_id", "invalid_agent_id", &reg.agent_id)?;
    if !(1..=1000).contains(&reg.max_concurrent) {
        return Err(Error::invalid(
            "invalid_max_concurrent",
            "max_concurrent must be between 1 and 1000",
        ));
    }
    super::validate_capabilities(&reg.capabilities)?;
    if let Some(host) = &reg.host_id {
        if !super::hosts::known(db, host).await? {
            return Err(Error::not_found(
                "host_not_found",
                format!("no host {host:?} is known: register the host first"),
            ));
        }
    }
    ensure_agent(db, now, &reg.agent_id, &reg.worker_type).await?;
    let token = format!("swk_{}", random_hex(24));
    let existing = get(db, &worker_id).await?;
    let caps = to_json(&reg.capabilities);
    let meta = if reg.metadata.is_null() {
        "{}".to_owned()
    } else {
        reg.metadata.to_string()
    };
    // A worker that registers again keeps its id and its registration time;
    // everything it says about itself, and its token, are replaced. Its
    // activity starts over: a new process is `spawning` (the worker registry contract) until
    // it polls or heartbeats.
    db.defer(
        "INSERT INTO workers (id, agent_id, worker_type, name, project_path, session_id, terminal_id, \
         capabilities, max_concurrent, status, token_hash, metadata, registered_at, last_heartbeat_at, \
         host_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'active', $10, $11, $12, $12, $13) \
         ON CONFLICT (id) DO UPDATE SET agent_id = excluded.agent_id, worker_type = excluded.worker_type, \
         name = excluded.name, project_path = excluded.project_path, session_id = excluded.session_id, \
         terminal_id = excluded.terminal_id, capabilities = excluded.capabilities, \
         max_concurrent = excluded.max_concurrent, status = 'active', token_hash = excluded.token_hash, \
         metadata = excluded.metadata, last_heartbeat_at = excluded.last_heartbeat_at, closed_at = NULL, \
         last_activity_at = NULL, host_id = excluded.host_id",
        params![
            &worker_id,
            &reg.agent_id,
            &reg.worker_type,
            &reg.name,
            &reg.project_path,
            &reg.session_id,
            &reg.terminal_id,
            caps,
            reg.max_concurrent,
            hash_token(&token),
            meta,
            now,
            &reg.host_id
        ],
    );
    let worker = require(db, &worker_id).await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::WORKER_REGISTERED,
            EventRefs::default()
                .worker(&worker_id)
                .agent(&reg.agent_id)
                .session(reg.session_id.clone()),
            &WorkerRegisteredData::Registered(WorkerRegistered {
                re_registered: existing.is_some(),
                name: reg.name.clone(),
                project_path: reg.project_path.clone(),
                terminal_id: reg.terminal_id.clone(),
                worker_type: reg.worker_type.clone(),
                capabilities: reg.capabilities.clone(),
                max_concurrent: reg.max_concurrent,
            }),
        ),
    );
    Ok((worker, token))
}

/// The worker a token belongs to, if any (terminated workers' tokens are dead).
pub async fn for_token<D: Db>(db: &mut D, token: &str) -> Result<Option<String>, Error> {
    let row = db
        .query_opt(
            "SELECT id FROM workers WHERE token_hash = $1 AND status <> 'terminated'",
            params![hash_token(token)],
        )
        .await?;
    row.map(|r| r.string(0)).transpose()
}

/// Which workers to list.
#[derive(Debug, Clone, Default)]
pub struct WorkerFilter {
    pub include_closed: bool,
    pub project: Option<String>,
    pub agent_id: Option<String>,
}

pub async fn list<D: Db>(db: &mut D, filter: &WorkerFilter) -> Result<Vec<Worker>, Error> {
    let mut sql = format!("SELECT {WORKER_COLUMNS} FROM workers w WHERE 1 = 1");
    let mut args = Vec::new();
    if !filter.include_closed {
        sql.push_str(" AND w.status <> 'terminated'");
    }
    if let Some(p) = &filter.project {
        args.push(crate::sql::Value::Text(format!("%{}%", p.to_lowercase())));
        sql.push_str(&format!(" AND LOWER(w.project_path) LIKE ${}", args.len()));
    }
    if let Some(a) = &filter.agent_id {
        args.push(crate::sql::Value::Text(a.clone()));
        sql.push_str(&format!(" AND w.agent_id = ${}", args.len()));
    }
    sql.push_str(" ORDER BY w.registered_at, w.id");
    db.query(&sql, args)
        .await?
        .iter()
        .map(worker_from_row)
        .collect()
}
