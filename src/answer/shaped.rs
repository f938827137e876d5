//! The one place where a lock operation's outcome takes one of its two shapes: a single
//! resource's answer (`{"acquired":true,"lock":{…}}`) or a lock set's
//! (`{"acquired":true,"locks":[…]}`). Below the edges a single resource is a set of one, with
//! the set's outcome; the edges choose the shape — the commands by how many resources they were
//! given ([`Members::shape`]), the server by its route — and a server's client reads the
//! answer of the route it sent to back into the set's outcome here.

use serde::{Serialize, Serializer};

use super::{
    AcquireAnswer, Answer, ReleaseAnswer, RenewAnswer, SetAcquireAnswer, SetReleaseAnswer,
    SetRenewAnswer,
};
use crate::exit::Exit;
use crate::lock::{
    Grant, Members, Mode, SetAcquire, SetRelease, SetRenew, Shape, released_one, renewed_one,
};

/// An answer in one of its two shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shaped<One, Set> {
    One(One),
    Set(Set),
}

/// `acquire`'s answer, one resource's or a set's.
pub type ShapedAcquire = Shaped<AcquireAnswer, SetAcquireAnswer>;

/// `renew`'s answer, one resource's or a set's.
pub type ShapedRenew = Shaped<RenewAnswer, SetRenewAnswer>;

/// `release`'s answer, one resource's or a set's.
pub type ShapedRelease = Shaped<ReleaseAnswer, SetReleaseAnswer>;

impl<One: Serialize, Set: Serialize> Serialize for Shaped<One, Set> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Shaped::One(answer) => answer.serialize(serializer),
            Shaped::Set(answer) => answer.serialize(serializer),
        }
    }
}

impl<One: Answer, Set: Answer> Answer for Shaped<One, Set> {
    fn exit(&self) -> Exit {
        match self {
            Shaped::One(answer) => answer.exit(),
            Shaped::Set(answer) => answer.exit(),
        }
    }

    fn text(&self) -> String {
        match self {
            Shaped::One(answer) => answer.text(),
            Shaped::Set(answer) => answer.text(),
        }
    }
}

impl ShapedAcquire {
    /// The answer of `shape` to a request for `asked` on `members` that came out as `outcome`.
    pub fn new(shape: Shape, members: &Members, outcome: &SetAcquire, asked: Mode) -> Self {
        match shape {
            Shape::One => {
                let one = outcome.clone().into_one();
                Shaped::One(AcquireAnswer::new(members.first(), &one, asked))
            }
            Shape::Set => Shaped::Set(SetAcquireAnswer::new(members, outcome, asked)),
        }
    }

    /// The outcome this answer says, each tenure granted as `tenures` says (in the members'
    /// order): what a server's client reads back.
    pub fn outcome(self, tenures: Vec<Grant>) -> SetAcquire {
        match self {
            Shaped::One(AcquireAnswer::Acquired(acquired)) => SetAcquire::Acquired {
                locks: vec![acquired.lock],
                tenures,
            },
            Shaped::One(AcquireAnswer::Busy(busy)) => SetAcquire::Busy {
                blocked: vec![busy.member],
            },
            Shaped::One(AcquireAnswer::Mismatch(mismatch))
            | Shaped::Set(SetAcquireAnswer::Mismatch(mismatch)) => SetAcquire::Mismatch {
                resource: mismatch.resource,
                holders: mismatch.holders,
            },
            Shaped::Set(SetAcquireAnswer::Acquired(acquired)) => SetAcquire::Acquired {
                locks: acquired.locks,
                tenures,
            },
            Shaped::Set(SetAcquireAnswer::Busy(busy)) => SetAcquire::Busy {
                blocked: busy.blocked,
            },
        }
    }
}

impl ShapedRenew {
    /// The answer of `shape` to a renewal of `members` that came out as `outcome`.
    pub fn new(shape: Shape, members: &Members, outcome: &SetRenew) -> Self {
        match shape {
            Shape::One => {
                let one = renewed_one(outcome.clone());
                Shaped::One(RenewAnswer::new(members.first(), &one))
            }
            Shape::Set => Shaped::Set(SetRenewAnswer::new(outcome)),
        }
    }
}

impl ShapedRelease {
    /// The answer of `shape` to a release of `members` that came out as `outcome`.
    pub fn new(shape: Shape, members: &Members, outcome: &SetRelease) -> Self {
        match shape {
            Shape::One => {
                let one = released_one(outcome.clone());
                Shaped::One(ReleaseAnswer::new(members.first(), &one))
            }
            Shape::Set => Shaped::Set(SetReleaseAnswer::new(members, outcome)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;
    use crate::engine::{self, Request, State, Tenure, Waiter};
    use crate::lock::{Fence, Owner, Resource, Timestamp, Ttl};

    const NOW: Timestamp = Timestamp(1_000_000);

    fn owner(name: &str) -> Owner {
        Owner::parse(name).expect("an owner")
    }

    fn tenure(who: &str, fence: i64, mode: Mode, guarded: bool, ends: i64) -> Tenure {
        Tenure {
            owner: owner(who),
            fence: Fence(fence),
            acquired_at: Timestamp(NOW.0 - 5_000),
            expires_at: Timestamp(NOW.0 + ends),
            mode,
            note: None,
            guarded,
        }
    }

    fn waiter(who: &str, ticket: i64) -> Waiter {
        Waiter {
            owner: owner(who),
            ticket,
            expires_at: Timestamp(NOW.0 + 4_000),
        }
    }

    /// The states a resource can be found in, by name.
    fn states() -> Vec<(&'static str, State)> {
        let state = |leases: Vec<Tenure>, queue: Vec<Waiter>| State {
            now: NOW,
            leases,
            queue,
        };
        let (x, s, n) = (Mode::Exclusive, Mode::Shared, Mode::Semaphore(2));
        vec![
            ("free", state(vec![], vec![])),
            (
                "expired",
                state(vec![tenure("w2", 3, x, false, -1)], vec![]),
            ),
            (
                "another's",
                state(vec![tenure("w2", 3, x, false, 30_000)], vec![]),
            ),
            (
                "the owner's",
                state(vec![tenure("w1", 3, x, false, 30_000)], vec![]),
            ),
            (
                "the owner's, guarded",
                state(vec![tenure("w1", 3, x, true, 30_000)], vec![]),
            ),
            (
                "shared by two",
                state(
                    vec![
                        tenure("w2", 3, s, false, 30_000),
                        tenure("w3", 4, s, false, 9_000),
                    ],
                    vec![],
                ),
            ),
            (
                "a full semaphore",
                state(
                    vec![
                        tenure("w2", 3, n, false, 30_000),
                        tenure("w3", 4, n, false, 30_000),
                    ],
                    vec![waiter("w4", 1)],
                ),
            ),
            (
                "free, earlier waiters",
                state(vec![], vec![waiter("w3", 1), waiter("w1", 2)]),
            ),
            (
                "another's, the owner waiting",
                state(
                    vec![tenure("w2", 3, x, false, 30_000)],
                    vec![waiter("w1", 1)],
                ),
            ),
        ]
    }

    #[test]
    fn a_set_of_one_is_decided_and_answered_as_its_one_resource() {
        let r = Resource::parse("payment:42").expect("a resource");
        let one = Members::one(r.clone());
        let members = std::slice::from_ref(&r);
        let ttl = Ttl::from_secs(30).expect("a ttl");
        let requests: Vec<Request> = [Mode::Exclusive, Mode::Shared, Mode::Semaphore(2)]
            .into_iter()
            .flat_map(|mode| {
                [(false, false), (true, false), (false, true)].map(|(waits, guarded)| Request {
                    mode,
                    waits,
                    guarded,
                    ..Request::exclusive(owner("w1"), ttl)
                })
            })
            .collect();
        for (name, state) in states() {
            let states = std::slice::from_ref(&state);
            for request in &requests {
                let fresh = || Ok::<_, Infallible>(Fence(11));
                let Ok(single) = engine::acquire(&r, &state, request, fresh);
                let Ok(set) = engine::acquire_set(members, states, request, &mut || {
                    Ok::<_, Infallible>(Fence(11))
                });
                let case = format!("{name}: {request:?}");
                assert_eq!(set.changes, vec![single.changes], "{case}");
                let shaped = ShapedAcquire::new(Shape::One, &one, &set.outcome, request.mode);
                let alone = AcquireAnswer::new(&r, &single.outcome, request.mode);
                assert_eq!(shaped, Shaped::One(alone), "{case}");
                assert_eq!(set.outcome.into_one(), single.outcome, "{case}");
            }
            for (who, fence) in [("w1", None), ("w1", Some(3)), ("w1", Some(4)), ("w2", None)] {
                let (who, fence) = (owner(who), fence.map(Fence));
                let fences = fence.map(|fence| vec![fence]);
                let case = format!("{name}: {who} {fence:?}");
                let single = engine::renew(&r, &state, &who, ttl, fence);
                let set = engine::renew_set(members, states, &who, ttl, fences.as_deref());
                assert_eq!(set.changes, vec![single.changes], "{case}");
                let shaped = ShapedRenew::new(Shape::One, &one, &set.outcome);
                let alone = RenewAnswer::new(&r, &single.outcome);
                let shaped_line = serde_json::to_string(&shaped).ok();
                assert_eq!(shaped_line, serde_json::to_string(&alone).ok(), "{case}");
                assert_eq!((shaped.exit(), shaped.text()), (alone.exit(), alone.text()));

                let single = engine::release(&r, &state, &who, fence);
                let set = engine::release_set(members, states, &who, fences.as_deref());
                assert_eq!(set.changes, vec![single.changes], "{case}");
                let shaped = ShapedRelease::new(Shape::One, &one, &set.outcome);
                assert_eq!(shaped, Shaped::One(ReleaseAnswer::new(&r, &single.outcome)));

                if let Some(fence) = fence {
                    for hold in [None, Some(std::time::Duration::from_secs(60))] {
                        let single = engine::finish(&r, &state, &who, fence, hold);
                        let set = engine::finish_set(members, states, &who, &[fence], hold);
                        assert_eq!(set.outcome, vec![single.outcome], "{case} {hold:?}");
                        assert_eq!(set.changes, vec![single.changes], "{case} {hold:?}");
                    }
                }
                let single = engine::leave(&state, &who);
                let set = engine::leave_set(states, &who);
                assert_eq!(set.changes, vec![single.changes], "{case}");
            }
        }
    }
}
