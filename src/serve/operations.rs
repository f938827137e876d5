//! Each route's work on the store, on a blocking thread: the request's fields read and checked,
//! the operation carried out, and the command's own answer turned into the HTTP one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hyper::StatusCode;

use super::State;
use super::access::Caller;
use super::api::{LONGEST_POLL, Reply, answered};
use super::input::{Bad, Fields, Params};
use crate::answer::{
    AcquireAnswer, Answer, BreakAnswer, KeptAnswer, ListAnswer, ReleaseAnswer, RenewAnswer,
};
use crate::engine::Finish;
use crate::lock::{Eviction, Fence, LogQuery, Owner, Remark, Resource};
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
    let state = call.state;
    let mut fields = match Fields::parse(call.body) {
        Ok(fields) => fields,
        Err(bad) => return Ok(Err(bad)),
    };
    let (mut request, wait) = match fields
        .acquire()
        .and_then(|read| fields.finish().map(|()| read))
    {
        Ok(read) => read,
        Err(bad) => return Ok(Err(bad)),
    };
    request.owner = call.caller.owner(request.owner);
    let mode = request.mode;
    state.stores.with(|store| {
        let attempt = if wait.is_zero() {
            let started = Instant::now();
            let outcome = store.acquire(resource, &request)?;
            wait::Attempt { outcome, started }
        } else {
            let this_poll = wait.min(LONGEST_POLL);
            let keeps_place = wait > LONGEST_POLL;
            state.waiting.fetch_add(1, Ordering::SeqCst);
            // A token taken out of the file meanwhile ends its waits.
            let stop = || {
                state.stopping.load(Ordering::SeqCst)
                    || gone.load(Ordering::SeqCst)
                    || call.caller.revoked(state.tokens().as_deref())
            };
            let one = wait::One {
                resource,
                request: &request,
            };
            let waited = wait::serve(store, &one, this_poll, keeps_place, &stop);
            state.waiting.fetch_sub(1, Ordering::SeqCst);
            waited?
        };
        let mut answer = AcquireAnswer::new(resource, &attempt.outcome, mode);
        if let (AcquireAnswer::Busy(busy), crate::lock::Acquire::Busy { position, .. }) =
            (&mut answer, &attempt.outcome)
        {
            if !wait.is_zero() {
                busy.position = *position;
            }
        }
        let reply = answered(&answer, || answer.text());
        Ok(Ok(match &attempt.outcome {
            crate::lock::Acquire::Acquired { tenure, .. } => {
                reply.granted(*tenure, attempt.started.saturating_duration_since(received))
            }
            _ => reply,
        }))
    })
}

pub(super) fn release(call: &Call<'_>, resource: &Resource) -> Outcome {
    let state = call.state;
    let read = (|| {
        let mut params = Params::parse(call.query)?;
        let owner_param = params.take("owner");
        params.finish()?;
        let mut fields = Fields::parse(call.body)?;
        let owner = call.caller.owner(fields.owner_or(owner_param.as_deref())?);
        let fence = fields.fence()?;
        // As `run --hold-at-least`: 1 s to 365 days.
        let hold = fields.seconds("hold_at_least_seconds", 1, crate::lock::MAX_TTL_SECS)?;
        fields.finish()?;
        Ok((owner, fence, hold))
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
    let read = (|| {
        let mut fields = Fields::parse(call.body)?;
        let owner = call.caller.owner(fields.owner()?);
        let ttl = fields.ttl()?;
        let fence = fields.fence()?;
        fields.finish()?;
        Ok((owner, ttl, fence))
    })();
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

pub(super) fn evict(call: &Call<'_>, resource: &Resource) -> Outcome {
    let state = call.state;
    let read = (|| {
        let mut fields = Fields::parse(call.body)?;
        let reason = fields
            .remark("reason")?
            .ok_or_else(|| Bad::Invalid("reason is required".into()))?;
        let owner = fields.optional_owner()?;
        let by = fields.remark("by")?;
        fields.finish()?;
        Ok((reason, owner, by))
    })();
    let (reason, owner, by) = match read {
        Ok(read) => read,
        Err(bad) => return Ok(Err(bad)),
    };
    let eviction = Eviction {
        by: by.unwrap_or_else(|| Remark::from_store("distlock serve")),
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
    let prefix = (|| {
        let mut params = Params::parse(call.query)?;
        let prefix = params.take("prefix").unwrap_or_default();
        params.finish()?;
        Ok(prefix)
    })();
    let prefix = match prefix {
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
    let read = (|| {
        let mut params = Params::parse(call.query)?;
        let resource = params
            .take("resource")
            .map(|r| Resource::parse(&r).map_err(Bad::Invalid))
            .transpose()?;
        let since = params.duration("since")?;
        let limit = params.count("limit")?;
        params.finish()?;
        Ok(LogQuery {
            resource,
            since,
            limit,
        })
    })();
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
