//! Conversations on resources (seed 002).
//!
//! A resource is a channel row with the agent its conversations talk to. A
//! conversation is an ordered list of user messages; the agent's reply to a
//! message is the runs of the task that message created, so a reply's steps
//! are that run's transcript. State follows the seed's machine:
//! `idle → processing` when a message is accepted, `processing → idle` when
//! the task ends, `processing → cancelled → idle` on cancel (idle only once
//! the run has really ended). The database holds the rules that matter
//! under concurrency: one processing and one active conversation per
//! resource (partial unique indexes), and a send moves a conversation out of
//! `idle` with a conditional update, so of many concurrent sends one wins.
//!
//! Every change appends an event carrying the conversation and the resource
//! (as `channel_id`); tasks and runs of a conversation carry its id too, so
//! one filter follows a whole conversation.

use serde::Serialize;
use serde_json::{json, Value};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::{Run, Task};
use shepherd_core::time::Millis;
use shepherd_core::transcript::{self, StepsJson, TranscriptStep};
use shepherd_core::Error;

use super::runs::{run_from_row, RUN_COLUMNS, RUN_FROM};
use super::tasks::{self, CancelOutcome, NewTask};
use super::{emit, new_uuid, validate_id};
use crate::params;
use crate::sql::{Db, Row};

/// Longest user message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 100_000;
/// How much of the earlier turns goes into a spec, at most (the newest kept).
const MAX_HISTORY_BYTES: usize = 60_000;

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

/// A conversation row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Conversation {
    pub id: String,
    pub resource_id: String,
    /// `idle | processing | cancelled`.
    pub state: String,
    pub active: bool,
    /// The task answering the latest accepted message.
    pub current_task_id: Option<String>,
    /// The agent's own conversation id, as captured from its output.
    pub agent_session_id: Option<String>,
    /// User messages so far (queued ones included).
    pub messages: i64,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// One entry of a conversation's history: a user message, or one run of
/// the agent replying to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageView {
    pub id: String,
    /// `user` or `agent`.
    pub role: &'static str,
    pub text: Option<String>,
    /// The run (agent messages only).
    pub run_id: Option<String>,
    /// User messages: `queued | sent | dropped`; agent messages: the run's
    /// `running | done | failed | cancelled`.
    pub status: String,
    /// As JSON text: a finished reply's blob is inflated, not parsed.
    pub steps: StepsJson,
    pub created_at: Millis,
}

/// A conversation as loaded by a client: everything persisted so far.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationView {
    pub conversation: Conversation,
    /// The run now replying, if one is running.
    pub active_run_id: Option<String>,
    pub messages: Vec<MessageView>,
    /// The workers that ran its runs: what a worker token may read of it
    /// is the conversations it took part in (as with runs).
    pub workers: Vec<String>,
}

/// What to do with a message sent while the conversation (or its resource)
/// is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Multitask {
    /// Refuse it: `409 conversation_busy` (the seed's rule).
    #[default]
    Reject,
    /// Run it after the current run.
    Enqueue,
    /// Cancel the current run (keeping its partial work), then run it.
    Interrupt,
}

/// A stored user message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: String,
    pub conversation_id: String,
    pub ordinal: i64,
    pub text: String,
    /// `queued | sent | dropped`.
    pub status: String,
    pub task_id: Option<String>,
    pub created_at: Millis,
}

/// What a claim of a conversation's task tells the worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimConversation {
    pub conversation_id: String,
    pub resource_id: String,
    /// The agent's own id for this conversation, if one was captured.
    pub agent_session_id: Option<String>,
    /// The new user message alone (the spec also holds the earlier turns).
    pub message: String,
    /// 1 for the first message of the conversation.
    pub turn: i64,
}

const CONVERSATION_COLUMNS: &str = "c.id, c.resource_id, c.state, c.active, c.current_task_id, \
    c.agent_session_id, c.messages, c.created_at, c.updated_at";

fn conversation_from_row(r: &Row) -> Result<Conversation, Error> {
    Ok(Conversation {
        id: r.string(0)?,
        resource_id: r.string(1)?,
        state: r.string(2)?,
        active: r.bool(3)?,
        current_task_id: r.opt_string(4)?,
        agent_session_id: r.opt_string(5)?,
        messages: r.i64(6)?,
        created_at: r.i64(7)?,
        updated_at: r.i64(8)?,
    })
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

fn refs(c: &Conversation) -> EventRefs {
    EventRefs::default()
        .channel(Some(c.resource_id.clone()))
        .conversation(Some(c.id.clone()))
}

// ----- resources -----

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
        NewEvent::new(
            if existed {
                kind::CHANNEL_UPDATED
            } else {
                kind::CHANNEL_CREATED
            },
            EventRefs::default()
                .channel(Some(id.to_owned()))
                .agent(agent_id),
            json!({ "name": name, "agent_id": agent_id }),
        ),
    );
    Ok((resource_require(db, id).await?, !existed))
}

// ----- conversations -----

pub async fn get<D: Db>(db: &mut D, id: &str) -> Result<Option<Conversation>, Error> {
    let sql = format!("SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = $1");
    db.query_opt(&sql, params![id])
        .await?
        .map(|r| conversation_from_row(&r))
        .transpose()
}

pub async fn require<D: Db>(db: &mut D, id: &str) -> Result<Conversation, Error> {
    get(db, id).await?.ok_or_else(|| {
        Error::not_found("conversation_not_found", format!("no conversation {id:?}"))
    })
}

async fn processing_on<D: Db>(
    db: &mut D,
    resource_id: &str,
) -> Result<Option<Conversation>, Error> {
    let sql = format!(
        "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.resource_id = $1 AND c.state = 'processing'"
    );
    db.query_opt(&sql, params![resource_id])
        .await?
        .map(|r| conversation_from_row(&r))
        .transpose()
}

/// A page of a resource's conversations, newest first, and the token of the
/// next page.
pub async fn list<D: Db>(
    db: &mut D,
    resource_id: &str,
    before: Option<&str>,
    limit: i64,
) -> Result<(Vec<Conversation>, Option<String>), Error> {
    resource_require(db, resource_id).await?;
    let (ts, id) = match before {
        None => (i64::MAX, String::new()),
        Some(token) => parse_page_token(token)?,
    };
    let sql = format!(
        "SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.resource_id = $1 \
         AND (c.created_at < $2 OR (c.created_at = $2 AND c.id < $3) OR $4 = 1) \
         ORDER BY c.created_at DESC, c.id DESC LIMIT $5"
    );
    let first = before.is_none() as i64;
    let rows = db
        .query(&sql, params![resource_id, ts, &id, first, limit + 1])
        .await?;
    let mut list = rows
        .iter()
        .map(conversation_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let next = if list.len() as i64 > limit {
        list.truncate(limit as usize);
        list.last().map(|c| format!("{}_{}", c.created_at, c.id))
    } else {
        None
    };
    Ok((list, next))
}

fn parse_page_token(token: &str) -> Result<(i64, String), Error> {
    let bad = || Error::bad_request("invalid_page_token", format!("bad page token {token:?}"));
    let (ts, id) = token.split_once('_').ok_or_else(bad)?;
    Ok((ts.parse().map_err(|_| bad())?, id.to_owned()))
}

/// Starts a new conversation on a resource and makes it the active one. A
/// conversation processing there is cancelled first (its partial work kept).
pub async fn create<D: Db>(
    db: &mut D,
    now: Millis,
    resource_id: &str,
) -> Result<Conversation, Error> {
    let resource = resource_require(db, resource_id).await?;
    if resource.archived_at.is_some() {
        return Err(Error::conflict(
            "resource_archived",
            format!("resource {resource_id:?} is archived"),
        ));
    }
    let cancelled = match processing_on(db, resource_id).await? {
        Some(busy) => {
            cancel_loaded(db, now, busy.clone(), "a new conversation was started").await?;
            Some(busy.id)
        }
        None => None,
    };
    let previous = resource.active_conversation_id.clone();
    db.execute(
        "UPDATE conversations SET active = 0, updated_at = $2 WHERE resource_id = $1 AND active = 1",
        params![resource_id, now],
    )
    .await?;
    let id = new_uuid();
    db.execute(
        "INSERT INTO conversations (id, resource_id, state, active, messages, created_at, updated_at) \
         VALUES ($1, $2, 'idle', 1, 0, $3, $3)",
        params![&id, resource_id, now],
    )
    .await?;
    let c = require(db, &id).await?;
    emit(
        db,
        now,
        NewEvent::new(
            kind::CONVERSATION_CREATED,
            refs(&c),
            json!({ "resource_id": resource_id, "state": "idle", "active": true,
                    "previous_active": previous, "cancelled": cancelled }),
        ),
    );
    Ok(c)
}

/// Makes a conversation the active one of its resource; a conversation
/// processing there is cancelled first (its partial work kept).
pub async fn activate<D: Db>(db: &mut D, now: Millis, id: &str) -> Result<Conversation, Error> {
    let c = require(db, id).await?;
    if c.active {
        return Ok(c);
    }
    if let Some(busy) = processing_on(db, &c.resource_id).await? {
        if busy.id != c.id {
            cancel_loaded(db, now, busy, "another conversation was activated").await?;
        }
    }
    make_active(db, now, &c).await?;
    require(db, id).await
}

async fn make_active<D: Db>(db: &mut D, now: Millis, c: &Conversation) -> Result<(), Error> {
    if c.active {
        return Ok(());
    }
    let previous = db
        .query_opt(
            "SELECT id FROM conversations WHERE resource_id = $1 AND active = 1",
            params![&c.resource_id],
        )
        .await?
        .map(|r| r.string(0))
        .transpose()?;
    db.execute(
        "UPDATE conversations SET active = 0, updated_at = $2 WHERE resource_id = $1 AND active = 1",
        params![&c.resource_id, now],
    )
    .await?;
    db.execute(
        "UPDATE conversations SET active = 1, updated_at = $2 WHERE id = $1",
        params![&c.id, now],
    )
    .await?;
    emit(
        db,
        now,
        NewEvent::new(
            kind::CONVERSATION_ACTIVATED,
            refs(c),
            json!({ "previous_active": previous }),
        ),
    );
    Ok(())
}

fn busy(c: &Conversation) -> Error {
    let why = if c.state == "cancelled" {
        "its cancelled run is still stopping"
    } else {
        "the agent is working on the previous message"
    };
    Error::conflict(
        "conversation_busy",
        format!(
            "conversation {} is {} ({why}); wait, cancel, or send with multitask \"enqueue\" or \"interrupt\"",
            c.id, c.state
        ),
    )
}

/// What a send did.
#[derive(Debug, Clone, PartialEq)]
pub struct SendOutcome {
    pub message: Message,
    pub conversation: Conversation,
}

/// Stores a user message. On an idle conversation of a free resource it
/// starts a run on the resource's agent at once; otherwise `multitask`
/// decides (refuse, queue, or cancel the current run and queue).
pub async fn send<D: Db>(
    db: &mut D,
    now: Millis,
    id: &str,
    text: &str,
    multitask: Multitask,
) -> Result<SendOutcome, Error> {
    if text.trim().is_empty() {
        return Err(Error::invalid("invalid_text", "text must not be empty"));
    }
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(Error::invalid(
            "invalid_text",
            format!("text is at most {MAX_MESSAGE_BYTES} bytes"),
        ));
    }
    let c = require(db, id).await?;
    let resource = resource_require(db, &c.resource_id).await?;
    if resource.agent_id.is_none() {
        return Err(Error::conflict(
            "resource_has_no_agent",
            format!(
                "resource {:?} names no agent; set one with POST /api/v1/resources",
                resource.id
            ),
        ));
    }
    // Who is in the way: this conversation, or another one of the resource.
    let blocker = if c.state != "idle" {
        Some(c.clone())
    } else {
        processing_on(db, &c.resource_id).await?
    };
    match (blocker, multitask) {
        (None, _) => {
            let m = insert_message(db, now, &c, text, "queued").await?;
            let m = start_message(db, now, &c, m).await?;
            Ok(SendOutcome {
                message: m,
                conversation: require(db, id).await?,
            })
        }
        (Some(b), Multitask::Reject) => Err(if b.id == c.id {
            busy(&b)
        } else {
            Error::conflict(
                "resource_busy",
                format!(
                    "conversation {} of resource {:?} is processing; wait, cancel it, or send with multitask \"enqueue\" or \"interrupt\"",
                    b.id, c.resource_id
                ),
            )
        }),
        (Some(_), Multitask::Enqueue) => {
            let m = insert_message(db, now, &c, text, "queued").await?;
            Ok(SendOutcome {
                message: m,
                conversation: require(db, id).await?,
            })
        }
        (Some(b), Multitask::Interrupt) => {
            drop_queued(db, now, &c, "replaced by an interrupting message").await?;
            let m = insert_message(db, now, &c, text, "queued").await?;
            if b.state == "processing" {
                // May end the run at once (nobody had claimed it yet); then
                // the queued message starts inside this same call.
                cancel_loaded(db, now, b, "interrupted by a new message").await?;
            }
            let message = message_require(db, &m.id).await?;
            Ok(SendOutcome {
                message,
                conversation: require(db, id).await?,
            })
        }
    }
}

async fn message_require<D: Db>(db: &mut D, id: &str) -> Result<Message, Error> {
    let r = db
        .query_opt(
            "SELECT id, conversation_id, ordinal, text, status, task_id, created_at \
             FROM conversation_messages WHERE id = $1",
            params![id],
        )
        .await?
        .ok_or_else(|| Error::internal(format!("message {id} vanished")))?;
    message_from_row(&r)
}

fn message_from_row(r: &Row) -> Result<Message, Error> {
    Ok(Message {
        id: r.string(0)?,
        conversation_id: r.string(1)?,
        ordinal: r.i64(2)?,
        text: r.string(3)?,
        status: r.string(4)?,
        task_id: r.opt_string(5)?,
        created_at: r.i64(6)?,
    })
}

async fn insert_message<D: Db>(
    db: &mut D,
    now: Millis,
    c: &Conversation,
    text: &str,
    status: &str,
) -> Result<Message, Error> {
    let id = new_uuid();
    let row = db
        .query_one(
            "UPDATE conversations SET messages = messages + 1, updated_at = $2 WHERE id = $1 RETURNING messages",
            params![&c.id, now],
        )
        .await?;
    let ordinal = row.i64(0)?;
    db.defer(
        "INSERT INTO conversation_messages (id, conversation_id, resource_id, ordinal, text, status, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        params![&id, &c.id, &c.resource_id, ordinal, text, status, now],
    );
    emit(
        db,
        now,
        NewEvent::new(
            kind::CONVERSATION_MESSAGE,
            refs(c),
            json!({ "message_id": id, "ordinal": ordinal, "status": status,
                    "preview": transcript::truncate_utf8(text, 200) }),
        ),
    );
    Ok(Message {
        id,
        conversation_id: c.id.clone(),
        ordinal,
        text: text.to_owned(),
        status: status.to_owned(),
        task_id: None,
        created_at: now,
    })
}

/// Queued messages of a conversation are dropped when it is cancelled.
async fn drop_queued<D: Db>(
    db: &mut D,
    now: Millis,
    c: &Conversation,
    why: &str,
) -> Result<(), Error> {
    let n = db
        .execute(
            "UPDATE conversation_messages SET status = 'dropped' WHERE conversation_id = $1 AND status = 'queued'",
            params![&c.id],
        )
        .await?;
    if n > 0 {
        emit(
            db,
            now,
            NewEvent::new(
                kind::CONVERSATION_MESSAGE,
                refs(c),
                json!({ "status": "dropped", "count": n, "reason": why }),
            ),
        );
    }
    Ok(())
}

/// Starts the run answering a stored message: its task goes to the
/// resource's agent through the normal queue, and the conversation becomes
/// processing (and active).
async fn start_message<D: Db>(
    db: &mut D,
    now: Millis,
    c: &Conversation,
    mut m: Message,
) -> Result<Message, Error> {
    let resource = resource_require(db, &c.resource_id).await?;
    let Some(agent) = resource.agent_id.clone() else {
        return Err(Error::conflict(
            "resource_has_no_agent",
            format!("resource {:?} names no agent", resource.id),
        ));
    };
    // The conditional update is what makes one of many concurrent sends win.
    let moved = db
        .execute(
            "UPDATE conversations SET state = 'processing', updated_at = $2 WHERE id = $1 AND state = 'idle'",
            params![&c.id, now],
        )
        .await?;
    if moved == 0 {
        return Err(busy(&require(db, &c.id).await?));
    }
    let spec = spec_with_history(db, c, &m).await?;
    let first_line = m.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let title = format!(
        "{}: {}",
        resource.name,
        transcript::truncate_utf8(first_line.trim(), 160)
    );
    let task = tasks::create(
        db,
        now,
        NewTask {
            title,
            spec,
            agent_id: Some(agent),
            channel_id: Some(c.resource_id.clone()),
            conversation_id: Some(c.id.clone()),
            dispatch: true,
            ..Default::default()
        },
    )
    .await?;
    db.defer(
        "UPDATE conversation_messages SET status = 'sent', task_id = $2 WHERE id = $1",
        params![&m.id, &task.vtid],
    );
    db.defer(
        "UPDATE conversations SET current_task_id = $2 WHERE id = $1",
        params![&c.id, &task.vtid],
    );
    m.status = "sent".into();
    m.task_id = Some(task.vtid.clone());
    emit(
        db,
        now,
        NewEvent::new(
            kind::CONVERSATION_STATE_CHANGED,
            refs(c).task(&task.vtid),
            json!({ "from": "idle", "to": "processing", "message_id": m.id, "task_id": task.vtid }),
        ),
    );
    let fresh = require(db, &c.id).await?;
    make_active(db, now, &fresh).await?;
    // The partial unique index has the last word on "one processing
    // conversation per resource" (several server nodes).
    db.flush().await.map_err(|e| {
        if e.code == crate::sql::CONSTRAINT_VIOLATION {
            Error::conflict(
                "resource_busy",
                format!(
                    "another conversation of resource {:?} is processing",
                    c.resource_id
                ),
            )
        } else {
            e
        }
    })?;
    Ok(m)
}

/// The spec of a message's task: the message, after the earlier turns.
/// Agents that continue their own conversation get the message alone (the
/// claim carries it); any other worker reads the history here.
async fn spec_with_history<D: Db>(
    db: &mut D,
    c: &Conversation,
    m: &Message,
) -> Result<String, Error> {
    if m.ordinal <= 1 {
        return Ok(m.text.clone());
    }
    let rows = db
        .query(
            "SELECT m.ordinal, m.text, \
             (SELECT r.result FROM runs r WHERE r.task_id = m.task_id ORDER BY r.started_at DESC, r.id DESC LIMIT 1), \
             (SELECT r.status FROM runs r WHERE r.task_id = m.task_id ORDER BY r.started_at DESC, r.id DESC LIMIT 1) \
             FROM conversation_messages m WHERE m.conversation_id = $1 AND m.status = 'sent' AND m.ordinal < $2 \
             ORDER BY m.ordinal",
            params![&c.id, m.ordinal],
        )
        .await?;
    let mut turns = Vec::new();
    for r in &rows {
        let mut t = format!("## User\n\n{}\n\n", r.string(1)?.trim_end());
        match (r.opt_string(2)?, r.opt_string(3)?) {
            (Some(reply), Some(status)) => {
                t.push_str(&format!("## Agent ({status})\n\n{}\n\n", reply.trim_end()))
            }
            (None, Some(status)) => t.push_str(&format!("## Agent ({status}, no text)\n\n")),
            _ => t.push_str("## Agent (no reply)\n\n"),
        }
        turns.push(t);
    }
    // Keep the newest turns within the budget.
    let mut kept = Vec::new();
    let mut size = 0;
    for t in turns.iter().rev() {
        if size + t.len() > MAX_HISTORY_BYTES {
            break;
        }
        size += t.len();
        kept.push(t.as_str());
    }
    kept.reverse();
    let omitted = turns.len() - kept.len();
    let mut spec =
        String::from("This message continues an earlier conversation. The turns so far:\n\n");
    if omitted > 0 {
        spec.push_str(&format!("({omitted} earlier turns omitted)\n\n"));
    }
    for t in kept {
        spec.push_str(t);
    }
    spec.push_str("## User (the new message, to answer now)\n\n");
    spec.push_str(&m.text);
    Ok(spec)
}

/// Cancels a conversation's current run: the conversation is `cancelled`
/// until the run has really ended, then `idle`.
pub async fn cancel<D: Db>(
    db: &mut D,
    now: Millis,
    id: &str,
    reason: Option<String>,
) -> Result<Conversation, Error> {
    let c = require(db, id).await?;
    match c.state.as_str() {
        "idle" => Err(Error::conflict(
            "conversation_idle",
            format!("conversation {id} is idle; there is nothing to cancel"),
        )),
        // Already stopping: asking again changes nothing.
        "cancelled" => Ok(c),
        _ => {
            drop_queued(db, now, &c, "the conversation was cancelled").await?;
            let reason = reason.unwrap_or_else(|| "cancelled by the user".into());
            cancel_loaded(db, now, c, &reason).await?;
            require(db, id).await
        }
    }
}

/// processing → cancelled, and the cancel of its task (which reaches the
/// worker at once). A task nobody had claimed ends here, and with it the
/// cancelled state (see [`task_finished`]).
async fn cancel_loaded<D: Db>(
    db: &mut D,
    now: Millis,
    c: Conversation,
    reason: &str,
) -> Result<(), Error> {
    let moved = db
        .execute(
            "UPDATE conversations SET state = 'cancelled', updated_at = $2 WHERE id = $1 AND state = 'processing'",
            params![&c.id, now],
        )
        .await?;
    if moved == 0 {
        return Ok(());
    }
    emit(
        db,
        now,
        NewEvent::new(
            kind::CONVERSATION_STATE_CHANGED,
            refs(&c),
            json!({ "from": "processing", "to": "cancelled", "reason": reason, "task_id": c.current_task_id }),
        ),
    );
    let Some(vtid) = c.current_task_id.clone() else {
        return settle(db, now, &c.id, "cancelled", "no task was running").await;
    };
    match tasks::cancel(db, now, &vtid, Some(reason.to_owned())).await {
        Ok((_, CancelOutcome::Requested { .. })) | Ok((_, CancelOutcome::Cancelled)) => Ok(()),
        // The task had ended already without the conversation noticing.
        Err(e) if e.code == "task_finished" => {
            settle(db, now, &c.id, "cancelled", "the task had already ended").await
        }
        Err(e) => Err(e),
    }
}

/// Called when a conversation's task reaches a final state (from the one
/// place task states change): the conversation returns to idle, and the
/// oldest message queued on the resource, if any, starts.
///
/// Boxed with an explicit `Send`: starting the next message creates a task,
/// which comes back through task state changes, so the future is recursive.
pub(crate) fn task_finished<'a, D: Db>(
    db: &'a mut D,
    now: Millis,
    task: &'a Task,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send + 'a>> {
    Box::pin(async move {
        let Some(cid) = &task.conversation_id else {
            return Ok(());
        };
        let Some(c) = get(db, cid).await? else {
            return Ok(());
        };
        if c.current_task_id.as_deref() != Some(task.vtid.as_str()) || c.state == "idle" {
            return Ok(());
        }
        settle(db, now, &c.id, &task.state, "the run ended").await
    })
}

/// Moves a busy conversation to idle and starts what waits on its resource.
async fn settle<D: Db>(
    db: &mut D,
    now: Millis,
    id: &str,
    task_state: &str,
    why: &str,
) -> Result<(), Error> {
    let c = require(db, id).await?;
    if c.state == "idle" {
        return Ok(());
    }
    db.execute(
        "UPDATE conversations SET state = 'idle', updated_at = $2 WHERE id = $1",
        params![id, now],
    )
    .await?;
    emit(
        db,
        now,
        NewEvent::new(
            kind::CONVERSATION_STATE_CHANGED,
            refs(&c).task(c.current_task_id.clone().unwrap_or_default()),
            json!({ "from": c.state, "to": "idle", "task_id": c.current_task_id,
                    "task_state": task_state, "reason": why }),
        ),
    );
    start_queued(db, now, &c.resource_id).await
}

/// Starts the oldest queued message of a resource if no conversation there
/// is processing and the message's conversation is idle.
async fn start_queued<D: Db>(db: &mut D, now: Millis, resource_id: &str) -> Result<(), Error> {
    if processing_on(db, resource_id).await?.is_some() {
        return Ok(());
    }
    let next = db
        .query_opt(
            "SELECT m.id, m.conversation_id, m.ordinal, m.text, m.status, m.task_id, m.created_at \
             FROM conversation_messages m JOIN conversations c ON c.id = m.conversation_id \
             WHERE m.resource_id = $1 AND m.status = 'queued' AND c.state = 'idle' \
             ORDER BY m.created_at, m.ordinal LIMIT 1",
            params![resource_id],
        )
        .await?;
    if let Some(r) = next {
        let m = message_from_row(&r)?;
        let c = require(db, &m.conversation_id).await?;
        start_message(db, now, &c, m).await?;
    }
    Ok(())
}

/// The agent's own conversation id a progress report carries, checked
/// before anything is written: the next turn's command line holds it
/// (`--resume <id>`), so one that could read as an option (`--evil=/x`) or
/// hold anything but ASCII letters, digits, `-` and `_` is refused with 422
/// `invalid_agent_session_id`. `metadata.agent_session_id` names the id
/// outright and is checked on any task; `metadata.session_id` is that id
/// only on a conversation's task (elsewhere it is the worker's own
/// business). `None` when the task has no conversation or no id is given.
pub(crate) fn reported_agent_session(
    task: &Task,
    metadata: &Value,
) -> Result<Option<String>, Error> {
    let named = metadata.get("agent_session_id").and_then(Value::as_str);
    let sid = match &task.conversation_id {
        Some(_) => named.or_else(|| metadata.get("session_id").and_then(Value::as_str)),
        None => named,
    };
    let Some(sid) = sid.filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    shepherd_core::cmdline::check_agent_session_id(sid).map_err(|why| {
        Error::invalid(
            "invalid_agent_session_id",
            format!("metadata agent session id {sid:?}: {why}"),
        )
    })?;
    Ok(task.conversation_id.as_ref().map(|_| sid.to_owned()))
}

/// Records the agent's own conversation id reported with a run's progress
/// (checked by [`reported_agent_session`]), when it changed.
pub(crate) async fn note_agent_session<D: Db>(
    db: &mut D,
    now: Millis,
    task: &Task,
    sid: &str,
) -> Result<(), Error> {
    let Some(cid) = &task.conversation_id else {
        return Ok(());
    };
    let Some(c) = get(db, cid).await? else {
        return Ok(());
    };
    if c.agent_session_id.as_deref() == Some(sid) {
        return Ok(());
    }
    db.defer(
        "UPDATE conversations SET agent_session_id = $2, updated_at = $3 WHERE id = $1",
        params![cid, sid, now],
    );
    emit(
        db,
        now,
        NewEvent::new(
            kind::CONVERSATION_AGENT_SESSION,
            refs(&c).task(&task.vtid),
            json!({ "agent_session_id": sid, "previous": c.agent_session_id }),
        ),
    );
    Ok(())
}

/// What the worker claiming a conversation's task needs to continue it.
pub(crate) async fn claim_context<D: Db>(
    db: &mut D,
    task: &Task,
) -> Result<Option<ClaimConversation>, Error> {
    let Some(cid) = &task.conversation_id else {
        return Ok(None);
    };
    let row = db
        .query_opt(
            "SELECT c.resource_id, c.agent_session_id, m.text, m.ordinal FROM conversations c \
             JOIN conversation_messages m ON m.conversation_id = c.id AND m.task_id = $2 WHERE c.id = $1",
            params![cid, &task.vtid],
        )
        .await?;
    let Some(r) = row else {
        return Ok(None);
    };
    Ok(Some(ClaimConversation {
        conversation_id: cid.clone(),
        resource_id: r.string(0)?,
        agent_session_id: r.opt_string(1)?,
        message: r.string(2)?,
        turn: r.i64(3)?,
    }))
}

/// Everything persisted of a conversation: its messages and, for each, the
/// runs replying to it with their steps (rows while running, the
/// transcript blob once finished).
pub async fn load<D: Db>(db: &mut D, id: &str) -> Result<ConversationView, Error> {
    let conversation = require(db, id).await?;
    let messages = db
        .query(
            "SELECT id, conversation_id, ordinal, text, status, task_id, created_at \
             FROM conversation_messages WHERE conversation_id = $1 ORDER BY ordinal",
            params![id],
        )
        .await?
        .iter()
        .map(message_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    let sql = format!(
        "SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.conversation_id = $1 ORDER BY r.started_at, r.id"
    );
    let runs = db
        .query(&sql, params![id])
        .await?
        .iter()
        .map(run_from_row)
        .collect::<Result<Vec<Run>, _>>()?;
    let mut finished: std::collections::HashMap<String, StepsJson> = Default::default();
    if runs.iter().any(|r| r.has_transcript) {
        let rows = db
            .query(
                "SELECT t.run_id, t.blob FROM run_transcripts t JOIN runs r ON r.id = t.run_id \
                 WHERE r.conversation_id = $1",
                params![id],
            )
            .await?;
        for r in &rows {
            let run_id = r.string(0)?;
            let steps = match r.opt_blob(1)? {
                // Inflated (once per blob, see `inflated`), not parsed: the
                // client gets this text as is.
                Some(blob) => crate::inflated::steps_json(&run_id, &blob).map_err(|e| {
                    Error::new(
                        shepherd_core::ErrorKind::Internal,
                        "transcript_corrupt",
                        format!("the stored transcript of run {run_id} cannot be read: {e}"),
                    )
                })?,
                None => StepsJson::default(),
            };
            finished.insert(run_id, steps);
        }
    }
    let mut live: std::collections::HashMap<String, Vec<TranscriptStep>> = Default::default();
    if runs
        .iter()
        .any(|r| r.status == "running" && r.step_count > 0)
    {
        let rows = db
            .query(
                "SELECT s.run_id, s.body FROM run_steps s JOIN runs r ON r.id = s.run_id \
                 WHERE r.conversation_id = $1 AND r.status = 'running' ORDER BY s.run_id, s.idx",
                params![id],
            )
            .await?;
        for r in &rows {
            live.entry(r.string(0)?)
                .or_default()
                .push(r.json::<TranscriptStep>(1)?);
        }
    }
    let mut workers: Vec<String> = Vec::new();
    for run in &runs {
        if !workers.contains(&run.worker_id) {
            workers.push(run.worker_id.clone());
        }
    }
    let mut by_task: std::collections::HashMap<String, Vec<Run>> = Default::default();
    let mut active_run_id = None;
    for run in runs {
        if run.status == "running"
            && conversation.current_task_id.as_deref() == Some(run.vtid.as_str())
        {
            active_run_id = Some(run.id.clone());
        }
        by_task.entry(run.vtid.clone()).or_default().push(run);
    }
    let mut out = Vec::with_capacity(messages.len() * 2);
    for m in messages {
        let replies = m
            .task_id
            .as_ref()
            .and_then(|t| by_task.remove(t))
            .unwrap_or_default();
        out.push(MessageView {
            id: m.id,
            role: "user",
            text: Some(m.text),
            run_id: None,
            status: m.status,
            steps: StepsJson::default(),
            created_at: m.created_at,
        });
        for run in replies {
            let steps = if run.status == "running" {
                // Step rows are parsed and re-serialised: PostgreSQL's
                // jsonb does not give back the text that was written.
                StepsJson::from_steps(&live.remove(&run.id).unwrap_or_default())
            } else {
                finished.remove(&run.id).unwrap_or_default()
            };
            out.push(MessageView {
                id: run.id.clone(),
                role: "agent",
                text: run.result.clone(),
                run_id: Some(run.id),
                status: run.status,
                steps,
                created_at: run.started_at,
            });
        }
    }
    Ok(ConversationView {
        conversation,
        active_run_id,
        messages: out,
        workers,
    })
}
