//! Webhook subscriptions on both databases: created at the log's head,
//! listed, read, deleted (with a 404 after), a subscription from the
//! configuration file refused deletion; the delivery loop's leases and
//! their fencing, attempts and the cursor; the configuration sync.

mod common;

use serde_json::json;
use shepherd_core::event::{EventRefs, NewEvent};
use shepherd_store::{NewWebhook, WebhookAttempt};

use common::{Kind, TestDb};

fn new(id: &str, source: &str) -> NewWebhook {
    NewWebhook {
        id: id.into(),
        url: "https://example.test/hook".into(),
        events: vec!["run.*".into(), "task.finished".into()],
        secret: "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into(),
        format: "standard".into(),
        source: source.into(),
        allow_private: false,
    }
}

async fn subscriptions_round_trip(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    let made = store.create_webhook(new("wh_a", "api")).await.unwrap();
    assert_eq!(made.state, "active");
    assert_eq!(made.events, ["run.*", "task.finished"]);
    store.create_webhook(new("wh_c", "config")).await.unwrap();
    let all = store.webhooks().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(store.webhook("wh_a").await.unwrap(), made);

    let err = store.delete_webhook("wh_c").await.unwrap_err();
    assert_eq!(err.code, "webhook_from_config");
    store.delete_webhook("wh_a").await.unwrap();
    let err = store.webhook("wh_a").await.unwrap_err();
    assert_eq!(err.code, "webhook_not_found");
    let err = store.delete_webhook("wh_a").await.unwrap_err();
    assert_eq!(err.code, "webhook_not_found");
}

#[tokio::test]
async fn subscriptions_round_trip_sqlite() {
    subscriptions_round_trip(Kind::Sqlite).await;
}

#[tokio::test]
async fn subscriptions_round_trip_postgres() {
    subscriptions_round_trip(Kind::Postgres).await;
}

fn attempt(id: &str, seq: i64, n: i64, outcome: &str, at: i64) -> WebhookAttempt {
    WebhookAttempt {
        webhook_id: id.into(),
        seq,
        event_type: "task.created".into(),
        attempt: n,
        outcome: outcome.into(),
        http_status: Some(if outcome == "delivered" { 200 } else { 500 }),
        error: (outcome != "delivered").then(|| "the receiver answered 500".into()),
        started_at: at,
        finished_at: at + 5,
        next_attempt_at: (outcome == "retrying").then_some(at + 1000),
    }
}

/// Two nodes: one leases what is due, the other gets nothing until that
/// lease lapses; every write of a node that lost its lease is refused and
/// records nothing; a retry is due only at its time; a delivery moves the
/// cursor, a give-up too and marks the subscription failing.
async fn leases_fence_every_write(kind: Kind) {
    let db = TestDb::new(kind).await;
    let (a, b) = (db.open().await, db.open().await);
    let t0 = 1_000_000_000_000;
    a.set_clock(Some(t0));
    b.set_clock(Some(t0));
    a.create_webhook(new("wh_l", "api")).await.unwrap();
    // Nothing logged since: nothing due.
    assert!(a
        .lease_due_webhooks("node-a", 60_000)
        .await
        .unwrap()
        .is_empty());
    let seq = a
        .append_events(vec![NewEvent::new(
            "task.created",
            EventRefs::default().task("T-1"),
            json!({}),
        )])
        .await
        .unwrap()[0];
    let leased = a.lease_due_webhooks("node-a", 60_000).await.unwrap();
    assert_eq!(leased.len(), 1);
    assert!(b
        .lease_due_webhooks("node-b", 60_000)
        .await
        .unwrap()
        .is_empty());
    // B's writes are fenced.
    assert!(!b
        .record_webhook_attempt("node-b", 60_000, attempt("wh_l", seq, 1, "delivered", t0))
        .await
        .unwrap());
    assert!(!b
        .skip_webhook_to("node-b", "wh_l", seq, 60_000)
        .await
        .unwrap());
    assert!(a.webhook_deliveries("wh_l", 10).await.unwrap().is_empty());

    // A fails once: a retry, due in a second.
    assert!(a
        .record_webhook_attempt("node-a", 60_000, attempt("wh_l", seq, 1, "retrying", t0))
        .await
        .unwrap());
    let row = a.webhook("wh_l").await.unwrap();
    assert_eq!(
        (row.pending_seq, row.attempts, row.pending_since),
        (Some(seq), 1, Some(t0))
    );
    assert!(row.cursor_seq < seq);
    // A's lease lapses; before the retry is due B still gets nothing ...
    b.set_clock(Some(t0 + 900));
    assert!(b
        .lease_due_webhooks("node-b", 60_000)
        .await
        .unwrap()
        .is_empty());
    // ... and once it is due and A's lease is over, B takes it over.
    b.set_clock(Some(t0 + 70_000));
    let taken = b.lease_due_webhooks("node-b", 60_000).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].pending_seq, Some(seq));
    assert!(!a
        .record_webhook_attempt(
            "node-a",
            60_000,
            attempt("wh_l", seq, 2, "delivered", t0 + 70_000)
        )
        .await
        .unwrap());
    assert!(b
        .record_webhook_attempt(
            "node-b",
            60_000,
            attempt("wh_l", seq, 2, "delivered", t0 + 70_000)
        )
        .await
        .unwrap());
    let row = b.webhook("wh_l").await.unwrap();
    assert_eq!(
        (row.cursor_seq, row.pending_seq, row.attempts),
        (seq, None, 0)
    );
    assert_eq!(row.state, "active");
    let attempts = b.webhook_deliveries("wh_l", 10).await.unwrap();
    assert_eq!(
        attempts
            .iter()
            .map(|d| (d.attempt, d.outcome.as_str()))
            .collect::<Vec<_>>(),
        [(2, "delivered"), (1, "retrying")]
    );

    // A give-up moves the cursor too, and marks the subscription failing.
    let seq2 = b
        .append_events(vec![NewEvent::new(
            "task.created",
            EventRefs::default().task("T-2"),
            json!({}),
        )])
        .await
        .unwrap()[0];
    assert_eq!(
        b.lease_due_webhooks("node-b", 60_000).await.unwrap().len(),
        1
    );
    assert!(b
        .record_webhook_attempt(
            "node-b",
            60_000,
            attempt("wh_l", seq2, 1, "failed", t0 + 80_000)
        )
        .await
        .unwrap());
    let row = b.webhook("wh_l").await.unwrap();
    assert_eq!((row.cursor_seq, row.state.as_str()), (seq2, "failing"));
    // Given back, the lease is free for anyone at once.
    b.release_webhook("node-b", "wh_l").await.unwrap();
    a.close();
    b.close();
}

#[tokio::test]
async fn leases_fence_every_write_sqlite() {
    leases_fence_every_write(Kind::Sqlite).await;
}

#[tokio::test]
async fn leases_fence_every_write_postgres() {
    leases_fence_every_write(Kind::Postgres).await;
}

/// The configuration file's subscriptions follow the file: added at the
/// head, changed in place (keeping their cursor), removed when unlisted;
/// API-made ones are left alone.
async fn config_sync_follows_the_file(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    store.create_webhook(new("wh_api", "api")).await.unwrap();
    let mut one = new("ignored", "config");
    one.url = "https://one.test/h".into();
    let mut two = new("ignored2", "config");
    two.url = "https://two.test/h".into();
    assert_eq!(
        store
            .sync_config_webhooks(vec![one.clone(), two.clone()])
            .await
            .unwrap(),
        (2, 0, 0)
    );
    assert_eq!(
        store
            .sync_config_webhooks(vec![one.clone(), two.clone()])
            .await
            .unwrap(),
        (0, 0, 0)
    );
    let kept = store
        .webhooks()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.url == one.url)
        .unwrap();
    one.events = vec!["input.requested".into()];
    assert_eq!(
        store.sync_config_webhooks(vec![one.clone()]).await.unwrap(),
        (0, 1, 1)
    );
    let all = store.webhooks().await.unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    let changed = all.iter().find(|w| w.url == one.url).unwrap();
    assert_eq!(
        (changed.id.as_str(), changed.events.as_slice()),
        (kept.id.as_str(), &["input.requested".to_owned()][..])
    );
    assert!(all.iter().any(|w| w.id == "wh_api"));
    store.close();
}

#[tokio::test]
async fn config_sync_follows_the_file_sqlite() {
    config_sync_follows_the_file(Kind::Sqlite).await;
}

#[tokio::test]
async fn config_sync_follows_the_file_postgres() {
    config_sync_follows_the_file(Kind::Postgres).await;
}
