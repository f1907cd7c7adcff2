//! The store's webhook-subscription operations, one unit of work each; see
//! `ops/webhooks.rs` for what each records.

use shepherd_core::Error;

use crate::ops::webhooks::{self, Attempt, NewWebhook, WebhookRow};
use crate::sql::Db;
use crate::{log, Store};

impl Store {
    /// Records a subscription; it receives the events logged from now on.
    pub async fn create_webhook(&self, new: NewWebhook) -> Result<WebhookRow, Error> {
        let (now, sealer) = (self.now(), self.sealer());
        self.write(move |db| {
            Box::pin(async move {
                let head = log::head(db).await?;
                webhooks::create(db, &sealer, now, head, new).await
            })
        })
        .await
    }

    pub async fn webhook(&self, id: &str) -> Result<WebhookRow, Error> {
        let (id, sealer) = (id.to_owned(), self.sealer());
        self.read(move |db| Box::pin(async move { webhooks::get(db, &sealer, &id).await }))
            .await
    }

    /// Every subscription, oldest first.
    pub async fn webhooks(&self) -> Result<Vec<WebhookRow>, Error> {
        let sealer = self.sealer();
        self.read(move |db| Box::pin(async move { webhooks::list(db, &sealer).await }))
            .await
    }

    /// Deletes an API-made subscription; config-made ones are refused.
    pub async fn delete_webhook(&self, id: &str) -> Result<(), Error> {
        let (id, sealer) = (id.to_owned(), self.sealer());
        self.write(move |db| Box::pin(async move { webhooks::delete(db, &sealer, &id).await }))
            .await
    }

    /// Makes the configuration file's subscriptions what `wanted` lists;
    /// returns how many were added, changed and removed.
    pub async fn sync_config_webhooks(
        &self,
        wanted: Vec<NewWebhook>,
    ) -> Result<(usize, usize, usize), Error> {
        let (now, sealer) = (self.now(), self.sealer());
        self.write(move |db| {
            Box::pin(async move {
                let head = log::head(db).await?;
                webhooks::sync_config(db, &sealer, now, head, wanted).await
            })
        })
        .await
    }

    /// Leases to `node` for `lease_ms` every subscription with something
    /// due that no other node holds, and returns them. A cheap read first:
    /// most calls find nothing due and write nothing.
    pub async fn lease_due_webhooks(
        &self,
        node: &str,
        lease_ms: i64,
    ) -> Result<Vec<WebhookRow>, Error> {
        let now = self.now();
        let due = self
            .read(move |db| {
                Box::pin(async move {
                    let head = log::head(db).await?;
                    let row = db
                        .query_opt(
                            "SELECT 1 FROM webhooks WHERE \
                             ((pending_seq IS NOT NULL AND next_attempt_at <= $1) \
                              OR (pending_seq IS NULL AND cursor_seq < $2)) LIMIT 1",
                            crate::params![now, head],
                        )
                        .await?;
                    Ok(row.is_some())
                })
            })
            .await?;
        if !due {
            return Ok(Vec::new());
        }
        let (node, sealer) = (node.to_owned(), self.sealer());
        self.write(move |db| {
            Box::pin(async move {
                let head = log::head(db).await?;
                webhooks::lease_due(db, &sealer, now, &node, now + lease_ms, head).await
            })
        })
        .await
    }

    /// Records a delivery attempt and renews the lease for `lease_ms`; false
    /// when `node` no longer holds the subscription.
    pub async fn record_webhook_attempt(
        &self,
        node: &str,
        lease_ms: i64,
        attempt: Attempt,
    ) -> Result<bool, Error> {
        let (node, until) = (node.to_owned(), self.now() + lease_ms);
        self.write(move |db| {
            Box::pin(async move { webhooks::record_attempt(db, &node, until, &attempt).await })
        })
        .await
    }

    /// Moves a subscription's cursor over events it does not want, up to `to`.
    pub async fn skip_webhook_to(
        &self,
        node: &str,
        id: &str,
        to: i64,
        lease_ms: i64,
    ) -> Result<bool, Error> {
        let (node, id, until) = (node.to_owned(), id.to_owned(), self.now() + lease_ms);
        self.write(move |db| {
            Box::pin(async move { webhooks::skip_to(db, &node, &id, to, until).await })
        })
        .await
    }

    /// Gives the lease on a subscription back.
    pub async fn release_webhook(&self, node: &str, id: &str) -> Result<(), Error> {
        let (node, id) = (node.to_owned(), id.to_owned());
        self.write(move |db| Box::pin(async move { webhooks::release(db, &node, &id).await }))
            .await
    }

    /// A subscription's delivery attempts, newest first.
    pub async fn webhook_deliveries(&self, id: &str, limit: i64) -> Result<Vec<Attempt>, Error> {
        let (id, sealer) = (id.to_owned(), self.sealer());
        self.read(move |db| {
            Box::pin(async move { webhooks::deliveries(db, &sealer, &id, limit).await })
        })
        .await
    }
}

/// A new subscription's id.
pub fn new_webhook_id() -> String {
    format!("wh_{}", crate::ops::random_hex(8))
}

/// A new signing secret (32 random bytes), in its `whsec_` form.
pub fn new_webhook_secret() -> String {
    let mut key = [0u8; 32];
    // getrandom only fails when the OS has no entropy source at all.
    getrandom::fill(&mut key).expect("the operating system's random source");
    shepherd_core::webhook_signature::WebhookSecret::from_key(&key)
        .expect("32 bytes is an accepted key length")
        .to_text()
}
