//! A conversation as a client loads it: its messages and, for each, the
//! runs replying to it with their steps.

use serde::Serialize;
use shepherd_core::model::Run;
use shepherd_core::status::RunStatus;
use shepherd_core::time::Millis;
use shepherd_core::transcript::{StepsJson, TranscriptStep};
use shepherd_core::Error;

use super::lifecycle::{require, Conversation};
use super::messages::message_from_row;
use crate::ops::runs::{run_from_row, RUN_COLUMNS, RUN_FROM};
use crate::params;
use crate::sql::Db;

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
        .any(|r| r.status == RunStatus::Running && r.step_count > 0)
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
        if run.status == RunStatus::Running
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
            let steps = if run.status == RunStatus::Running {
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
                status: run.status.to_string(),
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
