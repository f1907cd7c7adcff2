//! Reading `GET /api/events`: frames parsed by a maintained SSE parser
//! (`eventsource-stream`, which decodes UTF-8 across chunk boundaries, so a
//! multi-byte character split between two reads arrives whole), over any
//! [`Transport`](crate::Transport). [`Client::event_stream`] is one
//! connection; [`Client::follow`] resumes after every drop with
//! `Last-Event-ID`.
//!
//! A followed stream always starts from a concrete cursor: "from now" is
//! resolved to the log's head before connecting, so a drop before the first
//! event resumes from that head and loses nothing that happened in between.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use eventsource_stream::Eventsource;
use futures::stream::BoxStream;
use futures::StreamExt;
use http::header::{HeaderName, ACCEPT};
use http::{HeaderValue, Method};
use serde::de::DeserializeOwned;
use shepherd_protocol::EventStreamQuery;

use crate::{with_query, Client, ClientError};

/// The frames of one connection, in order; after an error item, nothing.
pub type Frames = BoxStream<'static, Result<Frame, ClientError>>;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The event's sequence number (absent on `resync`).
    pub id: Option<i64>,
    /// The SSE `event:` name.
    pub event: String,
    pub data: String,
}

impl Frame {
    /// The data parsed as a protocol type ([`shepherd_protocol::WireEvent`],
    /// or [`shepherd_protocol::Resync`] for `resync`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ClientError> {
        serde_json::from_str(&self.data).map_err(|e| ClientError::Decode {
            message: format!("event {:?} has unexpected data: {e}", self.event),
        })
    }
}

/// Where a stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// After the log's head as read when following begins.
    Now,
    /// After this cursor.
    After(i64),
}

fn backoff() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build()
}

impl Client {
    /// One connection to the event stream matching `query`, starting after
    /// its `after` (a cursor, or `now`): the frames as they come, until the
    /// server ends the stream or the connection breaks (an error item,
    /// then the end). Nothing is resumed; a refusal (bad filter, bad
    /// token) is the error.
    pub async fn event_stream(&self, query: &EventStreamQuery) -> Result<Frames, ClientError> {
        self.connect(query, None).await
    }

    async fn connect(
        &self,
        query: &EventStreamQuery,
        last_event_id: Option<i64>,
    ) -> Result<Frames, ClientError> {
        let uri = with_query("/api/events", query)?;
        let mut req = self.request(Method::GET, &uri, None)?;
        let headers = req.headers_mut();
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(id) = last_event_id {
            headers.insert(HeaderName::from_static("last-event-id"), id.into());
        }
        let res = self.transport.send(req).await?;
        let status = res.status();
        if !status.is_success() {
            let body = self.read_body(res.into_body()).await?;
            return Err(ClientError::from_response(status, &body));
        }
        let frames = res
            .into_body()
            .eventsource()
            .map(|item| match item {
                Ok(ev) => Ok(Frame {
                    id: shepherd_protocol::parse_cursor(&ev.id),
                    event: ev.event,
                    data: ev.data,
                }),
                Err(e) => Err(ClientError::Unreachable {
                    message: e.to_string(),
                }),
            })
            // The parser would go on after a broken chunk; a reader must not.
            .scan(false, |broken, item| {
                let next = (!*broken).then(|| {
                    *broken = item.is_err();
                    item
                });
                futures::future::ready(next)
            });
        Ok(frames.boxed())
    }

    /// Follows the event stream matching `query` until `on_frame` returns
    /// false. Drops are reported to `on_drop` and resumed after the last
    /// event received; a refusal (bad filter, bad token) ends with an error.
    pub async fn follow(
        &self,
        query: &EventStreamQuery,
        start: Start,
        mut on_frame: impl FnMut(&Frame) -> bool,
        mut on_drop: impl FnMut(&str),
    ) -> Result<(), ClientError> {
        let mut cursor = match start {
            Start::After(c) => c,
            Start::Now => self.head().await?,
        };
        let query = EventStreamQuery {
            after: None,
            ..query.clone()
        };
        let mut delays = backoff();
        loop {
            match self.connect(&query, Some(cursor)).await {
                Ok(mut frames) => {
                    delays = backoff();
                    let mut broke = None;
                    while let Some(item) = frames.next().await {
                        match item {
                            Ok(frame) => {
                                if let Some(i) = frame.id {
                                    cursor = i;
                                }
                                if !on_frame(&frame) {
                                    return Ok(());
                                }
                            }
                            Err(e) => {
                                broke = Some(e.to_string());
                                break;
                            }
                        }
                    }
                    on_drop(&format!(
                        "connection lost ({}); resuming after {cursor}",
                        broke.as_deref().unwrap_or("closed by the server")
                    ));
                }
                Err(e @ (ClientError::Config { .. } | ClientError::Decode { .. })) => {
                    return Err(e)
                }
                Err(e @ ClientError::Api { status, .. }) if (400..500).contains(&status) => {
                    return Err(e)
                }
                Err(ClientError::Api { status, .. }) => {
                    on_drop(&format!("HTTP {status}; resuming after {cursor}"))
                }
                Err(e) => on_drop(&e.to_string()),
            }
            let wait = delays.next().unwrap_or(Duration::from_secs(5));
            tokio::time::sleep(wait).await;
        }
    }
}
