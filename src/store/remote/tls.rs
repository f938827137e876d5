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
/// since the Unix epoch (a time before it counts as the epoch); `None` for bytes that are not
/// a certificate this reader can take apart. RFC 5280: `Certificate ::= SEQUENCE {
/// tbsCertificate SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer, validity
/// SEQUENCE { notBefore, notAfter }, … }, … }`.
fn validity(der: &[u8]) -> Option<(u64, u64)> {
    let (certificate, _) = element(der, SEQUENCE)?;
    let (tbs, _) = element(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = skip(rest)?;
    }
    // The serial number, the signature's algorithm, the issuer.
    for _ in 0..3 {
        rest = skip(rest)?;
    }
    let (validity, _) = element(rest, SEQUENCE)?;
    let (not_before, after) = time(validity)?;
    let (not_after, _) = time(after)?;
    Some((not_before, not_after))
}

const SEQUENCE: u8 = 0x30;
/// `[0] EXPLICIT Version`.
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The contents of the DER element with tag `tag` at the start of `input`, and what follows
/// it.
fn element(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = input.split_first()?;
    if found != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = match first {
        0..=0x7f => (usize::from(first), rest),
        0x81..=0x84 => {
            let (bytes, rest) = rest.split_at_checked(usize::from(first & 0x7f))?;
            let length = bytes
                .iter()
                .fold(0_usize, |length, byte| length << 8 | usize::from(*byte));
            (length, rest)
        }
        _ => return None,
    };
    rest.split_at_checked(length)
}

/// What follows the DER element at the start of `input`.
fn skip(input: &[u8]) -> Option<&[u8]> {
    element(input, *input.first()?).map(|(_, rest)| rest)
}

/// The time at the start of `input` — `UTCTime` (`YYMMDDHHMMSSZ`, years 1950 to 2049) or
/// `GeneralizedTime` (`YYYYMMDDHHMMSSZ`), as RFC 5280 writes them — in seconds since the Unix
/// epoch, and what follows it.
fn time(input: &[u8]) -> Option<(u64, &[u8])> {
    let (year, text, rest) = match *input.first()? {
        UTC_TIME => {
            let (text, rest) = element(input, UTC_TIME)?;
            let yy = number(text.get(..2)?)?;
            let year = if yy >= 50 { 1900 + yy } else { 2000 + yy };
            (year, text.get(2..)?, rest)
        }
        GENERALIZED_TIME => {
            let (text, rest) = element(input, GENERALIZED_TIME)?;
            (number(text.get(..4)?)?, text.get(4..)?, rest)
        }
        _ => return None,
    };
    let [m1, m2, d1, d2, h1, h2, i1, i2, s1, s2, b'Z'] = *text else {
        return None;
    };
    let [month, day, hour, minute, second] =
        [[m1, m2], [d1, d2], [h1, h2], [i1, i2], [s1, s2]].map(|pair| number(&pair));
    let (month, day, hour, minute, second) = (month?, day?, hour?, minute?, second?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let seconds = days_since_epoch(year, month, day).map_or(0, |days| {
        days * 86_400 + hour * 3_600 + minute * 60 + second
    });
    Some((seconds, rest))
}

/// ASCII digits as a number.
fn number(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0, |n, digit| {
        digit
            .is_ascii_digit()
            .then(|| n * 10 + u64::from(digit - b'0'))
    })
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar; `None` before
/// it. (Howard Hinnant's `days_from_civil`, with March as the year's first month so that the
/// leap day comes last.)
fn days_since_epoch(year: u64, month: u64, day: u64) -> Option<u64> {
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    (era * 146_097 + day_of_era).checked_sub(719_468)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_certificates_are_read_as_rfc_5280_writes_them() {
        // (DER element, seconds since the epoch; None: not a time)
        let cases: [(&[u8], Option<u64>); 11] = [
            (b"\x17\x0d700101000000Z", Some(0)),
            (b"\x17\x0d491231235959Z", Some(2_524_607_999)),
            (b"\x17\x0d500101000000Z", Some(0)),
            (b"\x17\x0d240229120000Z", Some(1_709_208_000)),
            (b"\x18\x0f20500101000000Z", Some(2_524_608_000)),
            (b"\x18\x0f19691231235959Z", Some(0)),
            (b"\x18\x0f99991231235959Z", Some(253_402_300_799)),
            (b"\x17\x0d241301000000Z", None),
            (b"\x17\x0d2401010000001", None),
            (b"\x17\x0c24010100000Z", None),
            (b"\x04\x0d700101000000Z", None),
        ];
        for (der, seconds) in cases {
            let read = time(der).map(|(seconds, rest)| {
                assert!(rest.is_empty());
                seconds
            });
            assert_eq!(read, seconds, "{}", String::from_utf8_lossy(der));
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
