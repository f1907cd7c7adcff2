//! Webhook delivery: each subscription reads the event log through its own
//! durable cursor and POSTs the events it wants, signed as the Standard
//! Webhooks specification says, one at a time and in order.
//!
//! At least once: an event moves the cursor only once an attempt at it is
//! recorded as delivered (a 2xx answer) or given up, in the same unit of
//! work that records the attempt. A node that dies between the POST and
//! that record sends the event again after a restart, with the same
//! `webhook-id`, so receivers can drop the repeat.
//!
//! Never in the way: deliveries run on tasks of their own, at most
//! [`MAX_IN_FLIGHT`] subscriptions at once, each attempt bounded by
//! `webhook_timeout`, with no redirects followed and no answer body read.
//! An endpoint that is down, slow or failing holds up only its own
//! subscription, whose next attempt waits with exponential backoff.
//!
//! Only where it was meant to go: every address a delivery would connect
//! to passes [`refused_address`] (no loopback or private address unless
//! the subscription says `allow_private`, never a link-local or unspecified
//! one). A host name is resolved by [`CheckedResolver`], which hands the
//! HTTP client the checked addresses only, so the connection goes to what
//! was checked, with no second lookup a DNS answer could change in between;
//! an address in the URL is checked before the request. No proxy is used
//! (it would connect for us, to addresses we never saw).
//!
//! Several nodes on one PostgreSQL database: a node leases the
//! subscriptions it delivers; every write of an attempt is fenced by that
//! lease, and a dead node's lease lapses after [`lease_ms`].

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use shepherd_core::event::{Event, EventFilter};
use shepherd_core::time::Millis;
use shepherd_core::webhook_events::{
    delivered_name, slack_body, standard_body, RUN_FAILED, TASK_FINISHED,
};
use shepherd_core::webhook_signature::{message_id, WebhookSecret};
use shepherd_core::webhook_target::refused_address;
use shepherd_store::{NewWebhook, Store, WebhookAttempt, WebhookRow};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, WebhookConfig};

/// Subscriptions delivered at once by one node.
const MAX_IN_FLIGHT: usize = 16;
/// Events one delivery task sends before it lets the loop look again (so
/// that a long backlog does not keep a slot for itself).
const EVENTS_PER_TURN: usize = 50;
/// Events read from the log at a time while looking for wanted ones.
const PAGE: i64 = 200;
/// Longest wait between two attempts at one event.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// The loop looks at the log at most this often when it keeps changing.
const MIN_ROUND: Duration = Duration::from_millis(100);
/// ... and at least this often (retries come due without a commit).
const MAX_ROUND: Duration = Duration::from_secs(1);

/// How delivery is tuned (`webhook_timeout`, `webhook_retry_base`,
/// `webhook_retry_for`).
#[derive(Debug, Clone)]
pub struct Tuning {
    pub timeout: Duration,
    pub retry_base: Duration,
    pub retry_for: Duration,
}

impl Tuning {
    pub fn from_config(config: &Config) -> Self {
        Tuning {
            timeout: config.webhook_timeout,
            retry_base: config.webhook_retry_base,
            retry_for: config.webhook_retry_for,
        }
    }
}

/// How long a node's lease on a subscription lasts: well beyond one
/// attempt, renewed by each one.
fn lease_ms(tuning: &Tuning) -> i64 {
    (tuning.timeout.as_millis() as i64) * 3 + 30_000
}

/// The `[[webhooks]]` tables as subscriptions to keep in step with.
pub fn configured(config: &Config) -> Vec<NewWebhook> {
    config.webhooks.iter().map(from_config).collect()
}

fn from_config(w: &WebhookConfig) -> NewWebhook {
    let events = w.events.clone().unwrap_or_else(|| {
        shepherd_core::webhook_events::DEFAULT_EVENTS
            .iter()
            .map(|e| (*e).to_owned())
            .collect()
    });
    NewWebhook {
        id: shepherd_store::new_webhook_id(),
        url: w.url.clone(),
        events,
        // Checked at load; a Slack one without a secret gets one (unused
        // by Slack, still signed).
        secret: w
            .secret
            .as_deref()
            .and_then(|s| WebhookSecret::parse(s).ok())
            .map(|s| s.to_text())
            .unwrap_or_else(shepherd_store::new_webhook_secret),
        format: w.format.clone().unwrap_or_else(|| "standard".into()),
        source: "config".into(),
        allow_private: w.allow_private,
    }
}

/// The User-Agent of every delivery. The API refuses requests that carry
/// it (or a delivery's signature headers) where they would otherwise be
/// the operator's: see `shepherd_api::auth`.
pub const USER_AGENT: &str = concat!("Shepherd-Webhooks/", env!("CARGO_PKG_VERSION"));

/// Resolves a delivery's host name and keeps only the addresses it may
/// connect to; the HTTP client connects to what this returns and nothing
/// else.
struct CheckedResolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<std::net::SocketAddr> = found
                .into_iter()
                .filter(|a| match refused_address(a.ip(), allow_private) {
                    None => true,
                    Some(why) => {
                        refused.get_or_insert((a.ip(), why));
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some((ip, why))) => {
                    Err(refusal(&format!("{host} resolves to {ip}"), why, allow_private).into())
                }
                (true, None) => Err(format!("{host} resolves to no address").into()),
                (false, _) => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// Why a delivery did not connect to an address.
fn refusal(what: &str, why: &str, allow_private: bool) -> String {
    if allow_private {
        format!("refused: {what}, {why}, which webhooks never reach")
    } else {
        format!(
            "refused: {what}, {why}; webhooks reach loopback and private addresses only with allow_private = true, link-local ones never"
        )
    }
}

/// The address a delivery URL names literally (`http://127.0.0.1/`, in any
/// of the spellings the URL parser reads as one), which the client connects
/// to without asking the resolver.
fn literal_address(url: &str) -> Option<std::net::IpAddr> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

fn client(tuning: &Tuning, allow_private: bool) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        // A redirect could point a delivery anywhere; a receiver that
        // moved must be subscribed again at its new URL.
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(CheckedResolver { allow_private }))
        .timeout(tuning.timeout)
        .connect_timeout(tuning.timeout.min(Duration::from_secs(5)))
        .user_agent(USER_AGENT)
        .build()
        .map_err(|e| format!("webhook HTTP client: {e}"))
}

/// The delivery loop of one node.
pub struct Delivery {
    store: Store,
    node: String,
    /// Connects to public addresses only.
    http: reqwest::Client,
    /// For `allow_private` subscriptions: loopback and private addresses too
    /// (a client of its own, so that no pooled connection crosses over).
    http_private: reqwest::Client,
    tuning: Tuning,
}

impl Delivery {
    pub fn new(store: Store, node: String, tuning: Tuning) -> Result<Self, String> {
        Ok(Delivery {
            store,
            node,
            http: client(&tuning, false)?,
            http_private: client(&tuning, true)?,
            tuning,
        })
    }

    /// Delivers until `token` is cancelled; then gives its leases back, so
    /// that another node may go on at once.
    pub async fn run(self: Arc<Self>, token: CancellationToken) {
        let mut commits = self.store.commits();
        let mut tasks: JoinSet<String> = JoinSet::new();
        let mut in_flight: HashSet<String> = HashSet::new();
        loop {
            let round = tokio::time::Instant::now();
            while let Some(done) = tasks.try_join_next() {
                if let Ok(id) = done {
                    in_flight.remove(&id);
                }
            }
            if in_flight.len() < MAX_IN_FLIGHT {
                match self
                    .store
                    .lease_due_webhooks(&self.node, lease_ms(&self.tuning))
                    .await
                {
                    Ok(due) => {
                        for sub in due {
                            if in_flight.len() >= MAX_IN_FLIGHT {
                                break;
                            }
                            if in_flight.insert(sub.id.clone()) {
                                let this = self.clone();
                                tasks.spawn(async move {
                                    let id = sub.id.clone();
                                    this.deliver(sub).await;
                                    id
                                });
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "webhook lease failed"),
                }
            }
            tokio::select! {
                _ = token.cancelled() => break,
                open = commits.changed() => if !open { break },
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Ok(id) = done {
                        in_flight.remove(&id);
                    }
                }
                _ = tokio::time::sleep(MAX_ROUND) => {}
            }
            tokio::time::sleep_until(round + MIN_ROUND).await;
        }
        tasks.shutdown().await;
        for id in in_flight {
            if let Err(e) = self.store.release_webhook(&self.node, &id).await {
                tracing::debug!(error = %e, webhook = %id, "webhook lease not given back");
            }
        }
    }

    /// Sends a leased subscription's due events, in order, until it has
    /// none left, an attempt fails (its retry waits), or its turn is over.
    async fn deliver(&self, sub: WebhookRow) {
        if let Err(e) = self.deliver_inner(sub.clone()).await {
            tracing::warn!(error = %e, webhook = %sub.id, "webhook delivery stopped");
        }
    }

    async fn deliver_inner(&self, mut sub: WebhookRow) -> Result<(), shepherd_core::Error> {
        let secret = WebhookSecret::parse(&sub.secret)?;
        let filter = log_filter(&sub.events);
        let lease = lease_ms(&self.tuning);
        let mut sent = 0;
        while sent < EVENTS_PER_TURN {
            let now = self.store.now();
            let event = match sub.pending_seq {
                Some(seq) => {
                    if sub.next_attempt_at.is_some_and(|at| at > now) {
                        return Ok(());
                    }
                    let page = self
                        .store
                        .read_events(seq - 1, &EventFilter::default(), 1)
                        .await?;
                    match page.events.into_iter().next().filter(|e| e.seq == seq) {
                        Some(e) => e,
                        None => {
                            // Retention removed it while it was retried.
                            let gone = self.given_up(
                                &sub,
                                seq,
                                "(removed)",
                                now,
                                "the event is no longer in the log",
                            );
                            if !self
                                .store
                                .record_webhook_attempt(&self.node, lease, gone)
                                .await?
                            {
                                return Ok(());
                            }
                            sub.pending_seq = None;
                            sub.cursor_seq = seq;
                            continue;
                        }
                    }
                }
                None => {
                    let page = self
                        .store
                        .read_events(sub.cursor_seq, &filter, PAGE)
                        .await?;
                    let wanted = page
                        .events
                        .into_iter()
                        .find(|e| delivered_name(&sub.events, e).is_some());
                    match wanted {
                        Some(e) => e,
                        None => {
                            if page.next_cursor > sub.cursor_seq {
                                if !self
                                    .store
                                    .skip_webhook_to(&self.node, &sub.id, page.next_cursor, lease)
                                    .await?
                                {
                                    return Ok(());
                                }
                                sub.cursor_seq = page.next_cursor;
                            }
                            if page.next_cursor >= page.head {
                                return Ok(());
                            }
                            continue;
                        }
                    }
                }
            };
            let attempt = self.attempt(&sub, &secret, &event).await;
            let outcome = attempt.outcome.clone();
            let next = attempt.next_attempt_at;
            if !self
                .store
                .record_webhook_attempt(&self.node, lease, attempt)
                .await?
            {
                // Another node holds it now, or it was deleted.
                return Ok(());
            }
            match outcome.as_str() {
                "retrying" => {
                    if sub.pending_seq.is_none() {
                        sub.pending_since = Some(now);
                    }
                    sub.pending_seq = Some(event.seq);
                    sub.attempts += 1;
                    sub.next_attempt_at = next;
                    return Ok(());
                }
                _ => {
                    sub.cursor_seq = event.seq;
                    sub.pending_seq = None;
                    sub.pending_since = None;
                    sub.attempts = 0;
                    sub.next_attempt_at = None;
                    sent += 1;
                }
            }
        }
        Ok(())
    }

    /// One POST of `event`, and how it ended.
    async fn attempt(
        &self,
        sub: &WebhookRow,
        secret: &WebhookSecret,
        event: &Event,
    ) -> WebhookAttempt {
        let name = delivered_name(&sub.events, event).unwrap_or(event.kind.as_str());
        let body = match sub.format.as_str() {
            "slack" => slack_body(name, event),
            _ => standard_body(name, event),
        };
        let id = message_id(&sub.id, event.seq);
        let started = self.store.now();
        let timestamp = started / 1000;
        let refused = literal_address(&sub.url).and_then(|ip| {
            refused_address(ip, sub.allow_private)
                .map(|why| refusal(&ip.to_string(), why, sub.allow_private))
        });
        let http = if sub.allow_private {
            &self.http_private
        } else {
            &self.http
        };
        let sent = match refused {
            Some(why) => Err(why),
            None => http
                .post(&sub.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header("webhook-id", &id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", secret.sign(&id, timestamp, &body))
                .body(body)
                .send()
                .await
                .map_err(|e| match e {
                    e if e.is_timeout() => {
                        format!("no answer within {} ms", self.tuning.timeout.as_millis())
                    }
                    e if e.is_connect() => format!("cannot connect: {}", root_cause(&e)),
                    e => root_cause(&e),
                }),
        };
        let finished = self.store.now();
        let (status, error) = match sent {
            Ok(answer) if answer.status().is_success() => {
                (Some(answer.status().as_u16() as i64), None)
            }
            Ok(answer) => (
                Some(answer.status().as_u16() as i64),
                Some(format!("the receiver answered {}", answer.status())),
            ),
            Err(e) => (None, Some(e)),
        };
        let attempt = sub.attempts + 1;
        let (outcome, next_attempt_at) = match &error {
            None => ("delivered", None),
            Some(_) => {
                let since = sub.pending_since.unwrap_or(started);
                let next = finished + backoff(&self.tuning, attempt).as_millis() as i64;
                if next - since > self.tuning.retry_for.as_millis() as i64 {
                    ("failed", None)
                } else {
                    ("retrying", Some(next))
                }
            }
        };
        match outcome {
            "delivered" => tracing::debug!(webhook = %sub.id, seq = event.seq, "webhook delivered"),
            "failed" => {
                tracing::warn!(webhook = %sub.id, seq = event.seq, error = error.as_deref().unwrap_or(""), "webhook delivery given up; the subscription is failing")
            }
            _ => {
                tracing::info!(webhook = %sub.id, seq = event.seq, attempt, error = error.as_deref().unwrap_or(""), "webhook delivery will be retried")
            }
        }
        WebhookAttempt {
            webhook_id: sub.id.clone(),
            seq: event.seq,
            event_type: name.to_owned(),
            attempt,
            outcome: outcome.into(),
            http_status: status,
            error,
            started_at: started,
            finished_at: finished,
            next_attempt_at,
        }
    }

    fn given_up(
        &self,
        sub: &WebhookRow,
        seq: i64,
        kind: &str,
        now: Millis,
        why: &str,
    ) -> WebhookAttempt {
        WebhookAttempt {
            webhook_id: sub.id.clone(),
            seq,
            event_type: kind.into(),
            attempt: sub.attempts + 1,
            outcome: "failed".into(),
            http_status: None,
            error: Some(why.into()),
            started_at: now,
            finished_at: now,
            next_attempt_at: None,
        }
    }
}

/// The wait after the `attempt`-th failed attempt: `retry_base` doubled for
/// each attempt before it, at most an hour, less up to a fifth at random
/// so that many subscriptions failing together do not retry together.
fn backoff(tuning: &Tuning, attempt: i64) -> Duration {
    let doublings = (attempt - 1).clamp(0, 20) as u32;
    let full = tuning
        .retry_base
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(MAX_BACKOFF);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_i64(attempt);
    let fifth = full.as_millis() as u64 / 5;
    let jitter = if fifth == 0 {
        0
    } else {
        hasher.finish() % fifth
    };
    full - Duration::from_millis(jitter)
}

/// The log filter that finds a subscription's events: its names, with a
/// derived name read as the event type it comes from.
fn log_filter(patterns: &[String]) -> EventFilter {
    let mut kinds: Vec<String> = Vec::new();
    for p in patterns {
        let kind = match p.as_str() {
            "*" => return EventFilter::default(),
            RUN_FAILED => "run.completed".to_owned(),
            TASK_FINISHED => "task.state_changed".to_owned(),
            other => other.to_owned(),
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    EventFilter {
        kinds,
        ..Default::default()
    }
}

/// The innermost cause of an HTTP error ("connection refused"), which says
/// more than reqwest's outer "error sending request".
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_an_hour_with_jitter_below() {
        let t = Tuning {
            timeout: Duration::from_secs(10),
            retry_base: Duration::from_secs(5),
            retry_for: Duration::from_secs(86_400),
        };
        for attempt in 1..=30 {
            let full = Duration::from_secs(5)
                .saturating_mul(2u32.saturating_pow((attempt - 1).min(20) as u32))
                .min(MAX_BACKOFF);
            let got = backoff(&t, attempt);
            assert!(
                got <= full && got >= full - full / 5,
                "{attempt}: {got:?} vs {full:?}"
            );
        }
    }

    #[test]
    fn derived_names_read_their_source_types() {
        let f = log_filter(&["run.failed".into(), "task.finished".into(), "run.*".into()]);
        assert_eq!(f.kinds, ["run.completed", "task.state_changed", "run.*"]);
        assert!(log_filter(&["*".into(), "x".into()]).kinds.is_empty());
    }
}
