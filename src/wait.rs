//! Acquiring with `--wait`: retry until the lock is taken or the wait runs out. Shared by
//! `acquire` and `run`.
//!
//! Between attempts a waiter sleeps on the store's own [`Wakeup`] when it has one (on SQLite,
//! the holder's turnstile byte: it wakes the moment a `run` holding the lock exits); otherwise
//! it polls with capped, jittered exponential backoff. Either way it also retries at least every
//! [`MAX_DELAY`], so a lease that expires without a release is noticed.
//!
//! What the user sees while waiting is not drawn here: the caller passes `on_busy`, called with
//! the holder after each busy attempt that will be retried.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::engine::Request;
use crate::lock::{Acquire, Holder, Resource};
use crate::store::{LockStore, Tenancy, Wakeup};

const FIRST_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_millis(500);

/// The end of an acquire, with or without waiting.
pub struct Attempt {
    pub outcome: Acquire,
    /// The monotonic time just before the deciding attempt was sent: a lease it granted cannot
    /// have started earlier, so `started + ttl` is a safe local bound for its end.
    pub started: Instant,
    /// What the holder keeps for its tenure so that later waiters wake when it ends.
    pub tenancy: Option<Tenancy>,
}

/// Tries to acquire; while the lock is busy and `wait` has not run out, waits and tries again.
/// A busy attempt writes nothing, so waiting never fills the history; a mismatch (exit 78)
/// is answered at once. `wakeup` is the store's
/// way of waking waiters (see [`LockStore::wakeup`]); `on_busy` hears of each busy attempt that
/// will be retried.
///
/// # Errors
///
/// Store failures from any attempt.
pub fn acquire(
    store: &mut dyn LockStore,
    resource: &Resource,
    request: &Request,
    wait: Option<Duration>,
    wakeup: Option<Box<dyn Wakeup>>,
    on_busy: &mut dyn FnMut(&Holder),
) -> Result<Attempt> {
    let start = Instant::now();
    let wait = wait.unwrap_or(Duration::ZERO);
    let mut wakeup = wakeup;
    let mut delay = FIRST_DELAY;
    loop {
        let started = Instant::now();
        let outcome = store.acquire(resource, request)?;
        let holder = match &outcome {
            Acquire::Busy { holder, .. } => holder,
            Acquire::Acquired { .. } => {
                return Ok(Attempt {
                    outcome,
                    started,
                    tenancy: wakeup.and_then(Wakeup::taken),
                });
            }
            // A mode that conflicts with the holders' is a configuration error: waiting would
            // not change it.
            Acquire::Mismatch { .. } => {
                return Ok(Attempt {
                    outcome,
                    started,
                    tenancy: None,
                });
            }
        };
        let left = wait.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ok(Attempt {
                outcome,
                started,
                tenancy: None,
            });
        }
        on_busy(holder);
        // Full jitter between half the delay and the delay spreads pollers that all saw the
        // same release, so they do not stampede the store together.
        let pause = delay.mul_f64(0.5 + fastrand::f64() * 0.5).min(left);
        delay = (delay * 2).min(MAX_DELAY);
        match wakeup.as_mut() {
            Some(wakeup) => wakeup.wait(left.min(MAX_DELAY), pause),
            None => std::thread::sleep(pause),
        }
    }
}
