//! TLS for PostgreSQL connections: libpq's `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey` URL parameters, over rustls (the TLS library the
//! HTTP client already uses).
//!
//! tokio-postgres itself knows only `disable`, `prefer` and `require` and
//! rejects the others, so they are taken out of the URL here and turned
//! into the driver's own mode plus a rustls configuration that verifies as
//! much as the mode asks:
//!
//! | `sslmode`     | encrypted                | server certificate checked           |
//! |---------------|--------------------------|--------------------------------------|
//! | (absent)      | no                       | –                                    |
//! | `disable`     | no                       | –                                    |
//! | `prefer`      | if the server offers TLS | no                                   |
//! | `require`     | yes                      | no (chain only, if `sslrootcert` is given, as libpq) |
//! | `verify-ca`   | yes                      | chain                                |
//! | `verify-full` | yes                      | chain and host name                  |
//!
//! Without `sslmode` the connection stays unencrypted, as it was before TLS
//! was supported (libpq would `prefer`): a local database pays nothing for
//! TLS it did not ask for. The chain is checked against `sslrootcert=PATH`
//! (PEM) when given, else against the Mozilla root set bundled with the
//! binary (`webpki-roots`, as the HTTP client does). `sslrootcert=system`
//! (libpq 16's spelling) checks it against the operating system's trust
//! store instead, where a deployment keeps its private or cloud CA:
//! `SSL_CERT_FILE` / `SSL_CERT_DIR` when set, else the distribution's
//! bundle. As in libpq, `system` means `verify-full` when no `sslmode` is
//! given and refuses a weaker one, since trusting every public CA without
//! checking the host name would accept any certificate money can buy.
//!
//! `sslcert=PATH&sslkey=PATH` (PEM: the client's certificate, chain after
//! it, and its private key) authenticate the client to a server that asks
//! for a certificate (`cert` in `pg_hba.conf`, or `clientcert=verify-full`).
//! Unlike libpq there is no default file under `~/.postgresql`: a
//! certificate is sent only when the URL names one, both parameters are
//! needed, and naming them with TLS off (no `sslmode`, or `disable`) is an
//! error rather than silently sending nothing. Both files are read when the
//! store opens, so a wrong path or a key that does not match is an error
//! at start, not on the first connection.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use shepherd_core::Error;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// The `sslmode` values, as libpq names them (`allow` is not supported:
/// it only differs from `prefer` in which attempt comes first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the server's chain is checked against (`sslrootcert`); without
/// it, the Mozilla set bundled with the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCerts {
    /// A PEM file of its own.
    File(PathBuf),
    /// The operating system's trust store (`sslrootcert=system`).
    System,
}

/// What a database URL asks of TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    pub root_cert: Option<RootCerts>,
    /// The client's certificate (`sslcert`) and key (`sslkey`).
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// Splits a `postgres://` URL into what tokio-postgres understands (the URL
/// without `sslmode`, `sslrootcert`, `sslcert` and `sslkey`) and the TLS
/// settings they carried.
pub fn split_url(url: &str) -> Result<(String, TlsSettings), Error> {
    let bad = |msg: String| Error::invalid("bad_database_url", msg);
    let mut settings = TlsSettings {
        mode: SslMode::Disable,
        root_cert: None,
        client_cert: None,
        client_key: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), settings));
    };
    let mut kept = Vec::new();
    let mut mode_given = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => {
                mode_given = true;
                settings.mode = match percent_decode(value).as_str() {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(bad(format!(
                            "SHEPHERD_DATABASE_URL: sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                        )))
                    }
                }
            }
            "sslrootcert" | "sslcert" | "sslkey" => {
                let path = percent_decode(value);
                if path.is_empty() {
                    return Err(bad(format!(
                        "SHEPHERD_DATABASE_URL: {key} needs a file path"
                    )));
                }
                match key {
                    // libpq's name for the operating system's store; a file
                    // of that name is `./system`.
                    "sslrootcert" if path == "system" => {
                        settings.root_cert = Some(RootCerts::System)
                    }
                    "sslrootcert" => {
                        settings.root_cert = Some(RootCerts::File(PathBuf::from(path)))
                    }
                    "sslcert" => settings.client_cert = Some(PathBuf::from(path)),
                    _ => settings.client_key = Some(PathBuf::from(path)),
                }
            }
            _ => kept.push(pair),
        }
    }
    if settings.root_cert == Some(RootCerts::System) {
        if !mode_given {
            settings.mode = SslMode::VerifyFull;
        } else if settings.mode != SslMode::VerifyFull {
            return Err(bad(
                "SHEPHERD_DATABASE_URL: sslrootcert=system needs sslmode=verify-full (or no sslmode): \
                 any public CA would otherwise vouch for any server"
                    .into(),
            ));
        }
    }
    match (&settings.client_cert, &settings.client_key) {
        (Some(_), None) => {
            return Err(bad(
                "SHEPHERD_DATABASE_URL: sslcert needs sslkey (the certificate's private key)"
                    .into(),
            ))
        }
        (None, Some(_)) => {
            return Err(bad(
                "SHEPHERD_DATABASE_URL: sslkey needs sslcert (the client certificate)".into(),
            ))
        }
        _ => {}
    }
    if settings.client_cert.is_some() && settings.mode == SslMode::Disable {
        return Err(bad(
            "SHEPHERD_DATABASE_URL: sslcert and sslkey need TLS: add sslmode (require, verify-ca or verify-full)"
                .into(),
        ));
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, settings))
}

/// Decodes `%XX` escapes; anything else, invalid escapes included, is kept
/// as written.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl TlsSettings {
    /// The driver's own mode: whether to ask the server for TLS at all.
    pub fn driver_mode(&self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self.mode {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }

    /// The connector for every connection of a store. Reads `sslrootcert`
    /// once, here, so that a missing or unreadable file is an error at start.
    pub fn connector(&self) -> Result<MakeRustls, Error> {
        if self.mode == SslMode::Disable {
            return Ok(MakeRustls { config: None });
        }
        let bad = |msg: String| Error::invalid("bad_database_url", msg);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        match &self.root_cert {
            Some(RootCerts::File(path)) => {
                let pem = std::fs::read(path).map_err(|e| {
                    bad(format!(
                        "SHEPHERD_DATABASE_URL: sslrootcert {}: {e}",
                        path.display()
                    ))
                })?;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        bad(format!(
                            "SHEPHERD_DATABASE_URL: sslrootcert {}: {e}",
                            path.display()
                        ))
                    })?;
                    roots.add(cert).map_err(|e| {
                        bad(format!(
                            "SHEPHERD_DATABASE_URL: sslrootcert {}: {e}",
                            path.display()
                        ))
                    })?;
                }
                if roots.is_empty() {
                    return Err(bad(format!(
                        "SHEPHERD_DATABASE_URL: sslrootcert {} holds no PEM certificate",
                        path.display()
                    )));
                }
            }
            Some(RootCerts::System) => system_roots(&mut roots)?,
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        // libpq: with a root certificate given, `require` checks the chain.
        let check = match (self.mode, &self.root_cert) {
            (SslMode::VerifyFull, _) => Check::Full,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Check::Chain,
            _ => Check::Nothing,
        };
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| bad(format!("SHEPHERD_DATABASE_URL: sslrootcert: {e}")))?;
        let verifier = Arc::new(Verifier {
            check,
            webpki,
            provider: provider.clone(),
        });
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("TLS configuration: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (Some(cert_path), Some(key_path)) => {
                let (chain, key) = read_client_identity(cert_path, key_path)?;
                // rustls checks that the key is the certificate's.
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    bad(format!(
                        "SHEPHERD_DATABASE_URL: sslcert {} and sslkey {}: {e}",
                        cert_path.display(),
                        key_path.display()
                    ))
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(MakeRustls {
            config: Some(Arc::new(config)),
        })
    }
}

/// The operating system's trust store, for `sslrootcert=system`. A store
/// that yields no certificate at all is an error at start: every
/// connection would fail on it, later and less clearly. Certificates the
/// store holds but rustls cannot use (an odd one in a bundle of hundreds)
/// are skipped, as libpq's OpenSSL skips them.
fn system_roots(roots: &mut rustls::RootCertStore) -> Result<(), Error> {
    let found = rustls_native_certs::load_native_certs();
    let (added, _unusable) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = match found.errors.first() {
            Some(e) => format!(": {e}"),
            None => String::new(),
        };
        return Err(Error::invalid(
            "bad_database_url",
            format!(
                "SHEPHERD_DATABASE_URL: sslrootcert=system found no usable certificate in the \
                 system's trust store (SSL_CERT_FILE / SSL_CERT_DIR, or the distribution's bundle){why}"
            ),
        ));
    }
    Ok(())
}

/// The client's certificate chain (`sslcert`, PEM, its own certificate
/// first) and private key (`sslkey`, PEM: PKCS#8, PKCS#1 or SEC1).
fn read_client_identity(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), Error> {
    let bad = |what: &str, path: &std::path::Path, e: &dyn std::fmt::Display| {
        Error::invalid(
            "bad_database_url",
            format!("SHEPHERD_DATABASE_URL: {what} {}: {e}", path.display()),
        )
    };
    let pem = std::fs::read(cert).map_err(|e| bad("sslcert", cert, &e))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("sslcert", cert, &e))?;
    if chain.is_empty() {
        return Err(bad("sslcert", cert, &"holds no PEM certificate"));
    }
    let pem = std::fs::read(key).map_err(|e| bad("sslkey", key, &e))?;
    // An encrypted key (libpq's `sslpassword`) has no PEM block this reads.
    let key_der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        bad(
            "sslkey",
            key,
            &format!("no unencrypted PEM private key ({e})"),
        )
    })?;
    Ok((chain, key_der))
}

/// How much of the server's certificate a mode checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    Full,
}

/// Checks the server's certificate as far as the mode asks. The handshake's
/// signatures are always checked: even unverified, the connection is
/// encrypted to whoever holds the certificate's key.
#[derive(Debug)]
struct Verifier {
    check: Check,
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.check == Check::Nothing {
            return Ok(ServerCertVerified::assertion());
        }
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // verify-ca: a certificate for another name is still from the CA.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.check == Check::Chain => Ok(ServerCertVerified::assertion()),
            other => other,
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
            &self.provider.signature_verification_algorithms,
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
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// tokio-postgres's TLS connector over rustls. Without a configuration
/// (`sslmode=disable`) the driver never asks for TLS, so it is never used.
#[derive(Clone)]
pub struct MakeRustls {
    config: Option<Arc<rustls::ClientConfig>>,
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        // The driver asks for a connector for every host, TLS or not (a
        // Unix socket's path is no server name): problems wait for `connect`.
        Ok(RustlsConnect {
            config: self.config.clone(),
            domain: domain.to_owned(),
        })
    }
}

/// One connection's TLS handshake.
pub struct RustlsConnect {
    config: Option<Arc<rustls::ClientConfig>>,
    domain: String,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let config = self
                .config
                .ok_or_else(|| io::Error::other("TLS was not configured (sslmode=disable)"))?;
            let name = ServerName::try_from(self.domain.clone()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("host {:?}: {e}", self.domain),
                )
            })?;
            tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map(|s| RustlsStream(Box::new(s)))
        })
    }
}

/// An encrypted connection to PostgreSQL.
pub struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM's channel binding needs the certificate's signature hash
        // algorithm; without it the server still authenticates normally.
        ChannelBinding::none()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_tls_parameters_out_of_the_url() {
        let (url, s) = split_url("postgres://u@h/db").unwrap();
        assert_eq!(url, "postgres://u@h/db");
        assert_eq!(s.mode, SslMode::Disable);

        let (url, s) = split_url(
            "postgres://u@h/db?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(url, "postgres://u@h/db?application_name=x");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(
            s.root_cert,
            Some(RootCerts::File(PathBuf::from("/etc/ca.pem")))
        );

        let (url, s) = split_url("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(url, "postgres://u@h/db");
        assert_eq!(s.mode, SslMode::Require);
        assert_eq!(s.driver_mode(), tokio_postgres::config::SslMode::Require);

        let (_, s) = split_url("postgres://u@h/db?sslmode=prefer").unwrap();
        assert_eq!(s.driver_mode(), tokio_postgres::config::SslMode::Prefer);
        let (_, s) = split_url("postgres://u@h/db?sslmode=verify-ca").unwrap();
        assert_eq!(s.mode, SslMode::VerifyCa);

        for bad in [
            "postgres://h/db?sslmode=allow",
            "postgres://h/db?sslmode=verify_full",
            "postgres://h/db?sslrootcert=",
        ] {
            assert_eq!(
                split_url(bad).unwrap_err().code,
                "bad_database_url",
                "{bad}"
            );
        }
    }

    #[test]
    fn decodes_percent_escapes() {
        assert_eq!(percent_decode("a%20b"), "a b");
        assert_eq!(percent_decode("%2"), "%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("100%"), "100%");
    }

    #[test]
    fn takes_the_client_certificate_out_of_the_url() {
        let (url, s) = split_url(
            "postgres://u@h/db?sslmode=require&sslcert=%2Fc%2Fclient.pem&application_name=x&sslkey=/c/client.key",
        )
        .unwrap();
        assert_eq!(url, "postgres://u@h/db?application_name=x");
        assert_eq!(s.client_cert, Some(PathBuf::from("/c/client.pem")));
        assert_eq!(s.client_key, Some(PathBuf::from("/c/client.key")));

        for (bad, named) in [
            ("postgres://h/db?sslmode=require&sslcert=/c.pem", "sslkey"),
            ("postgres://h/db?sslmode=require&sslkey=/c.key", "sslcert"),
            (
                "postgres://h/db?sslmode=require&sslcert=&sslkey=/c.key",
                "sslcert",
            ),
            ("postgres://h/db?sslcert=/c.pem&sslkey=/c.key", "sslmode"),
            (
                "postgres://h/db?sslmode=disable&sslcert=/c.pem&sslkey=/c.key",
                "sslmode",
            ),
        ] {
            let e = split_url(bad).unwrap_err();
            assert_eq!(e.code, "bad_database_url", "{bad}");
            assert!(e.message.contains(named), "{bad}: {}", e.message);
        }
    }

    /// A throwaway directory holding a client certificate, its key, a key
    /// of another certificate and a file with no PEM in it.
    fn client_files(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("shepherd-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["postgres".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("client.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("client.key"), key.serialize_pem()).unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.join("other.key"), other.serialize_pem()).unwrap();
        std::fs::write(dir.join("empty.pem"), "not a certificate\n").unwrap();
        dir
    }

    #[test]
    fn the_client_certificate_is_read_and_checked_at_start() {
        let dir = client_files("identity");
        let url = |cert: &str, key: &str| {
            format!(
                "postgres://h/db?sslmode=require&sslcert={}&sslkey={}",
                dir.join(cert).display(),
                dir.join(key).display()
            )
        };
        let (_, s) = split_url(&url("client.pem", "client.key")).unwrap();
        let made = s.connector().expect("a certificate and its own key");
        assert!(made
            .config
            .as_ref()
            .is_some_and(|c| c.client_auth_cert_resolver.has_certs()));

        for (cert, key, named) in [
            ("client.pem", "other.key", "other.key"),
            ("missing.pem", "client.key", "missing.pem"),
            ("client.pem", "missing.key", "missing.key"),
            ("empty.pem", "client.key", "empty.pem"),
            ("client.pem", "empty.pem", "sslkey"),
        ] {
            let (_, s) = split_url(&url(cert, key)).unwrap();
            let e = s
                .connector()
                .err()
                .unwrap_or_else(|| panic!("{cert} {key}"));
            assert_eq!(e.code, "bad_database_url", "{cert} {key}");
            assert!(e.message.contains(named), "{cert} {key}: {}", e.message);
        }
        // Without sslcert no certificate is offered.
        let (_, s) = split_url("postgres://h/db?sslmode=require").unwrap();
        let made = s.connector().unwrap();
        assert!(!made.config.unwrap().client_auth_cert_resolver.has_certs());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sslrootcert_system_means_the_os_store_and_full_verification() {
        // No sslmode: verify-full, as libpq does.
        let (url, s) =
            split_url("postgres://u@h/db?sslrootcert=system&application_name=x").unwrap();
        assert_eq!(url, "postgres://u@h/db?application_name=x");
        assert_eq!(s.root_cert, Some(RootCerts::System));
        assert_eq!(s.mode, SslMode::VerifyFull);
        let (_, s) = split_url("postgres://u@h/db?sslmode=verify-full&sslrootcert=system").unwrap();
        assert_eq!(s.mode, SslMode::VerifyFull);
        // A file named like it is still a file when given as a path.
        let (_, s) = split_url("postgres://u@h/db?sslmode=verify-ca&sslrootcert=./system").unwrap();
        assert_eq!(
            s.root_cert,
            Some(RootCerts::File(PathBuf::from("./system")))
        );
        // Any weaker mode is refused, in either order of the parameters.
        for weak in ["disable", "prefer", "require", "verify-ca"] {
            for url in [
                format!("postgres://h/db?sslmode={weak}&sslrootcert=system"),
                format!("postgres://h/db?sslrootcert=system&sslmode={weak}"),
            ] {
                let e = split_url(&url).unwrap_err();
                assert_eq!(e.code, "bad_database_url", "{url}");
                assert!(e.message.contains("verify-full"), "{url}: {}", e.message);
            }
        }
    }

    #[test]
    fn a_missing_root_certificate_is_a_clear_error() {
        let (_, s) =
            split_url("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
                .unwrap();
        let e = s.connector().err().expect("a missing file must fail");
        assert_eq!(e.code, "bad_database_url");
        assert!(e.message.contains("/nonexistent/ca.pem"), "{}", e.message);
    }
}
