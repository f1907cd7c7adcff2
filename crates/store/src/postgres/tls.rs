//! TLS for PostgreSQL connections: libpq's `sslmode` and `sslrootcert`
//! URL parameters, over rustls (the TLS library the HTTP client already uses).
//!
//! tokio-postgres itself knows only `disable`, `prefer` and `require` and
//! rejects `sslrootcert`, so both parameters are taken out of the URL here
//! and turned into the driver's own mode plus a rustls configuration that
//! verifies as much as the mode asks:
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
//! binary (`webpki-roots`, as the HTTP client does).

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
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
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

/// What a database URL asks of TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    pub root_cert: Option<PathBuf>,
}

/// Splits a `postgres://` URL into what tokio-postgres understands (the URL
/// without `sslmode` and `sslrootcert`) and the TLS settings they carried.
pub fn split_url(url: &str) -> Result<(String, TlsSettings), Error> {
    let bad = |msg: String| Error::invalid("bad_database_url", msg);
    let mut settings = TlsSettings {
        mode: SslMode::Disable,
        root_cert: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), settings));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => {
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
            "sslrootcert" => {
                let path = percent_decode(value);
                if path.is_empty() {
                    return Err(bad("SHEPHERD_DATABASE_URL: sslrootcert needs a file path".into()));
                }
                settings.root_cert = Some(PathBuf::from(path));
            }
            _ => kept.push(pair),
        }
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
            Some(path) => {
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
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("TLS configuration: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustls {
            config: Some(Arc::new(config)),
        })
    }
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
        assert_eq!(s.root_cert, Some(PathBuf::from("/etc/ca.pem")));

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
    fn a_missing_root_certificate_is_a_clear_error() {
        let (_, s) =
            split_url("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
                .unwrap();
        let e = s.connector().err().expect("a missing file must fail");
        assert_eq!(e.code, "bad_database_url");
        assert!(e.message.contains("/nonexistent/ca.pem"), "{}", e.message);
    }
}
