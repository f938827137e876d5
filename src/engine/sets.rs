//! The rules of lock sets (docs/src/reference/semantics.md, "Lock sets"): each member is decided by the rule of one
//! resource, and the set is granted, renewed or released only when every member would be,
//! in the one transaction that reads them all; otherwise nothing of any member's tenures
//! changes.
//!
//! Waiting, without deadlock and without starvation: a set waiter takes its place in every
//! member's queue at once, in one transaction, and holds nothing while it waits. Places are
//! ordered by the store's tickets, one sequence for every resource, so two waiters that share
//! members are in the same order on each of them: the earlier one is never behind the later
//! one anywhere, and nobody can wait for a waiter that waits for them. A member the set
//! waiter could take now (free, and its turn) is not taken: its place there holds back
//! everyone who comes later, so a set is never starved by later single waiters, and is
//! granted once it is the admissible head of every member's queue. A waiter that lost its
//! places on some members but not others (a place not refreshed in time) gives the others up
//! and queues again on every member, so that its places stay in one order with everyone
//! else's.

use std::convert::Infallible;

use super::rules::{acquire, busy, expired_places, finish, keep_place, leave, release, renew};
use super::{Asking, Change, Finish, Request, SetDecision, State};
use crate::lock::{
    Acquire, Blocked, Fence, Grant, Owner, Release, Renew, Resource, SetAcquire, SetRefusal,
    SetRelease, SetRenew, Timestamp, Ttl,
};

/// `acquire` of the set `members` (sorted, distinct), with `states` in the members' order:
/// 1. a member on which the request is a mismatch → that answer for the first such member,
///    nothing changed;
/// 2. every member would be granted → each granted as [`acquire`] grants it (a new tenure with
///    a fresh fence, asked in the members' order, or the owner's own tenure extended);
/// 3. otherwise busy, naming every member that is not free for the owner now, with nothing
///    granted; a waiter keeps (or takes) its place in every member's queue.
///
/// # Errors
///
/// Only `fresh_fence`'s.
pub fn acquire_set<E>(
    members: &[Resource],
    states: &[State],
    request: &Request,
    fresh_fence: &mut dyn FnMut() -> Result<Fence, E>,
) -> Result<SetDecision<SetAcquire>, E> {
    // Each member as one request alone would find it (the fence asked for only below).
    let probes: Vec<Acquire> = members
        .iter()
        .zip(states)
        .map(|(member, state)| {
            let probe = acquire(member, state, request, || Ok::<_, Infallible>(Fence(0)));
            match probe {
                Ok(decision) => decision.outcome,
                Err(never) => match never {},
            }
        })
        .collect();
    let clash = members
        .iter()
        .zip(&probes)
        .find_map(|(member, probe)| match probe {
            Acquire::Mismatch { holders } => Some((member, holders)),
            _ => None,
        });
    if let Some((resource, holders)) = clash {
        return Ok(SetDecision {
            outcome: SetAcquire::Mismatch {
                resource: resource.clone(),
                holders: holders.clone(),
            },
            changes: vec![Vec::new(); members.len()],
        });
    }
    if probes.iter().all(|p| matches!(p, Acquire::Acquired { .. })) {
        let mut locks = Vec::with_capacity(members.len());
        let mut tenures = Vec::with_capacity(members.len());
        let mut changes = Vec::with_capacity(members.len());
        for (member, state) in members.iter().zip(states) {
            let decision = acquire(member, state, request, &mut *fresh_fence)?;
            if let Acquire::Acquired { lock, tenure } = decision.outcome {
                locks.push(lock);
                tenures.push(tenure);
            }
            changes.push(decision.changes);
        }
        return Ok(SetDecision {
            outcome: SetAcquire::Acquired { locks, tenures },
            changes,
        });
    }
    let owner = &request.owner;
    let placed = |state: &State| state.waiting().iter().any(|w| w.owner == *owner);
    // Places on some members but not all: given up and taken again everywhere.
    let start_over = request.waits && states.iter().any(placed) && !states.iter().all(placed);
    let mut blocked = Vec::new();
    let mut changes = Vec::with_capacity(members.len());
    let asking = |state: &State| asking(members, state, request);
    for ((member, state), probe) in members.iter().zip(states).zip(probes) {
        let mut member_changes = expired_places(state);
        if request.waits {
            if start_over {
                member_changes.extend(placed(state).then(|| Change::Dequeue {
                    owner: owner.clone(),
                }));
                member_changes.push(Change::Enqueue {
                    owner: owner.clone(),
                    expires_at: Timestamp(state.now.0.saturating_add(super::LIVENESS_MS)),
                    asking: asking(state),
                });
            } else {
                member_changes.extend(keep_place(state, owner, asking(state)));
            }
        }
        if let Acquire::Busy {
            holder,
            holders,
            waiting,
            position,
        } = probe
        {
            // Queued again at the end: behind everyone live.
            let position = match position {
                Some(_) if start_over => Some(waiting + 1),
                other => other,
            };
            blocked.push(Blocked {
                resource: member.clone(),
                holder,
                holders,
                waiting,
                position,
            });
        }
        changes.push(member_changes);
    }
    Ok(SetDecision {
        outcome: SetAcquire::Busy { blocked },
        changes,
    })
}

/// A waiter's places in the queue of every member, taken before it is granted: for a waiting
/// request whose grant its store could not write because another client changed a member
/// first (PostgreSQL checks a decision when it writes it, and decides again). In line, it is
/// served in its turn, however often faster clients would have won the race to the write:
/// later waiters queue behind it, and a try-once request finds the resource busy
/// (docs/src/reference/semantics.md, "Fair waiting"). `None` when the request does not wait,
/// holds a place already, or would not be granted a new tenure of every member now: it is
/// then decided as always, by [`acquire_set`].
pub fn queue_first(
    members: &[Resource],
    states: &[State],
    request: &Request,
) -> Option<SetDecision<SetAcquire>> {
    let owner = &request.owner;
    let placed = |state: &State| state.waiting().iter().any(|w| w.owner == *owner);
    if !request.waits || states.iter().any(placed) {
        return None;
    }
    let unfenced = &mut || Ok::<_, Infallible>(Fence(0));
    let granted = match acquire_set(members, states, request, unfenced) {
        Ok(decision) => decision.outcome,
        Err(never) => match never {},
    };
    match granted {
        SetAcquire::Acquired { tenures, .. } if tenures.iter().all(|t| *t == Grant::New) => {}
        _ => return None,
    }
    let mut blocked = Vec::with_capacity(members.len());
    let mut changes = Vec::with_capacity(members.len());
    for (member, state) in members.iter().zip(states) {
        let waiting = state.waiting().len();
        if let Acquire::Busy {
            holder,
            holders,
            waiting,
            position,
        } = busy(&state.live(), waiting, Some(waiting + 1))
        {
            blocked.push(Blocked {
                resource: member.clone(),
                holder,
                holders,
                waiting,
                position,
            });
        }
        let mut member_changes = expired_places(state);
        member_changes.extend(keep_place(state, owner, asking(members, state, request)));
        changes.push(member_changes);
    }
    Some(SetDecision {
        outcome: SetAcquire::Busy { blocked },
        changes,
    })
}

/// What a place of `request` in a member's queue records: since when, the mode, and a set's
/// members (every one of them, on each member's place).
fn asking(members: &[Resource], state: &State, request: &Request) -> Asking {
    Asking {
        since: state.now,
        mode: request.mode,
        members: if members.len() > 1 {
            members.to_vec()
        } else {
            Vec::new()
        },
    }
}

/// `renew` of the set by `owner` (of the tenures `fences`, in the members' order, when given):
/// every member renewed as [`renew`] renews it, or — when the owner does not hold one of them
/// live — nothing changed and the first such member named.
pub fn renew_set(
    members: &[Resource],
    states: &[State],
    owner: &Owner,
    ttl: Ttl,
    fences: Option<&[Fence]>,
) -> SetDecision<SetRenew> {
    let mut locks = Vec::with_capacity(members.len());
    let mut changes = Vec::with_capacity(members.len());
    for (i, (member, state)) in members.iter().zip(states).enumerate() {
        let decision = renew(
            member,
            state,
            owner,
            ttl,
            fences.and_then(|f| f.get(i).copied()),
        );
        match decision.outcome {
            Renew::Renewed { lock } => locks.push(lock),
            Renew::NotFound | Renew::Forbidden => {
                return refused(members, member, decision.outcome == Renew::Forbidden);
            }
        }
        changes.push(decision.changes);
    }
    SetDecision {
        outcome: Ok(locks),
        changes,
    }
}

/// `release` of the set by `owner` (of the tenures `fences`, when given): every member
/// released as [`release`] releases it, or nothing changed and the first member the owner
/// does not hold live named.
pub fn release_set(
    members: &[Resource],
    states: &[State],
    owner: &Owner,
    fences: Option<&[Fence]>,
) -> SetDecision<SetRelease> {
    let mut changes = Vec::with_capacity(members.len());
    for (i, (member, state)) in members.iter().zip(states).enumerate() {
        let decision = release(member, state, owner, fences.and_then(|f| f.get(i).copied()));
        match decision.outcome {
            Release::Released => changes.push(decision.changes),
            Release::NotFound | Release::Forbidden => {
                return refused(members, member, decision.outcome == Release::Forbidden);
            }
        }
    }
    SetDecision {
        outcome: Ok(()),
        changes,
    }
}

/// A refusal naming `member`: nothing changes on any member.
fn refused<T>(
    members: &[Resource],
    member: &Resource,
    forbidden: bool,
) -> SetDecision<Result<T, SetRefusal>> {
    SetDecision {
        outcome: Err(SetRefusal {
            resource: member.clone(),
            forbidden,
        }),
        changes: vec![Vec::new(); members.len()],
    }
}

/// `run`'s end of its tenures `fences` (in the members' order): each member ended as
/// [`finish`] ends it — kept until its start + `hold`, or released — on its own, so that a
/// member already lost (broken, expired) leaves the others to be let go all the same.
pub fn finish_set(
    members: &[Resource],
    states: &[State],
    owner: &Owner,
    fences: &[Fence],
    hold: Option<std::time::Duration>,
) -> SetDecision<Vec<Finish>> {
    let mut outcome = Vec::with_capacity(members.len());
    let mut changes = Vec::with_capacity(members.len());
    for ((member, state), fence) in members.iter().zip(states).zip(fences) {
        let decision = finish(member, state, owner, *fence, hold);
        outcome.push(decision.outcome);
        changes.push(decision.changes);
    }
    SetDecision { outcome, changes }
}

/// A set waiter gives up: it leaves every member's queue at once.
pub fn leave_set(states: &[State], owner: &Owner) -> SetDecision<()> {
    SetDecision {
        outcome: (),
        changes: states
            .iter()
            .map(|state| leave(state, owner).changes)
            .collect(),
    }
}

#[cfg(test)]
mod tests;
