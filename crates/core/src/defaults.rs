//! The server's default settings, written once: the configuration loader
//! (`shepherd-config`) falls back to them for every key left unset, and the
//! HTTP layer's `Settings::default()` starts from the same values, so a test
//! server and a configured one cannot drift apart.

use std::time::Duration;

/// Largest request body accepted (`SHEPHERD_BODY_LIMIT_BYTES`).
pub const BODY_LIMIT_BYTES: u64 = 8 * 1024 * 1024;
/// A worker that sends nothing for this long is presumed gone and its
/// claims are swept (`SHEPHERD_HEARTBEAT_TIMEOUT`).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a claim lasts without a heartbeat renewing it (`SHEPHERD_CLAIM_TTL`).
pub const CLAIM_TTL: Duration = Duration::from_secs(3600);
/// How often expired claims and silent workers are swept.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(15);
/// Time a cancelled agent gets between SIGTERM and SIGKILL.
pub const CANCEL_GRACE: Duration = Duration::from_secs(30);
/// How often the workers' live state is snapshotted.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(300);
/// How often the built-in runner heartbeats.
pub const RUNNER_HEARTBEAT: Duration = Duration::from_secs(30);
/// How often a runner asks for work when no event woke it (events wake it
/// at once; this only covers a stream that is down).
pub const RUNNER_POLL: Duration = Duration::from_secs(2);
/// A peer that takes nothing the server sends for this long is closed.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(120);
/// A connection must send a request's whole header within this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A request's body must arrive within this.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Days events are kept before pruning.
pub const EVENT_RETENTION_DAYS: u64 = 30;
/// Days transcripts are kept; 0 keeps them for ever.
pub const TRANSCRIPT_RETENTION_DAYS: u64 = 0;
/// Connections in a node's PostgreSQL pool.
pub const PG_POOL_SIZE: u64 = 16;
/// Requests in flight before shedding. Past a few hundred, a queue only adds
/// latency: the store serves them one transaction at a time anyway.
pub const MAX_REQUESTS: u64 = 256;
/// Open streams; each costs a socket and a little memory, not a request slot.
pub const MAX_STREAMS: u64 = 4096;
/// Workers' reports admitted beyond the request cap: enough for the
/// heartbeats and progress of a busy fleet, small against the cap.
pub const MAX_WORKER_REQUESTS: u64 = 32;
/// The listen backlog; Linux caps it at `net.core.somaxconn`.
pub const LISTEN_BACKLOG: u64 = 1024;
/// Requests in flight per credential: far above what one client needs,
/// far below the server's whole cap, so that one token cannot take it all.
pub const MAX_REQUESTS_PER_TOKEN: u64 = 64;

/// A webhook delivery attempt without an answer by then fails.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait before a webhook's second attempt at an event (doubling after).
pub const WEBHOOK_RETRY_BASE: Duration = Duration::from_secs(5);
/// How long one event is retried before it is given up.
pub const WEBHOOK_RETRY_FOR: Duration = Duration::from_secs(24 * 3600);
