//! Fleet and operators: `--note` (why, or for whom, a lock is held) in every answer; `run
//! --hold-at-least` (a job in the crontab of many hosts runs once per period); `run
//! --max-runtime` (a cap for a hung job); `break` (an operator evicts a holder, and the
//! history records who and why).
//!
//! Commands are `sh -c` scripts that leave marker files in the test's scratch folder (`$D`),
//! written to a temporary name and renamed so they are never read half written. Times the
//! contract fixes (a kept lock's `expires_at`) are compared exactly; waits have deadlines with
//! generous slack, and lower bounds on durations follow from causality.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::files::read_trimmed;
use crate::common::output::{
    assert_usage_error, event_names, fence, keys, now_millis, parse_line, timestamp_millis,
};
use crate::common::pids::{KillOnDrop, all_gone_within, ids_of, is_gone, pid_in};
use crate::common::process::{Proc, describe, wait_for_file, wait_until};
use crate::common::store::{
    Kind, assert_free, assert_held_by, each_store_and_server, held_run, run_cmd, sh_script,
};

/// The deadline for anything that should take a few seconds at most.
const LONG: Duration = Duration::from_secs(20);

/// A command that leaves a mark if it ever runs.
const MARK: &str = r#"echo ran >> "$D/ran""#;

/// A command that writes its owner to `$D/owner`, then sleeps (as `sleep 60`) until it is
/// stopped.
const HOLD_AND_SLEEP: &str = r#"echo "$DISTLOCK_OWNER" > "$D/owner.tmp"; mv "$D/owner.tmp" "$D/owner"
    exec sleep 60"#;

/// A command with a tree under it: the shell (`sh.pid`), a child shell (`child.pid`) and, in a
/// session of its own, a grandchild that ignores SIGTERM (`gc.pid`, started from `$GRANDCHILD`).
const TREE: &str = r#"sh -c 'setsid sh -c "$GRANDCHILD" & echo $$ > "$D/child.tmp"; mv "$D/child.tmp" "$D/child.pid"; exec sleep 60' &
    echo $$ > "$D/sh.tmp"; mv "$D/sh.tmp" "$D/sh.pid"
    sleep 60"#;
/// [`TREE`]'s grandchild: ignores SIGTERM, so only SIGKILL (after `--kill-after`) ends it.
const GRANDCHILD: &str =
    r#"trap "" TERM; echo $$ > "$D/gc.tmp"; mv "$D/gc.tmp" "$D/gc.pid"; exec sleep 60"#;

// ---------------------------------------------------------------------------------------------
// --note
// ---------------------------------------------------------------------------------------------

#[test]
fn note_is_stored_with_the_tenure_and_shown_by_status_list_log_and_the_busy_answers() {
    each_store_and_server(|db| {
        let note = "deploy v1.4 by alice, pipeline 812";
        let acquired = db.json(
            &[
                "acquire", "deploy", "--owner", "ci-7", "--ttl", "60", "--note", note,
            ],
            0,
        );
        let lock = acquired["lock"].clone();
        assert_eq!(lock["note"], note, "{acquired}");
        assert_eq!(
            db.json(&["status", "deploy"], 0),
            json!({ "held": true, "lock": lock })
        );
        assert_eq!(db.json(&["list"], 0), json!({ "locks": [lock] }));
        let events = db.log(&["deploy"]);
        assert_eq!(
            events,
            [json!({
                "at": events[0]["at"],
                "resource": "deploy",
                "owner": "ci-7",
                "fence": lock["fence"],
                "event": "acquired",
                "expires_at": lock["expires_at"],
                "note": note,
            })]
        );

        // Busy: the holder object says why it is held.
        let holder = json!({ "owner": "ci-7", "expires_at": lock["expires_at"], "note": note });
        assert_eq!(
            db.json(&["acquire", "deploy", "--owner", "ci-8", "--ttl", "60"], 75),
            json!({ "acquired": false, "resource": "deploy", "holder": holder })
        );
        // run's busy line on stderr, the command never started.
        let out = run_cmd(db, &["--resource", "deploy", "--", "sh", "-c", MARK])
            .output()
            .expect("run distlock");
        assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.lines().count() == 1 && stderr.contains("ci-7") && stderr.contains(note),
            "run's busy line names the holder and its note: {}",
            describe(&out)
        );
        assert!(out.stdout.is_empty() && !db.file("ran").exists());

        // Shared holders: each holder object carries its own note, or none.
        let with = db.json(
            &[
                "acquire",
                "index",
                "--owner",
                "sitemap",
                "--ttl",
                "60",
                "--shared",
                "--note",
                "hourly sitemap",
            ],
            0,
        )["lock"]
            .clone();
        let without = db.json(
            &[
                "acquire", "index", "--owner", "report", "--ttl", "60", "--shared",
            ],
            0,
        )["lock"]
            .clone();
        let holders = json!([
            { "owner": "sitemap", "expires_at": with["expires_at"], "shared": true, "note": "hourly sitemap" },
            { "owner": "report", "expires_at": without["expires_at"], "shared": true },
        ]);
        assert_eq!(
            db.json(&["status", "index"], 0),
            json!({ "held": true, "lock": with, "locks": [with, without] })
        );
        assert_eq!(
            db.json(
                &["acquire", "index", "--owner", "rebuild", "--ttl", "60"],
                75
            ),
            json!({
                "acquired": false,
                "resource": "index",
                "holder": holders[0],
                "holders": holders,
            })
        );
        assert_eq!(
            db.json(
                &[
                    "acquire", "index", "--owner", "slots", "--ttl", "60", "--limit", "2",
                ],
                78
            ),
            json!({ "acquired": false, "resource": "index", "reason": "mismatch", "holders": holders })
        );
    });
}

#[test]
fn note_is_in_the_text_lines_of_acquire_status_list_log_and_busy() {
    each_store_and_server(|db| {
        let note = "nightly rebuild";
        let says_note = |line: &str| line.contains(&format!("note: {note}"));
        let acquire = [
            "acquire", "search", "--owner", "cron", "--ttl", "60", "--note", note,
        ];
        for (args, code) in [
            (&acquire[..], 0),
            (&["status", "search"][..], 0),
            (&["list"][..], 0),
            (&["log", "search"][..], 0),
            (
                &["acquire", "search", "--owner", "other", "--ttl", "60"][..],
                75,
            ),
        ] {
            let lines = db.text_lines(args, code);
            assert_eq!(lines.len(), 1, "{args:?}: {lines:?}");
            assert!(says_note(&lines[0]), "{args:?}: {lines:?}");
            assert!(lines[0].contains("cron"), "{args:?}: {lines:?}");
        }
        // run's busy line says it too, in either format.
        for format in ["json", "text"] {
            let out = db
                .cmd()
                .args(["--format", format, "run", "--resource", "search", "--"])
                .args(["sh", "-c", "exit 0"])
                .output()
                .expect("run distlock");
            assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
            assert!(
                says_note(&String::from_utf8_lossy(&out.stderr)),
                "{}",
                describe(&out)
            );
        }
    });
}

#[test]
fn reacquire_with_a_note_replaces_it_and_without_one_keeps_it() {
    each_store_and_server(|db| {
        let acquire = |extra: &[&str]| {
            let mut args = vec!["acquire", "deploy", "--owner", "X", "--ttl", "60"];
            args.extend_from_slice(extra);
            db.json(&args, 0)["lock"].clone()
        };
        let first = acquire(&["--note", "first"]);
        let fence = first["fence"].clone();
        let kept = acquire(&[]);
        assert_eq!(kept["note"], "first", "re-acquired without --note: {kept}");
        let replaced = acquire(&["--note", "second"]);
        assert_eq!(replaced["note"], "second", "{replaced}");
        for lock in [&kept, &replaced] {
            assert_eq!(lock["fence"], fence, "the same tenure: {lock}");
        }
        assert_eq!(assert_held_by(db, "deploy", "X"), replaced);
        let events = db.log(&["deploy"]);
        let seen: Vec<(&str, &str)> = events
            .iter()
            .map(|e| {
                (
                    e["event"].as_str().expect("event"),
                    e["note"].as_str().expect("note"),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("acquired", "first"),
                ("extended", "first"),
                ("extended", "second")
            ]
        );

        // A step under run --owner X joins the tenure: with --note it replaces the note, and
        // the command sees it; without, the note stays.
        let look = r#""$DL" status "$DISTLOCK_RESOURCE" > "$D/seen""#;
        for (extra, expected) in [(&["--note", "third"][..], "third"), (&[][..], "third")] {
            let mut args = vec!["--resource", "deploy", "--owner", "X"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "sh", "-c", look]);
            let out = run_cmd(db, &args).output().expect("run distlock");
            assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
            let seen = parse_line(&std::fs::read(db.file("seen")).expect("seen"));
            assert_eq!(seen["lock"]["note"], expected, "{extra:?}: {seen}");
            assert_eq!(seen["lock"]["fence"], fence, "{seen}");
            let after = assert_held_by(db, "deploy", "X");
            assert_eq!(after["note"], expected, "{extra:?}: {after}");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// --hold-at-least
// ---------------------------------------------------------------------------------------------

#[test]
fn hold_at_least_keeps_the_lock_until_the_tenures_start_plus_the_hold() {
    each_store_and_server(|db| {
        // Whatever the command's status: here it fails.
        let script = r#"echo "$DISTLOCK_OWNER" > "$D/owner"; exit 3"#;
        let out = run_cmd(
            db,
            &sh_script(
                &["--resource", "report", "--hold-at-least", "3s"],
                script,
                &[],
            ),
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "a kept lock is not worth a word (cron would mail it): {}",
            describe(&out)
        );
        let owner = read_trimmed(&db.file("owner"));
        let lock = assert_held_by(db, "report", &owner);
        let acquired_at = timestamp_millis(lock["acquired_at"].as_str().expect("acquired_at"));
        let expires_at = timestamp_millis(lock["expires_at"].as_str().expect("expires_at"));
        assert_eq!(expires_at - acquired_at, 3000, "start + 3 s: {lock}");

        let events = db.log(&["report"]);
        assert_eq!(event_names(&events), ["acquired", "kept"], "{events:?}");
        let kept = &events[1];
        assert_eq!(
            (&kept["owner"], &kept["fence"]),
            (&json!(owner), &lock["fence"]),
            "{kept}"
        );
        assert_eq!(
            keys(kept),
            ["at", "event", "expires_at", "fence", "owner", "resource"],
            "{kept}"
        );
        // Kept until the tenure's start + the hold.
        let start = timestamp_millis(events[0]["at"].as_str().unwrap());
        let until = timestamp_millis(kept["expires_at"].as_str().unwrap());
        assert_eq!(until - start, 3000, "{kept}");

        // Another host finds it busy until then, and free from then on.
        let busy = db.json(
            &["acquire", "report", "--owner", "other", "--ttl", "60"],
            75,
        );
        assert_eq!(busy["holder"]["owner"], owner.as_str(), "{busy}");
        wait_until(LONG, "the hold ends", || db.status("report").0 == 1);
        let seen_free = now_millis();
        assert!(
            seen_free + 10 >= expires_at,
            "free at {seen_free}, before the hold's end {expires_at}"
        );
        let next = db.json(&["acquire", "report", "--owner", "other", "--ttl", "60"], 0);
        assert!(fence(&next["lock"]) > fence(&lock), "{next}");
    });
}

#[test]
fn hold_at_least_already_past_when_the_command_ends_releases_as_usual() {
    each_store_and_server(|db| {
        let out = run_cmd(
            db,
            &[
                "--resource",
                "report",
                "--hold-at-least",
                "1s",
                "--",
                "sleep",
                "1.5",
            ],
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_free(db, "report");
        let events = db.log(&["report"]);
        assert_eq!(event_names(&events), ["acquired", "released"], "{events:?}");
    });
}

#[test]
fn a_second_host_skips_quietly_while_the_first_hosts_hold_lasts() {
    each_store_and_server(|db| {
        // The same crontab line on two hosts; the second fires after the first has finished.
        for host in ["host-a", "host-b"] {
            let out = run_cmd(
                db,
                &sh_script(
                    &[
                        "--resource",
                        "report",
                        "--owner",
                        host,
                        "--hold-at-least",
                        "5s",
                        "--conflict-exit-code",
                        "0",
                    ],
                    r#"echo "$DISTLOCK_OWNER" >> "$D/ran""#,
                    &[],
                ),
            )
            .output()
            .expect("run distlock");
            assert_eq!(out.status.code(), Some(0), "{host}: {}", describe(&out));
            assert!(
                out.stdout.is_empty() && out.stderr.is_empty(),
                "{host}: {}",
                describe(&out)
            );
        }
        assert_eq!(
            read_trimmed(&db.file("ran")),
            "host-a",
            "only the first ran"
        );
        assert_held_by(db, "report", "host-a");
        let events = db.log(&["report"]);
        assert_eq!(event_names(&events), ["acquired", "kept"], "{events:?}");
    });
}

#[test]
fn hold_at_least_does_not_keep_a_lock_whose_lease_was_lost() {
    each_store_and_server(|db| {
        let proc = Proc::spawn(
            &mut run_cmd(
                db,
                &sh_script(
                    &[
                        "--resource",
                        "report",
                        "--ttl",
                        "3",
                        "--hold-at-least",
                        "60s",
                    ],
                    HOLD_AND_SLEEP,
                    &[],
                ),
            ),
            db.dir.path(),
            "run",
        );
        wait_for_file(&db.file("owner"), LONG);
        let owner = read_trimmed(&db.file("owner"));
        let broke = db.json(&["break", "report", "--reason", "testing"], 0);
        assert_eq!(broke["locks"][0]["owner"], owner.as_str(), "{broke}");
        let done = proc.finish(LONG);
        assert_eq!(done.code(), Some(124), "{}", done.describe());

        assert_free(db, "report");
        let events = db.log(&["report"]);
        let names = event_names(&events);
        assert_eq!(names.first(), Some(&"acquired"), "{events:?}");
        assert_eq!(names.last(), Some(&"broken"), "{events:?}");
        assert!(
            !names.contains(&"kept"),
            "kept after a lost lease: {events:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// --max-runtime
// ---------------------------------------------------------------------------------------------

#[test]
fn max_runtime_stops_the_command_and_everything_it_started_and_releases() {
    each_store_and_server(|db| {
        let mut cmd = run_cmd(
            db,
            &sh_script(
                &[
                    "--resource",
                    "capped",
                    "--max-runtime",
                    "2s",
                    "--kill-after",
                    "1",
                ],
                TREE,
                &[],
            ),
        );
        cmd.env("GRANDCHILD", GRANDCHILD);
        let proc = Proc::spawn(&mut cmd, db.dir.path(), "run");
        let started = [
            (pid_in(&db.file("sh.pid"), LONG), "the command"),
            (pid_in(&db.file("child.pid"), LONG), "its child"),
            (pid_in(&db.file("gc.pid"), LONG), "its setsid grandchild"),
        ];
        let _cleanup = KillOnDrop(started.iter().map(|&(pid, _)| pid).collect());
        let (shell, grandchild) = (started[0].0, started[2].0);
        let ids = ids_of(grandchild).expect("the grandchild runs");
        assert!(
            ids.session == grandchild && ids_of(shell).is_some_and(|sh| sh.session != ids.session),
            "the grandchild left the command's session and group: {ids:?}"
        );

        let done = proc.finish(LONG);
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        assert!(
            done.elapsed >= Duration::from_secs(2),
            "stopped before its --max-runtime: {}",
            done.describe()
        );
        assert!(done.output.stdout.is_empty(), "{}", done.describe());
        let stderr = done.stderr();
        assert!(
            stderr.lines().count() == 1
                && stderr.starts_with("distlock: ")
                && stderr.contains("--max-runtime")
                && stderr.contains("2s"),
            "one line naming the limit: {}",
            done.describe()
        );
        all_gone_within(&started.map(|(pid, _)| pid), Duration::from_secs(5));
        let survivors: Vec<String> = started
            .iter()
            .filter(|&&(pid, _)| !is_gone(pid))
            .map(|&(pid, what)| format!("{what} (pid {pid})"))
            .collect();
        assert!(
            survivors.is_empty(),
            "outlived --max-runtime: {survivors:?}"
        );

        assert_free(db, "capped");
        let events = db.log(&["capped"]);
        assert_eq!(event_names(&events), ["acquired", "released"], "{events:?}");
    });
}

#[test]
fn max_runtime_under_hold_at_least_keeps_the_lock_until_the_hold_ends() {
    each_store_and_server(|db| {
        let done = Proc::spawn(
            &mut run_cmd(
                db,
                &sh_script(
                    &[
                        "--resource",
                        "capped",
                        "--max-runtime",
                        "1s",
                        "--hold-at-least",
                        "30s",
                    ],
                    HOLD_AND_SLEEP,
                    &[],
                ),
            ),
            db.dir.path(),
            "run",
        )
        .finish(LONG);
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        let stderr = done.stderr();
        assert!(
            stderr.lines().count() == 1 && stderr.contains("--max-runtime"),
            "{}",
            done.describe()
        );
        let owner = read_trimmed(&db.file("owner"));
        let lock = assert_held_by(db, "capped", &owner);
        let acquired_at = timestamp_millis(lock["acquired_at"].as_str().expect("acquired_at"));
        let expires_at = timestamp_millis(lock["expires_at"].as_str().expect("expires_at"));
        assert_eq!(expires_at - acquired_at, 30_000, "start + 30 s: {lock}");
        let events = db.log(&["capped"]);
        assert_eq!(event_names(&events), ["acquired", "kept"], "{events:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// break
// ---------------------------------------------------------------------------------------------

#[test]
fn break_with_owner_removes_that_tenure_and_leaves_the_others() {
    each_store_and_server(|db| {
        let shared = |owner: &str, extra: &[&str]| {
            let mut args = vec![
                "acquire", "index", "--owner", owner, "--ttl", "60", "--shared",
            ];
            args.extend_from_slice(extra);
            db.json(&args, 0)["lock"].clone()
        };
        let a = shared("reader-a", &["--note", "weekly report"]);
        let b = shared("reader-b", &[]);

        // Nothing of reader-c's to break: 1, and nothing changes.
        let before = db.state();
        assert_eq!(
            db.json(
                &["break", "index", "--reason", "x", "--owner", "reader-c"],
                1
            ),
            json!({ "broken": false, "resource": "index", "reason": "not_found" })
        );
        assert_eq!(db.state(), before);

        let broke = db.json(
            &[
                "break",
                "index",
                "--reason",
                "reader-a hung on NFS",
                "--owner",
                "reader-a",
                "--by",
                "alice",
            ],
            0,
        );
        assert_eq!(
            broke,
            json!({ "broken": true, "resource": "index", "locks": [a] })
        );
        assert_eq!(
            db.json(&["status", "index"], 0),
            json!({ "held": true, "lock": b, "locks": [b] }),
            "reader-b's tenure is untouched"
        );
        let events = db.log(&["index"]);
        let last = events.last().expect("events");
        assert_eq!(
            *last,
            json!({
                "at": last["at"],
                "resource": "index",
                "owner": "reader-a",
                "fence": a["fence"],
                "event": "broken",
                "shared": true,
                "note": "weekly report",
                "by": "alice",
                "reason": "reader-a hung on NFS",
            })
        );
        // The evicted holder's script: its tenure is gone, and others hold the resource.
        db.json(
            &["renew", "index", "--owner", "reader-a", "--ttl", "60"],
            77,
        );
        db.json(&["release", "index", "--owner", "reader-a"], 77);
        db.json(&["renew", "index", "--owner", "reader-b", "--ttl", "60"], 0);
    });
}

#[test]
fn break_removes_every_live_tenure_and_the_next_tenure_gets_a_higher_fence() {
    each_store_and_server(|db| {
        let slots: Vec<Value> = ["s1", "s2", "s3"]
            .iter()
            .map(|owner| {
                db.json(
                    &[
                        "acquire", "slots", "--owner", owner, "--ttl", "60", "--limit", "3",
                    ],
                    0,
                )["lock"]
                    .clone()
            })
            .collect();
        // An owner in the environment does not narrow it down: only --owner does.
        let out = db
            .cmd()
            .env("DISTLOCK_OWNER", "s1")
            .args(["break", "slots", "--reason", "maintenance", "--by", "ops"])
            .output()
            .expect("run distlock");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(
            parse_line(&out.stdout),
            json!({ "broken": true, "resource": "slots", "locks": slots })
        );
        assert_free(db, "slots");
        let events = db.log(&["slots"]);
        let broken: Vec<Value> = events
            .iter()
            .filter(|e| e["event"] == "broken")
            .map(|e| json!([e["owner"], e["by"], e["reason"]]))
            .collect();
        assert_eq!(
            broken,
            ["s1", "s2", "s3"].map(|owner| json!([owner, "ops", "maintenance"])),
            "{events:?}"
        );
        // A script that held it with `acquire`: its renew and release find nothing (1).
        db.json(&["renew", "slots", "--owner", "s1", "--ttl", "60"], 1);
        db.json(&["release", "slots", "--owner", "s1"], 1);

        let highest = slots.iter().map(fence).max().expect("three tenures");
        let next = db.json(
            &[
                "acquire", "slots", "--owner", "s4", "--ttl", "60", "--limit", "3",
            ],
            0,
        );
        assert!(fence(&next["lock"]) > highest, "{next}");

        // Nothing live: 1, nothing changes; an expired tenure is not live either.
        db.json(&["release", "slots", "--owner", "s4"], 0);
        db.json(&["acquire", "brief", "--owner", "w", "--ttl", "1"], 0);
        wait_until(LONG, "the 1 s lease ends", || db.status("brief").0 == 1);
        let before = db.state();
        for resource in ["slots", "brief", "never-held"] {
            assert_eq!(
                db.json(&["break", resource, "--reason", "again"], 1),
                json!({ "broken": false, "resource": resource, "reason": "not_found" })
            );
        }
        assert_eq!(
            db.state(),
            before,
            "a break that matched nothing wrote something"
        );
    });
}

#[test]
fn break_by_defaults_to_user_at_hostname() {
    let hostname = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8 hostname");
    each_store_and_server(|db| {
        for (user, resource) in [(Some("alice"), "with-user"), (None, "without")] {
            db.json(&["acquire", resource, "--owner", "w", "--ttl", "60"], 0);
            let mut cmd = db.cmd();
            cmd.env_remove("USER").env_remove("LOGNAME");
            if let Some(user) = user {
                cmd.env("USER", user);
            }
            let out = cmd
                .args(["break", resource, "--reason", "stuck"])
                .output()
                .expect("run distlock");
            assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
            let events = db.log(&[resource]);
            let by = events.last().expect("an event")["by"]
                .as_str()
                .expect("\"by\" is a string")
                .to_owned();
            let (name, host) = by.split_once('@').expect("<user>@<hostname>");
            assert_eq!(host, hostname, "{by}");
            match user {
                Some(user) => assert_eq!(name, user, "{by}"),
                None => assert!(!name.is_empty(), "{by}: a user from the system"),
            }
        }
    });
}

#[test]
fn break_stops_a_held_run_at_its_next_renewal_and_it_says_who_and_why() {
    each_store_and_server(|db| {
        // Kept whole until the end: dropped, it kills the command's child.
        let held = held_run(
            db,
            &["--resource", "report", "--ttl", "6", "--note", "web-3"],
        );

        let broken_at = Instant::now();
        let broke = db.json(
            &[
                "break",
                "report",
                "--reason",
                "hung since 03:00",
                "--by",
                "alice",
            ],
            0,
        );
        let lock = &broke["locks"][0];
        assert_eq!(
            (&lock["owner"], &lock["note"]),
            (&json!(held.owner), &json!("web-3"))
        );
        let done = held.guard.finish(LONG);
        let took = broken_at.elapsed();
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        // It renews every ttl/3 = 2 s; allow 2 s more for a loaded machine.
        assert!(
            took < Duration::from_secs(4),
            "the run went on {took:?} after the break"
        );
        let stderr = done.stderr();
        assert!(
            stderr.lines().count() == 1
                && stderr.contains("report")
                && stderr.contains("broken")
                && stderr.contains("alice")
                && stderr.contains("hung since 03:00"),
            "one line saying it was broken, by whom and why: {}",
            done.describe()
        );
        assert!(
            all_gone_within(&[held.child], Duration::from_secs(5)),
            "the command's child outlived the break"
        );

        assert_free(db, "report");
        let events = db.log(&["report"]);
        let last = events.last().expect("events");
        assert_eq!(
            (&last["event"], &last["by"], &last["reason"]),
            (
                &json!("broken"),
                &json!("alice"),
                &json!("hung since 03:00")
            ),
            "the evicted run wrote nothing after the break: {events:?}"
        );
        let next = db.json(&["acquire", "report", "--owner", "next", "--ttl", "60"], 0);
        assert!(fence(&next["lock"]) > fence(lock), "{next}");
    });
}

#[test]
fn an_evicted_run_says_who_broke_it_even_when_others_hold_the_resource_by_then() {
    // The contract: a run whose tenure was broken "says on stderr that the lock was broken, by
    // whom and why". Its next renewal answers 77, not 1, when others hold the resource by
    // then: beside shared holders, and when a waiter got the lock the moment it was broken.
    each_store_and_server(|db| {
        db.json(
            &[
                "acquire", "index", "--owner", "other", "--ttl", "60", "--shared",
            ],
            0,
        );
        let shared = Proc::spawn(
            &mut run_cmd(
                db,
                &sh_script(
                    &["--resource", "index", "--shared", "--ttl", "6"],
                    HOLD_AND_SLEEP,
                    &[],
                ),
            ),
            db.dir.path(),
            "shared",
        );
        wait_for_file(&db.file("owner"), LONG);
        let owner = read_trimmed(&db.file("owner"));
        db.json(
            &[
                "break", "index", "--reason", "stuck", "--by", "alice", "--owner", &owner,
            ],
            0,
        );
        let done = shared.finish(LONG);
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        assert!(
            done.stderr().contains("broken by alice (stuck)"),
            "beside a shared holder: {}",
            done.describe()
        );

        let exclusive = Proc::spawn(
            &mut run_cmd(
                db,
                &["--resource", "deploy", "--ttl", "6", "--", "sleep", "60"],
            ),
            db.dir.path(),
            "exclusive",
        );
        wait_until(LONG, "the run holds deploy", || db.status("deploy").0 == 0);
        let waiter = db.spawn(
            &[
                "acquire", "deploy", "--owner", "next", "--ttl", "60", "--wait", "30s",
            ],
            "waiter",
        );
        wait_until(LONG, "the waiter queues", || db.waiting("deploy") == 1);
        db.json(
            &["break", "deploy", "--reason", "stuck", "--by", "alice"],
            0,
        );
        let waited = waiter.finish(LONG);
        assert_eq!(waited.code(), Some(0), "{}", waited.describe());
        let done = exclusive.finish(LONG);
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        assert!(
            done.stderr().contains("broken by alice (stuck)"),
            "with a waiter that took the lock: {}",
            done.describe()
        );
    });
}

#[test]
fn log_text_of_a_broken_event_says_who_broke_it_and_why() {
    // `--format text` prints the same facts as JSON; the JSON event has "by" and "reason".
    each_store_and_server(|db| {
        db.json(&["acquire", "r", "--owner", "holder", "--ttl", "60"], 0);
        db.json(&["break", "r", "--reason", "hung", "--by", "alice"], 0);
        let lines = db.text_lines(&["log", "r"], 0);
        let last = lines.last().expect("a line");
        assert!(
            last.contains("alice") && last.contains("hung") && !last.contains("by holder"),
            "{last:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

#[test]
fn note_reason_and_by_validation_rows_exit_64_and_change_nothing() {
    // Empty, blank, over 1024 bytes after trimming (in ASCII, and in two-byte characters with
    // blanks around them), control characters.
    let long_ascii = "x".repeat(1025);
    let long_wide = format!("  {}x  ", "é".repeat(512));
    let refused = [
        "",
        "   ",
        &long_ascii,
        &long_wide,
        "tab\there",
        "two\nlines",
        "bell\u{7}",
        "\u{1b}[31mred",
        "del\u{7f}",
    ];
    each_store_and_server(|db| {
        db.json(
            &[
                "acquire",
                "held",
                "--owner",
                "a",
                "--ttl",
                "60",
                "--note",
                "as it was",
            ],
            0,
        );
        let before = db.state();
        for text in refused {
            let note_eq = format!("--note={text}");
            let cases = [
                vec![
                    "acquire", "held", "--owner", "a", "--ttl", "60", "--note", text,
                ],
                vec!["acquire", "fresh", "--owner", "b", "--ttl", "60", &note_eq],
                vec![
                    "run",
                    "--resource",
                    "free",
                    "--note",
                    text,
                    "--",
                    "sh",
                    "-c",
                    MARK,
                ],
                vec!["break", "held", "--reason", text],
                vec!["break", "held", "--reason", "ok", "--by", text],
            ];
            for args in &cases {
                let out = db
                    .cmd()
                    .env("D", db.dir.path())
                    .args(args)
                    .output()
                    .expect("run distlock");
                assert_usage_error(&out, args);
            }
            assert_eq!(db.state(), before, "{text:?} changed the store");
        }
        assert!(
            !db.file("ran").exists(),
            "a refused run started its command"
        );
    });
}

#[test]
fn note_reason_and_by_are_trimmed_and_may_be_1024_bytes() {
    let wide = "é".repeat(512);
    let ascii = "r".repeat(1024);
    each_store_and_server(|db| {
        let lock = db.json(
            &[
                "acquire",
                "long",
                "--owner",
                "a",
                "--ttl",
                "60",
                "--note",
                &format!("  {wide}  "),
            ],
            0,
        )["lock"]
            .clone();
        assert_eq!(lock["note"], wide.as_str(), "trimmed, 1024 bytes kept");
        db.json(
            &[
                "break",
                "long",
                "--reason",
                &format!(" {ascii} "),
                "--by",
                &format!("  {wide}"),
            ],
            0,
        );
        let events = db.log(&["long"]);
        let last = events.last().expect("events");
        assert_eq!(
            (&last["reason"], &last["by"]),
            (&json!(ascii), &json!(wide)),
            "trimmed, 1024 bytes kept"
        );
    });
}

#[test]
fn hold_at_least_and_max_runtime_validation_rows_exit_64_and_start_nothing() {
    each_store_and_server(|db| {
        for flag in ["--hold-at-least", "--max-runtime"] {
            for value in [
                "0", "0s", "0.5s", "999ms", "366d", "8761h", "-1", "-5s", "soon", "",
            ] {
                let joined = format!("{flag}={value}");
                for args in [
                    vec!["--resource", "u", flag, value, "--", "sh", "-c", MARK],
                    vec!["--resource", "u", &joined, "--", "sh", "-c", MARK],
                ] {
                    let out = run_cmd(db, &args).output().expect("run distlock");
                    assert_usage_error(&out, &args);
                }
            }
        }
        assert!(
            !db.file("ran").exists(),
            "a refused run started its command"
        );
        // (A server in front of the store made it as it started.)
        if db.kind == Kind::Sqlite && !db.is_served() {
            assert!(!db.path().exists(), "a usage error created the store");
        }
        assert!(db.log(&["u"]).is_empty(), "a usage error wrote history");

        // The bounds themselves are accepted.
        for (flag, value) in [
            ("--hold-at-least", "1s"),
            ("--hold-at-least", "365d"),
            ("--max-runtime", "1s"),
            ("--max-runtime", "365d"),
        ] {
            let resource = format!("bound{flag}{value}");
            let out = run_cmd(db, &["--resource", &resource, flag, value, "--", "true"])
                .output()
                .expect("run distlock");
            assert_eq!(
                out.status.code(),
                Some(0),
                "{flag} {value}: {}",
                describe(&out)
            );
        }
    });
}

#[test]
fn break_without_a_reason_or_with_bad_arguments_exits_64_and_changes_nothing() {
    each_store_and_server(|db| {
        db.json(&["acquire", "held", "--owner", "a", "--ttl", "60"], 0);
        let before = db.state();
        for args in [
            &["break", "held"][..],
            &["break", "held", "--reason"],
            &["break", "--reason", "stuck"],
            &["break", "held", "--reason", "stuck", "--owner", ""],
            &["break", "held", "--reason", "stuck", "--owner", "   "],
            &["break", "", "--reason", "stuck"],
            &["break", "held", "--reason", "stuck", "--bogus"],
            &["break", "held", "extra", "--reason", "stuck"],
        ] {
            assert_usage_error(&db.run(args), &args);
        }
        assert_eq!(db.state(), before);
        assert_held_by(db, "held", "a");
    });
}

#[test]
fn hold_at_least_keeps_nothing_for_a_command_that_never_started() {
    // A host missing the job (127) or unable to run it (126) has not run the period's job:
    // another host must still be able to.
    each_store_and_server(|db| {
        let dir = db.dir.path().display().to_string();
        for (command, code) in [("/nonexistent/report.sh", 127), (dir.as_str(), 126)] {
            let out = db.run(&[
                "run",
                "--resource",
                "report",
                "--hold-at-least",
                "60s",
                "--",
                command,
            ]);
            assert_eq!(out.status.code(), Some(code), "{command}");
            assert_free(db, "report");
        }
    });
}
