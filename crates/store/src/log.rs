//! Appending to and reading from the event log, written once for both databases.
//!
//! Every state change in the store calls [`append`] inside the same unit of
//! work that changes the tables, so an event exists if and only if its change
//! committed.

use shepherd_core::event::{Event, EventFilter, EventRefs, NewEvent};
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::params;
use crate::sql::{Db, EventRow, Row, Value};

const COLUMNS: &str =
    "seq, ts, type, agent_id, worker_id, task_id, run_id, channel_id, conversation_id, session_id, data, actor";

/// Appends one event and returns its sequence number.
pub async fn append<D: Db>(db: &mut D, now: Millis, e: &NewEvent) -> Result<i64, Error> {
    db.insert_event(EventRow::new(now, e)).await
}

/// Appends one event without waiting for its sequence number (pipelined on
/// PostgreSQL; see [`Db::defer`]).
pub fn append_deferred<D: Db>(db: &mut D, now: Millis, e: &NewEvent) {
    db.defer_event(EventRow::new(now, e));
}

pub(crate) fn event_from_row(row: &Row) -> Result<Event, Error> {
    let seq = row.i64(0)?;
    let raw = row.string(10)?;
    let kind = row.string(2)?;
    let mut data = match serde_json::from_str(&raw) {
        Ok(v) => v,
        Err(e) => {
            // Never silently `null`: say so in the log, and deliver the
            // stored text as it is, so a reader can still see what was there
            // and one bad row does not stop every stream that passes it.
            tracing::error!(seq, error = %e, "event data is not valid JSON; delivered as a string");
            serde_json::Value::String(raw)
        }
    };
    shepherd_core::event::payloads::complete_old_data(&kind, &mut data);
    Ok(Event {
        seq,
        ts: row.i64(1)?,
        kind,
        refs: EventRefs {
            agent_id: row.opt_string(3)?,
            worker_id: row.opt_string(4)?,
            task_id: row.opt_string(5)?,
            run_id: row.opt_string(6)?,
            channel_id: row.opt_string(7)?,
            conversation_id: row.opt_string(8)?,
            session_id: row.opt_string(9)?,
            actor: row.opt_string(11)?,
        },
        data,
    })
}

/// The highest committed sequence number (0 for an empty log).
pub async fn head<D: Db>(db: &mut D) -> Result<i64, Error> {
    db.query_one("SELECT COALESCE(MAX(seq), 0) FROM events", params![])
        .await?
        .i64(0)
}

/// The sequence number below which events have been pruned by retention.
pub async fn pruned_through<D: Db>(db: &mut D) -> Result<i64, Error> {
    let row = db
        .query_opt(
            "SELECT value FROM meta WHERE key = 'events_pruned_through'",
            params![],
        )
        .await?;
    match row {
        // A value that does not parse must not read as "nothing pruned":
        // that would turn off `cursor_expired` and let clients skip events
        // without being told.
        Some(r) => {
            let v = r.string(0)?;
            v.trim().parse().map_err(|_| {
                Error::internal(format!(
                    "meta events_pruned_through holds {v:?}, not a sequence number"
                ))
            })
        }
        None => Ok(0),
    }
}

/// One page of events read after a cursor.
#[derive(Debug, Clone, Default)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Resume after this cursor to continue: the last event returned, or the
    /// head of the log when the page was not full (non-matching events up to
    /// the head have been skipped over, not missed).
    pub next_cursor: i64,
    /// The head of the log when this page was read.
    pub head: i64,
    /// True when `after` points below what retention kept: events are missing
    /// and the reader must reload state (`resync`).
    pub cursor_expired: bool,
}

fn push_filter(sql: &mut String, args: &mut Vec<Value>, column: &str, value: &Option<String>) {
    if let Some(v) = value {
        args.push(Value::Text(v.clone()));
        sql.push_str(&format!(" AND {column} = ${}", args.len()));
    }
}

/// Appends the filter's conditions to `sql`, binding into `args`.
pub(crate) fn filter_sql(sql: &mut String, args: &mut Vec<Value>, filter: &EventFilter) {
    push_filter(sql, args, "agent_id", &filter.agent_id);
    push_filter(sql, args, "worker_id", &filter.worker_id);
    push_filter(sql, args, "task_id", &filter.task_id);
    push_filter(sql, args, "run_id", &filter.run_id);
    push_filter(sql, args, "channel_id", &filter.channel_id);
    push_filter(sql, args, "conversation_id", &filter.conversation_id);
    push_filter(sql, args, "session_id", &filter.session_id);
    push_filter(sql, args, "actor", &filter.actor);
    if filter
        .actor
        .as_deref()
        .is_some_and(|a| !a.contains(':') && a != crate::actor::SYSTEM)
    {
        // The partial index of people's events (migration 0015) is used
        // only when the query repeats its condition.
        sql.push_str(" AND actor NOT LIKE '%:%' AND actor <> 'system'");
    }
    if !filter.kinds.is_empty() {
        let mut parts = Vec::new();
        for k in &filter.kinds {
            match k.strip_suffix('*') {
                Some(prefix) => {
                    args.push(Value::Text(format!(
                        "{}%",
                        prefix.replace('%', "").replace('_', "\\_")
                    )));
                    parts.push(format!("type LIKE ${} ESCAPE '\\'", args.len()));
                }
                None => {
                    args.push(Value::Text(k.clone()));
                    parts.push(format!("type = ${}", args.len()));
                }
            }
        }
        sql.push_str(&format!(" AND ({})", parts.join(" OR ")));
    }
}

/// Runs `SELECT … WHERE <cond> [filter] ORDER BY seq [DESC] LIMIT n`, where
/// `cond` uses `args` as `$1…`.
async fn select_events<D: Db>(
    db: &mut D,
    cond: &str,
    mut args: Vec<Value>,
    filter: &EventFilter,
    limit: i64,
    newest_first: bool,
) -> Result<Vec<Event>, Error> {
    let mut sql = format!("SELECT {COLUMNS} FROM events WHERE {cond}");
    filter_sql(&mut sql, &mut args, filter);
    args.push(Value::Int(limit.max(1)));
    let order = if newest_first { "DESC" } else { "" };
    sql.push_str(&format!(" ORDER BY seq {order} LIMIT ${}", args.len()));
    let rows = db.query(&sql, args).await?;
    rows.iter().map(event_from_row).collect()
}

/// Where a reader continues: after the last event of a full page, else at
/// the head (non-matching events up to it were skipped over, not missed).
fn next_cursor(events: &[Event], limit: i64, head: i64) -> i64 {
    if events.len() as i64 >= limit.max(1) {
        events.last().map(|e| e.seq).unwrap_or(head)
    } else {
        head
    }
}

/// Events after `after` that match `filter`, oldest first, at most `limit`.
pub async fn read_after<D: Db>(
    db: &mut D,
    after: i64,
    filter: &EventFilter,
    limit: i64,
) -> Result<EventPage, Error> {
    let head = head(db).await?;
    let pruned = pruned_through(db).await?;
    let from = after.max(pruned);
    let args = vec![Value::Int(from), Value::Int(head)];
    let events = select_events(db, "seq > $1 AND seq <= $2", args, filter, limit, false).await?;
    Ok(EventPage {
        next_cursor: next_cursor(&events, limit, head),
        events,
        head,
        cursor_expired: after < pruned,
    })
}

/// Every event after `after`, oldest first (the event pump's read).
pub async fn read_new<D: Db>(db: &mut D, after: i64, limit: i64) -> Result<Vec<Event>, Error> {
    select_events(
        db,
        "seq > $1",
        vec![Value::Int(after)],
        &EventFilter::default(),
        limit,
        false,
    )
    .await
}

/// The most recent `limit` events matching `filter`, returned oldest first.
pub async fn read_latest<D: Db>(
    db: &mut D,
    filter: &EventFilter,
    limit: i64,
) -> Result<EventPage, Error> {
    let head = head(db).await?;
    let mut events =
        select_events(db, "seq <= $1", vec![Value::Int(head)], filter, limit, true).await?;
    events.reverse();
    Ok(EventPage {
        events,
        next_cursor: head,
        head,
        cursor_expired: false,
    })
}

/// Events at or after `since` (milliseconds), oldest first, at most `limit`.
pub async fn read_since_ts<D: Db>(
    db: &mut D,
    since: Millis,
    filter: &EventFilter,
    limit: i64,
) -> Result<EventPage, Error> {
    let head = head(db).await?;
    let args = vec![Value::Int(since), Value::Int(head)];
    let events = select_events(db, "ts >= $1 AND seq <= $2", args, filter, limit, false).await?;
    Ok(EventPage {
        next_cursor: next_cursor(&events, limit, head),
        events,
        head,
        cursor_expired: false,
    })
}

/// Deletes events older than `cutoff` in bounded chunks and records how far
/// the log has been pruned, so that readers behind it are told to resync.
pub async fn prune_chunk<D: Db>(db: &mut D, cutoff: Millis, chunk: i64) -> Result<u64, Error> {
    let row = db
        .query_opt(
            "SELECT seq FROM events WHERE ts < $1 ORDER BY seq LIMIT 1 OFFSET $2",
            params![cutoff, chunk - 1],
        )
        .await?;
    let upto = match row {
        Some(r) => r.i64(0)?,
        None => match db
            .query_opt("SELECT MAX(seq) FROM events WHERE ts < $1", params![cutoff])
            .await?
        {
            Some(r) => match r.opt_i64(0)? {
                Some(v) => v,
                None => return Ok(0),
            },
            None => return Ok(0),
        },
    };
    // Never delete the newest event: the log's head must stay readable.
    let head = head(db).await?;
    let upto = upto.min(head - 1);
    if upto <= 0 {
        return Ok(0);
    }
    let n = db
        .execute("DELETE FROM events WHERE seq <= $1", params![upto])
        .await?;
    db.execute(
        "INSERT INTO meta (key, value) VALUES ('events_pruned_through', $1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        params![upto.to_string()],
    )
    .await?;
    Ok(n)
}
