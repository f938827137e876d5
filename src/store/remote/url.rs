//! A distlock server's URL (`--db http://HOST:PORT` or `https://…`), checked before anything
//! is sent: a scheme, a host and maybe a port, and nothing else — no credentials (the token
//! comes from `DISTLOCK_TOKEN`), no path, no query.

/// A server's URL, checked: `http` or `https`, a host and maybe a port, and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// `scheme://host[:port]`, without a trailing slash.
    base: String,
    pub(super) https: bool,
}

impl ServerUrl {
    /// # Errors
    ///
    /// A usage message for a URL with credentials (the token comes from `DISTLOCK_TOKEN`), a
    /// path, a query or a fragment, or no host.
    pub fn parse(url: &str) -> Result<ServerUrl, String> {
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            "--db: a server's URL is http://HOST:PORT or https://HOST:PORT".to_owned()
        })?;
        let scheme = scheme.to_ascii_lowercase();
        let https = match scheme.as_str() {
            "http" => false,
            "https" => true,
            _ => {
                return Err(format!(
                    "--db: {scheme}:// is not a distlock server's scheme"
                ));
            }
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('@') {
            return Err(
                "--db: a server's URL holds no credentials; give the token in DISTLOCK_TOKEN"
                    .to_owned(),
            );
        }
        if authority.contains(['/', '?', '#']) {
            return Err(format!(
                "--db {scheme}://…: a server's URL is {scheme}://HOST:PORT, with no path, query \
                 or fragment"
            ));
        }
        if authority.is_empty() || authority.starts_with(':') {
            return Err(format!("--db {scheme}://…: the URL names no host"));
        }
        if authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(format!(
                "--db {scheme}://…: the host holds spaces or control characters"
            ));
        }
        Self::check_port(&scheme, authority)?;
        Ok(ServerUrl {
            base: format!("{scheme}://{authority}"),
            https,
        })
    }

    /// A host (an IPv6 address in brackets) and an optional port from 1 to 65535.
    fn check_port(scheme: &str, authority: &str) -> Result<(), String> {
        let port = if let Some(bracketed) = authority.strip_prefix('[') {
            let Some((_, after)) = bracketed.split_once(']') else {
                return Err(format!(
                    "--db {scheme}://…: an IPv6 address in brackets lacks its closing ]"
                ));
            };
            match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or_else(|| {
                    format!("--db {scheme}://…: after the ] of an IPv6 address comes :PORT")
                })?),
            }
        } else {
            match authority.split_once(':') {
                None => None,
                Some((_, port)) if port.contains(':') => {
                    return Err(format!(
                        "--db {scheme}://…: write an IPv6 address in brackets, as [::1]:7878"
                    ));
                }
                Some((_, port)) => Some(port),
            }
        };
        match port.map(str::parse::<u16>) {
            None | Some(Ok(1..)) => Ok(()),
            Some(_) => Err(format!(
                "--db {scheme}://…: the port is a number from 1 to 65535"
            )),
        }
    }

    /// The URL as the user wrote it (less a trailing slash), for messages and for `run`'s
    /// `DISTLOCK_DB`.
    pub fn as_str(&self) -> &str {
        &self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_url_is_a_scheme_and_a_host_and_nothing_else() {
        // (--db, the base it stands for, or the words of the refusal)
        let cases = [
            ("http://127.0.0.1:7878", Ok("http://127.0.0.1:7878")),
            ("http://127.0.0.1:7878/", Ok("http://127.0.0.1:7878")),
            ("HTTPS://locks.example", Ok("https://locks.example")),
            ("https://[::1]:7443", Ok("https://[::1]:7443")),
            ("http://user:secret@host:1", Err("credentials")),
            ("http://tok@host", Err("credentials")),
            ("http://host/locks", Err("no path")),
            ("http://host?x=1", Err("no path")),
            ("http://host#a", Err("no path")),
            ("http://", Err("no host")),
            ("http://:7878", Err("no host")),
            ("http://ho st", Err("spaces")),
            ("ftp://host", Err("not a distlock server")),
            ("http://127.0.0.1:99999", Err("1 to 65535")),
            ("http://127.0.0.1:65536", Err("1 to 65535")),
            ("http://127.0.0.1:65535", Ok("http://127.0.0.1:65535")),
            ("http://127.0.0.1:abc", Err("1 to 65535")),
            ("http://127.0.0.1:-1", Err("1 to 65535")),
            ("http://127.0.0.1:0", Err("1 to 65535")),
            ("http://127.0.0.1:", Err("1 to 65535")),
            ("http://[::1:7878", Err("closing ]")),
            ("http://[::1]x", Err(":PORT")),
            ("http://[::1]", Ok("http://[::1]")),
            ("http://::1:7878", Err("no host")),
            ("http://fe80::1:7878", Err("in brackets")),
        ];
        for (url, expected) in cases {
            match (ServerUrl::parse(url), expected) {
                (Ok(parsed), Ok(base)) => assert_eq!(parsed.as_str(), base, "{url}"),
                (Err(why), Err(words)) => assert!(why.contains(words), "{url}: {why}"),
                (got, want) => panic!("{url}: got {got:?}, want {want:?}"),
            }
        }
    }
}
