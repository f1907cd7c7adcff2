//! Messages: sending one (at once, queued, or interrupting the current
//! run), dropping the queued ones, starting the run that answers a message
//! with the earlier turns in its spec, and what a claim of that run's task
//! tells the worker.

use serde::Serialize;
use shepherd_core::event::payloads::{
    ConversationMessageData, ConversationStateChanged, MessagePosted, MessagesDropped,
};
use shepherd_core::event::{kind, NewEvent};
use shepherd_core::model::Task;
use shepherd_core::time::Millis;
use shepherd_core::transcript;
use shepherd_core::Error;

use super::lifecycle::{busy, cancel_loaded, make_active, processing_on, require, Conversation};
use super::refs;
use super::resources::resource_require;
use crate::ops::tasks::{self, NewTask};
use crate::ops::{emit, new_uuid};
use crate::params;
use crate::sql::{Db, Row};

/// Longest user message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 100_000;
/// How much of the earlier turns goes into a spec, at most (the newest kept).
const MAX_HISTORY_BYTES: usize = 60_000;
/// What to do with a message sent while the conversation (or its resource)
/// is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Multitask {
    /// Refuse it: `409 conversation_busy` (the contract's rule).
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

pub use shepherd_core::model::ClaimConversation;
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

pub(super) fn message_from_row(r: &Row) -> Result<Message, Error> {
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
        NewEvent::typed(
            kind::CONVERSATION_MESSAGE,
            refs(c),
            &ConversationMessageData::Posted(MessagePosted {
                message_id: id.clone(),
                ordinal,
                status: status.to_owned(),
                preview: transcript::truncate_utf8(text, 200).into_owned(),
            }),
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
pub(super) async fn drop_queued<D: Db>(
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
            NewEvent::typed(
                kind::CONVERSATION_MESSAGE,
                refs(c),
                &ConversationMessageData::Dropped(MessagesDropped {
                    status: "dropped".to_owned(),
                    count: n as i64,
                    reason: why.to_owned(),
                }),
            ),
        );
    }
    Ok(())
}

/// Starts the run answering a stored message: its task goes to the
/// resource's agent through the normal queue, and the conversation becomes
/// processing (and active).
pub(super) async fn start_message<D: Db>(
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
        NewEvent::typed(
            kind::CONVERSATION_STATE_CHANGED,
            refs(c).task(&task.vtid),
            &ConversationStateChanged {
                from: "idle".to_owned(),
                to: "processing".to_owned(),
                task_id: Some(task.vtid.clone()),
                message_id: Some(m.id.clone()),
                reason: None,
                task_state: None,
            },
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
