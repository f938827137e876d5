//! One command to run under a lock this process holds, as the runner and the heartbeat both
//! see it.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use crate::lock::{Lock, Members, Ttl};
use crate::store::Location;

/// One command to run under a lock this process holds.
pub struct Job<'a> {
    pub location: &'a Location,
    /// The lock's resource, or a lock set's members.
    pub members: &'a Members,
    /// The lock, or a lock set's locks, in the members' order.
    pub locks: &'a [Lock],
    pub ttl: Ttl,
    pub kill_after: Duration,
    /// When the lease ends at the earliest, on the monotonic clock.
    pub lease_end: Instant,
    /// The program and its arguments.
    pub command: &'a [OsString],
    /// `--max-runtime`.
    pub max_runtime: Option<Duration>,
}
