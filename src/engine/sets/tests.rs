//! The set rules as tables, then as scenarios: several waiters, sets and single resources,
//! played against one in-memory copy of the rows, each change applied as a store applies it.

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

use std::convert::Infallible;

use super::*;
use crate::engine::{Tenure, Waiter};
use crate::lock::{Grant, Mode};

const NOW: i64 = 1_000_000;

fn res(name: &str) -> Resource {
    Resource::parse(name).unwrap()
}

fn own(name: &str) -> Owner {
    Owner::parse(name).unwrap()
}

fn members(names: &[&str]) -> Vec<Resource> {
    Members::new(names.iter().map(|n| res(n)).collect())
        .unwrap()
        .as_slice()
        .to_vec()
}

fn lease(owner: &str, fence: i64, mode: Mode) -> Tenure {
    Tenure {
        owner: own(owner),
        fence: Fence(fence),
        acquired_at: Timestamp(NOW - 1_000),
        expires_at: Timestamp(NOW + 5_000),
        mode,
        note: None,
        guarded: false,
    }
}

fn place(owner: &str, ticket: i64, left: i64) -> Waiter {
    Waiter {
        owner: own(owner),
        ticket,
        expires_at: Timestamp(NOW + left),
    }
}

fn state(leases: Vec<Tenure>, queue: Vec<Waiter>) -> State {
    State {
        now: Timestamp(NOW),
        leases,
        queue,
    }
}

fn request(owner: &str, waits: bool) -> Request {
    Request {
        waits,
        ..Request::exclusive(own(owner), Ttl::from_secs(30).unwrap())
    }
}

use crate::lock::Members;

/// Fences from 100 up, in the order they are asked for.
fn acquire_of(names: &[&str], states: &[State], request: &Request) -> SetDecision<SetAcquire> {
    let mut next = 100;
    acquire_set(&members(names), states, request, &mut || {
        next += 1;
        Ok::<_, Infallible>(Fence(next - 1))
    })
    .unwrap()
}

/// The outcome in a few words: `acquired a=100 b=101`, `busy a(h) b(-)`, `mismatch b`.
fn verdict(outcome: &SetAcquire) -> String {
    match outcome {
        SetAcquire::Acquired { locks, tenures } => {
            let each: Vec<String> = locks
                .iter()
                .zip(tenures)
                .map(|(lock, tenure)| {
                    let how = if *tenure == Grant::Extended { "+" } else { "" };
                    format!("{}={}{how}", lock.resource, lock.fence)
                })
                .collect();
            format!("acquired {}", each.join(" "))
        }
        SetAcquire::Busy { blocked } => {
            let each: Vec<String> = blocked
                .iter()
                .map(|b| {
                    let holder = b
                        .holder
                        .as_ref()
                        .map_or("-".to_owned(), |h| h.owner.to_string());
                    let position = b.position.map_or("-".to_owned(), |p| p.to_string());
                    format!("{}({holder},{position})", b.resource)
                })
                .collect();
            format!("busy {}", each.join(" "))
        }
        SetAcquire::Mismatch { resource, .. } => format!("mismatch {resource}"),
    }
}

/// Each member's changes in a few words, members joined by ` | `.
fn writes(changes: &[Vec<Change>]) -> String {
    let members: Vec<String> = changes
        .iter()
        .map(|member| {
            let each: Vec<String> = member
                .iter()
                .map(|change| match change {
                    Change::Insert(l) => format!("insert {}", l.fence),
                    Change::Update(l) => format!("update {}", l.fence),
                    Change::Delete { fence } => format!("delete {fence}"),
                    Change::Record(r) => format!("record {}", r.event.as_str()),
                    Change::Enqueue { owner, .. } => format!("enqueue {owner}"),
                    Change::Refresh { owner, .. } => format!("refresh {owner}"),
                    Change::Dequeue { owner } => format!("dequeue {owner}"),
                })
                .collect();
            each.join(", ")
        })
        .collect();
    members.join(" | ")
}

#[test]
fn acquire_set_table() {
    let x = Mode::Exclusive;
    // (case, members, each member's state, request, verdict, writes)
    type Case = (
        &'static str,
        Vec<&'static str>,
        Vec<State>,
        Request,
        &'static str,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "every member free: a new tenure on each, fences in the members' order",
            vec!["a", "b"],
            vec![state(vec![], vec![]), state(vec![], vec![])],
            request("o", false),
            "acquired a=100 b=101",
            "insert 100, record acquired | insert 101, record acquired",
        ),
        (
            "one member held by another: busy naming it, nothing written",
            vec!["a", "b"],
            vec![state(vec![], vec![]), state(vec![lease("h", 7, x)], vec![])],
            request("o", false),
            "busy b(h,-)",
            " | ",
        ),
        (
            "every busy member is named, by resource",
            vec!["a", "b", "c"],
            vec![
                state(vec![lease("h", 7, x)], vec![]),
                state(vec![], vec![]),
                state(vec![lease("k", 8, x)], vec![]),
            ],
            request("o", false),
            "busy a(h,-) c(k,-)",
            " |  | ",
        ),
        (
            "a mismatch on any member comes before busy, naming the first such member",
            vec!["a", "b", "c"],
            vec![
                state(vec![lease("h", 7, x)], vec![]),
                state(vec![lease("r", 8, Mode::Shared)], vec![]),
                state(vec![lease("s", 9, Mode::Semaphore(3))], vec![]),
            ],
            Request {
                mode: Mode::Semaphore(2),
                ..request("o", false)
            },
            "mismatch a",
            " |  | ",
        ),
        (
            "the owner's own tenure on a member is extended, the others taken new",
            vec!["a", "b"],
            vec![state(vec![lease("o", 7, x)], vec![]), state(vec![], vec![])],
            request("o", false),
            "acquired a=7+ b=100",
            "update 7, record extended | insert 100, record acquired",
        ),
        (
            "shared beside shared holders is admitted on every member",
            vec!["a", "b"],
            vec![
                state(vec![lease("r", 7, Mode::Shared)], vec![]),
                state(vec![], vec![]),
            ],
            Request {
                mode: Mode::Shared,
                ..request("o", false)
            },
            "acquired a=100 b=101",
            "insert 100, record acquired | insert 101, record acquired",
        ),
        (
            "a waiter refused takes a place in every member's queue, the free ones too",
            vec!["a", "b"],
            vec![state(vec![lease("h", 7, x)], vec![]), state(vec![], vec![])],
            request("o", true),
            "busy a(h,1)",
            "enqueue o | enqueue o",
        ),
        (
            "a free member reserved for an earlier waiter is busy, held by nobody",
            vec!["a", "b"],
            vec![
                state(vec![], vec![]),
                state(vec![], vec![place("w", 1, 4_000)]),
            ],
            request("o", true),
            "busy b(-,2)",
            "enqueue o | enqueue o",
        ),
        (
            "a waiter with live places everywhere keeps them (refreshed only when due)",
            vec!["a", "b"],
            vec![
                state(vec![lease("h", 7, x)], vec![place("o", 3, 4_500)]),
                state(vec![], vec![place("o", 4, 1_000)]),
            ],
            request("o", true),
            "busy a(h,1)",
            " | refresh o",
        ),
        (
            "the head of every member's queue, every member free: granted, places left",
            vec!["a", "b"],
            vec![
                state(vec![], vec![place("o", 3, 4_000), place("w", 5, 4_000)]),
                state(vec![], vec![place("o", 4, 4_000)]),
            ],
            request("o", true),
            "acquired a=100 b=101",
            "dequeue o, insert 100, record acquired | dequeue o, insert 101, record acquired",
        ),
        (
            "places on some members only: given up and taken again on every member",
            vec!["a", "b"],
            vec![
                state(vec![lease("h", 7, x)], vec![place("o", 3, 4_000)]),
                state(vec![], vec![place("w", 5, 4_000)]),
            ],
            request("o", true),
            "busy a(h,1) b(-,2)",
            "dequeue o, enqueue o | enqueue o",
        ),
        (
            "expired places are cleared on every member",
            vec!["a", "b"],
            vec![
                state(vec![lease("h", 7, x)], vec![place("dead", 1, -10)]),
                state(vec![], vec![place("dead", 2, 0)]),
            ],
            request("o", false),
            "busy a(h,-)",
            "dequeue dead | dequeue dead",
        ),
    ];
    for (name, names, states, req, expected, expected_writes) in cases {
        let decision = acquire_of(&names, &states, &req);
        assert_eq!(verdict(&decision.outcome), expected, "{name}");
        assert_eq!(writes(&decision.changes), expected_writes, "{name}");
        assert_eq!(
            decision.changes.len(),
            names.len(),
            "{name}: one list per member"
        );
    }
}

#[test]
fn a_waiter_decided_again_queues_first_only_where_it_would_be_granted_a_new_tenure() {
    let x = Mode::Exclusive;
    // (case, members, each member's state, request, verdict and writes, or none: decided as
    // always)
    type Case = (
        &'static str,
        Vec<&'static str>,
        Vec<State>,
        Request,
        Option<(&'static str, &'static str)>,
    );
    let cases: Vec<Case> = vec![
        (
            "free: a place first, position 1, no tenure, no fence",
            vec!["a"],
            vec![state(vec![], vec![])],
            request("o", true),
            Some(("busy a(-,1)", "enqueue o")),
        ),
        (
            "every member of a set free: a place on each",
            vec!["a", "b"],
            vec![state(vec![], vec![]), state(vec![], vec![])],
            request("o", true),
            Some(("busy a(-,1) b(-,1)", "enqueue o | enqueue o")),
        ),
        (
            "expired places are cleared as the place is taken",
            vec!["a"],
            vec![state(vec![], vec![place("dead", 1, 0)])],
            request("o", true),
            Some(("busy a(-,1)", "dequeue dead, enqueue o")),
        ),
        (
            "shared beside shared holders: in line behind nobody, the holder named",
            vec!["a"],
            vec![state(vec![lease("r", 7, Mode::Shared)], vec![])],
            Request {
                mode: Mode::Shared,
                ..request("o", true)
            },
            Some(("busy a(r,1)", "enqueue o")),
        ),
        (
            "a request that tries once never queues",
            vec!["a"],
            vec![state(vec![], vec![])],
            request("o", false),
            None,
        ),
        (
            "a waiter in line already is decided as always (granted at the head)",
            vec!["a"],
            vec![state(vec![], vec![place("o", 3, 4_000)])],
            request("o", true),
            None,
        ),
        (
            "busy anyway: decided as always",
            vec!["a"],
            vec![state(vec![lease("h", 7, x)], vec![])],
            request("o", true),
            None,
        ),
        (
            "the owner's own tenure, extended, never queues",
            vec!["a"],
            vec![state(vec![lease("o", 7, x)], vec![])],
            request("o", true),
            None,
        ),
        (
            "a mismatch: decided as always",
            vec!["a"],
            vec![state(vec![lease("r", 7, Mode::Shared)], vec![])],
            request("o", true),
            None,
        ),
    ];
    for (name, names, states, req, expected) in cases {
        let queued = queue_first(&members(&names), &states, &req);
        let got = queued
            .as_ref()
            .map(|d| (verdict(&d.outcome), writes(&d.changes)));
        let want = expected.map(|(v, w)| (v.to_owned(), w.to_owned()));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn a_refused_set_asks_for_no_fence() {
    let mut asked = 0;
    let states = [
        state(vec![], vec![]),
        state(vec![lease("h", 7, Mode::Exclusive)], vec![]),
    ];
    let decision = acquire_set(
        &members(&["a", "b"]),
        &states,
        &request("o", true),
        &mut || {
            asked += 1;
            Ok::<_, Infallible>(Fence(1))
        },
    )
    .unwrap();
    assert!(matches!(decision.outcome, SetAcquire::Busy { .. }));
    assert_eq!(
        asked, 0,
        "a fence is asked for only when every member is granted"
    );
}

#[test]
fn renew_and_release_of_a_set_are_all_or_nothing() {
    let x = Mode::Exclusive;
    let ttl = Ttl::from_secs(60).unwrap();
    let names = members(&["a", "b", "c"]);
    // (case, each member's tenures, fences, renew verdict, release verdict)
    type Case = (
        &'static str,
        Vec<Vec<Tenure>>,
        Option<Vec<Fence>>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "every member held: renewed and released",
            vec![
                vec![lease("o", 1, x)],
                vec![lease("o", 2, x)],
                vec![lease("o", 3, x)],
            ],
            None,
            "ok",
        ),
        (
            "one member not held: the first such member, nothing changed",
            vec![vec![lease("o", 1, x)], vec![], vec![]],
            None,
            "not_found b",
        ),
        (
            "another owner's member: forbidden, naming it",
            vec![
                vec![lease("o", 1, x)],
                vec![lease("o", 2, x)],
                vec![lease("h", 3, x)],
            ],
            None,
            "forbidden c",
        ),
        (
            "the first failing member by resource decides",
            vec![vec![lease("h", 1, x)], vec![], vec![lease("o", 3, x)]],
            None,
            "forbidden a",
        ),
        (
            "with fences, only those tenures",
            vec![
                vec![lease("o", 1, x)],
                vec![lease("o", 2, x)],
                vec![lease("o", 3, x)],
            ],
            Some(vec![Fence(1), Fence(9), Fence(3)]),
            "not_found b",
        ),
        (
            "with the right fences, every member",
            vec![
                vec![lease("o", 1, x)],
                vec![lease("o", 2, x)],
                vec![lease("o", 3, x)],
            ],
            Some(vec![Fence(1), Fence(2), Fence(3)]),
            "ok",
        ),
    ];
    let said = |refused: &SetRefusal| {
        let why = if refused.forbidden {
            "forbidden"
        } else {
            "not_found"
        };
        format!("{why} {}", refused.resource)
    };
    for (name, tenures, fences, expected) in cases {
        let states: Vec<State> = tenures.into_iter().map(|t| state(t, vec![])).collect();
        let renewed = renew_set(&names, &states, &own("o"), ttl, fences.as_deref());
        let released = release_set(&names, &states, &own("o"), fences.as_deref());
        let (renew_verdict, release_verdict) = (
            renewed
                .outcome
                .as_ref()
                .map_or_else(said, |_| "ok".to_owned()),
            released
                .outcome
                .as_ref()
                .map_or_else(said, |()| "ok".to_owned()),
        );
        assert_eq!(renew_verdict, expected, "renew: {name}");
        assert_eq!(release_verdict, expected, "release: {name}");
        if expected == "ok" {
            assert_eq!(
                writes(&renewed.changes),
                "update 1, record renewed | update 2, record renewed | update 3, record renewed",
                "{name}"
            );
            assert_eq!(
                writes(&released.changes),
                "delete 1, record released | delete 2, record released | delete 3, record released",
                "{name}"
            );
        } else {
            assert_eq!(
                writes(&renewed.changes),
                " |  | ",
                "renew writes nothing: {name}"
            );
            assert_eq!(
                writes(&released.changes),
                " |  | ",
                "release writes nothing: {name}"
            );
        }
    }
}

#[test]
fn finish_of_a_set_ends_each_member_on_its_own() {
    let x = Mode::Exclusive;
    let names = members(&["a", "b"]);
    // `b` was broken meanwhile and is someone else's now: `a` is released all the same.
    let states = [
        state(vec![lease("o", 1, x)], vec![]),
        state(vec![lease("h", 5, x)], vec![]),
    ];
    let decision = finish_set(&names, &states, &own("o"), &[Fence(1), Fence(2)], None);
    assert_eq!(decision.outcome, vec![Finish::Released, Finish::NotFound]);
    assert_eq!(writes(&decision.changes), "delete 1, record released | ");
    // A hold keeps every member still this run's.
    let states = [
        state(vec![lease("o", 1, x)], vec![]),
        state(vec![lease("o", 2, x)], vec![]),
    ];
    let hold = Some(std::time::Duration::from_secs(60));
    let decision = finish_set(&names, &states, &own("o"), &[Fence(1), Fence(2)], hold);
    assert!(
        decision
            .outcome
            .iter()
            .all(|f| matches!(f, Finish::Kept { .. })),
        "{:?}",
        decision.outcome
    );
}

#[test]
fn leaving_takes_the_place_out_of_every_members_queue() {
    let states = [
        state(vec![], vec![place("o", 1, 4_000), place("w", 2, 4_000)]),
        state(vec![], vec![place("w", 3, 4_000)]),
    ];
    let decision = leave_set(&states, &own("o"));
    assert_eq!(writes(&decision.changes), "dequeue o | ");
}

// ---------------------------------------------------------------------------------------------
// Scenarios: every member's rows in memory, changed only as the rules say

/// The rows of a few resources, and the store's fence counter (one for every resource).
struct Rows {
    states: std::collections::BTreeMap<String, State>,
    next_fence: i64,
}

impl Rows {
    fn new(names: &[&str]) -> Rows {
        Rows {
            states: names
                .iter()
                .map(|n| ((*n).to_owned(), state(vec![], vec![])))
                .collect(),
            next_fence: 1,
        }
    }

    fn apply(&mut self, member: &Resource, changes: &[Change]) {
        let state = self.states.get_mut(member.as_str()).unwrap();
        state
            .apply(changes)
            .unwrap_or_else(|why| panic!("{member}: {why}"));
    }

    /// One attempt of `owner` on `names` (a set, or one resource), as a waiter: the verdict.
    fn attempt(&mut self, names: &[&str], owner: &str) -> String {
        let members = members(names);
        let states: Vec<State> = members
            .iter()
            .map(|m| self.states[m.as_str()].clone())
            .collect();
        let mut fence = self.next_fence;
        let decision = acquire_set(&members, &states, &request(owner, true), &mut || {
            fence += 1;
            Ok::<_, Infallible>(Fence(fence - 1))
        })
        .unwrap();
        self.next_fence = fence;
        for (member, changes) in members.iter().zip(&decision.changes) {
            self.apply(member, changes);
        }
        verdict(&decision.outcome)
    }

    fn release(&mut self, names: &[&str], owner: &str) {
        let members = members(names);
        let states: Vec<State> = members
            .iter()
            .map(|m| self.states[m.as_str()].clone())
            .collect();
        let decision = release_set(&members, &states, &own(owner), None);
        assert!(decision.outcome.is_ok(), "{owner} held {names:?}");
        for (member, changes) in members.iter().zip(&decision.changes) {
            self.apply(member, changes);
        }
    }
}

/// A slow waiter's grant is never written while faster clients keep changing the resource
/// first; decided again, it takes its place in line instead, and from then on the fast
/// clients' try-once acquires are busy, and the waiter is granted at its next look.
#[test]
fn a_waiter_that_lost_the_race_to_write_queues_and_is_granted_before_try_once_clients() {
    let mut rows = Rows::new(&["a"]);
    let slow = request("slow", true);
    let a = members(&["a"]);
    let look = |rows: &Rows| vec![rows.states["a"].clone()];
    // Its first decision (a grant on a free resource) lost: decided again, it queues.
    let queued = queue_first(&a, &look(&rows), &slow).expect("queued first");
    assert_eq!(verdict(&queued.outcome), "busy a(-,1)");
    rows.apply(&a[0], &queued.changes[0]);
    // A fast client that tries once finds it in line: busy, and writes nothing.
    let fast = acquire_set(&a, &look(&rows), &request("fast", false), &mut || {
        Ok::<_, Infallible>(Fence(1))
    })
    .unwrap();
    assert_eq!(verdict(&fast.outcome), "busy a(-,-)");
    assert_eq!(writes(&fast.changes), "");
    // The waiter's next look: the head of the queue, granted.
    assert_eq!(rows.attempt(&["a"], "slow"), "acquired a=1");
}

#[test]
fn a_set_waiter_is_granted_ahead_of_a_later_single_waiter_on_a_free_member() {
    let mut rows = Rows::new(&["a", "b"]);
    assert!(rows.attempt(&["a"], "h").starts_with("acquired"));
    // S waits for {a, b}: `a` is held, `b` free; S takes a place on both.
    assert_eq!(rows.attempt(&["a", "b"], "s"), "busy a(h,1)");
    // W comes later for `b` alone, which nobody holds: S's place there comes first.
    assert_eq!(rows.attempt(&["b"], "w"), "busy b(-,2)");
    assert_eq!(rows.attempt(&["b"], "w"), "busy b(-,2)", "and stays first");
    rows.release(&["a"], "h");
    // W looks first after the release, and still waits: S is granted both, then W.
    assert_eq!(rows.attempt(&["b"], "w"), "busy b(-,2)");
    assert!(rows.attempt(&["a", "b"], "s").starts_with("acquired a="));
    assert_eq!(rows.attempt(&["b"], "w"), "busy b(s,1)");
    rows.release(&["a", "b"], "s");
    assert!(rows.attempt(&["b"], "w").starts_with("acquired b="));
}

#[test]
fn sets_listed_in_opposite_orders_are_granted_in_arrival_order_without_deadlock() {
    let mut rows = Rows::new(&["a", "b"]);
    assert!(rows.attempt(&["a"], "h").starts_with("acquired"));
    assert!(rows.attempt(&["b"], "k").starts_with("acquired"));
    // One waits for {a, b}, the next for {b, a}: the same set, the same order on both.
    assert_eq!(rows.attempt(&["a", "b"], "first"), "busy a(h,1) b(k,1)");
    assert_eq!(rows.attempt(&["b", "a"], "second"), "busy a(h,2) b(k,2)");
    // Whatever member is let go first, nobody holds part of a set meanwhile.
    rows.release(&["b"], "k");
    assert_eq!(rows.attempt(&["b", "a"], "second"), "busy a(h,2) b(-,2)");
    assert_eq!(rows.attempt(&["a", "b"], "first"), "busy a(h,1)");
    assert!(
        rows.states["b"].leases.is_empty(),
        "b is held back, not taken"
    );
    rows.release(&["a"], "h");
    assert_eq!(rows.attempt(&["a", "b"], "second"), "busy a(-,2) b(-,2)");
    assert!(rows.attempt(&["a", "b"], "first").starts_with("acquired"));
    rows.release(&["a", "b"], "first");
    assert!(rows.attempt(&["b", "a"], "second").starts_with("acquired"));
}

#[test]
fn overlapping_sets_and_single_waiters_all_get_their_turn_in_arrival_order() {
    // Every round, each waiter that can be granted is, in a different order each time; a
    // holder releases right after its grant. Everyone is served, each once, in arrival order
    // wherever they share a resource.
    let wants: [(&str, &[&str]); 5] = [
        ("s1", &["a", "b"]),
        ("w1", &["b"]),
        ("s2", &["b", "c"]),
        ("w2", &["a"]),
        ("s3", &["c", "a"]),
    ];
    for rotation in 0..wants.len() {
        let mut rows = Rows::new(&["a", "b", "c"]);
        assert!(rows.attempt(&["a", "b", "c"], "h").starts_with("acquired"));
        for (owner, names) in wants {
            assert!(rows.attempt(names, owner).starts_with("busy"), "{owner}");
        }
        rows.release(&["a", "b", "c"], "h");
        let mut served = Vec::new();
        for round in 0..20 {
            for i in 0..wants.len() {
                let (owner, names) = wants[(i + rotation + round) % wants.len()];
                if served.contains(&owner) {
                    continue;
                }
                if rows.attempt(names, owner).starts_with("acquired") {
                    rows.release(names, owner);
                    served.push(owner);
                }
            }
        }
        assert_eq!(served.len(), wants.len(), "rotation {rotation}: {served:?}");
        // Arrival order holds between any two that share a resource.
        for (i, (first, a)) in wants.iter().enumerate() {
            for (second, b) in &wants[i + 1..] {
                if a.iter().any(|r| b.contains(r)) {
                    let at = |o: &str| served.iter().position(|s| *s == o).unwrap();
                    assert!(at(first) < at(second), "rotation {rotation}: {served:?}");
                }
            }
        }
    }
}
