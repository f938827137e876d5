//! What only the PostgreSQL store has to prove: many processes racing over the network (and on
//! a database whose schema does not exist yet), the server's clock deciding (clients under
//! `faketime` an hour ahead or behind), bounded waiting when the server is unreachable, dies or
//! hangs (a TCP proxy in front of the real server injects the fault), passwords kept out of
//! every message, `PGPASSWORD`, fences that keep increasing after `gc`, and TLS: what each
//! `sslmode` does against a server that takes TLS and plain connections alike.
//!
//! Every test starts with `Db::postgres()`: without `DISTLOCK_TEST_PG_URL` it says it was
//! skipped (or fails, when `DISTLOCK_TEST_REQUIRE_PG` is set, as in CI). Spawned processes
//! write to files, never to pipes, and are killed if they outlive their time limit, so a hang
//! fails the test instead of blocking the suite. Timing checks are upper bounds with generous
//! slack, or lower bounds that follow from causality.

use std::fs;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;

use crate::common::contention::Contention;
use crate::common::output::{assert_store_error, now_millis, parse_line, timestamp_millis};
use crate::common::pg_url::PgUrl;
use crate::common::process::{BIN, Finished, Proc, describe, isolated, wait_for, wait_until};
use crate::common::proxy::Proxy;
use crate::common::require::require;
use crate::common::store::{Db, assert_free, distlock_at, sh_script};

/// A distinctive password that must never show up in anything distlock prints.
const SECRET: &str = "hunter2-Pa55";

// ---------------------------------------------------------------------------------------------
// Helpers: URLs, processes, the server's clock.

/// The address of the suite's PostgreSQL server, from `DISTLOCK_TEST_PG_URL`.
fn server_addr() -> SocketAddr {
    let admin = std::env::var("DISTLOCK_TEST_PG_URL").expect("DISTLOCK_TEST_PG_URL");
    let server = PgUrl::parse(&admin).server;
    let server = if server
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
    {
        server
    } else {
        format!("{server}:5432")
    };
    server
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("cannot resolve the test server {server}: {e}"))
        .next()
        .expect("an address for the test server")
}

/// A local port nothing listens on (bound, then released).
fn dead_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// The server's `now()` in milliseconds since the Unix epoch.
fn server_now_millis(db: &Db) -> i64 {
    let mut client = db.pg_client();
    client
        .query_one("SELECT (extract(epoch FROM now()) * 1000)::bigint", &[])
        .expect("read the server's clock")
        .get(0)
}

/// Runs `cmd` to completion (killed after `limit`).
fn finish(mut cmd: Command, dir: &Path, name: &str, limit: Duration) -> Finished {
    Proc::spawn(&mut cmd, dir, name).finish(limit)
}

/// `distlock --db URL ARGS…`, with no `DISTLOCK_DB`, owner or `PGPASSWORD` inherited.
fn pg_at(url: &str, args: &[&str]) -> Command {
    let mut cmd = distlock_at(url);
    cmd.args(args);
    cmd
}

fn sleep_until_millis(target: i64) {
    let left = target - now_millis();
    if left > 0 {
        thread::sleep(Duration::from_millis(left.unsigned_abs()));
    }
}

/// `acquired_at` and `expires_at` of a lock object, in milliseconds.
fn lock_times(lock: &Value) -> (i64, i64) {
    (
        timestamp_millis(lock["acquired_at"].as_str().expect("acquired_at")),
        timestamp_millis(lock["expires_at"].as_str().expect("expires_at")),
    )
}

/// `n` processes acquiring `resource` at the same instant (owners `w0`, `w1`, …); returns each
/// one's owner and result.
fn race(db: &Db, resource: &str, n: usize, round: &str) -> Vec<(String, Finished)> {
    let contention = Contention {
        dir: db.dir.path(),
        name: round,
        workers: n,
        rounds: 1,
        bound: Duration::from_secs(30),
    };
    let owner = |worker: usize| format!("w{worker}");
    let contended = contention.run(|worker, _| {
        let mut cmd = db.std_cmd();
        cmd.args([
            "acquire",
            resource,
            "--owner",
            &owner(worker),
            "--ttl",
            "60",
        ]);
        cmd
    });
    contended
        .ends
        .into_iter()
        .map(|end| (owner(end.worker), end.finished))
        .collect()
}

/// Checks a race: no errors leaked (every exit 0 or 75, nothing on stderr), exactly one winner,
/// every loser names the winner as the holder, and `status` agrees.
fn assert_one_winner(db: &Db, resource: &str, results: &[(String, Finished)]) {
    for (owner, finished) in results {
        assert!(
            matches!(finished.code(), Some(0 | 75)) && finished.stderr().is_empty(),
            "{owner} on {resource}: {}",
            finished.describe()
        );
    }
    let winners: Vec<&(String, Finished)> = results
        .iter()
        .filter(|(_, f)| f.code() == Some(0))
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one of {} racers must win {resource}; winners: {:?}",
        results.len(),
        winners.iter().map(|(o, _)| o).collect::<Vec<_>>()
    );
    let (winner, won) = winners[0];
    let lock = parse_line(&won.output.stdout)["lock"].clone();
    assert_eq!(lock["owner"], winner.as_str(), "{lock}");
    for (owner, finished) in results.iter().filter(|(o, _)| o != winner) {
        let busy = parse_line(&finished.output.stdout);
        assert_eq!(busy["acquired"], false, "{owner}: {busy}");
        assert_eq!(busy["holder"]["owner"], winner.as_str(), "{owner}: {busy}");
    }
    let status = db.json(&["status", resource], 0);
    assert_eq!(status["lock"], lock, "status must show the winner's lock");
}

#[test]
fn twenty_processes_racing_over_postgres_have_exactly_one_winner() {
    let Some(db) = Db::postgres() else { return };
    for round in 0..5 {
        let resource = format!("race-{round}");
        let results = race(&db, &resource, 20, &format!("round{round}"));
        assert_one_winner(&db, &resource, &results);
        let log = db.run(&["log", &resource]);
        let events = String::from_utf8_lossy(&log.stdout).lines().count();
        assert_eq!(events, 1, "one tenure, one history event: {log:?}");
    }
}

#[test]
fn sixteen_processes_on_a_brand_new_database_create_the_schema_once_and_one_wins() {
    let Some(db) = Db::postgres() else { return };
    // Nothing has touched this database yet: the racers create the schema between them.
    let results = race(&db, "first", 16, "fresh");
    assert_one_winner(&db, "first", &results);
}

// ---------------------------------------------------------------------------------------------
// Clock skew: the server's clock decides.

/// libfaketime's preload library (Debian's `libfaketime`), wherever the system keeps it.
///
/// The library is preloaded directly rather than through the `faketime` wrapper: the wrapper
/// makes a shared memory segment named after its process id and leaves it behind when it is
/// killed, and a later wrapper given the same process id then fails ("sem_open: File exists").
fn libfaketime() -> Option<std::path::PathBuf> {
    let folders = std::fs::read_dir("/usr/lib").ok()?;
    let mut candidates: Vec<std::path::PathBuf> = folders
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("faketime/libfaketime.so.1"))
        .collect();
    candidates.push("/usr/lib/faketime/libfaketime.so.1".into());
    candidates.into_iter().find(|path| path.is_file())
}

/// `program` with its wall clock shifted by `offset` (`+1h`); the monotonic clock is left
/// alone, as a skewed host's would be.
fn shifted(program: &str, offset: &str) -> Command {
    let mut cmd = isolated(program);
    if let Some(library) = libfaketime() {
        cmd.env("LD_PRELOAD", library);
    }
    cmd.env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    cmd
}

/// Whether libfaketime works here; through the gate (tool `FAKETIME`).
fn faketime_works() -> bool {
    let shifted = shifted("date", "+1h")
        .arg("+%s")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<i64>()
                .ok()
        });
    let works = shifted
        .filter(|secs| (secs - now_millis() / 1000 - 3600).abs() < 60)
        .map(|_| ())
        .ok_or_else(|| {
            "`date +%s` with libfaketime preloaded (FAKETIME=+1h) did not print a time an \
             hour ahead (apt-get install faketime)"
                .to_owned()
        });
    require("FAKETIME", "a client's clock skewed", works).is_some()
}

/// `distlock ARGS…` against `db` with the client's wall clock shifted by `offset` (`+1h`).
fn skewed(db: &Db, offset: &str, args: &[&str]) -> Command {
    skewed_at(&db.url, offset, args)
}

fn skewed_at(url: &str, offset: &str, args: &[&str]) -> Command {
    let mut cmd = shifted(BIN, offset);
    cmd.args(args).env("DISTLOCK_DB", url);
    cmd
}

/// Runs a skewed command and returns its JSON line, checking its exit code.
fn skewed_json(db: &Db, offset: &str, args: &[&str], code: i32) -> Value {
    let name = format!("skewed-{}", fastrand::u32(..));
    let finished = finish(
        skewed(db, offset, args),
        db.dir.path(),
        &name,
        Duration::from_secs(20),
    );
    assert_eq!(
        finished.code(),
        Some(code),
        "faketime {offset} distlock {args:?}: {}",
        finished.describe()
    );
    parse_line(&finished.output.stdout)
}

const OFFSETS: [&str; 2] = ["+1h", "-1h"];

#[test]
fn skewed_clients_get_the_servers_time_and_exactly_their_ttl() {
    let Some(db) = Db::postgres() else { return };
    if !faketime_works() {
        return;
    }
    // faketime reaches the binary: on SQLite, which uses the host's clock, the same skewed
    // client stamps its own (shifted) time.
    let sqlite = db.file("skew.db");
    let sqlite = sqlite.to_str().expect("utf-8 path");
    for (offset, shift) in [("+1h", 3_600_000), ("-1h", -3_600_000)] {
        let out = finish(
            skewed_at(
                sqlite,
                offset,
                &[
                    "acquire",
                    &format!("sqlite{offset}"),
                    "--owner",
                    "s",
                    "--ttl",
                    "60",
                ],
            ),
            db.dir.path(),
            "sqlite-skew",
            Duration::from_secs(20),
        );
        assert_eq!(out.code(), Some(0), "{}", out.describe());
        let (acquired, _) = lock_times(&parse_line(&out.output.stdout)["lock"]);
        assert!(
            (acquired - now_millis() - shift).abs() < 60_000,
            "faketime {offset} does not reach distlock: SQLite stamped {acquired}, now {}",
            now_millis()
        );
    }

    for offset in OFFSETS {
        let resource = format!("skew{offset}");
        let server_before = server_now_millis(&db);
        let test_before = now_millis();
        let acquired = skewed_json(
            &db,
            offset,
            &["acquire", &resource, "--owner", "s", "--ttl", "60"],
            0,
        );
        let test_after = now_millis();
        let server_after = server_now_millis(&db);
        let lock = &acquired["lock"];
        let (acquired_at, expires_at) = lock_times(lock);
        assert!(
            server_before - 1000 <= acquired_at && acquired_at <= server_after + 1000,
            "{offset}: acquired_at {acquired_at} is not the server's now() \
             ({server_before}..={server_after})"
        );
        assert!(
            test_before - 5000 <= acquired_at && acquired_at <= test_after + 5000,
            "{offset}: acquired_at {acquired_at} is far from the real now \
             ({test_before}..={test_after})"
        );
        assert_eq!(expires_at - acquired_at, 60_000, "{offset}: {lock}");

        // The skewed client sees its own lock as live (a client-side check would call it
        // expired an hour ago, or live for an hour too long), and so does `list`.
        let status = skewed_json(&db, offset, &["status", &resource], 0);
        assert_eq!(&status["lock"], lock, "{offset}");
        let list = skewed_json(&db, offset, &["list", "--prefix", &resource], 0);
        assert_eq!(list["locks"], serde_json::json!([lock]), "{offset}");

        // Re-acquire and renew: still the server's now, still exactly the TTL.
        let again = skewed_json(
            &db,
            offset,
            &["acquire", &resource, "--owner", "s", "--ttl", "45"],
            0,
        );
        let (re_acquired, re_expires) = lock_times(&again["lock"]);
        assert_eq!(again["lock"]["fence"], lock["fence"], "{offset}: {again}");
        assert!(re_acquired >= acquired_at, "{offset}: {again}");
        assert_eq!(re_expires - re_acquired, 45_000, "{offset}: {again}");
        let server_before = server_now_millis(&db);
        let renewed = skewed_json(
            &db,
            offset,
            &["renew", &resource, "--owner", "s", "--ttl", "90"],
            0,
        );
        let server_after = server_now_millis(&db);
        let (_, renewed_expires) = lock_times(&renewed["lock"]);
        assert!(
            server_before + 90_000 - 1000 <= renewed_expires
                && renewed_expires <= server_after + 90_000 + 1000,
            "{offset}: renew must set expires_at to the server's now + 90 s: {renewed} \
             (server now {server_before}..={server_after})"
        );

        // `log --since` counts back from the server's now too.
        let out = finish(
            skewed(&db, offset, &["log", &resource, "--since", "10m"]),
            db.dir.path(),
            "skewed-log",
            Duration::from_secs(20),
        );
        assert_eq!(out.code(), Some(0), "{}", out.describe());
        assert_eq!(
            out.stdout().lines().count(),
            3,
            "{offset}: log --since 10m must show the acquire, extend and renew: {}",
            out.describe()
        );
    }
}

#[test]
fn skewed_clients_leases_expire_by_the_servers_clock() {
    let Some(db) = Db::postgres() else { return };
    if !faketime_works() {
        return;
    }
    let locks: Vec<(String, i64)> = OFFSETS
        .iter()
        .map(|&offset| {
            let resource = format!("short{offset}");
            let acquired = skewed_json(
                &db,
                offset,
                &["acquire", &resource, "--owner", "s", "--ttl", "2"],
                0,
            );
            let (acquired_at, expires_at) = lock_times(&acquired["lock"]);
            assert_eq!(expires_at - acquired_at, 2000, "{offset}: {acquired}");
            // A client skewed the other way sees it live too.
            let other = if offset == "+1h" { "-1h" } else { "+1h" };
            skewed_json(&db, other, &["status", &resource], 0);
            (resource, acquired_at)
        })
        .collect();

    for (resource, acquired_at) in &locks {
        // Still held after 1 s, by the server's clock.
        sleep_until_millis(acquired_at + 1000);
        let out = db.run(&["status", resource]);
        let answered = now_millis();
        match out.status.code() {
            Some(0) => {}
            // Not held is right only if the answer came after the 2 s were up (a slow machine).
            Some(1) if answered >= acquired_at + 2000 => {
                eprintln!("note: {resource}: status was too slow to see the lock live");
            }
            _ => panic!(
                "{resource}: a 2 s lease taken by a skewed client must be held 1 s later: {out:?}"
            ),
        }
    }
    let latest = locks.iter().map(|l| l.1).max().expect("two locks");
    sleep_until_millis(latest + 2500);
    for (resource, _) in &locks {
        // Gone after 2.5 s, for an unskewed reader and for readers an hour ahead and behind.
        let status = db.json(&["status", resource], 1);
        assert_eq!(status["held"], false, "{resource}: {status}");
        for offset in OFFSETS {
            skewed_json(&db, offset, &["status", resource], 1);
        }
    }
}

#[test]
fn skewed_clients_cannot_take_a_live_lock() {
    let Some(db) = Db::postgres() else { return };
    if !faketime_works() {
        return;
    }
    // Held by an unskewed client: neither skewed client may take it over.
    let held = db.json(&["acquire", "live", "--owner", "holder", "--ttl", "30"], 0);
    for offset in OFFSETS {
        let busy = skewed_json(
            &db,
            offset,
            &["acquire", "live", "--owner", "intruder", "--ttl", "30"],
            75,
        );
        assert_eq!(busy["holder"]["owner"], "holder", "{offset}: {busy}");
        skewed_json(
            &db,
            offset,
            &["renew", "live", "--owner", "intruder", "--ttl", "30"],
            77,
        );
        skewed_json(&db, offset, &["release", "live", "--owner", "intruder"], 77);
    }
    assert_eq!(db.json(&["status", "live"], 0)["lock"], held["lock"]);

    // Taken by a client an hour behind (a client-side clock would have written an expiry an
    // hour in the past): a client an hour ahead cannot take it early, nor can an unskewed one.
    let behind = skewed_json(
        &db,
        "-1h",
        &["acquire", "behind", "--owner", "slow", "--ttl", "30"],
        0,
    );
    let busy = skewed_json(
        &db,
        "+1h",
        &["acquire", "behind", "--owner", "fast", "--ttl", "30"],
        75,
    );
    assert_eq!(busy["holder"]["owner"], "slow", "{busy}");
    db.json(
        &["acquire", "behind", "--owner", "plain", "--ttl", "30"],
        75,
    );

    // Taken by a client an hour ahead: a client an hour behind cannot take it either.
    skewed_json(
        &db,
        "+1h",
        &["acquire", "ahead", "--owner", "fast", "--ttl", "30"],
        0,
    );
    let busy = skewed_json(
        &db,
        "-1h",
        &["acquire", "ahead", "--owner", "slow", "--ttl", "30"],
        75,
    );
    assert_eq!(busy["holder"]["owner"], "fast", "{busy}");
    assert_eq!(db.json(&["status", "behind"], 0)["lock"], behind["lock"]);
}

// ---------------------------------------------------------------------------------------------
// An unreachable or hung server: exit 74 in bounded time, and `run` never starts the command.

#[test]
fn unreachable_server_is_sought_for_the_calls_budget_then_a_store_error_for_every_command() {
    let Some(db) = Db::postgres() else { return };
    // The URL's connect_timeout is a try-once call's budget; a waiter's is its wait.
    let url = format!(
        "postgres://postgres:{SECRET}@127.0.0.1:{}/db?sslmode=disable&connect_timeout=2",
        dead_port()
    );
    let commands: [(&[&str], u64); 9] = [
        (&["acquire", "r", "--owner", "a", "--ttl", "10"], 2),
        (
            &[
                "acquire", "r", "--owner", "a", "--ttl", "10", "--wait", "4s",
            ],
            4,
        ),
        (&["status", "r"], 2),
        (&["release", "r", "--owner", "a"], 2),
        (&["renew", "r", "--owner", "a", "--ttl", "10"], 2),
        (&["list"], 2),
        (&["log"], 2),
        (&["gc"], 2),
        (&["--format", "text", "status", "r"], 2),
    ];
    let running: Vec<_> = commands
        .iter()
        .map(|(args, budget)| {
            let proc = Proc::spawn(&mut pg_at(&url, args), db.dir.path(), "unreachable");
            (args, budget, proc)
        })
        .collect();
    for (args, budget, proc) in running {
        let out = proc.finish(Duration::from_secs(30));
        assert!(
            out.elapsed >= Duration::from_millis(budget * 1000 - 300)
                && out.elapsed < Duration::from_secs(budget + 8),
            "{args:?} must seek the server for about {budget} s, then give up: {}",
            out.describe()
        );
        let line = assert_store_error(&out.output, &args);
        assert!(!line.contains(SECRET), "{args:?}: {line}");
    }
}

#[test]
fn unreachable_server_makes_run_exit_74_without_starting_the_command() {
    let Some(db) = Db::postgres() else { return };
    let url = format!(
        "postgres://postgres:{SECRET}@127.0.0.1:{}/db?sslmode=disable",
        dead_port()
    );
    let mut cmd = db.std_cmd();
    cmd.env("DISTLOCK_DB", &url)
        .current_dir(db.dir.path())
        .args(sh_script(
            &["run", "--resource", "r"],
            "echo ran > started",
            &[],
        ));
    let out = finish(cmd, db.dir.path(), "run", Duration::from_secs(30));
    assert!(
        out.elapsed < Duration::from_secs(15),
        "run took too long: {}",
        out.describe()
    );
    let line = assert_store_error(&out.output, &"run with an unreachable server");
    assert!(!line.contains(SECRET), "{line}");
    assert!(
        !db.file("started").exists(),
        "the command must never start when the store is unreachable"
    );
}

#[test]
fn server_that_accepts_but_never_answers_is_a_store_error_in_bounded_time() {
    let Some(db) = Db::postgres() else { return };
    // A hung server: the connection is accepted, and nothing ever comes back.
    let (proxy, url) = Proxy::in_front_of(&db);
    proxy.black_hole();
    let status = Proc::spawn(&mut pg_at(&url, &["status", "r"]), db.dir.path(), "status");
    let mut run = pg_at(&url, &["run", "--resource", "r", "--", "sh", "-c"]);
    run.arg("echo ran > started").current_dir(db.dir.path());
    let run = Proc::spawn(&mut run, db.dir.path(), "run");
    for (what, spawned) in [("status", status), ("run", run)] {
        let out = spawned.finish(Duration::from_secs(20));
        assert!(
            !out.timed_out && out.elapsed < Duration::from_secs(15),
            "{what} against a server that never answers must end in exit 74 within 15 s \
             (connect and statement timeouts): {}",
            out.describe()
        );
        assert_store_error(&out.output, &what);
    }
    assert!(
        !db.file("started").exists(),
        "the command must never start when the store does not answer"
    );
}

// ---------------------------------------------------------------------------------------------
// The server dies or hangs while `run` holds the lock: the command is stopped before the lease
// can expire.

/// The guarded command: records when SIGTERM reached it (ms since the epoch) and exits.
const STOPPABLE: &str = r"echo $$ > pid.tmp && mv pid.tmp pid
trap 'date +%s%3N > stopped.tmp && mv stopped.tmp stopped; exit 0' TERM
echo go > started
while :; do sleep 0.1; done";

/// `run --ttl 3 --kill-after 1` through a proxy; the proxy then fails as `fault` says, and the
/// command must be stopped before the lease recorded on the server ends, with exit 124.
fn server_fault_mid_run(fault: fn(&Proxy)) {
    let Some(db) = Db::postgres() else { return };
    let ttl = Duration::from_secs(3);
    let (proxy, via_proxy) = Proxy::in_front_of(&db);
    let mut cmd = db.std_cmd();
    cmd.env("DISTLOCK_DB", &via_proxy)
        .current_dir(db.dir.path())
        .args([
            "run",
            "--resource",
            "job",
            "--ttl",
            "3",
            "--kill-after",
            "1",
        ])
        .args(["--", "sh", "-c", STOPPABLE]);
    let guard = Proc::spawn(&mut cmd, db.dir.path(), "guard");
    // Make sure nothing the guard started outlives the test, whatever happens.
    let cleanup = KillGroupOnDrop(db.file("pid"));

    let started = db.file("started");
    if !wait_for(Duration::from_secs(15), || started.exists()) {
        let out = guard.finish(Duration::ZERO);
        panic!("the command did not start: {}", out.describe());
    }
    // The lock through the direct URL, right after the start …
    let first = db.json(&["status", "job"], 0)["lock"].clone();
    let (_, first_expires) = lock_times(&first);
    // … and once a renewal has gone through the proxy, so the fault hits a working heartbeat.
    let renewed_by = Instant::now() + Duration::from_secs(5);
    while lock_times(&db.json(&["status", "job"], 0)["lock"]).1 == first_expires {
        assert!(
            Instant::now() < renewed_by,
            "no renewal went through the proxy"
        );
        thread::sleep(Duration::from_millis(50));
    }

    fault(&proxy);
    let faulted = Instant::now();
    // The lease as the server records it: read after the fault, so it includes any renewal
    // that reached the server but whose answer was lost. Nothing can extend it after this.
    thread::sleep(Duration::from_millis(300));
    let last = db.json(&["status", "job"], 0)["lock"].clone();
    assert_eq!(last["fence"], first["fence"], "{last}");
    let (_, expires_at) = lock_times(&last);

    let out = guard.finish(
        (faulted + ttl + Duration::from_secs(15)).saturating_duration_since(Instant::now()),
    );
    drop(cleanup);
    // First the safety property: the command was stopped while the lease still held.
    let stopped = db.file("stopped");
    assert!(
        stopped.exists(),
        "the command was never sent SIGTERM: {}",
        out.describe()
    );
    let stopped_at: i64 = fs::read_to_string(&stopped)
        .expect("stopped")
        .trim()
        .parse()
        .expect("a time in ms");
    assert!(
        stopped_at < expires_at,
        "the command was stopped at {stopped_at}, {} ms after the lease ended at {expires_at}",
        stopped_at - expires_at
    );
    // Then the guard's own end: bounded, and 124.
    assert!(
        !out.timed_out,
        "the command was stopped in time, but the guard did not exit within ttl + 15 s of \
         the server failing: {}",
        out.describe()
    );
    assert_eq!(out.code(), Some(124), "{}", out.describe());
    assert!(out.output.stdout.is_empty(), "{}", out.describe());
    let password = PgUrl::parse(db.pg_url()).password.unwrap_or_default();
    assert!(
        password.is_empty() || !out.stderr().contains(&password),
        "the guard's messages must not show the password: {}",
        out.describe()
    );
}

/// Kills the process group whose leader's pid is in the file, if it still runs.
struct KillGroupOnDrop(PathBuf);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = fs::read_to_string(&self.0)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
        {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

#[test]
fn server_dying_mid_run_stops_the_command_before_the_lease_ends() {
    server_fault_mid_run(Proxy::kill);
}

#[test]
fn server_hanging_mid_run_stops_the_command_before_the_lease_ends() {
    server_fault_mid_run(Proxy::black_hole);
}

// ---------------------------------------------------------------------------------------------
// Passwords and PGPASSWORD.

#[test]
fn the_password_never_appears_in_any_message() {
    let Some(db) = Db::postgres() else { return };
    let real = PgUrl::parse(db.pg_url());
    let wrong = real.with_password(Some(SECRET));
    let refused = wrong.with_server(&format!("127.0.0.1:{}", dead_port()));
    let encoded = refused.with_password(Some("hunter2%2DPa55"));
    let in_query = real.with_password(None).with_setting("password", SECRET);
    let cases: [(&str, PgUrl, i32); 8] = [
        ("a refused port", refused, 74),
        ("a percent-encoded password", encoded, 74),
        ("a wrong password", wrong.clone(), 74),
        ("a wrong password given as a setting", in_query, 74),
        (
            "sslmode=require with a wrong password",
            wrong.with_setting("sslmode", "require"),
            74,
        ),
        (
            "a port that is not a number",
            wrong.with_server("127.0.0.1:notaport"),
            64,
        ),
        ("sslmode=bogus", wrong.with_setting("sslmode", "bogus"), 64),
        (
            "an unknown setting",
            wrong.with_setting("no_such_setting", "1"),
            64,
        ),
    ];
    // All at once: the refused port is sought for the connect timeout (5 s) by each command.
    let mut running = Vec::new();
    for (n, (what, url, code)) in cases.into_iter().enumerate() {
        let url = url.to_string();
        assert!(url.contains("hunter2"), "{what}: {url}");
        for (how, mut cmd) in [
            ("--db", pg_at(&url, &["status", "r"])),
            ("DISTLOCK_DB", {
                let mut cmd = db.std_cmd();
                cmd.env("DISTLOCK_DB", &url)
                    .args(["acquire", "r", "--owner", "a", "--ttl", "10"]);
                cmd
            }),
            ("run", {
                let mut cmd = pg_at(&url, &["run", "--resource", "r", "--", "true"]);
                cmd.current_dir(db.dir.path());
                cmd
            }),
        ] {
            let name = format!("secret-{n}-{how}");
            let proc = Proc::spawn(&mut cmd, db.dir.path(), &name);
            running.push((what, how, code, proc));
        }
    }
    for (what, how, code, proc) in running {
        let out = proc.finish(Duration::from_secs(30));
        let shown = format!("{}{}", out.stdout(), out.stderr());
        // Every password here contains `hunter2`, percent-encoded or not.
        assert!(
            !shown.contains("hunter2"),
            "{what} ({how}): the password leaked: {}",
            out.describe()
        );
        assert_eq!(out.code(), Some(code), "{what} ({how}): {}", out.describe());
        if code == 74 {
            assert_store_error(&out.output, &format!("{what} ({how})"));
        } else {
            assert!(out.output.stdout.is_empty(), "{what} ({how})");
            assert!(!out.stderr().trim().is_empty(), "{what} ({how})");
        }
    }
}

#[test]
fn pgpassword_supplies_a_password_the_url_leaves_out() {
    let Some(db) = Db::postgres() else { return };
    let real = PgUrl::parse(db.pg_url());
    let password = real.password.clone().expect("the test URL has a password");
    let bare = real.with_password(None).to_string();

    let mut with_env = pg_at(&bare, &["acquire", "r", "--owner", "a", "--ttl", "30"]);
    with_env.env("PGPASSWORD", &password);
    let out = finish(
        with_env,
        db.dir.path(),
        "pgpassword",
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    assert_eq!(parse_line(&out.output.stdout)["lock"]["owner"], "a");
    db.json(&["status", "r"], 0);

    // Without it, the login fails: a store error, without the password in it.
    let out = finish(
        pg_at(&bare, &["status", "r"]),
        db.dir.path(),
        "no-pgpassword",
        Duration::from_secs(30),
    );
    let line = assert_store_error(&out.output, &"no password anywhere");
    assert!(!line.contains(&password), "{line}");

    // A password in the URL wins over PGPASSWORD, as with libpq.
    let mut both = pg_at(db.pg_url(), &["status", "r"]);
    both.env("PGPASSWORD", SECRET);
    let out = finish(both, db.dir.path(), "url-wins", Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{}", out.describe());

    // `run` (and its heartbeat's own connection) work with PGPASSWORD too.
    let mut run = pg_at(
        &bare,
        &[
            "run",
            "--resource",
            "job",
            "--ttl",
            "3",
            "--",
            "sleep",
            "1.5",
        ],
    );
    run.env("PGPASSWORD", &password);
    let out = finish(
        run,
        db.dir.path(),
        "run-pgpassword",
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    assert!(out.stderr().is_empty(), "{}", out.describe());
}

// ---------------------------------------------------------------------------------------------
// Fences after gc.

#[test]
fn fences_keep_increasing_after_gc_drops_every_row() {
    let Some(db) = Db::postgres() else { return };
    let fence = |value: &Value| value["lock"]["fence"].as_i64().expect("a fence");
    let first = fence(&db.json(&["acquire", "r", "--owner", "a", "--ttl", "60"], 0));
    db.json(&["release", "r", "--owner", "a"], 0);
    let second = fence(&db.json(&["acquire", "r", "--owner", "b", "--ttl", "1"], 0));
    assert!(second > first, "{second} after {first}");
    thread::sleep(Duration::from_millis(1300));
    db.json(&["status", "r"], 1);

    let report = db.json(&["gc", "--keep-history", "0"], 0);
    assert!(report["expired_locks"].as_u64() >= Some(1), "{report}");
    assert!(report["history_events"].as_u64() >= Some(3), "{report}");
    let log = db.run(&["log", "r"]);
    assert!(
        log.stdout.is_empty(),
        "gc --keep-history 0 leaves no history: {log:?}"
    );

    let third = db.json(&["acquire", "r", "--owner", "c", "--ttl", "60"], 0);
    assert!(fence(&third) > second, "{third} after fence {second}");
    let other = db.json(&["acquire", "other", "--owner", "c", "--ttl", "60"], 0);
    assert!(fence(&other) > fence(&third), "{other} after {third}");
}

// ---------------------------------------------------------------------------------------------
// TLS: each sslmode against the test server, which takes TLS and plain connections alike
// (`scripts/pg-test-server` gives it a certificate for localhost and 127.0.0.1, signed by a
// throwaway CA whose certificate is `DISTLOCK_TEST_PG_CA`).

/// The CA that signed the test server's certificate; through the gate (tool `PG`) when
/// `DISTLOCK_TEST_PG_CA` is unset.
fn test_ca() -> Option<PathBuf> {
    let ca = std::env::var_os("DISTLOCK_TEST_PG_CA")
        .map(PathBuf::from)
        .ok_or_else(|| {
            "DISTLOCK_TEST_PG_CA is not set (the CA of a TLS test server, as \
             scripts/pg-test-server start prints it)"
                .to_owned()
        });
    require("PG", "PostgreSQL over TLS", ca)
}

/// `host:port` of the test server, with the host written as `host`.
fn server_as(host: &str) -> String {
    format!("{host}:{}", server_addr().port())
}

/// `path` percent-encoded for a URL's query (distlock decodes `sslrootcert`).
fn query_value(path: &Path) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The test database's URL through `server` (`host:port`), with `sslmode=MODE` and, when
/// given, `sslrootcert=ROOT`.
fn tls_url(db: &Db, server: &str, mode: &str, root: Option<&Path>) -> String {
    let mut url = PgUrl::parse(db.pg_url())
        .with_server(server)
        .with_setting("sslmode", mode);
    if let Some(root) = root {
        url = url.with_setting("sslrootcert", &query_value(root));
    }
    url.to_string()
}

/// `distlock --db URL ARGS…` without the environment's trusted-roots overrides.
fn distlock_tls(url: &str, args: &[&str]) -> Command {
    let mut cmd = pg_at(url, args);
    cmd.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    cmd
}

/// `acquire`, `status` and `release` of `resource` through `distlock` (a command against some
/// URL), each exit 0 with nothing on stderr; the test's own plain connection sees the same
/// lock in between, and none after.
fn assert_lock_cycle(db: &Db, distlock: &dyn Fn(&[&str]) -> Command, resource: &str, what: &str) {
    let step = |args: &[&str], name: &str| {
        let out = finish(
            distlock(args),
            db.dir.path(),
            &format!("{resource}-{name}"),
            Duration::from_secs(30),
        );
        assert_eq!(out.code(), Some(0), "{what}: {args:?}: {}", out.describe());
        assert!(
            out.stderr().is_empty(),
            "{what}: {args:?}: {}",
            out.describe()
        );
        out
    };
    let acquired = step(
        &["acquire", resource, "--owner", "tls", "--ttl", "60"],
        "acquire",
    );
    let lock = parse_line(&acquired.output.stdout)["lock"].clone();
    assert_eq!(lock["owner"], "tls", "{what}: {lock}");
    let status = step(&["status", resource], "status");
    assert_eq!(parse_line(&status.output.stdout)["lock"], lock, "{what}");
    assert_eq!(db.json(&["status", resource], 0)["lock"], lock, "{what}");
    step(&["release", resource, "--owner", "tls"], "release");
    db.json(&["status", resource], 1);
}

/// Runs `cmd` and checks it fails as a store error (exit 74, one line `distlock: …`) without
/// showing the password; returns that line.
fn assert_tls_refused(db: &Db, cmd: Command, name: &str, what: &str) -> String {
    let out = finish(cmd, db.dir.path(), name, Duration::from_secs(30));
    let password = PgUrl::parse(db.pg_url())
        .password
        .expect("the test URL has a password");
    assert!(
        !format!("{}{}", out.stdout(), out.stderr()).contains(&password),
        "{what}: the password leaked: {}",
        out.describe()
    );
    assert_store_error(&out.output, &what)
}

/// Holds `run`'s connection open until the test writes `release-hold` (or 15 s pass).
const HOLD: &str = r#": > holding
i=0
while [ ! -e release-hold ] && [ "$i" -lt 300 ]; do sleep 0.05; i=$((i + 1)); done"#;

/// Runs `look` on a plain connection to the test database while `run` through `url` holds a
/// lock (and its connection); checks that `run` then exits 0 without a word on stderr. `tag`
/// names the lock and the folder for the run's files.
fn while_run_holds<T>(
    db: &Db,
    url: &str,
    tag: &str,
    look: impl FnOnce(&mut postgres::Client) -> T,
) -> T {
    let dir = db.file(tag);
    fs::create_dir(&dir).expect("a folder for the run");
    let mut cmd = distlock_tls(url, &["run", "--resource", tag, "--", "sh", "-c", HOLD]);
    cmd.current_dir(&dir);
    let run = Proc::spawn(&mut cmd, &dir, "run");
    if !wait_for(Duration::from_secs(15), || dir.join("holding").exists()) {
        let out = run.finish(Duration::ZERO);
        panic!("{tag}: the command did not start: {}", out.describe());
    }
    let mut client = db.pg_client();
    let seen = look(&mut client);
    fs::write(dir.join("release-hold"), "").expect("release-hold");
    let out = run.finish(Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{tag}: {}", out.describe());
    assert!(out.stderr().is_empty(), "{tag}: {}", out.describe());
    seen
}

/// While `run` through `url` holds a lock, asks the server whether distlock's connections to
/// this test's database use TLS; each must say `encrypted`.
fn assert_encryption(db: &Db, url: &str, encrypted: bool, tag: &str) {
    let ssl: Vec<bool> = while_run_holds(db, url, tag, |client| {
        client
            .query(
                "SELECT ssl FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
                 WHERE application_name = 'distlock' AND datname = current_database()",
                &[],
            )
            .expect("read pg_stat_ssl")
            .iter()
            .map(|row| row.get(0))
            .collect()
    });
    assert!(
        !ssl.is_empty(),
        "{tag}: no connection named distlock while run held the lock"
    );
    assert!(
        ssl.iter().all(|&s| s == encrypted),
        "{tag}: distlock's connections use TLS: {ssl:?}, expected {encrypted}"
    );
}

/// A CA that did not sign the server's certificate, though it has the same name as the one
/// that did: only its key differs.
fn impostor_ca(dir: &Path) -> PathBuf {
    let conf = dir.join("impostor.cnf");
    fs::write(
        &conf,
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = distlock test CA\n\
         [ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n\
         subjectKeyIdentifier = hash\n",
    )
    .expect("impostor.cnf");
    let cert = dir.join("impostor-ca.crt");
    let out = Command::new("openssl")
        .args(["req", "-x509", "-config"])
        .arg(&conf)
        .args(["-extensions", "ca", "-newkey", "ec"])
        .args([
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
        ])
        .arg(dir.join("impostor-ca.key"))
        .arg("-out")
        .arg(&cert)
        .args(["-days", "1", "-subj", "/CN=distlock test CA"])
        .output()
        .expect("run openssl (Debian package openssl)");
    assert!(out.status.success(), "openssl: {out:?}");
    cert
}

#[test]
fn tls_require_and_prefer_acquire_status_and_release() {
    let Some(db) = Db::postgres() else { return };
    if test_ca().is_none() {
        return;
    }
    for mode in ["require", "prefer"] {
        let url = tls_url(&db, &server_as("127.0.0.1"), mode, None);
        let distlock = |args: &[&str]| distlock_tls(&url, args);
        assert_lock_cycle(&db, &distlock, mode, &format!("sslmode={mode}"));
    }
}

#[test]
fn tls_sslmode_require_encrypts_the_connection() {
    let Some(db) = Db::postgres() else { return };
    if test_ca().is_none() {
        return;
    }
    let url = tls_url(&db, &server_as("127.0.0.1"), "require", None);
    assert_encryption(&db, &url, true, "require");
}

#[test]
fn tls_sslmode_prefer_encrypts_when_the_server_offers_tls() {
    let Some(db) = Db::postgres() else { return };
    if test_ca().is_none() {
        return;
    }
    let url = tls_url(&db, &server_as("127.0.0.1"), "prefer", None);
    assert_encryption(&db, &url, true, "prefer");
    // prefer is the default.
    let url = PgUrl::parse(&url).without_setting("sslmode").to_string();
    assert_encryption(&db, &url, true, "no-sslmode");
}

#[test]
fn tls_sslmode_disable_does_not_encrypt() {
    let Some(db) = Db::postgres() else { return };
    if test_ca().is_none() {
        return;
    }
    let url = tls_url(&db, &server_as("127.0.0.1"), "disable", None);
    assert_encryption(&db, &url, false, "disable");
}

/// The README recommends `channel_binding=require` beside TLS: the SCRAM login is then bound to
/// the TLS channel (a man in the middle cannot relay it, even under `sslmode=require`), and a
/// connection without TLS is refused instead of logging in unbound.
#[test]
fn channel_binding_require_logs_in_over_tls_and_refuses_a_plain_connection() {
    let Some(db) = Db::postgres() else { return };
    if test_ca().is_none() {
        return;
    }
    let bound = |mode: &str| {
        PgUrl::parse(&tls_url(&db, &server_as("127.0.0.1"), mode, None))
            .with_setting("channel_binding", "require")
            .to_string()
    };
    let url = bound("require");
    let distlock = |args: &[&str]| distlock_tls(&url, args);
    assert_lock_cycle(&db, &distlock, "bound", "channel_binding=require");
    let out = finish(
        distlock_tls(&bound("disable"), &["status", "bound"]),
        db.dir.path(),
        "unbound",
        Duration::from_secs(30),
    );
    let line = assert_store_error(&out.output, &"channel_binding=require without TLS");
    assert!(line.contains("channel binding"), "{line}");
}

#[test]
fn tls_verify_full_with_the_servers_ca_works_for_localhost_and_127_0_0_1() {
    let Some(db) = Db::postgres() else { return };
    let Some(ca) = test_ca() else { return };
    for host in ["localhost", "127.0.0.1"] {
        let url = tls_url(&db, &server_as(host), "verify-full", Some(&ca));
        let distlock = |args: &[&str]| distlock_tls(&url, args);
        let what = format!("sslmode=verify-full, host {host}");
        assert_lock_cycle(&db, &distlock, &format!("vf-{host}"), &what);
    }
    let url = tls_url(&db, &server_as("localhost"), "verify-full", Some(&ca));
    assert_encryption(&db, &url, true, "verify-full");
}

#[test]
fn tls_verify_full_without_sslrootcert_trusts_the_system_roots_only() {
    let Some(db) = Db::postgres() else { return };
    let Some(ca) = test_ca() else { return };
    let url = tls_url(&db, &server_as("localhost"), "verify-full", None);
    // The throwaway CA is not among the system's trusted roots.
    assert_tls_refused(
        &db,
        distlock_tls(&url, &["status", "r"]),
        "system-roots",
        "verify-full against the system roots",
    );
    // Where the system's roots come from is rustls-native-certs' business: SSL_CERT_FILE
    // replaces them, so with the test CA there the server is trusted.
    let distlock = |args: &[&str]| {
        let mut cmd = distlock_tls(&url, args);
        cmd.env("SSL_CERT_FILE", &ca);
        cmd
    };
    assert_lock_cycle(
        &db,
        &distlock,
        "roots",
        "verify-full with the CA as SSL_CERT_FILE",
    );
}

#[test]
fn tls_verify_full_refuses_a_server_its_ca_did_not_sign() {
    let Some(db) = Db::postgres() else { return };
    if test_ca().is_none() {
        return;
    }
    let impostor = impostor_ca(db.dir.path());
    for host in ["localhost", "127.0.0.1"] {
        let url = tls_url(&db, &server_as(host), "verify-full", Some(&impostor));
        for (how, args) in [
            ("status", &["status", "r"][..]),
            (
                "acquire",
                &["acquire", "r", "--owner", "a", "--ttl", "10"][..],
            ),
        ] {
            assert_tls_refused(
                &db,
                distlock_tls(&url, args),
                &format!("impostor-{host}-{how}"),
                &format!("verify-full with another CA, host {host} ({how})"),
            );
        }
        // `run` refuses before its command starts.
        let mut run = distlock_tls(&url, &["run", "--resource", "r", "--", "touch", "ran"]);
        run.current_dir(db.dir.path());
        assert_tls_refused(
            &db,
            run,
            &format!("impostor-{host}-run"),
            &format!("verify-full with another CA, host {host} (run)"),
        );
        assert!(!db.file("ran").exists(), "run started its command");
    }
    db.json(&["status", "r"], 1);
}

#[test]
fn tls_verify_full_refuses_a_certificate_for_another_host_and_require_does_not_care() {
    let Some(db) = Db::postgres() else { return };
    let Some(ca) = test_ca() else { return };
    // 127.0.0.2 reaches the same server through a proxy, but the certificate names only
    // localhost and 127.0.0.1.
    let proxy = Proxy::start_on("127.0.0.2", server_addr());
    let elsewhere = proxy.addr.to_string();
    let url = tls_url(&db, &elsewhere, "verify-full", Some(&ca));
    assert_tls_refused(
        &db,
        distlock_tls(&url, &["status", "r"]),
        "other-host",
        "verify-full, host 127.0.0.2",
    );
    // require encrypts without authenticating the server, as libpq does.
    let url = tls_url(&db, &elsewhere, "require", None);
    let distlock = |args: &[&str]| distlock_tls(&url, args);
    assert_lock_cycle(&db, &distlock, "other-host", "require, host 127.0.0.2");
}

#[test]
fn tls_unreadable_sslrootcert_is_a_store_error() {
    let Some(db) = Db::postgres() else { return };
    if test_ca().is_none() {
        return;
    }
    let garbage = db.file("garbage.pem");
    fs::write(&garbage, "not a certificate\n").expect("garbage.pem");
    let cases = [
        ("a missing file", db.file("no-such-ca.pem")),
        ("a folder", db.dir.path().to_path_buf()),
        ("a file with no certificate", garbage),
    ];
    for (i, (what, root)) in cases.iter().enumerate() {
        let url = tls_url(&db, &server_as("localhost"), "verify-full", Some(root));
        assert_tls_refused(
            &db,
            distlock_tls(&url, &["status", "r"]),
            &format!("root-{i}-status"),
            &format!("sslrootcert is {what}"),
        );
        let mut run = distlock_tls(&url, &["run", "--resource", "r", "--", "touch", "ran"]);
        run.current_dir(db.dir.path());
        assert_tls_refused(
            &db,
            run,
            &format!("root-{i}-run"),
            &format!("sslrootcert is {what} (run)"),
        );
        assert!(!db.file("ran").exists(), "{what}: run started its command");
    }
}

// ---------------------------------------------------------------------------------------------
// URL settings.

/// The README ("URL forms") lists `application_name` among the query settings a URL may carry,
/// and `Target::parse` promises that every setting but sslmode and sslrootcert "goes to the
/// driver as it is": "distlock" may be the default name, not a replacement for the user's.
#[test]
fn a_urls_application_name_reaches_the_server() {
    let Some(db) = Db::postgres() else { return };
    let url = PgUrl::parse(db.pg_url())
        .with_setting("application_name", "nightly-report")
        .to_string();
    let names: Vec<String> = while_run_holds(&db, &url, "app-name", |client| {
        client
            .query(
                "SELECT application_name FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND backend_type = 'client backend'",
                &[],
            )
            .expect("read pg_stat_activity")
            .iter()
            .map(|row| row.get(0))
            .collect()
    });
    assert!(!names.is_empty(), "no connection while run held the lock");
    assert!(
        names.iter().all(|name| name == "nightly-report"),
        "the URL's application_name must reach the server; the server saw {names:?}"
    );
}

/// Values travel to the server inside the SQL text (so that an operation takes two round
/// trips): quotes and backslashes must come back exactly as given, also when the server reads
/// `'…'` strings the pre-9.1 way (`standard_conforming_strings=off`, where a backslash escapes
/// the quote after it), and nothing in them may run as SQL.
#[test]
fn quotes_and_backslashes_are_stored_as_given_whatever_standard_conforming_strings() {
    let Some(db) = Db::postgres() else { return };
    let url = PgUrl::parse(db.pg_url())
        .with_setting("options", "-c%20standard_conforming_strings%3Doff")
        .to_string();
    let resource = r"a\'b'' \\c'; DROP TABLE distlock.locks; --";
    let owner = r"o\'w\";
    let note = r"n\x27 \\' E'\\' end\";
    let json = |args: &[&str], code: i32, name: &str| {
        let out = finish(
            pg_at(&url, args),
            db.dir.path(),
            name,
            Duration::from_secs(30),
        );
        assert_eq!(out.code(), Some(code), "{args:?}: {}", out.describe());
        assert!(out.stderr().is_empty(), "{args:?}: {}", out.describe());
        parse_line(&out.output.stdout)
    };
    let acquired = json(
        &[
            "acquire", resource, "--owner", owner, "--ttl", "60", "--note", note,
        ],
        0,
        "acquire",
    );
    let fence = acquired["lock"]["fence"].clone();
    for lock in [
        &acquired["lock"],
        &json(&["status", resource], 0, "status")["lock"],
        &json(&["list"], 0, "list")["locks"][0],
    ] {
        assert_eq!(lock["resource"], resource, "{lock}");
        assert_eq!(lock["owner"], owner, "{lock}");
        assert_eq!(lock["note"], note, "{lock}");
        assert_eq!(lock["fence"], fence, "{lock}");
    }
    // Renewing and re-acquiring update the row these values name, and only that one.
    json(
        &["renew", resource, "--owner", owner, "--ttl", "60"],
        0,
        "renew",
    );
    json(
        &["acquire", resource, "--owner", owner, "--ttl", "60"],
        0,
        "again",
    );
    json(&["release", resource, "--owner", owner], 0, "release");
    let events: Vec<(String, String, String)> = db
        .log(&[])
        .iter()
        .map(|e| {
            (
                e["resource"].as_str().expect("resource").to_owned(),
                e["owner"].as_str().expect("owner").to_owned(),
                e["event"].as_str().expect("event").to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String, String)> = ["acquired", "renewed", "extended", "released"]
        .iter()
        .map(|event| (resource.to_owned(), owner.to_owned(), (*event).to_owned()))
        .collect();
    assert_eq!(events, expected);
    assert_eq!(
        json(&["status", resource], 1, "status-after")["held"],
        false
    );
}

// ---------------------------------------------------------------------------------------------
// Multi-host URLs: whichever host answers as a primary.

#[test]
fn a_multi_host_url_reaches_the_next_host_when_the_first_refuses_and_after_a_failover() {
    let Some(db) = Db::postgres() else { return };
    let first = Proxy::start(server_addr());
    let second = Proxy::start(server_addr());
    let url = PgUrl::parse(db.pg_url())
        .with_server(&format!("{},{}", first.addr, second.addr))
        .with_setting("target_session_attrs", "read-write")
        .to_string();
    let through = |args: &[&str], code: i32| -> Value {
        let out = pg_at(&url, args).output().expect("run distlock");
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            describe(&out)
        );
        parse_line(&out.stdout)
    };

    // The first host refuses every connection: the second serves.
    first.kill();
    let taken = through(&["acquire", "r", "--owner", "a", "--ttl", "30"], 0);
    assert_eq!(
        db.json(&["status", "r"], 0)["lock"]["fence"],
        taken["lock"]["fence"]
    );
    through(&["release", "r", "--owner", "a"], 0);

    // A failover while `run` holds the lock: the host it talks to goes away, and its renewals
    // and its release reach the other one.
    let first = Proxy::start(server_addr());
    let url = PgUrl::parse(db.pg_url())
        .with_server(&format!("{},{}", first.addr, second.addr))
        .with_setting("target_session_attrs", "read-write")
        .to_string();
    let run = Proc::spawn(
        &mut pg_at(
            &url,
            &["run", "--resource", "r", "--ttl", "3s", "--", "sleep", "4"],
        ),
        db.dir.path(),
        "run",
    );
    wait_until(Duration::from_secs(10), "run holds r", || {
        db.status("r").0 == 0
    });
    first.kill();
    let out = run.finish(Duration::from_secs(20));
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    let renewed = db
        .log(&["r"])
        .iter()
        .filter(|e| e["event"] == "renewed")
        .count();
    assert!(renewed >= 2, "the run renewed {renewed} times");
    assert_free(&db, "r");

    // A first host that accepts connections and never answers costs one connect timeout, and
    // the second host serves.
    let hung = Proxy::start(server_addr());
    hung.black_hole();
    let url = PgUrl::parse(db.pg_url())
        .with_server(&format!("{},{}", hung.addr, second.addr))
        .with_setting("target_session_attrs", "read-write")
        .with_setting("connect_timeout", "1")
        .to_string();
    let started = Instant::now();
    let taken = pg_at(&url, &["acquire", "r", "--owner", "b", "--ttl", "30"])
        .output()
        .expect("run distlock");
    assert_eq!(taken.status.code(), Some(0), "{}", describe(&taken));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a hung first host must cost one connect timeout (1 s), not {:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Fences only grow, also for a client whose decision reaches the server late.

/// A client on a slow connection reads the resource free (its fence taken in that read) and
/// decides; before its write arrives, another client takes the resource and lets it go again,
/// so the rows the slow client read are the same as now (none). Its write must still be
/// refused and read again: a grant never takes a fence lower than one granted before it.
#[test]
fn a_slow_clients_grant_never_takes_a_fence_lower_than_one_granted_meanwhile() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(db) = Db::postgres() else { return };
    let proxy = Proxy::start(server_addr());
    proxy.delay(Duration::from_millis(300));
    let slow = PgUrl::parse(db.pg_url())
        .with_server(&proxy.addr.to_string())
        .to_string();
    for attempt in 0..3 {
        let stop = Arc::new(AtomicBool::new(false));
        // A client on a fast connection takes and lets go of `r` over and over, and says which
        // fences it was granted.
        let churn = {
            let stop = Arc::clone(&stop);
            let url = db.url.clone();
            thread::spawn(move || {
                let mut fences = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let owner = format!("fast-{attempt}-{n}");
                    let out = pg_at(&url, &["acquire", "r", "--owner", &owner, "--ttl", "30"])
                        .output()
                        .expect("run distlock");
                    if out.status.code() == Some(0) {
                        fences.push(parse_line(&out.stdout)["lock"]["fence"].as_i64().unwrap());
                        let released = pg_at(&url, &["release", "r", "--owner", &owner])
                            .output()
                            .expect("run distlock");
                        assert_eq!(released.status.code(), Some(0), "{}", describe(&released));
                    }
                    thread::sleep(Duration::from_millis(20));
                }
                fences
            })
        };
        thread::sleep(Duration::from_millis(150));
        let owner = format!("slow-{attempt}");
        let out = pg_at(
            &slow,
            &[
                "acquire", "r", "--owner", &owner, "--ttl", "30", "--wait", "60s",
            ],
        )
        .output()
        .expect("run distlock");
        stop.store(true, Ordering::SeqCst);
        let fast = churn.join().expect("the fast client");
        // Whether its read finds `r` held (it takes its place in the queue) or free (its write
        // then finds that a tenure came and went, and it takes its place before it tries
        // again), the fast client's try-once acquires respect its place, and it is granted in
        // its turn: never starved, never 74.
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let fence = parse_line(&out.stdout)["lock"]["fence"].as_i64().unwrap();
        // While the slow client holds `r` (for 30 s) nobody else is granted it: every fence the
        // fast client got came before the slow client's grant, and must be lower.
        assert!(
            fast.iter().all(|f| *f < fence),
            "attempt {attempt}: the slow client was granted fence {fence} after the fast \
             client's {fast:?}"
        );
        let released = pg_at(&db.url, &["release", "r", "--owner", &owner])
            .output()
            .expect("run distlock");
        assert_eq!(released.status.code(), Some(0), "{}", describe(&released));
    }
}

/// A waiter on a slow connection among fast clients that take `r` for a moment, over and
/// over (`run -- sh -c …`, trying once): its reads find `r` free nearly always, and each of its
/// writes comes after a fast client has taken and let go of `r`, so a grant decided on the read
/// is never written. It must still get its turn: after its first write loses, it takes its place
/// in the queue, which every later try-once `run` respects (75), and is granted there.
#[test]
fn a_slow_waiter_among_fast_clients_that_hold_for_a_moment_is_never_starved() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some(db) = Db::postgres() else { return };
    let proxy = Proxy::start(server_addr());
    proxy.delay(Duration::from_millis(300));
    let slow = PgUrl::parse(db.pg_url())
        .with_server(&proxy.addr.to_string())
        .to_string();
    let stop = Arc::new(AtomicBool::new(false));
    // Two fast clients, each a stream of try-once runs that hold `r` while `sh` prints its
    // fence: the fences they were granted.
    let fast: Vec<_> = (0..2)
        .map(|_| {
            let (stop, url) = (Arc::clone(&stop), db.url.clone());
            thread::spawn(move || {
                let mut fences = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let out = pg_at(&url, &["run", "--resource", "r", "--", "sh", "-c"])
                        .arg("echo $DISTLOCK_FENCE")
                        .output()
                        .expect("run distlock");
                    match out.status.code() {
                        Some(0) => fences.push(
                            String::from_utf8_lossy(&out.stdout)
                                .trim()
                                .parse::<i64>()
                                .expect("a fence"),
                        ),
                        Some(75) => {}
                        _ => panic!("a fast run: {}", describe(&out)),
                    }
                }
                fences
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let out = pg_at(
        &slow,
        &[
            "acquire", "r", "--owner", "slow", "--ttl", "30", "--wait", "60s",
        ],
    )
    .output()
    .expect("run distlock");
    stop.store(true, Ordering::SeqCst);
    let fast: Vec<i64> = fast
        .into_iter()
        .flat_map(|churn| churn.join().expect("a fast client"))
        .collect();
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let fence = parse_line(&out.stdout)["lock"]["fence"].as_i64().unwrap();
    assert!(!fast.is_empty(), "the fast clients ran");
    // Held by the slow waiter for 30 s from its grant: every fast run came before it.
    assert!(
        fast.iter().all(|f| *f < fence),
        "the slow waiter was granted fence {fence} after the fast runs' {fast:?}"
    );
}
