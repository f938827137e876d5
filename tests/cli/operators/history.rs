//! The operator commands — `list`, `log`, `gc` — and their `--format text` lines, through the
//! real binary on both stores ([`each_store`]); and the waiting line that `acquire --wait` and
//! `run --wait` draw on a terminal (SQLite is enough there: the line does not depend on the
//! store).
//!
//! Expiry tests use a 1 s TTL and sleep until the test's clock is [`PAST_EXPIRY_MS`] past the
//! lock's `expires_at`. The only timing assumptions are the ones the behaviour needs: events
//! made more than 2 s ago are older than `--since 2s`, events made a moment ago are not.
//!
//! `list` promises byte order; a PostgreSQL database created with a dictionary collation (ICU
//! `en-US`) checks that the promise does not depend on the server's default collation.
//!
//! The terminal tests run distlock under a pseudo-terminal with `script(1)` from util-linux
//! (or, without it, Python's `pty` module) and read everything the terminal showed.

use std::io::Read;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, sleep};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::output::{
    assert_store_error, fence, keys, now_millis, parse_line, parse_lines, timestamp_millis,
};
use crate::common::process::{BIN, describe, wait_for, wait_or_kill};
use crate::common::store::{
    Db, Kind, each_store, each_store_and_server, every_store, every_store_and_server, sh_script,
};

/// How far past a lock's `expires_at` (by the test's clock) a test sleeps before it relies on
/// the lock having expired.
const PAST_EXPIRY_MS: i64 = 200;

/// The documented keys of a lock object, sorted.
const LOCK_KEYS: [&str; 5] = ["acquired_at", "expires_at", "fence", "owner", "resource"];

/// The sequence that clears the waiting line: back to the start of the line, erase it.
const CLEAR: &str = "\r\x1b[2K";

fn text_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} must be a string in {value}"))
}

/// Checks a lock object's exact keys and the format of its times; returns `expires_at` in ms.
fn check_lock(lock: &Value) -> i64 {
    assert_eq!(keys(lock), LOCK_KEYS, "lock object {lock}");
    fence(lock);
    text_of(lock, "resource");
    text_of(lock, "owner");
    let acquired_at = timestamp_millis(text_of(lock, "acquired_at"));
    let expires_at = timestamp_millis(text_of(lock, "expires_at"));
    assert!(acquired_at < expires_at, "{lock}");
    expires_at
}

/// `acquire` that must succeed; returns the lock object.
fn acquire(db: &Db, resource: &str, owner: &str, ttl: &str) -> Value {
    let out = db.json(&["acquire", resource, "--owner", owner, "--ttl", ttl], 0);
    assert_eq!(out["acquired"], json!(true), "{out}");
    let lock = out["lock"].clone();
    check_lock(&lock);
    assert_eq!(lock["resource"], json!(resource), "{lock}");
    assert_eq!(lock["owner"], json!(owner), "{lock}");
    lock
}

fn release(db: &Db, resource: &str, owner: &str) {
    db.json(&["release", resource, "--owner", owner], 0);
}

/// Sleeps until the test's clock is well past the lock's `expires_at`.
fn sleep_past_expiry(lock: &Value) {
    let deadline = check_lock(lock) + PAST_EXPIRY_MS;
    while now_millis() < deadline {
        sleep(Duration::from_millis(20));
    }
}

/// The resources of a `list` answer, after checking its exact shape.
fn listed(list: &Value) -> Vec<&str> {
    assert_eq!(keys(list), ["locks"], "{list}");
    list["locks"]
        .as_array()
        .unwrap_or_else(|| panic!("locks must be an array in {list}"))
        .iter()
        .map(|lock| {
            check_lock(lock);
            text_of(lock, "resource")
        })
        .collect()
}

/// `log ARGS…`: exit 0, nothing on stderr, one JSON object per line with exactly the
/// documented keys (`previous_owner` only on `taken_over`).
fn log(db: &Db, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["log"];
    all.extend_from_slice(args);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(0), "{all:?}: {}", describe(&out));
    assert!(out.stderr.is_empty(), "{all:?}: {}", describe(&out));
    assert!(
        out.stdout.is_empty() || out.stdout.ends_with(b"\n"),
        "{all:?}: every line ends with a newline: {}",
        describe(&out)
    );
    parse_lines(&out.stdout)
        .into_iter()
        .map(|event| {
            let kind = text_of(&event, "event");
            assert!(
                ["acquired", "extended", "renewed", "released", "taken_over"].contains(&kind),
                "unknown event kind in {event}"
            );
            // Every event but a release says the end of the lease it left.
            let expected: &[&str] = match kind {
                "taken_over" => &[
                    "at",
                    "event",
                    "expires_at",
                    "fence",
                    "owner",
                    "previous_owner",
                    "resource",
                ],
                "released" => &["at", "event", "fence", "owner", "resource"],
                _ => &["at", "event", "expires_at", "fence", "owner", "resource"],
            };
            assert_eq!(keys(&event), expected, "{all:?}: {event}");
            let at = timestamp_millis(text_of(&event, "at"));
            if kind != "released" {
                assert!(
                    timestamp_millis(text_of(&event, "expires_at")) > at,
                    "{event}"
                );
            }
            fence(&event);
            text_of(&event, "resource");
            text_of(&event, "owner");
            if kind == "taken_over" {
                text_of(&event, "previous_owner");
            }
            event
        })
        .collect()
}

/// Events in a form that reads well in a failed assertion: `resource event owner #fence`,
/// followed by ` from previous` on a takeover.
fn brief(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let mut line = format!(
                "{} {} {} #{}",
                text_of(e, "resource"),
                text_of(e, "event"),
                text_of(e, "owner"),
                fence(e)
            );
            if let Some(previous) = e.get("previous_owner") {
                line.push_str(&format!(" from {}", previous.as_str().expect("a string")));
            }
            line
        })
        .collect()
}

/// Runs `f`, checking that the live locks and the whole history are unchanged.
fn untouched(db: &Db, what: &str, f: impl FnOnce()) {
    let before = db.state();
    f();
    assert_eq!(
        db.state(),
        before,
        "{what} must change nothing and log nothing"
    );
}

/// The number of rows in the store's lock table, live or expired, read directly.
fn lock_rows(db: &Db) -> i64 {
    match db.kind {
        Kind::Sqlite => rusqlite::Connection::open(db.path())
            .expect("open the SQLite file")
            .query_row("SELECT count(*) FROM locks", [], |r| r.get(0))
            .expect("count the lock rows"),
        Kind::Postgres => db
            .pg_client()
            .query_one("SELECT count(*) FROM distlock.locks", &[])
            .expect("count the lock rows")
            .get(0),
    }
}

// ---------------------------------------------------------------------------------------------
// list

#[test]
fn list_shows_only_live_locks_sorted_by_resource_bytes() {
    each_store_and_server(|db| {
        assert_eq!(db.json(&["list"], 0), json!({"locks": []}));
        let expired = acquire(db, "a:1", "w0", "1");
        let mut live = Vec::new();
        for (resource, owner) in [
            ("b", "w1"),
            ("a", "w2"),
            ("é", "w3"),
            ("a:2", "w4"),
            ("B", "w5"),
        ] {
            live.push(acquire(db, resource, owner, "60"));
        }
        acquire(db, "a:3", "w6", "60");
        release(db, "a:3", "w6");
        sleep_past_expiry(&expired);
        db.json(&["status", "a:1"], 1);

        let list = db.json(&["list"], 0);
        // Byte order: upper case before lower case, "a" before "a:2", "é" (0xC3 0xA9) last.
        assert_eq!(listed(&list), ["B", "a", "a:2", "b", "é"], "{list}");
        let by_name = |name: &str| {
            live.iter()
                .find(|l| l["resource"] == json!(name))
                .expect("a live lock")
                .clone()
        };
        // The very lock objects `acquire` printed, nothing more.
        let all: Vec<Value> = ["B", "a", "a:2", "b", "é"].map(by_name).to_vec();
        assert_eq!(list, json!({ "locks": all }));
        assert_eq!(db.json(&["list", "--prefix", ""], 0), list);

        for (prefix, expected) in [
            ("a", vec!["a", "a:2"]),
            ("a:", vec!["a:2"]),
            ("b", vec!["b"]),
            ("B", vec!["B"]),
            ("é", vec!["é"]),
        ] {
            let answer = db.json(&["list", "--prefix", prefix], 0);
            let locks: Vec<Value> = expected.iter().map(|name| by_name(name)).collect();
            assert_eq!(answer, json!({ "locks": locks }), "--prefix {prefix:?}");
        }
        // Expired and released locks stay out of a prefix match too; the prefix is literal text,
        // not a pattern; case matters.
        for prefix in ["a:1", "a:3", "z", "A", "%", "_", "a%", "a_2", "*", "a*"] {
            assert_eq!(
                db.json(&["list", "--prefix", prefix], 0),
                json!({"locks": []}),
                "--prefix {prefix:?}"
            );
        }
    });
}

#[test]
fn list_sorts_by_bytes_whatever_the_postgres_database_collation() {
    // ICU `en-US`: "a" < "B" < "b".
    let Some(db) = Db::postgres_with(
        "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'",
        "PostgreSQL collation test",
    ) else {
        return;
    };
    let mut client = db.pg_client();
    let dictionary: bool = client
        .query_one("SELECT 'a' < 'B'", &[])
        .expect("compare")
        .get(0);
    assert!(dictionary, "the test database must sort like a dictionary");
    let distlock = |args: &[&str]| db.json(args, 0);
    for name in ["b", "a", "é", "a:2", "B"] {
        distlock(&["acquire", name, "--owner", "w1", "--ttl", "60"]);
    }
    let list = distlock(&["list"]);
    assert_eq!(listed(&list), ["B", "a", "a:2", "b", "é"], "{list}");
    let list = distlock(&["list", "--prefix", "a"]);
    assert_eq!(listed(&list), ["a", "a:2"], "{list}");
}

// ---------------------------------------------------------------------------------------------
// log

#[test]
fn log_records_each_kind_of_change_oldest_first() {
    each_store_and_server(|db| {
        let start = now_millis();
        assert!(log(db, &[]).is_empty(), "a new store has no history");
        let first = acquire(db, "job", "w1", "60");
        let f1 = fence(&first);
        let extended = acquire(db, "job", "w1", "60");
        assert_eq!(fence(&extended), f1);

        // Busy attempts (with and without --wait polling) and refused renew/release: nothing.
        untouched(db, "busy attempts and refusals by another owner", || {
            db.json(&["acquire", "job", "--owner", "w2", "--ttl", "5"], 75);
            db.json(
                &[
                    "acquire", "job", "--owner", "w2", "--ttl", "5", "--wait", "1s",
                ],
                75,
            );
            db.json(&["renew", "job", "--owner", "w2", "--ttl", "5"], 77);
            db.json(&["release", "job", "--owner", "w2"], 77);
            db.json(&["renew", "missing", "--owner", "w2", "--ttl", "5"], 1);
            db.json(&["release", "missing", "--owner", "w2"], 1);
        });

        let renewed = db.json(&["renew", "job", "--owner", "w1", "--ttl", "1"], 0);
        assert_eq!(fence(&renewed["lock"]), f1);
        sleep_past_expiry(&renewed["lock"]);
        untouched(db, "renew and release of an expired lock", || {
            db.json(&["renew", "job", "--owner", "w1", "--ttl", "5"], 1);
            db.json(&["release", "job", "--owner", "w1"], 1);
            db.json(&["release", "job", "--owner", "w2"], 1);
        });

        let taken = acquire(db, "job", "w2", "60");
        let f2 = fence(&taken);
        assert!(f2 > f1, "a new tenure gets a larger fence: {f2} after {f1}");
        release(db, "job", "w2");
        let other = acquire(db, "other", "w3", "60");
        let f3 = fence(&other);
        assert!(f3 > f2, "{f3} after {f2}");
        let end = now_millis();

        let events = log(db, &[]);
        assert_eq!(
            brief(&events),
            [
                format!("job acquired w1 #{f1}"),
                format!("job extended w1 #{f1}"),
                format!("job renewed w1 #{f1}"),
                format!("job taken_over w2 #{f2} from w1"),
                format!("job released w2 #{f2}"),
                format!("other acquired w3 #{f3}"),
            ]
        );
        // Times: oldest first, and when the changes happened (loosely: same host, either clock).
        let times: Vec<i64> = events
            .iter()
            .map(|e| timestamp_millis(text_of(e, "at")))
            .collect();
        assert!(times.is_sorted(), "oldest first: {times:?}");
        for (event, at) in events.iter().zip(&times) {
            assert!(
                (start - 2_000..=end + 2_000).contains(at),
                "{event} is outside the test's run ({start}..{end})"
            );
        }
        let near = |at: i64, lock: &Value| {
            let acquired_at = timestamp_millis(text_of(lock, "acquired_at"));
            assert!(
                (at - acquired_at).abs() <= 1_000,
                "event at {at} for the lock acquired at {acquired_at}: {lock}"
            );
        };
        near(times[0], &first);
        near(times[1], &extended);
        near(times[3], &taken);
        near(times[5], &other);

        // One resource's history.
        assert_eq!(log(db, &["job"]), events[..5]);
        assert_eq!(log(db, &["other"]), events[5..]);
        assert!(log(db, &["missing"]).is_empty());
        assert!(
            log(db, &["jo"]).is_empty(),
            "a resource is a name, not a prefix"
        );
    });
}

#[test]
fn log_limit_keeps_the_newest_n_oldest_first() {
    each_store_and_server(|db| {
        acquire(db, "r1", "w1", "60");
        release(db, "r1", "w1");
        acquire(db, "r2", "w2", "60");
        db.json(&["renew", "r2", "--owner", "w2", "--ttl", "60"], 0);
        acquire(db, "r1", "w3", "60");
        release(db, "r1", "w3");
        let all = log(db, &[]);
        assert_eq!(all.len(), 6, "{:?}", brief(&all));
        assert_eq!(log(db, &["--limit", "1"]), all[5..]);
        assert_eq!(log(db, &["--limit", "3"]), all[3..]);
        assert_eq!(log(db, &["--limit", "6"]), all);
        assert_eq!(log(db, &["--limit", "100"]), all);
        // With a resource: that resource's newest N.
        let r1: Vec<Value> = all
            .iter()
            .filter(|e| e["resource"] == json!("r1"))
            .cloned()
            .collect();
        assert_eq!(r1.len(), 4);
        assert_eq!(log(db, &["r1", "--limit", "2"]), r1[2..]);
        assert_eq!(
            brief(&log(db, &["r2", "--limit", "1"])),
            brief(&all[3..4]),
            "r2's newest event is its renewal"
        );
    });
}

#[test]
fn log_since_excludes_older_events() {
    // Each store's old events, then one wait for them all.
    let dbs = every_store_and_server();
    for db in &dbs {
        acquire(db, "old", "w1", "60");
        release(db, "old", "w1");
    }
    // Old events are at least 5 s older than the new ones. Each `--since` window below is as
    // old as the new events plus 2 s (whole seconds, as the flag takes them), reckoned just
    // before its command: it holds the new events and, unless that one command takes 3 s, none
    // of the old.
    sleep(Duration::from_secs(5));
    for db in &dbs {
        let new_at = Instant::now();
        let window = |unit: &str| format!("{}{unit}", new_at.elapsed().as_secs() + 2);
        acquire(db, "new", "w2", "60");
        db.json(&["renew", "new", "--owner", "w2", "--ttl", "60"], 0);
        let all = log(db, &[]);
        assert_eq!(
            brief(&all)
                .iter()
                .map(|e| e.rsplit_once(' ').unwrap().0)
                .collect::<Vec<_>>(),
            [
                "old acquired w1",
                "old released w1",
                "new acquired w2",
                "new renewed w2"
            ]
        );
        assert_eq!(log(db, &["--since", &window("s")]), all[2..]);
        assert_eq!(
            log(db, &["--since", &window("")]),
            all[2..],
            "a bare integer is seconds"
        );
        assert_eq!(log(db, &["--since", "1h"]), all);
        assert!(log(db, &["old", "--since", &window("s")]).is_empty());
        assert_eq!(log(db, &["new", "--since", &window("s")]), all[2..]);
        assert_eq!(
            log(db, &["--since", &window("s"), "--limit", "1"]),
            all[3..]
        );
        assert_eq!(log(db, &["--since", "1h", "--limit", "3"]), all[1..]);
    }
}

// ---------------------------------------------------------------------------------------------
// gc

#[test]
fn gc_removes_expired_rows_and_old_history_but_not_live_locks() {
    // gc runs where the store is: on the stores only.
    each_store(|db| {
        assert_eq!(
            db.json(&["gc"], 0),
            json!({"expired_locks": 0, "history_events": 0}),
            "gc of an empty store"
        );
        let dead = acquire(db, "dead", "w1", "1");
        let dead2 = acquire(db, "dead2", "w1", "1");
        let live = acquire(db, "live", "w2", "60");
        let gone = acquire(db, "gone", "w3", "60");
        release(db, "gone", "w3");
        sleep_past_expiry(&dead2);
        // The expired rows are still there, invisible; the released one was deleted.
        assert_eq!(lock_rows(db), 3);
        assert_eq!(listed(&db.json(&["list"], 0)), ["live"]);
        let history = log(db, &[]);
        assert_eq!(history.len(), 5, "{:?}", brief(&history));

        // The default keeps 30 days of history.
        let report = db.json(&["gc"], 0);
        assert_eq!(report, json!({"expired_locks": 2, "history_events": 0}));
        assert_eq!(lock_rows(db), 1, "only the live row is left");
        assert_eq!(db.json(&["list"], 0), json!({"locks": [live]}));
        assert_eq!(log(db, &[]), history, "recent history is kept");

        let report = db.json(&["gc", "--keep-history", "1h"], 0);
        assert_eq!(report, json!({"expired_locks": 0, "history_events": 0}));
        assert_eq!(log(db, &[]), history);

        let report = db.json(&["gc", "--keep-history", "0"], 0);
        assert_eq!(report, json!({"expired_locks": 0, "history_events": 5}));
        assert!(
            log(db, &[]).is_empty(),
            "--keep-history 0 removes all history"
        );
        assert_eq!(lock_rows(db), 1);
        let status = db.json(&["status", "live"], 0);
        assert_eq!(status["lock"], live, "gc leaves a live lock alone");
        let state = db.state();
        assert_eq!(
            db.json(&["gc", "--keep-history", "0"], 0),
            json!({"expired_locks": 0, "history_events": 0})
        );
        assert_eq!(db.state(), state, "gc with nothing to do changes nothing");

        // Fences keep growing after gc deleted the rows that held them.
        let before = [&dead, &dead2, &live, &gone].map(fence);
        let again = acquire(db, "dead", "w4", "60");
        let highest = before.iter().max().copied().unwrap_or_default();
        assert!(
            fence(&again) > highest,
            "a gc'd resource's new tenure gets fence {} after {before:?}",
            fence(&again)
        );
        assert_eq!(
            brief(&log(db, &[])),
            [format!("dead acquired w4 #{}", fence(&again))]
        );
    });
}

#[test]
fn gc_keeps_history_younger_than_keep_history() {
    // gc runs where the store is: on the stores only. Each store's old events, then one wait
    // for them all.
    let dbs = every_store();
    for db in &dbs {
        acquire(db, "old", "w1", "60");
        release(db, "old", "w1");
        acquire(db, "held", "w1", "60");
    }
    // Old events are at least 5 s older than the new ones. The history kept is as old as the
    // new events plus 2 s (whole seconds), reckoned just before `gc`: it holds the new events
    // and, unless `gc` takes 3 s, none of the old.
    sleep(Duration::from_secs(5));
    for db in &dbs {
        let new_at = Instant::now();
        let renewed = db.json(&["renew", "held", "--owner", "w1", "--ttl", "60"], 0);
        acquire(db, "new", "w2", "60");
        let all = log(db, &[]);
        assert_eq!(all.len(), 5, "{:?}", brief(&all));
        let keep = format!("{}s", new_at.elapsed().as_secs() + 2);
        let report = db.json(&["gc", "--keep-history", &keep], 0);
        assert_eq!(report, json!({"expired_locks": 0, "history_events": 3}));
        assert_eq!(
            log(db, &[]),
            all[3..],
            "the events of the last {keep} are kept"
        );
        // Pruning history does not touch the locks it describes.
        assert_eq!(db.json(&["status", "held"], 0)["lock"], renewed["lock"]);
        assert_eq!(listed(&db.json(&["list"], 0)), ["held", "new"]);
    }
}

// ---------------------------------------------------------------------------------------------
// --format text

/// `distlock --format text ARGS…`: checks the exit code, that stderr is empty and that no
/// line is JSON; returns stdout.
fn text(db: &Db, args: &[&str], code: i32) -> String {
    let mut all = vec!["--format", "text"];
    all.extend_from_slice(args);
    let out = db.run(&all);
    assert_eq!(out.status.code(), Some(code), "{all:?}: {}", describe(&out));
    assert!(out.stderr.is_empty(), "{all:?}: {}", describe(&out));
    let stdout = String::from_utf8(out.stdout).expect("utf-8 stdout");
    assert!(
        stdout.is_empty() || stdout.ends_with('\n'),
        "{all:?}: {stdout:?}"
    );
    for line in stdout.lines() {
        assert!(
            serde_json::from_str::<Value>(line).is_err(),
            "{all:?}: a human line, not JSON: {line:?}"
        );
    }
    stdout
}

/// `list --format text`'s line for a lock, as the README shows it.
fn held_line(lock: &Value) -> String {
    format!(
        "{} is held by {} until {} (fence {})",
        text_of(lock, "resource"),
        text_of(lock, "owner"),
        text_of(lock, "expires_at"),
        fence(lock)
    )
}

/// The numbers in `line`, in order.
fn numbers(line: &str) -> Vec<u64> {
    line.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a number"))
        .collect()
}

#[test]
fn text_format_for_list_log_and_gc() {
    // gc runs where the store is: on the stores only.
    each_store(|db| {
        assert_eq!(text(db, &["list"], 0), "no live locks\n");
        assert_eq!(text(db, &["log"], 0), "", "no events, no lines");
        acquire(db, "x", "w1", "1");
        let y = acquire(db, "y", "w5", "1");
        let b = acquire(db, "b", "w2", "60");
        acquire(db, "a", "w3", "60");
        db.json(&["renew", "a", "--owner", "w3", "--ttl", "60"], 0);
        acquire(db, "a", "w3", "60");
        sleep_past_expiry(&y);
        let taken = acquire(db, "x", "w4", "60");
        // a's lock as it is now, after the renewal and the re-acquire.
        let a = db.json(&["status", "a"], 0)["lock"].clone();

        // list: one line per live lock, in the JSON's order.
        let live: Vec<Value> = db.json(&["list"], 0)["locks"]
            .as_array()
            .expect("locks")
            .clone();
        assert_eq!(listed(&json!({ "locks": live })), ["a", "b", "x"]);
        let expected: String = live.iter().map(|l| held_line(l) + "\n").collect();
        assert_eq!(text(db, &["list"], 0), expected);
        assert_eq!(
            text(db, &["list", "--prefix", "b"], 0),
            held_line(&b) + "\n"
        );
        assert_eq!(
            text(db, &["list", "--prefix", "a"], 0),
            held_line(&a) + "\n"
        );
        assert_eq!(text(db, &["list", "--prefix", "y"], 0), "no live locks\n");
        assert_eq!(text(db, &["list", "--prefix", "zz"], 0), "no live locks\n");

        // log: one line per event, the same facts as the JSON lines.
        let events = log(db, &[]);
        assert_eq!(
            events
                .iter()
                .map(|e| text_of(e, "event"))
                .collect::<Vec<_>>(),
            [
                "acquired",
                "acquired",
                "acquired",
                "acquired",
                "renewed",
                "extended",
                "taken_over"
            ]
        );
        let lines = text(db, &["log"], 0);
        assert_eq!(lines.lines().count(), events.len(), "{lines}");
        for (line, event) in lines.lines().zip(&events) {
            let words = text_of(event, "event").replace('_', " ");
            let mut expected = format!(
                "{} {} {} by {} (fence {})",
                text_of(event, "at"),
                text_of(event, "resource"),
                words,
                text_of(event, "owner"),
                fence(event)
            );
            if let Some(previous) = event.get("previous_owner") {
                expected.push_str(&format!(" from {}", previous.as_str().expect("a string")));
            }
            assert_eq!(line, expected, "{event}");
        }
        let last = text(db, &["log", "x", "--limit", "1"], 0);
        assert_eq!(
            last,
            format!(
                "{} x taken over by w4 (fence {}) from w1\n",
                text_of(&events[6], "at"),
                fence(&taken)
            )
        );
        assert_eq!(text(db, &["log", "missing"], 0), "");

        // gc: one line with the two counts (y's expired row; every event).
        let gc = text(db, &["gc", "--keep-history", "0"], 0);
        assert_eq!(gc.lines().count(), 1, "{gc:?}");
        assert!(gc.contains("expired") && gc.contains("history"), "{gc:?}");
        assert_eq!(
            numbers(&gc),
            [1, 7],
            "1 expired lock, 7 history events: {gc:?}"
        );
        assert_eq!(numbers(&text(db, &["gc"], 0)), [0, 0]);
        assert_eq!(text(db, &["log"], 0), "");
    });
}

#[test]
fn text_format_keeps_the_exit_codes_of_json() {
    // gc runs where the store is: on the stores only.
    each_store(|db| {
        for format in ["json", "text"] {
            for args in [
                &["list"][..],
                &["log"],
                &["log", "r", "--limit", "1"],
                &["gc"],
            ] {
                let mut all = vec!["--format", format];
                all.extend_from_slice(args);
                let out = db.run(&all);
                assert_eq!(out.status.code(), Some(0), "{all:?}: {}", describe(&out));
            }
            for args in [
                &["list", "--prefix"][..],
                &["log", "--since", "soon"],
                &["log", "--since", "-1s"],
                &["log", "--limit", "-1"],
                &["log", "--limit", "many"],
                &["log", ""],
                &["gc", "--keep-history", "forever"],
                &["gc", "--keep-history", "-1h"],
            ] {
                let mut all = vec!["--format", format];
                all.extend_from_slice(args);
                let out = db.run(&all);
                assert_eq!(out.status.code(), Some(64), "{all:?}: {}", describe(&out));
                assert!(out.stdout.is_empty(), "{all:?}: {}", describe(&out));
            }
        }
    });
    // A store that cannot be opened: 74 in both formats, nothing on stdout.
    let db = Db::sqlite();
    let folder = db.file("a-folder");
    std::fs::create_dir(&folder).expect("create a folder");
    for format in ["json", "text"] {
        for args in [&["list"][..], &["log"], &["gc"]] {
            let out = db
                .cmd()
                .env("DISTLOCK_DB", &folder)
                .args(["--format", format])
                .args(args)
                .output()
                .expect("run distlock");
            assert_store_error(&out, &(format, args));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The waiting line on a terminal

/// Quotes `word` for `sh`.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The binary under test with `args`, as one `sh` command line.
fn command_line(args: &[&str]) -> String {
    std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(sh_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A shell command running under a pseudo-terminal: its stdin, stdout and stderr are the
/// terminal (unless the command redirects them), and everything the terminal shows is
/// collected. Killed if the test ends while it still runs.
struct Terminal {
    child: Child,
    /// Kept open until the command is done: EOF on it would be typed into the terminal.
    stdin: Option<ChildStdin>,
    shown: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Terminal {
    fn spawn(db: &Db, shell_command: &str) -> Terminal {
        let mut cmd = if Command::new("script").arg("--version").output().is_ok() {
            let mut cmd = db.env_cmd("script");
            cmd.args(["-qec", shell_command, "/dev/null"]);
            cmd
        } else if Command::new("python3").arg("--version").output().is_ok() {
            let mut cmd = db.env_cmd("python3");
            cmd.args([
                "-c",
                "import os, pty, sys; sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))",
                "sh",
                "-c",
                shell_command,
            ]);
            cmd
        } else {
            panic!("the terminal tests need script(1) (util-linux) or python3");
        };
        let mut child = cmd
            .env("TERM", "xterm")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn a pseudo-terminal");
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout");
        let shown = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&shown);
        let reader = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().expect("lock").extend_from_slice(&buf[..n]),
                }
            }
        });
        Terminal {
            child,
            stdin,
            shown,
            reader: Some(reader),
        }
    }

    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().expect("lock")).into_owned()
    }

    /// Waits until the terminal has shown `needle`, at most `limit`; says whether it did.
    fn wait_for(&self, needle: &str, limit: Duration) -> bool {
        wait_for(limit, || self.shown().contains(needle))
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the command (at most `limit`) and returns its exit code and what the terminal
    /// showed.
    fn finish(mut self, limit: Duration) -> (Option<i32>, String) {
        let status = wait_or_kill(&mut self.child, limit).unwrap_or_else(|| {
            panic!(
                "the command under the terminal did not finish within {limit:?}; it showed {:?}",
                self.shown()
            )
        });
        self.stdin.take();
        if let Some(reader) = self.reader.take() {
            reader.join().expect("reader thread");
        }
        (status.code(), self.shown())
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The first line (up to `\r` or `\n`) at or after byte `from` of `shown`.
fn line_at(shown: &str, from: usize) -> &str {
    let rest = &shown[from..];
    let end = rest.find(['\r', '\n']).unwrap_or(rest.len());
    &rest[..end]
}

/// Checks the waiting line for R held by w1 in what a terminal showed, and that it was cleared
/// before `after` (a marker that the command printed when it was done waiting) appeared.
/// Returns the position of `after`.
fn check_waiting_line(shown: &str, after: &str, ttl_secs: u64) -> usize {
    let line = "waiting for R — held by w1, expires in ";
    let first = shown
        .find(line)
        .unwrap_or_else(|| panic!("no waiting line on the terminal: {shown:?}"));
    assert!(
        shown[..first].ends_with(CLEAR),
        "the line is drawn from the start of a cleared line: {shown:?}"
    );
    let left = &shown[first + line.len()..];
    let digits: String = left.chars().take_while(char::is_ascii_digit).collect();
    let secs: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("a number of seconds after `expires in`: {shown:?}"));
    assert!(
        (1..=ttl_secs).contains(&secs) && left[digits.len()..].starts_with('s'),
        "expires in {secs}s for a {ttl_secs}s lease: {shown:?}"
    );
    let last = shown.rfind("waiting for").expect("a waiting line");
    let done = shown[last..].find(after).map_or_else(
        || panic!("{after:?} after the last waiting line: {shown:?}"),
        |at| last + at,
    );
    assert!(
        shown[last..done].contains(CLEAR),
        "the waiting line is cleared (\\r ESC[2K) before {after:?}: {shown:?}"
    );
    let cleared = last + shown[last..done].rfind(CLEAR).expect("cleared");
    assert!(
        shown[cleared + CLEAR.len()..done].trim().is_empty(),
        "nothing but the clearing after the last waiting line: {shown:?}"
    );
    done
}

/// The waiter on `term` (started at `start`, waiting for R, which w1 holds): its waiting line
/// appears, it still waits about 1.5 s after it started, then w1 releases R and it exits 0.
/// Returns what the terminal showed.
fn served_after_waiting(db: &Db, mut term: Terminal, start: Instant) -> String {
    let seen = term.wait_for("waiting for R", Duration::from_secs(10));
    sleep(Duration::from_millis(1_500).saturating_sub(start.elapsed()));
    assert!(
        term.running(),
        "the waiter waits while R is held: {:?}",
        term.shown()
    );
    release(db, "R", "w1");
    let (code, shown) = term.finish(Duration::from_secs(20));
    assert!(
        seen,
        "the waiting line appeared while R was held: {shown:?}"
    );
    assert_eq!(code, Some(0), "{shown:?}");
    shown
}

#[test]
fn acquire_wait_draws_and_clears_the_waiting_line_on_a_terminal() {
    let db = Db::sqlite();
    let held = acquire(&db, "R", "w1", "30");
    let start = Instant::now();
    let term = Terminal::spawn(
        &db,
        &command_line(&[
            "acquire", "R", "--owner", "w2", "--ttl", "5", "--wait", "10s",
        ]),
    );
    let shown = served_after_waiting(&db, term, start);
    let done = check_waiting_line(&shown, r#"{"acquired":true"#, 30);
    let result: Value = serde_json::from_str(line_at(&shown, done)).expect("the JSON result");
    assert_eq!(result["lock"]["owner"], json!("w2"), "{result}");
    assert!(fence(&result["lock"]) > fence(&held), "{result}");
    assert_eq!(db.json(&["status", "R"], 0)["lock"], result["lock"]);
}

#[test]
fn acquire_wait_clears_the_waiting_line_when_the_wait_runs_out() {
    let db = Db::sqlite();
    acquire(&db, "R", "w1", "30");
    let term = Terminal::spawn(
        &db,
        &command_line(&[
            "acquire", "R", "--owner", "w2", "--ttl", "5", "--wait", "1s",
        ]),
    );
    let (code, shown) = term.finish(Duration::from_secs(20));
    assert_eq!(code, Some(75), "{shown:?}");
    let done = check_waiting_line(&shown, r#"{"acquired":false"#, 30);
    let result: Value = serde_json::from_str(line_at(&shown, done)).expect("the JSON result");
    assert_eq!(result["holder"]["owner"], json!("w1"), "{result}");
}

#[test]
fn run_wait_draws_and_clears_the_waiting_line_on_a_terminal() {
    let db = Db::sqlite();
    acquire(&db, "R", "w1", "30");
    let start = Instant::now();
    let term = Terminal::spawn(
        &db,
        &command_line(&sh_script(
            &[
                "run",
                "--resource",
                "R",
                "--owner",
                "w2",
                "--ttl",
                "5",
                "--wait",
                "10s",
            ],
            "echo child-ran-with-fence-$DISTLOCK_FENCE",
            &[],
        )),
    );
    let shown = served_after_waiting(&db, term, start);
    check_waiting_line(&shown, "child-ran-with-fence-", 30);
    db.json(&["status", "R"], 1);
    assert_eq!(
        brief(&log(&db, &["R"]))
            .iter()
            .map(|e| e.rsplit_once(' ').unwrap().0)
            .collect::<Vec<_>>(),
        [
            "R acquired w1",
            "R released w1",
            "R acquired w2",
            "R released w2"
        ]
    );
}

#[test]
fn waiting_line_never_reaches_a_pipe() {
    let db = Db::sqlite();
    for (name, args) in [
        (
            "acquire",
            &[
                "acquire", "R", "--owner", "w2", "--ttl", "5", "--wait", "10s",
            ][..],
        ),
        (
            "run",
            &[
                "run",
                "--resource",
                "R",
                "--owner",
                "w2",
                "--wait",
                "10s",
                "--",
                "true",
            ],
        ),
    ] {
        acquire(&db, "R", "w1", "30");
        let start = Instant::now();
        let mut waiter = db
            .std_cmd()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn distlock");
        sleep(Duration::from_millis(1_500).saturating_sub(start.elapsed()));
        assert!(
            waiter.try_wait().expect("try_wait").is_none(),
            "{name} waits while R is held"
        );
        release(&db, "R", "w1");
        let out = waiter.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0), "{name}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("waiting for") && !stderr.contains('\x1b') && !stderr.contains('\r'),
            "{name}: piped stderr never sees the waiting line: {stderr:?}"
        );
        if name == "acquire" {
            assert_eq!(parse_line(&out.stdout)["lock"]["owner"], json!("w2"));
            release(&db, "R", "w2");
        } else {
            assert!(out.stdout.is_empty(), "{}", describe(&out));
        }
    }
}

#[test]
fn waiting_line_follows_stderr_not_stdout() {
    // stdout on the terminal, stderr in a file: the line goes nowhere.
    let db = Db::sqlite();
    acquire(&db, "R", "w1", "30");
    let errors = db.file("stderr.txt");
    let shell = format!(
        "{} 2>{}",
        command_line(&[
            "acquire", "R", "--owner", "w2", "--ttl", "5", "--wait", "10s",
        ]),
        sh_quote(errors.to_str().expect("utf-8 path"))
    );
    let start = Instant::now();
    let mut term = Terminal::spawn(&db, &shell);
    sleep(Duration::from_millis(1_500).saturating_sub(start.elapsed()));
    assert!(term.running(), "the waiter waits while R is held");
    release(&db, "R", "w1");
    let (code, shown) = term.finish(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{shown:?}");
    let logged = std::fs::read_to_string(&errors).expect("the stderr file");
    assert!(
        !shown.contains("waiting for") && !logged.contains("waiting for"),
        "stderr is a file: no waiting line anywhere; terminal {shown:?}, file {logged:?}"
    );
    assert!(shown.contains(r#"{"acquired":true"#), "{shown:?}");
}
