//! The HTTP side of a distlock server's client: one agent per store, with the token, the
//! certificates HTTPS trusts ([`tls`]) and a resolver of its own; each request sent (again,
//! while the server cannot be connected to), a waiter's long poll given up at an interrupt.
//! One request's sending and its answer, checked for what the server refused, are
//! [`super::exchange`]'s.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use crate::store::Error;

use super::exchange::{Failure, HttpAnswer, HttpRequest, send};
use super::{ServerUrl, tls};

/// How long a server that refuses connections is sought again, at least.
pub(super) const CONNECT_BUDGET: Duration = Duration::from_secs(5);

/// How long one request may take, beyond the time the server was asked to wait.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How often an interruptible long poll looks for an interrupt.
const INTERRUPT_CHECK: Duration = Duration::from_millis(20);

/// How long an interrupted waiter spends giving its place up before it exits: the leave, and
/// the answer of the long poll the leave ends.
const LEAVING: Duration = Duration::from_secs(3);

/// How long an interrupted long poll's answer is awaited after a leave was answered, before
/// the leave is sent again (a poll that reached the server after the leave is ended by the
/// next one).
const POLL_ENDED: Duration = Duration::from_millis(500);

/// The pause before a leave that got no answer is sent again.
const UNREACHED: Duration = Duration::from_millis(200);

/// The agent of one server, with its URL and token.
pub(super) struct Client {
    agent: ureq::Agent,
    url: ServerUrl,
    /// `Bearer <token>`, when `DISTLOCK_TOKEN` gives one.
    authorization: Option<String>,
}

impl Client {
    /// A client of the server at `url`, with the token of `DISTLOCK_TOKEN` and, for HTTPS, the
    /// roots of `DISTLOCK_CA_CERT` or the system's.
    ///
    /// # Errors
    ///
    /// A `DISTLOCK_CA_CERT` that cannot be read or holds no certificate, or no system roots
    /// for HTTPS; a token that is not text.
    pub(super) fn new(url: &ServerUrl) -> Result<Client> {
        use ureq::unversioned::transport::{ConnectProxyConnector, Connector, TcpConnector};
        let authorization = authorization().map_err(anyhow::Error::msg)?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_BUDGET))
            .max_redirects(0)
            .user_agent(concat!("distlock/", env!("CARGO_PKG_VERSION")))
            .build();
        let agent = if url.https {
            // As ureq's default chain (a CONNECT proxy if one is set, TCP), then TLS with
            // distlock's own checks of the certificate (see [`tls`]).
            let (roots, own) = tls::roots()?;
            let connector =
                ().chain(ConnectProxyConnector::default())
                    .chain(TcpConnector::default())
                    .chain(tls::Https(tls::config(roots, own)?));
            ureq::Agent::with_parts(config, connector, OnThisThread)
        } else {
            let connector = ureq::unversioned::transport::DefaultConnector::default();
            ureq::Agent::with_parts(config, connector, OnThisThread)
        };
        Ok(Client {
            agent,
            url: url.clone(),
            authorization,
        })
    }

    pub(super) fn url(&self) -> &ServerUrl {
        &self.url
    }

    /// Sends `call` until it is answered, or until `until` while the server cannot be
    /// connected to — and, with `again_after_sent`, also while a request that was sent got no
    /// answer (for a request whose repetition changes nothing more than it would have).
    fn send_within(
        &self,
        call: &HttpRequest,
        until: Instant,
        again_after_sent: bool,
    ) -> Result<HttpAnswer, Failure> {
        let mut pause = Duration::from_millis(50);
        loop {
            match send(&self.agent, &self.url, self.authorization.as_deref(), call) {
                Err(Failure::NotConnected(_)) if Instant::now() + pause < until => {}
                Err(Failure::Sent(_)) if again_after_sent && Instant::now() + pause < until => {}
                other => return other,
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// Sends one request and reads its answer; a server that cannot be connected to is sought
    /// again until `until`. A request that was sent is never sent again: it may have been
    /// carried out.
    pub(super) fn call(&self, call: &HttpRequest, until: Instant) -> Result<HttpAnswer, Error> {
        match self.send_within(call, until, false) {
            Ok(reply) => reply.checked(&self.url),
            Err(failure) => Err(self.unreachable(failure)),
        }
    }

    /// Sends a request that may be carried out twice without harm — `run`'s end of its own
    /// tenure, named by owner and fence: sent again, it finds the tenure already ended (or
    /// kept, as the first one kept it) and changes nothing — until it is answered, or until
    /// `until`. It is sent again whenever the answer says nothing was done, or there is none:
    /// the server cannot be connected to, a 503 (the server's store is out of reach: a lost
    /// connection, PostgreSQL down), or no answer in time (the request may or may not have
    /// been carried out, and either way a second one is safe). No try starts after `until`,
    /// but one is made however late it is: a lock released after its lease has ended is
    /// harmless, and may spare the next holder a wait.
    pub(super) fn call_again(
        &self,
        call: &HttpRequest,
        until: Instant,
    ) -> Result<HttpAnswer, Error> {
        let mut pause = Duration::from_millis(50);
        loop {
            let sent = send(&self.agent, &self.url, self.authorization.as_deref(), call);
            let again = match &sent {
                Ok(reply) => reply.distlock && reply.status == 503,
                Err(_) => true,
            };
            if !again || Instant::now() + pause >= until {
                return match sent {
                    Ok(reply) => reply.checked(&self.url),
                    Err(failure) => Err(self.unreachable(failure)),
                };
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// A waiting `acquire`'s long poll, on a thread of its own so that an interrupt is acted on
    /// at once. A waiting request may be sent again even after it reached the server (one
    /// restarted mid-wait): the owner asks for its own place, or is granted its own tenure
    /// again, extended. (A guarded one, `run`'s, granted just before the server went away and
    /// asked for again, waits behind itself until its lease ends: no second holder either
    /// way.)
    ///
    /// At an interrupt the waiter gives its place up with `leave` ([`Client::cancel`]), and
    /// the answer is then the poll's own, which the leave ends at once — it may be a grant
    /// that came first — or, without one, [`HttpAnswer::interrupted`]. With it comes whether the
    /// server said the place is given up (`None`: not interrupted).
    pub(super) fn poll(
        &self,
        call: HttpRequest,
        until: Instant,
        leave: &HttpRequest,
    ) -> Result<(HttpAnswer, Option<bool>), Error> {
        let (sent, answer) = mpsc::channel();
        let client = Client {
            agent: self.agent.clone(),
            url: self.url.clone(),
            authorization: self.authorization.clone(),
        };
        std::thread::Builder::new()
            .name("long poll".into())
            .spawn(move || {
                let _ = sent.send(client.send_within(&call, until, true));
            })
            .context("cannot start a thread for the server's long poll")?;
        loop {
            match answer.recv_timeout(INTERRUPT_CHECK) {
                Ok(Ok(reply)) => return Ok((reply.checked(&self.url)?, None)),
                Ok(Err(failure)) => return Err(self.unreachable(failure)),
                Err(mpsc::RecvTimeoutError::Timeout) if crate::signals::interrupted() => {
                    let (reply, left) = self.cancel(&answer, leave);
                    return Ok((reply, Some(left)));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(anyhow!(
                        "the long poll of {} ended without an answer",
                        self.url.as_str()
                    )
                    .into());
                }
            }
        }
    }

    /// An interrupted long poll: `leave` gives the place up on the server, which also ends the
    /// poll waiting there (merely dropping its connection would leave the place kept for 5 s,
    /// holding back those behind it), and the poll's answer, which then comes at once, is
    /// read. A poll that had not reached the server when the leave was answered (and would
    /// wait there anew) is ended by the next leave, sent while no answer comes, for at most
    /// [`LEAVING`] in all. Returns the poll's answer, if a usable one came (a grant made
    /// before the leave, say), else [`HttpAnswer::interrupted`]; and whether the server said the
    /// place is given up.
    fn cancel(
        &self,
        answer: &mpsc::Receiver<Result<HttpAnswer, Failure>>,
        leave: &HttpRequest,
    ) -> (HttpAnswer, bool) {
        let until = Instant::now() + LEAVING;
        let mut left = false;
        loop {
            let now = Instant::now();
            let attempt = leave.within(until.saturating_duration_since(now).max(INTERRUPT_CHECK));
            match send(
                &self.agent,
                &self.url,
                self.authorization.as_deref(),
                &attempt,
            ) {
                Ok(reply) if reply.distlock && reply.status == 204 => left = true,
                // Refused (a server without the route, a token outside its scope): the server
                // gives the place up itself, as a dead waiter's.
                Ok(_) if !left => return (HttpAnswer::interrupted(), false),
                Ok(_) | Err(_) => {}
            }
            let wait = if left { POLL_ENDED } else { UNREACHED };
            match answer.recv_timeout(wait.min(until.saturating_duration_since(Instant::now()))) {
                Ok(Ok(reply)) => {
                    return (
                        reply
                            .checked(&self.url)
                            .unwrap_or_else(|_| HttpAnswer::interrupted()),
                        left,
                    );
                }
                Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return (HttpAnswer::interrupted(), left);
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= until => {
                    return (HttpAnswer::interrupted(), left);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    fn unreachable(&self, failure: Failure) -> Error {
        let (Failure::NotConnected(why) | Failure::Sent(why)) = failure;
        Error::Unreachable(anyhow!("{why}").context(format!(
            "cannot reach the distlock server {}",
            self.url.as_str()
        )))
    }
}

/// `Bearer <token>` from `DISTLOCK_TOKEN` (trimmed; unset or empty: none).
///
/// # Errors
///
/// A usage message for a token that is not printable ASCII without spaces (a secret that
/// `distlock token add` made always is): never the token itself.
pub fn authorization() -> Result<Option<String>, String> {
    let Some(token) = std::env::var_os("DISTLOCK_TOKEN") else {
        return Ok(None);
    };
    let Some(token) = token.to_str() else {
        return Err("DISTLOCK_TOKEN must be valid UTF-8".to_owned());
    };
    let token = token.trim();
    if token.is_empty() {
        return Ok(None);
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Err(
            "DISTLOCK_TOKEN holds spaces, control characters or characters that are not ASCII; \
             a token is the dl_… secret that distlock token add printed, alone"
                .to_owned(),
        );
    }
    Ok(Some(format!("Bearer {token}")))
}

/// Looks names up on the calling thread. (The HTTP client's own resolver starts a thread for
/// a lookup with a timeout, and cannot say so when no thread can be started: a process short
/// of threads must still get an answer or an error.) A name's lookup is then bounded by the
/// system's resolver, not by the call's timeout; `run`'s lease rule does not depend on either.
#[derive(Debug)]
struct OnThisThread;

impl ureq::unversioned::resolver::Resolver for OnThisThread {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        _config: &ureq::config::Config,
        _timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        use std::net::ToSocketAddrs as _;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(ureq::Error::HostNotFound);
        };
        let name = ureq::unversioned::resolver::DefaultResolver::host_and_port(scheme, authority)
            .ok_or(ureq::Error::HostNotFound)?;
        let mut found = self.empty();
        for addr in name.to_socket_addrs()?.take(16) {
            found.push(addr);
        }
        if found.is_empty() {
            Err(ureq::Error::HostNotFound)
        } else {
            Ok(found)
        }
    }
}
