//! Where locks live. [`LockStore`] is the one interface every command talks to; each backend
//! (the embedded SQLite file, PostgreSQL) implements it with the same guarantees:
//!
//! - every operation is one atomic transaction on one resource or on a set of them, serialised
//!   per resource and guarded by `UNIQUE(resource)`; its decision is [`crate::engine`]'s, the
//!   same on every store;
//! - a lock is live while `now < expires_at`, by the store's own clock;
//! - fences strictly increase with every new tenure and are never reused, not after release,
//!   expiry, `gc` or a crash;
//! - every state change is recorded in the history in the same transaction.
//!
//! Where a store is ([`Location`], from `--db`) is `location`'s; opening it for what a command
//! does ([`open()`], [`open_existing`], [`open_read_only`], [`reopen`]) is `open`'s; whether a
//! SQLite store would lie on a network filesystem, which `open` refuses, is `network_fs`'s.

mod batch;
mod location;
mod network_fs;
mod op;
mod open;
mod postgres;
mod remote;
mod sqlite;

use std::time::Duration;

use anyhow::Result;

use crate::engine::{self, Change, Decision, SetDecision, State};
use crate::lock::{
    Event, EventKind, Eviction, Fence, Lock, LogQuery, Mode, Owner, Remark, Resource, Timestamp,
    TokenName,
};

pub use location::{Folders, Location, NetworkFs};
pub use op::{Durability, Locks, Op, Outcome};
pub use open::{Vanished, open, open_existing, open_read_only, reopen};
pub use postgres::PostgresStore;
pub(crate) use remote::certificate_validity;
pub use remote::{NotAllowed, RemoteStore, ServerUrl, authorization as server_authorization};
pub use sqlite::SqliteStore;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 5;

/// Rows deleted per `gc` transaction, so `gc` never holds a write lock for long.
const GC_BATCH: i64 = 1000;

/// A lock store. Synchronous and object-safe, so commands hold a `Box<dyn LockStore>` and never
/// know which backend is behind it. A store does one thing: it carries out an [`Op`]
/// ([`Locks`] gives each one a typed method). Every local backend gets it from [`Backend`]:
/// the operations are written once, below, and their decisions are [`engine`]'s.
pub trait LockStore: Send {
    /// Carries out `op`.
    ///
    /// # Errors
    ///
    /// Only store failures; every "no" (busy, not held, forbidden) is an [`Outcome`].
    fn perform(&mut self, op: Op) -> Result<Outcome>;

    /// Housekeeping for a moment when nobody waits on this process — `run` calls it once its
    /// command is running — so that it is not paid at exit instead. Best effort: it never
    /// fails, and what it cannot do now is done at a later moment or by another process.
    /// Nothing by default (PostgreSQL has nothing to do).
    fn tidy(&mut self) {}

    /// A store whose connection can be lost (PostgreSQL) seeks it again, and tries the call
    /// again, for the connect timeout of each call; with a `deadline`, until then instead if
    /// that is later (a waiter's `--wait`, `run`'s lease). `None` restores the default.
    /// Nothing for a store without a connection.
    fn keep_trying_until(&mut self, _deadline: Option<std::time::Instant>) {}

    /// Whether the last waiter that left the queue ([`Op::Leave`]) is gone from it at once; a
    /// client of a distlock server that could not tell the server is not (the server gives an
    /// abandoned place up within the place's liveness, 5 s).
    fn leaves_at_once(&self) -> bool {
        true
    }

    /// The earliest moment the last [`Op::Acquire`]'s answer can have been decided, when the
    /// store knows one later than the call's start: a lease that call granted began no
    /// earlier, so `run` times the lease from there. `None` for a local store, whose deciding
    /// transaction may begin as soon as the call does; a server's long poll is decided after
    /// the wait the server reports, up to 30 s after it was sent.
    fn decided_no_earlier_than(&self) -> Option<std::time::Instant> {
        None
    }
}

/// Hands out a fresh fence inside the deciding transaction.
pub type FenceSource<'a> = dyn FnMut() -> Result<Fence> + 'a;

/// The core's choice for one resource, from its state (see [`Backend::transact`]).
pub type Decide<'a, T> = dyn FnMut(&State, &mut FenceSource<'_>) -> Result<Decision<T>> + 'a;

/// The core's choice for the members of a set, from their states in the members' order (see
/// [`Backend::transact_set`]).
pub type DecideSet<'a, T> =
    dyn FnMut(&[State], &mut FenceSource<'_>) -> Result<SetDecision<T>> + 'a;

/// What a decision depends on, besides the store's clock: every row of its resources (an
/// acquire, a `break`), or only the rows of the owner it acts for (a renewal, a release or a
/// waiter leaving, which other owners' changes cannot make wrong). A store that checks a
/// decision at commit time rather than locking first (PostgreSQL) checks only these rows, so
/// that the renewals of many holders of one resource never invalidate each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads<'a> {
    All,
    Owner(&'a Owner),
}

impl<T> SetDecision<T> {
    fn writes(&self) -> bool {
        self.changes.iter().any(|changes| !changes.is_empty())
    }

    fn is_durable(&self) -> bool {
        self.changes.iter().flatten().any(Change::is_durable)
    }
}

/// What a backend provides: reading a resource's state and applying the core's changes in one
/// transaction, plus the read-only queries, which are plain SQL of its own.
pub trait Backend: Send {
    /// One write transaction on the members of a set, `resources`, sorted and distinct: reads
    /// their rows and the store's "now" under the store's per-resource serialisation, lets
    /// `decide` choose, writes the changes it returns for each member in order, and commits —
    /// every member's changes or none. Two transactions over overlapping sets never deadlock
    /// (each store takes its members in their order), and a transaction holds no lock of the
    /// store's while `decide` runs on a client of a remote one. `decide` may run again if the
    /// store retries the transaction. [`Durability::Relaxed`] lets the store skip flushing
    /// this commit to stable storage.
    ///
    /// # Errors
    ///
    /// Store failures, and whatever `decide` returns.
    fn transact_set<T>(
        &mut self,
        resources: &[Resource],
        durability: Durability,
        reads: Reads<'_>,
        decide: &mut DecideSet<'_, T>,
    ) -> Result<T>;

    /// [`Backend::transact_set`] over one resource.
    ///
    /// # Errors
    ///
    /// Store failures, and whatever `decide` returns.
    fn transact<T>(
        &mut self,
        resource: &Resource,
        durability: Durability,
        reads: Reads<'_>,
        decide: &mut Decide<'_, T>,
    ) -> Result<T> {
        let members = std::slice::from_ref(resource);
        self.transact_set(members, durability, reads, &mut |states, fresh| {
            let decision = decide(&states[0], fresh)?;
            Ok(SetDecision {
                outcome: decision.outcome,
                changes: vec![decision.changes],
            })
        })
    }

    /// The resource's rows and the store's "now", without writing.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn read(&mut self, resource: &Resource) -> Result<State>;

    /// The live locks for [`Op::List`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn scan(&mut self, prefix: &str) -> Result<Vec<Lock>>;

    /// The history for [`Op::Log`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn history(&mut self, query: &LogQuery) -> Result<Vec<Event>>;

    /// The deletions of [`Op::Gc`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn prune(&mut self, keep_history: Duration) -> Result<GcReport>;

    /// See [`Op::Subscribe`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn subscribe(&mut self, resources: &[Resource], owner: &Owner) -> Result<()>;

    /// See [`Op::WaitForChange`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn wait_for_change(&mut self, resources: &[Resource], timeout: Duration) -> Result<()>;

    /// See [`LockStore::tidy`]; nothing by default.
    fn tidy(&mut self) {}
}

impl<B: Backend> LockStore for B {
    fn perform(&mut self, op: Op) -> Result<Outcome> {
        use Durability::{Durable, Relaxed};
        Ok(match op {
            Op::Acquire { resource, request } => Outcome::Acquire(self.transact(
                &resource,
                Durable,
                Reads::All,
                &mut |state, fresh| engine::acquire(&resource, state, &request, &mut *fresh),
            )?),
            Op::Status { resource } => {
                Outcome::Status(engine::status(&resource, &self.read(&resource)?))
            }
            Op::Renew {
                resource,
                owner,
                ttl,
                fence,
            } => Outcome::Renew(self.transact(
                &resource,
                Durable,
                Reads::Owner(&owner),
                &mut |state, _| Ok(engine::renew(&resource, state, &owner, ttl, fence)),
            )?),
            // A release need not survive power loss (see `Durability`).
            Op::Release {
                resource,
                owner,
                fence,
            } => Outcome::Release(self.transact(
                &resource,
                Relaxed,
                Reads::Owner(&owner),
                &mut |state, _| Ok(engine::release(&resource, state, &owner, fence)),
            )?),
            // A kept lease must survive power loss (the hold is what stops a second host); a
            // release need not.
            Op::Finish {
                resource,
                owner,
                fence,
                hold,
            } => {
                let durability = if hold.is_some() { Durable } else { Relaxed };
                Outcome::Finish(self.transact(
                    &resource,
                    durability,
                    Reads::Owner(&owner),
                    &mut |state, _| Ok(engine::finish(&resource, state, &owner, fence, hold)),
                )?)
            }
            Op::Break {
                resource,
                owner,
                eviction,
            } => Outcome::Break(self.transact(
                &resource,
                Durable,
                Reads::All,
                &mut |state, _| Ok(engine::evict(&resource, state, owner.as_ref(), &eviction)),
            )?),
            Op::Leave { resource, owner } => {
                self.transact(&resource, Relaxed, Reads::Owner(&owner), &mut |state, _| {
                    Ok(engine::leave(state, &owner))
                })?;
                Outcome::Left
            }
            Op::List { prefix } => Outcome::List(self.scan(&prefix)?),
            Op::Log { query } => Outcome::Log(self.history(&query)?),
            Op::Gc { keep_history } => Outcome::Gc(self.prune(keep_history)?),
            Op::Subscribe { resources, owner } => {
                Backend::subscribe(self, &resources, &owner)?;
                Outcome::Subscribed
            }
            Op::WaitForChange { resources, timeout } => {
                Backend::wait_for_change(self, &resources, timeout)?;
                Outcome::Woken
            }
            Op::AcquireSet { members, request } => {
                let members = members.as_slice();
                Outcome::AcquireSet(self.transact_set(
                    members,
                    Durable,
                    Reads::All,
                    &mut |states, fresh| engine::acquire_set(members, states, &request, fresh),
                )?)
            }
            Op::RenewSet {
                members,
                owner,
                ttl,
                fences,
            } => {
                let members = members.as_slice();
                Outcome::RenewSet(self.transact_set(
                    members,
                    Durable,
                    Reads::Owner(&owner),
                    &mut |states, _| {
                        Ok(engine::renew_set(
                            members,
                            states,
                            &owner,
                            ttl,
                            fences.as_deref(),
                        ))
                    },
                )?)
            }
            Op::ReleaseSet {
                members,
                owner,
                fences,
            } => {
                let members = members.as_slice();
                Outcome::ReleaseSet(self.transact_set(
                    members,
                    Relaxed,
                    Reads::Owner(&owner),
                    &mut |states, _| {
                        Ok(engine::release_set(
                            members,
                            states,
                            &owner,
                            fences.as_deref(),
                        ))
                    },
                )?)
            }
            Op::FinishSet {
                members,
                owner,
                fences,
                hold,
            } => {
                let members = members.as_slice();
                let durability = if hold.is_some() { Durable } else { Relaxed };
                Outcome::FinishSet(self.transact_set(
                    members,
                    durability,
                    Reads::Owner(&owner),
                    &mut |states, _| Ok(engine::finish_set(members, states, &owner, &fences, hold)),
                )?)
            }
            Op::LeaveSet { members, owner } => {
                self.transact_set(
                    members.as_slice(),
                    Relaxed,
                    Reads::Owner(&owner),
                    &mut |states, _| Ok(engine::leave_set(states, &owner)),
                )?;
                Outcome::Left
            }
        })
    }

    fn tidy(&mut self) {
        Backend::tidy(self);
    }
}

/// The state of a resource in a store that holds no locks at all, now.
fn nothing() -> State {
    State {
        now: Timestamp::now(),
        ..State::default()
    }
}

/// A transaction on a store that holds no locks at all and must stay so (a store that does not
/// exist, a database without a distlock schema): `decide` sees every member free, and a
/// decision that would write fails with `why`.
///
/// # Errors
///
/// `why`, and whatever `decide` returns.
fn decide_on_nothing<T>(
    resources: &[Resource],
    decide: &mut DecideSet<'_, T>,
    why: &str,
) -> Result<T> {
    let mut no_fence = || anyhow::bail!("{why}");
    let decision = decide(&vec![nothing(); resources.len()], &mut no_fence)?;
    if decision.writes() {
        anyhow::bail!("{why}");
    }
    Ok(decision.outcome)
}

/// A history row as both stores read it back.
struct HistoryRow<'a> {
    at: Timestamp,
    resource: &'a str,
    owner: &'a str,
    /// The token column (empty: none).
    token: &'a str,
    fence: Fence,
    kind: &'a str,
    previous_owner: Option<&'a str>,
    mode: &'a str,
    lim: Option<i64>,
    note: Option<&'a str>,
    /// Who broke the tenure, and why (`broken` events).
    by: Option<&'a str>,
    reason: Option<&'a str>,
    /// The operator's token that broke it through a server (`broken` events; NULL: none).
    by_token: Option<&'a str>,
}

/// # Errors
///
/// An event kind or mode this build does not know (the store was written by something else).
fn event(row: &HistoryRow<'_>) -> Result<Event> {
    let Some(kind) = EventKind::parse(row.kind) else {
        anyhow::bail!("the history holds an unknown event kind {:?}", row.kind);
    };
    let owner = Owner::from_store(row.owner, row.token);
    Ok(Event {
        at: row.at,
        resource: Resource::from_store(row.resource),
        token: owner.token().cloned(),
        owner,
        fence: row.fence,
        event: kind,
        previous_owner: row.previous_owner.map(|name| Owner::from_store(name, "")),
        mode: mode_of(row.mode, row.lim)?,
        note: row.note.map(Remark::from_store),
        broken: row.by.zip(row.reason).map(|(by, reason)| Eviction {
            by: Remark::from_store(by),
            by_token: row.by_token.map(TokenName::from_store),
            reason: Remark::from_store(reason),
        }),
    })
}

/// How both stores write a mode: a name, and a semaphore's N.
fn mode_columns(mode: Mode) -> (&'static str, Option<i64>) {
    match mode {
        Mode::Exclusive => ("exclusive", None),
        Mode::Shared => ("shared", None),
        Mode::Semaphore(n) => ("semaphore", Some(i64::from(n))),
    }
}

/// Reads back what [`mode_columns`] wrote.
///
/// # Errors
///
/// A mode this build does not know.
fn mode_of(name: &str, lim: Option<i64>) -> Result<Mode> {
    match (name, lim.map(u32::try_from)) {
        ("exclusive", _) => Ok(Mode::Exclusive),
        ("shared", _) => Ok(Mode::Shared),
        ("semaphore", Some(Ok(n))) if n >= 2 => Ok(Mode::Semaphore(n)),
        _ => anyhow::bail!("the store holds an unknown lock mode {name:?} ({lim:?})"),
    }
}

/// The message for a store written by a newer distlock, the same on every backend.
fn newer_schema(version: i64) -> String {
    format!(
        "it was written by a newer distlock (schema version {version}; this one understands up \
         to {SCHEMA_VERSION}): upgrade distlock"
    )
}

/// What `gc` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GcReport {
    pub expired_locks: u64,
    pub history_events: u64,
}

/// The store's notion of now. The CLI uses the host's clock; tests drive a manual one.
pub trait Clock: Send {
    fn now(&self) -> crate::lock::Timestamp;
}

/// The host's wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> crate::lock::Timestamp {
        crate::lock::Timestamp::now()
    }
}
