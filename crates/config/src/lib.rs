//! Configuration: `shepherd.toml` (optional) overridden by `SHEPHERD_*`
//! environment variables, layered with `figment` so that every value
//! remembers where it came from (`shepherd config` prints that). Every key
//! is documented in the README; a bad value is a start-up error that names
//! the key and, for the file, the file; an unknown key in the file is an
//! error too, so a typo never silently falls back to a default.
//!
//! A crate of its own, apart from the binary, so that what parses this
//! untrusted text can be built (and fuzzed) without the server. Loading
//! prints nothing: warnings are kept in [`Config::warnings`] for the binary
//! to log once its logger exists, in the format the configuration chose.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::value::{Dict, Map, Num, Tag, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

pub use shepherd_core::agent_config::AgentConfig;
use shepherd_core::defaults;

/// The durations: a humantime value (`"5m"`, `"90s"`) under the key, or
/// (the older form, still read) whole seconds under `KEY_secs`.
const DURATIONS: &[&str] = &[
    "heartbeat_timeout",
    "claim_ttl",
    "sweep_interval",
    "cancel_grace",
    "snapshot_interval",
    "runner_heartbeat",
    "runner_poll",
    "send_timeout",
    "header_timeout",
    "body_timeout",
    "webhook_timeout",
    "webhook_retry_base",
    "webhook_retry_for",
];

/// Keys whose environment value is a number.
const NUMBERS: &[&str] = &[
    "body_limit_bytes",
    "event_retention_days",
    "transcript_retention_days",
    "pg_pool_size",
    "max_requests",
    "max_streams",
    "max_worker_requests",
    "listen_backlog",
    "max_requests_per_token",
];

/// Keys whose environment value is a switch (`1` or `0`).
const BOOLS: &[&str] = &["tls_strict"];

/// Keys read from `SHEPHERD_<KEY>` as they are (strings).
const STRINGS: &[&str] = &[
    "listen",
    "data_dir",
    "database_url",
    "log",
    "log_format",
    "sqlite_sync",
    "pg_schema",
    "sessions_root",
    "node_id",
    "advertise_url",
    "metrics_listen",
    "tls_cert",
    "tls_key",
    "host_enrollment_token",
    "secrets_key_file",
];

/// The layered shape: every key optional (defaults are applied after).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    log: Option<String>,
    log_format: Option<String>,
    auth_token: Option<String>,
    sqlite_sync: Option<String>,
    body_limit_bytes: Option<u64>,
    #[serde(default, with = "humantime_serde")]
    heartbeat_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    claim_ttl: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    sweep_interval: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    cancel_grace: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    snapshot_interval: Option<Duration>,
    event_retention_days: Option<u64>,
    transcript_retention_days: Option<u64>,
    pg_pool_size: Option<u64>,
    pg_schema: Option<String>,
    #[serde(default, with = "humantime_serde")]
    runner_heartbeat: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    runner_poll: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    send_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    header_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    body_timeout: Option<Duration>,
    max_requests_per_token: Option<u64>,
    allowed_origins: Option<Vec<String>>,
    allowed_hosts: Option<Vec<String>>,
    sessions_root: Option<PathBuf>,
    node_id: Option<String>,
    advertise_url: Option<String>,
    max_requests: Option<u64>,
    max_streams: Option<u64>,
    max_worker_requests: Option<u64>,
    listen_backlog: Option<u64>,
    metrics_listen: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_strict: Option<bool>,
    host_enrollment_token: Option<String>,
    secrets_key_file: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    webhook_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    webhook_retry_base: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    webhook_retry_for: Option<Duration>,
    #[serde(default)]
    agents: BTreeMap<String, AgentConfig>,
    #[serde(default)]
    webhooks: Vec<WebhookConfig>,
    #[serde(default)]
    oidc: Option<OidcConfig>,
}

/// The `[oidc]` table: single sign-on for the web UI through an OpenID
/// provider (authorization code flow with PKCE, a confidential client).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL (discovery at
    /// `{issuer}/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    /// Also `SHEPHERD_OIDC_CLIENT_SECRET`, which wins (keeps the secret out
    /// of the file).
    #[serde(default)]
    pub client_secret: Option<String>,
    /// This server's `/auth/callback`, as the provider must send browsers
    /// back to it (and as it is registered there).
    pub redirect_url: String,
    #[serde(default = "default_oidc_scopes")]
    pub scopes: Vec<String>,
    /// The claim that lists a user's groups (in the ID token, else from
    /// the userinfo endpoint).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Members of any of these are admins.
    #[serde(default)]
    pub admin_groups: Vec<String>,
    /// Members of any of these (and of no admin group) are operators;
    /// everyone else let in is a viewer.
    #[serde(default)]
    pub operator_groups: Vec<String>,
    /// Only people whose verified email is in one of these domains may sign
    /// in; empty: anyone the provider signs in.
    #[serde(default)]
    pub allowed_email_domains: Vec<String>,
    /// A session unused this long ends.
    #[serde(default = "default_session_idle_secs")]
    pub session_idle_secs: u64,
    /// A session ends this long after its login, used or not.
    #[serde(default = "default_session_max_secs")]
    pub session_max_secs: u64,
}

fn default_oidc_scopes() -> Vec<String> {
    ["openid", "email", "profile"].map(String::from).to_vec()
}
fn default_groups_claim() -> String {
    "groups".into()
}
fn default_session_idle_secs() -> u64 {
    12 * 3600
}
fn default_session_max_secs() -> u64 {
    7 * 24 * 3600
}

/// The secret's variable, read beside the `[oidc]` table.
pub const OIDC_SECRET_ENV: &str = "SHEPHERD_OIDC_CLIENT_SECRET";

/// Whether `url` is plain HTTP to this machine, the one place a provider
/// may be reached without TLS (a provider on the same host, tests).
fn is_loopback_http(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match host.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() && port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

/// Checks an `[oidc]` table, with the secret resolved.
fn validate_oidc(o: &OidcConfig) -> Result<(), String> {
    if !(o.issuer.starts_with("https://") || is_loopback_http(&o.issuer)) {
        return Err(format!(
            "issuer must be an https:// URL (plain http only on loopback), got {:?}",
            o.issuer
        ));
    }
    if o.client_id.trim().is_empty() {
        return Err("client_id is empty".into());
    }
    if o.client_secret
        .as_deref()
        .is_none_or(|s| s.trim().is_empty())
    {
        return Err(format!(
            "client_secret is missing (set it in the table or in {OIDC_SECRET_ENV})"
        ));
    }
    let path_ok = o
        .redirect_url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        == Some("/auth/callback");
    if !(o.redirect_url.starts_with("https://") || is_loopback_http(&o.redirect_url)) || !path_ok {
        return Err(format!(
            "redirect_url must be this server's https://HOST/auth/callback (plain http only on loopback), got {:?}",
            o.redirect_url
        ));
    }
    if !o.scopes.iter().any(|s| s == "openid") {
        return Err("scopes must include \"openid\"".into());
    }
    if o.session_idle_secs == 0 || o.session_max_secs == 0 {
        return Err("session_idle_secs and session_max_secs must be at least 1".into());
    }
    if o.session_idle_secs > o.session_max_secs {
        return Err("session_idle_secs cannot exceed session_max_secs".into());
    }
    if let Some(d) = o
        .allowed_email_domains
        .iter()
        .find(|d| d.is_empty() || d.contains('@') || d.contains(char::is_whitespace))
    {
        return Err(format!(
            "allowed_email_domains holds {d:?}; list domains such as \"example.com\""
        ));
    }
    Ok(())
}

/// A `[[webhooks]]` table: a subscription the server keeps in step with
/// this file (made at start, changed or removed when the file changes).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub url: String,
    /// Default: `input.requested`, `run.stuck`, `run.failed`, `task.finished`.
    #[serde(default)]
    pub events: Option<Vec<String>>,
    /// `whsec_<base64>`; required for the `standard` format, so that
    /// receivers can verify deliveries.
    #[serde(default)]
    pub secret: Option<String>,
    /// `standard` (default) or `slack`.
    #[serde(default)]
    pub format: Option<String>,
    /// Deliveries may go to loopback and private addresses (never to
    /// link-local or unspecified ones).
    #[serde(default)]
    pub allow_private: bool,
}

/// How hard SQLite tries to survive power loss (`sqlite_sync`); the store's
/// setting of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSync {
    /// fsync at checkpoints only: survives process crashes, not power loss.
    Normal,
    /// fsync the WAL at every commit.
    Full,
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub source: Option<PathBuf>,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub log: String,
    pub log_json: bool,
    pub auth_token: Option<String>,
    pub sqlite_sync: SqliteSync,
    pub body_limit_bytes: usize,
    pub heartbeat_timeout: Duration,
    pub claim_ttl: Duration,
    pub sweep_interval: Duration,
    pub cancel_grace: Duration,
    pub snapshot_interval: Duration,
    /// 0 keeps every event.
    pub event_retention_days: u64,
    /// 0 keeps every transcript.
    pub transcript_retention_days: u64,
    pub pg_pool_size: usize,
    /// PostgreSQL schema to use instead of `public` (created if missing).
    pub pg_schema: Option<String>,
    /// How often the built-in runner's workers heartbeat.
    pub runner_heartbeat: Duration,
    /// How often the built-in runner asks for work when no event woke it.
    pub runner_poll: Duration,
    /// Origins besides the server's own that browsers may call from.
    pub allowed_origins: Vec<String>,
    /// Host names the server answers to besides loopback, its advertise
    /// URL's and its allowed origins' (`name` or `name:port`).
    pub allowed_hosts: Vec<String>,
    /// Relative paths in them (`cwd`, `repo`, a `command` program such as
    /// `./agent.sh`) are already resolved against the file's directory.
    pub agents: BTreeMap<String, AgentConfig>,
    /// When set, sessions may only live in directories under it.
    pub sessions_root: Option<PathBuf>,
    /// This node's id (default: one generated once and kept in the data directory).
    pub node_id: Option<String>,
    /// How clients reach this node (told to clients that ask another node
    /// about a session hosted here); default `http://LISTEN`.
    pub advertise_url: Option<String>,
    /// Requests handled at once; more answer 503 `overloaded` (0: no cap).
    pub max_requests: usize,
    /// Open streams (SSE, WebSockets, MCP) at once, outside the request
    /// cap; more answer 503 `too_many_streams` (0: no cap).
    pub max_streams: usize,
    /// Slots kept for workers' reports once `max_requests` is reached.
    pub max_worker_requests: usize,
    /// The listen(2) backlog of the main and the metrics listener: how many
    /// connections the kernel queues before the server accepts them.
    pub listen_backlog: u32,
    /// A second listener serving only `GET /metrics`, without a token.
    pub metrics_listen: Option<SocketAddr>,
    /// Connections whose peer takes nothing sent for this long are closed
    /// (zero: never).
    pub send_timeout: Duration,
    /// A connection that has not sent a request's whole header by then is
    /// closed.
    pub header_timeout: Duration,
    /// A request whose body has not arrived by then answers 408.
    pub body_timeout: Duration,
    /// Requests one credential may have in flight (streams apart); more
    /// answer 429 (0: no cap).
    pub max_requests_per_token: usize,
    /// Serve HTTPS with this certificate chain and key (PEM files), read
    /// again on SIGHUP and when either file changes; `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// `host_enrollment_token`: lets someone who is not an admin register a
    /// new host (a runner started with an operator's token presents it);
    /// none: only admins register new hosts.
    pub host_enrollment_token: Option<String>,
    /// The file holding the key the database's secrets are sealed with;
    /// `None`: `secret.key` in the data directory, made on first start.
    /// Every server of one database needs the same key.
    pub secrets_key_file: Option<PathBuf>,
    /// The `[[webhooks]]` tables, checked.
    pub webhooks: Vec<WebhookConfig>,
    /// The `[oidc]` table, checked, its secret resolved.
    pub oidc: Option<OidcConfig>,
    /// A delivery attempt that has no answer by then fails (and is retried).
    pub webhook_timeout: Duration,
    /// The wait before the second attempt at an event; each later wait
    /// doubles, up to an hour.
    pub webhook_retry_base: Duration,
    /// How long an event is retried before it is given up and the
    /// subscription marked failing.
    pub webhook_retry_for: Duration,
    /// Where each top-level key's value came from (absent: the default).
    pub origins: BTreeMap<String, Origin>,
    /// What loading found worth a warning (a deprecated variable): the
    /// loader prints nothing, since logging is not set up yet when it runs.
    pub warnings: Vec<String>,
}

/// The listener's certificate chain and private key (`tls_cert`, `tls_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server's certificate first, then the chain that signs it.
    pub cert: PathBuf,
    /// PEM: the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `tls_strict`: a key file other users may read stops the start (and
    /// a reload) instead of being served with a warning.
    pub strict: bool,
}

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// The configuration file.
    File { path: PathBuf },
    /// An environment variable.
    Env { var: String },
}

/// A configuration error: which key, and what is wrong with it.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ConfigError {}

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// Reads an environment variable; an empty value counts as unset.
fn env(vars: &dyn Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    vars(key).filter(|v| !v.trim().is_empty())
}

/// The operator token's variable, shared by the server and the CLI.
pub const TOKEN_ENV: &str = "SHEPHERD_TOKEN";
/// Its former name on the server side, still read (with a warning).
pub const DEPRECATED_TOKEN_ENV: &str = "SHEPHERD_AUTH_TOKEN";

/// The operator token from the environment, for the client verbs:
/// `SHEPHERD_TOKEN`, else the deprecated `SHEPHERD_AUTH_TOKEN`, which says
/// it is deprecated on stderr (a person reads it; these verbs do not log).
pub fn token_from_env(vars: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let (var, token) = token_var(vars)?;
    if var == DEPRECATED_TOKEN_ENV {
        eprintln!("warning: {}", deprecated_token_warning());
    }
    Some(token)
}

fn deprecated_token_warning() -> String {
    format!("{DEPRECATED_TOKEN_ENV} is deprecated; set {TOKEN_ENV} instead")
}

fn token_var(vars: &dyn Fn(&str) -> Option<String>) -> Option<(&'static str, String)> {
    if let Some(t) = env(vars, TOKEN_ENV) {
        return Some((TOKEN_ENV, t));
    }
    let old = env(vars, DEPRECATED_TOKEN_ENV)?;
    Some((DEPRECATED_TOKEN_ENV, old))
}

/// Checks a `[[webhooks]]` table as the API checks a subscription.
fn validate_webhook(w: &WebhookConfig) -> Result<(), String> {
    use shepherd_core::{webhook_events, webhook_signature, webhook_target};
    webhook_target::validate_url(&w.url).map_err(|e| e.message)?;
    if let Some(events) = &w.events {
        webhook_events::validate_events(events).map_err(|e| e.message)?;
    }
    let format = w.format.as_deref().unwrap_or("standard");
    webhook_target::validate_format(format).map_err(|e| e.message)?;
    match &w.secret {
        Some(secret) => {
            webhook_signature::WebhookSecret::parse(secret).map_err(|e| e.message)?;
        }
        // A Slack incoming webhook checks no signature.
        None if format == "slack" => {}
        None => {
            return Err(
                "a standard-format webhook needs secret = \"whsec_…\" (for example \
                 \"whsec_\" followed by the output of `openssl rand -base64 32`), \
                 so that its receiver can verify deliveries"
                    .into(),
            )
        }
    }
    Ok(())
}

/// Checks `SHEPHERD_DATABASE_URL` by the store's rules (`postgres://`,
/// `postgresql://`, or `sqlite://` with a file path). The store's
/// `parse_database_url` has the last word when it opens the database; a
/// test here keeps the two in agreement.
fn check_database_url(url: &str) -> Result<(), ConfigError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(());
    }
    if let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let path = rest.split('?').next().unwrap_or_default();
        if path.is_empty() || path == ":memory:" {
            return Err(err(
                "SHEPHERD_DATABASE_URL: a SQLite URL needs a file path, e.g. sqlite://./shepherd-data/shepherd.db",
            ));
        }
        return Ok(());
    }
    Err(err(format!(
        "SHEPHERD_DATABASE_URL: unsupported scheme in {url:?}; use sqlite://PATH or postgres://…"
    )))
}

/// The environment variable a key is read from.
fn env_name(key: &str) -> String {
    if key == "auth_token" {
        return TOKEN_ENV.into();
    }
    format!("SHEPHERD_{}", key.to_ascii_uppercase())
}

/// Moves `KEY_secs = N` to `KEY = "Ns"`, so the older form keeps working
/// and later layers override it as they override the new form. `name` says
/// how to name a key in an error (the file's key or the variable).
fn fold_legacy_secs(
    dict: &mut Dict,
    name: &dyn Fn(&str) -> String,
    where_: &str,
) -> Result<(), ConfigError> {
    for key in DURATIONS {
        let legacy = format!("{key}_secs");
        let Some(v) = dict.remove(&legacy) else {
            continue;
        };
        if dict.contains_key(*key) {
            return Err(err(format!(
                "{where_}{} and {} both set; keep {} (a duration such as \"5m\")",
                name(&legacy),
                name(key),
                name(key)
            )));
        }
        let secs = match &v {
            Value::Num(_, n) => n
                .to_u128()
                .and_then(|n| u64::try_from(n).ok())
                .or_else(|| n.to_i128().and_then(|n| u64::try_from(n).ok())),
            Value::String(_, s) => s.trim().parse::<u64>().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            err(format!(
                "{where_}{}: expected a non-negative whole number of seconds, got {}",
                name(&legacy),
                describe(&v)
            ))
        })?;
        dict.insert(
            (*key).to_owned(),
            Value::String(v.tag(), format!("{secs}s")),
        );
    }
    Ok(())
}

fn describe(v: &Value) -> String {
    match v {
        Value::String(_, s) => format!("{s:?}"),
        Value::Num(_, n) => n
            .to_i128()
            .map(|n| n.to_string())
            .unwrap_or_else(|| format!("{n:?}")),
        other => format!("{other:?}"),
    }
}

/// The configuration file as a figment layer; values carry its path.
struct FileLayer {
    path: PathBuf,
    dict: Dict,
}

impl FileLayer {
    fn read(path: &Path) -> Result<FileLayer, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            err(format!(
                "SHEPHERD_CONFIG: cannot read {}: {e}",
                path.display()
            ))
        })?;
        Self::parse(path, &text)
    }

    /// The layer of the file at `path`, whose text is `text`.
    fn parse(path: &Path, text: &str) -> Result<FileLayer, ConfigError> {
        let mut dict: Dict =
            toml::from_str(text).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let shown = path.display().to_string();
        fold_legacy_secs(&mut dict, &|k| k.to_owned(), &format!("{shown}: "))?;
        Ok(FileLayer {
            path: path.to_owned(),
            dict,
        })
    }
}

impl Provider for FileLayer {
    fn metadata(&self) -> Metadata {
        Metadata::from(
            "configuration file",
            figment::Source::File(self.path.clone()),
        )
    }
    fn data(&self) -> figment::Result<Map<Profile, Dict>> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// The `SHEPHERD_*` variables as a figment layer. Only the known names are
/// read (other `SHEPHERD_*` variables belong to the CLI or the runner).
struct EnvLayer {
    dict: Dict,
    warnings: Vec<String>,
}

/// The metadata name of [`EnvLayer`]; [`origin_of`] looks for it.
const ENV_LAYER: &str = "environment";

impl EnvLayer {
    fn read(vars: &dyn Fn(&str) -> Option<String>) -> Result<EnvLayer, ConfigError> {
        let mut dict = Dict::new();
        let tag = Tag::Default;
        for key in STRINGS {
            if let Some(v) = env(vars, &env_name(key)) {
                dict.insert((*key).into(), Value::String(tag, v));
            }
        }
        for key in NUMBERS {
            let name = env_name(key);
            if let Some(v) = env(vars, &name) {
                let n = v.trim().parse::<u64>().map_err(|_| {
                    err(format!(
                        "{name}: expected a non-negative whole number, got {v:?}"
                    ))
                })?;
                dict.insert((*key).into(), Value::Num(tag, Num::U64(n)));
            }
        }
        for key in DURATIONS {
            for k in [key.to_string(), format!("{key}_secs")] {
                if let Some(v) = env(vars, &env_name(&k)) {
                    dict.insert(k, Value::String(tag, v));
                }
            }
        }
        // Switches: 1/true/yes or 0/false/no.
        for key in BOOLS {
            let name = env_name(key);
            if let Some(v) = env(vars, &name) {
                let b = match v.trim().to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" => true,
                    "0" | "false" | "no" | "" => false,
                    _ => return Err(err(format!("{name}: expected 1 or 0, got {v:?}"))),
                };
                dict.insert((*key).into(), Value::Bool(tag, b));
            }
        }
        // Lists are comma-separated in the environment.
        for key in ["allowed_origins", "allowed_hosts"] {
            if let Some(v) = env(vars, &env_name(key)) {
                let list = v
                    .split(',')
                    .map(|o| o.trim())
                    .filter(|o| !o.is_empty())
                    .map(|o| Value::String(tag, o.to_owned()))
                    .collect();
                dict.insert(key.into(), Value::Array(tag, list));
            }
        }
        let mut warnings = Vec::new();
        if let Some((var, t)) = token_var(vars) {
            if var == DEPRECATED_TOKEN_ENV {
                warnings.push(deprecated_token_warning());
            }
            dict.insert("auth_token".into(), Value::String(tag, t));
        }
        fold_legacy_secs(&mut dict, &env_name, "")?;
        Ok(EnvLayer { dict, warnings })
    }
}

impl Provider for EnvLayer {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_LAYER).interpolater(|_, keys| env_name(&keys.join("_")))
    }
    fn data(&self) -> figment::Result<Map<Profile, Dict>> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// Where the value at `key` came from, per the layers' metadata.
fn origin_of(fig: &Figment, key: &str) -> Option<Origin> {
    let md = fig.find_metadata(key)?;
    if let Some(figment::Source::File(path)) = &md.source {
        return Some(Origin::File { path: path.clone() });
    }
    (md.name == ENV_LAYER).then(|| Origin::Env { var: env_name(key) })
}

/// A figment error as one line naming the key, and the file or variable.
fn explain(e: figment::Error, file: Option<&Path>) -> ConfigError {
    let from_env = e.metadata.as_ref().is_some_and(|m| m.name == ENV_LAYER);
    let mut path: Vec<String> = e.path.clone();
    let what = match &e.kind {
        figment::error::Kind::UnknownField(field, _) => {
            // figment puts the field at the end of the path for some
            // nestings and not for others.
            if path.last() != Some(field) {
                path.push(field.clone());
            }
            return err(match file {
                Some(f) => format!("{}: unknown key `{}`", f.display(), path.join(".")),
                None => format!("unknown configuration key `{}`", path.join(".")),
            });
        }
        kind => kind.to_string(),
    };
    if from_env {
        return err(format!("{}: {what}", env_name(&path.join("_"))));
    }
    match file {
        Some(f) => err(format!("{}: {}: {what}", f.display(), path.join("."))),
        None => err(format!("{}: {what}", path.join("."))),
    }
}

/// A program given as a path (`./agent.sh`, `bin/agent`) rather than a
/// name looked up in `PATH` (`claude`).
fn is_relative_program(p: &str) -> bool {
    p.contains('/') && Path::new(p).is_relative()
}

/// Resolves an agent's relative paths against the configuration file's
/// directory: the file is what names them, and the server may be started
/// from anywhere (a service manager, another shell's directory).
fn resolve_agent_paths(a: &mut AgentConfig, base: &Path) {
    let join = |p: &Path| base.join(p.strip_prefix("./").unwrap_or(p));
    for p in [&mut a.cwd, &mut a.repo].into_iter().flatten() {
        if p.is_relative() {
            *p = join(p);
        }
    }
    for argv in [&mut a.command, &mut a.interactive_command] {
        if let Some(program) = argv.first_mut() {
            if is_relative_program(program) {
                *program = join(Path::new(program)).display().to_string();
            }
        }
    }
}

impl Config {
    /// Where a program on this machine reaches the server of this
    /// configuration: its advertised URL, or its listener (the loopback
    /// address for one bound to every address).
    pub fn self_url(&self) -> String {
        if let Some(u) = &self.advertise_url {
            return u.clone();
        }
        let mut local = self.listen;
        if local.ip().is_unspecified() {
            local.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{local}")
    }

    /// Loads from the process environment (and the file it names or the default one).
    pub fn load(explicit_file: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with(explicit_file, &|k| std::env::var(k).ok())
    }

    /// Loads with an injectable environment (tests).
    pub fn load_with(
        explicit_file: Option<&Path>,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let path = match explicit_file {
            Some(p) => Some(p.to_owned()),
            None => match env(vars, "SHEPHERD_CONFIG") {
                Some(p) => Some(PathBuf::from(p)),
                None => Some(PathBuf::from("shepherd.toml")).filter(|p| p.exists()),
            },
        };
        let file = path.as_deref().map(FileLayer::read).transpose()?;
        Self::from_layers(path, file, vars)
    }

    /// Loads as [`Config::load_with`] does, with the file's text given
    /// rather than read from `path` (the fuzz targets feed it arbitrary
    /// text without touching the disk).
    #[doc(hidden)]
    pub fn load_text(
        path: &Path,
        text: &str,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let file = FileLayer::parse(path, text)?;
        Self::from_layers(Some(path.to_owned()), Some(file), vars)
    }

    fn from_layers(
        path: Option<PathBuf>,
        file: Option<FileLayer>,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut fig = Figment::new();
        if let Some(layer) = file {
            fig = fig.merge(layer);
        }
        let env_layer = EnvLayer::read(vars)?;
        let warnings = env_layer.warnings.clone();
        fig = fig.merge(env_layer);
        let file: RawConfig = fig.extract().map_err(|e| explain(e, path.as_deref()))?;
        let origins: BTreeMap<String, Origin> = KEYS
            .iter()
            .filter_map(|k| origin_of(&fig, k).map(|o| ((*k).to_owned(), o)))
            .collect();
        let listen_s = file.listen.unwrap_or_else(|| "127.0.0.1:7700".into());
        let listen = resolve_listen(&listen_s).map_err(|e| err(format!("SHEPHERD_LISTEN: {e}")))?;
        let data_dir = file
            .data_dir
            .unwrap_or_else(|| PathBuf::from("./shepherd-data"));
        let database_url = file
            .database_url
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("shepherd.db").display()));
        check_database_url(&database_url)?;
        let log = file.log.unwrap_or_else(|| "info".into());
        log_filter(&log)
            .map_err(|e| err(format!("SHEPHERD_LOG: not a valid filter ({e}): {log:?}")))?;
        let log_format = file.log_format.unwrap_or_else(|| "text".into());
        let log_json = match log_format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                return Err(err(format!(
                    "SHEPHERD_LOG_FORMAT: expected text or json, got {other:?}"
                )))
            }
        };
        let metrics_listen = match &file.metrics_listen {
            Some(l) => {
                Some(resolve_listen(l).map_err(|e| err(format!("SHEPHERD_METRICS_LISTEN: {e}")))?)
            }
            None => None,
        };
        let listen_backlog = file.listen_backlog.unwrap_or(defaults::LISTEN_BACKLOG);
        if !(1..=65535).contains(&listen_backlog) {
            return Err(err(format!(
                "SHEPHERD_LISTEN_BACKLOG: expected 1 to 65535, got {listen_backlog}"
            )));
        }
        let auth_token = file.auth_token;
        if let Some(t) = &auth_token {
            if t.len() < 16 {
                return Err(err("SHEPHERD_TOKEN: use at least 16 characters"));
            }
        }
        let host_enrollment_token = file.host_enrollment_token.filter(|t| !t.is_empty());
        if host_enrollment_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(err(
                "SHEPHERD_HOST_ENROLLMENT_TOKEN: use at least 16 characters",
            ));
        }
        let sqlite_sync = match file.sqlite_sync.as_deref().unwrap_or("normal") {
            "normal" => SqliteSync::Normal,
            "full" => SqliteSync::Full,
            other => {
                return Err(err(format!(
                    "SHEPHERD_SQLITE_SYNC: expected normal or full, got {other:?}"
                )))
            }
        };
        let dur = |key: &str,
                   v: Option<Duration>,
                   default: Duration,
                   min: u64|
         -> Result<Duration, ConfigError> {
            let v = v.unwrap_or(default);
            if v < Duration::from_secs(min) {
                return Err(err(format!(
                    "{}: must be at least {min}s, got {}",
                    env_name(key),
                    humantime::format_duration(v)
                )));
            }
            Ok(v)
        };
        let body_limit = file.body_limit_bytes.unwrap_or(defaults::BODY_LIMIT_BYTES);
        if body_limit < 1024 {
            return Err(err("SHEPHERD_BODY_LIMIT_BYTES: must be at least 1024"));
        }
        let allowed_origins = file.allowed_origins.unwrap_or_default();
        for o in &allowed_origins {
            let authority = o
                .strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                .map(|a| a.trim_end_matches('/'));
            if !authority.is_some_and(|a| !a.is_empty() && !a.contains(['/', '?', '#', '*'])) {
                return Err(err(format!(
                    "SHEPHERD_ALLOWED_ORIGINS: expected origins like https://ui.example.com (scheme, host, optional port), got {o:?}"
                )));
            }
        }
        let allowed_hosts = file.allowed_hosts.unwrap_or_default();
        for h in &allowed_hosts {
            let name =
                h.rsplit_once(':').map_or(
                    h.as_str(),
                    |(n, p)| {
                        if p.parse::<u16>().is_ok() {
                            n
                        } else {
                            h
                        }
                    },
                );
            if name.is_empty() || name.contains(['/', '*', '@', ':', ' ', '?', '#']) {
                return Err(err(format!(
                    "SHEPHERD_ALLOWED_HOSTS: expected host names like shepherd.example or shepherd.example:8443, got {h:?}"
                )));
            }
        }
        let tls = match (file.tls_cert, file.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert,
                key,
                strict: file.tls_strict.unwrap_or(false),
            }),
            (None, None) => None,
            // One without the other would serve plain HTTP where the
            // operator asked for TLS: refuse rather than guess.
            (Some(_), None) | (None, Some(_)) => {
                return Err(err(
                    "SHEPHERD_TLS_CERT and SHEPHERD_TLS_KEY (tls_cert, tls_key) go together: \
                     set both to serve HTTPS, or neither to serve plain HTTP",
                ))
            }
        };
        let mut agents = file.agents;
        // Absolute, so that the resolved paths do not depend on the
        // directory the server later runs agents from.
        let base = path.as_deref().and_then(Path::parent).map(|d| {
            let d = if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            };
            std::path::absolute(d).unwrap_or_else(|_| d.to_owned())
        });
        for (name, agent) in agents.iter_mut() {
            if let Some(base) = &base {
                resolve_agent_paths(agent, base);
            }
            validate_agent(name, agent)?;
        }
        let oidc = match file.oidc {
            None => None,
            Some(mut o) => {
                if let Some(secret) = env(vars, OIDC_SECRET_ENV) {
                    o.client_secret = Some(secret);
                }
                validate_oidc(&o).map_err(|e| err(format!("oidc: {e}")))?;
                Some(o)
            }
        };
        let webhooks = file.webhooks;
        for (i, w) in webhooks.iter().enumerate() {
            validate_webhook(w).map_err(|e| err(format!("webhooks[{i}] ({}): {e}", w.url)))?;
            if webhooks[..i].iter().any(|other| other.url == w.url) {
                return Err(err(format!(
                    "webhooks[{i}]: {} is listed twice; one [[webhooks]] table per URL",
                    w.url
                )));
            }
        }
        Ok(Config {
            source: path,
            listen,
            data_dir,
            database_url,
            log,
            log_json,
            auth_token,
            sqlite_sync,
            body_limit_bytes: body_limit as usize,
            heartbeat_timeout: dur(
                "heartbeat_timeout",
                file.heartbeat_timeout,
                defaults::HEARTBEAT_TIMEOUT,
                1,
            )?,
            claim_ttl: dur("claim_ttl", file.claim_ttl, defaults::CLAIM_TTL, 1)?,
            sweep_interval: dur(
                "sweep_interval",
                file.sweep_interval,
                defaults::SWEEP_INTERVAL,
                1,
            )?,
            cancel_grace: dur("cancel_grace", file.cancel_grace, defaults::CANCEL_GRACE, 0)?,
            snapshot_interval: dur(
                "snapshot_interval",
                file.snapshot_interval,
                defaults::SNAPSHOT_INTERVAL,
                1,
            )?,
            event_retention_days: file
                .event_retention_days
                .unwrap_or(defaults::EVENT_RETENTION_DAYS),
            transcript_retention_days: file
                .transcript_retention_days
                .unwrap_or(defaults::TRANSCRIPT_RETENTION_DAYS),
            pg_pool_size: file
                .pg_pool_size
                .unwrap_or(defaults::PG_POOL_SIZE)
                .clamp(2, 512) as usize,
            pg_schema: file.pg_schema,
            runner_heartbeat: dur(
                "runner_heartbeat",
                file.runner_heartbeat,
                defaults::RUNNER_HEARTBEAT,
                1,
            )?,
            runner_poll: dur("runner_poll", file.runner_poll, defaults::RUNNER_POLL, 1)?,
            allowed_origins,
            allowed_hosts,
            agents,
            sessions_root: file.sessions_root,
            node_id: file.node_id,
            advertise_url: file.advertise_url,
            max_requests: file.max_requests.unwrap_or(defaults::MAX_REQUESTS) as usize,
            max_streams: file.max_streams.unwrap_or(defaults::MAX_STREAMS) as usize,
            max_worker_requests: file
                .max_worker_requests
                .unwrap_or(defaults::MAX_WORKER_REQUESTS) as usize,
            listen_backlog: listen_backlog as u32,
            metrics_listen,
            send_timeout: dur("send_timeout", file.send_timeout, defaults::SEND_TIMEOUT, 0)?,
            header_timeout: dur(
                "header_timeout",
                file.header_timeout,
                defaults::HEADER_TIMEOUT,
                1,
            )?,
            body_timeout: dur("body_timeout", file.body_timeout, defaults::BODY_TIMEOUT, 1)?,
            max_requests_per_token: file
                .max_requests_per_token
                .unwrap_or(defaults::MAX_REQUESTS_PER_TOKEN)
                as usize,
            tls,
            host_enrollment_token,
            secrets_key_file: file.secrets_key_file,
            webhooks,
            oidc,
            webhook_timeout: dur(
                "webhook_timeout",
                file.webhook_timeout,
                defaults::WEBHOOK_TIMEOUT,
                1,
            )?,
            webhook_retry_base: dur(
                "webhook_retry_base",
                file.webhook_retry_base,
                defaults::WEBHOOK_RETRY_BASE,
                0,
            )?,
            webhook_retry_for: dur(
                "webhook_retry_for",
                file.webhook_retry_for,
                defaults::WEBHOOK_RETRY_FOR,
                0,
            )?,
            origins,
            warnings,
        })
    }

    /// The effective configuration as rows of key, value and source, with
    /// secrets (the token, a database password, agents' environment values)
    /// replaced by `***`, for `shepherd config`.
    pub fn effective(&self) -> Vec<Setting> {
        let secs = |d: &Duration| humantime::format_duration(*d).to_string();
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let rows: Vec<(&str, String)> = vec![
            ("listen", self.listen.to_string()),
            ("data_dir", self.data_dir.display().to_string()),
            ("database_url", redact_url(&self.database_url)),
            ("log", self.log.clone()),
            (
                "log_format",
                if self.log_json { "json" } else { "text" }.into(),
            ),
            (
                "auth_token",
                self.auth_token
                    .as_ref()
                    .map(|_| "***".into())
                    .unwrap_or_default(),
            ),
            (
                "sqlite_sync",
                match self.sqlite_sync {
                    SqliteSync::Normal => "normal",
                    SqliteSync::Full => "full",
                }
                .into(),
            ),
            ("body_limit_bytes", self.body_limit_bytes.to_string()),
            ("heartbeat_timeout", secs(&self.heartbeat_timeout)),
            ("claim_ttl", secs(&self.claim_ttl)),
            ("sweep_interval", secs(&self.sweep_interval)),
            ("cancel_grace", secs(&self.cancel_grace)),
            ("snapshot_interval", secs(&self.snapshot_interval)),
            (
                "event_retention_days",
                self.event_retention_days.to_string(),
            ),
            (
                "transcript_retention_days",
                self.transcript_retention_days.to_string(),
            ),
            ("pg_pool_size", self.pg_pool_size.to_string()),
            ("pg_schema", opt(&self.pg_schema)),
            ("runner_heartbeat", secs(&self.runner_heartbeat)),
            ("runner_poll", secs(&self.runner_poll)),
            ("allowed_origins", self.allowed_origins.join(",")),
            ("allowed_hosts", self.allowed_hosts.join(",")),
            (
                "sessions_root",
                path(&self.sessions_root).unwrap_or_default(),
            ),
            ("node_id", opt(&self.node_id)),
            ("advertise_url", opt(&self.advertise_url)),
            ("max_requests", self.max_requests.to_string()),
            ("max_streams", self.max_streams.to_string()),
            ("max_worker_requests", self.max_worker_requests.to_string()),
            ("listen_backlog", self.listen_backlog.to_string()),
            ("send_timeout", secs(&self.send_timeout)),
            ("header_timeout", secs(&self.header_timeout)),
            ("body_timeout", secs(&self.body_timeout)),
            (
                "max_requests_per_token",
                self.max_requests_per_token.to_string(),
            ),
            (
                "metrics_listen",
                self.metrics_listen
                    .map(|a| a.to_string())
                    .unwrap_or_default(),
            ),
            (
                "tls_cert",
                path(&self.tls.as_ref().map(|t| t.cert.clone())).unwrap_or_default(),
            ),
            // A path, not the key itself: shown so an operator sees which
            // file is served.
            (
                "tls_key",
                path(&self.tls.as_ref().map(|t| t.key.clone())).unwrap_or_default(),
            ),
            (
                "host_enrollment_token",
                self.host_enrollment_token
                    .as_ref()
                    .map(|_| "***".into())
                    .unwrap_or_default(),
            ),
            (
                "tls_strict",
                self.tls.as_ref().is_some_and(|t| t.strict).to_string(),
            ),
            // A path as well: which file holds the secrets key.
            (
                "secrets_key_file",
                path(&self.secrets_key_file).unwrap_or_default(),
            ),
        ];
        let mut out: Vec<Setting> = rows
            .into_iter()
            .map(|(key, value)| Setting {
                key: key.to_owned(),
                value,
                source: self.origins.get(key).cloned().into(),
            })
            .collect();
        for (i, w) in self.webhooks.iter().enumerate() {
            let events = w
                .events
                .as_ref()
                .map(|e| e.join(","))
                .unwrap_or_else(|| "(defaults)".into());
            out.push(Setting {
                key: format!("webhooks[{i}]"),
                value: format!(
                    "{} events={events} format={} secret={}",
                    w.url,
                    w.format.as_deref().unwrap_or("standard"),
                    if w.secret.is_some() { "***" } else { "(none)" }
                ),
                source: self.origins.get("webhooks").cloned().into(),
            });
        }
        if let Some(o) = &self.oidc {
            out.push(Setting {
                key: "oidc".into(),
                value: format!(
                    "issuer={} client_id={} client_secret=*** redirect_url={}",
                    o.issuer, o.client_id, o.redirect_url
                ),
                source: self.origins.get("oidc").cloned().into(),
            });
        }
        for (name, a) in &self.agents {
            let mut shown = a.clone();
            for v in shown.env.values_mut() {
                *v = "***".into();
            }
            out.push(Setting {
                key: format!("agents.{name}"),
                value: describe_agent(&shown),
                source: self.origins.get("agents").cloned().into(),
            });
        }
        out
    }
    /// Refuses to serve beyond loopback without an operator token.
    pub fn check_exposure(&self) -> Result<(), ConfigError> {
        if !self.listen.ip().is_loopback() && self.auth_token.is_none() {
            return Err(err(format!(
                "SHEPHERD_LISTEN: {} is reachable from other machines; set SHEPHERD_TOKEN to serve there",
                self.listen
            )));
        }
        Ok(())
    }
}

/// Every top-level key, for the origins map.
const KEYS: &[&str] = &[
    "listen",
    "data_dir",
    "database_url",
    "log",
    "log_format",
    "auth_token",
    "sqlite_sync",
    "body_limit_bytes",
    "heartbeat_timeout",
    "claim_ttl",
    "sweep_interval",
    "cancel_grace",
    "snapshot_interval",
    "event_retention_days",
    "transcript_retention_days",
    "pg_pool_size",
    "pg_schema",
    "runner_heartbeat",
    "runner_poll",
    "allowed_origins",
    "allowed_hosts",
    "sessions_root",
    "node_id",
    "advertise_url",
    "max_requests",
    "max_streams",
    "max_worker_requests",
    "listen_backlog",
    "metrics_listen",
    "send_timeout",
    "header_timeout",
    "body_timeout",
    "max_requests_per_token",
    "tls_cert",
    "tls_key",
    "tls_strict",
    "host_enrollment_token",
    "secrets_key_file",
    "webhook_timeout",
    "webhook_retry_base",
    "webhook_retry_for",
    "agents",
    "webhooks",
    "oidc",
];

/// One row of `shepherd config`.
#[derive(Debug, Clone, Serialize)]
pub struct Setting {
    pub key: String,
    /// The value as it would be written (secrets as `***`); empty: unset.
    pub value: String,
    pub source: SettingSource,
}

/// Where a setting's value came from, as `shepherd config` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SettingSource {
    File { path: PathBuf },
    Env { var: String },
    Default,
}

impl From<Option<Origin>> for SettingSource {
    fn from(o: Option<Origin>) -> Self {
        match o {
            Some(Origin::File { path }) => SettingSource::File { path },
            Some(Origin::Env { var }) => SettingSource::Env { var },
            None => SettingSource::Default,
        }
    }
}

impl std::fmt::Display for SettingSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SettingSource::File { path } => write!(f, "file {}", path.display()),
            SettingSource::Env { var } => write!(f, "env {var}"),
            SettingSource::Default => f.write_str("default"),
        }
    }
}

/// A URL with its password (`postgres://user:secret@host/db`) as `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => url.to_owned(),
    }
}

/// An agent on one line: its command and the settings it has.
fn describe_agent(a: &AgentConfig) -> String {
    let mut parts = vec![format!("command={:?}", a.command)];
    if let Some(c) = &a.cwd {
        parts.push(format!("cwd={}", c.display()));
    }
    if let Some(r) = &a.repo {
        parts.push(format!("repo={}", r.display()));
    }
    if !a.capabilities.is_empty() {
        parts.push(format!("capabilities={:?}", a.capabilities));
    }
    if let Some(g) = a.cancel_grace_secs {
        parts.push(format!("cancel_grace_secs={g}"));
    }
    if !a.env.is_empty() {
        let env: Vec<String> = a.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.push(format!("env=[{}]", env.join(",")));
    }
    parts.join(" ")
}

fn validate_agent(name: &str, a: &AgentConfig) -> Result<(), ConfigError> {
    a.validate(name).map_err(ConfigError)
}

/// The log filter `SHEPHERD_LOG` names. A field value in it (`[span{f=v}]`)
/// matches literally: as a regular expression (the library's default) it
/// is compiled to a DFA, and a value like `60.....ppp` takes minutes to
/// compile, hanging the start-up.
///
/// Only ASCII is accepted: the library's parser panics on some other
/// characters (cutting inside a multi-byte one), and targets, levels and
/// span names are ASCII anyway.
pub fn log_filter(spec: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    if !spec.is_ascii() {
        return Err("only ASCII characters are allowed".into());
    }
    tracing_subscriber::EnvFilter::builder()
        .with_regex(false)
        .parse(spec)
        .map_err(|e| e.to_string())
}

/// `HOST:PORT` to an address; a host name (`localhost`) is resolved, the
/// first address it resolves to is used.
pub fn resolve_listen(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let s = s.trim();
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    match s.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{s:?} resolves to no address")),
        Err(e) => Err(format!("expected HOST:PORT, got {s:?} ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_origins_are_checked() {
        let c = load(&[(
            "SHEPHERD_ALLOWED_ORIGINS",
            "https://ui.example.com, http://10.0.0.5:8080/",
        )])
        .unwrap();
        assert_eq!(
            c.allowed_origins,
            ["https://ui.example.com", "http://10.0.0.5:8080/"]
        );
        for bad in ["ui.example.com", "https://ui.example.com/app", "*"] {
            let e = load(&[("SHEPHERD_ALLOWED_ORIGINS", bad)]).unwrap_err();
            assert!(e.0.contains("SHEPHERD_ALLOWED_ORIGINS"), "{e}");
        }
    }

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let owned: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_with(None, &move |k| {
            owned
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults() {
        let c = load(&[]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:7700");
        assert_eq!(c.database_url, "sqlite://./shepherd-data/shepherd.db");
        assert_eq!(c.heartbeat_timeout, Duration::from_secs(300));
        assert!(c.check_exposure().is_ok());
    }

    #[test]
    fn bad_values_name_the_key() {
        for (k, v) in [
            ("SHEPHERD_LISTEN", "localhost"),
            ("SHEPHERD_DATABASE_URL", "mysql://x"),
            ("SHEPHERD_LOG", "[[["),
            ("SHEPHERD_HEARTBEAT_TIMEOUT_SECS", "soon"),
            ("SHEPHERD_SQLITE_SYNC", "sometimes"),
        ] {
            let e = load(&[(k, v)]).unwrap_err().to_string();
            assert!(e.contains(k), "{e} should name {k}");
        }
    }

    #[test]
    fn exposure_needs_a_token() {
        let c = load(&[("SHEPHERD_LISTEN", "0.0.0.0:7700")]).unwrap();
        assert!(c
            .check_exposure()
            .unwrap_err()
            .to_string()
            .contains("SHEPHERD_TOKEN"));
        let c = load(&[
            ("SHEPHERD_LISTEN", "0.0.0.0:7700"),
            ("SHEPHERD_TOKEN", "0123456789abcdef"),
        ])
        .unwrap();
        assert!(c.check_exposure().is_ok());
    }

    #[test]
    fn database_urls_are_the_ones_the_store_opens() {
        for url in [
            "postgres://u@h/db",
            "postgresql://h/db?sslmode=require",
            "sqlite://./data/x.db",
            "sqlite:/abs/x.db?mode=rwc",
            "sqlite://",
            "sqlite::memory:",
            "sqlite://:memory:",
            "sqlite://?x=1",
            "mysql://h/db",
            "",
            "POSTGRES://h/db",
        ] {
            let here = check_database_url(url).map_err(|e| e.0);
            let store = shepherd_store::parse_database_url(url).map_err(|e| e.message);
            assert_eq!(here, store.map(|_| ()), "{url:?}");
        }
    }

    #[test]
    fn the_deprecated_token_is_a_warning_kept_for_the_logger() {
        let c = load(&[("SHEPHERD_AUTH_TOKEN", "fedcba9876543210")]).unwrap();
        assert_eq!(
            c.warnings,
            ["SHEPHERD_AUTH_TOKEN is deprecated; set SHEPHERD_TOKEN instead"]
        );
        let c = load(&[("SHEPHERD_TOKEN", "0123456789abcdef")]).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    }

    #[test]
    fn one_token_name_and_the_old_one_still_works() {
        let c = load(&[("SHEPHERD_TOKEN", "0123456789abcdef")]).unwrap();
        assert_eq!(c.auth_token.as_deref(), Some("0123456789abcdef"));
        let c = load(&[("SHEPHERD_AUTH_TOKEN", "fedcba9876543210")]).unwrap();
        assert_eq!(c.auth_token.as_deref(), Some("fedcba9876543210"));
        // The new name wins when both are set.
        let c = load(&[
            ("SHEPHERD_TOKEN", "0123456789abcdef"),
            ("SHEPHERD_AUTH_TOKEN", "fedcba9876543210"),
        ])
        .unwrap();
        assert_eq!(c.auth_token.as_deref(), Some("0123456789abcdef"));
        let e = load(&[("SHEPHERD_TOKEN", "short")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHEPHERD_TOKEN"), "{e}");
    }

    #[test]
    fn operations_settings_are_read_and_checked() {
        let c = load(&[]).unwrap();
        assert_eq!(c.listen_backlog, 1024);
        assert_eq!(c.max_worker_requests, 32);
        assert_eq!(c.metrics_listen, None);
        assert_eq!(c.send_timeout, Duration::from_secs(120));
        let c = load(&[
            ("SHEPHERD_LISTEN_BACKLOG", "4096"),
            ("SHEPHERD_MAX_WORKER_REQUESTS", "8"),
            ("SHEPHERD_METRICS_LISTEN", "127.0.0.1:9464"),
            ("SHEPHERD_SEND_TIMEOUT", "0s"),
        ])
        .unwrap();
        assert_eq!(c.send_timeout, Duration::ZERO);
        assert_eq!(c.listen_backlog, 4096);
        assert_eq!(c.max_worker_requests, 8);
        assert_eq!(c.metrics_listen.unwrap().to_string(), "127.0.0.1:9464");
        for (k, v) in [
            ("SHEPHERD_LISTEN_BACKLOG", "0"),
            ("SHEPHERD_LISTEN_BACKLOG", "70000"),
            ("SHEPHERD_LISTEN_BACKLOG", "many"),
            ("SHEPHERD_MAX_WORKER_REQUESTS", "-1"),
            ("SHEPHERD_METRICS_LISTEN", "nowhere"),
            ("SHEPHERD_SEND_TIMEOUT", "soon"),
        ] {
            let e = load(&[(k, v)]).unwrap_err().to_string();
            assert!(e.contains(k), "{e} should name {k}");
        }
    }

    #[test]
    fn tls_cert_and_key_go_together() {
        assert_eq!(load(&[]).unwrap().tls, None);
        let c = load(&[
            ("SHEPHERD_TLS_CERT", "/etc/shepherd/cert.pem"),
            ("SHEPHERD_TLS_KEY", "/etc/shepherd/key.pem"),
        ])
        .unwrap();
        assert_eq!(
            c.tls,
            Some(TlsFiles {
                cert: "/etc/shepherd/cert.pem".into(),
                key: "/etc/shepherd/key.pem".into(),
                strict: false,
            })
        );
        let strict = load(&[
            ("SHEPHERD_TLS_CERT", "/etc/shepherd/cert.pem"),
            ("SHEPHERD_TLS_KEY", "/etc/shepherd/key.pem"),
            ("SHEPHERD_TLS_STRICT", "1"),
        ])
        .unwrap();
        assert!(strict.tls.as_ref().unwrap().strict);
        let e = load(&[("SHEPHERD_TLS_STRICT", "maybe")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHEPHERD_TLS_STRICT"), "{e}");
        let shown: BTreeMap<String, String> = c
            .effective()
            .into_iter()
            .map(|s| (s.key, s.value))
            .collect();
        assert_eq!(shown["tls_cert"], "/etc/shepherd/cert.pem");
        assert_eq!(shown["tls_key"], "/etc/shepherd/key.pem");
        assert_eq!(
            c.origins.get("tls_key"),
            Some(&Origin::Env {
                var: "SHEPHERD_TLS_KEY".into()
            })
        );
        // One without the other is an error naming both, from either layer.
        for vars in [
            &[("SHEPHERD_TLS_CERT", "/c.pem")][..],
            &[("SHEPHERD_TLS_KEY", "/k.pem")][..],
        ] {
            let e = load(vars).unwrap_err().to_string();
            assert!(
                e.contains("SHEPHERD_TLS_CERT") && e.contains("SHEPHERD_TLS_KEY"),
                "{e}"
            );
        }
        let path = file("tls", "tls_cert = \"/c.pem\"\n");
        let e = load_file(&path, &[]).unwrap_err().to_string();
        assert!(
            e.contains("tls_key") && e.contains("SHEPHERD_TLS_KEY"),
            "{e}"
        );
        // The file names one, the environment the other.
        let c = load_file(&path, &[("SHEPHERD_TLS_KEY", "/k.pem")]).unwrap();
        assert_eq!(c.tls.unwrap().cert, PathBuf::from("/c.pem"));
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn data_dir_moves_the_default_database() {
        let c = load(&[("SHEPHERD_DATA_DIR", "/var/lib/shepherd")]).unwrap();
        assert_eq!(c.database_url, "sqlite:///var/lib/shepherd/shepherd.db");
    }

    /// A fresh directory holding `shepherd.toml` with these contents.
    fn file(name: &str, toml: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("shepherd-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shepherd.toml");
        std::fs::write(&path, toml).unwrap();
        path
    }

    fn load_file(path: &Path, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let owned: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_with(Some(path), &move |k| {
            owned
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn a_log_field_value_is_not_compiled_as_a_regex() {
        // Found by the config fuzz target: compiling the value as a regex
        // took minutes, so loading never answered.
        let value = format!("60{}{}", ".".repeat(35), "p".repeat(20));
        let found = format!("d[{{[= {value}}}#x?xxxxS");
        let e = load(&[("SHEPHERD_LOG", found.as_str())]).unwrap_err();
        assert!(e.0.contains("SHEPHERD_LOG"), "{e}");
        // Also found by it: non-ASCII made the library's parser panic.
        let odd = "  deys\u{feff} = 30\u{4b75e}nEI = '''' ''''''',m,m,";
        let e = load(&[("SHEPHERD_LOG", odd)]).unwrap_err();
        assert!(e.0.contains("ASCII"), "{e}");
        let valid = format!("info,shepherd[run{{f={value}}}]=debug");
        let c = load(&[("SHEPHERD_LOG", valid.as_str())]).unwrap();
        assert_eq!(c.log, valid);
    }

    #[test]
    fn text_loads_as_the_same_file_would() {
        let toml = "heartbeat_timeout_secs = 90\n[agents.demo]\ncommand = [\"./agent.sh\"]\n";
        let path = file("text", toml);
        let vars = [("SHEPHERD_LOG", "debug")];
        let from_file = load_file(&path, &vars).unwrap();
        let from_text = Config::load_text(&path, toml, &|k| {
            vars.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap();
        assert_eq!(format!("{from_text:?}"), format!("{from_file:?}"));
        assert_eq!(from_text.heartbeat_timeout, Duration::from_secs(90));
        let e = Config::load_text(&path, "listen = ", &|_| None).unwrap_err();
        assert!(e.0.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn an_unknown_key_names_the_key_and_the_file() {
        let path = file(
            "unknown",
            "listen = \"127.0.0.1:7701\"\nheartbeat_timeot = \"5m\"\n",
        );
        let e = load_file(&path, &[]).unwrap_err().to_string();
        assert!(e.contains("heartbeat_timeot"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        let path = file(
            "unknown-agent",
            "[agents.demo]\ncommand = [\"true\"]\ncomand = [\"x\"]\n",
        );
        let e = load_file(&path, &[]).unwrap_err().to_string();
        assert!(e.contains("agents.demo.comand"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn durations_take_both_forms_and_env_wins() {
        // The older whole-seconds keys still work, in the file and the environment.
        let path = file(
            "durations",
            "heartbeat_timeout_secs = 120\nclaim_ttl = \"2h\"\n",
        );
        let c = load_file(&path, &[]).unwrap();
        assert_eq!(c.heartbeat_timeout, Duration::from_secs(120));
        assert_eq!(c.claim_ttl, Duration::from_secs(7200));
        let c = load_file(
            &path,
            &[
                ("SHEPHERD_HEARTBEAT_TIMEOUT", "5m"),
                ("SHEPHERD_CLAIM_TTL_SECS", "60"),
            ],
        )
        .unwrap();
        assert_eq!(c.heartbeat_timeout, Duration::from_secs(300));
        assert_eq!(c.claim_ttl, Duration::from_secs(60));
        assert_eq!(
            c.origins.get("heartbeat_timeout"),
            Some(&Origin::Env {
                var: "SHEPHERD_HEARTBEAT_TIMEOUT".into()
            })
        );
        let e = load(&[("SHEPHERD_SWEEP_INTERVAL", "soon")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHEPHERD_SWEEP_INTERVAL"), "{e}");
        let path = file("both", "claim_ttl_secs = 60\nclaim_ttl = \"1m\"\n");
        let e = load_file(&path, &[]).unwrap_err().to_string();
        assert!(e.contains("claim_ttl_secs") && e.contains("both"), "{e}");
    }

    #[test]
    fn effective_settings_say_where_each_came_from_and_hide_secrets() {
        let path = file(
            "effective",
            "database_url = \"postgres://app:hunter2@db.example.com:5432/shepherd\"\n\
             [agents.demo]\ncommand = [\"true\"]\nenv = { API_KEY = \"sk-secret\" }\n",
        );
        let c = load_file(
            &path,
            &[
                ("SHEPHERD_TOKEN", "0123456789abcdef-secret"),
                ("SHEPHERD_LISTEN", "127.0.0.1:7705"),
            ],
        )
        .unwrap();
        let rows = c.effective();
        let row = |k: &str| rows.iter().find(|r| r.key == k).unwrap().clone();
        assert_eq!(row("listen").value, "127.0.0.1:7705");
        assert_eq!(
            row("listen").source,
            SettingSource::Env {
                var: "SHEPHERD_LISTEN".into()
            }
        );
        assert_eq!(row("auth_token").value, "***");
        assert_eq!(
            row("database_url").value,
            "postgres://app:***@db.example.com:5432/shepherd"
        );
        assert_eq!(
            row("database_url").source,
            SettingSource::File { path: path.clone() }
        );
        assert_eq!(row("claim_ttl").source, SettingSource::Default);
        let all = format!("{rows:?}");
        for secret in ["hunter2", "sk-secret", "0123456789abcdef-secret"] {
            assert!(!all.contains(secret), "{secret} shown: {all}");
        }
    }

    #[test]
    fn agent_paths_resolve_against_the_file_not_the_working_directory() {
        let path = file(
            "agent-paths",
            "[agents.demo]\ncommand = [\"./bin/agent.sh\", \"--flag\"]\ncwd = \"work\"\n\
             interactive_command = [\"bash\"]\n",
        );
        let dir = path.parent().unwrap();
        std::fs::create_dir_all(dir.join("work")).unwrap();
        // The test process's working directory is the crate, which has no `work`.
        let c = load_file(&path, &[]).unwrap();
        let a = &c.agents["demo"];
        assert_eq!(a.cwd.as_deref(), Some(dir.join("work").as_path()));
        assert_eq!(a.command[0], dir.join("bin/agent.sh").display().to_string());
        assert_eq!(a.command[1], "--flag");
        // A bare program name is looked up in PATH, as before.
        assert_eq!(a.interactive_command[0], "bash");
    }
}
