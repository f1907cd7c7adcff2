//! A TCP proxy that adds a fixed delay to every byte in each direction, so a
//! benchmark can put a database "farther away" than this machine's loopback.
//!
//! Why not `tc netem`: it needs `CAP_NET_ADMIN` and a network namespace,
//! which a benchmark run by an ordinary user cannot count on.
//!
//! Why threads, not tokio timers: tokio's timer wheel has a 1 ms tick and
//! rounds every sleep up to it, so a 0.5 ms delay would become 1–2 ms.
//! `std::thread::sleep` on Linux overshoots by tens of microseconds.
//!
//! Each direction of each connection is a reader thread and a writer thread
//! joined by a channel of `(due, bytes)`: the reader stamps each chunk with
//! the instant it may leave, the writer sleeps until then. Throughput is
//! not limited by the delay (chunks in flight queue up), only latency grows,
//! as on a real link.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A running proxy; it stops accepting when dropped (open connections run
/// until either side closes them).
pub struct DelayProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl DelayProxy {
    /// Listens on `127.0.0.1:0` and forwards every connection to `upstream`,
    /// delaying each direction by `one_way`.
    pub fn start(upstream: SocketAddr, one_way: Duration) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        // Non-blocking accept with a short poll, so that dropping the proxy
        // ends its accept thread.
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("delay-proxy-accept".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            if let Err(e) = connect_pair(client, upstream, one_way) {
                                eprintln!("delay proxy: cannot reach {upstream}: {e}");
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        Err(e) => {
                            eprintln!("delay proxy: accept failed: {e}");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            })?;
        Ok(DelayProxy { addr, stop })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn connect_pair(client: TcpStream, upstream: SocketAddr, one_way: Duration) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect(upstream)?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
    }
    pipe(client.try_clone()?, server.try_clone()?, one_way)?;
    pipe(server, client, one_way)?;
    Ok(())
}

/// Forwards `from` → `to`, each chunk no earlier than `one_way` after it
/// was read.
fn pipe(mut from: TcpStream, mut to: TcpStream, one_way: Duration) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::Builder::new()
        .name("delay-proxy-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx
                            .send((Instant::now() + one_way, buf[..n].to_vec()))
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
            // Dropping `tx` tells the writer to finish and close.
        })?;
    std::thread::Builder::new()
        .name("delay-proxy-write".into())
        .spawn(move || {
            for (due, chunk) in rx {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

/// `url` with its `host:port` replaced by `addr` (for `postgres://user@host:port/db?…`).
pub fn url_via(url: &str, addr: SocketAddr) -> Result<String, String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{url:?} has no scheme"))?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_start = authority.rfind('@').map_or(0, |i| i + 1);
    let scheme_len = url.len() - rest.len();
    let mut out = String::with_capacity(url.len() + 8);
    out.push_str(&url[..scheme_len + host_start]);
    out.push_str(&addr.to_string());
    out.push_str(&rest[authority_end..]);
    Ok(out)
}

/// The socket address a `postgres://` URL points at (host must be an IP
/// address or `localhost`; the default port is 5432).
pub fn upstream_of(url: &str) -> Result<SocketAddr, String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{url:?} has no scheme"))?;
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let hostport = &authority[authority.rfind('@').map_or(0, |i| i + 1)..];
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().map_err(|e| format!("port {p:?}: {e}"))?),
        None => (hostport, 5432),
    };
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("{hostport:?} is not an IP address and port: {e}"))
}
