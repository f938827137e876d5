//! The operations on the locks as values: one type per operation, and the one enum of them
//! ([`Op`]) that crosses the seam ([`super::LockStore::carry_out`]); what each comes to is its
//! [`Operation::Output`]. A local store carries an operation out through the decision core,
//! the PostgreSQL store hands it to its connection's thread as one message, and a store that
//! decides elsewhere (a client of a distlock server) sends it on.
//!
//! A single resource is a set of one: every operation on tenures takes [`Members`], and only
//! the edges (what a command prints, what a server answers, the route a client sends to)
//! write one resource differently from a set. [`Locks::perform`] gives each operation its
//! own outcome type.

use std::time::{Duration, Instant};

use crate::engine::{Finish as Ended, Request};
use crate::lock::{
    Breaking, Event, Fence, Lock, LogQuery, Members, Owner, Queue, Resource, SetAcquire,
    SetRelease, SetRenew, Ttl,
};

use super::sqlite::turnstile;
use super::{Error, Result};
use crate::lock::GcReport;

/// An operation, and the type of what it comes to.
pub trait Operation: Into<Op> {
    type Output;

    /// The operation's outcome out of a store's answer; the answer itself when it is
    /// another operation's (a defect of the store, or a server that speaks another protocol).
    ///
    /// # Errors
    ///
    /// Another operation's outcome, given back.
    fn outcome(outcome: Outcome) -> std::result::Result<Self::Output, Outcome>;
}

/// Each operation as a variant of [`Op`], its outcome as a variant of [`Outcome`], and the
/// [`Operation`] that ties them.
macro_rules! operations {
    ($($name:ident => $outcome:ty,)*) => {
        /// One operation on a store: the seam's one call.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Op {
            $($name($name),)*
        }

        /// What an [`Op`] came to, one variant per operation.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Outcome {
            $($name($outcome),)*
        }

        $(
            impl From<$name> for Op {
                fn from(op: $name) -> Op {
                    Op::$name(op)
                }
            }

            impl Operation for $name {
                type Output = $outcome;

                fn outcome(outcome: Outcome) -> std::result::Result<$outcome, Outcome> {
                    match outcome {
                        Outcome::$name(outcome) => Ok(outcome),
                        other => Err(other),
                    }
                }
            }
        )*

        impl Op {
            /// The operation's name, for messages.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Op::$name(_) => stringify!($name),)*
                }
            }
        }
    };
}

operations! {
    Acquire => Acquisition,
    Status => crate::lock::Status,
    Renew => SetRenew,
    Release => SetRelease,
    Finish => Vec<Ended>,
    Break => Vec<Lock>,
    Leave => Left,
    List => Vec<Lock>,
    Queues => Vec<Queue>,
    Log => Vec<Event>,
    Gc => GcReport,
    Subscribe => (),
    WaitForChange => (),
    Tidy => (),
    Batch => Batched,
    Watch => Heard,
}

/// Take a tenure of every member (or extend the owner's own), or find the set busy or a
/// mismatch, all or nothing; a waiting request takes or keeps its place in every member's
/// queue (see [`crate::engine::acquire_set`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquire {
    pub members: Members,
    pub request: Request,
    /// The end of the caller's wait, while it waits: a store that can wait itself (a server's
    /// long poll) waits until then, and one that loses its connection seeks it again until
    /// then, rather than for its own budget.
    pub until: Option<Instant>,
}

/// What an [`Acquire`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquisition {
    pub outcome: SetAcquire,
    /// The earliest moment the outcome can have been decided, when the store knows one later
    /// than the call's start: a lease it granted began no earlier, so `run` times the lease
    /// from there. `None` for SQLite, whose deciding transaction may begin as soon as the call
    /// does; on PostgreSQL, the sending of the deciding transaction's last attempt, which
    /// comes after any outage the call waited through; a server's long poll is decided after
    /// the wait the server reports, up to 30 s after it was sent.
    pub decided: Option<Instant>,
    /// What the store has to tell the waiter, once: a PostgreSQL connection that does not keep
    /// its `LISTEN` (a pooler in transaction mode), so that waiting falls back to looking
    /// again.
    pub notice: Option<String>,
}

/// The live tenures, oldest first, and the live waiters, of one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub resource: Resource,
}

/// Move the owner's live lease on every member (of tenures `fences`, in the members' order,
/// when given) to now + `ttl`, all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renew {
    pub members: Members,
    pub owner: Owner,
    pub ttl: Ttl,
    pub fences: Option<Vec<Fence>>,
    /// The end of the lease as the renewer knows it: a renewal answered later is of no use,
    /// so a store whose call may take long (a server) gives up by then. A local store may
    /// ignore it.
    pub lease_end: Option<Instant>,
}

/// Remove the owner's live tenure on every member (of tenures `fences`, when given), all or
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub members: Members,
    pub owner: Owner,
    pub fences: Option<Vec<Fence>>,
}

/// `run`'s end of its tenures `fences` (in the members' order), each on its own: released, or
/// kept until its start + `hold`; a member already lost leaves the others to be ended all the
/// same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    pub members: Members,
    pub owner: Owner,
    pub fences: Vec<Fence>,
    pub hold: Option<Duration>,
    /// Until when a store that cannot be reached is tried again (the lease's end): the end is
    /// harmless twice, and a job that ended while its store was away is released once it is
    /// back.
    pub until: Option<Instant>,
}

/// An operator's `break`: remove every live tenure of `resource` (only `owner`'s, when given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub resource: Resource,
    pub owner: Option<Owner>,
    pub breaking: Breaking,
}

/// A waiter gives up its place in every member's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leave {
    pub members: Members,
    pub owner: Owner,
    /// The end of the wait (see [`Acquire::until`]).
    pub until: Option<Instant>,
}

/// What a [`Leave`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Left {
    /// The place is gone from the queue at once; else (a client of a distlock server that
    /// could not tell the server) the server gives the abandoned place up within the place's
    /// liveness, 5 s.
    pub at_once: bool,
}

/// The live locks whose resource starts with `prefix`, by resource, then fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List {
    pub prefix: String,
}

/// The live places in the queues of the resources that start with `prefix`: one queue per
/// resource with waiters, by resource, each in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    pub prefix: String,
}

/// Recorded state changes, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    pub query: LogQuery,
}

/// Delete expired lock rows and history older than `keep_history`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gc {
    pub keep_history: Duration,
}

/// Start listening for changes of the members that may let `owner` in: done once, before a
/// waiter's first attempt, so that no change committed after it is missed by
/// [`WaitForChange`]. A store that cannot listen makes waiters poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub members: Members,
    pub owner: Owner,
    /// The end of the wait (see [`Acquire::until`]).
    pub until: Option<Instant>,
}

/// Block until one of the members may have changed, or `timeout` passes: a futex wait on
/// SQLite, `LISTEN`/`NOTIFY` on PostgreSQL. Only a hint — the caller tries again either way —
/// so spurious returns are harmless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitForChange {
    pub members: Members,
    pub timeout: Duration,
    /// The end of the wait (see [`Acquire::until`]).
    pub until: Option<Instant>,
}

/// Housekeeping for a moment when nobody waits on this process — `run` asks for it once its
/// command is running, a server after each request — so that it is not paid at exit instead.
/// Best effort: it never fails, and what it cannot do now is done at a later moment or by
/// another process (a SQLite store's WAL is checkpointed and started over once it is long).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tidy;

/// Several lock operations in one write transaction, each decided in turn on what the ones
/// before it left, committed once: a server's group commit (see `super::batch`). Only
/// [`Acquire`], [`Renew`], [`Release`], [`Finish`], [`Break`] and [`Leave`] may be batched;
/// any other operation in a batch fails alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub ops: Vec<Op>,
}

/// What a [`Batch`] came to: each operation's outcome in the batch's order (a failed one, its
/// error in words), and per resource the batch changed in a way that may let a waiter in, the
/// owner first in its queue now, to be woken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batched {
    pub outcomes: Vec<std::result::Result<Outcome, String>>,
    pub wake: Vec<(Resource, Owner)>,
}

/// Sleep until another process (the command line, another server) may have changed the queue
/// or the tenures of a resource, or `timeout` passes, and say what: a server's watcher, which
/// wakes its own waiters for changes its writer did not make. Start listening at the first
/// call; what changes between two calls is heard by the second.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub timeout: Duration,
}

/// What a [`Watch`] heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// Nothing within the timeout.
    Nothing,
    /// These resources changed (PostgreSQL's `NOTIFY`).
    Resources(Vec<Resource>),
    /// These turnstile counters were rung (SQLite: a counter per resource and waiter, and
    /// one per set waiter; see [`Heard::concerns`]).
    Rung(Vec<usize>),
    /// Something may have changed, the store cannot say what.
    Anything,
}

impl Heard {
    /// Whether a waiter of `owner` on `members` may be let in by what was heard.
    pub fn concerns(&self, members: &[Resource], owner: &Owner) -> bool {
        match self {
            Heard::Nothing => false,
            Heard::Resources(changed) => members.iter().any(|r| changed.contains(r)),
            Heard::Rung(slots) => {
                let rung = |slot| slots.binary_search(&slot).is_ok();
                rung(turnstile::any_slot(owner.as_str()))
                    || members
                        .iter()
                        .any(|r| rung(turnstile::slot(r.as_str(), owner.as_str())))
            }
            Heard::Anything => true,
        }
    }
}

impl Op {
    /// Until when a store that loses its connection seeks it again for this operation,
    /// rather than for its own budget: the end of a wait, or of `run`'s lease.
    pub fn keeps_trying_until(&self) -> Option<Instant> {
        match self {
            Op::Acquire(Acquire { until, .. })
            | Op::Finish(Finish { until, .. })
            | Op::Leave(Leave { until, .. })
            | Op::Subscribe(Subscribe { until, .. })
            | Op::WaitForChange(WaitForChange { until, .. }) => *until,
            _ => None,
        }
    }
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

/// A lock store: operations in, outcomes out. Synchronous and object-safe, so commands hold a
/// `Box<dyn LockStore>` and never know which backend is behind it. Every local backend gets it
/// from [`super::Backend`], where each operation is written once and decided by [`crate::engine`]; a
/// store that decides elsewhere (a distlock server's client) or on a connection of its own
/// thread (PostgreSQL) implements it itself. [`Locks::perform`] gives each operation its own
/// outcome type.
pub trait LockStore: Send {
    /// Carries `op` out.
    ///
    /// # Errors
    ///
    /// Only store failures; every "no" (busy, not held, forbidden) is an [`Outcome`].
    fn carry_out(&mut self, op: Op) -> Result<Outcome>;
}

/// Each [`Operation`] with its own outcome type, over [`LockStore::carry_out`]: what commands,
/// `run` and the server call.
pub trait Locks: LockStore {
    /// Carries `op` out.
    ///
    /// # Errors
    ///
    /// Only store failures; every "no" (busy, not held, forbidden) is in the outcome.
    fn perform<O: Operation>(&mut self, op: O) -> Result<O::Output> {
        let op = op.into();
        let name = op.name();
        output_of::<O>(name, self.carry_out(op)?)
    }
}

/// What the operation named `name`, an `O`, came to, out of the store's `outcome`.
///
/// # Errors
///
/// Another operation's outcome: a defect of the store, or a server that speaks another
/// protocol.
pub fn output_of<O: Operation>(name: &str, outcome: Outcome) -> Result<O::Output> {
    O::outcome(outcome)
        .map_err(|other| Error::Failed(anyhow::anyhow!("the store answered {name} with {other:?}")))
}

impl<S: LockStore + ?Sized> Locks for S {}
