//! Acquiring with `--wait`: retry with capped, jittered exponential backoff until the lock is
//! taken or the wait runs out. Shared by `acquire` and `run`.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::lock::{Acquire, Owner, Resource, Ttl};
use crate::output::StatusLine;
use crate::store::LockStore;

const FIRST_DELAY: Duration = Duration::from_millis(5);
const MAX_DELAY: Duration = Duration::from_millis(500);

/// Tries to acquire; while the lock is busy and `wait` has not run out, sleeps and tries again.
/// A busy attempt writes nothing, so waiting never fills the history. While it waits and stderr
/// is a terminal, a status line says who holds the lock.
///
/// Returns the outcome of the last attempt and the monotonic time just before that attempt was
/// sent: a lease it granted cannot have started earlier, so `started + ttl` is a safe local
/// bound for its end.
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
) -> Result<(Acquire, Instant)> {
    let mut status_line = wait.and_then(|_| StatusLine::on_terminal());
    let start = Instant::now();
    let wait = wait.unwrap_or(Duration::ZERO);
    let mut delay = FIRST_DELAY;
    loop {
        let attempt = Instant::now();
        let outcome = store.acquire(resource, owner, ttl)?;
        let Acquire::Busy { holder } = &outcome else {
            return Ok((outcome, attempt));
        };
        let left = wait.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ok((outcome, attempt));
        }
        if let Some(line) = status_line.as_mut() {
            line.waiting(resource, holder);
        }
        // Full jitter between half the delay and the delay spreads waiters that all saw the
        // same release, so they do not stampede the store together.
        let jittered = delay.mul_f64(0.5 + fastrand::f64() * 0.5);
        std::thread::sleep(jittered.min(left));
        delay = (delay * 2).min(MAX_DELAY);
    }
}
