//! A conversation's rows and its state machine: creating, listing and
//! activating conversations, cancelling the current run, and returning to
//! `idle` (then starting what is queued on the resource) once the task ends.
//! Also the agent's own conversation id, reported with a run's progress.

use serde::Serialize;
use serde_json::Value;
use shepherd_core::event::payloads::{
    ConversationActivated, ConversationAgentSession, ConversationCreated, ConversationStateChanged,
};
use shepherd_core::event::{kind, NewEvent};
use shepherd_core::model::Task;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use super::messages::{drop_queued, message_from_row, start_message};
use super::refs;
use super::resources::resource_require;
use crate::ops::tasks::{self, CancelOutcome};
use crate::ops::{emit, new_uuid};
use crate::params;
use crate::sql::{Db, Row};

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
    /// What it is about, for lists: the first line of its first message.
    pub title: Option<String>,
}
/// The columns of a conversation; its title comes from the start of its
/// first message (found by the `(conversation_id, ordinal)` unique index).
const CONVERSATION_COLUMNS: &str = "c.id, c.resource_id, c.state, c.active, c.current_task_id, \
    c.agent_session_id, c.messages, c.created_at, c.updated_at, \
    (SELECT substr(m.text, 1, 400) FROM conversation_messages m \
     WHERE m.conversation_id = c.id ORDER BY m.ordinal LIMIT 1)";

/// Longest title, in characters.
const TITLE_CHARS: usize = 80;

/// A title from the start of a first message: its first line with text,
/// cut to [`TITLE_CHARS`].
fn title_of(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(match line.char_indices().nth(TITLE_CHARS) {
        Some((cut, _)) => format!("{}…", line[..cut].trim_end()),
        None => line.to_owned(),
    })
}

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
        title: r.opt_string(9)?.as_deref().and_then(title_of),
    })
}
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

pub(super) async fn processing_on<D: Db>(
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
/// next page. A conversation with no message is left out unless it is the
/// active one: "New chat" pressed and left does not pile up in the history.
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
         AND (c.messages > 0 OR c.active = 1) \
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
        NewEvent::typed(
            kind::CONVERSATION_CREATED,
            refs(&c),
            &ConversationCreated {
                resource_id: resource_id.to_owned(),
                state: "idle".to_owned(),
                active: true,
                previous_active: previous,
                cancelled,
            },
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

pub(super) async fn make_active<D: Db>(
    db: &mut D,
    now: Millis,
    c: &Conversation,
) -> Result<(), Error> {
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
        NewEvent::typed(
            kind::CONVERSATION_ACTIVATED,
            refs(c),
            &ConversationActivated {
                previous_active: previous,
            },
        ),
    );
    Ok(())
}

pub(super) fn busy(c: &Conversation) -> Error {
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
pub(super) async fn cancel_loaded<D: Db>(
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
        NewEvent::typed(
            kind::CONVERSATION_STATE_CHANGED,
            refs(&c),
            &ConversationStateChanged {
                from: "processing".to_owned(),
                to: "cancelled".to_owned(),
                task_id: c.current_task_id.clone(),
                message_id: None,
                reason: Some(reason.to_owned()),
                task_state: None,
            },
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
        NewEvent::typed(
            kind::CONVERSATION_STATE_CHANGED,
            refs(&c).task(c.current_task_id.clone().unwrap_or_default()),
            &ConversationStateChanged {
                from: c.state.clone(),
                to: "idle".to_owned(),
                task_id: c.current_task_id.clone(),
                message_id: None,
                reason: Some(why.to_owned()),
                task_state: Some(task_state.to_owned()),
            },
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
        NewEvent::typed(
            kind::CONVERSATION_AGENT_SESSION,
            refs(&c).task(&task.vtid),
            &ConversationAgentSession {
                agent_session_id: sid.to_owned(),
                previous: c.agent_session_id.clone(),
            },
        ),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::title_of;

    #[test]
    fn a_title_is_the_first_line_with_text_cut_to_length() {
        assert_eq!(
            title_of("\n  Fix the login bug\nmore"),
            Some("Fix the login bug".into())
        );
        assert_eq!(title_of("  \n \n"), None);
        let long = "é".repeat(100);
        let t = title_of(&long).unwrap();
        assert_eq!(t.chars().count(), 81);
        assert!(t.ends_with('…'));
    }
}
