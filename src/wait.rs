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

use anyhow::Result;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};

use crate::engine::Request;
use crate::exit::Exit;
use crate::lock::{Acquire, Holder, Resource};
use crate::output::warn;
use crate::store::LockStore;

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
pub enum Waited {
    Done(Attempt),
    /// Signal N arrived while waiting; the waiter left the queue.
    Interrupted(i32),
}

impl Waited {
    /// The deciding attempt, or — for an interrupted wait — the exit the process ends with
    /// (128+N, as if it had died of the signal; one line on stderr says so).
    pub fn attempt(self, resource: &Resource) -> Result<Attempt, Exit> {
        match self {
            Waited::Done(attempt) => Ok(attempt),
            Waited::Interrupted(signal) => {
                warn(format_args!(
                    "interrupted while waiting for {resource}; left the queue"
                ));
                Err(Exit::Child(u8::try_from(128 + signal).unwrap_or(u8::MAX)))
            }
        }
    }
}

/// The deciding attempt.
pub struct Attempt {
    pub outcome: Acquire,
    /// The monotonic time just before the deciding attempt was sent: a lease it granted cannot
    /// have started earlier, so `started + ttl` is a safe local bound for its end.
    pub started: Instant,
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
    let start = Instant::now();
    let wait = wait.unwrap_or(Duration::ZERO);
    let waits = !wait.is_zero();
    let interrupts = if waits { Interrupts::install() } else { None };
    if waits {
        store.watch(resource, &request.owner)?;
    }
    let mut delay = FIRST_DELAY;
    loop {
        let left = wait.saturating_sub(start.elapsed());
        let attempt = Request {
            waits: !left.is_zero(),
            ..request.clone()
        };
        let started = Instant::now();
        let outcome = store.acquire(resource, &attempt)?;
        let position = match &outcome {
            Acquire::Busy { position, .. } if !left.is_zero() => position.unwrap_or(1),
            Acquire::Acquired { .. } => return Ok(Waited::Done(Attempt { outcome, started })),
            // Out of time, or a mismatch: give the place up and answer.
            Acquire::Busy { .. } | Acquire::Mismatch { .. } => {
                if waits {
                    store.leave(resource, &request.owner)?;
                }
                return Ok(Waited::Done(Attempt { outcome, started }));
            }
        };
        if let Acquire::Busy { holder, .. } = &outcome {
            on_busy(holder.as_ref(), position);
        }
        // Full jitter between half the delay and the delay spreads pollers that all saw the
        // same expiry, so they do not stampede the store together. A release ends it at once.
        let pause = delay.mul_f64(0.5 + fastrand::f64() * 0.5).min(left);
        delay = (delay * 2).min(MAX_DELAY);
        store.wait_for_change(resource, pause)?;
        if let Some(signal) = interrupts.as_ref().and_then(Interrupts::arrived) {
            store.leave(resource, &request.owner)?;
            return Ok(Waited::Interrupted(signal));
        }
    }
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
        let arrived = Arc::new(AtomicUsize::new(0));
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
