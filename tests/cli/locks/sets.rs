//! Lock sets (the contract's "Lock sets"): several resources taken, renewed and released
//! together, all or nothing, through the real binary with real processes, on every store that
//! [`on_each_store`] names:
//!
//! | rule | tests |
//! | --- | --- |
//! | no overlap, no deadlock, fences rise | `contending_sets_and_single_locks_never_overlap_never_deadlock_and_fences_rise` |
//! | fair waiting | `a_queued_set_waiter_is_served_before_a_later_single_waiter_on_a_free_member` |
//! | acquired | `acquire_of_a_set_answers_every_member_by_resource_each_with_its_own_fence` |
//! | one member | `a_set_that_collapses_to_one_member_is_a_single_resource_with_its_shapes` |
//! | busy (75) | `a_busy_set_names_every_busy_member_and_takes_nothing` |
//! | mismatch (78) | `a_mismatch_on_any_member_comes_before_busy_names_the_first_and_takes_nothing` |
//! | one lease (1, 77) | `renew_and_release_of_a_set_change_nothing_unless_the_owner_holds_every_member` |
//! | 1..=64 members | `sixty_five_members_are_refused_with_64_and_create_nothing_sixty_four_are_taken` |
//! | `run` | `run_over_a_set_exports_its_names_and_fences_passes_the_status_through_and_releases`, `a_broken_member_stops_the_run_with_124_and_the_other_member_is_released`, `hold_at_least_over_a_set_keeps_every_member`, `an_interrupted_run_waiting_for_a_set_leaves_every_queue` |
//!
//! Answers are compared whole, as parsed JSON, with what distlock printed for the same
//! question about a single resource, or with the shapes of `common::tenure`. A waiter counts as
//! queued only once `status` counts it; commands are `sh -c` scripts that leave marker files in
//! the scratch folder (`$D`). Timing bounds are upper bounds with generous slack (2 shared
//! cores).

use std::collections::BTreeMap;
use std::fs;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::common::contention::Contention;
use crate::common::critical;
use crate::common::files::read_trimmed;
use crate::common::output::{
    answer, assert_usage_error, event_names, fence, keys, parse_line, timestamp_millis,
};
use crate::common::pids::all_gone_within;
use crate::common::process::{Proc, describe};
use crate::common::store::{
    Db, Kind, assert_free, assert_held_by, held_run, output_exiting, run_cmd, sh_script,
    until_waiting,
};
use crate::common::tenure::{Mode, Tenure, mismatch};

/// The stores every test here runs on, chosen here alone: SQLite and PostgreSQL, then each
/// through a distlock server.
use crate::common::store::each_store_and_server as on_each_store;

/// How long a process may take to finish once it has what it waits for.
const LONG: Duration = Duration::from_secs(20);

/// A mismatch (78) must come back well before a `--wait` of 30 s would run out.
const AT_ONCE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// `acquire RESOURCES… --owner OWNER --ttl 60`, then `extra`: its JSON line, once it exited
/// `code`.
fn acquire(db: &Db, resources: &[&str], owner: &str, extra: &[&str], code: i32) -> Value {
    let mut args = vec!["acquire"];
    args.extend_from_slice(resources);
    args.extend(["--owner", owner, "--ttl", "60"]);
    args.extend_from_slice(extra);
    db.json(&args, code)
}

/// The same, in the background, waiting up to 60 s.
fn waiter(db: &Db, resources: &[&str], owner: &str) -> Proc {
    let mut args = vec!["acquire"];
    args.extend_from_slice(resources);
    args.extend(["--owner", owner, "--ttl", "60", "--wait", "60s"]);
    db.spawn(&args, owner)
}

/// An exclusive tenure that `owner` takes on `resource` alone.
fn hold(db: &Db, resource: &str, owner: &str) -> Tenure {
    hold_as(db, resource, owner, Mode::Exclusive)
}

fn hold_as(db: &Db, resource: &str, owner: &str, mode: Mode) -> Tenure {
    let flags = mode.flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let got = acquire(db, &[resource], owner, &flags, 0);
    Tenure::read(&got["lock"], mode)
}

/// The `"locks"` of a set's answer, which must be exclusive tenures of `owner` on exactly
/// `resources`, in that order (by resource), with fences that are all different.
fn set_locks(answer: &Value, resources: &[&str], owner: &str) -> Vec<Tenure> {
    let locks: Vec<Tenure> = answer["locks"]
        .as_array()
        .unwrap_or_else(|| panic!("\"locks\" must be an array: {answer}"))
        .iter()
        .map(|lock| Tenure::read(lock, Mode::Exclusive))
        .collect();
    let names: Vec<&str> = locks.iter().map(|t| t.resource.as_str()).collect();
    assert_eq!(
        names, resources,
        "one lock per member, by resource: {answer}"
    );
    assert!(
        locks.iter().all(|t| t.owner == owner),
        "every member held by {owner}: {answer}"
    );
    let mut fences: Vec<i64> = locks.iter().map(|t| t.fence).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        locks.len(),
        "each with its own fence: {answer}"
    );
    locks
}

/// `log RESOURCE` as (event, owner, fence) triples, oldest first.
fn history(db: &Db, resource: &str) -> Vec<(String, String, i64)> {
    db.log(&[resource])
        .iter()
        .map(|e| {
            let text = |key: &str| {
                e[key]
                    .as_str()
                    .unwrap_or_else(|| panic!("{key} must be a string in {e}"))
                    .to_owned()
            };
            (text("event"), text("owner"), fence(e))
        })
        .collect()
}

/// [`history`] without the renewals of `run`'s heartbeat (every ttl/3, as often as the
/// machine's pace makes it), each checked to renew the tenure then in progress.
fn history_but_renewals(db: &Db, resource: &str) -> Vec<(String, String, i64)> {
    let mut kept: Vec<(String, String, i64)> = Vec::new();
    for e in history(db, resource) {
        if e.0 == "renewed" {
            let current = kept.last().filter(|last| last.0 == "acquired");
            assert!(
                current.is_some_and(|c| (&c.1, c.2) == (&e.1, e.2)),
                "{resource}: {e:?} must renew the tenure in progress, after {:?}",
                kept.last()
            );
        } else {
            kept.push(e);
        }
    }
    kept
}

/// `(event, owner, fence)`, as [`history`] lists them.
fn event(name: &str, owner: &str, fence: i64) -> (String, String, i64) {
    (name.to_owned(), owner.to_owned(), fence)
}

/// `distlock --format text ARGS…`: its one line on stdout, once it exited `code`.
fn text_line(db: &Db, args: &[&str], code: i32) -> String {
    let lines = db.text_lines(args, code);
    assert_eq!(lines.len(), 1, "{args:?}: one line, got {lines:?}");
    lines.into_iter().next().expect("a line")
}

// ---------------------------------------------------------------------------------------------
// Contention: sets in either order and single resources at once
// ---------------------------------------------------------------------------------------------

/// The resources each contender holds, by turns: both members in either order, and each alone.
const SHAPES: [&[&str]; 4] = [&["a", "b"], &["b", "a"], &["a"], &["b"]];

/// The command under `run` in the contention test, its resources as `$@`: it enters each
/// resource's critical section (`mkdir` is atomic and fails if another holder is inside; then
/// it writes to `overlaps`, as [`critical`]'s section does, for [`critical::violations`]),
/// notes its owner and what `run` exported (`DISTLOCK_FENCE`, `DISTLOCK_FENCES`, `-` when
/// unset) in the resource's `entered-R` in the order holders got in, stays briefly, and leaves.
const CONTENDER: &str = r#"for r; do
  mkdir "$D/held-$r" 2>/dev/null || { echo "$r was held when $DISTLOCK_OWNER came in for $*" >>"$D/overlaps"; exit 99; }
done
for r; do
  printf '%s %s %s\n' "$DISTLOCK_OWNER" "${DISTLOCK_FENCE--}" "${DISTLOCK_FENCES--}" >>"$D/entered-$r"
done
sleep 0.01
for r; do
  rmdir "$D/held-$r" || { echo "$r: the marker vanished under $DISTLOCK_OWNER" >>"$D/overlaps"; exit 98; }
done"#;

/// One tenure of a resource as its holder noted it: the owner, and the fence of that resource
/// read from what `run` exported — or what was wrong with it.
fn entered(line: &str, resource: &str) -> Result<(String, i64), String> {
    let fields: Vec<&str> = line.split(' ').collect();
    let [owner, single, set] = fields[..] else {
        return Err(format!("{resource}: a line of three fields, got {line:?}"));
    };
    let fence = match (single, set) {
        (single, "-") => single
            .parse()
            .map_err(|_| format!("{resource}: DISTLOCK_FENCE {single:?} in {line:?}"))?,
        ("-", set) => {
            let fences: BTreeMap<String, i64> = serde_json::from_str(set)
                .map_err(|e| format!("{resource}: DISTLOCK_FENCES {set:?}: {e}"))?;
            let names: Vec<&str> = fences.keys().map(String::as_str).collect();
            if names != ["a", "b"] {
                return Err(format!(
                    "{resource}: DISTLOCK_FENCES names {names:?}: {line:?}"
                ));
            }
            fences[resource]
        }
        _ => {
            return Err(format!(
                "{resource}: both DISTLOCK_FENCE and DISTLOCK_FENCES exported: {line:?}"
            ));
        }
    };
    Ok((owner.to_owned(), fence))
}

/// `workers` processes at once, each running `rounds` rounds of `run --wait 60s --ttl 10`
/// over one of the [`SHAPES`] (by turns, so every shape contends with every other), each round
/// killed if it outlives `bound` (well below the wait: a deadlock shows as a run that never
/// ends). After the first failure no new round starts, so that a deadlock costs one bound,
/// not one per round.
fn contend(db: &Db, workers: usize, rounds: usize, bound: Duration) {
    let started = Instant::now();
    let contention = Contention {
        dir: db.dir.path(),
        name: "contender",
        workers,
        rounds,
        bound,
    };
    let contended = contention.run(|worker, round| {
        let shape = SHAPES[(worker + round) % SHAPES.len()];
        let mut flags = Vec::new();
        for resource in shape {
            flags.extend(["--resource", resource]);
        }
        flags.extend(["--wait", "60s", "--ttl", "10"]);
        run_cmd(db, &sh_script(&flags, CONTENDER, shape))
    });
    eprintln!(
        "{:?}: {workers} x {rounds} contending runs over {{a,b}}, {{b,a}}, {{a}}, {{b}} in {:?}",
        db.kind,
        started.elapsed()
    );

    let overlaps = critical::violations(db.dir.path());
    assert!(
        overlaps.is_empty(),
        "{:?}: two holders of one resource at once:\n{}",
        db.kind,
        overlaps.join("\n")
    );
    contended.assert_all_exited_0(&format!(
        "{:?} runs (each must get its locks within {bound:?}: no 74, no 75, no deadlock)",
        db.kind
    ));
    for resource in ["a", "b"] {
        let runs = (0..workers)
            .flat_map(|w| (0..rounds).map(move |r| SHAPES[(w + r) % SHAPES.len()]))
            .filter(|shape| shape.contains(&resource))
            .count();
        let noted = fs::read_to_string(db.file(&format!("entered-{resource}"))).unwrap_or_default();
        let tenures: Vec<(String, i64)> = noted
            .lines()
            .map(|line| entered(line, resource).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        assert_eq!(
            tenures.len(),
            runs,
            "{resource}: one tenure per run that took it"
        );
        let fences: Vec<i64> = tenures.iter().map(|(_, f)| *f).collect();
        let not_rising = critical::not_rising(&fences);
        assert!(
            not_rising.is_empty(),
            "{:?}: {resource}'s fences must strictly increase in the order its holders got \
             in:\n{}",
            db.kind,
            not_rising.join("\n")
        );
        // The history is the ground truth: one tenure after the other, each acquired and
        // released before the next, fences strictly increasing, in the order the commands saw.
        let events = history_but_renewals(db, resource);
        let acquired: Vec<i64> = events
            .iter()
            .filter(|(name, ..)| name == "acquired")
            .map(|(.., f)| *f)
            .collect();
        assert!(
            acquired.windows(2).all(|w| w[0] < w[1]),
            "{:?}: {resource}'s acquired fences must strictly increase: {acquired:?}",
            db.kind
        );
        let expected: Vec<_> = tenures
            .iter()
            .flat_map(|(owner, f)| [event("acquired", owner, *f), event("released", owner, *f)])
            .collect();
        assert_eq!(
            events, expected,
            "{:?}: {resource}'s history, one whole tenure after another as the holders saw them",
            db.kind
        );
        assert_eq!(
            db.status(resource),
            (1, json!({"held": false, "resource": resource})),
            "nothing held and nobody waiting at the end"
        );
    }
    assert_eq!(db.json(&["list"], 0), json!({"locks": []}));
}

#[test]
fn contending_sets_and_single_locks_never_overlap_never_deadlock_and_fences_rise() {
    // Every debug-build connect to PostgreSQL costs tens of milliseconds, and its waiters wake
    // on notices, so it gets fewer rounds.
    on_each_store(|db| match db.kind {
        Kind::Sqlite => contend(db, 8, 12, Duration::from_secs(30)),
        Kind::Postgres => contend(db, 8, 5, Duration::from_secs(30)),
    });
}

// ---------------------------------------------------------------------------------------------
// Fair waiting
// ---------------------------------------------------------------------------------------------

#[test]
fn a_queued_set_waiter_is_served_before_a_later_single_waiter_on_a_free_member() {
    on_each_store(|db| {
        let h = hold(db, "a", "H");
        let s = waiter(db, &["a", "b"], "S");
        until_waiting(db, "a", 1);
        until_waiting(db, "b", 1);
        // S holds nothing while it waits, but its place on b holds back everyone later.
        assert_eq!(
            db.status("b"),
            (1, json!({"held": false, "resource": "b", "waiting": 1})),
            "a set waiter holds no member while it waits"
        );
        assert_eq!(
            acquire(db, &["b"], "X", &[], 75),
            json!({"acquired": false, "resource": "b", "waiting": 1}),
            "a try-once acquire of b behind the set waiter"
        );
        let ran = db.file("ran");
        let out = output_exiting(
            &mut run_cmd(
                db,
                &["--resource", "b", "--", "touch", ran.to_str().unwrap()],
            ),
            75,
        );
        assert!(!ran.exists(), "a try-once run ran on b: {}", describe(&out));

        // A later waiter on b alone is queued behind S, though b is free: had it been
        // granted b at its first look, it would never be counted as waiting.
        let w = waiter(db, &["b"], "W");
        until_waiting(db, "b", 2);
        assert_eq!(
            db.status("b"),
            (1, json!({"held": false, "resource": "b", "waiting": 2}))
        );
        assert_eq!(
            acquire(db, &["b", "a"], "X", &[], 75),
            json!({
                "acquired": false,
                "resources": ["a", "b"],
                "blocked": [
                    {"resource": "a", "holder": h.holder(), "waiting": 1},
                    {"resource": "b", "waiting": 2},
                ],
            }),
            "a try-once set behind them: every member named, with its waiters"
        );

        db.json(&["release", "a", "--owner", "H"], 0);
        let got = answer(&s.finish(LONG), 0, "S, the set waiter");
        let s_locks = set_locks(&got, &["a", "b"], "S");
        assert!(s_locks[0].fence > h.fence, "{got}");
        let (code, status) = db.status("b");
        assert_eq!(
            (code, &status["lock"]["owner"], &status["waiting"]),
            (0, &json!("S"), &json!(1)),
            "S holds b and W still waits: {status}"
        );

        db.json(&["release", "a", "b", "--owner", "S"], 0);
        let got = answer(&w.finish(LONG), 0, "W, the later single waiter");
        let w_lock = Tenure::read(&got["lock"], Mode::Exclusive);
        assert_eq!(
            (w_lock.resource.as_str(), w_lock.owner.as_str()),
            ("b", "W")
        );
        assert!(w_lock.fence > s_locks[1].fence, "{got}");
        assert_eq!(
            history(db, "b"),
            [
                event("acquired", "S", s_locks[1].fence),
                event("released", "S", s_locks[1].fence),
                event("acquired", "W", w_lock.fence),
            ]
        );
        assert_free(db, "a");
    });
}

// ---------------------------------------------------------------------------------------------
// The answers of acquire, renew and release
// ---------------------------------------------------------------------------------------------

#[test]
fn acquire_of_a_set_answers_every_member_by_resource_each_with_its_own_fence() {
    on_each_store(|db| {
        let got = acquire(db, &["b", "a", "a"], "o", &[], 0);
        assert_eq!(keys(&got), ["acquired", "locks"], "{got}");
        assert_eq!(got["acquired"], true);
        let locks = set_locks(&got, &["a", "b"], "o");
        for tenure in &locks {
            assert_eq!(tenure.expires_ms() - tenure.acquired_ms(), 60_000, "{got}");
            assert_eq!(assert_held_by(db, &tenure.resource, "o"), tenure.lock());
            assert_eq!(
                event_names(&db.log(&[&tenure.resource])),
                ["acquired"],
                "one event per member"
            );
        }
        // Taken again by its owner, in another order: re-acquired, the same fences.
        let again = acquire(db, &["a", "b"], "o", &[], 0);
        let fences: Vec<i64> = set_locks(&again, &["a", "b"], "o")
            .iter()
            .map(|t| t.fence)
            .collect();
        assert_eq!(fences, [locks[0].fence, locks[1].fence], "{again}");

        // The text lines: one per member, by resource.
        let lines = db.text_lines(&["acquire", "d", "c", "--owner", "o", "--ttl", "60"], 0);
        let c = assert_held_by(db, "c", "o");
        let d = assert_held_by(db, "d", "o");
        let line = |lock: &Value| {
            format!(
                "acquired {} as o until {} (fence {})",
                lock["resource"].as_str().unwrap(),
                lock["expires_at"].as_str().unwrap(),
                fence(lock)
            )
        };
        assert_eq!(lines, [line(&c), line(&d)]);
    });
}

#[test]
fn a_set_that_collapses_to_one_member_is_a_single_resource_with_its_shapes() {
    on_each_store(|db| {
        let out = db.run(&["acquire", "x", "x", "x", "--owner", "o", "--ttl", "60"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let x = Tenure::read(&parse_line(&out.stdout)["lock"], Mode::Exclusive);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{{\"acquired\":true,\"lock\":{}}}\n", x.plain_lock_text()),
            "a single acquire's line, byte for byte"
        );
        let out = db.run(&["acquire", "x", "x", "--owner", "p", "--ttl", "60"]);
        assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{}\n", x.plain_busy_text()),
            "a single busy line"
        );
        let renewed = db.json(&["renew", "x", "x", "--owner", "o", "--ttl", "60"], 0);
        assert_eq!(keys(&renewed), ["lock", "renewed"], "{renewed}");
        assert_eq!(fence(&renewed["lock"]), x.fence, "{renewed}");
        assert_eq!(
            db.json(&["release", "x", "x", "--owner", "o"], 0),
            json!({"released": true, "resource": "x"})
        );
        assert_eq!(
            db.json(&["release", "x", "x", "--owner", "o"], 1),
            json!({"released": false, "resource": "x", "reason": "not_found"})
        );

        // `run` over one member twice exports the single names, not the set's, whatever it
        // inherited.
        let script = r#"printf '%s\n' "${DISTLOCK_RESOURCE-unset}" "${DISTLOCK_FENCE-unset}" \
            "${DISTLOCK_RESOURCES-unset}" "${DISTLOCK_FENCES-unset}" > "$D/env""#;
        let mut cmd = run_cmd(
            db,
            &sh_script(&["--resource", "x", "--resource", "x"], script, &[]),
        );
        cmd.env("DISTLOCK_RESOURCES", r#"["stale","names"]"#)
            .env("DISTLOCK_FENCES", r#"{"stale":1,"names":2}"#);
        output_exiting(&mut cmd, 0);
        let env = read_trimmed(&db.file("env"));
        let run_fence = history(db, "x").last().expect("the run's events").2;
        assert_eq!(env, format!("x\n{run_fence}\nunset\nunset"));
        assert_free(db, "x");
    });
}

#[test]
fn a_busy_set_names_every_busy_member_and_takes_nothing() {
    on_each_store(|db| {
        let h1 = hold(db, "a", "h1");
        let h2 = hold(db, "c", "h2");
        let before = db.state();
        let busy = json!({
            "acquired": false,
            "resources": ["a", "b", "c", "d"],
            "blocked": [
                {"resource": "a", "holder": h1.holder()},
                {"resource": "c", "holder": h2.holder()},
            ],
        });
        assert_eq!(acquire(db, &["d", "c", "b", "a"], "o", &[], 75), busy);
        // A wait that runs out: the same answer, and no place left in any queue.
        let waited = Instant::now();
        assert_eq!(
            acquire(db, &["d", "c", "b", "a"], "o", &["--wait", "1s"], 75),
            busy
        );
        assert!(waited.elapsed() >= Duration::from_secs(1), "it waited");
        for member in ["a", "b", "c", "d"] {
            assert_eq!(
                db.waiting(member),
                0,
                "{member}: the waiter left every queue"
            );
        }
        // A shared set beside an exclusive holder is busy too (one family: a read/write lock).
        assert_eq!(
            acquire(db, &["a", "b"], "o", &["--shared"], 75),
            json!({
                "acquired": false,
                "resources": ["a", "b"],
                "blocked": [{"resource": "a", "holder": h1.holder()}],
            })
        );
        assert_eq!(db.state(), before, "a busy set takes nothing");

        // The text line names each busy member as a single acquire's would.
        let single = |resource: &str| {
            text_line(
                db,
                &["acquire", resource, "--owner", "o", "--ttl", "60"],
                75,
            )
            .trim_start_matches("busy: ")
            .to_owned()
        };
        assert_eq!(
            text_line(
                db,
                &["acquire", "a", "b", "c", "d", "--owner", "o", "--ttl", "60"],
                75
            ),
            format!("busy: {}; {}", single("a"), single("c"))
        );

        // `run` is busy as well, and starts nothing; `--conflict-exit-code` says so quietly.
        let ran = db.file("ran");
        let touch = ["--", "touch", ran.to_str().unwrap()];
        let mut flags = vec!["--resource", "b", "--resource", "c", "--resource", "a"];
        flags.extend(touch);
        let out = output_exiting(&mut run_cmd(db, &flags), 75);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.stdout.is_empty()
                && stderr.lines().count() == 1
                && stderr.contains("a is held by h1")
                && stderr.contains("c is held by h2"),
            "one line naming every busy member: {}",
            describe(&out)
        );
        let mut flags = vec!["--resource", "b", "--resource", "a"];
        flags.extend(["--conflict-exit-code", "0"]);
        flags.extend(touch);
        let out = output_exiting(&mut run_cmd(db, &flags), 0);
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "{}",
            describe(&out)
        );
        assert!(!ran.exists(), "a busy run started its command");
        assert_eq!(db.state(), before, "a busy run takes nothing");
        // Nothing is reserved either: b and d are free for anyone.
        acquire(db, &["b", "d"], "p", &[], 0);
    });
}

#[test]
fn a_mismatch_on_any_member_comes_before_busy_names_the_first_and_takes_nothing() {
    on_each_store(|db| {
        // a: a full semaphore of 2 (busy for a third); c: exclusive; d: shared; e: a semaphore.
        hold_as(db, "a", "h1", Mode::Limit(2));
        hold_as(db, "a", "h2", Mode::Limit(2));
        let c = hold(db, "c", "h3");
        hold_as(db, "d", "h4", Mode::Shared);
        let e = hold_as(db, "e", "h5", Mode::Limit(2));
        let before = db.state();

        // c and d clash with --limit 2, a is busy: the answer names c, as acquire c would.
        let asked = Instant::now();
        let got = acquire(
            db,
            &["d", "c", "b", "a"],
            "o",
            &["--limit", "2", "--wait", "30s"],
            78,
        );
        assert!(asked.elapsed() < AT_ONCE, "78 at once, even with --wait");
        assert_eq!(got, mismatch("c", &[&c]));
        assert_eq!(got, acquire(db, &["c"], "o", &["--limit", "2"], 78));
        let limit_2 = ["--ttl", "60", "--limit", "2"];
        assert_eq!(
            text_line(
                db,
                &[
                    &["acquire", "d", "c", "b", "a", "--owner", "o"],
                    &limit_2[..]
                ]
                .concat(),
                78
            ),
            text_line(
                db,
                &[&["acquire", "c", "--owner", "o"], &limit_2[..]].concat(),
                78
            )
        );
        // c is merely busy for a shared request, e clashes: the mismatch is answered.
        assert_eq!(
            acquire(db, &["c", "e"], "o", &["--shared"], 78),
            mismatch("e", &[&e])
        );
        let ran = db.file("ran");
        let out = output_exiting(
            &mut run_cmd(
                db,
                &[
                    "--resource",
                    "e",
                    "--resource",
                    "c",
                    "--shared",
                    "--",
                    "touch",
                    ran.to_str().unwrap(),
                ],
            ),
            78,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.lines().count() == 1 && stderr.contains("mismatch: e is held by h5"),
            "{}",
            describe(&out)
        );
        assert!(!ran.exists(), "a mismatched run started its command");
        assert_eq!(db.state(), before, "a mismatch takes nothing");
        assert_eq!(
            db.status("b"),
            (1, json!({"held": false, "resource": "b"})),
            "and takes no place in any queue"
        );
    });
}

#[test]
fn renew_and_release_of_a_set_change_nothing_unless_the_owner_holds_every_member() {
    on_each_store(|db| {
        let got = acquire(db, &["a", "b"], "o", &[], 0);
        let locks = set_locks(&got, &["a", "b"], "o");
        hold(db, "c", "x");
        let before = db.state();
        let renew = |members: &[&str], code: i32| {
            let mut args = vec!["renew"];
            args.extend_from_slice(members);
            args.extend(["--owner", "o", "--ttl", "300"]);
            (db.json(&args, code), text_line(db, &args, code))
        };
        let release = |members: &[&str], code: i32| {
            let mut args = vec!["release"];
            args.extend_from_slice(members);
            args.extend(["--owner", "o"]);
            (db.json(&args, code), text_line(db, &args, code))
        };
        // The first member (by resource) that o does not hold decides, as it alone would.
        for (members, first, code) in [
            (&["a", "b", "d"][..], "d", 1),
            (&["d", "c", "b", "a"][..], "c", 77),
            (&["b", "c", "a"][..], "c", 77),
        ] {
            let reason = if code == 1 { "not_found" } else { "forbidden" };
            let renewed = renew(members, code);
            assert_eq!(
                renewed.0,
                json!({"renewed": false, "resource": first, "reason": reason})
            );
            assert_eq!(renewed, renew(&[first], code), "renew {members:?}");
            let released = release(members, code);
            assert_eq!(
                released.0,
                json!({"released": false, "resource": first, "reason": reason})
            );
            assert_eq!(released, release(&[first], code), "release {members:?}");
        }
        assert_eq!(
            db.state(),
            before,
            "nothing changed: a and b still held by o with their old expiry"
        );

        // Held, every member: renewed in one go, the same tenures.
        let renewed = db.json(&["renew", "b", "a", "--owner", "o", "--ttl", "300"], 0);
        assert_eq!(keys(&renewed), ["locks", "renewed"], "{renewed}");
        let after = set_locks(&renewed, &["a", "b"], "o");
        for (old, new) in locks.iter().zip(&after) {
            assert_eq!(
                (new.fence, new.acquired_at.as_str()),
                (old.fence, old.acquired_at.as_str())
            );
            assert!(new.expires_ms() >= old.expires_ms() + 200_000, "{renewed}");
        }
        let lines = db.text_lines(&["renew", "a", "b", "--owner", "o", "--ttl", "60"], 0);
        for (line, resource) in lines.iter().zip(["a", "b"]) {
            let lock = assert_held_by(db, resource, "o");
            assert_eq!(
                *line,
                format!(
                    "renewed {resource} as o until {} (fence {})",
                    lock["expires_at"].as_str().unwrap(),
                    fence(&lock)
                )
            );
        }
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(
            db.json(&["release", "b", "a", "--owner", "o"], 0),
            json!({"released": true, "resources": ["a", "b"]})
        );
        for (resource, tenure) in ["a", "b"].into_iter().zip(&locks) {
            assert_free(db, resource);
            assert_eq!(
                history(db, resource),
                [
                    event("acquired", "o", tenure.fence),
                    event("renewed", "o", tenure.fence),
                    event("renewed", "o", tenure.fence),
                    event("released", "o", tenure.fence),
                ]
            );
        }
        acquire(db, &["a", "b"], "o", &[], 0);
        assert_eq!(
            text_line(db, &["release", "a", "b", "--owner", "o"], 0),
            "released a, b"
        );
    });
}

/// `COMMAND MEMBERS… TAIL…`.
fn with<'a>(command: &'a str, members: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![command];
    args.extend_from_slice(members);
    args.extend_from_slice(tail);
    args
}

/// `run`'s flags for `members` (`--resource` each), then `tail`.
fn run_over<'a>(members: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    let mut args = Vec::new();
    for member in members {
        args.extend(["--resource", member]);
    }
    args.extend_from_slice(tail);
    args
}

#[test]
fn sixty_five_members_are_refused_with_64_and_create_nothing_sixty_four_are_taken() {
    let names: Vec<String> = (0..65).map(|n| format!("r{n:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (sixty_four, sixty_five) = (&names[..64], &names[..]);
    on_each_store(|db| {
        let ran = db.file("ran");
        let touch = ["--", "touch", ran.to_str().unwrap()];
        let refused = [
            with("acquire", sixty_five, &["--owner", "o", "--ttl", "60"]),
            with("renew", sixty_five, &["--owner", "o", "--ttl", "60"]),
            with("release", sixty_five, &["--owner", "o"]),
        ];
        let check = |out: &std::process::Output, what: &str| {
            assert_usage_error(out, &what);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.lines().count() == 1 && stderr.contains("64") && stderr.contains("65"),
                "{what}: one line saying at most 64, 65 given: {stderr:?}"
            );
        };
        for args in &refused {
            check(&db.run(args), args[0]);
        }
        check(
            &run_cmd(db, &run_over(sixty_five, &touch)).output().unwrap(),
            "run",
        );
        assert!(!ran.exists(), "run started its command");
        if !db.is_served() {
            match db.kind {
                Kind::Sqlite => assert!(!db.path().exists(), "a 64 created the store"),
                Kind::Postgres => {
                    let schemas: i64 = db
                        .pg_client()
                        .query_one(
                            "SELECT count(*) FROM pg_namespace WHERE nspname = 'distlock'",
                            &[],
                        )
                        .expect("read pg_namespace")
                        .get(0);
                    assert_eq!(schemas, 0, "a 64 created distlock's schema");
                }
            }
        }

        // 64, and 65 names that are 64 once repeats are dropped.
        let got = acquire(db, sixty_four, "o", &[], 0);
        set_locks(&got, sixty_four, "o");
        let mut repeated = sixty_four.to_vec();
        repeated.push("r00");
        acquire(db, &repeated, "o", &[], 0);
        let before = db.state();
        for args in &refused {
            check(&db.run(args), args[0]);
        }
        assert_eq!(db.state(), before, "a 64 changes nothing");
        db.json(
            &with("renew", sixty_four, &["--owner", "o", "--ttl", "60"]),
            0,
        );
        db.json(&with("release", sixty_four, &["--owner", "o"]), 0);
        let script = r#"printf '%s' "$DISTLOCK_FENCES" > "$D/fences""#;
        output_exiting(
            &mut run_cmd(db, &sh_script(&run_over(sixty_four, &[]), script, &[])),
            0,
        );
        let fences: BTreeMap<String, i64> =
            serde_json::from_str(&read_trimmed(&db.file("fences"))).expect("DISTLOCK_FENCES");
        assert_eq!(
            fences.keys().map(String::as_str).collect::<Vec<_>>(),
            sixty_four
        );
        assert_eq!(db.json(&["list"], 0), json!({"locks": []}));
    });
}

// ---------------------------------------------------------------------------------------------
// run over a set
// ---------------------------------------------------------------------------------------------

#[test]
fn run_over_a_set_exports_its_names_and_fences_passes_the_status_through_and_releases() {
    on_each_store(|db| {
        // What the command sees, and what status says of each member meanwhile.
        let script = r#"printf '%s\n' "${DISTLOCK_RESOURCES-unset}" "${DISTLOCK_FENCES-unset}" \
                "${DISTLOCK_RESOURCE-unset}" "${DISTLOCK_FENCE-unset}" "$DISTLOCK_OWNER" > "$D/env"
            "$DL" status a > "$D/status-a"; "$DL" status b > "$D/status-b"
            exit 7"#;
        let mut cmd = run_cmd(
            db,
            &sh_script(
                &["--resource", "b", "--resource", "a", "--resource", "b"],
                script,
                &[],
            ),
        );
        // An outer run's single names would mislead the command: they are taken out.
        cmd.env("DISTLOCK_RESOURCE", "outer")
            .env("DISTLOCK_FENCE", "999");
        let out = output_exiting(&mut cmd, 7);
        assert!(out.stderr.is_empty(), "{}", describe(&out));

        let env = read_trimmed(&db.file("env"));
        let lines: Vec<&str> = env.lines().collect();
        let [resources, fences, resource, single_fence, owner] = lines[..] else {
            panic!("five lines: {env:?}");
        };
        assert_eq!((resource, single_fence), ("unset", "unset"), "{env}");
        let resources: Value = serde_json::from_str(resources).expect("DISTLOCK_RESOURCES");
        assert_eq!(resources, json!(["a", "b"]), "a JSON array of the names");
        let fences: Value = serde_json::from_str(fences).expect("DISTLOCK_FENCES");
        for member in ["a", "b"] {
            let lock = parse_line(&fs::read(db.file(&format!("status-{member}"))).unwrap());
            assert_eq!(
                (&lock["lock"]["owner"], &lock["lock"]["fence"]),
                (&json!(owner), &fences[member]),
                "{member}: held by the run, under the exported fence, while it ran: {lock}"
            );
            let f = fences[member].as_i64().expect("a fence");
            assert_free(db, member);
            assert_eq!(
                history(db, member),
                [event("acquired", owner, f), event("released", owner, f)]
            );
        }
        assert_eq!(keys(&fences), ["a", "b"], "{fences}");
        assert_ne!(fences["a"], fences["b"], "each member's own fence");
    });
}

#[test]
fn a_broken_member_stops_the_run_with_124_and_the_other_member_is_released() {
    on_each_store(|db| {
        // Kept whole until the end: dropped, it kills the command's child.
        let held = held_run(db, &["--resource", "a", "--resource", "b", "--ttl", "3"]);
        let a = assert_held_by(db, "a", &held.owner);

        let broken_at = Instant::now();
        db.json(&["break", "b", "--reason", "stuck", "--by", "alice"], 0);
        let done = held.guard.finish(LONG);
        let took = broken_at.elapsed();
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        // It renews every ttl/3 = 1 s; allow 2 s more for a loaded machine.
        assert!(
            took < Duration::from_secs(3),
            "the run went on {took:?} after the break"
        );
        let stderr = done.stderr();
        assert!(
            stderr.contains("broken") && stderr.contains("alice") && stderr.contains("stuck"),
            "it says the lock was broken, by whom and why: {}",
            done.describe()
        );
        assert!(
            all_gone_within(&[held.child], Duration::from_secs(5)),
            "the command's child outlived the break"
        );
        // a was let go by the run (its lease had up to 2 s left), not left to expire.
        assert_free(db, "a");
        assert_eq!(
            history_but_renewals(db, "a"),
            [
                event("acquired", &held.owner, fence(&a)),
                event("released", &held.owner, fence(&a)),
            ]
        );
        let b: Vec<String> = history_but_renewals(db, "b")
            .into_iter()
            .map(|(name, ..)| name)
            .collect();
        assert_eq!(
            b,
            ["acquired", "broken"],
            "the run wrote nothing on b after the break"
        );
        assert_free(db, "b");
    });
}

#[test]
fn hold_at_least_over_a_set_keeps_every_member() {
    on_each_store(|db| {
        let script = r#"printf '%s' "$DISTLOCK_OWNER" > "$D/owner"; exit 3"#;
        let out = output_exiting(
            &mut run_cmd(
                db,
                &sh_script(
                    &[
                        "--resource",
                        "a",
                        "--resource",
                        "b",
                        "--hold-at-least",
                        "1m",
                    ],
                    script,
                    &[],
                ),
            ),
            3,
        );
        assert!(out.stderr.is_empty(), "{}", describe(&out));
        let owner = read_trimmed(&db.file("owner"));
        for member in ["a", "b"] {
            let lock = assert_held_by(db, member, &owner);
            let acquired_at = timestamp_millis(lock["acquired_at"].as_str().unwrap());
            let expires_at = timestamp_millis(lock["expires_at"].as_str().unwrap());
            assert_eq!(expires_at - acquired_at, 60_000, "start + 1 m: {lock}");
            assert_eq!(
                history(db, member),
                [
                    event("acquired", &owner, fence(&lock)),
                    event("kept", &owner, fence(&lock)),
                ]
            );
        }
        acquire(db, &["b"], "other", &[], 75);
    });
}

#[test]
fn an_interrupted_run_waiting_for_a_set_leaves_every_queue() {
    on_each_store(|db| {
        hold(db, "b", "H");
        let ran = db.file("ran");
        let run = db.spawn(
            &[
                "run",
                "--resource",
                "a",
                "--resource",
                "b",
                "--wait",
                "60s",
                "--",
                "touch",
                ran.to_str().unwrap(),
            ],
            "run",
        );
        until_waiting(db, "a", 1);
        until_waiting(db, "b", 1);
        run.signal(Signal::SIGINT);
        let done = run.finish(LONG);
        assert_eq!(done.code(), Some(130), "{}", done.describe());
        assert!(!ran.exists(), "the command ran");
        assert!(
            done.stderr().contains("interrupted while waiting for a, b"),
            "{}",
            done.describe()
        );
        // Through a server too, the places are given up before the run exits.
        for member in ["a", "b"] {
            assert_eq!(db.waiting(member), 0, "{member}'s queue is empty");
        }
        assert_eq!(db.status("a"), (1, json!({"held": false, "resource": "a"})));
        // a is not reserved for anyone any more.
        acquire(db, &["a"], "x", &[], 0);
        assert_held_by(db, "b", "H");
    });
}
