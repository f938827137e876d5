//! The decision core: every rule of docs/src/reference/semantics.md, written once and used by every
//! store.
//!
//! A store opens one write transaction, reads the resource's tenure rows and its own "now" under
//! its per-resource serialisation (`BEGIN IMMEDIATE` on SQLite, an advisory transaction lock on
//! PostgreSQL), and hands them here with the request. What comes back is a [`Decision`]: the
//! outcome to report and the [`Change`]s to write, in order, before committing. Nothing here
//! touches a store, a clock or the process, so each rule is a row in a table test below.
//!
//! Invariants the core keeps (and the tests pin):
//! - a lease is live while `now < expires_at`; at `expires_at` it belongs to no one;
//! - only a live lease's owner may extend, renew or release it; with a fence, only that tenure;
//! - a new tenure always gets a fresh fence from the store (never reused, strictly increasing);
//!   extending and renewing keep the fence;
//! - only a tenure `acquire` took may be extended (joined); one `run` took is guarded by that
//!   run, and refuses its own owner as it refuses any other;
//! - a refusal (busy, not found, forbidden) changes nothing, so it writes no history;
//! - every change of state is recorded in the history, in the same transaction.

use crate::lock::{
    Event, EventKind, Fence, Holder, Lock, Mode, Owner, Remark, Resource, Timestamp, Ttl,
};

/// One tenure as a store holds it, live or expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    pub owner: Owner,
    pub fence: Fence,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    pub mode: Mode,
    pub note: Option<Remark>,
    /// Taken by `run`, which guards it: nobody joins it, not even its own owner. Set when the
    /// tenure begins and kept for its whole life (extending, renewing and keeping it change
    /// only its times and note).
    pub guarded: bool,
}

impl Tenure {
    pub fn is_live(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }

    pub fn lock(&self, resource: &Resource) -> Lock {
        Lock {
            resource: resource.clone(),
            owner: self.owner.clone(),
            token: self.owner.token().cloned(),
            fence: self.fence,
            acquired_at: self.acquired_at,
            expires_at: self.expires_at,
            mode: self.mode,
            note: self.note.clone(),
        }
    }

    fn holder(&self) -> Holder {
        Holder {
            owner: self.owner.clone(),
            expires_at: self.expires_at,
            mode: self.mode,
            note: self.note.clone(),
        }
    }
}

/// An `acquire` (or `run`) as the core sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub owner: Owner,
    pub ttl: Ttl,
    pub mode: Mode,
    /// Replaces the tenure's note; `None` keeps the one it has.
    pub note: Option<Remark>,
    /// A waiter (`--wait` not zero): when refused, it takes (or keeps) a place in the queue.
    pub waits: bool,
    /// `run`'s request: a new tenure it takes is guarded by that run ([`Tenure::guarded`]). It
    /// may still join its owner's tenure that is not guarded, which then stays not guarded.
    pub guarded: bool,
}

impl Request {
    /// A plain exclusive request without a note, that tries once, as `acquire` makes it (not
    /// guarded).
    pub fn exclusive(owner: Owner, ttl: Ttl) -> Request {
        Request {
            owner,
            ttl,
            mode: Mode::Exclusive,
            note: None,
            waits: false,
            guarded: false,
        }
    }
}

/// A place in a resource's queue of waiters (docs/src/reference/semantics.md, "Fair waiting"). Places are ordered by
/// the store's ticket, never by a client's clock; a place is live while its liveness lease
/// runs, which the waiter refreshes as it waits, so a waiter that died stops blocking the queue
/// within [`LIVENESS_MS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub owner: Owner,
    /// Handed out by the store in arrival order.
    pub ticket: i64,
    pub expires_at: Timestamp,
}

/// What a place in the queue records of the request waiting there, for those who look at the
/// queue (`GET /queues`, docs/src/http-api.md): no decision reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asking {
    /// When the place was taken, by the store's clock.
    pub since: Timestamp,
    pub mode: Mode,
    /// A lock set's members, every one of which it waits for; empty for one resource.
    pub members: Vec<Resource>,
}

/// How long a place in the queue stays live without being refreshed.
pub const LIVENESS_MS: i64 = 5_000;

/// A waiter's place is refreshed once less than this much of its liveness is left, so a
/// waiter that retries every few milliseconds still writes only every second or so.
const REFRESH_BELOW_MS: i64 = 3_500;

/// A resource's rows and the store's clock, read in the transaction that decides.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// The store's "now": the host clock on SQLite, the server's on PostgreSQL.
    pub now: Timestamp,
    /// Every tenure row of the resource, live or expired, in any order.
    pub leases: Vec<Tenure>,
    /// Every place in the resource's queue, live or expired, in any order.
    pub queue: Vec<Waiter>,
}

impl State {
    /// The live places in the queue, in arrival (ticket) order.
    pub fn waiting(&self) -> Vec<&Waiter> {
        let mut live: Vec<&Waiter> = self
            .queue
            .iter()
            .filter(|w| self.now < w.expires_at)
            .collect();
        live.sort_by_key(|w| w.ticket);
        live
    }

    /// The live tenures, oldest (smallest fence) first.
    pub fn live(&self) -> Vec<&Tenure> {
        let mut live: Vec<&Tenure> = self.leases.iter().filter(|l| l.is_live(self.now)).collect();
        live.sort_by_key(|l| l.fence);
        live
    }
}

impl State {
    /// The state once `changes` are written, as a store writes them: what a later decision in
    /// the same transaction reads, so that several operations can be decided one after
    /// another and committed together (a server's group commit). An update writes a tenure's
    /// times and note only; a new place in the queue gets a ticket after every ticket the
    /// state holds, as the store's sequence hands them out in the order they are written.
    ///
    /// # Errors
    ///
    /// A change that would not find its row, or would repeat a fence, as the store's own write
    /// would fail: nothing of `changes` is applied then.
    pub fn apply(&mut self, changes: &[Change]) -> Result<(), String> {
        let mut next = self.clone();
        for change in changes {
            next.apply_one(change)?;
        }
        *self = next;
        Ok(())
    }

    fn apply_one(&mut self, change: &Change) -> Result<(), String> {
        let missing = || format!("no row for {change:?}");
        match change {
            Change::Insert(tenure) => {
                if self.leases.iter().any(|l| l.fence == tenure.fence) {
                    return Err(format!("fence {} is taken already", tenure.fence));
                }
                self.leases.push(tenure.clone());
            }
            Change::Update(tenure) => {
                let row = self
                    .leases
                    .iter_mut()
                    .find(|l| l.fence == tenure.fence)
                    .ok_or_else(missing)?;
                row.acquired_at = tenure.acquired_at;
                row.expires_at = tenure.expires_at;
                row.note.clone_from(&tenure.note);
            }
            Change::Delete { fence } => {
                let at = self
                    .leases
                    .iter()
                    .position(|l| l.fence == *fence)
                    .ok_or_else(missing)?;
                self.leases.remove(at);
            }
            Change::Record(_) => {}
            Change::Enqueue {
                owner, expires_at, ..
            } => {
                if self.queue.iter().any(|w| w.owner == *owner) {
                    return Err(format!("{owner} has a place already"));
                }
                let ticket = self.queue.iter().map(|w| w.ticket).max().unwrap_or(0) + 1;
                self.queue.push(Waiter {
                    owner: owner.clone(),
                    ticket,
                    expires_at: *expires_at,
                });
            }
            Change::Refresh { owner, expires_at } => {
                let place = self
                    .queue
                    .iter_mut()
                    .find(|w| w.owner == *owner)
                    .ok_or_else(missing)?;
                place.expires_at = *expires_at;
            }
            Change::Dequeue { owner } => {
                let at = self
                    .queue
                    .iter()
                    .position(|w| w.owner == *owner)
                    .ok_or_else(missing)?;
                self.queue.remove(at);
            }
        }
        Ok(())
    }
}

/// One write the store applies, in order, inside the deciding transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new tenure row.
    Insert(Tenure),
    /// The tenure with this lease's fence gets its times and note.
    Update(Tenure),
    /// The tenure `fence` is removed.
    Delete { fence: Fence },
    /// A history row.
    Record(Event),
    /// `owner` takes a place at the end of the queue (the store hands out its ticket), live
    /// until `expires_at`, recording what it asks for.
    Enqueue {
        owner: Owner,
        expires_at: Timestamp,
        asking: Asking,
    },
    /// `owner`'s place stays live until `expires_at`.
    Refresh { owner: Owner, expires_at: Timestamp },
    /// `owner` leaves the queue (it got the lock, gave up, or its place expired).
    Dequeue { owner: Owner },
}

/// Whether committing `changes` may let a waiter in; stores then wake the resource's waiters.
/// It may when a tenure went away, when a waiter left the queue without being granted, and
/// when a shared or semaphore tenure began (the waiters behind it may be admitted beside it).
/// An exclusive tenure admits nobody else, so beginning one wakes nobody: under contention
/// each handoff then wakes the queue once (at the release), not twice. The waiters behind it
/// learn their new place in line at their next look.
pub fn wakes_waiters(changes: &[Change]) -> bool {
    let granted = |owner: &Owner| {
        changes
            .iter()
            .any(|change| matches!(change, Change::Insert(lease) if &lease.owner == owner))
    };
    changes.iter().any(|change| match change {
        Change::Delete { .. } => true,
        Change::Insert(lease) => lease.mode != Mode::Exclusive,
        Change::Dequeue { owner } => !granted(owner),
        Change::Update(_) | Change::Record(_) | Change::Enqueue { .. } | Change::Refresh { .. } => {
            false
        }
    })
}

/// The waiter to wake once `changes` are committed on `state`, if they may let one in
/// ([`wakes_waiters`]): the first live place left in the queue. Only it can be granted next —
/// nobody goes in ahead of an earlier live waiter — so waking the others would only make them
/// look and sleep again. A head granted a shared or semaphore tenure wakes the next in turn.
pub fn next_to_wake<'a>(state: &'a State, changes: &[Change]) -> Option<&'a Owner> {
    if wakes_waiters(changes) {
        head_after(state, changes)
    } else {
        None
    }
}

/// The first live place left in the queue once `changes` are committed on `state`.
pub fn head_after<'a>(state: &'a State, changes: &[Change]) -> Option<&'a Owner> {
    let left = |owner: &Owner| {
        changes
            .iter()
            .any(|change| matches!(change, Change::Dequeue { owner: gone } if gone == owner))
    };
    state
        .waiting()
        .into_iter()
        .map(|waiter| &waiter.owner)
        .find(|owner| !left(owner))
}

impl Change {
    /// Whether the change must survive power loss. A place in the queue need not: lost, it is
    /// taken again at the waiter's next attempt.
    pub fn is_durable(&self) -> bool {
        !matches!(
            self,
            Change::Enqueue { .. } | Change::Refresh { .. } | Change::Dequeue { .. }
        )
    }
}

/// What to report, and what to write so that it becomes true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<T> {
    pub outcome: T,
    pub changes: Vec<Change>,
}

impl<T> Decision<T> {
    /// A refusal or a read: nothing to write.
    fn unchanged(outcome: T) -> Decision<T> {
        Decision {
            outcome,
            changes: Vec::new(),
        }
    }
}

/// What a decision over a set writes: each member's changes, in the members' order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetDecision<T> {
    pub outcome: T,
    pub changes: Vec<Vec<Change>>,
}

impl<T> SetDecision<T> {
    /// The same changes, with the outcome told as `tell` tells it.
    pub fn map<U>(self, tell: impl FnOnce(T) -> U) -> SetDecision<U> {
        SetDecision {
            outcome: tell(self.outcome),
            changes: self.changes,
        }
    }
}

mod rules;
mod sets;

pub use rules::{Finish, acquire, break_tenures, finish, leave, release, renew, status};
pub use sets::{acquire_set, finish_set, leave_set, queue_first, release_set, renew_set};

fn expiry(now: Timestamp, ttl: Ttl) -> Timestamp {
    Timestamp(now.0.saturating_add(ttl.as_millis()))
}

fn record(
    resource: &Resource,
    at: Timestamp,
    lease: &Tenure,
    event: EventKind,
    previous: Option<Owner>,
) -> Change {
    Change::Record(Event {
        at,
        resource: resource.clone(),
        owner: lease.owner.clone(),
        token: lease.owner.token().cloned(),
        fence: lease.fence,
        event,
        expires_at: match event {
            EventKind::Released | EventKind::Broken => None,
            _ => Some(lease.expires_at),
        },
        previous_owner: previous,
        mode: lease.mode,
        note: lease.note.clone(),
        broken: None,
    })
}

#[cfg(test)]
mod tests;
