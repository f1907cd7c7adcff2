//! The PTY WebSocket at the sessions contract's route, `/ws/session/{sessionId}/worker/{workerId}`.
//!
//! On attach the worker's process is restored if it does not exist (see
//! `SessionManager::attach`); the client then gets `history`, the current
//! `activity`, and live `output` / `activity` / `exit` frames, and may send
//! `input` and `resize`. A restore that is impossible answers the contract's
//! `{"type":"exit","exitCode":1,"signal":null}` and closes.
//!
//! Frames come from the worker's bounded broadcast window: a client too slow
//! to keep up loses its place and is sent a fresh `history` rather than
//! holding up the PTY or the other clients. Authentication and the Origin
//! check happen in the middleware like any other route; browsers offer the
//! `shepherd.v1` subprotocol, which is selected. The socket lasts only as
//! long as that credential (`revocation`): one lost closes it with 4401 or
//! 4403, and each input is checked before it reaches the tab.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use shepherd_core::Error;
use shepherd_protocol::link_stream::TabInput;
use shepherd_sessions::worker::ExitInfo;
use shepherd_sessions::{Attachment, ClientMessage, ServerMessage};
use tokio::sync::broadcast::error::RecvError;
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::error::{ApiQuery, ApiResult};
use crate::revocation::{Credential, Watch};
use crate::session_relay::{self as relay, Place};
use crate::sessions::{manager, with_node};
use crate::AppState;

/// The subprotocol a browser offers (with `bearer.<token>`).
pub const SUBPROTOCOL: &str = "shepherd.v1";
/// Socket buffers are kept small: an idle attached client should cost little.
const READ_BUFFER: usize = 4 * 1024;
/// Largest message a client may send (a paste).
const MAX_MESSAGE: usize = 1024 * 1024;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AttachQuery {
    /// Resume after this byte offset (with `epoch`): only what follows is sent.
    pub offset: Option<u64>,
    /// The epoch the offset belongs to; another epoch gets the whole history.
    pub epoch: Option<i64>,
}

/// Attach to a PTY worker (WebSocket; JSON text messages).
#[utoipa::path(get, path = "/ws/session/{sessionId}/worker/{workerId}", tag = "sessions", operation_id = "attach_session_worker",
    params(("sessionId" = String, Path), ("workerId" = String, Path), AttachQuery), responses(
    (status = 101, description = "WebSocket: server sends history, output, activity, exit; client sends input, resize"),
    (status = 400, description = "websocket_required: a plain GET of a tab that could be attached (a plain GET of one that cannot answers why, as below)", body = crate::openapi::ErrorBody),
    (status = 404, description = "session_not_found, worker_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "session_on_other_node", body = crate::openapi::ErrorBody),
    (status = 422, description = "not_a_terminal", body = crate::openapi::ErrorBody),
    (status = 503, description = "host_offline: the tab lives on a runner's host that has no link now", body = crate::openapi::ErrorBody)))]
// One argument per extractor: axum hands a handler what it names.
#[allow(clippy::too_many_arguments)]
pub async fn attach(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: axum::http::HeaderMap,
    Path((session_id, worker_id)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<AttachQuery>,
    slot: Option<Extension<crate::limits::StreamSlot>>,
    credential: Option<Extension<Credential>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    caller.require_operator()?;
    let m = manager(&state)?;
    // Why a tab cannot be attached is answered before the handshake is
    // looked at: a browser cannot read a refused upgrade's answer, so the
    // UI asks again with a plain GET and reads it here.
    let (s, w) = state.store.session_worker(&session_id, &worker_id).await?;
    let place = relay::place(&state, &m, &s).await;
    let peer = match &place {
        Place::OtherNode(node) => {
            crate::node_relay::peer(&state, &m, node, Some(&s), &headers).await
        }
        _ => None,
    };
    // Asked before the handshake, so that a node that cannot be reached is
    // answered as such (a browser reads it with a plain GET and stops
    // trying) rather than with a socket that closes at once, forever.
    let peer = match peer {
        Some(c) => match crate::node_relay::answer(&s.node_id, c.session(&session_id).await) {
            Some(Ok(_)) => Some(c),
            Some(Err(e)) => return Err(e),
            None => None,
        },
        None => None,
    };
    let host = match (peer.is_some(), relay::unreached(place, &s)) {
        (true, _) | (false, Place::Here) => None,
        (false, Place::Host(host)) => Some(host),
        // The one kind of place check_node refuses.
        (false, Place::OtherNode(_)) => match m.check_node(&s) {
            Err(e) => return Err(with_node(&state, &session_id, ApiError::from(e)).await),
            Ok(()) => None,
        },
    };
    if !w.is_pty() {
        return Err(Error::invalid(
            "not_a_terminal",
            format!("worker {worker_id:?} is a {} tab, not a terminal", w.kind),
        )
        .into());
    }
    if let Some(host) = &host {
        relay::check_online(&state, host).await?;
    }
    // A plain GET of an attachable tab gets the API's JSON error, not the
    // framework's text.
    let ws = ws.map_err(|r| {
        Error::bad_request(
            "websocket_required",
            format!("this route is a WebSocket: {}", r.body_text()),
        )
    })?;
    let resume = q.offset.zip(q.epoch);
    // Typing into a shell lasts only as long as the credential that let
    // the client in (and its role): see `revocation`.
    let watch = crate::revocation::watch(&state, credential.map(|Extension(c)| c));
    Ok(ws
        .protocols([SUBPROTOCOL])
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            // The stream slot is freed when this socket ends.
            let _slot = slot;
            if let Some(host) = host {
                return relay::serve(state, host, s, w, resume, socket, watch).await;
            }
            if let Some(peer) = peer {
                let mut path = format!("/ws/session/{session_id}/worker/{worker_id}");
                if let Some((offset, epoch)) = resume {
                    path.push_str(&format!("?offset={offset}&epoch={epoch}"));
                }
                return crate::node_relay::serve(peer, path, s.node_id, socket, watch).await;
            }
            let attached = m.attach(&session_id, &worker_id).await;
            let mut socket = socket;
            match attached {
                Ok(att) => serve(socket, att, resume, watch).await,
                Err(e) => {
                    tracing::info!(session = session_id, worker = worker_id, error = %e, "attach failed");
                    let exit = ExitInfo {
                        exit_code: Some(1),
                        signal: None,
                    };
                    let _ = socket.send(text(&exit.message())).await;
                    let _ = socket.close().await;
                }
            }
        }))
}

fn text(m: &ServerMessage) -> Message {
    Message::Text(m.to_json().into())
}

async fn serve(socket: WebSocket, att: Attachment, resume: Option<(u64, i64)>, watch: Watch) {
    let (mut sink, mut stream) = socket.split();
    let sub = att.output.subscribe(resume);
    let mut frames = sub.frames;
    let first = [
        text(&sub.history),
        text(&ServerMessage::Activity {
            state: sub.activity,
        }),
    ];
    for m in first {
        if sink.send(m).await.is_err() {
            return;
        }
    }
    if let Some(exit) = sub.exit {
        let _ = sink.send(text(&exit.message())).await;
        let _ = sink.close().await;
        return;
    }
    loop {
        tokio::select! {
            _ = watch.ended().cancelled() => break,
            f = frames.recv() => match f {
                Ok(f) => {
                    if sink.send(Message::Text(f.json.as_ref().into())).await.is_err() {
                        return;
                    }
                    if f.is_exit {
                        break;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Too far behind: start over from a fresh history.
                    let sub = att.output.subscribe(None);
                    frames = sub.frames;
                    if sink.send(text(&sub.history)).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => break,
            },
            msg = stream.next() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let reply = match confirm(&watch).await {
                        Ok(()) => handle(&att, t.as_str()).await,
                        Err(Refused::Dropped(reply)) => Some(reply),
                        Err(Refused::Lost) => break,
                    };
                    if let Some(reply) = reply {
                        if sink.send(text(&reply)).await.is_err() {
                            return;
                        }
                    }
                }
                Some(Ok(Message::Binary(b))) => match confirm(&watch).await {
                    Ok(()) => att.input(&b).await,
                    Err(Refused::Dropped(reply)) => {
                        if sink.send(text(&reply)).await.is_err() {
                            return;
                        }
                    }
                    Err(Refused::Lost) => break,
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
        }
    }
    close(sink, &watch).await;
}

/// Why a client's message may not reach the tab.
pub(crate) enum Refused {
    /// Not now: the credential could not be checked; the client is told.
    Dropped(ServerMessage),
    /// The credential is lost: the socket closes with its code.
    Lost,
}

/// Checks the client's credential before its message reaches the tab.
pub(crate) async fn confirm(watch: &Watch) -> Result<(), Refused> {
    match watch.confirm().await {
        Ok(()) => Ok(()),
        Err(Some(_)) => Err(Refused::Lost),
        Err(None) => Err(Refused::Dropped(ServerMessage::Error {
            code: "unavailable".into(),
            message: "your credential could not be checked just now; this input was dropped".into(),
        })),
    }
}

/// A client's message, once its credential allows it to reach the tab
/// (text and binary messages are checked; others pass): `Err` says what
/// to do instead.
pub(crate) async fn confirm_message<M>(
    msg: Option<Result<Message, M>>,
    watch: &Watch,
) -> Result<Option<Result<Message, M>>, Refused> {
    if let Some(Ok(Message::Text(_) | Message::Binary(_))) = &msg {
        confirm(watch).await?;
    }
    Ok(msg)
}

/// Closes a client's socket: with 4401/4403 and the reason when its
/// credential was lost, else normally.
pub(crate) async fn close<S>(mut sink: S, watch: &Watch)
where
    S: futures::Sink<Message> + Unpin,
{
    let frame = watch.lost().map(|lost| lost.close_frame());
    match frame {
        Some(frame) => {
            let _ = sink.send(Message::Close(Some(frame))).await;
        }
        None => {
            let _ = sink.close().await;
        }
    }
}

/// Acts on one client message; answers an `error` message for a bad one.
async fn handle(att: &Attachment, text: &str) -> Option<ServerMessage> {
    match client_input(text) {
        Ok(TabInput::Bytes(b)) => att.input(&b).await,
        Ok(TabInput::Resize { cols, rows }) => att.resize(cols, rows).await,
        Err(reply) => return Some(reply),
    }
    None
}

/// A client message as a tab takes it, or the `error` it is answered
/// (the same for a tab here and one on a runner's host).
pub(crate) fn client_input(text: &str) -> Result<TabInput, ServerMessage> {
    match serde_json::from_str::<ClientMessage>(text) {
        Ok(ClientMessage::Input { data }) => Ok(TabInput::Bytes(data.into_bytes())),
        Ok(ClientMessage::Resize { cols, rows }) => {
            if !(1..=1000).contains(&cols) || !(1..=1000).contains(&rows) {
                return Err(ServerMessage::Error {
                    code: "invalid_size".into(),
                    message: "cols and rows must be between 1 and 1000".into(),
                });
            }
            Ok(TabInput::Resize { cols, rows })
        }
        Err(e) => Err(ServerMessage::Error {
            code: "invalid_message".into(),
            message: format!("expected an input or resize message: {e}"),
        }),
    }
}

pub fn router() -> Router<AppState> {
    Router::new().route("/ws/session/{sessionId}/worker/{workerId}", get(attach))
}
