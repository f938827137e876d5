//! The connection's own thread, and finding the server again when the connection is lost.
//!
//! - **A thread per connection.** The driver bounds only the TCP connect; a server that
//!   accepts bytes and never answers would hang a caller forever. So the connection lives on a
//!   worker thread, every call is a job sent to it, and the caller gives up on it after
//!   [`CALL_TIMEOUT`]. A worker that timed out may still be stuck: it is abandoned, never
//!   used again.
//! - **A lost connection is sought again** (a restart, a failover, a session terminated, a
//!   connection cut): the call starts over on a new connection, and a waiter listens on it
//!   again. The search goes on for the call's budget: the connect timeout (5 s unless the URL's
//!   `connect_timeout` says otherwise), or until the deadline the operation carries
//!   ([`Op::keeps_trying_until`]: a waiter's `--wait`, `run`'s lease). A multi-host URL
//!   is tried host by host at every attempt, so after a failover it reaches the new primary
//!   (with `target_session_attrs=read-write`).
//! - **Except during a commit.** A connection lost after a write batch was sent and before its
//!   answer came leaves the outcome unknown: the call fails, and a lock that did commit expires
//!   by its TTL (the same owner asking again re-acquires it, same fence). A batch the server
//!   answered with an error never committed, whatever the error: that one is tried again.
//! - **A grant is timed from its own attempt.** An acquire that waited for the server through
//!   an outage is decided by the attempt that reached it, long after the call began; its
//!   answer says when that attempt was sent ([`crate::store::op::Acquisition::decided`]), so
//!   that `run` times the lease from there rather than finding it over before it began.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use postgres::error::SqlState;

use super::session::Session;
use super::target::{Target, scrub};
use crate::store::{self, LockStore, Op, Outcome};

/// The longest this client waits for connecting and logging in to one host (the connect
/// timeout, at most this), and for each operation: a little over the server-side limits, so a
/// slow server's own error arrives first.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(8);

/// The pause between two attempts to reach a server that is away: short, so that a waiter or
/// a finished `run` is served soon after the server is back.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_millis(250);

/// A PostgreSQL store: a connection on a worker thread of its own (see the module's doc).
pub struct PostgresStore {
    target: Target,
    read_only: bool,
    creates: bool,
    /// `None` before the first connection and after a lost one.
    worker: Option<Worker>,
    /// `user@host:port/db`, for messages.
    shown: String,
    /// The `LISTEN` of a waiter, sent again on every new connection.
    subscribed: Option<Op>,
    /// The server was away when the store was opened: since when, and why.
    away: Option<(Instant, anyhow::Error)>,
}

/// One connection's thread.
struct Worker {
    /// Dropped to end the worker.
    jobs: Sender<Job>,
    /// Hears from the worker when it has closed the connection.
    closed: Receiver<()>,
    /// The session's "a write batch awaits its answer" (see [`Session`]).
    committing: Arc<AtomicBool>,
    /// A call timed out: the worker may still be stuck in it.
    stuck: bool,
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// Why a call failed.
enum Failure {
    /// The connection was lost, and nothing was committed: try again on a new one.
    Lost(anyhow::Error),
    /// Anything else, the outcome unknown included.
    Final(anyhow::Error),
}

impl Failure {
    /// `err`, as a lost connection if `lost`.
    fn lost_if(lost: bool, err: anyhow::Error) -> Failure {
        if lost {
            Failure::Lost(err)
        } else {
            Failure::Final(err)
        }
    }
}

impl PostgresStore {
    /// Connects and logs in, on a new worker thread. The schema is checked (created, upgraded,
    /// or refused when newer) by the first operation, in the same round trip as its first
    /// statements. A server that is away (refusing, restarting) is sought again by the first
    /// call, within its budget.
    ///
    /// # Errors
    ///
    /// When the server refuses the login, or cannot be reached for another reason than being
    /// away.
    pub fn open(url: &str) -> Result<PostgresStore> {
        PostgresStore::connect(url, false, true)
    }

    /// As [`PostgresStore::open`], for the commands that change only what they find
    /// (`release`, `renew`, `break`, `gc`): a database without a distlock schema reads as an
    /// empty store and is left without one.
    ///
    /// # Errors
    ///
    /// As [`PostgresStore::open`].
    pub fn open_existing(url: &str) -> Result<PostgresStore> {
        PostgresStore::connect(url, false, false)
    }

    /// As [`PostgresStore::open`], for the commands that only read: the schema is never
    /// created or upgraded (a database without one reads as an empty store, an older one is
    /// refused until a command that writes upgrades it).
    ///
    /// # Errors
    ///
    /// As [`PostgresStore::open`].
    pub fn open_read_only(url: &str) -> Result<PostgresStore> {
        PostgresStore::connect(url, true, false)
    }

    fn connect(url: &str, read_only: bool, creates: bool) -> Result<PostgresStore> {
        let target = Target::parse(url).map_err(|e| anyhow!(e))?;
        let shown = target.describe();
        let mut store = PostgresStore {
            target,
            read_only,
            creates,
            worker: None,
            shown,
            subscribed: None,
            away: None,
        };
        let start = Instant::now();
        match store.start_worker() {
            Ok(worker) => store.worker = Some(worker),
            // Away: the first call seeks it, within its budget, which began here.
            Err(Failure::Lost(err)) => store.away = Some((start, err)),
            Err(Failure::Final(err)) => return Err(err),
        }
        Ok(store)
    }

    /// A new connection on a new worker thread, listening if this store's waiter does: to the
    /// first host of the URL that answers (as a primary, with
    /// `target_session_attrs=read-write`).
    fn start_worker(&self) -> Result<Worker, Failure> {
        let mut failure = None;
        for host in self.target.hosts() {
            match self.start_worker_on(host) {
                Ok(worker) => return Ok(worker),
                // A host that is away is one of several; a refusal of the login is final unless
                // another host lets this client in.
                Err(Failure::Lost(err)) => failure = Some(Failure::Lost(err)),
                Err(Failure::Final(err)) => {
                    if !matches!(failure, Some(Failure::Lost(_))) {
                        failure = Some(Failure::Final(err));
                    }
                }
            }
        }
        Err(failure.unwrap_or_else(|| Failure::Final(anyhow!("the PostgreSQL URL names no host"))))
    }

    /// [`PostgresStore::start_worker`] on one host, given up after the connect timeout.
    fn start_worker_on(&self, target: Target) -> Result<Worker, Failure> {
        let (ready_tx, ready) = mpsc::channel();
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (closed_tx, closed) = mpsc::channel();
        let committing = Arc::new(AtomicBool::new(false));
        let patience = target.connect_timeout().min(OPEN_TIMEOUT);
        let host = target.describe();
        let (read_only, creates) = (self.read_only, self.creates);
        let shared = Arc::clone(&committing);
        let spawned = std::thread::Builder::new()
            .name("postgres".into())
            .spawn(move || {
                let session = target
                    .connect()
                    .map(|client| Session::new(client, read_only, creates, shared));
                match session {
                    Ok(mut session) => {
                        if ready_tx.send(Ok(())).is_ok() {
                            for job in job_rx {
                                job(&mut session);
                            }
                        }
                        // Dropping the client says goodbye to the server (a Terminate message).
                        drop(session);
                        let _ = closed_tx.send(());
                    }
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                    }
                }
            });
        if let Err(err) = spawned {
            return Err(Failure::Final(anyhow!(
                "PostgreSQL {}: cannot start the connection's thread: {err}",
                self.shown
            )));
        }
        let failed = |err: anyhow::Error| {
            let said = anyhow!(scrub(
                format!("PostgreSQL {}: {err:#}", self.shown),
                self.target.url()
            ));
            Failure::lost_if(is_lost(&err), said)
        };
        let mut worker = match ready.recv_timeout(patience) {
            Ok(Ok(())) => Worker {
                jobs,
                closed,
                committing,
                stuck: false,
            },
            Ok(Err(err)) => return Err(failed(err)),
            Err(_) => {
                return Err(Failure::Lost(anyhow!(
                    "PostgreSQL {host}: no answer within {} s",
                    patience.as_secs_f64()
                )));
            }
        };
        if let Some(subscribe) = self.subscribed.clone() {
            worker.call(&self.shown, subscribe)?;
        }
        Ok(worker)
    }

    /// The budget of a call that started at `start`: the connect timeout, or until `until`
    /// if that is later (a waiter's `--wait`, `run`'s lease: [`Op::keeps_trying_until`]).
    fn deadline(&self, start: Instant, until: Option<Instant>) -> Instant {
        let own = start + self.target.connect_timeout();
        until.map_or(own, |until| until.max(own))
    }
}

impl Worker {
    /// Runs `op` on the worker's connection and waits at most [`CALL_TIMEOUT`] for it.
    fn call(&mut self, shown: &str, op: Op) -> Result<Outcome, Failure> {
        let (done, result) = mpsc::channel();
        let job: Job = Box::new(move |session| {
            session.attempted = None;
            let mut carried = session.carry_out(op);
            // A grant is timed from the attempt that made it: on this connection, which may
            // be a new one after the server was away for most of the call.
            if let Ok(Outcome::Acquire(acquisition)) = &mut carried {
                acquisition.decided = session.attempted;
            }
            let _ = done.send(carried.map_err(|err| match err {
                // The driver's error stays in the chain, where a lost connection is found.
                store::Error::Failed(err) | store::Error::Unreachable(err) => err,
                other => anyhow::Error::new(other),
            }));
        });
        if self.jobs.send(job).is_err() {
            return Err(Failure::Lost(anyhow!(
                "PostgreSQL {shown}: the connection is gone"
            )));
        }
        let outcome = result.recv_timeout(CALL_TIMEOUT);
        let committing = self.committing.load(Ordering::SeqCst);
        match outcome {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(err)) if committing => Err(Failure::Final(unknown(shown, &err))),
            Ok(Err(err)) => {
                let lost = is_lost(&err);
                Err(Failure::lost_if(
                    lost,
                    err.context(format!("PostgreSQL {shown}")),
                ))
            }
            Err(_) => {
                self.stuck = true;
                let waited = format!("no answer within {} s", CALL_TIMEOUT.as_secs());
                Err(if committing {
                    Failure::Final(unknown(shown, &anyhow!(waited)))
                } else {
                    Failure::Lost(anyhow!("PostgreSQL {shown}: {waited}"))
                })
            }
        }
    }
}

/// The failure of a call whose commit may or may not have happened; `err` is the driver's
/// (or the timeout's) own words, without the server's name.
fn unknown(shown: &str, err: &anyhow::Error) -> anyhow::Error {
    anyhow!(
        "PostgreSQL {shown}: no answer came to a commit ({err:#}), so whether it took effect is \
         unknown (a lock taken expires by its TTL)"
    )
}

/// Whether `err` is a connection lost or a server away, not an answer: the connection closed
/// or reset, refused, a server shutting down or starting up, a session terminated, or a host
/// that is a standby while a primary is asked for (during a failover, it may be promoted).
fn is_lost(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        if cause.to_string().contains("does not allow writes") {
            return true;
        }
        if let Some(err) = cause.downcast_ref::<postgres::Error>() {
            if err.is_closed() {
                return true;
            }
            if let Some(code) = err.code() {
                return code.code().starts_with("08")
                    || [
                        SqlState::ADMIN_SHUTDOWN,
                        SqlState::CRASH_SHUTDOWN,
                        SqlState::CANNOT_CONNECT_NOW,
                    ]
                    .contains(code);
            }
        }
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| {
            use std::io::ErrorKind::{
                BrokenPipe, ConnectionAborted, ConnectionRefused, ConnectionReset, NotConnected,
                NotFound, TimedOut, UnexpectedEof,
            };
            matches!(
                io.kind(),
                BrokenPipe
                    | ConnectionAborted
                    | ConnectionRefused
                    | ConnectionReset
                    | NotConnected
                    // A Unix socket that is not there while its server restarts.
                    | NotFound
                    | TimedOut
                    | UnexpectedEof
            )
        })
    })
}

impl Drop for PostgresStore {
    /// Lets the worker close the connection politely before the process exits, so the server
    /// does not log a reset connection for every call; bounded, and skipped for a connection
    /// that already stopped answering.
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            let Worker {
                jobs,
                closed,
                stuck,
                ..
            } = worker;
            drop(jobs);
            if !stuck {
                let _ = closed.recv_timeout(Duration::from_secs(1));
            }
        }
    }
}

impl LockStore for PostgresStore {
    fn carry_out(&mut self, op: Op) -> store::Result<Outcome> {
        Ok(self.call(op)?)
    }
}

impl PostgresStore {
    /// Carries `op` out on the worker's connection, seeking a lost one again within the
    /// call's budget ([`PostgresStore::deadline`]).
    fn call(&mut self, op: Op) -> Result<Outcome> {
        let op = match op {
            // Nothing to tidy on PostgreSQL: the server does its own housekeeping.
            Op::Tidy(_) => return Ok(Outcome::Tidy(())),
            // Bounded well inside the call's own deadline.
            Op::WaitForChange(mut wait) => {
                wait.timeout = wait.timeout.min(CALL_TIMEOUT / 2);
                Op::WaitForChange(wait)
            }
            Op::Watch(mut watch) => {
                watch.timeout = watch.timeout.min(CALL_TIMEOUT / 2);
                Op::Watch(watch)
            }
            op => op,
        };
        if matches!(op, Op::Subscribe(_)) {
            self.subscribed = Some(op.clone());
        }
        let until = op.keeps_trying_until();
        let (start, mut lost) = match self.away.take() {
            Some((since, err)) => (since, Some(err)),
            None => (Instant::now(), None),
        };
        let mut pause = FIRST_PAUSE;
        loop {
            if let Some(err) = lost.take() {
                let left = self
                    .deadline(start, until)
                    .saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(err);
                }
                std::thread::sleep(pause.mul_f64(0.5 + fastrand::f64() * 0.5).min(left));
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            let called = match &mut self.worker {
                Some(worker) => worker.call(&self.shown, op.clone()),
                None => self.start_worker().and_then(|mut worker| {
                    let called = worker.call(&self.shown, op.clone());
                    self.worker = Some(worker);
                    called
                }),
            };
            match called {
                Ok(outcome) => return Ok(outcome),
                Err(Failure::Final(err)) => {
                    if self.worker.as_ref().is_some_and(|w| w.stuck) {
                        self.worker = None;
                    }
                    return Err(err);
                }
                Err(Failure::Lost(err)) => {
                    // The worker that lost its connection (or got stuck) is let go; the next
                    // attempt starts a new one.
                    if let Some(worker) = self.worker.take() {
                        drop(worker.jobs);
                    }
                    lost = Some(err);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_connections_are_told_from_answers() {
        let io = |kind| anyhow::Error::new(std::io::Error::from(kind));
        let cases = [
            (io(std::io::ErrorKind::ConnectionRefused), true),
            (io(std::io::ErrorKind::ConnectionReset), true),
            (io(std::io::ErrorKind::UnexpectedEof), true),
            (io(std::io::ErrorKind::NotFound), true),
            (io(std::io::ErrorKind::PermissionDenied), false),
            (io(std::io::ErrorKind::InvalidData), false),
            (anyhow!("the database has no distlock schema"), false),
            (
                io(std::io::ErrorKind::BrokenPipe).context("PostgreSQL u@h:5432/d"),
                true,
            ),
        ];
        for (err, lost) in cases {
            assert_eq!(is_lost(&err), lost, "{err:#}");
        }
    }
}
