//! Kernel wake-ups for waiters on the SQLite store.
//!
//! Beside the database `locks.db` lies `locks.db-turnstile`: one page of [`SLOTS`] counters that
//! every process using the store maps into memory, as SQLite maps its `-shm` file. A waiter's
//! counter is picked by hashing its resource and owner ([`slot`]). The waiter reads its counter
//! before each look at the database and, when refused, sleeps in a futex wait on it. The wait
//! ends at once if the counter moved since the read, so a ring between the look and the sleep
//! is not lost. Otherwise it ends when someone rings, or when its timeout passes.
//!
//! A commit that may let a waiter in rings only the waiter at the head of that resource's
//! queue ([`crate::engine::next_to_wake`]): it bumps the head's counter and wakes its futex. A
//! release thus wakes the one process that can go next, as a `flock(1)` handoff does, whatever
//! command released (`run`, or a plain `release`). The waiters behind it sleep on: they could
//! not be granted ahead of it anyway.
//!
//! The database alone decides who holds a lock: a ring is only a hint. Two waiters whose
//! hashes share a counter now and then wake each other: each looks again and sleeps again. A
//! turnstile that cannot be opened or mapped (a read-only folder, a file system without shared
//! mappings, a file that is not a turnstile) only means the waiter polls, as it does for a lease
//! that expires without a release, or for a head that was killed before its place expired.
//!
//! Why not inotify on a file that each release writes: closing an inotify instance waits for
//! the kernel to retire its watches (an SRCU grace period), 5 to 25 ms measured, so every
//! waiter took that much longer to exit. A futex costs nothing to let go of.
//!
//! # A file others may write
//!
//! The turnstile lies in the database's folder, which others may be able to write (a shared
//! store, or a mistake), so nothing in it is trusted:
//!
//! - It is opened with `O_NOFOLLOW` (and `O_CLOEXEC`) and checked with `fstat` to be a regular
//!   file with one name and no more than one page: a symbolic or hard link planted in its place
//!   (`locks.db-turnstile → victim`) is refused, and the waiters poll, so distlock never writes
//!   to the file it points to. A shorter file (one just created, or cut short) is grown to its
//!   page; it cannot be any other file's name.
//! - The page is never touched by distlock's own loads and stores, only by the kernel: `pread`
//!   reads a counter, `FUTEX_WAKE_OP` bumps it and wakes its sleepers in one call, and
//!   `FUTEX_WAIT` sleeps on it. A process that touches a mapped page past the end of its file
//!   dies of SIGBUS, and the size checked at opening cannot stop a truncation that comes later;
//!   the kernel, touching that page, answers EFAULT instead (and `pread` a short read). A
//!   waiter whose turnstile is cut short, at any moment, therefore stops using it and polls;
//!   a ringer's ring is lost, and its waiter finds the lock at its next poll. No window is left
//!   in which a truncation kills a process.
//!
//! This file is the seam: [`Turnstile`] is the futex turnstile on Linux ([`futex`]) and, on
//! other systems, a turnstile that never opens, so that waiters poll; the store's code is the
//! same on both.

use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
mod futex;
#[cfg(target_os = "linux")]
pub use futex::Turnstile;

#[cfg(not(target_os = "linux"))]
mod polling;
#[cfg(not(target_os = "linux"))]
pub use polling::Turnstile;

/// How many counters the turnstile holds: one 4 KiB page of `u32`s.
pub const SLOTS: usize = 1024;

/// The file beside the database at `db` (only the futex turnstile has one).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn path(db: &Path) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push("-turnstile");
    path.into()
}

/// The counter a store's watcher sleeps on (a server with waiters of its own, see
/// `crate::store::watch`): every ring rings it too, so the watcher wakes for any ring and
/// reads the whole turnstile to see which counters moved. Its name, an empty resource of an
/// empty owner, is no waiter's: a waiter that shares its counter is only woken more often.
pub fn watch_slot() -> usize {
    slot("", "")
}

/// The counter of `owner` waiting for a lock set, rung whenever `owner` is rung for any
/// resource: the slot of the empty name, which no resource has.
pub fn any_slot(owner: &str) -> usize {
    slot("", owner)
}

/// The counter of `owner` waiting for `resource`: FNV-1a over both names, so that every
/// process, whatever distlock build it runs, picks the same one.
pub fn slot(resource: &str, owner: &str) -> usize {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let bytes = resource.bytes().chain([0xff]).chain(owner.bytes());
    let hash = bytes.fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    });
    // Lossless: the remainder is below SLOTS.
    usize::try_from(hash % SLOTS as u64).unwrap_or(0)
}
