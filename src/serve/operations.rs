//! Each route's work on the store, on a blocking thread: the request read and checked
//! ([`crate::protocol`]), the operation carried out, and the command's own answer turned into
//! the HTTP one. One handler per lock operation serves both of its routes: a single
//! resource's (`/locks/{r}…`, its members a set of one) and a lock set's (`/sets…`); only the
//! shape of the answer differs, and it follows the route.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::access::Caller;
use super::reply::{Reply, answered, problem};
use super::shared::Shared;
use crate::answer::{
    Answer, BreakAnswer, KeptAnswer, ListAnswer, SetFinishAnswer, ShapedAcquire, ShapedRelease,
    ShapedRenew, StatusAnswer,
};
use crate::engine::{Finish, Request};
use crate::lock::{Breaking, Fence, Members, Owner, Remark, Resource, SetAcquire, Shape};
use crate::protocol::{
    AcquireRequest, Bad, BreakRequest, End, Fields, LONGEST_POLL, LeaveRequest, ReleaseRequest,
    RenewRequest, Target, read_list, read_log,
};
use crate::store::{self, LockStore, Locks, op};
use crate::wait;

use super::problem::Problem;

/// One request, as its route's work sees it.
pub(super) struct Work<'a> {
    pub(super) state: &'a Shared,
    /// Who calls: the owner it names is proved by its token.
    pub(super) caller: &'a Caller,
    pub(super) body: &'a [u8],
    pub(super) query: Option<&'a str>,
}

impl Work<'_> {
    /// The body of a lock operation's request: its members — a single resource's from the
    /// route (which the caller's token was checked against already), a set's from the body's
    /// `resources`, every one of which the caller's token must be allowed to use (else 403
    /// `not-allowed`, naming the first that is not, and nothing read further) — then the rest
    /// of its fields as `read` reads them, none left unread. Refused, the answer to send.
    fn read<T>(
        &self,
        target: Target,
        read: impl FnOnce(Members, Shape, &mut Fields) -> Result<T, Bad>,
    ) -> Result<T, Reply> {
        let bad = |bad: Bad| Reply::from(problem(&bad));
        let mut fields = Fields::parse(self.body).map_err(bad)?;
        let (members, shape) = match target {
            Target::One(resource) => (Members::one(resource), Shape::One),
            Target::Set => {
                let members = fields.members().map_err(bad)?;
                self.caller.check_all(members.as_slice())?;
                (members, Shape::Set)
            }
        };
        let read = read(members, shape, &mut fields).map_err(bad)?;
        fields.finish().map_err(bad)?;
        Ok(read)
    }

    /// `work` on a store of the server's pool; a store failure is 503 `store-error`.
    fn on_store(&self, work: impl FnOnce(&mut dyn LockStore) -> store::Result<Reply>) -> Reply {
        let done = self.state.stores.with(|store| Ok(work(store)?));
        done.unwrap_or_else(|err| {
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store-error",
                format!("{err:#}"),
            )
            .into()
        })
    }
}

/// `POST /locks/{r}`, `POST /sets`: an acquire, all or nothing, waiting in every member's
/// queue at once. A busy answer names each member not free for the owner now, with its
/// place in that member's queue when the request waited and is to ask again.
pub(super) fn acquire(work: &Work<'_>, target: Target, gone: &AtomicBool) -> Reply {
    // Before the request was read it was sent: what it waited from here is what a client may
    // add to the moment it sent it.
    let received = Instant::now();
    let read = work.read(target, AcquireRequest::read);
    let read = match read {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let (members, shape) = (read.members, read.shape);
    let mut request = read.request;
    // The owner it names is proved by the caller's token.
    request.owner = work.caller.owner(request.owner);
    let wait = Duration::from_secs(read.wait_seconds.unwrap_or_default());
    work.on_store(|store| {
        let attempt = attempt(store, work, (&members, &request), wait, gone)?;
        let mut answer = ShapedAcquire::new(shape, &members, &attempt.outcome, request.mode);
        if !wait.is_zero() {
            show_positions(&mut answer, &attempt.outcome);
        }
        let reply = answered(&answer, || answer.text());
        Ok(match &attempt.outcome {
            SetAcquire::Acquired { tenures, .. } => {
                reply.granted(tenures, attempt.started.saturating_duration_since(received))
            }
            _ => reply,
        })
    })
}

/// A busy answer to a request that waited, with the requester's place in each busy member's
/// queue (the command line never prints it): the client asks again from there.
fn show_positions(answer: &mut ShapedAcquire, outcome: &SetAcquire) {
    use crate::answer::{AcquireAnswer, SetAcquireAnswer, Shaped};
    let SetAcquire::Busy { blocked } = outcome else {
        return;
    };
    match answer {
        Shaped::One(AcquireAnswer::Busy(busy)) => {
            busy.member.position = blocked.first().and_then(|member| member.position);
        }
        Shaped::Set(SetAcquireAnswer::Busy(busy)) => {
            for (shown, member) in busy.blocked.iter_mut().zip(blocked) {
                shown.position = member.position;
            }
        }
        _ => {}
    }
}

/// The deciding attempt of an acquire: the only one for a request that does not wait; else
/// the command line's wait in the queue, for at most [`LONGEST_POLL`] of `wait`, keeping the
/// place when more of the wait is left for the client's next request, and ended early by the
/// server's stopping, the client going away or leaving the queue ([`leave`]), or its token
/// taken out of the file meanwhile.
fn attempt(
    store: &mut dyn LockStore,
    work: &Work<'_>,
    (members, request): (&Members, &Request),
    wait: Duration,
    gone: &AtomicBool,
) -> store::Result<wait::Attempt> {
    if wait.is_zero() {
        let started = Instant::now();
        let acquired = store.perform(op::Acquire {
            members: members.clone(),
            request: request.clone(),
            until: None,
        })?;
        return Ok(wait::Attempt {
            outcome: acquired.outcome,
            started,
        });
    }
    let state = work.state;
    let this_poll = wait.min(LONGEST_POLL);
    let keeps_place = wait > LONGEST_POLL;
    state.waiting.fetch_add(1, Ordering::SeqCst);
    let waiting = state.waits.enter(&request.owner, members.as_slice());
    let stop = || {
        state.stopping.load(Ordering::SeqCst)
            || gone.load(Ordering::SeqCst)
            || waiting.left()
            || work.caller.revoked(state.tokens().as_deref())
    };
    let waited = wait::serve(store, members, request, this_poll, keeps_place, &stop);
    drop(waiting);
    state.waiting.fetch_sub(1, Ordering::SeqCst);
    waited
}

/// `DELETE /locks/{r}`, `POST /sets/release`: the owner's tenure on every member released
/// (204 for one resource; 200 with the command's body for a set, which says which resources
/// it let go), or nothing changed and the first member the owner does not hold live named
/// (404, 403).
///
/// `run`'s end instead — one resource's with `hold_at_least_seconds`, a set's with
/// `"each":true` — ends each tenure on its own: released, or kept until its start + the hold;
/// one no longer the owner's is skipped, so that a member lost (broken, expired) leaves the
/// others to be let go all the same ([`finish`]).
pub(super) fn release(work: &Work<'_>, target: Target) -> Reply {
    // One resource's owner may be given in the query, which is read first.
    let queried = match &target {
        Target::One(_) => match ReleaseRequest::owner_param(work.query) {
            Ok(owner) => owner,
            Err(bad) => return problem(&bad).into(),
        },
        Target::Set => None,
    };
    let read = work.read(target, |members, shape, fields| match shape {
        Shape::One => ReleaseRequest::read_one(members.first().clone(), queried.as_deref(), fields),
        Shape::Set => ReleaseRequest::read_set(members, fields),
    });
    let mut read = match read {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    read.owner = work.caller.owner(read.owner);
    match read.end {
        End::Release => work.on_store(|store| released(store, &read, read.fences.clone())),
        End::Finish { hold } => work.on_store(|store| finish(store, &read, hold)),
    }
}

/// A release of the owner's tenures (only `fences`, when given), answered as the command's:
/// 204 for one resource, the set's answer for a set, or the refusal's problem document.
fn released(
    store: &mut dyn LockStore,
    read: &ReleaseRequest,
    fences: Option<Vec<Fence>>,
) -> store::Result<Reply> {
    let outcome = store.perform(op::Release {
        members: read.members.clone(),
        owner: read.owner.clone(),
        fences,
    })?;
    let answer = ShapedRelease::new(read.shape, &read.members, &outcome);
    Ok(match (read.shape, outcome) {
        (Shape::One, Ok(())) => Reply::empty(StatusCode::NO_CONTENT),
        _ => answered(&answer, || answer.text()),
    })
}

/// `run`'s end of its tenures, kept for `hold` past their start. A single resource's tenure is
/// the one named, or else the owner's own; one no longer the owner's is answered as a plain
/// release says why (not held, or another's). A set's members each say how they ended.
fn finish(
    store: &mut dyn LockStore,
    read: &ReleaseRequest,
    hold: Option<Duration>,
) -> store::Result<Reply> {
    let fences = match (read.shape, &read.fences) {
        (_, Some(fences)) => Some(fences.clone()),
        (Shape::One, None) => own_fence(store, read.members.first(), &read.owner)?.map(|f| vec![f]),
        (Shape::Set, None) => None,
    };
    let Some(fences) = fences else {
        return released(store, read, None);
    };
    let ends = store.perform(op::Finish {
        members: read.members.clone(),
        owner: read.owner.clone(),
        fences: fences.clone(),
        hold,
        until: None,
    })?;
    if read.shape == Shape::Set {
        let answer = SetFinishAnswer::new(&read.members, &ends);
        return Ok(Reply::json(StatusCode::OK, &answer));
    }
    Ok(match ends.first() {
        Some(Finish::Released) => Reply::empty(StatusCode::NO_CONTENT),
        Some(Finish::Kept { until }) => Reply::json(
            StatusCode::OK,
            &KeptAnswer::new(read.members.first(), *until),
        ),
        // Not this owner's: the plain release of that tenure says why (not held, or
        // another's).
        Some(Finish::NotFound) | None => released(store, read, Some(fences))?,
    })
}

/// The fence of `owner`'s live tenure of `resource`, if it has one.
fn own_fence(
    store: &mut dyn LockStore,
    resource: &Resource,
    owner: &Owner,
) -> store::Result<Option<Fence>> {
    let found = store.perform(op::Status {
        resource: resource.clone(),
    })?;
    Ok(found
        .locks
        .iter()
        .find(|lock| lock.owner == *owner)
        .map(|lock| lock.fence))
}

/// `POST /locks/{r}/renew`, `POST /sets/renew`: the owner's lease on every member moved, or —
/// when the owner does not hold one of them live — nothing changed and the first such member
/// named (404, 403).
pub(super) fn renew(work: &Work<'_>, target: Target) -> Reply {
    let read = match work.read(target, RenewRequest::read) {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    work.on_store(|store| {
        let outcome = store.perform(op::Renew {
            members: read.members.clone(),
            owner: work.caller.owner(read.owner),
            ttl: read.ttl,
            fences: read.fences,
            lease_end: None,
        })?;
        let answer = ShapedRenew::new(read.shape, &read.members, &outcome);
        Ok(answered(&answer, || answer.text()))
    })
}

/// `POST /locks/{r}/leave`, `POST /sets/leave`: the owner gives up its place in every
/// member's queue, as an interrupted waiter does. Its requests still waiting here end first
/// (answered busy), so that none takes the place back; then the place is taken out. 204,
/// whether it had one or not.
pub(super) fn leave(work: &Work<'_>, target: Target) -> Reply {
    let read = match work.read(target, LeaveRequest::read) {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let owner = work.caller.owner(read.owner);
    work.state.waits.leave(&owner, read.members.as_slice());
    work.on_store(|store| {
        store.perform(op::Leave {
            members: read.members,
            owner,
            until: None,
        })?;
        Ok(Reply::empty(StatusCode::NO_CONTENT))
    })
}

/// `POST /locks/{r}/break`: an operator removes the live tenures, recorded as broken by the
/// operator's token (never by what the body says).
pub(super) fn break_lock(work: &Work<'_>, resource: Resource) -> Reply {
    let read = work.read(Target::One(resource), |members, _, fields| {
        BreakRequest::read(members.first().clone(), fields)
    });
    let read = match read {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    // Who broke it, as the server knows it: the operator's token, never the body's words.
    let breaking = Breaking {
        by: read
            .by
            .unwrap_or_else(|| Remark::from_store("distlock serve")),
        by_token: work.caller.token_name(),
        reason: read.reason,
    };
    work.on_store(|store| {
        let removed = store.perform(op::Break {
            resource: read.resource.clone(),
            owner: read.owner,
            breaking: breaking.clone(),
        })?;
        let answer = BreakAnswer::new(&read.resource, removed, &breaking);
        Ok(answered(&answer, || answer.text()))
    })
}

/// `GET /locks/{r}`: the live tenures and waiters (404 when it is not held).
pub(super) fn status(work: &Work<'_>, resource: Resource) -> Reply {
    work.on_store(|store| {
        let found = store.perform(op::Status {
            resource: resource.clone(),
        })?;
        let answer = StatusAnswer::new(&resource, &found);
        Ok(answered(&answer, || format!("{resource} is not held")))
    })
}

/// `GET /locks`: the live locks under `?prefix=`, of the resources the caller's token may see.
pub(super) fn list(work: &Work<'_>) -> Reply {
    let prefix = match read_list(work.query) {
        Ok(prefix) => prefix,
        Err(bad) => return problem(&bad).into(),
    };
    work.on_store(|store| {
        let mut locks = store.perform(op::List { prefix })?;
        locks.retain(|lock| work.caller.may_see(&lock.resource));
        Ok(Reply::json(StatusCode::OK, &ListAnswer { locks }))
    })
}

/// `GET /log`: the history (of `?resource=`, which the caller's token must be allowed to
/// use), of the resources the caller's token may see. `limit` counts the newest events before
/// those the token may not see are left out.
pub(super) fn log(work: &Work<'_>) -> Reply {
    let query = match read_log(work.query) {
        Ok(query) => query,
        Err(bad) => return problem(&bad).into(),
    };
    if let Some(resource) = &query.resource {
        if let Err(problem) = work.caller.check_see(resource) {
            return problem.into();
        }
    }
    work.on_store(|store| {
        let mut text = String::new();
        let events = store.perform(op::Log { query })?;
        for event in events
            .iter()
            .filter(|event| work.caller.may_see(&event.resource))
        {
            let line = serde_json::to_string(&event).map_err(anyhow::Error::from)?;
            text.push_str(&line);
            text.push('\n');
        }
        Ok(Reply::text(text, "application/x-ndjson"))
    })
}
