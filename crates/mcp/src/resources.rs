//! Resources: each run's transcript (`shepherd://runs/{run_id}/transcript`)
//! and each task (`shepherd://tasks/{vtid}`). A client subscribed to a
//! transcript is told each time the run records a step, and once more when
//! it ends; the watcher follows the event stream, not a timer.

use std::sync::Arc;

use futures::StreamExt;
use rmcp::model::{
    ListResourcesResult, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::Peer;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{json, Value};
use shepherd_client::Client;
use shepherd_protocol as p;

use crate::server::ShepherdMcp;
use crate::tools::Failure;
use crate::wire::GetTranscriptArgs;

const JSON: &str = "application/json";

/// What a URI names.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Transcript(String),
    Task(String),
}

fn parse(uri: &str) -> Option<Target> {
    let rest = uri.strip_prefix("shepherd://")?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["runs", id, "transcript"] if !id.is_empty() => Some(Target::Transcript((*id).to_owned())),
        ["tasks", vtid] if !vtid.is_empty() => Some(Target::Task((*vtid).to_owned())),
        _ => None,
    }
}

fn transcript_uri(run_id: &str) -> String {
    format!("shepherd://runs/{run_id}/transcript")
}

/// JSON-RPC's server-defined code for a caller the API refused (401, 403):
/// the specification has none of its own for authorisation, and "internal
/// error" would send a client looking for a bug in the server.
pub const NOT_AUTHORISED: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-32001);

/// A resource error: unknown URIs are "resource not found" (-32002 in the
/// MCP specification), refusals of the caller [`NOT_AUTHORISED`], other bad
/// requests "invalid request"; the API's code is kept in `data`.
fn resource_error(e: impl Into<Failure>, uri: &str) -> McpError {
    let e = e.into();
    let data = Some(json!({ "code": e.code(), "uri": uri }));
    let message = e.message().to_owned();
    match e.status() {
        Some(404) => McpError::resource_not_found(message, data),
        Some(401 | 403) => McpError::new(NOT_AUTHORISED, message, data),
        Some(s) if (400..500).contains(&s) => McpError::invalid_request(message, data),
        _ => McpError::internal_error(message, data),
    }
}

pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new("shepherd://runs/{run_id}/transcript", "run-transcript")
            .with_title("Run transcript")
            .with_description("A run's transcript steps (first page; use get_transcript to page)")
            .with_mime_type(JSON),
        ResourceTemplate::new("shepherd://tasks/{vtid}", "task")
            .with_title("Task")
            .with_description("A task with its claims and latest events")
            .with_mime_type(JSON),
    ]
}

/// The transcripts of the most recent runs.
pub async fn list(api: &Client) -> Result<ListResourcesResult, McpError> {
    let q = p::RunsQuery {
        limit: Some(50),
        ..Default::default()
    };
    let list = api
        .runs(&q)
        .await
        .map_err(|e| resource_error(e, "shepherd://runs"))?;
    let resources = list
        .runs
        .into_iter()
        .map(|r| {
            Resource::new(transcript_uri(&r.id), format!("run-{}-transcript", r.id))
                .with_title(format!(
                    "Transcript of run {} ({}, {})",
                    r.id, r.vtid, r.status
                ))
                .with_mime_type(JSON)
        })
        .collect();
    Ok(ListResourcesResult::with_all_items(resources))
}

pub async fn read(
    mcp: &ShepherdMcp,
    api: &Client,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let not_found = || {
        McpError::resource_not_found(
            format!("no resource {uri:?}"),
            Some(json!({ "code": "unknown_resource", "uri": uri })),
        )
    };
    // Both bodies go through `Value`, whose keys are sorted: the text is
    // the same whichever way the answer was put together.
    let body: Value = match parse(uri).ok_or_else(not_found)? {
        Target::Transcript(run_id) => {
            let page = crate::tools::get_transcript(
                api,
                Ok(GetTranscriptArgs {
                    run_id,
                    start_index: None,
                    max_steps: Some(1000),
                }),
                mcp.settings.max_answer_bytes,
            )
            .await
            .map_err(|e| resource_error(e, uri))?;
            serde_json::to_value(page).unwrap_or_default()
        }
        Target::Task(vtid) => {
            let (task, _) = api.task(&vtid).await.map_err(|e| resource_error(e, uri))?;
            serde_json::to_value(task).unwrap_or_default()
        }
    };
    Ok(ReadResourceResult::new(vec![ResourceContents::text(
        body.to_string(),
        uri,
    )
    .with_mime_type(JSON)]))
}

/// Starts telling `peer` when the transcript at `uri` grows. Subscribing
/// twice to one URI keeps one watcher.
pub async fn subscribe(
    mcp: &ShepherdMcp,
    api: Client,
    peer: Peer<RoleServer>,
    uri: String,
) -> Result<(), McpError> {
    let run_id = match parse(&uri) {
        Some(Target::Transcript(id)) => id,
        _ => {
            return Err(McpError::invalid_params(
                format!("only run transcripts (shepherd://runs/{{run_id}}/transcript) can be subscribed to, not {uri:?}"),
                Some(json!({ "code": "not_subscribable", "uri": uri })),
            ))
        }
    };
    // The run must exist; its status read here is where the stream starts.
    let (_, cursor) = api
        .run(&run_id)
        .await
        .map_err(|e| resource_error(e, &uri))?;
    let q = p::EventStreamQuery {
        run_id: Some(run_id),
        types: Some("run.step,run.completed".into()),
        after: Some(cursor.to_string()),
        ..Default::default()
    };
    let mut events = api
        .event_stream(&q)
        .await
        .map_err(|e| resource_error(e, &uri))?;
    let stop = mcp.shutdown_token().child_token();
    {
        let mut subs = mcp.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = subs.insert(uri.clone(), stop.clone()) {
            old.cancel();
        }
    }
    // Weak, so that the session's handler going away (its last strong
    // reference) still ends this watcher: see `ShepherdMcp`'s `Drop`.
    let subscriptions = Arc::downgrade(&mcp.subscriptions);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                e = events.next() => {
                    let Some(Ok(e)) = e else { break };
                    let ended = e
                        .parse::<p::WireEvent>()
                        .is_ok_and(|d| d.event.kind == "run.completed");
                    if peer
                        .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    if ended {
                        break;
                    }
                }
            }
        }
        // A watcher that ended by itself leaves no entry behind; one that was
        // replaced must not remove its successor's (which is not cancelled).
        tracing::debug!(%uri, "transcript subscription ended");
        stop.cancel();
        if let Some(subscriptions) = subscriptions.upgrade() {
            let mut subs = subscriptions.lock().unwrap_or_else(|p| p.into_inner());
            if subs.get(&uri).is_some_and(|t| t.is_cancelled()) {
                subs.remove(&uri);
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_transcripts_and_tasks_only() {
        assert_eq!(
            parse("shepherd://runs/r1/transcript"),
            Some(Target::Transcript("r1".into()))
        );
        assert_eq!(
            parse("shepherd://tasks/VTID-00001"),
            Some(Target::Task("VTID-00001".into()))
        );
        assert_eq!(parse("shepherd://runs//transcript"), None);
        assert_eq!(parse("shepherd://runs/r1"), None);
        assert_eq!(parse("file:///etc/passwd"), None);
    }
}
