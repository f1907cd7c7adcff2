//! What a run has for the server and has not yet delivered: steps (in the
//! on-disk spool, so they survive the server's and the runner's restarts),
//! progress events, the live status line and usage.
//!
//! The supervision loop hands every adapter output to [`Outbox::take`] and
//! calls [`Outbox::deliver`] when it may; delivery never blocks reading the
//! agent's output for longer than one attempt, and a server that is away
//! only delays it. A claim the server no longer honours stops delivery for
//! good (`claim_lost`): the run is someone else's now.

use std::collections::VecDeque;

use serde_json::{json, Value};
use shepherd_client::ClientError;
use shepherd_core::adapters::AdapterOutput;
use shepherd_core::usage::Usage;
use shepherd_protocol::{AppendSteps, ProgressBody, SetStatus, TranscriptStep};

use super::{Assignment, RunContext};
use crate::spool::{OutputMark, Spool};

/// The most steps sent in one request.
const STEP_BATCH: usize = 50;

/// What waits for the server, and what is kept for the end of the run.
pub(super) struct Outbox {
    pub(super) spool: Spool,
    pub(super) progress: VecDeque<(String, Option<String>, Value)>,
    pub(super) status: Option<String>,
    pub(super) claim_lost: bool,
    /// The agent's own conversation id, reported with the end of the run.
    pub(super) session_id: Option<String>,
    /// Usage not yet reported (the running total).
    pub(super) usage: Option<Usage>,
    /// The run's usage so far.
    pub(super) usage_total: Usage,
    /// The agent's answer, reported with the end of the run.
    pub(super) result: Option<String>,
    /// Steps the adapter makes again before it reaches new output: those
    /// already in the spool after the point the output is read again from
    /// (see [`crate::spool::Spool::resume_point`]).
    pub(super) skip_steps: u64,
}

impl Outbox {
    pub(super) fn is_empty(&self) -> bool {
        self.spool.pending() == 0
            && self.progress.is_empty()
            && self.status.is_none()
            && self.usage.is_none()
    }

    /// Takes what the adapter made of the agent's output: steps to the
    /// spool, progress and status to send, the result, session id and
    /// usage to keep. `at` is where the output was read to when the adapter
    /// made them; with `idle`, the adapter then held nothing more. Only the
    /// last step of the lot is marked idle: a runner that died and reads on
    /// from a mark must not skip the steps after it that the same read made.
    pub(super) fn take(
        &mut self,
        outputs: Vec<AdapterOutput>,
        a: &Assignment,
        at: (u64, u64),
        idle: bool,
    ) {
        let last_step = outputs
            .iter()
            .rposition(|o| matches!(o, AdapterOutput::Step(_)));
        for (i, o) in outputs.into_iter().enumerate() {
            match o {
                AdapterOutput::Step(_) if self.skip_steps > 0 => {
                    self.skip_steps -= 1;
                }
                AdapterOutput::Step(s) => {
                    let mark = OutputMark {
                        out: at.0,
                        err: at.1,
                        idle: idle && Some(i) == last_step,
                    };
                    if let Ok(v) = serde_json::to_value(&s) {
                        if let Err(e) = self.spool.push(&v, mark) {
                            tracing::error!(error = %e, "cannot spool a step");
                        }
                    }
                }
                AdapterOutput::Progress {
                    event,
                    message,
                    metadata,
                } => self
                    .progress
                    .push_back((event, message, metadata.unwrap_or(Value::Null))),
                AdapterOutput::Status(s) => self.status = Some(s),
                AdapterOutput::Result(r) => self.result = Some(r),
                AdapterOutput::SessionId(id) => {
                    // The next turn's command line holds the id: one that
                    // could read as an option is never kept (the server
                    // would refuse the report that carries it, 422).
                    if let Err(why) = shepherd_core::cmdline::check_agent_session_id(&id) {
                        tracing::warn!(run_id = a.run_id, agent_session_id = %id, %why, "ignored the agent's session id");
                        continue;
                    }
                    // A conversation stores the id at once, so that a run
                    // that never reports its end still leaves it behind.
                    if a.conversation.is_some() && self.session_id.as_deref() != Some(id.as_str()) {
                        self.progress.push_back((
                            "worker.building".into(),
                            Some("agent session".into()),
                            json!({ "agent_session_id": id }),
                        ));
                    }
                    self.session_id = Some(id)
                }
                AdapterOutput::Usage(u) => {
                    self.usage = Some(u);
                    self.usage_total = u;
                }
            }
        }
    }

    /// Sends what is waiting, in order: steps, then progress, then live status.
    /// Returns Err only when the server is unreachable (try again later).
    pub(super) async fn deliver(
        &mut self,
        ctx: &RunContext,
        a: &Assignment,
    ) -> Result<(), ClientError> {
        while self.spool.pending() > 0 && !self.claim_lost {
            let (first, batch) =
                self.spool
                    .next_batch(STEP_BATCH)
                    .map_err(|e| ClientError::Unreachable {
                        message: format!("spool: {e}"),
                    })?;
            let count = batch.len() as u64;
            let steps: Result<Vec<TranscriptStep>, _> =
                batch.into_iter().map(serde_json::from_value).collect();
            let steps = match steps {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(run_id = a.run_id, error = %e, first, "spooled steps are not transcript steps; skipping them");
                    self.spool.acknowledge(first + count);
                    continue;
                }
            };
            let body = AppendSteps {
                claim_token: a.claim_token.clone(),
                start_index: first as i64,
                steps,
            };
            match ctx.steps.send(&a.run_id, body).await {
                Ok(ack) => self
                    .spool
                    .acknowledge(u64::try_from(ack.next_index).unwrap_or(first + count)),
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) if e.code() == "claim_stale" || e.code() == "not_your_claim" => {
                    self.claim_lost = true;
                }
                Err(e) => {
                    // A batch the server will never take (it refused it as
                    // invalid): skip it rather than wedge the run, and say so.
                    tracing::error!(run_id = a.run_id, error = %e, first, "steps refused; skipping them");
                    self.spool.acknowledge(first + count);
                }
            }
        }
        while let Some((event, message, metadata)) = self.progress.front().cloned() {
            if self.claim_lost {
                break;
            }
            let body = ProgressBody {
                event: event.clone(),
                message: message.clone(),
                metadata,
                claim_token: Some(a.claim_token.clone()),
                ..Default::default()
            };
            match ctx.connector.progress(&a.vtid, &body).await {
                Ok(_) => {}
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) if e.code() == "claim_stale" => self.claim_lost = true,
                Err(e) => tracing::warn!(run_id = a.run_id, event, error = %e, "progress refused"),
            }
            self.progress.pop_front();
        }
        if let Some(text) = self.status.clone() {
            let body = SetStatus {
                claim_token: a.claim_token.clone(),
                status: text.clone(),
            };
            match ctx.connector.set_status(&a.run_id, &body).await {
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) if e.code() == "claim_stale" => self.claim_lost = true,
                _ => {}
            }
            if self.status.as_deref() == Some(text.as_str()) {
                self.status = None;
            }
        }
        if let Some(usage) = self.usage.filter(|_| !self.claim_lost) {
            let body = shepherd_protocol::SetUsage {
                claim_token: a.claim_token.clone(),
                usage,
            };
            match ctx.connector.set_usage(&a.run_id, &body).await {
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) if e.code() == "claim_stale" => self.claim_lost = true,
                Err(e) => tracing::warn!(run_id = a.run_id, error = %e, "usage refused"),
                Ok(_) => {}
            }
            if self.usage == Some(usage) {
                self.usage = None;
            }
        }
        Ok(())
    }
}
