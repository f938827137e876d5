//! The HTTP side of a distlock server's client: one agent per store, with the token, the
//! certificates HTTPS trusts ([`tls`]) and a resolver of its own; each request sent (again,
//! while the server cannot be connected to), and each answer checked for what the server
//! refused.

use std::io::ErrorKind;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::store::Error;
use rustls::pki_types::CertificateDer;
use serde_json::{Map, Value};

use super::{ServerUrl, tls};
use crate::protocol::{API_HEADER, GRANT_HEADER, Route, WAITED_HEADER};

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
            let (roots, own) = roots()?;
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

/// The roots HTTPS trusts — `DISTLOCK_CA_CERT`'s certificates, or the system's — and the
/// certificates a server may show as its own without a CA (`DISTLOCK_CA_CERT`'s again, for
/// a self-signed one; none of the system's).
fn roots() -> Result<(Vec<CertificateDer<'static>>, Vec<CertificateDer<'static>>)> {
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
            bail!("DISTLOCK_CA_CERT {shown} holds no certificate");
        }
        return Ok((roots.clone(), roots));
    }
    let roots = rustls_native_certs::load_native_certs().certs;
    if roots.is_empty() {
        bail!("this system has no root certificates for https://; name a CA in DISTLOCK_CA_CERT");
    }
    Ok((roots, Vec::new()))
}

/// One request, as it is sent (maybe again, if the server could not be reached).
#[derive(Clone)]
pub(super) struct HttpRequest {
    method: &'static str,
    path: String,
    /// The JSON body, serialized.
    body: Option<Vec<u8>>,
    timeout: Duration,
}

impl HttpRequest {
    /// A request without a body: `path` (with its query, if any) on `route`'s method.
    pub(super) fn new(route: &Route, path: String, timeout: Duration) -> HttpRequest {
        HttpRequest {
            method: route.method(),
            path,
            body: None,
            timeout,
        }
    }

    /// `body` sent on `route`.
    pub(super) fn with_body(
        route: &Route,
        body: &impl serde::Serialize,
        timeout: Duration,
    ) -> HttpRequest {
        HttpRequest {
            method: route.method(),
            path: route.path(),
            // A request body serializes to an object of strings and numbers: it cannot fail.
            body: Some(serde_json::to_vec(body).unwrap_or_default()),
            timeout,
        }
    }

    /// The same request, given `timeout`.
    pub(super) fn within(&self, timeout: Duration) -> HttpRequest {
        HttpRequest {
            timeout,
            ..self.clone()
        }
    }
}

/// Why a request got no answer.
enum Failure {
    /// No connection was made: nothing was sent, so it may be sent again.
    NotConnected(String),
    /// Sent, or maybe sent: it may have been carried out, so it is not sent again.
    Sent(String),
}

fn send(
    agent: &ureq::Agent,
    url: &ServerUrl,
    authorization: Option<&str>,
    call: &HttpRequest,
) -> Result<HttpAnswer, Failure> {
    let mut request = ureq::http::Request::builder()
        .method(call.method)
        .uri(format!("{}{}", url.as_str(), call.path));
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    let built = match &call.body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(body.clone()),
        None => request.body(Vec::new()),
    }
    .map_err(|err| Failure::NotConnected(err.to_string()))?;
    let configured = agent
        .configure_request(built)
        .timeout_global(Some(call.timeout))
        .build();
    let sent = Instant::now();
    let mut response = agent.run(configured).map_err(|err| {
        let why = describe(&err);
        if connect_failure(&err) {
            Failure::NotConnected(why)
        } else {
            Failure::Sent(why)
        }
    })?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let distlock = response.headers().contains_key(API_HEADER);
    let grant = header(GRANT_HEADER);
    let waited = header(WAITED_HEADER)
        .and_then(|millis| millis.parse().ok())
        .map_or(Duration::ZERO, Duration::from_millis);
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_vec()
        .map_err(|err| match err {
            ureq::Error::BodyExceedsLimit(_) => {
                Failure::Sent("its answer is larger than 64 MiB".to_owned())
            }
            other => Failure::Sent(describe(&other)),
        })?;
    Ok(HttpAnswer {
        status,
        distlock,
        secret: authorization
            .and_then(|a| a.strip_prefix("Bearer "))
            .map(str::to_owned),
        body,
        grant,
        decided: sent + waited,
        interrupted: false,
    })
}

/// Whether `err` came before anything was sent: no connection at all.
fn connect_failure(err: &ureq::Error) -> bool {
    match err {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionRefused | ErrorKind::AddrNotAvailable | ErrorKind::NotFound
        ),
        _ => false,
    }
}

/// A failure in a few words (never a header: the token is in one).
fn describe(err: &ureq::Error) -> String {
    match err {
        ureq::Error::Timeout(_) => "the server did not answer in time".to_owned(),
        ureq::Error::ConnectionFailed => "the connection failed".to_owned(),
        ureq::Error::HostNotFound => "the host name was not found".to_owned(),
        ureq::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// An answer.
pub(super) struct HttpAnswer {
    pub(super) status: u16,
    /// The answer has a distlock server's `Distlock-Api` header.
    distlock: bool,
    /// The token the request carried, never to be shown.
    secret: Option<String>,
    pub(super) body: Vec<u8>,
    /// `Distlock-Grant` of a grant.
    pub(super) grant: Option<String>,
    /// The earliest moment the answer can have been decided: when the request was sent, plus
    /// what the server says it waited (`Distlock-Waited-Ms`) before it granted a lock.
    pub(super) decided: Instant,
    /// A long poll given up at an interrupt (no answer read).
    pub(super) interrupted: bool,
}

impl HttpAnswer {
    pub(super) fn interrupted() -> HttpAnswer {
        HttpAnswer {
            status: 0,
            distlock: true,
            secret: None,
            body: Vec::new(),
            grant: None,
            decided: Instant::now(),
            interrupted: true,
        }
    }

    /// The answer, or the failure it stands for: a refused token or scope (exit 77), a server
    /// error (5xx), or an answer from something that is not a distlock server (a mistyped
    /// port, a proxy's page), which is never read as a lock's outcome.
    pub(super) fn checked(self, url: &ServerUrl) -> Result<HttpAnswer, Error> {
        if !self.distlock {
            return Err(anyhow!(
                "{} answered {}, but not as a distlock server does (no Distlock-Api header): \
                 check the host and port in --db or DISTLOCK_DB",
                url.as_str(),
                self.status
            )
            .into());
        }
        let problem = || self.problem_detail().unwrap_or_default();
        match self.status {
            401 => Err(Error::NotAllowed(format!(
                "the distlock server {} refused the token: {}",
                url.as_str(),
                problem()
            ))),
            403 if self.problem_type().as_deref() == Some("not-allowed") => {
                Err(Error::NotAllowed(format!(
                    "the distlock server {} refused: {}",
                    url.as_str(),
                    problem()
                )))
            }
            500..=599 => Err(anyhow!(
                "the distlock server {} answered {}: {}",
                url.as_str(),
                self.status,
                problem()
            )
            .into()),
            _ => Ok(self),
        }
    }

    fn document(&self) -> Option<Map<String, Value>> {
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(Value::Object(members)) => Some(members),
            _ => None,
        }
    }

    fn problem_type(&self) -> Option<String> {
        self.document()?.get("type")?.as_str().map(str::to_owned)
    }

    /// A problem document's `detail`, as a message may show it: one line, and no secret.
    fn problem_detail(&self) -> Option<String> {
        let document = self.document()?;
        let detail = document.get("detail")?.as_str()?;
        let detail = match &self.secret {
            Some(secret) => redacted(&detail.replace(secret.as_str(), "…")),
            None => redacted(detail),
        };
        Some(crate::lock::shown_line(&detail))
    }

    pub(super) fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|_| {
            anyhow!(
                "the server's answer ({}) is not one this distlock can read: is it a distlock \
                 server of another version?",
                self.status
            )
        })
    }

    /// A member of a problem document.
    pub(super) fn member<T: serde::de::DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        match self.document().and_then(|mut d| d.remove(name)) {
            Some(value) => serde_json::from_value(value)
                .map_err(|_| anyhow!("the server's {name:?} is not one this distlock can read")),
            None => Ok(T::default()),
        }
    }

    /// An answer that no request of distlock's expects. Only a problem document's detail is
    /// shown: a body of another kind may echo the request, token and all.
    pub(super) fn unexpected(&self, url: &ServerUrl) -> Error {
        let detail = self
            .problem_detail()
            .map_or_else(String::new, |detail| format!(": {detail}"));
        Error::Failed(anyhow!(
            "the distlock server {} answered {} unexpectedly{detail}",
            url.as_str(),
            self.status,
        ))
    }
}

/// `text` with every token secret in it (`dl_` and hex digits) cut to `dl_…`: a server's
/// detail may quote what it was sent.
fn redacted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("dl_") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 3..];
        // A secret is 64 hex digits: what follows them is not part of it.
        let hex = after.len()
            - after
                .trim_start_matches(|c: char| c.is_ascii_hexdigit())
                .len();
        let secret = hex.min(64);
        if secret >= 8 {
            out.push_str("dl_…");
        } else {
            out.push_str(&rest[at..at + 3 + secret]);
        }
        rest = &after[secret..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn secrets_are_cut_from_what_a_server_says() {
        let secret = format!("dl_{}", "0123456789abcdef".repeat(4));
        let cases = [
            (
                format!("unknown token {secret}"),
                "unknown token dl_…".to_owned(),
            ),
            (format!("{secret}{secret}"), "dl_…dl_…".to_owned()),
            (
                format!("Bearer {secret}, again: {secret}."),
                "Bearer dl_…, again: dl_….".to_owned(),
            ),
            (
                "dl_ short dl_12ab".to_owned(),
                "dl_ short dl_12ab".to_owned(),
            ),
            (
                "token other is not an operator's".to_owned(),
                "token other is not an operator's".to_owned(),
            ),
            ("dl_0123456789".to_owned(), "dl_…".to_owned()),
            (String::new(), String::new()),
        ];
        for (text, expected) in cases {
            assert_eq!(redacted(&text), expected, "{text}");
        }
    }
}
