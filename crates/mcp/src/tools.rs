//! The tool catalogue (schemas and annotations) and each tool's work.
//!
//! Arguments are read into the typed structs of [`crate::wire`]; a type
//! mismatch is a tool error `invalid_arguments`, and whatever the REST API
//! refuses comes back as a tool error with the API's own code. Only an
//! unknown tool name is a protocol (JSON-RPC) error.

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

use crate::backend::{encode, query, Api, ApiError};
use crate::server::ShepherdMcp;
use crate::wire::*;

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
            "Every worker Shepherd knows, live and recovered after a restart (seed 001): \
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
        tool::<ListTasksArgs, shepherd_protocol::TaskList>(
            "list_tasks",
            "List tasks",
            "Tasks, newest first, optionally by state or agent.",
            ReadOnly,
        ),
        tool::<ListSessionsArgs, SessionList>(
            "list_sessions",
            "List sessions",
            "Workspaces (seed 004) with their tabs: agent and terminal PTYs and git-diff, \
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
            "Runs (executions of tasks by agents), newest first, in seed 000's list shape \
(`workers` are runs there).",
            ReadOnly,
        ),
        tool::<GetRunArgs, RunDetail>(
            "get_run",
            "Get a run",
            "One run in seed 000's detail shape: result, status, live status, tool calls; \
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
            "Send a user message to a conversation (seed 002): the resource's agent answers it \
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
    ]
}

/// A tool's failure: the REST API's code, or `invalid_arguments`.
pub(crate) fn tool_error(e: &ApiError) -> CallToolResult {
    let body = ErrorBody {
        error: shepherd_protocol::ErrorDetail {
            code: e.code.clone(),
            message: e.message.clone(),
        },
    };
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "error {}: {}",
        e.code, e.message
    ))]);
    r.structured_content = serde_json::to_value(body).ok();
    r
}

fn success<T: Serialize>(answer: &T) -> CallToolResult {
    match serde_json::to_value(answer) {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => tool_error(&ApiError::new("internal", e.to_string())),
    }
}

fn args<A: DeserializeOwned>(raw: Option<Map<String, Value>>) -> Result<A, ApiError> {
    serde_json::from_value(Value::Object(raw.unwrap_or_default()))
        .map_err(|e| ApiError::new("invalid_arguments", e.to_string()))
}

/// Runs a tool call. Only an unknown tool is a protocol error.
pub async fn call(
    mcp: &ShepherdMcp,
    api: &Api,
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

fn run<T: Serialize>(r: Result<T, ApiError>) -> CallToolResult {
    match r {
        Ok(answer) => success(&answer),
        Err(e) => tool_error(&e),
    }
}

fn some<T: ToString>(v: Option<T>) -> Option<String> {
    v.map(|v| v.to_string())
}

async fn list_workers(
    api: &Api,
    a: Result<ListWorkersArgs, ApiError>,
) -> Result<WorkerInfoList, ApiError> {
    let a = a?;
    let q = query(&[
        ("include_closed", Some(a.include_closed.to_string())),
        ("project", a.project_filter),
        ("agent_id", a.agent_id),
    ]);
    api.get(&format!("/api/v1/workers{q}")).await?.parse()
}

/// Events of a project's workers are found by reading the log's pages and
/// keeping theirs; a page is read at most this many times per call.
const MAX_FILTERED_PAGES: usize = 20;

async fn worker_events(
    api: &Api,
    a: Result<WorkerEventsArgs, ApiError>,
) -> Result<WorkerEventsAnswer, ApiError> {
    let a = a?;
    let limit = a.limit.unwrap_or(1000);
    let since = a
        .since
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    // The project's workers, closed ones included: their history still counts.
    let project: Option<HashSet<String>> = match &a.project_filter {
        Some(p) => {
            let q = query(&[
                ("include_closed", Some("true".into())),
                ("project", Some(p.clone())),
            ]);
            let list: WorkerInfoList = api.get(&format!("/api/v1/workers{q}")).await?.parse()?;
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
    let mut first: Option<shepherd_protocol::WorkerEventsResponse> = None;
    let mut next_cursor: i64;
    let mut has_more;
    let mut pages = 0;
    loop {
        pages += 1;
        let is_first = first.is_none();
        let q = query(&[
            ("since", cursor.clone()),
            ("limit", Some(limit.to_string())),
            (
                "include_snapshot",
                is_first.then(|| a.include_snapshot.to_string()),
            ),
            (
                "include_summary",
                is_first.then(|| a.include_summary.to_string()),
            ),
            ("stale_threshold_minutes", some(a.stale_threshold_minutes)),
        ]);
        let mut page: shepherd_protocol::WorkerEventsResponse = api
            .get(&format!("/api/v1/worker_events{q}"))
            .await?
            .parse()?;
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
    let first = first.unwrap_or(shepherd_protocol::WorkerEventsResponse {
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
        s.last_event_ts = events.last().map(|e| e.ts.clone());
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
async fn latest_run(api: &Api, vtid: &str) -> Result<Option<String>, ApiError> {
    let q = query(&[("vtid", Some(vtid.to_owned())), ("limit", Some("1".into()))]);
    let list: shepherd_protocol::RunList = api.get(&format!("/api/v1/runs{q}")).await?.parse()?;
    Ok(list.runs.into_iter().next().map(|r| r.id))
}

async fn submit_task(
    api: &Api,
    a: Result<SubmitTaskArgs, ApiError>,
) -> Result<SubmitTaskAnswer, ApiError> {
    let a = a?;
    let body = shepherd_protocol::CreateTask {
        vtid: a.vtid,
        title: a.title,
        spec: a.spec,
        priority: a.priority,
        capabilities: a.capabilities,
        agent_id: a.agent,
        channel_id: a.channel_id,
        workflow: a.workflow,
        dispatch: Some(!a.draft),
        max_attempts: None,
        retry_backoff: None,
        run_at: None,
    };
    let task: Task = api.post("/api/v1/tasks", &body).await?.parse()?;
    let run_id = latest_run(api, &task.vtid).await?;
    Ok(SubmitTaskAnswer {
        vtid: task.vtid.clone(),
        state: task.state.clone(),
        run_id,
        task,
    })
}

async fn list_sessions(
    api: &Api,
    a: Result<ListSessionsArgs, ApiError>,
) -> Result<SessionList, ApiError> {
    a?;
    api.get("/api/v1/sessions").await?.parse()
}

async fn list_tasks(
    api: &Api,
    a: Result<ListTasksArgs, ApiError>,
) -> Result<shepherd_protocol::TaskList, ApiError> {
    let a = a?;
    let q = query(&[
        ("state", a.state),
        ("agent_id", a.agent_id),
        ("limit", some(a.limit)),
        ("offset", some(a.offset)),
    ]);
    api.get(&format!("/api/v1/tasks{q}")).await?.parse()
}

async fn get_task(api: &Api, a: Result<VtidArgs, ApiError>) -> Result<TaskDetail, ApiError> {
    let a = a?;
    api.get(&format!("/api/v1/tasks/{}", encode(&a.vtid)))
        .await?
        .parse()
}

async fn cancel_task(
    api: &Api,
    a: Result<CancelTaskArgs, ApiError>,
) -> Result<CancelResponse, ApiError> {
    let a = a?;
    api.post(
        &format!("/api/v1/tasks/{}/cancel", encode(&a.vtid)),
        &shepherd_protocol::CancelBody { reason: a.reason },
    )
    .await?
    .parse()
}

async fn send_message(
    api: &Api,
    a: Result<SendMessageArgs, ApiError>,
) -> Result<SendResponse, ApiError> {
    let a = a?;
    let body = shepherd_protocol::SendBody {
        text: a.text,
        multitask: a.multitask.unwrap_or_default(),
    };
    api.post(
        &format!(
            "/api/v1/conversations/{}/messages",
            encode(&a.conversation_id)
        ),
        &body,
    )
    .await?
    .parse()
}

async fn cancel_conversation(
    api: &Api,
    a: Result<CancelConversationArgs, ApiError>,
) -> Result<ConversationInfo, ApiError> {
    let a = a?;
    api.post(
        &format!(
            "/api/v1/conversations/{}/cancel",
            encode(&a.conversation_id)
        ),
        &shepherd_protocol::CancelBody { reason: a.reason },
    )
    .await?
    .parse()
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
    api: &Api,
    a: Result<WaitForTaskArgs, ApiError>,
    ctx: &RequestContext<RoleServer>,
) -> Result<WaitAnswer, ApiError> {
    let a = a?;
    let timeout = a.timeout_seconds.unwrap_or(120);
    if !(0..=3600).contains(&timeout) {
        return Err(ApiError::new(
            "invalid_timeout",
            "timeout_seconds must be between 0 and 3600",
        ));
    }
    let timeout = Duration::from_secs(timeout as u64);
    let deadline = tokio::time::Instant::now() + timeout;
    let path = format!("/api/v1/tasks/{}", encode(&a.vtid));
    let reply = api.get(&path).await?;
    let cursor = reply.cursor;
    let mut task: Task = reply.parse()?;
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
    let after = cursor
        .map(|c| c.to_string())
        .unwrap_or_else(|| "now".into());
    let q = format!("vtid={}&after={}", encode(&a.vtid), encode(&after));
    let mut events = api.events(&q).await?;
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
                return Err(ApiError::new("cancelled", "the client cancelled the wait"));
            }
            _ = tokio::time::sleep_until(deadline) => {
                let task: Task = api.get(&path).await?.parse()?;
                let run = latest_run(api, &task.vtid).await?;
                let timed_out = !is_final(&task);
                return Ok(answer(task, timed_out, run));
            }
            _ = heartbeat.tick() => {
                progress += 1;
                notify(progress, format!("{}: {}", task.vtid, task.state)).await;
            }
            e = events.next() => {
                let Some(e) = e else {
                    // The stream ends only when the server shuts down.
                    return Err(ApiError::new("unavailable", "the server closed the event stream"));
                };
                progress += 1;
                let kind = serde_json::from_str::<shepherd_protocol::WireEvent>(&e.data)
                    .map(|d| d.event.kind)
                    .unwrap_or_else(|_| e.event.clone());
                if kind.starts_with("task.") || kind == "run.completed" {
                    task = api.get(&path).await?.parse()?;
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
    api: &Api,
    a: Result<ListRunsArgs, ApiError>,
) -> Result<WorkerListResponse, ApiError> {
    let a = a?;
    let q = query(&[
        ("agent_id", a.agent_id),
        ("status", a.status),
        ("q", a.q),
        ("limit", some(a.limit)),
        ("offset", some(a.offset)),
    ]);
    api.get(&format!("/api/agents/workers{q}")).await?.parse()
}

async fn get_run(api: &Api, a: Result<GetRunArgs, ApiError>) -> Result<RunDetail, ApiError> {
    let a = a?;
    let q = query(&[("worker_id", Some(a.run_id))]);
    let rest: shepherd_protocol::WorkerDetailResponse = api
        .get(&format!("/api/agents/workers/detail{q}"))
        .await?
        .parse()?;
    Ok(RunDetail::from_rest(rest, a.include_transcript))
}

/// One page of a run's steps, never more than `max_bytes` of steps.
pub(crate) async fn get_transcript(
    api: &Api,
    a: Result<GetTranscriptArgs, ApiError>,
    max_bytes: usize,
) -> Result<TranscriptPage, ApiError> {
    let a = a?;
    let start = a.start_index.unwrap_or(0);
    if start < 0 {
        return Err(ApiError::new(
            "invalid_start_index",
            "start_index must be 0 or more",
        ));
    }
    let max_steps = a.max_steps.unwrap_or(200);
    if !(1..=1000).contains(&max_steps) {
        return Err(ApiError::new(
            "invalid_limit",
            "max_steps must be between 1 and 1000",
        ));
    }
    let q = query(&[
        ("after", Some((start - 1).to_string())),
        ("limit", Some(max_steps.to_string())),
    ]);
    let page: shepherd_protocol::StepsPage = api
        .get(&format!("/api/v1/runs/{}/steps{q}", encode(&a.run_id)))
        .await?
        .parse()?;
    let fetched = page.steps.len();
    let mut steps = Vec::new();
    let mut used = 0usize;
    let mut cut = false;
    for s in page.steps {
        let size = serde_json::to_vec(&s.step).map(|v| v.len()).unwrap_or(0);
        if used + size > max_bytes {
            if steps.is_empty() {
                // Alone larger than the cap: say so rather than stall paging.
                steps.push(IndexedStep {
                    index: s.index,
                    step: None,
                    omitted_bytes: Some(size as i64),
                });
            }
            cut = true;
            break;
        }
        used += size;
        steps.push(IndexedStep {
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
        assert_eq!(tools.len(), 13);
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
