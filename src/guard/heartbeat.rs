//! The renewing side of `run`: its own store connection, its own thread.
//!
//! A slow or blocked renewal therefore never delays the supervisor's reaction: the deadline by
//! which the command must be stopped is kept by the supervisor, not here. The heartbeat only
//! reports what the store answered, as [`Event`]s, and stops when told or when the lock is gone.
//!
//! Each [`Event::Renewed`] carries the lease end counted from *before* the renewal was sent, so
//! it never overstates the lease.
//!
//! Its connections are opened with [`store::reopen`], which never creates a store: a SQLite
//! store removed while the command runs is reported as gone ([`store::Vanished`], a lost
//! lease), not made anew and then searched in vain for the lock.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::lock::{EventKind, Fence, LogQuery, Owner, Renew, Resource, Ttl};
use crate::store::{self, Location, LockStore};

use super::supervisor::Event;

/// What to keep renewing.
pub struct Heartbeat {
    pub location: Location,
    pub resource: Resource,
    pub owner: Owner,
    pub ttl: Ttl,
    pub fence: Fence,
}

impl Heartbeat {
    /// Why this tenure is no longer this run's: an operator's `break` says who and why in the
    /// history (whether the resource is free by now or already someone else's); otherwise
    /// `otherwise`.
    fn why_gone(&self, store: Option<&mut Box<dyn LockStore>>, otherwise: &str) -> String {
        let query = LogQuery {
            resource: Some(self.resource.clone()),
            since: None,
            limit: Some(100),
        };
        let broken = store
            .and_then(|store| store.log(&query).ok())
            .and_then(|events| {
                events
                    .into_iter()
                    .rev()
                    .find(|e| e.fence == self.fence && e.event == EventKind::Broken)
            })
            .and_then(|event| event.broken);
        match broken {
            Some(breach) => format!("it was broken by {} ({})", breach.by, breach.reason),
            None => otherwise.to_owned(),
        }
    }

    /// How often the lock is renewed: every third of its TTL.
    pub fn interval(ttl: Ttl) -> Duration {
        ttl.as_duration() / 3
    }

    /// How soon a failed renewal is tried again.
    pub fn retry(ttl: Ttl) -> Duration {
        Heartbeat::interval(ttl).min(Duration::from_secs(1))
    }

    /// Renews at once, then every [`Heartbeat::interval`], until `stop` is dropped, `report`
    /// says nobody listens any more, or the store says the lock is gone — or is gone itself;
    /// after another store error, retries sooner ([`Heartbeat::retry`]) and on a new
    /// connection. It is started when the first renewal is due.
    pub fn beat(self, report: impl Fn(Event) -> bool, stop: &Receiver<()>) {
        let interval = Heartbeat::interval(self.ttl);
        let retry = Heartbeat::retry(self.ttl);
        let mut store: Option<Box<dyn LockStore>> = None;
        let mut next = Instant::now();
        loop {
            match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let attempt = Instant::now();
            let renewed = match store.as_mut() {
                Some(store) => store.renew(&self.resource, &self.owner, self.ttl, Some(self.fence)),
                None => store::reopen(&self.location).and_then(|opened| {
                    store.insert(opened).renew(
                        &self.resource,
                        &self.owner,
                        self.ttl,
                        Some(self.fence),
                    )
                }),
            };
            let event = match renewed {
                Ok(Renew::Renewed { .. }) => {
                    next = attempt + interval;
                    Event::Renewed(attempt + self.ttl.as_duration())
                }
                Ok(Renew::NotFound) => {
                    Event::Lost(self.why_gone(store.as_mut(), "it expired or was released"))
                }
                Ok(Renew::Forbidden) => {
                    Event::Lost(self.why_gone(store.as_mut(), "another owner holds it"))
                }
                Err(err) => match err.downcast_ref::<store::Vanished>() {
                    // The lock went with the store: nobody opening it now finds it held.
                    Some(gone) => Event::Lost(gone.to_string()),
                    None => {
                        // Reconnect for the next try: the connection itself may be what failed.
                        store = None;
                        next = Instant::now() + retry;
                        Event::Trouble(format!("{err:#}"))
                    }
                },
            };
            let lost = matches!(event, Event::Lost(_));
            if !report(event) || lost {
                return;
            }
        }
    }
}
