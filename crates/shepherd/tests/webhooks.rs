//! Webhooks end to end, with a real HTTP receiver on 127.0.0.1: subscribing
//! and its unhappy paths, delivery in order with retries after 500s (the
//! same `webhook-id` each time), a slow and a dead endpoint that never slow
//! the server, giving up after the retry window and recovering, the
//! configuration file's `[[webhooks]]`, and a `kill -9` of the server that
//! loses nothing. Signatures are checked with the third-party verifier in
//! `scripts/test.d/webhooks.sh`, not here. The receivers listen on
//! loopback, which a subscription reaches only with `allow_private`; the
//! address rule itself (loopback, a name resolving to it, link-local, the
//! server's own routes) and who reads delivery errors are tested last.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use shepherd_protocol as p;

use common::{wait_for, Env, Kind, Server};

const WAIT: Duration = Duration::from_secs(30);

/// One POST the receiver got.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: Value,
    /// What the receiver answered.
    status: u16,
}

#[derive(Default)]
struct Behaviour {
    /// Answer 500 to this many more requests.
    fail: usize,
    /// Hold every answer this long.
    delay: Duration,
}

#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    behaviour: Arc<Mutex<Behaviour>>,
}

impl Receiver {
    /// Serves on 127.0.0.1; returns the URL deliveries go to.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn fail_next(&self, n: usize) {
        self.behaviour.lock().unwrap().fail = n;
    }

    fn delay(&self, d: Duration) {
        self.behaviour.lock().unwrap().delay = d;
    }

    fn all(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The bodies it answered 2xx to, in arrival order.
    fn delivered(&self) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|r| r.status == 200)
            .map(|r| r.body)
            .collect()
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: String) -> StatusCode {
    let (fail, delay) = {
        let mut b = r.behaviour.lock().unwrap();
        let fail = b.fail > 0;
        if fail {
            b.fail -= 1;
        }
        (fail, b.delay)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let status = if fail { 500 } else { 200 };
    r.got.lock().unwrap().push(Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body: serde_json::from_str(&body).unwrap_or(Value::Null),
        status,
    });
    StatusCode::from_u16(status).unwrap()
}

/// An environment whose retries come fast enough for a test.
fn quick_env(kind: Kind) -> Env {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_WEBHOOK_RETRY_BASE", "200ms")
        .set("SHEPHERD_WEBHOOK_TIMEOUT", "1s");
    env
}

/// Subscribes (on a server without a token). The receivers here listen on
/// 127.0.0.1, so `allow_private` is true unless the body says otherwise.
async fn subscribe(s: &Server, mut body: Value) -> p::CreatedWebhook {
    if body.get("allow_private").is_none() {
        body["allow_private"] = json!(true);
    }
    let (st, made) = s.post("/api/v1/webhooks", None, body).await;
    assert_eq!(st, 201, "{made}");
    serde_json::from_value(made).unwrap()
}

async fn create_task(s: &Server, vtid: &str) {
    let (st, b) = s
        .post("/api/v1/tasks", None, common::task(vtid, "simple"))
        .await;
    assert_eq!(st, 201, "{b}");
}

/// The vtids of the `task.created` deliveries, in order.
fn created_vtids(bodies: &[Value]) -> Vec<String> {
    bodies
        .iter()
        .filter(|b| b["type"] == "task.created")
        .map(|b| b["data"]["task_id"].as_str().unwrap_or("?").to_owned())
        .collect()
}

async fn deliveries(s: &Server, id: &str) -> Vec<p::WebhookDelivery> {
    let (st, list): (u16, p::WebhookDeliveryList) = s
        .get_as(&format!("/api/v1/webhooks/{id}/deliveries"), None)
        .await;
    assert_eq!(st, 200);
    list.deliveries
}

e2e!(subscribing_and_its_unhappy_paths, |kind| async move {
    let env = quick_env(kind);
    let s = Server::start(&env).await;
    let made = subscribe(&s, json!({ "url": "http://127.0.0.1:9/hook" })).await;
    assert!(made.secret.starts_with("whsec_"), "{}", made.secret);
    assert_eq!(
        made.webhook.events,
        [
            "input.requested",
            "run.stuck",
            "run.failed",
            "task.finished"
        ]
    );
    assert_eq!(
        (made.webhook.format.as_str(), made.webhook.state.as_str()),
        ("standard", "active")
    );
    // The secret is shown once: the listing never carries it.
    let (st, listed) = s.get("/api/v1/webhooks", None).await;
    assert_eq!(st, 200);
    assert_eq!(listed["webhooks"][0]["id"], made.webhook.id.as_str());
    assert!(!listed.to_string().contains(&made.secret));

    for (body, status, code) in [
        (
            json!({ "url": "ftp://example.com/x" }),
            422,
            "invalid_webhook_url",
        ),
        (
            json!({ "url": "https://u:p@example.com/" }),
            422,
            "invalid_webhook_url",
        ),
        (
            json!({ "url": "http://x/h", "events": [] }),
            422,
            "invalid_webhook_events",
        ),
        (
            json!({ "url": "http://x/h", "events": ["run.*.x"] }),
            422,
            "invalid_webhook_events",
        ),
        (
            json!({ "url": "http://x/h", "secret": "hunter2" }),
            422,
            "invalid_webhook_secret",
        ),
        (
            json!({ "url": "http://x/h", "format": "teams" }),
            422,
            "invalid_webhook_format",
        ),
        (
            json!({ "url": "http://x/h", "extra": 1 }),
            422,
            "invalid_body",
        ),
        (json!({ "events": ["run.*"] }), 422, "invalid_body"),
    ] {
        let (st, b) = s.post("/api/v1/webhooks", None, body.clone()).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {b}"
        );
    }
    // A given secret is kept as given.
    let secret = format!("whsec_{}", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let own = subscribe(&s, json!({ "url": "https://example.com/h", "secret": secret, "format": "slack", "events": ["run.*"] })).await;
    assert_eq!(own.secret, secret);

    let (st, b) = s.get("/api/v1/webhooks/wh_nope", None).await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (404, Some("webhook_not_found"))
    );
    let (st, b) = s.get("/api/v1/webhooks/wh_nope/deliveries", None).await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (404, Some("webhook_not_found"))
    );
    let (st, b) = s
        .get(
            &format!("/api/v1/webhooks/{}/deliveries?limit=0", own.webhook.id),
            None,
        )
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (400, Some("invalid_limit"))
    );
    let (st, _) = s
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/webhooks/{}", own.webhook.id),
            None,
            None,
        )
        .await;
    assert_eq!(st, 204);
    let (st, b) = s
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/webhooks/{}", own.webhook.id),
            None,
            None,
        )
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (404, Some("webhook_not_found"))
    );

    // Only the operator subscribes: a worker's token is refused.
    let (st, reg) = s
        .post(
            "/api/v1/worker/orchestrator/register",
            None,
            json!({ "worker_id": "w-hooks" }),
        )
        .await;
    assert_eq!(st, 200, "{reg}");
    let worker_token = reg["worker_token"].as_str().unwrap().to_owned();
    let (st, b) = s
        .post(
            "/api/v1/webhooks",
            Some(&worker_token),
            json!({ "url": "http://127.0.0.1:9/x" }),
        )
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (403, Some("operator_only")),
        "{b}"
    );
    let (st, _) = s.get("/api/v1/webhooks", Some(&worker_token)).await;
    assert_eq!(st, 403);
    s.stop().await;
});

e2e!(
    events_arrive_in_order_and_500s_are_retried,
    |kind| async move {
        let env = quick_env(kind);
        let s = Server::start(&env).await;
        let receiver = Receiver::default();
        let url = receiver.start().await;
        receiver.fail_next(2);
        let made = subscribe(
            &s,
            json!({ "url": url, "events": ["task.created", "task.finished"] }),
        )
        .await;
        for vtid in ["HOOK-A", "HOOK-B", "HOOK-C"] {
            create_task(&s, vtid).await;
        }
        wait_for("three tasks delivered", WAIT, || async {
            (created_vtids(&receiver.delivered()).len() >= 3).then_some(())
        })
        .await;
        assert_eq!(
            created_vtids(&receiver.delivered()),
            ["HOOK-A", "HOOK-B", "HOOK-C"]
        );
        let all = receiver.all();
        // The first event was tried three times with one webhook-id, and
        // nothing after it was sent before it went through.
        assert_eq!(all[0].status, 500);
        assert_eq!(all[1].status, 500);
        assert!(all[..3].iter().all(|r| r.id == all[0].id), "{all:?}");
        assert!(all[0].id.starts_with("msg_"), "{}", all[0].id);
        assert!(all[0].signature.starts_with("v1,"), "{}", all[0].signature);
        assert!(
            all[0].timestamp.parse::<i64>().is_ok(),
            "{}",
            all[0].timestamp
        );
        let body = &all[2].body;
        assert_eq!(body["type"], "task.created");
        assert!(
            body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{body}"
        );
        assert!(body["data"]["seq"].as_i64().is_some(), "{body}");

        // Attempts are visible, newest first.
        let attempts = deliveries(&s, &made.webhook.id).await;
        let first_seq = body["data"]["seq"].as_i64().unwrap();
        let of_first: Vec<_> = attempts.iter().filter(|d| d.seq == first_seq).collect();
        assert_eq!(
            of_first
                .iter()
                .map(|d| (d.attempt, d.outcome.as_str(), d.http_status))
                .collect::<Vec<_>>(),
            [
                (3, "delivered", Some(200)),
                (2, "retrying", Some(500)),
                (1, "retrying", Some(500))
            ],
            "{attempts:?}"
        );
        assert!(of_first[1].next_attempt_at.is_some());
        // The cursor stands at the last event delivered.
        let last_seq = receiver.delivered().last().unwrap()["data"]["seq"]
            .as_i64()
            .unwrap();
        let (_, hook): (u16, p::Webhook) = s
            .get_as(&format!("/api/v1/webhooks/{}", made.webhook.id), None)
            .await;
        assert!(hook.cursor >= last_seq, "{hook:?}");

        // A derived name: a cancelled task has finished.
        let (st, b) = s.post("/api/v1/tasks/HOOK-B/cancel", None, json!({})).await;
        assert!(st == 200 || st == 202, "{b}");
        wait_for("task.finished", WAIT, || async {
            receiver
                .delivered()
                .into_iter()
                .find(|b| b["type"] == "task.finished")
        })
        .await;
        let finished: Vec<_> = receiver
            .delivered()
            .into_iter()
            .filter(|b| b["type"] == "task.finished")
            .collect();
        assert_eq!(finished.len(), 1, "{finished:?}");
        assert_eq!(finished[0]["data"]["task_id"], "HOOK-B");
        assert_eq!(finished[0]["data"]["to"], "cancelled");
        s.stop().await;
    }
);

e2e!(
    slow_and_dead_endpoints_never_slow_the_server,
    |kind| async move {
        let mut env = quick_env(kind);
        // Give up after two seconds of failing, to see it happen.
        env.set("SHEPHERD_WEBHOOK_RETRY_FOR", "2s");
        let s = Server::start(&env).await;
        let slow = Receiver::default();
        let slow_url = slow.start().await;
        slow.delay(Duration::from_secs(30));
        // Nothing listens there.
        let dead_url = format!("http://127.0.0.1:{}/hook", common::free_port());
        let slow_hook = subscribe(&s, json!({ "url": slow_url, "events": ["task.*"] })).await;
        let dead_hook = subscribe(&s, json!({ "url": dead_url, "events": ["task.*"] })).await;
        let healthy = Receiver::default();
        let healthy_url = healthy.start().await;
        subscribe(
            &s,
            json!({ "url": healthy_url, "events": ["task.created"] }),
        )
        .await;

        // The API answers as usual while deliveries hang and fail.
        let started = Instant::now();
        for i in 0..10 {
            create_task(&s, &format!("SLOW-{i}")).await;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "ten task creations took {:?} while an endpoint hung",
            started.elapsed()
        );
        // The healthy subscription is not held up by the others.
        wait_for("the healthy receiver has all ten", WAIT, || async {
            (created_vtids(&healthy.delivered()).len() == 10).then_some(())
        })
        .await;

        let reason = |d: &p::WebhookDelivery| d.error.clone().unwrap_or_default();
        let timed_out = wait_for("a timed-out attempt", WAIT, || async {
            deliveries(&s, &slow_hook.webhook.id)
                .await
                .into_iter()
                .find(|d| d.outcome != "delivered")
        })
        .await;
        assert!(
            reason(&timed_out).contains("no answer within"),
            "{timed_out:?}"
        );
        assert_eq!(timed_out.http_status, None);
        let refused = wait_for("a refused attempt", WAIT, || async {
            deliveries(&s, &dead_hook.webhook.id)
                .await
                .into_iter()
                .next()
        })
        .await;
        assert!(reason(&refused).contains("cannot connect"), "{refused:?}");

        // Past the retry window, the event is given up and the subscription
        // marked failing; the cursor moves on to the next event.
        let failed = wait_for("a given-up delivery", WAIT, || async {
            deliveries(&s, &dead_hook.webhook.id)
                .await
                .into_iter()
                .find(|d| d.outcome == "failed")
        })
        .await;
        assert!(failed.attempt >= 2, "{failed:?}");
        let (_, dead): (u16, p::Webhook) = s
            .get_as(&format!("/api/v1/webhooks/{}", dead_hook.webhook.id), None)
            .await;
        assert_eq!(dead.state, "failing");
        assert!(dead.cursor >= failed.seq);
        s.stop().await;
    }
);

/// A failing subscription that gets through again is active again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_subscription_recovers() {
    let mut env = quick_env(Kind::Sqlite);
    env.set("SHEPHERD_WEBHOOK_RETRY_FOR", "1s");
    let s = Server::start(&env).await;
    let receiver = Receiver::default();
    let url = receiver.start().await;
    receiver.fail_next(1000);
    let made = subscribe(&s, json!({ "url": url, "events": ["task.created"] })).await;
    create_task(&s, "REC-1").await;
    let failed = wait_for("given up", WAIT, || async {
        let (_, hook): (u16, p::Webhook) = s
            .get_as(&format!("/api/v1/webhooks/{}", made.webhook.id), None)
            .await;
        (hook.state == "failing").then_some(hook)
    })
    .await;
    receiver.fail_next(0);
    create_task(&s, "REC-2").await;
    wait_for("active again", WAIT, || async {
        let (_, hook): (u16, p::Webhook) = s
            .get_as(&format!("/api/v1/webhooks/{}", made.webhook.id), None)
            .await;
        (hook.state == "active" && hook.cursor > failed.cursor).then_some(())
    })
    .await;
    assert_eq!(created_vtids(&receiver.delivered()), ["REC-2"]);
    s.stop().await;
}

/// `[[webhooks]]` in shepherd.toml: made at start, refused by DELETE,
/// and a broken table is a start-up error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_files_webhooks() {
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let mut env = quick_env(Kind::Sqlite);
    env.with_config_file(&format!(
        "[[webhooks]]\nurl = \"{url}\"\nevents = [\"task.created\"]\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nallow_private = true\n"
    ));
    let s = Server::start(&env).await;
    let (_, list): (u16, p::WebhookList) = s.get_as("/api/v1/webhooks", None).await;
    assert_eq!(list.webhooks.len(), 1);
    let hook = &list.webhooks[0];
    assert_eq!(
        (hook.source.as_str(), hook.url.as_str(), hook.allow_private),
        ("config", url.as_str(), true)
    );
    let (st, b) = s
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/webhooks/{}", hook.id),
            None,
            None,
        )
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (409, Some("webhook_from_config"))
    );
    create_task(&s, "CONF-1").await;
    wait_for("delivered", WAIT, || async {
        (created_vtids(&receiver.delivered()) == ["CONF-1"]).then_some(())
    })
    .await;
    s.stop().await;

    // Started again with the same file: the same subscription, not a second.
    let s = Server::start(&env).await;
    let (_, again): (u16, p::WebhookList) = s.get_as("/api/v1/webhooks", None).await;
    assert_eq!(again.webhooks.len(), 1);
    assert_eq!(again.webhooks[0].id, hook.id);
    s.stop().await;

    let mut bad = Env::new(Kind::Sqlite);
    bad.with_config_file("[[webhooks]]\nurl = \"http://127.0.0.1:9/h\"\n");
    let vars = bad.vars.clone();
    let err = shepherd::config::Config::load_with(None, &move |k| vars.get(k).cloned())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("webhooks[0]") && err.contains("secret"),
        "{err}"
    );
}

/// The server is killed (`kill -9`) while events wait for an endpoint that
/// is down; started again, it delivers every one of them, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_across_kill_9() {
    let env = quick_env(Kind::Sqlite);
    let receiver = Receiver::default();
    let url = receiver.start().await;
    receiver.fail_next(usize::MAX);
    let mut s = Server::spawn(&env).await;
    subscribe(&s, json!({ "url": url, "events": ["task.created"] })).await;
    let vtids: Vec<String> = (0..5).map(|i| format!("KILL-{i}")).collect();
    for vtid in &vtids {
        create_task(&s, vtid).await;
    }
    wait_for("a failed attempt", WAIT, || async {
        (!receiver.all().is_empty()).then_some(())
    })
    .await;
    let child = s.child.take().expect("a spawned server");
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.pid(), libc::SIGKILL);
    }
    drop(child);
    drop(s);
    receiver.fail_next(0);
    let s = Server::spawn(&env).await;
    wait_for("all five delivered", WAIT, || async {
        (created_vtids(&receiver.delivered()).len() >= 5).then_some(())
    })
    .await;
    // In order, each once since the receiver took them (a repeat would
    // carry the same webhook-id).
    assert_eq!(created_vtids(&receiver.delivered()), vtids);
    s.stop().await;
}

/// Runs the real `shepherd` binary against `s`; returns its exit status,
/// stdout and stderr.
fn cli(s: &Server, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(args)
        .args(["--server", &s.base])
        .env_remove("SHEPHERD_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `shepherd webhooks add|list|deliveries|rm`, and a refusal told plainly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_webhooks() {
    let env = quick_env(Kind::Sqlite);
    let s = Server::start(&env).await;
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let (ok, out, err) = cli(
        &s,
        &[
            "webhooks",
            "add",
            &url,
            "--event",
            "task.created",
            "--allow-private",
        ],
    );
    assert!(ok, "{out}{err}");
    let id = out.split_whitespace().next().unwrap().to_owned();
    assert!(id.starts_with("wh_"), "{out}");
    assert!(out.contains("secret: whsec_"), "{out}");

    let (ok, out, _) = cli(&s, &["webhooks", "list"]);
    assert!(ok);
    assert!(
        out.contains(&id) && out.contains("task.created") && out.contains("active"),
        "{out}"
    );

    create_task(&s, "CLI-1").await;
    wait_for("delivered", WAIT, || async {
        (!receiver.delivered().is_empty()).then_some(())
    })
    .await;
    let (ok, out, _) = cli(&s, &["webhooks", "deliveries", &id]);
    assert!(ok);
    assert!(
        out.contains("task.created") && out.contains("delivered") && out.contains("200"),
        "{out}"
    );
    let (ok, out, _) = cli(&s, &["webhooks", "deliveries", &id, "-o", "json"]);
    assert!(ok);
    let parsed: p::WebhookDeliveryList = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed.deliveries[0].outcome, "delivered");

    let (ok, _, err) = cli(&s, &["webhooks", "add", "ftp://nope"]);
    assert!(!ok);
    assert!(err.contains("invalid_webhook_url"), "{err}");

    let (ok, out, err) = cli(&s, &["webhooks", "rm", &id]);
    assert!(ok, "{out}{err}");
    let (ok, out, _) = cli(&s, &["webhooks", "list"]);
    assert!(ok);
    assert!(out.contains("no webhooks"), "{out}");
    s.stop().await;
}

/// The newest attempt at one subscription that has an error, as an admin
/// (here: the server without a token) reads it.
async fn first_error(s: &Server, id: &str) -> p::WebhookDelivery {
    wait_for("a failed attempt", WAIT, || async {
        deliveries(s, id)
            .await
            .into_iter()
            .find(|d| d.error.is_some())
    })
    .await
}

// Deliveries connect to checked addresses only: loopback (by address or
// by a name that resolves to it) needs `allow_private`, link-local (the
// cloud metadata address) is refused even with it, and no connection is
// made to a refused one. The server's own routes refuse its deliveries
// even with `allow_private`: on a server without a token they would act
// as the operator.
e2e!(deliveries_reach_only_allowed_addresses, |kind| async move {
    let env = quick_env(kind);
    let s = Server::start(&env).await;
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    let by_address = subscribe(
        &s,
        json!({ "url": url, "events": ["task.created"], "allow_private": false }),
    )
    .await;
    assert!(!by_address.webhook.allow_private);
    let by_name = subscribe(
        &s,
        json!({ "url": format!("http://localhost:{port}/hook"), "events": ["task.created"], "allow_private": false }),
    )
    .await;
    let metadata = subscribe(
        &s,
        json!({ "url": "http://169.254.169.254/latest/meta-data/", "events": ["task.created"], "allow_private": true }),
    )
    .await;
    let victim = "VICTIM-1";
    create_task(&s, victim).await;
    // Aimed at the server's own route, allowed to reach loopback: without
    // the rule the delivery reaches the handler as the operator.
    let own = subscribe(
        &s,
        json!({ "url": format!("{}/api/v1/tasks/{victim}/cancel", s.base), "events": ["task.created"], "allow_private": true }),
    )
    .await;
    create_task(&s, "TRIGGER-1").await;

    let refused = first_error(&s, &by_address.webhook.id).await;
    let error = refused.error.unwrap();
    assert!(
        error.contains("127.0.0.1")
            && error.contains("loopback")
            && error.contains("allow_private"),
        "{error}"
    );
    assert_eq!(refused.http_status, None);
    let refused = first_error(&s, &by_name.webhook.id).await;
    let error = refused.error.unwrap();
    assert!(
        error.contains("localhost resolves to") && error.contains("loopback"),
        "{error}"
    );
    let refused = first_error(&s, &metadata.webhook.id).await;
    let error = refused.error.unwrap();
    assert!(
        error.contains("169.254.169.254") && error.contains("link-local"),
        "{error}"
    );
    let own_attempt = first_error(&s, &own.webhook.id).await;
    assert_eq!(own_attempt.http_status, Some(403), "{own_attempt:?}");
    let (_, task) = s.get(&format!("/api/v1/tasks/{victim}"), None).await;
    assert_ne!(task["state"], "cancelled", "{task}");
    // No connection reached the receiver.
    assert!(receiver.all().is_empty(), "{:?}", receiver.all());
    // The same rule for any client that sends a delivery's headers.
    for (name, value) in [
        ("webhook-id", "msg_x"),
        ("user-agent", "Shepherd-Webhooks/0.1.0"),
    ] {
        let res = reqwest::Client::new()
            .get(format!("{}/api/v1/tasks", s.base))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 403, "{name}");
        let body: Value = res.json().await.unwrap();
        assert_eq!(body["error"]["code"], "webhook_request_refused", "{body}");
    }
    s.stop().await;
});

/// Why a delivery failed says which addresses and ports answer from the
/// server's side: admins read it, viewers and operators see the outcome
/// only. Only an admin lets a subscription reach private addresses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_errors_are_for_admins() {
    use common::OPERATOR;
    let mut env = quick_env(Kind::Sqlite);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    let s = Server::start(&env).await;
    let mut tokens = Vec::new();
    for (name, role) in [("vera", "viewer"), ("otto", "operator")] {
        let (st, b) = s
            .post(
                "/api/v1/users",
                Some(OPERATOR),
                json!({ "name": name, "role": role }),
            )
            .await;
        assert_eq!(st, 201, "{b}");
        let (st, t) = s
            .post(
                "/api/v1/tokens",
                Some(OPERATOR),
                json!({ "name": "t", "user": name }),
            )
            .await;
        assert_eq!(st, 201, "{t}");
        tokens.push(t["token"].as_str().unwrap().to_owned());
    }
    let dead = format!("http://127.0.0.1:{}/hook", common::free_port());
    let (st, made) = s
        .post(
            "/api/v1/webhooks",
            Some(OPERATOR),
            json!({ "url": dead, "events": ["task.created"], "allow_private": true }),
        )
        .await;
    assert_eq!(st, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/webhooks/{id}/deliveries");
    let (st, b) = s
        .post(
            "/api/v1/tasks",
            Some(OPERATOR),
            common::task("E-1", "simple"),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let admin_view = wait_for("a failed attempt", WAIT, || async {
        let (_, list): (u16, p::WebhookDeliveryList) = s.get_as(&path, Some(OPERATOR)).await;
        list.deliveries.into_iter().find(|d| d.error.is_some())
    })
    .await;
    assert!(
        admin_view
            .error
            .as_deref()
            .unwrap()
            .contains("cannot connect"),
        "{admin_view:?}"
    );
    for token in &tokens {
        let (st, list): (u16, p::WebhookDeliveryList) = s.get_as(&path, Some(token)).await;
        assert_eq!(st, 200);
        assert!(!list.deliveries.is_empty());
        assert!(
            list.deliveries.iter().all(|d| d.error.is_none()),
            "{:?}",
            list.deliveries
        );
    }
    // An operator may subscribe, but not to private addresses.
    let (st, b) = s
        .post(
            "/api/v1/webhooks",
            Some(&tokens[1]),
            json!({ "url": dead, "allow_private": true }),
        )
        .await;
    assert_eq!(
        (st, b["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{b}"
    );
    let (st, b) = s
        .post(
            "/api/v1/webhooks",
            Some(&tokens[1]),
            json!({ "url": "https://hooks.example.com/x" }),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    s.stop().await;
}
