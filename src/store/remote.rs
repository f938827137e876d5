//! A store that decides elsewhere: a distlock server (`--db http://HOST:PORT` or `https://…`).
//! Each [`Op`] is one request of the server's API ([`crate::protocol`]), and each answer is
//! read back into the same outcome types a local store gives, so every command behaves as on a
//! local store: the same JSON, the same exit codes. A single resource (a set of one) is sent to
//! its own routes (`/locks/{r}…`), a larger set to the set's (`/sets…`), and each answer is read
//! in the shape of the route it came from ([`crate::answer::Shaped`]).
//!
//! - **The token** comes from `DISTLOCK_TOKEN` (never from the URL), is sent as
//!   `Authorization: Bearer`, and is never printed. A refused token (401), or a request
//!   outside its scope (403 `not-allowed`), is [`Error::NotAllowed`]: exit 77.
//! - **HTTPS** checks the server's certificate against the system's roots, or against the
//!   PEM file `DISTLOCK_CA_CERT` names, which may also hold the server's own self-signed
//!   certificate ([`tls`]).
//! - **Reaching it:** a server that cannot be connected to is sought again for the call's
//!   budget — 5 s, or until the deadline the operation carries if that is later
//!   ([`Op::keeps_trying_until`]: a waiter's `--wait`, `run`'s lease) — as a PostgreSQL
//!   connection is. A request that was sent is never sent twice (it may have been carried
//!   out); its failure, a timeout or a 5xx answer is a store error naming the server. The
//!   exception is `run`'s end of its own tenures, which is harmless twice: it is sent again
//!   until that deadline (the lease's end) while it gets no answer or a 503, so that a job that
//!   ended while the server's store was away is released once it is back ([`tenures`]).
//! - **Waiting** is the server's long poll: a waiting `acquire` asks the server to wait for the
//!   rest of `--wait` (the server waits 30 s at most per request and keeps the place for the
//!   next). A waiter that leaves the queue — its wait run out, a mismatch, an interrupt
//!   ([`crate::signals::interrupted`]) — says so (`POST /locks/{r}/leave`, `/sets/leave`),
//!   which also ends its long poll on the server at once; a server that cannot be told gives
//!   the place up itself within 5 s, as a dead waiter's.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};

use self::exchange::{HttpAnswer, HttpRequest};
use self::http::{CALL_TIMEOUT, CONNECT_BUDGET, Client};
use super::op::{self, Acquisition, Batched, Heard, Left, Op, Outcome};
use super::{Error, LockStore, Result};
use crate::answer::{AcquireAnswer, SetAcquireAnswer, Shaped, ShapedAcquire, StatusAnswer};
use crate::lock::{Blocked, Event, Holder, Members, Resource, SetAcquire, Shape, Status};
use crate::protocol::{
    AcquireRequest, LONGEST_POLL, LeaveRequest, MAX_WAIT_SECS, Route, list_path, log_path,
    queues_path, read_grant_header, whole_seconds,
};

mod exchange;
mod http;
mod tenures;
mod tls;
mod url;

pub use http::authorization;
pub(crate) use tls::validity as certificate_validity;
pub use url::ServerUrl;

/// A waiter's pause after a 429: at most four requests a second from it while the server
/// has too many waiting (its `Retry-After` is a second), and an interrupt heard within it.
const THROTTLED: Duration = Duration::from_millis(250);

/// The client of one server.
pub struct RemoteStore {
    client: Client,
    /// The last `acquire`'s outcome when it was a long poll that came back busy: the waiter's
    /// pause after it need not wait again, and a poll given up at an interrupt answers so.
    polled: Option<SetAcquire>,
    /// The last `acquire` was answered 429 (too many requests wait on the server): the
    /// waiter's pause after it is a whole poller's pause, never none.
    throttled: bool,
    /// Whether the server said the place is given up, when the last long poll was
    /// interrupted (it tried to leave the queue then, [`Client::poll`]); `None` when it was
    /// not interrupted.
    left: Option<bool>,
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
            polled: None,
            throttled: false,
            left: None,
        })
    }

    /// Until when a call seeks a server that cannot be reached: its budget, or `deadline` if
    /// that is later.
    fn until(deadline: Option<Instant>) -> Instant {
        let budget = Instant::now() + CONNECT_BUDGET;
        deadline.map_or(budget, |deadline| deadline.max(budget))
    }

    /// One request and its answer ([`Client::call`]), a server that cannot be reached sought
    /// for the call's budget.
    fn call(&self, request: &HttpRequest) -> Result<HttpAnswer> {
        self.client.call(request, Self::until(None))
    }

    /// `POST /locks/{r}/leave` or `POST /sets/leave`, for the owner of `leave`.
    fn leave_request(members: &Members, owner: &crate::lock::Owner) -> HttpRequest {
        let leave = LeaveRequest {
            members: members.clone(),
            shape: members.shape(),
            owner: owner.clone(),
        };
        HttpRequest::with_body(&leave.route(), &leave, LEAVE_BUDGET)
    }

    /// Gives up a place in the queue, unless the interrupted long poll just tried to. Never
    /// a failure: a server that cannot be told gives the place up itself within 5 s, and the
    /// outcome says which.
    fn leave(&mut self, leave: &op::Leave) -> Left {
        if let Some(left) = self.left.take() {
            return Left { at_once: left };
        }
        let until = Instant::now() + LEAVE_BUDGET;
        let request = Self::leave_request(&leave.members, &leave.owner);
        let at_once = (self.client.call(&request, until)).is_ok_and(|answer| answer.status == 204);
        Left { at_once }
    }

    /// `POST /locks/{r}` or `POST /sets`. A waiting one is the server's long poll for the
    /// rest of the wait, which an interrupt ends with a leave ([`Client::poll`]); a poll given
    /// up at an interrupt without an answer answers as the last poll did, or else busy.
    fn acquire(&mut self, acquire: &op::Acquire) -> Result<Acquisition> {
        let (members, request) = (&acquire.members, &acquire.request);
        let shape = members.shape();
        // The rest of the wait (a waiter's last look asks for a second, to keep its place to
        // the end and learn its position).
        let wait = request.waits.then(|| {
            let left = (acquire.until).map_or(Duration::ZERO, |end| {
                end.saturating_duration_since(Instant::now())
            });
            whole_seconds(left).clamp(1, MAX_WAIT_SECS)
        });
        let body = AcquireRequest {
            members: members.clone(),
            shape,
            request: request.clone(),
            wait_seconds: wait,
        };
        let answer = if let Some(wait) = wait {
            let timeout = Duration::from_secs(wait).min(LONGEST_POLL) + CALL_TIMEOUT;
            let leave = Self::leave_request(members, &request.owner);
            let (answer, left) = self.client.poll(
                HttpRequest::with_body(&body.route(), &body, timeout),
                Self::until(acquire.until),
                &leave,
            )?;
            self.left = left;
            answer
        } else {
            self.call(&HttpRequest::with_body(&body.route(), &body, CALL_TIMEOUT))?
        };
        let outcome = if answer.interrupted {
            self.polled.take().unwrap_or_else(|| unread(members))
        } else if self.throttled_by(&answer, request.waits) {
            // Too many requests wait on the server already: still busy, as the latest look
            // found it; the wait goes on, and asks again after its pause.
            self.polled.clone().unwrap_or_else(|| unread(members))
        } else {
            self.acquired(&answer, members, shape)?
        };
        let busy = matches!(outcome, SetAcquire::Busy { .. });
        self.polled = (request.waits && busy).then(|| outcome.clone());
        Ok(Acquisition {
            outcome,
            decided: Some(answer.decided),
            notice: None,
        })
    }

    /// Whether `answer` is a waiting acquire's 429: the waiter is to pause, then ask again.
    fn throttled_by(&mut self, answer: &HttpAnswer, waits: bool) -> bool {
        self.throttled = answer.status == 429 && waits;
        self.throttled
    }

    /// What the server answered an acquire of `members`, sent as `shape`: 200 with the
    /// command's answer (the grant's `Distlock-Grant` saying how each tenure came about), or
    /// 409 with the mismatch's members.
    fn acquired(&self, answer: &HttpAnswer, members: &Members, shape: Shape) -> Result<SetAcquire> {
        let tenures = || read_grant_header(answer.grant.as_deref(), members.as_slice().len());
        match (answer.status, shape) {
            (200, Shape::One) => {
                Ok(Shaped::One(answer.json::<AcquireAnswer>()?).outcome(tenures()))
            }
            (200, Shape::Set) => {
                let read: ShapedAcquire = Shaped::Set(answer.json::<SetAcquireAnswer>()?);
                Ok(read.outcome(tenures()))
            }
            (409, _) => Ok(SetAcquire::Mismatch {
                resource: match shape {
                    Shape::One => members.first().clone(),
                    Shape::Set => answer
                        .member::<Option<Resource>>("resource")?
                        .ok_or_else(|| anyhow!("the server's mismatch names no resource"))?,
                },
                holders: answer.member::<Vec<Holder>>("holders")?,
            }),
            _ => Err(answer.unexpected(self.client.url())),
        }
    }

    fn status(&self, resource: &Resource) -> Result<Status> {
        let route = Route::Status(resource.clone());
        let answer = self.call(&HttpRequest::new(&route, route.path(), CALL_TIMEOUT))?;
        match answer.status {
            200 => match answer.json::<StatusAnswer>()? {
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
                waiting: answer.member::<Option<usize>>("waiting")?.unwrap_or(0),
            }),
            _ => Err(answer.unexpected(self.client.url())),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<crate::lock::Lock>> {
        let request = HttpRequest::new(&Route::List, list_path(prefix), CALL_TIMEOUT);
        let answer = self.call(&request)?;
        match answer.status {
            200 => Ok(answer.json::<crate::answer::ListAnswer>()?.locks),
            _ => Err(answer.unexpected(self.client.url())),
        }
    }

    fn queues(&self, prefix: &str) -> Result<Vec<crate::lock::Queue>> {
        let request = HttpRequest::new(&Route::Queues, queues_path(prefix), CALL_TIMEOUT);
        let answer = self.call(&request)?;
        match answer.status {
            200 => Ok(answer.json::<crate::answer::QueuesAnswer>()?.queues),
            _ => Err(answer.unexpected(self.client.url())),
        }
    }

    fn log(&self, query: &crate::lock::LogQuery) -> Result<Vec<Event>> {
        let answer = self.call(&HttpRequest::new(
            &Route::Log,
            log_path(query),
            CALL_TIMEOUT,
        ))?;
        if answer.status != 200 {
            return Err(answer.unexpected(self.client.url()));
        }
        let events = std::str::from_utf8(&answer.body)
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

/// What an interrupted long poll that got no answer says of `members`: busy, each member
/// with the waiter's place first in line for all it knows.
fn unread(members: &Members) -> SetAcquire {
    SetAcquire::Busy {
        blocked: (members.as_slice().iter())
            .map(|member| Blocked {
                resource: member.clone(),
                holder: None,
                holders: Vec::new(),
                waiting: 0,
                position: Some(1),
            })
            .collect(),
    }
}

impl LockStore for RemoteStore {
    fn carry_out(&mut self, op: Op) -> Result<Outcome> {
        Ok(match op {
            Op::Acquire(acquire) => Outcome::Acquire(self.acquire(&acquire)?),
            Op::Status(status) => Outcome::Status(self.status(&status.resource)?),
            Op::Renew(renew) => Outcome::Renew(self.renew(&renew)?),
            Op::Release(release) => Outcome::Release(self.release(&release)?),
            Op::Finish(finish) => Outcome::Finish(self.finish(&finish)?),
            Op::Break(broken) => Outcome::Break(self.break_lock(&broken)?),
            Op::Leave(leave) => Outcome::Leave(self.leave(&leave)),
            Op::List(list) => Outcome::List(self.list(&list.prefix)?),
            Op::Queues(read) => Outcome::Queues(self.queues(&read.prefix)?),
            Op::Log(log) => Outcome::Log(self.log(&log.query)?),
            Op::Gc(_) => {
                return Err(Error::Failed(anyhow!(
                    "gc runs where the store is, not through the distlock server {}",
                    self.client.url().as_str()
                )));
            }
            // The long poll is the wait: nothing to listen to here.
            Op::Subscribe(_) => Outcome::Subscribe(()),
            Op::WaitForChange(wait) => {
                // After a long poll that waited, look again at once; otherwise (a poll the
                // server answered at once) pause as a poller would.
                if std::mem::take(&mut self.throttled) {
                    std::thread::sleep(THROTTLED);
                } else if self.polled.is_none() {
                    std::thread::sleep(wait.timeout.min(Duration::from_millis(250)));
                }
                Outcome::WaitForChange(())
            }
            // The server tidies its own store.
            Op::Tidy(_) => Outcome::Tidy(()),
            // A server batches its own store's operations; through one, each is a request.
            Op::Batch(batch) => Outcome::Batch(Batched {
                outcomes: (batch.ops.into_iter())
                    .map(|op| self.carry_out(op).map_err(|err| err.to_string()))
                    .collect(),
                wake: Vec::new(),
            }),
            // A server is watched by its own long polls.
            Op::Watch(watch) => {
                std::thread::sleep(watch.timeout);
                Outcome::Watch(Heard::Anything)
            }
        })
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
