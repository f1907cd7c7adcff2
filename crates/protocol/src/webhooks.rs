//! Wire types of the webhook routes (`/api/v1/webhooks…`): subscribing a
//! URL to events, listing subscriptions and reading their delivery attempts.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /api/v1/webhooks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where deliveries are POSTed: an `http` or `https` URL.
    pub url: String,
    /// Event types (`run.completed`), prefix wildcards (`run.*`) or the
    /// derived `run.failed` and `task.finished`. Omitted: `input.requested`,
    /// `run.stuck`, `run.failed`, `task.finished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// A Standard Webhooks secret (`whsec_<base64>`); one is made when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// `standard` (default) or `slack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Whether deliveries may go to loopback and private addresses (a
    /// receiver on the server's machine or its private network); admins
    /// only. Link-local and unspecified addresses are refused whatever this
    /// says. Default false.
    #[serde(default)]
    pub allow_private: bool,
}

/// A subscription as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    /// `standard` or `slack`.
    pub format: String,
    /// `active`, or `failing` after a delivery was given up (until the next success).
    pub state: String,
    /// `api`, or `config` for subscriptions from `shepherd.toml` (not deletable through the API).
    pub source: String,
    /// Whether deliveries may go to loopback and private addresses.
    #[serde(default)]
    pub allow_private: bool,
    /// The last event sequence number delivered or given up.
    pub cursor: i64,
    /// RFC 3339.
    pub created_at: String,
}

/// The answer to `POST /api/v1/webhooks`: the subscription and its secret,
/// shown this once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: Webhook,
    pub secret: String,
}

/// `GET /api/v1/webhooks`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WebhookList {
    pub webhooks: Vec<Webhook>,
}

/// One delivery attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WebhookDelivery {
    /// The event's sequence number in the log.
    pub seq: i64,
    /// The name it was delivered under.
    #[serde(rename = "type")]
    pub kind: String,
    /// 1 for the first attempt at this event.
    pub attempt: i64,
    /// `delivered`, `retrying` or `failed` (given up after 24 hours).
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<i64>,
    /// What went wrong; shown to admins only (to others it would say
    /// which addresses and ports answer, from where the server is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339.
    pub finished_at: String,
    /// RFC 3339; when the next attempt is due (`retrying` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
}

/// `GET /api/v1/webhooks/{id}/deliveries`: newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct WebhookDeliveryList {
    pub deliveries: Vec<WebhookDelivery>,
}

/// `GET /api/v1/webhooks/{id}/deliveries`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WebhookDeliveriesQuery {
    /// 1 to 500; default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}
