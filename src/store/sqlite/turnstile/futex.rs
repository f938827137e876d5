//! The futex turnstile (Linux): the shared page, and the kernel's waits and wakes on it.

// The one place distlock uses `unsafe`: handing the kernel addresses in the shared mapping.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use rustix::thread::futex;

use super::{SLOTS, path};

/// The bytes of one counter.
const COUNTER: usize = std::mem::size_of::<u32>();

/// The turnstile's size in bytes.
const LEN: usize = SLOTS * COUNTER;

/// How many sleepers one ring wakes: all of them (the futex call takes an `i32`).
const EVERYONE: u32 = i32::MAX as u32;

/// The store's turnstile, open and mapped.
pub struct Turnstile {
    /// Counters are read through the file (`pread`), never through the mapping.
    file: File,
    /// The shared mapping whose addresses name the futexes.
    map: MmapRaw,
}

impl Turnstile {
    /// Opens and maps the file, growing it to its size if it is shorter; `create` makes it
    /// if it is missing (a waiter does; a ringer need not, as nobody waits without it). `None`
    /// when any of that fails, and for anything but a regular file with one name and at most
    /// [`LEN`] bytes (see the module's notes): the caller then polls.
    pub fn open(db: &Path, create: bool) -> Option<Turnstile> {
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            // A symbolic link in its place is refused (ELOOP), never followed. std opens every
            // file with O_CLOEXEC: `run`'s command does not inherit it.
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path(db))
            .ok()?;
        let len = u64::try_from(LEN).ok()?;
        let meta = file.metadata().ok()?;
        if !meta.file_type().is_file() || meta.nlink() != 1 || meta.len() > len {
            return None;
        }
        if meta.len() < len {
            file.set_len(len).ok()?;
        }
        let map = MmapOptions::new().len(LEN).map_raw(&file).ok()?;
        Some(Turnstile { file, map })
    }

    /// The futex word of `slot` (taken modulo [`SLOTS`]), in the mapping.
    // The mapping starts on a page boundary and the offset is a multiple of 4: aligned.
    #[allow(clippy::cast_ptr_alignment)]
    fn counter(&self, slot: usize) -> &AtomicU32 {
        let offset = (slot % SLOTS) * COUNTER;
        let word = self
            .map
            .as_mut_ptr()
            .wrapping_add(offset)
            .cast::<AtomicU32>();
        // SAFETY: `word` lies within the mapping, which is `LEN` bytes, page-aligned (so the
        // offset, a multiple of 4, is aligned for a `u32`), and lives as long as `self`.
        // `AtomicU32` has the layout of `u32`. The reference is only ever handed to the kernel
        // as an address (see the module's notes): no instruction of this process loads or
        // stores through it, so a file cut short under the mapping cannot raise SIGBUS here.
        // Other processes change the word only with the kernel's atomic operations.
        unsafe { &*word }
    }

    /// The counter's value now, read from the file: read before a look at the database,
    /// passed to [`Self::wait`] after it. `None` once the file no longer holds the counter
    /// (cut short): the caller stops using the turnstile.
    pub fn read(&self, slot: usize) -> Option<u32> {
        let mut bytes = [0; COUNTER];
        let offset = u64::try_from((slot % SLOTS) * COUNTER).ok()?;
        self.file.read_exact_at(&mut bytes, offset).ok()?;
        Some(u32::from_ne_bytes(bytes))
    }

    /// Sleeps until the counter is rung, or `timeout` passes; returns at once if it no longer
    /// holds `seen`. A signal also ends it, which the caller treats like any wake-up.
    /// `Some(rung)`: whether it was rung (woken, or the counter had moved), and the lock is
    /// then likely to be free. `None`, at once, when the kernel cannot reach the counter (the
    /// file was cut short): the caller sleeps instead and stops using the turnstile.
    pub fn wait(&self, slot: usize, seen: u32, timeout: Duration) -> Option<bool> {
        let Ok(timeout) = futex::Timespec::try_from(timeout) else {
            std::thread::sleep(timeout);
            return Some(false);
        };
        // Shared, not private: the counter is woken from other processes. Woken, changed,
        // timed out or interrupted all mean "look again".
        match futex::wait(
            self.counter(slot),
            futex::Flags::empty(),
            seen,
            Some(&timeout),
        ) {
            Ok(()) => Some(true),
            Err(rustix::io::Errno::AGAIN) => Some(true),
            Err(rustix::io::Errno::TIMEDOUT | rustix::io::Errno::INTR) => Some(false),
            Err(_) => None,
        }
    }

    /// Every counter, read from the file in one read: a watcher compares two of these to see
    /// which slots were rung in between. `None` once the file no longer holds them all.
    pub fn read_all(&self) -> Option<Vec<u32>> {
        let mut bytes = vec![0; LEN];
        self.file.read_exact_at(&mut bytes, 0).ok()?;
        Some(
            bytes
                .chunks_exact(COUNTER)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    /// Bumps the counter and wakes whoever sleeps on it, in one call (`FUTEX_WAKE_OP`: add 1
    /// to the word, wake its sleepers; the second wake it offers wakes nobody). Best effort:
    /// a counter the kernel cannot reach (the file was cut short) is not rung, and its waiter
    /// finds the lock at its next poll.
    pub fn ring(&self, slot: usize) {
        let counter = self.counter(slot);
        let _ = futex::wake_op(
            counter,
            futex::Flags::empty(),
            EVERYONE,
            0,
            counter,
            futex::WakeOp::Add,
            futex::WakeOpCmp::Eq,
            1,
            0,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::store::sqlite::turnstile::slot;

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
        let seen = turnstile.read(me).unwrap();
        let start = Instant::now();
        assert_eq!(
            turnstile.wait(me, seen, Duration::from_millis(100)),
            Some(false),
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
        assert_eq!(
            turnstile.wait(me, seen, Duration::from_secs(20)),
            Some(true)
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the ring was missed"
        );
        ringer.join().unwrap();
        assert_eq!(turnstile.read(me), Some(seen + 1), "one ring, one bump");
    }

    #[test]
    fn a_ring_between_the_read_and_the_wait_is_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let turnstile = Turnstile::open(&db, true).unwrap();
        let me = slot("r", "me");
        let seen = turnstile.read(me).unwrap();
        Turnstile::open(&db, false).unwrap().ring(me);
        let start = Instant::now();
        assert_eq!(
            turnstile.wait(me, seen, Duration::from_secs(20)),
            Some(true)
        );
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_ring_for_another_slot_lets_a_waiter_sleep() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let turnstile = Turnstile::open(&db, true).unwrap();
        let me = slot("r", "me");
        let other = (me + 1) % SLOTS;
        let seen = turnstile.read(me).unwrap();
        Turnstile::open(&db, false).unwrap().ring(other);
        let start = Instant::now();
        assert_eq!(
            turnstile.wait(me, seen, Duration::from_millis(100)),
            Some(false)
        );
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "woken by another's ring"
        );
        assert_eq!(turnstile.read(me), Some(seen));
        assert_eq!(turnstile.read(other), Some(1));
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
        assert_eq!(turnstile.read(SLOTS - 1), Some(1));
        assert_eq!(std::fs::metadata(path(&db)).unwrap().len(), LEN as u64);
    }

    #[test]
    fn links_and_files_that_are_not_a_turnstile_are_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let unchanged = || {
            assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        };
        // A symbolic link, dangling or not, for a waiter (which creates) and for a ringer.
        std::os::unix::fs::symlink(&victim, path(&db)).unwrap();
        for create in [true, false] {
            assert!(Turnstile::open(&db, create).is_none(), "followed a symlink");
        }
        unchanged();
        std::fs::remove_file(path(&db)).unwrap();
        std::os::unix::fs::symlink(dir.path().join("nothing"), path(&db)).unwrap();
        assert!(Turnstile::open(&db, true).is_none());
        assert!(
            !dir.path().join("nothing").exists(),
            "created the link's target"
        );
        std::fs::remove_file(path(&db)).unwrap();
        // A hard link: another name of the victim.
        std::fs::hard_link(&victim, path(&db)).unwrap();
        assert!(Turnstile::open(&db, true).is_none(), "wrote to a hard link");
        unchanged();
        std::fs::remove_file(path(&db)).unwrap();
        // A folder, and a file larger than a turnstile.
        std::fs::create_dir(path(&db)).unwrap();
        assert!(Turnstile::open(&db, true).is_none());
        std::fs::remove_dir(path(&db)).unwrap();
        std::fs::write(path(&db), vec![7; LEN + 1]).unwrap();
        assert!(Turnstile::open(&db, true).is_none());
        assert_eq!(std::fs::read(path(&db)).unwrap(), vec![7; LEN + 1]);
    }

    #[test]
    fn a_turnstile_cut_short_while_mapped_is_given_up_without_a_signal() {
        // A load from the mapped page of a file cut short would kill this test with SIGBUS.
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let turnstile = Turnstile::open(&db, true).unwrap();
        let me = slot("r", "me");
        let seen = turnstile.read(me).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(path(&db))
            .unwrap()
            .set_len(0)
            .unwrap();
        assert_eq!(turnstile.read(me), None);
        let start = Instant::now();
        assert_eq!(turnstile.wait(me, seen, Duration::from_secs(20)), None);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "slept on a lost page"
        );
        turnstile.ring(me);
        // Grown again (by the next waiter to open it), it works again.
        let again = Turnstile::open(&db, false).unwrap();
        again.ring(me);
        assert_eq!(turnstile.read(me), Some(1));
    }
}
