//! Store faults with real parts (CONTRACT.md, "Store faults"): a real PostgreSQL server
//! restarted while `run` holds a lock, while a `run` waits, and among 160 contending runs; every
//! distlock session terminated while holders renew and waiters wait; clients stopped (SIGSTOP)
//! or partitioned at any point of their operations while a holder with a short TTL renews; and
//! connections cut mid-statement, or refused for a moment, under try-once calls.
//!
//! | fault | tests |
//! | --- | --- |
//! | restart | `restart_mid_run_*`, `restart_mid_wait_*`, `restart_among_8_by_20_*` |
//! | down longer than a run's TTL while it asks for its lock | `a_run_granted_after_postgresql_*` |
//! | down for 16 s under a lock server | `a_run_through_a_server_releases_once_postgresql_is_back_*` |
//! | sessions terminated | `terminating_every_distlock_session_*` |
//! | clients stopped, partitioned | `clients_stopped_*`, `clients_partitioned_*` |
//! | connection cut, refused | `a_connection_cut_*`, `a_refused_connection_*` |
//!
//! Each test has a PostgreSQL server of its own ([`Cluster`]), so that it can restart it or end
//! its sessions while the rest of the suite uses the shared server; the tests run when the suite
//! runs its PostgreSQL variants (`DISTLOCK_TEST_PG_URL`, `DISTLOCK_TEST_REQUIRE_PG`). Faults
//! between distlock and the server come from a [`Proxy`].
//!
//! Every case ends with the same checks ([`Verdict`]): no two holders were in the critical
//! section at once, no fence was reused (fences strictly increase in the order holders got in),
//! no finished command's lock is left held (`status` says free as soon as the last process has
//! exited), and no waiter was lost (every process exited in time, with a code its case allows).
//! A verdict lists every violation it found, so one failure shows all of them.

use std::collections::HashMap;
use std::net::TcpStream;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::cluster::Cluster;
use crate::common::contention::{Contended, Contention, ended_as};
use crate::common::critical;
use crate::common::output::{fence, now_millis, parse_line, rfc3339_millis};
use crate::common::pg_url::PgUrl;
use crate::common::process::{Finished, Proc, wait_for_file, wait_until};
use crate::common::proxy::Proxy;
use crate::common::server::Server as LockServer;
use crate::common::store::{Db, distlock_at};

/// The one resource each case contends for.
const R: &str = "r";

/// A private server and a fresh database on it. The database is dropped first, while the
/// server still runs.
struct Server {
    db: Db,
    cluster: Cluster,
}

/// A [`Server`] for the test named `what`, or `None` (with a note) when the suite does not run
/// its PostgreSQL variants.
fn server(what: &str) -> Option<Server> {
    let cluster = Cluster::start(what)?;
    let db = Db::postgres_on(&cluster.admin_url());
    Some(Server { db, cluster })
}

impl Server {
    /// The database's URL through `proxy` instead of straight to the server.
    fn url_via(&self, proxy: &Proxy) -> String {
        let direct = self.cluster.addr().to_string();
        let url = self.db.pg_url();
        assert!(url.contains(&direct), "{url} names {direct}");
        url.replacen(&direct, &proxy.addr.to_string(), 1)
    }
}

/// `distlock ARGS…` against `url` (no store or owner from the test's environment), with the
/// scratch folder in `$D`.
fn distlock_via(db: &Db, url: &str, args: &[&str]) -> Command {
    let mut cmd = distlock_at(url);
    cmd.args(args).env("D", db.dir.path());
    cmd
}

/// `run --resource r FLAGS…` with the critical section as its command, inside for `seconds`.
fn run_section(db: &Db, flags: &[&str], seconds: &str) -> Command {
    let mut cmd = db.std_cmd();
    cmd.args(["run", "--resource", R])
        .args(flags)
        .args(critical::command(db.dir.path(), seconds))
        .env("D", db.dir.path());
    cmd
}

/// [`run_section`], started in the background as `name`.
fn spawn_run(db: &Db, flags: &[&str], seconds: &str, name: &str) -> Proc {
    Proc::spawn(&mut run_section(db, flags, seconds), db.dir.path(), name)
}

/// Sends `signal` to `pid`; a process that has just exited is no error.
fn signal(pid: Pid, signal: Signal) {
    let _ = kill(pid, signal);
}

/// What a case found wrong, gathered so that a failure lists every violation at once.
#[derive(Default)]
struct Verdict {
    problems: Vec<String>,
}

impl Verdict {
    fn problem(&mut self, problem: String) {
        self.problems.push(problem);
    }

    /// `what` must have exited in time with one of the `allowed` codes.
    fn exited(&mut self, what: &str, out: &Finished, allowed: &[i32]) {
        if !ended_as(out, allowed) {
            self.problem(format!(
                "{what} must exit with one of {allowed:?}: {}",
                out.describe()
            ));
        }
    }

    /// Every one of `runs` must have exited 0 in time ([`Contended::problem`]).
    fn all_exited(&mut self, what: &str, runs: &Contended) {
        if let Some(problem) = runs.problem(what, &[0]) {
            self.problem(problem);
        }
    }

    /// The checks every case ends with, once every process it started has exited: the
    /// critical section saw one holder at a time and strictly increasing fences, `entered`
    /// holders got in, and the resource is free.
    fn finish(mut self, db: &Db, entered: usize) {
        self.problems.extend(critical::violations(db.dir.path()));
        let fences = critical::fences(db.dir.path());
        if fences.len() != entered {
            self.problem(format!(
                "{entered} holders should have entered the critical section, {} did: {fences:?}",
                fences.len()
            ));
        }
        let (code, json) = db.status(R);
        if code != 1 {
            self.problem(format!(
                "every process has exited, so nothing may hold {R}; status says {json}"
            ));
        }
        assert!(
            self.problems.is_empty(),
            "{} violation(s):\n\n{}",
            self.problems.len(),
            self.problems.join("\n\n")
        );
    }
}

/// The fence of the lock on `R` now, which must be held.
fn held_fence(db: &Db) -> i64 {
    let (code, json) = db.status(R);
    assert_eq!(code, 0, "{R} should be held: {json}");
    fence(&json["lock"])
}

// ---------------------------------------------------------------------------------------------
// Restarts
// ---------------------------------------------------------------------------------------------

/// How long each restart keeps the server down, between its fast shutdown and its start.
const DOWN: Duration = Duration::from_secs(1);

#[test]
fn restart_mid_run_releases_the_lock_once_the_server_is_back() {
    let Some(server) = server("restart mid-run") else {
        return;
    };
    let db = &server.db;
    let run = spawn_run(db, &["--ttl", "15s"], "6", "run");
    wait_for_file(&db.file("crit"), Duration::from_secs(20));
    let fence = held_fence(db);
    thread::sleep(Duration::from_secs(2));
    server.cluster.restart(DOWN);
    // The lock committed before the restart is still there.
    assert_eq!(held_fence(db), fence, "the same tenure after the restart");

    let out = run.finish(Duration::from_secs(30));
    let mut verdict = Verdict::default();
    // The command took 6 s of a 15 s lease: the lock must be free when `run` exits, not at
    // the end of its TTL.
    verdict.exited(
        "run, its server restarted while its command ran",
        &out,
        &[0],
    );
    verdict.finish(db, 1);
}

#[test]
fn restart_mid_wait_keeps_the_waiter_in_line_and_runs_its_command_after_the_holder() {
    let Some(server) = server("restart mid-wait") else {
        return;
    };
    let db = &server.db;
    let holder = spawn_run(db, &["--ttl", "15s"], "5", "holder");
    wait_for_file(&db.file("crit"), Duration::from_secs(20));
    let waiter = spawn_run(db, &["--wait", "40s", "--ttl", "15s"], "0.2", "waiter");
    wait_until(
        Duration::from_secs(10),
        "the waiter takes its place",
        || db.waiting(R) == 1,
    );
    thread::sleep(Duration::from_millis(500));
    server.cluster.restart(DOWN);

    let holder = holder.finish(Duration::from_secs(30));
    let holder_gone = Instant::now();
    let waiter = waiter.finish(Duration::from_secs(45));
    let waited_after = holder_gone.elapsed();
    let mut verdict = Verdict::default();
    verdict.exited("the holder, its server restarted", &holder, &[0]);
    verdict.exited(
        "the waiter (--wait 40s), its server restarted while it waited",
        &waiter,
        &[0],
    );
    // Granted at the holder's release, not at the end of the holder's 15 s TTL.
    if waiter.code() == Some(0) && waited_after > Duration::from_secs(5) {
        verdict.problem(format!(
            "the waiter ended {waited_after:?} after the holder: it should be granted at the \
             holder's release"
        ));
    }
    verdict.finish(db, 2);
}

/// A lock server over a PostgreSQL that restarts: the first request once it is back is served
/// (the server's writer finds a connection again instead of answering 503 on the one the
/// restart closed), and a waiter through the server that waits across the restart is granted
/// when the holder lets go, not ended with a store error.
#[test]
fn a_server_over_a_restarted_postgresql_serves_its_next_request_and_its_waiters() {
    let Some(server) = server("a lock server's PostgreSQL restarted") else {
        return;
    };
    let db = &server.db;
    let lock_server = LockServer::start(db);
    let through = |args: &[&str]| distlock_via(db, &lock_server.url(""), args);
    let held = through(&["acquire", "held", "--owner", "h", "--ttl", "60"])
        .output()
        .expect("acquire");
    assert_eq!(held.status.code(), Some(0), "{held:?}");
    // A waiter through the server, queued behind the holder before the restart.
    let mut waiting = through(&[
        "acquire", "held", "--owner", "w", "--ttl", "60", "--wait", "60",
    ]);
    let waiter = Proc::spawn(&mut waiting, db.dir.path(), "waiter");
    wait_until(
        Duration::from_secs(20),
        "the waiter is in the queue",
        || db.status("held").1["waiting"] == 1,
    );
    server.cluster.restart(Duration::from_secs(2));
    wait_until(Duration::from_secs(30), "PostgreSQL is back", || {
        TcpStream::connect(server.cluster.addr()).is_ok()
    });
    // The first write through the server once PostgreSQL is back.
    let first = through(&["acquire", "first", "--owner", "f", "--ttl", "60"])
        .output()
        .expect("acquire");
    assert_eq!(
        first.status.code(),
        Some(0),
        "the first acquire through the server after the restart: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    let released = through(&["release", "held", "--owner", "h"])
        .output()
        .expect("release");
    assert_eq!(released.status.code(), Some(0), "{released:?}");
    let out = waiter.finish(Duration::from_secs(60));
    assert_eq!(
        out.code(),
        Some(0),
        "the waiter across the restart: {}",
        out.describe()
    );
    assert_eq!(parse_line(&out.output.stdout)["lock"]["owner"], "w");
}

/// How long PostgreSQL stays down under a lock server while a `run` through that server ends its
/// command: longer than the server's own search for it (5 s), so that the release is answered
/// 503 more than once before it can go through.
const LONG_DOWN: Duration = Duration::from_secs(16);

#[test]
fn a_run_through_a_server_releases_once_postgresql_is_back_not_at_the_end_of_its_ttl() {
    let Some(server) = server("a release through a server, PostgreSQL down") else {
        return;
    };
    let db = &server.db;
    let lock_server = LockServer::start(db);
    let go = db.file("go");
    // The command ends when the test says so: while PostgreSQL is down.
    let command = r#"while [ ! -e "$D/go" ]; do sleep 0.05; done"#;
    let mut cmd = distlock_via(
        db,
        &lock_server.url(""),
        &[
            "run",
            "--resource",
            R,
            "--ttl",
            "60",
            "--",
            "sh",
            "-c",
            command,
        ],
    );
    let run = Proc::spawn(&mut cmd, db.dir.path(), "run");
    wait_until(Duration::from_secs(20), "the run takes the lock", || {
        db.status(R).0 == 0
    });
    let fence = held_fence(db);
    let lease_end = db.status(R).1["lock"]["expires_at"]
        .as_str()
        .expect("expires_at")
        .to_owned();
    thread::scope(|s| {
        let restart = s.spawn(|| server.cluster.restart(LONG_DOWN));
        wait_until(Duration::from_secs(30), "PostgreSQL goes down", || {
            TcpStream::connect(server.cluster.addr()).is_err()
        });
        std::fs::write(&go, "").expect("write the go file");
        restart.join().expect("the restart");
    });
    let out = run.finish(Duration::from_secs(50));
    let ended = rfc3339_millis(now_millis());
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    // Released by the run once PostgreSQL was back, well before the lease would have ended.
    let (code, json) = db.status(R);
    assert_eq!(code, 1, "{R} is free once the run has exited: {json}");
    assert!(
        ended < lease_end,
        "the run ended at {ended}, the lease at {lease_end}"
    );
    let events = db.log(&[R]);
    let last = events.last().expect("events");
    assert_eq!(
        (&last["event"], &last["fence"]),
        (&serde_json::json!("released"), &serde_json::json!(fence)),
        "released by the run, not expired: {events:?}"
    );
}

#[test]
fn restart_among_8_by_20_waiting_runs_loses_none_and_overlaps_none() {
    let Some(server) = server("restart among 8 x 20 runs") else {
        return;
    };
    let db = &server.db;
    const WORKERS: usize = 8;
    const ROUNDS: usize = 20;
    let started = Instant::now();
    let all_done = AtomicBool::new(false);
    let restarted_after = Mutex::new(None);
    let runs = thread::scope(|scope| {
        scope.spawn(|| {
            // The restart comes once a third of the runs have been inside.
            let third = WORKERS * ROUNDS / 3;
            while critical::fences(db.dir.path()).len() < third {
                if all_done.load(Ordering::SeqCst) {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
            *restarted_after.lock().expect("restart") = Some(started.elapsed());
            server.cluster.restart(DOWN);
        });
        let contention = Contention {
            dir: db.dir.path(),
            name: "run",
            workers: WORKERS,
            rounds: ROUNDS,
            bound: Duration::from_secs(90),
        };
        let runs =
            contention.run(|_, _| run_section(db, &["--wait", "60s", "--ttl", "10s"], "0.02"));
        all_done.store(true, Ordering::SeqCst);
        runs
    });
    let restarted_after = restarted_after.into_inner().expect("restart");
    eprintln!(
        "{} runs in {:?}, the server restarted after {restarted_after:?}",
        WORKERS * ROUNDS,
        started.elapsed()
    );
    let mut verdict = Verdict::default();
    if restarted_after.is_none() {
        verdict.problem("the runs ended before a third of them got in: no restart".to_owned());
    }
    verdict.all_exited("runs (--wait 60s), their server restarted", &runs);
    verdict.finish(db, WORKERS * ROUNDS);
}

/// How long PostgreSQL stays away while a `run` asks for its lock: longer than the run's TTL.
const AWAY: Duration = Duration::from_secs(5);

/// `run --ttl 2s ARGS… -- sh -c 'echo ran > $D/ran'` against `url`, in the background.
fn spawn_short_run(db: &Db, url: &str, flags: &[&str], name: &str) -> Proc {
    let mut args = vec!["run", "--resource", R, "--ttl", "2s"];
    args.extend(flags);
    args.extend(["--", "sh", "-c", r#"echo ran > "$D/ran""#]);
    Proc::spawn(&mut distlock_via(db, url, &args), db.dir.path(), name)
}

/// Keeps PostgreSQL away for [`AWAY`] (stopped, then started again) while `during` runs, from
/// the moment the server refuses connections.
fn while_away(server: &Server, during: impl FnOnce()) {
    thread::scope(|s| {
        let restart = s.spawn(|| server.cluster.restart(AWAY));
        wait_until(Duration::from_secs(30), "PostgreSQL goes down", || {
            TcpStream::connect(server.cluster.addr()).is_err()
        });
        during();
        restart.join().expect("the restart");
    });
}

/// A `run` whose grant comes only once PostgreSQL is back from an outage longer than its TTL
/// times its lease from the attempt that was granted, not from its first attempt before the
/// outage: the command runs and `run` exits 0, where a lease timed from the first attempt
/// would already be over ("granted too late", 75). Once as a try-once `run` started while the
/// server is down (its call seeks the server for the URL's `connect_timeout`), once as a
/// `run --wait` queued behind a holder whose lease ends during the outage.
#[test]
fn a_run_granted_after_postgresql_was_away_longer_than_its_ttl_times_the_lease_from_the_grant() {
    let Some(server) = server("a grant after an outage") else {
        return;
    };
    let db = &server.db;
    let url = PgUrl::parse(db.pg_url())
        .with_setting("connect_timeout", "30")
        .to_string();
    let ran = db.file("ran");

    let mut try_once = None;
    while_away(&server, || {
        try_once = Some(spawn_short_run(db, &url, &[], "try-once run"));
    });
    let out = try_once.expect("started").finish(Duration::from_secs(40));
    assert_eq!(out.code(), Some(0), "try-once: {}", out.describe());
    assert!(ran.exists(), "try-once: the command ran");
    let (code, json) = db.status(R);
    assert_eq!(code, 1, "released: {json}");

    std::fs::remove_file(&ran).expect("remove the marker");
    db.json(&["acquire", R, "--owner", "holder", "--ttl", "3"], 0);
    let waiter = spawn_short_run(db, &url, &["--wait", "60s"], "waiting run");
    wait_until(Duration::from_secs(20), "the run takes its place", || {
        db.waiting(R) == 1
    });
    while_away(&server, || {});
    let out = waiter.finish(Duration::from_secs(60));
    assert_eq!(out.code(), Some(0), "run --wait: {}", out.describe());
    assert!(ran.exists(), "run --wait: the command ran");
    let (code, json) = db.status(R);
    assert_eq!(code, 1, "released: {json}");
}

// ---------------------------------------------------------------------------------------------
// Every distlock session terminated
// ---------------------------------------------------------------------------------------------

#[test]
fn terminating_every_distlock_session_loses_no_holder_and_no_waiter() {
    let Some(server) = server("terminated sessions") else {
        return;
    };
    let db = &server.db;
    const WORKERS: usize = 3;
    const ROUNDS: usize = 3;
    let done = AtomicBool::new(false);
    let terminated = AtomicUsize::new(0);
    let runs = thread::scope(|scope| {
        scope.spawn(|| {
            let mut admin = server.cluster.admin();
            while !done.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(900));
                // Every distlock session between two transactions: a holder's connection while
                // its command runs, its heartbeat's between renewals, a waiter's while it
                // listens. A session inside a transaction is left alone, so no commit is cut
                // (its outcome would be unknown to the client, which may then exit 74).
                let ended: i64 = admin
                    .query_one(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
                         FROM pg_stat_activity
                         WHERE application_name LIKE 'distlock%' AND state = 'idle'
                           AND pid <> pg_backend_pid()",
                        &[],
                    )
                    .expect("terminate the sessions")
                    .get(0);
                terminated.fetch_add(usize::try_from(ended).expect("a count"), Ordering::SeqCst);
            }
        });
        let contention = Contention {
            dir: db.dir.path(),
            name: "run",
            workers: WORKERS,
            rounds: ROUNDS,
            bound: Duration::from_secs(60),
        };
        // Inside for longer than a renewal interval (2 s), so the holder renews and has a
        // heartbeat connection to lose.
        let runs = contention.run(|_, _| run_section(db, &["--wait", "40s", "--ttl", "6s"], "2.2"));
        done.store(true, Ordering::SeqCst);
        runs
    });
    let terminated = terminated.into_inner();
    eprintln!("{terminated} distlock sessions terminated");
    let mut verdict = Verdict::default();
    if terminated < WORKERS * ROUNDS {
        verdict.problem(format!(
            "only {terminated} sessions were terminated: the fault hardly happened"
        ));
    }
    verdict.all_exited("runs (--wait 40s), their sessions terminated", &runs);
    verdict.finish(db, WORKERS * ROUNDS);
}

// ---------------------------------------------------------------------------------------------
// Stopped and partitioned clients beside a holder with a short TTL
// ---------------------------------------------------------------------------------------------

/// The holder's lease: 4 s, renewed every 1.3 s. A renewal held up for more than about 1.3 s
/// costs it the lease (`run` stops its command and exits 124).
const HOLDER_TTL: &str = "4s";
/// How long the holder's command stays inside.
const HOLDER_SECONDS: &str = "15";
/// How long a stopped client stays stopped, and a partition lasts: longer than the holder's
/// whole lease.
const STALL: Duration = Duration::from_secs(5);

/// Clients that keep working on `R` while the holder holds it, each a loop of distlock
/// processes of one owner (`pest-K`): `acquire` (busy), `renew` (another owner's lock),
/// `run --wait 2s` (a waiter that gives up). Each process's connection is named
/// `pest-K-I` (`application_name`), so the server's sessions can be told apart.
struct Pests<'a> {
    db: &'a Db,
    /// The URL they use, without the session name.
    url: String,
    /// The processes running now, by session name.
    live: Mutex<HashMap<String, Pid>>,
    /// Set when the holder has exited: the loops end.
    done: AtomicBool,
    verdict: Mutex<Verdict>,
    /// How many of them got in (granted after the holder left).
    entered: AtomicUsize,
}

impl<'a> Pests<'a> {
    fn new(db: &'a Db, url: String) -> Pests<'a> {
        Pests {
            db,
            url,
            live: Mutex::new(HashMap::new()),
            done: AtomicBool::new(false),
            verdict: Mutex::new(Verdict::default()),
            entered: AtomicUsize::new(0),
        }
    }

    /// Pest `k`'s loop, until the holder has exited.
    fn work(&self, k: usize) {
        let owner = format!("pest-{k}");
        let section = critical::command(self.db.dir.path(), "0.01");
        let mut i = 0;
        while !self.done.load(Ordering::SeqCst) {
            i += 1;
            let tag = format!("pest-{k}-{i}");
            let url = format!("{}&application_name={tag}", self.url);
            let (args, allowed): (Vec<&str>, &[i32]) = match fastrand::u8(0..3) {
                0 => (
                    vec!["acquire", R, "--owner", &owner, "--ttl", "5"],
                    &[0, 74, 75],
                ),
                1 => (
                    vec!["renew", R, "--owner", &owner, "--ttl", "5"],
                    &[1, 74, 77],
                ),
                // A pest that got in after the holder left may itself be stopped or cut off
                // past its own lease: its `run` then stops its command (124), which the
                // critical section's checks still hold to one holder at a time.
                _ => {
                    let mut args = vec!["run", "--resource", R, "--wait", "2s", "--ttl", "5"];
                    args.extend(section.iter().map(String::as_str));
                    (args, &[0, 74, 75, 124])
                }
            };
            let mut cmd = distlock_via(self.db, &url, &args);
            let proc = Proc::spawn(&mut cmd, self.db.dir.path(), &tag);
            self.live
                .lock()
                .expect("live pests")
                .insert(tag.clone(), proc.pid());
            let out = proc.finish(Duration::from_secs(40));
            self.live.lock().expect("live pests").remove(&tag);
            let mut verdict = self.verdict.lock().expect("verdict");
            verdict.exited(&format!("{tag}: {args:?}"), &out, allowed);
            if args[0] == "run" && out.code() == Some(0) {
                self.entered.fetch_add(1, Ordering::SeqCst);
            }
            if args[0] == "acquire" && matches!(out.code(), Some(0 | 74)) {
                if out.code() == Some(0) {
                    // A holder like any other: it must find the critical section empty.
                    critical::visit(
                        self.db.dir.path(),
                        fence(&parse_line(&out.output.stdout)["lock"]),
                    );
                    self.entered.fetch_add(1, Ordering::SeqCst);
                }
                // Its lock (one that committed unbeknown to it, after a 74, too) is given back.
                let released = self.db.run(&["release", R, "--owner", &owner]);
                if !matches!(released.status.code(), Some(0 | 1 | 77)) {
                    verdict.problem(format!("{owner}'s release: {released:?}"));
                }
            }
            drop(verdict);
            thread::sleep(Duration::from_millis(fastrand::u64(30..120)));
        }
    }

    /// The pid of a running pest chosen at random.
    fn any(&self) -> Option<Pid> {
        let live = self.live.lock().expect("live pests");
        if live.is_empty() {
            return None;
        }
        live.values().nth(fastrand::usize(..live.len())).copied()
    }

    fn pid_of(&self, tag: &str) -> Option<Pid> {
        self.live.lock().expect("live pests").get(tag).copied()
    }
}

/// The holder, `run --ttl 4s` inside the critical section for 15 s, beside `workers` pests
/// while `fault` does its worst to them (it returns once they are done). Returns the verdict
/// so far, the holder's exit 0 among its checks, and how many holders got in.
fn holder_beside(
    server: &Server,
    pests: &Pests,
    workers: usize,
    fault: impl Fn(&Pests) + Sync,
) -> (Verdict, usize) {
    let db = &server.db;
    let holder = spawn_run(db, &["--ttl", HOLDER_TTL], HOLDER_SECONDS, "holder");
    wait_for_file(&db.file("crit"), Duration::from_secs(20));
    let holder = thread::scope(|scope| {
        for k in 0..workers {
            scope.spawn(move || pests.work(k));
        }
        scope.spawn(|| fault(pests));
        let out = holder.finish(Duration::from_secs(60));
        pests.done.store(true, Ordering::SeqCst);
        out
    });
    let mut verdict = Verdict::default();
    verdict.exited(
        "the holder (run --ttl 4s), beside stalled clients",
        &holder,
        &[0],
    );
    let theirs = std::mem::take(&mut *pests.verdict.lock().expect("verdict"));
    verdict.problems.extend(theirs.problems);
    (verdict, 1 + pests.entered.load(Ordering::SeqCst))
}

#[test]
fn clients_stopped_at_any_point_never_cost_the_holder_its_lease() {
    let Some(server) = server("stopped clients") else {
        return;
    };
    let pests = Pests::new(&server.db, server.db.pg_url().to_owned());
    let caught = AtomicUsize::new(0);
    let stopped = AtomicUsize::new(0);
    let (mut verdict, entered) = holder_beside(&server, &pests, 4, |pests| {
        thread::scope(|scope| {
            // One stopper stops clients at random points of their lives.
            scope.spawn(|| {
                while !pests.done.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(fastrand::u64(100..1200)));
                    if let Some(pid) = pests.any() {
                        signal(pid, Signal::SIGSTOP);
                        stopped.fetch_add(1, Ordering::SeqCst);
                        thread::sleep(STALL);
                        signal(pid, Signal::SIGCONT);
                    }
                }
            });
            // The other stops a client at the worst point it can find: inside a transaction on
            // the server, between two of its round trips, where it would hold the resource's
            // row. It keeps trying for a second, then stops one at random.
            scope.spawn(|| {
                let mut admin = server.cluster.admin();
                while !pests.done.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(fastrand::u64(200..700)));
                    let found = Instant::now();
                    let mut victim = None;
                    while victim.is_none() && found.elapsed() < Duration::from_secs(1) {
                        victim = stop_inside_a_transaction(&mut admin, pests);
                    }
                    let victim = if victim.is_some() {
                        caught.fetch_add(1, Ordering::SeqCst);
                        victim
                    } else {
                        pests.any().inspect(|&pid| {
                            signal(pid, Signal::SIGSTOP);
                            stopped.fetch_add(1, Ordering::SeqCst);
                        })
                    };
                    if let Some(pid) = victim {
                        thread::sleep(STALL);
                        signal(pid, Signal::SIGCONT);
                    }
                }
            });
        });
    });
    let (caught, stopped) = (caught.into_inner(), stopped.into_inner());
    eprintln!("clients stopped: {caught} inside a transaction, {stopped} at random points");
    if caught + stopped == 0 {
        verdict.problem("no client was ever stopped".to_owned());
    }
    verdict.finish(&server.db, entered);
}

/// Stops a pest whose session is inside a transaction, and keeps it stopped if it still is;
/// its pid, or `None` when no pest was caught there.
fn stop_inside_a_transaction(admin: &mut postgres::Client, pests: &Pests) -> Option<Pid> {
    let inside = "SELECT application_name FROM pg_stat_activity
                  WHERE state = 'idle in transaction' AND application_name LIKE 'pest-%'";
    let rows = admin.query(inside, &[]).expect("read pg_stat_activity");
    for row in rows {
        let tag: String = row.get(0);
        let Some(pid) = pests.pid_of(&tag) else {
            continue;
        };
        signal(pid, Signal::SIGSTOP);
        let still: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE state = 'idle in transaction' AND application_name = $1",
                &[&tag],
            )
            .expect("read pg_stat_activity")
            .get(0);
        if still > 0 {
            return Some(pid);
        }
        signal(pid, Signal::SIGCONT);
    }
    None
}

/// How long the proxy holds back each chunk of the partitioned clients' traffic.
const SLOW: Duration = Duration::from_millis(60);

#[test]
fn clients_partitioned_mid_operation_never_cost_the_holder_its_lease() {
    let Some(server) = server("partitioned clients") else {
        return;
    };
    let proxy = Proxy::start(server.cluster.addr());
    proxy.delay(SLOW);
    let pests = Pests::new(&server.db, server.url_via(&proxy));
    let caught = AtomicUsize::new(0);
    let partitions = AtomicUsize::new(0);
    let (mut verdict, entered) = holder_beside(&server, &pests, 3, |pests| {
        let mut admin = server.cluster.admin();
        while !pests.done.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(fastrand::u64(300..1500)));
            // The partition comes at a random point, or, when one is found within 1.5 s, while
            // a client behind the proxy is inside a transaction.
            let looking = Instant::now();
            while looking.elapsed() < Duration::from_millis(1500) {
                let ports = proxy.upstream_ports();
                let inside: i64 = admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity
                         WHERE state = 'idle in transaction' AND client_port = ANY($1)",
                        &[&ports],
                    )
                    .expect("read pg_stat_activity")
                    .get(0);
                if inside > 0 {
                    caught.fetch_add(1, Ordering::SeqCst);
                    break;
                }
            }
            proxy.black_hole();
            partitions.fetch_add(1, Ordering::SeqCst);
            thread::sleep(STALL);
            // The partition ends as real ones often do: the connections are gone.
            proxy.cut();
            proxy.delay(SLOW);
        }
    });
    let (partitions, caught) = (partitions.into_inner(), caught.into_inner());
    eprintln!("{partitions} partitions, {caught} of them while a client was inside a transaction");
    if partitions == 0 {
        verdict.problem("no partition ever happened".to_owned());
    }
    verdict.finish(&server.db, entered);
}

// ---------------------------------------------------------------------------------------------
// Connections cut mid-statement, or refused for a moment, under try-once calls
// ---------------------------------------------------------------------------------------------

/// The chunks (first byte, size) a try-once `acquire` on a free resource sends through a
/// proxy on one connection, once the schema exists: the startup message, its batches of
/// queries, goodbye. Their offsets in the client's stream are where cuts can land. With them,
/// the index of the last batch of queries: the one with COMMIT.
fn acquire_chunks(server: &Server, proxy: &Proxy) -> (Vec<(u8, usize)>, usize) {
    let db = &server.db;
    db.json(&["acquire", R, "--owner", "seed", "--ttl", "30"], 0);
    db.json(&["release", R, "--owner", "seed"], 0);
    let url = server.url_via(proxy);
    let out = distlock_via(db, &url, &["acquire", R, "--owner", "probe", "--ttl", "30"])
        .output()
        .expect("run distlock");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    db.json(&["release", R, "--owner", "probe"], 0);
    let chunks = proxy.client_chunks();
    assert_eq!(
        chunks.len(),
        1,
        "one connection through the proxy: {chunks:?}"
    );
    let chunks = chunks.into_iter().next().expect("a connection");
    let commit = chunks
        .iter()
        .rposition(|&(first, _)| first == b'Q')
        .unwrap_or_else(|| panic!("the acquire sent no queries: {chunks:?}"));
    (chunks, commit)
}

/// Offsets into the client's stream of each chunk's start, with the chunk.
fn offsets(chunks: &[(u8, usize)]) -> Vec<(usize, u8, usize)> {
    let mut at = 0;
    chunks
        .iter()
        .map(|&(first, len)| {
            let start = at;
            at += len;
            (start, first, len)
        })
        .collect()
}

/// A try-once `acquire` as owner `owner` through `proxy`, whose connection is cut once the
/// client has sent `bytes`; then what the store holds, checked: a lock held by `owner` alone
/// (a rival is busy, `owner` re-acquires it with the same fence), or none, which only a 74 may
/// leave. Returns the acquire's outcome and the fence of the tenure it left, if any; the
/// resource is free again afterwards.
fn cut_acquire(server: &Server, proxy: &Proxy, owner: &str, bytes: usize) -> (Finished, i64) {
    let db = &server.db;
    let url = server.url_via(proxy);
    proxy.cut_next_after(bytes);
    let mut cmd = distlock_via(db, &url, &["acquire", R, "--owner", owner, "--ttl", "30"]);
    let out = Proc::spawn(&mut cmd, db.dir.path(), owner).finish(Duration::from_secs(30));
    let (code, json) = db.status(R);
    let tenure = if code == 0 {
        assert_eq!(
            json["lock"]["owner"], owner,
            "cut after {bytes} bytes: {json}"
        );
        let rival = db.run(&["acquire", R, "--owner", "rival", "--ttl", "30"]);
        assert_eq!(
            rival.status.code(),
            Some(75),
            "cut after {bytes} bytes: {owner} holds {R}, a rival must be busy: {rival:?}"
        );
        let again = db.json(&["acquire", R, "--owner", owner, "--ttl", "30"], 0);
        assert_eq!(
            again["lock"]["fence"], json["lock"]["fence"],
            "the same owner asking again re-acquires its tenure"
        );
        db.json(&["release", R, "--owner", owner], 0);
        fence(&json["lock"])
    } else {
        let rival = db.json(&["acquire", R, "--owner", "rival", "--ttl", "30"], 0);
        db.json(&["release", R, "--owner", "rival"], 0);
        fence(&rival["lock"])
    };
    if out.code() == Some(0) {
        let answer = parse_line(&out.output.stdout);
        assert_eq!(
            code,
            0,
            "acquire said 0 but {R} is free: {}",
            out.describe()
        );
        assert_eq!(fence(&answer["lock"]), tenure, "{}", out.describe());
    }
    (out, tenure)
}

#[test]
fn a_connection_cut_before_the_commit_is_retried_by_a_try_once_acquire() {
    let Some(server) = server("cut before the commit") else {
        return;
    };
    let proxy = Proxy::start(server.cluster.addr());
    let (chunks, commit) = acquire_chunks(&server, &proxy);
    // Cuts where nothing can have committed yet: at the start and in the middle of every
    // chunk before the last batch of queries (the one with COMMIT).
    let mut verdict = Verdict::default();
    let mut tenures = Vec::new();
    for (start, first, len) in offsets(&chunks).into_iter().take(commit) {
        for bytes in [start, start + len / 2] {
            let owner = format!("cut-{bytes}");
            let (out, tenure) = cut_acquire(&server, &proxy, &owner, bytes);
            tenures.push(tenure);
            verdict.exited(
                &format!(
                    "a try-once acquire whose connection was cut after {bytes} bytes (in the \
                     chunk {:?} at {start}, of {len}), before its commit",
                    char::from(first)
                ),
                &out,
                &[0],
            );
        }
    }
    eprintln!("the acquire's chunks: {chunks:?}; fences {tenures:?}");
    check_tenures(&mut verdict, &tenures);
    verdict.finish(&server.db, 0);
}

#[test]
fn a_connection_cut_at_the_commit_is_a_retry_or_a_one_line_74_and_never_two_holders() {
    let Some(server) = server("cut at the commit") else {
        return;
    };
    let proxy = Proxy::start(server.cluster.addr());
    let (chunks, commit) = acquire_chunks(&server, &proxy);
    let (start, _, len) = offsets(&chunks)[commit];
    let mut verdict = Verdict::default();
    let mut tenures = Vec::new();
    // Before the batch with COMMIT arrives, in its middle, and right after all of it went
    // through (the server commits, the answer is lost).
    for bytes in [start, start + len / 2, start + len] {
        let owner = format!("cut-{bytes}");
        let (out, tenure) = cut_acquire(&server, &proxy, &owner, bytes);
        tenures.push(tenure);
        let what = format!(
            "a try-once acquire whose connection was cut after {bytes} bytes (its commit's \
             batch is bytes {start}..{})",
            start + len
        );
        verdict.exited(&what, &out, &[0, 74]);
        if out.code() == Some(74) {
            let stderr = out.stderr();
            if !(out.output.stdout.is_empty()
                && stderr.starts_with("distlock: ")
                && stderr.lines().count() == 1)
            {
                verdict.problem(format!(
                    "{what}: a 74 is one line `distlock: …` on stderr and nothing on stdout: {}",
                    out.describe()
                ));
            }
        }
    }
    eprintln!("the acquire's chunks: {chunks:?}; fences {tenures:?}");
    check_tenures(&mut verdict, &tenures);
    verdict.finish(&server.db, 0);
}

/// The tenures that `cut_acquire` saw, one after another on one resource: each fence above
/// the one before.
fn check_tenures(verdict: &mut Verdict, tenures: &[i64]) {
    for pair in tenures.windows(2) {
        if pair[0] >= pair[1] {
            verdict.problem(format!(
                "fence {} was handed out after fence {}: fences must strictly increase, in \
                 {tenures:?}",
                pair[1], pair[0]
            ));
        }
    }
}

#[test]
fn a_refused_connection_back_within_2_s_is_reached_by_try_once_calls() {
    let Some(server) = server("refused, then back") else {
        return;
    };
    let db = &server.db;
    let proxy = Proxy::start(server.cluster.addr());
    let url = server.url_via(&proxy);
    proxy.kill();
    wait_until(
        Duration::from_secs(5),
        "the proxy refuses connections",
        || TcpStream::connect(proxy.addr).is_err(),
    );
    let mut status = distlock_via(db, &url, &["status", R]);
    let status = Proc::spawn(&mut status, db.dir.path(), "status");
    let mut acquire = distlock_via(db, &url, &["acquire", R, "--owner", "back", "--ttl", "30"]);
    let acquire = Proc::spawn(&mut acquire, db.dir.path(), "acquire");
    // Each one is waited for on a thread of its own from the start, so each one's time is its
    // own.
    let ended = thread::scope(|scope| {
        // The status may be answered before or after the acquire lands: both are right.
        let waiting = [
            ("status", status, &[0, 1][..]),
            ("acquire", acquire, &[0][..]),
        ]
        .map(|(what, proc, codes)| {
            (
                what,
                scope.spawn(move || proc.finish(Duration::from_secs(15))),
                codes,
            )
        });
        thread::sleep(Duration::from_millis(1500));
        proxy.restore();
        waiting.map(|(what, waiting, codes)| (what, waiting.join().expect("a wait"), codes))
    });
    let mut verdict = Verdict::default();
    // Within the connect timeout (5 s): reached, not 74.
    let mut acquired = false;
    for (what, out, codes) in ended {
        verdict.exited(
            &format!("a try-once {what}, its server refusing connections for 1.5 s"),
            &out,
            codes,
        );
        let stdout = String::from_utf8_lossy(&out.output.stdout);
        if what == "status" && out.code() == Some(0) && !stdout.contains(r#""owner":"back""#) {
            verdict.problem(format!(
                "the status saw a holder other than \"back\": {stdout}"
            ));
        }
        if out.elapsed > Duration::from_secs(7) {
            verdict.problem(format!(
                "{what} took {:?}: the server was back 1.5 s after it started",
                out.elapsed
            ));
        }
        acquired |= what == "acquire" && out.code() == Some(0);
    }
    // The proxy is back for good: the outcome above was distlock's.
    let now = distlock_via(db, &url, &["status", R])
        .output()
        .expect("run distlock");
    assert!(
        matches!(now.status.code(), Some(0 | 1)),
        "status through the restored proxy: {now:?}"
    );
    if acquired {
        let lock = db.json(&["status", R], 0)["lock"].clone();
        assert_eq!(lock["owner"], "back", "{lock}");
        db.json(&["release", R, "--owner", "back"], 0);
    }
    verdict.finish(db, 0);
}
