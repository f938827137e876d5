//! What a local store provides ([`Backend`]: reading a resource's state and applying the
//! core's changes in one transaction, and its read-only queries), and every operation written
//! once over it: each is one transaction on its members, decided by [`crate::engine`].

use std::time::Duration;

use super::Result;
use super::op::Heard;
use crate::engine::{Change, Decision, SetDecision, State};
use crate::lock::{Event, Fence, GcReport, Lock, LogQuery, Owner, Place, Resource, Timestamp};

/// Hands out a fresh fence inside the deciding transaction.
pub type FenceSource<'a> = dyn FnMut() -> anyhow::Result<Fence> + 'a;

/// The core's choice for one resource, from its state (see [`Backend::transact`]).
pub type Decide<'a, T> =
    dyn FnMut(&State, &mut FenceSource<'_>) -> anyhow::Result<Decision<T>> + 'a;

/// The core's choice for the members of a set, from their states in the members' order (see
/// [`Backend::transact_set`]).
pub type DecideSet<'a, T> =
    dyn FnMut(&[State], &mut FenceSource<'_>) -> anyhow::Result<SetDecision<T>> + 'a;

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

pub use super::op::Durability;

impl<T> SetDecision<T> {
    pub(super) fn writes(&self) -> bool {
        self.changes.iter().any(|changes| !changes.is_empty())
    }

    pub(super) fn is_durable(&self) -> bool {
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

    /// [`Backend::transact_set`] over one resource, for an operation that only ever names one
    /// (`break`).
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

    /// The live locks for [`super::op::List`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn scan(&mut self, prefix: &str) -> Result<Vec<Lock>>;

    /// The live places for [`super::op::Queues`], by resource, then arrival.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn places(&mut self, prefix: &str) -> Result<Vec<(Resource, Place)>>;

    /// The history for [`super::op::Log`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn history(&mut self, query: &LogQuery) -> Result<Vec<Event>>;

    /// The deletions of [`super::op::Gc`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn prune(&mut self, keep_history: Duration) -> Result<GcReport>;

    /// See [`super::op::Subscribe`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn subscribe(&mut self, resources: &[Resource], owner: &Owner) -> Result<()>;

    /// See [`super::op::WaitForChange`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn wait_for_change(&mut self, resources: &[Resource], timeout: Duration) -> Result<()>;

    /// See [`super::op::Tidy`]; nothing by default (PostgreSQL has nothing to do).
    fn tidy(&mut self) {}

    /// Whether the connection is known to be gone (a PostgreSQL server that closed it): a
    /// batch that failed as a whole then fails as a whole, so that the caller finds a
    /// connection again and tries it again, rather than each operation failing on it alone.
    fn broken(&self) -> bool {
        false
    }

    /// See [`super::op::Watch`]; by default a sleep of `timeout`, after which anything may have
    /// changed.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn watch(&mut self, timeout: Duration) -> Result<Heard> {
        std::thread::sleep(timeout);
        Ok(Heard::Anything)
    }

    /// What the store has to tell a waiter since it last asked (see
    /// [`Acquisition::notice`]); nothing by default.
    fn notice(&mut self) -> Option<String> {
        None
    }
}

/// The state of a resource in a store that holds no locks at all, now.
pub(super) fn nothing() -> State {
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
pub(super) fn decide_on_nothing<T>(
    resources: &[Resource],
    decide: &mut DecideSet<'_, T>,
    why: &str,
) -> anyhow::Result<T> {
    let mut no_fence = || anyhow::bail!("{why}");
    let decision = decide(&vec![nothing(); resources.len()], &mut no_fence)?;
    if decision.writes() {
        anyhow::bail!("{why}");
    }
    Ok(decision.outcome)
}
