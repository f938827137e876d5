//! The rules themselves: one function per operation, each a pure decision over a resource's
//! [`State`] (see the module above for the invariants they keep).

use super::{
    Asking, Change, Decision, LIVENESS_MS, REFRESH_BELOW_MS, Request, State, Tenure, expiry, record,
};
use crate::lock::{
    Acquire, Breaking, EventKind, Fence, Grant, Lock, Mode, Owner, Release, Renew, Resource,
    Status, Timestamp, Ttl,
};

/// `acquire` (docs/src/reference/semantics.md, "Admission" and "Guarded tenures and joining"):
/// 1. the owner's own live tenure that is not guarded (one `acquire` took): same mode →
///    extended (same fence, both times move to now, the note replaced when one is given; it
///    stays not guarded, also when `run` joins it); another mode → mismatch;
/// 2. no live tenure → a new tenure, guarded when the request is `run`'s;
/// 3. live tenures of others: a mode of another family (read/write against a semaphore, or a
///    semaphore of another N) → mismatch; in the read/write family an exclusive request or an
///    exclusive holder → busy, shared beside shared → a new tenure; a semaphore of N → a new
///    tenure while fewer than N are live, else busy.
///
/// The owner's own guarded tenure (one `run` took), and a tenure of its name that another
/// token took (`distlock serve --tokens`), count as another owner's in 3: the request gets
/// the mismatch or the busy answer another owner would get, and a waiter queues as behind any
/// holder. Where another owner would be granted a tenure beside it (shared beside shared, a
/// semaphore with room), the owner is busy too: a name holds one tenure of a resource at
/// most, so it waits for that one to end.
///
/// A new tenure's fence comes from `fresh_fence`, asked only then (a refusal costs the store
/// no write). Expired rows of the resource make way for it.
///
/// # Errors
///
/// Only `fresh_fence`'s.
pub fn acquire<E>(
    resource: &Resource,
    state: &State,
    request: &Request,
    fresh_fence: impl FnOnce() -> Result<Fence, E>,
) -> Result<Decision<Acquire>, E> {
    let now = state.now;
    let expires_at = expiry(now, request.ttl);
    let live = state.live();
    // A resource holds one tenure per owner name at most. The name's tenure is the owner's
    // own to join only when it is not guarded and the same token took it; else it counts as
    // another owner's, as below.
    let own = live.iter().find(|l| l.owner.same_name(&request.owner));
    if let Some(own) = own.filter(|own| !own.guarded && own.owner == request.owner) {
        if own.mode != request.mode {
            return Ok(Decision::unchanged(Acquire::Mismatch {
                holders: live.iter().map(|l| l.holder()).collect(),
            }));
        }
        let lease = Tenure {
            acquired_at: now,
            expires_at,
            note: request.note.clone().or_else(|| own.note.clone()),
            ..(*own).clone()
        };
        return Ok(Decision {
            changes: vec![
                Change::Update(lease.clone()),
                record(resource, now, &lease, EventKind::Extended, None),
            ],
            outcome: Acquire::Acquired {
                lock: lease.lock(resource),
                tenure: Grant::Extended,
            },
        });
    }
    let holders = || live.iter().map(|l| l.holder()).collect::<Vec<_>>();
    let admitted = match admission(request.mode, &live) {
        Admission::Mismatch => {
            return Ok(Decision::unchanged(Acquire::Mismatch {
                holders: holders(),
            }));
        }
        // Beside its own guarded tenure, an owner is never admitted to a second one.
        Admission::Admitted => own.is_none(),
        Admission::Busy => false,
    };
    // Strict order: nobody goes in ahead of an earlier live waiter.
    let queue = state.waiting();
    let mine = queue.iter().position(|w| w.owner == request.owner);
    let ahead = mine.unwrap_or(queue.len());
    let mut changes = expired_places(state);
    if !admitted || ahead > 0 {
        if request.waits {
            let asking = Asking {
                since: now,
                mode: request.mode,
                members: Vec::new(),
            };
            changes.extend(keep_place(state, &request.owner, asking));
        }
        let waiting = queue.len() - usize::from(mine.is_some());
        return Ok(Decision {
            outcome: busy(&live, waiting, request.waits.then_some(ahead + 1)),
            changes,
        });
    }
    if mine.is_some() {
        changes.push(Change::Dequeue {
            owner: request.owner.clone(),
        });
    }
    let nobody_holds_it = live.is_empty();
    new_tenure(
        resource,
        state,
        request,
        nobody_holds_it,
        changes,
        fresh_fence,
    )
}

/// Busy, for a request that finds the `live` tenures and `waiting` other live waiters, and
/// whose place in the queue is `position` when it waits: who holds it (the lease that ends
/// first), and every holder when they share it.
pub(super) fn busy(live: &[&Tenure], waiting: usize, position: Option<usize>) -> Acquire {
    let shared = live.iter().any(|l| l.mode != Mode::Exclusive);
    Acquire::Busy {
        holder: live
            .iter()
            .min_by_key(|l| (l.expires_at, l.fence))
            .map(|l| l.holder()),
        holders: if shared {
            live.iter().map(|l| l.holder()).collect()
        } else {
            Vec::new()
        },
        waiting,
        position,
    }
}

/// [`acquire`]'s grant of a new tenure, after `changes` (places in the queue given up): a
/// fresh fence, the expired rows out of its way, and the history's `acquired`, or `taken_over`
/// when `nobody_holds_it` and someone's lease ran out before.
fn new_tenure<E>(
    resource: &Resource,
    state: &State,
    request: &Request,
    nobody_holds_it: bool,
    mut changes: Vec<Change>,
    fresh_fence: impl FnOnce() -> Result<Fence, E>,
) -> Result<Decision<Acquire>, E> {
    let now = state.now;
    let expires_at = expiry(now, request.ttl);
    // Expired rows make way for the new tenure. Taking a resource nobody holds after someone's
    // lease ran out is a takeover from the last holder; joining live holders is not.
    let previous = state
        .leases
        .iter()
        .max_by_key(|l| l.fence)
        .filter(|_| nobody_holds_it);
    let lease = Tenure {
        owner: request.owner.clone(),
        fence: fresh_fence()?,
        acquired_at: now,
        expires_at,
        mode: request.mode,
        note: request.note.clone(),
        guarded: request.guarded,
    };
    changes.extend(
        state
            .leases
            .iter()
            .filter(|l| !l.is_live(now))
            .map(|l| Change::Delete { fence: l.fence }),
    );
    changes.push(Change::Insert(lease.clone()));
    changes.push(match previous {
        Some(old) => record(
            resource,
            now,
            &lease,
            EventKind::TakenOver,
            Some(old.owner.clone()),
        ),
        None => record(resource, now, &lease, EventKind::Acquired, None),
    });
    Ok(Decision {
        outcome: Acquire::Acquired {
            lock: lease.lock(resource),
            tenure: Grant::New,
        },
        changes,
    })
}

/// The places in `state`'s queue whose liveness ran out, taken out of it.
pub(super) fn expired_places(state: &State) -> Vec<Change> {
    state
        .queue
        .iter()
        .filter(|w| w.expires_at <= state.now)
        .map(|w| Change::Dequeue {
            owner: w.owner.clone(),
        })
        .collect()
}

/// A waiter's place in `state`'s queue, kept: taken at the end of the queue when it has no
/// live one (recording what it is `asking`), refreshed when less than [`REFRESH_BELOW_MS`] of
/// its liveness is left.
pub(super) fn keep_place(state: &State, owner: &Owner, asking: Asking) -> Option<Change> {
    let liveness = Timestamp(state.now.0.saturating_add(LIVENESS_MS));
    let place = state.waiting().into_iter().find(|w| w.owner == *owner);
    match place {
        None => Some(Change::Enqueue {
            owner: owner.clone(),
            expires_at: liveness,
            asking,
        }),
        Some(place) if state.now.millis_until(place.expires_at) < REFRESH_BELOW_MS => {
            Some(Change::Refresh {
                owner: owner.clone(),
                expires_at: liveness,
            })
        }
        Some(_) => None,
    }
}

/// Whether a request may join the live tenures of other owners.
enum Admission {
    Admitted,
    Busy,
    /// Another family (read/write against a semaphore) or another N.
    Mismatch,
}

fn admission(mode: Mode, live: &[&Tenure]) -> Admission {
    if live.iter().any(|l| l.mode.family() != mode.family()) {
        return Admission::Mismatch;
    }
    let admitted = match mode {
        Mode::Exclusive => live.is_empty(),
        Mode::Shared => live.iter().all(|l| l.mode == Mode::Shared),
        Mode::Semaphore(n) => live.len() < usize::try_from(n).unwrap_or(usize::MAX),
    };
    if admitted {
        Admission::Admitted
    } else {
        Admission::Busy
    }
}

/// A waiter gives up (its `--wait` ran out, or it was interrupted): it leaves the queue at
/// once, so it blocks nobody for the rest of its liveness lease.
pub fn leave(state: &State, owner: &Owner) -> Decision<()> {
    Decision {
        changes: state
            .queue
            .iter()
            .filter(|w| w.owner == *owner)
            .map(|w| Change::Dequeue {
                owner: w.owner.clone(),
            })
            .collect(),
        outcome: (),
    }
}

/// `renew` by `owner` (of tenure `fence`, when given): its live tenure's lease moves to
/// now + `ttl`, keeping `acquired_at` and the fence.
pub fn renew(
    resource: &Resource,
    state: &State,
    owner: &Owner,
    ttl: Ttl,
    fence: Option<Fence>,
) -> Decision<Renew> {
    let own = match own_tenure(state, owner, fence) {
        Ok(own) => own,
        Err(Refusal::NotFound) => return Decision::unchanged(Renew::NotFound),
        Err(Refusal::Forbidden) => return Decision::unchanged(Renew::Forbidden),
    };
    let lease = Tenure {
        expires_at: expiry(state.now, ttl),
        ..own.clone()
    };
    Decision {
        changes: vec![
            Change::Update(lease.clone()),
            record(resource, state.now, &lease, EventKind::Renewed, None),
        ],
        outcome: Renew::Renewed {
            lock: lease.lock(resource),
        },
    }
}

/// `release` by `owner` (of tenure `fence`, when given): its live tenure is removed.
pub fn release(
    resource: &Resource,
    state: &State,
    owner: &Owner,
    fence: Option<Fence>,
) -> Decision<Release> {
    let own = match own_tenure(state, owner, fence) {
        Ok(own) => own,
        Err(Refusal::NotFound) => return Decision::unchanged(Release::NotFound),
        Err(Refusal::Forbidden) => return Decision::unchanged(Release::Forbidden),
    };
    Decision {
        changes: vec![
            Change::Delete { fence: own.fence },
            record(resource, state.now, own, EventKind::Released, None),
        ],
        outcome: Release::Released,
    }
}

/// How `run` ended its tenure, given `--hold-at-least`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Released: no hold, or the hold had already passed.
    Released,
    /// Kept until the tenure's start + the hold, which was still ahead.
    Kept { until: Timestamp },
    /// The tenure was no longer this run's (lost, broken, or expired).
    NotFound,
}

/// `run`'s end of its own tenure `fence`: with a `hold` (`--hold-at-least`) whose end — the
/// tenure's start + `hold`, by the store's clock — is still ahead, the lease is set to end then
/// (history event `kept`), so that nobody else takes the resource before; otherwise it is
/// released as by `release`.
pub fn finish(
    resource: &Resource,
    state: &State,
    owner: &Owner,
    fence: Fence,
    hold: Option<std::time::Duration>,
) -> Decision<Finish> {
    let Ok(own) = own_tenure(state, owner, Some(fence)) else {
        return Decision::unchanged(Finish::NotFound);
    };
    let hold_ms = hold.map_or(0, |h| i64::try_from(h.as_millis()).unwrap_or(i64::MAX));
    let until = Timestamp(own.acquired_at.0.saturating_add(hold_ms));
    if hold.is_some() && state.now < until {
        let lease = Tenure {
            expires_at: until,
            ..own.clone()
        };
        return Decision {
            changes: vec![
                Change::Update(lease.clone()),
                record(resource, state.now, &lease, EventKind::Kept, None),
            ],
            outcome: Finish::Kept { until },
        };
    }
    let released = release(resource, state, owner, Some(fence));
    Decision {
        changes: released.changes,
        outcome: match released.outcome {
            Release::Released => Finish::Released,
            Release::NotFound | Release::Forbidden => Finish::NotFound,
        },
    }
}

/// `break`: an operator removes every live tenure of the resource (only those of `owner`'s
/// name, whatever token took them, when given), whoever holds it, recording each as `broken` with who and why. The removed tenures
/// are the outcome; none means "not found". The next tenure gets a higher fence, as always.
pub fn break_tenures(
    resource: &Resource,
    state: &State,
    owner: Option<&Owner>,
    breaking: &Breaking,
) -> Decision<Vec<Lock>> {
    let removed: Vec<&Tenure> = state
        .live()
        .into_iter()
        .filter(|l| owner.is_none_or(|o| l.owner.same_name(o)))
        .collect();
    let mut changes = Vec::new();
    for lease in &removed {
        changes.push(Change::Delete { fence: lease.fence });
        if let Change::Record(mut row) = record(resource, state.now, lease, EventKind::Broken, None)
        {
            row.broken = Some(breaking.clone());
            changes.push(Change::Record(row));
        }
    }
    Decision {
        outcome: removed.iter().map(|l| l.lock(resource)).collect(),
        changes,
    }
}

/// `status`: the live tenures, oldest (smallest fence) first — an expired one is never
/// reported — and how many live waiters queue for the resource.
pub fn status(resource: &Resource, state: &State) -> Status {
    Status {
        locks: state.live().iter().map(|l| l.lock(resource)).collect(),
        waiting: state.waiting().len(),
    }
}

/// Why a `renew` or `release` changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// No live tenure of this owner (missing, expired, or a different tenure than `fence`),
    /// and nobody else holds the resource either.
    NotFound,
    /// Another owner holds the resource.
    Forbidden,
}

/// The rule `renew` and `release` share: only the owner of a live tenure may change it (its
/// name and its token: a tenure of the same name that another token took is another owner's),
/// and with a fence, only that tenure. A later tenure of the same owner is "not found" for a stale fence,
/// so a `run` whose lease lapsed can never renew or release its successor.
fn own_tenure<'a>(
    state: &'a State,
    owner: &Owner,
    fence: Option<Fence>,
) -> Result<&'a Tenure, Refusal> {
    let live = state.live();
    let mut own = live.iter().filter(|l| l.owner == *owner).peekable();
    if own.peek().is_none() {
        return Err(if live.is_empty() {
            Refusal::NotFound
        } else {
            Refusal::Forbidden
        });
    }
    own.find(|l| fence.is_none_or(|f| f == l.fence))
        .copied()
        .ok_or(Refusal::NotFound)
}
