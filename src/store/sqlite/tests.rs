//! The SQLite store through the operations every store offers, on a clock the tests move by
//! hand: when a lease expires, which fence a tenure gets, what a tenure records, what the
//! history holds and what `list` shows.

use std::sync::Arc;

use super::super::Locks;
use crate::engine::Request;
use crate::lock::{Acquire, EventKind, Grant, Release, Renew, Ttl};
use std::sync::atomic::{AtomicI64, Ordering};

use super::*;

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
