//! The connection's own thread. The driver bounds only the TCP connect; a server that accepts
//! bytes and never answers would hang a caller forever. So the connection lives on a worker
//! thread, every call is a job sent to it, and the caller gives up after [`CALL_TIMEOUT`].
//! After a timeout the worker may still be stuck, so the handle refuses further calls.

use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use super::session::Session;
use super::target::{Target, scrub};
use crate::store::{LockStore, Op, Outcome};

/// How long this client waits for connecting and logging in, and for each operation: a little
/// over the server-side limits, so a slow server's own error arrives first.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(8);

/// A PostgreSQL store: a connection on a worker thread of its own, so that every call can be
/// given up on after [`CALL_TIMEOUT`] even when the server accepts bytes and never answers
/// (the driver itself only bounds the TCP connect).
pub struct PostgresStore {
    /// `None` once dropped, which ends the worker.
    jobs: Option<Sender<Job>>,
    /// Hears from the worker when it has closed the connection.
    closed: Receiver<()>,
    /// `user@host:port/db`, for messages.
    shown: String,
    /// A call timed out: the worker may still be stuck in it, so later calls fail at once.
    stuck: bool,
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

impl PostgresStore {
    /// Connects and logs in, on a new worker thread. The schema is checked (created, upgraded,
    /// or refused when newer) by the first operation, in the same round trip as its first
    /// statements.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached, refuses the login or does not answer within
    /// [`OPEN_TIMEOUT`].
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
        let (ready_tx, ready) = mpsc::channel();
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (closed_tx, closed) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("postgres".into())
            .spawn(move || {
                let session = target
                    .connect()
                    .map(|client| Session::new(client, read_only, creates));
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
            bail!("PostgreSQL {shown}: cannot start the connection's thread: {err}");
        }
        let opened = match ready.recv_timeout(OPEN_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(format!("{err:#}")),
            Err(_) => Err(format!("no answer within {} s", OPEN_TIMEOUT.as_secs())),
        };
        match opened {
            Ok(()) => Ok(PostgresStore {
                jobs: Some(jobs),
                closed,
                shown,
                stuck: false,
            }),
            Err(message) => Err(anyhow!(scrub(
                format!("PostgreSQL {shown}: {message}"),
                url
            ))),
        }
    }

    /// Runs `op` on the worker's connection and waits at most [`CALL_TIMEOUT`] for it.
    fn call<T: Send + 'static>(
        &mut self,
        op: impl FnOnce(&mut Session) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.stuck {
            bail!(
                "PostgreSQL {}: the connection is unusable after an earlier timeout",
                self.shown
            );
        }
        let (done, result) = mpsc::channel();
        let job: Job = Box::new(move |session| {
            let _ = done.send(op(session));
        });
        if self
            .jobs
            .as_ref()
            .is_none_or(|jobs| jobs.send(job).is_err())
        {
            bail!("PostgreSQL {}: the connection is gone", self.shown);
        }
        if let Ok(outcome) = result.recv_timeout(CALL_TIMEOUT) {
            outcome.with_context(|| format!("PostgreSQL {}", self.shown))
        } else {
            self.stuck = true;
            bail!(
                "PostgreSQL {}: no answer within {} s",
                self.shown,
                CALL_TIMEOUT.as_secs()
            )
        }
    }
}

impl Drop for PostgresStore {
    /// Lets the worker close the connection politely before the process exits, so the server
    /// does not log a reset connection for every call; bounded, and skipped for a connection
    /// that already stopped answering.
    fn drop(&mut self) {
        drop(self.jobs.take());
        if !self.stuck {
            let _ = self.closed.recv_timeout(Duration::from_secs(1));
        }
    }
}

impl LockStore for PostgresStore {
    fn perform(&mut self, op: Op) -> Result<Outcome> {
        let op = match op {
            // Bounded well inside the call's own deadline.
            Op::WaitForChange { resource, timeout } => Op::WaitForChange {
                resource,
                timeout: timeout.min(CALL_TIMEOUT / 2),
            },
            op => op,
        };
        self.call(move |session| session.perform(op))
    }
}
