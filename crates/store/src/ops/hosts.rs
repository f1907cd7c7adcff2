//! Hosts: each server node records itself at start and while it runs; a
//! runner registers its host with the operator token and is given a host
//! token (kept as its SHA-256), with which it says it is still there.
//!
//! Online or not is never written: a reader compares `last_seen_at` with
//! the heartbeat timeout, so a host that died says so without anyone
//! noticing it, and one that comes back is online with its first heartbeat.

use shepherd_core::event::payloads::HostRegistered;
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::Host;
use shepherd_core::status::HostKind;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use super::{emit, hash_token, random_hex, to_json, validate_id};
use crate::params;
use crate::sql::{Db, Row};

/// The prefix of a host token: it tells a host's credential from a
/// worker's at a glance (in a leaked log line, say).
pub const HOST_TOKEN_PREFIX: &str = "shk_";

/// What a host says about itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostDeclaration {
    pub id: String,
    pub name: String,
    /// A server node's advertised URL.
    pub address: Option<String>,
    pub sessions_root: Option<String>,
    pub agents: Vec<String>,
    pub slots: Option<i64>,
}

/// What entitles a registration to its host id, judged against the stored
/// host in the same unit of work (so two registrations of one id cannot both
/// pass a check made before either wrote).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostClaim {
    /// The caller may make a host that does not exist yet (an admin, or
    /// someone holding the enrollment token).
    pub may_create: bool,
    /// The token the host was last given: the same runner come back.
    pub current_token: Option<String>,
    /// An admin takes the host over without its token.
    pub replace: bool,
}

/// How a registration went: the host, its new token, and whether it
/// existed before (its old token, and any link opened with it, are void).
#[derive(Debug, Clone, PartialEq)]
pub struct HostRegistration {
    pub host: Host,
    pub token: String,
    pub existed: bool,
}

const HOST_COLUMNS: &str = "h.id, h.name, h.kind, h.address, h.sessions_root, h.agents, h.slots, \
    h.registered_at, h.last_seen_at, \
    (SELECT COUNT(*) FROM sessions s WHERE s.node_id = h.id), \
    (SELECT COUNT(*) FROM runs r JOIN workers w ON w.id = r.worker_id \
     WHERE w.host_id = h.id AND r.released_at IS NULL), \
    h.link_node";

fn host_from_row(r: &Row) -> Result<Host, Error> {
    Ok(Host {
        id: r.string(0)?,
        name: r.string(1)?,
        kind: r.word(2)?,
        address: r.opt_string(3)?,
        sessions_root: r.opt_string(4)?,
        agents: r.json(5)?,
        slots: r.opt_i64(6)?,
        registered_at: r.i64(7)?,
        last_seen_at: r.i64(8)?,
        sessions: r.i64(9)?,
        running: r.i64(10)?,
        link_node: r.opt_string(11)?,
    })
}

/// Checks what a host says about itself before it is stored.
fn check(decl: &HostDeclaration) -> Result<(), Error> {
    validate_id("host id", "invalid_host_id", &decl.id)?;
    let name = decl.name.trim();
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "invalid_host_name",
            "a host's name must be 1-200 printable characters",
        ));
    }
    if let Some(root) = &decl.sessions_root {
        if !root.starts_with('/') || root.len() > 4096 || root.contains('\0') {
            return Err(Error::invalid(
                "invalid_sessions_root",
                "sessions_root must be an absolute path",
            ));
        }
    }
    if decl.agents.len() > 1000 {
        return Err(Error::invalid(
            "invalid_agents",
            "a host declares at most 1000 agents",
        ));
    }
    for agent in &decl.agents {
        validate_id("agent_id", "invalid_agent_id", agent)?;
    }
    if decl.slots.is_some_and(|n| !(0..=1_000_000).contains(&n)) {
        return Err(Error::invalid(
            "invalid_slots",
            "slots must be between 0 and 1000000",
        ));
    }
    Ok(())
}

pub async fn get<D: Db>(db: &mut D, id: &str) -> Result<Option<Host>, Error> {
    let sql = format!("SELECT {HOST_COLUMNS} FROM hosts h WHERE h.id = $1");
    db.query_opt(&sql, params![id])
        .await?
        .map(|r| host_from_row(&r))
        .transpose()
}

/// The host, or 404 `host_not_found`.
pub async fn require<D: Db>(db: &mut D, id: &str) -> Result<Host, Error> {
    get(db, id)
        .await?
        .ok_or_else(|| Error::not_found("host_not_found", format!("no host {id:?} is known")))
}

/// Every host, server nodes first, then by name.
pub async fn list<D: Db>(db: &mut D) -> Result<Vec<Host>, Error> {
    let sql = format!("SELECT {HOST_COLUMNS} FROM hosts h ORDER BY h.kind DESC, h.name, h.id");
    db.query(&sql, vec![])
        .await?
        .iter()
        .map(host_from_row)
        .collect()
}

/// Records this server node as a host (at start): what it says replaces
/// what it said before; it is seen now. No event: a node's start is
/// already in the log (`server.recovered`), and a node's own record is not
/// news to anyone.
pub async fn record_server<D: Db>(
    db: &mut D,
    now: Millis,
    decl: HostDeclaration,
) -> Result<Host, Error> {
    check(&decl)?;
    if let Some(h) = get(db, &decl.id).await? {
        if h.kind != HostKind::Server {
            return Err(Error::conflict(
                "host_kind_conflict",
                format!(
                    "host {:?} is a runner's; give this node another node_id",
                    h.id
                ),
            ));
        }
    }
    db.execute(
        "INSERT INTO hosts (id, name, kind, address, sessions_root, agents, slots, token_hash, \
         registered_at, last_seen_at) VALUES ($1, $2, 'server', $3, $4, $5, $6, NULL, $7, $7) \
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, address = excluded.address, \
         sessions_root = excluded.sessions_root, agents = excluded.agents, slots = excluded.slots, \
         last_seen_at = excluded.last_seen_at",
        params![
            &decl.id,
            decl.name.trim(),
            &decl.address,
            &decl.sessions_root,
            to_json(&decl.agents),
            decl.slots,
            now
        ],
    )
    .await?;
    require(db, &decl.id).await
}

/// Registers (or re-registers) a runner's host; returns it and its new
/// token. A runner that comes back keeps its id (it is kept in its data
/// directory) and its registration time; its old token stops working.
pub async fn register_runner<D: Db>(
    db: &mut D,
    now: Millis,
    decl: HostDeclaration,
    claim: HostClaim,
) -> Result<HostRegistration, Error> {
    check(&decl)?;
    let existing = get(db, &decl.id).await?;
    if existing
        .as_ref()
        .is_some_and(|h| h.kind != HostKind::Runner)
    {
        return Err(Error::conflict(
            "host_kind_conflict",
            format!(
                "host {:?} is a server node; a runner needs an id of its own",
                decl.id
            ),
        ));
    }
    if existing.is_some() && !claim.replace {
        // Whoever registers an existing id is given the host's token, and
        // with it the host's link and terminals: only the host itself (its
        // current token) or an admin's explicit replace may.
        let stored = db
            .query_opt(
                "SELECT token_hash FROM hosts WHERE id = $1",
                params![&decl.id],
            )
            .await?
            .map(|r| r.opt_string(0))
            .transpose()?
            .flatten();
        let proven = match (&claim.current_token, &stored) {
            (Some(t), Some(h)) => shepherd_core::token::digests_equal(&hash_token(t), h),
            _ => false,
        };
        if !proven {
            let why = if claim.current_token.is_some() {
                "the host token given is not its current one"
            } else {
                "no host token was given"
            };
            return Err(Error::conflict(
                "host_exists",
                format!(
                    "host {:?} is already registered and {why}: a runner coming back presents its \
                     current host token; an admin can take the host over with replace",
                    decl.id
                ),
            ));
        }
    }
    if existing.is_none() && !claim.may_create {
        return Err(Error::forbidden(
            "host_enrollment_required",
            format!(
                "host {:?} is new: only an admin registers a new host, or a runner that \
                 presents the server's host enrollment token",
                decl.id
            ),
        ));
    }
    let token = format!("{HOST_TOKEN_PREFIX}{}", random_hex(24));
    db.execute(
        "INSERT INTO hosts (id, name, kind, address, sessions_root, agents, slots, token_hash, \
         registered_at, last_seen_at) VALUES ($1, $2, 'runner', NULL, $3, $4, $5, $6, $7, $7) \
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, sessions_root = excluded.sessions_root, \
         agents = excluded.agents, slots = excluded.slots, token_hash = excluded.token_hash, \
         last_seen_at = excluded.last_seen_at",
        params![
            &decl.id,
            decl.name.trim(),
            &decl.sessions_root,
            to_json(&decl.agents),
            decl.slots,
            hash_token(&token),
            now
        ],
    )
    .await?;
    let host = require(db, &decl.id).await?;
    emit(
        db,
        now,
        NewEvent::typed(
            kind::HOST_REGISTERED,
            EventRefs::default(),
            &HostRegistered {
                host_id: host.id.clone(),
                name: host.name.clone(),
                kind: HostKind::Runner,
                re_registered: existing.is_some(),
                sessions_root: host.sessions_root.clone(),
                agents: host.agents.clone(),
            },
        ),
    );
    Ok(HostRegistration {
        host,
        token,
        existed: existing.is_some(),
    })
}

/// Records that a host is still there.
pub async fn seen<D: Db>(db: &mut D, now: Millis, id: &str) -> Result<Host, Error> {
    db.execute(
        "UPDATE hosts SET last_seen_at = $2 WHERE id = $1 AND last_seen_at < $2",
        params![id, now],
    )
    .await?;
    require(db, id).await
}

/// Records that a runner's host opened its link to server node `node`
/// (and so is there).
pub async fn linked<D: Db>(db: &mut D, now: Millis, id: &str, node: &str) -> Result<Host, Error> {
    db.execute(
        "UPDATE hosts SET link_node = $2 WHERE id = $1",
        params![id, node],
    )
    .await?;
    seen(db, now, id).await
}

/// The host a token belongs to, if any.
pub async fn for_token<D: Db>(db: &mut D, token: &str) -> Result<Option<String>, Error> {
    if !token.starts_with(HOST_TOKEN_PREFIX) {
        return Ok(None);
    }
    let row = db
        .query_opt(
            "SELECT id FROM hosts WHERE token_hash = $1",
            params![hash_token(token)],
        )
        .await?;
    row.map(|r| r.string(0)).transpose()
}

/// Whether a host with this id is known (a worker's registration may name
/// only a known host).
pub async fn known<D: Db>(db: &mut D, id: &str) -> Result<bool, Error> {
    Ok(db
        .query_opt("SELECT 1 FROM hosts WHERE id = $1", params![id])
        .await?
        .is_some())
}

/// A host's id for a new runner: random, so two machines never collide.
pub fn new_host_id() -> String {
    format!("host-{}", random_hex(6))
}
