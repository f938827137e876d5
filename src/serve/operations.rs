//! Each route's work on the store, on a blocking thread: the request's fields read and checked,
//! the operation carried out, and the command's own answer turned into the HTTP one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::State;
use super::access::Caller;
use super::api::{Reply, answered, problem};
use crate::answer::{
    AcquireAnswer, Answer, BreakAnswer, KeptAnswer, ListAnswer, ReleaseAnswer, RenewAnswer,
    SetAcquireAnswer, SetFinishAnswer, SetReleaseAnswer, SetRenewAnswer,
};
use crate::engine::{Finish, Request};
use crate::lock::{Acquire, Eviction, Fence, Members, Owner, Remark, Resource, SetAcquire, Shape};
use crate::protocol::{
    AcquireRequest, Bad, BreakRequest, End, Fields, LONGEST_POLL, LeaveRequest, ReleaseRequest,
    RenewRequest, read_list, read_log,
};
use crate::store::{LockStore, Locks};
use crate::wait;

/// A store failure (the outer error), or a reply or bad input.
pub(super) type Outcome = anyhow::Result<Result<Reply, Bad>>;

/// One request, as its route's work sees it.
pub(super) struct Call<'a> {
    pub(super) state: &'a State,
    /// Who calls: the owner it names is proved by its token.
    pub(super) caller: &'a Caller,
    pub(super) body: &'a [u8],
    pub(super) query: Option<&'a str>,
}

pub(super) fn acquire(call: &Call<'_>, resource: &Resource, gone: &AtomicBool) -> Outcome {
    // Before the request was read it was sent: what it waited from here is what a client may
    // add to the moment it sent it.
    let received = Instant::now();
    let one = Members::one(resource.clone());
    let read = body(call, |fields| AcquireRequest::read(one, Shape::One, fields));
    let (request, wait) = match read.map(|read| acquire_request(call, read)) {
        Ok(read) => read,
        Err(bad) => return Ok(Err(bad)),
    };
    let one = wait::One {
        resource,
        request: &request,
    };
    call.state.stores.with(|store| {
        let attempt = attempt(store, call, &one, wait, gone)?;
        let mut answer = AcquireAnswer::new(resource, &attempt.outcome, request.mode);
        if let (AcquireAnswer::Busy(busy), Acquire::Busy { position, .. }) =
            (&mut answer, &attempt.outcome)
        {
            if !wait.is_zero() {
                busy.position = *position;
            }
        }
        let reply = answered(&answer, || answer.text());
        Ok(Ok(match &attempt.outcome {
            Acquire::Acquired { tenure, .. } => reply.granted(
                std::slice::from_ref(tenure),
                attempt.started.saturating_duration_since(received),
            ),
            _ => reply,
        }))
    })
}

/// `POST /sets`: [`acquire`] of a lock set, all or nothing, waiting in every member's queue
/// at once. A busy answer names every member not free for the owner now, each with its
/// place in that member's queue when the request waited and is to ask again.
pub(super) fn acquire_set(call: &Call<'_>, gone: &AtomicBool) -> Outcome {
    // As for one resource: a client may add what it waited from here to its sending.
    let received = Instant::now();
    let read = set_body(call, |fields, members| {
        AcquireRequest::read(members.clone(), Shape::Set, fields)
            .map(|read| acquire_request(call, read))
    });
    let (members, (request, wait)) = match read {
        Ok(read) => read,
        Err(refused) => return Ok(Ok(refused)),
    };
    let set = wait::Set {
        members: &members,
        request: &request,
    };
    call.state.stores.with(|store| {
        let attempt = attempt(store, call, &set, wait, gone)?;
        let mut answer = SetAcquireAnswer::new(&members, &attempt.outcome, request.mode);
        if let (SetAcquireAnswer::Busy(busy), SetAcquire::Busy { blocked }) =
            (&mut answer, &attempt.outcome)
        {
            if !wait.is_zero() {
                for (shown, member) in busy.blocked.iter_mut().zip(blocked) {
                    shown.position = member.position;
                }
            }
        }
        let reply = answered(&answer, || answer.text());
        Ok(Ok(match &attempt.outcome {
            SetAcquire::Acquired { tenures, .. } => {
                reply.granted(tenures, attempt.started.saturating_duration_since(received))
            }
            _ => reply,
        }))
    })
}

/// The request of an acquire, one resource's or a set's, and its `wait_seconds`; the owner it
/// names is proved by the caller's token.
fn acquire_request(call: &Call<'_>, read: AcquireRequest) -> (Request, Duration) {
    let mut request = read.request;
    request.owner = call.caller.owner(request.owner);
    (
        request,
        Duration::from_secs(read.wait_seconds.unwrap_or_default()),
    )
}

/// The deciding attempt of an acquire, one resource's or a set's: the only one for a request
/// that does not wait; else the command line's wait in the queue, for at most [`LONGEST_POLL`]
/// of `wait`, keeping the place when more of the wait is left for the client's next request,
/// and ended early by the server's stopping, the client going away or leaving the queue
/// ([`leave`]), or its token taken out of the file meanwhile.
fn attempt<W: wait::Wanted>(
    store: &mut dyn LockStore,
    call: &Call<'_>,
    wanted: &W,
    wait: Duration,
    gone: &AtomicBool,
) -> anyhow::Result<wait::Attempt<W::Outcome>> {
    if wait.is_zero() {
        let started = Instant::now();
        let outcome = wanted.ask(store, wanted.request())?;
        return Ok(wait::Attempt { outcome, started });
    }
    let state = call.state;
    let this_poll = wait.min(LONGEST_POLL);
    let keeps_place = wait > LONGEST_POLL;
    state.waiting.fetch_add(1, Ordering::SeqCst);
    let waiting = state
        .waits
        .enter(&wanted.request().owner, wanted.resources());
    let stop = || {
        state.stopping.load(Ordering::SeqCst)
            || gone.load(Ordering::SeqCst)
            || waiting.left()
            || call.caller.revoked(state.tokens().as_deref())
    };
    let waited = wait::serve(store, wanted, this_poll, keeps_place, &stop);
    drop(waiting);
    state.waiting.fetch_sub(1, Ordering::SeqCst);
    Ok(waited?)
}

/// The body's fields as `read` reads them, none left unread.
fn body<T>(call: &Call<'_>, read: impl FnOnce(&mut Fields) -> Result<T, Bad>) -> Result<T, Bad> {
    let mut fields = Fields::parse(call.body)?;
    let read = read(&mut fields)?;
    fields.finish()?;
    Ok(read)
}

/// A lock set's body: its `resources`, every one of which the caller's token must be allowed
/// to use (else 403 `not-allowed`, naming the first that is not, and nothing done), then the
/// rest of its fields as `read` reads them, none left unread. Refused, the answer to send.
fn set_body<T>(
    call: &Call<'_>,
    read: impl FnOnce(&mut Fields, &Members) -> Result<T, Bad>,
) -> Result<(Members, T), Reply> {
    let bad = |bad: Bad| Reply::from(problem(&bad));
    let mut fields = Fields::parse(call.body).map_err(bad)?;
    let members = fields.members().map_err(bad)?;
    call.caller.check_all(members.as_slice())?;
    let read = read(&mut fields, &members).map_err(bad)?;
    fields.finish().map_err(bad)?;
    Ok((members, read))
}

pub(super) fn release(call: &Call<'_>, resource: &Resource) -> Outcome {
    let state = call.state;
    let read = (|| {
        let owner = ReleaseRequest::owner_param(call.query)?;
        let mut fields = Fields::parse(call.body)?;
        let read = ReleaseRequest::read_one(resource.clone(), owner.as_deref(), &mut fields)?;
        fields.finish()?;
        let hold = match read.end {
            End::Finish { hold } => hold,
            End::Release => None,
        };
        let fence = read.fences.and_then(|fences| fences.first().copied());
        Ok((call.caller.owner(read.owner), fence, hold))
    })();
    let (owner, fence, hold) = match read {
        Ok(read) => read,
        Err(bad) => return Ok(Err(bad)),
    };
    state.stores.with(|store| {
        let Some(hold) = hold else {
            return released(store, resource, &owner, fence).map(Ok);
        };
        // A hold is kept for one tenure: the one named, or else the owner's own.
        let fence = match fence {
            Some(fence) => Some(fence),
            None => store
                .status(resource)?
                .locks
                .iter()
                .find(|lock| lock.owner == owner)
                .map(|lock| lock.fence),
        };
        let finished = match fence {
            Some(fence) => store.finish(resource, &owner, fence, Some(hold))?,
            None => Finish::NotFound,
        };
        Ok(Ok(match finished {
            Finish::Released => Reply::empty(StatusCode::NO_CONTENT),
            Finish::Kept { until } => {
                Reply::json(StatusCode::OK, &KeptAnswer::new(resource, until))
            }
            // Not this owner's: the plain release says why (not held, or another's).
            Finish::NotFound => released(store, resource, &owner, fence)?,
        }))
    })
}

/// A release of `owner`'s tenure (only `fence`, when given), answered as the command's: 204,
/// or the refusal's problem document.
fn released(
    store: &mut dyn LockStore,
    resource: &Resource,
    owner: &Owner,
    fence: Option<Fence>,
) -> anyhow::Result<Reply> {
    let outcome = store.release(resource, owner, fence)?;
    Ok(match ReleaseAnswer::new(resource, &outcome) {
        ReleaseAnswer::Released(_) => Reply::empty(StatusCode::NO_CONTENT),
        refused @ ReleaseAnswer::Refused(_) => answered(&refused, || refused.text()),
    })
}

pub(super) fn renew(call: &Call<'_>, resource: &Resource) -> Outcome {
    let state = call.state;
    let one = Members::one(resource.clone());
    let read = body(call, |fields| RenewRequest::read(one, Shape::One, fields)).map(|read| {
        let fence = read.fences.and_then(|fences| fences.first().copied());
        (call.caller.owner(read.owner), read.ttl, fence)
    });
    let (owner, ttl, fence) = match read {
        Ok(read) => read,
        Err(bad) => return Ok(Err(bad)),
    };
    state.stores.with(|store| {
        let outcome = store.renew(resource, &owner, ttl, fence)?;
        let answer = RenewAnswer::new(resource, &outcome);
        Ok(Ok(answered(&answer, || answer.text())))
    })
}

/// `POST /sets/renew`: every member's lease moved, or — when the owner does not hold one of
/// them live — nothing changed and the first such member named (404, 403).
pub(super) fn renew_set(call: &Call<'_>) -> Outcome {
    let read = set_body(call, |fields, members| {
        let read = RenewRequest::read(members.clone(), Shape::Set, fields)?;
        Ok((call.caller.owner(read.owner), read.ttl, read.fences))
    });
    let (members, (owner, ttl, fences)) = match read {
        Ok(read) => read,
        Err(refused) => return Ok(Ok(refused)),
    };
    call.state.stores.with(|store| {
        let outcome = store.renew_set(&members, &owner, ttl, fences.as_deref())?;
        let answer = SetRenewAnswer::new(&outcome);
        Ok(Ok(answered(&answer, || answer.text())))
    })
}

/// `POST /sets/release`: every member released (200, with the command's body: a set's
/// release says which resources it let go), or nothing changed and the first member the
/// owner does not hold live named (404, 403).
///
/// With `"each":true` it is `run`'s end of its set instead, in one request: each tenure that
/// `fences` names is ended on its own — released, or kept until its start +
/// `hold_at_least_seconds` — and one that is no longer the owner's is skipped, so that a
/// member lost (broken, expired) leaves the others to be let go all the same; 200 with each
/// member's end ([`SetFinishAnswer`]).
pub(super) fn release_set(call: &Call<'_>) -> Outcome {
    let read = set_body(call, |fields, members| {
        let read = ReleaseRequest::read_set(members.clone(), fields)?;
        let each = match read.end {
            End::Finish { hold } => Some(hold),
            End::Release => None,
        };
        Ok((call.caller.owner(read.owner), read.fences, each))
    });
    let (members, (owner, fences, each)) = match read {
        Ok(read) => read,
        Err(refused) => return Ok(Ok(refused)),
    };
    call.state.stores.with(|store| {
        if let (Some(hold), Some(fences)) = (each, &fences) {
            let ends = store.finish_set(&members, &owner, fences, hold)?;
            let answer = SetFinishAnswer::new(&members, &ends);
            return Ok(Ok(Reply::json(StatusCode::OK, &answer)));
        }
        let outcome = store.release_set(&members, &owner, fences.as_deref())?;
        let answer = SetReleaseAnswer::new(&members, &outcome);
        Ok(Ok(answered(&answer, || answer.text())))
    })
}

/// `POST /locks/{r}/leave`: the owner gives up its place in the queue, as an interrupted
/// waiter does. Its requests still waiting here end first (answered busy), so that none takes
/// the place back; then the place is taken out. 204, whether it had one or not.
pub(super) fn leave(call: &Call<'_>, resource: &Resource) -> Outcome {
    let one = Members::one(resource.clone());
    let owner = match body(call, |fields| LeaveRequest::read(one, Shape::One, fields)) {
        Ok(read) => call.caller.owner(read.owner),
        Err(bad) => return Ok(Err(bad)),
    };
    let resources = std::slice::from_ref(resource);
    call.state.waits.leave(&owner, resources);
    call.state.stores.with(|store| {
        store.leave(resource, &owner)?;
        Ok(Ok(Reply::empty(StatusCode::NO_CONTENT)))
    })
}

/// `POST /sets/leave`: [`leave`] of every member's queue at once, as a set waiter leaves.
pub(super) fn leave_set(call: &Call<'_>) -> Outcome {
    let read = set_body(call, |fields, members| {
        let read = LeaveRequest::read(members.clone(), Shape::Set, fields)?;
        Ok(call.caller.owner(read.owner))
    });
    let (members, owner) = match read {
        Ok(read) => read,
        Err(refused) => return Ok(Ok(refused)),
    };
    call.state.waits.leave(&owner, members.as_slice());
    call.state.stores.with(|store| {
        store.leave_set(&members, &owner)?;
        Ok(Ok(Reply::empty(StatusCode::NO_CONTENT)))
    })
}

pub(super) fn evict(call: &Call<'_>, resource: &Resource) -> Outcome {
    let state = call.state;
    let read = body(call, |fields| BreakRequest::read(resource.clone(), fields))
        .map(|read| (read.reason, read.owner, read.by));
    let (reason, owner, by) = match read {
        Ok(read) => read,
        Err(bad) => return Ok(Err(bad)),
    };
    // Who broke it, as the server knows it: the operator's token, never the body's words.
    let eviction = Eviction {
        by: by.unwrap_or_else(|| Remark::from_store("distlock serve")),
        by_token: call.caller.token_name(),
        reason,
    };
    state.stores.with(|store| {
        let removed = store.evict(resource, owner.as_ref(), &eviction)?;
        let answer = BreakAnswer::new(resource, removed, &eviction);
        Ok(Ok(answered(&answer, || answer.text())))
    })
}

/// The live locks under `?prefix=`, of the resources the caller's token may see.
pub(super) fn list(call: &Call<'_>) -> Outcome {
    let state = call.state;
    let prefix = match read_list(call.query) {
        Ok(prefix) => prefix,
        Err(bad) => return Ok(Err(bad)),
    };
    state.stores.with(|store| {
        let mut locks = store.list(&prefix)?;
        locks.retain(|lock| call.caller.may_see(&lock.resource));
        Ok(Ok(Reply::json(StatusCode::OK, &ListAnswer { locks })))
    })
}

/// The history (of `?resource=`, which the caller's token must be allowed to use), of the
/// resources the caller's token may see. `limit` counts the newest events before those the
/// token may not see are left out.
pub(super) fn log(call: &Call<'_>) -> Outcome {
    let state = call.state;
    let read = read_log(call.query);
    let query = match read {
        Ok(query) => query,
        Err(bad) => return Ok(Err(bad)),
    };
    if let Some(resource) = &query.resource {
        if let Err(problem) = call.caller.check_see(resource) {
            return Ok(Ok(problem.into()));
        }
    }
    state.stores.with(|store| {
        let mut text = String::new();
        let events = store.log(&query)?;
        for event in events
            .iter()
            .filter(|event| call.caller.may_see(&event.resource))
        {
            text.push_str(&serde_json::to_string(&event)?);
            text.push('\n');
        }
        Ok(Ok(Reply::text(text, "application/x-ndjson")))
    })
}
