//! Following `GET /api/events`: frames parsed by a maintained SSE parser
//! (`eventsource-stream`, which decodes UTF-8 across chunk boundaries, so a
//! multi-byte character split between two reads arrives whole), resumed
//! after every drop with `Last-Event-ID`.
//!
//! The stream always starts from a concrete cursor: "from now" is resolved
//! to the log's head before connecting, so a drop before the first event
//! resumes from that head and loses nothing that happened in between.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::Method;
use serde::de::DeserializeOwned;
use shepherd_protocol::EventStreamQuery;

use crate::{Client, ClientError};

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
            let req = self
                .request(Method::GET, "/api/events")
                .query(&query)
                .header("accept", "text/event-stream")
                .header("last-event-id", cursor.to_string());
            match req.send().await {
                Ok(res) if res.status().is_success() => {
                    delays = backoff();
                    let mut events = res.bytes_stream().eventsource();
                    let mut broke = None;
                    while let Some(item) = events.next().await {
                        match item {
                            Ok(ev) => {
                                let id = shepherd_protocol::parse_cursor(&ev.id);
                                if let Some(i) = id {
                                    cursor = i;
                                }
                                let frame = Frame {
                                    id,
                                    event: ev.event,
                                    data: ev.data,
                                };
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
                Ok(res) if res.status().is_client_error() => {
                    let status = res.status();
                    let body = res.bytes().await.unwrap_or_default();
                    return Err(ClientError::from_response(status, &body));
                }
                Ok(res) => on_drop(&format!(
                    "HTTP {}; resuming after {cursor}",
                    res.status().as_u16()
                )),
                Err(e) => on_drop(&ClientError::unreachable(self.base(), &e).to_string()),
            }
            let wait = delays.next().unwrap_or(Duration::from_secs(5));
            tokio::time::sleep(wait).await;
        }
    }
}
