//! The requests waiting in a queue on this server, by owner and resources, so that an owner
//! that leaves the queue (`POST /locks/{r}/leave`, `POST /sets/leave`) also ends its own long
//! poll still waiting here. Left waiting, that poll would look again within 250 ms and take the
//! place back, or be granted the lock for a client that is gone: an interrupted client does not
//! read its answer.
//!
//! [`Waits::enter`] registers a waiting request for as long as the returned [`Waiting`] lives;
//! [`Waits::leave`] marks every waiting request of the owner on any of the resources as left
//! and returns once they have all answered, so that the place the caller takes out next is not
//! taken back by any of them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::lock::{Owner, Resource};

/// The longest a leave waits for the owner's waiting requests to answer: each looks whether it
/// was left after every attempt, at most 250 ms apart, and an attempt is one transaction.
const ANSWERED: Duration = Duration::from_secs(5);

/// The waiting requests of one server.
#[derive(Default)]
pub struct Waits {
    entries: Mutex<Vec<Entry>>,
    /// Notified whenever a waiting request ends.
    ended: Condvar,
    next: AtomicU64,
}

/// One waiting request.
struct Entry {
    id: u64,
    /// The owner, as the caller's token proves it.
    owner: Owner,
    resources: Vec<Resource>,
    left: Arc<AtomicBool>,
}

/// A waiting request's place in [`Waits`], taken out when dropped.
pub struct Waiting<'a> {
    waits: &'a Waits,
    id: u64,
    left: Arc<AtomicBool>,
}

impl Waits {
    fn entries(&self) -> MutexGuard<'_, Vec<Entry>> {
        // Nothing panics while holding the lock; were it poisoned, the list is still whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a request of `owner` waiting on `resources` (one, or a set's members).
    pub fn enter(&self, owner: &Owner, resources: &[Resource]) -> Waiting<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let left = Arc::new(AtomicBool::new(false));
        self.entries().push(Entry {
            id,
            owner: owner.clone(),
            resources: resources.to_vec(),
            left: Arc::clone(&left),
        });
        Waiting {
            waits: self,
            id,
            left,
        }
    }

    /// Tells every request of `owner` waiting on any of `resources` that its owner left, and
    /// waits until each has answered (at most [`ANSWERED`]).
    pub fn leave(&self, owner: &Owner, resources: &[Resource]) {
        let until = Instant::now() + ANSWERED;
        let mut entries = self.entries();
        let leaving: Vec<u64> = entries
            .iter()
            .filter(|entry| {
                entry.owner == *owner && entry.resources.iter().any(|r| resources.contains(r))
            })
            .map(|entry| {
                entry.left.store(true, Ordering::SeqCst);
                entry.id
            })
            .collect();
        while entries.iter().any(|entry| leaving.contains(&entry.id)) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            entries = self
                .ended
                .wait_timeout(entries, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Waiting<'_> {
    /// Whether its owner left the queue: the request ends at once.
    pub fn left(&self) -> bool {
        self.left.load(Ordering::SeqCst)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waits.entries().retain(|entry| entry.id != self.id);
        self.waits.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> Owner {
        Owner::parse(name).expect("an owner")
    }

    fn names(names: &[&str]) -> Vec<Resource> {
        names
            .iter()
            .map(|name| Resource::parse(name).expect("a resource"))
            .collect()
    }

    #[test]
    fn a_leave_ends_the_owners_waits_on_its_resources_and_no_others() {
        // (who waits on what) → whether a leave of w on b ends it
        let cases = [
            ("w", &["b"][..], true),
            ("w", &["a", "b", "c"][..], true),
            ("w", &["a"][..], false),
            ("x", &["b"][..], false),
        ];
        let waits = Waits::default();
        let waiting: Vec<Waiting<'_>> = cases
            .iter()
            .map(|(who, on, _)| waits.enter(&owner(who), &names(on)))
            .collect();
        std::thread::scope(|s| {
            let leave = s.spawn(|| waits.leave(&owner("w"), &names(&["b"])));
            // The leave returns only once the waits it ended have answered.
            std::thread::sleep(Duration::from_millis(100));
            assert!(!leave.is_finished(), "the leave waits for them to answer");
            for ((who, on, ended), wait) in cases.iter().zip(&waiting) {
                assert_eq!(wait.left(), *ended, "{who} waiting on {on:?}");
            }
            drop(waiting);
            leave.join().expect("the leave");
        });
        assert!(waits.entries().is_empty());
        // With nothing waiting, a leave returns at once.
        let started = Instant::now();
        waits.leave(&owner("w"), &names(&["b"]));
        assert!(started.elapsed() < ANSWERED);
    }
}
