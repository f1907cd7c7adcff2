//! Webhook subscriptions on both databases: created at the log's head,
//! listed, read, deleted (with a 404 after), and a subscription from the
//! configuration file refused deletion.

mod common;

use shepherd_store::NewWebhook;

use common::{Kind, TestDb};

fn new(id: &str, source: &str) -> NewWebhook {
    NewWebhook {
        id: id.into(),
        url: "https://example.test/hook".into(),
        events: vec!["run.*".into(), "task.finished".into()],
        secret: "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into(),
        format: "standard".into(),
        source: source.into(),
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
