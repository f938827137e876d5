//! Acquiring with `--wait`: a place in the resource's queue, kept until the lock is granted,
//! the wait runs out, or the waiter is interrupted. Shared by `acquire` and `run`.
//!
//! - **Order** is the store's: a waiter takes a place in the queue at its first refused attempt
//!   and is granted only once no earlier live waiter remains (see [`crate::engine::acquire`]).
//! - **Waking** is the store's too: between attempts the waiter sleeps in
//!   [`op::WaitForChange`] (a kernel wait on SQLite, `LISTEN` on PostgreSQL), which a
//!   release ends at once. It also looks again at least every [`MAX_DELAY`], for leases that
//!   expire without a release and to keep its place alive (a place not refreshed for
//!   [`crate::engine::LIVENESS_MS`] stops counting, so a killed waiter blocks nobody for long).
//! - **Leaving**: a waiter whose wait runs out, or that gets SIGINT, SIGTERM, SIGHUP or SIGQUIT,
//!   takes its place out of the queue before it exits, so it blocks nobody at all.
//!
//! What the user sees while waiting is not drawn here: the caller passes `on_busy`.

use std::time::{Duration, Instant};

use crate::engine::Request;
use crate::exit::Exit;
use crate::lock::{Holder, Members, SetAcquire};
use crate::output::warn;
use crate::signals::Interrupts;
use crate::store::op::{self, Acquisition, Left};
use crate::store::{LockStore, Locks, Result};

const FIRST_DELAY: Duration = Duration::from_millis(5);
/// The longest sleep between attempts: bounds how late an expired lease is noticed, and how
/// late an interrupted waiter leaves.
const MAX_DELAY: Duration = Duration::from_millis(250);

/// The end of an acquire, with or without waiting.
pub enum Waited {
    Done(Attempt),
    /// Signal N arrived while waiting; the waiter left the queue (at once, or — through a
    /// distlock server that could not be told, which gives an abandoned place up itself —
    /// within 5 s: `false`).
    Interrupted(i32, bool),
}

impl Waited {
    /// The deciding attempt, or — for an interrupted wait — the exit the process ends with
    /// (128+N, as if it had died of the signal; one line on stderr says so). `what` names
    /// what was waited for in that line.
    pub fn attempt(self, what: &dyn std::fmt::Display) -> Result<Attempt, Exit> {
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
pub struct Attempt {
    pub outcome: SetAcquire,
    /// The monotonic time just before the deciding attempt was sent (or, through a server that
    /// made the request wait, that time plus the server's wait): a lease it granted cannot
    /// have started earlier, so `started + ttl` is a safe local bound for its end.
    pub started: Instant,
}

/// How an attempt came out, as the waiting policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look<'a> {
    Granted,
    /// Not now: who holds it (for a set, the first busy member), and the waiter's place in
    /// the queue (for a set, the furthest back of its places), when it waits.
    Busy {
        holder: Option<&'a Holder>,
        position: Option<usize>,
    },
    Mismatch,
}

impl Look<'_> {
    fn of(outcome: &SetAcquire) -> Look<'_> {
        match outcome {
            SetAcquire::Acquired { .. } => Look::Granted,
            SetAcquire::Busy { blocked } => Look::Busy {
                holder: blocked.first().and_then(|b| b.holder.as_ref()),
                position: blocked.iter().filter_map(|b| b.position).max(),
            },
            SetAcquire::Mismatch { .. } => Look::Mismatch,
        }
    }
}

/// One attempt to acquire `members` as `request` asks, with the request's `waits` as `waits`
/// says; `until`, the end of the wait.
///
/// # Errors
///
/// Store failures.
fn ask(
    store: &mut dyn LockStore,
    (members, request): (&Members, &Request),
    waits: bool,
    until: Option<Instant>,
) -> Result<Acquisition> {
    store.perform(op::Acquire {
        members: members.clone(),
        request: Request {
            waits,
            ..request.clone()
        },
        until,
    })
}

/// Gives up the place (or places) in the queue of `members` that `request`'s owner holds.
///
/// # Errors
///
/// Store failures.
fn leave(
    store: &mut dyn LockStore,
    (members, request): (&Members, &Request),
    until: Option<Instant>,
) -> Result<Left> {
    store.perform(op::Leave {
        members: members.clone(),
        owner: request.owner.clone(),
        until,
    })
}

/// Tries to acquire `members` as `request` asks (granted all at once, or waited for in every
/// member's queue at once, holding nothing meanwhile); while they are busy and `wait` has not
/// run out, waits in the queue and tries again. A mismatch (exit 78) is answered at once.
/// `on_busy` hears, after each busy attempt that will be retried, who holds the lock (if
/// anyone) and the waiter's place.
///
/// # Errors
///
/// Store failures from any attempt.
pub fn acquire(
    store: &mut dyn LockStore,
    members: &Members,
    request: &Request,
    wait: Option<Duration>,
    on_busy: &mut dyn FnMut(Option<&Holder>, usize),
) -> Result<Waited> {
    let wanted = (members, request);
    let mut policy = WaitPolicy::new(Instant::now(), wait.unwrap_or(Duration::ZERO));
    let interrupts = if policy.waits() {
        Interrupts::install()
    } else {
        None
    };
    subscribe(store, wanted, &policy)?;
    let interrupted = || interrupts.as_ref().and_then(Interrupts::arrived);
    match wait_in_line(store, wanted, &mut policy, &interrupted, on_busy)? {
        Ended::Stopped { signal, .. } => {
            // Gone at once, or after the store's own budget: not for the rest of the wait.
            let left = leave(store, wanted, None)?;
            Ok(Waited::Interrupted(signal, left.at_once))
        }
        Ended::Answered(attempt) => Ok(Waited::Done(attempt)),
    }
}

/// Starts listening for changes of the members, for a waiter (nothing for a request that
/// tries once).
///
/// # Errors
///
/// Store failures.
fn subscribe(
    store: &mut dyn LockStore,
    (members, request): (&Members, &Request),
    policy: &WaitPolicy,
) -> Result<()> {
    if policy.waits() {
        store.perform(op::Subscribe {
            members: members.clone(),
            owner: request.owner.clone(),
            until: policy.until(),
        })?;
    }
    Ok(())
}

/// When a grant's lease began at the earliest, for an attempt sent at `started` whose store
/// says it was decided no earlier than `decided` (a PostgreSQL attempt that reached the server
/// only after an outage, a server's long poll): the later of the two.
fn lease_start(started: Instant, decided: Option<Instant>) -> Instant {
    decided.map_or(started, |at| at.max(started))
}

/// How [`wait_in_line`] ended.
enum Ended {
    /// With this attempt's outcome as the answer.
    Answered(Attempt),
    /// Stopped by signal `signal`; the caller keeps or gives up the place in the queue.
    Stopped { signal: i32 },
}

/// [`acquire`]'s attempts, until one is the answer or `interrupted` says why not (a signal's
/// number; the caller decides what becomes of the place in the queue).
fn wait_in_line(
    store: &mut dyn LockStore,
    wanted: (&Members, &Request),
    policy: &mut WaitPolicy,
    interrupted: &dyn Fn() -> Option<i32>,
    on_busy: &mut dyn FnMut(Option<&Holder>, usize),
) -> Result<Ended> {
    let until = policy.until();
    loop {
        let started = Instant::now();
        let waits = policy.has_time(started);
        let acquisition = ask(store, wanted, waits, until)?;
        if let Some(notice) = &acquisition.notice {
            warn(format_args!("{notice}"));
        }
        let decided = lease_start(started, acquisition.decided);
        let outcome = acquisition.outcome;
        let look = Look::of(&outcome);
        match policy.after(look, started, fastrand::f64()) {
            Next::Answer => {
                return Ok(Ended::Answered(Attempt {
                    outcome,
                    started: decided,
                }));
            }
            Next::LeaveAndAnswer => {
                leave(store, wanted, until)?;
                return Ok(Ended::Answered(Attempt {
                    outcome,
                    started: decided,
                }));
            }
            Next::Sleep { pause, position } => {
                if let Look::Busy { holder, .. } = look {
                    on_busy(holder, position);
                }
                store.perform(op::WaitForChange {
                    members: wanted.0.clone(),
                    timeout: pause,
                    until,
                })?;
            }
        }
        if let Some(signal) = interrupted() {
            return Ok(Ended::Stopped { signal });
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
struct WaitPolicy {
    /// When the wait runs out.
    until: Instant,
    /// `--wait` was not zero.
    waits: bool,
    /// The next pause, before jitter.
    delay: Duration,
}

impl WaitPolicy {
    fn new(start: Instant, wait: Duration) -> WaitPolicy {
        WaitPolicy {
            until: start + wait,
            waits: !wait.is_zero(),
            delay: FIRST_DELAY,
        }
    }

    /// Whether this waiter queues at all.
    fn waits(&self) -> bool {
        self.waits
    }

    /// The end of the wait, for a waiter: how long a store may keep at one of its calls.
    fn until(&self) -> Option<Instant> {
        self.waits.then_some(self.until)
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
            Look::Busy { .. } | Look::Mismatch if self.waits => Next::LeaveAndAnswer,
            Look::Busy { .. } | Look::Mismatch => Next::Answer,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Blocked, Fence, Grant, Lock, Mode, Owner, Resource, Timestamp};

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn a_lease_is_timed_from_the_later_of_the_attempt_and_its_decision() {
        let t0 = Instant::now();
        // (decided, after t0) → the lease's start, after t0
        let cases = [
            // A local store: the attempt's start.
            (None, ms(0)),
            // Decided after an outage the call waited through (PostgreSQL), or after a
            // server's wait: from then.
            (Some(ms(6_000)), ms(6_000)),
            (Some(ms(30_000)), ms(30_000)),
            // Never before the attempt was sent.
            (Some(ms(0)), ms(0)),
        ];
        for (decided, start) in cases {
            assert_eq!(
                lease_start(t0, decided.map(|at| t0 + at)),
                t0 + start,
                "decided {decided:?}"
            );
        }
        let later = t0 + ms(10);
        assert_eq!(lease_start(later, Some(t0)), later, "decided before sent");
    }

    fn r() -> Resource {
        Resource::parse("r").expect("a resource")
    }

    fn busy(position: Option<usize>) -> SetAcquire {
        SetAcquire::Busy {
            blocked: vec![Blocked {
                resource: r(),
                holder: None,
                holders: Vec::new(),
                waiting: 0,
                position,
            }],
        }
    }

    fn granted() -> SetAcquire {
        let owner = Owner::parse("o").expect("an owner");
        SetAcquire::Acquired {
            locks: vec![Lock {
                resource: r(),
                owner,
                token: None,
                fence: Fence(1),
                acquired_at: Timestamp(0),
                expires_at: Timestamp(1000),
                mode: Mode::Exclusive,
                note: None,
            }],
            tenures: vec![Grant::New],
        }
    }

    fn mismatch() -> SetAcquire {
        SetAcquire::Mismatch {
            resource: r(),
            holders: Vec::new(),
        }
    }

    #[test]
    fn a_waiter_answers_leaves_or_sleeps_as_its_wait_and_the_outcome_say() {
        let t0 = Instant::now();
        // (--wait, attempt at, outcome, jitter) → next
        let cases: Vec<(Duration, Duration, SetAcquire, f64, Next)> = vec![
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
            let mut policy = WaitPolicy::new(t0, wait);
            assert_eq!(
                policy.after(Look::of(&outcome), t0 + at, jitter),
                next,
                "--wait {wait:?}, at {at:?}, {outcome:?}, jitter {jitter}"
            );
            assert_eq!(policy.has_time(t0 + at), at < wait, "{wait:?} at {at:?}");
        }
    }

    #[test]
    fn the_pause_doubles_up_to_the_longest_and_jitter_stays_within_half_of_it() {
        let t0 = Instant::now();
        let mut policy = WaitPolicy::new(t0, Duration::from_secs(3600));
        let mut delays = Vec::new();
        for round in 0..12 {
            let Next::Sleep { pause, .. } = policy.after(Look::of(&busy(Some(1))), t0, 1.0) else {
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
            let mut policy = WaitPolicy::new(t0, Duration::from_secs(3600));
            for _ in 0..10 {
                policy.after(Look::of(&busy(Some(1))), t0, 1.0);
            }
            let Next::Sleep { pause, .. } = policy.after(Look::of(&busy(Some(1))), t0, jitter)
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
