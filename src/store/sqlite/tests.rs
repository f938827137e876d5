//! The SQLite store through the operations every store offers, on a clock the tests move by
//! hand: when a lease expires, which fence a tenure gets, what a tenure records, what the
//! history holds and what `list` shows.

use std::sync::Arc;

use std::sync::atomic::{AtomicI64, Ordering};

use super::super::{Clock, Locks, op};
use super::*;
use crate::engine::{Request, SetDecision};
use crate::lock::{
    Acquire, EventKind, Fence, Grant, Members, Release, Renew, Status, Ttl, released_one,
    renewed_one,
};

/// One resource's operations, as the tests below ask for them: each the store's operation on
/// a set of one, its outcome read as the one resource's.
trait OneResource: Locks {
    fn acquire(&mut self, resource: &Resource, request: &Request) -> super::super::Result<Acquire> {
        let members = Members::one(resource.clone());
        let request = request.clone();
        let acquired = self.perform(op::Acquire {
            members,
            request,
            until: None,
        })?;
        Ok(acquired.outcome.into_one())
    }

    fn status(&mut self, resource: &Resource) -> super::super::Result<Status> {
        let resource = resource.clone();
        self.perform(op::Status { resource })
    }

    fn renew(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> super::super::Result<Renew> {
        let renewed = self.perform(op::Renew {
            members: Members::one(resource.clone()),
            owner: owner.clone(),
            ttl,
            fences: fence.map(|fence| vec![fence]),
            lease_end: None,
        })?;
        Ok(renewed_one(renewed))
    }

    fn release(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
    ) -> super::super::Result<Release> {
        let released = self.perform(op::Release {
            members: Members::one(resource.clone()),
            owner: owner.clone(),
            fences: fence.map(|fence| vec![fence]),
        })?;
        Ok(released_one(released))
    }

    fn list(&mut self, prefix: &str) -> super::super::Result<Vec<Lock>> {
        let prefix = prefix.to_owned();
        self.perform(op::List { prefix })
    }

    fn log(&mut self, query: &LogQuery) -> super::super::Result<Vec<Event>> {
        let query = query.clone();
        self.perform(op::Log { query })
    }

    fn gc(&mut self, keep_history: std::time::Duration) -> super::super::Result<GcReport> {
        self.perform(op::Gc { keep_history })
    }
}

impl OneResource for SqliteStore {}

/// A clock the test moves by hand.
#[derive(Clone)]
struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    fn advance(&self, millis: i64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

fn store() -> (tempfile::TempDir, SqliteStore, ManualClock) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock(Arc::new(AtomicI64::new(1_000_000)));
    let store = SqliteStore::open(&dir.path().join("locks.db"), Box::new(clock.clone())).unwrap();
    (dir, store, clock)
}

fn res(s: &str) -> Resource {
    Resource::parse(s).unwrap()
}

fn own(s: &str) -> Owner {
    Owner::parse(s).unwrap()
}

fn ttl(secs: u64) -> Ttl {
    Ttl::from_secs(secs).unwrap()
}

fn req(owner: &str, secs: u64) -> Request {
    Request::exclusive(own(owner), ttl(secs))
}

fn acquired(outcome: Acquire) -> (Lock, Grant) {
    match outcome {
        Acquire::Acquired { lock, tenure } => (lock, tenure),
        other => panic!("expected acquired, got {other:?}"),
    }
}

#[test]
fn lease_expires_exactly_at_expires_at() {
    let (_dir, mut store, clock) = store();
    let (lock, tenure) = acquired(store.acquire(&res("r"), &req("a", 10)).unwrap());
    assert_eq!(tenure, Grant::New);
    assert_eq!(lock.expires_at.0 - lock.acquired_at.0, 10_000);
    clock.advance(9_999);
    assert!(store.status(&res("r")).unwrap().locks.len() == 1);
    assert!(matches!(
        store.acquire(&res("r"), &req("b", 10)).unwrap(),
        Acquire::Busy { .. }
    ));
    clock.advance(1);
    assert_eq!(store.status(&res("r")).unwrap().locks, []);
    assert_eq!(
        store.renew(&res("r"), &own("a"), ttl(10), None).unwrap(),
        Renew::NotFound
    );
    let (taken, _) = acquired(store.acquire(&res("r"), &req("b", 10)).unwrap());
    assert!(taken.fence > lock.fence);
}

#[test]
fn same_owner_extends_with_the_same_fence() {
    let (_dir, mut store, clock) = store();
    let (first, _) = acquired(store.acquire(&res("r"), &req("a", 10)).unwrap());
    clock.advance(4_000);
    let (again, tenure) = acquired(store.acquire(&res("r"), &req("a", 10)).unwrap());
    assert_eq!(tenure, Grant::Extended);
    assert_eq!(again.fence, first.fence);
    assert_eq!(again.acquired_at.0, first.acquired_at.0 + 4_000);
    assert_eq!(again.expires_at.0, first.expires_at.0 + 4_000);
}

#[test]
fn a_tenure_run_took_is_stored_guarded_and_only_one_acquire_took_is_joined() {
    let (_dir, mut store, _) = store();
    let run = Request {
        guarded: true,
        ..req("a", 10)
    };
    acquired(store.acquire(&res("ran"), &run).unwrap());
    for request in [&run, &req("a", 10)] {
        assert!(matches!(
            store.acquire(&res("ran"), request).unwrap(),
            Acquire::Busy { .. }
        ));
    }
    acquired(store.acquire(&res("took"), &req("a", 10)).unwrap());
    for request in [&run, &req("a", 10)] {
        let (_, tenure) = acquired(store.acquire(&res("took"), request).unwrap());
        assert_eq!(tenure, Grant::Extended);
    }
    let stored: Vec<(String, i64)> = store
        .conn
        .prepare("SELECT resource, guarded FROM locks ORDER BY resource")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(stored, [("ran".to_owned(), 1), ("took".to_owned(), 0)]);
}

#[test]
fn fence_survives_release_expiry_and_gc() {
    let (_dir, mut store, clock) = store();
    let mut last = Fence(0);
    for round in 0..5 {
        let (lock, _) = acquired(store.acquire(&res("r"), &req("a", 1)).unwrap());
        assert!(
            lock.fence > last,
            "round {round}: {:?} after {last:?}",
            lock.fence
        );
        last = lock.fence;
        match round % 3 {
            0 => assert_eq!(
                store
                    .release(&res("r"), &own("a"), Some(lock.fence))
                    .unwrap(),
                Release::Released
            ),
            1 => clock.advance(1_000),
            _ => {
                clock.advance(1_000);
                let report = store.gc(Duration::ZERO).unwrap();
                assert_eq!(report.expired_locks, 1);
            }
        }
    }
}

#[test]
fn renew_and_release_check_owner_and_tenure() {
    let (_dir, mut store, clock) = store();
    let (lock, _) = acquired(store.acquire(&res("r"), &req("a", 10)).unwrap());
    assert_eq!(
        store.renew(&res("r"), &own("b"), ttl(10), None).unwrap(),
        Renew::Forbidden
    );
    assert_eq!(
        store.release(&res("r"), &own("b"), None).unwrap(),
        Release::Forbidden
    );
    let stale = Fence(lock.fence.0 - 1);
    assert_eq!(
        store
            .renew(&res("r"), &own("a"), ttl(10), Some(stale))
            .unwrap(),
        Renew::NotFound
    );
    assert_eq!(
        store.release(&res("r"), &own("a"), Some(stale)).unwrap(),
        Release::NotFound
    );
    clock.advance(5_000);
    let Renew::Renewed { lock: renewed } = store
        .renew(&res("r"), &own("a"), ttl(10), Some(lock.fence))
        .unwrap()
    else {
        panic!("renew by the holder failed");
    };
    assert_eq!(renewed.fence, lock.fence);
    assert_eq!(renewed.acquired_at, lock.acquired_at);
    assert_eq!(renewed.expires_at.0, lock.expires_at.0 + 5_000);
    assert_eq!(
        store.release(&res("r"), &own("a"), None).unwrap(),
        Release::Released
    );
    assert_eq!(
        store.release(&res("r"), &own("a"), None).unwrap(),
        Release::NotFound
    );
}

#[test]
fn history_records_every_change_and_nothing_else() {
    let (_dir, mut store, clock) = store();
    acquired(store.acquire(&res("r"), &req("a", 1)).unwrap());
    acquired(store.acquire(&res("r"), &req("a", 1)).unwrap());
    // A busy attempt and refused renew/release write nothing.
    store.acquire(&res("r"), &req("b", 1)).unwrap();
    store.renew(&res("r"), &own("b"), ttl(1), None).unwrap();
    store.release(&res("r"), &own("b"), None).unwrap();
    store.renew(&res("r"), &own("a"), ttl(1), None).unwrap();
    clock.advance(1_000);
    acquired(store.acquire(&res("r"), &req("b", 1)).unwrap());
    store.release(&res("r"), &own("b"), None).unwrap();
    let events = store.log(&LogQuery::default()).unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.event).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Acquired,
            EventKind::Extended,
            EventKind::Renewed,
            EventKind::TakenOver,
            EventKind::Released
        ]
    );
    assert_eq!(events[3].previous_owner, Some(own("a")));
    assert_eq!(events[3].owner, own("b"));
    let last_two = store
        .log(&LogQuery {
            limit: Some(2),
            ..LogQuery::default()
        })
        .unwrap();
    assert_eq!(last_two, events[3..]);
}

#[test]
fn list_shows_live_locks_by_prefix_in_order() {
    let (_dir, mut store, clock) = store();
    for (name, secs) in [
        ("job:b", 10),
        ("job:a", 10),
        ("jobs", 10),
        ("job:c", 1),
        ("x", 10),
    ] {
        acquired(store.acquire(&res(name), &req("a", secs)).unwrap());
    }
    clock.advance(1_000);
    let names = |locks: Vec<Lock>| -> Vec<String> {
        locks.iter().map(|l| l.resource.to_string()).collect()
    };
    assert_eq!(names(store.list("job:").unwrap()), ["job:a", "job:b"]);
    assert_eq!(
        names(store.list("").unwrap()),
        ["job:a", "job:b", "jobs", "x"]
    );
}

/// Acquires every member of `set` for `owner` in one transaction, each with its own fence.
fn acquire_set(
    store: &mut SqliteStore,
    set: &[Resource],
    owner: &str,
) -> crate::store::Result<Vec<Acquire>> {
    let request = req(owner, 60);
    store.transact_set(
        set,
        Durability::Durable,
        super::super::Reads::All,
        &mut |states, fresh| {
            let mut outcome = Vec::new();
            let mut changes = Vec::new();
            for (resource, state) in set.iter().zip(states) {
                let decision = engine::acquire(resource, state, &request, &mut *fresh)?;
                outcome.push(decision.outcome);
                changes.push(decision.changes);
            }
            Ok(SetDecision { outcome, changes })
        },
    )
}

#[test]
fn a_set_is_written_in_one_transaction_and_a_failed_decision_writes_nothing() {
    let (_dir, mut store, _clock) = store();
    let set = [res("a"), res("b"), res("c")];
    // Every member granted at once, each with its own fence, in the members' order.
    let outcomes = acquire_set(&mut store, &set, "w1").unwrap();
    let fences: Vec<i64> = outcomes
        .into_iter()
        .map(|outcome| acquired(outcome).0.fence.0)
        .collect();
    assert_eq!(fences.len(), 3);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    for (resource, fence) in set.iter().zip(&fences) {
        assert_eq!(store.status(resource).unwrap().locks[0].fence.0, *fence);
    }

    // A decision that writes two members and then fails leaves both as they were.
    let (d, e) = (res("d"), res("e"));
    let both = [d.clone(), e.clone()];
    let request = req("w2", 60);
    let failed: Result<(), _> = store.transact_set(
        &both,
        Durability::Durable,
        super::super::Reads::All,
        &mut |states, fresh| {
            for (resource, state) in both.iter().zip(states) {
                let _ = engine::acquire(resource, state, &request, &mut *fresh)?;
            }
            anyhow::bail!("the decision failed after its reads")
        },
    );
    assert!(failed.is_err());
    assert!(store.status(&d).unwrap().locks.is_empty());
    assert!(store.status(&e).unwrap().locks.is_empty());

    // A set with one busy member: each member's decision is its own, and the writes of the
    // free ones land together with nothing for the busy one.
    let mixed = [res("a"), res("f")];
    let outcomes = acquire_set(&mut store, &mixed, "w3").unwrap();
    assert!(
        matches!(outcomes[0], Acquire::Busy { .. }),
        "{:?}",
        outcomes[0]
    );
    let (lock, _) = acquired(outcomes[1].clone());
    assert!(lock.fence.0 > fences[2]);
    assert_eq!(store.log(&LogQuery::default()).unwrap().len(), 4);
}
