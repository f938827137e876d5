//! HTTPS to a distlock server: which certificates the client trusts, and the TLS connection
//! that checks them.
//!
//! The server's certificate is checked by webpki against the roots (the system's, or those of
//! `DISTLOCK_CA_CERT`), as by any HTTPS client — with one addition: a server whose own
//! certificate *is* one of the certificates in `DISTLOCK_CA_CERT`, byte for byte, is trusted
//! too, once its host name and validity period are checked. That is how curl (`--cacert`) and
//! Python treat a self-signed certificate made with `openssl req -x509`, which marks it a CA's
//! (`CA:TRUE`): webpki refuses such a certificate as a server's own (`CaUsedAsEndEntity`),
//! whatever the roots. Nothing else is loosened: the handshake still proves that the server
//! holds the certificate's key, and a certificate not in the file is judged by webpki alone.
//!
//! ureq's own TLS connector takes no verifier of its own, so [`Https`] wraps the connection in
//! TLS itself, with this verifier, in the same way.

use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::{Context, Result};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
    TransportAdapter,
};

/// The TLS configuration of a client that trusts `roots` and, as described above, a server
/// whose certificate is one of `own` (the certificates of `DISTLOCK_CA_CERT`; none for the
/// system's roots).
///
/// # Errors
///
/// No root webpki can use.
pub(super) fn config(
    roots: Vec<CertificateDer<'static>>,
    own: Vec<CertificateDer<'static>>,
) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(roots);
    let webpki =
        WebPkiServerVerifier::builder_with_provider(Arc::new(store), Arc::clone(&provider))
            .build()
            .context(
                "no certificate to trust for https:// (DISTLOCK_CA_CERT, or the system's roots)",
            )?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ItsOwnRoot { webpki, own }))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// webpki's verifier, and the certificates that are trusted as a server's own.
#[derive(Debug)]
struct ItsOwnRoot {
    webpki: Arc<WebPkiServerVerifier>,
    own: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for ItsOwnRoot {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        let own = || {
            self.own
                .iter()
                .any(|own| own.as_ref() == end_entity.as_ref())
        };
        match verified {
            Err(_) if own() => {
                let parsed = ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                valid_at(end_entity, now)?;
                Ok(ServerCertVerified::assertion())
            }
            verified => verified,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// What a client that refused the server's certificate as a CA's is told: webpki never takes a
/// certificate marked `CA:TRUE` as a server's own (`CaUsedAsEndEntity`), unless it is one of
/// `DISTLOCK_CA_CERT`'s own certificates (see [`ItsOwnRoot`]).
pub(super) const CA_AS_SERVER: &str = "the server's certificate is a CA's (marked CA:TRUE), not \
    a server's: if it is self-signed, name that very certificate in DISTLOCK_CA_CERT; otherwise \
    have the server serve a leaf certificate, signed by the CA that DISTLOCK_CA_CERT names";

/// The plain words for a failed connection to a server whose certificate was refused as a
/// CA's ([`CA_AS_SERVER`]); `None` for any other failure, whose own words say enough.
pub(super) fn explained(err: &ureq::Error) -> Option<&'static str> {
    let refused: &rustls::Error = match err {
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref()?,
        ureq::Error::Rustls(refused) => refused,
        _ => return None,
    };
    let rustls::Error::InvalidCertificate(CertificateError::Other(other)) = refused else {
        return None;
    };
    matches!(
        other.0.downcast_ref::<webpki::Error>(),
        Some(webpki::Error::CaUsedAsEndEntity)
    )
    .then_some(CA_AS_SERVER)
}

/// Whether `now` lies within the validity period of the certificate `der`.
fn valid_at(der: &[u8], now: UnixTime) -> Result<(), rustls::Error> {
    let (not_before, not_after) = validity(der).ok_or(rustls::Error::InvalidCertificate(
        CertificateError::BadEncoding,
    ))?;
    let time = now.as_secs();
    let unix = |secs: u64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
    if time < not_before {
        return Err(CertificateError::NotValidYetContext {
            time: now,
            not_before: unix(not_before),
        }
        .into());
    }
    if time > not_after {
        return Err(CertificateError::ExpiredContext {
            time: now,
            not_after: unix(not_after),
        }
        .into());
    }
    Ok(())
}

/// The validity period of the DER certificate `der`, `notBefore` and `notAfter` in seconds
/// since the Unix epoch; `None` for bytes that are not a certificate. The server reads a
/// certificate's end with the same function, to warn of its expiry.
pub(crate) fn validity(der: &[u8]) -> Option<(u64, u64)> {
    use x509_cert::der::Decode;
    let certificate = x509_cert::Certificate::from_der(der).ok()?;
    let period = &certificate.tbs_certificate.validity;
    Some((
        period.not_before.to_unix_duration().as_secs(),
        period.not_after.to_unix_duration().as_secs(),
    ))
}

/// Wraps a connection to an `https://` server in TLS with [`config`]'s checks; passes any
/// other connection through.
#[derive(Debug)]
pub(super) struct Https(pub(super) Arc<ClientConfig>);

impl<In: Transport> Connector<In> for Https {
    type Out = Either<In, Tls>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details.uri.host().unwrap_or_default();
        let host = host
            .strip_prefix('[')
            .and_then(|bracketed| bracketed.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| ureq::Error::Tls("the server's host is not a name TLS can check"))?;
        let mut connection = ClientConnection::new(Arc::clone(&self.0), name)?;
        let mut socket = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        socket.set_timeout(details.timeout);
        connection.complete_io(&mut socket)?;
        Ok(Some(Either::B(Tls {
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            stream: StreamOwned::new(connection, socket),
        })))
    }
}

/// A connection in TLS, as ureq's own TLS transport is made.
pub(super) struct Tls {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl Transport for Tls {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// The roots HTTPS trusts — `DISTLOCK_CA_CERT`'s certificates, or the system's — and the
/// certificates a server may show as its own without a CA (`DISTLOCK_CA_CERT`'s again, for
/// a self-signed one; none of the system's).
pub(super) fn roots() -> Result<(Vec<CertificateDer<'static>>, Vec<CertificateDer<'static>>)> {
    if let Some(path) = std::env::var_os("DISTLOCK_CA_CERT").filter(|p| !p.is_empty()) {
        let shown = std::path::Path::new(&path).display().to_string();
        let pem = std::fs::read(&path)
            .with_context(|| format!("cannot read DISTLOCK_CA_CERT {shown}"))?;
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(&pem) {
            if let ureq::tls::PemItem::Certificate(cert) =
                item.with_context(|| format!("DISTLOCK_CA_CERT {shown} is not PEM"))?
            {
                roots.push(CertificateDer::from(cert.der().to_vec()));
            }
        }
        if roots.is_empty() {
            anyhow::bail!("DISTLOCK_CA_CERT {shown} holds no certificate");
        }
        return Ok((roots.clone(), roots));
    }
    let roots = rustls_native_certs::load_native_certs().certs;
    if roots.is_empty() {
        anyhow::bail!(
            "this system has no root certificates for https://; name a CA in DISTLOCK_CA_CERT"
        );
    }
    Ok((roots, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_certificate_refused_as_a_cas_is_explained() {
        use std::sync::Arc;
        let refused = |why: webpki::Error| {
            rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                Arc::new(why),
            )))
        };
        let in_io = |err: rustls::Error| ureq::Error::Io(std::io::Error::other(err));
        // (the failure, explained as a CA's certificate)
        let cases = [
            (in_io(refused(webpki::Error::CaUsedAsEndEntity)), true),
            (
                ureq::Error::Rustls(refused(webpki::Error::CaUsedAsEndEntity)),
                true,
            ),
            (in_io(refused(webpki::Error::UnknownIssuer)), false),
            (
                in_io(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer,
                )),
                false,
            ),
            (
                ureq::Error::Io(std::io::ErrorKind::ConnectionRefused.into()),
                false,
            ),
            (ureq::Error::HostNotFound, false),
        ];
        for (err, explained_as_ca) in cases {
            let words = explained(&err);
            assert_eq!(words.is_some(), explained_as_ca, "{err}");
            if let Some(words) = words {
                assert!(!words.contains('\n'), "one line");
                assert!(words.contains("DISTLOCK_CA_CERT"), "{words}");
            }
        }
    }

    #[test]
    fn a_certificates_validity_is_read_and_checked() {
        use rcgen::{CertificateParams, KeyPair, date_time_ymd};
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        // 2020-01-01 and 2060-06-30: a UTCTime, and a GeneralizedTime past 2049.
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2060, 6, 30);
        let cert = params.self_signed(&key).expect("a certificate");
        let der = cert.der().as_ref();
        assert_eq!(validity(der), Some((1_577_836_800, 2_855_779_200)));
        let at = |secs| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs));
        // (when, the outcome's words; None: valid)
        let cases = [
            (1_577_836_799, Some("not valid yet")),
            (1_577_836_800, None),
            (2_000_000_000, None),
            (2_855_779_200, None),
            (2_855_779_201, Some("certificate expired")),
        ];
        for (secs, refused) in cases {
            let checked = valid_at(der, at(secs)).map_err(|e| e.to_string());
            match (checked, refused) {
                (Ok(()), None) => {}
                (Err(why), Some(words)) => assert!(why.contains(words), "{secs}: {why}"),
                (got, want) => panic!("{secs}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(validity(&der[..der.len() / 2]), None, "a cut certificate");
        assert_eq!(validity(b"not a certificate"), None);
    }
}
