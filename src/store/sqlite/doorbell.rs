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
//! mappings) only means the waiter polls, as it does for a lease that expires without a
//! release, or for a head that was killed before its place expired.
//!
//! Why not inotify on a file that each release writes: closing an inotify instance waits for
//! the kernel to retire its watches (an SRCU grace period), 5 to 25 ms measured, so every
//! waiter took that much longer to exit. A futex costs nothing to let go of.
//!
//! Like SQLite's `-shm`, the file must not be truncated while in use: a process touching its
//! mapped page after that dies of SIGBUS. distlock only ever grows it.

// The one place distlock uses `unsafe`: reading the shared mapping as atomics.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use rustix::thread::futex;

/// How many counters the turnstile holds: one 4 KiB page of `u32`s.
pub const SLOTS: usize = 1024;

/// The turnstile's size in bytes.
const LEN: usize = SLOTS * std::mem::size_of::<AtomicU32>();

/// The file beside the database at `db`.
pub fn path(db: &Path) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push("-turnstile");
    path.into()
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

/// The store's turnstile, mapped.
pub struct Turnstile {
    map: MmapRaw,
}

impl Turnstile {
    /// Opens and maps the file, growing it to its size if it is shorter; `create` makes it
    /// if it is missing (a waiter does; a ringer need not, as nobody waits without it). `None`
    /// when any of that fails.
    pub fn open(db: &Path, create: bool) -> Option<Turnstile> {
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path(db))
            .ok()?;
        let len = u64::try_from(LEN).ok()?;
        if file.metadata().ok()?.len() < len {
            file.set_len(len).ok()?;
        }
        let map = MmapOptions::new().len(LEN).map_raw(&file).ok()?;
        Some(Turnstile { map })
    }

    /// The counter of `slot` (taken modulo [`SLOTS`]).
    fn counter(&self, slot: usize) -> &AtomicU32 {
        let start = self.map.as_ptr().cast::<[AtomicU32; SLOTS]>();
        // SAFETY: the mapping is `LEN` bytes of a file at least that long (`open` grew it),
        // page-aligned, and lives as long as `self`, so `start` points to `SLOTS` valid,
        // aligned `u32`s for the lifetime of the borrow. `AtomicU32` has the layout of `u32`.
        // Other processes write the same memory, but only with atomic operations (this module
        // is the only code that maps the file), which is what sharing an `AtomicU32` allows.
        let counters = unsafe { &*start };
        &counters[slot % SLOTS]
    }

    /// The counter's value now: read before a look at the database, passed to [`Self::wait`]
    /// after it.
    pub fn read(&self, slot: usize) -> u32 {
        self.counter(slot).load(Ordering::SeqCst)
    }

    /// Sleeps until the counter is rung, or `timeout` passes; returns at once if it no longer
    /// holds `seen`. A signal also ends it, which the caller treats like any wake-up. Whether
    /// it was rung (woken, or the counter had moved): the lock is then likely to be free.
    pub fn wait(&self, slot: usize, seen: u32, timeout: Duration) -> bool {
        let Ok(timeout) = futex::Timespec::try_from(timeout) else {
            std::thread::sleep(timeout);
            return false;
        };
        let counter = self.counter(slot);
        // Shared, not private: the counter is woken from other processes. Every outcome (woken,
        // changed, timed out, interrupted) means "look again".
        match futex::wait(counter, futex::Flags::empty(), seen, Some(&timeout)) {
            Ok(()) => true,
            Err(err) => err == rustix::io::Errno::AGAIN,
        }
    }

    /// Wakes whoever sleeps on the counter.
    pub fn ring(&self, slot: usize) {
        let counter = self.counter(slot);
        counter.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wake(counter, futex::Flags::empty(), u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn slots_are_stable_and_spread() {
        // The same names give the same slot in every build and every release: pinned values
        // (FNV-1a, computed independently).
        assert_eq!(slot("nightly-backup", "worker-1"), 648);
        assert_eq!(slot("", ""), 878);
        assert_eq!(
            (slot("a", "bc"), slot("ab", "c")),
            (470, 36),
            "the names are kept apart"
        );
        let used: std::collections::HashSet<usize> =
            (0..200).map(|i| slot("deploy", &format!("w{i}"))).collect();
        assert!(
            used.len() > 150,
            "200 waiters share too few slots: {}",
            used.len()
        );
        assert!(used.iter().all(|&s| s < SLOTS));
    }

    #[test]
    fn a_ring_wakes_a_waiter_at_once_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let turnstile = Turnstile::open(&db, true).expect("shared mappings work here");
        let me = slot("r", "me");
        let seen = turnstile.read(me);
        let start = Instant::now();
        assert!(
            !turnstile.wait(me, seen, Duration::from_millis(100)),
            "rung?"
        );
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "woke without a ring"
        );
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            // Another mapping of the file, as another process has.
            Turnstile::open(&db, false).unwrap().ring(me);
        });
        let start = Instant::now();
        assert!(turnstile.wait(me, seen, Duration::from_secs(20)));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the ring was missed"
        );
        ringer.join().unwrap();
    }

    #[test]
    fn a_ring_between_the_read_and_the_wait_is_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let turnstile = Turnstile::open(&db, true).unwrap();
        let me = slot("r", "me");
        let seen = turnstile.read(me);
        Turnstile::open(&db, false).unwrap().ring(me);
        let start = Instant::now();
        assert!(turnstile.wait(me, seen, Duration::from_secs(20)));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_ring_for_another_slot_lets_a_waiter_sleep() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let turnstile = Turnstile::open(&db, true).unwrap();
        let me = slot("r", "me");
        let other = (me + 1) % SLOTS;
        let seen = turnstile.read(me);
        Turnstile::open(&db, false).unwrap().ring(other);
        let start = Instant::now();
        assert!(!turnstile.wait(me, seen, Duration::from_millis(100)));
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "woken by another's ring"
        );
        assert_eq!(turnstile.read(me), seen);
        assert_eq!(turnstile.read(other), 1);
    }

    #[test]
    fn a_ringer_creates_nothing_and_a_short_file_is_grown() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        assert!(Turnstile::open(&db, false).is_none());
        assert!(!path(&db).exists(), "a ringer created the turnstile");
        // An earlier distlock left a one-byte file.
        std::fs::write(path(&db), [0]).unwrap();
        let turnstile = Turnstile::open(&db, false).unwrap();
        turnstile.ring(SLOTS - 1);
        assert_eq!(turnstile.read(SLOTS - 1), 1);
        assert_eq!(std::fs::metadata(path(&db)).unwrap().len(), LEN as u64);
    }
}
