//! The main listener's accept loop, for plain HTTP and for TLS alike:
//! HTTP/1.1 with upgrades (the session WebSocket), a deadline for each
//! request's header (`SHEPHERD_HEADER_TIMEOUT`), hyper's own parse-error
//! answers in the standard error shape ([`ShapedErrors`]), the TCP options
//! every connection needs, and graceful shutdown.
//!
//! Why not `axum::serve`: it offers no header deadline (a slowloris peer
//! that never finishes its header would hold its connection for ever) and
//! no way to wrap a connection, and TLS needs a loop of its own anyway; one
//! loop keeps the two listeners from drifting apart. A TLS handshake runs in
//! the connection's own task under its own timeout, never in the loop, so a
//! peer that never finishes it cannot hold up accepting others.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::parse_errors::ShapedErrors;
use crate::AppState;

/// What a connection goes through before HTTP.
#[derive(Clone)]
pub enum Handshake {
    Plain,
    Tls {
        acceptor: TlsAcceptor,
        /// A connection whose handshake takes longer is dropped.
        timeout: Duration,
    },
}

/// Serves the application on `listener` until `shutdown` resolves, then
/// stops accepting, lets the connections finish the requests in hand (and
/// long-lived responses end on the state's shutdown token) and returns.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    handshake: Handshake,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let token = state.shutdown.clone();
    let send_timeout = state.settings.send_timeout;
    let header_timeout = state.settings.header_timeout;
    let app = crate::router(state);
    let connections = TaskTracker::new();
    // Tells connections to finish the request in hand and close.
    let closing = CancellationToken::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
        };
        tune_connection(&tcp, send_timeout);
        connections.spawn(connection(
            tcp,
            handshake.clone(),
            app.clone(),
            header_timeout,
            closing.clone(),
        ));
    }
    drop(listener);
    token.cancel();
    closing.cancel();
    connections.close();
    connections.wait().await;
    Ok(())
}

/// As axum's loop: a failed accept that concerns only that connection is
/// skipped; anything else (out of file descriptors) is logged and waited
/// out for a second, since retrying at once would spin.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// One connection: the handshake, then HTTP until the peer leaves or the
/// server closes.
async fn connection(
    tcp: TcpStream,
    handshake: Handshake,
    app: Router,
    header_timeout: Duration,
    closing: CancellationToken,
) {
    match handshake {
        Handshake::Plain => http(tcp, app, header_timeout, closing).await,
        Handshake::Tls { acceptor, timeout } => {
            let tls = tokio::select! {
                _ = closing.cancelled() => return,
                r = tokio::time::timeout(timeout, acceptor.accept(tcp)) => match r {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(target: "shepherd::http", error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(target: "shepherd::http", "TLS handshake timed out");
                        return;
                    }
                },
            };
            http(tls, app, header_timeout, closing).await
        }
    }
}

/// HTTP/1.1 on a connection, with upgrades, until it ends.
async fn http<IO>(io: IO, app: Router, header_timeout: Duration, closing: CancellationToken)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The router takes hyper's request body as it is, as under axum::serve.
    let service = TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(ShapedErrors::new(io)), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = closing.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(target: "shepherd::http", error = %e, "connection ended with an error");
    }
}

/// What every accepted connection gets: TCP_NODELAY, since event streams
/// write small frames that must leave at once rather than wait for the
/// peer's delayed ACK (Nagle), and the send timeout.
fn tune_connection(tcp: &TcpStream, send_timeout: Duration) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
    if let Err(e) = set_send_timeout(tcp, send_timeout) {
        tracing::debug!(error = %e, "could not set TCP_USER_TIMEOUT");
    }
}

/// Closes the connection once data the server sent has waited `timeout`
/// unacknowledged, or untransmitted because the peer's receive window stayed
/// shut (TCP_USER_TIMEOUT). A stream whose client stopped reading would
/// otherwise hold its slot and its buffers for as long as the client keeps
/// the connection open, since the server only learns that a client fell
/// behind when it can write to it again; the same bound ends connections to
/// peers that vanished without a FIN. Linux only; elsewhere a no-op.
#[cfg(target_os = "linux")]
fn set_send_timeout(tcp: &TcpStream, timeout: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    if timeout.is_zero() {
        return Ok(());
    }
    let ms = libc::c_uint::try_from(timeout.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: setsockopt on a socket this stream owns, with a pointer to a
    // live c_uint and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn set_send_timeout(_tcp: &TcpStream, _timeout: Duration) -> std::io::Result<()> {
    Ok(())
}
