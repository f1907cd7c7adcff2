//! A client over a transport of the caller's own (as `/mcp` plugs in the
//! server's router): requests arrive as origin-form `http` requests with the
//! credentials, answers parse into the protocol's types with their cursor,
//! refusals keep the API's code, and the event stream is parsed here, in
//! the client, whatever carries its bytes.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::StreamExt;
use http::header::AUTHORIZATION;
use http::HeaderValue;
use shepherd_client::transport::{Body, BodyError};
use shepherd_client::{Client, ClientError, Transport};
use shepherd_protocol as p;

/// What a canned answer is made of: status, headers, body chunks.
type Answer = (
    u16,
    Vec<(&'static str, &'static str)>,
    Vec<Result<Bytes, BodyError>>,
);

/// Answers every request with the next canned answer, keeping the requests.
#[derive(Clone, Default)]
struct Canned {
    answers: Arc<Mutex<Vec<Answer>>>,
    seen: Arc<Mutex<Vec<http::Request<Bytes>>>>,
}

impl Canned {
    fn answer(
        self,
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        chunks: &[&'static [u8]],
    ) -> Self {
        let body = chunks.iter().map(|c| Ok(Bytes::from_static(c))).collect();
        self.answers.lock().unwrap().push((status, headers, body));
        self
    }
}

impl Transport for Canned {
    fn send(
        &self,
        request: http::Request<Bytes>,
    ) -> BoxFuture<'_, Result<http::Response<Body>, ClientError>> {
        Box::pin(async move {
            self.seen.lock().unwrap().push(request);
            let (status, headers, chunks) = self.answers.lock().unwrap().remove(0);
            let mut res = http::Response::builder().status(status);
            for (k, v) in headers {
                res = res.header(k, v);
            }
            Ok(res.body(futures::stream::iter(chunks).boxed()).unwrap())
        })
    }

    fn base(&self) -> &str {
        "canned"
    }
}

fn task_json() -> &'static [u8] {
    br#"{"vtid":"VTID-1","title":"t","spec":"","priority":0,"capabilities":[],"agent_id":null,
    "channel_id":null,"workflow":"simple","state":"pending","spec_snapshot_id":null,
    "dispatched_at":null,"builder_worker_id":null,"cancel_requested_at":null,"attempts":0,
    "created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z",
    "claims":[],"events":[]}"#
}

#[tokio::test]
async fn reads_carry_the_token_and_answer_with_the_cursor() {
    let canned = Canned::default().answer(
        200,
        vec![("x-shepherd-cursor", "42")],
        &[&task_json()[..20], &task_json()[20..]],
    );
    let c = Client::with_transport(canned.clone(), Some("secret".into()));
    let (detail, cursor) = c.task("VTID 1/x").await.unwrap();
    assert_eq!((detail.task.vtid.as_str(), cursor), ("VTID-1", 42));
    let seen = canned.seen.lock().unwrap();
    assert_eq!(seen[0].uri(), "/api/v1/tasks/VTID%201%2Fx");
    assert_eq!(seen[0].headers()[AUTHORIZATION], "Bearer secret");
}

#[tokio::test]
async fn queries_come_from_the_protocol_types_and_headers_pass_on_as_they_are() {
    let canned = Canned::default().answer(200, vec![], &[br#"{"runs":[],"total":0}"#]);
    let c = Client::with_transport(canned.clone(), Some("ignored".into()))
        .with_authorization(Some(HeaderValue::from_static("Bearer forwarded")));
    let q = p::RunsQuery {
        vtid: Some("a b&c".into()),
        limit: Some(1),
        ..Default::default()
    };
    assert_eq!(c.runs(&q).await.unwrap().total, 0);
    let seen = canned.seen.lock().unwrap();
    assert_eq!(seen[0].uri(), "/api/v1/runs?vtid=a+b%26c&limit=1");
    assert_eq!(seen[0].headers()[AUTHORIZATION], "Bearer forwarded");
}

#[tokio::test]
async fn refusals_keep_the_apis_code_and_status() {
    let canned = Canned::default().answer(
        403,
        vec![],
        &[br#"{"error":{"code":"operator_only","message":"no"}}"#],
    );
    let e = Client::with_transport(canned, None)
        .sessions()
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message(), e.status()),
        ("operator_only", "no", Some(403))
    );
}

#[tokio::test]
async fn event_frames_are_parsed_across_chunks_and_end_at_a_break() {
    let canned = Canned::default().answer(
        200,
        vec![("content-type", "text/event-stream")],
        &[
            b"id: 7\nevent: run.step\nda",
            b"ta: {\"a\":\"\xc3",
            b"\xa9\"}\n\n: keepalive\n\n",
            b"id: 8\ndata: x\ndata: y\n\n",
        ],
    );
    {
        // The connection breaks after the frames above.
        let mut answers = canned.answers.lock().unwrap();
        answers[0].2.push(Err("reset".into()));
        answers[0]
            .2
            .push(Ok(Bytes::from_static(b"id: 9\ndata: z\n\n")));
    }
    let c = Client::with_transport(canned.clone(), None);
    let q = p::EventStreamQuery {
        run_id: Some("r1".into()),
        after: Some("5".into()),
        ..Default::default()
    };
    let frames: Vec<_> = c.event_stream(&q).await.unwrap().collect().await;
    assert_eq!(frames.len(), 3, "{frames:?}");
    let first = frames[0].as_ref().unwrap();
    assert_eq!(
        (first.id, first.event.as_str(), first.data.as_str()),
        (Some(7), "run.step", "{\"a\":\"é\"}")
    );
    let second = frames[1].as_ref().unwrap();
    assert_eq!((second.id, second.data.as_str()), (Some(8), "x\ny"));
    assert!(matches!(frames[2], Err(ClientError::Unreachable { .. })));
    let seen = canned.seen.lock().unwrap();
    assert_eq!(seen[0].uri(), "/api/events?after=5&run_id=r1");
    assert_eq!(seen[0].headers()["accept"], "text/event-stream");
}

#[tokio::test]
async fn a_refused_stream_is_an_error_with_the_apis_code() {
    let canned = Canned::default().answer(
        400,
        vec![],
        &[br#"{"error":{"code":"invalid_cursor","message":"bad"}}"#],
    );
    let q = p::EventStreamQuery::default();
    let e = Client::with_transport(canned, None)
        .event_stream(&q)
        .await
        .err()
        .unwrap();
    assert_eq!(e.code(), "invalid_cursor");
}

#[test]
fn a_token_no_header_can_carry_is_refused_when_the_client_is_made() {
    let e = Client::new("http://127.0.0.1:1", Some("bad\ntoken".into())).unwrap_err();
    assert_eq!(e.code(), "bad_config");
}
