//! Runs and their transcripts (the Workers page contract's `worker_runs`).
//!
//! While a run is running, each finished step is its own row (`run_steps`),
//! durable before the worker's call returns; an event carries a short
//! summary, never the whole step. When the run ends, its steps are compacted
//! once into a gzipped JSON blob on the run row and the step rows go, in the
//! same transaction. List queries never select the blob column.

use shepherd_core::event::payloads::{RunCompleted, RunStarted, RunStatusChanged, RunStep};
use shepherd_core::event::{kind, EventRefs, NewEvent};
use shepherd_core::model::{Run, Task, Worker};
use shepherd_core::status::{ClaimPurpose, RunStatus};
use shepherd_core::time::Millis;
use shepherd_core::transcript::{self, ActionContent, TranscriptStep};
use shepherd_core::workflow::{self, Outcome};
use shepherd_core::Error;

use super::tasks::{self, set_state, workflow_of};
use super::{claims, emit, new_uuid, workers};
use crate::params;
use crate::sql::{Db, Row, Value};

/// Columns of a run for lists and details. Transcripts live in another
/// table (`run_transcripts`); lists read only the `has_transcript` flag.
pub(crate) const RUN_COLUMNS: &str = "r.id, r.task_id, r.task, r.channel_id, ch.name, r.worker_id, r.agent_id, r.worker_type, \
    r.attempt, r.purpose, r.status, r.result, r.started_at, r.completed_at, r.live_status, r.tool_calls, \
    r.active_tool, r.step_count, r.has_transcript, r.cancel_requested_at, r.conversation_id, r.usage, r.workspace, r.pending_input";
pub(crate) const RUN_FROM: &str = "FROM runs r LEFT JOIN channels ch ON ch.id = r.channel_id";

pub(crate) fn run_from_row(r: &Row) -> Result<Run, Error> {
    Ok(Run {
        id: r.string(0)?,
        vtid: r.string(1)?,
        task: r.string(2)?,
        channel_id: r.opt_string(3)?,
        channel_name: r.opt_string(4)?,
        worker_id: r.string(5)?,
        agent_id: r.string(6)?,
        worker_type: r.string(7)?,
        attempt: r.i64(8)?,
        purpose: r.word(9)?,
        status: r.word(10)?,
        result: r.opt_string(11)?,
        started_at: r.i64(12)?,
        completed_at: r.opt_i64(13)?,
        live_status: r.opt_string(14)?,
        tool_calls: r.i64(15)?,
        active_tool: r.opt_string(16)?,
        step_count: r.i64(17)?,
        has_transcript: r.bool(18)?,
        cancel_requested_at: r.opt_i64(19)?,
        conversation_id: r.opt_string(20)?,
        // Written only by this crate from a `Usage`: a value that does not
        // read back is a corrupt row, and says so.
        usage: match r.opt_string(21)? {
            Some(u) => Some(serde_json::from_str(&u).map_err(|e| {
                Error::internal(format!(
                    "run {}: stored usage unreadable: {e}",
                    r.string(0).unwrap_or_default()
                ))
            })?),
            None => None,
        },
        // Written only by `record_workspace` from a `RunWorkspace`.
        workspace: match r.opt_string(22)? {
            Some(w) => Some(serde_json::from_str(&w).map_err(|e| {
                Error::internal(format!(
                    "run {}: stored workspace unreadable: {e}",
                    r.string(0).unwrap_or_default()
                ))
            })?),
            None => None,
        },
        pending_input: r.i64(23)?,
    })
}

/// The workspace a runner reports in a progress event's metadata
/// (`metadata.workspace`, sent when the run starts and again with its head
/// when it ends). Metadata without a well-formed workspace is none: a
/// worker's other metadata is none of the store's business. A well-formed
/// one whose branch or commits could reach git as something else (an
/// option such as `--output=/x`, a revision expression) is refused with
/// 422 `invalid_workspace`, since the server later runs git with them.
pub(crate) fn reported_workspace(
    metadata: &serde_json::Value,
) -> Result<Option<shepherd_core::model::RunWorkspace>, Error> {
    let Some(w) = metadata.get("workspace").filter(|w| !w.is_null()) else {
        return Ok(None);
    };
    let Ok(w) = serde_json::from_value::<shepherd_core::model::RunWorkspace>(w.clone()) else {
        return Ok(None);
    };
    w.check()
        .map_err(|why| Error::invalid("invalid_workspace", why))?;
    Ok(Some(w))
}

/// Records a reported workspace (checked by [`reported_workspace`]) on the
/// run.
pub(crate) fn record_workspace<D: Db>(
    db: &mut D,
    run_id: &str,
    w: &shepherd_core::model::RunWorkspace,
) {
    if let Ok(text) = serde_json::to_string(w) {
        db.defer(
            "UPDATE runs SET workspace = $2 WHERE id = $1",
            params![run_id, text],
        );
    }
}

/// The ids an event about this run concerns.
pub(crate) fn run_refs(run: &Run) -> EventRefs {
    EventRefs::default()
        .run(&run.id)
        .task(&run.vtid)
        .worker(&run.worker_id)
        .agent(&run.agent_id)
        .channel(run.channel_id.clone())
        .conversation(run.conversation_id.clone())
}

/// Counts one more finished run of `agent_id` with `status`, on the
/// counter row of the worker that ran it: workers completing at the same
/// time write different rows. Running runs have no counter (see
/// [`running_count_sql`]).
fn count_finished<D: Db>(db: &mut D, agent_id: &str, status: &str, worker_id: &str) {
    db.defer(
        "INSERT INTO run_counts (agent_id, status, worker_id, n) VALUES ($1, $2, $3, 1) \
         ON CONFLICT (agent_id, status, worker_id) DO UPDATE SET n = run_counts.n + 1",
        params![agent_id, status, worker_id],
    );
}

/// SQL counting the runs of agent `agent` (an SQL expression) now running:
/// a range of the `runs_agent_status` index holding only running runs, so
/// its cost follows the runs in flight, not the runs ever made.
pub(crate) fn running_count_sql(agent: &str) -> String {
    format!("(SELECT COUNT(*) FROM runs rc WHERE rc.agent_id = {agent} AND rc.status = 'running')")
}

/// The claim a new run is the attempt of: the lease lives on the run row.
pub(crate) struct Lease<'a> {
    pub claim_id: &'a str,
    pub token_hash: String,
    pub expires_at: Millis,
}

/// The run row of a new claim, lease included, not yet written: see
/// [`insert_runs`].
pub(crate) struct NewRun {
    pub id: String,
    params: Vec<Value>,
}

/// The columns [`NewRun::params`] holds, in order (`status` is `'running'`).
const NEW_RUN_COLUMNS: &str =
    "id, task_id, task, channel_id, worker_id, agent_id, worker_type, attempt, \
     purpose, started_at, conversation_id, claim_id, claim_token, expires_at, status";
const NEW_RUN_WIDTH: usize = 14;

/// A new run of `task` by `worker` (the attempt a claim makes), and its
/// `run.started` event, recorded now. The row is written by
/// [`insert_runs`], together with the other runs of the same grant.
#[allow(clippy::too_many_arguments)]
pub(crate) fn new_run<D: Db>(
    db: &mut D,
    now: Millis,
    task: &Task,
    worker: &Worker,
    purpose: ClaimPurpose,
    attempt: i64,
    lease: Lease<'_>,
) -> NewRun {
    let id = new_uuid();
    let params = params![
        &id,
        &task.vtid,
        &task.title,
        &task.channel_id,
        &worker.worker_id,
        &worker.agent_id,
        &worker.worker_type,
        attempt,
        purpose.as_str(),
        now,
        &task.conversation_id,
        lease.claim_id,
        lease.token_hash,
        lease.expires_at
    ];
    let refs = EventRefs::default()
        .run(&id)
        .task(&task.vtid)
        .worker(&worker.worker_id)
        .agent(&worker.agent_id)
        .channel(task.channel_id.clone())
        .conversation(task.conversation_id.clone());
    emit(
        db,
        now,
        NewEvent::typed(
            kind::RUN_STARTED,
            refs,
            &RunStarted {
                agent_id: worker.agent_id.clone(),
                attempt,
                channel_id: task.channel_id.clone(),
                purpose,
                task: task.title.clone(),
                worker_type: worker.worker_type.clone(),
            },
        ),
    );
    NewRun { id, params }
}

/// Writes the rows of `runs` as one INSERT (pipelined). Each row is its
/// task's active claim from here on; the unique index `runs_one_active`
/// refuses a second one, failing the whole INSERT.
pub(crate) fn insert_runs<D: Db>(db: &mut D, runs: Vec<NewRun>) {
    if runs.is_empty() {
        return;
    }
    let rows: Vec<String> = (0..runs.len())
        .map(|r| {
            let cols: Vec<String> = (1..=NEW_RUN_WIDTH)
                .map(|k| format!("${}", r * NEW_RUN_WIDTH + k))
                .collect();
            format!("({}, 'running')", cols.join(", "))
        })
        .collect();
    let sql = format!(
        "INSERT INTO runs ({NEW_RUN_COLUMNS}) VALUES {}",
        rows.join(", ")
    );
    db.defer(&sql, runs.into_iter().flat_map(|r| r.params).collect());
}

pub async fn get<D: Db>(db: &mut D, run_id: &str) -> Result<Option<Run>, Error> {
    let sql = format!("SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id = $1");
    db.query_opt(&sql, params![run_id])
        .await?
        .map(|r| run_from_row(&r))
        .transpose()
}

pub async fn require<D: Db>(db: &mut D, run_id: &str) -> Result<Run, Error> {
    get(db, run_id)
        .await?
        .ok_or_else(|| Error::not_found("run_not_found", format!("no run {run_id:?}")))
}

/// The stored transcript of a finished run: `None` if none was recorded,
/// `transcript_corrupt` if the blob cannot be read.
pub async fn transcript<D: Db>(
    db: &mut D,
    run_id: &str,
) -> Result<Option<Vec<TranscriptStep>>, Error> {
    let row = db
        .query_opt(
            "SELECT t.blob FROM runs r LEFT JOIN run_transcripts t ON t.run_id = r.id WHERE r.id = $1",
            params![run_id],
        )
        .await?
        .ok_or_else(|| Error::not_found("run_not_found", format!("no run {run_id:?}")))?;
    match row.opt_blob(0)? {
        None => Ok(None),
        Some(blob) => transcript::decompress(&blob).map(Some).map_err(|e| {
            Error::new(
                shepherd_core::ErrorKind::Internal,
                "transcript_corrupt",
                format!("the stored transcript of run {run_id} cannot be read: {e}"),
            )
        }),
    }
}

/// Steps of a run after `after` (an index; -1 for all), running or finished alike.
pub async fn steps<D: Db>(
    db: &mut D,
    run_id: &str,
    after: i64,
    limit: i64,
) -> Result<(Run, Vec<(i64, TranscriptStep)>), Error> {
    let run = require(db, run_id).await?;
    let steps: Vec<(i64, TranscriptStep)> = if run.status == RunStatus::Running {
        let rows = db
            .query(
                "SELECT idx, body FROM run_steps WHERE run_id = $1 AND idx > $2 ORDER BY idx LIMIT $3",
                params![run_id, after, limit],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((r.i64(0)?, r.json::<TranscriptStep>(1)?)))
            .collect::<Result<_, Error>>()?
    } else {
        transcript(db, run_id)
            .await?
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, s)| (i as i64, s))
            .filter(|(i, _)| *i > after)
            .take(limit.max(0) as usize)
            .collect()
    };
    Ok((run, steps))
}

/// What a step batch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepsAck {
    pub accepted: i64,
    /// Steps at indexes already stored (a retried batch): acknowledged, not stored again.
    pub duplicates: i64,
    /// The index the next step must have.
    pub next_index: i64,
}

/// The run's active claim, if `claim_token` is its token and `caller` (a
/// worker token's worker) its holder. With `rules`, a claim whose lease
/// lapsed fences the report out too, as the sweeper would have ended it.
pub(crate) async fn fence_run<D: Db>(
    db: &mut D,
    now: Millis,
    run: &Run,
    claim_token: &str,
    caller: Option<&str>,
    rules: Option<&claims::LeaseRules>,
) -> Result<claims::ActiveClaim, Error> {
    let found = claims::active_for_run(db, &run.id).await?;
    fence_found(now, run, claim_token, caller, rules, found)
}

/// [`fence_run`] on the run's active claim as already read.
fn fence_found(
    now: Millis,
    run: &Run,
    claim_token: &str,
    caller: Option<&str>,
    rules: Option<&claims::LeaseRules>,
    found: Option<(claims::ActiveClaim, i64, String)>,
) -> Result<claims::ActiveClaim, Error> {
    let stale = || {
        Error::conflict(
            "claim_stale",
            format!(
                "the claim behind run {} is no longer active or the token is wrong",
                run.id
            ),
        )
    };
    let (active, heartbeat, status) = found.ok_or_else(stale)?;
    // A caller that is not the holder gets the same answer as a wrong
    // token: a distinct one would tell it that the token it guessed is right.
    let holder = caller.is_none_or(|w| w == active.claim.worker_id);
    if !super::claim_token_matches(claim_token, &active.token) || !holder {
        return Err(stale());
    }
    if let Some(reason) =
        rules.and_then(|r| claims::lapse_reason(now, r, &active.claim, heartbeat, &status))
    {
        return Err(Error::conflict(
            "claim_stale",
            format!(
                "the claim behind run {} lapsed ({reason}); claim the task again",
                run.id
            ),
        ));
    }
    Ok(active)
}

/// Appends finished steps at `start_index…`, fenced by the claim token and
/// the lease rules.
#[allow(clippy::too_many_arguments)]
pub async fn append_steps<D: Db>(
    db: &mut D,
    now: Millis,
    run_id: &str,
    claim_token: &str,
    caller: Option<&str>,
    start_index: i64,
    steps: Vec<TranscriptStep>,
    rules: &claims::LeaseRules,
) -> Result<StepsAck, Error> {
    append_steps_read(
        db,
        now,
        run_id,
        claim_token,
        caller,
        start_index,
        steps,
        rules,
        None,
    )
    .await
}

/// What the step appends of one batch (one worker's runs, appended in one
/// transaction one after another with nothing else in between: see
/// [`crate::Store::append_steps_many`]) read together: the first of them to
/// run reads every run, its active claim and its task in three statements,
/// and each append then takes its own rows instead of three round trips of
/// its own (on PostgreSQL those round trips, one after another in the
/// writer, were what bounded a fleet's steps per second).
///
/// An append changes only its own run and task (and the holder's activity
/// time, which no fence reads), so a row read at the batch's start is still
/// true when its append runs; a run named twice is read afresh the second
/// time (its rows were taken by the first).
pub(crate) struct StepBatchReads {
    run_ids: Vec<String>,
    rows: std::sync::Mutex<Option<std::collections::HashMap<String, Prefetched>>>,
}

/// One run's rows, read at a batch's start.
struct Prefetched {
    run: Run,
    active: Option<(claims::ActiveClaim, i64, String)>,
    task: Option<Task>,
}

impl StepBatchReads {
    pub(crate) fn new(run_ids: Vec<String>) -> Self {
        StepBatchReads {
            run_ids,
            rows: std::sync::Mutex::default(),
        }
    }

    fn rows(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<std::collections::HashMap<String, Prefetched>>> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `run_id`'s rows as the batch read them, unless an earlier append of
    /// the batch took them (or the run does not exist: the append then
    /// reads, and answers, on its own).
    async fn take<D: Db>(&self, db: &mut D, run_id: &str) -> Result<Option<Prefetched>, Error> {
        if self.rows().is_none() {
            let list = crate::sql::placeholder_list(1, self.run_ids.len());
            let ids: Vec<Value> = self.run_ids.iter().map(Value::from).collect();
            let sql = format!("SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.id IN ({list})");
            let runs: Vec<Run> = db
                .query(&sql, ids)
                .await?
                .iter()
                .map(run_from_row)
                .collect::<Result<_, _>>()?;
            let mut active = claims::active_for_runs(db, &self.run_ids).await?;
            let vtids: Vec<String> = runs.iter().map(|r| r.vtid.clone()).collect();
            let mut tasks = tasks::get_many(db, &vtids).await?;
            let mut by_id = std::collections::HashMap::with_capacity(runs.len());
            for run in runs {
                let prefetched = Prefetched {
                    active: active.remove(&run.id),
                    task: tasks.remove(&run.vtid),
                    run,
                };
                by_id.insert(prefetched.run.id.clone(), prefetched);
            }
            *self.rows() = Some(by_id);
        }
        Ok(self.rows().as_mut().and_then(|rows| rows.remove(run_id)))
    }
}

/// [`append_steps`], as one append of a batch that reads together when
/// `reads` is given.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn append_steps_read<D: Db>(
    db: &mut D,
    now: Millis,
    run_id: &str,
    claim_token: &str,
    caller: Option<&str>,
    start_index: i64,
    steps: Vec<TranscriptStep>,
    rules: &claims::LeaseRules,
    reads: Option<&StepBatchReads>,
) -> Result<StepsAck, Error> {
    if start_index < 0 {
        return Err(Error::invalid(
            "invalid_start_index",
            "start_index must be 0 or more",
        ));
    }
    let pre = match reads {
        Some(r) => r.take(db, run_id).await?,
        None => None,
    };
    let (run, active, pre_task) = match pre {
        Some(p) => {
            let active = fence_found(now, &p.run, claim_token, caller, Some(rules), p.active)?;
            (p.run, active, p.task)
        }
        None => {
            let run = require(db, run_id).await?;
            let active = fence_run(db, now, &run, claim_token, caller, Some(rules)).await?;
            (run, active, None)
        }
    };
    let stored = run.step_count;
    if start_index > stored {
        return Err(Error::conflict(
            "step_gap",
            format!("run {run_id} has {stored} steps; the next must have index {stored}, not {start_index}"),
        ));
    }
    // A first step means the worker is executing, which moves the task
    // (simple: claimed → running): decided now, before any write, so that
    // every write below rests on this transaction's reads alone.
    let new_steps = (start_index + steps.len() as i64) > stored;
    let mut starts = None;
    if new_steps && run.purpose == ClaimPurpose::Build {
        let task = match pre_task {
            Some(t) => t,
            None => tasks::require(db, &run.vtid).await?,
        };
        if task.cancel_requested_at.is_none() {
            let wf = workflow_of(&task)?;
            if let Outcome::Move { to, .. } = wf.apply(&task.state, workflow::EXECUTION_STARTED) {
                if to != task.state {
                    starts = Some((task, to));
                }
            }
        }
    }
    // Fenced, in order, and numbered from the count this transaction read
    // under the writer's ordering: the step rows cannot collide, and the
    // rows updated exist. Only the database itself can refuse these writes.
    db.trust_deferred_writes();
    let mut accepted = 0;
    let mut duplicates = 0;
    let mut tool_calls = run.tool_calls;
    let mut active_tool = run.active_tool.clone();
    let refs = run_refs(&run);
    for (i, step) in steps.into_iter().enumerate() {
        let idx = start_index + i as i64;
        if idx < stored {
            duplicates += 1;
            continue;
        }
        let step = step.truncated();
        let summary = step.step_summary();
        match &step {
            TranscriptStep::Action { content } => {
                for c in content {
                    if let ActionContent::ToolCall { name, .. } = c {
                        tool_calls += 1;
                        active_tool = Some(name.clone());
                    }
                }
            }
            TranscriptStep::ToolResult { .. } => active_tool = None,
        }
        let body =
            serde_json::to_string(&step).map_err(|e| Error::internal(format!("step JSON: {e}")))?;
        db.defer(
            "INSERT INTO run_steps (run_id, idx, body) VALUES ($1, $2, $3)",
            params![run_id, idx, body],
        );
        emit(
            db,
            now,
            NewEvent::typed(
                kind::RUN_STEP,
                refs.clone(),
                &RunStep {
                    index: idx,
                    kind: summary.kind.to_owned(),
                    preview: summary.preview,
                    tool_name: summary.tool_name,
                    call_ids: summary.call_ids,
                },
            ),
        );
        accepted += 1;
    }
    let next_index = stored + accepted;
    if accepted > 0 {
        db.defer(
            "UPDATE runs SET step_count = $2, tool_calls = $3, active_tool = $4, last_step_at = $5 WHERE id = $1",
            params![run_id, next_index, tool_calls, active_tool, now],
        );
        db.defer(workers::TOUCH_ACTIVITY, params![&run.worker_id, now]);
        if let Some((mut task, to)) = starts {
            let r = EventRefs::default()
                .worker(&active.claim.worker_id)
                .run(run_id);
            set_state(db, now, &mut task, to, "first step", r).await?;
        }
    }
    Ok(StepsAck {
        accepted,
        duplicates,
        next_index,
    })
}

/// Sets the live status text of a running run, fenced by the claim token
/// and the lease rules, like steps.
pub async fn set_status<D: Db>(
    db: &mut D,
    now: Millis,
    run_id: &str,
    claim_token: &str,
    caller: Option<&str>,
    text: &str,
    rules: &claims::LeaseRules,
) -> Result<Run, Error> {
    if text.len() > 2000 {
        return Err(Error::invalid(
            "invalid_status",
            "status text is at most 2000 bytes",
        ));
    }
    let run = require(db, run_id).await?;
    fence_run(db, now, &run, claim_token, caller, Some(rules)).await?;
    // While the run waits for a person its live status says so: a status
    // line the agent printed before it asked (read by the runner after the
    // ask) must not hide that.
    if run.pending_input > 0 {
        return Ok(run);
    }
    db.defer(
        "UPDATE runs SET live_status = $2 WHERE id = $1",
        params![run_id, text],
    );
    let refs = run_refs(&run);
    emit(
        db,
        now,
        NewEvent::typed(
            kind::RUN_STATUS,
            refs,
            &RunStatusChanged {
                status: text.to_owned(),
            },
        ),
    );
    require(db, run_id).await
}

/// What ending a run needs to know about it, when the caller already read it.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    pub status: RunStatus,
    pub step_count: i64,
    pub refs: EventRefs,
    /// Its input requests still pending (withdrawn when it ends).
    pub pending_input: i64,
}

impl RunInfo {
    pub(crate) fn of(run: &Run) -> RunInfo {
        RunInfo {
            status: run.status,
            step_count: run.step_count,
            refs: run_refs(run),
            pending_input: run.pending_input,
        }
    }
}

/// Ends a running run: compacts its steps into the blob, closes dangling
/// tool calls, clears the live overlay and records `run.completed`. With
/// `known` (read in this transaction while its claim was active) the same
/// update releases the claim with `reason`; without it the caller released
/// the claim already.
pub(crate) async fn finish<D: Db>(
    db: &mut D,
    now: Millis,
    run_id: &str,
    status: RunStatus,
    result: Option<String>,
    reason: &str,
    known: Option<RunInfo>,
) -> Result<(), Error> {
    let release = known.is_some();
    let info = match known {
        Some(k) => k,
        None => RunInfo::of(&require(db, run_id).await?),
    };
    if info.status != RunStatus::Running {
        if release {
            db.defer(
                "UPDATE runs SET released_at = $2, release_reason = $3 WHERE id = $1 AND released_at IS NULL",
                params![run_id, now, reason],
            );
        }
        return Ok(());
    }
    // A run that recorded no step has nothing to compact.
    let mut steps = if info.step_count == 0 {
        Vec::new()
    } else {
        let rows = db
            .query(
                "SELECT body FROM run_steps WHERE run_id = $1 ORDER BY idx",
                params![run_id],
            )
            .await?;
        rows.iter()
            .map(|r| r.json::<TranscriptStep>(0))
            .collect::<Result<Vec<_>, Error>>()?
    };
    let blob = if steps.is_empty() {
        Value::Null
    } else {
        transcript::close_dangling_tool_calls(&mut steps, &format!("run ended {status}: {reason}"));
        Value::Blob(transcript::compress(&steps))
    };
    let result = match (result, status) {
        (Some(r), _) => Some(r),
        (None, RunStatus::Done) => None,
        (None, _) => Some(reason.to_owned()),
    };
    let has_transcript = !matches!(blob, Value::Null);
    if has_transcript {
        db.defer(
            "INSERT INTO run_transcripts (run_id, blob) VALUES ($1, $2)",
            vec![Value::from(run_id), blob],
        );
    }
    let mut args = vec![
        Value::from(run_id),
        Value::from(status.as_str()),
        Value::from(result.clone()),
        Value::Int(now),
        Value::from(has_transcript),
        Value::Int(steps.len() as i64),
    ];
    const END: &str =
        "UPDATE runs SET status = $2, result = $3, completed_at = $4, has_transcript = $5, \
         live_status = NULL, active_tool = NULL, step_count = $6, pending_input = 0";
    if release {
        args.push(Value::from(reason));
        db.defer(
            &format!("{END}, released_at = $4, release_reason = $7 WHERE id = $1"),
            args,
        );
    } else {
        db.defer(&format!("{END} WHERE id = $1"), args);
    }
    if let (Some(agent), Some(worker)) = (&info.refs.agent_id, &info.refs.worker_id) {
        count_finished(db, agent, status.as_str(), worker);
    }
    if info.step_count > 0 {
        db.defer("DELETE FROM run_steps WHERE run_id = $1", params![run_id]);
    }
    if info.pending_input > 0 {
        super::input_requests::withdraw(db, now, run_id, &info.refs).await?;
    }
    emit(
        db,
        now,
        NewEvent::typed(
            kind::RUN_COMPLETED,
            info.refs,
            &RunCompleted {
                success: status == RunStatus::Done,
                status,
                result,
                reason: reason.to_owned(),
                steps: steps.len() as i64,
            },
        ),
    );
    Ok(())
}

/// Reports, once per quiet spell, the running runs of `agent_id` that made
/// no step for `after_ms` (and wait for no person: a pending input request
/// was told already); how many. `check_only` reads without writing.
pub async fn mark_stuck<D: Db>(
    db: &mut D,
    now: Millis,
    agent_id: &str,
    after_ms: i64,
    check_only: bool,
) -> Result<usize, Error> {
    let rows = db
        .query(
            &format!(
                "SELECT {RUN_COLUMNS} {RUN_FROM} WHERE r.status = 'running' AND r.agent_id = $1 \
                 AND r.pending_input = 0 AND COALESCE(r.last_step_at, r.started_at) < $2 \
                 AND (r.stuck_at IS NULL OR r.stuck_at < COALESCE(r.last_step_at, r.started_at)) \
                 LIMIT 100"
            ),
            params![agent_id, now - after_ms],
        )
        .await?;
    if check_only {
        return Ok(rows.len());
    }
    let mut n = 0;
    for row in &rows {
        let run = run_from_row(row)?;
        let quiet_since = db
            .query_one(
                "SELECT COALESCE(last_step_at, started_at) FROM runs WHERE id = $1",
                params![&run.id],
            )
            .await?
            .i64(0)?;
        db.defer(
            "UPDATE runs SET stuck_at = $2 WHERE id = $1",
            params![&run.id, now],
        );
        emit(
            db,
            now,
            NewEvent::typed(
                kind::RUN_STUCK,
                run_refs(&run),
                &shepherd_core::event::payloads::RunStuck {
                    quiet_ms: now - quiet_since,
                    steps: run.step_count,
                    stuck_after_ms: after_ms,
                },
            ),
        );
        n += 1;
    }
    Ok(n)
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub agent_id: Option<String>,
    pub channel_id: Option<String>,
    pub status: Option<String>,
    pub vtid: Option<String>,
    /// Case-insensitive search in task titles.
    pub q: Option<String>,
    pub limit: i64,
    pub offset: i64,
}

/// Runs, newest first, and the total matching. Never reads transcripts.
///
/// The total comes from the `run_counts` counters (finished runs) and the
/// `runs_agent_status` / `runs_status` indexes (running runs) when the
/// filter is by agent and status only; the page is found on the index first and only its
/// rows are read (a deferred join), so deep offsets do not read skipped rows.
pub async fn list<D: Db>(db: &mut D, f: &RunFilter) -> Result<(Vec<Run>, i64), Error> {
    let mut cond = String::from(" WHERE 1 = 1");
    let mut args = Vec::new();
    if let Some(a) = &f.agent_id {
        args.push(Value::Text(a.clone()));
        cond.push_str(&format!(" AND r.agent_id = ${}", args.len()));
    }
    if let Some(s) = &f.status {
        args.push(Value::Text(s.clone()));
        cond.push_str(&format!(" AND r.status = ${}", args.len()));
    }
    let counted = args.clone();
    let counted_cond = cond
        .replace("r.agent_id", "agent_id")
        .replace("r.status", "status");
    if let Some(c) = &f.channel_id {
        args.push(Value::Text(c.clone()));
        cond.push_str(&format!(" AND r.channel_id = ${}", args.len()));
    }
    if let Some(v) = &f.vtid {
        args.push(Value::Text(v.clone()));
        cond.push_str(&format!(" AND r.task_id = ${}", args.len()));
    }
    if let Some(q) = &f.q {
        let escaped = q
            .to_lowercase()
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        args.push(Value::Text(format!("%{escaped}%")));
        cond.push_str(&format!(
            " AND LOWER(r.task) LIKE ${} ESCAPE '\\'",
            args.len()
        ));
    }
    let total = if f.vtid.is_none() && f.q.is_none() && f.channel_id.is_none() {
        let running = f.status.as_deref() == Some("running");
        let mut total = 0;
        if !running {
            total += db
                .query_one(
                    &format!(
                        "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM run_counts{counted_cond}"
                    ),
                    counted,
                )
                .await?
                .i64(0)?;
        }
        if running || f.status.is_none() {
            let (cond, args) = match &f.agent_id {
                Some(a) => (" AND agent_id = $1", vec![Value::Text(a.clone())]),
                None => ("", vec![]),
            };
            total += db
                .query_one(
                    &format!("SELECT COUNT(*) FROM runs WHERE status = 'running'{cond}"),
                    args,
                )
                .await?
                .i64(0)?;
        }
        total
    } else {
        db.query_one(&format!("SELECT COUNT(*) FROM runs r{cond}"), args.clone())
            .await?
            .i64(0)?
    };
    args.push(Value::Int(f.limit));
    args.push(Value::Int(f.offset));
    let sql = format!(
        "SELECT {RUN_COLUMNS} {RUN_FROM} JOIN (SELECT r.id FROM runs r{cond} \
         ORDER BY r.started_at DESC, r.id DESC LIMIT ${} OFFSET ${}) page ON page.id = r.id \
         ORDER BY r.started_at DESC, r.id DESC",
        args.len() - 1,
        args.len()
    );
    let runs = db
        .query(&sql, args)
        .await?
        .iter()
        .map(run_from_row)
        .collect::<Result<_, _>>()?;
    Ok((runs, total))
}

/// Deletes transcripts of runs that ended before `cutoff`, keeping the run
/// rows; returns (runs, bytes freed).
pub async fn prune_transcripts<D: Db>(db: &mut D, cutoff: Millis) -> Result<(i64, i64), Error> {
    let row = db
        .query_one(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(t.blob)), 0) FROM run_transcripts t \
             JOIN runs r ON r.id = t.run_id WHERE r.completed_at < $1",
            params![cutoff],
        )
        .await?;
    let (n, bytes) = (row.i64(0)?, row.i64(1)?);
    db.defer(
        "DELETE FROM run_transcripts WHERE run_id IN (SELECT id FROM runs WHERE completed_at < $1)",
        params![cutoff],
    );
    db.defer(
        "UPDATE runs SET has_transcript = 0 WHERE has_transcript = 1 AND completed_at < $1",
        params![cutoff],
    );
    Ok((n, bytes))
}

/// Every run that recorded a workspace: id, status, end and workspace.
/// `shepherd prune --branches-older-than` reads them to find the branches
/// of runs that ended long ago.
pub async fn workspaces<D: Db>(db: &mut D) -> Result<Vec<RunWorkspaceRow>, Error> {
    let rows = db
        .query(
            "SELECT r.id, r.status, r.completed_at, r.workspace, w.host_id \
             FROM runs r LEFT JOIN workers w ON w.id = r.worker_id \
             WHERE r.workspace IS NOT NULL",
            vec![],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let workspace = serde_json::from_str(&r.string(3)?)
                .map_err(|e| Error::internal(format!("stored workspace unreadable: {e}")))?;
            Ok(RunWorkspaceRow {
                run_id: r.string(0)?,
                status: r.string(1)?,
                ended: r.opt_i64(2)?,
                workspace,
                host_id: r.opt_string(4)?,
            })
        })
        .collect()
}

/// A worktree run's workspace, with what pruning its branch needs.
#[derive(Debug, Clone)]
pub struct RunWorkspaceRow {
    pub run_id: String,
    pub status: String,
    pub ended: Option<Millis>,
    pub workspace: shepherd_core::model::RunWorkspace,
    /// The host its worker ran on, when it said.
    pub host_id: Option<String>,
}
