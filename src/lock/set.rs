//! Lock sets: several resources taken, renewed and released together, all or nothing
//! (docs/src/reference/semantics.md, "Lock sets"). The members and the outcomes; the rules are the engine's.

use serde::{Deserialize, Serialize};

use super::{Acquire, Grant, Holder, Lock, Release, Renew, Resource};

/// The most members a set may have, after deduplication.
pub const MAX_MEMBERS: usize = 64;

/// The members of a lock set: distinct and sorted, so that every transaction over a set takes
/// its members in the same order (two sets listed in opposite orders never deadlock), and
/// every answer lists them by resource. One to [`MAX_MEMBERS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members(Vec<Resource>);

impl Members {
    /// The set of `resources`, in any order, repeats dropped.
    ///
    /// # Errors
    ///
    /// None at all, or more than [`MAX_MEMBERS`] once deduplicated: the message says which.
    pub fn new(mut resources: Vec<Resource>) -> Result<Members, String> {
        resources.sort();
        resources.dedup();
        match resources.len() {
            0 => Err("a lock set needs at least one resource".to_owned()),
            n if n > MAX_MEMBERS => Err(format!(
                "a lock set has at most {MAX_MEMBERS} resources; {n} were given"
            )),
            _ => Ok(Members(resources)),
        }
    }

    /// The set of one `resource`: a single resource, as every layer below the commands and
    /// the server's routes sees it.
    pub fn one(resource: Resource) -> Members {
        Members(vec![resource])
    }

    /// The members, by resource.
    pub fn as_slice(&self) -> &[Resource] {
        &self.0
    }

    /// The first member, by resource (a set has at least one).
    pub fn first(&self) -> &Resource {
        &self.0[0]
    }

    /// How the set is written when nothing else says: a set of one as its resource, with a
    /// single resource's shapes (`acquire r`, `acquire r r`), a larger one as a set.
    pub fn shape(&self) -> Shape {
        if self.0.len() == 1 {
            Shape::One
        } else {
            Shape::Set
        }
    }

    /// The members `keep` keeps, by their place in the set (`None` when it keeps none): still
    /// sorted and distinct, so nothing is checked again.
    pub fn only(&self, keep: impl Fn(usize) -> bool) -> Option<Members> {
        let kept: Vec<Resource> = (self.0.iter().enumerate())
            .filter(|(at, _)| keep(*at))
            .map(|(_, resource)| resource.clone())
            .collect();
        (!kept.is_empty()).then_some(Members(kept))
    }

    /// The one member of a set of one: a single resource, with its own shapes.
    pub fn single(&self) -> Option<&Resource> {
        match self.0.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// The members as a list for messages: `a, b, c`.
    pub fn listed(&self) -> String {
        let names: Vec<&str> = self.0.iter().map(Resource::as_str).collect();
        names.join(", ")
    }
}

/// How a request and its answer are written: as one resource's (`acquire r`, `/locks/{r}`:
/// `{"acquired":true,"lock":{…}}`) or as a lock set's (`acquire a b`, `/sets`:
/// `{"acquired":true,"locks":[…]}`). Only the edges choose it — the commands as they print, the
/// server by its route, a server's client by the route it sends to; below them a single resource
/// is a set of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    One,
    Set,
}

/// What an `acquire` of a set finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetAcquire {
    /// A tenure on every member, by resource, and how each came about.
    Acquired {
        locks: Vec<Lock>,
        tenures: Vec<Grant>,
    },
    /// At least one member is not free for the requester now: each such member, by resource.
    /// Nothing was granted.
    Busy { blocked: Vec<Blocked> },
    /// The first member, by resource, whose holders' mode conflicts with the request (exit
    /// 78), and its holders. Nothing was granted, and no place was taken.
    Mismatch {
        resource: Resource,
        holders: Vec<Holder>,
    },
}

/// A member of a set that is not free for the requester now, as a single `acquire` of it
/// would say ([`super::Acquire::Busy`]). As JSON (`{"resource":R,"holder":{…},"holders":[…],
/// "waiting":K}`, a busy answer's fields), `holder` only when someone holds it, `holders`
/// only for shared or semaphore holders, `waiting` only when someone waits, and `position`
/// only in a distlock server's answer to a request that waited and is to ask again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocked {
    pub resource: Resource,
    /// The live tenure whose lease ends first; `None` when the member is free but reserved
    /// for earlier waiters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// Every live tenure, when the holders are shared or a semaphore's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// Live waiters queued for the member, the requester aside.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting: usize,
    /// The requester's place in the member's queue (1 = next), when it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<usize>,
}

// serde's `skip_serializing_if` hands the field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(count: &usize) -> bool {
    *count == 0
}

/// Why a set's `renew` or `release` changed nothing: the first member, by resource, that the
/// owner does not hold live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRefusal {
    pub resource: Resource,
    /// Another owner holds it (exit 77); else it is not held at all (exit 1).
    pub forbidden: bool,
}

/// What a `renew` of a set finds: every member renewed, by resource, or nothing changed.
pub type SetRenew = Result<Vec<Lock>, SetRefusal>;

/// What a `release` of a set finds: every member released, or nothing changed.
pub type SetRelease = Result<(), SetRefusal>;

impl SetAcquire {
    /// The outcome of a set of one, as its one resource's.
    pub fn into_one(self) -> Acquire {
        match self {
            SetAcquire::Acquired { locks, tenures } => {
                match (locks.into_iter().next(), tenures.into_iter().next()) {
                    (Some(lock), Some(tenure)) => Acquire::Acquired { lock, tenure },
                    // A grant of nothing: no set of one comes to that.
                    _ => Acquire::Busy {
                        holder: None,
                        holders: Vec::new(),
                        waiting: 0,
                        position: None,
                    },
                }
            }
            SetAcquire::Busy { blocked } => {
                let member = blocked.into_iter().next();
                Acquire::Busy {
                    waiting: member.as_ref().map_or(0, |member| member.waiting),
                    position: member.as_ref().and_then(|member| member.position),
                    holders: (member.as_ref())
                        .map(|member| member.holders.clone())
                        .unwrap_or_default(),
                    holder: member.and_then(|member| member.holder),
                }
            }
            SetAcquire::Mismatch { holders, .. } => Acquire::Mismatch { holders },
        }
    }
}

/// The renewal of a set of one, as its one resource's.
pub fn renewed_one(outcome: SetRenew) -> Renew {
    match outcome {
        Ok(locks) => match locks.into_iter().next() {
            Some(lock) => Renew::Renewed { lock },
            None => Renew::NotFound,
        },
        Err(refused) if refused.forbidden => Renew::Forbidden,
        Err(_) => Renew::NotFound,
    }
}

/// The release of a set of one, as its one resource's.
pub fn released_one(outcome: SetRelease) -> Release {
    match outcome {
        Ok(()) => Release::Released,
        Err(refused) if refused.forbidden => Release::Forbidden,
        Err(_) => Release::NotFound,
    }
}
