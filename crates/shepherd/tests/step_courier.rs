//! The runner's step courier against a server without step batches (an
//! older one): it falls back to each run's own `POST /api/v1/runs/{id}/steps`
//! and answers every run as that route does, refusals included.

mod common;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::{Env, Kind, Server, OPERATOR};
use serde_json::{json, Value};
use shepherd_protocol::{ActionContent, AppendSteps, TranscriptStep};
use shepherd_runner::step_courier::StepCourier;

/// Forwards every request to the real server, except the step batch route,
/// which it answers as a server that lacks it does.
async fn older_server(State(base): State<String>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    if parts.uri.path() == "/api/v1/worker/orchestrator/steps" {
        let body = json!({ "error": { "code": "route_not_found", "message": "no such route" } });
        return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    }
    let bytes: Bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let mut headers = HeaderMap::new();
    for name in ["authorization", "content-type"] {
        if let Some(v) = parts.headers.get(name) {
            headers.insert(name, v.clone());
        }
    }
    let res = reqwest::Client::new()
        .request(parts.method, format!("{base}{}", parts.uri))
        .headers(headers)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let body = res.bytes().await.unwrap();
    (status, [("content-type", "application/json")], body).into_response()
}

#[tokio::test]
async fn the_courier_falls_back_to_each_runs_own_post_on_an_older_server() {
    let mut env = Env::new(Kind::Sqlite);
    env.set("SHEPHERD_AUTH_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            Some(OPERATOR),
            json!({ "worker_id": "old", "max_concurrent": 2 }),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let tok = b["worker_token"].as_str().unwrap().to_owned();
    for vtid in ["O-1", "O-2"] {
        let (st, b) = s
            .post(
                "/api/v1/tasks",
                Some(OPERATOR),
                json!({ "vtid": vtid, "title": vtid }),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    let (st, b) = s
        .post(
            "/api/v1/worker/orchestrator/tasks/claim",
            Some(&tok),
            json!({ "max": 2 }),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let claims: Vec<Value> = b["claims"].as_array().unwrap().clone();

    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_base = format!("http://{}", proxy.local_addr().unwrap());
    let app = axum::Router::new()
        .fallback(older_server)
        .with_state(s.base.clone());
    tokio::spawn(async move { axum::serve(proxy, app).await.unwrap() });

    let client = shepherd_client::Client::new(&proxy_base, Some(tok)).unwrap();
    let courier = StepCourier::start(client, "old".into());
    let step = |t: &str| TranscriptStep::Action {
        content: vec![ActionContent::Text { text: t.into() }],
    };
    let run = |i: usize| claims[i]["run_id"].as_str().unwrap().to_owned();
    let token = |i: usize| claims[i]["claim_token"].as_str().unwrap().to_owned();
    let send = |i: usize, token: String, start: i64, t: &'static str| {
        let (courier, run) = (courier.clone(), run(i));
        async move {
            let body = AppendSteps {
                claim_token: token,
                start_index: start,
                steps: vec![step(t)],
            };
            courier.send(&run, body).await
        }
    };
    // Sent together, so that the first request carries more than one run.
    let (a, b, c) = tokio::join!(
        send(0, token(0), 0, "a0"),
        send(1, token(1), 0, "b0"),
        send(1, "sct_wrong".into(), 1, "b1"),
    );
    assert_eq!(a.unwrap().next_index, 1);
    assert_eq!(b.unwrap().next_index, 1);
    let refused = c.unwrap_err();
    assert_eq!(refused.code(), "claim_stale", "{refused}");
    // Later sends go straight to each run's own route.
    assert_eq!(send(0, token(0), 1, "a1").await.unwrap().next_index, 2);
    for (i, want) in [(0, vec!["a0", "a1"]), (1, vec!["b0"])] {
        let (st, b) = s
            .get(&format!("/api/v1/runs/{}/steps", run(i)), Some(OPERATOR))
            .await;
        assert_eq!(st, 200, "{b}");
        let texts: Vec<&str> = b["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|st| st["step"]["content"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, want, "{b}");
    }
    s.stop().await;
}
