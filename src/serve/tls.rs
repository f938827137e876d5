//! HTTPS for `distlock serve`: the certificate chain and private key from the PEM files that
//! `--tls-cert` and `--tls-key` name, and the rustls configuration that serves them.
//!
//! The chain and key are held by [`Certificate`], which rustls asks for them at every
//! handshake, so that SIGHUP can swap them while the server runs: a new handshake gets what
//! was read last, a connection already open keeps what it was made with. A reread that fails
//! (a file missing, half written, not PEM, or a key that is not the certificate's) changes
//! nothing. The key must belong to the first certificate of the chain: a chain and key
//! replaced one file at a time are taken only once both are in place.
//!
//! A chain whose certificate has expired, or expires within [`EXPIRY_WARNING`], is still served
//! (refusing to start would take the locks away too), but named in one warning line on stderr
//! at start and at each SIGHUP that reads it ([`Reread::warning`]): clients refuse an expired
//! certificate.
//! Either file must be a regular file; one that is not (a FIFO, whose reader would wait for a
//! writer) is refused without waiting.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use anyhow::Context;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use super::reread::Reread;
use crate::lock::Timestamp;

/// The most bytes read of either file: a certificate chain is a few KiB; a path that names
/// something else (a device, a huge file) is refused rather than read into memory.
const MAX_PEM: u64 = 1024 * 1024;

/// The one application protocol served, told to clients that ask (ALPN).
const ALPN_HTTP_1_1: &[u8] = b"http/1.1";

/// How long before a certificate ends it is named in a warning: a week, time to renew it.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

/// `--tls-cert` and `--tls-key`: the PEM files with the certificate chain (the server's own
/// certificate first) and its private key.
#[derive(Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The chain and key being served, and the files they are read from.
#[derive(Debug)]
pub struct Certificate {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl Certificate {
    /// Reads the chain and key from `files`.
    ///
    /// # Errors
    ///
    /// One line naming the flag and the file: it cannot be read, is not a regular file, holds
    /// no certificate or key, or the key is not the certificate's.
    pub fn load(files: TlsFiles) -> Result<Certificate, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let current = read(&files, &provider)?;
        Ok(Certificate {
            files,
            provider,
            current: RwLock::new(Arc::new(current)),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        // Nothing panics while holding the lock; were it poisoned, the value is still whole.
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl Reread for Certificate {
    fn what(&self) -> String {
        format!(
            "TLS certificate and key ({}, {})",
            self.files.cert.display(),
            self.files.key.display()
        )
    }

    fn reread(&self) -> Result<(), String> {
        let fresh = Arc::new(read(&self.files, &self.provider)?);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = fresh;
        Ok(())
    }

    fn warning(&self) -> Option<String> {
        expiry_warning(&self.files, &self.current().cert, Timestamp::now())
    }
}

/// One line naming the certificate of `chain` (read from `files`) that clients would refuse
/// or soon refuse: one whose validity has not begun at `now` (a clock that is off, or a
/// certificate made for later), else the one that ends first, when it has ended at `now` or
/// ends within [`EXPIRY_WARNING`] of it.
fn expiry_warning(
    files: &TlsFiles,
    chain: &[CertificateDer<'_>],
    now: Timestamp,
) -> Option<String> {
    let periods: Vec<(usize, Timestamp, Timestamp)> = chain
        .iter()
        .enumerate()
        .filter_map(|(index, der)| {
            let (start, end) = validity(der)?;
            Some((index, start, end))
        })
        .collect();
    let which = |index: usize| match index {
        0 => "its certificate".to_owned(),
        n => format!("certificate {} of its chain", n + 1),
    };
    let flag = format!("--tls-cert {}", files.cert.display());
    if let Some((index, start, _)) = periods.iter().find(|(_, start, _)| now < *start) {
        return Some(format!(
            "{flag}: {} is not valid until {start}; clients refuse it until then: check this \
             host's clock, or the certificate's dates",
            which(*index)
        ));
    }
    let (index, _, end) = periods.iter().min_by_key(|(_, _, end)| *end)?;
    let which = which(*index);
    let left = end.0.saturating_sub(now.0);
    if left <= 0 {
        return Some(format!(
            "{flag}: {which} expired at {end}; clients refuse it: renew it, then send SIGHUP"
        ));
    }
    let warned = i64::try_from(EXPIRY_WARNING.as_millis()).unwrap_or(i64::MAX);
    (left <= warned).then(|| {
        format!(
            "{flag}: {which} expires at {end}, {}: renew it, then send SIGHUP",
            time_left(left)
        )
    })
}

/// A certificate's validity period (notBefore, notAfter), or `None` when it cannot be read.
fn validity(der: &CertificateDer<'_>) -> Option<(Timestamp, Timestamp)> {
    let (start, end) = crate::store::certificate_validity(der.as_ref())?;
    let millis = |secs: u64| i64::try_from(secs.saturating_mul(1000)).ok().map(Timestamp);
    Some((millis(start)?, millis(end)?))
}

/// `millis` (more than 0) in words, rounded: "in 3 days", "in 5 hours", "in 12 minutes".
fn time_left(millis: i64) -> String {
    const MINUTE: i64 = 60_000;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;
    let (unit, name) = if millis >= 2 * DAY {
        (DAY, "days")
    } else if millis >= 2 * HOUR {
        (HOUR, "hours")
    } else {
        (MINUTE, "minutes")
    };
    match (millis + unit / 2) / unit {
        0 | 1 => "in 1 minute".to_owned(),
        n => format!("in {n} {name}"),
    }
}

/// The TLS side of the server: HTTP/1.1 only, with the chain and key `certificate` holds at
/// each handshake.
///
/// # Errors
///
/// When rustls refuses its own safe defaults (it does not with the ring provider).
pub fn acceptor(certificate: Arc<Certificate>) -> anyhow::Result<TlsAcceptor> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::clone(&certificate.provider))
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_no_client_auth()
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![ALPN_HTTP_1_1.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The chain and key in `files`, checked to belong together.
fn read(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let cert_flag = format!("--tls-cert {}", files.cert.display());
    let key_flag = format!("--tls-key {}", files.key.display());
    let chain = read_pem(&files.cert, &cert_flag)?;
    let chain = CertificateDer::pem_slice_iter(&chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{cert_flag}: {}", pem_error(&e, "certificate")))?;
    if chain.is_empty() {
        return Err(format!(
            "{cert_flag}: no certificate in it (a PEM \"BEGIN CERTIFICATE\" section)"
        ));
    }
    let key = read_pem(&files.key, &key_flag)?;
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|e| format!("{key_flag}: {}", pem_error(&e, "private key")))?;
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{key_flag}: not a private key distlock can use: {e}"))?;
    let certified = CertifiedKey::new(chain, key);
    match certified.keys_match() {
        Ok(()) => Ok(certified),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => Err(
            format!("{key_flag} is not the key of the first certificate in {cert_flag}"),
        ),
        // A key that cannot tell its public half is taken as it is; the handshake will say.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(certified),
        Err(e) => Err(format!(
            "{cert_flag}: its first certificate cannot be used: {e}"
        )),
    }
}

/// The bytes of `path`, at most [`MAX_PEM`] of them, when it is a regular file. It is opened
/// without blocking, so that a FIFO is refused rather than waited on.
fn read_pem(path: &Path, flag: &str) -> Result<Vec<u8>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{flag}: cannot open it: {e}"))?;
    let kind = file
        .metadata()
        .map_err(|e| format!("{flag}: cannot read it: {e}"))?
        .file_type();
    if !kind.is_file() {
        return Err(format!(
            "{flag}: not a regular file (a FIFO, a device or a folder)"
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{flag}: cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_PEM {
        return Err(format!(
            "{flag}: larger than {} KiB, not a PEM file",
            MAX_PEM / 1024
        ));
    }
    Ok(bytes)
}

/// A PEM parse failure in words (the parser's own names the bytes of the marker it missed).
fn pem_error(err: &pem::Error, what: &str) -> String {
    match err {
        pem::Error::NoItemsFound => format!("no {what} in it (not PEM, or another kind of PEM)"),
        pem::Error::MissingSectionEnd { .. } => {
            "not PEM: a section has no END line (a file cut short?)".to_owned()
        }
        pem::Error::IllegalSectionStart { .. } => "not PEM: a malformed BEGIN line".to_owned(),
        pem::Error::Base64Decode(_) => "not PEM: a section is not valid base64".to_owned(),
        other => format!("not a PEM {what}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, cert: &[u8], key: &[u8]) -> TlsFiles {
        let files = TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        };
        std::fs::write(&files.cert, cert).expect("write the certificate");
        std::fs::write(&files.key, key).expect("write the key");
        files
    }

    #[test]
    fn unusable_files_are_refused_with_one_line_naming_the_flag_and_file() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let half = b"-----BEGIN CERTIFICATE-----\nMIIB\n";
        let cases: [(&str, &[u8], &[u8], &str); 4] = [
            ("empty certificate file", b"", b"", "--tls-cert"),
            ("garbage certificate", b"hello\n", b"", "--tls-cert"),
            ("a certificate cut short", half, b"", "--tls-cert"),
            (
                "a certificate that is not one, and no key",
                b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
                b"",
                "--tls-key",
            ),
        ];
        for (what, cert, key, flag) in cases {
            let files = files(dir.path(), cert, key);
            let err = Certificate::load(files).expect_err(what);
            assert!(!err.contains('\n'), "{what}: one line: {err}");
            assert!(err.starts_with(flag), "{what}: names {flag}: {err}");
            assert!(err.contains(".pem"), "{what}: names the file: {err}");
        }
        let missing = TlsFiles {
            cert: dir.path().join("missing.pem"),
            key: dir.path().join("key.pem"),
        };
        let err = Certificate::load(missing).expect_err("a missing file");
        assert!(
            err.starts_with("--tls-cert ") && err.contains("missing.pem: cannot open it"),
            "{err}"
        );
    }

    /// A certificate for `localhost` and its key, as PEM.
    fn certified() -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("a key");
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        let cert = params.self_signed(&key).expect("a certificate");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_key_of_another_certificate_or_a_certificate_that_is_not_one_is_refused() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let (cert, key) = certified();
        let (_, other_key) = certified();
        assert!(Certificate::load(files(dir.path(), cert.as_bytes(), key.as_bytes())).is_ok());
        let err = Certificate::load(files(dir.path(), cert.as_bytes(), other_key.as_bytes()))
            .expect_err("another certificate's key");
        assert!(
            err.starts_with("--tls-key ") && err.contains("is not the key of"),
            "{err}"
        );
        let not_one = b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
        let err = Certificate::load(files(dir.path(), not_one, key.as_bytes()))
            .expect_err("a certificate section that holds no certificate");
        assert!(
            err.starts_with("--tls-cert ") && !err.contains('\n'),
            "{err}"
        );
    }

    /// A day: year, month, day of the month.
    type Day = (i32, u8, u8);

    /// A certificate for `localhost` valid until `not_after`, as DER.
    fn valid_until(not_after: Day) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        params
            .self_signed(&key)
            .expect("a certificate")
            .der()
            .clone()
    }

    #[test]
    fn a_certificate_that_ended_or_ends_within_a_week_is_named_with_its_end() {
        let files = TlsFiles {
            cert: PathBuf::from("/etc/distlock/server.pem"),
            key: PathBuf::from("/etc/distlock/server.key"),
        };
        // Now is 2030-06-10T00:00:00Z.
        let now = Timestamp(1_907_280_000_000);
        // (the chain's ends, the warning, or "" for none)
        let cases: [(&[Day], &str); 7] = [
            (&[(2031, 1, 1)], ""),
            (&[(2030, 6, 18)], ""),
            (
                &[(2030, 6, 17)],
                "--tls-cert /etc/distlock/server.pem: its certificate expires at \
                 2030-06-17T00:00:00.000Z, in 7 days: renew it, then send SIGHUP",
            ),
            (
                &[(2030, 6, 11)],
                "its certificate expires at 2030-06-11T00:00:00.000Z, in 24 hours",
            ),
            (
                &[(2030, 6, 10)],
                "--tls-cert /etc/distlock/server.pem: its certificate expired at \
                 2030-06-10T00:00:00.000Z; clients refuse it: renew it, then send SIGHUP",
            ),
            (
                &[(2031, 1, 1), (2030, 1, 1)],
                "certificate 2 of its chain expired at 2030-01-01T00:00:00.000Z",
            ),
            (
                &[(2029, 1, 1), (2030, 6, 12)],
                "its certificate expired at 2029-01-01T00:00:00.000Z",
            ),
        ];
        for (ends, words) in cases {
            let chain: Vec<_> = ends.iter().map(|end| valid_until(*end)).collect();
            match expiry_warning(&files, &chain, now) {
                None => assert_eq!(words, "", "{ends:?}: no warning"),
                Some(warning) => assert!(
                    !words.is_empty() && warning.contains(words) && !warning.contains('\n'),
                    "{ends:?}: {warning}"
                ),
            }
        }
        // (milliseconds left, in words)
        for (left, words) in [
            (1, "in 1 minute"),
            (89_999, "in 1 minute"),
            (90_000, "in 2 minutes"),
            (7_199_999, "in 120 minutes"),
            (7_200_000, "in 2 hours"),
            (172_800_000 - 1, "in 48 hours"),
            (3 * 86_400_000 - 5_000, "in 3 days"),
            (604_800_000, "in 7 days"),
        ] {
            assert_eq!(time_left(left), words, "{left}");
        }
    }

    #[test]
    fn a_certificate_whose_validity_has_not_begun_is_named_with_its_start() {
        let files = TlsFiles {
            cert: PathBuf::from("/etc/distlock/server.pem"),
            key: PathBuf::from("/etc/distlock/server.key"),
        };
        let made = |start: Day, end: Day| {
            let key = rcgen::KeyPair::generate().expect("a key");
            let mut params =
                rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
            params.not_before = rcgen::date_time_ymd(start.0, start.1, start.2);
            params.not_after = rcgen::date_time_ymd(end.0, end.1, end.2);
            params
                .self_signed(&key)
                .expect("a certificate")
                .der()
                .clone()
        };
        // Now is 2030-06-10T00:00:00Z.
        let now = Timestamp(1_907_280_000_000);
        // (the chain's periods, the warning, or "" for none)
        let cases: [(&[(Day, Day)], &str); 4] = [
            (&[((2030, 1, 1), (2031, 1, 1))], ""),
            (
                &[((2030, 6, 11), (2031, 1, 1))],
                "--tls-cert /etc/distlock/server.pem: its certificate is not valid until \
                 2030-06-11T00:00:00.000Z; clients refuse it until then",
            ),
            (
                &[((2030, 1, 1), (2031, 1, 1)), ((2030, 7, 1), (2031, 1, 1))],
                "certificate 2 of its chain is not valid until 2030-07-01T00:00:00.000Z",
            ),
            // Not yet valid is said before an end that comes soon.
            (
                &[((2030, 6, 12), (2030, 6, 13))],
                "its certificate is not valid until 2030-06-12",
            ),
        ];
        for (periods, words) in cases {
            let chain: Vec<_> = periods.iter().map(|(s, e)| made(*s, *e)).collect();
            match expiry_warning(&files, &chain, now) {
                None => assert_eq!(words, "", "{periods:?}: no warning"),
                Some(warning) => assert!(
                    !words.is_empty() && warning.contains(words) && !warning.contains('\n'),
                    "{periods:?}: {warning}"
                ),
            }
        }
    }

    #[test]
    fn a_file_that_is_not_a_regular_one_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let fifo = dir.path().join("cert.pem");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let (_, key) = certified();
        std::fs::write(dir.path().join("key.pem"), key).expect("write the key");
        let err = Certificate::load(TlsFiles {
            cert: fifo,
            key: dir.path().join("key.pem"),
        })
        .expect_err("a FIFO");
        assert!(
            err.starts_with("--tls-cert ") && err.contains("not a regular file"),
            "{err}"
        );
    }

    #[test]
    fn a_reread_takes_new_files_and_a_failed_one_keeps_what_was_served() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let (first, first_key) = certified();
        let certificate =
            Certificate::load(files(dir.path(), first.as_bytes(), first_key.as_bytes()))
                .expect("the first certificate");
        let served = |certificate: &Certificate| certificate.current().cert[0].to_vec();
        let was = served(&certificate);
        let (second, second_key) = certified();
        files(dir.path(), second.as_bytes(), first_key.as_bytes());
        assert!(
            certificate.reread().is_err(),
            "a key of another certificate"
        );
        assert_eq!(served(&certificate), was, "kept");
        files(dir.path(), second.as_bytes(), second_key.as_bytes());
        certificate.reread().expect("a good pair");
        assert_ne!(served(&certificate), was, "taken");
    }
}
