//! Delivery of other nodes' commits, and how nodes learn of each other.
//!
//! Delivery. The LISTEN connection is also the event pump's: it is not part
//! of the pool, so requests that hold every pooled connection cannot hold up
//! live events (see `PgBackend::read_delivery`). It reconnects with
//! backoff when it is lost.
//!
//! Peers. A node alone on its database has nobody to tell, and a NOTIFY
//! costs the database a good part of a small commit. So every node
//! announces itself ([`ANNOUNCE_INTERVAL`]) on the same channel, and the
//! writer sends commit notifications only while it has heard another node
//! within [`PEER_TTL`]. A node that starts announces itself at once; until
//! the others hear it (milliseconds), its pump's periodic read of the log
//! covers what they commit.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Pool};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

use super::connect::{describe, map_err, pool_err};
use super::tls;
use super::Published;

/// The channel every node LISTENs on (in the default schema; see
/// [`notify_channel`]).
pub(super) const NOTIFY_CHANNEL: &str = "shepherd_events";
/// The channel of the nodes sharing one schema. Notifications are
/// database-wide, so deployments in separate schemas of one database use
/// separate channels and do not wake (or count as peers of) each other.
pub(super) fn notify_channel(schema: Option<&str>) -> String {
    match schema {
        None => NOTIFY_CHANNEL.to_owned(),
        // Channel names are at most 63 bytes: name, "_", schema.
        Some(s) if NOTIFY_CHANNEL.len() + 1 + s.len() <= 63 => format!("{NOTIFY_CHANNEL}_{s}"),
        Some(s) => {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(s.as_bytes());
            let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
            format!("{NOTIFY_CHANNEL}_{hex}")
        }
    }
}

/// Payload prefix of a node's announcement (not a commit).
const ANNOUNCE_PREFIX: &str = "node:";
/// How often a node announces itself to the others.
const ANNOUNCE_INTERVAL: Duration = Duration::from_secs(5);
/// A node that announced itself this recently still counts as a peer.
const PEER_TTL: Duration = Duration::from_secs(20);

/// When this node last heard another node on [`NOTIFY_CHANNEL`], and how
/// many commit notifications it has sent.
#[derive(Debug, Default)]
pub struct Peers {
    heard_at: std::sync::Mutex<Option<std::time::Instant>>,
    pub(super) notifies: std::sync::atomic::AtomicU64,
}

impl Peers {
    fn heard(&self) {
        *self.heard_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::time::Instant::now());
    }
    /// Whether another node has been heard within [`PEER_TTL`].
    pub fn present(&self) -> bool {
        self.heard_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < PEER_TTL)
    }
    /// Commit notifications sent so far.
    #[cfg(feature = "test-hooks")]
    pub fn notifies(&self) -> u64 {
        self.notifies.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The delivery connection (see "Delivery" in the module docs), while it is up.
pub(super) type DeliverySlot = Arc<tokio::sync::watch::Sender<Option<Arc<ClientWrapper>>>>;

/// How long the event pump waits for the delivery connection to come back
/// before its read fails (and is retried).
pub(super) const DELIVERY_WAIT: Duration = Duration::from_secs(5);

/// What the delivery connection's task needs.
pub(super) struct Listener {
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: tls::MakeRustls,
    pub(super) channel: String,
    pub(super) node: String,
    pub(super) on_commit: Published,
    pub(super) peers: Arc<Peers>,
    pub(super) delivery: DeliverySlot,
}

/// Keeps the delivery connection up, LISTENing, and handed to the event
/// pump (reconnecting with backoff), and wakes the pump on every
/// notification (and after every reconnect, to catch up on whatever was
/// committed while it was away).
pub(super) async fn listen_loop(l: Listener, shutdown: CancellationToken) {
    let own_announcement = format!("{ANNOUNCE_PREFIX}{}", l.node);
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut listened = false;
        let attempt = async {
            let (client, mut conn) = l.config.connect(l.tls.clone()).await?;
            // A task drives the connection (the pump's queries go through
            // it too) and hands on what the server sends unasked.
            let (tx, mut notes) = mpsc::unbounded_channel();
            let driver = tokio::spawn(async move {
                let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
                while let Some(m) = messages.next().await {
                    let end = m.is_err();
                    if tx.send(m).is_err() || end {
                        break;
                    }
                }
            });
            // Dropping the wrapper stops the driver, which closes the connection.
            let client = Arc::new(ClientWrapper::new(client, driver));
            client
                .batch_execute(&format!("LISTEN {}", l.channel))
                .await?;
            listened = true;
            l.delivery.send_replace(Some(client.clone()));
            l.on_commit.wake();
            while let Some(m) = notes.recv().await {
                match m {
                    // This node's writer publishes its own commits.
                    Ok(AsyncMessage::Notification(n))
                        if n.payload() == l.node || n.payload() == own_announcement => {}
                    Ok(AsyncMessage::Notification(n))
                        if n.payload().starts_with(ANNOUNCE_PREFIX) =>
                    {
                        l.peers.heard()
                    }
                    Ok(AsyncMessage::Notification(_)) => {
                        l.peers.heard();
                        l.on_commit.wake()
                    }
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), tokio_postgres::Error>(())
        };
        let outcome = tokio::select! {
            _ = shutdown.cancelled() => None,
            r = attempt => Some(r),
        };
        l.delivery.send_replace(None);
        let Some(outcome) = outcome else { return };
        if listened {
            // It was up: the first retry comes quickly.
            backoff = Duration::from_millis(100);
        }
        match outcome {
            Err(e) => {
                tracing::warn!(error = %describe(&e), "event delivery connection lost; reconnecting")
            }
            Ok(()) => tracing::warn!("event delivery connection closed; reconnecting"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Tells the other nodes on this database that this one is here (see
/// "Peers" in the module docs): at once, then every [`ANNOUNCE_INTERVAL`].
pub(super) async fn announce_loop(
    pool: Pool,
    channel: String,
    node: String,
    shutdown: CancellationToken,
) {
    let sql = format!("SELECT pg_notify('{channel}', '{ANNOUNCE_PREFIX}{node}')");
    loop {
        match pool.get().await {
            Ok(client) => {
                if let Err(e) = client.batch_execute(&sql).await {
                    tracing::debug!(error = %map_err(e), "node announcement failed");
                }
            }
            Err(e) => tracing::debug!(error = %pool_err(e), "node announcement skipped"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(ANNOUNCE_INTERVAL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_channels_fit_and_separate_schemas() {
        assert_eq!(notify_channel(None), "shepherd_events");
        assert_eq!(notify_channel(Some("team_a")), "shepherd_events_team_a");
        let long = "s".repeat(60);
        let c = notify_channel(Some(&long));
        assert!(c.len() <= 63, "{c}");
        assert_ne!(c, notify_channel(Some(&"s".repeat(61))));
    }
}
