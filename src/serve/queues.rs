//! `GET /queues`: every live place in the queues of the resources the caller's token may read,
//! by resource and then in arrival order, each with its owner, since when it waits and for what
//! (docs/src/http-api.md, "GET /queues"). Read as `list` and `log` read, on one of the
//! server's readers.

use hyper::StatusCode;

use super::reply::{Reply, problem};
use super::work::Work;
use crate::answer::QueuesAnswer;
use crate::protocol::read_queues;
use crate::store::{Locks, op};

/// The queues under `?prefix=` that the caller's token may read. A lock set's members that
/// the token may not read are left out of each of its places, as their queues are.
pub(super) async fn read(work: &Work<'_>) -> Reply {
    let prefix = match read_queues(work.query) {
        Ok(prefix) => prefix,
        Err(bad) => return problem(&bad).into(),
    };
    let found = (work.read_store(move |store| store.perform(op::Queues { prefix }))).await;
    let mut queues = match found {
        Ok(queues) => queues,
        Err(refused) => return refused,
    };
    let caller = work.caller;
    queues.retain(|queue| caller.may_see(&queue.resource));
    for place in queues.iter_mut().flat_map(|queue| queue.waiters.iter_mut()) {
        place.members.retain(|member| caller.may_see(member));
    }
    Reply::json(StatusCode::OK, &QueuesAnswer { queues })
}
