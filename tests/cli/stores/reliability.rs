//! Reliability ("torture") tests: distlock under contention, crashes, pauses, hostile input and
//! hostile stores — real processes, real signals, real files, no mocks.
//!
//! | area | tests |
//! | --- | --- |
//! | mutual exclusion | `contending_runs_never_overlap_and_fences_strictly_increase` |
//! | crashes (SIGKILL) | `sigkill_at_random_moments_leaves_a_sound_store` |
//! | pauses (SIGSTOP) | `paused_holder_is_stopped_and_its_late_writes_are_fenced_off` |
//! | hostile input, parsing layer | `*_follows_the_validation_table`, `durations_*` (proptest) |
//! | hostile input, the binary | `binary_*` (proptest, bounded cases), `non_utf8_*` |
//! | hostile stores | `truncated_*`, `garbage_*`, `read_only_*`, `full_filesystem_*`, `file_size_limit_*`, `database_replaced_by_a_directory_*`, `database_folder_removed_*`, `database_file_removed_*` |
//! | hostile turnstile | `a_planted_turnstile_symlink_*`, `a_turnstile_cut_short_*` |
//! | permissions | `new_store_files_*` |
//!
//! Timing checks are loose (2 cores, shared machine): upper bounds with generous slack, or
//! lower bounds that follow from causality. Every spawned process has a deadline, so a hang
//! fails the test instead of the CI run.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use distlock::lock::{MAX_DURATION, MAX_TTL_SECS, Owner, Resource, Ttl, parse_duration};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rusqlite::Connection;

use crate::common::contention::Contention;
use crate::common::critical;
use crate::common::fenced_write::{fenced_write, ledger};
use crate::common::output::{assert_store_error, assert_usage_error, parse_line, parse_lines};
use crate::common::pids::{all_gone_within, children_of, ids_of, is_gone};
use crate::common::process::{
    BIN, Proc, describe, distlock, isolated, pid_of, wait_for_file, wait_or_kill, wait_until,
};
use crate::common::require::{require, runs};
use crate::common::store::{Db, Kind, distlock_at, each_store, each_store_and_server, sh_script};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Waits for `child`; kills it and fails the test if it runs longer than `limit`.
fn wait_within(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    wait_or_kill(child, limit).unwrap_or_else(|| panic!("{what}: still running after {limit:?}"))
}

/// Runs a program as the test's effective user would see it: is this test running as root?
fn running_as_root() -> bool {
    let probe = tempfile::NamedTempFile::new().expect("temp file");
    probe.as_file().metadata().expect("metadata").uid() == 0
}

// ---------------------------------------------------------------------------------------------
// Mutual exclusion under contention
// ---------------------------------------------------------------------------------------------

/// `workers` processes at a time, each running `cycles` rounds of `run --wait 60s --ttl 10`
/// around the [`critical`] section, the first round of each released at once.
fn contend(db: &Db, workers: usize, cycles: usize) {
    let started = Instant::now();
    let contention = Contention {
        dir: db.dir.path(),
        name: "contender",
        workers,
        rounds: cycles,
        bound: Duration::from_secs(120),
    };
    let contended = contention.run(|_, _| {
        let mut cmd = db.std_cmd();
        cmd.args([
            "run",
            "--resource",
            "contended",
            "--wait",
            "60s",
            "--ttl",
            "10",
        ])
        .args(critical::command(db.dir.path(), "0.005"));
        cmd
    });
    eprintln!(
        "{:?}: {workers} x {cycles} contended runs in {:?}",
        db.kind,
        started.elapsed()
    );

    let violations = critical::violations(db.dir.path());
    assert!(
        violations.is_empty(),
        "{:?}: mutual exclusion broke:\n{}",
        db.kind,
        violations.join("\n")
    );
    contended.assert_all_exited_0(&format!(
        "{:?} contenders (every one must get the lock)",
        db.kind
    ));
    assert_eq!(
        critical::fences(db.dir.path()).len(),
        workers * cycles,
        "one fence per holder"
    );
}

#[test]
fn contending_runs_never_overlap_and_fences_strictly_increase() {
    // PostgreSQL waiters poll (there is no turnstile across hosts) and every debug-build connect
    // costs ~60 ms, so it gets fewer rounds.
    each_store_and_server(|db| match db.kind {
        Kind::Sqlite => contend(db, 8, 25),
        Kind::Postgres => contend(db, 8, 10),
    });
}

// ---------------------------------------------------------------------------------------------
// Crashes: SIGKILL at random moments
// ---------------------------------------------------------------------------------------------

const CRASH_RESOURCES: [&str; 6] = [
    "crash-0", "crash-1", "crash-2", "crash-3", "crash-4", "crash-5",
];
const CRASH_WORKERS: usize = 4;
/// Per worker: 4 x 50 = 200 processes killed.
const CRASH_ROUNDS: usize = 50;
/// The longest TTL the crash test hands out.
const CRASH_MAX_TTL: Duration = Duration::from_secs(2);

/// The command under `run` in the crash test: notes its pid (which is its process group) so
/// that the test can clean up after a guard it killed, then works briefly.
const CRASH_CHILD: &str = r#"echo $$ >>"$1"; sleep 0.03"#;

/// Kills the process groups of `run` children a crash test left behind (their guard was
/// killed), when dropped.
struct Leftovers(PathBuf);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let pids = fs::read_to_string(&self.0).unwrap_or_default();
        for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
            // Only a group this test started: the pid still leads its own process group.
            if ids_of(pid).is_some_and(|ids| ids.pgrp == pid) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// One crash-test process and what became of it.
struct Crash {
    args: Vec<String>,
    /// The process was still running when the SIGKILL was sent.
    hit_live: bool,
    /// The SIGKILL went to `run`'s command (its process group), not to distlock.
    hit_child: bool,
    status: ExitStatus,
}

/// `run`'s command: the guard's child (checked to still be, so the pid was not reaped and
/// reused).
fn command_of(guard: Pid) -> Option<i32> {
    children_of(guard)
        .into_iter()
        .find(|&c| ids_of(c).is_some_and(|ids| ids.ppid == guard.as_raw()))
}

/// One worker's own owner name and resource: its acquire, renew, release and `run --owner`
/// mostly meet its own lock (extend it, join it, take it over after expiry), so most of them
/// really write; now and then it works on another worker's resource, or as another owner.
struct CrashWorker {
    owner: String,
    resource: &'static str,
}

fn crash_round(db: &Db, worker: &CrashWorker, pids_file: &Path, stderr_path: &Path) -> Crash {
    let resource = if fastrand::usize(..5) == 0 {
        CRASH_RESOURCES[fastrand::usize(..CRASH_RESOURCES.len())]
    } else {
        worker.resource
    };
    let own = worker.owner.as_str();
    let other = format!("owner-{}", fastrand::usize(..CRASH_WORKERS));
    let ttl = if fastrand::bool() { "1" } else { "2" };
    let child_args = ["--", "sh", "-c", CRASH_CHILD, "sh"];
    let mut args: Vec<&str> = match fastrand::usize(..10) {
        0 | 1 => vec!["acquire", resource, "--owner", own, "--ttl", ttl],
        2 => vec![
            "acquire", resource, "--owner", own, "--ttl", ttl, "--wait", "0.5",
        ],
        3 => vec!["renew", resource, "--owner", own, "--ttl", ttl],
        4 => vec!["release", resource, "--owner", own],
        5 => vec!["release", resource, "--owner", &other],
        // Joins the tenure when this worker holds the lock through `acquire`.
        6..=8 => vec!["run", "--resource", resource, "--owner", own, "--ttl", ttl],
        // An owner of its own, unique to the process: once killed, it blocks the resource for
        // its TTL.
        _ => vec!["run", "--resource", resource, "--ttl", "1", "--wait", "0.5"],
    };
    let is_run = args[0] == "run";
    if is_run {
        args.extend(child_args);
    }
    let mut cmd = db.std_cmd();
    cmd.args(&args);
    if is_run {
        cmd.arg(pids_file);
    }
    let stderr = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(stderr_path)
        .expect("stderr file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn distlock");
    let guard = pid_of(&child);
    // `run` is killed at a random moment from its start (acquiring), or from the moment its
    // command started (renewing, releasing) — or its command is killed instead.
    let mode = if is_run { fastrand::usize(..3) } else { 0 };
    if mode > 0 {
        let start = Instant::now();
        while command_of(guard).is_none()
            && child.try_wait().expect("try_wait").is_none()
            && start.elapsed() < Duration::from_secs(2)
        {
            thread::sleep(Duration::from_millis(1));
        }
    }
    // A random moment within 30 ms, more often early: a lock command lives 4–8 ms (debug
    // build), so uniform 0–30 ms would mostly find it gone.
    let window = [30_000, 10_000, 6_000][fastrand::usize(..3)];
    thread::sleep(Duration::from_micros(fastrand::u64(0..=window)));
    let hit_live = child.try_wait().expect("try_wait").is_none();
    let mut hit_child = false;
    if mode == 2 {
        // The command's whole process group (the command may have exited already).
        if let Some(command) = command_of(guard) {
            let _ = killpg(Pid::from_raw(command), Signal::SIGKILL);
            hit_child = true;
        }
    }
    if !hit_child {
        // The process may have exited already: it is an unreaped zombie, so the pid is still ours.
        let _ = kill(guard, Signal::SIGKILL);
    }
    let status = wait_within(&mut child, Duration::from_secs(30), "crash-test process");
    Crash {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        hit_live,
        hit_child,
        status,
    }
}

#[test]
fn sigkill_at_random_moments_leaves_a_sound_store() {
    let db = Db::sqlite();
    let pids_file = db.file("run-children");
    let leftovers = Leftovers(pids_file.clone());
    // A store with some history first, so that the crashes hit a working database, not only
    // its creation.
    for resource in CRASH_RESOURCES {
        db.json(&["acquire", resource, "--owner", "seed", "--ttl", "1"], 0);
        db.json(&["release", resource, "--owner", "seed"], 0);
    }

    let crashes = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for (worker, &resource) in CRASH_RESOURCES.iter().enumerate().take(CRASH_WORKERS) {
            let (db, pids_file, crashes) = (&db, &pids_file, &crashes);
            scope.spawn(move || {
                let stderr_path = db.file(&format!("crash-{worker}.stderr"));
                let state = CrashWorker {
                    owner: format!("owner-{worker}"),
                    resource,
                };
                for _ in 0..CRASH_ROUNDS {
                    let crash = crash_round(db, &state, pids_file, &stderr_path);
                    crashes.lock().unwrap().push(crash);
                }
            });
        }
    });
    let crashes = crashes.into_inner().unwrap();
    drop(leftovers);
    let ended = Instant::now();

    // Killed by our SIGKILL, or (if it had finished, or its command was the one killed) an
    // exit code of the lock commands or `run`: 137 is the command's SIGKILL passed through.
    // Never a store error: a crashed process leaves no lock behind that a survivor must wait out.
    let unexpected: Vec<String> = crashes
        .iter()
        .filter(|c| match (c.status.code(), c.hit_child) {
            (None, false) => c.status.signal() != Some(Signal::SIGKILL as i32),
            (None, true) => true,
            (Some(code), _) => ![0, 1, 75, 77, 137].contains(&code),
        })
        .map(|c| format!("{:?}: {:?}", c.args, c.status))
        .collect();
    let live = crashes.iter().filter(|c| c.hit_live).count();
    let live_by_command: Vec<String> = ["acquire", "renew", "release", "run"]
        .iter()
        .map(|command| {
            let n = crashes
                .iter()
                .filter(|c| c.hit_live && c.args[0] == *command)
                .count();
            format!("{command} {n}")
        })
        .collect();
    let children = crashes.iter().filter(|c| c.hit_child).count();
    eprintln!(
        "{} processes SIGKILLed, {live} while running ({}), {children} of them run's command",
        crashes.len(),
        live_by_command.join(", ")
    );
    assert_eq!(crashes.len(), CRASH_WORKERS * CRASH_ROUNDS);
    assert!(
        unexpected.is_empty(),
        "unexpected outcomes (see crash-*.stderr):\n{}\n{}",
        unexpected.join("\n"),
        (0..CRASH_WORKERS)
            .map(|w| fs::read_to_string(db.file(&format!("crash-{w}.stderr"))).unwrap_or_default())
            .collect::<String>()
    );
    assert!(
        live >= 40,
        "only {live} of {} SIGKILLs hit a running process: the test is not testing",
        crashes.len()
    );

    // The file is sound and the fence counter never fell behind a fence it handed out. (This
    // and the lock rows below look inside the schema: `fence_counter` is where SQLite fences
    // come from, `locks` holds expired rows too.)
    let (rows, counter): (std::collections::HashMap<String, (i64, String)>, i64) = {
        let conn = Connection::open(db.path()).expect("open the database");
        let check: Vec<String> = conn
            .prepare("PRAGMA integrity_check")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(check, ["ok"], "PRAGMA integrity_check after 200 SIGKILLs");
        let (counter, in_history, in_locks): (i64, i64, i64) = conn
            .query_row(
                "SELECT (SELECT last FROM fence_counter),
                        (SELECT coalesce(max(fence), 0) FROM history),
                        (SELECT coalesce(max(fence), 0) FROM locks)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert!(
            counter >= in_history && counter >= in_locks,
            "fence counter {counter} is behind a fence handed out (history {in_history}, locks \
             {in_locks})"
        );
        let rows = conn
            .prepare("SELECT resource, fence, owner FROM locks")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        (rows, counter)
    };

    // The history: every tenure has a fence of its own, fences strictly increase per resource,
    // and every later event of a tenure carries that tenure's fence.
    let events = db.log(&[]);
    let mut seen = std::collections::HashSet::new();
    let mut current: std::collections::HashMap<String, (i64, String)> = Default::default();
    let mut last_event: std::collections::HashMap<String, String> = Default::default();
    let mut max_fence = 0;
    for event in &events {
        let resource = event["resource"].as_str().expect("resource").to_owned();
        let kind = event["event"].as_str().expect("event").to_owned();
        let fence = event["fence"].as_i64().expect("fence");
        let owner = event["owner"].as_str().expect("owner").to_owned();
        max_fence = max_fence.max(fence);
        match kind.as_str() {
            "acquired" | "taken_over" => {
                assert!(
                    seen.insert(fence),
                    "fence {fence} handed out to two tenures: {event}\nhistory:\n{events:#?}"
                );
                if let Some((previous, _)) = current.get(&resource) {
                    assert!(
                        fence > *previous,
                        "fence went from {previous} to {fence} on {resource}: {event}"
                    );
                }
                let before = last_event.get(&resource).map(String::as_str);
                if kind == "acquired" {
                    assert!(
                        matches!(before, None | Some("released")),
                        "`acquired` must follow a release (no gc ran): {event} after {before:?}"
                    );
                } else {
                    assert!(
                        !matches!(before, None | Some("released")),
                        "`taken_over` needs an earlier, expired tenure: {event} after {before:?}"
                    );
                    assert!(event["previous_owner"].is_string(), "{event}");
                }
                current.insert(resource.clone(), (fence, owner));
            }
            "extended" | "renewed" | "released" => {
                let tenure = current.get(&resource);
                assert_eq!(
                    tenure,
                    Some(&(fence, owner)),
                    "{event} must belong to the current tenure of {resource}"
                );
            }
            other => panic!("unknown event {other:?}: {event}"),
        }
        last_event.insert(resource, kind);
    }
    // Each state change and its history event are one transaction. The SQLite counter moves
    // only in a committed acquire, so every fence it handed out is a tenure the history shows
    // (a gap is a tenure that happened unrecorded); a resource has a lock row exactly when its
    // last event is not a release (no gc ran), and the row is that tenure.
    let unrecorded: Vec<i64> = (1..=counter).filter(|f| !seen.contains(f)).collect();
    assert!(
        unrecorded.is_empty(),
        "tenures with fences {unrecorded:?} were handed out but never recorded"
    );
    for resource in CRASH_RESOURCES {
        let expected = match last_event.get(resource).map(String::as_str) {
            None | Some("released") => None,
            Some(_) => current.get(resource),
        };
        assert_eq!(
            rows.get(resource),
            expected,
            "{resource}: the lock row disagrees with the history (last event {:?})",
            last_event.get(resource)
        );
    }

    // Every lease runs out, and so does the place of every waiter killed in the queue (a dead
    // waiter stops blocking within 5 s, contract "Fair waiting"): after both, a new owner
    // takes every resource.
    let dead_waiter_place = Duration::from_secs(5);
    thread::sleep(
        (CRASH_MAX_TTL.max(dead_waiter_place) + Duration::from_millis(300))
            .saturating_sub(ended.elapsed()),
    );
    for resource in CRASH_RESOURCES {
        let out = db.json(
            &["acquire", resource, "--owner", "survivor", "--ttl", "30"],
            0,
        );
        let fence = out["lock"]["fence"].as_i64().expect("fence");
        assert!(
            fence > max_fence,
            "{resource}: new fence {fence} must exceed every fence handed out ({max_fence})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Pauses: a holder stopped past its lease
// ---------------------------------------------------------------------------------------------

/// The paused holder's command: writes through `fenced-write` with its fence every 100 ms and
/// logs each attempt's exit code; when stopped (SIGTERM) it tries one last, late write.
const PAUSED_WRITER: &str = r#"fw=$1 data=$2 d=$3
trap '"$fw" "$data" late 2>>"$d/fw.stderr"; echo "late $?" >>"$d/attempts"; exit 0' TERM
echo $$ >"$d/writer.pid.tmp" && mv "$d/writer.pid.tmp" "$d/writer.pid"
i=0
while :; do
  i=$((i + 1))
  "$fw" "$data" "w$i" 2>>"$d/fw.stderr"
  echo "$i $?" >>"$d/attempts"
  sleep 0.1
done
"#;

fn attempt_lines(d: &Path) -> Vec<String> {
    fs::read_to_string(d.join("attempts"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether a frozen process holds something the intruder would have to wait for: the store's
/// write lock (SQLite) or an open transaction (PostgreSQL), or the resource's own lock.
fn frozen_in_the_way(db: &Db, data: &Path) -> bool {
    let resource_locked = !Command::new("flock")
        .arg("-n")
        .arg(data.join(".lock"))
        .arg("true")
        .status()
        .expect("flock(1)")
        .success();
    resource_locked || db.busy_elsewhere()
}

/// Continues and kills what a failing pause test would otherwise leave stopped forever.
struct Thaw {
    guard: Option<Pid>,
    group: Option<Pid>,
}

impl Drop for Thaw {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            let _ = killpg(group, Signal::SIGCONT);
            let _ = killpg(group, Signal::SIGKILL);
        }
        if let Some(guard) = self.guard {
            let _ = kill(guard, Signal::SIGCONT);
            let _ = kill(guard, Signal::SIGKILL);
        }
    }
}

#[test]
fn paused_holder_is_stopped_and_its_late_writes_are_fenced_off() {
    each_store_and_server(|db| {
        let d = db.dir.path();
        let data = db.file("resource");
        let stderr_path = db.file("guard.stderr");
        // A lease long enough that a guard on a loaded machine keeps it until the freeze.
        let mut guard = db
            .std_cmd()
            .args([
                "run",
                "--resource",
                "paused",
                "--ttl",
                "4",
                "--kill-after",
                "3",
            ])
            .args(["--", "sh", "-c", PAUSED_WRITER, "sh"])
            .arg(fenced_write())
            .arg(&data)
            .arg(d)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("spawn distlock run");
        let guard_pid = pid_of(&guard);
        let mut thaw = Thaw {
            guard: Some(guard_pid),
            group: None,
        };
        wait_for_file(&db.file("writer.pid"), Duration::from_secs(20));
        let writer: i32 = fs::read_to_string(db.file("writer.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let writers = Pid::from_raw(writer);
        thaw.group = Some(writers);
        wait_until(Duration::from_secs(20), "the writer writes", || {
            attempt_lines(d).len() >= 3
        });
        let (code, held) = db.status("paused");
        assert_eq!(code, 0, "{held}");
        let stale_fence = held["lock"]["fence"].as_i64().unwrap();

        // Freeze the guard and its command's process group, at a moment where neither holds the
        // store's write lock or the resource's lock (a frozen lock holder blocks everyone: that
        // is not what this test is about).
        let mut tries = 0;
        let frozen_at = loop {
            kill(guard_pid, Signal::SIGSTOP).unwrap();
            killpg(writers, Signal::SIGSTOP).unwrap();
            let attempts = attempt_lines(d).len();
            if !frozen_in_the_way(db, &data) {
                break attempts;
            }
            killpg(writers, Signal::SIGCONT).unwrap();
            kill(guard_pid, Signal::SIGCONT).unwrap();
            tries += 1;
            assert!(tries < 50, "never caught the holder outside a lock");
            thread::sleep(Duration::from_millis(37));
        };

        // The lease runs out while the holder is frozen; another owner takes the lock and
        // writes with its larger fence.
        let start = Instant::now();
        while db.status("paused").0 == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the frozen holder's 4 s lease never ran out"
            );
            thread::sleep(Duration::from_millis(100));
        }
        let taken = db.json(
            &["acquire", "paused", "--owner", "intruder", "--ttl", "60"],
            0,
        );
        let new_fence = taken["lock"]["fence"].as_i64().unwrap();
        assert!(new_fence > stale_fence, "{taken} after fence {stale_fence}");
        let wrote = isolated(fenced_write())
            .arg("--fence")
            .arg(new_fence.to_string())
            .arg(&data)
            .arg("intruder")
            .output()
            .unwrap();
        assert!(
            wrote.status.success(),
            "intruder's write: {}",
            describe(&wrote)
        );

        // Wake the command first, and let it write (an attempt after the first one that may
        // have finished before the freeze) before its guard can stop it; then the guard: its
        // next renewal fails (or its deadline has passed), it stops the command (which tries
        // one more, late write, unless the lease is so long gone that it kills at once) and
        // exits 124.
        killpg(writers, Signal::SIGCONT).unwrap();
        wait_until(
            Duration::from_secs(20),
            "the woken holder attempts a write",
            || attempt_lines(d).len() > frozen_at + 1,
        );
        kill(guard_pid, Signal::SIGCONT).unwrap();
        // From here on the guard is reaped (by this wait, or by its timeout).
        thaw.guard = None;
        let exit = wait_within(&mut guard, Duration::from_secs(20), "the paused guard");
        let guard_stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
        assert_eq!(
            exit.code(),
            Some(124),
            "{:?}: a guard that lost its lease exits 124; stderr: {guard_stderr}",
            db.kind
        );
        assert!(
            all_gone_within(&[writer], Duration::from_secs(10)),
            "the stale holder's command still runs after its guard exited"
        );
        thaw.group = None;

        // Every write the stale holder attempted after the freeze was rejected (the first line
        // after the freeze may be an attempt that had finished just before it), and there was
        // at least one.
        let attempts = attempt_lines(d);
        let late: Vec<&String> = attempts.iter().skip(frozen_at + 1).collect();
        assert!(
            !late.is_empty(),
            "the stale holder attempted no write after the freeze: {attempts:?}"
        );
        for line in &late {
            assert!(
                line.ends_with(" 1"),
                "a stale write must be rejected (exit 1), got {line:?} in {attempts:?}"
            );
        }
        // The data never shows a lower fence after a higher one, and nothing of the stale
        // holder's after the intruder's write.
        let written = ledger(&data);
        for pair in written.windows(2) {
            assert!(
                pair[0].0 <= pair[1].0,
                "a lower fence was written after a higher one: {written:?}"
            );
        }
        let intruder_at = written
            .iter()
            .position(|(_, v)| v == "intruder")
            .expect("the intruder's write");
        assert_eq!(intruder_at, written.len() - 1, "{written:?}");
        assert!(
            written[..intruder_at]
                .iter()
                .all(|(f, _)| *f == stale_fence)
        );
        // The stale guard's release left the intruder's lock alone.
        let (code, now) = db.status("paused");
        assert_eq!(code, 0, "{now}");
        assert_eq!(now["lock"]["owner"], "intruder", "{now}");
        assert_eq!(now["lock"]["fence"], new_fence, "{now}");
    });
}

// ---------------------------------------------------------------------------------------------
// Hostile input, parsing layer (the contract's validation table as an oracle)
// ---------------------------------------------------------------------------------------------

/// The contract's control characters: U+0000–U+001F and U+007F–U+009F (C0, DEL and C1).
fn contract_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// RESOURCE: taken as given; 1..=255 bytes of UTF-8; not blank; no control characters.
fn resource_valid(raw: &str) -> bool {
    (1..=255).contains(&raw.len())
        && !raw.chars().all(char::is_whitespace)
        && !raw.chars().any(contract_control)
}

/// OWNER: trimmed; then 1..=255 bytes; no control characters. The owner it stands for.
fn owner_valid(raw: &str) -> Option<&str> {
    let trimmed = raw.trim();
    ((1..=255).contains(&trimmed.len()) && !trimmed.chars().any(contract_control))
        .then_some(trimmed)
}

/// Characters that break name rules, or sit right next to a rule.
fn tricky_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => prop::sample::select(vec![
            ' ', '\t', '\n', '\r', '\u{0}', '\u{1}', '\u{1b}', '\u{1f}', '\u{7f}', '\u{80}',
            '\u{85}', '\u{9f}', '\u{a0}', '\u{2028}', '\u{3000}', '\u{feff}', '\u{200b}', 'é',
            '🔒', '\u{10ffff}', 'x', ':', '\'', '"', '%', '-', '\\', '$',
        ]),
        1 => any::<char>(),
    ]
}

/// A string of exactly `len` bytes made of `piece` (padded with `x`).
fn exactly(len: usize, piece: &str) -> String {
    let mut s = String::new();
    while s.len() + piece.len() <= len {
        s.push_str(piece);
    }
    while s.len() < len {
        s.push('x');
    }
    s
}

/// Names and owners as a hostile caller would pass them.
///
/// Long strings stop at ~100 KiB: Linux refuses any single argument over 128 KiB
/// (`MAX_ARG_STRLEN`, E2BIG at exec), so a 10 MB name cannot even reach distlock; see
/// `arguments_over_128_kib_cannot_be_passed_at_all`.
fn hostile_text() -> BoxedStrategy<String> {
    prop_oneof![
        2 => "[a-zA-Z0-9:._/-]{1,40}",
        1 => any::<String>(),
        2 => prop::collection::vec(tricky_char(), 0..24).prop_map(String::from_iter),
        1 => "\\PC{1,80}",
        // Around the 255-byte limit, with 1-, 2-, 3- and 4-byte characters.
        2 => (
            245usize..=265,
            prop::sample::select(vec!["x", "é", "€", "🔒", "ab "])
        )
            .prop_map(|(len, piece)| exactly(len, piece)),
        // Long, up to ~100 KiB.
        1 => (256usize..=100 * 1024).prop_map(|n| "n".repeat(n)),
        // Padding around a name: owners are trimmed, resources are not.
        2 => (
            "[ \t\n\u{a0}\u{3000}]{0,4}",
            prop_oneof!["[a-z]{1,8}", "x{250,256}"],
            "[ \t\n\u{a0}]{0,4}"
        )
            .prop_map(|(a, b, c)| format!("{a}{b}{c}")),
    ]
    .boxed()
}

/// humantime's units, with their length in nanoseconds.
const UNITS: [(&str, u128); 16] = [
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("msec", 1_000_000),
    ("s", 1_000_000_000),
    ("sec", 1_000_000_000),
    ("seconds", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("hr", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
    ("days", 86_400_000_000_000),
    ("w", 604_800_000_000_000),
    ("M", 2_630_016_000_000_000),
    ("y", 31_557_600_000_000_000),
];

/// Numbers from the small, the edges of the TTL range, up to u64::MAX.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..100,
        0u64..=40_000_000,
        prop::sample::select(vec![
            0,
            1,
            999,
            1000,
            MAX_TTL_SECS - 1,
            MAX_TTL_SECS,
            MAX_TTL_SECS + 1,
            MAX_DURATION.as_secs(),
            MAX_DURATION.as_secs() + 1,
            u64::from(u32::MAX),
            u64::MAX / 1000,
            u64::MAX - 1,
            u64::MAX,
        ]),
        any::<u64>(),
    ]
}

/// A duration as text, with its value in nanoseconds when the strategy built it from parts of
/// one exact meaning under the contract (a bare integer is seconds; humantime units), or `None`
/// for text it did not (negatives, fractions, garbage), which an oracle reads by the contract's
/// rules itself.
fn duration_text() -> BoxedStrategy<(String, Option<u128>)> {
    let unit = prop::sample::select(UNITS.to_vec());
    prop_oneof![
        // A bare integer: seconds. Also far beyond u64.
        3 => number().prop_map(|n| (n.to_string(), Some(u128::from(n) * 1_000_000_000))),
        1 => "[1-9][0-9]{20,60}".prop_map(|s| (s, Some(u128::MAX))),
        // One to three humantime parts, as in 1h30m or "1h 30m"; the sub-second parts after a
        // huge number of seconds are where a carry can overflow.
        4 => prop::collection::vec((number(), unit, any::<bool>()), 1..=3).prop_map(|parts| {
            let mut text = String::new();
            let mut total: Option<u128> = Some(0);
            for (n, (name, nanos), space) in parts {
                if space && !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(&format!("{n}{name}"));
                total = total.and_then(|t| t.checked_add(u128::from(n).checked_mul(nanos)?));
            }
            (text, Some(total.unwrap_or(u128::MAX)))
        }),
        // Seconds at the very top of the range, then sub-second parts that may add up to a
        // whole second to carry.
        1 => (
            prop::sample::select(vec![u64::MAX, u64::MAX - 1, MAX_DURATION.as_secs()]),
            prop::collection::vec(
                prop::sample::select(vec![
                    ("1000ms", 1_000_000_000u128),
                    ("500ms", 500_000_000),
                    ("999ms", 999_000_000),
                    ("1ms", 1_000_000),
                    ("1000000us", 1_000_000_000),
                    ("1000000000ns", 1_000_000_000),
                    ("1ns", 1),
                ]),
                1..=3,
            ),
        )
            .prop_map(|(secs, parts)| {
                let mut text = format!("{secs}s");
                let mut total = u128::from(secs) * 1_000_000_000;
                for (part, nanos) in parts {
                    text.push(' ');
                    text.push_str(part);
                    total += nanos;
                }
                (text, Some(total))
            }),
        // Negative numbers: never a duration.
        2 => number().prop_map(|n| (format!("-{n}"), None)),
        2 => (number(), prop::sample::select(UNITS.to_vec()))
            .prop_map(|(n, (u, _))| (format!("-{n}{u}"), None)),
        // Fractions: `--wait 0.5` is fine, a TTL never is.
        2 => (0u64..100_000, 0u32..1000).prop_map(|(a, b)| (format!("{a}.{b}"), None)),
        1 => (0u64..100, 1u32..10, prop::sample::select(vec!["s", "m", "h", "ms"]))
            .prop_map(|(a, b, u)| (format!("{a}.{b}{u}"), None)),
        // Text: garbage, floats in other spellings, whitespace.
        1 => prop::sample::select(vec![
            "", " ", "NaN", "inf", "-inf", "1e3", "1E400", "0x10", "+5", " 5", "5 ", "5s5",
            "5 s", "1h30m", "1h 30m", "١٢", "٣s", ".", "1.", ".5", "1..2", "--1", "-0",
            "1s-1s", "5 seconds", "1µs",
        ])
        .prop_map(|s| (s.to_owned(), None)),
        1 => any::<String>().prop_map(|s| (s, None)),
        1 => "[0-9smhd. -]{0,12}".prop_map(|s| (s, None)),
    ]
    .boxed()
}

/// The contract's TTL rule for a value with one exact meaning: a whole number of seconds,
/// 1 s ..= 365 days.
fn ttl_valid(nanos: u128) -> bool {
    nanos % 1_000_000_000 == 0 && (1..=u128::from(MAX_TTL_SECS)).contains(&(nanos / 1_000_000_000))
}

/// What humantime itself reads in `raw`, in nanoseconds: the contract's "humantime forms", read
/// by the crate the contract names rather than by distlock's parsers. `None` when it reads no
/// duration, or panics (humantime 2.4 does on a carry past `u64::MAX` seconds, far beyond every
/// bound here).
fn humantime_reading(raw: &str) -> Option<u128> {
    std::panic::catch_unwind(|| humantime::parse_duration(raw))
        .ok()?
        .ok()
        .map(|d| d.as_nanos())
}

/// A bare number of seconds (digits, with at most one `.` among them), in nanoseconds: a
/// fraction past nanoseconds is cut, and a number too large for `u128` saturates.
fn bare_number(raw: &str) -> Option<u128> {
    let (whole, fraction) = raw.split_once('.').unwrap_or((raw, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().unwrap_or(u128::MAX)
    };
    let nanos: String = fraction
        .chars()
        .chain("000000000".chars())
        .take(9)
        .collect();
    Some(
        whole
            .saturating_mul(1_000_000_000)
            .saturating_add(nanos.parse().expect("digits")),
    )
}

/// The contract's `--ttl` rule for text from [`duration_text`] (`nanos`: its exact meaning, when
/// it has one): fractions (any `.`) and negatives are never a TTL; a bare integer is seconds;
/// other text is a TTL only as a humantime form; and the value must pass [`ttl_valid`].
fn ttl_accepted(raw: &str, nanos: Option<u128>) -> bool {
    if raw.contains('.') || raw.trim_start().starts_with('-') {
        return false;
    }
    nanos
        .or_else(|| bare_number(raw))
        .or_else(|| humantime_reading(raw))
        .is_some_and(ttl_valid)
}

/// The contract's rule for `--wait`, `--kill-after`, `--since` and `--keep-history`, for text
/// from [`duration_text`]: a duration ≥ 0 — a bare number of seconds, fractions allowed
/// (`--wait 0.5`), or a humantime form (which humantime must be able to hold) — and at most
/// [`MAX_DURATION`]; never a negative.
fn duration_accepted(raw: &str, nanos: Option<u128>) -> bool {
    let max = MAX_DURATION.as_nanos();
    if raw.trim_start().starts_with('-') || nanos.is_some_and(|n| n > max) {
        return false;
    }
    bare_number(raw)
        .or_else(|| humantime_reading(raw))
        .is_some_and(|n| n <= max)
}

/// Calls a parser, turning a panic into an error the property reports.
fn no_panic<T>(what: &str, raw: &str, f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| TestCaseError::fail(format!("{what}({raw:?}) panicked")))
}

proptest! {
    #![proptest_config(Config { cases: 2000, failure_persistence: None, ..Config::default() })]

    #[test]
    fn resource_parse_follows_the_validation_table(raw in hostile_text()) {
        let parsed = no_panic("Resource::parse", &raw, || Resource::parse(&raw))?;
        prop_assert_eq!(parsed.is_ok(), resource_valid(&raw), "Resource::parse({:?})", raw);
        if let Ok(resource) = parsed {
            prop_assert_eq!(resource.as_str(), raw.as_str(), "taken as given, not trimmed");
        }
    }

    #[test]
    fn owner_parse_follows_the_validation_table(raw in hostile_text()) {
        let parsed = no_panic("Owner::parse", &raw, || Owner::parse(&raw))?;
        let expected = owner_valid(&raw);
        prop_assert_eq!(parsed.is_ok(), expected.is_some(), "Owner::parse({:?})", raw);
        if let (Ok(owner), Some(trimmed)) = (parsed, expected) {
            prop_assert_eq!(owner.as_str(), trimmed);
        }
    }

    #[test]
    fn ttl_parse_follows_the_validation_table((raw, nanos) in duration_text()) {
        let parsed = no_panic("Ttl::parse", &raw, || Ttl::parse(&raw))?;
        if raw.contains('.') || raw.trim_start().starts_with('-') {
            prop_assert!(parsed.is_err(), "fractions and negatives are never a TTL: {:?}", raw);
        }
        if let (Some(nanos), false) = (nanos, raw.contains('.')) {
            prop_assert_eq!(parsed.is_ok(), ttl_valid(nanos), "Ttl::parse({:?})", raw);
            if let Ok(ttl) = &parsed {
                prop_assert_eq!(ttl.as_duration().as_nanos(), nanos);
            }
        }
        if let Ok(ttl) = parsed {
            let secs = ttl.as_duration().as_secs();
            prop_assert!((1..=MAX_TTL_SECS).contains(&secs));
            prop_assert_eq!(ttl.as_duration().subsec_nanos(), 0);
            prop_assert_eq!(ttl.as_millis(), i64::try_from(secs * 1000).unwrap());
        }
    }

    #[test]
    fn durations_are_non_negative_bounded_and_never_panic((raw, nanos) in duration_text()) {
        let parsed = no_panic("parse_duration", &raw, || parse_duration(&raw))?;
        if raw.trim_start().starts_with('-') {
            prop_assert!(parsed.is_err(), "negative durations are rejected: {:?}", raw);
        }
        if let Some(nanos) = nanos {
            let fits = nanos <= MAX_DURATION.as_nanos();
            // Within the bound, humantime may still refuse a single number it cannot hold
            // (`18446744073709551615ns` with another term): a usage error, never a panic.
            let bare = !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            let held = fits && (bare || humantime::parse_duration(&raw).is_ok());
            prop_assert_eq!(parsed.is_ok(), held, "parse_duration({:?})", raw);
            if let Ok(duration) = &parsed {
                prop_assert_eq!(duration.as_nanos(), nanos);
            }
        }
        if let Ok(duration) = parsed {
            prop_assert!(duration <= MAX_DURATION);
        }
        // A bare decimal is seconds, fractions included (`--wait 0.5`).
        if let Some((whole, frac)) = raw.split_once('.') {
            if !whole.is_empty() && whole.len() < 6 && !frac.is_empty()
                && (whole.to_owned() + frac).bytes().all(|b| b.is_ascii_digit())
            {
                let expected: f64 = raw.parse().unwrap();
                let got = parse_duration(&raw).expect("a decimal number of seconds");
                prop_assert!((got.as_secs_f64() - expected).abs() < 1e-6, "{:?}", raw);
            }
        }
    }
}

/// humantime 2.4 carries a whole second out of the sub-second parts with `Duration::new`,
/// which panics when the seconds are already at `u64::MAX`.
const CARRY_OVERFLOW: &str = "18446744073709551615s 1000ms";

#[test]
fn durations_whose_carry_overflows_are_rejected_not_a_panic() {
    for raw in [
        CARRY_OVERFLOW,
        "18446744073709551615s1000ms",
        "18446744073709551615s 999ms 1000000ns",
        "18446744073709551615 s 1000000 us",
    ] {
        let duration = std::panic::catch_unwind(|| parse_duration(raw));
        assert!(
            matches!(duration, Ok(Err(_))),
            "parse_duration({raw:?}) must be an error, got {duration:?}"
        );
        let ttl = std::panic::catch_unwind(|| Ttl::parse(raw));
        assert!(
            matches!(ttl, Ok(Err(_))),
            "Ttl::parse({raw:?}) must be an error"
        );
    }
    // Through the binary: every duration flag, 64 and not 101.
    let db = Db::sqlite();
    let before = db.state();
    for args in [
        vec!["acquire", "r", "--owner", "w", "--ttl", CARRY_OVERFLOW],
        vec![
            "acquire",
            "r",
            "--owner",
            "w",
            "--ttl",
            "5",
            "--wait",
            CARRY_OVERFLOW,
        ],
        vec!["renew", "r", "--owner", "w", "--ttl", CARRY_OVERFLOW],
        vec![
            "run",
            "--resource",
            "r",
            "--kill-after",
            CARRY_OVERFLOW,
            "--",
            "true",
        ],
        vec![
            "run",
            "--resource",
            "r",
            "--wait",
            CARRY_OVERFLOW,
            "--",
            "true",
        ],
        vec!["log", "--since", CARRY_OVERFLOW],
        vec!["gc", "--keep-history", CARRY_OVERFLOW],
    ] {
        assert_usage_error(&db.run(&args), &args);
    }
    assert_eq!(db.state(), before);
}

// ---------------------------------------------------------------------------------------------
// Hostile input, through the binary
// ---------------------------------------------------------------------------------------------

/// Exit codes of the lock commands (and `run -- true`): never 101 (a panic), never a signal.
const LOCK_EXITS: [i32; 6] = [0, 1, 64, 74, 75, 77];

/// An argument the kernel can pass: it cannot hold NUL, so NUL becomes another control
/// character (still invalid for names).
fn passable(text: &str) -> String {
    text.replace('\0', "\u{1}")
}

/// A runner for properties that spawn the binary: few cases, no regression files, bounded
/// shrinking (each step is a process).
fn binary_runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    })
}

/// Runs distlock with `args`: checks it neither panicked nor died of a signal, that its exit
/// code is one of `allowed`, and that a usage error (64) printed nothing on stdout and left the
/// store exactly as it was. `expect_usage`: what the contract's validation table says (64 or
/// not), written in this file ([`resource_valid`], [`owner_valid`], [`ttl_accepted`],
/// [`duration_accepted`]), never what distlock's own parsers say.
fn hostile_call(
    db: &Db,
    args: &[OsString],
    allowed: &[i32],
    expect_usage: bool,
) -> Result<Output, TestCaseError> {
    let before = expect_usage.then(|| db.state());
    let out = db
        .std_cmd()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("spawn distlock");
    let shown: Vec<String> = args
        .iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.len() > 300 {
                let head: String = s.chars().take(100).collect();
                format!("{head}… ({} bytes)", a.len())
            } else {
                s.into_owned()
            }
        })
        .collect();
    let Some(code) = out.status.code() else {
        return Err(TestCaseError::fail(format!(
            "{shown:?}: died of a signal: {}",
            describe(&out)
        )));
    };
    prop_assert!(code != 101, "{:?}: panicked: {}", shown, describe(&out));
    prop_assert!(allowed.contains(&code), "{:?}: {}", shown, describe(&out));
    prop_assert_eq!(
        code == 64,
        expect_usage,
        "{:?}: the validation table says usage error = {}: {}",
        shown,
        expect_usage,
        describe(&out)
    );
    if let Some(before) = before {
        prop_assert!(
            out.stdout.is_empty(),
            "{:?}: a usage error prints nothing",
            shown
        );
        prop_assert!(
            !out.stderr.is_empty(),
            "{:?}: a usage error explains itself",
            shown
        );
        prop_assert_eq!(
            db.state(),
            before,
            "{:?}: a rejected input changed the store",
            shown
        );
    }
    Ok(out)
}

fn os(args: &[String]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// `acquire` with hostile names, owners and TTLs; accepted names go into the store and come
/// back out exactly.
fn acquire_property(db: &Db, cases: u32) {
    let ttl = prop_oneof![
        1 => (1u32..5000).prop_map(|n| (n.to_string(), Some(u128::from(n) * 1_000_000_000))),
        2 => duration_text(),
    ];
    let strategy = (hostile_text(), hostile_text(), ttl);
    binary_runner(cases)
        .run(&strategy, |(resource, owner, (ttl, nanos))| {
            let (resource, owner, ttl) = (passable(&resource), passable(&owner), passable(&ttl));
            let valid = resource_valid(&resource)
                && owner_valid(&owner).is_some()
                && ttl_accepted(&ttl, nanos);
            // `--flag=value` and `--` before the name, so that a value starting with `-` is
            // read as a value: the parser, not clap's flag syntax, decides.
            let args = os(&[
                "acquire".into(),
                format!("--owner={owner}"),
                format!("--ttl={ttl}"),
                "--".into(),
                resource.clone(),
            ]);
            let out = hostile_call(db, &args, &LOCK_EXITS, !valid)?;
            if valid {
                let code = out.status.code().unwrap();
                prop_assert!(code == 0 || code == 75, "{}", describe(&out));
                let json = parse_line(&out.stdout);
                if code == 0 {
                    prop_assert_eq!(json["lock"]["resource"].as_str(), Some(resource.as_str()));
                    prop_assert_eq!(json["lock"]["owner"].as_str(), Some(owner.trim()));
                    let (code, held) = db.status(&resource);
                    prop_assert_eq!(code, 0);
                    prop_assert_eq!(&held["lock"], &json["lock"]);
                    // Released at once: a lease that ran out between two snapshots of a later
                    // case would look like a change to the store.
                    let out = db
                        .std_cmd()
                        .args(["release", &format!("--owner={owner}"), "--", &resource])
                        .output()
                        .unwrap();
                    prop_assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{:?}: {e}", db.kind));
}

#[test]
fn binary_acquire_with_hostile_names_owners_and_ttls() {
    acquire_property(&Db::sqlite(), 64);
    if let Some(db) = Db::postgres() {
        acquire_property(&db, 24);
    }
}

#[test]
fn binary_status_release_renew_with_hostile_input() {
    let db = Db::sqlite();
    db.json(&["acquire", "held", "--owner", "holder", "--ttl", "300"], 0);
    let strategy = (
        0usize..3,
        prop_oneof![1 => Just("held".to_owned()), 3 => hostile_text()],
        prop_oneof![1 => Just("holder".to_owned()), 3 => hostile_text()],
        prop_oneof![
            1 => Just(("300".to_owned(), Some(300_000_000_000))),
            2 => duration_text(),
        ],
    );
    binary_runner(64)
        .run(&strategy, |(command, resource, owner, (ttl, nanos))| {
            let (resource, owner, ttl) = (passable(&resource), passable(&owner), passable(&ttl));
            let names_ok = resource_valid(&resource);
            let (args, valid) = match command {
                0 => (vec!["status".into()], names_ok),
                1 => (
                    vec!["release".into(), format!("--owner={owner}")],
                    names_ok && owner_valid(&owner).is_some(),
                ),
                _ => (
                    vec![
                        "renew".into(),
                        format!("--owner={owner}"),
                        format!("--ttl={ttl}"),
                    ],
                    names_ok && owner_valid(&owner).is_some() && ttl_accepted(&ttl, nanos),
                ),
            };
            let mut args = args;
            args.extend(["--".into(), resource.clone()]);
            let out = hostile_call(&db, &os(&args), &LOCK_EXITS, !valid)?;
            if valid {
                prop_assert!([0, 1, 77].contains(&out.status.code().unwrap()));
                parse_line(&out.stdout);
            }
            // Keep the lock around, with a long lease, for the next case.
            if command > 0 && out.status.code() == Some(0) {
                db.json(&["acquire", "held", "--owner", "holder", "--ttl", "300"], 0);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn binary_run_with_hostile_options() {
    let db = Db::sqlite();
    let duration = || {
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(("0".to_owned(), Some(0)))),
            3 => duration_text().prop_map(Some),
        ]
    };
    let code_text = prop_oneof![
        (0i64..300).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9+-]{0,5}",
        any::<String>(),
    ];
    let strategy = (
        hostile_text(),
        prop::option::of(hostile_text()),
        prop::option::of(duration_text()),
        duration(),
        duration(),
        prop::option::of(code_text),
    );
    binary_runner(64)
        .run(
            &strategy,
            |(resource, owner, ttl, wait, kill_after, conflict)| {
                let mut args = vec![
                    "run".to_owned(),
                    format!("--resource={}", passable(&resource)),
                ];
                let mut valid = resource_valid(&passable(&resource));
                if let Some(owner) = owner {
                    let owner = passable(&owner);
                    valid &= owner_valid(&owner).is_some();
                    args.push(format!("--owner={owner}"));
                }
                if let Some((ttl, nanos)) = ttl {
                    let ttl = passable(&ttl);
                    valid &= ttl_accepted(&ttl, nanos);
                    args.push(format!("--ttl={ttl}"));
                }
                for (flag, value) in [("--wait", wait), ("--kill-after", kill_after)] {
                    if let Some((value, nanos)) = value {
                        let value = passable(&value);
                        valid &= duration_accepted(&value, nanos);
                        args.push(format!("{flag}={value}"));
                    }
                }
                if let Some(code) = conflict {
                    let code = passable(&code);
                    // clap reads the number as an integer, then checks 0..=255.
                    valid &= code.parse::<i64>().is_ok_and(|n| (0..=255).contains(&n));
                    args.push(format!("--conflict-exit-code={code}"));
                }
                args.extend(["--".into(), "true".into()]);
                let out = hostile_call(&db, &os(&args), &LOCK_EXITS, !valid)?;
                if valid {
                    // The lock is free (every run releases), so the command runs.
                    prop_assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
                    prop_assert!(out.stdout.is_empty());
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn binary_log_list_gc_with_hostile_input() {
    let db = Db::sqlite();
    db.json(&["acquire", "held", "--owner", "holder", "--ttl", "300"], 0);
    let number_text = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[0-9]{19,40}",
        "[0-9+-]{0,4}",
        any::<String>(),
    ];
    let strategy = prop_oneof![
        duration_text().prop_map(|(t, nanos)| (0usize, t, nanos)),
        number_text.prop_map(|t| (1usize, t, None)),
        hostile_text().prop_map(|t| (2usize, t, None)),
        hostile_text().prop_map(|t| (3usize, t, None)),
        duration_text().prop_map(|(t, nanos)| (4usize, t, nanos)),
    ];
    binary_runner(64)
        .run(&strategy, |(command, value, nanos)| {
            let value = passable(&value);
            let (args, valid) = match command {
                0 => (
                    vec!["log".to_owned(), format!("--since={value}")],
                    duration_accepted(&value, nanos),
                ),
                1 => (
                    vec!["log".to_owned(), format!("--limit={value}")],
                    value.parse::<u64>().is_ok(),
                ),
                2 => (
                    vec!["log".to_owned(), "--".into(), value.clone()],
                    resource_valid(&value),
                ),
                // Any prefix is a prefix.
                3 => (vec!["list".to_owned(), format!("--prefix={value}")], true),
                _ => (
                    vec!["gc".to_owned(), format!("--keep-history={value}")],
                    duration_accepted(&value, nanos),
                ),
            };
            let out = hostile_call(&db, &os(&args), &LOCK_EXITS, !valid)?;
            if valid {
                prop_assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Bytes that are not UTF-8: a lone continuation byte, an overlong form, a surrogate, Latin-1.
const NOT_UTF8: [&[u8]; 5] = [
    b"\xff",
    b"abc\x80",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"caf\xe9",
];

#[test]
fn non_utf8_arguments_are_usage_errors_and_change_nothing() {
    each_store(|db| {
        db.json(&["acquire", "held", "--owner", "holder", "--ttl", "300"], 0);
        let before = db.state();
        for bytes in NOT_UTF8 {
            let bad = OsString::from_vec(bytes.to_vec());
            let with = |args: &[&str]| -> Vec<OsString> {
                args.iter()
                    .map(|a| {
                        if *a == "BAD" {
                            bad.clone()
                        } else {
                            OsString::from(a)
                        }
                    })
                    .collect()
            };
            let cases = [
                with(&["acquire", "BAD", "--owner", "w", "--ttl", "5"]),
                with(&["acquire", "r", "--owner", "BAD", "--ttl", "5"]),
                with(&["acquire", "r", "--owner", "w", "--ttl", "BAD"]),
                with(&[
                    "acquire", "r", "--owner", "w", "--ttl", "5", "--wait", "BAD",
                ]),
                with(&["status", "BAD"]),
                with(&["release", "BAD", "--owner", "holder"]),
                with(&["release", "held", "--owner", "BAD"]),
                with(&["renew", "held", "--owner", "BAD", "--ttl", "5"]),
                with(&["run", "--resource", "BAD", "--", "true"]),
                with(&["run", "--resource", "r", "--owner", "BAD", "--", "true"]),
                with(&[
                    "run",
                    "--resource",
                    "r",
                    "--kill-after",
                    "BAD",
                    "--",
                    "true",
                ]),
                with(&["list", "--prefix", "BAD"]),
                with(&["log", "BAD"]),
                with(&["log", "--since", "BAD"]),
                with(&["gc", "--keep-history", "BAD"]),
                with(&["--format", "BAD", "list"]),
                with(&["BAD"]),
            ];
            for args in &cases {
                let out = db.std_cmd().args(args).output().expect("spawn distlock");
                assert_usage_error(&out, &args);
            }
            // The same bytes from the environment.
            let out = db
                .std_cmd()
                .env("DISTLOCK_OWNER", &bad)
                .args(["acquire", "r", "--ttl", "5"])
                .output()
                .unwrap();
            assert_usage_error(&out, &("DISTLOCK_OWNER", &bad));
        }
        assert_eq!(
            db.state(),
            before,
            "{:?}: rejected input changed the store",
            db.kind
        );
    });
}

#[test]
fn non_utf8_database_paths_are_usage_errors_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for bytes in NOT_UTF8 {
        let mut name = b"locks-".to_vec();
        name.extend_from_slice(bytes);
        let path = dir.path().join(OsStr::from_bytes(&name));
        let out = distlock_at(&path)
            .args(["acquire", "r", "--owner", "w", "--ttl", "5"])
            .output()
            .unwrap();
        assert_usage_error(&out, &path);
        let out = distlock()
            .env("DISTLOCK_DB", &path)
            .args(["acquire", "r", "--owner", "w", "--ttl", "5"])
            .output()
            .unwrap();
        assert_usage_error(&out, &("DISTLOCK_DB", &path));
    }
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was created"
    );
}

#[test]
fn non_utf8_command_arguments_reach_the_command_unchanged() {
    let db = Db::sqlite();
    // A script whose own name is not UTF-8, printing an argument that is not either.
    let script = db.dir.path().join(OsStr::from_bytes(b"echo-\xff"));
    fs::write(&script, "#!/bin/sh\nprintf '%s' \"$1\"\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    for bytes in NOT_UTF8 {
        let out = db
            .std_cmd()
            .args(["run", "--resource", "r", "--"])
            .arg(&script)
            .arg(OsStr::from_bytes(bytes))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(out.stdout, bytes, "the argument must arrive byte for byte");
    }
}

#[test]
fn arguments_over_128_kib_cannot_be_passed_at_all() {
    // Why the properties stop at ~100 KiB: Linux caps one argument at MAX_ARG_STRLEN (32 pages,
    // 128 KiB); exec fails with E2BIG before distlock could see a 10 MB resource name.
    let err = distlock()
        .args(["status", &"x".repeat(10 * 1024 * 1024)])
        .output()
        .expect_err("a 10 MB argument cannot be passed");
    assert_eq!(err.raw_os_error(), Some(Errno::E2BIG as i32), "{err}");
    // Just under the cap still arrives, and is rejected by the length rule.
    let db = Db::sqlite();
    let out = db.run(&["status", &"x".repeat(127 * 1024)]);
    assert_usage_error(&out, &"a 127 KiB resource name");
}

// ---------------------------------------------------------------------------------------------
// Hostile stores (SQLite)
// ---------------------------------------------------------------------------------------------

/// Every command a store can refuse, with the marker that `run`'s command would leave if it
/// were (wrongly) started.
fn every_command(marker: &Path) -> Vec<Vec<OsString>> {
    let plain = |args: &[&str]| args.iter().map(OsString::from).collect::<Vec<_>>();
    let mut run = plain(&["run", "--resource", "r", "--", "touch"]);
    run.push(marker.into());
    vec![
        plain(&["status", "held"]),
        plain(&["acquire", "new", "--owner", "w", "--ttl", "30"]),
        plain(&["acquire", "held", "--owner", "holder", "--ttl", "30"]),
        plain(&["renew", "held", "--owner", "holder", "--ttl", "30"]),
        plain(&["release", "held", "--owner", "holder"]),
        plain(&["list"]),
        plain(&["log"]),
        plain(&["log", "held"]),
        plain(&["gc"]),
        run,
    ]
}

/// A real distlock database with locks, renewals, releases and history, checkpointed so that
/// the main file holds all of it (no `-wal`): the bytes the hostile-store tests start from.
fn real_database(db: &Db) -> Vec<u8> {
    for i in 0..40 {
        let resource = format!("lock-{i:02}");
        db.json(
            &["acquire", &resource, "--owner", "holder", "--ttl", "600"],
            0,
        );
        if i % 3 == 0 {
            db.json(
                &["renew", &resource, "--owner", "holder", "--ttl", "600"],
                0,
            );
        }
        if i % 4 == 0 {
            db.json(&["release", &resource, "--owner", "holder"], 0);
        }
    }
    db.json(&["acquire", "held", "--owner", "holder", "--ttl", "600"], 0);
    let conn = Connection::open(db.path()).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let bytes = fs::read(db.path()).unwrap();
    assert!(bytes.len() >= 4 * 4096, "a database of several pages");
    bytes
}

/// Writes `bytes` as a database file of its own (no `-wal`/`-shm` beside it) and checks that
/// every command refuses it with a store error, starts no command, and leaves it byte for byte.
fn assert_refused(bytes: &[u8], what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    fs::write(&path, bytes).unwrap();
    let marker = dir.path().join("started");
    for args in every_command(&marker) {
        let out = distlock_at(&path).args(&args).output().unwrap();
        assert_store_error(&out, &(what, &args));
        assert!(!marker.exists(), "{what}: run started its command");
        assert!(
            fs::read(&path).unwrap() == bytes,
            "{what}: {args:?} changed the file (it must never be overwritten or repaired)"
        );
    }
}

#[test]
fn truncated_database_is_a_store_error_and_left_as_it_is() {
    let db = Db::sqlite();
    let bytes = real_database(&db);
    assert_refused(&bytes[..bytes.len() / 2], "truncated to half its size");
    assert_refused(&bytes[..100], "truncated to 100 bytes");
    assert_refused(&bytes[..4096], "truncated to its first page");
}

#[test]
fn garbage_database_is_a_store_error_and_left_as_it_is() {
    let db = Db::sqlite();
    let real = real_database(&db);
    let random = |n: usize| (0..n).map(|_| fastrand::u8(..)).collect::<Vec<u8>>();
    assert_refused(&random(4096), "4 KiB of random bytes");
    assert_refused(&random(100), "100 random bytes");
    let mut magic = b"SQLite format 3\0".to_vec();
    magic.extend(random(8192));
    assert_refused(&magic, "SQLite's magic, then garbage");
    let mut header = real[..100].to_vec();
    header.extend(random(real.len() - 100));
    assert_refused(&header, "a real header, then garbage");
    let mut pages = real.clone();
    for byte in &mut pages[4096..] {
        *byte ^= 0x5a;
    }
    assert_refused(&pages, "a real first page, then every other page scrambled");
}

#[test]
fn database_replaced_by_a_directory_is_a_store_error() {
    let db = Db::sqlite();
    db.json(&["acquire", "held", "--owner", "holder", "--ttl", "600"], 0);
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", db.url));
    }
    fs::create_dir(db.path()).unwrap();
    fs::write(db.path().join("inside"), "keep").unwrap();
    let marker = db.file("started");
    for args in every_command(&marker) {
        let out = distlock_at(db.path()).args(&args).output().unwrap();
        assert_store_error(&out, &("a directory", &args));
        assert!(!marker.exists());
    }
    assert_eq!(
        fs::read_to_string(db.path().join("inside")).unwrap(),
        "keep"
    );
    assert_eq!(fs::read_dir(db.path()).unwrap().count(), 1);
}

/// Makes a store's files and folder read-only for the test (undone when dropped).
enum ReadOnly {
    /// `chattr +i`: immutable, even for root.
    Immutable(Vec<PathBuf>),
    /// The folder bind-mounted read-only onto itself (root, where chattr is not supported).
    BindMount(PathBuf),
    /// `chmod a-w`, for a test that does not run as root.
    Chmod(Vec<PathBuf>),
}

impl ReadOnly {
    /// `files` and then their `folder`, read-only by the first means that works here; `None`
    /// where none does (root, without `chattr +i` or a read-only bind mount): skipped by the
    /// gate (tool `READ_ONLY`).
    fn apply(files: &[PathBuf], folder: &Path) -> Option<ReadOnly> {
        let made = ReadOnly::make(files, folder).ok_or_else(|| {
            "running as root, and neither chattr +i nor a read-only bind mount works here"
                .to_owned()
        });
        require("READ_ONLY", "a read-only store", made)
    }

    fn make(files: &[PathBuf], folder: &Path) -> Option<ReadOnly> {
        let mut paths = files.to_vec();
        paths.push(folder.to_owned());
        let quiet = |cmd: &mut Command| {
            cmd.stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if quiet(Command::new("chattr").arg("+i").args(&paths)) {
            return Some(ReadOnly::Immutable(paths));
        }
        if !running_as_root() {
            for path in &paths {
                let mode = if path.is_dir() { 0o555 } else { 0o444 };
                fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
            }
            return Some(ReadOnly::Chmod(paths));
        }
        if quiet(Command::new("mount").arg("--bind").arg(folder).arg(folder)) {
            let guard = ReadOnly::BindMount(folder.to_owned());
            let remounted = quiet(
                Command::new("mount")
                    .args(["-o", "remount,bind,ro"])
                    .arg(folder),
            );
            return remounted.then_some(guard);
        }
        None
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        match self {
            ReadOnly::Immutable(paths) => {
                let _ = Command::new("chattr").arg("-i").args(&*paths).status();
            }
            ReadOnly::BindMount(folder) => {
                let _ = Command::new("umount").arg(&*folder).status();
            }
            ReadOnly::Chmod(paths) => {
                for path in paths.iter() {
                    let mode = if path.is_dir() { 0o755 } else { 0o644 };
                    let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
                }
            }
        }
    }
}

#[test]
fn read_only_database_serves_reads_and_refuses_writes_unchanged() {
    // As root, permission bits do not stop writes: the files and their folder are made
    // immutable (`chattr +i`, which binds root too), or else the folder is bind-mounted
    // read-only; as another user, `chmod a-w` does it.
    let db = Db::sqlite();
    let held = db.json(&["acquire", "held", "--owner", "holder", "--ttl", "600"], 0);
    db.json(
        &["acquire", "other", "--owner", "holder", "--ttl", "600"],
        0,
    );
    let out = db.run(&["run", "--resource", "r", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // A waiter creates the turnstile file: it must exist before the folder is locked down.
    let out = db.run(&[
        "acquire", "held", "--owner", "waiter", "--ttl", "60", "--wait", "0.2",
    ]);
    assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
    assert!(PathBuf::from(format!("{}-turnstile", db.url)).exists());
    let files: Vec<PathBuf> = ["", "-wal", "-shm", "-turnstile"]
        .iter()
        .map(|s| PathBuf::from(format!("{}{s}", db.url)))
        .filter(|p| p.exists())
        .collect();
    let snapshot: Vec<Vec<u8>> = files.iter().map(|p| fs::read(p).unwrap()).collect();
    let Some(read_only) = ReadOnly::apply(&files, db.dir.path()) else {
        return;
    };
    let marker = std::env::temp_dir().join(format!("distlock-ro-started-{}", std::process::id()));
    for args in every_command(&marker) {
        let out = distlock_at(db.path()).args(&args).output().unwrap();
        let reads = ["status", "list", "log"].contains(&args[0].to_str().unwrap());
        if reads {
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
        } else {
            assert_store_error(&out, &("read-only", &args));
        }
        assert!(
            !marker.exists(),
            "run started its command on a read-only store"
        );
    }
    let out = distlock_at(db.path())
        .args(["status", "held"])
        .output()
        .unwrap();
    assert_eq!(parse_line(&out.stdout)["lock"], held["lock"]);
    drop(read_only);
    for (path, before) in files.iter().zip(&snapshot) {
        assert!(
            fs::read(path).unwrap() == *before,
            "{} changed on a read-only store",
            path.display()
        );
    }
}

/// A tiny tmpfs mounted for one test, unmounted when dropped.
struct TinyFs(PathBuf);

impl TinyFs {
    /// `None` where no tmpfs can be mounted here (not root, a container): skipped by the gate
    /// (tool `TMPFS`), as `what`.
    fn mount(at: &Path, size: &str, what: &str) -> Option<TinyFs> {
        fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|err| format!("mount cannot run: {err}"))
            .and_then(|out| {
                out.status
                    .success()
                    .then(|| TinyFs(at.to_owned()))
                    .ok_or_else(|| format!("cannot mount a tmpfs here: {}", describe(&out)))
            });
        require("TMPFS", what, mounted)
    }

    /// Fills the filesystem to the last byte.
    fn fill(&self) -> PathBuf {
        let filler = self.0.join("filler");
        let mut file = fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        let mut byte = [0u8; 1];
        while file.write_all(&byte).is_ok() {
            byte[0] = byte[0].wrapping_add(1);
        }
        filler
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn full_filesystem_is_a_store_error_and_loses_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    // 64 KiB cannot even hold one store (the WAL index alone is 32 KiB, and the WAL holds the
    // new store's schema, made and upgraded in one transaction, ~190 KiB after the commits
    // below): 320 KiB holds a small one, then gets filled up.
    // Without a tmpfs, the file-size limit test still covers running out of room.
    let Some(tiny) = TinyFs::mount(&scratch.path().join("tiny"), "320k", "a full filesystem")
    else {
        return;
    };
    let path = tiny.0.join("locks.db");
    let fresh = tiny.0.join("fresh.db");
    let at = |p: &Path, args: &[&str]| distlock_at(p).args(args).output().unwrap();
    let mut fences = Vec::new();
    for resource in ["held", "x1", "x2", "x3"] {
        let out = at(
            &path,
            &["acquire", resource, "--owner", "holder", "--ttl", "600"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        fences.push(parse_line(&out.stdout)["lock"]["fence"].as_i64().unwrap());
    }
    let out = at(&path, &["run", "--resource", "r", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let held = parse_line(&at(&path, &["status", "held"]).stdout);
    let events_before = parse_lines(&at(&path, &["log"]).stdout).len();

    let filler = tiny.fill();
    let bytes = fs::read(&path).unwrap();
    let marker = scratch.path().join("started");
    for args in every_command(&marker) {
        let out = distlock_at(&path).args(&args).output().unwrap();
        match args[0].to_str().unwrap() {
            "status" | "list" | "log" => {
                assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
            }
            // Nothing expired: gc has nothing to write.
            "gc" => assert!(
                matches!(out.status.code(), Some(0 | 74)),
                "{}",
                describe(&out)
            ),
            _ => {
                assert_store_error(&out, &("full filesystem", &args));
            }
        }
        assert!(!marker.exists(), "run started its command with a full disk");
        assert!(
            fs::read(&path).unwrap() == bytes,
            "{args:?} changed the database file"
        );
    }
    // A new store on a full disk: a store error, and nothing left behind that breaks it later.
    let out = at(&fresh, &["acquire", "r", "--owner", "w", "--ttl", "30"]);
    assert_store_error(&out, &"a new store on a full filesystem");

    // With room again: the store is sound and nothing of the refused commands happened.
    fs::remove_file(filler).unwrap();
    let conn = Connection::open(&path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    assert_eq!(parse_line(&at(&path, &["status", "held"]).stdout), held);
    assert_eq!(
        parse_lines(&at(&path, &["log"]).stdout).len(),
        events_before,
        "the refused commands left history behind"
    );
    let out = at(&path, &["acquire", "new", "--owner", "w", "--ttl", "30"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let fence = parse_line(&out.stdout)["lock"]["fence"].as_i64().unwrap();
    assert!(
        fence > *fences.iter().max().unwrap(),
        "fence {fence} after {fences:?}"
    );
    let out = at(&fresh, &["acquire", "r", "--owner", "w", "--ttl", "30"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the fresh store, with room: {}",
        describe(&out)
    );
    drop(tiny);
}

#[test]
fn file_size_limit_is_a_store_error_not_a_signal() {
    // RLIMIT_FSIZE ("ulimit -f"): a write past it raises SIGXFSZ, whose default action kills the
    // process; ignored, the write fails with EFBIG instead. The store cannot be written: 74.
    if require(
        "PRLIMIT",
        "a file-size limit",
        runs("prlimit", &["--version"]),
    )
    .is_none()
    {
        return;
    }
    let db = Db::sqlite();
    db.json(&["acquire", "held", "--owner", "holder", "--ttl", "600"], 0);
    let largest = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|s| fs::metadata(format!("{}{s}", db.url)).ok())
        .map(|m| m.len())
        .max()
        .unwrap();
    let limited = |args: &[&str]| {
        isolated("prlimit")
            .arg(format!("--fsize={largest}:{largest}"))
            .arg("--")
            .arg(BIN)
            .args(["--db", &db.url])
            .args(args)
            .output()
            .unwrap()
    };
    let out = limited(&["status", "held"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "reads need no room: {}",
        describe(&out)
    );
    let bytes = fs::read(db.path()).unwrap();
    for args in [
        vec!["acquire", "new", "--owner", "w", "--ttl", "30"],
        vec!["run", "--resource", "new", "--", "true"],
    ] {
        let out = limited(&args);
        assert_store_error(&out, &("a file-size limit", &args));
    }
    assert!(fs::read(db.path()).unwrap() == bytes);
    let out = db.run(&["acquire", "new", "--owner", "w", "--ttl", "30"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "without the limit: {}",
        describe(&out)
    );
}

/// A `run --ttl TTL --kill-after 1` on the SQLite store at `path` whose command writes its pid
/// to `started` and sleeps; returns once the heartbeat has renewed (a third of the TTL in), so
/// that it holds a connection of its own. Its stderr goes to `stderr`.
fn guard_past_its_first_renewal(path: &Path, ttl: &str, started: &Path, stderr: &Path) -> Child {
    let mut guard = distlock_at(path)
        .args([
            "run",
            "--resource",
            "r",
            "--ttl",
            ttl,
            "--kill-after",
            "1",
            "--",
        ])
        .args(["sh", "-c", r#"echo $$ >"$1"; exec sleep 30"#, "sh"])
        .arg(started)
        .stdout(Stdio::null())
        .stderr(fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap();
    wait_for_file(started, Duration::from_secs(20));
    let start = Instant::now();
    let renewed = || {
        let out = distlock_at(path).args(["log", "r"]).output().unwrap();
        parse_lines(&out.stdout)
            .iter()
            .any(|e| e["event"] == "renewed")
    };
    while !renewed() {
        if start.elapsed() > Duration::from_secs(15) {
            let _ = guard.kill();
            let _ = guard.wait();
            panic!("no renewal seen in 15 s");
        }
        thread::sleep(Duration::from_millis(100));
    }
    guard
}

/// Waits (15 s at most) for the guard of [`guard_past_its_first_renewal`] to exit; fails unless
/// it exited 124 with its command gone. Returns the guard's stderr.
fn assert_stopped_its_command(mut guard: Child, started: &Path, stderr: &Path) -> String {
    let exit = wait_or_kill(&mut guard, Duration::from_secs(15));
    let command: i32 = fs::read_to_string(started).unwrap().trim().parse().unwrap();
    let command_ran_on = !is_gone(command);
    let _ = killpg(Pid::from_raw(command), Signal::SIGKILL);
    let stderr = fs::read_to_string(stderr).unwrap_or_default();
    assert!(
        exit.is_some_and(|e| e.code() == Some(124)) && !command_ran_on,
        "a guard whose store vanished must stop its command and exit 124; 15 s on, the guard \
         {} and its command {} (stderr: {stderr})",
        exit.map_or("still ran (killed now)".to_owned(), |e| e.to_string()),
        if command_ran_on {
            "still ran"
        } else {
            "was gone"
        },
    );
    stderr
}

#[test]
fn database_folder_removed_while_run_holds_the_lock_stops_the_command() {
    // The guard's heartbeat keeps its connection open; once the folder is gone, renewing
    // through it would only touch an unlinked file while anyone opening the path sees no lock
    // at all. The guard must treat that as a lost lease, not keep the command running.
    let scratch = tempfile::tempdir().unwrap();
    let folder = scratch.path().join("store");
    let path = folder.join("locks.db");
    let started = scratch.path().join("started");
    let stderr = scratch.path().join("guard.stderr");
    let guard = guard_past_its_first_renewal(&path, "3", &started, &stderr);
    fs::remove_dir_all(&folder).unwrap();
    // Anyone else now finds the lock free (a new, empty store at the same path).
    let out = distlock_at(&path)
        .args(["acquire", "r", "--owner", "intruder", "--ttl", "60"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_stopped_its_command(guard, &started, &stderr);
}

#[test]
fn database_file_removed_while_run_holds_the_lock_stops_the_command_and_says_the_store_is_gone() {
    // Only the database file goes; its folder and the `-wal`/`-shm` files stay. The heartbeat
    // must not make a new store there to renew in (finding no lock in it, it would blame an
    // expiry or a release): it says the store is gone, and creates nothing. A TTL of 6 s leaves
    // the heartbeat time to reconnect (a second after the failed renewal at 4 s) well before
    // failing renewals alone would stop the command (about 6.4 s in).
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("locks.db");
    let started = scratch.path().join("started");
    let stderr = scratch.path().join("guard.stderr");
    let guard = guard_past_its_first_renewal(&path, "6", &started, &stderr);
    fs::remove_file(&path).unwrap();
    let stderr = assert_stopped_its_command(guard, &started, &stderr);
    let gone = format!("the store {} no longer exists", path.display());
    assert!(
        stderr.contains(&format!("lost the lock on r: {gone}")),
        "the stop message must say {gone:?}: {stderr}"
    );
    assert!(
        !stderr.contains("expired or was released"),
        "nothing expired or was released: {stderr}"
    );
    assert!(
        !path.exists(),
        "the guard created a new store at {} after the old one was removed",
        path.display()
    );
}

// ---------------------------------------------------------------------------------------------
// A hostile turnstile (SQLite)
// ---------------------------------------------------------------------------------------------

/// The turnstile file beside `db`'s database.
fn turnstile_of(db: &Db) -> PathBuf {
    PathBuf::from(format!("{}-turnstile", db.url))
}

/// `holder` holds `r` on `db`, and a waiter (`acquire --wait 30`, owner `waiter`) has taken its
/// place in the queue behind it: the waiter, running.
fn waiter_queued_behind_a_holder(db: &Db) -> Proc {
    db.json(&["acquire", "r", "--owner", "holder", "--ttl", "600"], 0);
    let waiter = db.spawn(
        &[
            "acquire", "r", "--owner", "waiter", "--ttl", "60", "--wait", "30",
        ],
        "waiter",
    );
    wait_until(Duration::from_secs(20), "the waiter queues", || {
        db.waiting("r") == 1
    });
    waiter
}

#[test]
fn a_planted_turnstile_symlink_is_never_written_through_and_waiters_poll() {
    // In a folder others can write, `locks.db-turnstile` may be a link someone planted. Followed,
    // every waiter would grow its target to 4 KiB and write counters into it.
    let db = Db::sqlite();
    let victim = db.file("victim");
    fs::write(&victim, "precious\n").unwrap();
    std::os::unix::fs::symlink(&victim, turnstile_of(&db)).unwrap();
    let waiter = waiter_queued_behind_a_holder(&db);
    db.json(&["release", "r", "--owner", "holder"], 0);
    // Not rung (the ringer refuses the link too): the waiter finds the lock at its next poll.
    let done = waiter.finish(Duration::from_secs(20));
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    assert_eq!(parse_line(&done.output.stdout)["lock"]["owner"], "waiter");
    let victim_now = fs::read(&victim).unwrap();
    assert!(
        victim_now == b"precious\n",
        "the victim was written to: {} bytes now",
        victim_now.len()
    );
    assert!(
        fs::symlink_metadata(turnstile_of(&db))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the planted link is left as it is"
    );
}

#[test]
fn a_turnstile_cut_short_under_a_waiter_leaves_it_polling_not_dead() {
    // The waiter sleeps on a futex in the turnstile's mapped page and reads its counter between
    // looks. Cut to 0 bytes, the page is gone: a load from it would kill the waiter (SIGBUS).
    let db = Db::sqlite();
    let waiter = waiter_queued_behind_a_holder(&db);
    assert!(turnstile_of(&db).exists(), "the waiter made the turnstile");
    fs::OpenOptions::new()
        .write(true)
        .open(turnstile_of(&db))
        .unwrap()
        .set_len(0)
        .unwrap();
    // Several of the waiter's looks (one every 250 ms at most) on the page that is gone.
    thread::sleep(Duration::from_millis(1500));
    assert!(!is_gone(waiter.pid().as_raw()), "the waiter died");
    db.json(&["release", "r", "--owner", "holder"], 0);
    let done = waiter.finish(Duration::from_secs(20));
    assert_eq!(
        done.code(),
        Some(0),
        "the waiter still gets the lock: {}",
        done.describe()
    );
    assert_eq!(parse_line(&done.output.stdout)["lock"]["owner"], "waiter");
    assert_eq!(db.waiting("r"), 0);
}

// ---------------------------------------------------------------------------------------------
// Permissions
// ---------------------------------------------------------------------------------------------

/// Creates a store (in a folder distlock creates too) under `umask`, and returns the mode of
/// each file: the folder, the database, `-wal` and `-shm` while a `run` holds it open, and
/// `-turnstile` once a waiter queued behind it (the first waiter creates it).
fn modes_under_umask(umask: &str) -> Vec<(String, u32)> {
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("state").join("locks.db");
    let started = scratch.path().join("started");
    let under_umask = || {
        let mut command = isolated("sh");
        command
            .args(["-c", &format!(r#"umask {umask}; exec "$0" "$@""#), BIN])
            .arg("--db")
            .arg(&path)
            .stdout(Stdio::null());
        command
    };
    let mut guard = under_umask()
        .args(sh_script(
            &["run", "--resource", "r"],
            r#"touch "$1"; exec sleep 30"#,
            &[],
        ))
        .arg(&started)
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(20));
    let mut modes = Vec::new();
    let folder = path.parent().unwrap().to_owned();
    modes.push((
        "folder".to_owned(),
        fs::metadata(&folder).unwrap().mode() & 0o777,
    ));
    let mode_of = |suffix: &str, when: &str| {
        let file = format!("{}{suffix}", path.display());
        let mode = fs::metadata(&file)
            .unwrap_or_else(|e| panic!("{file} {when}: {e}"))
            .mode();
        (format!("locks.db{suffix}"), mode & 0o777)
    };
    for suffix in ["", "-wal", "-shm"] {
        modes.push(mode_of(suffix, "while run holds the store"));
    }
    let mut waiter = under_umask()
        .args([
            "acquire", "r", "--owner", "waiter", "--ttl", "60", "--wait", "60s",
        ])
        .spawn()
        .unwrap();
    wait_for_file(
        Path::new(&format!("{}-turnstile", path.display())),
        Duration::from_secs(20),
    );
    modes.push(mode_of("-turnstile", "once a waiter queued"));
    kill(pid_of(&waiter), Signal::SIGTERM).unwrap();
    let exit = wait_within(&mut waiter, Duration::from_secs(20), "the waiter");
    assert_eq!(exit.code(), Some(128 + 15), "the waiter left on SIGTERM");
    kill(pid_of(&guard), Signal::SIGTERM).unwrap();
    let exit = wait_within(&mut guard, Duration::from_secs(20), "the guard");
    assert_eq!(exit.code(), Some(128 + 15), "SIGTERM forwarded to sleep");
    modes
}

#[test]
fn new_store_files_are_not_writable_by_group_or_others_under_umask_022() {
    let modes = modes_under_umask("022");
    for (name, mode) in &modes {
        assert_eq!(
            mode & 0o022,
            0,
            "{name} is {mode:o} under umask 022: {modes:?}"
        );
        assert_eq!(
            mode & 0o600,
            0o600,
            "{name} is {mode:o}: its owner must read and write"
        );
    }
}

#[test]
fn new_store_files_are_group_writable_under_umask_002() {
    // A store shared by the users of one group (umask 002, a setgid folder): every member must
    // be able to write the database, its WAL and WAL index, and the turnstile.
    let modes = modes_under_umask("002");
    for (name, mode) in &modes {
        assert_eq!(
            mode & 0o002,
            0,
            "{name} is {mode:o}: never writable by others"
        );
        assert_eq!(
            mode & 0o060,
            0o060,
            "{name} is {mode:o} under umask 002: the group must read and write it: {modes:?}"
        );
    }
}
