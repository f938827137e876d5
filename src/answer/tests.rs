//! Each answer's exact line, key order included, as docs/src/reference/json.md prints it; that each line reads
//! back into the same answer; and each answer's exit code and text.

use super::*;
use crate::lock::GcReport;
use crate::lock::{Acquire, Breaking, Event, EventKind, Owner, Release, Renew, Status, Timestamp};

const T1: &str = "2026-11-30T04:08:52.123Z";
const T2: &str = "2026-11-30T04:09:22.123Z";

fn at(text: &str) -> Timestamp {
    Timestamp::parse(text).expect("an RFC 3339 time")
}

fn resource(name: &str) -> Resource {
    Resource::parse(name).expect("a valid resource")
}

fn owner(name: &str) -> Owner {
    Owner::parse(name).expect("a valid owner")
}

fn note(text: &str) -> Remark {
    Remark::parse(text).expect("a valid note")
}

fn lock(name: &str, who: &str, fence: i64, mode: Mode, with: Option<&str>) -> Lock {
    Lock {
        resource: resource(name),
        owner: owner(who),
        token: None,
        fence: Fence(fence),
        acquired_at: at(T1),
        expires_at: at(T2),
        mode,
        note: with.map(note),
    }
}

fn holder(who: &str, mode: Mode, with: Option<&str>) -> Holder {
    Holder {
        owner: owner(who),
        expires_at: at(T2),
        mode,
        note: with.map(note),
    }
}

const LOCK_W1: &str = r#"{"resource":"payment:42","owner":"w1","fence":7,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z"}"#;

/// Serializes `answer`, checks the line, reads it back, and checks it reads back equal.
fn pin<A>(answer: &A, line: &str)
where
    A: Answer + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    let written = serde_json::to_string(answer).expect("serializes");
    assert_eq!(written, line);
    let read: A = serde_json::from_str(line).expect("reads back");
    assert_eq!(&read, answer, "{line}");
}

#[test]
fn acquire_answers_are_the_references_lines() {
    let plain = lock("payment:42", "w1", 7, Mode::Exclusive, None);
    let r = resource("payment:42");
    let cases: Vec<(AcquireAnswer, String, Exit, &str)> = vec![
        (
            AcquireAnswer::new(
                &r,
                &Acquire::Acquired {
                    lock: plain.clone(),
                    tenure: crate::lock::Grant::New,
                },
                Mode::Exclusive,
            ),
            format!(r#"{{"acquired":true,"lock":{LOCK_W1}}}"#),
            Exit::Done,
            "acquired payment:42 as w1 until 2026-11-30T04:09:22.123Z (fence 7)",
        ),
        (
            AcquireAnswer::new(
                &r,
                &Acquire::Busy {
                    holder: Some(holder("w2", Mode::Exclusive, None)),
                    holders: Vec::new(),
                    waiting: 0,
                    position: None,
                },
                Mode::Exclusive,
            ),
            r#"{"acquired":false,"resource":"payment:42","holder":{"owner":"w2","expires_at":"2026-11-30T04:09:22.123Z"}}"#.to_owned(),
            Exit::Busy,
            "busy: payment:42 is held by w2 until 2026-11-30T04:09:22.123Z",
        ),
        (
            AcquireAnswer::new(
                &r,
                &Acquire::Busy {
                    holder: Some(holder("w2", Mode::Shared, Some("nightly"))),
                    holders: vec![
                        holder("w2", Mode::Shared, Some("nightly")),
                        holder("w3", Mode::Shared, None),
                    ],
                    waiting: 3,
                    position: Some(4),
                },
                Mode::Exclusive,
            ),
            r#"{"acquired":false,"resource":"payment:42","holder":{"owner":"w2","expires_at":"2026-11-30T04:09:22.123Z","shared":true,"note":"nightly"},"holders":[{"owner":"w2","expires_at":"2026-11-30T04:09:22.123Z","shared":true,"note":"nightly"},{"owner":"w3","expires_at":"2026-11-30T04:09:22.123Z","shared":true}],"waiting":3}"#.to_owned(),
            Exit::Busy,
            "busy: payment:42 is held by w2 (shared, note: nightly) until 2026-11-30T04:09:22.123Z and 1 more; 3 waiting",
        ),
        (
            AcquireAnswer::new(
                &r,
                &Acquire::Busy {
                    holder: None,
                    holders: Vec::new(),
                    waiting: 2,
                    position: None,
                },
                Mode::Exclusive,
            ),
            r#"{"acquired":false,"resource":"payment:42","waiting":2}"#.to_owned(),
            Exit::Busy,
            "busy: payment:42 is free but reserved for earlier waiters; 2 waiting",
        ),
        (
            AcquireAnswer::new(
                &r,
                &Acquire::Mismatch {
                    holders: vec![holder("w2", Mode::Semaphore(3), None)],
                },
                Mode::Shared,
            ),
            r#"{"acquired":false,"resource":"payment:42","reason":"mismatch","holders":[{"owner":"w2","expires_at":"2026-11-30T04:09:22.123Z","limit":3}]}"#.to_owned(),
            Exit::Mismatch,
            "mismatch: payment:42 is held by w2 (limit 3); a request for shared conflicts with how it is held (everyone must ask the same way)",
        ),
    ];
    for (answer, line, exit, text) in cases {
        assert_eq!(answer.exit(), exit, "{line}");
        assert_eq!(answer.text(), text, "{line}");
        let written = serde_json::to_string(&answer).expect("serializes");
        assert_eq!(written, line);
        let read: AcquireAnswer = serde_json::from_str(&line).expect("reads back");
        // The asked-for mode is the text's alone; everything the line carries comes back.
        match (&read, &answer) {
            (AcquireAnswer::Mismatch(read), AcquireAnswer::Mismatch(answer)) => {
                assert_eq!(read.holders, answer.holders);
                assert_eq!(read.resource, answer.resource);
            }
            _ => assert_eq!(read, answer, "{line}"),
        }
    }
}

#[test]
fn status_answers_are_the_references_lines() {
    let r = resource("payment:42");
    let plain = lock("payment:42", "w1", 7, Mode::Exclusive, None);
    let free = StatusAnswer::new(&r, &Status::default());
    pin(&free, r#"{"held":false,"resource":"payment:42"}"#);
    assert_eq!(free.exit(), Exit::NotHeld);
    assert_eq!(free.text(), "payment:42 is not held");
    let queued = StatusAnswer::new(
        &r,
        &Status {
            locks: Vec::new(),
            waiting: 2,
        },
    );
    pin(
        &queued,
        r#"{"held":false,"resource":"payment:42","waiting":2}"#,
    );
    assert_eq!(queued.text(), "payment:42 is not held; 2 waiting");
    let held = StatusAnswer::new(
        &r,
        &Status {
            locks: vec![plain.clone()],
            waiting: 0,
        },
    );
    pin(&held, &format!(r#"{{"held":true,"lock":{LOCK_W1}}}"#));
    assert_eq!(held.exit(), Exit::Done);
    assert_eq!(
        held.text(),
        "payment:42 is held by w1 until 2026-11-30T04:09:22.123Z (fence 7)"
    );
    let a = lock("payment:42", "w1", 7, Mode::Semaphore(2), Some("a"));
    let b = lock("payment:42", "w2", 8, Mode::Semaphore(2), None);
    let both = StatusAnswer::new(
        &r,
        &Status {
            locks: vec![a, b],
            waiting: 1,
        },
    );
    let one = r#"{"resource":"payment:42","owner":"w1","fence":7,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z","limit":2,"note":"a"}"#;
    let two = r#"{"resource":"payment:42","owner":"w2","fence":8,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z","limit":2}"#;
    pin(
        &both,
        &format!(r#"{{"held":true,"lock":{one},"locks":[{one},{two}],"waiting":1}}"#),
    );
    assert_eq!(
        both.text(),
        "payment:42 is held by w1 until 2026-11-30T04:09:22.123Z (fence 7, limit 2, note: a)\n\
         payment:42 is held by w2 until 2026-11-30T04:09:22.123Z (fence 8, limit 2); 1 waiting"
    );
}

#[test]
fn release_and_renew_answers_are_the_references_lines() {
    let r = resource("payment:42");
    let cases: [(ReleaseAnswer, &str, Exit, &str); 3] = [
        (
            ReleaseAnswer::new(&r, &Release::Released),
            r#"{"released":true,"resource":"payment:42"}"#,
            Exit::Done,
            "released payment:42",
        ),
        (
            ReleaseAnswer::new(&r, &Release::NotFound),
            r#"{"released":false,"resource":"payment:42","reason":"not_found"}"#,
            Exit::NotHeld,
            "cannot release payment:42: it is not held",
        ),
        (
            ReleaseAnswer::new(&r, &Release::Forbidden),
            r#"{"released":false,"resource":"payment:42","reason":"forbidden"}"#,
            Exit::Forbidden,
            "cannot release payment:42: it is held by another owner",
        ),
    ];
    for (answer, line, exit, text) in cases {
        pin(&answer, line);
        assert_eq!((answer.exit(), answer.text().as_str()), (exit, text));
    }
    let plain = lock("payment:42", "w1", 7, Mode::Exclusive, None);
    let renewed = format!(r#"{{"renewed":true,"lock":{LOCK_W1}}}"#);
    let cases: [(RenewAnswer, &str, Exit, &str); 3] = [
        (
            RenewAnswer::new(&r, &Renew::Renewed { lock: plain }),
            &renewed,
            Exit::Done,
            "renewed payment:42 as w1 until 2026-11-30T04:09:22.123Z (fence 7)",
        ),
        (
            RenewAnswer::new(&r, &Renew::NotFound),
            r#"{"renewed":false,"resource":"payment:42","reason":"not_found"}"#,
            Exit::NotHeld,
            "cannot renew payment:42: it is not held",
        ),
        (
            RenewAnswer::new(&r, &Renew::Forbidden),
            r#"{"renewed":false,"resource":"payment:42","reason":"forbidden"}"#,
            Exit::Forbidden,
            "cannot renew payment:42: it is held by another owner",
        ),
    ];
    for (answer, line, exit, text) in cases {
        pin(&answer, line);
        assert_eq!((answer.exit(), answer.text().as_str()), (exit, text));
    }
}

#[test]
fn a_sets_end_answers_each_member_as_its_own_release_would() {
    let members = crate::lock::Members::new(vec![resource("c"), resource("a"), resource("b")])
        .expect("members");
    let ends = [
        crate::engine::Finish::Released,
        crate::engine::Finish::Kept { until: at(T2) },
        crate::engine::Finish::NotFound,
    ];
    let answer = SetFinishAnswer::new(&members, &ends);
    pin(
        &answer,
        r#"{"members":[{"released":true,"resource":"a"},{"released":false,"resource":"b","kept_until":"2026-11-30T04:09:22.123Z"},{"released":false,"resource":"c","reason":"not_found"}]}"#,
    );
    let read: Vec<(&str, crate::engine::Finish)> = answer
        .members
        .iter()
        .map(|member| (member.resource().as_str(), member.finish()))
        .collect();
    assert_eq!(
        read,
        [
            ("a", ends[0].clone()),
            ("b", ends[1].clone()),
            ("c", ends[2].clone()),
        ],
        "each member reads back as the end it stands for"
    );
    assert_eq!(answer.exit(), Exit::Done);
    assert_eq!(
        answer.text(),
        "released a\nkept b until 2026-11-30T04:09:22.123Z\ncannot release c: it is not held"
    );
}

#[test]
fn list_log_gc_and_break_answers_are_the_references_lines() {
    let shared = lock("b", "w2", 3, Mode::Shared, Some("deploy v1.4"));
    let list = ListAnswer {
        locks: vec![lock("a", "w1", 9, Mode::Exclusive, None), shared.clone()],
    };
    pin(
        &list,
        r#"{"locks":[{"resource":"a","owner":"w1","fence":9,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z"},{"resource":"b","owner":"w2","fence":3,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z","shared":true,"note":"deploy v1.4"}]}"#,
    );
    assert_eq!(
        list.text(),
        "a is held by w1 until 2026-11-30T04:09:22.123Z (fence 9)\n\
         b is held by w2 until 2026-11-30T04:09:22.123Z (fence 3, shared, note: deploy v1.4)"
    );
    let empty = ListAnswer { locks: Vec::new() };
    pin(&empty, r#"{"locks":[]}"#);
    assert_eq!(empty.text(), "no live locks");

    let event = |kind, previous: Option<&str>, broken: Option<Breaking>| Event {
        at: at(T1),
        resource: resource("r"),
        owner: owner("w1"),
        token: None,
        fence: Fence(7),
        event: kind,
        expires_at: None,
        previous_owner: previous.map(owner),
        mode: Mode::Exclusive,
        note: None,
        broken,
    };
    let breaking = Breaking {
        by: note("alice@ops"),
        by_token: None,
        reason: note("runner lost"),
    };
    let by_operator = Breaking {
        by: note("ci-bot@innocent"),
        by_token: Some(crate::lock::TokenName::parse("ops").expect("a token name")),
        reason: note("stuck"),
    };
    let cases: [(Event, &str, &str); 4] = [
        (
            event(EventKind::Acquired, None, None),
            r#"{"at":"2026-11-30T04:08:52.123Z","resource":"r","owner":"w1","fence":7,"event":"acquired"}"#,
            "2026-11-30T04:08:52.123Z r acquired by w1 (fence 7)",
        ),
        (
            event(EventKind::TakenOver, Some("w0"), None),
            r#"{"at":"2026-11-30T04:08:52.123Z","resource":"r","owner":"w1","fence":7,"event":"taken_over","previous_owner":"w0"}"#,
            "2026-11-30T04:08:52.123Z r taken over by w1 (fence 7) from w0",
        ),
        (
            event(EventKind::Broken, None, Some(breaking.clone())),
            r#"{"at":"2026-11-30T04:08:52.123Z","resource":"r","owner":"w1","fence":7,"event":"broken","by":"alice@ops","reason":"runner lost"}"#,
            "2026-11-30T04:08:52.123Z r broken by alice@ops: the tenure of w1 (fence 7) (runner lost)",
        ),
        (
            event(EventKind::Broken, None, Some(by_operator)),
            r#"{"at":"2026-11-30T04:08:52.123Z","resource":"r","owner":"w1","fence":7,"event":"broken","by":"ci-bot@innocent","by_token":"ops","reason":"stuck"}"#,
            "2026-11-30T04:08:52.123Z r broken by ci-bot@innocent (token ops): the tenure of w1 (fence 7) (stuck)",
        ),
    ];
    for (answer, line, text) in cases {
        pin(&answer, line);
        assert_eq!(answer.text(), text);
    }

    let report = GcReport {
        expired_locks: 2,
        history_events: 10,
    };
    pin(&report, r#"{"expired_locks":2,"history_events":10}"#);
    assert_eq!(
        report.text(),
        "removed 2 expired locks and 10 history events"
    );

    let r = resource("r");
    let broken = BreakAnswer::new(&r, vec![shared], &breaking);
    assert_eq!(
        serde_json::to_string(&broken).expect("serializes"),
        r#"{"broken":true,"resource":"r","locks":[{"resource":"b","owner":"w2","fence":3,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z","shared":true,"note":"deploy v1.4"}]}"#
    );
    assert_eq!(broken.exit(), Exit::Done);
    assert_eq!(
        broken.text(),
        "broke r: removed the tenure of w2 (by alice@ops: runner lost)"
    );
    let nothing = BreakAnswer::new(&r, Vec::new(), &breaking);
    pin(
        &nothing,
        r#"{"broken":false,"resource":"r","reason":"not_found"}"#,
    );
    assert_eq!(nothing.exit(), Exit::NotHeld);
    assert_eq!(nothing.text(), "cannot break r: nothing live matched");
}

#[test]
fn lines_that_break_the_reference_do_not_read_back() {
    let bad = [
        // A literal of the wrong value, a mode both shared and limited, a bad limit, a
        // resource the command line would refuse, a time that is not RFC 3339.
        r#"{"acquired":false,"lock":{"resource":"r","owner":"w","fence":1,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z"}}"#,
        r#"{"acquired":true,"lock":{"resource":"r","owner":"w","fence":1,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z","shared":true,"limit":2}}"#,
        r#"{"acquired":true,"lock":{"resource":"r","owner":"w","fence":1,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z","limit":0}}"#,
        r#"{"acquired":true,"lock":{"resource":"a\u0001b","owner":"w","fence":1,"acquired_at":"2026-11-30T04:08:52.123Z","expires_at":"2026-11-30T04:09:22.123Z"}}"#,
        r#"{"acquired":true,"lock":{"resource":"r","owner":"w","fence":1,"acquired_at":"yesterday","expires_at":"2026-11-30T04:09:22.123Z"}}"#,
        r#"{"acquired":false}"#,
    ];
    for line in bad {
        assert!(
            serde_json::from_str::<AcquireAnswer>(line).is_err(),
            "{line} read back"
        );
    }
}
