//! Webhook subscriptions: the rows the delivery loop reads the event log
//! for. A new subscription starts at the log's head, so it receives what
//! happens from now on, not the history before it.

use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::params;
use crate::sql::{Db, Row};

/// A subscription as stored (the secret included: signing needs it).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRow {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub secret: String,
    pub format: String,
    pub source: String,
    pub state: String,
    pub cursor_seq: i64,
    pub created_at: Millis,
}

/// A subscription to record; its checks (URL, secret, events) are the
/// caller's.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub secret: String,
    pub format: String,
    pub source: String,
}

const COLUMNS: &str = "id, url, events, secret, format, source, state, cursor_seq, created_at";

fn from_row(r: &Row) -> Result<WebhookRow, Error> {
    Ok(WebhookRow {
        id: r.string(0)?,
        url: r.string(1)?,
        events: r.json(2)?,
        secret: r.string(3)?,
        format: r.string(4)?,
        source: r.string(5)?,
        state: r.string(6)?,
        cursor_seq: r.i64(7)?,
        created_at: r.i64(8)?,
    })
}

fn not_found(id: &str) -> Error {
    Error::not_found("webhook_not_found", format!("no webhook {id:?}"))
}

/// Records a subscription starting at `head`, the log's last sequence number.
pub async fn create<D: Db>(
    db: &mut D,
    now: Millis,
    head: i64,
    new: NewWebhook,
) -> Result<WebhookRow, Error> {
    let events = serde_json::to_string(&new.events).map_err(|e| Error::internal(e.to_string()))?;
    db.execute(
        "INSERT INTO webhooks (id, url, events, secret, format, source, state, cursor_seq, \
         created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, 'active', $7, $8, $8)",
        params![
            new.id.as_str(),
            new.url.as_str(),
            events.as_str(),
            new.secret.as_str(),
            new.format.as_str(),
            new.source.as_str(),
            head,
            now
        ],
    )
    .await?;
    get(db, &new.id).await
}

pub async fn get<D: Db>(db: &mut D, id: &str) -> Result<WebhookRow, Error> {
    let row = db
        .query_opt(
            &format!("SELECT {COLUMNS} FROM webhooks WHERE id = $1"),
            params![id],
        )
        .await?
        .ok_or_else(|| not_found(id))?;
    from_row(&row)
}

/// Every subscription, oldest first.
pub async fn list<D: Db>(db: &mut D) -> Result<Vec<WebhookRow>, Error> {
    db.query(
        &format!("SELECT {COLUMNS} FROM webhooks ORDER BY created_at, id"),
        params![],
    )
    .await?
    .iter()
    .map(from_row)
    .collect()
}

/// Deletes an API-made subscription (its attempts go with it); one from the
/// configuration file is refused, since the next start would bring it back.
pub async fn delete<D: Db>(db: &mut D, id: &str) -> Result<(), Error> {
    let found = get(db, id).await?;
    if found.source == "config" {
        return Err(Error::conflict(
            "webhook_from_config",
            format!("webhook {id:?} comes from shepherd.toml; remove it there"),
        ));
    }
    db.execute("DELETE FROM webhooks WHERE id = $1", params![id])
        .await?;
    Ok(())
}
