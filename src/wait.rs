//! Acquiring with `--wait`: retry until the lock is taken or the wait runs out. Shared by
//! `acquire` and `run`.
//!
//! On the SQLite store a waiter sleeps in the kernel on the holder's [`Turnstile`] byte and
//! retries the moment a `run` holding the lock exits; otherwise (PostgreSQL, or a holder that
//! is not a `run`) it polls with capped, jittered exponential backoff. Either way it also
//! retries at least every [`MAX_DELAY`], so a lease that expires without a release is noticed.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::lock::{Acquire, Owner, Resource, Ttl};
use crate::output::StatusLine;
use crate::store::LockStore;
use crate::turnstile::Turnstile;

const FIRST_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_millis(500);

/// The end of an acquire, with or without waiting.
pub struct Attempt {
    pub outcome: Acquire,
    /// The monotonic time just before the deciding attempt was sent: a lease it granted cannot
    /// have started earlier, so `started + ttl` is a safe local bound for its end.
    pub started: Instant,
    /// The resource's turnstile byte, held, when the lock was taken and a turnstile was given.
    pub turnstile: Option<Turnstile>,
}

/// Tries to acquire; while the lock is busy and `wait` has not run out, waits and tries again.
/// A busy attempt writes nothing, so waiting never fills the history. While it waits and stderr
/// is a terminal, a status line says who holds the lock.
///
/// # Errors
///
/// Store failures from any attempt.
pub fn acquire(
    store: &mut dyn LockStore,
    resource: &Resource,
    owner: &Owner,
    ttl: Ttl,
    wait: Option<Duration>,
    turnstile: Option<Turnstile>,
) -> Result<Attempt> {
    let start = Instant::now();
    let wait = wait.unwrap_or(Duration::ZERO);
    let mut status_line = (!wait.is_zero()).then(StatusLine::on_terminal).flatten();
    let mut turnstile = turnstile;
    let mut watch = None;
    let mut delay = FIRST_DELAY;
    loop {
        let started = Instant::now();
        let outcome = store.acquire(resource, owner, ttl)?;
        let Acquire::Busy { holder } = &outcome else {
            let held = match watch {
                Some(watch) => crate::turnstile::Watch::finish(watch),
                None => turnstile.filter(Turnstile::try_hold),
            };
            return Ok(Attempt {
                outcome,
                started,
                turnstile: held,
            });
        };
        let left = wait.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ok(Attempt {
                outcome,
                started,
                turnstile: None,
            });
        }
        if let Some(line) = status_line.as_mut() {
            line.waiting(resource, holder);
        }
        // Full jitter between half the delay and the delay spreads pollers that all saw the
        // same release, so they do not stampede the store together.
        let pause = delay.mul_f64(0.5 + fastrand::f64() * 0.5).min(left);
        delay = (delay * 2).min(MAX_DELAY);
        if watch.is_none() {
            watch = turnstile.take().map(Turnstile::watch);
        }
        let Some(active) = watch.as_mut() else {
            std::thread::sleep(pause);
            continue;
        };
        // The byte was free a moment ago, yet the lock is busy: its holder is not a `run`.
        active.retry_after(pause);
        if active.wait(left.min(MAX_DELAY)).is_err() {
            watch = None;
            std::thread::sleep(pause);
        }
    }
}
