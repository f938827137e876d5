//! Fleet and operators: `--note` (why, or for whom, a lock is held) in every answer; `run
//! --hold-at-least` (a job in the crontab of many hosts runs once per period); `run
//! --max-runtime` (a cap for a hung job); `break` (an operator evicts a holder, and the
//! history records who and why).
//!
//! Commands are `sh -c` scripts that leave marker files in the test's scratch folder (`$D`),
//! written to a temporary name and renamed so they are never read half written. Times the
//! contract fixes (a kept lock's `expires_at`) are compared exactly; waits have deadlines with
//! generous slack, and lower bounds on durations follow from causality.

use serde_json::json;

use crate::common::output::parse_line;
use crate::common::process::describe;
use crate::common::store::{assert_held_by, each_store, run_cmd};

/// A command that leaves a mark if it ever runs.
const MARK: &str = r#"echo ran >> "$D/ran""#;

// ---------------------------------------------------------------------------------------------
// --note
// ---------------------------------------------------------------------------------------------

#[test]
fn note_is_stored_with_the_tenure_and_shown_by_status_list_log_and_the_busy_answers() {
    each_store(|db| {
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
    each_store(|db| {
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
    each_store(|db| {
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
