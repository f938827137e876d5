//! Lock modes — shared locks (`--shared`, as `flock -s`) and counting semaphores (`--limit N`,
//! as `consul lock -n N`) — through the real binary on both stores ([`each_store`]), one test
//! per rule of the contract's "Lock modes", named after it:
//!
//! | rule | tests |
//! | --- | --- |
//! | admission 1: own tenure | `own_tenure_in_the_same_mode_…`, `own_tenure_in_another_mode_…` |
//! | admission 2: no live tenure | `no_live_tenure_is_granted_…`, `an_expired_tenure_frees_its_slot` |
//! | admission 3: read/write family | `exclusive_request_beside_shared_…`, `shared_request_beside_an_exclusive_…`, `shared_beside_shared_…` |
//! | admission 3: semaphores | `semaphore_of_n_admits_…` |
//! | admission 3: 78 | `semaphore_request_beside_…`, `exclusive_or_shared_request_beside_semaphore_…`, `semaphore_n_beside_semaphore_m_…`, `mismatch_is_answered_at_once_…` |
//! | `--limit 1` | `limit_1_is_the_plain_exclusive_lock` |
//! | release/renew | `release_and_renew_without_an_own_tenure_…` (1 and 77), `release_and_renew_act_on_the_callers_own_tenure_only` |
//! | output | `lock_objects_…`, `busy_beside_…`, `mismatch_answer_…`, `status_of_…`, `list_has_…`, `log_events_…`, `text_output_…` |
//! | `run` | `run_shared_and_run_limit_…`, `run_mismatch_…`, `run_limit_…` |
//! | validation | `limit_validation_rows_…` |
//! | concurrency | `semaphore_of_3_runs_…`, `shared_readers_overlap_…` (real processes) |
//!
//! Answers are compared whole, as parsed JSON, with the shapes of `common::tenure` built from
//! the fences and times distlock printed; a plain exclusive lock is also compared byte for byte.
//! Expiry tests use a 2 s TTL (a few calls must fit inside it on a busy machine) and sleep
//! until the test's clock is past it. Timing bounds are upper bounds with generous slack.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::contention::{Contended, Contention};
use crate::common::output::{assert_usage_error, keys, now_millis, parse_line, timestamp_millis};
use crate::common::pids::is_gone;
use crate::common::process::{Proc, describe, wait_until};
use crate::common::store::{Db, each_store_and_server, output_exiting};
use crate::common::tenure::{Mode, Tenure, busy, held, mismatch, without_lease_end};

/// How long a spawned `run` may take before the test gives up on it.
const LONG: Duration = Duration::from_secs(60);

/// A mismatch (78) must come back well before a `--wait` of 30 s would run out.
const AT_ONCE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Helpers

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// `acquire RESOURCE --owner OWNER --ttl TTL`, the mode's flags, then `extra`.
fn acquire_args(resource: &str, owner: &str, ttl: u64, mode: Mode, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["acquire", resource, "--owner", owner, "--ttl"]
        .map(str::to_owned)
        .to_vec();
    args.push(ttl.to_string());
    args.extend(mode.flags());
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

/// Runs `distlock ARGS…`, checks the exit code, and parses the one JSON line on stdout.
fn call(db: &Db, args: &[String], code: i32) -> Value {
    db.json(&strs(args), code)
}

/// An `acquire` in `mode` that must be granted: checks the whole answer (and, for an exclusive
/// lock, its bytes) and that the lease is exactly `ttl` seconds; returns the tenure.
fn acquire(db: &Db, resource: &str, owner: &str, ttl: u64, mode: Mode) -> Tenure {
    let args = acquire_args(resource, owner, ttl, mode, &[]);
    let out = db.run(&strs(&args));
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
    let answer = parse_line(&out.stdout);
    let tenure = Tenure::read(&answer["lock"], mode);
    assert_eq!(
        answer,
        json!({ "acquired": true, "lock": tenure.lock() }),
        "{args:?}"
    );
    assert_eq!(tenure.resource, resource, "{answer}");
    assert_eq!(tenure.owner, owner, "{answer}");
    assert_eq!(
        tenure.expires_ms() - tenure.acquired_ms(),
        i64::try_from(ttl * 1000).expect("ttl in range"),
        "the lease must be exactly {ttl}s: {answer}"
    );
    if mode == Mode::Exclusive {
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "{{\"acquired\":true,\"lock\":{}}}\n",
                tenure.plain_lock_text()
            ),
            "a plain exclusive lock prints today's bytes"
        );
    }
    tenure
}

/// An `acquire` by `owner` in `mode` (TTL 60 s) that must be refused with `code`; returns the
/// answer.
fn refused(db: &Db, resource: &str, owner: &str, mode: Mode, code: i32) -> Value {
    call(db, &acquire_args(resource, owner, 60, mode, &[]), code)
}

/// `status RESOURCE` must say it is held by exactly `tenures`.
fn assert_held(db: &Db, resource: &str, tenures: &[&Tenure]) {
    let (code, answer) = db.status(resource);
    assert_eq!(code, 0, "{resource} should be held: {answer}");
    assert_eq!(answer, held(tenures), "status {resource}");
}

fn assert_free(db: &Db, resource: &str) {
    assert_eq!(
        db.status(resource),
        (1, json!({ "held": false, "resource": resource })),
        "{resource} should be free"
    );
}

/// Sleeps until the test's clock is past every one of `tenures`' leases.
fn sleep_past(tenures: &[&Tenure]) {
    let end = tenures
        .iter()
        .map(|t| t.expires_ms())
        .max()
        .expect("tenures")
        + 200;
    let left = end - now_millis();
    if left > 0 {
        thread::sleep(Duration::from_millis(left.unsigned_abs()));
    }
}

/// `distlock run FLAGS… -- sh -c SCRIPT sh ARGS…`, with the scratch folder in `$D`.
fn guarded(db: &Db, flags: &[String], script: &str, args: &[&str]) -> Command {
    let mut cmd = db.std_cmd();
    cmd.arg("run")
        .args(flags)
        .args(["--", "sh", "-c", script, "sh"])
        .args(args)
        .env("D", db.dir.path())
        .stdin(Stdio::null());
    cmd
}

/// `--resource RESOURCE`, the mode's flags, then `extra`.
fn run_flags(resource: &str, mode: Mode, extra: &[&str]) -> Vec<String> {
    let mut flags = vec!["--resource".to_owned(), resource.to_owned()];
    flags.extend(mode.flags());
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    flags
}

/// The command of the `run` tests that must never start: it leaves `$D/ran`.
const MARK_RAN: &str = r#"echo ran >> "$D/ran""#;

// ---------------------------------------------------------------------------------------------
// Admission

#[test]
fn own_tenure_in_the_same_mode_is_reacquired_with_the_same_fence() {
    each_store_and_server(|db| {
        for (resource, mode) in [
            ("same-x", Mode::Exclusive),
            ("same-s", Mode::Shared),
            ("same-l", Mode::Limit(3)),
        ] {
            let first = acquire(db, resource, "a", 60, mode);
            // Others beside it, where the mode allows; the semaphore is then full.
            let others: Vec<Tenure> = match mode {
                Mode::Exclusive => Vec::new(),
                Mode::Shared => vec![acquire(db, resource, "b", 60, mode)],
                Mode::Limit(_) => vec![
                    acquire(db, resource, "b", 60, mode),
                    acquire(db, resource, "c", 60, mode),
                ],
            };
            thread::sleep(Duration::from_millis(20));
            let again = acquire(db, resource, "a", 120, mode);
            assert_eq!(
                again.fence, first.fence,
                "{mode:?}: same tenure, same fence"
            );
            assert!(
                again.acquired_ms() > first.acquired_ms()
                    && again.expires_ms() > first.expires_ms(),
                "{mode:?}: acquired_at and expires_at move: {first:?} then {again:?}"
            );
            let mut all: Vec<&Tenure> = others.iter().collect();
            all.push(&again);
            assert_held(db, resource, &all);
            let log = db.log(&[resource]);
            let last = log.last().expect("events");
            assert_eq!(
                without_lease_end(last),
                again.event(last["at"].as_str().expect("at"), "extended"),
                "{mode:?}: the re-acquire is recorded as an extension"
            );
        }
    });
}

#[test]
fn own_tenure_in_another_mode_is_a_mismatch_and_changes_nothing() {
    each_store_and_server(|db| {
        let x = acquire(db, "own-x", "a", 60, Mode::Exclusive);
        let s = acquire(db, "own-s", "a", 60, Mode::Shared);
        let s2 = acquire(db, "own-s", "b", 60, Mode::Shared);
        let l = acquire(db, "own-l", "a", 60, Mode::Limit(3));
        let l2 = acquire(db, "own-l", "b", 60, Mode::Limit(3));
        let before = db.state();
        let cases: [(&str, Vec<&Tenure>, Vec<String>); 8] = [
            ("own-x", vec![&x], Mode::Shared.flags()),
            ("own-x", vec![&x], Mode::Limit(3).flags()),
            ("own-s", vec![&s, &s2], Mode::Exclusive.flags()),
            ("own-s", vec![&s, &s2], Mode::Limit(2).flags()),
            ("own-s", vec![&s, &s2], vec!["--limit".into(), "1".into()]),
            ("own-l", vec![&l, &l2], Mode::Exclusive.flags()),
            ("own-l", vec![&l, &l2], Mode::Shared.flags()),
            ("own-l", vec![&l, &l2], Mode::Limit(4).flags()),
        ];
        for (resource, holders, flags) in &cases {
            let mut args = acquire_args(resource, "a", 60, Mode::Exclusive, &[]);
            args.extend(flags.iter().cloned());
            assert_eq!(call(db, &args, 78), mismatch(resource, holders), "{args:?}");
        }
        assert_held(db, "own-x", &[&x]);
        assert_held(db, "own-s", &[&s, &s2]);
        assert_held(db, "own-l", &[&l, &l2]);
        assert_eq!(db.state(), before, "a mismatch changes nothing");
    });
}

#[test]
fn no_live_tenure_is_granted_a_new_tenure_in_any_mode() {
    each_store_and_server(|db| {
        for (resource, mode) in [
            ("new-x", Mode::Exclusive),
            ("new-s", Mode::Shared),
            ("new-l", Mode::Limit(2)),
        ] {
            assert_free(db, resource);
            let first = acquire(db, resource, "a", 60, mode);
            assert_held(db, resource, &[&first]);
            db.json(&["release", resource, "--owner", "a"], 0);
            assert_free(db, resource);
            let next = acquire(db, resource, "b", 60, mode);
            assert!(
                next.fence > first.fence,
                "{mode:?}: a new tenure gets a new, higher fence: {first:?} then {next:?}"
            );
            assert_held(db, resource, &[&next]);
        }
    });
}

#[test]
fn exclusive_request_beside_shared_holders_is_busy() {
    each_store_and_server(|db| {
        let a = acquire(db, "rw", "a", 60, Mode::Shared);
        let b = acquire(db, "rw", "b", 30, Mode::Shared);
        let before = db.state();
        assert_eq!(
            refused(db, "rw", "w", Mode::Exclusive, 75),
            busy("rw", &[&a, &b])
        );
        let limit_1 = acquire_args("rw", "w", 60, Mode::Exclusive, &["--limit", "1"]);
        assert_eq!(call(db, &limit_1, 75), busy("rw", &[&a, &b]));
        assert_held(db, "rw", &[&a, &b]);
        assert_eq!(db.state(), before, "a busy answer changes nothing");
    });
}

#[test]
fn shared_request_beside_an_exclusive_holder_is_busy() {
    each_store_and_server(|db| {
        let w = acquire(db, "rw", "w", 60, Mode::Exclusive);
        let before = db.state();
        assert_eq!(refused(db, "rw", "r", Mode::Shared, 75), busy("rw", &[&w]));
        assert_held(db, "rw", &[&w]);
        assert_eq!(db.state(), before, "a busy answer changes nothing");
    });
}

#[test]
fn shared_beside_shared_is_granted_each_its_own_fence() {
    each_store_and_server(|db| {
        let a = acquire(db, "readers", "a", 60, Mode::Shared);
        let b = acquire(db, "readers", "b", 60, Mode::Shared);
        let c = acquire(db, "readers", "c", 60, Mode::Shared);
        assert!(
            a.fence < b.fence && b.fence < c.fence,
            "fences strictly increase across tenures: {} {} {}",
            a.fence,
            b.fence,
            c.fence
        );
        assert_held(db, "readers", &[&a, &b, &c]);
        db.json(&["release", "readers", "--owner", "b"], 0);
        let d = acquire(db, "readers", "d", 60, Mode::Shared);
        assert!(
            d.fence > c.fence,
            "never reused: {} after {}",
            d.fence,
            c.fence
        );
        // b comes back as a new tenure, with a fence of its own again.
        let b2 = acquire(db, "readers", "b", 60, Mode::Shared);
        assert!(b2.fence > d.fence, "{} after {}", b2.fence, d.fence);
        assert_held(db, "readers", &[&a, &c, &d, &b2]);
    });
}

#[test]
fn semaphore_of_n_admits_n_holders_and_the_next_is_busy() {
    each_store_and_server(|db| {
        let sem = Mode::Limit(3);
        let a = acquire(db, "pool", "a", 60, sem);
        let b = acquire(db, "pool", "b", 30, sem);
        let c = acquire(db, "pool", "c", 90, sem);
        assert!(a.fence < b.fence && b.fence < c.fence, "{a:?} {b:?} {c:?}");
        let before = db.state();
        assert_eq!(
            refused(db, "pool", "d", sem, 75),
            busy("pool", &[&a, &b, &c])
        );
        assert_eq!(db.state(), before, "a busy answer changes nothing");
        db.json(&["release", "pool", "--owner", "b"], 0);
        let d = acquire(db, "pool", "d", 60, sem);
        assert!(d.fence > c.fence, "{} after {}", d.fence, c.fence);
        assert_held(db, "pool", &[&a, &c, &d]);
        assert_eq!(
            refused(db, "pool", "e", sem, 75),
            busy("pool", &[&a, &c, &d])
        );
    });
}

#[test]
fn an_expired_tenure_frees_its_slot() {
    each_store_and_server(|db| {
        // A full semaphore of 2 whose first tenure runs out.
        let short_sem = acquire(db, "slot-sem", "a", 2, Mode::Limit(2));
        let long_sem = acquire(db, "slot-sem", "b", 60, Mode::Limit(2));
        refused(db, "slot-sem", "c", Mode::Limit(2), 75);
        // A shared tenure in the way of a writer.
        let short_shared = acquire(db, "slot-rw", "r", 2, Mode::Shared);
        refused(db, "slot-rw", "w", Mode::Exclusive, 75);
        // An expired semaphore tenure is no reason for a mismatch.
        let short_cross = acquire(db, "slot-cross", "a", 2, Mode::Limit(2));
        refused(db, "slot-cross", "s", Mode::Shared, 78);

        sleep_past(&[&short_sem, &short_shared, &short_cross]);

        let c = acquire(db, "slot-sem", "c", 60, Mode::Limit(2));
        assert!(c.fence > long_sem.fence, "{c:?} after {long_sem:?}");
        assert_held(db, "slot-sem", &[&long_sem, &c]);
        let w = acquire(db, "slot-rw", "w", 60, Mode::Exclusive);
        assert!(w.fence > short_shared.fence, "{w:?} after {short_shared:?}");
        assert_held(db, "slot-rw", &[&w]);
        let s = acquire(db, "slot-cross", "s", 60, Mode::Shared);
        assert!(s.fence > short_cross.fence, "{s:?} after {short_cross:?}");
        assert_held(db, "slot-cross", &[&s]);
    });
}

#[test]
fn semaphore_request_beside_exclusive_or_shared_holders_is_a_mismatch() {
    each_store_and_server(|db| {
        let x = acquire(db, "rw-x", "w", 60, Mode::Exclusive);
        let s1 = acquire(db, "rw-s", "r1", 60, Mode::Shared);
        let s2 = acquire(db, "rw-s", "r2", 60, Mode::Shared);
        let before = db.state();
        for n in [2, 3] {
            assert_eq!(
                refused(db, "rw-x", "p", Mode::Limit(n), 78),
                mismatch("rw-x", &[&x])
            );
            assert_eq!(
                refused(db, "rw-s", "p", Mode::Limit(n), 78),
                mismatch("rw-s", &[&s1, &s2])
            );
        }
        assert_held(db, "rw-x", &[&x]);
        assert_held(db, "rw-s", &[&s1, &s2]);
        assert_eq!(db.state(), before, "a mismatch changes nothing");
    });
}

#[test]
fn exclusive_or_shared_request_beside_semaphore_holders_is_a_mismatch() {
    each_store_and_server(|db| {
        let a = acquire(db, "sem", "a", 60, Mode::Limit(3));
        let b = acquire(db, "sem", "b", 60, Mode::Limit(3));
        let before = db.state();
        let expected = mismatch("sem", &[&a, &b]);
        assert_eq!(refused(db, "sem", "x", Mode::Exclusive, 78), expected);
        assert_eq!(refused(db, "sem", "x", Mode::Shared, 78), expected);
        let limit_1 = acquire_args("sem", "x", 60, Mode::Exclusive, &["--limit", "1"]);
        assert_eq!(call(db, &limit_1, 78), expected, "--limit 1 is exclusive");
        assert_held(db, "sem", &[&a, &b]);
        assert_eq!(db.state(), before, "a mismatch changes nothing");
    });
}

#[test]
fn semaphore_n_beside_semaphore_m_is_a_mismatch() {
    each_store_and_server(|db| {
        let a = acquire(db, "sem", "a", 60, Mode::Limit(3));
        let b = acquire(db, "sem", "b", 60, Mode::Limit(3));
        let before = db.state();
        for n in [2, 4, 10000] {
            assert_eq!(
                refused(db, "sem", "x", Mode::Limit(n), 78),
                mismatch("sem", &[&a, &b])
            );
        }
        assert_eq!(db.state(), before, "a mismatch changes nothing");
        // Full, a different N is still a mismatch (78), not busy (75).
        let c = acquire(db, "sem", "c", 60, Mode::Limit(3));
        assert_eq!(
            refused(db, "sem", "x", Mode::Limit(5), 78),
            mismatch("sem", &[&a, &b, &c])
        );
        refused(db, "sem", "x", Mode::Limit(3), 75);
        assert_held(db, "sem", &[&a, &b, &c]);
    });
}

#[test]
fn mismatch_is_answered_at_once_even_with_wait() {
    each_store_and_server(|db| {
        let x = acquire(db, "w-x", "w", 60, Mode::Exclusive);
        let l1 = acquire(db, "w-l", "a", 60, Mode::Limit(2));
        let l2 = acquire(db, "w-l", "b", 60, Mode::Limit(2));
        let before = db.state();
        for (resource, mode, holders) in [
            ("w-x", Mode::Limit(3), vec![&x]),
            ("w-l", Mode::Shared, vec![&l1, &l2]),
            ("w-l", Mode::Exclusive, vec![&l1, &l2]),
            ("w-l", Mode::Limit(3), vec![&l1, &l2]),
        ] {
            let args = acquire_args(resource, "p", 60, mode, &["--wait", "30s"]);
            let start = Instant::now();
            let answer = call(db, &args, 78);
            let took = start.elapsed();
            assert!(took < AT_ONCE, "{args:?} took {took:?}: 78 must not wait");
            assert_eq!(answer, mismatch(resource, &holders), "{args:?}");
        }
        assert_eq!(db.state(), before, "a mismatch changes nothing");
    });
}

#[test]
fn limit_1_is_the_plain_exclusive_lock() {
    each_store_and_server(|db| {
        let args = acquire_args("one", "a", 60, Mode::Exclusive, &["--limit", "1"]);
        let out = db.run(&strs(&args));
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
        let answer = parse_line(&out.stdout);
        let a = Tenure::read(&answer["lock"], Mode::Exclusive);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{{\"acquired\":true,\"lock\":{}}}\n", a.plain_lock_text()),
            "--limit 1 prints a plain exclusive lock, no \"limit\""
        );
        let status = db.run(&["status", "one"]);
        assert_eq!(
            String::from_utf8_lossy(&status.stdout),
            format!("{{\"held\":true,\"lock\":{}}}\n", a.plain_lock_text()),
            "status of a --limit 1 lock: {}",
            describe(&status)
        );
        // Others meet it as an exclusive holder: busy (75), never a mismatch (78).
        let busy_bytes = format!("{}\n", a.plain_busy_text());
        for extra in [&[][..], &["--limit", "1"][..], &["--shared"][..]] {
            let args = acquire_args("one", "b", 60, Mode::Exclusive, extra);
            let out = db.run(&strs(&args));
            assert_eq!(out.status.code(), Some(75), "{args:?}: {}", describe(&out));
            assert_eq!(String::from_utf8_lossy(&out.stdout), busy_bytes, "{args:?}");
        }
        // Its owner re-acquires it without the flag: the same mode, the same tenure.
        let again = acquire(db, "one", "a", 60, Mode::Exclusive);
        assert_eq!(again.fence, a.fence);
        // And a plain exclusive lock is met by --limit 1 as busy too.
        let p = acquire(db, "plain", "p", 60, Mode::Exclusive);
        let args = acquire_args("plain", "q", 60, Mode::Exclusive, &["--limit", "1"]);
        assert_eq!(call(db, &args, 75), busy("plain", &[&p]));
    });
}

// ---------------------------------------------------------------------------------------------
// release and renew act on the caller's own tenure

#[test]
fn release_and_renew_without_an_own_tenure_of_a_free_resource_exit_1() {
    each_store_and_server(|db| {
        for (resource, mode) in [("free-s", Mode::Shared), ("free-l", Mode::Limit(2))] {
            acquire(db, resource, "a", 60, mode);
            acquire(db, resource, "b", 60, mode);
            db.json(&["release", resource, "--owner", "a"], 0);
            db.json(&["release", resource, "--owner", "b"], 0);
            let before = db.state();
            assert_eq!(
                db.json(&["release", resource, "--owner", "o"], 1),
                json!({"released": false, "resource": resource, "reason": "not_found"})
            );
            assert_eq!(
                db.json(&["renew", resource, "--owner", "o", "--ttl", "60"], 1),
                json!({"renewed": false, "resource": resource, "reason": "not_found"})
            );
            assert_eq!(db.state(), before, "{resource}: nothing changes");
        }
    });
}

#[test]
fn release_and_renew_without_an_own_tenure_beside_other_holders_exit_77() {
    each_store_and_server(|db| {
        for (resource, mode) in [("taken-s", Mode::Shared), ("taken-l", Mode::Limit(3))] {
            let a = acquire(db, resource, "a", 60, mode);
            let b = acquire(db, resource, "b", 60, mode);
            let before = db.state();
            assert_eq!(
                db.json(&["release", resource, "--owner", "o"], 77),
                json!({"released": false, "resource": resource, "reason": "forbidden"})
            );
            assert_eq!(
                db.json(&["renew", resource, "--owner", "o", "--ttl", "60"], 77),
                json!({"renewed": false, "resource": resource, "reason": "forbidden"})
            );
            assert_held(db, resource, &[&a, &b]);
            assert_eq!(db.state(), before, "{resource}: nothing changes");
        }
    });
}

#[test]
fn release_and_renew_act_on_the_callers_own_tenure_only() {
    each_store_and_server(|db| {
        for (resource, mode) in [("mine-s", Mode::Shared), ("mine-l", Mode::Limit(3))] {
            let a = acquire(db, resource, "a", 60, mode);
            let b = acquire(db, resource, "b", 60, mode);
            let c = acquire(db, resource, "c", 60, mode);

            assert_eq!(
                db.json(&["release", resource, "--owner", "b"], 0),
                json!({"released": true, "resource": resource})
            );
            assert_held(db, resource, &[&a, &c]);
            // b has no tenure left, but others do.
            db.json(&["release", resource, "--owner", "b"], 77);

            thread::sleep(Duration::from_millis(20));
            let renewed = db.json(&["renew", resource, "--owner", "c", "--ttl", "120"], 0);
            let c2 = Tenure::read(&renewed["lock"], mode);
            assert_eq!(renewed, json!({"renewed": true, "lock": c2.lock()}));
            assert_eq!((c2.fence, &c2.acquired_at), (c.fence, &c.acquired_at));
            assert!(c2.expires_ms() > c.expires_ms(), "{c:?} then {c2:?}");
            assert_held(db, resource, &[&a, &c2]);

            let events = db.log(&[resource]);
            let tail: Vec<Value> = events[events.len() - 2..]
                .iter()
                .map(without_lease_end)
                .collect();
            let at = |i: usize| tail[i]["at"].as_str().expect("at").to_owned();
            assert_eq!(
                tail,
                [b.event(&at(0), "released"), c2.event(&at(1), "renewed")],
                "{resource}"
            );
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Output

#[test]
fn lock_objects_carry_shared_or_limit_and_plain_locks_keep_their_bytes() {
    each_store_and_server(|db| {
        let out = db.json(
            &["acquire", "o-s", "--owner", "a", "--ttl", "60", "--shared"],
            0,
        );
        assert_eq!(
            keys(&out["lock"]),
            [
                "acquired_at",
                "expires_at",
                "fence",
                "owner",
                "resource",
                "shared"
            ]
        );
        assert_eq!(out["lock"]["shared"], json!(true), "{out}");

        let out = db.json(
            &[
                "acquire", "o-l", "--owner", "a", "--ttl", "60", "--limit", "3",
            ],
            0,
        );
        assert_eq!(
            keys(&out["lock"]),
            [
                "acquired_at",
                "expires_at",
                "fence",
                "limit",
                "owner",
                "resource"
            ]
        );
        assert_eq!(out["lock"]["limit"], json!(3), "{out}");

        // Every answer that carries a lock object: acquire (above, and in `acquire`), renew,
        // status.
        for (resource, mode) in [
            ("o-x", Mode::Exclusive),
            ("o-s", Mode::Shared),
            ("o-l", Mode::Limit(3)),
        ] {
            let tenure = acquire(db, resource, "a", 60, mode);
            let out = db.run(&["renew", resource, "--owner", "a", "--ttl", "90"]);
            assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
            let renewed = Tenure::read(&parse_line(&out.stdout)["lock"], mode);
            assert_eq!(renewed.fence, tenure.fence);
            let status = db.run(&["status", resource]);
            assert_eq!(status.status.code(), Some(0), "{}", describe(&status));
            if mode == Mode::Exclusive {
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    format!(
                        "{{\"renewed\":true,\"lock\":{}}}\n",
                        renewed.plain_lock_text()
                    )
                );
                assert_eq!(
                    String::from_utf8_lossy(&status.stdout),
                    format!("{{\"held\":true,\"lock\":{}}}\n", renewed.plain_lock_text()),
                    "status of an exclusive lock has no \"locks\""
                );
            } else {
                assert_eq!(parse_line(&status.stdout), held(&[&renewed]));
            }
        }
    });
}

#[test]
fn busy_beside_shared_or_semaphore_holders_names_the_first_to_expire_and_lists_all() {
    each_store_and_server(|db| {
        for (resource, mode, request) in [
            ("b-s", Mode::Shared, Mode::Exclusive),
            ("b-l", Mode::Limit(3), Mode::Limit(3)),
        ] {
            // Fence order a, b, c; lease order b, a, c.
            let a = acquire(db, resource, "a", 60, mode);
            let b = acquire(db, resource, "b", 30, mode);
            let c = acquire(db, resource, "c", 90, mode);
            let answer = refused(db, resource, "x", request, 75);
            assert_eq!(
                answer["holder"]["owner"], "b",
                "the lease that ends first: {answer}"
            );
            assert_eq!(answer, busy(resource, &[&a, &b, &c]));
            assert_eq!(
                answer["holders"]
                    .as_array()
                    .expect("holders")
                    .iter()
                    .map(|h| h["owner"].as_str().expect("owner"))
                    .collect::<Vec<_>>(),
                ["a", "b", "c"],
                "holders by fence: {answer}"
            );
        }
    });
}

#[test]
fn busy_beside_a_plain_exclusive_holder_is_todays_answer() {
    each_store_and_server(|db| {
        let a = acquire(db, "b-x", "a", 60, Mode::Exclusive);
        let bytes = format!("{}\n", a.plain_busy_text());
        for mode in [Mode::Exclusive, Mode::Shared] {
            let args = acquire_args("b-x", "x", 60, mode, &[]);
            let out = db.run(&strs(&args));
            assert_eq!(out.status.code(), Some(75), "{args:?}: {}", describe(&out));
            assert_eq!(String::from_utf8_lossy(&out.stdout), bytes, "{args:?}");
        }
    });
}

#[test]
fn mismatch_answer_lists_every_holder() {
    each_store_and_server(|db| {
        let x = acquire(db, "m-x", "a", 60, Mode::Exclusive);
        let s1 = acquire(db, "m-s", "a", 60, Mode::Shared);
        let s2 = acquire(db, "m-s", "b", 30, Mode::Shared);
        let l1 = acquire(db, "m-l", "a", 60, Mode::Limit(3));
        let l2 = acquire(db, "m-l", "b", 30, Mode::Limit(3));
        for (resource, request, holders, expected) in [
            (
                "m-x",
                Mode::Limit(2),
                vec![&x],
                json!([{"owner": "a", "expires_at": x.expires_at}]),
            ),
            (
                "m-s",
                Mode::Limit(2),
                vec![&s1, &s2],
                json!([
                    {"owner": "a", "expires_at": s1.expires_at, "shared": true},
                    {"owner": "b", "expires_at": s2.expires_at, "shared": true},
                ]),
            ),
            (
                "m-l",
                Mode::Shared,
                vec![&l1, &l2],
                json!([
                    {"owner": "a", "expires_at": l1.expires_at, "limit": 3},
                    {"owner": "b", "expires_at": l2.expires_at, "limit": 3},
                ]),
            ),
        ] {
            let out = db.run(&strs(&acquire_args(resource, "x", 60, request, &[])));
            assert_eq!(
                out.status.code(),
                Some(78),
                "{resource}: {}",
                describe(&out)
            );
            let answer = parse_line(&out.stdout);
            assert_eq!(
                answer,
                json!({
                    "acquired": false,
                    "resource": resource,
                    "reason": "mismatch",
                    "holders": expected,
                })
            );
            assert_eq!(answer, mismatch(resource, &holders));
        }
    });
}

#[test]
fn status_of_shared_or_semaphore_lists_every_tenure_and_names_the_oldest() {
    each_store_and_server(|db| {
        for (resource, mode) in [("st-s", Mode::Shared), ("st-l", Mode::Limit(4))] {
            let a = acquire(db, resource, "a", 30, mode);
            assert_held(db, resource, &[&a]);
            let b = acquire(db, resource, "b", 90, mode);
            let c = acquire(db, resource, "c", 60, mode);
            let (_, answer) = db.status(resource);
            assert_eq!(answer["lock"]["owner"], "a", "the oldest tenure: {answer}");
            assert_eq!(
                answer,
                json!({
                    "held": true,
                    "lock": a.lock(),
                    "locks": [a.lock(), b.lock(), c.lock()],
                })
            );
            db.json(&["release", resource, "--owner", "a"], 0);
            assert_held(db, resource, &[&b, &c]);
        }
    });
}

#[test]
fn list_has_one_entry_per_live_tenure_by_resource_then_fence() {
    each_store_and_server(|db| {
        // Owners named against their fence order, resources taken out of order.
        let b_z = acquire(db, "b", "z", 60, Mode::Shared);
        let c = acquire(db, "c", "m", 60, Mode::Exclusive);
        let a_z = acquire(db, "a", "z", 60, Mode::Limit(2));
        let b_m = acquire(db, "b", "m", 60, Mode::Shared);
        let a_m = acquire(db, "a", "m", 60, Mode::Limit(2));
        let a0 = acquire(db, "a:0", "k", 60, Mode::Shared);
        acquire(db, "b", "gone", 60, Mode::Shared);
        let b_a = acquire(db, "b", "a", 60, Mode::Shared);
        db.json(&["release", "b", "--owner", "gone"], 0);
        let expected: Vec<Value> = [&a_z, &a_m, &a0, &b_z, &b_m, &b_a, &c]
            .iter()
            .map(|t| t.lock())
            .collect();
        assert_eq!(db.json(&["list"], 0), json!({ "locks": expected }));
        let expected: Vec<Value> = [&b_z, &b_m, &b_a].iter().map(|t| t.lock()).collect();
        assert_eq!(
            db.json(&["list", "--prefix", "b"], 0),
            json!({ "locks": expected })
        );
    });
}

#[test]
fn log_events_carry_shared_or_limit() {
    each_store_and_server(|db| {
        let a = acquire(db, "h-s", "a", 60, Mode::Shared);
        let b = acquire(db, "h-s", "b", 60, Mode::Shared);
        acquire(db, "h-s", "a", 60, Mode::Shared);
        db.json(&["renew", "h-s", "--owner", "b", "--ttl", "60"], 0);
        db.json(&["release", "h-s", "--owner", "a"], 0);
        let l = acquire(db, "h-l", "c", 60, Mode::Limit(5));
        db.json(&["release", "h-l", "--owner", "c"], 0);
        let x = acquire(db, "h-x", "d", 60, Mode::Exclusive);

        for (resource, expected) in [
            (
                "h-s",
                vec![
                    (&a, "acquired"),
                    (&b, "acquired"),
                    (&a, "extended"),
                    (&b, "renewed"),
                    (&a, "released"),
                ],
            ),
            ("h-l", vec![(&l, "acquired"), (&l, "released")]),
            ("h-x", vec![(&x, "acquired")]),
        ] {
            let events = db.log(&[resource]);
            let wanted: Vec<Value> = events
                .iter()
                .zip(&expected)
                .map(|(event, (tenure, kind))| {
                    let at = event["at"].as_str().expect("at");
                    timestamp_millis(at);
                    tenure.event(at, kind)
                })
                .collect();
            assert_eq!(events.len(), expected.len(), "{resource}: {events:?}");
            let events: Vec<Value> = events.iter().map(without_lease_end).collect();
            assert_eq!(events, wanted, "{resource}");
        }
    });
}

/// The one line `distlock --format text ARGS…` prints (an `acquire`: one result, one line).
fn text_line(db: &Db, args: &[String], code: i32) -> String {
    let lines = db.text_lines(&strs(args), code);
    assert_eq!(lines.len(), 1, "{args:?}: one line, got {lines:?}");
    lines[0].clone()
}

#[test]
fn text_output_names_the_mode_and_busy_and_mismatch_have_lines() {
    each_store_and_server(|db| {
        // Names free of mode words, so a line shows the mode only if it says it.
        let line = text_line(db, &acquire_args("alpha", "o1", 60, Mode::Shared, &[]), 0);
        assert!(line.contains("shared"), "{line:?}");
        text_line(db, &acquire_args("alpha", "o2", 60, Mode::Shared, &[]), 0);
        let line = text_line(db, &acquire_args("beta", "o3", 60, Mode::Limit(3), &[]), 0);
        assert!(line.contains("limit 3"), "{line:?}");

        // status (one line, or one per tenure), list (one line per tenure) and log.
        for (args, lines, mode) in [
            (&["status", "alpha"][..], None, "shared"),
            (&["status", "beta"][..], None, "limit 3"),
            (&["list", "--prefix", "alpha"][..], Some(2), "shared"),
            (&["list", "--prefix", "beta"][..], Some(1), "limit 3"),
            (&["log", "alpha"][..], Some(2), "shared"),
            (&["log", "beta"][..], Some(1), "limit 3"),
        ] {
            let text = db.text_lines(args, 0);
            if let Some(n) = lines {
                assert_eq!(text.len(), n, "{args:?}: {text:?}");
            }
            assert!(
                text.iter().all(|l| l.contains(mode)),
                "{args:?}: every line says {mode:?}: {text:?}"
            );
        }

        // Busy and mismatch have their lines, with their exit codes.
        text_line(
            db,
            &acquire_args("alpha", "w", 60, Mode::Exclusive, &[]),
            75,
        );
        for owner in ["w", "v"] {
            text_line(db, &acquire_args("beta", owner, 60, Mode::Limit(3), &[]), 0);
        }
        text_line(db, &acquire_args("beta", "u", 60, Mode::Limit(3), &[]), 75);
        text_line(db, &acquire_args("alpha", "w", 60, Mode::Limit(2), &[]), 78);
        text_line(db, &acquire_args("beta", "w2", 60, Mode::Shared, &[]), 78);
    });
}

// ---------------------------------------------------------------------------------------------
// run --shared, run --limit N

/// Under `run`: writes `$DISTLOCK_FENCE $DISTLOCK_OWNER` to `$D/$1` (whole, by rename), then
/// waits (at most 20 s) for `$D/go`.
const REPORT_AND_WAIT: &str = r#"printf '%s %s\n' "$DISTLOCK_FENCE" "$DISTLOCK_OWNER" > "$D/$1.tmp"
mv "$D/$1.tmp" "$D/$1"
i=0
while [ ! -e "$D/go" ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i + 1)); done"#;

#[test]
fn run_shared_and_run_limit_export_their_own_tenures_fence() {
    each_store_and_server(|db| {
        for (resource, mode) in [("run-s", Mode::Shared), ("run-l", Mode::Limit(2))] {
            let _ = fs::remove_file(db.file("go"));
            let names = [format!("{resource}-1"), format!("{resource}-2")];
            let procs: Vec<Proc> = names
                .iter()
                .map(|name| {
                    let mut cmd = guarded(
                        db,
                        &run_flags(resource, mode, &[]),
                        REPORT_AND_WAIT,
                        &[name],
                    );
                    Proc::spawn(&mut cmd, db.dir.path(), name)
                })
                .collect();
            let seen: Vec<(i64, String)> = names
                .iter()
                .zip(&procs)
                .map(|(name, proc)| {
                    let pid = proc.pid().as_raw();
                    wait_until(LONG, &format!("{name} reports, or its run ends"), || {
                        db.file(name).exists() || is_gone(pid)
                    });
                    assert!(
                        db.file(name).exists(),
                        "{name}: run ended before its command reported: {}",
                        fs::read_to_string(db.file(&format!("{name}.stderr"))).unwrap_or_default()
                    );
                    let text = fs::read_to_string(db.file(name)).expect("report");
                    let (fence, owner) = text.trim().split_once(' ').expect("FENCE OWNER");
                    (
                        fence.parse().expect("DISTLOCK_FENCE is a number"),
                        owner.to_owned(),
                    )
                })
                .collect();
            // Both commands run at once, each with its own tenure's fence.
            let (code, status) = db.status(resource);
            assert_eq!(code, 0, "{status}");
            let locks = status["locks"].as_array().expect("locks");
            assert_eq!(locks.len(), 2, "{status}");
            for (fence, owner) in &seen {
                let mine: Vec<&Value> = locks
                    .iter()
                    .filter(|l| l["owner"] == owner.as_str())
                    .collect();
                assert_eq!(mine.len(), 1, "{owner}: one tenure in {status}");
                let tenure = Tenure::read(mine[0], mode);
                assert_eq!(
                    tenure.fence, *fence,
                    "{owner}: DISTLOCK_FENCE is its own tenure's"
                );
            }
            assert_ne!(seen[0].1, seen[1].1, "two owners");
            assert_ne!(seen[0].0, seen[1].0, "two fences");
            fs::write(db.file("go"), "").expect("marker");
            for proc in procs {
                let finished = proc.finish(LONG);
                assert_eq!(finished.code(), Some(0), "{}", finished.describe());
            }
            assert_free(db, resource);
        }
    });
}

#[test]
fn run_mismatch_exits_78_with_one_line_and_never_starts_the_command() {
    each_store_and_server(|db| {
        acquire(db, "rm-x", "w", 60, Mode::Exclusive);
        acquire(db, "rm-s", "r", 60, Mode::Shared);
        acquire(db, "rm-l", "a", 60, Mode::Limit(3));
        let before = db.state();
        for (resource, mode) in [
            ("rm-x", Mode::Limit(3)),
            ("rm-s", Mode::Limit(2)),
            ("rm-l", Mode::Exclusive),
            ("rm-l", Mode::Shared),
            ("rm-l", Mode::Limit(2)),
        ] {
            for extra in [
                &[][..],
                &["--wait", "30s"][..],
                &["--conflict-exit-code", "0"][..],
            ] {
                let flags = run_flags(resource, mode, extra);
                let start = Instant::now();
                let out = guarded(db, &flags, MARK_RAN, &[])
                    .output()
                    .expect("run distlock");
                let took = start.elapsed();
                assert_eq!(
                    out.status.code(),
                    Some(78),
                    "run {flags:?}: {}",
                    describe(&out)
                );
                assert!(
                    took < AT_ONCE,
                    "run {flags:?} took {took:?}: 78 must not wait"
                );
                assert!(
                    out.stdout.is_empty(),
                    "run {flags:?}: stdout is the command's"
                );
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    stderr.starts_with("distlock: ")
                        && stderr.ends_with('\n')
                        && stderr.lines().count() == 1,
                    "run {flags:?}: one line `distlock: …` on stderr, got {stderr:?}"
                );
                assert!(
                    !db.file("ran").exists(),
                    "run {flags:?} started the command"
                );
            }
        }
        assert_eq!(db.state(), before, "a mismatch changes nothing");
    });
}

#[test]
fn run_limit_exits_75_when_the_semaphore_is_full() {
    each_store_and_server(|db| {
        let sem = Mode::Limit(2);
        let a = acquire(db, "full", "a", 60, sem);
        let b = acquire(db, "full", "b", 60, sem);
        let before = db.state();
        for (extra, code) in [(&[][..], 75), (&["--conflict-exit-code", "3"][..], 3)] {
            let flags = run_flags("full", sem, extra);
            let out = guarded(db, &flags, MARK_RAN, &[])
                .output()
                .expect("run distlock");
            assert_eq!(
                out.status.code(),
                Some(code),
                "run {flags:?}: {}",
                describe(&out)
            );
            assert!(
                !db.file("ran").exists(),
                "run {flags:?} started the command"
            );
        }
        assert_eq!(db.state(), before, "a busy run changes nothing");
        // A free slot: the command runs under a tenure of its own, released afterwards.
        db.json(&["release", "full", "--owner", "b"], 0);
        let script = r#"printf '%s\n' "$DISTLOCK_FENCE" > "$D/fence""#;
        let out = guarded(db, &run_flags("full", sem, &[]), script, &[])
            .output()
            .expect("run distlock");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let fence: i64 = fs::read_to_string(db.file("fence"))
            .expect("fence file")
            .trim()
            .parse()
            .expect("a fence");
        assert!(fence > b.fence, "a new tenure: {fence} after {}", b.fence);
        assert_held(db, "full", &[&a]);
    });
}

// ---------------------------------------------------------------------------------------------
// Validation

#[test]
fn limit_validation_rows_exit_64_and_leave_the_store_untouched() {
    each_store_and_server(|db| {
        // The flag exists and takes the ends of its range.
        for n in ["1", "2", "10000"] {
            let args = acquire_args("v", "a", 60, Mode::Exclusive, &["--limit", n]);
            call(db, &args, 0);
            db.json(&["release", "v", "--owner", "a"], 0);
            output_exiting(
                &mut guarded(
                    db,
                    &run_flags("v", Mode::Exclusive, &["--limit", n]),
                    "true",
                    &[],
                ),
                0,
            );
        }

        let before = db.state();
        let rows: [&[&str]; 9] = [
            &["--limit", "0"],
            &["--limit", "10001"],
            &["--limit", "-1"],
            &["--limit=-1"],
            &["--limit", "x"],
            &["--limit", "2.5"],
            &["--limit", ""],
            &["--shared", "--limit", "2"],
            &["--limit", "2", "--shared"],
        ];
        for row in rows {
            let args = acquire_args("v", "a", 60, Mode::Exclusive, row);
            assert_usage_error(&db.run(&strs(&args)), &args);
            let flags = run_flags("v", Mode::Exclusive, row);
            let out = guarded(db, &flags, MARK_RAN, &[])
                .output()
                .expect("run distlock");
            assert_usage_error(&out, &flags);
            assert!(
                !db.file("ran").exists(),
                "run {flags:?} started the command"
            );
        }
        let args = acquire_args("v", "a", 60, Mode::Exclusive, &["--limit"]);
        assert_usage_error(&db.run(&strs(&args)), &args);
        assert_eq!(
            db.state(),
            before,
            "a usage error leaves the store untouched"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Concurrency: real processes

/// The critical section of the semaphore test: a counter of the commands inside, kept under
/// `flock(1)`; every new value goes to `$1/levels`, every fence to `$1/fences`.
const COUNTED: &str = r#"d=$1
step() {
  flock "$d/mutex" sh -c 'n=$(( $(cat "$1/count") + $2 )); echo "$n" > "$1/count"; echo "$n" >> "$1/levels"' sh "$d" "$1"
}
step 1
printf '%s\n' "$DISTLOCK_FENCE" >> "$d/fences"
sleep 0.2
step -1"#;

/// `workers` processes at once, each worker running `cycles` commands one after the other
/// ([`Contention`]); `start` makes one (worker, cycle). Every command has [`LONG`] to exit.
fn contend(
    db: &Db,
    name: &str,
    workers: usize,
    cycles: usize,
    start: impl Fn(usize, usize) -> Command + Sync,
) -> Contended {
    let contention = Contention {
        dir: db.dir.path(),
        name,
        workers,
        rounds: cycles,
        bound: LONG,
    };
    contention.run(start)
}

/// Creates the store before the processes start, so that what they race for is the lock:
/// many processes creating one store is `upgrade.rs`'s concern.
fn make_store(db: &Db) {
    db.json(&["release", "warm-up", "--owner", "nobody"], 1);
}

fn numbers(path: &Path) -> Vec<i64> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().expect("a number"))
        .collect()
}

#[test]
fn semaphore_of_3_runs_never_more_than_3_at_once_and_they_overlap() {
    each_store_and_server(|db| {
        let dir = db.dir.path();
        make_store(db);
        fs::write(db.file("count"), "0\n").expect("counter");
        let started = Instant::now();
        let contended = contend(db, "sem", 8, 3, |_, _| {
            let flags = run_flags("sem", Mode::Limit(3), &["--wait", "60s", "--ttl", "30s"]);
            guarded(db, &flags, COUNTED, &[dir.to_str().expect("utf-8 path")])
        });
        eprintln!(
            "{:?}: 8 x 3 runs of a semaphore of 3 in {:?}",
            db.kind,
            started.elapsed()
        );
        contended.assert_all_exited_0(&format!("{:?} runs of the semaphore", db.kind));
        let levels = numbers(&db.file("levels"));
        assert_eq!(levels.len(), 2 * 24, "two steps per run");
        let most = levels.iter().copied().max().expect("levels");
        assert!(
            most <= 3,
            "{:?}: {most} commands inside a semaphore of 3: {levels:?}",
            db.kind
        );
        assert!(
            most >= 2,
            "{:?}: the runs never overlapped: {levels:?}",
            db.kind
        );
        assert_eq!(numbers(&db.file("count")), [0]);
        let mut fences = numbers(&db.file("fences"));
        fences.sort_unstable();
        fences.dedup();
        assert_eq!(
            fences.len(),
            24,
            "{:?}: every tenure has a fence of its own",
            db.kind
        );
        assert_free(db, "sem");
    });
}

/// The critical section of the readers/writer test: a count of readers and writers inside,
/// `R W` in `$1/state`, kept under `flock(1)`; every change goes to `$1/trace` as
/// `ROLE DELTA R W`.
const READ_WRITE: &str = r#"d=$1 role=$2
step() {
  flock "$d/mutex" sh -c '
    read r w < "$1/state"
    if [ "$2" = reader ]; then r=$((r + $3)); else w=$((w + $3)); fi
    echo "$r $w" > "$1/state"
    echo "$2 $3 $r $w" >> "$1/trace"' sh "$d" "$role" "$1"
}
step 1
sleep 0.3
step -1"#;

#[test]
fn shared_readers_overlap_and_an_exclusive_writer_overlaps_nobody() {
    each_store_and_server(|db| {
        let dir = db.dir.path().to_str().expect("utf-8 path").to_owned();
        make_store(db);
        fs::write(db.file("state"), "0 0\n").expect("state");
        let trace = db.file("trace");
        let flags = |mode| run_flags("rw", mode, &["--wait", "60s", "--ttl", "30s"]);
        let (readers, writer) = thread::scope(|scope| {
            let readers = scope.spawn(|| {
                contend(db, "reader", 6, 3, |_, _| {
                    guarded(db, &flags(Mode::Shared), READ_WRITE, &[&dir, "reader"])
                })
            });
            // The writer comes while readers are inside.
            wait_until(LONG, "a reader gets in, or the readers end", || {
                readers.is_finished()
                    || fs::read_to_string(&trace).is_ok_and(|t| t.contains("reader 1"))
            });
            let writer = scope.spawn(|| {
                contend(db, "writer", 1, 2, |_, _| {
                    guarded(db, &flags(Mode::Exclusive), READ_WRITE, &[&dir, "writer"])
                })
            });
            (
                readers.join().expect("readers"),
                writer.join().expect("writer"),
            )
        });
        readers.assert_all_exited_0(&format!("{:?} readers", db.kind));
        writer.assert_all_exited_0(&format!("{:?} writer's runs", db.kind));
        let trace = fs::read_to_string(&trace).expect("trace");
        let mut most_readers = 0;
        let (mut readers_in, mut writers_in) = (0, 0);
        for line in trace.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let [role, delta, r, w] = fields[..] else {
                panic!("trace line {line:?}")
            };
            let (r, w): (i64, i64) = (r.parse().expect("r"), w.parse().expect("w"));
            assert!(
                w == 0 || (w == 1 && r == 0),
                "{:?}: a writer overlapped someone ({r} readers, {w} writers):\n{trace}",
                db.kind
            );
            most_readers = most_readers.max(r);
            if delta == "1" {
                match role {
                    "reader" => readers_in += 1,
                    _ => writers_in += 1,
                }
            }
        }
        assert_eq!((readers_in, writers_in), (18, 2), "{trace}");
        assert!(
            most_readers >= 2,
            "{:?}: shared readers never overlapped:\n{trace}",
            db.kind
        );
        assert_free(db, "rw");
    });
}
