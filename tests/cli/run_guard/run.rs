//! `run`, the exec guard: exit statuses, the busy path, the command's environment and stdout,
//! the heartbeat, stopping the command (and everything it started) when the lease is lost,
//! signal forwarding, `--wait` hand-over, exec failures, joining a tenure, usage errors, and
//! that only a tenure `acquire` took may be joined (one `run` took is busy for its own owner).
//!
//! Commands are `sh -c` scripts that leave marker files in the test's scratch folder (`$D`);
//! `$DL` is the binary under test, for scripts that look at the lock from inside. Files other
//! processes wait for are written to a temporary name and renamed, so they are never read half
//! written. Timing checks are upper bounds with generous slack, or lower bounds that follow
//! from causality.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::json;

use crate::common::files::{read_number, read_trimmed};
use crate::common::output::{event_names, now_millis, parse_line, timestamp_millis};
use crate::common::pids::{KillOnDrop, all_gone_within, ids_of, is_gone, pid_in};
use crate::common::process::{BIN, Proc, describe, distlock, wait_for, wait_for_file, wait_until};
use crate::common::require::require;
use crate::common::store::{
    Db, Kind, assert_free, assert_held_by, each_store_and_server, output_exiting, run_cmd,
    sh_script,
};
use crate::common::tenure::{Mode, Tenure};

/// Holds SQLite's write lock on `path` from another connection for `hold`, as a stuck writer
/// would; returns once the lock is taken. Readers still get through (WAL mode); writers wait
/// for their busy timeout and fail.
fn hold_write_lock(path: &Path, hold: Duration) -> thread::JoinHandle<()> {
    let (taken, is_taken) = mpsc::channel();
    let path = path.to_owned();
    let holder = thread::spawn(move || {
        let conn = rusqlite::Connection::open(&path).expect("open the database");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("busy timeout");
        conn.execute_batch("BEGIN EXCLUSIVE")
            .expect("take the write lock");
        taken.send(()).expect("report the lock");
        thread::sleep(hold);
        conn.execute_batch("ROLLBACK").expect("give the lock back");
    });
    is_taken
        .recv_timeout(Duration::from_secs(15))
        .expect("took the database's write lock");
    holder
}

const LONG: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Exit statuses, busy, environment, output
// ---------------------------------------------------------------------------------------------

#[test]
fn exit_status_passes_through_and_signal_deaths_become_128_plus_n() {
    each_store_and_server(|db| {
        for (script, expected) in [
            ("exit 0", 0),
            ("exit 3", 3),
            ("exit 42", 42),
            ("exit 255", 255),
            ("kill -TERM $$", 143),
            ("kill -KILL $$", 137),
        ] {
            let out = run_cmd(db, &["--resource", "pass", "--", "sh", "-c", script])
                .output()
                .expect("run distlock");
            assert_eq!(
                out.status.code(),
                Some(expected),
                "sh -c {script:?}: stderr {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.stdout.is_empty(), "{script}: stdout {:?}", out.stdout);
            // Whatever the command's status, the lock is given back.
            assert_free(db, "pass");
        }
    });
}

#[test]
fn busy_lock_exits_75_or_the_conflict_code_and_never_starts_the_command() {
    each_store_and_server(|db| {
        let held = db.json(&["acquire", "busy", "--owner", "other", "--ttl", "60"], 0);
        let ran = db.file("ran");
        for (extra, expected) in [
            (&[][..], 75),
            (&["--conflict-exit-code", "0"][..], 0),
            (&["--conflict-exit-code", "9"][..], 9),
            (&["--conflict-exit-code", "75"][..], 75),
        ] {
            let mut args = vec!["--resource", "busy"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "sh", "-c", r#"echo ran > "$D/ran""#]);
            let out = run_cmd(db, &args).output().expect("run distlock");
            assert_eq!(
                out.status.code(),
                Some(expected),
                "{args:?}: stderr {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.stdout.is_empty(), "{args:?}: stdout {:?}", out.stdout);
            assert!(!ran.exists(), "{args:?}: the command ran on a busy lock");
        }

        // --wait that runs out is busy too, after waiting.
        let start = Instant::now();
        let out = run_cmd(
            db,
            &sh_script(
                &["--resource", "busy", "--wait", "1s"],
                r#"echo ran > "$D/ran""#,
                &[],
            ),
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(75));
        assert!(
            start.elapsed() >= Duration::from_millis(900),
            "did not wait"
        );
        assert!(out.stdout.is_empty());
        assert!(!ran.exists(), "the command ran after --wait ran out");

        // The holder's lock is untouched.
        let lock = assert_held_by(db, "busy", "other");
        assert_eq!(lock["fence"], held["lock"]["fence"]);
        assert_eq!(lock["expires_at"], held["lock"]["expires_at"]);
    });
}

#[test]
fn command_gets_the_four_variables_and_its_fence_is_the_one_status_reports() {
    each_store_and_server(|db| {
        let script = r#"printf '%s\n' "$DISTLOCK_RESOURCE" "$DISTLOCK_OWNER" "$DISTLOCK_FENCE" "$DISTLOCK_DB" > "$D/env"
            "$DL" status "$DISTLOCK_RESOURCE" > "$D/status""#;
        // The store comes from --db here, not from the environment: the command gets it anyway.
        let mut cmd = db.std_cmd();
        cmd.env_remove("DISTLOCK_DB")
            .env("D", db.dir.path())
            .env("DL", BIN)
            .args(["--db", &db.url, "run", "--resource", "env: r 1"])
            .args(["--", "sh", "-c", script]);
        let proc = Proc::spawn(&mut cmd, db.dir.path(), "run");
        let pid = proc.pid().as_raw();
        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(0), "{}", proc.describe());

        let env = fs::read_to_string(db.file("env")).expect("env file");
        let lines: Vec<&str> = env.lines().collect();
        assert_eq!(lines.len(), 4, "{env:?}");
        let (resource, owner, fence, store) = (lines[0], lines[1], lines[2], lines[3]);
        assert_eq!(resource, "env: r 1");
        assert_eq!(store, db.url);

        // The default owner: <hostname>:<pid of this distlock>:<8 hex digits>.
        let parts: Vec<&str> = owner.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "owner {owner:?}");
        let (hex, owner_pid, host) = (parts[0], parts[1], parts[2]);
        assert!(
            hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()),
            "owner {owner:?}: suffix is not 8 hex digits"
        );
        assert_eq!(owner_pid, pid.to_string(), "owner {owner:?}: not run's pid");
        let hostname = nix::unistd::gethostname()
            .expect("hostname")
            .into_string()
            .expect("utf-8 hostname");
        assert!(
            !host.is_empty() && hostname.starts_with(host),
            "owner {owner:?}: host part is not this host ({hostname})"
        );

        // What the command saw matches what the store says while it runs.
        let seen = parse_line(&fs::read(db.file("status")).expect("status file"));
        assert_eq!(seen["held"], true, "{seen}");
        assert_eq!(seen["lock"]["resource"], resource);
        assert_eq!(seen["lock"]["owner"], owner);
        let fence: i64 = fence.parse().expect("DISTLOCK_FENCE is a number");
        assert_eq!(seen["lock"]["fence"], fence);

        // The default owner is unique per process.
        let out = run_cmd(
            db,
            &sh_script(
                &["--resource", "env: r 1"],
                r#"echo "$DISTLOCK_OWNER" > "$D/owner2""#,
                &[],
            ),
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(0));
        assert_ne!(read_trimmed(&db.file("owner2")), owner);
        assert_free(db, "env: r 1");
    });
}

#[test]
fn a_relative_db_is_exported_as_an_absolute_path_so_a_command_that_cds_reaches_the_same_store() {
    // `--db ./link/rel.db`, relative to run's folder, through a symlink: the command gets the
    // path made absolute against that folder (the symlink kept, `.` dropped), and finds its
    // own lock held after `cd /`.
    let scratch = tempfile::tempdir().expect("temp dir");
    // What the command's `pwd -P` would say: the kernel resolves the scratch folder's own path.
    let folder = fs::canonicalize(scratch.path()).expect("canonical scratch folder");
    fs::create_dir(folder.join("real")).expect("mkdir real");
    std::os::unix::fs::symlink("real", folder.join("link")).expect("symlink link -> real");
    let script = r#"printf '%s\n' "$DISTLOCK_DB" > "$D/db"
        cd / && "$DL" status r > "$D/status""#;
    let out = distlock()
        .current_dir(&folder)
        .env("D", &folder)
        .env("DL", BIN)
        .args(["--db", "./link/rel.db", "run", "--resource", "r"])
        .args(["--", "sh", "-c", script])
        .output()
        .expect("run distlock");
    let exported = read_trimmed(&folder.join("db"));
    assert_eq!(
        Some(exported.as_str()),
        folder.join("link/rel.db").to_str(),
        "DISTLOCK_DB: absolute, symlinks not resolved"
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "after `cd /`, status must find the lock held in the same store: {}",
        describe(&out)
    );
    let seen = parse_line(&fs::read(folder.join("status")).expect("status file"));
    assert_eq!(seen["held"], true, "{seen}");
    assert!(
        folder.join("real/rel.db").exists(),
        "the store is where --db named it"
    );
}

#[test]
fn stdout_is_exactly_the_commands_own() {
    each_store_and_server(|db| {
        for format in ["json", "text"] {
            let out = run_cmd(
                db,
                &sh_script(
                    &["--format", format, "--resource", "out"],
                    r"printf 'a\nb'; printf 'to-stderr' >&2",
                    &[],
                ),
            )
            .output()
            .expect("run distlock");
            assert_eq!(out.status.code(), Some(0));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "a\nb",
                "--format {format}: stdout must be the command's, byte for byte"
            );
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("to-stderr"),
                "the command's stderr is inherited"
            );
        }
    });
}

#[test]
fn run_never_takes_its_owner_from_distlock_owner_but_does_from_the_flag() {
    each_store_and_server(|db| {
        let held = db.json(
            &["acquire", "shared", "--owner", "shared", "--ttl", "60"],
            0,
        );
        let ran = db.file("ran");

        // An owner inherited through the environment must not join someone else's lock.
        let out = run_cmd(
            db,
            &sh_script(&["--resource", "shared"], r#"echo ran > "$D/ran""#, &[]),
        )
        .env("DISTLOCK_OWNER", "shared")
        .output()
        .expect("run distlock");
        assert_eq!(
            out.status.code(),
            Some(75),
            "run joined a lock through DISTLOCK_OWNER; stderr {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!ran.exists(), "the command ran");

        // On a free lock the environment's owner is ignored as well: the command sees the
        // default, per-process owner.
        let out = run_cmd(
            db,
            &sh_script(
                &["--resource", "free"],
                r#"echo "$DISTLOCK_OWNER" > "$D/owner""#,
                &[],
            ),
        )
        .env("DISTLOCK_OWNER", "shared")
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(0));
        let owner = read_trimmed(&db.file("owner"));
        assert_ne!(owner, "shared");
        assert_eq!(owner.split(':').count(), 3, "owner {owner:?}");

        // --owner given explicitly is the owner.
        output_exiting(
            &mut run_cmd(
                db,
                &sh_script(
                    &["--resource", "shared", "--owner", "shared"],
                    r#"echo "$DISTLOCK_OWNER" > "$D/ran""#,
                    &[],
                ),
            ),
            0,
        );
        assert_eq!(read_trimmed(&ran), "shared");
        let lock = assert_held_by(db, "shared", "shared");
        assert_eq!(lock["fence"], held["lock"]["fence"]);
    });
}

// ---------------------------------------------------------------------------------------------
// Release, history, heartbeat
// ---------------------------------------------------------------------------------------------

#[test]
fn lock_is_released_when_the_command_exits_and_the_log_shows_one_tenure() {
    each_store_and_server(|db| {
        let out = run_cmd(
            db,
            &sh_script(
                &["--resource", "tenure"],
                r#"echo "$DISTLOCK_FENCE" > "$D/fence"; echo "$DISTLOCK_OWNER" > "$D/owner""#,
                &[],
            ),
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(0));
        assert_free(db, "tenure");

        let fence = read_number(&db.file("fence"));
        let owner = read_trimmed(&db.file("owner"));
        let events = db.log(&["tenure"]);
        assert_eq!(event_names(&events), ["acquired", "released"], "{events:?}");
        for event in &events {
            assert_eq!(event["fence"], fence, "{event}");
            assert_eq!(event["owner"], owner.as_str(), "{event}");
            assert_eq!(event["resource"], "tenure", "{event}");
        }
    });
}

#[test]
fn heartbeat_keeps_a_short_lease_alive_while_the_command_runs() {
    each_store_and_server(|db| {
        let proc = Proc::spawn(
            &mut run_cmd(
                db,
                &sh_script(
                    &["--resource", "hb", "--ttl", "2s"],
                    r#"echo "$DISTLOCK_FENCE" > "$D/ready.tmp"; mv "$D/ready.tmp" "$D/ready"; sleep 5"#,
                    &[],
                ),
            ),
            db.dir.path(),
            "run",
        );
        wait_for_file(&db.file("ready"), LONG);
        let ready = Instant::now();
        let fence = read_number(&db.file("ready"));

        // The lock was taken before the command started; without renewals it would be gone
        // 2 s later.
        thread::sleep(Duration::from_millis(3500).saturating_sub(ready.elapsed()));
        let busy = db.json(&["acquire", "hb", "--owner", "other", "--ttl", "10"], 75);
        assert_eq!(busy["acquired"], false);
        let (code, seen) = db.status("hb");
        assert_eq!(code, 0, "the lease ran out while the command ran: {seen}");
        assert_eq!(seen["lock"]["fence"], fence);

        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(0), "{}", proc.describe());
        assert_free(db, "hb");
        let renewals = db
            .log(&["hb"])
            .iter()
            .filter(|e| e["event"] == "renewed" && e["fence"] == fence)
            .count();
        assert!(
            renewals >= 2,
            "only {renewals} renewals in 5 s with --ttl 2s"
        );
    });
}

#[test]
fn the_heartbeat_thread_starts_only_when_the_first_renewal_is_due() {
    each_store_and_server(|db| {
        let threads = |trace: &str| trace.matches("CLONE_THREAD").count();
        // The store's own threads (PostgreSQL's connection has one), as a plain call starts them.
        let Some(listed) = db.strace("the heartbeat's thread", "clone,clone3", &["list"]) else {
            return;
        };
        let store = threads(&listed);
        // Done long before a third of its TTL: nothing to renew, so no thread is started.
        let args = ["run", "--resource", "short", "--ttl", "60", "--", "true"];
        let short = db
            .strace("the heartbeat's thread", "clone,clone3", &args)
            .expect("strace ran a moment ago");
        assert_eq!(threads(&short), store, "{short}");
        assert_free(db, "short");
        // Still running a third of its TTL after it started: the thread starts then, and renews.
        let args = [
            "run",
            "--resource",
            "long",
            "--ttl",
            "2",
            "--",
            "sleep",
            "1.5",
        ];
        let long = db
            .strace("the heartbeat's thread", "clone,clone3", &args)
            .expect("strace ran a moment ago");
        // The heartbeat thread, and the store's threads again for its own connection.
        assert_eq!(threads(&long), 2 * store + 1, "{long}");
        let renewals = db
            .log(&["long"])
            .iter()
            .filter(|e| e["event"] == "renewed")
            .count();
        assert!(renewals >= 1, "no renewal in 1.5 s with --ttl 2");
        assert_free(db, "long");
    });
}

// ---------------------------------------------------------------------------------------------
// Lease lost
// ---------------------------------------------------------------------------------------------

/// `run --resource RESOURCE --owner X --ttl 3 --kill-after KILL_AFTER -- sh -c SCRIPT`, spawned:
/// a command whose lease the test can take away (`release --owner X`).
fn spawn_as_x(db: &Db, resource: &str, kill_after: &str, script: &str) -> Proc {
    let args = [
        "--resource",
        resource,
        "--owner",
        "X",
        "--ttl",
        "3",
        "--kill-after",
        kill_after,
        "--",
        "sh",
        "-c",
        script,
    ];
    Proc::spawn(&mut run_cmd(db, &args), db.dir.path(), "run")
}

/// Script lines for a shell that records its own pid (`sh.pid`) and that of the background job
/// it just started (`$!`, into `gc.pid`).
const FAMILY: &str = r#"echo $! > "$D/gc.tmp"; mv "$D/gc.tmp" "$D/gc.pid"
    echo $$ > "$D/sh.tmp"; mv "$D/sh.tmp" "$D/sh.pid""#;

/// The pids in `sh.pid` and `gc.pid`, once both are written; both must be running.
fn family_pids(db: &Db) -> (i32, i32) {
    wait_for_file(&db.file("sh.pid"), LONG);
    wait_for_file(&db.file("gc.pid"), LONG);
    let shell = i32::try_from(read_number(&db.file("sh.pid"))).expect("pid");
    let grandchild = i32::try_from(read_number(&db.file("gc.pid"))).expect("pid");
    assert!(
        !is_gone(shell) && !is_gone(grandchild),
        "the command is not running"
    );
    (shell, grandchild)
}

#[test]
fn lease_lost_to_a_release_stops_the_command_and_everything_it_started() {
    each_store_and_server(|db| {
        let script = format!("sleep 60 &\n{FAMILY}\nsleep 60");
        let proc = spawn_as_x(db, "lost", "1", &script);
        let (shell, grandchild) = family_pids(db);

        let start = Instant::now();
        db.json(&["release", "lost", "--owner", "X"], 0);
        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(124), "{}", proc.describe());
        let took = start.elapsed();
        assert!(took < Duration::from_secs(10), "stopping took {took:?}");
        assert!(proc.output.stdout.is_empty(), "{}", proc.describe());

        assert!(
            all_gone_within(&[shell], Duration::from_secs(5)),
            "the command (pid {shell}) outlived the lost lease"
        );
        assert!(
            all_gone_within(&[grandchild], Duration::from_secs(5)),
            "the command's child (pid {grandchild}) outlived the lost lease"
        );
        assert_free(db, "lost");
    });
}

#[test]
fn lease_lost_gives_what_the_command_started_kill_after_to_clean_up() {
    each_store_and_server(|db| {
        // A typical wrapper: the shell itself dies of SIGTERM at once, while the worker it
        // started cleans up for half a second on SIGTERM. --kill-after 2 leaves it the time.
        let script = r#"sh -c 'trap "sleep 0.5; echo cleaned > \"\$D/gc.cleaned\"; exit 0" TERM
                echo $$ > "$D/gc.tmp"; mv "$D/gc.tmp" "$D/gc.pid"
                for i in $(seq 600); do sleep 0.1; done' &
            echo $$ > "$D/sh.tmp"; mv "$D/sh.tmp" "$D/sh.pid"
            sleep 60"#;
        let proc = spawn_as_x(db, "cleanup", "2", script);
        let (shell, worker) = family_pids(db);
        db.json(&["release", "cleanup", "--owner", "X"], 0);
        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(124), "{}", proc.describe());
        assert!(
            all_gone_within(&[shell, worker], LONG),
            "the command (pid {shell}) or its worker (pid {worker}) outlived the lost lease"
        );
        let cleaned = db.file("gc.cleaned");
        let start = Instant::now();
        while !cleaned.exists() && start.elapsed() < Duration::from_secs(3) {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            cleaned.exists(),
            "the worker was SIGKILLed before --kill-after 2 ran out, in the middle of its \
             SIGTERM clean-up (as soon as the shell it belongs to exited?)"
        );
    });
}

#[test]
fn lease_lost_to_another_owner_kills_a_command_that_survives_sigterm() {
    each_store_and_server(|db| {
        // The shell catches SIGTERM and carries on; its background child ignores it.
        let script = format!(
            r#"trap 'echo term > "$D/term"' TERM
            sh -c 'trap "" TERM; exec sleep 60' &
            {FAMILY}
            for i in $(seq 600); do sleep 0.1; done"#
        );
        let proc = spawn_as_x(db, "taken", "1", &script);
        let (shell, grandchild) = family_pids(db);

        let start = Instant::now();
        db.json(&["release", "taken", "--owner", "X"], 0);
        let taker = db.json(&["acquire", "taken", "--owner", "Y", "--ttl", "30"], 0);
        wait_for_file(&db.file("term"), LONG);
        let term_seen = Instant::now();
        assert!(
            all_gone_within(&[shell, grandchild], LONG),
            "the command (pid {shell}) or its child (pid {grandchild}) outlived the lost lease"
        );
        // The marker appears right after SIGTERM, the deaths right after SIGKILL: allow half
        // of --kill-after for the lag of noticing either.
        let grace = term_seen.elapsed();
        assert!(
            grace >= Duration::from_millis(500),
            "SIGKILL followed SIGTERM after {grace:?}, not after --kill-after 1"
        );
        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(124), "{}", proc.describe());
        let took = start.elapsed();
        // SIGTERM cannot have been sent before the release; SIGKILL waits --kill-after.
        assert!(
            took >= Duration::from_millis(950),
            "SIGKILL came {took:?} after the release, sooner than --kill-after 1"
        );
        assert!(took < Duration::from_secs(10), "stopping took {took:?}");
        // The guard's clean-up must not release the new owner's lock.
        let lock = assert_held_by(db, "taken", "Y");
        assert_eq!(lock["fence"], taker["lock"]["fence"]);
    });
}

#[test]
fn unreachable_store_stops_the_command_before_the_lease_can_expire() {
    let db = Db::sqlite();
    let script = r#"trap 'date +%s%3N > "$D/term.tmp"; mv "$D/term.tmp" "$D/term"; exit 0' TERM
        echo started > "$D/m.tmp"; mv "$D/m.tmp" "$D/m"
        for i in $(seq 600); do sleep 0.1; done"#;
    let proc = Proc::spawn(
        &mut run_cmd(
            &db,
            &["--resource", "cut", "--ttl", "3", "--", "sh", "-c", script],
        ),
        db.dir.path(),
        "run",
    );
    wait_for_file(&db.file("m"), LONG);
    let (code, before) = db.status("cut");
    assert_eq!(code, 0, "{before}");

    let locker = hold_write_lock(db.path(), Duration::from_secs(7));
    // No renewal can commit now, so the lease's end is final; status only reads.
    let (code, after) = db.status("cut");
    assert_eq!(code, 0, "{after}");
    let expires_at = timestamp_millis(after["lock"]["expires_at"].as_str().expect("expires_at"));
    assert!(
        expires_at >= timestamp_millis(before["lock"]["expires_at"].as_str().expect("expires_at")),
        "expires_at went backwards: {before} then {after}"
    );

    let proc = proc.finish(LONG);
    assert_eq!(proc.code(), Some(124), "{}", proc.describe());
    let stopped_at = read_number(&db.file("term"));
    assert!(
        stopped_at < expires_at,
        "the command got SIGTERM at {stopped_at}, {} ms after its lease expired at {expires_at}",
        stopped_at - expires_at
    );
    locker.join().expect("lock holder thread");
    assert_free(&db, "cut");
}

#[test]
fn unreachable_store_kills_a_command_ignoring_sigterm_before_the_lease_can_expire() {
    let db = Db::sqlite();
    // --kill-after is far longer than the lease: the guard must not wait that long.
    let script = format!(
        r"trap '' TERM
        sleep 60 &
        {FAMILY}
        for i in $(seq 600); do sleep 0.1; done"
    );
    let proc = Proc::spawn(
        &mut run_cmd(
            &db,
            &sh_script(
                &["--resource", "cut", "--ttl", "6", "--kill-after", "30"],
                &script,
                &[],
            ),
        ),
        db.dir.path(),
        "run",
    );
    let (shell, grandchild) = family_pids(&db);

    let locker = hold_write_lock(db.path(), Duration::from_secs(8));
    let (code, after) = db.status("cut");
    assert_eq!(code, 0, "{after}");
    let expires_at = timestamp_millis(after["lock"]["expires_at"].as_str().expect("expires_at"));

    assert!(
        all_gone_within(&[shell, grandchild], LONG),
        "the command (pid {shell}) or its child (pid {grandchild}) was never killed"
    );
    // Polling only notices the death later than it happened: this errs on the strict side.
    let gone_at = now_millis();
    assert!(
        gone_at < expires_at,
        "the command was still running {} ms after its lease expired at {expires_at}",
        gone_at - expires_at
    );
    let proc = proc.finish(LONG);
    assert_eq!(proc.code(), Some(124), "{}", proc.describe());
    locker.join().expect("lock holder thread");
}

#[test]
fn killed_guard_leaves_the_lock_until_its_ttl_runs_out() {
    each_store_and_server(|db| {
        let script = format!("sleep 30 &\n{FAMILY}\nsleep 30");
        let proc = Proc::spawn(
            &mut run_cmd(
                db,
                &sh_script(&["--resource", "orphan", "--ttl", "2"], &script, &[]),
            ),
            db.dir.path(),
            "run",
        );
        let (shell, _) = family_pids(db);
        proc.signal(Signal::SIGKILL);
        let killed = proc.finish(LONG);
        assert!(!killed.timed_out, "SIGKILL did not end the guard");

        let (code, seen) = db.status("orphan");
        assert_eq!(code, 0, "the lock vanished with the guard: {seen}");
        let expires_at = timestamp_millis(seen["lock"]["expires_at"].as_str().expect("expires_at"));
        let wait = u64::try_from(expires_at + 300 - now_millis()).unwrap_or(0);
        assert!(wait < 3000, "lease ends too late: {seen}");
        thread::sleep(Duration::from_millis(wait));
        assert_free(db, "orphan");
        // The command was left behind with the guard; clean it up.
        let _ = killpg(Pid::from_raw(shell), Signal::SIGKILL);
    });
}

// ---------------------------------------------------------------------------------------------
// Everything run started: descendants that left the process group
// ---------------------------------------------------------------------------------------------

/// The first two numbers in `path`, once it has been written.
fn read_pair(path: &Path) -> (i32, i32) {
    wait_for_file(path, LONG);
    let text = read_trimmed(path);
    let pair: Vec<i32> = text
        .split_whitespace()
        .map(|n| n.parse().expect("a pid"))
        .collect();
    assert_eq!(pair.len(), 2, "{} holds {text:?}", path.display());
    (pair[0], pair[1])
}

/// A command that leaves three descendants behind, each with a `sleep 300` that outlives it:
/// - `setsid.pid`: a grandchild in its own session (`setsid`), so out of the command's process
///   group, still the command's child;
/// - `daemon.pid` (`PID MIDDLE`): a classic daemon — forked, `setsid`, forked again, its
///   parent (MIDDLE) gone — out of the group and reparented;
/// - `orphan.pid` (`PID MIDDLE`): forked twice, its parent gone: reparented but still in the
///   command's process group.
///
/// Then the shell records itself (`sh.pid`) and waits.
const ESCAPERS: &str = r#"setsid sh -c 'echo $$ > "$D/setsid.tmp"; mv "$D/setsid.tmp" "$D/setsid.pid"; exec sleep 300' &
    setsid sh -c 'sleep 300 & echo "$! $$" > "$D/daemon.tmp"; mv "$D/daemon.tmp" "$D/daemon.pid"' &
    sh -c 'sleep 300 & echo "$! $$" > "$D/orphan.tmp"; mv "$D/orphan.tmp" "$D/orphan.pid"' &
    echo $$ > "$D/sh.tmp"; mv "$D/sh.tmp" "$D/sh.pid"
    for i in $(seq 600); do sleep 0.1; done"#;

#[test]
fn lease_lost_stops_descendants_that_left_the_process_group() {
    each_store_and_server(|db| {
        let proc = spawn_as_x(db, "escape", "1", ESCAPERS);
        wait_for_file(&db.file("sh.pid"), LONG);
        let shell = i32::try_from(read_number(&db.file("sh.pid"))).expect("pid");
        wait_for_file(&db.file("setsid.pid"), LONG);
        let setsid = i32::try_from(read_number(&db.file("setsid.pid"))).expect("pid");
        let (daemon, daemon_parent) = read_pair(&db.file("daemon.pid"));
        let (orphan, orphan_parent) = read_pair(&db.file("orphan.pid"));
        let _cleanup = KillOnDrop(vec![setsid, daemon, orphan]);

        // The premises: each one runs, and has escaped as described.
        assert!(
            all_gone_within(&[daemon_parent, orphan_parent], LONG),
            "the daemon's and the orphan's parents never exited"
        );
        let ids = |pid: i32, what: &str| {
            ids_of(pid)
                .filter(|_| !is_gone(pid))
                .unwrap_or_else(|| panic!("the {what} (pid {pid}) is not running"))
        };
        let command = ids(shell, "command");
        let setsid_ids = ids(setsid, "setsid grandchild");
        let daemon_ids = ids(daemon, "daemon");
        let orphan_ids = ids(orphan, "orphan");
        assert_eq!(setsid_ids.session, setsid, "{setsid_ids:?}");
        assert_eq!(setsid_ids.ppid, shell, "{setsid_ids:?}");
        assert!(
            daemon_ids.session != command.session && daemon_ids.ppid != daemon_parent,
            "the daemon left the session and was reparented: {daemon_ids:?}, command {command:?}"
        );
        assert!(
            orphan_ids.pgrp == command.pgrp && orphan_ids.ppid != orphan_parent,
            "the orphan stayed in the group and was reparented: {orphan_ids:?}, command \
             {command:?}"
        );

        db.json(&["release", "escape", "--owner", "X"], 0);
        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(124), "{}", proc.describe());
        let started = [
            (shell, "the command"),
            (setsid, "the setsid grandchild"),
            (daemon, "the double-forked daemon"),
            (orphan, "the orphaned grandchild"),
        ];
        all_gone_within(&started.map(|(pid, _)| pid), Duration::from_secs(10));
        let survivors: Vec<String> = started
            .iter()
            .filter(|&&(pid, _)| !is_gone(pid))
            .map(|&(pid, what)| format!("{what} (pid {pid}, {:?})", ids_of(pid)))
            .collect();
        assert!(
            survivors.is_empty(),
            "{:?}: outlived the lost lease: {survivors:?}",
            db.kind
        );
        assert_free(db, "escape");
    });
}

#[test]
fn normal_exit_does_not_wait_for_escaped_descendants() {
    each_store_and_server(|db| {
        // The command starts a 30 s sleep in a session of its own and exits 0 once it runs.
        let script = r#"setsid sh -c 'echo $$ > "$D/escaped.tmp"; mv "$D/escaped.tmp" "$D/escaped.pid"; exec sleep 30' &
            while [ ! -e "$D/escaped.pid" ]; do sleep 0.05; done
            exit 0"#;
        let escaped_pid = db.file("escaped.pid");
        let mut cleanup = KillOnDrop(Vec::new());
        let proc = Proc::spawn(
            &mut run_cmd(db, &["--resource", "left", "--", "sh", "-c", script]),
            db.dir.path(),
            "run",
        );
        let done = proc.finish(Duration::from_secs(40));
        if escaped_pid.exists() {
            cleanup
                .0
                .push(i32::try_from(read_number(&escaped_pid)).expect("pid"));
        }
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        assert!(
            done.elapsed < Duration::from_secs(15),
            "run waited for the escaped sleep 30 (or nearly): {}",
            done.describe()
        );
        assert!(escaped_pid.exists(), "the command never started its sleep");
        assert_free(db, "left");
    });
}

// ---------------------------------------------------------------------------------------------
// When run cannot start guarding
// ---------------------------------------------------------------------------------------------

/// A cgroup of the `pids` controller with a task limit (`pids.max`), removed when dropped
/// (after killing whatever still runs in it). Threads count as tasks, so a process in it can
/// create only so many threads and children.
struct PidsCgroup {
    path: PathBuf,
}

impl PidsCgroup {
    /// A fresh cgroup allowing `max` tasks, or why this machine has no `pids` hierarchy the
    /// test can write (cgroup v1 at `/sys/fs/cgroup/pids`, or v2 with `pids` enabled for the
    /// root's children; normally root only).
    fn create(max: u32) -> Result<PidsCgroup, String> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let v1 = Path::new("/sys/fs/cgroup/pids");
        let v2 = Path::new("/sys/fs/cgroup");
        let parent = if v1.join("cgroup.procs").exists() {
            v1
        } else if fs::read_to_string(v2.join("cgroup.subtree_control"))
            .is_ok_and(|controllers| controllers.split_whitespace().any(|c| c == "pids"))
        {
            v2
        } else {
            return Err("no cgroup `pids` controller here".to_owned());
        };
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = parent.join(format!("distlock-test-{}-{n}", std::process::id()));
        let unwritable = |err| format!("cannot make a `pids` cgroup (needs root): {err}");
        fs::create_dir(&path).map_err(unwritable)?;
        let cgroup = PidsCgroup { path };
        fs::write(cgroup.path.join("pids.max"), max.to_string()).map_err(unwritable)?;
        Ok(cgroup)
    }

    /// Whether this machine lets the tests make `pids` cgroups; through the gate (tool
    /// `CGROUPS`).
    fn available(what: &str) -> bool {
        require("CGROUPS", what, PidsCgroup::create(1)).is_some()
    }

    /// `distlock ARGS…` (with `db`'s store) started inside the cgroup: a shell joins it, then
    /// execs distlock. Exit 99 means the shell could not join.
    fn distlock_inside(&self, db: &Db, args: &[&str]) -> Command {
        let mut cmd = db.env_cmd("sh");
        cmd.args(["-c", r#"echo $$ > "$0" || exit 99; exec "$@""#])
            .arg(self.path.join("cgroup.procs"))
            .arg(BIN)
            .args(args)
            .env("D", db.dir.path());
        cmd
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        let procs = self.path.join("cgroup.procs");
        let emptied = wait_for(Duration::from_secs(5), || {
            let pids = fs::read_to_string(&procs).unwrap_or_default();
            for pid in pids.split_whitespace().filter_map(|p| p.parse().ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            fs::remove_dir(&self.path).is_ok()
        });
        if !emptied {
            eprintln!("note: could not remove {}", self.path.display());
        }
    }
}

/// The most tasks tried before giving up on seeing `run` succeed.
const MOST_TASKS: u32 = 32;

#[test]
fn run_releases_the_lock_when_it_cannot_start_guarding() {
    // Each round allows distlock one more task (thread or child) than the last, until `run`
    // succeeds. Wherever it fails, it must fail cleanly: 74 with one `distlock:` line, the lock
    // free, nothing it started left running. 126 is accepted only when the lock was taken but
    // the command never ran (a fork that failed: "the command cannot be executed"). At least
    // one round must take the lock and then fail: the path under test.
    if !PidsCgroup::available("a task limit") {
        return;
    }
    each_store_and_server(|db| {
        let mut failed_after_taking = Vec::new();
        let mut succeeded = false;
        for max in 1..=MOST_TASKS {
            let cgroup = PidsCgroup::create(max).expect("a pids cgroup, as a moment ago");
            let resource = format!("limited-{max}");
            let pid_file = db.file(&format!("command-{max}.pid"));
            let pid_path = pid_file.to_str().expect("utf-8 path");
            // Builtins and exec only: the command needs no task of its own beyond its process.
            let mut cmd = cgroup.distlock_inside(
                db,
                &[
                    "run",
                    "--resource",
                    &resource,
                    "--",
                    "sh",
                    "-c",
                    r#"echo $$ > "$0"; exec sleep 5"#,
                    pid_path,
                ],
            );
            let done = Proc::spawn(&mut cmd, db.dir.path(), &resource).finish(LONG);
            let what = format!("{:?}, pids.max {max}", db.kind);
            assert_ne!(done.code(), Some(99), "{what}: could not join the cgroup");
            let taken = db
                .log(&[resource.as_str()])
                .iter()
                .any(|e| e["event"] == "acquired");
            let ran = pid_file.exists();
            if done.code() == Some(0) {
                assert!(taken && ran, "{what}: {}", done.describe());
                assert_free(db, &resource);
                succeeded = true;
                break;
            }
            // Before the lock is taken (PostgreSQL's connection has a thread of its own), the
            // limit leaves the store unusable: a store error, never a panic.
            let allowed: &[i32] = if taken && !ran { &[74, 126] } else { &[74] };
            assert!(
                done.code().is_some_and(|code| allowed.contains(&code)),
                "{what}: a run that cannot {} must exit {allowed:?} (lock taken: {taken}, \
                 command started: {ran}): {}",
                if taken {
                    "start guarding"
                } else {
                    "open its store, before taking the lock,"
                },
                done.describe()
            );
            let stderr = done.stderr();
            assert!(
                stderr.starts_with("distlock: ") && stderr.lines().count() == 1,
                "{what}: one line `distlock: …` on stderr: {}",
                done.describe()
            );
            assert!(done.output.stdout.is_empty(), "{what}: {}", done.describe());
            let (code, seen) = db.status(&resource);
            assert_eq!(code, 1, "{what}: the lock must be free afterwards: {seen}");
            if ran {
                let command = i32::try_from(read_number(&pid_file)).expect("pid");
                assert!(
                    all_gone_within(&[command], Duration::from_secs(2)),
                    "{what}: the command (pid {command}) outlived its guard"
                );
            }
            if taken {
                failed_after_taking.push(max);
            }
            drop(cgroup);
        }
        assert!(
            succeeded,
            "{:?}: run never succeeded with up to {MOST_TASKS} tasks",
            db.kind
        );
        assert!(
            !failed_after_taking.is_empty(),
            "{:?}: no task limit made run fail after taking the lock: nothing was tested",
            db.kind
        );
    });
}

#[test]
fn a_refused_heartbeat_thread_is_a_failed_renewal_and_the_command_is_stopped_in_time() {
    if !PidsCgroup::available("a task limit") {
        return;
    }
    each_store_and_server(|db| {
        // The fewest tasks a short `run` needs (PostgreSQL's connection has a thread of its
        // own): with those, a longer command runs, but its heartbeat thread is refused.
        let fewest = (1..=MOST_TASKS)
            .find(|&max| {
                let cgroup = PidsCgroup::create(max).expect("a pids cgroup, as a moment ago");
                let mut cmd =
                    cgroup.distlock_inside(db, &["run", "--resource", "probe", "--", "true"]);
                let done = Proc::spawn(&mut cmd, db.dir.path(), "probe").finish(LONG);
                done.code() == Some(0)
            })
            .expect("run succeeds with some task limit");
        let cgroup = PidsCgroup::create(fewest).expect("a pids cgroup, as a moment ago");
        let pid_file = db.file("command.pid");
        let mut cmd = cgroup.distlock_inside(
            db,
            &[
                "run",
                "--resource",
                "refused",
                "--ttl",
                "6",
                "--kill-after",
                "200ms",
                "--",
                "sh",
                "-c",
                r#"echo $$ > "$0"; exec sleep 20"#,
                pid_file.to_str().expect("utf-8 path"),
            ],
        );
        // Spawned before it acquires: its lease ends no sooner than 6 s from here.
        let started = Instant::now();
        let guard = Proc::spawn(&mut cmd, db.dir.path(), "refused");
        let what = format!("{:?}, pids.max {fewest}", db.kind);
        let command = pid_in(&pid_file, LONG);
        // When the command is gone, as this test sees it (its own release and exit may take
        // longer on a loaded machine: only the command must be gone before the lease ends).
        assert!(
            all_gone_within(&[command], LONG),
            "{what}: the command (pid {command}) was never stopped"
        );
        let took = started.elapsed();
        let done = guard.finish(LONG);
        assert_eq!(done.code(), Some(124), "{what}: {}", done.describe());
        let stderr = done.stderr();
        assert!(
            stderr.contains(
                "cannot renew the lock on refused (retrying): cannot start the heartbeat thread"
            ) && stderr.contains("could not be renewed and may expire; stopping the command"),
            "{what}: {}",
            done.describe()
        );
        // Gone before the lease (6 s from before the acquire) could end.
        assert!(took < Duration::from_secs(6), "{what}: gone after {took:?}");
        assert_free(db, "refused");
    });
}

// ---------------------------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------------------------

#[test]
fn sigterm_sigint_sighup_and_sigquit_are_forwarded_to_the_command() {
    each_store_and_server(|db| {
        for (signal, name) in [
            (Signal::SIGTERM, "TERM"),
            (Signal::SIGINT, "INT"),
            (Signal::SIGHUP, "HUP"),
            (Signal::SIGQUIT, "QUIT"),
        ] {
            let script = format!(
                r#"trap 'echo got > "$D/{name}.got"; exit 0' {name}
                echo ready > "$D/{name}.tmp"; mv "$D/{name}.tmp" "$D/{name}.ready"
                for i in $(seq 600); do sleep 0.1; done"#
            );
            let resource = format!("sig:{name}");
            let proc = Proc::spawn(
                &mut run_cmd(db, &["--resource", &resource, "--", "sh", "-c", &script]),
                db.dir.path(),
                name,
            );
            wait_for_file(&db.file(&format!("{name}.ready")), LONG);
            proc.signal(signal);
            let proc = proc.finish(LONG);
            assert_eq!(proc.code(), Some(0), "SIG{name}: {}", proc.describe());
            assert!(
                db.file(&format!("{name}.got")).exists(),
                "SIG{name} never reached the command"
            );
            assert_free(db, &resource);
        }
    });
}

#[test]
fn guard_keeps_renewing_after_forwarding_until_the_command_exits() {
    each_store_and_server(|db| {
        // A 4 s lease, renewed every 1.3 s: a guard on a loaded machine keeps it while it
        // renews, and the command's trap outlasts it.
        let script = r#"trap 'echo got > "$D/got"; sleep 6; exit 5' TERM
            echo "$DISTLOCK_OWNER" > "$D/ready.tmp"; mv "$D/ready.tmp" "$D/ready"
            for i in $(seq 600); do sleep 0.1; done"#;
        let proc = Proc::spawn(
            &mut run_cmd(
                db,
                &["--resource", "slow", "--ttl", "4", "--", "sh", "-c", script],
            ),
            db.dir.path(),
            "run",
        );
        wait_for_file(&db.file("ready"), LONG);
        let owner = read_trimmed(&db.file("ready"));
        proc.signal(Signal::SIGTERM);
        wait_for_file(&db.file("got"), LONG);
        let got = Instant::now();
        // Without renewals after the signal the 4 s lease would be over by now.
        thread::sleep(Duration::from_millis(4500).saturating_sub(got.elapsed()));
        assert_held_by(db, "slow", &owner);
        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(5), "{}", proc.describe());
        assert_free(db, "slow");
    });
}

// ---------------------------------------------------------------------------------------------
// --wait, exec failures, joining, usage
// ---------------------------------------------------------------------------------------------

#[test]
fn wait_hands_the_lock_from_one_run_to_the_next() {
    each_store_and_server(|db| {
        // mkdir fails if the other critical section is still inside.
        let script = r#"mkdir "$D/inside" || exit 99
            date +%s%3N > "$D/$N.start"; echo "$DISTLOCK_FENCE" > "$D/$N.fence"
            echo ready > "$D/$N.tmp"; mv "$D/$N.tmp" "$D/$N.ready"
            sleep 1
            date +%s%3N > "$D/$N.end"; rmdir "$D/inside""#;
        let args = ["--resource", "handoff", "--", "sh", "-c", script];
        let mut first = run_cmd(db, &args);
        first.env("N", "a");
        let first = Proc::spawn(&mut first, db.dir.path(), "a");
        wait_for_file(&db.file("a.ready"), LONG);

        let mut second = run_cmd(db, &["--wait", "10s"]);
        second.args(args).env("N", "b");
        let second = Proc::spawn(&mut second, db.dir.path(), "b");
        assert!(
            !db.file("a.end").exists(),
            "the second run should start while the first holds the lock"
        );

        let first = first.finish(LONG);
        assert_eq!(first.code(), Some(0), "a: {}", first.describe());
        let second = second.finish(LONG);
        assert_eq!(second.code(), Some(0), "b: {}", second.describe());
        let (a_fence, b_fence) = (
            read_number(&db.file("a.fence")),
            read_number(&db.file("b.fence")),
        );
        assert!(b_fence > a_fence, "fences {a_fence} then {b_fence}");
        let (a_end, b_start) = (
            read_number(&db.file("a.end")),
            read_number(&db.file("b.start")),
        );
        assert!(
            b_start >= a_end,
            "b started at {b_start}, a ended at {a_end}"
        );
        assert_free(db, "handoff");
    });
}

#[test]
fn command_not_found_is_127_and_not_executable_is_126_and_the_lock_is_released() {
    each_store_and_server(|db| {
        let script = db.file("script.sh");
        fs::write(&script, "#!/bin/sh\necho ran > \"$D/ran\"\n").expect("write script");
        let mut perms = fs::metadata(&script).expect("metadata").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
        fs::set_permissions(&script, perms).expect("chmod 644");
        let folder = db.file("folder");
        fs::create_dir(&folder).expect("mkdir");

        let missing = db.file("no-such-command");
        for (command, expected) in [
            (missing.to_str().expect("utf-8"), 127),
            ("distlock-test-no-such-command-on-path", 127),
            (script.to_str().expect("utf-8"), 126),
            (folder.to_str().expect("utf-8"), 126),
        ] {
            let out = run_cmd(db, &["--resource", "exec", "--", command, "arg"])
                .output()
                .expect("run distlock");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(expected), "{command}: {stderr}");
            assert!(out.stdout.is_empty(), "{command}: stdout {:?}", out.stdout);
            assert_eq!(
                stderr.lines().count(),
                1,
                "{command}: expected a one-line message, got {stderr:?}"
            );
            assert!(!stderr.trim().is_empty());
            assert_free(db, "exec");
        }
        assert!(!db.file("ran").exists(), "the non-executable script ran");
    });
}

#[test]
fn a_command_found_on_path_sees_its_name_as_given() {
    each_store_and_server(|db| {
        // `sh -c SCRIPT` sets `$0` to its own argv[0]: "sh", not the path `run` found it at.
        let out = run_cmd(
            db,
            &sh_script(&["--resource", "argv0"], r#"echo "$0" > "$D/argv0""#, &[]),
        )
        .output()
        .expect("run distlock");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(read_trimmed(&db.file("argv0")), "sh");
    });
}

#[test]
fn run_as_the_holder_joins_the_tenure_and_leaves_the_lock_held() {
    each_store_and_server(|db| {
        let held = db.json(&["acquire", "join", "--owner", "X", "--ttl", "30"], 0);
        let fence = held["lock"]["fence"].as_i64().expect("fence");
        output_exiting(
            &mut run_cmd(
                db,
                &sh_script(
                    &["--resource", "join", "--owner", "X"],
                    r#"echo "$DISTLOCK_FENCE" > "$D/f""#,
                    &[],
                ),
            ),
            0,
        );
        assert_eq!(read_number(&db.file("f")), fence);
        let lock = assert_held_by(db, "join", "X");
        assert_eq!(lock["fence"], fence, "the join started a new tenure");
        let events = db.log(&["join"]);
        assert!(
            !event_names(&events).contains(&"released"),
            "a joined run released the script's lock: {events:?}"
        );

        db.json(&["release", "join", "--owner", "X"], 0);
        assert_free(db, "join");
    });
}

#[test]
fn joined_step_is_kept_alive_by_the_heartbeat() {
    each_store_and_server(|db| {
        // Time enough for the step to start and join on a loaded machine; joining sets the
        // lease to the step's own 2 s, which only the heartbeat then keeps alive.
        let held = db.json(&["acquire", "step", "--owner", "X", "--ttl", "5"], 0);
        let fence = &held["lock"]["fence"];
        let proc = Proc::spawn(
            &mut run_cmd(
                db,
                &sh_script(
                    &["--resource", "step", "--owner", "X", "--ttl", "2"],
                    r#"echo ready > "$D/ready.tmp"; mv "$D/ready.tmp" "$D/ready"; sleep 4"#,
                    &[],
                ),
            ),
            db.dir.path(),
            "run",
        );
        wait_for_file(&db.file("ready"), LONG);
        let ready = Instant::now();
        thread::sleep(Duration::from_secs(3).saturating_sub(ready.elapsed()));
        let lock = assert_held_by(db, "step", "X");
        assert_eq!(&lock["fence"], fence);

        let proc = proc.finish(LONG);
        assert_eq!(proc.code(), Some(0), "{}", proc.describe());
        let lock = assert_held_by(db, "step", "X");
        assert_eq!(&lock["fence"], fence);
        db.json(&["release", "step", "--owner", "X"], 0);
    });
}

#[test]
fn usage_errors_exit_64_and_start_nothing() {
    each_store_and_server(|db| {
        let touch = ["sh", "-c", r#"echo ran > "$D/ran""#];
        let with_command = |flags: &[&'static str]| -> Vec<&'static str> {
            let mut args = flags.to_vec();
            args.push("--");
            args.extend_from_slice(&touch);
            args
        };
        let cases: Vec<Vec<&str>> = vec![
            vec!["--resource", "u"],
            vec!["--resource", "u", "--"],
            [&["--resource", "u"][..], &touch[..]].concat(),
            with_command(&["--resource", "u", "--conflict-exit-code", "256"]),
            with_command(&["--resource", "u", "--conflict-exit-code", "-1"]),
            with_command(&["--resource", "u", "--conflict-exit-code", "x"]),
            with_command(&["--resource", "u", "--kill-after", "-1"]),
            with_command(&["--resource", "u", "--kill-after=-1"]),
            with_command(&["--resource", "u", "--kill-after", "soon"]),
            with_command(&["--resource", "u", "--wait=-1"]),
            with_command(&["--resource", "u", "--ttl", "0"]),
            with_command(&["--resource", "u", "--ttl", "1500ms"]),
            with_command(&["--resource", "u", "--owner", "   "]),
            with_command(&["--resource", ""]),
            with_command(&["--resource", "u", "--bogus"]),
            with_command(&[]),
        ];
        for args in &cases {
            let out = run_cmd(db, args).output().expect("run distlock");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "run {args:?}: stderr {stderr}");
            assert!(
                out.stdout.is_empty(),
                "run {args:?}: stdout {:?}",
                out.stdout
            );
            assert!(!stderr.trim().is_empty(), "run {args:?}: no message");
            assert!(!db.file("ran").exists(), "run {args:?} started the command");
        }
        // (A server in front of the store made it as it started.)
        if db.kind == Kind::Sqlite && !db.is_served() {
            assert!(!db.path().exists(), "a usage error touched the store");
        }
        assert!(db.log(&["u"]).is_empty(), "a usage error wrote history");
    });
}

// ---------------------------------------------------------------------------------------------
// Only a tenure `acquire` took may be joined
// ---------------------------------------------------------------------------------------------

/// Under `run`: writes `$DISTLOCK_FENCE` to `$D/$1.ready` (whole, by rename), then holds the
/// lock until `$D/go` appears (20 s at most).
const HOLD_UNTIL_GO: &str = r#"echo "$DISTLOCK_FENCE" > "$D/$1.tmp"; mv "$D/$1.tmp" "$D/$1.ready"
i=0; while [ ! -e "$D/go" ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i + 1)); done"#;

/// Starts `run --resource RESOURCE --owner OWNER --ttl 60 -- HOLD_UNTIL_GO NAME` and returns
/// once its command is inside, with the tenure it holds. A 60 s lease is not renewed within a
/// test's first 20 s, so the tenure's expiry stays as read.
fn hold_under_run(db: &Db, resource: &str, owner: &str, name: &str) -> (Proc, Tenure) {
    let args = [
        "--resource",
        resource,
        "--owner",
        owner,
        "--ttl",
        "60",
        "--",
        "sh",
        "-c",
        HOLD_UNTIL_GO,
        "sh",
        name,
    ];
    let proc = Proc::spawn(&mut run_cmd(db, &args), db.dir.path(), name);
    wait_for_file(&db.file(&format!("{name}.ready")), LONG);
    let tenure = Tenure::read(&assert_held_by(db, resource, owner), Mode::Exclusive);
    assert_eq!(
        read_number(&db.file(&format!("{name}.ready"))),
        tenure.fence,
        "{name}: the command's DISTLOCK_FENCE"
    );
    (proc, tenure)
}

/// Lets the commands of [`hold_under_run`] end, and checks that `proc` exited 0.
fn let_go(db: &Db, proc: Proc) {
    fs::write(db.file("go"), "").expect("write go");
    let finished = proc.finish(LONG);
    assert_eq!(finished.code(), Some(0), "{}", finished.describe());
}

#[test]
fn two_runs_with_the_same_owner_never_run_at_once() {
    // Two cron runs given `--owner "$(hostname)"`: the second finds the first's tenure busy,
    // exactly as a run of another owner does, and never starts its command.
    each_store_and_server(|db| {
        let (first, tenure) = hold_under_run(db, "nightly", "cron", "first");
        let second = |owner: &str, extra: &[&str]| {
            let mut args = vec!["--resource", "nightly", "--owner", owner];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", "sh", "-c", r#"echo ran >> "$D/second.ran""#]);
            run_cmd(db, &args).output().expect("run distlock")
        };
        let same = second("cron", &[]);
        assert_eq!(same.status.code(), Some(75), "{}", describe(&same));
        assert!(same.stdout.is_empty(), "{}", describe(&same));
        let other = second("someone-else", &[]);
        assert_eq!(other.status.code(), Some(75), "{}", describe(&other));
        assert_eq!(
            String::from_utf8_lossy(&same.stderr),
            String::from_utf8_lossy(&other.stderr),
            "the same busy line as for another owner"
        );
        // As a cron line writes it: busy is "nothing to do".
        let skipped = second("cron", &["--conflict-exit-code", "0"]);
        assert_eq!(skipped.status.code(), Some(0), "{}", describe(&skipped));
        assert!(
            !db.file("second.ran").exists(),
            "a second run of the same owner started its command"
        );
        // The refused runs changed nothing: the first run's tenure, as it was.
        assert_eq!(
            db.json(&["status", "nightly"], 0),
            json!({"held": true, "lock": tenure.lock()})
        );

        let_go(db, first);
        assert_free(db, "nightly");
        assert_eq!(event_names(&db.log(&["nightly"])), ["acquired", "released"]);
    });
}

#[test]
fn acquire_by_the_owner_of_a_running_run_is_busy_and_renew_and_release_still_work() {
    each_store_and_server(|db| {
        let (proc, tenure) = hold_under_run(db, "job", "X", "run");
        // Busy, byte for byte as for another owner, with the run's tenure as the holder; also
        // after waiting.
        for (owner, wait) in [("X", "0"), ("Y", "0"), ("X", "0.3")] {
            let out = db.run(&[
                "acquire", "job", "--owner", owner, "--ttl", "60", "--wait", wait,
            ]);
            assert_eq!(out.status.code(), Some(75), "{owner}: {}", describe(&out));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("{}\n", tenure.plain_busy_text()),
                "{owner} --wait {wait}"
            );
        }
        assert_eq!(
            db.json(&["status", "job"], 0),
            json!({"held": true, "lock": tenure.lock()}),
            "the refused acquires changed nothing"
        );

        // Renew and release by owner act on it as on any tenure of X. A renewal keeps it the
        // run's: an acquire of X is still busy.
        let renewed = db.json(&["renew", "job", "--owner", "X", "--ttl", "120"], 0);
        assert_eq!(renewed["lock"]["fence"], tenure.fence, "{renewed}");
        db.json(&["acquire", "job", "--owner", "X", "--ttl", "60"], 75);
        db.json(&["release", "job", "--owner", "X"], 0);
        // Released, the resource is X's to take with acquire: a tenure of its own, which the
        // run, ending, leaves alone (it ends only its own fence).
        let taken = db.json(&["acquire", "job", "--owner", "X", "--ttl", "60"], 0);
        let taken = Tenure::read(&taken["lock"], Mode::Exclusive);
        assert!(taken.fence > tenure.fence, "a new tenure: {taken:?}");
        let_go(db, proc);
        assert_eq!(
            db.json(&["status", "job"], 0),
            json!({"held": true, "lock": taken.lock()})
        );
        assert_eq!(
            event_names(&db.log(&["job"])),
            ["acquired", "renewed", "released", "acquired"]
        );
    });
}

#[test]
fn a_waiting_run_of_the_same_owner_waits_its_turn() {
    each_store_and_server(|db| {
        let (first, tenure) = hold_under_run(db, "turn", "cron", "first");
        let script = r#"echo "$DISTLOCK_FENCE" > "$D/second.tmp"; mv "$D/second.tmp" "$D/second""#;
        let mut cmd = run_cmd(
            db,
            &sh_script(
                &["--resource", "turn", "--owner", "cron", "--wait", "20s"],
                script,
                &[],
            ),
        );
        let second = Proc::spawn(&mut cmd, db.dir.path(), "second");
        wait_until(LONG, "the second run waits in the queue", || {
            db.waiting("turn") == 1
        });
        assert!(
            !db.file("second").exists(),
            "the second run started while the first ran"
        );
        let_go(db, first);
        let second = second.finish(LONG);
        assert_eq!(second.code(), Some(0), "{}", second.describe());
        let fence = read_number(&db.file("second"));
        assert!(fence > tenure.fence, "a tenure of its own: {fence}");
        assert_free(db, "turn");
        assert_eq!(
            event_names(&db.log(&["turn"])),
            ["acquired", "released", "acquired", "released"]
        );
    });
}

#[test]
fn the_deploy_script_recipe_holds_one_tenure_across_its_run_steps() {
    // acquire, two steps under `run --owner X`, release: each step joins the tenure acquire
    // took, and the lock stays held between the steps. A joined tenure stays joinable: inside
    // a step, the script may still re-acquire it.
    each_store_and_server(|db| {
        let held = db.json(&["acquire", "deploy", "--owner", "X", "--ttl", "60"], 0);
        let fence = Tenure::read(&held["lock"], Mode::Exclusive).fence;
        let step = |name: &str| {
            let script = format!(
                r#"echo "$DISTLOCK_FENCE" > "$D/{name}"
                "$DL" acquire deploy --owner X --ttl 60 > "$D/{name}.acquire""#
            );
            let out = run_cmd(
                db,
                &sh_script(
                    &["--resource", "deploy", "--owner", "X", "--ttl", "60"],
                    &script,
                    &[],
                ),
            )
            .output()
            .expect("run distlock");
            assert_eq!(out.status.code(), Some(0), "{name}: {}", describe(&out));
            assert_eq!(read_number(&db.file(name)), fence, "{name}: DISTLOCK_FENCE");
            let again = parse_line(&fs::read(db.file(&format!("{name}.acquire"))).expect("read"));
            assert_eq!(again["acquired"], true, "{name}: re-acquired: {again}");
            assert_eq!(again["lock"]["fence"], fence, "{name}: {again}");
            let lock = assert_held_by(db, "deploy", "X");
            assert_eq!(lock["fence"], fence, "{name}: held between the steps");
        };
        step("migrate");
        step("switch");
        db.json(&["release", "deploy", "--owner", "X"], 0);
        assert_free(db, "deploy");
        assert_eq!(
            event_names(&db.log(&["deploy"])),
            [
                "acquired", "extended", "extended", "extended", "extended", "released"
            ],
            "one tenure: the steps and the re-acquires inside them extend it"
        );
    });
}
