//! The runner's side of its host's link: one WebSocket it opens to the
//! server (never the other way round) and keeps open, reconnecting after
//! any loss, over which the server asks for what only this host can read
//! or run: run diffs, and the PTYs of the sessions that live here.
//!
//! Each request is answered on its own task, so a slow one (a big diff, a
//! tab whose process takes its grace to end) holds up no other. An attached
//! tab is a *stream*: the tab's frames go to the server as binary messages
//! (`protocol::link_stream`), the client's input comes back the same way,
//! and the stream ends when its client leaves, its process ends, or the
//! link drops (the client then resumes from its offset through whichever
//! link comes next).
//!
//! What the host may be asked is bounded here, not by the server: a run's
//! diff only from a repository one of this runner's own agents names
//! (`workspace_diff::allowed_repo`), a session only inside this host's own
//! sessions root, an agent tab only of this runner's own agents.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use shepherd_client::Client;
use shepherd_protocol::link_stream::{frame_packet, TabInput};
use shepherd_protocol::{HostEvent, LinkMessage, LinkReply, LinkRequest, ResumePoint};
use shepherd_sessions::pty_host::PtyHost;
use shepherd_sessions::worker::{Attachment, ExitNotice};
use shepherd_sessions::ServerMessage;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{mpsc, watch, Notify};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

/// How many git reads the host works on at once; more wait their turn (a
/// flood of diff requests cannot start a flood of git processes).
const AT_ONCE: usize = 4;
/// The largest diff a host sends back (the server takes 64 MiB messages).
const MAX_DIFF: usize = 32 * 1024 * 1024;
/// A link that hears nothing for this long (the server pings every 15 s)
/// is taken for dead and opened again.
const SILENCE: Duration = Duration::from_secs(45);
/// The longest wait between tries of a link the server refused.
const REFUSED_BACKOFF: Duration = Duration::from_secs(30);
/// Messages waiting for the socket; a stream whose frames cannot get out
/// falls behind its tab's window and is sent a fresh history instead.
const OUTBOX: usize = 256;
/// Client messages waiting for one tab's PTY.
const INBOX: usize = 256;
/// Exits kept for the server while the link is down.
const MAX_EVENTS: usize = 10_000;

/// What goes out on the link.
enum Out {
    Message(LinkMessage),
    Binary(Vec<u8>),
    /// Write what is pending (the answer to a ping).
    Flush,
}

/// What the host answers from.
pub struct LinkServer {
    /// The repositories this runner's agents name.
    repos: Vec<PathBuf>,
    /// The PTYs of this host's sessions; none: it hosts no sessions.
    sessions: Option<Arc<PtyHost>>,
    at_once: tokio::sync::Semaphore,
    /// What the server is to be told when the link is next open.
    events: Mutex<VecDeque<HostEvent>>,
    events_ready: Notify,
}

/// An attached tab on this connection.
struct Stream {
    input: mpsc::Sender<TabInput>,
    stop: CancellationToken,
}

type Streams = Arc<Mutex<HashMap<u64, Stream>>>;

impl LinkServer {
    pub fn new(repos: Vec<PathBuf>, sessions: Option<Arc<PtyHost>>) -> LinkServer {
        LinkServer {
            repos,
            sessions,
            at_once: tokio::sync::Semaphore::new(AT_ONCE),
            events: Mutex::new(VecDeque::new()),
            events_ready: Notify::new(),
        }
    }

    /// Passes the exits of tabs' processes that ended by themselves to the
    /// server (kept while the link is down), until `shutdown`.
    pub async fn forward_exits(
        self: Arc<Self>,
        mut exits: mpsc::UnboundedReceiver<ExitNotice>,
        shutdown: CancellationToken,
    ) {
        loop {
            let n = tokio::select! {
                _ = shutdown.cancelled() => return,
                n = exits.recv() => match n {
                    Some(n) => n,
                    None => return,
                },
            };
            let news = self.sessions.as_ref().is_some_and(|s| s.is_news(&n));
            if !news {
                continue;
            }
            self.tell(HostEvent::TabExited {
                session_id: n.session_id,
                worker_id: n.worker_id,
                epoch: n.epoch,
                exit_code: n.info.exit_code,
                signal: n.info.signal,
            });
        }
    }

    fn tell(&self, event: HostEvent) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(event);
        drop(events);
        self.events_ready.notify_one();
    }

    /// Events a send failed to deliver, first in line again.
    fn put_back(&self, unsent: impl DoubleEndedIterator<Item = HostEvent>) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        for e in unsent.rev() {
            events.push_front(e);
        }
    }

    fn take_events(&self) -> Vec<HostEvent> {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events.drain(..).collect()
    }

    fn sessions(&self) -> Result<&Arc<PtyHost>, shepherd_core::Error> {
        self.sessions.as_ref().ok_or_else(|| {
            shepherd_core::Error::invalid(
                "invalid_sessions_root",
                "this host has no sessions root: it hosts no sessions",
            )
        })
    }

    async fn answer(&self, request: LinkRequest) -> LinkReply {
        let result = match request {
            LinkRequest::RunDiff { run_id, workspace } => {
                let Ok(_turn) = self.at_once.acquire().await else {
                    return stopping();
                };
                match crate::workspace_diff::read_diff(&self.repos, &run_id, &workspace).await {
                    Ok(d) if d.diff.len() + d.stat.len() > MAX_DIFF => {
                        return LinkReply::Failed {
                            status: 422,
                            code: "diff_too_large".into(),
                            message: format!(
                            "the diff of run {run_id} is {} MiB, more than the {} MiB a host sends",
                            d.diff.len() >> 20,
                            MAX_DIFF >> 20
                        ),
                        }
                    }
                    r => r.map(LinkReply::RunDiff),
                }
            }
            LinkRequest::SessionLocation { path } => self.sessions().and_then(|s| {
                s.check_location(&path).map(|p| LinkReply::Location {
                    path: p.display().to_string(),
                })
            }),
            LinkRequest::TabStart { tab, epoch, reason } => match self.sessions() {
                Ok(s) => s
                    .start(&tab, epoch, reason)
                    .await
                    .map(|pid| LinkReply::TabStarted { pid }),
                Err(e) => Err(e),
            },
            LinkRequest::TabStop {
                session_id,
                worker_id,
                forget,
            } => match self.sessions() {
                Ok(s) => s
                    .stop(&session_id, worker_id.as_deref(), forget)
                    .await
                    .map(|()| LinkReply::Done),
                Err(e) => Err(e),
            },
            LinkRequest::SessionDiff { location } => {
                let Ok(_turn) = self.at_once.acquire().await else {
                    return stopping();
                };
                match self.sessions() {
                    Ok(s) => s.diff(&location).await.map(LinkReply::GitDiff),
                    Err(e) => Err(e),
                }
            }
            LinkRequest::PruneBranches { branches } => {
                let Ok(_turn) = self.at_once.acquire().await else {
                    return stopping();
                };
                Ok(LinkReply::Pruned(
                    crate::branch_prune::prune_branches(&self.repos, branches).await,
                ))
            }
            // Attaches are answered by `attach`, which also starts the stream.
            LinkRequest::TabAttach { .. } => Err(shepherd_core::Error::invalid(
                "host_failed",
                "an attach is not a plain request",
            )),
        };
        result.unwrap_or_else(|e| failed(&e))
    }

    /// Attaches stream `stream` and sends its frames until its client
    /// leaves, its process ends, or the link drops.
    async fn attach(
        self: Arc<Self>,
        id: u64,
        request: LinkRequest,
        out: mpsc::Sender<Out>,
        streams: Streams,
        link_down: CancellationToken,
    ) {
        let LinkRequest::TabAttach {
            stream,
            tab,
            resume,
            restore,
        } = request
        else {
            return;
        };
        let attached = match self.sessions() {
            Ok(s) => s.attach(&tab, &restore).await,
            Err(e) => Err(e),
        };
        let (att, restored_pid) = match attached {
            Ok(a) => a,
            Err(e) => {
                let _ = out
                    .send(Out::Message(LinkMessage::Reply {
                        id,
                        reply: failed(&e),
                    }))
                    .await;
                return;
            }
        };
        let stop = link_down.child_token();
        let (input_tx, input) = mpsc::channel(INBOX);
        streams.lock().unwrap_or_else(|p| p.into_inner()).insert(
            stream,
            Stream {
                input: input_tx,
                stop: stop.clone(),
            },
        );
        let reply = LinkMessage::Reply {
            id,
            reply: LinkReply::TabAttached { restored_pid },
        };
        if out.send(Out::Message(reply)).await.is_ok() {
            relay(stream, att, resume, input, &out, &stop).await;
        }
        streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&stream);
        if !stop.is_cancelled() {
            let _ = out
                .send(Out::Message(LinkMessage::StreamEnd { stream }))
                .await;
        }
    }
}

fn stopping() -> LinkReply {
    LinkReply::Failed {
        status: 503,
        code: "host_failed".into(),
        message: "the host is stopping".into(),
    }
}

/// One attached tab: its history, then live frames, out; its client's
/// input in. Mirrors the server's own PTY WebSocket (a stream that falls
/// behind the tab's window is sent a fresh history).
async fn relay(
    stream: u64,
    att: Attachment,
    resume: Option<ResumePoint>,
    mut input: mpsc::Receiver<TabInput>,
    out: &mpsc::Sender<Out>,
    stop: &CancellationToken,
) {
    let frame = |m: &ServerMessage| Out::Binary(frame_packet(stream, m.to_json().as_bytes()));
    let sub = att.output.subscribe(resume.map(|r| (r.offset, r.epoch)));
    let mut frames = sub.frames;
    for m in [
        frame(&sub.history),
        frame(&ServerMessage::Activity {
            state: sub.activity,
        }),
    ] {
        if out.send(m).await.is_err() {
            return;
        }
    }
    if let Some(exit) = sub.exit {
        let _ = out.send(frame(&exit.message())).await;
        return;
    }
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            f = frames.recv() => match f {
                Ok(f) => {
                    let packet = Out::Binary(frame_packet(stream, f.json.as_bytes()));
                    if out.send(packet).await.is_err() || f.is_exit {
                        return;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    let sub = att.output.subscribe(None);
                    frames = sub.frames;
                    if out.send(frame(&sub.history)).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
            Some(i) = input.recv() => match i {
                TabInput::Bytes(b) => att.input(&b).await,
                TabInput::Resize { cols, rows } => att.resize(cols, rows).await,
            },
        }
    }
}

fn failed(e: &shepherd_core::Error) -> LinkReply {
    use shepherd_core::ErrorKind as K;
    let status = match e.kind {
        K::BadRequest => 400,
        K::Forbidden => 403,
        K::NotFound => 404,
        K::Conflict => 409,
        K::Invalid => 422,
        K::Unavailable => 503,
        _ => 500,
    };
    LinkReply::Failed {
        status,
        code: e.code.to_owned(),
        message: e.message.clone(),
    }
}

/// Keeps the link of host `id` open until `shutdown`, with the newest
/// host client `host` holds (registering again replaces the token).
///
/// A link the server refuses (another runner holds this host's live link:
/// 409 `host_link_taken`; a token it no longer takes) is said once per
/// reason, with the server's words, and tried again with a backoff that
/// grows to [`REFUSED_BACKOFF`]: the other runner may stop, or an admin
/// decide which one is the host.
pub async fn keep_open(
    host: watch::Receiver<Client>,
    id: String,
    server: Arc<LinkServer>,
    shutdown: CancellationToken,
) {
    let path = format!("/api/v1/hosts/{id}/link");
    let mut backoff = Duration::from_millis(100);
    let mut said: Option<String> = None;
    loop {
        let client = host.borrow().clone();
        let mut most = Duration::from_secs(5);
        match client.open_websocket(&path).await {
            Ok(io) => {
                backoff = Duration::from_millis(100);
                if said.take().is_some() {
                    tracing::info!(host = id, "host link open again");
                }
                let ws = WebSocketStream::from_raw_socket(io, Role::Client, None).await;
                serve(ws, server.clone(), &shutdown).await;
            }
            Err(e) => {
                let refused = e.status().is_some_and(|s| (400..500).contains(&s));
                let reason = e.to_string();
                if said.as_deref() != Some(reason.as_str()) {
                    if refused {
                        tracing::warn!(host = id, code = e.code(), error = %e, "the server refused the host link; trying again");
                    } else {
                        tracing::warn!(host = id, error = %e, "cannot open the host link; trying again");
                    }
                    said = Some(reason);
                }
                if refused {
                    most = REFUSED_BACKOFF;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(most);
    }
}

/// Any message's id, for answering one this runner cannot read.
#[derive(serde::Deserialize)]
struct Addressed {
    id: u64,
}

/// Answers requests and carries streams until the link or the runner ends.
/// Reading and writing are separate tasks: a write that waits (the server
/// not reading) never stops this side from reading, so the two sides
/// cannot hold each other up for good.
async fn serve<S>(ws: WebSocketStream<S>, server: Arc<LinkServer>, shutdown: &CancellationToken)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut inbound) = ws.split();
    let (out, outbox) = mpsc::channel::<Out>(OUTBOX);
    let streams: Streams = Arc::default();
    // Every stream of this connection ends with it.
    let link_down = CancellationToken::new();
    let _link_down = link_down.clone().drop_guard();
    // The server learns which tabs run here before anything else.
    if let Some(s) = &server.sessions {
        let live = HostEvent::Live { tabs: s.live() };
        let _ = out.try_send(Out::Message(LinkMessage::Event { event: live }));
    }
    server.events_ready.notify_one();
    let writer = tokio::spawn(write_link(
        sink,
        outbox,
        server.clone(),
        link_down.clone(),
        shutdown.clone(),
    ));
    loop {
        tokio::select! {
            _ = link_down.cancelled() => break,
            _ = shutdown.cancelled() => break,
            msg = tokio::time::timeout(SILENCE, inbound.next()) => match msg.unwrap_or_else(|_| {
                tracing::warn!("the host link heard nothing for 45 s; opening it again");
                None
            }) {
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<LinkMessage>(&text) {
                    Ok(LinkMessage::Request { id, request }) => {
                        let (server, out) = (server.clone(), out.clone());
                        if matches!(request, LinkRequest::TabAttach { .. }) {
                            tokio::spawn(server.attach(id, request, out, streams.clone(), link_down.clone()));
                        } else {
                            tokio::spawn(async move {
                                let reply = server.answer(request).await;
                                let _ = out.send(Out::Message(LinkMessage::Reply { id, reply })).await;
                            });
                        }
                    }
                    Ok(LinkMessage::Detach { stream }) => {
                        let gone = streams.lock().unwrap_or_else(|p| p.into_inner()).remove(&stream);
                        if let Some(s) = gone {
                            s.stop.cancel();
                        }
                    }
                    Ok(_) | Err(_) => {
                        // A newer server may ask what this runner does not
                        // know; it is told so rather than left waiting.
                        if let Ok(Addressed { id }) = serde_json::from_str::<Addressed>(&text) {
                            let reply = LinkReply::Failed {
                                status: 422,
                                code: "host_failed".into(),
                                message: "this runner does not know that request; upgrade it".into(),
                            };
                            // Never waits: a reader that waited on the writer could stall the link.
                            let _ = out.try_send(Out::Message(LinkMessage::Reply { id, reply }));
                        }
                    }
                },
                Some(Ok(Message::Binary(packet))) => match TabInput::parse(&packet) {
                    Some((stream, input)) => {
                        let to = streams
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get(&stream)
                            .map(|s| s.input.clone());
                        // A full inbox (a PTY nobody reads) drops the input,
                        // not the link.
                        if let Some(to) = to {
                            if to.try_send(input).is_err() {
                                tracing::debug!(stream, "a tab's input was dropped: its PTY is not reading");
                            }
                        }
                    }
                    None => tracing::warn!("a malformed stream message on the host link"),
                },
                // tungstenite answers pings itself, on the next write or
                // flush: the writer flushes.
                Some(Ok(Message::Ping(_))) => {
                    let _ = out.try_send(Out::Flush);
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    link_down.cancel();
    let _ = writer.await;
}

/// The link's writer: replies, frames and events out, until the link or
/// the runner ends or a write fails.
async fn write_link<S>(
    mut sink: futures_util::stream::SplitSink<WebSocketStream<S>, Message>,
    mut outbox: mpsc::Receiver<Out>,
    server: Arc<LinkServer>,
    link_down: CancellationToken,
    shutdown: CancellationToken,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    loop {
        let messages = tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                let _ = tokio::time::timeout(Duration::from_secs(1), sink.send(Message::Close(None))).await;
                break;
            }
            _ = link_down.cancelled() => break,
            Some(next) = outbox.recv() => match next {
                Out::Binary(b) => vec![(Message::binary(b), None)],
                Out::Flush => {
                    if sink.flush().await.is_err() {
                        break;
                    }
                    continue;
                }
                Out::Message(m) => match serde_json::to_string(&m) {
                    Ok(t) => vec![(Message::text(t), None)],
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode a link message");
                        continue;
                    }
                },
            },
            _ = server.events_ready.notified() => server
                .take_events()
                .into_iter()
                .filter_map(|event| {
                    let text = serde_json::to_string(&LinkMessage::Event { event: event.clone() }).ok()?;
                    Some((Message::text(text), Some(event)))
                })
                .collect(),
        };
        let mut messages = messages.into_iter();
        while let Some((message, event)) = messages.next() {
            let sent = tokio::select! {
                _ = link_down.cancelled() => Err(()),
                r = tokio::time::timeout(SILENCE, sink.send(message)) => r.map_err(|_| ()).and_then(|r| r.map_err(|_| ())),
            };
            if sent.is_err() {
                // Events not delivered are told on the next link.
                server.put_back(event.into_iter().chain(messages.filter_map(|(_, e)| e)));
                link_down.cancel();
                return;
            }
        }
    }
    link_down.cancel();
}
