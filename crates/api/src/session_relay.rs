//! Sessions on runners' hosts: this node keeps their records (as for its
//! own sessions) and asks the host, over its link (`host_link.rs`), to
//! start, attach, restart and stop their tabs. The host holds the PTYs and
//! their scrollback, so offsets and epochs are the host's own, and a client
//! that resumes after any restart (this node's, the host's, its own) gets
//! every byte exactly once.
//!
//! The routes in `sessions.rs` and `session_ws.rs` call [`place`] first;
//! what lives here is only what differs for a session that lives elsewhere.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::{SinkExt, StreamExt};
use shepherd_core::status::HostKind;
use shepherd_core::time::to_rfc3339;
use shepherd_core::Error;
use shepherd_protocol::link_stream::TabInput;
use shepherd_protocol::{
    HostOffline, HostTab, LinkReply, LinkRequest, RestartMode, ResumePoint, ServerMessage, TabExit,
    TabRestore, TabStartReason,
};
use shepherd_sessions::manager::new_id;
use shepherd_sessions::worker::{restart_mode_name, ExitInfo};
use shepherd_sessions::SessionManager;
use shepherd_store::{
    NewSession, NewSessionWorker, SessionRecord, SessionWorkerRecord, StartReason,
};

use crate::error::ApiError;
use crate::host_link::remote_error;
use crate::revocation::Watch;
use crate::session_ws::{client_input, close, confirm_message, Refused};
use crate::AppState;

/// Where a session lives, from this node's point of view.
pub(crate) enum Place {
    /// This node holds its PTYs.
    Here,
    /// A runner's host holds them; this node reaches it over the host's
    /// link (or says it is offline).
    Host(String),
    /// Another server node holds them, or holds the link of the runner's
    /// host that does: requests go through that node.
    OtherNode(String),
}

/// Where session `s` lives.
pub(crate) async fn place(state: &AppState, m: &SessionManager, s: &SessionRecord) -> Place {
    let me = &m.config().node_id;
    if &s.node_id == me {
        return Place::Here;
    }
    match state.store.host(&s.node_id).await {
        Ok(h) if h.kind == HostKind::Runner => match h.link_node {
            // Its runner linked to another node: that node reaches it.
            Some(node) if !state.links.connected(&h.id) && &node != me => Place::OtherNode(node),
            _ => Place::Host(h.id),
        },
        _ => Place::OtherNode(s.node_id.clone()),
    }
}

/// The node a runner's host keeps its link to, when that is not this node
/// and this node has no link to it.
pub(crate) async fn link_elsewhere(
    state: &AppState,
    m: &SessionManager,
    host: &str,
) -> Option<String> {
    let h = state.store.host(host).await.ok()?;
    let node = h.link_node.filter(|n| n != &m.config().node_id)?;
    (h.kind == HostKind::Runner && !state.links.connected(host)).then_some(node)
}

/// Where a request goes when the node it would have gone through could
/// not be asked: a session on a runner's host is answered here (503
/// `host_offline`, this node having no link), any other by the local path
/// (409 `session_on_other_node`).
pub(crate) fn unreached(place: Place, s: &SessionRecord) -> Place {
    match place {
        Place::OtherNode(node) if node != s.node_id => Place::Host(s.node_id.clone()),
        p => p,
    }
}

/// 503 `host_offline`, naming the host and when it was last heard from.
async fn offline(state: &AppState, host: &str) -> ApiError {
    let h = state.store.host(host).await.ok();
    let (name, seen) = h
        .map(|h| (h.name, to_rfc3339(h.last_seen_at)))
        .unwrap_or_else(|| (host.to_owned(), String::new()));
    let e = Error::unavailable(
        "host_offline",
        format!("host {name} ({host}) is offline (last heard from at {seen}); its sessions come back with its runner"),
    );
    ApiError::from(e).with_fields(HostOffline {
        host_id: host.to_owned(),
        host_name: name,
        last_seen_at: seen,
    })
}

/// Asks `host`, turning a refusal into this API's error; a host without a
/// link answers the full `host_offline`.
async fn ask(state: &AppState, host: &str, request: LinkRequest) -> Result<LinkReply, ApiError> {
    if !state.links.connected(host) {
        return Err(offline(state, host).await);
    }
    match state.links.ask(host, request).await {
        Ok(LinkReply::Failed {
            status,
            code,
            message,
        }) => Err(remote_error(host, status, &code, message).into()),
        Ok(reply) => Ok(reply),
        Err(e) if e.code == "host_offline" => Err(offline(state, host).await),
        Err(e) => Err(e.into()),
    }
}

/// A stop that found its host away counts as done (see [`delete`]).
fn away_or(r: Result<LinkReply, ApiError>) -> Result<(), ApiError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.error.code == "host_offline" => {
            tracing::info!(error = %e.error, "a tab's host is away: its records go now, its processes when it is back");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn unexpected(host: &str) -> ApiError {
    Error::unavailable(
        "host_failed",
        format!("host {host} answered something else than was asked"),
    )
    .into()
}

fn tab(s: &SessionRecord, w: &SessionWorkerRecord) -> HostTab {
    HostTab {
        session_id: s.id.clone(),
        worker_id: w.id.clone(),
        kind: w.kind.clone(),
        agent_id: w.agent_id.clone(),
        location: s.location_path.clone(),
    }
}

/// Creates a session on `host`: a server node (this one: the manager's
/// own), or a runner's host that checks the location against its own
/// sessions root.
pub(crate) async fn create(
    state: &AppState,
    m: &SessionManager,
    host: &str,
    name: Option<String>,
    location_path: &str,
) -> Result<SessionRecord, ApiError> {
    if host == m.config().node_id {
        return Ok(m.create_session(name, location_path).await?);
    }
    let h = state.store.host(host).await?;
    match h.kind {
        HostKind::Server => {
            return Err(ApiError::from(Error::conflict(
                "session_on_other_node",
                format!(
                    "host {host} is another server node{}: create the session through it",
                    h.address
                        .as_deref()
                        .map(|a| format!(" ({a})"))
                        .unwrap_or_default()
                ),
            ))
            .with_fields(shepherd_protocol::OtherNode {
                node_id: h.id,
                address: h.address,
            }))
        }
        HostKind::Runner if h.sessions_root.is_none() => {
            return Err(Error::invalid(
                "invalid_sessions_root",
                format!("host {host} has no sessions root: it hosts no sessions"),
            )
            .into())
        }
        HostKind::Runner => {}
    }
    let path = match ask(
        state,
        host,
        LinkRequest::SessionLocation {
            path: location_path.to_owned(),
        },
    )
    .await?
    {
        LinkReply::Location { path } => path,
        _ => return Err(unexpected(host)),
    };
    let name = name.unwrap_or_else(|| {
        std::path::Path::new(&path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "session".into())
    });
    Ok(state
        .store
        .create_session(NewSession {
            id: new_id("ses_"),
            name,
            location_path: path,
            node_id: host.to_owned(),
            node_address: None,
        })
        .await?)
}

/// Ends every process of a session on `host`, forgets their scrollback
/// there, then deletes it.
pub(crate) async fn delete(
    state: &AppState,
    host: &str,
    s: &SessionRecord,
) -> Result<SessionRecord, ApiError> {
    let stop = LinkRequest::TabStop {
        session_id: s.id.clone(),
        worker_id: None,
        forget: true,
    };
    // A host that is away ends the tabs when its link opens again (it
    // tells which run there, and the server stops those it no longer
    // knows): its sessions can be deleted meanwhile, even for good.
    away_or(ask(state, host, stop).await)?;
    for w in &s.workers {
        state.links.set_live(host, &w.id, false);
    }
    Ok(state.store.delete_session(&s.id).await?)
}

/// Adds a tab to a session on `host`; a PTY tab's process starts there at once.
pub(crate) async fn add_worker(
    state: &AppState,
    host: &str,
    s: &SessionRecord,
    kind: &str,
    name: Option<String>,
    agent_id: Option<String>,
) -> Result<SessionWorkerRecord, ApiError> {
    let name = shepherd_sessions::launch::tab_name(kind, name, agent_id.as_deref())?;
    let id = new_id("wk_");
    let new = |pid| NewSessionWorker {
        id: id.clone(),
        kind: kind.into(),
        name: name.clone(),
        agent_id: agent_id.clone(),
        pid,
    };
    if kind == "git-diff" {
        return Ok(state.store.add_session_worker(&s.id, new(None)).await?);
    }
    let t = HostTab {
        session_id: s.id.clone(),
        worker_id: id.clone(),
        kind: kind.into(),
        agent_id: agent_id.clone(),
        location: s.location_path.clone(),
    };
    let start = LinkRequest::TabStart {
        tab: t,
        epoch: 1,
        reason: TabStartReason::New,
    };
    let pid = match ask(state, host, start).await? {
        LinkReply::TabStarted { pid } => pid,
        _ => return Err(unexpected(host)),
    };
    match state.store.add_session_worker(&s.id, new(Some(pid))).await {
        Ok(w) => {
            state.links.set_live(host, &id, true);
            Ok(w)
        }
        Err(e) => {
            // Not recorded: nothing of it may stay on the host.
            let stop = LinkRequest::TabStop {
                session_id: s.id.clone(),
                worker_id: Some(id.clone()),
                forget: true,
            };
            let _ = ask(state, host, stop).await;
            Err(e.into())
        }
    }
}

/// Ends a tab's processes on `host`, forgets its scrollback, removes it.
pub(crate) async fn remove_worker(
    state: &AppState,
    host: &str,
    s: &SessionRecord,
    worker_id: &str,
) -> Result<SessionWorkerRecord, ApiError> {
    let stop = LinkRequest::TabStop {
        session_id: s.id.clone(),
        worker_id: Some(worker_id.to_owned()),
        forget: true,
    };
    away_or(ask(state, host, stop).await)?;
    state.links.set_live(host, worker_id, false);
    Ok(state.store.remove_session_worker(&s.id, worker_id).await?)
}

/// Restarts a tab on `host`: its process (if any) ended, a new one started.
pub(crate) async fn restart(
    state: &AppState,
    host: &str,
    s: &SessionRecord,
    w: &SessionWorkerRecord,
    mode: RestartMode,
) -> Result<SessionWorkerRecord, ApiError> {
    if !w.is_pty() {
        return Err(Error::invalid(
            "not_a_terminal",
            format!("a {:?} worker runs no process", w.kind),
        )
        .into());
    }
    let start = LinkRequest::TabStart {
        tab: tab(s, w),
        epoch: w.epoch + 1,
        reason: TabStartReason::Restart { mode },
    };
    let pid = match ask(state, host, start).await? {
        LinkReply::TabStarted { pid } => pid,
        _ => return Err(unexpected(host)),
    };
    state.links.set_live(host, &w.id, true);
    Ok(state
        .store
        .session_process_started(
            &s.id,
            &w.id,
            pid,
            StartReason::Restarted,
            restart_mode_name(mode),
        )
        .await?)
}

/// A `git-diff` tab of a session on `host`.
pub(crate) async fn diff(
    state: &AppState,
    host: &str,
    s: &SessionRecord,
    w: &SessionWorkerRecord,
) -> Result<shepherd_protocol::GitDiff, ApiError> {
    if w.kind != "git-diff" {
        return Err(Error::invalid(
            "not_a_git_diff_worker",
            format!("worker {:?} is a {} tab", w.id, w.kind),
        )
        .into());
    }
    let request = LinkRequest::SessionDiff {
        location: s.location_path.clone(),
    };
    match ask(state, host, request).await? {
        LinkReply::GitDiff(d) => Ok(d),
        _ => Err(unexpected(host)),
    }
}

/// Before the upgrade: a tab on an offline host is refused in the
/// standard error shape (a browser reads why with a plain GET).
pub(crate) async fn check_online(state: &AppState, host: &str) -> Result<(), ApiError> {
    if state.links.connected(host) {
        Ok(())
    } else {
        Err(offline(state, host).await)
    }
}

fn text(m: &ServerMessage) -> Message {
    Message::Text(m.to_json().into())
}

/// Serves an attached client of a tab on `host`: the host restores the
/// tab if it must (the records say how) and sends its frames, which go to
/// the client as they are; the client's input and resizes go back.
pub(crate) async fn serve(
    state: AppState,
    host: String,
    s: SessionRecord,
    w: SessionWorkerRecord,
    resume: Option<(u64, i64)>,
    mut socket: WebSocket,
    watch: Watch,
) {
    let stream = match state.links.open_stream(&host) {
        Ok(st) => st,
        Err(_) => return try_again(socket, "the host went offline").await,
    };
    let restore = TabRestore {
        epoch: w.epoch + 1,
        last_pid: w.pid,
        exited: w.exited_at.map(|_| TabExit {
            exit_code: w.exit_code,
            signal: w.exit_signal.as_deref().and_then(|x| x.parse().ok()),
        }),
    };
    let attach = LinkRequest::TabAttach {
        stream: stream.id,
        tab: tab(&s, &w),
        resume: resume.map(|(offset, epoch)| ResumePoint { offset, epoch }),
        restore,
    };
    match state.links.ask(&host, attach).await {
        Ok(LinkReply::TabAttached { restored_pid }) => {
            state.links.set_live(&host, &w.id, true);
            if let Some(pid) = restored_pid {
                let r = state
                    .store
                    .session_process_started(&s.id, &w.id, pid, StartReason::Restored, "continue")
                    .await;
                if let Err(e) = r {
                    tracing::warn!(error = %e, worker = w.id, "could not record a restore on a host");
                }
            }
        }
        Ok(LinkReply::Failed { code, message, .. }) => {
            // The host could not restore it (its location or agent is gone):
            // recorded, and answered as the contract says.
            tracing::warn!(
                session = s.id,
                worker = w.id,
                host,
                code,
                message,
                "restore failed on a host"
            );
            let _ = state
                .store
                .session_restore_failed(&s.id, &w.id, &message)
                .await;
            let exit = ExitInfo {
                exit_code: Some(1),
                signal: None,
            };
            let _ = socket.send(text(&exit.message())).await;
            let _ = socket.close().await;
            return;
        }
        Ok(_) => return try_again(socket, "the host answered something else").await,
        Err(e) => {
            tracing::info!(session = s.id, worker = w.id, host, error = %e, "attach through a host failed");
            return try_again(socket, "the host did not answer").await;
        }
    }
    let (mut sink, mut inbound) = socket.split();
    let mut stream = stream;
    loop {
        tokio::select! {
            _ = watch.ended().cancelled() => break,
            f = stream.frames.recv() => match f.map(String::from_utf8) {
                Some(Ok(json)) => {
                    if sink.send(Message::Text(json.into())).await.is_err() {
                        return;
                    }
                }
                Some(Err(_)) => break,
                // The host ended the stream, or the link went: the client
                // resumes from its offset when it attaches again.
                None => break,
            },
            msg = inbound.next() => match confirm_message(msg, &watch).await {
                Err(Refused::Lost) => break,
                Err(Refused::Dropped(reply)) => {
                    if sink.send(text(&reply)).await.is_err() {
                        return;
                    }
                }
                Ok(msg) => match msg {
                Some(Ok(Message::Text(t))) => match client_input(t.as_str()) {
                    Ok(input) => {
                        if !stream.send(input).await {
                            break;
                        }
                    }
                    Err(reply) => {
                        if sink.send(text(&reply)).await.is_err() {
                            return;
                        }
                    }
                },
                Some(Ok(Message::Binary(b))) => {
                    if !stream.send(TabInput::Bytes(b.to_vec())).await {
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
                },
            },
        }
    }
    close(sink, &watch).await;
}

/// Closes a client's socket as "try again later" (1013): nothing ended,
/// the host could not be reached.
async fn try_again(mut socket: WebSocket, why: &str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code: 1013,
            reason: why.to_owned().into(),
        })))
        .await;
}
