//! HTTPS on the main listener (`SHEPHERD_TLS_CERT`, `SHEPHERD_TLS_KEY`):
//! rustls with the `ring` provider (the one the PostgreSQL client and the
//! HTTP client already use), a certificate that can be replaced while the
//! server runs, and the accept loop `axum::serve` does not offer for TLS.
//!
//! [`ServedCert`] is the certificate in force. rustls asks it for the
//! certificate at every handshake ([`ResolvesServerCert`]), and a reload
//! swaps the whole `CertifiedKey` under a lock, so connections already open
//! keep the session they negotiated and new ones get the new certificate.
//! [`ServedCert::watch`] reloads on SIGHUP and when either file's metadata
//! changes (polled: two `stat`s every few seconds cost nothing and need no
//! file-notification crate). A reload that fails (a half-written file, a
//! key that is not the certificate's) keeps the old certificate and logs
//! why.
//!
//! A key file other users may read is served with a warning, as a token
//! file is; with `tls_strict` it is refused, at start and on reload alike.
//!
//! [`serve`] is the TLS counterpart of `axum::serve`: the handshake runs in
//! each connection's own task, bounded by a timeout, so a peer that never
//! finishes it cannot hold up accepting others; HTTP/1.1 with upgrades
//! (the session WebSocket) as on the plain listener, which also serves
//! HTTP/1.1 only; the same TCP options; and the same graceful shutdown.
//!
//! The built-in runner does not come through the listener: it calls the
//! server's router in-process, so it needs no certificate that names
//! `127.0.0.1` and no trust in whatever CA a reload brings.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use shepherd_core::Error;
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::AppState;

/// How often [`ServedCert::watch`] looks at the files.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The certificate chain and key this server presents, read from two PEM
/// files and replaced whole on reload.
#[derive(Debug)]
pub struct ServedCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    /// Refuse a key file other users may read rather than warn.
    strict: bool,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files' metadata when they were last read, successfully or not:
    /// a file that failed to load is tried again once it changes, not at
    /// every poll.
    read_stamp: Mutex<Option<Stamp>>,
}

/// What identifies a version of the two files without reading them: a
/// rewrite changes the modification time or size, a replacement by
/// rename (certbot, a Kubernetes secret's symlink swap) the inode.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp([(Option<SystemTime>, u64, u64, u64); 2]);

fn stamp_of(paths: [&Path; 2]) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().ok(), m.len(), m.ino(), m.dev()))
    };
    Some(Stamp([one(paths[0])?, one(paths[1])?]))
}

impl ServedCert {
    /// Reads the certificate chain at `cert` and its private key at `key`;
    /// an error names the file and what is wrong with it.
    /// A key file other users may read is served with a warning.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<ServedCert>, Error> {
        Self::load_checked(cert, key, false)
    }

    /// As [`ServedCert::load`]; with `strict`, a key file other users may
    /// read is refused (now and at every reload).
    pub fn load_checked(cert: &Path, key: &Path, strict: bool) -> Result<Arc<ServedCert>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let stamp = stamp_of([cert, key]);
        check_key_private(key, strict)?;
        let certified = read_certified_key(cert, key, &provider)?;
        Ok(Arc::new(ServedCert {
            cert_path: cert.to_owned(),
            key_path: key.to_owned(),
            strict,
            provider,
            current: RwLock::new(Arc::new(certified)),
            read_stamp: Mutex::new(stamp),
        }))
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        match self.current.read() {
            Ok(c) => c.clone(),
            // A panic while swapping cannot leave a half-written Arc.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Reads both files again and serves what they hold from the next
    /// handshake on; on error the certificate in force stays.
    pub fn reload(&self) -> Result<(), Error> {
        let stamp = stamp_of([&self.cert_path, &self.key_path]);
        if let Ok(mut s) = self.read_stamp.lock() {
            *s = stamp;
        }
        check_key_private(&self.key_path, self.strict)?;
        let certified = read_certified_key(&self.cert_path, &self.key_path, &self.provider)?;
        let new = Arc::new(certified);
        match self.current.write() {
            Ok(mut c) => *c = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
        Ok(())
    }

    /// Whether either file changed since it was last read.
    fn changed(&self) -> bool {
        let now = stamp_of([&self.cert_path, &self.key_path]);
        // A file that is missing for a moment (being replaced) is not a
        // change yet: its new version will be.
        now.is_some() && self.read_stamp.lock().map(|s| *s != now).unwrap_or(true)
    }

    /// Reloads on SIGHUP (`hangup`, registered by the caller before the
    /// server starts so that an early signal cannot end the process) and
    /// when the files change, every `poll`, until `stop`.
    pub async fn watch(
        self: Arc<Self>,
        mut hangup: Option<tokio::signal::unix::Signal>,
        poll: Duration,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            let why = tokio::select! {
                _ = stop.cancelled() => return,
                Some(()) = async {
                    match hangup.as_mut() {
                        Some(s) => s.recv().await,
                        None => std::future::pending().await,
                    }
                } => "SIGHUP",
                _ = tick.tick() => {
                    let me = self.clone();
                    if !tokio::task::spawn_blocking(move || me.changed()).await.unwrap_or(false) {
                        continue;
                    }
                    "the files changed"
                }
            };
            let me = self.clone();
            let result = tokio::task::spawn_blocking(move || me.reload())
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("reload task: {e}"))));
            match result {
                Ok(()) => tracing::info!(
                    cert = %self.cert_path.display(),
                    reason = why,
                    "TLS certificate reloaded"
                ),
                Err(e) => tracing::error!(
                    error = %e.message,
                    reason = why,
                    "TLS certificate not reloaded; still serving the previous one"
                ),
            }
        }
    }

    /// The rustls configuration of the listener: HTTP/1.1 (as the plain
    /// listener), certificates from this resolver.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, Error> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("TLS configuration: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for ServedCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// What is wrong with the permissions of key file `key`, if anything: a
/// private key other users may read is only as secret as they are.
pub fn key_not_private(key: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(key).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then(|| {
        format!(
            "TLS key {shown} is open to other users (mode {mode:o}); make it private: chmod 600 {shown}",
            shown = key.display()
        )
    })
}

/// Warns of a key file other users may read, or refuses it when `strict`.
fn check_key_private(key: &Path, strict: bool) -> Result<(), Error> {
    match key_not_private(key) {
        Some(why) if strict => Err(Error::invalid(
            "bad_tls_certificate",
            format!("{why} (refused: tls_strict is on)"),
        )),
        Some(why) => {
            tracing::warn!("{why}");
            Ok(())
        }
        None => Ok(()),
    }
}

/// Reads a PEM chain (server certificate first) and a PEM private key, and
/// checks that the key is the certificate's.
fn read_certified_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let bad = |msg: String| Error::invalid("bad_tls_certificate", msg);
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(format!("TLS certificate {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(bad(format!(
            "TLS certificate {}: no PEM certificate in it",
            cert.display()
        )));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| bad(format!("TLS key {}: {e}", key.display())))?;
    CertifiedKey::from_der(chain, private, provider).map_err(|e| {
        bad(format!(
            "TLS certificate {} and key {}: {e}",
            cert.display(),
            key.display()
        ))
    })
}

/// The TLS listener's settings.
#[derive(Debug, Clone)]
pub struct TlsOptions {
    pub cert: Arc<ServedCert>,
    /// A connection whose TLS handshake takes longer is dropped.
    pub handshake_timeout: Duration,
}

impl TlsOptions {
    /// Ten seconds for the handshake.
    pub fn new(cert: Arc<ServedCert>) -> TlsOptions {
        TlsOptions {
            cert,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves `app` over TLS on `listener` until `shutdown` resolves, then stops
/// accepting, lets the connections finish their requests and returns: what
/// `crate::serve` does for plain HTTP, through the same accept loop.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    options: TlsOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let config = options
        .cert
        .server_config()
        .map_err(|e| std::io::Error::other(e.message))?;
    let handshake = crate::listener::Handshake::Tls {
        acceptor: TlsAcceptor::from(config),
        timeout: options.handshake_timeout,
    };
    crate::listener::serve(listener, state, handshake, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    use tokio::net::TcpStream;
    use tokio_rustls::rustls::client::danger::{
        HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
    };
    use tokio_rustls::rustls::pki_types::{ServerName, UnixTime};
    use tokio_rustls::rustls::{DigitallySignedStruct, SignatureScheme};

    /// A client configuration that trusts exactly the certificate `cert`
    /// serves when the connection is made (its handshake signature still
    /// checked), whatever names and CA it has.
    fn client_config(cert: &Arc<ServedCert>) -> Result<rustls::ClientConfig, Error> {
        Ok(
            rustls::ClientConfig::builder_with_provider(cert.provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| Error::internal(format!("TLS configuration: {e}")))?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ServedCertVerifier(cert.clone())))
                .with_no_client_auth(),
        )
    }

    /// Accepts exactly the certificate its [`ServedCert`] serves now.
    #[derive(Debug)]
    struct ServedCertVerifier(Arc<ServedCert>);

    impl ServerCertVerifier for ServedCertVerifier {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp_response: &[u8],
            _now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            let served = self.0.current();
            if served.end_entity_cert()? == end_entity {
                Ok(ServerCertVerified::assertion())
            } else {
                Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::ApplicationVerificationFailure,
                ))
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0
                .provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// A fresh CA's leaf for 127.0.0.1 and localhost: (cert PEM, key PEM).
    fn leaf() -> (String, String) {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    struct Files {
        dir: PathBuf,
        cert: PathBuf,
        key: PathBuf,
    }

    impl Files {
        fn new(name: &str) -> Files {
            let dir = std::env::temp_dir().join(format!(
                "shepherd-tls-{name}-{}-{}",
                std::process::id(),
                shepherd_store::now_ms()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Files {
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
                dir,
            }
        }

        fn write(&self, (cert, key): &(String, String)) {
            std::fs::write(&self.cert, cert).unwrap();
            std::fs::write(&self.key, key).unwrap();
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn served(cert: &ServedCert) -> Vec<u8> {
        cert.current().end_entity_cert().unwrap().to_vec()
    }

    fn der_of(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    /// Polls `cond` for up to five seconds.
    async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
        for _ in 0..250 {
            if cond() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cond()
    }

    #[test]
    fn bad_files_are_refused_with_their_names() {
        let f = Files::new("bad");
        let (cert, key) = leaf();
        let (_, other_key) = leaf();
        // Missing files, a certificate file without a certificate, a key
        // that is not the certificate's.
        let e = ServedCert::load(&f.cert, &f.key).unwrap_err();
        assert!(e.message.contains("cert.pem"), "{e}");
        std::fs::write(&f.cert, "not pem").unwrap();
        std::fs::write(&f.key, &key).unwrap();
        let e = ServedCert::load(&f.cert, &f.key).unwrap_err();
        assert!(e.message.contains("no PEM certificate"), "{e}");
        std::fs::write(&f.cert, &cert).unwrap();
        std::fs::write(&f.key, "not a key").unwrap();
        let e = ServedCert::load(&f.cert, &f.key).unwrap_err();
        assert!(e.message.contains("key.pem"), "{e}");
        std::fs::write(&f.key, &other_key).unwrap();
        let e = ServedCert::load(&f.cert, &f.key).unwrap_err();
        assert_eq!(e.code, "bad_tls_certificate");
        assert!(e.message.contains("key"), "{e}");
        std::fs::write(&f.key, &key).unwrap();
        let served_now = ServedCert::load(&f.cert, &f.key).unwrap();
        assert_eq!(served(&served_now), der_of(&cert));
    }

    #[test]
    fn a_key_other_users_may_read_is_warned_of_or_refused_when_strict() {
        use std::os::unix::fs::PermissionsExt;
        let f = Files::new("modes");
        f.write(&leaf());
        let mode = |m| std::fs::set_permissions(&f.key, std::fs::Permissions::from_mode(m));
        mode(0o644).unwrap();
        let why = key_not_private(&f.key).expect("a 0644 key is open to others");
        assert!(why.contains("644") && why.contains("chmod 600"), "{why}");
        // Served all the same without strict, refused with it.
        let served = ServedCert::load(&f.cert, &f.key).unwrap();
        let e = ServedCert::load_checked(&f.cert, &f.key, true).unwrap_err();
        assert_eq!(e.code, "bad_tls_certificate");
        assert!(
            e.message.contains("tls_strict") && e.message.contains("644"),
            "{e}"
        );
        mode(0o600).unwrap();
        assert_eq!(key_not_private(&f.key), None);
        let strict = ServedCert::load_checked(&f.cert, &f.key, true).unwrap();
        // A reload of a strict server refuses a key opened up since.
        mode(0o640).unwrap();
        assert!(strict.reload().is_err());
        served.reload().unwrap();
    }

    #[test]
    fn a_failed_reload_keeps_the_certificate_in_force() {
        let f = Files::new("failed");
        let first = leaf();
        f.write(&first);
        let cert = ServedCert::load(&f.cert, &f.key).unwrap();
        // A new certificate whose key has not been written yet.
        let second = leaf();
        std::fs::write(&f.cert, &second.0).unwrap();
        assert!(cert.reload().is_err());
        assert_eq!(served(&cert), der_of(&first.0));
        std::fs::write(&f.cert, "garbage").unwrap();
        assert!(cert.reload().is_err());
        assert_eq!(served(&cert), der_of(&first.0));
        f.write(&second);
        cert.reload().unwrap();
        assert_eq!(served(&cert), der_of(&second.0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_to_the_files_is_served_without_a_signal() {
        let f = Files::new("poll");
        let first = leaf();
        f.write(&first);
        let cert = ServedCert::load(&f.cert, &f.key).unwrap();
        let stop = CancellationToken::new();
        let watch = tokio::spawn(
            cert.clone()
                .watch(None, Duration::from_millis(20), stop.clone()),
        );
        // Replaced by rename, as certbot and Kubernetes do.
        let second = leaf();
        let (tmp_cert, tmp_key) = (f.dir.join("cert.new"), f.dir.join("key.new"));
        std::fs::write(&tmp_cert, &second.0).unwrap();
        std::fs::write(&tmp_key, &second.1).unwrap();
        std::fs::rename(&tmp_key, &f.key).unwrap();
        std::fs::rename(&tmp_cert, &f.cert).unwrap();
        assert!(eventually(|| served(&cert) == der_of(&second.0)).await);
        // Written in place, the certificate first: the half-written state
        // fails and is tried again once the key arrives.
        let third = leaf();
        std::fs::write(&f.cert, &third.0).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(served(&cert), der_of(&second.0));
        std::fs::write(&f.key, &third.1).unwrap();
        assert!(eventually(|| served(&cert) == der_of(&third.0)).await);
        stop.cancel();
        watch.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sighup_reloads() {
        let f = Files::new("hup");
        let first = leaf();
        f.write(&first);
        let cert = ServedCert::load(&f.cert, &f.key).unwrap();
        let hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).unwrap();
        let stop = CancellationToken::new();
        // Polling far too slowly to be what picks the change up.
        let watch = tokio::spawn(cert.clone().watch(
            Some(hangup),
            Duration::from_secs(3600),
            stop.clone(),
        ));
        let second = leaf();
        f.write(&second);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(served(&cert), der_of(&first.0));
        // SAFETY: raise(3) with a signal this process handles (above).
        assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
        assert!(eventually(|| served(&cert) == der_of(&second.0)).await);
        stop.cancel();
        watch.await.unwrap();
    }

    /// A TLS client of the listener at `addr` trusting what `trust` serves.
    async fn tls_client(
        trust: &Arc<ServedCert>,
        addr: std::net::SocketAddr,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(addr).await?;
        tokio_rustls::TlsConnector::from(Arc::new(client_config(trust).unwrap()))
            .connect(ServerName::from(addr.ip()), tcp)
            .await
    }

    /// Whether the server closes `stream` within `within` (reading nothing).
    async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
        stream: &mut S,
        within: Duration,
    ) -> bool {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(within, stream.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_handshakes_and_headers_are_cut_off_without_holding_up_others() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let f = Files::new("listener");
        f.write(&leaf());
        let cert = ServedCert::load(&f.cert, &f.key).unwrap();
        let url = format!("sqlite://{}", f.dir.join("shepherd.db").display());
        let store = shepherd_store::Store::open(&shepherd_store::StoreConfig::new(url))
            .await
            .unwrap();
        let state = AppState::new(
            store.clone(),
            crate::Settings {
                header_timeout: Duration::from_millis(300),
                ..crate::Settings::default()
            },
            CancellationToken::new(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = TlsOptions {
            handshake_timeout: Duration::from_millis(300),
            ..TlsOptions::new(cert.clone())
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, state, options, async move {
            let _ = stopped.await;
        }));

        // A peer that connects and never says hello ...
        let mut silent = TcpStream::connect(addr).await.unwrap();
        // ... does not keep another from being served meanwhile,
        let mut tls = tls_client(&cert, addr).await.unwrap();
        tls.write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // and is dropped once the handshake timeout passes.
        assert!(closed_within(&mut silent, Duration::from_secs(5)).await);

        // A peer that sends half its headers is closed too.
        let mut slow = tls_client(&cert, addr).await.unwrap();
        slow.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
            .await
            .unwrap();
        assert!(closed_within(&mut slow, Duration::from_secs(5)).await);

        // The built-in runner's trust is this certificate, not any other.
        let other = Files::new("other");
        other.write(&leaf());
        let other = ServedCert::load(&other.cert, &other.key).unwrap();
        let e = tls_client(&other, addr).await.unwrap_err();
        assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");

        // Shutdown returns with a connection still open (idle).
        let _idle = tls_client(&cert, addr).await.unwrap();
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returns")
            .unwrap()
            .unwrap();
        store.close();
    }
}
