//! A runner's host link: the one WebSocket a runner that registered its
//! host opens to the server (`GET /api/v1/hosts/{id}/link`, its host
//! token), over which the server asks that host for what only it can read,
//! each request paired with its answer by id. The runner dials out, so a
//! host behind NAT, with no port open, is reached all the same.
//!
//! [`HostLinks`] holds this node's links, one per host: a host that opens a
//! new link (after a reconnect) replaces its old one, whose requests in
//! flight fail as `host_offline` rather than wait for an answer that cannot
//! come. A request to a host without a link on this node answers 503
//! `host_offline` at once; one its host does not answer in time, 503
//! `host_timeout`. Nothing here outlives the node: a link lost with a
//! restart is opened again by the runner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use futures::{SinkExt, StreamExt};
use shepherd_core::{Error, ErrorKind};
use shepherd_protocol::{LinkMessage, LinkReply, LinkRequest};
use tokio::sync::{mpsc, oneshot};

use crate::auth::Caller;
use crate::error::ApiResult;
use crate::AppState;

/// How long a request waits for its host's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a quiet link is pinged, so that one whose host vanished
/// without closing it (a cable pulled, a machine off) is noticed.
const PING_EVERY: Duration = Duration::from_secs(15);
/// Requests queued for a host's link beyond what is on the wire.
const QUEUE: usize = 64;
/// The largest answer a host may send (a big diff).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<LinkReply>>>>;

struct Link {
    /// Which connection this is, so that an old connection ending does not
    /// remove its successor.
    conn: u64,
    tx: mpsc::Sender<(u64, LinkRequest)>,
    pending: Pending,
}

/// This node's links to runners' hosts.
#[derive(Default)]
pub struct HostLinks {
    links: Mutex<HashMap<String, Link>>,
    next: AtomicU64,
}

impl HostLinks {
    /// Whether `host` has a link to this node now.
    pub fn connected(&self, host: &str) -> bool {
        self.lock().get(host).is_some_and(|l| !l.tx.is_closed())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Link>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks `host` over its link and waits for the answer.
    pub async fn ask(&self, host: &str, request: LinkRequest) -> Result<LinkReply, Error> {
        let offline = || {
            Error::unavailable(
                "host_offline",
                format!("host {host:?} has no link to this server now (its runner is stopped, unreachable, or connected to another node)"),
            )
        };
        let (id, rx, tx, pending) = {
            let links = self.lock();
            let link = links.get(host).ok_or_else(offline)?;
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            let (reply_tx, reply_rx) = oneshot::channel();
            link.pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, reply_tx);
            (id, reply_rx, link.tx.clone(), link.pending.clone())
        };
        // However this ends (answered, refused, timed out, or the asker
        // went away), the request is no longer waited for.
        let _forget = Forget { pending, id };
        let asked = async {
            tx.send((id, request)).await.map_err(|_| offline())?;
            // An Err: the link ended before its answer came.
            rx.await.map_err(|_| offline())
        };
        match tokio::time::timeout(ASK_TIMEOUT, asked).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::unavailable(
                "host_timeout",
                format!(
                    "host {host:?} did not answer within {} s",
                    ASK_TIMEOUT.as_secs()
                ),
            )),
        }
    }

    /// Takes `host`'s new link; an older one is dropped (its requests in
    /// flight fail as `host_offline`).
    fn open(&self, host: &str) -> (u64, mpsc::Receiver<(u64, LinkRequest)>, Pending) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let conn = self.next.fetch_add(1, Ordering::Relaxed);
        let pending: Pending = Arc::default();
        let link = Link {
            conn,
            tx,
            pending: pending.clone(),
        };
        self.lock().insert(host.to_owned(), link);
        (conn, rx, pending)
    }

    /// Forgets `host`'s link if it is still connection `conn`.
    fn close(&self, host: &str, conn: u64) {
        let mut links = self.lock();
        if links.get(host).is_some_and(|l| l.conn == conn) {
            links.remove(host);
        }
    }
}

/// Removes a request from its link's waiting list when its asker is done.
struct Forget {
    pending: Pending,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// An error a host answered, as this server answers it: its code when the
/// code is one of the API's, with the host named.
pub fn remote_error(host: &str, status: u16, code: &str, message: String) -> Error {
    let kind = match status {
        400 => ErrorKind::BadRequest,
        403 => ErrorKind::Forbidden,
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        422 => ErrorKind::Invalid,
        503 => ErrorKind::Unavailable,
        _ => ErrorKind::Internal,
    };
    match shepherd_core::error::codes::listed(code) {
        Some(code) if kind != ErrorKind::Internal => {
            Error::new(kind, code, format!("host {host}: {message}"))
        }
        _ => Error::unavailable(
            "host_failed",
            format!("host {host} could not answer ({code}): {message}"),
        ),
    }
}

/// The link of a runner's host (WebSocket; JSON text messages): the server
/// sends `request`s, the host sends a `reply` to each.
#[utoipa::path(get, path = "/api/v1/hosts/{id}/link", tag = "hosts", operation_id = "open_host_link",
    params(("id" = String, Path)), responses(
    (status = 101, description = "WebSocket: the server sends LinkMessage requests, the host replies"),
    (status = 400, description = "websocket_required", body = crate::openapi::ErrorBody),
    (status = 403, description = "not_your_host: only the host's own token opens its link", body = crate::openapi::ErrorBody),
    (status = 404, description = "host_not_found", body = crate::openapi::ErrorBody)))]
pub async fn open_link(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    slot: Option<Extension<crate::limits::StreamSlot>>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    // Not even a person: whoever holds the link reads what the server asks
    // of the host, and answers for it.
    match &caller {
        Caller::Host(h) if h == &id => {}
        _ => {
            return Err(Error::forbidden(
                "not_your_host",
                format!("only host {id:?}'s own token opens its link"),
            )
            .into())
        }
    }
    state.store.host_seen(&id).await?;
    let ws = ws.map_err(|r| {
        Error::bad_request(
            "websocket_required",
            format!("this route is a WebSocket: {}", r.body_text()),
        )
    })?;
    let shutdown = state.shutdown.clone();
    Ok(ws
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            let _slot = slot;
            let (conn, rx, pending) = state.links.open(&id);
            tracing::info!(host = id, "host link open");
            serve(socket, rx, pending, shutdown).await;
            state.links.close(&id, conn);
            tracing::info!(host = id, "host link closed");
        }))
}

/// Sends requests, hands answers to their askers, pings a quiet link; ends
/// when either side closes it, or the server stops.
async fn serve(
    socket: WebSocket,
    mut requests: mpsc::Receiver<(u64, LinkRequest)>,
    pending: Pending,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let (mut out, mut inbound) = socket.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    let mut unanswered_pings = 0u32;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            next = requests.recv() => {
                let Some((id, request)) = next else { break };
                let text = match serde_json::to_string(&LinkMessage::Request { id, request }) {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode a link request");
                        continue;
                    }
                };
                if out.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            _ = ping.tick() => {
                if unanswered_pings >= 2 {
                    tracing::warn!("a host link answered no ping for 30 s; closing it");
                    break;
                }
                unanswered_pings += 1;
                if out.send(Message::Ping(Default::default())).await.is_err() {
                    break;
                }
            }
            msg = inbound.next() => match msg {
                Some(Ok(Message::Text(text))) => {
                    unanswered_pings = 0;
                    match serde_json::from_str::<LinkMessage>(&text) {
                        Ok(LinkMessage::Reply { id, reply }) => {
                            let asker = pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                            if let Some(asker) = asker {
                                let _ = asker.send(reply);
                            }
                        }
                        Ok(LinkMessage::Request { .. }) | Err(_) => {
                            tracing::warn!("a host sent something other than a reply on its link; closing it");
                            break;
                        }
                    }
                }
                Some(Ok(Message::Pong(_) | Message::Ping(_))) => unanswered_pings = 0,
                Some(Ok(Message::Binary(_))) => {
                    tracing::warn!("a host sent binary on its link; closing it");
                    break;
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
            },
        }
    }
    // Nothing more is taken for this link, and askers still waiting learn
    // the host is gone, before the goodbye (which a dead socket may hold up).
    requests.close();
    while requests.try_recv().is_ok() {}
    pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let _ = tokio::time::timeout(Duration::from_secs(1), out.send(Message::Close(None))).await;
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/hosts/{id}/link", get(open_link))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_error_keeps_its_code_only_when_it_is_the_apis() {
        let e = remote_error("h1", 403, "workspace_repo_not_allowed", "no".into());
        assert_eq!(
            (e.kind, e.code),
            (ErrorKind::Forbidden, "workspace_repo_not_allowed")
        );
        assert!(e.message.starts_with("host h1: "), "{}", e.message);
        // A code the API does not know, or a status it would not answer
        // with, is the host's failure, not an error of the API's own.
        for (status, code) in [(409, "made_up"), (500, "internal"), (418, "git_failed")] {
            let e = remote_error("h1", status, code, "x".into());
            assert_eq!(
                (e.kind, e.code),
                (ErrorKind::Unavailable, "host_failed"),
                "{status} {code}"
            );
        }
    }

    #[tokio::test]
    async fn asking_a_host_without_a_link_answers_host_offline() {
        let links = HostLinks::default();
        let ask = LinkRequest::RunDiff {
            run_id: "r".into(),
            workspace: shepherd_core::model::RunWorkspace {
                branch: "b".into(),
                base: "main".into(),
                base_commit: "0".repeat(40),
                head: None,
                repo: None,
            },
        };
        let e = links.ask("nowhere", ask.clone()).await.unwrap_err();
        assert_eq!(e.code, "host_offline");
        // A link that ended (its receiver gone) answers the same at once.
        let (conn, rx, _) = links.open("h1");
        drop(rx);
        assert!(!links.connected("h1"));
        assert_eq!(links.ask("h1", ask).await.unwrap_err().code, "host_offline");
        links.close("h1", conn);
        assert!(links.lock().is_empty());
    }
}
