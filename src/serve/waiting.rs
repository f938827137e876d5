//! A waiting acquire through the server: a task that looks at the store (through the writer),
//! sleeps until it may be let in, and looks again, for at most [`LONGEST_POLL`] per request.
//! It holds no thread and no store connection while it sleeps.
//!
//! It sleeps until the first of: its bell ([`Waiters`]: the writer rings the first waiter
//! left in a queue after a commit that may let it in, the watcher rings for other processes'
//! changes); the end of the lease that blocks it (an expiry rings no bell); [`REFRESH`], so
//! that its place in the queue, which lapses 5 s after its latest look, stays; and the end of
//! the poll. The rules are those of the command line's wait ([`crate::wait`]): a request whose
//! client waits longer than this poll keeps its place for the client's next request; one whose
//! wait ends here gives the place up; a mismatch gives it up at once.
//!
//! A waiting request ends early, answered with its latest look and its place kept, when the
//! server stops or its owner leaves the queue (`POST …/leave`: it does not look again, so that
//! it takes no place back); one whose token was taken out of the tokens file gives its place
//! up too, as it can never ask again. A client that goes away
//! drops the task; its place lapses. Past `--max-waiters` or `--max-waiters-per-token` a request
//! is answered 429 before it waits ([`too_many`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use hyper::header::{HeaderValue, RETRY_AFTER};

use super::lanes::Lane;
use super::problem::Problem;
use super::reply::Reply;
use super::shared::Shared;
use super::waiters::TooMany;
use super::work::Work;
use crate::engine::Request;
use crate::lock::{Members, Owner, Resource, SetAcquire, Timestamp};
use crate::protocol::LONGEST_POLL;
use crate::store::op;
use crate::wait::Attempt;

/// The longest a waiting request sleeps without looking: well inside the 5 s its place in the
/// queue lasts without a look.
const REFRESH: Duration = Duration::from_secs(2);

/// How long a waiter whose look the store failed waits before it looks again.
const STORE_AWAY: Duration = Duration::from_millis(500);

/// Past an expiry, how long a waiter lets the store's clock pass it before it looks.
const PAST_EXPIRY: Duration = Duration::from_millis(5);

/// How long a leave waits for the owner's waiting requests to answer.
const ANSWERED: Duration = Duration::from_secs(5);

/// What a caller past a bound is told to wait before it asks again, in seconds.
const RETRY_AFTER_SECONDS: u64 = 1;

/// The acquire of `members` as `request` asks, waiting up to `wait` (of which this request
/// waits at most [`LONGEST_POLL`]); see the module's notes.
///
/// # Errors
///
/// The answer to send instead: 429 past a bound, 503 when the store fails.
pub(super) async fn wait(
    work: &Work<'_>,
    members: &Members,
    request: &Request,
    wait: Duration,
) -> Result<Attempt, Reply> {
    let state = work.state;
    let until = Instant::now() + wait.min(LONGEST_POLL);
    let keeps_place = wait > LONGEST_POLL;
    let token = work.caller.token_name();
    let waiting = (state.waiters)
        .enter(token.as_ref(), &request.owner, members.as_slice())
        .map_err(too_many)?;
    loop {
        let started = Instant::now();
        let has_time = started < until;
        let mut asked = request.clone();
        asked.waits = has_time || keeps_place;
        let acquire = op::Acquire {
            members: members.clone(),
            request: asked,
            until: None,
        };
        let outcome = match work.write(Lane::Take, acquire).await {
            Ok(acquired) => acquired.outcome,
            // The store failed this look (a PostgreSQL restarting under the server): the
            // waiter waits on and looks again while this poll has time, as a waiter on the
            // store itself seeks it again until its wait runs out.
            Err(refused) => {
                let left = until.saturating_duration_since(Instant::now());
                let ended = state.stopping.load(Ordering::SeqCst)
                    || waiting.left()
                    || work.caller.revoked(state.tokens().as_deref());
                if left <= STORE_AWAY || ended {
                    return Err(refused);
                }
                tokio::time::sleep(STORE_AWAY).await;
                continue;
            }
        };
        let next = next(&outcome, has_time, keeps_place);
        let attempt = Attempt { outcome, started };
        let ends = match next {
            Next::Answer => return Ok(attempt),
            Next::LeaveAndAnswer => {
                leave(work, members, &request.owner).await?;
                return Ok(attempt);
            }
            Next::Sleep(ends) => ends,
            Next::Again => Some(Timestamp(0)),
        };
        let pause = until
            .saturating_duration_since(Instant::now())
            .min(REFRESH)
            .min(ends.map_or(REFRESH, until_expiry));
        waiting.rung(pause).await;
        if work.caller.revoked(state.tokens().as_deref()) {
            // Its token was taken out of the file: it can never ask again, so its place goes
            // now rather than lapsing 5 s later with the resource reserved for it meanwhile.
            leave(work, members, &request.owner).await?;
            return Ok(attempt);
        }
        if state.stopping.load(Ordering::SeqCst) || waiting.left() {
            // The latest look is the answer, the place kept.
            return Ok(attempt);
        }
    }
}

/// What a waiting request does after a look.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Answer,
    /// Give up the place in the queue, then answer (out of time, or a mismatch).
    LeaveAndAnswer,
    /// Sleep, at most until this lease ends.
    Sleep(Option<Timestamp>),
    /// Look again after a moment.
    Again,
}

/// What a waiting request does after a look that came out as `outcome`: with time left in
/// this poll (`has_time`) a busy one sleeps, at most until the lease that blocks it soonest
/// ends; out of time, it answers and keeps its place when its client waits on
/// (`keeps_place`), else gives the place up; a mismatch is final, and gives it up at once.
fn next(outcome: &SetAcquire, has_time: bool, keeps_place: bool) -> Next {
    match outcome {
        SetAcquire::Acquired { .. } => Next::Answer,
        SetAcquire::Mismatch { .. } => Next::LeaveAndAnswer,
        // Free, and first in line on every member (a place it took when its grant was not
        // written): nothing will ring for it, it looks again.
        SetAcquire::Busy { blocked }
            if has_time
                && blocked.iter().all(|member| {
                    member.holder.is_none()
                        && member.holders.is_empty()
                        && member.position.is_none_or(|at| at <= 1)
                }) =>
        {
            Next::Again
        }
        SetAcquire::Busy { blocked } if has_time => Next::Sleep(
            blocked
                .iter()
                .flat_map(|member| member.holder.iter().chain(&member.holders))
                .map(|holder| holder.expires_at)
                .min(),
        ),
        SetAcquire::Busy { .. } if keeps_place => Next::Answer,
        SetAcquire::Busy { .. } => Next::LeaveAndAnswer,
    }
}

/// How long from now until a lease that ends at `expires_at` has ended, by the store's clock.
fn until_expiry(expires_at: Timestamp) -> Duration {
    let left = expires_at.0.saturating_sub(Timestamp::now().0);
    Duration::from_millis(u64::try_from(left).unwrap_or(0)) + PAST_EXPIRY
}

/// Gives up `owner`'s place in every member's queue.
async fn leave(work: &Work<'_>, members: &Members, owner: &Owner) -> Result<(), Reply> {
    let leave = op::Leave {
        members: members.clone(),
        owner: owner.clone(),
        until: None,
    };
    work.write(Lane::Keep, leave).await.map(drop)
}

/// Ends every request of `owner` waiting here on any of `resources`, and returns once each
/// has answered (at most [`ANSWERED`]), so that none takes back a place given up next.
pub(super) async fn end_owners(state: &Shared, owner: &Owner, resources: &[Resource]) {
    let left = state.waiters.leave(owner, resources);
    let until = Instant::now() + ANSWERED;
    while !state.waiters.ended(&left) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// 429, past a bound of waiting requests: the bound in the problem document, and when to ask
/// again in `Retry-After`.
fn too_many(bound: TooMany) -> Reply {
    let requests = |most: usize| {
        if most == 1 {
            "1 request".to_owned()
        } else {
            format!("{most} requests")
        }
    };
    let detail = match bound {
        TooMany::Caller(most) => format!(
            "this token has {} waiting already, the most the server takes \
             (--max-waiters-per-token)",
            requests(most)
        ),
        TooMany::Server(most) => format!(
            "the server has {} waiting already, the most it takes (--max-waiters)",
            requests(most)
        ),
    };
    let mut reply: Reply =
        Problem::new(StatusCode::TOO_MANY_REQUESTS, "too-many-waiters", detail).into();
    reply.headers = Box::new([(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS))]);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Blocked, Fence, Grant, Holder, Lock, Mode};

    fn r(name: &str) -> Resource {
        Resource::parse(name).expect("a resource")
    }

    fn holder(expires_at: i64) -> Holder {
        Holder {
            owner: Owner::parse("h").expect("an owner"),
            expires_at: Timestamp(expires_at),
            mode: Mode::Exclusive,
            note: None,
        }
    }

    /// Busy on members each blocked by holders whose leases end at these instants (none: free
    /// but reserved for earlier waiters).
    fn busy(members: &[&[i64]]) -> SetAcquire {
        busy_at(members, 1)
    }

    /// As [`busy`], the requester at `position` in every member's queue.
    fn busy_at(members: &[&[i64]], position: usize) -> SetAcquire {
        SetAcquire::Busy {
            blocked: members
                .iter()
                .enumerate()
                .map(|(at, ends)| Blocked {
                    resource: r(&format!("m{at}")),
                    holder: ends.first().map(|&end| holder(end)),
                    holders: ends.iter().skip(1).map(|&end| holder(end)).collect(),
                    waiting: 0,
                    position: Some(position),
                })
                .collect(),
        }
    }

    fn granted() -> SetAcquire {
        SetAcquire::Acquired {
            locks: vec![Lock {
                resource: r("m0"),
                owner: Owner::parse("o").expect("an owner"),
                fence: Fence(1),
                acquired_at: Timestamp(0),
                expires_at: Timestamp(1000),
                mode: Mode::Exclusive,
                note: None,
                token: None,
            }],
            tenures: vec![Grant::New],
        }
    }

    #[test]
    fn a_waiting_request_answers_leaves_or_sleeps_until_the_soonest_lease_end() {
        let mismatch = SetAcquire::Mismatch {
            resource: r("m0"),
            holders: Vec::new(),
        };
        // (outcome, time left in this poll, the client waits on) → next
        let cases = [
            (granted(), true, false, Next::Answer),
            (granted(), false, true, Next::Answer),
            (mismatch.clone(), true, true, Next::LeaveAndAnswer),
            (mismatch, false, false, Next::LeaveAndAnswer),
            (
                busy(&[&[500]]),
                true,
                false,
                Next::Sleep(Some(Timestamp(500))),
            ),
            (
                busy(&[&[500]]),
                true,
                true,
                Next::Sleep(Some(Timestamp(500))),
            ),
            // Shared holders, a semaphore's, a set's members: the soonest end of all.
            (
                busy(&[&[900, 300, 700]]),
                true,
                false,
                Next::Sleep(Some(Timestamp(300))),
            ),
            (
                busy(&[&[900], &[400]]),
                true,
                false,
                Next::Sleep(Some(Timestamp(400))),
            ),
            // Free but reserved for earlier waiters: no lease to wait for, rung when they go.
            (busy_at(&[&[]], 2), true, false, Next::Sleep(None)),
            (
                busy_at(&[&[], &[500]], 1),
                true,
                false,
                Next::Sleep(Some(Timestamp(500))),
            ),
            // Free and first in line (its grant was not written): it looks again.
            (busy(&[&[]]), true, false, Next::Again),
            (busy(&[&[], &[]]), true, true, Next::Again),
            // Out of time: the place is kept for the client's next request, or given up.
            (busy(&[&[500]]), false, true, Next::Answer),
            (busy(&[&[500]]), false, false, Next::LeaveAndAnswer),
        ];
        for (outcome, has_time, keeps_place, expected) in cases {
            assert_eq!(
                next(&outcome, has_time, keeps_place),
                expected,
                "{outcome:?}, time left {has_time}, waits on {keeps_place}"
            );
        }
    }

    #[test]
    fn a_lease_end_is_waited_for_from_now_and_a_little_past_it() {
        let now = Timestamp::now().0;
        let cases = [(now - 10_000, Duration::ZERO), (now - 1, Duration::ZERO)];
        for (ends, least) in cases {
            assert_eq!(until_expiry(Timestamp(ends)), least + PAST_EXPIRY);
        }
        let later = until_expiry(Timestamp(now + 60_000));
        assert!(later > Duration::from_secs(59) && later <= Duration::from_secs(60) + PAST_EXPIRY);
    }
}
