//! Kernel wake-ups for waiters on the SQLite store.
//!
//! A `run` that holds a lock also holds a write lock on one byte of a file beside the database
//! (`<db>-turnstile`), at an offset derived from the resource name. A waiter blocks on that
//! byte in a helper thread, so it wakes the moment the holder exits — as `flock(1)` waiters do —
//! instead of when its next poll comes round.
//!
//! The database alone decides who owns a lock; the byte is only a hint. A hash collision causes
//! a spurious wake-up, a holder that is not a `run` holds no byte (waiters then poll with
//! backoff), and any error here just means polling. Open-file-description locks (`F_OFD_*`)
//! are used because they belong to the open file, not the process, so a helper thread can wait
//! for one and hand it to the main thread, and the kernel drops them when the process exits,
//! however it exits.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;

use crate::lock::Resource;
use crate::store::{Tenancy, Wakeup};

/// One resource's byte in the turnstile file.
pub struct Turnstile {
    file: Arc<File>,
    offset: i64,
}

impl Turnstile {
    /// The turnstile for `resource` beside the database at `db`, or `None` if its file cannot
    /// be opened (then waiters poll).
    pub fn open(db: &Path, resource: &Resource) -> Option<Turnstile> {
        let mut path = db.as_os_str().to_owned();
        path.push("-turnstile");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .ok()?;
        Some(Turnstile {
            file: Arc::new(file),
            offset: offset_of(resource),
        })
    }

    /// Takes the byte if it is free, for as long as this value lives.
    pub fn try_hold(&self) -> bool {
        set_lock(&self.file, self.offset, libc::F_WRLCK, false)
    }

    /// Starts waiting for the byte in a helper thread.
    /// Starts waiting for the byte in a helper thread; gives the turnstile back when no thread
    /// can be started (the waiter polls instead).
    pub fn watch(self) -> Result<Watch, Turnstile> {
        let (freed_tx, freed) = mpsc::channel();
        let (control, control_rx) = mpsc::channel();
        let file = Arc::clone(&self.file);
        let offset = self.offset;
        let spawned = std::thread::Builder::new()
            .name("turnstile".into())
            .spawn(move || wait_for_byte(&file, offset, &freed_tx, &control_rx));
        if spawned.is_err() {
            return Err(self);
        }
        Ok(Watch {
            turnstile: self,
            freed,
            control,
            held: false,
        })
    }
}

enum Control {
    /// The byte was free but the lock is still taken (by a holder that is not a `run`): let go
    /// of it, wait this long, and block on it again.
    Retry(Duration),
    /// This process took the lock: keep the byte for its tenure.
    Keep,
}

/// A helper thread blocked on a turnstile byte.
pub struct Watch {
    turnstile: Turnstile,
    freed: Receiver<()>,
    control: Sender<Control>,
    /// The helper thread holds the byte and waits for a [`Control`].
    held: bool,
}

impl Watch {
    /// Waits up to `timeout` for the byte to come free. `Err` when the helper thread gave up
    /// (polling must take over).
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, ()> {
        if self.held {
            return Ok(true);
        }
        match self.freed.recv_timeout(timeout) {
            Ok(()) => {
                self.held = true;
                Ok(true)
            }
            Err(RecvTimeoutError::Timeout) => Ok(false),
            Err(RecvTimeoutError::Disconnected) => Err(()),
        }
    }

    /// The byte came free, yet the lock is still busy: block on the byte again after `delay`.
    pub fn retry_after(&mut self, delay: Duration) {
        if std::mem::take(&mut self.held) {
            let _ = self.control.send(Control::Retry(delay));
        }
    }

    /// The lock was taken: the byte, if this watch holds it, stays held by the returned
    /// turnstile for the tenure.
    pub fn finish(self) -> Option<Turnstile> {
        if self.held {
            let _ = self.control.send(Control::Keep);
            Some(self.turnstile)
        } else {
            // The helper thread, still blocked, lets go as soon as it gets the byte and finds
            // nobody listening.
            None
        }
    }
}

fn wait_for_byte(file: &File, offset: i64, freed: &Sender<()>, control: &Receiver<Control>) {
    loop {
        if !set_lock(file, offset, libc::F_WRLCK, true) {
            return;
        }
        if freed.send(()).is_err() {
            set_lock(file, offset, libc::F_UNLCK, false);
            return;
        }
        match control.recv() {
            Ok(Control::Retry(delay)) => {
                set_lock(file, offset, libc::F_UNLCK, false);
                std::thread::sleep(delay);
            }
            Ok(Control::Keep) => return,
            Err(_) => {
                set_lock(file, offset, libc::F_UNLCK, false);
                return;
            }
        }
    }
}

/// A waiter's side of the turnstile, as the wait loop sees it: block on the byte, and once the
/// lock is taken, keep the byte for the tenure.
pub struct Bell {
    /// Until the first wait.
    idle: Option<Turnstile>,
    watch: Option<Watch>,
}

impl Bell {
    pub fn new(turnstile: Turnstile) -> Bell {
        Bell {
            idle: Some(turnstile),
            watch: None,
        }
    }
}

impl Wakeup for Bell {
    fn wait(&mut self, timeout: Duration, pause: Duration) {
        if self.watch.is_none() {
            if let Some(turnstile) = self.idle.take() {
                match turnstile.watch() {
                    Ok(watch) => self.watch = Some(watch),
                    Err(turnstile) => self.idle = Some(turnstile),
                }
            }
        }
        let Some(watch) = self.watch.as_mut() else {
            std::thread::sleep(pause);
            return;
        };
        // Woken before, yet the lock was still busy: its holder is not a `run`. Block on the
        // byte again after a pause.
        watch.retry_after(pause);
        if watch.wait(timeout).is_err() {
            // The helper thread is gone: polling takes over.
            self.watch = None;
            std::thread::sleep(pause);
        }
    }

    fn taken(self: Box<Self>) -> Option<Tenancy> {
        let held = match self.watch {
            Some(watch) => watch.finish(),
            None => self.idle.filter(Turnstile::try_hold),
        };
        held.map(|turnstile| Box::new(turnstile) as Tenancy)
    }
}

/// Locks or unlocks one byte, waiting for it if `block`. True on success.
fn set_lock(file: &File, offset: i64, kind: libc::c_int, block: bool) -> bool {
    let lock = libc::flock {
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: offset,
        l_len: 1,
        l_pid: 0,
    };
    loop {
        let arg = if block {
            FcntlArg::F_OFD_SETLKW(&lock)
        } else {
            FcntlArg::F_OFD_SETLK(&lock)
        };
        match fcntl(file, arg) {
            Ok(_) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
}

/// FNV-1a of the resource name, folded into 40 bits: a byte offset every filesystem accepts.
fn offset_of(resource: &Resource) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in resource.as_str().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::try_from(hash % (1 << 40)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_wakes_when_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let resource = Resource::parse("r").unwrap();
        let holder = Turnstile::open(&db, &resource).unwrap();
        assert!(holder.try_hold());
        // A second open file description conflicts, as another process would.
        let other = Turnstile::open(&db, &resource).unwrap();
        assert!(!other.try_hold());
        let mut watch = other.watch().ok().expect("a helper thread");
        assert_eq!(watch.wait(Duration::from_millis(50)), Ok(false));
        drop(holder);
        assert_eq!(watch.wait(Duration::from_secs(10)), Ok(true));
        let kept = watch.finish().expect("the byte is held");
        let third = Turnstile::open(&db, &resource).unwrap();
        assert!(!third.try_hold());
        drop(kept);
        // The helper thread drops its handle on the file as it ends.
        let start = std::time::Instant::now();
        while !third.try_hold() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the byte was never let go"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
