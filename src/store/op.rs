//! The operations on the locks as values: [`Op`] in, [`Outcome`] out. This is the one seam
//! every store offers ([`super::LockStore::perform`]); a local store carries an operation out
//! through the decision core, the PostgreSQL store hands it to its connection's thread as one
//! message, and a store that decides elsewhere (a client of a distlock server) sends it on.
//!
//! [`Locks`] gives each operation a typed method over `perform`, which is what commands call.

use std::time::Duration;

use crate::engine::{Finish, Request};
use crate::lock::{
    Acquire, Event, Eviction, Fence, Lock, LogQuery, Members, Owner, Release, Renew, Resource,
    SetAcquire, SetRelease, SetRenew, Status, Ttl,
};

use super::{Error, GcReport, LockStore, Result};

/// One operation on a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Take a tenure (or extend the owner's own), or report busy or a mismatch; a waiting
    /// request takes or keeps its place in the queue (see [`crate::engine::acquire`]).
    Acquire {
        resource: Resource,
        request: Request,
    },
    /// The live tenures, oldest first, and the live waiters.
    Status { resource: Resource },
    /// Move the owner's live lease (only tenure `fence`, when given) to now + `ttl`.
    Renew {
        resource: Resource,
        owner: Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    },
    /// Remove the owner's live tenure (only tenure `fence`, when given).
    Release {
        resource: Resource,
        owner: Owner,
        fence: Option<Fence>,
    },
    /// `run`'s end of tenure `fence`: released, or kept until its start + `hold`.
    Finish {
        resource: Resource,
        owner: Owner,
        fence: Fence,
        hold: Option<Duration>,
    },
    /// An operator's `break`: remove every live tenure (only `owner`'s, when given).
    Break {
        resource: Resource,
        owner: Option<Owner>,
        eviction: Eviction,
    },
    /// A waiter gives up its place in the queue.
    Leave { resource: Resource, owner: Owner },
    /// The live locks whose resource starts with `prefix`, by resource, then fence.
    List { prefix: String },
    /// Recorded state changes, oldest first.
    Log { query: LogQuery },
    /// Delete expired lock rows and history older than `keep_history`.
    Gc { keep_history: Duration },
    /// Start listening for changes of `resources` (one, or a set's members) that may let
    /// `owner` in.
    Subscribe {
        resources: Vec<Resource>,
        owner: Owner,
    },
    /// Block until one of `resources` may have changed, or `timeout` passes.
    WaitForChange {
        resources: Vec<Resource>,
        timeout: Duration,
    },
    /// [`Op::Acquire`] of a lock set, all or nothing (see [`crate::engine::acquire_set`]).
    AcquireSet { members: Members, request: Request },
    /// [`Op::Renew`] of every member (of tenures `fences`, in the members' order, when
    /// given), all or nothing.
    RenewSet {
        members: Members,
        owner: Owner,
        ttl: Ttl,
        fences: Option<Vec<Fence>>,
    },
    /// [`Op::Release`] of every member, all or nothing.
    ReleaseSet {
        members: Members,
        owner: Owner,
        fences: Option<Vec<Fence>>,
    },
    /// [`Op::Finish`] of each member's tenure (`fences`, in the members' order), each on its
    /// own: a member already lost leaves the others to be ended all the same.
    FinishSet {
        members: Members,
        owner: Owner,
        fences: Vec<Fence>,
        hold: Option<Duration>,
    },
    /// A set waiter gives up its place in every member's queue.
    LeaveSet { members: Members, owner: Owner },
}

/// What an [`Op`] came to, one variant per operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acquire(Acquire),
    Status(Status),
    Renew(Renew),
    Release(Release),
    Finish(Finish),
    /// The tenures `break` removed.
    Break(Vec<Lock>),
    Left,
    List(Vec<Lock>),
    Log(Vec<Event>),
    Gc(GcReport),
    Subscribed,
    /// The resource may have changed, or the wait timed out.
    Woken,
    AcquireSet(SetAcquire),
    RenewSet(SetRenew),
    ReleaseSet(SetRelease),
    /// Each member's end, in the members' order.
    FinishSet(Vec<Finish>),
}

/// Whether a commit must survive power loss. A release need not (rolled back, the lock merely
/// stays until its TTL runs out), nor a place in the queue (lost, it is taken again at the
/// waiter's next attempt); a grant, a renewal and a kept lease must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Flushed to stable storage before the operation returns.
    Durable,
    /// May be lost with the last moments before a power loss.
    Relaxed,
}

/// The operations as typed methods over [`LockStore::perform`].
pub trait Locks: LockStore {
    /// See [`Op::Acquire`].
    ///
    /// # Errors
    ///
    /// Only store failures; a busy lock is [`Acquire::Busy`].
    fn acquire(&mut self, resource: &Resource, request: &Request) -> Result<Acquire> {
        let op = Op::Acquire {
            resource: resource.clone(),
            request: request.clone(),
        };
        match self.perform(op)? {
            Outcome::Acquire(outcome) => Ok(outcome),
            other => unexpected("acquire", &other),
        }
    }

    /// See [`Op::Status`]. An expired tenure is never reported.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn status(&mut self, resource: &Resource) -> Result<Status> {
        match self.perform(Op::Status {
            resource: resource.clone(),
        })? {
            Outcome::Status(status) => Ok(status),
            other => unexpected("status", &other),
        }
    }

    /// See [`Op::Renew`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn renew(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> Result<Renew> {
        let op = Op::Renew {
            resource: resource.clone(),
            owner: owner.clone(),
            ttl,
            fence,
        };
        match self.perform(op)? {
            Outcome::Renew(outcome) => Ok(outcome),
            other => unexpected("renew", &other),
        }
    }

    /// See [`Op::Release`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn release(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
    ) -> Result<Release> {
        let op = Op::Release {
            resource: resource.clone(),
            owner: owner.clone(),
            fence,
        };
        match self.perform(op)? {
            Outcome::Release(outcome) => Ok(outcome),
            other => unexpected("release", &other),
        }
    }

    /// See [`Op::Finish`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn finish(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Fence,
        hold: Option<Duration>,
    ) -> Result<Finish> {
        let op = Op::Finish {
            resource: resource.clone(),
            owner: owner.clone(),
            fence,
            hold,
        };
        match self.perform(op)? {
            Outcome::Finish(outcome) => Ok(outcome),
            other => unexpected("finish", &other),
        }
    }

    /// See [`Op::Break`]; the removed tenures.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn evict(
        &mut self,
        resource: &Resource,
        owner: Option<&Owner>,
        eviction: &Eviction,
    ) -> Result<Vec<Lock>> {
        let op = Op::Break {
            resource: resource.clone(),
            owner: owner.cloned(),
            eviction: eviction.clone(),
        };
        match self.perform(op)? {
            Outcome::Break(removed) => Ok(removed),
            other => unexpected("break", &other),
        }
    }

    /// See [`Op::Leave`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn leave(&mut self, resource: &Resource, owner: &Owner) -> Result<()> {
        let op = Op::Leave {
            resource: resource.clone(),
            owner: owner.clone(),
        };
        match self.perform(op)? {
            Outcome::Left => Ok(()),
            other => unexpected("leave", &other),
        }
    }

    /// See [`Op::List`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn list(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        match self.perform(Op::List {
            prefix: prefix.to_owned(),
        })? {
            Outcome::List(locks) => Ok(locks),
            other => unexpected("list", &other),
        }
    }

    /// See [`Op::Log`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn log(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        match self.perform(Op::Log {
            query: query.clone(),
        })? {
            Outcome::Log(events) => Ok(events),
            other => unexpected("log", &other),
        }
    }

    /// See [`Op::Gc`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn gc(&mut self, keep_history: Duration) -> Result<GcReport> {
        match self.perform(Op::Gc { keep_history })? {
            Outcome::Gc(report) => Ok(report),
            other => unexpected("gc", &other),
        }
    }

    /// See [`Op::Subscribe`]: called once, before a waiter's first attempt, so that no change
    /// committed after it is missed by [`Locks::wait_for_change`].
    ///
    /// # Errors
    ///
    /// Only store failures; a store that cannot listen makes waiters poll.
    fn subscribe(&mut self, resources: &[Resource], owner: &Owner) -> Result<()> {
        let op = Op::Subscribe {
            resources: resources.to_vec(),
            owner: owner.clone(),
        };
        match self.perform(op)? {
            Outcome::Subscribed => Ok(()),
            other => unexpected("subscribe", &other),
        }
    }

    /// See [`Op::WaitForChange`]: a futex wait on SQLite, `LISTEN`/`NOTIFY` on PostgreSQL.
    /// Only a hint — the caller tries again either way — so spurious returns are harmless.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn wait_for_change(&mut self, resources: &[Resource], timeout: Duration) -> Result<()> {
        let op = Op::WaitForChange {
            resources: resources.to_vec(),
            timeout,
        };
        match self.perform(op)? {
            Outcome::Woken => Ok(()),
            other => unexpected("wait", &other),
        }
    }

    /// See [`Op::AcquireSet`].
    ///
    /// # Errors
    ///
    /// Only store failures; a busy member makes [`SetAcquire::Busy`].
    fn acquire_set(&mut self, members: &Members, request: &Request) -> Result<SetAcquire> {
        let op = Op::AcquireSet {
            members: members.clone(),
            request: request.clone(),
        };
        match self.perform(op)? {
            Outcome::AcquireSet(outcome) => Ok(outcome),
            other => unexpected("acquire", &other),
        }
    }

    /// See [`Op::RenewSet`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn renew_set(
        &mut self,
        members: &Members,
        owner: &Owner,
        ttl: Ttl,
        fences: Option<&[Fence]>,
    ) -> Result<SetRenew> {
        let op = Op::RenewSet {
            members: members.clone(),
            owner: owner.clone(),
            ttl,
            fences: fences.map(<[Fence]>::to_vec),
        };
        match self.perform(op)? {
            Outcome::RenewSet(outcome) => Ok(outcome),
            other => unexpected("renew", &other),
        }
    }

    /// See [`Op::ReleaseSet`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn release_set(
        &mut self,
        members: &Members,
        owner: &Owner,
        fences: Option<&[Fence]>,
    ) -> Result<SetRelease> {
        let op = Op::ReleaseSet {
            members: members.clone(),
            owner: owner.clone(),
            fences: fences.map(<[Fence]>::to_vec),
        };
        match self.perform(op)? {
            Outcome::ReleaseSet(outcome) => Ok(outcome),
            other => unexpected("release", &other),
        }
    }

    /// See [`Op::FinishSet`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn finish_set(
        &mut self,
        members: &Members,
        owner: &Owner,
        fences: &[Fence],
        hold: Option<Duration>,
    ) -> Result<Vec<Finish>> {
        let op = Op::FinishSet {
            members: members.clone(),
            owner: owner.clone(),
            fences: fences.to_vec(),
            hold,
        };
        match self.perform(op)? {
            Outcome::FinishSet(outcome) => Ok(outcome),
            other => unexpected("finish", &other),
        }
    }

    /// See [`Op::LeaveSet`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn leave_set(&mut self, members: &Members, owner: &Owner) -> Result<()> {
        let op = Op::LeaveSet {
            members: members.clone(),
            owner: owner.clone(),
        };
        match self.perform(op)? {
            Outcome::Left => Ok(()),
            other => unexpected("leave", &other),
        }
    }
}

impl<S: LockStore + ?Sized> Locks for S {}

/// A store that answered an operation with another's outcome: a defect of the store, or a
/// server that speaks another protocol.
fn unexpected<T>(op: &str, outcome: &Outcome) -> Result<T> {
    Err(Error::Failed(anyhow::anyhow!(
        "the store answered {op} with {outcome:?}"
    )))
}
