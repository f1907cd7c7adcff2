//! The runner's side of its host's link: one WebSocket it opens to the
//! server (never the other way round) and keeps open, reconnecting after
//! any loss, over which the server asks for what only this host can read.
//! Each request is answered on its own task, so a slow one (a big diff)
//! holds up no other.
//!
//! What the host may be asked to read is bounded here, not by the server:
//! a run's diff only from a repository one of this runner's own agents
//! names (`workspace_diff::allowed_repo`), whatever the server sends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use shepherd_client::Client;
use shepherd_protocol::{LinkMessage, LinkReply, LinkRequest};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

/// How many requests the host works on at once; more wait their turn (a
/// flood of diff requests cannot start a flood of git processes).
const AT_ONCE: usize = 4;
/// The largest diff a host sends back (the server takes 64 MiB messages).
const MAX_DIFF: usize = 32 * 1024 * 1024;
/// A link that hears nothing for this long (the server pings every 15 s)
/// is taken for dead and opened again.
const SILENCE: Duration = Duration::from_secs(45);

/// What the host answers from.
pub struct LinkServer {
    /// The repositories this runner's agents name.
    repos: Vec<PathBuf>,
    at_once: tokio::sync::Semaphore,
}

impl LinkServer {
    pub fn new(repos: Vec<PathBuf>) -> LinkServer {
        LinkServer {
            repos,
            at_once: tokio::sync::Semaphore::new(AT_ONCE),
        }
    }

    async fn answer(&self, request: LinkRequest) -> LinkReply {
        let Ok(_turn) = self.at_once.acquire().await else {
            return LinkReply::Failed {
                status: 503,
                code: "host_failed".into(),
                message: "the host is stopping".into(),
            };
        };
        match request {
            LinkRequest::RunDiff { run_id, workspace } => {
                match crate::workspace_diff::read_diff(&self.repos, &run_id, &workspace).await {
                    Ok(d) if d.diff.len() + d.stat.len() > MAX_DIFF => LinkReply::Failed {
                        status: 422,
                        code: "diff_too_large".into(),
                        message: format!(
                            "the diff of run {run_id} is {} MiB, more than the {} MiB a host sends",
                            d.diff.len() >> 20,
                            MAX_DIFF >> 20
                        ),
                    },
                    Ok(d) => LinkReply::RunDiff(d),
                    Err(e) => failed(&e),
                }
            }
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
pub async fn keep_open(
    host: watch::Receiver<Client>,
    id: String,
    server: Arc<LinkServer>,
    shutdown: CancellationToken,
) {
    let path = format!("/api/v1/hosts/{id}/link");
    let mut backoff = Duration::from_millis(100);
    let mut said_down = false;
    loop {
        let client = host.borrow().clone();
        match client.open_websocket(&path).await {
            Ok(io) => {
                backoff = Duration::from_millis(100);
                if said_down {
                    tracing::info!(host = id, "host link open again");
                    said_down = false;
                }
                let ws = WebSocketStream::from_raw_socket(io, Role::Client, None).await;
                serve(ws, server.clone(), &shutdown).await;
            }
            Err(e) => {
                if !said_down {
                    tracing::warn!(host = id, error = %e, "cannot open the host link; trying again");
                    said_down = true;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Any message's id, for answering one this runner cannot read.
#[derive(serde::Deserialize)]
struct Addressed {
    id: u64,
}

/// Answers requests until the link or the runner ends.
async fn serve<S>(ws: WebSocketStream<S>, server: Arc<LinkServer>, shutdown: &CancellationToken)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut out, mut inbound) = ws.split();
    let (replies_tx, mut replies) = mpsc::channel::<(u64, LinkReply)>(64);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = out.send(Message::Close(None)).await;
                return;
            }
            Some((id, reply)) = replies.recv() => {
                let text = match serde_json::to_string(&LinkMessage::Reply { id, reply }) {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot encode a link reply");
                        continue;
                    }
                };
                if out.send(Message::text(text)).await.is_err() {
                    return;
                }
            }
            msg = tokio::time::timeout(SILENCE, inbound.next()) => match msg.unwrap_or_else(|_| {
                tracing::warn!("the host link heard nothing for 45 s; opening it again");
                None
            }) {
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<LinkMessage>(&text) {
                    Ok(LinkMessage::Request { id, request }) => {
                        let (server, tx) = (server.clone(), replies_tx.clone());
                        tokio::spawn(async move {
                            let reply = server.answer(request).await;
                            let _ = tx.send((id, reply)).await;
                        });
                    }
                    Ok(LinkMessage::Reply { .. }) | Err(_) => {
                        // A newer server may ask what this runner does not
                        // know; it is told so rather than left waiting.
                        if let Ok(Addressed { id }) = serde_json::from_str::<Addressed>(&text) {
                            let reply = LinkReply::Failed {
                                status: 422,
                                code: "host_failed".into(),
                                message: "this runner does not know that request; upgrade it".into(),
                            };
                            // Never waits: this loop is what empties the queue.
                            let _ = replies_tx.try_send((id, reply));
                        }
                    }
                },
                // tungstenite answers pings itself (on the next write or flush).
                Some(Ok(Message::Ping(_))) => {
                    if out.flush().await.is_err() {
                        return;
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
        }
    }
}
