//! `GET /api/events`: every event of the log as server-sent events.
//!
//! `id:` is the event's sequence number, so a browser's `EventSource`
//! resumes by itself with `Last-Event-ID`; `?after=<seq>` does the same for
//! other clients and `?after=now` starts live. The stream backfills from the
//! database, then follows the live broadcast with no gap and no duplicate
//! (see `shepherd_store::hub`). A client whose cursor was pruned gets one
//! `resync` event; a client too slow for the live feed gets `resync` and is
//! disconnected, and resumes from its cursor. A stream ends when the
//! person's credential that opened it stops working (`revocation`).
//!
//! The Workers page contract's run activity travels under its own names: `worker_started`,
//! `worker_status`, `tool_started`, `tool_completed`, `worker_completed`
//! (there a "worker" is a run). Every other event keeps its log type.

use std::convert::Infallible;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use bytes::BytesMut;
use serde_json::Value;
use shepherd_core::event::{kind, Event, EventFilter};
use shepherd_core::pace::WritePace;
use shepherd_core::Error;
use shepherd_protocol::{parse_cursor, ErrorBody, EventStreamQuery, Resync, StreamData};
use shepherd_store::{Tail, TailItem};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{ApiQuery, ApiResult};
use crate::AppState;

/// The log type behind one of the Workers page contract's SSE names, so a `types` filter may
/// use either (`worker_completed` or `run.completed`).
fn workers_page_kind(name: &str) -> &str {
    match name {
        "worker_started" => kind::RUN_STARTED,
        "worker_status" => kind::RUN_STATUS,
        "worker_completed" => kind::RUN_COMPLETED,
        "tool_started" | "tool_completed" => kind::RUN_STEP,
        other => other,
    }
}

/// The Workers page contract's names for run events, accepted in `types`
/// beside the log's own.
const WORKERS_PAGE_NAMES: [&str; 5] = [
    "worker_started",
    "worker_status",
    "worker_completed",
    "tool_started",
    "tool_completed",
];

/// The log types a `types` filter names, refusing a name no event carries
/// (400 `unknown_event_type`): a typo would otherwise answer nothing, which
/// looks exactly like "no such events".
fn kinds_of(types: Option<&str>) -> Result<Vec<String>, Error> {
    let Some(types) = types else {
        return Ok(Vec::new());
    };
    let mut kinds = Vec::new();
    for name in types.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let k = workers_page_kind(name);
        let known = match k.strip_suffix('*') {
            // A prefix (`run.*`) must be the start of some type.
            Some(prefix) => kind::ALL.iter().any(|t| t.starts_with(prefix)),
            None => kind::ALL.contains(&k) || kind::LEGACY.contains(&k),
        };
        if !known {
            let mut known: Vec<&str> = kind::ALL.to_vec();
            known.extend(WORKERS_PAGE_NAMES);
            known.sort_unstable();
            return Err(Error::bad_request(
                "unknown_event_type",
                format!(
                    "no event has the type {name:?}; known types: {}",
                    known.join(", ")
                ),
            ));
        }
        kinds.push(k.to_owned());
    }
    Ok(kinds)
}

/// The event filter a stream or page query asks for.
pub fn filter_of(q: &EventStreamQuery) -> Result<EventFilter, Error> {
    Ok(EventFilter {
        agent_id: q.agent_id.clone(),
        worker_id: q.worker_id.clone(),
        task_id: q.task_id.clone().or_else(|| q.vtid.clone()),
        run_id: q.run_id.clone(),
        channel_id: q.channel_id.clone(),
        conversation_id: q.conversation_id.clone(),
        session_id: q.session_id.clone(),
        actor: q.actor.clone(),
        kinds: kinds_of(q.types.as_deref())?,
    })
}

/// The SSE `event:` name of a log event on this surface.
pub fn surface_name(e: &Event) -> &str {
    match e.kind.as_str() {
        kind::RUN_STARTED => "worker_started",
        kind::RUN_STATUS => "worker_status",
        kind::RUN_COMPLETED => "worker_completed",
        kind::RUN_STEP => match e.data.get("kind").and_then(Value::as_str) {
            Some("tool_result") => "tool_completed",
            Some("action") if e.data.get("tool_name").is_some_and(|t| !t.is_null()) => {
                "tool_started"
            }
            _ => kind::RUN_STEP,
        },
        other => other,
    }
}

/// The JSON of one event as clients see it.
pub fn event_json(e: &Event) -> String {
    serde_json::to_string(&WireRef::from(e)).unwrap_or_default()
}

/// [`WireEvent`](shepherd_protocol::WireEvent)'s JSON from a borrowed event: the same fields in the same
/// order, without cloning the event's `data` to serialize it.
#[derive(serde::Serialize)]
struct WireRef<'a> {
    id: i64,
    #[serde(flatten)]
    event: &'a Event,
}

impl<'a> From<&'a Event> for WireRef<'a> {
    fn from(e: &'a Event) -> Self {
        WireRef {
            id: e.seq,
            event: e,
        }
    }
}

/// One event's SSE frame, as bytes on the wire: what every subscriber of a
/// live event writes (the store renders it once, at publish; see
/// [`AppState::new`](crate::AppState::new)).
pub fn render_frame(e: &Event) -> Bytes {
    let event = surface_name(e);
    let mut out = Vec::with_capacity(FRAME_GUESS.max(event.len() + 64));
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(e.seq.to_string().as_bytes());
    out.extend_from_slice(b"\nevent: ");
    out.extend_from_slice(event.as_bytes());
    // JSON never contains a raw newline, so one data line is enough.
    out.extend_from_slice(b"\ndata: ");
    let data_at = out.len();
    if serde_json::to_writer(&mut out, &WireRef::from(e)).is_err() {
        // As `event_json`: an empty data line rather than half a JSON text.
        out.truncate(data_at);
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// One SSE frame, as bytes on the wire.
fn frame(id: Option<i64>, event: &str, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + event.len() + 32);
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(&id.to_string());
        out.push('\n');
    }
    out.push_str("event: ");
    out.push_str(event);
    out.push('\n');
    // JSON never contains a raw newline, so one data line is enough.
    out.push_str("data: ");
    out.push_str(data);
    out.push_str("\n\n");
    Bytes::from(out)
}

/// Events read from the log (history a client asked for) come without a
/// frame; clients resuming together read the same ones, so each is
/// rendered once and shared: a small direct-mapped cache keyed by `seq`.
pub struct FrameCache {
    slots: Vec<std::sync::Mutex<Option<(i64, Bytes)>>>,
}

impl Default for FrameCache {
    fn default() -> Self {
        FrameCache {
            slots: (0..4096).map(|_| std::sync::Mutex::new(None)).collect(),
        }
    }
}

impl FrameCache {
    /// Appends the event's frame to `out`, rendering it only if no other
    /// subscriber has yet. The copy happens under the slot's lock, so a
    /// cache hit costs no reference-count traffic on shared memory.
    fn write(&self, e: &Event, out: &mut BytesMut) {
        let slot = &self.slots[(e.seq as usize) % self.slots.len()];
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some((seq, bytes)) if *seq == e.seq => out.extend_from_slice(bytes),
            _ => {
                let bytes = render_frame(e);
                out.extend_from_slice(&bytes);
                *guard = Some((e.seq, bytes));
            }
        }
    }
}

fn resync(reason: &str, cursor: i64, message: &str) -> Bytes {
    frame(
        None,
        "resync",
        &serde_json::to_string(&Resync {
            reason: reason.to_owned(),
            cursor,
            message: message.to_owned(),
        })
        .unwrap_or_default(),
    )
}

/// Works out where a stream starts: `Last-Event-ID`, then `?after=`, else now.
pub async fn start_cursor(
    state: &AppState,
    headers: &HeaderMap,
    after: Option<&str>,
) -> Result<i64, Error> {
    let bad = |v: &str| {
        Error::bad_request(
            "invalid_cursor",
            format!("a cursor is a non-negative integer or `now`, not {v:?}"),
        )
    };
    if let Some(h) = headers.get("last-event-id") {
        let v = h.to_str().map_err(|_| bad("?"))?;
        return parse_cursor(v).ok_or_else(|| bad(v.trim()));
    }
    match after {
        None | Some("now") => state.store.head().await,
        Some(v) => parse_cursor(v).ok_or_else(|| bad(v)),
    }
}

/// A chunk is cut once it holds this many bytes of frames.
const CHUNK_BYTES: usize = 64 * 1024;
/// A typical frame's size, to size a stream's first chunk before filling it.
const FRAME_GUESS: usize = 320;
/// With this many events at hand a stream writes at once rather than wait
/// for more: waiting would only risk falling out of the broadcast ring.
const COALESCE_UNTIL: usize = 256;
/// A connection that holds a chunk this long before asking for the next is
/// not draining: its client stopped reading, or reads slower than the
/// socket fills. A fall out of the ring found after a shorter hold came
/// from the server's side (a burst of events larger than the ring, a task
/// not scheduled in time) and is caught up from the log.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// One client's stream: pulls frames from its tail whenever the connection
/// can take more. There is no queue per client: the node's broadcast ring is
/// the one bounded buffer, and a client that falls out of it after having
/// been live, while its connection held what it was given for longer than
/// [`DRAIN_GRACE`], is too slow for the live feed: it gets a `resync` notice
/// after what it already has, and the stream ends, so no client can hold
/// memory or slow anyone else. Falling behind for the server's own reasons
/// (while waiting for events, while coalescing, while gathering a chunk, or
/// across a hand-over the connection took at once: a burst larger than the
/// ring, a busy CPU) is caught up from the log. History the client asked
/// for is paced by the client.
struct Feed {
    tail: Tail,
    frames: Arc<FrameCache>,
    keepalive: Duration,
    /// When the stream may write: a burst at once, then at most once per
    /// coalescing interval while it stays busy (see `next_chunk`).
    pace: WritePace,
    /// When the last chunk was handed to the connection: the connection
    /// asks for the next once it has taken that one.
    handed_at: Option<Instant>,
    /// [`DRAIN_GRACE`] (tests shorten or stretch it).
    drain_grace: Duration,
    /// A child of the server's token: every wait on it registers with this
    /// stream's own node, not with the one every stream shares. Also
    /// cancelled when the credential that opened the stream is lost
    /// (`watch`).
    shutdown: CancellationToken,
    /// The hold on that credential; `None` in tests of the feed alone.
    _watch: Option<crate::revocation::Watch>,
    ended: bool,
    /// The largest frame of the last chunk, to size the next one: a chunk
    /// sized too small is grown by doubling, and so holds up to twice the
    /// memory its frames need until the connection has written it.
    frame_size: usize,
    /// Events after this one were committed after the stream began: their
    /// delivery lag is recorded (older ones are history the client asked for).
    live_from: i64,
    metrics: Arc<crate::metrics::HttpMetrics>,
}

impl Feed {
    /// The next piece of the body: one or more frames, or a keep-alive
    /// comment; `None` ends the stream.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        // Checked before anything at hand is written: a busy stream whose
        // credential was lost must not keep delivering what it has queued.
        if self.ended || self.shutdown.is_cancelled() {
            return None;
        }
        // The connection has taken everything before. If it held the last
        // chunk long, its client was not draining, and a fall out of the
        // ring since then is the client's doing: it ends the stream. After
        // a short hold the fall is the server's (a burst, a late wake-up),
        // and so is one found while waiting in `next`, coalescing or
        // gathering below: those are caught up from the log.
        let stalled = self
            .handed_at
            .is_some_and(|at| at.elapsed() >= self.drain_grace);
        let first = if stalled {
            self.tail.try_next_or_behind()
        } else {
            self.tail.try_next()
        };
        let first = match first {
            Some(item) => Ok(item),
            None => tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                item = tokio::time::timeout(self.keepalive, self.tail.next()) => item,
            },
        };
        let first = match first {
            Err(_) => {
                self.handed_at = Some(Instant::now());
                return Some(Bytes::from_static(b": keep-alive\n\n"));
            }
            Ok(Ok(item)) => item,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "event stream ended");
                return None;
            }
        };
        // A live stream that has spent its burst of writes waits for the
        // next one, so that one write carries every event committed
        // meanwhile: a thousand busy subscribers then cost a thousand writes
        // per interval rather than one per event each. A quiet stream writes
        // at once, the few events of one action (a send, a claim) included.
        if let Some(due) = self.pace.due(Instant::now().into_std()) {
            let busy = self.tail.pending() >= COALESCE_UNTIL;
            if !busy && !self.tail.is_backfilling() {
                tokio::select! {
                    _ = self.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep_until(Instant::from_std(due)) => {}
                }
            }
        }
        // Sized for everything at hand, so that the chunk is not grown (and
        // copied) step by step: fewer, larger allocations.
        let at_hand = 1 + self.tail.pending();
        let mut out = BytesMut::with_capacity((at_hand * self.frame_size).min(CHUNK_BYTES));
        let mut largest = 0;
        // Every frame of the chunk is handed to the connection at once.
        let now = shepherd_store::now_ms();
        let mut lags = crate::metrics::LagTally::default();
        let mut item = Some(Ok(first));
        while let Some(next) = item.take() {
            match next {
                Ok(next) => {
                    let before = out.len();
                    let more = self.push(next, &mut out, now, &mut lags);
                    largest = largest.max(out.len() - before);
                    if !more || out.len() >= CHUNK_BYTES {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "event stream ended");
                    self.ended = true;
                    break;
                }
            }
            // The server's own time (the coalescing sleep, this loop): a
            // fall out of the ring here ends the chunk and is backfilled.
            item = self.tail.try_next();
        }
        if !lags.is_empty() {
            self.metrics.delivery_lag.record(&lags);
        }
        let wrote = Instant::now();
        self.pace.wrote(wrote.into_std());
        self.handed_at = Some(wrote);
        if largest > 0 {
            self.frame_size = largest;
        }
        // `pending` counts events before the filter, so a filtered stream's
        // chunk can be sized for far more than it holds; frozen as is, the
        // unused capacity would stay allocated until the client has read
        // the chunk. A copy of a few kilobytes is cheaper than holding that
        // for a thousand slow-ish clients.
        if out.capacity() > 2 * out.len() + 1024 {
            return Some(Bytes::copy_from_slice(&out));
        }
        Some(out.freeze())
    }

    /// Appends one item's frame; false once the stream must end after it.
    /// A live event's delivery lag at `now` goes into `lags`.
    fn push(
        &mut self,
        item: TailItem,
        out: &mut BytesMut,
        now: i64,
        lags: &mut crate::metrics::LagTally,
    ) -> bool {
        match item {
            TailItem::Event(e) => {
                if e.seq > self.live_from {
                    lags.add(now - e.ts);
                }
                match e.frame() {
                    Some(frame) => out.extend_from_slice(frame),
                    None => self.frames.write(&e, out),
                }
            }
            TailItem::Expired => out.extend_from_slice(&resync(
                "cursor_expired",
                self.tail.cursor(),
                "events before this cursor were removed by retention; reload state, then continue",
            )),
            TailItem::FellBehind => {
                out.extend_from_slice(&resync(
                    "slow_consumer",
                    self.tail.cursor(),
                    "this client fell behind the live stream; reconnect with Last-Event-ID to resume",
                ));
                self.ended = true;
                return false;
            }
        }
        true
    }
}

/// Every event, live, resumable.
#[utoipa::path(get, path = "/api/events", tag = "events", params(EventStreamQuery,
    ("Last-Event-ID" = Option<String>, Header, description = "resume after this sequence number")),
    responses((status = 200, content_type = "text/event-stream", body = StreamData,
        description = "Server-sent events: `id: <seq>`, `event: <name>`, `data: <json>`. \
        Each `data:` line is one `StreamData`: a `WireEvent` (its `type` says what its `data` holds), \
        or under `event: resync` a `Resync`. The `event:` name is the event's `type`, except the Workers page contract's \
        run activity: `run.started` is `worker_started`, `run.status` is `worker_status`, \
        `run.completed` is `worker_completed`, and `run.step` is `tool_started` (an action with a tool call) \
        or `tool_completed` (a tool result), else `run.step`."),
              (status = 400, description = "invalid_cursor, unknown_event_type", body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Extension(caller): Extension<crate::auth::Caller>,
    credential: Option<Extension<crate::revocation::Credential>>,
    headers: HeaderMap,
    ApiQuery(mut q): ApiQuery<EventStreamQuery>,
) -> ApiResult<Response> {
    // A worker's stream carries only the events that name it.
    q.worker_id = crate::scope::event_worker(&caller, q.worker_id.take())?;
    let filter = filter_of(&q)?;
    let cursor = start_cursor(&state, &headers, q.after.as_deref()).await?;
    // The stream ends when what let it in stops working (`revocation`).
    let watch = crate::revocation::watch(&state, credential.map(|Extension(c)| c));
    let feed = Feed {
        tail: state.store.tail(cursor, filter),
        frames: state.frames.clone(),
        keepalive: state.settings.sse_keepalive,
        pace: WritePace::new(state.settings.sse_coalesce, state.settings.sse_burst),
        handed_at: None,
        drain_grace: DRAIN_GRACE,
        shutdown: watch.ended().clone(),
        _watch: Some(watch),
        ended: false,
        frame_size: FRAME_GUESS,
        live_from: state.store.published_through(),
        metrics: state.metrics.clone(),
    };
    let chunks = futures::stream::unfold(feed, |mut feed| async move {
        let chunk = feed.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), feed))
    });
    let body = Body::from_stream(chunks);
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response())
}

pub fn router() -> Router<AppState> {
    Router::new().route("/api/events", get(events))
}

#[cfg(test)]
mod tests {
    //! A stream's verdict on falling out of the broadcast ring, against a
    //! real store: a reader that keeps taking what it is given gets every
    //! event once however the server falls behind; only a connection that
    //! held its chunk past the grace is told it is too slow.

    use super::*;
    use shepherd_core::event::{EventRefs, NewEvent};
    use shepherd_store::{Store, StoreConfig, BROADCAST_CAPACITY};

    /// More events than the ring holds, committed in one unit of work and
    /// so broadcast in one go.
    const BURST: usize = BROADCAST_CAPACITY + 1000;

    struct TestStore {
        store: Store,
        dir: std::path::PathBuf,
    }

    impl Drop for TestStore {
        fn drop(&mut self) {
            self.store.close();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    async fn open(name: &str) -> TestStore {
        let dir = std::env::temp_dir().join(format!(
            "shepherd-api-feed-{name}-{}-{}",
            std::process::id(),
            shepherd_store::now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("shepherd.db").display());
        let store = Store::open(&StoreConfig::new(url)).await.unwrap();
        store.render_live_frames(render_frame);
        TestStore { store, dir }
    }

    fn feed(store: &Store, coalesce: Duration, burst: u32, drain_grace: Duration) -> Feed {
        let from = store.published_through();
        Feed {
            tail: store.tail(from, EventFilter::default()),
            frames: Arc::default(),
            keepalive: Duration::from_secs(30),
            pace: WritePace::new(coalesce, burst),
            handed_at: None,
            drain_grace,
            shutdown: CancellationToken::new(),
            _watch: None,
            ended: false,
            frame_size: FRAME_GUESS,
            live_from: from,
            metrics: Arc::default(),
        }
    }

    fn events(n: usize) -> Vec<NewEvent> {
        (0..n)
            .map(|i| {
                NewEvent::new(
                    "test.burst",
                    EventRefs::default(),
                    serde_json::json!({ "i": i }),
                )
            })
            .collect()
    }

    /// What a stream's chunks carried: event ids, and resync reasons.
    #[derive(Default)]
    struct Seen {
        ids: Vec<i64>,
        resyncs: Vec<String>,
    }

    impl Seen {
        fn take(&mut self, chunk: &Bytes) {
            let text = std::str::from_utf8(chunk).unwrap();
            for frame in text.split("\n\n").filter(|f| !f.trim().is_empty()) {
                let field = |name: &str| {
                    frame
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(str::to_owned)
                };
                match field("event: ").as_deref() {
                    Some("resync") => {
                        let data: Value = serde_json::from_str(&field("data: ").unwrap()).unwrap();
                        self.resyncs
                            .push(data["reason"].as_str().unwrap_or("").to_owned());
                    }
                    Some(_) => self.ids.push(field("id: ").unwrap().parse().unwrap()),
                    None => {} // a keep-alive comment
                }
            }
        }

        /// Reads on, promptly, until event `last`, a resync or the end.
        async fn read_through(&mut self, feed: &mut Feed, last: i64) {
            while self.ids.last() < Some(&last) && self.resyncs.is_empty() {
                let chunk = tokio::time::timeout(Duration::from_secs(30), feed.next_chunk())
                    .await
                    .expect("the stream delivers");
                match chunk {
                    Some(c) => self.take(&c),
                    None => break,
                }
            }
        }

        fn assert_every_event_once(&self, first: i64, last: i64) {
            assert!(
                self.resyncs.is_empty(),
                "told to resync: {:?}",
                self.resyncs
            );
            let want: Vec<i64> = (first..=last).collect();
            assert_eq!(self.ids.len(), want.len(), "events delivered");
            assert!(self.ids == want, "a gap, a repeat or a reordering");
        }
    }

    /// Starts `feed` live: its first chunk is an event it received from
    /// the broadcast, not from the log.
    async fn go_live(store: &Store, feed: &mut Feed, seen: &mut Seen) -> i64 {
        let (chunk, seqs) = tokio::join!(feed.next_chunk(), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            store.append_events(events(1)).await.unwrap()
        });
        seen.take(&chunk.unwrap());
        assert_eq!(seen.ids, seqs);
        assert!(!feed.tail.is_backfilling());
        seqs[0]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_is_caught_up_when_the_ring_overflows_while_the_server_coalesces() {
        let t = open("coalesce").await;
        let mut feed = feed(&t.store, Duration::from_secs(3), 1, DRAIN_GRACE);
        let mut seen = Seen::default();
        let first = go_live(&t.store, &mut feed, &mut seen).await;
        // The next event finds the stream just after a write: it waits out
        // the coalescing interval, and the burst overruns the ring meanwhile.
        let burst = {
            let store = t.store.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                store.append_events(events(BURST)).await.unwrap()
            })
        };
        t.store.append_events(events(1)).await.unwrap();
        seen.take(&feed.next_chunk().await.unwrap());
        let last = *burst.await.unwrap().last().unwrap();
        seen.read_through(&mut feed, last).await;
        seen.assert_every_event_once(first, last);
    }

    /// The events of one action, committed a moment apart, each reach a
    /// quiet stream when they come; the one after the burst waits for the
    /// interval. (An hour-long interval: a write that waited would not come.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_quiet_stream_writes_a_burst_at_once_then_coalesces() {
        let t = open("pace").await;
        let mut feed = feed(&t.store, Duration::from_secs(3600), 3, DRAIN_GRACE);
        let mut seen = Seen::default();
        let _ = go_live(&t.store, &mut feed, &mut seen).await;
        for i in 0..2 {
            let seq = t.store.append_events(events(1)).await.unwrap()[0];
            let chunk = tokio::time::timeout(Duration::from_secs(20), feed.next_chunk())
                .await
                .unwrap_or_else(|_| panic!("write {i} of the burst waited for the interval"));
            seen.take(&chunk.unwrap());
            assert_eq!(seen.ids.last(), Some(&seq));
        }
        t.store.append_events(events(1)).await.unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(300), feed.next_chunk()).await;
        assert!(waited.is_err(), "the write after the burst went at once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_larger_than_the_ring_between_chunks_is_caught_up() {
        let t = open("burst").await;
        // The connection takes each chunk at once: however long the burst
        // took to commit, the reader was draining.
        let mut feed = feed(&t.store, Duration::ZERO, 1, Duration::from_secs(3600));
        let mut seen = Seen::default();
        let first = go_live(&t.store, &mut feed, &mut seen).await;
        let last = *t
            .store
            .append_events(events(BURST))
            .await
            .unwrap()
            .last()
            .unwrap();
        seen.read_through(&mut feed, last).await;
        seen.assert_every_event_once(first, last);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_that_held_its_chunk_past_the_grace_is_told_to_resync() {
        let t = open("stalled").await;
        let mut feed = feed(&t.store, Duration::ZERO, 1, DRAIN_GRACE);
        let mut seen = Seen::default();
        let first = go_live(&t.store, &mut feed, &mut seen).await;
        let last = *t
            .store
            .append_events(events(BURST))
            .await
            .unwrap()
            .last()
            .unwrap();
        // The client does not read: the connection holds the chunk.
        tokio::time::sleep(DRAIN_GRACE + Duration::from_millis(100)).await;
        seen.read_through(&mut feed, last).await;
        assert_eq!(seen.resyncs, ["slow_consumer"]);
        assert_eq!(seen.ids, [first], "nothing after what the client had");
        assert!(feed.next_chunk().await.is_none(), "the stream ends");
    }
}
