//! The store's webhook-subscription operations, one unit of work each; see
//! `ops/webhooks.rs` for what each records.

use shepherd_core::Error;

use crate::ops::webhooks::{self, NewWebhook, WebhookRow};
use crate::{log, Store};

impl Store {
    /// Records a subscription; it receives the events logged from now on.
    pub async fn create_webhook(&self, new: NewWebhook) -> Result<WebhookRow, Error> {
        let now = self.now();
        self.write(move |db| {
            Box::pin(async move {
                let head = log::head(db).await?;
                webhooks::create(db, now, head, new).await
            })
        })
        .await
    }

    pub async fn webhook(&self, id: &str) -> Result<WebhookRow, Error> {
        let id = id.to_owned();
        self.read(move |db| Box::pin(async move { webhooks::get(db, &id).await }))
            .await
    }

    /// Every subscription, oldest first.
    pub async fn webhooks(&self) -> Result<Vec<WebhookRow>, Error> {
        self.read(move |db| Box::pin(webhooks::list(db))).await
    }

    /// Deletes an API-made subscription; config-made ones are refused.
    pub async fn delete_webhook(&self, id: &str) -> Result<(), Error> {
        let id = id.to_owned();
        self.write(move |db| Box::pin(async move { webhooks::delete(db, &id).await }))
            .await
    }
}
