//! The renewing side of `run`: its own store connection, its own thread, and that thread's
//! whole life ([`HeartbeatThread`]: started when the first renewal is due, stopped when dropped).
//!
//! A slow or blocked renewal therefore never delays the supervisor's reaction: the deadline by
//! which the command must be stopped is kept by the supervisor, not here. The heartbeat only
//! reports what the store answered, as [`Event`]s, and stops when told or when the lock is gone.
//!
//! Each [`Event::Renewed`] carries the lease end counted from *before* the renewal was sent, so
//! it never overstates the lease.
//!
//! Its connections are opened [`store::Access::Again`], which never creates a store: a SQLite
//! store removed while the command runs is reported as gone ([`store::Error::Vanished`], a lost
//! lease), not made anew and then searched in vain for the lock.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::lock::{EventKind, Fence, LogQuery, Members, Owner, SetRenew, Ttl};
use crate::store::{self, Location, LockStore, Locks, op};

use super::job::Job;
use super::supervisor::Event;

/// What to keep renewing: one tenure, or a lock set's tenures as one.
pub struct Heartbeat {
    pub location: Location,
    /// The lock's resource, or the set's members.
    pub members: Members,
    /// This run's fence on each member, in the members' order.
    pub fences: Vec<Fence>,
    pub owner: Owner,
    pub ttl: Ttl,
    /// When the lease ends at the earliest, on the monotonic clock, as the grant left it: each
    /// renewal that succeeds moves it on.
    pub lease_end: Instant,
    /// Held while a renewal talks to the store, so that `run` never stops itself (job
    /// control) inside one: a SQLite write transaction held by a stopped process would stop
    /// every other user of the store.
    pub in_flight: Arc<Mutex<()>>,
}

impl Heartbeat {
    /// Why this tenure (or a member's) is no longer this run's: an operator's `break` says who
    /// and why in the history (whether the resource is free by now or already someone
    /// else's); otherwise `otherwise`.
    fn why_gone(&self, mut store: Option<&mut Box<dyn LockStore>>, otherwise: &str) -> String {
        let mut breaking = None;
        let set = self.members.single().is_none();
        for (resource, fence) in self.members.as_slice().iter().zip(&self.fences) {
            let query = LogQuery {
                resource: Some(resource.clone()),
                prefix: None,
                since: None,
                limit: Some(100),
            };
            breaking = store
                .as_mut()
                .and_then(|store| store.perform(op::Log { query }).ok())
                .and_then(|events| {
                    events
                        .into_iter()
                        .rev()
                        .find(|e| e.fence == *fence && e.event == EventKind::Broken)
                })
                .and_then(|event| event.broken)
                .map(|broken| (resource, broken));
            if breaking.is_some() {
                break;
            }
        }
        match breaking {
            // A lock set names the member that was broken.
            Some((resource, breaking)) if set => format!(
                "{resource} was broken by {} ({})",
                breaking.breaker(),
                breaking.reason
            ),
            Some((_, breaking)) => {
                format!(
                    "it was broken by {} ({})",
                    breaking.breaker(),
                    breaking.reason
                )
            }
            None => otherwise.to_owned(),
        }
    }

    /// One renewal: of the tenure, or of the set's every member in one transaction (all or
    /// nothing). It is of no use once the lease has ended at `lease_end`, so the store is
    /// told: a server's client then gives the request up by that moment, rather than holding
    /// it open for its own timeout.
    fn renew(&self, store: &mut dyn LockStore, lease_end: Instant) -> store::Result<SetRenew> {
        store.perform(op::Renew {
            members: self.members.clone(),
            owner: self.owner.clone(),
            ttl: self.ttl,
            fences: Some(self.fences.clone()),
            lease_end: Some(lease_end),
        })
    }

    /// How often the lock is renewed: every third of its TTL.
    pub fn interval(ttl: Ttl) -> Duration {
        ttl.as_duration() / 3
    }

    /// How soon a failed renewal is tried again.
    pub fn retry(ttl: Ttl) -> Duration {
        Heartbeat::interval(ttl).min(Duration::from_secs(1))
    }

    /// When the first renewal of a lease that ends at `lease_end` is due: an interval after
    /// the lease began (at once, if that has passed), not an interval after the command
    /// started, which may be much later for a grant that came late (a server's answer held up
    /// on its way): renewing only then would find the command already stopped for want of a
    /// renewal.
    pub fn first_due(lease_end: Instant, ttl: Ttl) -> Instant {
        let after_it = ttl.as_duration() - Heartbeat::interval(ttl);
        lease_end.checked_sub(after_it).unwrap_or(lease_end)
    }

    /// Renews at once, then every [`Heartbeat::interval`], until `stop` is dropped, `report`
    /// says nobody listens any more, or the store says the lock is gone — or is gone itself;
    /// after another store error, retries sooner ([`Heartbeat::retry`]) and on a new
    /// connection. It is started when the first renewal is due. What each answer means is
    /// [`Cadence::after`]'s.
    pub fn beat(self, report: impl Fn(Event) -> bool, stop: &Receiver<()>) {
        let cadence = Cadence::new(self.ttl);
        let mut store: Option<Box<dyn LockStore>> = None;
        let mut next = Instant::now();
        let mut lease_end = self.lease_end;
        loop {
            match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let attempt = Instant::now();
            let talking = self.in_flight.lock();
            let renewed = match store.as_mut() {
                Some(store) => self.renew(store.as_mut(), lease_end),
                None => store::open(&self.location, store::Access::Again)
                    .and_then(|opened| self.renew(store.insert(opened).as_mut(), lease_end)),
            };
            drop(talking);
            let event = match cadence.after(&renewed, attempt, Instant::now()) {
                Beat::Renewed { until, next: at } => {
                    next = at;
                    lease_end = lease_end.max(until);
                    Event::Renewed(until)
                }
                Beat::Gone { otherwise } => {
                    let _talking = self.in_flight.lock();
                    Event::Lost(self.why_gone(store.as_mut(), otherwise))
                }
                Beat::Vanished(why) => Event::Lost(why),
                Beat::Refused(why) => Event::Refused(why),
                Beat::Failed { message, next: at } => {
                    // Reconnect for the next try: the connection itself may be what failed.
                    store = None;
                    next = at;
                    Event::Trouble(message)
                }
            };
            let lost = matches!(event, Event::Lost(_) | Event::Refused(_));
            if !report(event) || lost {
                return;
            }
        }
    }
}

/// The heartbeat thread of a job, started once the first renewal is due (see the module's
/// doc). Dropping it stops the thread at its next wake-up. The thread is never joined: it may
/// be inside a renewal that an unresponsive store holds up, and a renewal that lands after the
/// release finds no lock of this tenure and changes nothing.
pub struct HeartbeatThread<'a> {
    job: &'a Job<'a>,
    /// Where the thread reports, and the self-pipe it writes to after each report (which
    /// wakes the runner's loop).
    report: Sender<Event>,
    waker: UnixStream,
    thread: Lazily,
    /// See [`Heartbeat::in_flight`].
    in_flight: Arc<Mutex<()>>,
}

impl<'a> HeartbeatThread<'a> {
    /// The heartbeat of `job`, due a renewal interval after its lease began
    /// ([`Heartbeat::first_due`]).
    pub fn new(job: &'a Job<'a>, report: Sender<Event>, waker: UnixStream) -> HeartbeatThread<'a> {
        HeartbeatThread {
            job,
            report,
            waker,
            thread: Lazily::new(
                Heartbeat::first_due(job.lease_end, job.ttl),
                Heartbeat::retry(job.ttl),
            ),
            in_flight: Arc::default(),
        }
    }

    /// Waits for a renewal in flight to end and keeps the next from starting while the guard
    /// is held, so that `run` can stop itself holding nothing in the store. A renewal is
    /// bounded (the busy timeout, the PostgreSQL call timeout), and so is this wait.
    pub fn quiet(&self) -> MutexGuard<'_, ()> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When the thread is to be started, while it is not running.
    pub fn due(&self) -> Option<Instant> {
        self.thread.due()
    }

    /// Starts the thread if it is due, its first renewal at once; see [`Lazily::start_if_due`].
    pub fn start_if_due(&mut self, now: Instant) -> Option<Event> {
        let HeartbeatThread {
            job,
            report,
            waker,
            thread,
            in_flight,
        } = self;
        thread.start_if_due(now, || {
            start_heartbeat(
                job,
                report.clone(),
                waker.try_clone()?,
                Arc::clone(in_flight),
            )
        })
    }
}

/// A thread started when it is first needed, not before, and tried again after a refusal.
struct Lazily {
    /// When to start it, while it is not running.
    due: Instant,
    /// How long after a refusal to try again.
    retry: Duration,
    /// The running thread's stop signal: dropping it stops the thread.
    stop: Option<Sender<()>>,
}

impl Lazily {
    fn new(due: Instant, retry: Duration) -> Lazily {
        Lazily {
            due,
            retry,
            stop: None,
        }
    }

    fn due(&self) -> Option<Instant> {
        self.stop.is_none().then_some(self.due)
    }

    /// Calls `start` if the thread is due and not running. A refusal is reported as a failed
    /// renewal ([`Event::Trouble`]), so the supervisor stops the command before the lease
    /// could end unless a later try succeeds; the next try is `retry` later.
    fn start_if_due(
        &mut self,
        now: Instant,
        start: impl FnOnce() -> std::io::Result<Sender<()>>,
    ) -> Option<Event> {
        if self.stop.is_some() || now < self.due {
            return None;
        }
        match start() {
            Ok(stop) => {
                self.stop = Some(stop);
                None
            }
            Err(err) => {
                self.due = now + self.retry;
                Some(Event::Trouble(format!(
                    "cannot start the heartbeat thread: {err}"
                )))
            }
        }
    }
}

/// Starts the heartbeat thread, its first renewal at once; it reports into `report` and rings
/// `waker` after each report. Dropping the returned sender stops it.
fn start_heartbeat(
    job: &Job<'_>,
    report: Sender<Event>,
    waker: UnixStream,
    in_flight: Arc<Mutex<()>>,
) -> std::io::Result<Sender<()>> {
    let (stop, stopped) = mpsc::channel::<()>();
    let Some(first) = job.locks.first() else {
        return Err(std::io::Error::other(
            "a run without a lock has nothing to renew",
        ));
    };
    let heartbeat = Heartbeat {
        location: job.location.clone(),
        members: job.members.clone(),
        fences: job.locks.iter().map(|lock| lock.fence).collect(),
        owner: first.owner.clone(),
        ttl: job.ttl,
        lease_end: job.lease_end,
        in_flight,
    };
    std::thread::Builder::new()
        .name("distlock-heartbeat".to_owned())
        .spawn(move || {
            // Signals are the event loop's to handle, on the main thread.
            let _ = nix::sys::signal::SigSet::all().thread_block();
            heartbeat.beat(
                |event| {
                    let sent = report.send(event).is_ok();
                    let _ = (&waker).write(&[0]);
                    sent
                },
                &stopped,
            );
        })?;
    Ok(stop)
}

/// What one renewal's answer means (see [`Cadence::after`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Beat {
    /// The lease lasts at least `until`; renew again at `next`.
    Renewed { until: Instant, next: Instant },
    /// The lock is no longer this run's: the history may say why (a `break`), else
    /// `otherwise`. The heartbeat stops.
    Gone { otherwise: &'static str },
    /// The store itself is gone, and the lock with it. The heartbeat stops.
    Vanished(String),
    /// A server refused the token (removed from its tokens file, or no longer allowed the
    /// resource): no renewal will succeed, though the lease runs on until it ends. The
    /// heartbeat stops, and the command is stopped at once rather than at the lease's end.
    Refused(String),
    /// A store error: try again at `next`, on a new connection.
    Failed { message: String, next: Instant },
}

/// The heartbeat's timing rules, as a pure function of each renewal's answer.
#[derive(Debug, Clone, Copy)]
struct Cadence {
    ttl: Duration,
    interval: Duration,
    retry: Duration,
}

impl Cadence {
    fn new(ttl: Ttl) -> Cadence {
        Cadence {
            ttl: ttl.as_duration(),
            interval: Heartbeat::interval(ttl),
            retry: Heartbeat::retry(ttl),
        }
    }

    /// The renewal sent at `attempt` was answered with `renewed` at `now`. A renewal's lease is
    /// counted from before it was sent, so it never overstates the lease; the next renewal is
    /// an interval after that same instant, and a retry is counted from the failure's answer.
    fn after(&self, renewed: &store::Result<SetRenew>, attempt: Instant, now: Instant) -> Beat {
        match renewed {
            Ok(Ok(_)) => Beat::Renewed {
                until: attempt + self.ttl,
                next: attempt + self.interval,
            },
            Ok(Err(refused)) if refused.forbidden => Beat::Gone {
                otherwise: "another owner holds it",
            },
            Ok(Err(_)) => Beat::Gone {
                otherwise: "it expired or was released",
            },
            // The lock went with the store: nobody opening it now finds it held.
            Err(gone @ store::Error::Vanished(_)) => Beat::Vanished(gone.to_string()),
            Err(refused @ store::Error::NotAllowed(_)) => Beat::Refused(refused.to_string()),
            Err(err) => Beat::Failed {
                message: err.to_string(),
                next: now + self.retry,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_heartbeat_thread_starts_when_due_and_a_refusal_is_a_failed_renewal_retried_later() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let retry = ms(1000);
        // (now, what starting answers) → (started, reported trouble, due afterwards)
        type Start = fn() -> std::io::Result<Sender<()>>;
        let started: Start = || Ok(mpsc::channel().0);
        let refusing: Start = || Err(std::io::ErrorKind::WouldBlock.into());
        let cases: [(Duration, Start, bool, bool, Option<Instant>); 4] = [
            // Before it is due nothing is started, whatever starting would answer.
            (ms(0), started, false, false, Some(t0 + ms(500))),
            (ms(499), refusing, false, false, Some(t0 + ms(500))),
            // Due: started, and no longer due.
            (ms(500), started, true, false, None),
            // Due but refused: one failed renewal, tried again `retry` later.
            (ms(700), refusing, false, true, Some(t0 + ms(700) + retry)),
        ];
        for (at, start, want_started, want_trouble, want_due) in cases {
            let mut thread = Lazily::new(t0 + ms(500), retry);
            let mut called = false;
            let event = thread.start_if_due(t0 + at, || {
                called = true;
                start()
            });
            assert_eq!(called, at >= ms(500), "at {at:?}");
            assert_eq!(thread.stop.is_some(), want_started, "at {at:?}");
            match event {
                Some(Event::Trouble(message)) => {
                    assert!(want_trouble, "at {at:?}: {message}");
                    assert!(message.starts_with("cannot start the heartbeat thread: "));
                }
                other => assert!(!want_trouble && other.is_none(), "at {at:?}: {other:?}"),
            }
            assert_eq!(thread.due(), want_due, "at {at:?}");
        }
        // Once running, it is never started again.
        let mut thread = Lazily::new(t0, retry);
        assert!(thread.start_if_due(t0, started).is_none());
        let event = thread.start_if_due(t0 + ms(5000), || panic!("started twice"));
        assert!(event.is_none());
    }

    #[test]
    fn the_first_renewal_is_due_an_interval_after_the_lease_began() {
        let base = Instant::now();
        let ms = Duration::from_millis;
        // (ttl, when the lease ends) → when its first renewal is due, both after `base`. A
        // command that starts past that moment (a grant that came late) renews at once.
        let cases = [
            (30, ms(30_000), ms(10_000)),
            (30, ms(48_000), ms(28_000)),
            (3, ms(3_000), ms(1_000)),
            (6, ms(5_000), ms(1_000)),
        ];
        for (ttl, ends, due) in cases {
            let ttl = Ttl::from_secs(ttl).expect("a ttl");
            assert_eq!(
                Heartbeat::first_due(base + ends, ttl),
                base + due,
                "ttl {ttl:?}, ending at {ends:?}"
            );
        }
    }

    use crate::lock::{Lock, Mode, Resource, SetRefusal, Timestamp};

    fn renewed() -> store::Result<SetRenew> {
        Ok(Ok(vec![Lock {
            resource: Resource::parse("r").expect("a resource"),
            owner: Owner::parse("o").expect("an owner"),
            token: None,
            fence: Fence(3),
            acquired_at: Timestamp(0),
            expires_at: Timestamp(30_000),
            mode: Mode::Exclusive,
            note: None,
        }]))
    }

    fn refused(forbidden: bool) -> store::Result<SetRenew> {
        Ok(Err(SetRefusal {
            resource: Resource::parse("r").expect("a resource"),
            forbidden,
        }))
    }

    #[test]
    fn each_answer_is_news_and_a_next_time_or_the_end() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        // (ttl, answer, sent at, answered at) → beat
        let renewed_until = |until, next| Beat::Renewed {
            until: t0 + until,
            next: t0 + next,
        };
        let cases: Vec<(u64, store::Result<SetRenew>, Duration, Duration, Beat)> = vec![
            // The lease and the next renewal count from before the request was sent, however
            // long the answer took.
            (
                30,
                renewed(),
                secs(10),
                secs(10) + ms(7),
                renewed_until(secs(40), secs(20)),
            ),
            (
                30,
                renewed(),
                secs(10),
                secs(14),
                renewed_until(secs(40), secs(20)),
            ),
            (
                3,
                renewed(),
                secs(1),
                secs(1),
                renewed_until(secs(4), secs(2)),
            ),
            (
                30,
                refused(false),
                secs(10),
                secs(10),
                Beat::Gone {
                    otherwise: "it expired or was released",
                },
            ),
            (
                30,
                refused(true),
                secs(10),
                secs(10),
                Beat::Gone {
                    otherwise: "another owner holds it",
                },
            ),
            // A store error is retried a second after its answer at most (sooner for a short
            // TTL: a third of it).
            (
                30,
                Err(anyhow::anyhow!("connection refused").into()),
                secs(10),
                secs(12),
                Beat::Failed {
                    message: "connection refused".to_owned(),
                    next: t0 + secs(13),
                },
            ),
            (
                1,
                Err(anyhow::anyhow!("busy").into()),
                secs(10),
                secs(10),
                Beat::Failed {
                    message: "busy".to_owned(),
                    next: t0 + secs(10) + secs(1) / 3,
                },
            ),
            (
                30,
                Err(store::Error::Vanished(PathBuf::from("/x/locks.db"))),
                secs(10),
                secs(10),
                Beat::Vanished("the store /x/locks.db no longer exists".to_owned()),
            ),
            // A server that refuses the token will refuse every renewal: no retry.
            (
                30,
                Err(store::Error::NotAllowed(
                    "the distlock server http://h refused the token: unknown token".to_owned(),
                )),
                secs(10),
                secs(10),
                Beat::Refused(
                    "the distlock server http://h refused the token: unknown token".to_owned(),
                ),
            ),
        ];
        for (ttl, answer, sent, answered, beat) in cases {
            let cadence = Cadence::new(Ttl::from_secs(ttl).expect("a ttl"));
            assert_eq!(
                cadence.after(&answer, t0 + sent, t0 + answered),
                beat,
                "ttl {ttl}, {answer:?} sent at {sent:?}"
            );
        }
    }
}
