//! A runner's host link: the one WebSocket a runner that registered its
//! host opens to the server (`GET /api/v1/hosts/{id}/link`, its host
//! token), over which the server asks that host for what only it can read
//! or run, each request paired with its answer by id, and which carries
//! the streams of the host's attached PTY tabs (`session_relay.rs`). The
//! runner dials out, so a host behind NAT, with no port open, is reached
//! all the same.
//!
//! [`HostLinks`] holds this node's links, one per host. A second link for a
//! host that has a live one never silently replaces it: the live one is
//! pinged, and if it answers within [`PROBE_WAIT`] the newcomer is refused
//! (409 `host_link_taken`: two runners share one host's token). Only a link
//! that stays silent (half-open: the runner's end vanished without closing
//! it, and the runner is reconnecting) is replaced; it is closed, and its
//! requests in flight fail as `host_offline` rather than wait for an answer
//! that cannot come. A registration that voids the host's token (a runner
//! come back, an admin's replace) closes the link opened with it. A request to a host without a link on this node answers 503
//! `host_offline` at once; one its host does not answer in time, 503
//! `host_timeout`. Nothing here outlives the node: a link lost with a
//! restart is opened again by the runner.

use std::collections::{HashMap, HashSet};
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
use shepherd_protocol::link_stream::{split_frame, TabInput};
use shepherd_protocol::{HostEvent, LinkMessage, LinkReply, LinkRequest};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

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
/// The id of a request nobody waits for (asks count up from 0).
const UNASKED: u64 = u64::MAX;
/// The largest answer a host may send (a big diff).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// How long a live link has to answer a ping before a newer link for its
/// host may take its place.
const PROBE_WAIT: Duration = Duration::from_secs(5);
/// Frames waiting for one attached client. A client that lets this many
/// pile up is disconnected (it resumes from its offset when it comes back)
/// rather than holding up the link every other stream shares.
const STREAM_QUEUE: usize = 512;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<LinkReply>>>>;
type Streams = Arc<Mutex<HashMap<u64, mpsc::Sender<Vec<u8>>>>>;
type Live = Arc<Mutex<HashSet<String>>>;

/// What goes to a host.
enum Outbound {
    Message(LinkMessage),
    Binary(Vec<u8>),
    /// A ping now: is the host still at the other end?
    Probe,
}

struct Link {
    /// Which connection this is, so that an old connection ending does not
    /// remove its successor.
    conn: u64,
    tx: mpsc::Sender<Outbound>,
    pending: Pending,
    streams: Streams,
    /// The host's PTY tabs with a running process, as it last said.
    live: Live,
    /// Woken by every message the host sends.
    heard: Arc<Notify>,
    /// Ends the link's loop (closing its socket): it was replaced, or its
    /// token voided.
    kill: CancellationToken,
}

/// A live link another wants to take the place of.
struct Incumbent {
    conn: u64,
    tx: mpsc::Sender<Outbound>,
    heard: Arc<Notify>,
}

impl Incumbent {
    /// Whether its host answers a ping within `wait`.
    async fn answers(&self, wait: Duration) -> bool {
        let heard = self.heard.notified();
        if self.tx.send(Outbound::Probe).await.is_err() {
            return false;
        }
        tokio::time::timeout(wait, heard).await.is_ok()
    }
}

/// A new link's end of its channels, for its loop.
struct Opened {
    conn: u64,
    rx: mpsc::Receiver<Outbound>,
    state: LinkState,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A client's stream of an attached tab on a host: the frames the host
/// sends for it, and the way to type into it. Dropping it detaches.
pub struct TabStream {
    pub id: u64,
    pub frames: mpsc::Receiver<Vec<u8>>,
    tx: mpsc::Sender<Outbound>,
    streams: Streams,
}

impl TabStream {
    /// Passes a client's input or resize to the tab; false once the link
    /// is gone.
    pub async fn send(&self, input: TabInput) -> bool {
        self.tx
            .send(Outbound::Binary(input.packet(self.id)))
            .await
            .is_ok()
    }
}

impl Drop for TabStream {
    fn drop(&mut self) {
        // Still known: the host is still sending for it, and is told to stop.
        if lock(&self.streams).remove(&self.id).is_some() {
            let _ = self
                .tx
                .try_send(Outbound::Message(LinkMessage::Detach { stream: self.id }));
        }
    }
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

    /// Whether `host` runs a process for PTY tab `worker` now, as far as
    /// this node knows (false without a link).
    pub fn live(&self, host: &str, worker: &str) -> bool {
        self.lock()
            .get(host)
            .is_some_and(|l| lock(&l.live).contains(worker))
    }

    /// Notes that `host` now runs (or no longer runs) a process for `worker`.
    pub fn set_live(&self, host: &str, worker: &str, live: bool) {
        if let Some(l) = self.lock().get(host) {
            let mut set = lock(&l.live);
            if live {
                set.insert(worker.to_owned());
            } else {
                set.remove(worker);
            }
        }
    }

    /// A new stream on `host`'s link, ready for the host's frames before
    /// the attach that names it is sent.
    pub fn open_stream(&self, host: &str) -> Result<TabStream, Error> {
        let links = self.lock();
        let link = links.get(host).ok_or_else(|| offline(host))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, frames) = mpsc::channel(STREAM_QUEUE);
        lock(&link.streams).insert(id, tx);
        Ok(TabStream {
            id,
            frames,
            tx: link.tx.clone(),
            streams: link.streams.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Link>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks `host` over its link and waits for the answer.
    pub async fn ask(&self, host: &str, request: LinkRequest) -> Result<LinkReply, Error> {
        let offline = || offline(host);
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
            tx.send(Outbound::Message(LinkMessage::Request { id, request }))
                .await
                .map_err(|_| offline())?;
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

    /// Takes `host`'s new link, unless it has a live one (other than
    /// connection `displace`, found silent): that one is returned to be
    /// probed. A link replaced is closed (its requests in flight fail as
    /// `host_offline`).
    fn try_open(&self, host: &str, displace: Option<u64>) -> Result<Opened, Incumbent> {
        let mut links = self.lock();
        if let Some(old) = links.get(host) {
            if !old.tx.is_closed() && Some(old.conn) != displace {
                return Err(Incumbent {
                    conn: old.conn,
                    tx: old.tx.clone(),
                    heard: old.heard.clone(),
                });
            }
            old.kill.cancel();
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let conn = self.next.fetch_add(1, Ordering::Relaxed);
        let state = LinkState {
            pending: Arc::default(),
            streams: Arc::default(),
            live: Arc::default(),
            tx: tx.clone(),
            heard: Arc::default(),
            kill: CancellationToken::new(),
        };
        let link = Link {
            conn,
            tx,
            pending: state.pending.clone(),
            streams: state.streams.clone(),
            live: state.live.clone(),
            heard: state.heard.clone(),
            kill: state.kill.clone(),
        };
        links.insert(host.to_owned(), link);
        Ok(Opened { conn, rx, state })
    }

    /// Closes `host`'s link, if it has one: the token it was opened with
    /// is no longer the host's.
    pub fn drop_link(&self, host: &str) {
        if let Some(old) = self.lock().remove(host) {
            old.kill.cancel();
            tracing::info!(host, "host link closed: the host was registered again");
        }
    }

    /// Forgets `host`'s link if it is still connection `conn`.
    fn close(&self, host: &str, conn: u64) {
        let mut links = self.lock();
        if links.get(host).is_some_and(|l| l.conn == conn) {
            links.remove(host);
        }
    }
}

fn link_taken(host: &str) -> Error {
    Error::conflict(
        "host_link_taken",
        format!(
            "host {host:?} already has a live link to this server: another runner holds this \
             host's token (stop one of them, or give each its own data directory)"
        ),
    )
}

fn offline(host: &str) -> Error {
    Error::unavailable(
        "host_offline",
        format!("host {host:?} has no link to this server now (its runner is stopped, unreachable, or connected to another node)"),
    )
}

/// What one link's loop shares with its askers and streams.
struct LinkState {
    pending: Pending,
    streams: Streams,
    live: Live,
    /// For telling the host a stream is dropped.
    tx: mpsc::Sender<Outbound>,
    heard: Arc<Notify>,
    kill: CancellationToken,
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
    (status = 404, description = "host_not_found", body = crate::openapi::ErrorBody),
    (status = 409, description = "host_link_taken: the host has a live link (it answered a ping); a second one is refused", body = crate::openapi::ErrorBody)))]
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
    let ws = ws.map_err(|r| {
        Error::bad_request(
            "websocket_required",
            format!("this route is a WebSocket: {}", r.body_text()),
        )
    })?;
    let opened = match state.links.try_open(&id, None) {
        Ok(o) => o,
        Err(incumbent) => {
            if incumbent.answers(PROBE_WAIT).await {
                tracing::warn!(
                    host = id,
                    "refused a second link for a host whose link is live"
                );
                return Err(link_taken(&id).into());
            }
            tracing::warn!(
                host = id,
                "the host's link answered no ping; the new link takes its place"
            );
            state
                .links
                .try_open(&id, Some(incumbent.conn))
                .map_err(|_| link_taken(&id))?
        }
    };
    // Other nodes serve this host's sessions through the node it links to.
    match state.sessions.as_ref().map(|m| m.config().node_id.clone()) {
        Some(node) => state.store.host_linked(&id, &node).await?,
        None => state.store.host_seen(&id).await?,
    };
    let shutdown = state.shutdown.clone();
    Ok(ws
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            let _slot = slot;
            let Opened {
                conn,
                rx,
                state: link,
            } = opened;
            tracing::info!(host = id, "host link open");
            serve(&id, socket, rx, link, &state.store, shutdown).await;
            state.links.close(&id, conn);
            tracing::info!(host = id, "host link closed");
        }))
}

/// Sends requests and input, hands answers to their askers and frames to
/// their streams, records what the host tells, pings a quiet link; ends
/// when either side closes it, or the server stops.
///
/// Reading and writing are separate tasks: a write that waits (the host
/// not reading) never stops this side from reading, so two sides that
/// both have much to send cannot hold each other up for good.
async fn serve(
    host: &str,
    socket: WebSocket,
    outbound: mpsc::Receiver<Outbound>,
    link: LinkState,
    store: &shepherd_store::Store,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let (out, mut inbound) = socket.split();
    let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let done = shutdown.child_token();
    let writer = tokio::spawn(write_link(out, outbound, alive.clone(), done.clone()));
    loop {
        tokio::select! {
            _ = done.cancelled() => break,
            _ = link.kill.cancelled() => break,
            msg = inbound.next() => match msg {
                Some(Ok(Message::Text(text))) => {
                    alive.store(true, Ordering::Relaxed);
                    link.heard.notify_waiters();
                    match serde_json::from_str::<LinkMessage>(&text) {
                        Ok(LinkMessage::Reply { id, reply }) => {
                            let asker = lock(&link.pending).remove(&id);
                            if let Some(asker) = asker {
                                let _ = asker.send(reply);
                            }
                        }
                        Ok(LinkMessage::StreamEnd { stream }) => {
                            // Its client sees the end of its frames.
                            lock(&link.streams).remove(&stream);
                        }
                        Ok(LinkMessage::Event { event }) => heard(host, event, &link, store),
                        Ok(LinkMessage::Request { .. } | LinkMessage::Detach { .. }) | Err(_) => {
                            tracing::warn!("a host sent something a host does not send on its link; closing it");
                            break;
                        }
                    }
                }
                Some(Ok(Message::Binary(packet))) => {
                    alive.store(true, Ordering::Relaxed);
                    link.heard.notify_waiters();
                    let Some((stream, frame)) = split_frame(&packet) else {
                        tracing::warn!("a host sent a malformed stream message; closing its link");
                        break;
                    };
                    let to = lock(&link.streams).get(&stream).cloned();
                    if let Some(to) = to {
                        if to.try_send(frame.to_vec()).is_err() {
                            // Too slow (or gone): its client is let go, and
                            // resumes from its offset when it comes back.
                            lock(&link.streams).remove(&stream);
                            let _ = link
                                .tx
                                .try_send(Outbound::Message(LinkMessage::Detach { stream }));
                        }
                    }
                }
                Some(Ok(Message::Pong(_) | Message::Ping(_))) => {
                    alive.store(true, Ordering::Relaxed);
                    link.heard.notify_waiters();
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
            },
        }
    }
    // Askers still waiting learn the host is gone, and every attached
    // client's frames end, so it reconnects and resumes.
    done.cancel();
    let _ = writer.await;
    lock(&link.pending).clear();
    lock(&link.streams).clear();
    lock(&link.live).clear();
}

/// The link's writer: requests, input and pings out, until `done` or a
/// write fails; a host silent through two pings is let go.
async fn write_link(
    mut out: futures::stream::SplitSink<WebSocket, Message>,
    mut outbound: mpsc::Receiver<Outbound>,
    alive: Arc<std::sync::atomic::AtomicBool>,
    done: tokio_util::sync::CancellationToken,
) {
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    let mut unanswered_pings = 0u32;
    loop {
        let message = tokio::select! {
            _ = done.cancelled() => break,
            next = outbound.recv() => match next {
                None => break,
                Some(Outbound::Binary(b)) => Message::Binary(b.into()),
                Some(Outbound::Probe) => Message::Ping(Default::default()),
                Some(Outbound::Message(m)) => match serde_json::to_string(&m) {
                    Ok(t) => Message::Text(t.into()),
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode a link message");
                        continue;
                    }
                },
            },
            _ = ping.tick() => {
                if alive.swap(false, Ordering::Relaxed) {
                    unanswered_pings = 0;
                }
                if unanswered_pings >= 2 {
                    tracing::warn!("a host link answered no ping for 30 s; closing it");
                    break;
                }
                unanswered_pings += 1;
                Message::Ping(Default::default())
            }
        };
        // A host that takes nothing for this long is as good as gone.
        let sent = tokio::select! {
            _ = done.cancelled() => break,
            r = tokio::time::timeout(PING_EVERY * 2, out.send(message)) => r,
        };
        if !matches!(sent, Ok(Ok(()))) {
            break;
        }
    }
    // Nothing more is taken for this link; the reader stops too.
    done.cancel();
    outbound.close();
    while outbound.try_recv().is_ok() {}
    let _ = tokio::time::timeout(Duration::from_secs(1), out.send(Message::Close(None))).await;
}

/// Acts on what a host tells: which tabs run there, and the exits of
/// processes that ended by themselves (recorded as a node records its own,
/// and only for a session that lives on that host).
fn heard(host: &str, event: HostEvent, link: &LinkState, store: &shepherd_store::Store) {
    match event {
        HostEvent::Live { tabs } => {
            *lock(&link.live) = tabs.iter().map(|t| t.worker_id.clone()).collect();
            // Tabs deleted while the host was away end now.
            let (store, tx, host) = (store.clone(), link.tx.clone(), host.to_owned());
            tokio::spawn(async move {
                for t in tabs {
                    let known = store.session_worker(&t.session_id, &t.worker_id).await;
                    let gone = match &known {
                        Err(e) => e.code == "session_not_found" || e.code == "worker_not_found",
                        Ok((s, _)) => s.node_id != host,
                    };
                    if gone {
                        tracing::info!(
                            host,
                            session = t.session_id,
                            worker = t.worker_id,
                            "ending a tab deleted while its host was away"
                        );
                        let stop = LinkRequest::TabStop {
                            session_id: t.session_id,
                            worker_id: Some(t.worker_id),
                            forget: true,
                        };
                        // An id no asker waits for: the answer is dropped.
                        let request = LinkMessage::Request {
                            id: UNASKED,
                            request: stop,
                        };
                        let _ = tx.send(Outbound::Message(request)).await;
                    }
                }
            });
        }
        HostEvent::TabExited {
            session_id,
            worker_id,
            epoch,
            exit_code,
            signal,
        } => {
            lock(&link.live).remove(&worker_id);
            let (store, host) = (store.clone(), host.to_owned());
            tokio::spawn(async move {
                // A host speaks only for its own sessions.
                match store.session(&session_id).await {
                    Ok(s) if s.node_id == host => {}
                    Ok(_) => {
                        tracing::warn!(
                            host,
                            session = session_id,
                            "a host told of an exit in a session that is not its own; ignored"
                        );
                        return;
                    }
                    Err(_) => return,
                }
                let r = store
                    .session_process_exited(
                        &session_id,
                        &worker_id,
                        epoch,
                        exit_code,
                        signal.map(i64::from),
                    )
                    .await;
                if let Err(e) = r {
                    if e.code != "session_not_found" && e.code != "worker_not_found" {
                        tracing::warn!(error = %e, worker = worker_id, "could not record a host's PTY exit");
                    }
                }
            });
        }
    }
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
        let Ok(Opened { conn, rx, .. }) = links.try_open("h1", None) else {
            panic!("no link yet")
        };
        drop(rx);
        assert!(!links.connected("h1"));
        assert_eq!(links.ask("h1", ask).await.unwrap_err().code, "host_offline");
        links.close("h1", conn);
        assert!(links.lock().is_empty());
    }

    #[tokio::test]
    async fn a_live_link_is_not_replaced_and_a_silent_one_is_closed() {
        let links = HostLinks::default();
        let Ok(first) = links.try_open("h1", None) else {
            panic!("no link yet")
        };
        // A second link finds the first: it is not taken over.
        let Err(incumbent) = links.try_open("h1", None) else {
            panic!("a live link was replaced")
        };
        assert_eq!(incumbent.conn, first.conn);
        assert_eq!(links.lock()["h1"].conn, first.conn);
        // Its host answers the probe (a message arrives): it stays.
        let Opened { mut rx, state, .. } = first;
        let probe = tokio::spawn(async move { incumbent.answers(Duration::from_secs(30)).await });
        assert!(matches!(rx.recv().await, Some(Outbound::Probe)));
        // The probe may not be waiting yet when the ping goes out: answer
        // until it has heard.
        while !probe.is_finished() {
            state.heard.notify_waiters();
            tokio::task::yield_now().await;
        }
        assert!(probe.await.unwrap());
        // One that answers nothing is displaced, and its loop told to end.
        let Err(incumbent) = links.try_open("h1", None) else {
            panic!("replaced")
        };
        assert!(!incumbent.answers(Duration::from_millis(50)).await);
        let Ok(second) = links.try_open("h1", Some(incumbent.conn)) else {
            panic!("a silent link kept its place")
        };
        assert!(state.kill.is_cancelled());
        assert_eq!(links.lock()["h1"].conn, second.conn);
        // A registration that voids the token closes the link.
        links.drop_link("h1");
        assert!(second.state.kill.is_cancelled());
        assert!(!links.connected("h1"));
    }
}
