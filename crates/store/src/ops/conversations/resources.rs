//! Resources: channels with the agent their conversations talk to. Creating
//! or renaming one appends `channel.created` or `channel.updated`.

use serde::Serialize;
use shepherd_core::event::payloads::ChannelChanged;
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::ops::{emit, validate_id};
use crate::params;
use crate::sql::{Db, Row};

/// A resource: a channel with the agent its conversations talk to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resource {
    pub id: String,
    pub name: String,
    pub agent_id: Option<String>,
    pub created_at: Millis,
    pub archived_at: Option<Millis>,
    pub active_conversation_id: Option<String>,
    pub processing_conversation_id: Option<String>,
}
const RESOURCE_SELECT: &str = "SELECT ch.id, ch.name, ch.agent_id, ch.created_at, ch.archived_at, \
    (SELECT a.id FROM conversations a WHERE a.resource_id = ch.id AND a.active = 1), \
    (SELECT p.id FROM conversations p WHERE p.resource_id = ch.id AND p.state = 'processing') \
    FROM channels ch";

fn resource_from_row(r: &Row) -> Result<Resource, Error> {
    Ok(Resource {
        id: r.string(0)?,
        name: r.string(1)?,
        agent_id: r.opt_string(2)?,
        created_at: r.i64(3)?,
        archived_at: r.opt_i64(4)?,
        active_conversation_id: r.opt_string(5)?,
        processing_conversation_id: r.opt_string(6)?,
    })
}
pub async fn resource_get<D: Db>(db: &mut D, id: &str) -> Result<Option<Resource>, Error> {
    let sql = format!("{RESOURCE_SELECT} WHERE ch.id = $1");
    db.query_opt(&sql, params![id])
        .await?
        .map(|r| resource_from_row(&r))
        .transpose()
}

pub async fn resource_require<D: Db>(db: &mut D, id: &str) -> Result<Resource, Error> {
    resource_get(db, id)
        .await?
        .ok_or_else(|| Error::not_found("resource_not_found", format!("no resource {id:?}")))
}

/// Resources (channels) that are not archived, by id.
pub async fn resource_list<D: Db>(db: &mut D) -> Result<Vec<Resource>, Error> {
    let sql = format!("{RESOURCE_SELECT} WHERE ch.archived_at IS NULL ORDER BY ch.id");
    db.query(&sql, params![])
        .await?
        .iter()
        .map(resource_from_row)
        .collect()
}

/// Creates a resource or updates its name and agent; says whether it was created.
pub async fn resource_upsert<D: Db>(
    db: &mut D,
    now: Millis,
    id: &str,
    name: &str,
    agent_id: &str,
) -> Result<(Resource, bool), Error> {
    validate_id("resource id", "invalid_resource_id", id)?;
    if name.trim().is_empty() || name.len() > 200 {
        return Err(Error::invalid(
            "invalid_name",
            "a resource name is 1-200 bytes",
        ));
    }
    validate_id("agent_id", "invalid_agent_id", agent_id)?;
    if db
        .query_opt("SELECT 1 FROM agents WHERE id = $1", params![agent_id])
        .await?
        .is_none()
    {
        return Err(Error::invalid(
            "unknown_agent",
            format!("no agent {agent_id:?} is configured or registered"),
        ));
    }
    let existed = db
        .query_opt("SELECT 1 FROM channels WHERE id = $1", params![id])
        .await?
        .is_some();
    db.defer(
        "INSERT INTO channels (id, name, agent_id, created_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (id) DO UPDATE SET name = excluded.name, agent_id = excluded.agent_id",
        params![id, name, agent_id, now],
    );
    emit(
        db,
        now,
        NewEvent::typed(
            if existed {
                kind::CHANNEL_UPDATED
            } else {
                kind::CHANNEL_CREATED
            },
            EventRefs::default()
                .channel(Some(id.to_owned()))
                .agent(agent_id),
            &ChannelChanged {
                name: name.to_owned(),
                agent_id: Some(agent_id.to_owned()),
            },
        ),
    );
    Ok((resource_require(db, id).await?, !existed))
}
