//! The requests waiting in a queue on this server: each one a task that sleeps until its
//! resources may have changed, holding no thread and no store connection.
//!
//! - **Bounded.** A caller (a token; callers without one count as one caller) may have at most
//!   `per_caller` requests waiting at once, and the server at most `total`; past either bound a
//!   request is refused before it waits ([`TooMany`], answered 429 with `Retry-After`), so no
//!   caller can take the server's memory or its store from the others.
//! - **Rung, not polled.** A waiting request sleeps on a bell of its own ([`Waiting::rung`]).
//!   The store's writer rings the bell of the first waiter left in a queue once a commit may
//!   let it in ([`Waiters::ring`]); the store's watcher rings for changes other processes
//!   made (another server, the command line). A ring that comes between a request's look at
//!   the store and its sleep is kept, not lost: the sleep then ends at once.
//! - **Leaving.** A waiter's owner that leaves the queue (`POST /locks/{r}/leave`) marks its
//!   waiting requests as left and rings them ([`Waiters::leave`]): each ends without looking at
//!   the store again, so none takes the place back or is granted a lock its client gave up.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::lock::{Owner, Resource, TokenName};

/// The waiting requests of one server, and their bounds.
pub struct Waiters {
    registry: Mutex<Registry>,
    per_caller: usize,
    total: usize,
}

#[derive(Default)]
struct Registry {
    entries: HashMap<u64, Entry>,
    /// The waiting requests on each resource, in the order they came.
    by_resource: BTreeMap<Resource, Vec<u64>>,
    per_caller: HashMap<Option<TokenName>, usize>,
    next: u64,
}

struct Entry {
    owner: Owner,
    resources: Vec<Resource>,
    caller: Option<TokenName>,
    bell: Arc<Notify>,
    left: bool,
}

/// A request refused because too many wait already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooMany {
    /// The caller has `per_caller` requests waiting.
    Caller(usize),
    /// The server has `total` requests waiting.
    Server(usize),
}

impl Waiters {
    pub fn new(per_caller: usize, total: usize) -> Waiters {
        Waiters {
            registry: Mutex::new(Registry::default()),
            per_caller,
            total,
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Nothing panics while holding the lock; were it poisoned, the registry is whole.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many requests wait now.
    pub fn len(&self) -> usize {
        self.registry().entries.len()
    }

    /// Registers a request of `owner` (proved by `caller`'s token) about to wait on
    /// `resources` (one, or a set's members), for as long as the returned [`Waiting`] lives.
    ///
    /// # Errors
    ///
    /// [`TooMany`] when the caller or the server is at its bound.
    pub fn enter(
        self: &Arc<Self>,
        caller: Option<&TokenName>,
        owner: &Owner,
        resources: &[Resource],
    ) -> Result<Waiting, TooMany> {
        let mut registry = self.registry();
        if registry.entries.len() >= self.total {
            return Err(TooMany::Server(self.total));
        }
        let mine = registry
            .per_caller
            .get(&caller.cloned())
            .copied()
            .unwrap_or(0);
        if mine >= self.per_caller {
            return Err(TooMany::Caller(self.per_caller));
        }
        registry.next += 1;
        let id = registry.next;
        let bell = Arc::new(Notify::new());
        registry.entries.insert(
            id,
            Entry {
                owner: owner.clone(),
                resources: resources.to_vec(),
                caller: caller.cloned(),
                bell: Arc::clone(&bell),
                left: false,
            },
        );
        for resource in resources {
            registry
                .by_resource
                .entry(resource.clone())
                .or_default()
                .push(id);
        }
        *registry.per_caller.entry(caller.cloned()).or_default() += 1;
        Ok(Waiting {
            waiters: Arc::clone(self),
            id,
            bell,
        })
    }

    /// Rings the requests waiting on `resource`: only `owner`'s when given (the first waiter
    /// left in its queue, which alone can be let in next), else every one (a change of
    /// unknown effect, seen by the watcher).
    pub fn ring(&self, resource: &Resource, owner: Option<&Owner>) {
        let registry = self.registry();
        let Some(ids) = registry.by_resource.get(resource) else {
            return;
        };
        for entry in ids.iter().filter_map(|id| registry.entries.get(id)) {
            if owner.is_none_or(|owner| entry.owner == *owner) {
                entry.bell.notify_one();
            }
        }
    }

    /// Rings every waiting request for which `matches` (its resources and owner) says yes:
    /// for a watcher that learns of changes by something other than a resource's name.
    pub fn ring_where(&self, matches: impl Fn(&[Resource], &Owner) -> bool) {
        let registry = self.registry();
        for entry in registry.entries.values() {
            if matches(&entry.resources, &entry.owner) {
                entry.bell.notify_one();
            }
        }
    }

    /// Rings every waiting request: the server stops, or the store came back.
    pub fn ring_all(&self) {
        for entry in self.registry().entries.values() {
            entry.bell.notify_one();
        }
    }

    /// Marks every request of `owner` waiting on any of `resources` as left, and rings it;
    /// returns which they are, for [`Waiters::ended`].
    pub fn leave(&self, owner: &Owner, resources: &[Resource]) -> Vec<u64> {
        let mut registry = self.registry();
        let mut left = Vec::new();
        for (id, entry) in &mut registry.entries {
            if entry.owner == *owner && entry.resources.iter().any(|r| resources.contains(r)) {
                entry.left = true;
                entry.bell.notify_one();
                left.push(*id);
            }
        }
        left
    }

    /// Whether every request of `ids` has ended (answered, or its client gone).
    pub fn ended(&self, ids: &[u64]) -> bool {
        let registry = self.registry();
        ids.iter().all(|id| !registry.entries.contains_key(id))
    }

    fn remove(&self, id: u64) {
        let mut registry = self.registry();
        let Some(entry) = registry.entries.remove(&id) else {
            return;
        };
        for resource in &entry.resources {
            if let Some(ids) = registry.by_resource.get_mut(resource) {
                ids.retain(|other| *other != id);
                if ids.is_empty() {
                    registry.by_resource.remove(resource);
                }
            }
        }
        if let Some(count) = registry.per_caller.get_mut(&entry.caller) {
            *count -= 1;
            if *count == 0 {
                registry.per_caller.remove(&entry.caller);
            }
        }
    }
}

/// A request's place among the waiting ones, taken out when dropped (answered, or its client
/// gone).
pub struct Waiting {
    waiters: Arc<Waiters>,
    id: u64,
    bell: Arc<Notify>,
}

impl Waiting {
    /// Sleeps until the request is rung or `most` passes; at once if it was rung since it last
    /// slept. `true` when rung.
    pub async fn rung(&self, most: Duration) -> bool {
        tokio::time::timeout(most, self.bell.notified())
            .await
            .is_ok()
    }

    /// Whether its owner left the queue meanwhile ([`Waiters::leave`]).
    pub fn left(&self) -> bool {
        self.waiters
            .registry()
            .entries
            .get(&self.id)
            .is_some_and(|entry| entry.left)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.waiters.remove(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str) -> Resource {
        Resource::parse(name).unwrap()
    }

    fn own(name: &str) -> Owner {
        Owner::parse(name).unwrap()
    }

    fn token(name: &str) -> TokenName {
        TokenName::parse(name).unwrap()
    }

    const SOON: Duration = Duration::from_millis(1);

    #[tokio::test]
    async fn a_ring_wakes_its_waiter_and_is_kept_when_it_comes_before_the_sleep() {
        let waiters = Arc::new(Waiters::new(10, 100));
        let a = waiters.enter(None, &own("a"), &[res("r")]).unwrap();
        let b = waiters
            .enter(None, &own("b"), &[res("r"), res("s")])
            .unwrap();
        // Nobody rung: the sleep runs out.
        assert!(!a.rung(SOON).await);
        // Rung before it sleeps: it wakes at once.
        waiters.ring(&res("r"), Some(&own("a")));
        assert!(a.rung(Duration::from_secs(60)).await);
        // Only the owner named is rung; once.
        assert!(!b.rung(SOON).await);
        assert!(!a.rung(SOON).await);
        // Without an owner, every waiter of the resource.
        waiters.ring(&res("r"), None);
        assert!(a.rung(SOON).await && b.rung(SOON).await);
        // A set waiter is rung through any member.
        waiters.ring(&res("s"), None);
        assert!(b.rung(SOON).await && !a.rung(SOON).await);
        waiters
            .ring_where(|resources, owner| owner.as_str() == "a" && resources.contains(&res("r")));
        assert!(a.rung(SOON).await && !b.rung(SOON).await);
        waiters.ring_all();
        assert!(a.rung(SOON).await && b.rung(SOON).await);
        // Resources nobody waits on ring nobody.
        waiters.ring(&res("t"), None);
        assert!(!a.rung(SOON).await && !b.rung(SOON).await);
    }

    #[tokio::test]
    async fn callers_and_the_server_are_bounded_and_a_place_is_given_back_when_dropped() {
        let waiters = Arc::new(Waiters::new(2, 3));
        let (ci, ops) = (token("ci"), token("ops"));
        let first = waiters.enter(Some(&ci), &own("a"), &[res("r")]).unwrap();
        let second = waiters.enter(Some(&ci), &own("b"), &[res("r")]).unwrap();
        assert_eq!(
            waiters.enter(Some(&ci), &own("c"), &[res("r")]).err(),
            Some(TooMany::Caller(2))
        );
        // Another caller has a bound of its own, and callers without a token are one caller.
        let third = waiters.enter(Some(&ops), &own("d"), &[res("r")]).unwrap();
        assert_eq!(waiters.len(), 3);
        assert_eq!(
            waiters.enter(None, &own("e"), &[res("r")]).err(),
            Some(TooMany::Server(3))
        );
        drop(first);
        assert_eq!(waiters.len(), 2);
        let again = waiters.enter(Some(&ci), &own("c"), &[res("r")]).unwrap();
        drop((second, third, again));
        assert_eq!(waiters.len(), 0);
        let registry = waiters.registry();
        assert!(registry.by_resource.is_empty() && registry.per_caller.is_empty());
    }

    #[tokio::test]
    async fn leaving_marks_and_rings_the_owners_waiting_requests_only() {
        let waiters = Arc::new(Waiters::new(10, 100));
        let a = waiters.enter(None, &own("a"), &[res("r")]).unwrap();
        let a_set = waiters
            .enter(None, &own("a"), &[res("s"), res("t")])
            .unwrap();
        let b = waiters.enter(None, &own("b"), &[res("r")]).unwrap();
        let left = waiters.leave(&own("a"), &[res("t")]);
        assert_eq!(left.len(), 1);
        assert!(a_set.left() && a_set.rung(SOON).await);
        assert!(!a.left() && !a.rung(SOON).await);
        assert!(!waiters.ended(&left));
        drop(a_set);
        assert!(waiters.ended(&left), "ended once its request is answered");
        assert_eq!(waiters.leave(&own("a"), &[res("r"), res("x")]).len(), 1);
        assert!(a.left() && !b.left());
    }
}
