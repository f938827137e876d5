//! Where the server listens (`--listen HOST:PORT`): an address or a host name, resolved at
//! start and listened on at each of its addresses on one port, every one of them held to the
//! exposure rule ([`super::exposure`]).

use std::net::SocketAddr;

use super::exposure::exposure;

/// `--listen HOST:PORT`: an IP address (IPv6 in brackets) or a host name, and a port (0: a
/// free one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    host: String,
    port: u16,
}

impl Listen {
    /// # Errors
    ///
    /// A message saying what `raw` lacks to be `HOST:PORT`.
    pub fn parse(raw: &str) -> std::result::Result<Listen, String> {
        let bad = |why: &str| {
            format!(
                "{raw:?} is not HOST:PORT ({why}); for example 127.0.0.1:7878, [::1]:7878 or \
                 localhost:7878"
            )
        };
        let (host, port) = raw.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port is a number from 0 to 65535"))?;
        let host = match host.strip_prefix('[') {
            Some(inside) => inside
                .strip_suffix(']')
                .filter(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
                .ok_or_else(|| bad("brackets hold an IPv6 address"))?,
            None if host.contains(':') => {
                return Err(bad("an IPv6 address goes in brackets, as [::1]:7878"));
            }
            None => host,
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("a host name has no spaces"));
        }
        Ok(Listen {
            host: host.to_owned(),
            port,
        })
    }

    /// The addresses to listen on: the address itself, or every address the host name
    /// resolves to (`localhost`: the loopback addresses the system gives it), in the order the
    /// system gives them, repeats left out.
    ///
    /// # Errors
    ///
    /// A usage message for a name that does not resolve.
    pub(super) fn resolve(&self) -> std::result::Result<Vec<SocketAddr>, String> {
        use std::net::ToSocketAddrs;
        let resolved = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|err| format!("--listen {self}: cannot resolve {}: {err}", self.host))?;
        let mut addresses: Vec<SocketAddr> = Vec::new();
        for address in resolved {
            if !addresses.contains(&address) {
                addresses.push(address);
            }
        }
        if addresses.is_empty() {
            return Err(format!(
                "--listen {self}: {} resolves to no address",
                self.host
            ));
        }
        Ok(addresses)
    }

    /// Whether the host is an IP address rather than a name.
    fn is_address(&self) -> bool {
        self.host.parse::<std::net::IpAddr>().is_ok()
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The exposure rule ([`exposure`]) for every address `listen` resolved to: one refused
/// refuses the start, named (with the name it came from).
pub(super) fn exposed(
    listen: &Listen,
    addresses: &[SocketAddr],
    tls: bool,
    insecure_http: bool,
    tokens: bool,
) -> std::result::Result<(), String> {
    for &address in addresses {
        exposure(address, tls, insecure_http, tokens).map_err(|refusal| {
            if listen.is_address() {
                refusal
            } else {
                refusal.replacen(
                    &format!("--listen {address}"),
                    &format!("--listen {listen} (which resolves to {address})"),
                    1,
                )
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_is_host_colon_port_with_ipv6_in_brackets() {
        // (given, host, port)
        let taken = [
            ("127.0.0.1:7878", "127.0.0.1", 7878),
            ("localhost:0", "localhost", 0),
            ("[::1]:443", "::1", 443),
            ("locks.internal:65535", "locks.internal", 65535),
            ("0.0.0.0:1", "0.0.0.0", 1),
        ];
        for (given, host, port) in taken {
            let listen = Listen::parse(given).unwrap_or_else(|e| panic!("{given}: {e}"));
            assert_eq!((listen.host.as_str(), listen.port), (host, port), "{given}");
            assert_eq!(listen.to_string(), given, "shown as given");
        }
        // (given, what the refusal says)
        let refused = [
            ("localhost", "no port"),
            ("7878", "no port"),
            (":7878", "no host"),
            ("localhost:", "the port is a number"),
            ("localhost:65536", "the port is a number"),
            ("localhost:-1", "the port is a number"),
            ("::1:7878", "in brackets"),
            ("[::1:7878", "brackets hold an IPv6 address"),
            ("[localhost]:7878", "brackets hold an IPv6 address"),
            ("local host:7878", "no spaces"),
        ];
        for (given, says) in refused {
            let why = Listen::parse(given).expect_err(given);
            assert!(why.contains(says), "{given}: {why}");
            assert!(
                why.starts_with(&format!("{given:?} is not HOST:PORT")),
                "{why}"
            );
        }
    }

    #[test]
    fn a_name_is_resolved_and_every_address_must_pass_the_exposure_rule() {
        let listen = Listen::parse("localhost:0").unwrap();
        let addresses = listen.resolve().unwrap();
        assert!(!addresses.is_empty());
        assert!(
            addresses.iter().all(|a| a.ip().is_loopback()),
            "{addresses:?}"
        );
        assert!(exposed(&listen, &addresses, false, false, false).is_ok());
        // A name that also resolves beyond loopback is refused, naming the name and address.
        let wide: SocketAddr = "192.0.2.7:7878".parse().unwrap();
        let both = ["127.0.0.1:7878".parse().unwrap(), wide];
        let named = Listen::parse("locks.example:7878").unwrap();
        let refusal = exposed(&named, &both, false, false, false).expect_err("beyond loopback");
        assert!(
            refusal.starts_with(
                "--listen locks.example:7878 (which resolves to 192.0.2.7:7878): without --tokens"
            ),
            "{refusal}"
        );
        assert!(exposed(&named, &both, true, false, true).is_ok());
        let address = Listen::parse("192.0.2.7:7878").unwrap();
        let refusal = exposed(&address, &[wide], false, false, false).expect_err("refused");
        assert!(
            refusal.starts_with("--listen 192.0.2.7:7878: "),
            "{refusal}"
        );
        let nowhere = Listen::parse("nowhere.invalid:7878").unwrap();
        let why = nowhere.resolve().expect_err("no such name");
        assert!(
            why.starts_with("--listen nowhere.invalid:7878: cannot resolve nowhere.invalid"),
            "{why}"
        );
    }
}
