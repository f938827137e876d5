//! Each route's work on the store: the request read and checked ([`crate::protocol`]), the
//! operation carried out — a lock operation by the store's writer ([`super::writer`]), a read
//! on a reader ([`super::readers`]) — and the command's own answer turned into the HTTP one. One
//! handler per lock operation serves both of its routes: a single resource's (`/locks/{r}…`,
//! its members a set of one) and a lock set's (`/sets…`); only the shape of the answer differs,
//! and it follows the route. A waiting acquire is a task that sleeps between its looks
//! ([`super::waiting`]), holding no thread and no store connection.

use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::lanes::Lane;
use super::reply::{Reply, answered, problem};
use super::waiting;
use super::work::Work;
use crate::answer::{
    Answer, BreakAnswer, KeptAnswer, ListAnswer, SetFinishAnswer, ShapedAcquire, ShapedRelease,
    ShapedRenew, StatusAnswer,
};
use crate::engine::Finish;
use crate::lock::{Breaking, Fence, Owner, Remark, Resource, SetAcquire, Shape};
use crate::protocol::{
    AcquireRequest, BreakRequest, End, LeaveRequest, ReleaseRequest, RenewRequest, Target,
    read_list, read_log,
};
use crate::store::{Locks, op};

/// `POST /locks/{r}`, `POST /sets`: an acquire, all or nothing, waiting in every member's
/// queue at once. A busy answer names each member not free for the owner now, with its
/// place in that member's queue when the request waited and is to ask again.
pub(super) async fn acquire(work: &Work<'_>, target: Target) -> Reply {
    // Before the request was read it was sent: what it waited from here is what a client may
    // add to the moment it sent it.
    let received = Instant::now();
    let read = match work.read(target, AcquireRequest::read) {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let (members, shape) = (read.members, read.shape);
    let mut request = read.request;
    // The owner it names is proved by the caller's token.
    request.owner = work.caller.owner(request.owner);
    let wait = Duration::from_secs(read.wait_seconds.unwrap_or_default());
    let attempt = if wait.is_zero() {
        let started = Instant::now();
        let acquire = op::Acquire {
            members: members.clone(),
            request: request.clone(),
            until: None,
        };
        work.write(Lane::Take, acquire)
            .await
            .map(|acquired| crate::wait::Attempt {
                outcome: acquired.outcome,
                started,
            })
    } else {
        waiting::wait(work, &members, &request, wait).await
    };
    let attempt = match attempt {
        Ok(attempt) => attempt,
        Err(refused) => return refused,
    };
    let mut answer = ShapedAcquire::new(shape, &members, &attempt.outcome, request.mode);
    if !wait.is_zero() {
        show_positions(&mut answer, &attempt.outcome);
    }
    let reply = answered(&answer, || answer.text());
    match &attempt.outcome {
        SetAcquire::Acquired { tenures, .. } => {
            reply.granted(tenures, attempt.started.saturating_duration_since(received))
        }
        _ => reply,
    }
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

/// `DELETE /locks/{r}`, `POST /sets/release`: the owner's tenure on every member released
/// (204 for one resource; 200 with the command's body for a set, which says which resources
/// it let go), or nothing changed and the first member the owner does not hold live named
/// (404, 403).
///
/// `run`'s end instead — one resource's with `hold_at_least_seconds`, a set's with
/// `"each":true` — ends each tenure on its own: released, or kept until its start + the hold;
/// one no longer the owner's is skipped, so that a member lost (broken, expired) leaves the
/// others to be let go all the same ([`finish`]).
pub(super) async fn release(work: &Work<'_>, target: Target) -> Reply {
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
    let done = match read.end {
        End::Release => released(work, &read, read.fences.clone()).await,
        End::Finish { hold } => finish(work, &read, hold).await,
    };
    done.unwrap_or_else(|refused| refused)
}

/// A release of the owner's tenures (only `fences`, when given), answered as the command's:
/// 204 for one resource, the set's answer for a set, or the refusal's problem document.
async fn released(
    work: &Work<'_>,
    read: &ReleaseRequest,
    fences: Option<Vec<Fence>>,
) -> Result<Reply, Reply> {
    let release = op::Release {
        members: read.members.clone(),
        owner: read.owner.clone(),
        fences,
    };
    let outcome = work.write(Lane::Keep, release).await?;
    let answer = ShapedRelease::new(read.shape, &read.members, &outcome);
    Ok(match (read.shape, outcome) {
        (Shape::One, Ok(())) => Reply::empty(StatusCode::NO_CONTENT),
        _ => answered(&answer, || answer.text()),
    })
}

/// `run`'s end of its tenures, kept for `hold` past their start. A single resource's tenure is
/// the one named, or else the owner's own; one no longer the owner's is answered as a plain
/// release says why (not held, or another's). A set's members each say how they ended.
async fn finish(
    work: &Work<'_>,
    read: &ReleaseRequest,
    hold: Option<Duration>,
) -> Result<Reply, Reply> {
    let fences = match (read.shape, &read.fences) {
        (_, Some(fences)) => Some(fences.clone()),
        (Shape::One, None) => own_fence(work, read.members.first(), &read.owner)
            .await?
            .map(|f| vec![f]),
        (Shape::Set, None) => None,
    };
    let Some(fences) = fences else {
        return released(work, read, None).await;
    };
    let ending = op::Finish {
        members: read.members.clone(),
        owner: read.owner.clone(),
        fences: fences.clone(),
        hold,
        until: None,
    };
    let ends = work.write(Lane::Keep, ending).await?;
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
        Some(Finish::NotFound) | None => released(work, read, Some(fences)).await?,
    })
}

/// The fence of `owner`'s live tenure of `resource`, if it has one.
async fn own_fence(
    work: &Work<'_>,
    resource: &Resource,
    owner: &Owner,
) -> Result<Option<Fence>, Reply> {
    let status = op::Status {
        resource: resource.clone(),
    };
    let found = work.read_store(move |store| store.perform(status)).await?;
    Ok(found
        .locks
        .iter()
        .find(|lock| lock.owner == *owner)
        .map(|lock| lock.fence))
}

/// `POST /locks/{r}/renew`, `POST /sets/renew`: the owner's lease on every member moved, or —
/// when the owner does not hold one of them live — nothing changed and the first such member
/// named (404, 403).
pub(super) async fn renew(work: &Work<'_>, target: Target) -> Reply {
    let read = match work.read(target, RenewRequest::read) {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let renew = op::Renew {
        members: read.members.clone(),
        owner: work.caller.owner(read.owner),
        ttl: read.ttl,
        fences: read.fences,
        lease_end: None,
    };
    match work.write(Lane::Keep, renew).await {
        Ok(outcome) => {
            let answer = ShapedRenew::new(read.shape, &read.members, &outcome);
            answered(&answer, || answer.text())
        }
        Err(refused) => refused,
    }
}

/// `POST /locks/{r}/leave`, `POST /sets/leave`: the owner gives up its place in every
/// member's queue, as an interrupted waiter does. Its requests still waiting here end first
/// (answered busy), so that none takes the place back; then the place is taken out. 204,
/// whether it had one or not.
pub(super) async fn leave(work: &Work<'_>, target: Target) -> Reply {
    let read = match work.read(target, LeaveRequest::read) {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let owner = work.caller.owner(read.owner);
    waiting::end_owners(work.state, &owner, read.members.as_slice()).await;
    let leave = op::Leave {
        members: read.members,
        owner,
        until: None,
    };
    match work.write(Lane::Keep, leave).await {
        Ok(_) => Reply::empty(StatusCode::NO_CONTENT),
        Err(refused) => refused,
    }
}

/// `POST /locks/{r}/break`: an operator removes the live tenures, recorded as broken by the
/// operator's token (never by what the body says).
pub(super) async fn break_lock(work: &Work<'_>, resource: Resource) -> Reply {
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
    let broken = op::Break {
        resource: read.resource.clone(),
        owner: read.owner,
        breaking: breaking.clone(),
    };
    match work.write(Lane::Keep, broken).await {
        Ok(removed) => {
            let answer = BreakAnswer::new(&read.resource, removed, &breaking);
            answered(&answer, || answer.text())
        }
        Err(refused) => refused,
    }
}

/// `GET /locks/{r}`: the live tenures and waiters (404 when it is not held).
pub(super) async fn status(work: &Work<'_>, resource: Resource) -> Reply {
    let status = op::Status {
        resource: resource.clone(),
    };
    match work.read_store(move |store| store.perform(status)).await {
        Ok(found) => {
            let answer = StatusAnswer::new(&resource, &found);
            answered(&answer, || format!("{resource} is not held"))
        }
        Err(refused) => refused,
    }
}

/// `GET /locks`: the live locks under `?prefix=`, of the resources the caller's token may see.
pub(super) async fn list(work: &Work<'_>) -> Reply {
    let prefix = match read_list(work.query) {
        Ok(prefix) => prefix,
        Err(bad) => return problem(&bad).into(),
    };
    let list = op::List { prefix };
    match work.read_store(move |store| store.perform(list)).await {
        Ok(mut locks) => {
            locks.retain(|lock| work.caller.may_see(&lock.resource));
            Reply::json(StatusCode::OK, &ListAnswer { locks })
        }
        Err(refused) => refused,
    }
}

/// `GET /log`: the history (of `?resource=`, which the caller's token must be allowed to
/// use), of the resources the caller's token may see. `limit` counts the newest events before
/// those the token may not see are left out.
pub(super) async fn log(work: &Work<'_>) -> Reply {
    let query = match read_log(work.query) {
        Ok(query) => query,
        Err(bad) => return problem(&bad).into(),
    };
    if let Some(resource) = &query.resource {
        if let Err(problem) = work.caller.check_see(resource) {
            return problem.into();
        }
    }
    let events = match work
        .read_store(move |store| store.perform(op::Log { query }))
        .await
    {
        Ok(events) => events,
        Err(refused) => return refused,
    };
    let mut text = String::new();
    for event in events
        .iter()
        .filter(|event| work.caller.may_see(&event.resource))
    {
        let Ok(line) = serde_json::to_string(&event) else {
            continue;
        };
        text.push_str(&line);
        text.push('\n');
    }
    Reply::text(text, "application/x-ndjson")
}
