//! A store that decides elsewhere: a distlock server (`--db http://HOST:PORT` or `https://…`).
//! Each [`Op`] is one request of the server's API, and each answer is read back into the
//! same outcome types a local store gives, so every command behaves as on a local store:
//! the same JSON, the same exit codes.
//!
//! - **The token** comes from `DISTLOCK_TOKEN` (never from the URL), is sent as
//!   `Authorization: Bearer`, and is never printed. A refused token (401), or a request
//!   outside its scope (403 `not-allowed`), is [`Error::NotAllowed`]: exit 77.
//! - **HTTPS** checks the server's certificate against the system's roots, or against the
//!   PEM file `DISTLOCK_CA_CERT` names, which may also hold the server's own self-signed
//!   certificate ([`tls`]).
//! - **Reaching it:** a server that cannot be connected to is sought again for the call's
//!   budget — 5 s, or until the deadline of [`LockStore::keep_trying_until`] if that is later
//!   (a waiter's `--wait`, `run`'s lease) — as a PostgreSQL connection is. A request that was
//!   sent is never sent twice (it may have been carried out); its failure, a timeout or a 5xx
//!   answer is a store error naming the server. The exception is `run`'s end of its own
//!   tenure (or set), which is harmless twice: it is sent again until that deadline (the
//!   lease's end) while it gets no answer or a 503, so that a job that ended while the
//!   server's store was away is released once it is back.
//! - **Waiting** is the server's long poll: a waiting `acquire`, of one resource or of a lock
//!   set ([`sets`]), asks the server to wait for the rest of `--wait` (the server waits 30 s at
//!   most per request and keeps the place for the next). A waiter that leaves the queue — its
//!   wait run out, a mismatch, an interrupt ([`crate::wait::interrupted`]) — says so
//!   (`POST /locks/{r}/leave`, `/sets/leave`), which also ends its long poll on the server at
//!   once; a server that cannot be told gives the place up itself within 5 s, as a dead
//!   waiter's.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};

use self::http::{CALL_TIMEOUT, CONNECT_BUDGET, Call, Client, Reply};
use super::op::{Op, Outcome};
use super::{Error, LockStore, Result};
use crate::answer::{AcquireAnswer, BreakAnswer, KeptAnswer, ListAnswer, StatusAnswer};
use crate::engine::{Finish, Request};
use crate::lock::{
    Acquire, Event, Eviction, Fence, Holder, Lock, LogQuery, Members, Owner, Release, Renew,
    Resource, SetAcquire, Shape, Status, Ttl,
};
use crate::protocol::{
    AcquireRequest, BreakRequest, End, LONGEST_POLL, LeaveRequest, MAX_WAIT_SECS, ReleaseRequest,
    RenewRequest, Route, list_path, log_path, read_grant_header, whole_seconds,
};

mod http;
mod sets;
mod tls;

pub use http::authorization;
pub(crate) use tls::validity as certificate_validity;

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

/// The client of one server.
pub struct RemoteStore {
    client: Client,
    /// Until when a server that cannot be reached is sought again
    /// ([`LockStore::keep_trying_until`]).
    deadline: Option<Instant>,
    /// The last `acquire`'s answer (one resource's or a set's) when it was a long poll that
    /// came back busy: the waiter's pause after it need not wait again, and a poll given up at
    /// an interrupt answers so.
    polled: Option<Outcome>,
    /// The earliest moment the last `acquire`'s answer can have been decided
    /// ([`LockStore::decided_no_earlier_than`]).
    decided: Option<Instant>,
    /// Whether the server said the place is given up, when the last long poll was
    /// interrupted (it tried to leave the queue then, [`Client::poll`]); `None` when it was
    /// not interrupted.
    left: Option<bool>,
    /// Whether the last leave of the queue was done at once ([`LockStore::leaves_at_once`]).
    left_at_once: bool,
}

/// How long a leave of the queue may take, before the server is left to give the place up
/// itself.
const LEAVE_BUDGET: Duration = Duration::from_secs(2);

impl RemoteStore {
    /// A client of the server at `url` ([`Client::new`]). Nothing is sent yet.
    ///
    /// # Errors
    ///
    /// As [`Client::new`].
    pub fn open(url: &ServerUrl) -> anyhow::Result<RemoteStore> {
        Ok(RemoteStore {
            client: Client::new(url)?,
            deadline: None,
            polled: None,
            decided: None,
            left: None,
            left_at_once: true,
        })
    }

    /// Until when a call seeks a server that cannot be reached: its budget, or the deadline
    /// if that is later.
    fn until(&self) -> Instant {
        let budget = Instant::now() + CONNECT_BUDGET;
        self.deadline
            .map_or(budget, |deadline| deadline.max(budget))
    }

    /// One request and its answer ([`Client::call`]).
    fn call(&self, call: &Call) -> Result<Reply> {
        self.client.call(call, self.until())
    }

    /// `run`'s end of its own tenure or set, sent again until the deadline (the lease's end)
    /// while it gets no answer or a 503 ([`Client::call_again`]); without a deadline, for the
    /// budget of a call.
    fn call_again(&self, call: &Call) -> Result<Reply> {
        let until = self
            .deadline
            .unwrap_or_else(|| Instant::now() + CONNECT_BUDGET);
        self.client.call_again(call, until)
    }

    /// Gives up a place in the queue with `call` (`POST /locks/{r}/leave` or `/sets/leave`),
    /// unless the interrupted long poll just tried to. Never a failure: a server that cannot
    /// be told gives the place up itself within 5 s, and [`LockStore::leaves_at_once`] says
    /// which.
    fn leave(&mut self, call: &Call) {
        if let Some(left) = self.left.take() {
            self.left_at_once = left;
            return;
        }
        let until = Instant::now() + LEAVE_BUDGET;
        self.left_at_once = self
            .client
            .call(call, until)
            .is_ok_and(|reply| reply.status == 204);
    }

    /// `POST /locks/{r}/leave` or `POST /sets/leave` for `owner`.
    fn leave_call(members: &Members, shape: Shape, owner: &Owner) -> Call {
        let leave = LeaveRequest {
            members: members.clone(),
            shape,
            owner: owner.clone(),
        };
        Call::with_body(&leave.route(), &leave, LEAVE_BUDGET)
    }

    /// `POST /locks/{r}`.
    fn acquire(&mut self, resource: &Resource, request: &Request) -> Result<Outcome> {
        let unread = Outcome::Acquire(Acquire::Busy {
            holder: None,
            holders: Vec::new(),
            waiting: 0,
            position: Some(1),
        });
        let one = Members::one(resource.clone());
        let leave = Self::leave_call(&one, Shape::One, &request.owner);
        self.post_acquire(&one, Shape::One, request, &leave, unread, |reply| {
            Ok(Some(Outcome::Acquire(match reply.status {
                200 => match reply.json::<AcquireAnswer>()? {
                    AcquireAnswer::Acquired(acquired) => Acquire::Acquired {
                        lock: acquired.lock,
                        tenure: read_grant_header(reply.grant.as_deref(), 1)[0],
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
                _ => return Ok(None),
            })))
        })
    }

    /// An acquire's `POST`, one resource's or a set's (`shape`), with the request's fields
    /// (owner, TTL, mode, note, guarded). A waiting one is the server's long poll for the rest
    /// of the wait, which an interrupt ends with `leave` ([`Client::poll`]). `read` reads the
    /// answer (`None`: not one an acquire has); a poll given up at an interrupt without an
    /// answer answers as the last poll did, or else as `unread`.
    fn post_acquire(
        &mut self,
        members: &Members,
        shape: Shape,
        request: &Request,
        leave: &Call,
        unread: Outcome,
        read: impl FnOnce(&Reply) -> Result<Option<Outcome>>,
    ) -> Result<Outcome> {
        // The rest of the wait (a waiter's last look asks for a second, to keep its place to
        // the end and learn its position).
        let wait = request.waits.then(|| {
            let left = self.deadline.map_or(Duration::ZERO, |end| {
                end.saturating_duration_since(Instant::now())
            });
            whole_seconds(left).clamp(1, MAX_WAIT_SECS)
        });
        let acquire = AcquireRequest {
            members: members.clone(),
            shape,
            request: request.clone(),
            wait_seconds: wait,
        };
        let reply = if let Some(wait) = wait {
            let timeout = Duration::from_secs(wait).min(LONGEST_POLL) + CALL_TIMEOUT;
            let (reply, left) = self.client.poll(
                Call::with_body(&acquire.route(), &acquire, timeout),
                self.until(),
                leave,
            )?;
            self.left = left;
            reply
        } else {
            self.call(&Call::with_body(&acquire.route(), &acquire, CALL_TIMEOUT))?
        };
        self.decided = Some(reply.decided);
        let outcome = if reply.interrupted {
            match self.polled.take() {
                Some(last) if std::mem::discriminant(&last) == std::mem::discriminant(&unread) => {
                    last
                }
                _ => unread,
            }
        } else {
            match read(&reply)? {
                Some(outcome) => outcome,
                None => return Err(reply.unexpected(self.client.url())),
            }
        };
        let busy = matches!(
            outcome,
            Outcome::Acquire(Acquire::Busy { .. }) | Outcome::AcquireSet(SetAcquire::Busy { .. })
        );
        self.polled = (request.waits && busy).then(|| outcome.clone());
        Ok(outcome)
    }

    fn status(&self, resource: &Resource) -> Result<Status> {
        let route = Route::Status(resource.clone());
        let reply = self.call(&Call::new(&route, route.path(), CALL_TIMEOUT))?;
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
            _ => Err(reply.unexpected(self.client.url())),
        }
    }

    fn renew(
        &self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> Result<Renew> {
        let renew = RenewRequest {
            members: Members::one(resource.clone()),
            shape: Shape::One,
            owner: owner.clone(),
            ttl,
            fences: fence.map(|fence| vec![fence]),
        };
        let reply = self.call(&Call::with_body(&renew.route(), &renew, CALL_TIMEOUT))?;
        match reply.status {
            200 => match reply.json::<crate::answer::RenewAnswer>()? {
                crate::answer::RenewAnswer::Renewed(renewed) => {
                    Ok(Renew::Renewed { lock: renewed.lock })
                }
                crate::answer::RenewAnswer::Refused(_) => Err(reply.unexpected(self.client.url())),
            },
            404 => Ok(Renew::NotFound),
            403 => Ok(Renew::Forbidden),
            _ => Err(reply.unexpected(self.client.url())),
        }
    }

    /// `DELETE /locks/{r}`: a release (`end`) or `run`'s finish.
    fn delete(resource: &Resource, owner: &Owner, fence: Option<Fence>, end: End) -> Call {
        let release = ReleaseRequest {
            members: Members::one(resource.clone()),
            shape: Shape::One,
            owner: owner.clone(),
            fences: fence.map(|fence| vec![fence]),
            end,
        };
        Call::with_body(&release.route(), &release, CALL_TIMEOUT)
    }

    fn release(&self, resource: &Resource, owner: &Owner, fence: Option<Fence>) -> Result<Release> {
        let reply = self.call(&Self::delete(resource, owner, fence, End::Release))?;
        match reply.status {
            204 => Ok(Release::Released),
            404 => Ok(Release::NotFound),
            403 => Ok(Release::Forbidden),
            _ => Err(reply.unexpected(self.client.url())),
        }
    }

    fn finish(
        &self,
        resource: &Resource,
        owner: &Owner,
        fence: Fence,
        hold: Option<Duration>,
    ) -> Result<Finish> {
        // Named by its fence, the end of this one tenure is harmless twice.
        let end = End::Finish { hold };
        let reply = self.call_again(&Self::delete(resource, owner, Some(fence), end))?;
        match reply.status {
            204 => Ok(Finish::Released),
            200 => Ok(Finish::Kept {
                until: reply.json::<KeptAnswer>()?.kept_until,
            }),
            404 | 403 => Ok(Finish::NotFound),
            _ => Err(reply.unexpected(self.client.url())),
        }
    }

    fn evict(
        &self,
        resource: &Resource,
        owner: Option<&Owner>,
        eviction: &Eviction,
    ) -> Result<Vec<Lock>> {
        let broken = BreakRequest {
            resource: resource.clone(),
            reason: eviction.reason.clone(),
            owner: owner.cloned(),
            by: Some(eviction.by.clone()),
        };
        let reply = self.call(&Call::with_body(&broken.route(), &broken, CALL_TIMEOUT))?;
        match reply.status {
            200 => match reply.json::<BreakAnswer>()? {
                BreakAnswer::Broken(broken) => Ok(broken.locks),
                BreakAnswer::NotBroken(_) => Ok(Vec::new()),
            },
            404 => Ok(Vec::new()),
            _ => Err(reply.unexpected(self.client.url())),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<Lock>> {
        let reply = self.call(&Call::new(&Route::List, list_path(prefix), CALL_TIMEOUT))?;
        match reply.status {
            200 => Ok(reply.json::<ListAnswer>()?.locks),
            _ => Err(reply.unexpected(self.client.url())),
        }
    }

    fn log(&self, query: &LogQuery) -> Result<Vec<Event>> {
        let reply = self.call(&Call::new(&Route::Log, log_path(query), CALL_TIMEOUT))?;
        if reply.status != 200 {
            return Err(reply.unexpected(self.client.url()));
        }
        let events = std::str::from_utf8(&reply.body)
            .context("the server's history is not UTF-8")?
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| {
                serde_json::from_str::<Event>(line).with_context(|| {
                    format!("the server sent a history line distlock cannot read: {line}")
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(events)
    }
}

impl LockStore for RemoteStore {
    fn perform(&mut self, op: Op) -> Result<Outcome> {
        Ok(match op {
            Op::Acquire { resource, request } => self.acquire(&resource, &request)?,
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
            Op::Leave { resource, owner } => {
                let one = Members::one(resource);
                self.leave(&Self::leave_call(&one, Shape::One, &owner));
                Outcome::Left
            }
            Op::LeaveSet { members, owner } => {
                self.leave(&Self::leave_call(&members, Shape::Set, &owner));
                Outcome::Left
            }
            Op::FinishSet {
                members,
                owner,
                fences,
                hold,
            } => Outcome::FinishSet(self.finish_set(&members, &owner, &fences, hold)?),
            Op::AcquireSet { members, request } => self.acquire_set(&members, &request)?,
            Op::RenewSet {
                members,
                owner,
                ttl,
                fences,
            } => Outcome::RenewSet(self.renew_set(&members, &owner, ttl, fences.as_deref())?),
            Op::ReleaseSet {
                members,
                owner,
                fences,
            } => Outcome::ReleaseSet(self.release_set(&members, &owner, fences.as_deref())?),
            Op::List { prefix } => Outcome::List(self.list(&prefix)?),
            Op::Log { query } => Outcome::Log(self.log(&query)?),
            Op::Gc { .. } => {
                return Err(Error::Failed(anyhow!(
                    "gc runs where the store is, not through the distlock server {}",
                    self.client.url().as_str()
                )));
            }
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
        self.left_at_once
    }

    fn decided_no_earlier_than(&self) -> Option<Instant> {
        self.decided
    }
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("RemoteStore")
            .field("url", self.client.url())
            .finish_non_exhaustive()
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
