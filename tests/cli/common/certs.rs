//! Certificates for the HTTPS tests, made by the test: a CA of its own, and server
//! certificates it signs for `127.0.0.1`, `::1` and `localhost`, written as PEM files for
//! `distlock serve --tls-cert FILE --tls-key FILE`.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// What a server certificate signed by a [`Ca`] is like, besides its names: valid until
/// `not_after` (to the second) when given, one that has expired or expires soon (otherwise
/// rcgen's default, the year 4096); marked as a CA's own (`CA:TRUE`, as an intermediate CA's)
/// when `marked_ca`, what a server shows when it is given a CA's certificate instead of a
/// server's.
#[derive(Default)]
pub struct Leaf {
    pub not_after: Option<SystemTime>,
    pub marked_ca: bool,
}

/// A certificate authority made for one test.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// The two PEM files of a server certificate: the chain (the server's certificate first, then
/// the CA's) and the private key.
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    /// `--tls-cert CERT --tls-key KEY`.
    pub fn args(&self) -> Vec<String> {
        let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_owned();
        vec![
            "--tls-cert".to_owned(),
            path(&self.cert),
            "--tls-key".to_owned(),
            path(&self.key),
        ]
    }
}

impl Ca {
    /// A new CA whose certificate names `name`.
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).expect("a CA certificate").pem();
        Ca {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// The CA's certificate, PEM: what a client trusts.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A server certificate signed by this CA, written to `DIR/NAME.cert.pem` (with the CA's
    /// certificate after it) and `DIR/NAME.key.pem`.
    pub fn server_files(&self, dir: &Path, name: &str) -> CertFiles {
        self.server_files_as(dir, name, &Leaf::default())
    }

    /// The same, for a certificate as `leaf` describes it.
    pub fn server_files_as(&self, dir: &Path, name: &str, leaf: &Leaf) -> CertFiles {
        let (chain, key) = self.server(leaf);
        let files = CertFiles {
            cert: dir.join(format!("{name}.cert.pem")),
            key: dir.join(format!("{name}.key.pem")),
        };
        std::fs::write(&files.cert, chain).expect("write the certificate");
        std::fs::write(&files.key, key).expect("write the key");
        files
    }

    /// A server certificate signed by this CA, as `leaf` describes it: (the chain, PEM; its
    /// private key, PEM).
    fn server(&self, leaf: &Leaf) -> (String, String) {
        let key = KeyPair::generate().expect("a server key");
        let names = ["127.0.0.1", "::1", "localhost"]
            .map(str::to_owned)
            .to_vec();
        let mut params = CertificateParams::new(names).expect("server parameters");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        if leaf.marked_ca {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        }
        if let Some(not_after) = leaf.not_after {
            let since_epoch = not_after
                .duration_since(UNIX_EPOCH)
                .expect("a time after 1970");
            params.not_after = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
        }
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a server certificate");
        (format!("{}{}", cert.pem(), self.pem), key.serialize_pem())
    }
}

/// An HTTP client that reports every status as an answer, opens a new connection for each
/// request and gives each `timeout`; over HTTPS it trusts `ca` only (not the system's roots),
/// when given.
pub fn agent(ca: Option<&Ca>, timeout: Duration) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .max_idle_connections(0);
    if let Some(ca) = ca {
        let root = ureq::tls::Certificate::from_pem(ca.pem().as_bytes()).expect("the CA, PEM");
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&[root]))
                .build(),
        );
    }
    config.build().into()
}
