//! Domain operations, written once against `crate::sql::Db`.
//!
//! Each public function here is one unit of work: it reads what it needs,
//! decides with the rules in `shepherd_core`, writes the tables and appends
//! the events that describe the change. The caller runs it inside a
//! transaction (writes) or a snapshot (reads); an `Err` rolls back all of it.

pub mod claims;
pub mod conversations;
pub mod hosts;
pub mod input_requests;
pub mod logins;
pub mod restart;
pub(crate) mod retries;
pub mod runs;
pub mod sessions;
pub(crate) mod stored_secrets;
pub mod tasks;
pub mod usage;
pub mod users;
pub mod webhooks;
pub mod workers;

use shepherd_core::event::NewEvent;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::log;
use crate::params;
use crate::sql::Db;
use shepherd_core::model::Agent;

/// Appends one event inside the current unit of work (pipelined: its
/// sequence number is not needed). Nothing to wait for: the row goes out
/// with the unit's other deferred writes, and a failure fails the unit.
pub(crate) fn emit<D: Db>(db: &mut D, now: Millis, e: NewEvent) {
    log::append_deferred(db, now, &e);
}

/// Appends one event and returns its sequence number.
pub(crate) async fn emit_returning<D: Db>(
    db: &mut D,
    now: Millis,
    e: NewEvent,
) -> Result<i64, Error> {
    log::append(db, now, &e).await
}

/// `bytes` random bytes from the operating system, hex encoded.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    // getrandom only fails when the OS has no entropy source at all.
    getrandom::fill(&mut buf).expect("the operating system's random source");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn new_uuid() -> String {
    uuid::Uuid::now_v7().to_string()
}

pub(crate) use shepherd_core::token::hash_token;

/// Whether a presented claim token is the one a claim was granted with.
///
/// Claims store the token's SHA-256 (64 hex digits); claims granted before
/// tokens were hashed hold the token itself, and keep working. Either way
/// two digests of equal length are compared without an early exit, so the
/// answer's timing reveals neither the token nor its length.
pub(crate) fn claim_token_matches(presented: &str, stored: &str) -> bool {
    let presented = hash_token(presented);
    let stored_is_digest = stored.len() == 64 && stored.bytes().all(|b| b.is_ascii_hexdigit());
    let stored = if stored_is_digest {
        stored.to_owned()
    } else {
        hash_token(stored)
    };
    shepherd_core::token::digests_equal(&presented, &stored)
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// Capabilities are non-empty names of at most 64 characters.
pub(crate) fn validate_capabilities(caps: &[String]) -> Result<(), Error> {
    if caps.iter().any(|c| c.is_empty() || c.len() > 64) {
        return Err(Error::invalid(
            "invalid_capabilities",
            "capabilities are non-empty strings of at most 64 characters",
        ));
    }
    Ok(())
}

/// Checks an identifier supplied by a client: it appears in URLs and logs.
pub fn validate_id(what: &'static str, code: &'static str, id: &str) -> Result<(), Error> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            code,
            format!(
                "{what} must be 1-128 characters of letters, digits and - _ . : @ (got {id:?})"
            ),
        ))
    }
}

/// The agents a task may name: configured ones, and those a worker
/// declared when it registered. A session's terminal tab also registers
/// (as the `terminal` agent, worker type `pty`), but a tab takes no tasks:
/// an agent only tabs declared is left out, or a task for it would wait for
/// ever.
const TAKES_TASKS: &str = "NOT (a.source = 'registration' AND a.worker_type = 'pty')";

/// Whether an agent with this id is configured or was declared by a worker
/// that takes tasks.
pub async fn agent_known<D: Db>(db: &mut D, id: &str) -> Result<bool, Error> {
    Ok(db
        .query_opt(
            &format!("SELECT 1 FROM agents a WHERE a.id = $1 AND {TAKES_TASKS}"),
            params![id],
        )
        .await?
        .is_some())
}

/// Agents that take tasks, with the number of their runs now running.
pub async fn agents_list<D: Db>(db: &mut D) -> Result<Vec<Agent>, Error> {
    let sql = format!(
        "SELECT a.id, a.worker_type, a.capabilities, a.max_concurrent, a.source, a.created_at, {} \
         FROM agents a WHERE {TAKES_TASKS} ORDER BY a.id",
        runs::running_count_sql("a.id")
    );
    let rows = db.query(&sql, params![]).await?;
    rows.iter()
        .map(|r| {
            Ok(Agent {
                id: r.string(0)?,
                worker_type: r.string(1)?,
                capabilities: r.json(2)?,
                max_concurrent: r.opt_i64(3)?,
                source: r.string(4)?,
                created_at: r.i64(5)?,
                running: r.i64(6)?,
            })
        })
        .collect()
}

/// Creates or updates an agent declared in configuration.
pub async fn agents_upsert<D: Db>(
    db: &mut D,
    now: Millis,
    id: &str,
    worker_type: &str,
    capabilities: &[String],
    max_concurrent: Option<i64>,
) -> Result<(), Error> {
    validate_id("agent id", "invalid_agent_id", id)?;
    db.defer(
        "INSERT INTO agents (id, worker_type, capabilities, max_concurrent, source, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, 'config', $5, $5) ON CONFLICT (id) DO UPDATE SET worker_type = excluded.worker_type, \
         capabilities = excluded.capabilities, max_concurrent = excluded.max_concurrent, source = 'config', \
         updated_at = excluded.updated_at",
        params![id, worker_type, to_json(&capabilities), max_concurrent, now],
    );
    emit(
        db,
        now,
        NewEvent::typed(
            shepherd_core::event::kind::AGENT_UPSERTED,
            shepherd_core::event::EventRefs::default().agent(id),
            &shepherd_core::event::payloads::AgentUpserted {
                source: "config".to_owned(),
                worker_type: worker_type.to_owned(),
                // Present, `null` when the configuration sets no limit.
                max_concurrent: Some(max_concurrent),
            },
        ),
    );
    Ok(())
}

pub(crate) fn channel_from_row(
    r: &crate::sql::Row,
) -> Result<shepherd_core::model::Channel, Error> {
    Ok(shepherd_core::model::Channel {
        id: r.string(0)?,
        name: r.string(1)?,
        created_at: r.i64(2)?,
        archived_at: r.opt_i64(3)?,
        runs: r.i64(4)?,
    })
}

pub(crate) async fn channel_get<D: Db>(
    db: &mut D,
    id: &str,
) -> Result<shepherd_core::model::Channel, Error> {
    let row = db
        .query_opt(
            "SELECT c.id, c.name, c.created_at, c.archived_at, \
             (SELECT COUNT(*) FROM runs r WHERE r.channel_id = c.id) FROM channels c WHERE c.id = $1",
            params![id],
        )
        .await?
        .ok_or_else(|| Error::not_found("channel_not_found", format!("no channel {id:?}")))?;
    channel_from_row(&row)
}
