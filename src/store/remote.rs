//! A store that decides elsewhere: a distlock server (`--db http://HOST:PORT` or `https://…`).
//! Each [`Op`] is one request of the server's API, and each answer is read back into the
//! same outcome types a local store gives, so every command behaves as on a local store:
//! the same JSON, the same exit codes.
//!
//! - **The token** comes from `DISTLOCK_TOKEN` (never from the URL), is sent as
//!   `Authorization: Bearer`, and is never printed. A refused token (401), or a request
//!   outside its scope (403 `not-allowed`), is [`NotAllowed`]: exit 77.
//! - **HTTPS** checks the server's certificate against the system's roots, or against the
//!   PEM file `DISTLOCK_CA_CERT` names.
//! - **Reaching it:** a server that cannot be connected to is sought again for the call's
//!   budget — 5 s, or until the deadline of [`LockStore::keep_trying_until`] if that is later
//!   (a waiter's `--wait`, `run`'s lease) — as a PostgreSQL connection is. A request that was
//!   sent is never sent twice (it may have been carried out); its failure, a timeout or a 5xx
//!   answer is a store error naming the server.
//! - **Waiting** is the server's long poll: a waiting `acquire` asks the server to wait for the
//!   rest of `--wait` (the server waits 30 s at most per request and keeps the place for the
//!   next), and an interrupt gives the poll up at once ([`crate::wait::interrupted`]). Leaving
//!   the queue is not coming back: the server gives a place up when a request's own wait runs
//!   out, and a place nobody asks for again within 5 s, as a dead waiter's.

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value, json};

use super::LockStore;
use super::op::{Op, Outcome};
use crate::answer::{AcquireAnswer, BreakAnswer, KeptAnswer, ListAnswer, StatusAnswer};
use crate::engine::{Finish, Request};
use crate::lock::{
    Acquire, Event, Eviction, Fence, Grant, Holder, Lock, LogQuery, Mode, Owner, Release, Renew,
    Resource, Status, Ttl,
};

/// How long a server that refuses connections is sought again, at least.
const CONNECT_BUDGET: Duration = Duration::from_secs(5);

/// How long one request may take, beyond the time the server was asked to wait.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest wait one request asks for: the contract's bound on `wait_seconds`.
const MAX_WAIT_SECS: u64 = 86_400;

/// How often an interruptible long poll looks for an interrupt.
const INTERRUPT_CHECK: Duration = Duration::from_millis(20);

/// A refused token, or a request outside the token's scope: exit 77, with the server's reason.
#[derive(Debug)]
pub struct NotAllowed(pub String);

impl std::fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotAllowed {}

/// A server's URL, checked: `http` or `https`, a host and maybe a port, and nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl {
    /// `scheme://host[:port]`, without a trailing slash.
    base: String,
    https: bool,
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
        Ok(ServerUrl {
            base: format!("{scheme}://{authority}"),
            https,
        })
    }

    /// The URL as the user wrote it (less a trailing slash), for messages and for `run`'s
    /// `DISTLOCK_DB`.
    pub fn as_str(&self) -> &str {
        &self.base
    }
}

/// The client of one server.
pub struct RemoteStore {
    url: ServerUrl,
    agent: ureq::Agent,
    /// `Bearer <token>`, when `DISTLOCK_TOKEN` gives one.
    authorization: Option<String>,
    /// Until when a server that cannot be reached is sought again ([`LockStore::keep_trying_until`]).
    deadline: Option<Instant>,
    /// Whether the last `acquire` was a long poll that waited (so that the waiter's pause
    /// after it need not wait again), and its answer, for a poll given up at an interrupt.
    polled: Option<Acquire>,
}

impl RemoteStore {
    /// A client of the server at `url`, with the token of `DISTLOCK_TOKEN` and, for HTTPS, the
    /// roots of `DISTLOCK_CA_CERT` or the system's. Nothing is sent yet.
    ///
    /// # Errors
    ///
    /// A `DISTLOCK_CA_CERT` that cannot be read or holds no certificate, or no system roots
    /// for HTTPS; a token that is not text.
    pub fn open(url: &ServerUrl) -> Result<RemoteStore> {
        let authorization = match std::env::var_os("DISTLOCK_TOKEN") {
            None => None,
            Some(token) if token.is_empty() => None,
            Some(token) => {
                let token = token
                    .into_string()
                    .map_err(|_| anyhow!("DISTLOCK_TOKEN must be valid UTF-8"))?;
                let token = token.trim();
                if token.chars().any(|c| c.is_control() || c.is_whitespace()) {
                    bail!("DISTLOCK_TOKEN holds spaces or control characters");
                }
                Some(format!("Bearer {token}"))
            }
        };
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_BUDGET))
            .max_redirects(0)
            .user_agent(concat!("distlock/", env!("CARGO_PKG_VERSION")));
        if url.https {
            let roots = roots()?;
            config = config.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
                    .build(),
            );
        }
        let agent = ureq::Agent::with_parts(
            config.build(),
            ureq::unversioned::transport::DefaultConnector::default(),
            OnThisThread,
        );
        Ok(RemoteStore {
            url: url.clone(),
            agent,
            authorization,
            deadline: None,
            polled: None,
        })
    }

    fn lock_path(resource: &Resource, tail: &str) -> String {
        format!(
            "/locks/{}{tail}",
            utf8_percent_encode(resource.as_str(), NON_ALPHANUMERIC)
        )
    }

    /// Sends one request and reads its answer; a server that cannot be connected to is sought
    /// again for the call's budget.
    fn call(&self, call: &Call) -> Result<Reply> {
        let budget_end =
            (Instant::now() + CONNECT_BUDGET).max(self.deadline.unwrap_or(Instant::now()));
        let mut pause = Duration::from_millis(50);
        loop {
            match send(&self.agent, &self.url, self.authorization.as_deref(), call) {
                Err(Failure::NotConnected(_)) if Instant::now() + pause < budget_end => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(Failure::NotConnected(why) | Failure::Sent(why)) => {
                    return Err(anyhow!("{why}")).with_context(|| {
                        format!("cannot reach the distlock server {}", self.url.as_str())
                    });
                }
                Ok(reply) => return reply.checked(&self.url),
            }
        }
    }

    /// A long poll of `acquire`, given up at an interrupt (answered then as the last poll was).
    fn poll(&mut self, call: Call) -> Result<Reply> {
        let (sent, answer) = mpsc::channel();
        let agent = self.agent.clone();
        let url = self.url.clone();
        let authorization = self.authorization.clone();
        let budget_end =
            (Instant::now() + CONNECT_BUDGET).max(self.deadline.unwrap_or(Instant::now()));
        std::thread::Builder::new()
            .name("long poll".into())
            .spawn(move || {
                let mut pause = Duration::from_millis(50);
                // A waiting request may be sent again even after it reached the server (one
                // restarted mid-wait): the owner asks for its own place, or is granted its own
                // tenure again, extended. (A guarded one, `run`'s, granted just before the
                // server went away and asked for again, waits behind itself until its lease
                // ends: no second holder either way.)
                let reply = loop {
                    match send(&agent, &url, authorization.as_deref(), &call) {
                        Err(Failure::NotConnected(_) | Failure::Sent(_))
                            if Instant::now() + pause < budget_end =>
                        {
                            std::thread::sleep(pause);
                            pause = (pause * 2).min(Duration::from_secs(1));
                        }
                        other => break other,
                    }
                };
                let _ = sent.send(reply);
            })
            .context("cannot start a thread for the server's long poll")?;
        loop {
            match answer.recv_timeout(INTERRUPT_CHECK) {
                Ok(Ok(reply)) => return reply.checked(&self.url),
                Ok(Err(Failure::NotConnected(why) | Failure::Sent(why))) => {
                    return Err(anyhow!("{why}")).with_context(|| {
                        format!("cannot reach the distlock server {}", self.url.as_str())
                    });
                }
                Err(mpsc::RecvTimeoutError::Timeout) if crate::wait::interrupted() => {
                    return Ok(Reply::interrupted());
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!(
                        "the long poll of {} ended without an answer",
                        self.url.as_str()
                    )
                }
            }
        }
    }

    fn acquire(&mut self, resource: &Resource, request: &Request) -> Result<Acquire> {
        let mut body = Map::new();
        body.insert("owner".into(), json!(request.owner.as_str()));
        body.insert(
            "ttl_seconds".into(),
            json!(whole_seconds(request.ttl.as_duration())),
        );
        match request.mode {
            Mode::Exclusive => {}
            Mode::Shared => {
                body.insert("shared".into(), json!(true));
            }
            Mode::Semaphore(n) => {
                body.insert("limit".into(), json!(n));
            }
        }
        if let Some(note) = &request.note {
            body.insert("note".into(), json!(note.as_str()));
        }
        if request.guarded {
            body.insert("guarded".into(), json!(true));
        }
        let path = Self::lock_path(resource, "");
        let reply = if request.waits {
            // The rest of the wait (a waiter's last look asks for a second, to keep its
            // place to the end and learn its position).
            let left = self.deadline.map_or(Duration::ZERO, |end| {
                end.saturating_duration_since(Instant::now())
            });
            let wait = whole_seconds(left).clamp(1, MAX_WAIT_SECS);
            body.insert("wait_seconds".into(), json!(wait));
            let timeout = Duration::from_secs(wait).min(Duration::from_secs(30)) + CALL_TIMEOUT;
            self.poll(Call::new("POST", path, Some(Value::Object(body)), timeout))?
        } else {
            self.call(&Call::new(
                "POST",
                path,
                Some(Value::Object(body)),
                CALL_TIMEOUT,
            ))?
        };
        let outcome = match reply.status {
            _ if reply.interrupted => self.polled.clone().unwrap_or(Acquire::Busy {
                holder: None,
                holders: Vec::new(),
                waiting: 0,
                position: Some(1),
            }),
            200 => match reply.json::<AcquireAnswer>()? {
                AcquireAnswer::Acquired(acquired) => Acquire::Acquired {
                    lock: acquired.lock,
                    tenure: if reply.grant.as_deref() == Some("extended") {
                        Grant::Extended
                    } else {
                        Grant::New
                    },
                },
                AcquireAnswer::Busy(busy) => Acquire::Busy {
                    holder: busy.holder,
                    holders: busy.holders,
                    waiting: busy.waiting,
                    position: busy.position,
                },
                AcquireAnswer::Mismatch(mismatch) => Acquire::Mismatch {
                    holders: mismatch.holders,
                },
            },
            409 => Acquire::Mismatch {
                holders: reply.member::<Vec<Holder>>("holders")?,
            },
            _ => return Err(reply.unexpected(&self.url)),
        };
        self.polled = request
            .waits
            .then(|| outcome.clone())
            .filter(|o| matches!(o, Acquire::Busy { .. }));
        Ok(outcome)
    }

    fn status(&self, resource: &Resource) -> Result<Status> {
        let reply = self.call(&Call::new(
            "GET",
            Self::lock_path(resource, ""),
            None,
            CALL_TIMEOUT,
        ))?;
        match reply.status {
            200 => match reply.json::<StatusAnswer>()? {
                StatusAnswer::Held(held) => Ok(Status {
                    locks: if held.locks.is_empty() {
                        vec![held.lock]
                    } else {
                        held.locks
                    },
                    waiting: held.waiting,
                }),
                StatusAnswer::Free(free) => Ok(Status {
                    locks: Vec::new(),
                    waiting: free.waiting,
                }),
            },
            404 => Ok(Status {
                locks: Vec::new(),
                waiting: reply.member::<Option<usize>>("waiting")?.unwrap_or(0),
            }),
            _ => Err(reply.unexpected(&self.url)),
        }
    }

    fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> Result<Renew> {
        let mut body =
            json!({"owner": owner.as_str(), "ttl_seconds": whole_seconds(ttl.as_duration())});
        if let Some(fence) = fence {
            body["fence"] = json!(fence.0);
        }
        let path = Self::lock_path(resource, "/renew");
        let reply = self.call(&Call::new("POST", path, Some(body), CALL_TIMEOUT))?;
        match reply.status {
            200 => match reply.json::<crate::answer::RenewAnswer>()? {
                crate::answer::RenewAnswer::Renewed(renewed) => {
                    Ok(Renew::Renewed { lock: renewed.lock })
                }
                crate::answer::RenewAnswer::Refused(_) => Err(reply.unexpected(&self.url)),
            },
            404 => Ok(Renew::NotFound),
            403 => Ok(Renew::Forbidden),
            _ => Err(reply.unexpected(&self.url)),
        }
    }

    /// `DELETE /locks/{r}`: a release (`hold` none) or `run`'s finish.
    fn delete(
        &self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
        hold: Option<Duration>,
    ) -> Result<Reply> {
        let mut body = json!({"owner": owner.as_str()});
        if let Some(fence) = fence {
            body["fence"] = json!(fence.0);
        }
        if let Some(hold) = hold {
            body["hold_at_least_seconds"] = json!(whole_seconds(hold).max(1));
        }
        let path = Self::lock_path(resource, "");
        self.call(&Call::new("DELETE", path, Some(body), CALL_TIMEOUT))
    }

    fn release(&self, resource: &Resource, owner: &Owner, fence: Option<Fence>) -> Result<Release> {
        let reply = self.delete(resource, owner, fence, None)?;
        match reply.status {
            204 => Ok(Release::Released),
            404 => Ok(Release::NotFound),
            403 => Ok(Release::Forbidden),
            _ => Err(reply.unexpected(&self.url)),
        }
    }

    fn finish(
        &self,
        resource: &Resource,
        owner: &Owner,
        fence: Fence,
        hold: Option<Duration>,
    ) -> Result<Finish> {
        let reply = self.delete(resource, owner, Some(fence), hold)?;
        match reply.status {
            204 => Ok(Finish::Released),
            200 => Ok(Finish::Kept {
                until: reply.json::<KeptAnswer>()?.kept_until,
            }),
            404 | 403 => Ok(Finish::NotFound),
            _ => Err(reply.unexpected(&self.url)),
        }
    }

    fn evict(
        &self,
        resource: &Resource,
        owner: Option<&Owner>,
        eviction: &Eviction,
    ) -> Result<Vec<Lock>> {
        let mut body = json!({"reason": eviction.reason.as_str(), "by": eviction.by.as_str()});
        if let Some(owner) = owner {
            body["owner"] = json!(owner.as_str());
        }
        let path = Self::lock_path(resource, "/break");
        let reply = self.call(&Call::new("POST", path, Some(body), CALL_TIMEOUT))?;
        match reply.status {
            200 => match reply.json::<BreakAnswer>()? {
                BreakAnswer::Broken(broken) => Ok(broken.locks),
                BreakAnswer::NotBroken(_) => Ok(Vec::new()),
            },
            404 => Ok(Vec::new()),
            _ => Err(reply.unexpected(&self.url)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<Lock>> {
        let path = format!(
            "/locks?prefix={}",
            utf8_percent_encode(prefix, NON_ALPHANUMERIC)
        );
        let reply = self.call(&Call::new("GET", path, None, CALL_TIMEOUT))?;
        match reply.status {
            200 => Ok(reply.json::<ListAnswer>()?.locks),
            _ => Err(reply.unexpected(&self.url)),
        }
    }

    fn log(&self, query: &LogQuery) -> Result<Vec<Event>> {
        let mut params = Vec::new();
        if let Some(resource) = &query.resource {
            params.push(format!(
                "resource={}",
                utf8_percent_encode(resource.as_str(), NON_ALPHANUMERIC)
            ));
        }
        if let Some(since) = query.since {
            params.push(format!("since={}ms", since.as_millis()));
        }
        if let Some(limit) = query.limit {
            params.push(format!("limit={limit}"));
        }
        let path = if params.is_empty() {
            "/log".to_owned()
        } else {
            format!("/log?{}", params.join("&"))
        };
        let reply = self.call(&Call::new("GET", path, None, CALL_TIMEOUT))?;
        if reply.status != 200 {
            return Err(reply.unexpected(&self.url));
        }
        std::str::from_utf8(&reply.body)
            .context("the server's history is not UTF-8")?
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                serde_json::from_str::<Event>(line).with_context(|| {
                    format!("the server sent a history line distlock cannot read: {line}")
                })
            })
            .collect()
    }
}

impl LockStore for RemoteStore {
    fn perform(&mut self, op: Op) -> Result<Outcome> {
        Ok(match op {
            Op::Acquire { resource, request } => {
                Outcome::Acquire(self.acquire(&resource, &request)?)
            }
            Op::Status { resource } => Outcome::Status(self.status(&resource)?),
            Op::Renew {
                resource,
                owner,
                ttl,
                fence,
            } => Outcome::Renew(self.renew(&resource, &owner, ttl, fence)?),
            Op::Release {
                resource,
                owner,
                fence,
            } => Outcome::Release(self.release(&resource, &owner, fence)?),
            Op::Finish {
                resource,
                owner,
                fence,
                hold,
            } => Outcome::Finish(self.finish(&resource, &owner, fence, hold)?),
            Op::Break {
                resource,
                owner,
                eviction,
            } => Outcome::Break(self.evict(&resource, owner.as_ref(), &eviction)?),
            // Not coming back is leaving: the server gives the place up (see the module).
            Op::Leave { .. } => Outcome::Left,
            Op::List { prefix } => Outcome::List(self.list(&prefix)?),
            Op::Log { query } => Outcome::Log(self.log(&query)?),
            Op::Gc { .. } => bail!(
                "gc runs where the store is, not through the distlock server {}",
                self.url.as_str()
            ),
            // The long poll is the wait: nothing to listen to here.
            Op::Subscribe { .. } => Outcome::Subscribed,
            Op::WaitForChange { timeout, .. } => {
                // After a long poll that waited, look again at once; otherwise (a poll the
                // server answered at once) pause as a poller would.
                if self.polled.is_none() {
                    std::thread::sleep(timeout.min(Duration::from_millis(250)));
                }
                Outcome::Woken
            }
        })
    }

    fn keep_trying_until(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    fn leaves_at_once(&self) -> bool {
        false
    }
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("RemoteStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
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

/// Whole seconds, rounded up: the API counts in seconds.
fn whole_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// The roots HTTPS trusts: `DISTLOCK_CA_CERT`'s certificates, or the system's.
fn roots() -> Result<Vec<ureq::tls::Certificate<'static>>> {
    if let Some(path) = std::env::var_os("DISTLOCK_CA_CERT").filter(|p| !p.is_empty()) {
        let shown = std::path::Path::new(&path).display().to_string();
        let pem = std::fs::read(&path)
            .with_context(|| format!("cannot read DISTLOCK_CA_CERT {shown}"))?;
        let mut roots = Vec::new();
        for item in ureq::tls::parse_pem(&pem) {
            if let ureq::tls::PemItem::Certificate(cert) =
                item.with_context(|| format!("DISTLOCK_CA_CERT {shown} is not PEM"))?
            {
                roots.push(cert);
            }
        }
        if roots.is_empty() {
            bail!("DISTLOCK_CA_CERT {shown} holds no certificate");
        }
        return Ok(roots);
    }
    let found = rustls_native_certs::load_native_certs();
    let roots: Vec<_> = found
        .certs
        .iter()
        .map(|der| ureq::tls::Certificate::from_der(der.as_ref()).to_owned())
        .collect();
    if roots.is_empty() {
        bail!("this system has no root certificates for https://; name a CA in DISTLOCK_CA_CERT");
    }
    Ok(roots)
}

/// One request, as it is sent (maybe again, if the server could not be reached).
struct Call {
    method: &'static str,
    path: String,
    body: Option<Value>,
    timeout: Duration,
}

impl Call {
    fn new(method: &'static str, path: String, body: Option<Value>, timeout: Duration) -> Call {
        Call {
            method,
            path,
            body,
            timeout,
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
    call: &Call,
) -> Result<Reply, Failure> {
    let mut request = ureq::http::Request::builder()
        .method(call.method)
        .uri(format!("{}{}", url.as_str(), call.path));
    if let Some(authorization) = authorization {
        request = request.header("authorization", authorization);
    }
    let body = call.body.as_ref().map(Value::to_string);
    let built = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(body.into_bytes()),
        None => request.body(Vec::new()),
    }
    .map_err(|err| Failure::NotConnected(err.to_string()))?;
    let configured = agent
        .configure_request(built)
        .timeout_global(Some(call.timeout))
        .build();
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
    let grant = header(crate::serve::GRANT_HEADER);
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024 * 1024)
        .read_to_vec()
        .map_err(|err| Failure::Sent(describe(&err)))?;
    Ok(Reply {
        status,
        body,
        grant,
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
struct Reply {
    status: u16,
    body: Vec<u8>,
    /// `Distlock-Grant` of a grant.
    grant: Option<String>,
    /// A long poll given up at an interrupt (no answer read).
    interrupted: bool,
}

impl Reply {
    fn interrupted() -> Reply {
        Reply {
            status: 0,
            body: Vec::new(),
            grant: None,
            interrupted: true,
        }
    }

    /// The answer, or the failure it stands for: a refused token or scope (exit 77), a server
    /// error (5xx).
    fn checked(self, url: &ServerUrl) -> Result<Reply> {
        let problem = || self.problem_detail().unwrap_or_default();
        match self.status {
            401 => Err(anyhow::Error::new(NotAllowed(format!(
                "the distlock server {} refused the token: {}",
                url.as_str(),
                problem()
            )))),
            403 if self.problem_type().as_deref() == Some("not-allowed") => {
                Err(anyhow::Error::new(NotAllowed(format!(
                    "the distlock server {} refused: {}",
                    url.as_str(),
                    problem()
                ))))
            }
            500..=599 => Err(anyhow!(
                "the distlock server {} answered {}: {}",
                url.as_str(),
                self.status,
                problem()
            )),
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

    fn problem_detail(&self) -> Option<String> {
        self.document()?
            .get("detail")?
            .as_str()
            .map(crate::output::shown)
    }

    fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "the server's answer ({}) is not one distlock can read",
                self.status
            )
        })
    }

    /// A member of a problem document.
    fn member<T: serde::de::DeserializeOwned + Default>(&self, name: &str) -> Result<T> {
        match self.document().and_then(|mut d| d.remove(name)) {
            Some(value) => serde_json::from_value(value)
                .with_context(|| format!("the server's {name:?} is not one distlock can read")),
            None => Ok(T::default()),
        }
    }

    fn unexpected(&self, url: &ServerUrl) -> anyhow::Error {
        anyhow!(
            "the distlock server {} answered {} unexpectedly: {}",
            url.as_str(),
            self.status,
            self.problem_detail()
                .unwrap_or_else(|| String::from_utf8_lossy(&self.body)
                    .chars()
                    .take(200)
                    .collect())
        )
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
        ];
        for (url, expected) in cases {
            match (ServerUrl::parse(url), expected) {
                (Ok(parsed), Ok(base)) => assert_eq!(parsed.as_str(), base, "{url}"),
                (Err(why), Err(words)) => assert!(why.contains(words), "{url}: {why}"),
                (got, want) => panic!("{url}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn durations_are_whole_seconds_rounded_up() {
        for (ms, secs) in [(0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (30_000, 30)] {
            assert_eq!(whole_seconds(Duration::from_millis(ms)), secs, "{ms} ms");
        }
    }
}
