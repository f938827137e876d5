//! The queues as those who look at them see them (`GET /queues`, the dashboard): each
//! resource's live places in arrival order, with who waits, since when and for what.

use serde::{Deserialize, Serialize};

use super::{Mode, Owner, Resource, Timestamp, TokenName};

/// The live places in one resource's queue, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queue {
    pub resource: Resource,
    pub waiters: Vec<Place>,
}

/// One live place in a queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    pub owner: Owner,
    /// The token that proved the owner (`distlock serve --tokens`), if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<TokenName>,
    /// When the place was taken, by the store's clock (not recorded before schema version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    #[serde(flatten)]
    pub mode: Mode,
    /// A lock set's members, every one of which it waits for; none for one resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Resource>,
}

/// `places` (resource, place), sorted by resource and then arrival, as one [`Queue`] per
/// resource.
pub fn queues(places: Vec<(Resource, Place)>) -> Vec<Queue> {
    let mut queues: Vec<Queue> = Vec::new();
    for (resource, place) in places {
        match queues.last_mut() {
            Some(queue) if queue.resource == resource => queue.waiters.push(place),
            _ => queues.push(Queue {
                resource,
                waiters: vec![place],
            }),
        }
    }
    queues
}
