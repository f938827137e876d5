//! Acquiring with `--wait`: a place in the resource's queue, kept until the lock is granted,
//! the wait runs out, or the waiter is interrupted. Shared by `acquire` and `run`.
//!
//! - **Order** is the store's: a waiter takes a place in the queue at its first refused attempt
//!   and is granted only once no earlier live waiter remains (see [`crate::engine::acquire`]).
//! - **Waking** is the store's too: between attempts the waiter sleeps in
//!   [`LockStore::wait_for_change`] (a kernel wait on SQLite, `LISTEN` on PostgreSQL), which a
//!   release ends at once. It also looks again at least every [`MAX_DELAY`], for leases that
//!   expire without a release and to keep its place alive (a place not refreshed for
//!   [`crate::engine::LIVENESS_MS`] stops counting, so a killed waiter blocks nobody for long).
//! - **Leaving**: a waiter whose wait runs out, or that gets SIGINT, SIGTERM, SIGHUP or SIGQUIT,
//!   takes its place out of the queue before it exits, so it blocks nobody at all.
//!
//! What the user sees while waiting is not drawn here: the caller passes `on_busy`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::store::Result;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};

use crate::engine::Request;
use crate::exit::Exit;
use crate::lock::{Acquire, Holder, Members, Resource, SetAcquire};
use crate::output::warn;
use crate::store::{LockStore, Locks};

const FIRST_DELAY: Duration = Duration::from_millis(5);
/// The longest sleep between attempts: bounds how late an expired lease is noticed, and how
/// late an interrupted waiter leaves.
const MAX_DELAY: Duration = Duration::from_millis(250);

/// The signals that make a waiter give up its place and exit: those a terminal, a service
/// manager or `kill` sends to end a process, `^\` (SIGQUIT) included. Left to its default, any
/// of them would end the waiter with its place still in the queue, blocking those behind it
/// until the place's liveness lease ran out.
const INTERRUPTS: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// The end of an acquire, with or without waiting.
pub enum Waited<T = Acquire> {
    Done(Attempt<T>),
    /// Signal N arrived while waiting; the waiter left the queue (at once, or — through a
    /// distlock server that could not be told, which gives an abandoned place up itself —
    /// within 5 s: `false`).
    Interrupted(i32, bool),
}

impl<T> Waited<T> {
    /// The deciding attempt, or — for an interrupted wait — the exit the process ends with
    /// (128+N, as if it had died of the signal; one line on stderr says so). `what` names
    /// what was waited for in that line.
    pub fn attempt(self, what: &dyn std::fmt::Display) -> Result<Attempt<T>, Exit> {
        match self {
            Waited::Done(attempt) => Ok(attempt),
            Waited::Interrupted(signal, at_once) => {
                if at_once {
                    warn(format_args!(
                        "interrupted while waiting for {what}; left the queue"
                    ));
                } else {
                    warn(format_args!(
                        "interrupted while waiting for {what}; the server gives its place \
                         in the queue up within 5 s"
                    ));
                }
                Err(Exit::Child(u8::try_from(128 + signal).unwrap_or(u8::MAX)))
            }
        }
    }
}

/// The deciding attempt.
pub struct Attempt<T = Acquire> {
    pub outcome: T,
    /// The monotonic time just before the deciding attempt was sent (or, through a server that
    /// made the request wait, that time plus the server's wait): a lease it granted cannot
    /// have started earlier, so `started + ttl` is a safe local bound for its end.
    pub started: Instant,
}

/// What a waiter waits for: one resource ([`One`]) or a lock set ([`Set`]). The waiting is the
/// same; what an attempt asks the store, and how its outcome reads, differ.
pub trait Wanted {
    type Outcome;
    /// Every resource it waits on, by resource.
    fn resources(&self) -> &[Resource];
    fn request(&self) -> &Request;
    /// One attempt, with the request's `waits` as given.
    ///
    /// # Errors
    ///
    /// Store failures.
    fn ask(&self, store: &mut dyn LockStore, request: &Request) -> Result<Self::Outcome>;
    fn look(outcome: &Self::Outcome) -> Look<'_>;
    /// Gives up the place (or places) in the queue.
    ///
    /// # Errors
    ///
    /// Store failures.
    fn leave(&self, store: &mut dyn LockStore) -> Result<()>;
}

/// How an attempt came out, as the waiting policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look<'a> {
    Granted,
    /// Not now: who holds it (for a set, the first busy member), and the waiter's place in
    /// the queue (for a set, the first busy member's), when it waits.
    Busy {
        holder: Option<&'a Holder>,
        position: Option<usize>,
    },
    Mismatch,
}

impl Look<'_> {
    fn of(outcome: &Acquire) -> Look<'_> {
        match outcome {
            Acquire::Acquired { .. } => Look::Granted,
            Acquire::Busy {
                holder, position, ..
            } => Look::Busy {
                holder: holder.as_ref(),
                position: *position,
            },
            Acquire::Mismatch { .. } => Look::Mismatch,
        }
    }
}

/// One resource.
pub struct One<'a> {
    pub resource: &'a Resource,
    pub request: &'a Request,
}

impl Wanted for One<'_> {
    type Outcome = Acquire;

    fn resources(&self) -> &[Resource] {
        std::slice::from_ref(self.resource)
    }

    fn request(&self) -> &Request {
        self.request
    }

    fn ask(&self, store: &mut dyn LockStore, request: &Request) -> Result<Acquire> {
        store.acquire(self.resource, request)
    }

    fn look(outcome: &Acquire) -> Look<'_> {
        Look::of(outcome)
    }

    fn leave(&self, store: &mut dyn LockStore) -> Result<()> {
        store.leave(self.resource, &self.request.owner)
    }
}

/// A lock set, all or nothing.
pub struct Set<'a> {
    pub members: &'a Members,
    pub request: &'a Request,
}

impl Wanted for Set<'_> {
    type Outcome = SetAcquire;

    fn resources(&self) -> &[Resource] {
        self.members.as_slice()
    }

    fn request(&self) -> &Request {
        self.request
    }

    fn ask(&self, store: &mut dyn LockStore, request: &Request) -> Result<SetAcquire> {
        store.acquire_set(self.members, request)
    }

    fn look(outcome: &SetAcquire) -> Look<'_> {
        match outcome {
            SetAcquire::Acquired { .. } => Look::Granted,
            SetAcquire::Busy { blocked } => Look::Busy {
                holder: blocked.first().and_then(|b| b.holder.as_ref()),
                position: blocked.iter().filter_map(|b| b.position).max(),
            },
            SetAcquire::Mismatch { .. } => Look::Mismatch,
        }
    }

    fn leave(&self, store: &mut dyn LockStore) -> Result<()> {
        store.leave_set(self.members, &self.request.owner)
    }
}

/// Tries to acquire; while the lock is busy and `wait` has not run out, waits in the queue and
/// tries again. A mismatch (exit 78) is answered at once. `on_busy` hears, after each busy
/// attempt that will be retried, who holds the lock (if anyone) and the waiter's place.
///
/// # Errors
///
/// Store failures from any attempt.
pub fn acquire(
    store: &mut dyn LockStore,
    resource: &Resource,
    request: &Request,
    wait: Option<Duration>,
    on_busy: &mut dyn FnMut(Option<&Holder>, usize),
) -> Result<Waited> {
    acquire_as(store, &One { resource, request }, wait, on_busy)
}

/// [`acquire`] of a lock set: granted all at once, or waited for in every member's queue at
/// once, holding nothing meanwhile.
///
/// # Errors
///
/// Store failures from any attempt.
pub fn acquire_set(
    store: &mut dyn LockStore,
    members: &Members,
    request: &Request,
    wait: Option<Duration>,
    on_busy: &mut dyn FnMut(Option<&Holder>, usize),
) -> Result<Waited<SetAcquire>> {
    acquire_as(store, &Set { members, request }, wait, on_busy)
}

fn acquire_as<W: Wanted>(
    store: &mut dyn LockStore,
    wanted: &W,
    wait: Option<Duration>,
    on_busy: &mut dyn FnMut(Option<&Holder>, usize),
) -> Result<Waited<W::Outcome>> {
    let mut patience = Patience::new(Instant::now(), wait.unwrap_or(Duration::ZERO));
    let interrupts = if patience.waits() {
        Interrupts::install()
    } else {
        None
    };
    if patience.waits() {
        // A lost connection is sought again while the wait lasts.
        store.keep_trying_until(Some(patience.until));
        store.subscribe(wanted.resources(), &wanted.request().owner)?;
    }
    let interrupted = || interrupts.as_ref().and_then(Interrupts::arrived);
    let waited = wait_in_line(store, wanted, &mut patience, &interrupted, on_busy);
    store.keep_trying_until(None);
    match waited? {
        Ended::Stopped { signal, .. } => {
            wanted.leave(store)?;
            Ok(Waited::Interrupted(signal, store.leaves_at_once()))
        }
        Ended::Answered(attempt) => Ok(Waited::Done(attempt)),
    }
}

/// A distlock server's wait for one request: as [`acquire`], for at most `wait`, except that
/// it is ended by `stop` (the server shutting down, the client gone) rather than by signals,
/// and that a wait which is not the request's last (`keeps_place`: the client will ask again
/// and wait on from the same place) keeps its place in the queue when it runs out, as a stop
/// always does. A place kept but not asked for again expires as a dead waiter's does.
///
/// # Errors
///
/// Store failures from any attempt.
pub fn serve<W: Wanted>(
    store: &mut dyn LockStore,
    wanted: &W,
    wait: Duration,
    keeps_place: bool,
    stop: &dyn Fn() -> bool,
) -> Result<Attempt<W::Outcome>> {
    let mut patience = Patience::new(Instant::now(), wait);
    patience.keeps_place = keeps_place;
    if patience.waits() {
        store.keep_trying_until(Some(patience.until));
        store.subscribe(wanted.resources(), &wanted.request().owner)?;
    }
    let stopped = || stop().then_some(0);
    let waited = wait_in_line(store, wanted, &mut patience, &stopped, &mut |_, _| {});
    store.keep_trying_until(None);
    match waited? {
        // Stopped: the latest look's answer, the place kept.
        Ended::Answered(attempt) | Ended::Stopped { last: attempt, .. } => Ok(attempt),
    }
}

/// How [`wait_in_line`] ended.
enum Ended<T> {
    /// With this attempt's outcome as the answer.
    Answered(Attempt<T>),
    /// Stopped by signal `signal` (0 for a server's stop) after the `last` look, whose place in
    /// the queue the caller keeps or gives up.
    Stopped { signal: i32, last: Attempt<T> },
}

/// [`acquire`]'s attempts, until one is the answer or `interrupted` says why not (a signal's
/// number; the caller decides what becomes of the place in the queue).
fn wait_in_line<W: Wanted>(
    store: &mut dyn LockStore,
    wanted: &W,
    patience: &mut Patience,
    interrupted: &dyn Fn() -> Option<i32>,
    on_busy: &mut dyn FnMut(Option<&Holder>, usize),
) -> Result<Ended<W::Outcome>> {
    loop {
        let started = Instant::now();
        // A wait that keeps its place asks for it to the end: its last look refreshes the
        // place and learns its position.
        let attempt = Request {
            waits: patience.has_time(started) || patience.keeps_place,
            ..wanted.request().clone()
        };
        let outcome = wanted.ask(store, &attempt)?;
        // A grant's lease is timed from when it can first have been decided.
        let decided = store
            .decided_no_earlier_than()
            .map_or(started, |at| at.max(started));
        let look = W::look(&outcome);
        match patience.after(look, started, fastrand::f64()) {
            Next::Answer => {
                return Ok(Ended::Answered(Attempt {
                    outcome,
                    started: decided,
                }));
            }
            Next::LeaveAndAnswer => {
                wanted.leave(store)?;
                return Ok(Ended::Answered(Attempt {
                    outcome,
                    started: decided,
                }));
            }
            Next::Sleep { pause, position } => {
                if let Look::Busy { holder, .. } = look {
                    on_busy(holder, position);
                }
                store.wait_for_change(wanted.resources(), pause)?;
            }
        }
        if let Some(signal) = interrupted() {
            let last = Attempt { outcome, started };
            return Ok(Ended::Stopped { signal, last });
        }
    }
}

/// What a waiter does after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Answer with this attempt's outcome.
    Answer,
    /// Give up the place in the queue, then answer (out of time, or a mismatch).
    LeaveAndAnswer,
    /// Sleep until the resource may have changed or `pause` passes, then try again; the
    /// waiter's place in the queue is `position` (1 = next).
    Sleep { pause: Duration, position: usize },
}

/// The waiting policy of [`acquire`], as a pure state machine: each attempt's outcome and the
/// monotonic instant it was sent in, what to do next out. The pause between attempts doubles
/// from [`FIRST_DELAY`] to [`MAX_DELAY`], with full jitter between half of it and all of it
/// (so pollers that saw the same expiry do not stampede the store together), and never runs
/// past the end of the wait.
#[derive(Debug, Clone)]
struct Patience {
    /// When the wait runs out.
    until: Instant,
    /// `--wait` was not zero.
    waits: bool,
    /// The next pause, before jitter.
    delay: Duration,
    /// A wait that runs out keeps its place in the queue (a server's request that is not the
    /// client's last).
    keeps_place: bool,
}

impl Patience {
    fn new(start: Instant, wait: Duration) -> Patience {
        Patience {
            until: start + wait,
            waits: !wait.is_zero(),
            delay: FIRST_DELAY,
            keeps_place: false,
        }
    }

    /// Whether this waiter queues at all.
    fn waits(&self) -> bool {
        self.waits
    }

    /// Whether the wait has time left at `now`: an attempt then asks for a place in the
    /// queue.
    fn has_time(&self, now: Instant) -> bool {
        now < self.until
    }

    /// What to do after an attempt sent at `now` came out as `outcome`; `jitter` is a random
    /// number in `0..1`.
    fn after(&mut self, outcome: Look<'_>, now: Instant, jitter: f64) -> Next {
        let left = self.until.saturating_duration_since(now);
        match outcome {
            Look::Granted => Next::Answer,
            Look::Busy { position, .. } if !left.is_zero() => {
                let pause = self
                    .delay
                    .mul_f64(0.5 + jitter.clamp(0.0, 1.0) * 0.5)
                    .min(left);
                self.delay = (self.delay * 2).min(MAX_DELAY);
                Next::Sleep {
                    pause,
                    position: position.unwrap_or(1),
                }
            }
            Look::Busy { .. } if self.waits && self.keeps_place => Next::Answer,
            Look::Busy { .. } | Look::Mismatch if self.waits => Next::LeaveAndAnswer,
            Look::Busy { .. } | Look::Mismatch => Next::Answer,
        }
    }
}

/// The interrupt the handlers of [`Interrupts`] noted (0: none), shared with a store whose
/// one call may itself wait long (a distlock server's long poll), so that it gives the call
/// up as soon as one arrives.
static NOTED: std::sync::OnceLock<Arc<AtomicUsize>> = std::sync::OnceLock::new();

/// Whether an interrupt arrived while this process waits in a queue.
pub fn interrupted() -> bool {
    NOTED
        .get()
        .is_some_and(|noted| noted.load(Ordering::SeqCst) != 0)
}

/// The [`INTERRUPTS`], noted instead of ending the process while it waits, so that it can leave
/// the queue first.
struct Interrupts {
    arrived: Arc<AtomicUsize>,
    ids: Vec<signal_hook::SigId>,
}

impl Interrupts {
    /// `None` if the handlers cannot be installed: the waiter then dies of the signal as
    /// before, and its place expires by its liveness lease.
    fn install() -> Option<Interrupts> {
        let arrived = Arc::clone(NOTED.get_or_init(|| Arc::new(AtomicUsize::new(0))));
        arrived.store(0, Ordering::SeqCst);
        let mut ids = Vec::new();
        for signal in INTERRUPTS {
            let id = signal_hook::flag::register_usize(
                signal,
                Arc::clone(&arrived),
                usize::try_from(signal).unwrap_or(usize::MAX),
            )
            .ok()?;
            ids.push(id);
        }
        Some(Interrupts { arrived, ids })
    }

    fn arrived(&self) -> Option<i32> {
        match self.arrived.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Fence, Grant, Lock, Mode, Owner, Timestamp};

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn busy(position: Option<usize>) -> Acquire {
        Acquire::Busy {
            holder: None,
            holders: Vec::new(),
            waiting: 0,
            position,
        }
    }

    fn granted() -> Acquire {
        let owner = Owner::parse("o").expect("an owner");
        Acquire::Acquired {
            lock: Lock {
                resource: Resource::parse("r").expect("a resource"),
                owner,
                fence: Fence(1),
                acquired_at: Timestamp(0),
                expires_at: Timestamp(1000),
                mode: Mode::Exclusive,
                note: None,
            },
            tenure: Grant::New,
        }
    }

    fn mismatch() -> Acquire {
        Acquire::Mismatch {
            holders: Vec::new(),
        }
    }

    #[test]
    fn a_waiter_answers_leaves_or_sleeps_as_its_wait_and_the_outcome_say() {
        let t0 = Instant::now();
        // (--wait, attempt at, outcome, jitter) → next
        let cases: Vec<(Duration, Duration, Acquire, f64, Next)> = vec![
            // Try once: every outcome is the answer, and nothing was queued to leave.
            (Duration::ZERO, ms(0), granted(), 0.5, Next::Answer),
            (Duration::ZERO, ms(0), busy(None), 0.5, Next::Answer),
            (Duration::ZERO, ms(0), mismatch(), 0.5, Next::Answer),
            // Waiting: a grant is the answer.
            (ms(1000), ms(10), granted(), 0.5, Next::Answer),
            // Busy with time left: sleep, between half the first delay and all of it.
            (
                ms(1000),
                ms(0),
                busy(Some(3)),
                0.0,
                Next::Sleep {
                    pause: FIRST_DELAY / 2,
                    position: 3,
                },
            ),
            (
                ms(1000),
                ms(0),
                busy(None),
                1.0,
                Next::Sleep {
                    pause: FIRST_DELAY,
                    position: 1,
                },
            ),
            // Never past the end of the wait.
            (
                ms(1000),
                ms(998),
                busy(Some(1)),
                1.0,
                Next::Sleep {
                    pause: ms(2),
                    position: 1,
                },
            ),
            // Out of time, or a mismatch (answered at once, even with time left): leave.
            (ms(1000), ms(1000), busy(Some(1)), 0.5, Next::LeaveAndAnswer),
            (ms(1000), ms(5000), busy(Some(1)), 0.5, Next::LeaveAndAnswer),
            (ms(1000), ms(10), mismatch(), 0.5, Next::LeaveAndAnswer),
        ];
        for (wait, at, outcome, jitter, next) in cases {
            let mut patience = Patience::new(t0, wait);
            assert_eq!(
                patience.after(Look::of(&outcome), t0 + at, jitter),
                next,
                "--wait {wait:?}, at {at:?}, {outcome:?}, jitter {jitter}"
            );
            assert_eq!(patience.has_time(t0 + at), at < wait, "{wait:?} at {at:?}");
        }
    }

    #[test]
    fn a_servers_wait_that_is_not_the_last_keeps_its_place_when_it_runs_out() {
        let t0 = Instant::now();
        // (keeps its place, attempt at, outcome) → next, for a wait of 1 s
        let cases: Vec<(bool, Duration, Acquire, Next)> = vec![
            (true, ms(1000), busy(Some(2)), Next::Answer),
            (true, ms(4000), busy(None), Next::Answer),
            (false, ms(1000), busy(Some(2)), Next::LeaveAndAnswer),
            // A grant is the answer either way; a mismatch is final, so its place goes.
            (true, ms(1000), granted(), Next::Answer),
            (true, ms(10), mismatch(), Next::LeaveAndAnswer),
            (false, ms(10), mismatch(), Next::LeaveAndAnswer),
            // With time left, it sleeps as any waiter.
            (
                true,
                ms(0),
                busy(Some(2)),
                Next::Sleep {
                    pause: FIRST_DELAY,
                    position: 2,
                },
            ),
        ];
        for (keeps_place, at, outcome, next) in cases {
            let mut patience = Patience::new(t0, ms(1000));
            patience.keeps_place = keeps_place;
            assert_eq!(
                patience.after(Look::of(&outcome), t0 + at, 1.0),
                next,
                "keeps its place: {keeps_place}, at {at:?}, {outcome:?}"
            );
        }
    }

    #[test]
    fn the_pause_doubles_up_to_the_longest_and_jitter_stays_within_half_of_it() {
        let t0 = Instant::now();
        let mut patience = Patience::new(t0, Duration::from_secs(3600));
        let mut delays = Vec::new();
        for round in 0..12 {
            let Next::Sleep { pause, .. } = patience.after(Look::of(&busy(Some(1))), t0, 1.0)
            else {
                panic!("round {round}: a waiter with time left sleeps");
            };
            delays.push(pause);
        }
        let expected: Vec<Duration> = [5, 10, 20, 40, 80, 160, 250, 250, 250, 250, 250, 250]
            .into_iter()
            .map(ms)
            .collect();
        assert_eq!(delays, expected);
        for jitter in [0.0, 0.25, 0.5, 0.99, 1.0, -3.0, 7.0] {
            let mut patience = Patience::new(t0, Duration::from_secs(3600));
            for _ in 0..10 {
                patience.after(Look::of(&busy(Some(1))), t0, 1.0);
            }
            let Next::Sleep { pause, .. } = patience.after(Look::of(&busy(Some(1))), t0, jitter)
            else {
                panic!("a waiter with time left sleeps");
            };
            assert!(
                (MAX_DELAY / 2..=MAX_DELAY).contains(&pause),
                "jitter {jitter}: {pause:?}"
            );
        }
    }
}
