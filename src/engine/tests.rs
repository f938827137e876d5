//! The core's rules as tables: a state and a request in, the outcome and the changes out.

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

use std::cell::Cell;
use std::convert::Infallible;

use super::*;
use crate::lock::{Acquire, Breaking, Grant, Release, Renew, TokenName};

const NOW: i64 = 1_000_000;

/// What a place records of a plain exclusive request on one resource, taken now.
fn plain_place() -> Asking {
    Asking {
        since: Timestamp(NOW),
        mode: Mode::Exclusive,
        members: Vec::new(),
    }
}

fn res() -> Resource {
    Resource::parse("r").unwrap()
}

fn own(s: &str) -> Owner {
    Owner::parse(s).unwrap()
}

fn ttl(secs: u64) -> Ttl {
    Ttl::from_secs(secs).unwrap()
}

/// A tenure of `owner` with `fence`, acquired 1 s before now, expiring `left` ms from now
/// (zero or negative: expired).
fn lease(owner: &str, fence: i64, left: i64) -> Tenure {
    Tenure {
        owner: own(owner),
        fence: Fence(fence),
        acquired_at: Timestamp(NOW - 1_000),
        expires_at: Timestamp(NOW + left),
        mode: Mode::Exclusive,
        note: None,
        guarded: false,
    }
}

/// An exclusive request without a note.
fn request(owner: &str, secs: u64) -> Request {
    Request::exclusive(own(owner), ttl(secs))
}

fn state(leases: &[Tenure]) -> State {
    State {
        now: Timestamp(NOW),
        leases: leases.to_vec(),
        ..State::default()
    }
}

fn at(ms: i64) -> Timestamp {
    Timestamp(NOW + ms)
}

/// Acquire with a fence source that hands out 100 and counts how often it was asked.
fn acquire_with(leases: &[Tenure], owner: &str, secs: u64) -> (Decision<Acquire>, u32) {
    let asked = Cell::new(0);
    let decision = acquire(&res(), &state(leases), &request(owner, secs), || {
        asked.set(asked.get() + 1);
        Ok::<_, Infallible>(Fence(100))
    })
    .unwrap();
    (decision, asked.get())
}

fn kinds(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| match c {
            Change::Insert(l) => format!("insert {} {}", l.owner, l.fence),
            Change::Update(l) => format!("update {}", l.fence),
            Change::Delete { fence } => format!("delete {fence}"),
            Change::Record(r) => match &r.previous_owner {
                Some(p) => format!(
                    "record {} {} {} from {p}",
                    r.event.as_str(),
                    r.owner,
                    r.fence
                ),
                None => format!("record {} {} {}", r.event.as_str(), r.owner, r.fence),
            },
            Change::Enqueue { owner, .. } => format!("enqueue {owner}"),
            Change::Refresh { owner, .. } => format!("refresh {owner}"),
            Change::Dequeue { owner } => format!("dequeue {owner}"),
        })
        .collect()
}

#[test]
fn liveness_is_strictly_before_expires_at() {
    let cases = [
        (1, true),
        (1_000, true),
        (0, false),
        (-1, false),
        (-60_000, false),
    ];
    for (left, live) in cases {
        assert_eq!(
            lease("a", 1, left).is_live(Timestamp(NOW)),
            live,
            "left {left}"
        );
    }
}

#[test]
fn acquire_table() {
    // (rows, requester, expected outcome, expected changes, fence source asked)
    struct Case {
        name: &'static str,
        rows: Vec<Tenure>,
        who: &'static str,
        outcome: &'static str,
        changes: Vec<&'static str>,
        asked: u32,
    }
    let cases = vec![
        Case {
            name: "free resource: a new tenure with a fresh fence",
            rows: vec![],
            who: "a",
            outcome: "acquired a 100 new",
            changes: vec!["insert a 100", "record acquired a 100"],
            asked: 1,
        },
        Case {
            name: "own live tenure: extended with the same fence",
            rows: vec![lease("a", 7, 5_000)],
            who: "a",
            outcome: "acquired a 7 extended",
            changes: vec!["update 7", "record extended a 7"],
            asked: 0,
        },
        Case {
            name: "another owner's live tenure: busy, nothing written",
            rows: vec![lease("b", 7, 5_000)],
            who: "a",
            outcome: "busy b",
            changes: vec![],
            asked: 0,
        },
        Case {
            name: "live by one millisecond: still busy",
            rows: vec![lease("b", 7, 1)],
            who: "a",
            outcome: "busy b",
            changes: vec![],
            asked: 0,
        },
        Case {
            name: "expired exactly now: taken over",
            rows: vec![lease("b", 7, 0)],
            who: "a",
            outcome: "acquired a 100 new",
            changes: vec!["delete 7", "insert a 100", "record taken_over a 100 from b"],
            asked: 1,
        },
        Case {
            name: "long expired: taken over",
            rows: vec![lease("b", 7, -86_400_000)],
            who: "a",
            outcome: "acquired a 100 new",
            changes: vec!["delete 7", "insert a 100", "record taken_over a 100 from b"],
            asked: 1,
        },
        Case {
            name: "own expired tenure: a new tenure, never the old fence",
            rows: vec![lease("a", 7, -1)],
            who: "a",
            outcome: "acquired a 100 new",
            changes: vec!["delete 7", "insert a 100", "record taken_over a 100 from a"],
            asked: 1,
        },
        Case {
            name: "several expired rows: all cleared, the last holder named",
            rows: vec![lease("b", 3, -10), lease("c", 9, -5), lease("d", 5, -1)],
            who: "a",
            outcome: "acquired a 100 new",
            changes: vec![
                "delete 3",
                "delete 9",
                "delete 5",
                "insert a 100",
                "record taken_over a 100 from c",
            ],
            asked: 1,
        },
        Case {
            name: "an expired row beside a live one: busy with the live holder",
            rows: vec![lease("b", 3, -10), lease("c", 4, 10)],
            who: "a",
            outcome: "busy c",
            changes: vec![],
            asked: 0,
        },
    ];
    for case in cases {
        let (decision, asked) = acquire_with(&case.rows, case.who, 30);
        let outcome = match &decision.outcome {
            Acquire::Acquired { lock, tenure } => format!(
                "acquired {} {} {}",
                lock.owner,
                lock.fence,
                if *tenure == Grant::New {
                    "new"
                } else {
                    "extended"
                }
            ),
            Acquire::Busy { holder, .. } => match holder {
                Some(holder) => format!("busy {}", holder.owner),
                None => "reserved".to_owned(),
            },
            Acquire::Mismatch { .. } => "mismatch".to_owned(),
        };
        assert_eq!(outcome, case.outcome, "{}", case.name);
        assert_eq!(kinds(&decision.changes), case.changes, "{}", case.name);
        assert_eq!(asked, case.asked, "{}: fence source asked", case.name);
    }
}

#[test]
fn acquire_sets_both_times_from_the_store_clock() {
    for secs in [1, 30, 3_600, 365 * 86_400] {
        let (decision, _) = acquire_with(&[], "a", secs);
        let Acquire::Acquired { lock, .. } = decision.outcome else {
            panic!("free resource must be acquired")
        };
        assert_eq!(lock.acquired_at, Timestamp(NOW));
        assert_eq!(lock.expires_at.0 - NOW, i64::try_from(secs * 1000).unwrap());
        assert_eq!(
            decision.changes[0],
            Change::Insert(Tenure {
                owner: own("a"),
                fence: Fence(100),
                acquired_at: Timestamp(NOW),
                expires_at: lock.expires_at,
                mode: Mode::Exclusive,
                note: None,
                guarded: false,
            })
        );
    }
}

#[test]
fn extend_moves_both_times_and_keeps_the_fence() {
    let (decision, _) = acquire_with(&[lease("a", 7, 2_000)], "a", 10);
    let Acquire::Acquired { lock, tenure } = decision.outcome else {
        panic!("own lock must be extended")
    };
    assert_eq!(tenure, Grant::Extended);
    assert_eq!(
        (lock.fence, lock.acquired_at, lock.expires_at),
        (Fence(7), at(0), at(10_000))
    );
    assert_eq!(
        decision.changes[0],
        Change::Update(Tenure {
            acquired_at: at(0),
            expires_at: at(10_000),
            ..lease("a", 7, 0)
        })
    );
}

#[test]
fn extend_may_shorten_a_lease() {
    // docs/src/reference/semantics.md ("renew"): the lease moves to now + ttl, not max(old, now + ttl).
    let (decision, _) = acquire_with(&[lease("a", 7, 3_600_000)], "a", 1);
    let Acquire::Acquired { lock, .. } = decision.outcome else {
        panic!()
    };
    assert_eq!(lock.expires_at, at(1_000));
}

#[test]
fn busy_names_the_holder_and_its_expiry() {
    let (decision, _) = acquire_with(&[lease("b", 7, 4_321)], "a", 10);
    assert_eq!(
        decision.outcome,
        Acquire::Busy {
            holder: Some(Holder {
                owner: own("b"),
                expires_at: at(4_321),
                mode: Mode::Exclusive,
                note: None,
            }),
            holders: vec![],
            waiting: 0,
            position: None,
        }
    );
}

#[test]
fn owner_names_compare_exactly() {
    // Owners are trimmed at the edge; past it, "a" and "A" are different owners.
    for other in ["A", "a ", "aa", "b"] {
        let rows = [Tenure {
            owner: Owner::from_store(other, ""),
            ..lease("x", 7, 5_000)
        }];
        let (decision, _) = acquire_with(&rows, "a", 10);
        assert!(
            matches!(decision.outcome, Acquire::Busy { .. }),
            "{other:?}"
        );
    }
}

#[test]
fn fence_source_errors_abort_the_decision() {
    let result = acquire(&res(), &state(&[]), &request("a", 5), || {
        Err("sequence gone")
    });
    assert_eq!(result.err(), Some("sequence gone"));
    // A decision that needs no fence never fails on the source.
    let busy = acquire(
        &res(),
        &state(&[lease("b", 1, 9)]),
        &request("a", 5),
        || Err("sequence gone"),
    );
    assert!(busy.is_ok());
}

#[test]
fn expiry_saturates_instead_of_overflowing() {
    let state = State {
        now: Timestamp(i64::MAX - 5),
        leases: vec![],
        ..State::default()
    };
    let decision = acquire(&res(), &state, &request("a", 60), || {
        Ok::<_, Infallible>(Fence(1))
    })
    .unwrap();
    let Acquire::Acquired { lock, .. } = decision.outcome else {
        panic!()
    };
    assert_eq!(lock.expires_at, Timestamp(i64::MAX));
}

/// (name, rows, requester, fence given, expected outcome).
type OwnershipCase = (
    &'static str,
    Vec<Tenure>,
    &'static str,
    Option<i64>,
    &'static str,
);

fn ownership_cases() -> Vec<OwnershipCase> {
    vec![
        ("missing", vec![], "a", None, "not_found"),
        ("missing, with a fence", vec![], "a", Some(7), "not_found"),
        ("own live", vec![lease("a", 7, 5_000)], "a", None, "ok"),
        (
            "own live, its fence",
            vec![lease("a", 7, 5_000)],
            "a",
            Some(7),
            "ok",
        ),
        (
            "own live, a stale fence",
            vec![lease("a", 7, 5_000)],
            "a",
            Some(6),
            "not_found",
        ),
        (
            "own live, a future fence",
            vec![lease("a", 7, 5_000)],
            "a",
            Some(8),
            "not_found",
        ),
        (
            "own expired exactly now",
            vec![lease("a", 7, 0)],
            "a",
            None,
            "not_found",
        ),
        (
            "own long expired",
            vec![lease("a", 7, -9_000)],
            "a",
            Some(7),
            "not_found",
        ),
        (
            "another's live",
            vec![lease("b", 7, 5_000)],
            "a",
            None,
            "forbidden",
        ),
        (
            "another's live, with its fence",
            vec![lease("b", 7, 5_000)],
            "a",
            Some(7),
            "forbidden",
        ),
        (
            "another's expired",
            vec![lease("b", 7, -1)],
            "a",
            None,
            "not_found",
        ),
        (
            "another's expired beside nothing live, with a fence",
            vec![lease("b", 7, -1)],
            "a",
            Some(7),
            "not_found",
        ),
    ]
}

#[test]
fn renew_table() {
    for (name, rows, who, fence, expected) in ownership_cases() {
        let decision = renew(&res(), &state(&rows), &own(who), ttl(10), fence.map(Fence));
        let outcome = match &decision.outcome {
            Renew::Renewed { .. } => "ok",
            Renew::NotFound => "not_found",
            Renew::Forbidden => "forbidden",
        };
        assert_eq!(outcome, expected, "renew: {name}");
        let expected_changes: Vec<String> = if expected == "ok" {
            vec!["update 7".into(), format!("record renewed {who} 7")]
        } else {
            vec![]
        };
        assert_eq!(kinds(&decision.changes), expected_changes, "renew: {name}");
    }
}

#[test]
fn release_table() {
    for (name, rows, who, fence, expected) in ownership_cases() {
        let decision = release(&res(), &state(&rows), &own(who), fence.map(Fence));
        let outcome = match &decision.outcome {
            Release::Released => "ok",
            Release::NotFound => "not_found",
            Release::Forbidden => "forbidden",
        };
        assert_eq!(outcome, expected, "release: {name}");
        let expected_changes: Vec<String> = if expected == "ok" {
            vec!["delete 7".into(), format!("record released {who} 7")]
        } else {
            vec![]
        };
        assert_eq!(
            kinds(&decision.changes),
            expected_changes,
            "release: {name}"
        );
    }
}

#[test]
fn renew_keeps_acquired_at_and_fence() {
    let decision = renew(
        &res(),
        &state(&[lease("a", 7, 100)]),
        &own("a"),
        ttl(30),
        None,
    );
    let Renew::Renewed { lock } = decision.outcome else {
        panic!()
    };
    assert_eq!(
        (lock.fence, lock.acquired_at, lock.expires_at),
        (Fence(7), at(-1_000), at(30_000))
    );
    assert_eq!(
        decision.changes[0],
        Change::Update(Tenure {
            acquired_at: at(-1_000),
            expires_at: at(30_000),
            ..lease("a", 7, 0)
        })
    );
}

#[test]
fn history_rows_carry_the_store_time() {
    let cases: Vec<(&str, Vec<Change>)> = vec![
        ("acquire", acquire_with(&[], "a", 5).0.changes),
        (
            "extend",
            acquire_with(&[lease("a", 1, 9)], "a", 5).0.changes,
        ),
        (
            "take over",
            acquire_with(&[lease("b", 1, -9)], "a", 5).0.changes,
        ),
        (
            "renew",
            renew(&res(), &state(&[lease("a", 1, 9)]), &own("a"), ttl(5), None).changes,
        ),
        (
            "release",
            release(&res(), &state(&[lease("a", 1, 9)]), &own("a"), None).changes,
        ),
    ];
    for (name, changes) in cases {
        let records: Vec<&Event> = changes
            .iter()
            .filter_map(|c| {
                if let Change::Record(r) = c {
                    Some(r)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(
            records.len(),
            1,
            "{name}: one history row per change of state"
        );
        assert_eq!(records[0].at, Timestamp(NOW), "{name}");
        assert!(
            matches!(changes.last(), Some(Change::Record(_))),
            "{name}: recorded last"
        );
    }
}

#[test]
fn status_reports_only_live_tenures() {
    let cases = [
        (vec![], None),
        (vec![lease("a", 1, 1)], Some("a")),
        (vec![lease("a", 1, 0)], None),
        (vec![lease("a", 1, -5)], None),
        (vec![lease("a", 1, -5), lease("b", 2, 5)], Some("b")),
    ];
    for (rows, expected) in cases {
        let lock = status(&res(), &state(&rows));
        assert_eq!(
            lock.locks.first().map(|l| l.owner.to_string()).as_deref(),
            expected,
            "{rows:?}"
        );
    }
}

#[test]
fn live_tenures_come_oldest_first() {
    let s = state(&[
        lease("c", 9, 5),
        lease("a", 2, 5),
        lease("x", 1, -5),
        lease("b", 4, 5),
    ]);
    let fences: Vec<i64> = s.live().iter().map(|l| l.fence.0).collect();
    assert_eq!(fences, [2, 4, 9]);
}

/// Applies `changes` to `rows` as a store would ([`State::apply`]), checking each write finds
/// its row and that an update changes only a tenure's times and note.
fn applied(rows: Vec<Tenure>, changes: &[Change]) -> Vec<Tenure> {
    for change in changes {
        if let Change::Update(lease) = change {
            let row = rows
                .iter()
                .find(|l| l.fence == lease.fence)
                .expect("updated row");
            assert_eq!(
                (&row.owner, row.mode, row.guarded),
                (&lease.owner, lease.mode, lease.guarded),
                "an update changes only the times and the note"
            );
        }
    }
    let mut written = state(&rows);
    written
        .apply(changes)
        .unwrap_or_else(|why| panic!("{why}: {changes:?} on {rows:?}"));
    written.leases
}

#[test]
fn a_state_reads_back_what_its_changes_write() {
    let w = |owner: &str, ticket: i64| Waiter {
        owner: own(owner),
        ticket,
        expires_at: at(5_000),
    };
    let base = State {
        now: Timestamp(NOW),
        leases: vec![lease("a", 7, 5_000), lease("b", 8, -1)],
        queue: vec![w("x", 3), w("y", 9)],
    };
    let renewed = Tenure {
        expires_at: at(60_000),
        acquired_at: at(0),
        note: Some(Remark::parse("why").unwrap()),
        ..lease("a", 7, 5_000)
    };
    // (changes, the tenures' (owner, fence, expires in ms), the places' (owner, ticket,
    // expires in ms), or the error's words)
    type Rows = (Vec<(&'static str, i64, i64)>, Vec<(&'static str, i64, i64)>);
    let cases: Vec<(Vec<Change>, Result<Rows, &str>)> = vec![
        (
            vec![],
            Ok((
                vec![("a", 7, 5_000), ("b", 8, -1)],
                vec![("x", 3, 5_000), ("y", 9, 5_000)],
            )),
        ),
        // An expired tenure taken over: deleted, then a new one with a new fence.
        (
            vec![
                Change::Delete { fence: Fence(8) },
                Change::Insert(lease("c", 10, 30_000)),
                Change::Dequeue { owner: own("x") },
            ],
            Ok((
                vec![("a", 7, 5_000), ("c", 10, 30_000)],
                vec![("y", 9, 5_000)],
            )),
        ),
        // An update writes the times and the note.
        (
            vec![Change::Update(renewed.clone())],
            Ok((
                vec![("a", 7, 60_000), ("b", 8, -1)],
                vec![("x", 3, 5_000), ("y", 9, 5_000)],
            )),
        ),
        // A new place comes after every place there is; a refresh moves its end.
        (
            vec![
                Change::Enqueue {
                    owner: own("z"),
                    expires_at: at(4_000),
                    asking: plain_place(),
                },
                Change::Refresh {
                    owner: own("x"),
                    expires_at: at(5_500),
                },
            ],
            Ok((
                vec![("a", 7, 5_000), ("b", 8, -1)],
                vec![("x", 3, 5_500), ("y", 9, 5_000), ("z", 10, 4_000)],
            )),
        ),
        // History only: nothing to read back.
        (
            vec![record(
                &res(),
                at(0),
                &lease("a", 7, 5_000),
                EventKind::Renewed,
                None,
            )],
            Ok((
                vec![("a", 7, 5_000), ("b", 8, -1)],
                vec![("x", 3, 5_000), ("y", 9, 5_000)],
            )),
        ),
        // Writes a store would refuse, and nothing of them is applied.
        (
            vec![
                Change::Delete { fence: Fence(7) },
                Change::Insert(lease("c", 8, 1_000)),
            ],
            Err("fence 8 is taken already"),
        ),
        (vec![Change::Delete { fence: Fence(99) }], Err("no row")),
        (vec![Change::Update(lease("a", 99, 1_000))], Err("no row")),
        (
            vec![Change::Enqueue {
                owner: own("y"),
                expires_at: at(1),
                asking: plain_place(),
            }],
            Err("y has a place already"),
        ),
        (
            vec![Change::Refresh {
                owner: own("q"),
                expires_at: at(1),
            }],
            Err("no row"),
        ),
        (vec![Change::Dequeue { owner: own("q") }], Err("no row")),
    ];
    for (changes, expected) in cases {
        let mut written = base.clone();
        let got = written.apply(&changes).map(|()| {
            let mut leases: Vec<_> = written
                .leases
                .iter()
                .map(|l| (l.owner.to_string(), l.fence.0, l.expires_at.0 - NOW))
                .collect();
            leases.sort_by_key(|l| l.1);
            let mut queue: Vec<_> = written
                .queue
                .iter()
                .map(|w| (w.owner.to_string(), w.ticket, w.expires_at.0 - NOW))
                .collect();
            queue.sort_by_key(|w| w.1);
            (leases, queue)
        });
        match (got, expected) {
            (Ok(got), Ok((leases, queue))) => {
                let own = |rows: Vec<(&str, i64, i64)>| -> Vec<(String, i64, i64)> {
                    rows.into_iter()
                        .map(|(o, n, left)| (o.to_owned(), n, left))
                        .collect()
                };
                assert_eq!(got, (own(leases), own(queue)), "{changes:?}");
            }
            (Err(why), Err(words)) => {
                assert!(why.contains(words), "{changes:?}: {why}");
                assert_eq!(written, base, "{changes:?}: nothing applied");
            }
            (got, expected) => panic!("{changes:?}: got {got:?}, expected {expected:?}"),
        }
    }
    assert_eq!(
        {
            let mut updated = base.clone();
            updated.apply(&[Change::Update(renewed)]).unwrap();
            updated.leases[0].note.clone()
        },
        Some(Remark::parse("why").unwrap()),
        "an update writes the note"
    );
}

#[test]
fn old_rows_are_deleted_before_the_new_one_is_inserted() {
    // With one row per resource (UNIQUE(resource)), the insert must come after the deletes.
    let (decision, _) = acquire_with(&[lease("b", 7, -1)], "a", 5);
    let insert = decision
        .changes
        .iter()
        .position(|c| matches!(c, Change::Insert(_)))
        .unwrap();
    let last_delete = decision
        .changes
        .iter()
        .rposition(|c| matches!(c, Change::Delete { .. }))
        .unwrap();
    assert!(last_delete < insert);
    let rows = applied(vec![lease("b", 7, -1)], &decision.changes);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].owner, own("a"));
}

#[test]
fn the_fence_source_is_asked_at_most_once() {
    for rows in [
        vec![],
        vec![lease("b", 7, -1)],
        vec![lease("b", 1, -1), lease("c", 2, -1)],
    ] {
        let (_, asked) = acquire_with(&rows, "a", 5);
        assert_eq!(asked, 1, "{rows:?}");
    }
}

#[test]
fn at_the_instant_of_expiry_every_operation_sees_no_lock() {
    let rows = [lease("a", 7, 0)];
    assert_eq!(status(&res(), &state(&rows)).locks, []);
    assert_eq!(
        renew(&res(), &state(&rows), &own("a"), ttl(5), None).outcome,
        Renew::NotFound
    );
    assert_eq!(
        release(&res(), &state(&rows), &own("a"), None).outcome,
        Release::NotFound
    );
    let (decision, _) = acquire_with(&rows, "b", 5);
    assert!(matches!(
        decision.outcome,
        Acquire::Acquired {
            tenure: Grant::New,
            ..
        }
    ));
}

#[test]
fn one_millisecond_before_expiry_the_lock_is_still_held() {
    let rows = [lease("a", 7, 1)];
    assert!(!status(&res(), &state(&rows)).locks.is_empty());
    assert!(matches!(
        renew(&res(), &state(&rows), &own("a"), ttl(5), None).outcome,
        Renew::Renewed { .. }
    ));
    assert_eq!(
        release(&res(), &state(&rows), &own("b"), None).outcome,
        Release::Forbidden
    );
}

#[test]
fn a_released_lock_is_free_for_anyone_with_a_new_fence() {
    let rows = vec![lease("a", 7, 5_000)];
    let released = release(&res(), &state(&rows), &own("a"), Some(Fence(7)));
    let rows = applied(rows, &released.changes);
    assert!(rows.is_empty());
    let (decision, _) = acquire_with(&rows, "b", 5);
    let Acquire::Acquired { lock, tenure } = decision.outcome else {
        panic!("a released lock must be free")
    };
    assert_eq!((lock.fence, tenure), (Fence(100), Grant::New));
    // Nothing expired was left behind, so the history says "acquired", not "taken over".
    assert_eq!(
        kinds(&decision.changes),
        ["insert b 100", "record acquired b 100"]
    );
}

#[test]
fn a_renewed_lease_outlives_its_original_expiry() {
    let rows = vec![lease("a", 7, 1_000)];
    let renewed = renew(&res(), &state(&rows), &own("a"), ttl(60), Some(Fence(7)));
    let rows = applied(rows, &renewed.changes);
    let later = State {
        now: at(30_000),
        leases: rows,
        ..State::default()
    };
    assert_eq!(
        status(&res(), &later).locks.first().map(|l| l.fence),
        Some(Fence(7))
    );
    let decision = acquire(&res(), &later, &request("b", 5), || {
        Ok::<_, Infallible>(Fence(100))
    })
    .unwrap();
    assert!(matches!(decision.outcome, Acquire::Busy { .. }));
}

#[test]
fn a_stale_tenure_cannot_renew_or_release_its_owners_next_tenure() {
    // A `run` whose lease lapsed (fence 7) while the same owner took the lock again (fence
    // 9) must not touch the new tenure.
    let rows = [lease("a", 9, 5_000)];
    assert_eq!(
        renew(&res(), &state(&rows), &own("a"), ttl(5), Some(Fence(7))).outcome,
        Renew::NotFound
    );
    assert_eq!(
        release(&res(), &state(&rows), &own("a"), Some(Fence(7))).outcome,
        Release::NotFound
    );
    // Without a fence (the `renew`/`release` commands) the owner's live tenure is meant.
    assert_eq!(
        release(&res(), &state(&rows), &own("a"), None).outcome,
        Release::Released
    );
}

#[test]
fn refusals_leave_the_rows_exactly_as_they_were() {
    let rows = vec![lease("b", 7, 5_000), lease("c", 3, -5)];
    let decisions: Vec<Vec<Change>> = vec![
        acquire_with(&rows, "a", 5).0.changes,
        renew(&res(), &state(&rows), &own("a"), ttl(5), None).changes,
        release(&res(), &state(&rows), &own("a"), None).changes,
        renew(&res(), &state(&rows), &own("b"), ttl(5), Some(Fence(6))).changes,
        release(&res(), &state(&rows), &own("c"), None).changes,
    ];
    for changes in decisions {
        assert_eq!(applied(rows.clone(), &changes), rows);
    }
}

#[test]
fn the_longest_ttl_is_a_year_of_milliseconds() {
    let (decision, _) = acquire_with(&[], "a", 365 * 86_400);
    let Acquire::Acquired { lock, .. } = decision.outcome else {
        panic!()
    };
    assert_eq!(lock.expires_at.0 - lock.acquired_at.0, 31_536_000_000);
}

#[test]
fn history_names_who_held_it_before_a_takeover() {
    let cases = [
        (vec![], None),
        (vec![lease("b", 7, -1)], Some("b")),
        (vec![lease("a", 7, -1)], Some("a")),
    ];
    for (rows, previous) in cases {
        let (decision, _) = acquire_with(&rows, "a", 5);
        let Some(Change::Record(record)) = decision.changes.last() else {
            panic!("the history row comes last")
        };
        assert_eq!(
            record.previous_owner.as_ref().map(Owner::as_str),
            previous,
            "{rows:?}"
        );
        let expected = if previous.is_some() {
            EventKind::TakenOver
        } else {
            EventKind::Acquired
        };
        assert_eq!(record.event, expected);
    }
}

#[test]
fn releasing_records_the_released_tenure_not_the_requester_input() {
    let rows = [lease("a", 7, 5_000)];
    let decision = release(&res(), &state(&rows), &own("a"), None);
    assert_eq!(
        decision.changes[1],
        Change::Record(Event {
            at: Timestamp(NOW),
            resource: res(),
            owner: own("a"),
            token: None,
            fence: Fence(7),
            event: EventKind::Released,
            expires_at: None,
            previous_owner: None,
            mode: Mode::Exclusive,
            note: None,
            broken: None,
        })
    );
}

/// A live tenure of `owner` with `fence` in `mode`, expiring `left` ms from now.
fn held(owner: &str, fence: i64, left: i64, mode: Mode) -> Tenure {
    Tenure {
        mode,
        ..lease(owner, fence, left)
    }
}

fn asking(owner: &str, mode: Mode) -> Request {
    Request {
        mode,
        ..request(owner, 30)
    }
}

/// What an acquire comes to, in one word.
fn verdict(rows: &[Tenure], req: &Request) -> &'static str {
    let decision = acquire(&res(), &state(rows), req, || {
        Ok::<_, Infallible>(Fence(100))
    })
    .unwrap();
    match decision.outcome {
        Acquire::Acquired {
            tenure: Grant::New, ..
        } => "granted",
        Acquire::Acquired { .. } => "extended",
        Acquire::Busy { .. } => "busy",
        Acquire::Mismatch { .. } => "mismatch",
    }
}

const X: Mode = Mode::Exclusive;
const S: Mode = Mode::Shared;

#[test]
fn admission_table() {
    let sem = Mode::Semaphore;
    // (case, live tenures of others as (mode, count), requested mode, verdict)
    let cases: Vec<(&str, Vec<Mode>, Mode, &str)> = vec![
        ("exclusive on a free resource", vec![], X, "granted"),
        ("shared on a free resource", vec![], S, "granted"),
        ("semaphore on a free resource", vec![], sem(3), "granted"),
        ("exclusive beside exclusive", vec![X], X, "busy"),
        ("exclusive beside shared", vec![S], X, "busy"),
        ("exclusive beside two shared", vec![S, S], X, "busy"),
        ("shared beside exclusive", vec![X], S, "busy"),
        ("shared beside shared", vec![S], S, "granted"),
        ("shared beside many shared", vec![S; 40], S, "granted"),
        ("semaphore 3 beside 1 of 3", vec![sem(3)], sem(3), "granted"),
        (
            "semaphore 3 beside 2 of 3",
            vec![sem(3), sem(3)],
            sem(3),
            "granted",
        ),
        ("semaphore 3 beside 3 of 3", vec![sem(3); 3], sem(3), "busy"),
        ("semaphore 2 beside 2 of 2", vec![sem(2); 2], sem(2), "busy"),
        ("semaphore beside exclusive", vec![X], sem(3), "mismatch"),
        ("semaphore beside shared", vec![S], sem(3), "mismatch"),
        ("exclusive beside a semaphore", vec![sem(3)], X, "mismatch"),
        ("shared beside a semaphore", vec![sem(3)], S, "mismatch"),
        (
            "semaphore 3 beside semaphore 4",
            vec![sem(4)],
            sem(3),
            "mismatch",
        ),
        (
            "semaphore 4 beside a full semaphore 3",
            vec![sem(3); 3],
            sem(4),
            "mismatch",
        ),
        (
            "exclusive beside a full semaphore",
            vec![sem(2); 2],
            X,
            "mismatch",
        ),
    ];
    for (name, holders, mode, expected) in cases {
        let rows: Vec<Tenure> = holders
            .iter()
            .enumerate()
            .map(|(i, m)| held(&format!("h{i}"), i as i64 + 1, 5_000, *m))
            .collect();
        assert_eq!(verdict(&rows, &asking("me", mode)), expected, "{name}");
    }
}

#[test]
fn an_owner_rejoining_its_own_tenure_keeps_its_mode_or_gets_a_mismatch() {
    let sem = Mode::Semaphore;
    let cases = [
        (X, X, "extended"),
        (S, S, "extended"),
        (sem(3), sem(3), "extended"),
        (X, S, "mismatch"),
        (S, X, "mismatch"),
        (sem(3), sem(4), "mismatch"),
        (sem(3), X, "mismatch"),
        (S, sem(2), "mismatch"),
    ];
    for (held_as, asked_as, expected) in cases {
        let rows = [held("me", 7, 5_000, held_as)];
        assert_eq!(
            verdict(&rows, &asking("me", asked_as)),
            expected,
            "{held_as:?} then {asked_as:?}"
        );
    }
    // Its own tenure counts before the others: a full semaphore still lets its holder
    // re-acquire.
    let full = [held("me", 1, 5_000, sem(2)), held("b", 2, 5_000, sem(2))];
    assert_eq!(verdict(&full, &asking("me", sem(2))), "extended");
}

#[test]
fn expired_tenures_free_their_slots_and_are_cleared_by_the_next_grant() {
    let sem = Mode::Semaphore(2);
    let rows = [
        held("a", 1, 5_000, sem),
        held("b", 2, -1, sem),
        held("c", 3, -9_000, sem),
    ];
    let decision = acquire(&res(), &state(&rows), &asking("d", sem), || {
        Ok::<_, Infallible>(Fence(100))
    })
    .unwrap();
    assert_eq!(
        kinds(&decision.changes),
        [
            "delete 2",
            "delete 3",
            "insert d 100",
            "record acquired d 100"
        ],
        "joining a live holder is an acquire, not a takeover"
    );
    let rows = applied(rows.to_vec(), &decision.changes);
    let fences: Vec<i64> = rows.iter().map(|l| l.fence.0).collect();
    assert_eq!(fences, [1, 100]);
}

#[test]
fn busy_names_the_first_lease_to_end_and_lists_shared_holders() {
    let rows = [
        held("a", 1, 9_000, S),
        held("b", 2, 3_000, S),
        held("c", 3, 6_000, S),
    ];
    let decision = acquire(&res(), &state(&rows), &asking("w", X), || {
        Ok::<_, Infallible>(Fence(9))
    })
    .unwrap();
    let Acquire::Busy {
        holder: Some(holder),
        holders,
        ..
    } = decision.outcome
    else {
        panic!("a writer beside readers is busy")
    };
    assert_eq!(holder.owner, own("b"));
    let listed: Vec<&str> = holders.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(listed, ["a", "b", "c"], "every live tenure, by fence");
    // An exclusive holder is named alone: the plain busy shape of docs/src/reference/json.md.
    let decision = acquire(
        &res(),
        &state(&[held("x", 1, 9, X)]),
        &asking("w", X),
        || Ok::<_, Infallible>(Fence(9)),
    )
    .unwrap();
    assert!(matches!(decision.outcome, Acquire::Busy { holders, .. } if holders.is_empty()));
}

#[test]
fn a_mismatch_lists_every_holder_and_writes_nothing() {
    let rows = [held("a", 1, 9_000, S), held("b", 2, 3_000, S)];
    let decision = acquire(
        &res(),
        &state(&rows),
        &asking("w", Mode::Semaphore(2)),
        || Ok::<_, Infallible>(Fence(9)),
    )
    .unwrap();
    let Acquire::Mismatch { holders } = decision.outcome else {
        panic!("a semaphore beside readers is a mismatch")
    };
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|h| h.mode == S));
    assert!(decision.changes.is_empty());
}

#[test]
fn a_new_tenure_takes_the_requested_mode_and_note() {
    let note = Remark::parse("deploy v1.4 by alice").unwrap();
    let req = Request {
        note: Some(note.clone()),
        ..asking("a", Mode::Semaphore(5))
    };
    let decision = acquire(&res(), &state(&[]), &req, || Ok::<_, Infallible>(Fence(3))).unwrap();
    let Acquire::Acquired { lock, .. } = decision.outcome else {
        panic!()
    };
    assert_eq!(
        (lock.mode, lock.note.as_ref()),
        (Mode::Semaphore(5), Some(&note))
    );
    let Some(Change::Record(record)) = decision.changes.last() else {
        panic!()
    };
    assert_eq!(
        (record.mode, record.note.as_ref()),
        (Mode::Semaphore(5), Some(&note))
    );
}

#[test]
fn a_reacquire_replaces_the_note_only_when_one_is_given() {
    let old = Remark::parse("old").unwrap();
    let new = Remark::parse("new").unwrap();
    let rows = [Tenure {
        note: Some(old.clone()),
        ..lease("a", 7, 5_000)
    }];
    for (given, kept) in [(None, &old), (Some(new.clone()), &new)] {
        let req = Request {
            note: given,
            ..request("a", 30)
        };
        let decision = acquire(&res(), &state(&rows), &req, || {
            Ok::<_, Infallible>(Fence(9))
        })
        .unwrap();
        let Acquire::Acquired { lock, .. } = decision.outcome else {
            panic!()
        };
        assert_eq!(lock.note.as_ref(), Some(kept));
    }
}

#[test]
fn renew_and_release_act_on_the_owners_own_tenure_only() {
    let rows = [held("a", 1, 5_000, S), held("b", 2, 5_000, S)];
    let released = release(&res(), &state(&rows), &own("a"), None);
    assert_eq!(
        kinds(&released.changes),
        ["delete 1", "record released a 1"]
    );
    let left = applied(rows.to_vec(), &released.changes);
    assert_eq!(
        status(&res(), &state(&left)).locks.len(),
        1,
        "b's tenure stays"
    );
    // An owner with no tenure: forbidden while others hold it, not found once nobody does.
    assert_eq!(
        release(&res(), &state(&rows), &own("c"), None).outcome,
        Release::Forbidden
    );
    assert_eq!(
        renew(&res(), &state(&rows), &own("c"), ttl(5), None).outcome,
        Renew::Forbidden
    );
    assert_eq!(
        release(&res(), &state(&[]), &own("c"), None).outcome,
        Release::NotFound
    );
    let renewed = renew(&res(), &state(&rows), &own("b"), ttl(60), Some(Fence(2)));
    assert_eq!(kinds(&renewed.changes), ["update 2", "record renewed b 2"]);
}

#[test]
fn status_lists_every_live_tenure_by_fence() {
    let rows = [
        held("c", 9, 5_000, S),
        held("a", 2, 5_000, S),
        held("x", 5, -1, S),
    ];
    let owners: Vec<String> = status(&res(), &state(&rows))
        .locks
        .iter()
        .map(|l| l.owner.to_string())
        .collect();
    assert_eq!(owners, ["a", "c"]);
}

/// Random requests in random modes never admit more than the modes allow.
#[test]
fn random_mixed_modes_never_break_admission() {
    let modes = [X, S, Mode::Semaphore(2), Mode::Semaphore(3)];
    for seed in 0..300u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut rows: Vec<Tenure> = Vec::new();
        let mut now = NOW;
        let mut fence = 0;
        for _ in 0..80 {
            now += rng.i64(0..1_500);
            let s = State {
                now: Timestamp(now),
                leases: rows.clone(),
                ..State::default()
            };
            let who = format!("o{}", rng.u8(..6));
            let changes = if rng.bool() {
                let req = Request {
                    mode: modes[rng.usize(..modes.len())],
                    ..request(&who, rng.u64(1..4))
                };
                acquire(&res(), &s, &req, || {
                    fence += 1;
                    Ok::<_, Infallible>(Fence(fence))
                })
                .unwrap()
                .changes
            } else {
                release(&res(), &s, &own(&who), None).changes
            };
            rows = applied(rows, &changes);
            let after = State {
                now: Timestamp(now),
                leases: rows.clone(),
                ..State::default()
            };
            let live = after.live();
            let families: std::collections::HashSet<crate::lock::Family> =
                live.iter().map(|l| l.mode.family()).collect();
            assert!(families.len() <= 1, "seed {seed}: two families at once");
            let exclusive = live.iter().filter(|l| l.mode == X).count();
            assert!(
                exclusive == 0 || live.len() == 1,
                "seed {seed}: exclusive beside others"
            );
            for l in &live {
                if let Mode::Semaphore(n) = l.mode {
                    assert!(live.len() <= n as usize, "seed {seed}: semaphore over {n}");
                }
            }
            let owners: std::collections::HashSet<&str> =
                live.iter().map(|l| l.owner.as_str()).collect();
            assert_eq!(
                owners.len(),
                live.len(),
                "seed {seed}: one tenure per owner"
            );
        }
    }
}

/// A live place in the queue of `owner` with `ticket`, expiring `left` ms from now.
fn place(owner: &str, ticket: i64, left: i64) -> Waiter {
    Waiter {
        owner: own(owner),
        ticket,
        expires_at: Timestamp(NOW + left),
    }
}

fn queued(leases: &[Tenure], queue: &[Waiter]) -> State {
    State {
        now: Timestamp(NOW),
        leases: leases.to_vec(),
        queue: queue.to_vec(),
    }
}

fn waiting(owner: &str, mode: Mode) -> Request {
    Request {
        waits: true,
        ..asking(owner, mode)
    }
}

/// The verdict and the queue changes of an acquire.
fn queue_verdict(state: &State, req: &Request) -> (String, Vec<String>) {
    let decision = acquire(&res(), state, req, || Ok::<_, Infallible>(Fence(100))).unwrap();
    let verdict = match &decision.outcome {
        Acquire::Acquired { .. } => "granted".to_owned(),
        Acquire::Mismatch { .. } => "mismatch".to_owned(),
        Acquire::Busy {
            holder,
            waiting,
            position,
            ..
        } => format!(
            "busy holder={} waiting={waiting} position={}",
            holder.as_ref().map_or("-", |h| h.owner.as_str()),
            position.map_or("-".to_owned(), |p| p.to_string())
        ),
    };
    let queue_changes = kinds(&decision.changes)
        .into_iter()
        .filter(|k| {
            k.starts_with("enqueue") || k.starts_with("refresh") || k.starts_with("dequeue")
        })
        .collect();
    (verdict, queue_changes)
}

#[test]
fn fair_waiting_table() {
    let free: &[Tenure] = &[];
    let held_by_h = [lease("h", 1, 5_000)];
    let readers = [held("r1", 1, 5_000, S), held("r2", 2, 5_000, S)];
    // (case, holders, queue, request, verdict, queue changes)
    type Case<'a> = (
        &'a str,
        &'a [Tenure],
        Vec<Waiter>,
        Request,
        &'a str,
        Vec<&'a str>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "a waiter refused for the first time takes a place",
            &held_by_h,
            vec![],
            waiting("a", X),
            "busy holder=h waiting=0 position=1",
            vec!["enqueue a"],
        ),
        (
            "a try-once request never takes a place",
            &held_by_h,
            vec![],
            request("a", 30),
            "busy holder=h waiting=0 position=-",
            vec![],
        ),
        (
            "a new waiter queues behind the live ones",
            &held_by_h,
            vec![place("a", 1, 4_000), place("b", 2, 4_000)],
            waiting("c", X),
            "busy holder=h waiting=2 position=3",
            vec!["enqueue c"],
        ),
        (
            "a free resource is reserved for the earliest waiter: a later waiter",
            free,
            vec![place("a", 1, 4_000)],
            waiting("c", X),
            "busy holder=- waiting=1 position=2",
            vec!["enqueue c"],
        ),
        (
            "a free resource is reserved for the earliest waiter: a try-once request",
            free,
            vec![place("a", 1, 4_000)],
            request("x", 30),
            "busy holder=- waiting=1 position=-",
            vec![],
        ),
        (
            "the earliest waiter is granted and leaves the queue",
            free,
            vec![place("a", 1, 4_000), place("b", 2, 4_000)],
            waiting("a", X),
            "granted",
            vec!["dequeue a"],
        ),
        (
            "the second waiter waits for the first even when the resource is free",
            free,
            vec![place("a", 1, 4_000), place("b", 2, 4_000)],
            waiting("b", X),
            "busy holder=- waiting=1 position=2",
            vec![],
        ),
        (
            "an expired place blocks nobody and is cleared",
            free,
            vec![place("dead", 1, 0), place("b", 2, 4_000)],
            waiting("b", X),
            "granted",
            vec!["dequeue dead", "dequeue b"],
        ),
        (
            "a place about to expire is refreshed",
            &held_by_h,
            vec![place("a", 1, 1_000)],
            waiting("a", X),
            "busy holder=h waiting=0 position=1",
            vec!["refresh a"],
        ),
        (
            "a fresh place is not rewritten on every attempt",
            &held_by_h,
            vec![place("a", 1, 4_900)],
            waiting("a", X),
            "busy holder=h waiting=0 position=1",
            vec![],
        ),
        (
            "a shared waiter behind a queued writer waits, though readers hold it",
            &readers,
            vec![place("w", 1, 4_000)],
            waiting("r3", S),
            "busy holder=r1 waiting=1 position=2",
            vec!["enqueue r3"],
        ),
        (
            "a shared reader without a queue joins readers at once",
            &readers,
            vec![],
            asking("r3", S),
            "granted",
            vec![],
        ),
        (
            "a mismatch is answered before the queue",
            &readers,
            vec![place("w", 1, 4_000)],
            waiting("s", Mode::Semaphore(2)),
            "mismatch",
            vec![],
        ),
    ];
    for (name, holders, queue, req, verdict, changes) in cases {
        let (got, got_changes) = queue_verdict(&queued(holders, &queue), &req);
        assert_eq!(got, verdict, "{name}");
        assert_eq!(got_changes, changes, "{name}");
    }
}

#[test]
fn a_holder_reacquiring_its_own_tenure_never_queues() {
    let state = queued(&[lease("h", 1, 5_000)], &[place("a", 1, 4_000)]);
    let (verdict, changes) = queue_verdict(&state, &waiting("h", X));
    assert_eq!(verdict, "granted");
    assert!(changes.is_empty(), "{changes:?}");
}

#[test]
fn leaving_takes_the_owners_place_out_and_nothing_else() {
    let state = queued(&[], &[place("a", 1, 4_000), place("b", 2, 4_000)]);
    assert_eq!(kinds(&leave(&state, &own("a")).changes), ["dequeue a"]);
    assert!(leave(&state, &own("c")).changes.is_empty());
}

#[test]
fn status_counts_live_waiters_only() {
    let state = queued(
        &[lease("h", 1, 5_000)],
        &[place("a", 1, 4_000), place("dead", 2, 0), place("b", 3, 1)],
    );
    assert_eq!(status(&res(), &state).waiting, 2);
}

#[test]
fn only_changes_that_may_let_a_waiter_in_wake_waiters() {
    let shared = Tenure {
        mode: Mode::Shared,
        ..lease("a", 1, 5)
    };
    let semaphore = Tenure {
        mode: Mode::Semaphore(3),
        ..lease("a", 1, 5)
    };
    let dequeue = |name: &str| Change::Dequeue { owner: own(name) };
    let cases = [
        // A release, an expired tenure taken over, a break: a tenure went away.
        (vec![Change::Delete { fence: Fence(1) }], true),
        (
            vec![
                Change::Delete { fence: Fence(1) },
                Change::Insert(lease("a", 2, 5)),
            ],
            true,
        ),
        // A waiter gave up: the one behind it may be first now.
        (vec![dequeue("a")], true),
        // An exclusive grant, to a waiter or a try-once request: nobody else can go in.
        (vec![dequeue("a"), Change::Insert(lease("a", 1, 5))], false),
        (vec![Change::Insert(lease("a", 1, 5))], false),
        // A shared or semaphore grant: the waiters behind may go in beside it.
        (vec![dequeue("a"), Change::Insert(shared.clone())], true),
        (vec![Change::Insert(semaphore)], true),
        // Another waiter left while `a` was granted.
        (vec![dequeue("b"), Change::Insert(lease("a", 1, 5))], true),
        // Renewals and places in the queue admit nobody.
        (vec![Change::Update(shared)], false),
        (
            vec![Change::Enqueue {
                owner: own("a"),
                expires_at: at(5),
                asking: plain_place(),
            }],
            false,
        ),
        (
            vec![Change::Refresh {
                owner: own("a"),
                expires_at: at(5),
            }],
            false,
        ),
        (vec![], false),
    ];
    for (changes, wakes) in cases {
        assert_eq!(wakes_waiters(&changes), wakes, "{changes:?}");
    }
}

#[test]
fn a_change_that_may_let_a_waiter_in_wakes_the_first_live_waiter_left() {
    let dequeue = |name: &str| Change::Dequeue { owner: own(name) };
    let release = || Change::Delete { fence: Fence(1) };
    let shared = |name: &str| {
        Change::Insert(Tenure {
            mode: Mode::Shared,
            ..lease(name, 2, 5)
        })
    };
    let line = [
        place("a", 1, 4_000),
        place("b", 2, 4_000),
        place("c", 3, 4_000),
    ];
    /// Why, the queue, the changes committed, and who is woken.
    type Case = (&'static str, Vec<Waiter>, Vec<Change>, Option<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "a release wakes the head",
            line.to_vec(),
            vec![release()],
            Some("a"),
        ),
        ("nobody waits", vec![], vec![release()], None),
        (
            "an exclusive grant to the head wakes nobody",
            line.to_vec(),
            vec![dequeue("a"), Change::Insert(lease("a", 2, 5))],
            None,
        ),
        (
            "a shared grant to the head wakes the next",
            line.to_vec(),
            vec![dequeue("a"), shared("a")],
            Some("b"),
        ),
        (
            "the head gave up: the next is first now",
            line.to_vec(),
            vec![dequeue("a")],
            Some("b"),
        ),
        (
            "a waiter behind the head gave up: the head may be first now",
            line.to_vec(),
            vec![dequeue("b")],
            Some("a"),
        ),
        (
            "an expired place is skipped",
            vec![place("dead", 1, 0), place("b", 2, 4_000)],
            vec![release()],
            Some("b"),
        ),
        (
            "an expired place taken out with a release",
            vec![place("dead", 1, 0), place("b", 2, 4_000)],
            vec![dequeue("dead"), release()],
            Some("b"),
        ),
        (
            "order is by ticket, not by row order",
            vec![place("late", 9, 4_000), place("early", 3, 4_000)],
            vec![release()],
            Some("early"),
        ),
        (
            "only expired places left",
            vec![place("dead", 1, 0), place("gone", 2, -5)],
            vec![release()],
            None,
        ),
        (
            "everyone left",
            vec![place("a", 1, 4_000)],
            vec![dequeue("a")],
            None,
        ),
        (
            "a renewal wakes nobody",
            line.to_vec(),
            vec![Change::Update(lease("h", 1, 5))],
            None,
        ),
        (
            "a new place wakes nobody",
            line.to_vec(),
            vec![Change::Enqueue {
                owner: own("d"),
                expires_at: at(5),
                asking: plain_place(),
            }],
            None,
        ),
    ];
    for (why, queue, changes, woken) in cases {
        let state = queued(&[lease("h", 1, 5_000)], &queue);
        assert_eq!(
            next_to_wake(&state, &changes).map(Owner::as_str),
            woken,
            "{why}"
        );
    }
}

/// Waiters that arrive in some order and retry in random order are granted in arrival
/// order, one exclusive tenure at a time.
#[test]
fn random_retry_orders_still_grant_in_arrival_order() {
    for seed in 0..200u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut state = queued(&[lease("h", 1, 5_000)], &[]);
        let owners: Vec<String> = (0..5).map(|i| format!("w{i}")).collect();
        let mut ticket = 0;
        // Everyone queues, in name order, while h holds the lock.
        for name in &owners {
            let d = acquire(&res(), &state, &waiting(name, X), || {
                Ok::<_, Infallible>(Fence(0))
            })
            .unwrap();
            for change in d.changes {
                if let Change::Enqueue {
                    owner, expires_at, ..
                } = change
                {
                    ticket += 1;
                    state.queue.push(Waiter {
                        owner,
                        ticket,
                        expires_at,
                    });
                }
            }
        }
        state.leases.clear();
        let mut granted = Vec::new();
        let mut fence = 10;
        while granted.len() < owners.len() {
            let name = &owners[rng.usize(..owners.len())];
            if granted.contains(name) {
                continue;
            }
            let d = acquire(&res(), &state, &waiting(name, X), || {
                fence += 1;
                Ok::<_, Infallible>(Fence(fence))
            })
            .unwrap();
            if let Acquire::Acquired { .. } = d.outcome {
                granted.push(name.clone());
                state.queue.retain(|w| w.owner.as_str() != name);
                // It holds the lock for a moment, then releases it.
                state.leases.clear();
            }
        }
        assert_eq!(granted, owners, "seed {seed}");
    }
}

/// A live tenure of `owner` with `fence` in `mode`, expiring `left` ms from now, that `run`
/// took (guarded).
fn run_held(owner: &str, fence: i64, left: i64, mode: Mode) -> Tenure {
    Tenure {
        guarded: true,
        ..held(owner, fence, left, mode)
    }
}

/// `run`'s request: guarded.
fn running(owner: &str, mode: Mode) -> Request {
    Request {
        guarded: true,
        ..asking(owner, mode)
    }
}

/// What an acquire comes to — a new or extended tenure with its fence and whether it is
/// guarded, or the busy answer as `queue_verdict` spells it — and every change it writes.
fn guard_verdict(state: &State, req: &Request) -> (String, Vec<String>) {
    let decision = acquire(&res(), state, req, || Ok::<_, Infallible>(Fence(100))).unwrap();
    let tenure = |lock: &Lock, how: &str| {
        let lease = decision.changes.iter().find_map(|c| match c {
            Change::Insert(l) | Change::Update(l) => Some(l),
            _ => None,
        });
        let guarded = lease.expect("a tenure is written").guarded;
        format!(
            "{how} {} {}",
            lock.fence,
            if guarded { "guarded" } else { "joinable" }
        )
    };
    let verdict = match &decision.outcome {
        Acquire::Acquired {
            lock,
            tenure: Grant::New,
        } => tenure(lock, "new"),
        Acquire::Acquired { lock, .. } => tenure(lock, "extended"),
        Acquire::Mismatch { .. } => "mismatch".to_owned(),
        Acquire::Busy { .. } => queue_verdict(state, req).0,
    };
    (verdict, kinds(&decision.changes))
}

#[test]
fn only_a_tenure_acquire_took_may_be_joined() {
    let sem = Mode::Semaphore;
    let none: Vec<Waiter> = vec![];
    // (case, tenures, queue, request, verdict, changes)
    type Case = (
        &'static str,
        Vec<Tenure>,
        Vec<Waiter>,
        Request,
        &'static str,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        // A new tenure records who took it.
        (
            "acquire on a free resource: a tenure that may be joined",
            vec![],
            none.clone(),
            asking("a", X),
            "new 100 joinable",
            vec!["insert a 100", "record acquired a 100"],
        ),
        (
            "run on a free resource: a guarded tenure",
            vec![],
            none.clone(),
            running("a", X),
            "new 100 guarded",
            vec!["insert a 100", "record acquired a 100"],
        ),
        (
            "run beside shared holders: a guarded shared tenure",
            vec![held("b", 1, 5_000, S)],
            none.clone(),
            running("a", S),
            "new 100 guarded",
            vec!["insert a 100", "record acquired a 100"],
        ),
        // The owner's tenure that acquire took: joined by run, re-acquired by acquire, and
        // never made guarded by either.
        (
            "acquire of the owner's own acquired tenure: re-acquired",
            vec![lease("a", 7, 5_000)],
            none.clone(),
            asking("a", X),
            "extended 7 joinable",
            vec!["update 7", "record extended a 7"],
        ),
        (
            "run of the owner's own acquired tenure: joined, still joinable",
            vec![lease("a", 7, 5_000)],
            none.clone(),
            running("a", X),
            "extended 7 joinable",
            vec!["update 7", "record extended a 7"],
        ),
        (
            "run joining an acquired shared tenure beside another reader",
            vec![held("a", 7, 5_000, S), held("b", 8, 5_000, S)],
            none.clone(),
            running("a", S),
            "extended 7 joinable",
            vec!["update 7", "record extended a 7"],
        ),
        (
            "run joining an acquired semaphore tenure of a full semaphore",
            vec![held("a", 7, 5_000, sem(2)), held("b", 8, 5_000, sem(2))],
            none.clone(),
            running("a", sem(2)),
            "extended 7 joinable",
            vec!["update 7", "record extended a 7"],
        ),
        (
            "run of the owner's acquired tenure in another mode: mismatch",
            vec![lease("a", 7, 5_000)],
            none.clone(),
            running("a", S),
            "mismatch",
            vec![],
        ),
        (
            "a waiting run joins its owner's acquired tenure without queueing",
            vec![lease("a", 7, 5_000)],
            vec![place("w", 1, 4_000)],
            Request {
                waits: true,
                ..running("a", X)
            },
            "extended 7 joinable",
            vec!["update 7", "record extended a 7"],
        ),
        // The owner's tenure that run took: busy, as for another owner.
        (
            "acquire of the owner's own guarded tenure: busy",
            vec![run_held("a", 7, 5_000, X)],
            none.clone(),
            asking("a", X),
            "busy holder=a waiting=0 position=-",
            vec![],
        ),
        (
            "run of the owner's own guarded tenure: busy",
            vec![run_held("a", 7, 5_000, X)],
            none.clone(),
            running("a", X),
            "busy holder=a waiting=0 position=-",
            vec![],
        ),
        (
            "guarded, live by one millisecond: still busy",
            vec![run_held("a", 7, 1, X)],
            none.clone(),
            running("a", X),
            "busy holder=a waiting=0 position=-",
            vec![],
        ),
        (
            "guarded, expired exactly now: a new tenure, as after any expiry",
            vec![run_held("a", 7, 0, X)],
            none.clone(),
            running("a", X),
            "new 100 guarded",
            vec!["delete 7", "insert a 100", "record taken_over a 100 from a"],
        ),
        (
            "guarded and expired, then acquire: a tenure that may be joined",
            vec![run_held("a", 7, -5_000, X)],
            none.clone(),
            asking("a", X),
            "new 100 joinable",
            vec!["delete 7", "insert a 100", "record taken_over a 100 from a"],
        ),
        (
            "another owner's guarded tenure: busy, as any holder",
            vec![run_held("b", 7, 5_000, X)],
            none.clone(),
            running("a", X),
            "busy holder=b waiting=0 position=-",
            vec![],
        ),
        (
            "a waiting run behind its owner's guarded tenure takes a place",
            vec![run_held("a", 7, 5_000, X)],
            none.clone(),
            Request {
                waits: true,
                ..running("a", X)
            },
            "busy holder=a waiting=0 position=1",
            vec!["enqueue a"],
        ),
        (
            "a waiting acquire behind its owner's guarded tenure takes a place",
            vec![run_held("a", 7, 5_000, X)],
            none.clone(),
            waiting("a", X),
            "busy holder=a waiting=0 position=1",
            vec!["enqueue a"],
        ),
        (
            "a waiting run behind its owner's guarded tenure queues behind the waiters there",
            vec![run_held("a", 7, 5_000, X)],
            vec![place("w", 1, 4_000)],
            Request {
                waits: true,
                ..running("a", X)
            },
            "busy holder=a waiting=1 position=2",
            vec!["enqueue a"],
        ),
        (
            "a waiting run keeps its place while its owner's guarded tenure lives",
            vec![run_held("a", 7, 5_000, X)],
            vec![place("a", 1, 4_900)],
            Request {
                waits: true,
                ..running("a", X)
            },
            "busy holder=a waiting=0 position=1",
            vec![],
        ),
        (
            "a waiting run at the head is granted once its owner's guarded tenure ended",
            vec![run_held("a", 7, -1, X)],
            vec![place("a", 1, 4_000)],
            Request {
                waits: true,
                ..running("a", X)
            },
            "new 100 guarded",
            vec![
                "dequeue a",
                "delete 7",
                "insert a 100",
                "record taken_over a 100 from a",
            ],
        ),
        // Lock modes: the answer another owner would get, but never a second tenure.
        (
            "shared beside the owner's own guarded shared tenure: busy",
            vec![run_held("a", 7, 5_000, S), held("b", 8, 3_000, S)],
            none.clone(),
            running("a", S),
            "busy holder=b waiting=0 position=-",
            vec![],
        ),
        (
            "a semaphore with room beside the owner's own guarded tenure: busy",
            vec![run_held("a", 7, 5_000, sem(3))],
            none.clone(),
            asking("a", sem(3)),
            "busy holder=a waiting=0 position=-",
            vec![],
        ),
        (
            "shared beside the owner's own guarded exclusive tenure: busy, not mismatch",
            vec![run_held("a", 7, 5_000, X)],
            none.clone(),
            asking("a", S),
            "busy holder=a waiting=0 position=-",
            vec![],
        ),
        (
            "exclusive beside the owner's own guarded shared tenure: busy",
            vec![run_held("a", 7, 5_000, S)],
            none.clone(),
            running("a", X),
            "busy holder=a waiting=0 position=-",
            vec![],
        ),
        (
            "another family beside the owner's own guarded tenure: mismatch",
            vec![run_held("a", 7, 5_000, X)],
            none.clone(),
            waiting("a", sem(2)),
            "mismatch",
            vec![],
        ),
        (
            "a semaphore of another N beside it: mismatch",
            vec![run_held("a", 7, 5_000, sem(3))],
            none.clone(),
            running("a", sem(4)),
            "mismatch",
            vec![],
        ),
    ];
    for (name, rows, queue, req, verdict, changes) in cases {
        let (got, got_changes) = guard_verdict(&queued(&rows, &queue), &req);
        assert_eq!(got, verdict, "{name}");
        assert_eq!(got_changes, changes, "{name}");
    }
}

/// Wherever another owner is refused, the owner of a guarded tenure gets the very same
/// answer and the very same queue changes; where another owner would be let in beside it,
/// the owner is busy, with the answer another owner gets beside a full resource.
#[test]
fn an_owners_guarded_tenure_refuses_it_exactly_as_another_owner() {
    let sem = Mode::Semaphore;
    let states: Vec<(Vec<Tenure>, Vec<Waiter>)> = vec![
        (vec![run_held("a", 7, 5_000, X)], vec![]),
        (
            vec![run_held("a", 7, 5_000, X)],
            vec![place("w", 1, 4_000), place("v", 2, 4_000)],
        ),
        (
            vec![run_held("a", 7, 5_000, S), held("b", 8, 2_000, S)],
            vec![],
        ),
        (
            vec![run_held("a", 7, 5_000, sem(2)), held("b", 8, 2_000, sem(2))],
            vec![place("w", 1, 4_000)],
        ),
        (vec![run_held("a", 7, 5_000, sem(3))], vec![]),
    ];
    let modes = [X, S, sem(2), sem(3)];
    for (rows, queue) in &states {
        let state = queued(rows, queue);
        for mode in modes {
            for waits in [false, true] {
                for guarded in [false, true] {
                    let req = |owner: &str| Request {
                        waits,
                        guarded,
                        ..asking(owner, mode)
                    };
                    let mine = acquire(&res(), &state, &req("a"), || {
                        Ok::<_, Infallible>(Fence(100))
                    })
                    .unwrap();
                    let other = acquire(&res(), &state, &req("z"), || {
                        Ok::<_, Infallible>(Fence(100))
                    })
                    .unwrap();
                    let why = format!("{rows:?} {queue:?} {mode:?} waits={waits}");
                    let renamed: Vec<String> = kinds(&other.changes)
                        .iter()
                        .map(|k| k.replace(" z", " a"))
                        .collect();
                    match other.outcome {
                        Acquire::Acquired { .. } => {
                            assert!(
                                matches!(mine.outcome, Acquire::Busy { .. }),
                                "{why}: {:?}",
                                mine.outcome
                            );
                            assert!(mine.changes.iter().all(|c| !c.is_durable()), "{why}");
                        }
                        refused => {
                            assert_eq!(mine.outcome, refused, "{why}");
                            assert_eq!(kinds(&mine.changes), renamed, "{why}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn renewing_and_keeping_a_guarded_tenure_keep_it_guarded() {
    let rows = [run_held("a", 7, 5_000, X)];
    let renewed = renew(&res(), &state(&rows), &own("a"), ttl(60), Some(Fence(7)));
    let kept = finish(
        &res(),
        &state(&rows),
        &own("a"),
        Fence(7),
        Some(std::time::Duration::from_secs(60)),
    );
    for changes in [renewed.changes, kept.changes] {
        let Some(Change::Update(lease)) = changes.first() else {
            panic!("the lease is updated: {changes:?}")
        };
        assert!(lease.guarded, "{lease:?}");
    }
    // Release by owner ends it as any tenure of that owner.
    let released = release(&res(), &state(&rows), &own("a"), None);
    assert_eq!(
        kinds(&released.changes),
        ["delete 7", "record released a 7"]
    );
}

fn breach_by(by: &str, reason: &str) -> Breaking {
    Breaking {
        by: Remark::parse(by).unwrap(),
        by_token: None,
        reason: Remark::parse(reason).unwrap(),
    }
}

#[test]
fn finish_table() {
    use std::time::Duration as D;
    // The tenure started 1 s ago (`lease`'s acquired_at is NOW - 1000).
    // (case, rows, fence, hold, expected outcome, expected changes)
    type Case<'a> = (&'a str, Vec<Tenure>, i64, Option<D>, Finish, Vec<&'a str>);
    let cases: Vec<Case<'_>> = vec![
        (
            "no hold: released",
            vec![lease("a", 7, 5_000)],
            7,
            None,
            Finish::Released,
            vec!["delete 7", "record released a 7"],
        ),
        (
            "a hold still ahead: kept until start + hold",
            vec![lease("a", 7, 5_000)],
            7,
            Some(D::from_secs(60)),
            Finish::Kept { until: at(59_000) },
            vec!["update 7", "record kept a 7"],
        ),
        (
            "a hold that ends exactly now: released",
            vec![lease("a", 7, 5_000)],
            7,
            Some(D::from_secs(1)),
            Finish::Released,
            vec!["delete 7", "record released a 7"],
        ),
        (
            "a hold already past: released",
            vec![lease("a", 7, 5_000)],
            7,
            Some(D::from_millis(500)),
            Finish::Released,
            vec!["delete 7", "record released a 7"],
        ),
        (
            "a hold longer than the lease: kept past the lease",
            vec![lease("a", 7, 100)],
            7,
            Some(D::from_secs(3_000)),
            Finish::Kept {
                until: at(2_999_000),
            },
            vec!["update 7", "record kept a 7"],
        ),
        (
            "the tenure is gone (broken, or expired): nothing to do",
            vec![],
            7,
            Some(D::from_secs(60)),
            Finish::NotFound,
            vec![],
        ),
        (
            "another tenure of the same owner: never kept or released",
            vec![lease("a", 9, 5_000)],
            7,
            Some(D::from_secs(60)),
            Finish::NotFound,
            vec![],
        ),
        (
            "the tenure expired: never revived by a hold",
            vec![lease("a", 7, -1)],
            7,
            Some(D::from_secs(60)),
            Finish::NotFound,
            vec![],
        ),
    ];
    for (name, rows, fence, hold, outcome, changes) in cases {
        let decision = finish(&res(), &state(&rows), &own("a"), Fence(fence), hold);
        assert_eq!(decision.outcome, outcome, "{name}");
        assert_eq!(kinds(&decision.changes), changes, "{name}");
    }
}

#[test]
fn a_kept_lease_keeps_its_fence_start_and_note() {
    let rows = [Tenure {
        note: Some(Remark::parse("hourly report").unwrap()),
        ..lease("a", 7, 5_000)
    }];
    let decision = finish(
        &res(),
        &state(&rows),
        &own("a"),
        Fence(7),
        Some(std::time::Duration::from_secs(60)),
    );
    let Change::Update(kept) = &decision.changes[0] else {
        panic!("the lease is updated")
    };
    assert_eq!(
        (kept.fence, kept.acquired_at, kept.expires_at),
        (Fence(7), at(-1_000), at(59_000))
    );
    assert_eq!(kept.note, rows[0].note);
}

#[test]
fn breach_table() {
    let readers = vec![
        held("a", 1, 5_000, S),
        held("b", 2, 5_000, S),
        held("x", 3, -1, S),
    ];
    // (case, rows, --owner, removed owners, changes)
    type Case<'a> = (
        &'a str,
        Vec<Tenure>,
        Option<&'a str>,
        Vec<&'a str>,
        Vec<&'a str>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "every live tenure",
            readers.clone(),
            None,
            vec!["a", "b"],
            vec![
                "delete 1",
                "record broken a 1",
                "delete 2",
                "record broken b 2",
            ],
        ),
        (
            "only the named owner's",
            readers.clone(),
            Some("b"),
            vec!["b"],
            vec!["delete 2", "record broken b 2"],
        ),
        (
            "an owner with no live tenure",
            readers.clone(),
            Some("x"),
            vec![],
            vec![],
        ),
        ("nobody holds it", vec![], None, vec![], vec![]),
        (
            "an exclusive holder",
            vec![lease("h", 4, 10)],
            None,
            vec!["h"],
            vec!["delete 4", "record broken h 4"],
        ),
    ];
    let why = breach_by("alice@ops", "stuck since Friday");
    for (name, rows, owner, removed, changes) in cases {
        let owner = owner.map(own);
        let decision = break_tenures(&res(), &state(&rows), owner.as_ref(), &why);
        let got: Vec<&str> = decision.outcome.iter().map(|l| l.owner.as_str()).collect();
        assert_eq!(got, removed, "{name}");
        assert_eq!(kinds(&decision.changes), changes, "{name}");
        for change in &decision.changes {
            if let Change::Record(record) = change {
                assert_eq!(record.broken.as_ref(), Some(&why), "{name}");
            }
        }
    }
}

#[test]
fn after_a_break_the_next_tenure_gets_a_higher_fence() {
    let rows = vec![lease("h", 4, 5_000)];
    let broken = break_tenures(&res(), &state(&rows), None, &breach_by("op", "stuck"));
    let rows = applied(rows, &broken.changes);
    let (decision, _) = acquire_with(&rows, "next", 30);
    let Acquire::Acquired { lock, tenure } = decision.outcome else {
        panic!("a broken lock is free")
    };
    assert_eq!(tenure, Grant::New);
    assert!(lock.fence > Fence(4));
}

/// A run of random operations against a model of docs/src/reference/semantics.md: the decisions, applied to the
/// rows, never hand out a fence twice, never let two owners hold at once, never join a
/// guarded tenure, and a refusal never writes.
#[test]
fn random_histories_keep_the_invariants() {
    let owners = ["a", "b", "c"];
    for seed in 0..200u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut rows: Vec<Tenure> = Vec::new();
        let mut now = NOW;
        let mut next_fence = 1;
        let mut last_new_fence = 0;
        for _ in 0..60 {
            now += rng.i64(0..4_000);
            let s = State {
                now: Timestamp(now),
                leases: rows.clone(),
                ..State::default()
            };
            let who = own(owners[rng.usize(..owners.len())]);
            let secs = rng.u64(1..5);
            let changes = match rng.u8(..3) {
                0 => {
                    let req = Request {
                        owner: who.clone(),
                        ttl: ttl(secs),
                        mode: Mode::Exclusive,
                        note: None,
                        waits: false,
                        guarded: rng.bool(),
                    };
                    let d = acquire(&res(), &s, &req, || {
                        next_fence += 1;
                        Ok::<_, Infallible>(Fence(next_fence))
                    })
                    .unwrap();
                    let written = d.changes.iter().find_map(|c| match c {
                        Change::Insert(l) | Change::Update(l) => Some(l.guarded),
                        _ => None,
                    });
                    match &d.outcome {
                        Acquire::Acquired {
                            lock,
                            tenure: Grant::New,
                        } => {
                            assert!(lock.fence.0 > last_new_fence, "seed {seed}: fence reused");
                            last_new_fence = lock.fence.0;
                            assert_eq!(written, Some(req.guarded), "seed {seed}");
                        }
                        Acquire::Acquired { .. } => {
                            // Only a tenure acquire took is ever joined, and it stays so.
                            let joined = s.live().into_iter().find(|l| l.owner == who);
                            assert!(joined.is_some_and(|l| !l.guarded), "seed {seed}");
                            assert_eq!(written, Some(false), "seed {seed}");
                        }
                        Acquire::Busy { .. } | Acquire::Mismatch { .. } => {
                            assert!(d.changes.is_empty());
                        }
                    }
                    d.changes
                }
                1 => {
                    let d = renew(&res(), &s, &who, ttl(secs), None);
                    assert_eq!(
                        d.changes.is_empty(),
                        !matches!(d.outcome, Renew::Renewed { .. })
                    );
                    d.changes
                }
                _ => {
                    let d = release(&res(), &s, &who, None);
                    assert_eq!(d.changes.is_empty(), d.outcome != Release::Released);
                    d.changes
                }
            };
            rows = applied(rows, &changes);
            let live = State {
                now: Timestamp(now),
                leases: rows.clone(),
                ..State::default()
            };
            assert!(
                live.live().len() <= 1,
                "seed {seed}: two live exclusive tenures"
            );
        }
    }
}

/// `owner` proved by token `token` (`""`: by none), as a server with tokens makes it.
fn proved(owner: &str, token: &str) -> Owner {
    own(owner).with_token((!token.is_empty()).then(|| TokenName::parse(token).unwrap()))
}

fn tenure_by(owner: &str, token: &str, fence: i64, mode: Mode) -> Tenure {
    Tenure {
        owner: proved(owner, token),
        ..held(owner, fence, 5_000, mode)
    }
}

#[test]
fn a_tenure_belongs_to_the_token_that_took_it() {
    // (case, the tenure's owner and token, the request's owner and token, modes, verdict):
    // a name proves nothing, so the same name with another token (or none) is another owner,
    // except that one name holds one tenure of a resource at most: beside it, busy.
    let cases = [
        (
            "same name, same token",
            ("w", "ci"),
            ("w", "ci"),
            X,
            X,
            "extended",
        ),
        (
            "same name, same token, shared",
            ("w", "ci"),
            ("w", "ci"),
            S,
            S,
            "extended",
        ),
        (
            "same name, other token",
            ("w", "ci"),
            ("w", "ops"),
            X,
            X,
            "busy",
        ),
        (
            "same name, tokenless caller",
            ("w", "ci"),
            ("w", ""),
            X,
            X,
            "busy",
        ),
        (
            "same name, tokenless tenure",
            ("w", ""),
            ("w", "ci"),
            X,
            X,
            "busy",
        ),
        (
            "same name, other token, shared",
            ("w", "ci"),
            ("w", "ops"),
            S,
            S,
            "busy",
        ),
        (
            "same name, other token, room in a semaphore",
            ("w", "ci"),
            ("w", "ops"),
            Mode::Semaphore(3),
            Mode::Semaphore(3),
            "busy",
        ),
        (
            "same name, other token, other family",
            ("w", "ci"),
            ("w", "ops"),
            S,
            Mode::Semaphore(2),
            "mismatch",
        ),
        (
            "other name, same token",
            ("w", "ci"),
            ("v", "ci"),
            X,
            X,
            "busy",
        ),
        (
            "other name, same token, shared",
            ("w", "ci"),
            ("v", "ci"),
            S,
            S,
            "granted",
        ),
        ("no tokens at all", ("w", ""), ("w", ""), X, X, "extended"),
    ];
    for (case, (owner, token), (asker, asker_token), held_mode, mode, expected) in cases {
        let rows = [tenure_by(owner, token, 7, held_mode)];
        let req = Request {
            owner: proved(asker, asker_token),
            mode,
            ..request(asker, 30)
        };
        assert_eq!(verdict(&rows, &req), expected, "{case}");
    }
}

#[test]
fn only_the_token_that_took_a_tenure_renews_or_releases_it() {
    // (case, the tenure's token, the caller's token, fence given, renew's and release's answer)
    let cases = [
        ("same token", "ci", "ci", None, "renewed", "released"),
        (
            "same token and fence",
            "ci",
            "ci",
            Some(7),
            "renewed",
            "released",
        ),
        ("other token", "ci", "ops", None, "forbidden", "forbidden"),
        (
            "other token, right fence",
            "ci",
            "ops",
            Some(7),
            "forbidden",
            "forbidden",
        ),
        (
            "caller without a token",
            "ci",
            "",
            None,
            "forbidden",
            "forbidden",
        ),
        (
            "tenure without a token",
            "",
            "ci",
            Some(7),
            "forbidden",
            "forbidden",
        ),
        (
            "same token, stale fence",
            "ci",
            "ci",
            Some(6),
            "not found",
            "not found",
        ),
    ];
    for (case, token, caller, fence, renewed, released) in cases {
        let rows = [tenure_by("w", token, 7, X)];
        let st = state(&rows);
        let who = proved("w", caller);
        let fence = fence.map(Fence);
        let renew = match renew(&res(), &st, &who, ttl(30), fence).outcome {
            Renew::Renewed { .. } => "renewed",
            Renew::NotFound => "not found",
            Renew::Forbidden => "forbidden",
        };
        let release = match release(&res(), &st, &who, fence) {
            Decision {
                outcome: Release::Released,
                changes,
            } => {
                assert!(
                    matches!(&changes[1], Change::Record(e)
                        if e.token.as_ref().map(TokenName::as_str) == (!token.is_empty()).then_some(token)),
                    "{case}: the event names the tenure's token: {changes:?}"
                );
                "released"
            }
            Decision {
                outcome: Release::NotFound,
                ..
            } => "not found",
            Decision {
                outcome: Release::Forbidden,
                ..
            } => "forbidden",
        };
        assert_eq!((renew, release), (renewed, released), "{case}");
    }
}

#[test]
fn each_token_waits_in_its_own_place_and_leaves_only_its_own() {
    let other_token = Waiter {
        owner: proved("w", "ops"),
        ..place("w", 1, 3_000)
    };
    let mine = Waiter {
        owner: proved("w", "ci"),
        ..place("w", 2, 3_000)
    };
    let st = queued(
        &[held("h", 7, 5_000, X)],
        &[other_token.clone(), mine.clone()],
    );
    // A waiter with token "ci" is second in line, behind the same name with another token.
    let req = Request {
        owner: proved("w", "ci"),
        waits: true,
        ..request("w", 30)
    };
    let decision = acquire(&res(), &st, &req, || Ok::<_, Infallible>(Fence(100))).unwrap();
    assert!(
        matches!(
            decision.outcome,
            Acquire::Busy {
                position: Some(2),
                waiting: 1,
                ..
            }
        ),
        "{:?}",
        decision.outcome
    );
    // A newcomer under the same name with no token gets a place of its own, at the end.
    let newcomer = Request {
        owner: own("w"),
        waits: true,
        ..request("w", 30)
    };
    let decision = acquire(&res(), &st, &newcomer, || Ok::<_, Infallible>(Fence(100))).unwrap();
    assert!(
        matches!(&decision.changes[..], [Change::Enqueue { owner, .. }] if *owner == own("w")),
        "{:?}",
        decision.changes
    );
    // Leaving takes away the leaver's place, not its namesake's.
    assert_eq!(
        leave(&st, &proved("w", "ci")).changes,
        vec![Change::Dequeue {
            owner: proved("w", "ci")
        }]
    );
}

#[test]
fn a_break_by_owner_name_ends_the_tenure_whatever_token_took_it() {
    let rows = [tenure_by("w", "ci", 7, X)];
    let breaking = Breaking {
        by: Remark::parse("ci-bot@innocent").unwrap(),
        by_token: Some(TokenName::parse("ops").unwrap()),
        reason: Remark::parse("stuck").unwrap(),
    };
    let decision = break_tenures(&res(), &state(&rows), Some(&own("w")), &breaking);
    assert_eq!(decision.outcome.len(), 1);
    // The event keeps the victim tenure's token, and beside it the operator's that broke it.
    assert!(
        matches!(&decision.changes[1], Change::Record(e)
            if e.token.as_ref().map(TokenName::as_str) == Some("ci")
                && e.broken.as_ref() == Some(&breaking)),
        "{:?}",
        decision.changes
    );
}
