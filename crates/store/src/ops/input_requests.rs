//! Input requests: what a run's agent asks a person, stored as it is asked
//! and answered exactly once.
//!
//! A request is a row from the moment it is made, so that a restart of the
//! server (or `kill -9`) loses nothing: the asker keeps waiting and reads
//! the answer when it comes. The answer is written by an `UPDATE … WHERE
//! state = 'pending'`, so of two answers given at the same moment (two
//! devices, two server nodes) exactly one changes the row; the other is
//! told `already_answered`. The run's `pending_input` counts its pending
//! requests and its `live_status` says what it waits for; both change in
//! the same unit of work as the request, with their events.

use serde_json::Value as Json;
use shepherd_core::event::payloads::{InputAnswered, InputRequested, RunStatusChanged};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::input::{
    Decision, InputAnswer, InputKind, InputRequest, InputState, PermissionPolicy, MAX_OPTIONS,
    MAX_TEXT,
};
use shepherd_core::status::RunStatus;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use super::runs::{require as require_run, run_refs};
use super::{emit, new_uuid, random_hex, to_json};
use crate::params;
use crate::sql::{Db, Row, Value};

/// A request as the asker makes it.
#[derive(Debug, Clone, Default)]
pub struct NewInputRequest {
    pub run_id: String,
    pub kind: Option<InputKind>,
    /// The asker's key: asking again with the same key returns the same request.
    pub key: Option<String>,
    pub tool_name: Option<String>,
    pub tool_input: Option<Json>,
    pub prompt: Option<String>,
    pub options: Vec<String>,
    /// The run's agent's policy (rules, timeout), from the server's configuration.
    pub policy: PermissionPolicy,
}

/// Which requests to list.
#[derive(Debug, Clone, Default)]
pub struct InputFilter {
    pub state: Option<InputState>,
    pub run_id: Option<String>,
    pub vtid: Option<String>,
    pub limit: i64,
}

const COLUMNS: &str = "id, kind, run_id, task_id, vtid, agent_id, conversation_id, tool_name, \
     tool_input, prompt, options, state, answer, answered_by, created_at, answered_at, expires_at, on_timeout";

fn from_row(r: &Row) -> Result<InputRequest, Error> {
    Ok(InputRequest {
        id: r.string(0)?,
        kind: r.word(1)?,
        run_id: r.string(2)?,
        task_id: r.string(3)?,
        vtid: r.string(4)?,
        agent_id: r.string(5)?,
        conversation_id: r.opt_string(6)?,
        tool_name: r.opt_string(7)?,
        tool_input: r
            .opt_string(8)?
            .map(|t| serde_json::from_str(&t).unwrap_or(Json::String(t))),
        prompt: r.opt_string(9)?,
        options: r.json(10)?,
        state: r.word(11)?,
        answer: match r.opt_string(12)? {
            Some(a) => {
                Some(serde_json::from_str(&a).map_err(|e| {
                    Error::internal(format!("input request answer unreadable: {e}"))
                })?)
            }
            None => None,
        },
        answered_by: r.opt_string(13)?,
        created_at: r.i64(14)?,
        answered_at: r.opt_i64(15)?,
        expires_at: r.opt_i64(16)?,
    })
}

pub async fn get<D: Db>(db: &mut D, id: &str) -> Result<InputRequest, Error> {
    let row = db
        .query_opt(
            &format!("SELECT {COLUMNS} FROM input_requests WHERE id = $1"),
            params![id],
        )
        .await?
        .ok_or_else(|| {
            Error::not_found(
                "input_request_not_found",
                format!("no input request {id:?}"),
            )
        })?;
    from_row(&row)
}

/// Requests, newest first.
pub async fn list<D: Db>(db: &mut D, f: &InputFilter) -> Result<Vec<InputRequest>, Error> {
    let mut clauses = Vec::new();
    let mut args: Vec<Value> = Vec::new();
    if let Some(s) = f.state {
        args.push(s.as_str().into());
        clauses.push(format!("state = ${}", args.len()));
    }
    if let Some(r) = &f.run_id {
        args.push(r.into());
        clauses.push(format!("run_id = ${}", args.len()));
    }
    if let Some(v) = &f.vtid {
        args.push(v.into());
        clauses.push(format!("vtid = ${}", args.len()));
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    args.push(Value::Int(f.limit));
    let rows = db
        .query(
            &format!(
                "SELECT {COLUMNS} FROM input_requests {filter} ORDER BY created_at DESC, id DESC LIMIT ${}",
                args.len()
            ),
            args,
        )
        .await?;
    rows.iter().map(from_row).collect()
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid("invalid_input_request", message)
}

/// Checks what the asker sent and settles the kind.
fn checked(new: &NewInputRequest) -> Result<InputKind, Error> {
    let kind = new.kind.unwrap_or(if new.tool_name.is_some() {
        InputKind::Permission
    } else {
        InputKind::Question
    });
    let long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > MAX_TEXT);
    if long(&new.prompt) || long(&new.tool_name) || long(&new.key) {
        return Err(invalid(format!(
            "prompt, tool_name and key are at most {MAX_TEXT} bytes"
        )));
    }
    if new
        .tool_input
        .as_ref()
        .is_some_and(|i| to_json(i).len() > 256 * 1024)
    {
        return Err(invalid("tool_input is at most 256 KiB of JSON"));
    }
    match kind {
        InputKind::Permission => {
            if new.tool_name.as_deref().is_none_or(str::is_empty) {
                return Err(invalid("a permission request names its tool_name"));
            }
            if !new.options.is_empty() {
                return Err(invalid("options belong to questions"));
            }
        }
        InputKind::Question => {
            if new.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
                return Err(invalid("a question has a prompt"));
            }
            if new.tool_name.is_some() || new.tool_input.is_some() {
                return Err(invalid(
                    "tool_name and tool_input belong to permission requests",
                ));
            }
            if new.options.len() > MAX_OPTIONS
                || new.options.iter().any(|o| o.is_empty() || o.len() > 200)
            {
                return Err(invalid(format!(
                    "at most {MAX_OPTIONS} options, each 1 to 200 bytes"
                )));
            }
            let mut seen = std::collections::HashSet::new();
            if !new.options.iter().all(|o| seen.insert(o)) {
                return Err(invalid("options are different from each other"));
            }
        }
    }
    Ok(kind)
}

/// What the run's live status says while it waits.
fn waiting_status(r: &InputRequest) -> String {
    match (&r.kind, &r.tool_name, &r.prompt) {
        (InputKind::Permission, Some(tool), _) => format!("waiting for approval: {tool}"),
        (_, _, Some(p)) => {
            let mut p: String = p.chars().take(120).collect();
            if p.len() < r.prompt.as_deref().map_or(0, str::len) {
                p.push('…');
            }
            format!("waiting for an answer: {p}")
        }
        _ => "waiting for input".into(),
    }
}

/// Records a request; a rule of the agent's policy may answer it at once.
/// Asking again with the same key returns the first request as it is now.
pub async fn ask<D: Db>(
    db: &mut D,
    now: Millis,
    new: NewInputRequest,
) -> Result<InputRequest, Error> {
    let kind = checked(&new)?;
    if let Some(key) = &new.key {
        if let Some(row) = db
            .query_opt(
                &format!("SELECT {COLUMNS} FROM input_requests WHERE run_id = $1 AND ask_key = $2"),
                params![&new.run_id, key],
            )
            .await?
        {
            return from_row(&row);
        }
    }
    let run = require_run(db, &new.run_id).await?;
    if run.status != RunStatus::Running {
        return Err(Error::conflict(
            "run_not_running",
            format!(
                "run {} ended {}; it cannot ask anything",
                run.id, run.status
            ),
        ));
    }
    let ruled = match (kind, &new.tool_name) {
        (InputKind::Permission, Some(tool)) => new
            .policy
            .decide(tool, new.tool_input.as_ref().unwrap_or(&Json::Null))
            .map(|(d, rule)| (d, rule.to_owned())),
        _ => None,
    };
    let mut request = InputRequest {
        id: new_uuid(),
        kind,
        run_id: run.id.clone(),
        task_id: run.vtid.clone(),
        vtid: run.vtid.clone(),
        agent_id: run.agent_id.clone(),
        conversation_id: run.conversation_id.clone(),
        tool_name: new.tool_name,
        tool_input: new.tool_input,
        prompt: new.prompt,
        options: new.options,
        state: InputState::Pending,
        answer: None,
        answered_by: None,
        created_at: now,
        answered_at: None,
        expires_at: new.policy.ask_timeout_ms.map(|t| now.saturating_add(t)),
    };
    let refs = run_refs(&run);
    let pending_after = match &ruled {
        Some(_) => run.pending_input,
        None => run.pending_input + 1,
    };
    db.defer(
        &format!("INSERT INTO input_requests ({COLUMNS}, ask_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"),
        vec![
            request.id.as_str().into(),
            kind.as_str().into(),
            request.run_id.as_str().into(),
            request.task_id.as_str().into(),
            request.vtid.as_str().into(),
            request.agent_id.as_str().into(),
            (&request.conversation_id).into(),
            (&request.tool_name).into(),
            request.tool_input.as_ref().map(to_json).into(),
            (&request.prompt).into(),
            to_json(&request.options).into(),
            InputState::Pending.as_str().into(),
            Value::Null,
            Value::Null,
            Value::Int(now),
            Value::Null,
            request.expires_at.into(),
            new.policy.timeout_answer().as_str().into(),
            new.key.into(),
        ],
    );
    emit(
        db,
        now,
        NewEvent::typed(
            kind::INPUT_REQUESTED,
            refs.clone(),
            &InputRequested {
                request: request.clone(),
            },
        ),
    );
    match ruled {
        Some((decision, rule)) => {
            let answer = InputAnswer::decided(
                decision,
                (decision == Decision::Deny).then(|| format!("denied by the rule {rule}")),
            );
            close(
                db,
                now,
                &mut request,
                InputState::Answered,
                Some(answer),
                format!("rule:{rule}"),
                &refs,
                pending_after,
                false,
            );
        }
        None => {
            let status = waiting_status(&request);
            db.defer(
                "UPDATE runs SET pending_input = pending_input + 1, live_status = $2 WHERE id = $1",
                params![&request.run_id, &status],
            );
            emit(
                db,
                now,
                NewEvent::typed(kind::RUN_STATUS, refs, &RunStatusChanged { status }),
            );
        }
    }
    Ok(request)
}

/// Ends a pending request (the caller checked it is pending): writes the
/// answer, records `input.answered`, and when `counted` takes it off the
/// run's pending count and live status.
#[allow(clippy::too_many_arguments)]
fn close<D: Db>(
    db: &mut D,
    now: Millis,
    request: &mut InputRequest,
    state: InputState,
    answer: Option<InputAnswer>,
    by: String,
    refs: &EventRefs,
    pending_after: i64,
    counted: bool,
) {
    db.defer(
        "UPDATE input_requests SET state = $2, answer = $3, answered_by = $4, answered_at = $5 \
         WHERE id = $1 AND state = 'pending'",
        params![
            &request.id,
            state.as_str(),
            answer.as_ref().map(to_json),
            &by,
            now
        ],
    );
    request.state = state;
    request.answer = answer;
    request.answered_by = Some(by);
    request.answered_at = Some(now);
    if counted {
        let status = match (&request.answer, pending_after) {
            (_, n) if n > 0 => format!("waiting for input ({n} pending)"),
            (Some(a), _) => match (&request.tool_name, a.decision) {
                (Some(tool), Some(d)) => format!("{tool}: {d}"),
                _ => "answered; working".into(),
            },
            (None, _) => "working".into(),
        };
        db.defer(
            "UPDATE runs SET pending_input = $2, live_status = $3 WHERE id = $1 AND status = 'running'",
            params![&request.run_id, pending_after, &status],
        );
        emit(
            db,
            now,
            NewEvent::typed(kind::RUN_STATUS, refs.clone(), &RunStatusChanged { status }),
        );
    }
    emit(
        db,
        now,
        NewEvent::typed(
            kind::INPUT_ANSWERED,
            refs.clone(),
            &InputAnswered {
                id: request.id.clone(),
                kind: request.kind,
                state,
                answer: request.answer.clone(),
                answered_by: request.answered_by.clone(),
                pending_input: pending_after,
            },
        ),
    );
}

/// The first answer to a pending request; a later one is refused with 409
/// `already_answered` (saying how it ended).
pub async fn answer<D: Db>(
    db: &mut D,
    now: Millis,
    id: &str,
    answer: InputAnswer,
    by: &str,
) -> Result<InputRequest, Error> {
    let mut request = get(db, id).await?;
    if request.state.is_final() {
        return Err(already(&request));
    }
    answer
        .validate(request.kind, &request.options)
        .map_err(|m| Error::invalid("invalid_answer", m))?;
    let run = require_run(db, &request.run_id).await?;
    let refs = run_refs(&run);
    let pending_after = (run.pending_input - 1).max(0);
    close(
        db,
        now,
        &mut request,
        InputState::Answered,
        Some(answer),
        by.to_owned(),
        &refs,
        pending_after,
        true,
    );
    Ok(request)
}

fn already(r: &InputRequest) -> Error {
    let how = match (&r.state, &r.answered_by) {
        (InputState::Withdrawn, _) => "was withdrawn when its run ended".to_owned(),
        (InputState::Expired, _) => "expired".to_owned(),
        (_, Some(by)) => format!("was answered by {by}"),
        _ => "was answered".to_owned(),
    };
    Error::conflict("already_answered", format!("input request {} {how}", r.id))
}

/// Whether some pending request's `ask_timeout` has passed.
pub async fn any_due<D: Db>(db: &mut D, now: Millis) -> Result<bool, Error> {
    Ok(db
        .query_opt(
            "SELECT 1 FROM input_requests WHERE state = 'pending' AND expires_at <= $1 LIMIT 1",
            params![now],
        )
        .await?
        .is_some())
}

/// Ends the pending requests whose `ask_timeout` passed with their agent's
/// `on_timeout` answer; how many.
pub async fn expire_due<D: Db>(db: &mut D, now: Millis, limit: i64) -> Result<usize, Error> {
    let rows = db
        .query(
            &format!(
                "SELECT {COLUMNS} FROM input_requests WHERE state = 'pending' AND expires_at <= $1 \
                 ORDER BY expires_at LIMIT $2"
            ),
            params![now, limit],
        )
        .await?;
    let mut done = 0;
    for row in &rows {
        let mut request = from_row(row)?;
        let on_timeout = row
            .opt_string(17)?
            .and_then(|d| d.parse::<Decision>().ok())
            .unwrap_or(Decision::Deny);
        let run = require_run(db, &request.run_id).await?;
        let refs = run_refs(&run);
        let answer = match request.kind {
            InputKind::Permission => {
                InputAnswer::decided(on_timeout, Some("nobody answered in time".into()))
            }
            // A question has no decision: an expired one carries none.
            InputKind::Question => InputAnswer::default(),
        };
        let pending_after = (run.pending_input - 1).max(0);
        close(
            db,
            now,
            &mut request,
            InputState::Expired,
            Some(answer),
            shepherd_core::actor_names::TIMEOUT.into(),
            &refs,
            pending_after,
            true,
        );
        done += 1;
    }
    Ok(done)
}

/// Withdraws a run's pending requests as it ends (in the same unit of work
/// that ends it).
pub(crate) async fn withdraw<D: Db>(
    db: &mut D,
    now: Millis,
    run_id: &str,
    refs: &EventRefs,
) -> Result<(), Error> {
    let rows = db
        .query(
            &format!(
                "SELECT {COLUMNS} FROM input_requests WHERE run_id = $1 AND state = 'pending'"
            ),
            params![run_id],
        )
        .await?;
    for row in &rows {
        let mut request = from_row(row)?;
        close(
            db,
            now,
            &mut request,
            InputState::Withdrawn,
            None,
            shepherd_core::actor_names::RUN_ENDED.into(),
            refs,
            0,
            false,
        );
    }
    Ok(())
}

/// The key run tokens are derived from: made once per database, the same
/// for every node; the database holds it sealed (see `sealed`).
pub async fn run_token_key<D: Db>(
    db: &mut D,
    sealer: &crate::sealed::Sealer,
    now: Millis,
) -> Result<String, Error> {
    const NAME: &str = "run_token";
    let label = crate::ops::stored_secrets::server_key_label(NAME);
    if let Some(row) = db
        .query_opt(
            "SELECT value FROM server_keys WHERE name = $1",
            params![NAME],
        )
        .await?
    {
        return sealer.open(&label, &row.string(0)?);
    }
    let value = sealer.seal(&label, &random_hex(32))?;
    db.execute(
        "INSERT INTO server_keys (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
        params![NAME, &value, now],
    )
    .await?;
    let stored = db
        .query_one(
            "SELECT value FROM server_keys WHERE name = $1",
            params![NAME],
        )
        .await?
        .string(0)?;
    sealer.open(&label, &stored)
}
