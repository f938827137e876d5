//! Kernel wake-ups for waiters on the SQLite store.
//!
//! Beside the database `locks.db` lies `locks.db-turnstile`, an empty file. Every commit that
//! may let a waiter in ([`crate::engine::wakes_waiters`]: a release, a takeover, a shared or
//! semaphore grant, a waiter leaving the queue) "rings" it
//! by writing one byte to it; a waiter watches it with inotify and sleeps in `poll(2)` until it
//! is written or its timeout passes — so a release wakes waiters at once, as `flock(1)` waiters
//! wake, whichever command released (`run`, or a plain `release`).
//!
//! The database alone decides who holds a lock: a ring is only a hint. Any resource's ring
//! wakes every waiter on the store, which then looks again and, if still refused, sleeps
//! again; a ring that cannot be written (a read-only folder) or a watch that cannot be set up
//! only means the waiter polls, as it does for a lease that expires without a release.

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// The file beside the database at `db`.
pub fn path(db: &Path) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push("-turnstile");
    path.into()
}

/// Wakes every waiter on the store. Failures are ignored: waiters then poll.
pub fn ring(db: &Path) {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path(db));
    if let Ok(file) = file {
        let _ = file.write_at(&[0], 0);
    }
}

/// A waiter's watch on the file.
pub struct Watch {
    inotify: Inotify,
    /// Kept open so the file is not removed from under the watch by a racing cleanup.
    _file: File,
}

impl Watch {
    /// Starts watching, creating the file if needed. `None` when that fails (the waiter polls).
    pub fn start(db: &Path) -> Option<Watch> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path(db))
            .ok()?;
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).ok()?;
        inotify
            .add_watch(&path(db), AddWatchFlags::IN_MODIFY)
            .ok()?;
        Some(Watch {
            inotify,
            _file: file,
        })
    }

    /// Sleeps until the file is rung or `timeout` passes; drains what was rung meanwhile.
    pub fn wait(&self, timeout: Duration) {
        let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        // EINTR (a signal) returns early, which the caller treats like any wake-up.
        if poll(&mut fds, PollTimeout::from(millis)).is_ok_and(|ready| ready > 0) {
            while self
                .inotify
                .read_events()
                .is_ok_and(|events| !events.is_empty())
            {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_ring_wakes_a_watcher_at_once_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let watch = Watch::start(&db).expect("inotify works here");
        let start = Instant::now();
        watch.wait(Duration::from_millis(100));
        assert!(
            start.elapsed() >= Duration::from_millis(90),
            "woke without a ring"
        );
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ring(&db);
        });
        let start = Instant::now();
        watch.wait(Duration::from_secs(20));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the ring was missed"
        );
        ringer.join().unwrap();
    }

    #[test]
    fn a_ring_before_the_wait_is_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let watch = Watch::start(&db).expect("inotify works here");
        ring(&db);
        let start = Instant::now();
        watch.wait(Duration::from_secs(20));
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
