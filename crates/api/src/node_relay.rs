//! Sessions on another server node of the cluster: this node passes the
//! request on to the node that holds the session's PTYs, as the caller (its
//! `Authorization`, or the bearer token a browser offered as a WebSocket
//! subprotocol), and answers what that node answered. A client may
//! therefore use any node for any session; the PTY still lives on one.
//!
//! A node is only asked when the host list says it is a server node and
//! online, and never when its address is this node's own (a node id that
//! changed would otherwise send requests round in a loop). When the node
//! cannot be reached, the caller gets the old answer, 409
//! `session_on_other_node` with the node's address.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use axum::http::{header, HeaderMap, HeaderValue};
use futures::{SinkExt, StreamExt};
use shepherd_client::{Client, ClientError};
use shepherd_core::status::HostKind;
use shepherd_sessions::SessionManager;
use shepherd_store::SessionRecord;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message as Tung;
use tokio_tungstenite::WebSocketStream;

use crate::error::ApiError;
use crate::host_link::remote_error;
use crate::revocation::Watch;
use crate::session_ws::{close, confirm_message, Refused};
use crate::AppState;

/// How often a relayed socket to another node is pinged, so that a quiet
/// terminal's connection is neither timed out nor left dead unnoticed.
const PING_EVERY: std::time::Duration = std::time::Duration::from_secs(20);

/// The caller's credentials as a header: `Authorization` as it came, or the
/// `bearer.<token>` subprotocol a browser's WebSocket carries.
fn credentials(headers: &HeaderMap) -> Option<HeaderValue> {
    if let Some(a) = headers.get(header::AUTHORIZATION) {
        return Some(a.clone());
    }
    let offered = headers.get(header::SEC_WEBSOCKET_PROTOCOL)?.to_str().ok()?;
    let token = offered
        .split(',')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("bearer."))?;
    let mut h = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    h.set_sensitive(true);
    Some(h)
}

/// A client of server node `node` (which holds session `s`, or the link
/// of the runner's host that does), acting as the caller; none when no
/// such node can be asked.
pub(crate) async fn peer(
    state: &AppState,
    m: &SessionManager,
    node: &str,
    s: Option<&SessionRecord>,
    headers: &HeaderMap,
) -> Option<Client> {
    let fallback = s
        .filter(|s| s.node_id == node)
        .and_then(|s| s.node_address.clone());
    let node = state.store.host(node).await.ok()?;
    let timeout = state.settings.heartbeat_timeout.as_millis() as i64;
    let online = shepherd_store::now_ms() - node.last_seen_at <= timeout;
    let address = node.address.or(fallback)?;
    if node.kind != HostKind::Server
        || !online
        || Some(&address) == m.config().node_address.as_ref()
    {
        return None;
    }
    match Client::new(&address, None) {
        Ok(c) => Some(c.with_authorization(credentials(headers)).with_retries(0)),
        Err(e) => {
            tracing::warn!(node = node.id, address, error = %e, "cannot reach another node");
            None
        }
    }
}

/// What the other node answered, as this node answers it; `None` when it
/// could not be reached (the caller falls back to `session_on_other_node`).
pub(crate) fn answer<T>(node: &str, r: Result<T, ClientError>) -> Option<Result<T, ApiError>> {
    match r {
        Ok(v) => Some(Ok(v)),
        Err(ClientError::Api {
            status,
            code,
            message,
        }) => Some(Err(remote_error(node, status, &code, message).into())),
        Err(e) => {
            tracing::warn!(node, error = %e, "another node did not answer; sending the client to it");
            None
        }
    }
}

/// Relays an attached client to the node holding the tab, frames as they
/// are both ways; the other node restores, resumes and answers exactly as
/// it would the client itself.
pub(crate) async fn serve(
    peer: Client,
    path: String,
    node: String,
    mut socket: WebSocket,
    watch: Watch,
) {
    let upstream = match peer.open_websocket(&path).await {
        Ok(io) => WebSocketStream::from_raw_socket(io, Role::Client, None).await,
        Err(e) => {
            tracing::info!(node, error = %e, "cannot attach through another node");
            let _ = socket
                .send(Message::Close(Some(CloseFrame {
                    code: 1013,
                    reason: "the node holding this tab did not answer".into(),
                })))
                .await;
            return;
        }
    };
    let (mut up_tx, mut up_rx) = upstream.split();
    let (mut down_tx, mut down_rx) = socket.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            _ = watch.ended().cancelled() => break,
            _ = ping.tick() => {
                if up_tx.send(Tung::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
            m = up_rx.next() => match m {
                Some(Ok(Tung::Text(t))) => {
                    if down_tx.send(Message::Text(t.as_str().into())).await.is_err() {
                        return;
                    }
                }
                Some(Ok(Tung::Binary(b))) => {
                    if down_tx.send(Message::Binary(b)).await.is_err() {
                        return;
                    }
                }
                Some(Ok(Tung::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            // The other node checks the credential it was sent too; this
            // node's check closes the client's socket with the code.
            m = down_rx.next() => match confirm_message(m, &watch).await {
                Err(Refused::Lost) => break,
                Err(Refused::Dropped(reply)) => {
                    if down_tx.send(Message::Text(reply.to_json().into())).await.is_err() {
                        break;
                    }
                }
                Ok(m) => match m {
                Some(Ok(Message::Text(t))) => {
                    if up_tx.send(Tung::text(t.as_str())).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Binary(b))) => {
                    if up_tx.send(Tung::Binary(b)).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    let _ = up_tx.send(Tung::Close(None)).await;
                    return;
                }
                Some(Ok(_)) => {}
                },
            },
        }
    }
    if watch.lost().is_some() {
        let _ = up_tx.send(Tung::Close(None)).await;
    }
    close(down_tx, &watch).await;
}
