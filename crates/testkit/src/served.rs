//! `shepherd serve` as a child process on a port it chose itself.
//!
//! The test gives the command `SHEPHERD_LISTEN=127.0.0.1:0`; the server
//! binds, then prints the address it got on stdout (`shepherd is serving
//! URL`, and `shepherd serves /metrics at URL` for the metrics listener),
//! which is read back here. A restart on the same address passes the port
//! the first run reported.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What the server prints once its listener is bound.
const SERVING: &str = "shepherd is serving ";
/// What it prints once the metrics listener is bound (before [`SERVING`]).
const METRICS: &str = "shepherd serves /metrics at ";

/// A spawned server; killed and reaped when dropped, even on panic.
pub struct Served {
    pub child: Child,
    /// The address the server bound.
    pub addr: SocketAddr,
    /// `http://ADDR` or `https://ADDR`.
    pub base: String,
    /// The metrics listener's address, when it has one.
    pub metrics: Option<SocketAddr>,
}

impl Served {
    /// Spawns `cmd` (stdout is taken over) and waits up to a minute for the
    /// server to say where it listens; panics if it does not.
    pub fn spawn(cmd: &mut Command) -> Served {
        Served::try_spawn(cmd).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Served::spawn`], with failures as errors.
    pub fn try_spawn(cmd: &mut Command) -> Result<Served, String> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn shepherd serve: {e}"))?;
        let stdout = child.stdout.take().ok_or("the child's stdout")?;
        let (tx, rx) = mpsc::channel();
        // Reads on after the announcement, so that the server never blocks
        // on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut metrics = None;
        loop {
            let line = match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => line,
                Err(_) => {
                    let status = child.try_wait().ok().flatten();
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "shepherd serve did not say where it listens (exit status: {status:?})"
                    ));
                }
            };
            if let Some(url) = line.strip_prefix(METRICS) {
                metrics = Some(address_of(url.trim_end_matches("/metrics"))?);
            } else if let Some(url) = line.strip_prefix(SERVING) {
                let base = url.trim().to_owned();
                let addr = address_of(&base)?;
                return Ok(Served {
                    child,
                    addr,
                    base,
                    metrics,
                });
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

fn address_of(url: &str) -> Result<SocketAddr, String> {
    let authority = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest)
        .trim_end_matches('/');
    authority
        .parse()
        .map_err(|e| format!("not an address in {url:?}: {e}"))
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_urls_give_their_address() {
        assert_eq!(
            address_of("http://127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            address_of("https://[::1]:9/").unwrap(),
            "[::1]:9".parse().unwrap()
        );
        assert!(address_of("http://localhost:80").is_err());
    }

    #[test]
    fn a_child_that_never_announces_is_an_error() {
        let err = Served::try_spawn(Command::new("true").stdin(Stdio::null()))
            .err()
            .expect("an error");
        assert!(err.contains("did not say where it listens"), "{err}");
    }
}
