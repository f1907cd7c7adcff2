//! This runner's machine as a host of the fleet: its id (kept in the data
//! directory, so a runner that comes back is the same host), its
//! registration with the operator token, and the heartbeats it sends with
//! the host token it was given.
//!
//! The host token is kept in the data directory too (`runner/host-token`,
//! mode 0600): registering an id that is already a host's takes its current
//! token (or an admin's replace), so that nobody else can take the host's
//! link over by registering its id.
//!
//! The runner always dials out: it registers and heartbeats over the same
//! connector client as its workers, so a host behind NAT, with no port open
//! to anyone, is a host like any other.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shepherd_client::Client;
use shepherd_protocol as p;
use tokio_util::sync::CancellationToken;

/// What a runner says about its machine.
#[derive(Debug, Clone, Default)]
pub struct HostSetup {
    /// A name for people; the machine's host name by default.
    pub name: String,
    /// Where sessions on this host may live; none: it hosts no sessions.
    pub sessions_root: Option<PathBuf>,
    /// The server's host enrollment token, for registering a new host with
    /// a token that is not an admin's.
    pub enrollment_token: Option<String>,
    /// Take the host over without its token (an admin's token; the host's
    /// runner moved or lost its data directory).
    pub replace: bool,
}

fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join("runner").join("host-token")
}

/// The host token this data directory's runner was last given.
pub fn kept_token(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(token_path(data_dir)).ok()?;
    Some(text.trim().to_owned()).filter(|t| !t.is_empty())
}

/// Keeps the host token for the next start, readable by this user only.
pub fn keep_token(data_dir: &Path, token: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = token_path(data_dir);
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(token.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| format!("cannot keep the host token in {}: {e}", path.display()))
}

/// The host's id: the one kept in the data directory, or a new one, kept.
pub fn host_id(data_dir: &Path) -> Result<String, String> {
    let path = data_dir.join("runner").join("host-id");
    // Never through a link: the data directory's files are read as they are.
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .and_then(|mut f| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut f, &mut s).map(|_| s)
        });
    if let Ok(text) = read {
        let id = text.trim();
        if !id.is_empty() {
            return Ok(id.to_owned());
        }
    }
    let id = format!("host-{}", random_hex(6)?);
    crate::shim::write_atomic(&path, id.as_bytes())
        .map_err(|e| format!("cannot keep the host id in {}: {e}", path.display()))?;
    Ok(id)
}

/// `bytes` random bytes, hex encoded.
fn random_hex(bytes: usize) -> Result<String, String> {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| format!("cannot read /dev/urandom for the host id: {e}"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Registers the host (again, with the token kept in `data_dir`), retrying
/// while the server cannot be reached; keeps the new token and returns a
/// client that carries it, or none when the server has no hosts at all (an
/// older one).
pub async fn register(
    operator: &Client,
    body: &p::RegisterHostBody,
    data_dir: &Path,
    shutdown: &CancellationToken,
) -> Result<Option<(p::HostView, Client)>, String> {
    let mut backoff = Duration::from_millis(200);
    let mut body = body.clone();
    body.host_token = kept_token(data_dir);
    loop {
        match operator.register_host(&body).await {
            Ok(r) => {
                keep_token(data_dir, &r.host_token)?;
                return Ok(Some((r.host, operator.with_token(r.host_token))));
            }
            Err(e) if e.code() == "host_exists" => {
                return Err(format!(
                    "registering the host: {e}. If this machine is now that host's runner, \
                     start it once with an admin's token and --replace-host"
                ))
            }
            Err(e) if e.code() == "host_enrollment_required" => {
                return Err(format!(
                    "registering the host: {e}. Start the runner with an admin's token, or set \
                     SHEPHERD_HOST_ENROLLMENT_TOKEN to the server's host enrollment token"
                ))
            }
            Err(e) if e.status() == Some(404) && e.code() == "route_not_found" => return Ok(None),
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "cannot reach the server to register the host; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return Err("stopped before registering the host".into()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(format!("registering the host: {e}")),
        }
    }
}

/// Says the host is there every `every` until `shutdown`. A token the
/// server no longer knows (its database was replaced, or another runner
/// registered this host) is replaced by registering again; an unreachable
/// server is waited out, the host simply offline meanwhile.
pub async fn heartbeat_loop(
    operator: Client,
    body: p::RegisterHostBody,
    data_dir: PathBuf,
    host: tokio::sync::watch::Sender<Client>,
    id: String,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut was_down = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let client = host.borrow().clone();
        match client.host_heartbeat(&id).await {
            Ok(_) => {
                if was_down {
                    tracing::info!(host = id, "the server answers the host's heartbeats again");
                    was_down = false;
                }
            }
            Err(e) if e.status() == Some(401) || e.code() == "host_not_found" => {
                tracing::warn!(host = id, error = %e, "the host's token is refused; registering again");
                match register(&operator, &body, &data_dir, &shutdown).await {
                    Ok(Some((_, client))) => {
                        host.send_replace(client);
                    }
                    Ok(None) => tracing::warn!(host = id, "the server no longer knows hosts"),
                    Err(e) => {
                        tracing::warn!(host = id, error = %e, "cannot register the host again")
                    }
                }
            }
            Err(e) => {
                if !was_down {
                    tracing::warn!(host = id, error = %e, "host heartbeat failed; trying again");
                    was_down = true;
                }
            }
        }
    }
}
