//! Configuration: `shepherd.toml` (optional) overridden by `SHEPHERD_*`
//! environment variables. Every key is documented in the README; a bad value
//! is a start-up error that names the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shepherd_store::{StoreConfig, SyncMode};

pub use shepherd_runner::AgentConfig;

/// The file's shape: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    log: Option<String>,
    log_format: Option<String>,
    auth_token: Option<String>,
    sqlite_sync: Option<String>,
    body_limit_bytes: Option<u64>,
    heartbeat_timeout_secs: Option<u64>,
    claim_ttl_secs: Option<u64>,
    sweep_interval_secs: Option<u64>,
    cancel_grace_secs: Option<u64>,
    snapshot_interval_secs: Option<u64>,
    event_retention_days: Option<u64>,
    transcript_retention_days: Option<u64>,
    pg_pool_size: Option<u64>,
    pg_schema: Option<String>,
    runner_heartbeat_secs: Option<u64>,
    allowed_origins: Option<Vec<String>>,
    sessions_root: Option<PathBuf>,
    node_id: Option<String>,
    advertise_url: Option<String>,
    max_requests: Option<u64>,
    max_streams: Option<u64>,
    #[serde(default)]
    agents: BTreeMap<String, AgentConfig>,
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
    pub sqlite_sync: SyncMode,
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
    /// Origins besides the server's own that browsers may call from.
    pub allowed_origins: Vec<String>,
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
}

/// Requests in flight before shedding. Past a few hundred, a queue only adds
/// latency: the store serves them one transaction at a time anyway.
pub const DEFAULT_MAX_REQUESTS: u64 = 256;
/// Open streams; each costs a socket and a little memory, not a request slot.
pub const DEFAULT_MAX_STREAMS: u64 = 4096;

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

/// The operator token from the environment: `SHEPHERD_TOKEN`, else the
/// deprecated `SHEPHERD_AUTH_TOKEN`, which says it is deprecated on stderr
/// (logging is not set up yet when the configuration is read).
pub fn token_from_env(vars: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(t) = env(vars, TOKEN_ENV) {
        return Some(t);
    }
    let old = env(vars, DEPRECATED_TOKEN_ENV)?;
    eprintln!("warning: {DEPRECATED_TOKEN_ENV} is deprecated; set {TOKEN_ENV} instead");
    Some(old)
}

fn env_u64(
    vars: &dyn Fn(&str) -> Option<String>,
    key: &str,
    file: Option<u64>,
) -> Result<Option<u64>, ConfigError> {
    match env(vars, key) {
        Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
            err(format!(
                "{key}: expected a non-negative whole number, got {v:?}"
            ))
        }),
        None => Ok(file),
    }
}

impl Config {
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
        let file: FileConfig = match &path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    err(format!("SHEPHERD_CONFIG: cannot read {}: {e}", p.display()))
                })?;
                toml::from_str(&text).map_err(|e| err(format!("{}: {e}", p.display())))?
            }
            None => FileConfig::default(),
        };
        let listen_s = env(vars, "SHEPHERD_LISTEN")
            .or(file.listen)
            .unwrap_or_else(|| "127.0.0.1:7700".into());
        let listen = resolve_listen(&listen_s).map_err(|e| err(format!("SHEPHERD_LISTEN: {e}")))?;
        let data_dir = env(vars, "SHEPHERD_DATA_DIR")
            .map(PathBuf::from)
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("./shepherd-data"));
        let database_url = env(vars, "SHEPHERD_DATABASE_URL")
            .or(file.database_url)
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("shepherd.db").display()));
        shepherd_store::parse_database_url(&database_url).map_err(|e| err(e.message))?;
        let log = env(vars, "SHEPHERD_LOG")
            .or(file.log)
            .unwrap_or_else(|| "info".into());
        tracing_subscriber::EnvFilter::try_new(&log)
            .map_err(|e| err(format!("SHEPHERD_LOG: not a valid filter ({e}): {log:?}")))?;
        let log_format = env(vars, "SHEPHERD_LOG_FORMAT")
            .or(file.log_format)
            .unwrap_or_else(|| "text".into());
        let log_json = match log_format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                return Err(err(format!(
                    "SHEPHERD_LOG_FORMAT: expected text or json, got {other:?}"
                )))
            }
        };
        let auth_token = token_from_env(vars).or(file.auth_token);
        if let Some(t) = &auth_token {
            if t.len() < 16 {
                return Err(err("SHEPHERD_TOKEN: use at least 16 characters"));
            }
        }
        let sqlite_sync = match env(vars, "SHEPHERD_SQLITE_SYNC")
            .or(file.sqlite_sync)
            .unwrap_or_else(|| "normal".into())
            .as_str()
        {
            "normal" => SyncMode::Normal,
            "full" => SyncMode::Full,
            other => {
                return Err(err(format!(
                    "SHEPHERD_SQLITE_SYNC: expected normal or full, got {other:?}"
                )))
            }
        };
        let secs = |key: &str,
                    file: Option<u64>,
                    default: u64,
                    min: u64|
         -> Result<Duration, ConfigError> {
            let v = env_u64(vars, key, file)?.unwrap_or(default);
            if v < min {
                return Err(err(format!("{key}: must be at least {min}, got {v}")));
            }
            Ok(Duration::from_secs(v))
        };
        let body_limit = env_u64(vars, "SHEPHERD_BODY_LIMIT_BYTES", file.body_limit_bytes)?
            .unwrap_or(8 * 1024 * 1024);
        if body_limit < 1024 {
            return Err(err("SHEPHERD_BODY_LIMIT_BYTES: must be at least 1024"));
        }
        let allowed_origins = match env(vars, "SHEPHERD_ALLOWED_ORIGINS") {
            Some(v) => v
                .split(',')
                .map(|o| o.trim().to_owned())
                .filter(|o| !o.is_empty())
                .collect(),
            None => file.allowed_origins.unwrap_or_default(),
        };
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
        for (name, agent) in &file.agents {
            validate_agent(name, agent)?;
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
            heartbeat_timeout: secs(
                "SHEPHERD_HEARTBEAT_TIMEOUT_SECS",
                file.heartbeat_timeout_secs,
                300,
                1,
            )?,
            claim_ttl: secs("SHEPHERD_CLAIM_TTL_SECS", file.claim_ttl_secs, 3600, 1)?,
            sweep_interval: secs(
                "SHEPHERD_SWEEP_INTERVAL_SECS",
                file.sweep_interval_secs,
                15,
                1,
            )?,
            cancel_grace: secs("SHEPHERD_CANCEL_GRACE_SECS", file.cancel_grace_secs, 30, 0)?,
            snapshot_interval: secs(
                "SHEPHERD_SNAPSHOT_INTERVAL_SECS",
                file.snapshot_interval_secs,
                300,
                1,
            )?,
            event_retention_days: env_u64(
                vars,
                "SHEPHERD_EVENT_RETENTION_DAYS",
                file.event_retention_days,
            )?
            .unwrap_or(30),
            transcript_retention_days: env_u64(
                vars,
                "SHEPHERD_TRANSCRIPT_RETENTION_DAYS",
                file.transcript_retention_days,
            )?
            .unwrap_or(0),
            pg_pool_size: env_u64(vars, "SHEPHERD_PG_POOL_SIZE", file.pg_pool_size)?
                .unwrap_or(16)
                .clamp(2, 512) as usize,
            pg_schema: env(vars, "SHEPHERD_PG_SCHEMA").or(file.pg_schema),
            runner_heartbeat: secs(
                "SHEPHERD_RUNNER_HEARTBEAT_SECS",
                file.runner_heartbeat_secs,
                30,
                1,
            )?,
            allowed_origins,
            agents: file.agents,
            sessions_root: env(vars, "SHEPHERD_SESSIONS_ROOT")
                .map(PathBuf::from)
                .or(file.sessions_root),
            node_id: env(vars, "SHEPHERD_NODE_ID").or(file.node_id),
            advertise_url: env(vars, "SHEPHERD_ADVERTISE_URL").or(file.advertise_url),
            max_requests: env_u64(vars, "SHEPHERD_MAX_REQUESTS", file.max_requests)?
                .unwrap_or(DEFAULT_MAX_REQUESTS) as usize,
            max_streams: env_u64(vars, "SHEPHERD_MAX_STREAMS", file.max_streams)?
                .unwrap_or(DEFAULT_MAX_STREAMS) as usize,
        })
    }

    /// The store settings this configuration names.
    pub fn store_config(&self) -> StoreConfig {
        let mut c = StoreConfig::new(self.database_url.clone());
        c.sqlite_sync = self.sqlite_sync;
        c.pg_pool_size = self.pg_pool_size;
        c.pg_schema = self.pg_schema.clone();
        c
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

fn validate_agent(name: &str, a: &AgentConfig) -> Result<(), ConfigError> {
    a.validate(name).map_err(ConfigError)
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
    fn data_dir_moves_the_default_database() {
        let c = load(&[("SHEPHERD_DATA_DIR", "/var/lib/shepherd")]).unwrap();
        assert_eq!(c.database_url, "sqlite:///var/lib/shepherd/shepherd.db");
    }
}
