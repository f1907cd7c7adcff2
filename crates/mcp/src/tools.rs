//! The tool catalogue (schemas and annotations) and each tool's work.
//!
//! Arguments are read into the typed structs of [`crate::wire`]; a type
//! mismatch is a tool error `invalid_arguments`, and whatever the REST API
//! refuses comes back as a tool error with the API's own code. Every REST
//! call is a typed method of `shepherd-client`. Only an unknown tool name is
//! a protocol (JSON-RPC) error.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ProgressNotificationParam, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};
use shepherd_client::{Client, ClientError};
use shepherd_protocol as p;

use crate::server::ShepherdMcp;
use crate::wire::*;

/// Why a tool failed: the API refused the call (or could not be reached),
/// or the tool itself refused its arguments before any call.
#[derive(Debug)]
pub(crate) enum Failure {
    Api(ClientError),
    Tool(p::ErrorDetail),
}

impl Failure {
    fn tool(code: &str, message: impl Into<String>) -> Self {
        Failure::Tool(p::ErrorDetail {
            code: code.to_owned(),
            message: message.into(),
        })
    }

    pub(crate) fn code(&self) -> &str {
        match self {
            Failure::Api(e) => e.code(),
            Failure::Tool(d) => &d.code,
        }
    }

    pub(crate) fn message(&self) -> &str {
        match self {
            Failure::Api(e) => e.message(),
            Failure::Tool(d) => &d.message,
        }
    }

    /// The HTTP status the API answered, if it answered.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Failure::Api(e) => e.status(),
            Failure::Tool(_) => None,
        }
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Api(e)
    }
}

/// How a tool touches Shepherd, for its annotations.
#[derive(Clone, Copy)]
enum Effect {
    ReadOnly,
    /// Adds something new; repeating it adds another.
    Additive,
    /// Ends or discards work.
    Destructive,
}

fn tool<A: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    effect: Effect,
) -> Tool {
    let annotations = ToolAnnotations::with_title(title)
        .read_only(matches!(effect, Effect::ReadOnly))
        .destructive(matches!(effect, Effect::Destructive))
        .idempotent(!matches!(effect, Effect::Additive))
        .open_world(false);
    Tool::new(name, description, Map::new())
        .with_title(title)
        .with_input_schema::<A>()
        .with_output_schema::<O>()
        .with_annotations(annotations)
}

/// Every tool this server lists.
pub fn catalogue() -> Vec<Tool> {
    use Effect::*;
    vec![
        tool::<ListWorkersArgs, WorkerInfoList>(
            "list_workers",
            "List workers",
            "Every worker Shepherd knows, live and recovered after a restart (the worker registry contract): \
session_id, name, project_path, terminal_id, agent_type, status (ready|busy|closed), \
last_activity, created_at, plus source (registry|event_log), event_state \
(idle|active|closed), recovered_at and last_event_ts.",
            ReadOnly,
        ),
        tool::<WorkerEventsArgs, WorkerEventsAnswer>(
            "worker_events",
            "Worker events",
            "Worker lifecycle events (snapshot, worker_started, worker_idle, worker_active, \
worker_closed) with stable ids. Pass the answer's next_cursor back as `since` to get \
every later event exactly once; include_summary adds who started, closed, went idle or \
active, and who is stuck (active with no progress for stale_threshold_minutes).",
            ReadOnly,
        ),
        tool::<SubmitTaskArgs, SubmitTaskAnswer>(
            "submit_task",
            "Submit a task",
            "Create a task and offer it to workers at once (unless draft). `agent` names \
the agent that must run it; the spec is its prompt. Returns the vtid (and the run id \
if a worker already claimed it); follow with wait_for_task.",
            Additive,
        ),
        tool::<ListTasksArgs, p::TaskList>(
            "list_tasks",
            "List tasks",
            "Tasks, newest first, optionally by state or agent.",
            ReadOnly,
        ),
        tool::<ListSessionsArgs, SessionList>(
            "list_sessions",
            "List sessions",
            "Workspaces (the sessions contract) with their tabs: agent and terminal PTYs and git-diff, \
each with its pid and whether its process runs now. Attach over the WebSocket \
/ws/session/{session_id}/worker/{worker_id}.",
            ReadOnly,
        ),
        tool::<VtidArgs, TaskDetail>(
            "get_task",
            "Get a task",
            "One task with its claims and latest events.",
            ReadOnly,
        ),
        tool::<CancelTaskArgs, CancelResponse>(
            "cancel_task",
            "Cancel a task",
            "Cancel a task. If a worker holds it, the worker is told at once and its agent \
is stopped after the grace period.",
            Destructive,
        ),
        tool::<WaitForTaskArgs, WaitAnswer>(
            "wait_for_task",
            "Wait for a task",
            "Block until the task reaches done, failed or cancelled, or the timeout passes, \
sending progress notifications as its runs make progress.",
            ReadOnly,
        ),
        tool::<ListRunsArgs, WorkerListResponse>(
            "list_runs",
            "List runs",
            "Runs (executions of tasks by agents), newest first, in the Workers page contract's list shape \
(`workers` are runs there).",
            ReadOnly,
        ),
        tool::<GetRunArgs, RunAnswer>(
            "get_run",
            "Get a run",
            "One run in the Workers page contract's detail shape: result, status, live status, tool calls; \
the transcript only with include_transcript (use get_transcript to page through it).",
            ReadOnly,
        ),
        tool::<GetTranscriptArgs, TranscriptPage>(
            "get_transcript",
            "Get a transcript",
            "A run's transcript steps from start_index, paged and capped in size; pass \
next_index back as start_index while has_more.",
            ReadOnly,
        ),
        tool::<SendMessageArgs, SendResponse>(
            "send_message",
            "Send a message",
            "Send a user message to a conversation (the conversations contract): the resource's agent answers it \
in a new run. While a reply is still running, multitask decides: reject (default; the \
error conversation_busy), enqueue (run it after) or interrupt (cancel the current run, \
keeping its partial work, then run it).",
            Additive,
        ),
        tool::<CancelConversationArgs, ConversationInfo>(
            "cancel_conversation",
            "Cancel a conversation's run",
            "Cancel the conversation's running reply and drop its queued messages: the worker \
is told at once; the conversation stays `cancelled` until the run has ended, keeping its \
partial work, then is `idle`. An idle conversation is the error conversation_idle.",
            Destructive,
        ),
        tool::<ListInputRequestsArgs, p::InputRequestList>(
            "list_input_requests",
            "List input requests",
            "What agents wait for a person to answer: permission requests (a tool call with its \
exact input) and questions (a prompt, maybe with options), newest first; pending ones \
unless `state` says otherwise (`all` for every state).",
            ReadOnly,
        ),
        tool::<AnswerInputArgs, p::InputRequest>(
            "answer_input_request",
            "Answer an input request",
            "Answer an agent's request: `decision` allow or deny (with an optional `message` \
the agent is told) for a permission, `text` or one of the `option`s for a question. The \
first answer wins; a later one is the error already_answered.",
            Destructive,
        ),
    ]
}

/// A tool's failure: the REST API's code, or the tool's own
/// (`invalid_arguments`, …).
pub(crate) fn tool_error(e: &Failure) -> CallToolResult {
    let body = ErrorBody {
        error: p::ErrorDetail {
            code: e.code().to_owned(),
            message: e.message().to_owned(),
        },
    };
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "error {}: {}",
        e.code(),
        e.message()
    ))]);
    r.structured_content = serde_json::to_value(body).ok();
    r
}

fn success<T: Serialize>(answer: &T) -> CallToolResult {
    match serde_json::to_value(answer) {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => tool_error(&Failure::tool("internal", e.to_string())),
    }
}

fn args<A: DeserializeOwned>(raw: Option<Map<String, Value>>) -> Result<A, Failure> {
    serde_json::from_value(Value::Object(raw.unwrap_or_default()))
        .map_err(|e| Failure::tool("invalid_arguments", e.to_string()))
}

/// Runs a tool call. Only an unknown tool is a protocol error.
pub async fn call(
    mcp: &ShepherdMcp,
    api: &Client,
    request: CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResult, McpError> {
    let raw = request.arguments;
    let result = match request.name.as_ref() {
        "list_workers" => run(list_workers(api, args(raw)).await),
        "worker_events" => run(worker_events(api, args(raw)).await),
        "submit_task" => run(submit_task(api, args(raw)).await),
        "list_tasks" => run(list_tasks(api, args(raw)).await),
        "list_sessions" => run(list_sessions(api, args(raw)).await),
        "get_task" => run(get_task(api, args(raw)).await),
        "cancel_task" => run(cancel_task(api, args(raw)).await),
        "wait_for_task" => run(wait_for_task(api, args(raw), ctx).await),
        "list_runs" => run(list_runs(api, args(raw)).await),
        "get_run" => run(get_run(api, args(raw)).await),
        "send_message" => run(send_message(api, args(raw)).await),
        "cancel_conversation" => run(cancel_conversation(api, args(raw)).await),
        "list_input_requests" => run(list_input_requests(api, args(raw)).await),
        "answer_input_request" => run(answer_input_request(api, args(raw)).await),
        "get_transcript" => {
            let max = mcp.settings.max_answer_bytes;
            run(get_transcript(api, args(raw), max).await)
        }
        other => {
            return Err(McpError::invalid_params(
                format!("unknown tool {other:?}"),
                Some(json!({ "code": "unknown_tool" })),
            ))
        }
    };
    Ok(result)
}

fn run<T: Serialize>(r: Result<T, Failure>) -> CallToolResult {
    match r {
        Ok(answer) => success(&answer),
        Err(e) => tool_error(&e),
    }
}

async fn list_workers(
    api: &Client,
    a: Result<ListWorkersArgs, Failure>,
) -> Result<WorkerInfoList, Failure> {
    let a = a?;
    let q = p::WorkersQuery {
        include_closed: Some(a.include_closed),
        project: a.project_filter,
        agent_id: a.agent_id,
    };
    Ok(api.workers(&q).await?)
}

/// Events of a project's workers are found by reading the log's pages and
/// keeping theirs; a page is read at most this many times per call.
const MAX_FILTERED_PAGES: usize = 20;

async fn worker_events(
    api: &Client,
    a: Result<WorkerEventsArgs, Failure>,
) -> Result<WorkerEventsAnswer, Failure> {
    let a = a?;
    let limit = a.limit.unwrap_or(1000);
    let since = a
        .since
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    // The project's workers, closed ones included: their history still counts.
    let project: Option<HashSet<String>> = match &a.project_filter {
        Some(project) => {
            let q = p::WorkersQuery {
                include_closed: Some(true),
                project: Some(project.clone()),
                agent_id: None,
            };
            let list = api.workers(&q).await?;
            Some(list.workers.into_iter().map(|w| w.worker_id).collect())
        }
        None => None,
    };
    let keep = |e: &WorkerEvent| match (&project, &e.worker_id) {
        (None, _) => true,
        (Some(_), None) => true,
        (Some(ids), Some(w)) => ids.contains(w),
    };
    let mut events: Vec<WorkerEvent> = Vec::new();
    let mut cursor = since.clone();
    let mut first: Option<p::WorkerEventsResponse> = None;
    let mut next_cursor: i64;
    let mut has_more;
    let mut pages = 0;
    loop {
        pages += 1;
        let is_first = first.is_none();
        let q = p::WorkerEventsQuery {
            since: cursor.clone(),
            limit: Some(limit),
            include_snapshot: is_first.then_some(a.include_snapshot),
            include_summary: is_first.then_some(a.include_summary),
            stale_threshold_minutes: a.stale_threshold_minutes,
        };
        let mut page = api.worker_events(&q).await?;
        let full = page.events.len() as i64 >= limit;
        next_cursor = page.next_cursor;
        // Without `since` the page is the newest events: nothing follows it.
        has_more = full && since.is_some();
        for e in std::mem::take(&mut page.events) {
            if keep(&e) {
                events.push(e);
            }
        }
        if is_first {
            first = Some(page);
        }
        if project.is_none()
            || !has_more
            || events.len() as i64 >= limit
            || pages >= MAX_FILTERED_PAGES
        {
            break;
        }
        cursor = Some(next_cursor.to_string());
    }
    if events.len() as i64 > limit {
        events.truncate(limit as usize);
        next_cursor = events.last().map(|e| e.id).unwrap_or(next_cursor);
        has_more = true;
    }
    let first = first.unwrap_or(p::WorkerEventsResponse {
        events: vec![],
        count: 0,
        next_cursor,
        summary: None,
        snapshot: None,
    });
    let summary = if a.include_summary {
        let mut s = WorkerEventSummary {
            started: vec![],
            closed: vec![],
            idle: vec![],
            active: vec![],
            stuck: vec![],
            last_event_ts: None,
        };
        for e in &events {
            let Some(w) = &e.worker_id else { continue };
            let list = match e.kind.as_str() {
                "worker_started" => &mut s.started,
                "worker_closed" => &mut s.closed,
                "worker_idle" => &mut s.idle,
                "worker_active" => &mut s.active,
                _ => continue,
            };
            if !list.contains(w) {
                list.push(w.clone());
            }
        }
        // Stuck is the fleet's state now, not the window's: the API's own.
        s.stuck = first
            .summary
            .map(|r| r.stuck)
            .unwrap_or_default()
            .into_iter()
            .filter(|w| project.as_ref().is_none_or(|ids| ids.contains(w)))
            .collect();
        // The newest event returned (RFC 3339 in one format: text order is
        // time order).
        s.last_event_ts = events.iter().map(|e| e.ts.clone()).max();
        Some(s)
    } else {
        None
    };
    Ok(WorkerEventsAnswer {
        count: events.len() as i64,
        events,
        next_cursor: next_cursor.to_string(),
        has_more,
        summary,
        snapshot: a.include_snapshot.then_some(first.snapshot.flatten()),
    })
}

/// The newest run of a task, if any.
async fn latest_run(api: &Client, vtid: &str) -> Result<Option<String>, Failure> {
    let q = p::RunsQuery {
        vtid: Some(vtid.to_owned()),
        limit: Some(1),
        ..Default::default()
    };
    let list = api.runs(&q).await?;
    Ok(list.runs.into_iter().next().map(|r| r.id))
}

async fn submit_task(
    api: &Client,
    a: Result<SubmitTaskArgs, Failure>,
) -> Result<SubmitTaskAnswer, Failure> {
    let a = a?;
    let body = p::CreateTask {
        vtid: a.vtid,
        title: a.title,
        spec: a.spec,
        priority: a.priority,
        capabilities: a.capabilities,
        agent_id: a.agent,
        external: a.external,
        channel_id: a.channel_id,
        workflow: a.workflow,
        dispatch: Some(!a.draft),
        max_attempts: None,
        retry_backoff: None,
        run_at: None,
    };
    let task = api.create_task(&body).await?;
    let run_id = latest_run(api, &task.vtid).await?;
    Ok(SubmitTaskAnswer {
        vtid: task.vtid.clone(),
        state: task.state.clone(),
        run_id,
        task,
    })
}

async fn list_sessions(
    api: &Client,
    a: Result<ListSessionsArgs, Failure>,
) -> Result<SessionList, Failure> {
    a?;
    Ok(api.sessions().await?)
}

async fn list_tasks(
    api: &Client,
    a: Result<ListTasksArgs, Failure>,
) -> Result<p::TaskList, Failure> {
    let a = a?;
    let q = p::TaskListQuery {
        state: a.state,
        agent_id: a.agent_id,
        channel_id: None,
        limit: a.limit,
        offset: a.offset,
    };
    Ok(api.tasks(&q).await?)
}

async fn list_input_requests(
    api: &Client,
    a: Result<ListInputRequestsArgs, Failure>,
) -> Result<p::InputRequestList, Failure> {
    let a = a?;
    let state = match a.state.as_deref() {
        None | Some("") => Some("pending".to_owned()),
        Some("all") => None,
        Some(s) => Some(s.to_owned()),
    };
    let q = p::InputRequestsQuery {
        state,
        run_id: a.run_id,
        vtid: a.vtid,
        limit: a.limit,
    };
    Ok(api.input_requests(&q).await?)
}

async fn answer_input_request(
    api: &Client,
    a: Result<AnswerInputArgs, Failure>,
) -> Result<p::InputRequest, Failure> {
    let a = a?;
    let answer = p::InputAnswer {
        decision: a.decision,
        message: a.message,
        text: a.text,
        option: a.option,
    };
    Ok(api.answer_input(&a.id, &answer).await?)
}

async fn get_task(api: &Client, a: Result<VtidArgs, Failure>) -> Result<TaskDetail, Failure> {
    let a = a?;
    Ok(api.task(&a.vtid).await?.0)
}

async fn cancel_task(
    api: &Client,
    a: Result<CancelTaskArgs, Failure>,
) -> Result<CancelResponse, Failure> {
    let a = a?;
    let body = p::CancelBody { reason: a.reason };
    Ok(api.cancel(&a.vtid, &body).await?)
}

async fn send_message(
    api: &Client,
    a: Result<SendMessageArgs, Failure>,
) -> Result<SendResponse, Failure> {
    let a = a?;
    let body = p::SendBody {
        text: a.text,
        multitask: a.multitask.unwrap_or_default(),
    };
    Ok(api.send_message(&a.conversation_id, &body).await?)
}

async fn cancel_conversation(
    api: &Client,
    a: Result<CancelConversationArgs, Failure>,
) -> Result<ConversationInfo, Failure> {
    let a = a?;
    let body = p::CancelBody { reason: a.reason };
    Ok(api.cancel_conversation(&a.conversation_id, &body).await?)
}

fn is_final(task: &Task) -> bool {
    shepherd_core::workflow::ALL
        .iter()
        .filter(|w| w.name == task.workflow)
        .any(|w| w.final_states.contains(&task.state.as_str()))
}

/// While nothing happens, a progress notification still goes out this
/// often, so that clients which time out idle requests keep waiting.
const WAIT_HEARTBEAT: Duration = Duration::from_secs(10);

async fn wait_for_task(
    api: &Client,
    a: Result<WaitForTaskArgs, Failure>,
    ctx: &RequestContext<RoleServer>,
) -> Result<WaitAnswer, Failure> {
    let a = a?;
    let timeout = a.timeout_seconds.unwrap_or(120);
    if !(0..=3600).contains(&timeout) {
        return Err(Failure::tool(
            "invalid_timeout",
            "timeout_seconds must be between 0 and 3600",
        ));
    }
    let timeout = Duration::from_secs(timeout as u64);
    let deadline = tokio::time::Instant::now() + timeout;
    let (detail, cursor) = api.task(&a.vtid).await?;
    let mut task = detail.task;
    let answer = |task: Task, timed_out: bool, run_id: Option<String>| WaitAnswer {
        vtid: task.vtid.clone(),
        state: task.state.clone(),
        is_final: is_final(&task),
        timed_out,
        run_id,
        task,
    };
    if is_final(&task) {
        let run = latest_run(api, &task.vtid).await?;
        return Ok(answer(task, false, run));
    }
    // Follow the task's events from the cursor its state was read at: no
    // change can slip between the read and the stream.
    let q = p::EventStreamQuery {
        vtid: Some(a.vtid.clone()),
        after: Some(cursor.to_string()),
        ..Default::default()
    };
    let mut events = api.event_stream(&q).await?;
    let token = ctx.meta.get_progress_token();
    let mut progress = 0u32;
    let notify = |progress: u32, message: String| {
        let peer = ctx.peer.clone();
        let token = token.clone();
        async move {
            if let Some(token) = token {
                let _ = peer
                    .notify_progress(
                        ProgressNotificationParam::new(token, progress as f64)
                            .with_message(message),
                    )
                    .await;
            }
        }
    };
    // The first notification says the wait has begun (and the stream is
    // open: whatever happens to the task from here on is seen).
    progress += 1;
    notify(progress, format!("{}: {} (waiting)", task.vtid, task.state)).await;
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + WAIT_HEARTBEAT, WAIT_HEARTBEAT);
    loop {
        tokio::select! {
            _ = ctx.ct.cancelled() => {
                return Err(Failure::tool("cancelled", "the client cancelled the wait"));
            }
            _ = tokio::time::sleep_until(deadline) => {
                let task = api.task(&a.vtid).await?.0.task;
                let run = latest_run(api, &task.vtid).await?;
                let timed_out = !is_final(&task);
                return Ok(answer(task, timed_out, run));
            }
            _ = heartbeat.tick() => {
                progress += 1;
                notify(progress, format!("{}: {}", task.vtid, task.state)).await;
            }
            e = events.next() => {
                let Some(Ok(e)) = e else {
                    // The stream ends only when the server shuts down.
                    return Err(Failure::tool("unavailable", "the server closed the event stream"));
                };
                progress += 1;
                let kind = e
                    .parse::<p::WireEvent>()
                    .map(|d| d.event.kind)
                    .unwrap_or_else(|_| e.event.clone());
                if kind.starts_with("task.") || kind == "run.completed" {
                    task = api.task(&a.vtid).await?.0.task;
                }
                notify(progress, format!("{}: {} ({kind})", task.vtid, task.state)).await;
                if is_final(&task) {
                    let run = latest_run(api, &task.vtid).await?;
                    return Ok(answer(task, false, run));
                }
            }
        }
    }
}

async fn list_runs(
    api: &Client,
    a: Result<ListRunsArgs, Failure>,
) -> Result<WorkerListResponse, Failure> {
    let a = a?;
    let q = p::WorkersPageQuery {
        agent_id: a.agent_id,
        limit: a.limit,
        offset: a.offset,
        status: a.status,
        q: a.q,
    };
    Ok(api.workers_page_runs(&q).await?)
}

async fn get_run(api: &Client, a: Result<GetRunArgs, Failure>) -> Result<RunAnswer, Failure> {
    let a = a?;
    let q = p::WorkersPageDetailQuery {
        agent_id: None,
        worker_id: a.run_id,
    };
    let detail = api.workers_page_run(&q).await?;
    Ok(RunAnswer::from_rest(detail, a.include_transcript))
}

/// One page of a run's steps, never more than `max_bytes` of steps.
pub(crate) async fn get_transcript(
    api: &Client,
    a: Result<GetTranscriptArgs, Failure>,
    max_bytes: usize,
) -> Result<TranscriptPage, Failure> {
    let a = a?;
    let start = a.start_index.unwrap_or(0);
    if start < 0 {
        return Err(Failure::tool(
            "invalid_start_index",
            "start_index must be 0 or more",
        ));
    }
    let max_steps = a.max_steps.unwrap_or(200);
    if !(1..=1000).contains(&max_steps) {
        return Err(Failure::tool(
            "invalid_limit",
            "max_steps must be between 1 and 1000",
        ));
    }
    let q = p::StepsQuery {
        after: Some(start - 1),
        limit: Some(max_steps),
    };
    let page = api.steps(&a.run_id, &q).await?;
    let fetched = page.steps.len();
    let mut steps = Vec::new();
    let mut used = 0usize;
    let mut cut = false;
    for s in page.steps {
        let size = serde_json::to_vec(&s.step).map(|v| v.len()).unwrap_or(0);
        if used + size > max_bytes {
            if steps.is_empty() {
                // Alone larger than the cap: say so rather than stall paging.
                steps.push(PageStep {
                    index: s.index,
                    step: None,
                    omitted_bytes: Some(size as i64),
                });
            }
            cut = true;
            break;
        }
        used += size;
        steps.push(PageStep {
            index: s.index,
            step: Some(s.step),
            omitted_bytes: None,
        });
    }
    let next_index = steps.last().map(|s| s.index + 1).unwrap_or(start);
    let has_more = cut || fetched as i64 >= max_steps;
    Ok(TranscriptPage {
        run_id: a.run_id,
        complete: !has_more && page.status != "running",
        status: page.status.to_string(),
        steps,
        next_index,
        has_more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_schemas_and_annotations() {
        let tools = catalogue();
        assert_eq!(tools.len(), 15);
        for t in &tools {
            assert_eq!(
                t.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                t.name
            );
            let out = t.output_schema.as_ref().expect("output schema");
            assert_eq!(out.get("type"), Some(&json!("object")), "{}", t.name);
            let ann = t.annotations.as_ref().expect("annotations");
            assert!(ann.read_only_hint.is_some() && ann.destructive_hint.is_some());
        }
        for (name, destructive) in [
            ("cancel_task", true),
            ("cancel_conversation", true),
            ("answer_input_request", true),
            ("send_message", false),
        ] {
            let t = tools.iter().find(|t| t.name == name).unwrap();
            let ann = t.annotations.as_ref().unwrap();
            assert_eq!(ann.destructive_hint, Some(destructive), "{name}");
            assert_eq!(ann.read_only_hint, Some(false), "{name}");
        }
        let send = tools.iter().find(|t| t.name == "send_message").unwrap();
        let props = send.input_schema.get("properties").unwrap();
        for p in ["conversation_id", "text", "multitask"] {
            assert!(props.get(p).is_some(), "send_message lacks {p}");
        }
        let events = tools.iter().find(|t| t.name == "worker_events").unwrap();
        let props = events.input_schema.get("properties").unwrap();
        for p in [
            "since",
            "limit",
            "include_snapshot",
            "include_summary",
            "stale_threshold_minutes",
            "project_filter",
        ] {
            assert!(props.get(p).is_some(), "worker_events lacks {p}");
        }
    }

    #[test]
    fn bad_arguments_are_a_tool_error_with_a_code() {
        let parsed = args::<WorkerEventsArgs>(Some(
            json!({ "limit": "many" }).as_object().unwrap().clone(),
        ));
        let r = run(parsed.map(|_| ()));
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.structured_content.unwrap()["error"]["code"],
            json!("invalid_arguments")
        );
    }
}
