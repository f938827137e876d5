//! Who may reach the server: the exposure rule (docs/src/reference/server.md, "Exposure") as one pure decision.
//!
//! Without tokens every client can release any owner's lock by naming the owner, so the
//! server then listens on loopback addresses only. Beyond loopback, with tokens, the tokens
//! must not cross the network in the clear: the server speaks HTTPS, or plain HTTP only when
//! told (`--insecure-http`) that a proxy in front terminates TLS. On loopback anything goes.

use std::net::SocketAddr;

/// Whether the server may listen on `listen`, given whether it serves HTTPS (`tls`), was told
/// `--insecure-http`, and has `--tokens`.
///
/// # Errors
///
/// The usage message (exit 64) saying what is missing.
pub fn exposure(
    listen: SocketAddr,
    tls: bool,
    insecure_http: bool,
    tokens: bool,
) -> Result<(), String> {
    // `::ffff:127.0.0.1` is loopback too: an IPv4 address written as IPv6.
    if listen.ip().to_canonical().is_loopback() {
        return Ok(());
    }
    if !tokens {
        return Err(format!(
            "--listen {listen}: without --tokens the server listens on loopback addresses only \
             (127.0.0.1, ::1): beyond loopback, clients need tokens to be told apart"
        ));
    }
    if !tls && !insecure_http {
        return Err(format!(
            "--listen {listen}: beyond loopback the server serves HTTPS (--tls-cert and \
             --tls-key), or plain HTTP with --insecure-http behind a proxy that terminates TLS"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::exposure;

    #[test]
    fn exposure_table() {
        // (listen, tls, insecure_http, tokens, allowed, what the refusal names)
        let rows: &[(&str, bool, bool, bool, bool, &str)] = &[
            // On loopback, anything goes.
            ("127.0.0.1:7878", false, false, false, true, ""),
            ("127.0.0.1:0", true, false, false, true, ""),
            ("127.0.0.1:7878", false, true, false, true, ""),
            ("127.0.0.1:7878", false, false, true, true, ""),
            ("127.0.0.1:7878", true, false, true, true, ""),
            ("127.1.2.3:7878", false, false, false, true, ""),
            ("[::1]:7878", false, false, false, true, ""),
            ("[::1]:7878", true, false, true, true, ""),
            ("[::ffff:127.0.0.1]:7878", false, false, false, true, ""),
            // Beyond loopback without tokens: refused, whatever else is given.
            ("0.0.0.0:7878", false, false, false, false, "--tokens"),
            ("0.0.0.0:0", true, false, false, false, "--tokens"),
            ("0.0.0.0:7878", false, true, false, false, "--tokens"),
            ("[::]:7878", false, false, false, false, "--tokens"),
            ("[::]:7878", true, false, false, false, "--tokens"),
            ("192.0.2.10:7878", true, false, false, false, "--tokens"),
            ("[2001:db8::1]:7878", false, true, false, false, "--tokens"),
            (
                "[::ffff:192.0.2.10]:7878",
                false,
                false,
                false,
                false,
                "--tokens",
            ),
            // Beyond loopback with tokens: HTTPS, or plain HTTP when told.
            ("0.0.0.0:7878", false, false, true, false, "--insecure-http"),
            ("[::]:7878", false, false, true, false, "--tls-cert"),
            ("192.0.2.10:443", false, false, true, false, "--tls-cert"),
            ("0.0.0.0:7878", true, false, true, true, ""),
            ("[::]:443", true, false, true, true, ""),
            ("0.0.0.0:7878", false, true, true, true, ""),
            ("[2001:db8::1]:80", false, true, true, true, ""),
        ];
        for &(listen, tls, insecure_http, tokens, allowed, names) in rows {
            let addr = listen.parse().expect("an address");
            let decided = exposure(addr, tls, insecure_http, tokens);
            let row = format!("{listen} tls={tls} insecure_http={insecure_http} tokens={tokens}");
            match decided {
                Ok(()) => assert!(allowed, "{row}: must be refused"),
                Err(message) => {
                    assert!(!allowed, "{row}: must be allowed, got {message}");
                    assert!(message.contains(names), "{row}: names {names}: {message}");
                    assert!(
                        message.starts_with(&format!("--listen {addr}")),
                        "{row}: {message}"
                    );
                    assert!(!message.contains('\n'), "{row}: one line: {message}");
                }
            }
        }
    }
}
