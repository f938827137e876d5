//! A `postgres://` URL, read and checked before anything connects: the driver's settings,
//! distlock's connection defaults (timeouts, keepalives, server-side limits), TLS (`sslmode`,
//! `sslrootcert`), and how the server is named in messages — never with its password.

use std::time::Duration;

use anyhow::Result;
use postgres::{Client, Config, NoTls};

use super::tls;

/// How long connecting may take, and how long one statement may run on the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const STATEMENT_TIMEOUT_MS: u32 = 5_000;

/// How to secure the connection: libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyFull,
}

/// A parsed `postgres://` URL, checked before anything connects.
#[derive(Clone)]
pub struct Target {
    /// The URL as given, kept to scrub its password from messages; never shown.
    url: String,
    config: Config,
    ssl: SslMode,
    root_cert: Option<String>,
}

impl Target {
    /// Parses `url`. `sslmode` (disable, prefer (the default), require, verify-full) and
    /// `sslrootcert` are read here; every other setting goes to the driver as it is.
    ///
    /// # Errors
    ///
    /// A message (never containing the password) for an unreadable URL or setting.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut ssl = SslMode::Prefer;
        let mut root_cert = None;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "sslmode" => {
                    ssl = match value {
                        "disable" => SslMode::Disable,
                        "prefer" => SslMode::Prefer,
                        "require" => SslMode::Require,
                        "verify-full" => SslMode::VerifyFull,
                        other => {
                            return Err(format!(
                                "unsupported sslmode {other:?} in the PostgreSQL URL; use \
                                 disable, prefer, require or verify-full"
                            ));
                        }
                    }
                }
                "sslrootcert" => root_cert = Some(percent_decode(value)),
                _ => rest.push(pair),
            }
        }
        let stripped = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config: Config = stripped.parse().map_err(|e| {
            // The parser's own words ("unknown option `foo`", "invalid value for option
            // `port`") are in the error's source.
            let why = std::error::Error::source(&e).map_or(String::new(), |why| format!(": {why}"));
            scrub(format!("invalid PostgreSQL URL: {e}{why}"), url)
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err("the PostgreSQL URL names no host (postgres://user@host/database)".into());
        }
        if config.get_password().is_none() {
            if let Some(password) = std::env::var_os("PGPASSWORD") {
                config.password(password.as_encoded_bytes());
            }
        }
        // distlock's defaults; a name or connect timeout given in the URL wins.
        if config.get_application_name().is_none() {
            config.application_name("distlock");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(10));
        // The URL's own `options` come last, so a user's setting wins over these defaults.
        let options = format!(
            "-c statement_timeout={STATEMENT_TIMEOUT_MS} -c lock_timeout={STATEMENT_TIMEOUT_MS} \
             -c idle_in_transaction_session_timeout=30000 {}",
            config.get_options().unwrap_or("")
        );
        config.options(options.trim_end());
        Ok(Target {
            url: url.to_owned(),
            config,
            ssl,
            root_cert,
        })
    }

    /// One target per host of a multi-host URL, in the URL's order, each with the host's own
    /// port and every other setting (`target_session_attrs` included); the target itself for a
    /// URL of one host. distlock tries them one by one, each within the connect timeout, so
    /// that a host that accepts connections and never answers costs one timeout, not the
    /// call.
    pub fn hosts(&self) -> Vec<Target> {
        let Some(urls) = split_hosts(&self.url) else {
            return vec![self.clone()];
        };
        let each: Option<Vec<Target>> = urls.iter().map(|url| Target::parse(url).ok()).collect();
        each.unwrap_or_else(|| vec![self.clone()])
    }

    /// The URL as given, with its password: for [`scrub`] only.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How long connecting may take: the URL's `connect_timeout`, or distlock's 5 s.
    pub fn connect_timeout(&self) -> Duration {
        self.config
            .get_connect_timeout()
            .copied()
            .unwrap_or(CONNECT_TIMEOUT)
    }

    /// `user@host:port/db` for messages, every host of a multi-host URL in turn
    /// (`user@h1:5432,h2:5432/db`).
    pub fn describe(&self) -> String {
        let hosts = self.config.get_hosts();
        let ports = self.config.get_ports();
        let port = |i: usize| match ports {
            [] => 5432,
            [only] => *only,
            ports => ports.get(i).copied().unwrap_or(5432),
        };
        let shown: Vec<String> = if hosts.is_empty() {
            vec![format!("localhost:{}", port(0))]
        } else {
            hosts
                .iter()
                .enumerate()
                .map(|(i, host)| {
                    let name = match host {
                        postgres::config::Host::Tcp(host) => host.clone(),
                        postgres::config::Host::Unix(path) => path.display().to_string(),
                    };
                    format!("{name}:{}", port(i))
                })
                .collect()
        };
        let user = self.config.get_user().unwrap_or("(default user)");
        let db = self.config.get_dbname().unwrap_or(user);
        format!("{user}@{}/{db}", shown.join(","))
    }

    pub fn connect(&self) -> Result<Client> {
        let mut config = self.config.clone();
        match self.ssl {
            SslMode::Disable => {
                config.ssl_mode(postgres::config::SslMode::Disable);
                Ok(config.connect(NoTls)?)
            }
            SslMode::Prefer | SslMode::Require => {
                config.ssl_mode(if self.ssl == SslMode::Prefer {
                    postgres::config::SslMode::Prefer
                } else {
                    postgres::config::SslMode::Require
                });
                let tls = tls::unverified()?;
                Ok(config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))?)
            }
            SslMode::VerifyFull => {
                config.ssl_mode(postgres::config::SslMode::Require);
                let tls = tls::verified(self.root_cert.as_deref())?;
                Ok(config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))?)
            }
        }
    }
}

/// The URL once per host, for a URL that names several (`postgres://u@h1:1,h2:2/db?…`);
/// `None` for one host.
fn split_hosts(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    (hosts.len() > 1).then(|| {
        hosts
            .iter()
            .map(|host| format!("{scheme}://{userinfo}{host}{tail}"))
            .collect()
    })
}

/// Replaces the URL's password, wherever it appears in `message`, with `***`.
pub fn scrub(message: String, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?']).next())
        .and_then(|authority| authority.rsplit_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|p| !p.is_empty());
    match password {
        Some(password) => message
            .replace(password, "***")
            .replace(&percent_decode(password), "***"),
        None => message,
    }
}

fn percent_decode(value: &str) -> String {
    percent_encoding::percent_decode_str(value)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_scrubbed() {
        let url = "postgres://user:s3cr%21t@db.example:5432/locks";
        assert_eq!(
            scrub("failed for s3cr%21t and s3cr!t".into(), url),
            "failed for *** and ***"
        );
        assert_eq!(scrub("nothing".into(), "postgres://u@h/db"), "nothing");
    }

    #[test]
    fn sslmode_is_read_here_and_the_rest_passes_through() {
        let t = Target::parse("postgres://u:p@h:6543/d?sslmode=verify-full&sslrootcert=%2Fca.pem")
            .unwrap();
        assert_eq!(t.ssl, SslMode::VerifyFull);
        assert_eq!(t.root_cert.as_deref(), Some("/ca.pem"));
        assert_eq!(t.describe(), "u@h:6543/d");
        let hosts = [
            ("postgres://u@h1,h2/d", "u@h1:5432,h2:5432/d"),
            ("postgres://u@h1:1,h2:2/d", "u@h1:1,h2:2/d"),
            (
                "postgres://u@h1:7,h2/d?target_session_attrs=read-write",
                "u@h1:7,h2:5432/d",
            ),
        ];
        for (url, shown) in hosts {
            assert_eq!(Target::parse(url).unwrap().describe(), shown, "{url}");
        }
        let each = |url: &str| -> Vec<String> {
            Target::parse(url)
                .unwrap()
                .hosts()
                .iter()
                .map(Target::describe)
                .collect()
        };
        assert_eq!(
            each("postgres://u:p@h1:7,h2/d?target_session_attrs=read-write"),
            ["u@h1:7/d", "u@h2:5432/d"]
        );
        assert_eq!(each("postgres://u@h/d"), ["u@h:5432/d"]);
        assert_eq!(
            split_hosts("postgresql://u:p%40ss@a:1,b:2,[::1]:3/d?x=1").unwrap(),
            [
                "postgresql://u:p%40ss@a:1/d?x=1",
                "postgresql://u:p%40ss@b:2/d?x=1",
                "postgresql://u:p%40ss@[::1]:3/d?x=1"
            ]
        );
        assert_eq!(split_hosts("postgres://u@h/d"), None);
        for no_host in ["postgres://u:pw@/db", "postgres://"] {
            let err = Target::parse(no_host).err().unwrap();
            assert!(
                err.contains("names no host") && !err.contains("pw"),
                "{no_host}: {err}"
            );
        }
        assert_eq!(
            Target::parse("postgresql://u@h/d").unwrap().ssl,
            SslMode::Prefer
        );
        let err = Target::parse("postgres://u:hunter2@h/d?sslmode=bogus")
            .err()
            .unwrap();
        assert!(err.contains("sslmode"), "{err}");
        let err = Target::parse("postgres://u:hunter2@h:notaport/d")
            .err()
            .unwrap();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
