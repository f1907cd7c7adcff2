//! Webhook subscriptions and their delivery bookkeeping. A new subscription
//! starts at the log's head, so it receives what happens from now on, not
//! the history before it. Delivery is one event in flight per
//! subscription: the event being tried is `pending_seq` until it is
//! delivered or given up, and only then does `cursor_seq` move past it, so
//! a restart resumes exactly there and order holds. Every write of the
//! delivery loop is fenced by the node's lease on the subscription.

use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::params;
use crate::sealed::Sealer;
use crate::sql::{Db, Row};

/// What a subscription's secret is sealed for (see `sealed`): its row.
fn secret_label(id: &str) -> String {
    format!("webhooks.secret:{id}")
}

/// A subscription as stored (the secret included, opened: signing needs
/// it; the database holds it sealed).
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
    /// The event being tried, until it is delivered or given up.
    pub pending_seq: Option<i64>,
    /// When the first attempt at `pending_seq` started (the retry window's start).
    pub pending_since: Option<Millis>,
    /// Attempts made at `pending_seq` so far.
    pub attempts: i64,
    pub next_attempt_at: Option<Millis>,
    /// Deliveries may go to loopback and private addresses.
    pub allow_private: bool,
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
    pub allow_private: bool,
}

const COLUMNS: &str = "id, url, events, secret, format, source, state, cursor_seq, created_at, \
                       pending_seq, pending_since, attempts, next_attempt_at, allow_private";

fn from_row(sealer: &Sealer, r: &Row) -> Result<WebhookRow, Error> {
    let id = r.string(0)?;
    let secret = sealer.open(&secret_label(&id), &r.string(3)?)?;
    Ok(WebhookRow {
        id,
        url: r.string(1)?,
        events: r.json(2)?,
        secret,
        format: r.string(4)?,
        source: r.string(5)?,
        state: r.string(6)?,
        cursor_seq: r.i64(7)?,
        created_at: r.i64(8)?,
        pending_seq: r.opt_i64(9)?,
        pending_since: r.opt_i64(10)?,
        attempts: r.i64(11)?,
        next_attempt_at: r.opt_i64(12)?,
        allow_private: r.bool(13)?,
    })
}

fn not_found(id: &str) -> Error {
    Error::not_found("webhook_not_found", format!("no webhook {id:?}"))
}

/// Records a subscription starting at `head`, the log's last sequence number.
pub async fn create<D: Db>(
    db: &mut D,
    sealer: &Sealer,
    now: Millis,
    head: i64,
    new: NewWebhook,
) -> Result<WebhookRow, Error> {
    let events = serde_json::to_string(&new.events).map_err(|e| Error::internal(e.to_string()))?;
    let secret = sealer.seal(&secret_label(&new.id), &new.secret)?;
    db.execute(
        "INSERT INTO webhooks (id, url, events, secret, format, source, state, cursor_seq, \
         created_at, updated_at, allow_private) \
         VALUES ($1, $2, $3, $4, $5, $6, 'active', $7, $8, $8, $9)",
        params![
            new.id.as_str(),
            new.url.as_str(),
            events.as_str(),
            secret.as_str(),
            new.format.as_str(),
            new.source.as_str(),
            head,
            now,
            new.allow_private as i64
        ],
    )
    .await?;
    get(db, sealer, &new.id).await
}

pub async fn get<D: Db>(db: &mut D, sealer: &Sealer, id: &str) -> Result<WebhookRow, Error> {
    let row = db
        .query_opt(
            &format!("SELECT {COLUMNS} FROM webhooks WHERE id = $1"),
            params![id],
        )
        .await?
        .ok_or_else(|| not_found(id))?;
    from_row(sealer, &row)
}

/// Every subscription, oldest first.
pub async fn list<D: Db>(db: &mut D, sealer: &Sealer) -> Result<Vec<WebhookRow>, Error> {
    db.query(
        &format!("SELECT {COLUMNS} FROM webhooks ORDER BY created_at, id"),
        params![],
    )
    .await?
    .iter()
    .map(|r| from_row(sealer, r))
    .collect()
}

/// Deletes an API-made subscription (its attempts go with it); one from the
/// configuration file is refused, since the next start would bring it back.
pub async fn delete<D: Db>(db: &mut D, sealer: &Sealer, id: &str) -> Result<(), Error> {
    let found = get(db, sealer, id).await?;
    if found.source == "config" {
        return Err(Error::conflict(
            "webhook_from_config",
            format!("webhook {id:?} comes from shepherd.toml; remove it there"),
        ));
    }
    remove(db, id).await
}

async fn remove<D: Db>(db: &mut D, id: &str) -> Result<(), Error> {
    db.execute(
        "DELETE FROM webhook_deliveries WHERE webhook_id = $1",
        params![id],
    )
    .await?;
    db.execute("DELETE FROM webhooks WHERE id = $1", params![id])
        .await?;
    Ok(())
}

/// Makes the configuration file's subscriptions (`source = 'config'`, one
/// per URL) what `wanted` says: new URLs start at `head`, changed ones keep
/// their cursor, and ones no longer listed are removed. Returns how many
/// were added, changed and removed.
pub async fn sync_config<D: Db>(
    db: &mut D,
    sealer: &Sealer,
    now: Millis,
    head: i64,
    wanted: Vec<NewWebhook>,
) -> Result<(usize, usize, usize), Error> {
    let existing: Vec<WebhookRow> = list(db, sealer)
        .await?
        .into_iter()
        .filter(|w| w.source == "config")
        .collect();
    let (mut added, mut changed, mut removed) = (0, 0, 0);
    for old in &existing {
        if !wanted.iter().any(|w| w.url == old.url) {
            remove(db, &old.id).await?;
            removed += 1;
        }
    }
    for new in wanted {
        match existing.iter().find(|w| w.url == new.url) {
            Some(old) => {
                if old.events != new.events
                    || old.secret != new.secret
                    || old.format != new.format
                    || old.allow_private != new.allow_private
                {
                    let events = serde_json::to_string(&new.events)
                        .map_err(|e| Error::internal(e.to_string()))?;
                    let secret = sealer.seal(&secret_label(&old.id), &new.secret)?;
                    db.execute(
                        "UPDATE webhooks SET events = $2, secret = $3, format = $4, \
                         updated_at = $5, allow_private = $6 WHERE id = $1",
                        params![
                            old.id.as_str(),
                            events.as_str(),
                            secret.as_str(),
                            new.format.as_str(),
                            now,
                            new.allow_private as i64
                        ],
                    )
                    .await?;
                    changed += 1;
                }
            }
            None => {
                create(db, sealer, now, head, new).await?;
                added += 1;
            }
        }
    }
    Ok((added, changed, removed))
}

/// Leases to `node`, until `until`, every subscription with something due
/// (an event after its cursor, up to `head`, or a retry whose time has
/// come) that no other node holds a live lease on, and returns them.
pub async fn lease_due<D: Db>(
    db: &mut D,
    sealer: &Sealer,
    now: Millis,
    node: &str,
    until: Millis,
    head: i64,
) -> Result<Vec<WebhookRow>, Error> {
    db.execute(
        "UPDATE webhooks SET lease_owner = $1, lease_until = $2 \
         WHERE (lease_owner IS NULL OR lease_owner = $1 OR lease_until < $3) \
         AND ((pending_seq IS NOT NULL AND next_attempt_at <= $3) \
              OR (pending_seq IS NULL AND cursor_seq < $4))",
        params![node, until, now, head],
    )
    .await?;
    db.query(
        &format!(
            "SELECT {COLUMNS} FROM webhooks WHERE lease_owner = $1 AND lease_until = $2 \
             ORDER BY created_at, id"
        ),
        params![node, until],
    )
    .await?
    .iter()
    .map(|r| from_row(sealer, r))
    .collect()
}

/// How one delivery attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub webhook_id: String,
    pub seq: i64,
    /// The name the event was delivered under.
    pub event_type: String,
    /// 1 for the first attempt at this event.
    pub attempt: i64,
    /// `delivered`, `retrying` or `failed`.
    pub outcome: String,
    pub http_status: Option<i64>,
    pub error: Option<String>,
    pub started_at: Millis,
    pub finished_at: Millis,
    /// When the next attempt is due (`retrying` only).
    pub next_attempt_at: Option<Millis>,
}

/// Delivery attempts kept per subscription, newest first.
pub const KEPT_ATTEMPTS: i64 = 500;

/// Records an attempt and moves the subscription on: past the event when
/// it was delivered or given up (`failed` also marks it failing), or to
/// its next try. False, recording nothing, when `node` no longer holds the
/// lease (another node took over, or the subscription was deleted).
pub async fn record_attempt<D: Db>(
    db: &mut D,
    node: &str,
    lease_until: Millis,
    a: &Attempt,
) -> Result<bool, Error> {
    let moved = match a.outcome.as_str() {
        "retrying" => {
            db.execute(
                "UPDATE webhooks SET pending_seq = $3, \
                 pending_since = COALESCE(pending_since, $4), attempts = $5, \
                 next_attempt_at = $6, lease_until = $7, updated_at = $8 \
                 WHERE id = $1 AND lease_owner = $2",
                params![
                    a.webhook_id.as_str(),
                    node,
                    a.seq,
                    a.started_at,
                    a.attempt,
                    a.next_attempt_at,
                    lease_until,
                    a.finished_at
                ],
            )
            .await?
        }
        outcome => {
            let state = if outcome == "failed" {
                "failing"
            } else {
                "active"
            };
            db.execute(
                "UPDATE webhooks SET cursor_seq = $3, pending_seq = NULL, \
                 pending_since = NULL, attempts = 0, next_attempt_at = NULL, state = $4, \
                 lease_until = $5, updated_at = $6 WHERE id = $1 AND lease_owner = $2",
                params![
                    a.webhook_id.as_str(),
                    node,
                    a.seq,
                    state,
                    lease_until,
                    a.finished_at
                ],
            )
            .await?
        }
    };
    if moved == 0 {
        return Ok(false);
    }
    db.execute(
        "INSERT INTO webhook_deliveries (webhook_id, seq, event_type, attempt, outcome, \
         http_status, error, started_at, finished_at, next_attempt_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        params![
            a.webhook_id.as_str(),
            a.seq,
            a.event_type.as_str(),
            a.attempt,
            a.outcome.as_str(),
            a.http_status,
            a.error.as_deref(),
            a.started_at,
            a.finished_at,
            a.next_attempt_at
        ],
    )
    .await?;
    // Only the newest attempts are kept: a failing endpoint retried for a
    // day must not grow the table without end.
    if a.attempt == 1 || a.outcome != "retrying" {
        db.execute(
            "DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND started_at < \
             (SELECT MIN(started_at) FROM (SELECT started_at FROM webhook_deliveries \
              WHERE webhook_id = $1 ORDER BY started_at DESC LIMIT $2) AS kept)",
            params![a.webhook_id.as_str(), KEPT_ATTEMPTS],
        )
        .await?;
    }
    Ok(true)
}

/// Moves the cursor of a subscription with nothing in flight over events
/// it does not want, up to `to`. False when `node` lost the lease.
pub async fn skip_to<D: Db>(
    db: &mut D,
    node: &str,
    id: &str,
    to: i64,
    lease_until: Millis,
) -> Result<bool, Error> {
    let n = db
        .execute(
            "UPDATE webhooks SET cursor_seq = CASE WHEN cursor_seq < $3 THEN $3 \
             ELSE cursor_seq END, lease_until = $4 \
             WHERE id = $1 AND lease_owner = $2 AND pending_seq IS NULL",
            params![id, node, to, lease_until],
        )
        .await?;
    Ok(n > 0)
}

/// Gives a subscription's lease back, so that another node may take it
/// at once (this node is shutting down, or has nothing due for it).
pub async fn release<D: Db>(db: &mut D, node: &str, id: &str) -> Result<(), Error> {
    db.execute(
        "UPDATE webhooks SET lease_owner = NULL, lease_until = NULL \
         WHERE id = $1 AND lease_owner = $2",
        params![id, node],
    )
    .await?;
    Ok(())
}

/// A subscription's attempts, newest first, at most `limit`.
pub async fn deliveries<D: Db>(
    db: &mut D,
    sealer: &Sealer,
    id: &str,
    limit: i64,
) -> Result<Vec<Attempt>, Error> {
    get(db, sealer, id).await?;
    db.query(
        "SELECT webhook_id, seq, event_type, attempt, outcome, http_status, error, \
         started_at, finished_at, next_attempt_at FROM webhook_deliveries \
         WHERE webhook_id = $1 ORDER BY started_at DESC, seq DESC, attempt DESC LIMIT $2",
        params![id, limit],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(Attempt {
            webhook_id: r.string(0)?,
            seq: r.i64(1)?,
            event_type: r.string(2)?,
            attempt: r.i64(3)?,
            outcome: r.string(4)?,
            http_status: r.opt_i64(5)?,
            error: r.opt_string(6)?,
            started_at: r.i64(7)?,
            finished_at: r.i64(8)?,
            next_attempt_at: r.opt_i64(9)?,
        })
    })
    .collect()
}

/// Seals every subscription secret stored in clear (by a version before
/// sealing); returns how many there were.
pub async fn seal_clear_secrets<D: Db>(db: &mut D, sealer: &Sealer) -> Result<usize, Error> {
    let rows = db
        .query("SELECT id, secret FROM webhooks ORDER BY id", params![])
        .await?;
    let mut sealed = 0;
    for r in rows {
        let (id, stored) = (r.string(0)?, r.string(1)?);
        if crate::sealed::is_sealed(&stored) {
            continue;
        }
        let secret = sealer.seal(&secret_label(&id), &stored)?;
        db.execute(
            "UPDATE webhooks SET secret = $2 WHERE id = $1",
            params![id.as_str(), secret.as_str()],
        )
        .await?;
        sealed += 1;
    }
    Ok(sealed)
}
