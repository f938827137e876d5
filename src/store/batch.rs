//! Several operations in one transaction: a server's group commit.
//!
//! A store with one writer at a time (SQLite's write lock, a PostgreSQL resource's row lock)
//! pays for each commit, not for each operation: an fsync on SQLite, round trips and a WAL
//! flush on PostgreSQL. A server that commits the operations of many callers together pays
//! that once for all of them. [`transact_batch`] does so without a second set of rules:
//!
//! - **One transaction, many decisions.** The batch is one [`Backend::transact_set`] over every
//!   resource its operations name. Its decision runs each operation's own decision (the
//!   engine's, as for the operation alone), in order, each on the states as the operations
//!   before it left them ([`State::apply`]), so an acquire that follows a release of the same
//!   resource in the batch finds it free, exactly as if the two had committed one after the
//!   other. The store then writes every change and commits once; it is durable if any
//!   operation needed it to be.
//! - **One failure undoes only itself.** An operation whose decision fails (or whose changes
//!   a store would refuse) answers its error and adds nothing to the batch; the others go on.
//!   A batch whose transaction fails as a whole (a conflict that kept coming back, a full disk)
//!   is tried again one operation at a time, each in a transaction of its own, so that each
//!   answers for itself.
//! - **Answered after the commit.** The outcomes come back only once the one commit is done:
//!   every grant is durable before anyone hears of it, as for one operation.
//!
//! Which waiters to wake comes back too: per resource the batch changed in a way that may let a
//! waiter in, the first live waiter left in its queue ([`Batched::wake`]).

use anyhow::anyhow;

use super::{Backend, DecideSet, Durability, FenceSource, Reads, Result};
use crate::engine::{self, Change, SetDecision, State};
use crate::lock::{Owner, Resource};

/// One operation of a batch, as its decision over its members.
pub struct Planned<'a, T> {
    /// The members, sorted and distinct (one resource, or a lock set's).
    pub resources: Vec<Resource>,
    pub durability: Durability,
    /// Whose rows the decision depends on: `None`, every row (an acquire, a `break`).
    pub reads: Option<Owner>,
    pub decide: Box<DecideSet<'a, T>>,
}

/// What a batch came to: each operation's outcome, in the batch's order, and the waiters to
/// wake (resource, owner) now that it committed.
pub struct Batched<T> {
    pub outcomes: Vec<Result<T>>,
    pub wake: Vec<(Resource, Owner)>,
}

/// Each operation's outcome, and the waiters to wake (resource, owner).
type Committed<T> = (Vec<Result<T>>, Vec<(Resource, Owner)>);

/// Carries out `batch` in one transaction (see the module's notes).
///
/// # Errors
///
/// The batch's failure as a whole, when the store's connection is gone ([`Backend::broken`]),
/// as one operation's would be: the store's caller tells whether it may be tried again on a
/// new connection (lost before its commit was sent) or its outcome is unknown.
pub fn transact_batch<B: Backend + ?Sized, T>(
    backend: &mut B,
    batch: &mut [Planned<'_, T>],
) -> Result<Batched<T>> {
    let resources = union(batch);
    let durability = if batch.iter().any(|p| p.durability == Durability::Durable) {
        Durability::Durable
    } else {
        Durability::Relaxed
    };
    // A batch of one owner's renewals and releases depends on that owner's rows only, as each
    // of them does; anything else on every row.
    let first = batch.first().and_then(|p| p.reads.clone());
    let reads = match &first {
        Some(owner) if batch.iter().all(|p| p.reads.as_ref() == Some(owner)) => Reads::Owner(owner),
        _ => Reads::All,
    };
    let together = backend.transact_set(&resources, durability, reads, &mut |states, fresh| {
        Ok(decide_in_turn(&resources, states, batch, fresh))
    });
    match together {
        Ok((outcomes, wake)) => Ok(Batched { outcomes, wake }),
        Err(err) if backend.broken() => Err(err),
        Err(_) => Ok(one_at_a_time(backend, batch)),
    }
}

/// Every resource the operations of `batch` name, sorted and distinct.
fn union<T>(batch: &[Planned<'_, T>]) -> Vec<Resource> {
    let mut resources: Vec<Resource> = batch.iter().flat_map(|p| p.resources.clone()).collect();
    resources.sort();
    resources.dedup();
    resources
}

/// The batch's decision over the states of `resources` (sorted): each operation's own, in
/// turn, on the states the ones before it left.
fn decide_in_turn<T>(
    resources: &[Resource],
    states: &[State],
    batch: &mut [Planned<'_, T>],
    fresh: &mut FenceSource<'_>,
) -> SetDecision<Committed<T>> {
    let mut states = states.to_vec();
    let mut changes: Vec<Vec<Change>> = vec![Vec::new(); resources.len()];
    let mut outcomes = Vec::with_capacity(batch.len());
    for planned in batch.iter_mut() {
        // Members are among `resources`, which are sorted: found by binary search.
        let at: Vec<usize> = planned
            .resources
            .iter()
            .filter_map(|r| resources.binary_search(r).ok())
            .collect();
        let mine: Vec<State> = at.iter().map(|&i| states[i].clone()).collect();
        let decided = (planned.decide)(&mine, fresh).and_then(|decision| {
            let mut after = mine;
            for (state, member_changes) in after.iter_mut().zip(&decision.changes) {
                state.apply(member_changes).map_err(|why| anyhow!(why))?;
            }
            Ok((decision, after))
        });
        outcomes.push(match decided {
            Err(err) => Err(err.into()),
            Ok((decision, after)) => {
                for ((&i, state), member_changes) in at.iter().zip(after).zip(decision.changes) {
                    states[i] = state;
                    changes[i].extend(member_changes);
                }
                Ok(decision.outcome)
            }
        });
    }
    let wake = resources
        .iter()
        .zip(&states)
        .zip(&changes)
        .filter(|(_, changed)| engine::wakes_waiters(changed))
        .filter_map(|((resource, state), _)| {
            let head = state.waiting().first().map(|w| w.owner.clone())?;
            Some((resource.clone(), head))
        })
        .collect();
    SetDecision {
        outcome: (outcomes, wake),
        changes,
    }
}

/// Each operation of `batch` in a transaction of its own: after a batch whose transaction
/// failed as a whole, so that each answers for itself.
fn one_at_a_time<B: Backend + ?Sized, T>(
    backend: &mut B,
    batch: &mut [Planned<'_, T>],
) -> Batched<T> {
    let mut wake = Vec::new();
    let outcomes = batch
        .iter_mut()
        .map(|planned| {
            let reads = match &planned.reads {
                Some(owner) => Reads::Owner(owner),
                None => Reads::All,
            };
            let resources = planned.resources.clone();
            backend.transact_set(
                &resources,
                planned.durability,
                reads,
                &mut |states, fresh| {
                    let decision = (planned.decide)(states, fresh)?;
                    for ((resource, state), member_changes) in
                        resources.iter().zip(states).zip(&decision.changes)
                    {
                        if engine::wakes_waiters(member_changes) {
                            let mut after = state.clone();
                            if after.apply(member_changes).is_ok() {
                                if let Some(head) = after.waiting().first() {
                                    wake.push((resource.clone(), head.owner.clone()));
                                }
                            }
                        }
                    }
                    Ok(decision)
                },
            )
        })
        .collect();
    Batched { outcomes, wake }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;
    use crate::engine::Request;
    use crate::lock::{LogQuery, Mode, Ttl};
    use crate::store::{Clock, Locks, SqliteStore};

    /// A clock that stands still unless moved.
    #[derive(Clone)]
    struct Still(Arc<AtomicI64>);

    impl Clock for Still {
        fn now(&self) -> crate::lock::Timestamp {
            crate::lock::Timestamp(self.0.load(Ordering::SeqCst))
        }
    }

    fn store(dir: &tempfile::TempDir, name: &str, clock: &Still) -> SqliteStore {
        SqliteStore::open(&dir.path().join(name), Box::new(clock.clone())).unwrap()
    }

    /// One operation of a random history: on resource `r`, by owner `o`.
    #[derive(Debug, Clone)]
    enum Step {
        Acquire {
            r: usize,
            o: usize,
            waits: bool,
            shared: bool,
        },
        Renew {
            r: usize,
            o: usize,
        },
        Release {
            r: usize,
            o: usize,
        },
        Leave {
            r: usize,
            o: usize,
        },
        /// A lock set of resources 0 and 1.
        AcquirePair {
            o: usize,
        },
    }

    fn res(r: usize) -> Resource {
        Resource::parse(&format!("r{r}")).unwrap()
    }

    fn own(o: usize) -> Owner {
        Owner::parse(&format!("o{o}")).unwrap()
    }

    fn request(o: usize, waits: bool, shared: bool) -> Request {
        Request {
            waits,
            mode: if shared {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            ..Request::exclusive(own(o), Ttl::from_secs(30).unwrap())
        }
    }

    /// `step` as a batch's operation, its outcome in words.
    fn planned(step: &Step) -> Planned<'static, String> {
        let ttl = Ttl::from_secs(30).unwrap();
        match step.clone() {
            Step::Acquire {
                r,
                o,
                waits,
                shared,
            } => Planned {
                resources: vec![res(r)],
                durability: Durability::Durable,
                reads: None,
                decide: Box::new(move |states, fresh| {
                    let d =
                        engine::acquire(&res(r), &states[0], &request(o, waits, shared), fresh)?;
                    Ok(SetDecision {
                        outcome: format!("{:?}", d.outcome),
                        changes: vec![d.changes],
                    })
                }),
            },
            Step::Renew { r, o } => Planned {
                resources: vec![res(r)],
                durability: Durability::Durable,
                reads: Some(own(o)),
                decide: Box::new(move |states, _| {
                    let d = engine::renew(&res(r), &states[0], &own(o), ttl, None);
                    Ok(SetDecision {
                        outcome: format!("{:?}", d.outcome),
                        changes: vec![d.changes],
                    })
                }),
            },
            Step::Release { r, o } => Planned {
                resources: vec![res(r)],
                durability: Durability::Relaxed,
                reads: Some(own(o)),
                decide: Box::new(move |states, _| {
                    let d = engine::release(&res(r), &states[0], &own(o), None);
                    Ok(SetDecision {
                        outcome: format!("{:?}", d.outcome),
                        changes: vec![d.changes],
                    })
                }),
            },
            Step::Leave { r, o } => Planned {
                resources: vec![res(r)],
                durability: Durability::Relaxed,
                reads: Some(own(o)),
                decide: Box::new(move |states, _| {
                    let d = engine::leave(&states[0], &own(o));
                    Ok(SetDecision {
                        outcome: format!("{:?}", d.outcome),
                        changes: vec![d.changes],
                    })
                }),
            },
            Step::AcquirePair { o } => {
                let members = crate::lock::Members::new(vec![res(0), res(1)]).unwrap();
                Planned {
                    resources: members.as_slice().to_vec(),
                    durability: Durability::Durable,
                    reads: None,
                    decide: Box::new(move |states, fresh| {
                        let d = engine::acquire_set(
                            members.as_slice(),
                            states,
                            &request(o, true, false),
                            fresh,
                        )?;
                        Ok(SetDecision {
                            outcome: format!("{:?}", d.outcome),
                            changes: d.changes,
                        })
                    }),
                }
            }
        }
    }

    fn random_step(rng: &mut fastrand::Rng) -> Step {
        let (r, o) = (rng.usize(0..3), rng.usize(0..4));
        match rng.u8(0..10) {
            0..=3 => Step::Acquire {
                r,
                o,
                waits: rng.bool(),
                shared: rng.u8(0..4) == 0,
            },
            4 => Step::Renew { r, o },
            5..=7 => Step::Release { r, o },
            8 => Step::Leave { r, o },
            _ => Step::AcquirePair { o },
        }
    }

    /// Everything a store holds that a reader can see: each resource's rows and its history.
    /// (Each resource's history keeps the order of its operations; events of different
    /// resources that one batch wrote share the commit's time, and `log` may list them in
    /// either order, as it may for events of separate commits in one millisecond.)
    fn contents(store: &mut SqliteStore) -> String {
        let mut text = String::new();
        for r in 0..3 {
            let state = Backend::read(store, &res(r)).unwrap();
            let mut live: Vec<String> = state.live().iter().map(|l| format!("{l:?}")).collect();
            live.sort();
            let queue: Vec<String> = state
                .waiting()
                .iter()
                .map(|w| w.owner.to_string())
                .collect();
            text.push_str(&format!("r{r}: {live:?} queue {queue:?}\n"));
            let query = LogQuery {
                resource: Some(res(r)),
                ..LogQuery::default()
            };
            for event in store.perform(crate::store::op::Log { query }).unwrap() {
                text.push_str(&format!("{event:?}\n"));
            }
        }
        text
    }

    #[test]
    fn a_batch_comes_to_what_its_operations_come_to_one_after_another() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Still(Arc::new(AtomicI64::new(1_000_000)));
        for seed in 0..30_u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut alone = store(&dir, &format!("alone-{seed}.db"), &clock);
            let mut together = store(&dir, &format!("together-{seed}.db"), &clock);
            for round in 0..4 {
                let steps: Vec<Step> = (0..rng.usize(1..24))
                    .map(|_| random_step(&mut rng))
                    .collect();
                let one_by_one: Vec<String> = steps
                    .iter()
                    .map(|step| {
                        let mut planned = [planned(step)];
                        let mut batched = transact_batch(&mut alone, &mut planned)
                            .expect("a SQLite store's connection is never broken");
                        batched.outcomes.remove(0).unwrap()
                    })
                    .collect();
                let mut batch: Vec<Planned<'_, String>> = steps.iter().map(planned).collect();
                let batched = transact_batch(&mut together, &mut batch)
                    .expect("a SQLite store's connection is never broken");
                let batched: Vec<String> =
                    batched.outcomes.into_iter().map(Result::unwrap).collect();
                assert_eq!(batched, one_by_one, "seed {seed}, round {round}: {steps:?}");
                assert_eq!(
                    contents(&mut together),
                    contents(&mut alone),
                    "seed {seed}, round {round}: {steps:?}"
                );
                clock.0.fetch_add(7_000, Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn an_operation_that_fails_fails_alone_and_the_others_commit() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Still(Arc::new(AtomicI64::new(1_000_000)));
        let mut store = store(&dir, "locks.db", &clock);
        let failing = Planned {
            resources: vec![res(1)],
            durability: Durability::Durable,
            reads: None,
            decide: Box::new(|_: &[State], _: &mut FenceSource<'_>| {
                Err::<SetDecision<String>, _>(anyhow!("this operation cannot be decided"))
            }),
        };
        // A decision whose changes a store would refuse: an update of a tenure that is not
        // there.
        let refused = Planned {
            resources: vec![res(2)],
            durability: Durability::Durable,
            reads: None,
            decide: Box::new(|states: &[State], _: &mut FenceSource<'_>| {
                let mut ghost = states[0].clone();
                ghost.leases.clear();
                let tenure = engine::Tenure {
                    owner: own(9),
                    fence: crate::lock::Fence(999),
                    acquired_at: states[0].now,
                    expires_at: states[0].now,
                    mode: Mode::Exclusive,
                    note: None,
                    guarded: false,
                };
                Ok(SetDecision {
                    outcome: "ghost".to_owned(),
                    changes: vec![vec![Change::Update(tenure)]],
                })
            }),
        };
        let mut batch = vec![
            planned(&Step::Acquire {
                r: 0,
                o: 0,
                waits: false,
                shared: false,
            }),
            failing,
            refused,
            planned(&Step::Acquire {
                r: 1,
                o: 1,
                waits: false,
                shared: false,
            }),
        ];
        let batched = transact_batch(&mut store, &mut batch)
            .expect("a SQLite store's connection is never broken");
        let words: Vec<String> = batched
            .outcomes
            .iter()
            .map(|o| match o {
                Ok(text) => text.split(' ').next().unwrap_or_default().to_owned(),
                Err(err) => format!("error: {err:#}"),
            })
            .collect();
        assert_eq!(words[0], "Acquired");
        assert_eq!(words[1], "error: this operation cannot be decided");
        assert!(
            words[2].starts_with("error: no row for Update"),
            "{words:?}"
        );
        assert_eq!(words[3], "Acquired");
        // Both grants committed, and nothing of the refused ones.
        for (r, owner) in [(0, "o0"), (1, "o1")] {
            let status = store
                .perform(crate::store::op::Status { resource: res(r) })
                .unwrap();
            assert_eq!(status.locks.len(), 1, "r{r}");
            assert_eq!(status.locks[0].owner.as_str(), owner);
        }
        assert!(
            store
                .perform(crate::store::op::Status { resource: res(2) })
                .unwrap()
                .locks
                .is_empty()
        );
    }

    #[test]
    fn a_release_in_a_batch_wakes_the_waiter_it_lets_in() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Still(Arc::new(AtomicI64::new(1_000_000)));
        let mut store = store(&dir, "locks.db", &clock);
        let mut first = vec![
            planned(&Step::Acquire {
                r: 0,
                o: 0,
                waits: false,
                shared: false,
            }),
            planned(&Step::Acquire {
                r: 0,
                o: 1,
                waits: true,
                shared: false,
            }),
        ];
        let batched = transact_batch(&mut store, &mut first)
            .expect("a SQLite store's connection is never broken");
        assert!(batched.wake.is_empty(), "a grant wakes nobody");
        let mut then = vec![planned(&Step::Release { r: 0, o: 0 })];
        let batched = transact_batch(&mut store, &mut then)
            .expect("a SQLite store's connection is never broken");
        assert_eq!(batched.wake, vec![(res(0), own(1))]);
    }
}
