//! Live delivery of committed events inside one node.
//!
//! Every committed event is broadcast once, in `seq` order. This node's
//! writer broadcasts what it committed itself, right after the commit, when
//! the batch directly follows the last event published
//! (`Hub::publish_committed`): no other task has to wake up for the common
//! case. Anything else (another node's commit, announced by NOTIFY, or a gap
//! left by a rolled-back sequence value) wakes the pump task, which reads
//! the log after the last event published. Both publish under one lock that
//! holds the last `seq` published, so the broadcast follows true commit
//! order across nodes and never repeats an event.
//!
//! [`Tail`] turns "events after cursor C" plus the broadcast into one
//! gap-free, duplicate-free stream: it subscribes first, backfills from the
//! database up to the head it read, then takes live events, dropping any at
//! or below its cursor. If it falls behind the broadcast ring it backfills
//! from the log again; a caller that reads only when its client can take
//! more asks with [`Tail::try_next_or_behind`] to hear of it instead
//! ([`TailItem::FellBehind`]), so that it can tell a slow client to resync:
//! the ring is the one bounded buffer every live reader shares.
//!
//! A store whose live readers all write the same bytes for an event (the
//! SSE frame) is given a renderer ([`Store::render_live_frames`]): each
//! event is then rendered once, when it is published, and the ring carries
//! the frame instead of the event's `data`, so that every reader copies the
//! same bytes and the ring holds one compact copy per event rather than the
//! parsed JSON plus a frame.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use shepherd_core::event::{Event, EventFilter};
use shepherd_core::Error;
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use crate::Store;

/// How many events the broadcast keeps for slow subscribers.
pub const BROADCAST_CAPACITY: usize = 4096;

/// Renders an event as its live readers write it.
pub type FrameRenderer = fn(&Event) -> Bytes;

/// One event as a [`Tail`] yields it: the event, and for a live event of a
/// store with a renderer, its frame.
#[derive(Debug)]
pub struct Live {
    event: Event,
    frame: Option<Bytes>,
}

impl Live {
    /// The frame rendered at publish time. When it is present the event's
    /// `data` is `Null`: the frame carries it, and the ring does not keep
    /// the parsed JSON as well (readers of such a store write frames).
    pub fn frame(&self) -> Option<&Bytes> {
        self.frame.as_ref()
    }
}

impl Deref for Live {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.event
    }
}

impl From<Event> for Live {
    fn from(event: Event) -> Self {
        Live { event, frame: None }
    }
}

pub(crate) struct Hub {
    pub(crate) tx: broadcast::Sender<Arc<Live>>,
    /// Wakes the pump to read the log.
    pub(crate) wake: Arc<Notify>,
    /// The last `seq` broadcast; every broadcast happens under this lock.
    /// `None` until the store has read the log's head ([`Hub::start`]).
    last: std::sync::Mutex<Option<i64>>,
    /// Set once by the HTTP layer; until then the ring carries whole events.
    render: OnceLock<FrameRenderer>,
    /// The writer's batch sizes and commit times (it already holds the hub).
    pub(crate) writer_stats: crate::writer_stats::WriterStats,
    /// The SQLite writer's time per statement, when asked for.
    pub(crate) statement_costs: crate::statement_costs::StatementCosts,
}

impl Hub {
    pub(crate) fn new() -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Hub {
            tx,
            wake: Arc::new(Notify::new()),
            last: std::sync::Mutex::new(None),
            render: OnceLock::new(),
            writer_stats: Default::default(),
            statement_costs: Default::default(),
        }
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Option<i64>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last `seq` broadcast (0 before the store has started).
    pub(crate) fn last_published(&self) -> i64 {
        self.last().unwrap_or(0)
    }

    /// Sets the log's head, read before the store took its first write:
    /// every event after it is published. (Reading it any later could count
    /// an event the writer had already committed as published, and that
    /// event would never reach a live reader.)
    pub(crate) fn start(&self, head: i64) {
        *self.last() = Some(head);
    }

    /// Called by this node's writer after a commit with the events it
    /// committed, in `seq` order. Broadcasts them at once if they directly
    /// follow the last event published; otherwise wakes the pump, which
    /// reads them (and whatever lies between) from the log.
    pub(crate) fn publish_committed(&self, batch: Vec<Event>) {
        let mut last = self.last();
        let Some(prev) = *last else {
            drop(last);
            self.wake.notify_one();
            return;
        };
        let follows = batch.first().is_some_and(|e| e.seq == prev + 1)
            && batch.windows(2).all(|w| w[1].seq == w[0].seq + 1);
        if follows {
            for e in batch {
                *last = Some(e.seq);
                self.send(e);
            }
        } else if batch.last().is_some_and(|e| e.seq > prev) {
            drop(last);
            self.wake.notify_one();
        }
    }

    /// Broadcasts one event (under the `last` lock). With no live reader
    /// the broadcast would drop it anyway: it is neither rendered nor
    /// wrapped. A reader that subscribes right after still reads it, from
    /// the log: it was committed before this call, and a reader backfills
    /// after subscribing.
    fn send(&self, mut event: Event) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let frame = self.render.get().map(|render| {
            let frame = render(&event);
            event.data = Value::Null;
            frame
        });
        let _ = self.tx.send(Arc::new(Live { event, frame }));
    }

    /// Broadcasts events read from the log after the last one published,
    /// skipping any the writer published meanwhile.
    fn publish_read(&self, events: Vec<Event>) {
        let mut last = self.last();
        let mut now = last.unwrap_or(0);
        for e in events {
            if e.seq > now {
                now = e.seq;
                self.send(e);
            }
        }
        *last = Some(now);
    }
}

impl Store {
    /// Has every event published from now on rendered once by `render`, and
    /// the ring carry that frame instead of the event's `data` (see
    /// [`Live::frame`]). The first renderer set stays.
    pub fn render_live_frames(&self, render: FrameRenderer) {
        let _ = self.hub().render.set(render);
    }
}

/// Runs until `shutdown`. Publishes, by reading the log after the last
/// event published, whatever the writer could not broadcast itself: other
/// nodes' commits (announced by NOTIFY, or noticed by the periodic read)
/// and batches that did not directly follow. Started once [`Hub::start`]
/// has run.
pub(crate) async fn pump(store: Store, shutdown: CancellationToken) {
    let hub = store.hub();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = hub.wake.notified() => {}
            // A safety net, and how writes of other processes are noticed.
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        catch_up(&store, hub).await;
    }
}

/// Publishes everything in the log after the last event published.
async fn catch_up(store: &Store, hub: &Hub) {
    loop {
        let after = hub.last_published();
        match store.read_new_events(after, 1000).await {
            Ok(events) => {
                let n = events.len();
                hub.publish_read(events);
                if n < 1000 {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "event pump read failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                return;
            }
        }
    }
}

/// What a [`Tail`] yields.
#[derive(Debug, Clone)]
pub enum TailItem {
    Event(Arc<Live>),
    /// The cursor is older than what retention kept: events were removed.
    Expired,
    /// The reader was live and then fell more than the broadcast ring behind
    /// the log (only from [`Tail::try_next_or_behind`]). The cursor is the
    /// last event delivered; reading on backfills from there.
    FellBehind,
}

/// A gap-free, duplicate-free reader of the log from a cursor onwards.
pub struct Tail {
    store: Store,
    rx: broadcast::Receiver<Arc<Live>>,
    cursor: i64,
    filter: EventFilter,
    backlog: std::collections::VecDeque<Event>,
    /// How far the last backfill page scanned; the cursor moves there once
    /// the backlog is delivered (events in between did not match the filter).
    scanned_to: i64,
    backfilling: bool,
    /// Whether the live feed has delivered since the last backfill: a lag
    /// then means this reader is slow, not that its backfill took long.
    kept_up: bool,
    /// Set only inside [`Tail::try_next_or_behind`].
    report_lag: bool,
}

impl Tail {
    pub(crate) fn new(store: Store, cursor: i64, filter: EventFilter) -> Self {
        // Subscribe before reading anything, so nothing committed after the
        // backfill's head can be missed.
        let rx = store.hub().tx.subscribe();
        Tail {
            store,
            rx,
            cursor,
            filter,
            backlog: Default::default(),
            scanned_to: cursor,
            backfilling: true,
            kept_up: false,
            report_lag: false,
        }
    }

    /// The cursor: everything at or below it has been delivered or skipped.
    pub fn cursor(&self) -> i64 {
        self.cursor
    }

    /// How many events are at hand without waiting (before filtering).
    pub fn pending(&self) -> usize {
        self.backlog.len() + self.rx.len()
    }

    /// True while the reader is still reading stored events rather than live ones.
    pub fn is_backfilling(&self) -> bool {
        self.backfilling || !self.backlog.is_empty()
    }

    /// The next matching event, waiting for one if necessary.
    pub async fn next(&mut self) -> Result<TailItem, Error> {
        loop {
            if let Some(e) = self.pop_backlog() {
                return Ok(TailItem::Event(Arc::new(e.into())));
            }
            self.cursor = self.cursor.max(self.scanned_to);
            if self.backfilling {
                // Boxed: a database read's state is large, and the thousands
                // of readers that wait live should not each carry it.
                if let Some(item) = Box::pin(self.read_page()).await? {
                    return Ok(item);
                }
                continue;
            }
            let received = self.rx.recv().await;
            if let Some(item) = self.take_live(received)? {
                return Ok(item);
            }
        }
    }

    /// The next matching event if one is at hand without waiting: from the
    /// backlog or the live feed, never from the database. `None` means "call
    /// [`Tail::next`]".
    pub fn try_next(&mut self) -> Option<Result<TailItem, Error>> {
        loop {
            if let Some(e) = self.pop_backlog() {
                return Some(Ok(TailItem::Event(Arc::new(e.into()))));
            }
            self.cursor = self.cursor.max(self.scanned_to);
            if self.backfilling {
                return None;
            }
            let received = match self.rx.try_recv() {
                Ok(e) => Ok(e),
                Err(broadcast::error::TryRecvError::Empty) => return None,
                Err(broadcast::error::TryRecvError::Lagged(n)) => {
                    Err(broadcast::error::RecvError::Lagged(n))
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    Err(broadcast::error::RecvError::Closed)
                }
            };
            match self.take_live(received) {
                Ok(Some(item)) => return Some(Ok(item)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Like [`Tail::try_next`], but a reader that was keeping up with the
    /// live feed and has fallen out of the ring since it last read gets
    /// [`TailItem::FellBehind`] instead of a quiet backfill. Meant for the
    /// first read after the caller's client was slow to take what it was
    /// given: a lag found then is the client's doing. A lag found by
    /// [`Tail::try_next`] or while the caller waits in [`Tail::next`] (the
    /// server was busy) is backfilled quietly.
    pub fn try_next_or_behind(&mut self) -> Option<Result<TailItem, Error>> {
        self.report_lag = true;
        let item = self.try_next();
        self.report_lag = false;
        item
    }

    /// Takes the next backfilled event, releasing the backlog's memory
    /// once the reader has caught up.
    fn pop_backlog(&mut self) -> Option<Event> {
        let e = self.backlog.pop_front()?;
        self.cursor = e.seq;
        if self.backlog.is_empty() && !self.backfilling {
            self.backlog = Default::default();
        }
        Some(e)
    }

    /// Reads the next page of history into the backlog; `Some` only when
    /// the cursor turned out to be older than retention.
    async fn read_page(&mut self) -> Result<Option<TailItem>, Error> {
        let page = self
            .store
            .read_backfill_events(self.cursor, &self.filter, 500)
            .await?;
        if page.cursor_expired {
            // Continue from where retention starts; the caller must reload state.
            self.cursor = self.store.pruned_through().await?;
            self.scanned_to = self.cursor;
            return Ok(Some(TailItem::Expired));
        }
        self.backlog.extend(page.events);
        self.scanned_to = page.next_cursor;
        self.backfilling = page.next_cursor < page.head;
        Ok(None)
    }

    /// One receive from the broadcast: a matching event, or `None` for one
    /// already delivered, filtered out, or a lag turned into a backfill.
    fn take_live(
        &mut self,
        received: Result<Arc<Live>, broadcast::error::RecvError>,
    ) -> Result<Option<TailItem>, Error> {
        match received {
            Ok(e) => {
                self.kept_up = true;
                if e.seq <= self.cursor {
                    return Ok(None);
                }
                self.cursor = e.seq;
                Ok(self.filter.matches(&e).then_some(TailItem::Event(e)))
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                // The ring moved past us; the log has everything.
                self.backfilling = true;
                let was_live = std::mem::take(&mut self.kept_up);
                Ok((was_live && self.report_lag).then_some(TailItem::FellBehind))
            }
            Err(broadcast::error::RecvError::Closed) => Err(Error::unavailable(
                "shutting_down",
                "the server is shutting down",
            )),
        }
    }
}
