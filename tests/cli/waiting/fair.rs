//! Fair waiting (the contract's "Fair waiting"), on both stores ([`each_store`]), with real
//! processes:
//!
//! - waiters are served in the order they started waiting, and a resource that frees up stays
//!   reserved for a queued waiter (a try-once request gets 75 with `"waiting"`, no `"holder"`);
//! - a waiter leaves the queue at once when its `--wait` runs out or it is interrupted, and
//!   within 5 s when it dies;
//! - a shared request does not overtake a queued exclusive one;
//! - `status`, the busy answers and the text lines count the live waiters;
//! - letting go of a lock wakes the next waiter at once, not at its next poll.
//!
//! A waiter counts as queued only once `status` counts it, and the next one starts only then, so
//! the arrival order is the test's, not the scheduler's. Commands are `sh -c` scripts that leave
//! marker files in the scratch folder (`$D`), named by their `$1`. Timing checks are upper bounds
//! with generous slack (2 shared cores); the latency check takes the median of several
//! hand-overs.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::common::output::{answer, keys, now_millis, parse_line};
use crate::common::process::{Proc, describe, wait_for_file, wait_until};
use crate::common::store::{Db, each_store, each_store_and_server, sh_script, until_waiting};

/// How long a process may take to finish once it has what it waits for.
const LONG: Duration = Duration::from_secs(20);

/// Stops the waiter `w` (SIGSTOP) between two of its looks at the store. Stopped inside one, it
/// would keep what that look holds — on PostgreSQL the resource's row, between the two
/// round trips of an attempt; on SQLite the write lock, while it takes or refreshes its
/// place — and the holder's release would wait for it until a timeout.
fn stop_between_looks(db: &Db, w: &Proc) {
    for _ in 0..100 {
        w.signal(Signal::SIGSTOP);
        if !db.busy_elsewhere() {
            return;
        }
        w.signal(Signal::SIGCONT);
        sleep(Duration::from_millis(7));
    }
    panic!("the waiter was inside a transaction at each of 100 tries");
}

/// `acquire RESOURCE --owner OWNER --ttl 60 --wait 60s` with `extra` flags, in the background.
fn waiter(db: &Db, resource: &str, owner: &str, extra: &[&str]) -> Proc {
    let mut args = vec![
        "acquire", resource, "--owner", owner, "--ttl", "60", "--wait", "60s",
    ];
    args.extend_from_slice(extra);
    db.spawn(&args, owner)
}

/// A try-once `acquire` of R by `x` while `h` holds it and `waiting` wait: busy (75), naming the
/// holder and counting the waiters.
fn assert_busy_with_waiters(db: &Db, waiting: u64) {
    let busy = db.json(&["acquire", "R", "--owner", "x", "--ttl", "60"], 75);
    assert_eq!(
        keys(&busy),
        ["acquired", "holder", "resource", "waiting"],
        "{busy}"
    );
    assert_eq!(busy["holder"]["owner"], "h", "{busy}");
    assert_eq!(busy["waiting"], waiting, "{busy}");
}

/// A [`waiter`], once `status` counts it as the `place`-th in line.
fn queued(db: &Db, resource: &str, owner: &str, extra: &[&str], place: u64) -> Proc {
    let proc = waiter(db, resource, owner, extra);
    until_waiting(db, resource, place);
    proc
}

// ---------------------------------------------------------------------------------------------
// Order and reservation
// ---------------------------------------------------------------------------------------------

#[test]
fn waiters_are_served_in_the_order_they_started_waiting() {
    each_store_and_server(|db| {
        db.json(&["acquire", "R", "--owner", "h", "--ttl", "60"], 0);
        // mkdir fails if another waiter's command is still inside: one at a time.
        let script = r#"mkdir "$D/inside" || exit 99
            echo "$1" >> "$D/order"
            sleep 0.1
            rmdir "$D/inside""#;
        let mut waiters = Vec::new();
        for n in 1..=6u64 {
            let number = n.to_string();
            waiters.push(db.spawn(
                &sh_script(
                    &["run", "--resource", "R", "--wait", "60s"],
                    script,
                    &[&number],
                ),
                &format!("waiter{n}"),
            ));
            until_waiting(db, "R", n);
            sleep(Duration::from_millis(200));
        }
        db.json(&["release", "R", "--owner", "h"], 0);
        for (n, waiter) in (1..).zip(waiters) {
            let done = waiter.finish(LONG);
            assert_eq!(done.code(), Some(0), "waiter {n}: {}", done.describe());
        }
        let order = fs::read_to_string(db.file("order")).expect("the order file");
        assert_eq!(order, "1\n2\n3\n4\n5\n6\n", "served out of arrival order");
        assert_eq!(db.status("R"), (1, json!({"held": false, "resource": "R"})));
    });
}

#[test]
fn a_free_resource_is_reserved_for_a_queued_waiter() {
    // On the stores only: through a server, the server waits on a stopped client's behalf, and
    // grants it the lock as it would a running one.
    each_store(|db| {
        db.json(&["acquire", "R", "--owner", "h", "--ttl", "60"], 0);
        let w = queued(db, "R", "w", &[], 1);
        // While h holds R, a try-once request is busy as ever, and sees the queue.
        assert_busy_with_waiters(db, 1);

        // A stopped waiter is still a live one (for at least its 5 s liveness lease): once h
        // releases, R has no tenure but is reserved for w.
        stop_between_looks(db, &w);
        let stopped = Instant::now();
        db.json(&["release", "R", "--owner", "h"], 0);
        // The three looks at once, to be done well within the stopped waiter's 5 s.
        let ran = db.file("ran");
        let (try_once, status, run_once) = thread::scope(|looks| {
            let try_once = looks.spawn(|| db.run(&["acquire", "R", "--owner", "x", "--ttl", "60"]));
            let status = looks.spawn(|| db.status("R"));
            let run_once = looks.spawn(|| {
                db.run(&[
                    "run",
                    "--resource",
                    "R",
                    "--",
                    "touch",
                    ran.to_str().unwrap(),
                ])
            });
            (
                try_once.join().expect("the try-once acquire"),
                status.join().expect("status"),
                run_once.join().expect("the try-once run"),
            )
        });
        let within = stopped.elapsed();
        assert!(
            within < Duration::from_secs(4),
            "the machine is too slow for this test: the checks took {within:?} after SIGSTOP, \
             and the stopped waiter may have lapsed after 5 s"
        );
        assert_eq!(try_once.status.code(), Some(75), "{}", describe(&try_once));
        assert_eq!(
            parse_line(&try_once.stdout),
            json!({"acquired": false, "resource": "R", "waiting": 1}),
            "reserved, not held: no \"holder\""
        );
        assert_eq!(
            status,
            (1, json!({"held": false, "resource": "R", "waiting": 1})),
            "status of a reserved resource"
        );
        assert_eq!(run_once.status.code(), Some(75), "{}", describe(&run_once));
        assert!(
            !ran.exists(),
            "a try-once run ran its command on a reserved resource"
        );

        w.signal(Signal::SIGCONT);
        let got = answer(&w.finish(LONG), 0, "w");
        assert_eq!(got["lock"]["owner"], "w", "{got}");
        let (code, status) = db.status("R");
        assert_eq!(code, 0, "{status}");
        assert_eq!(keys(&status), ["held", "lock"], "{status}");
        assert_eq!(status["lock"]["owner"], "w", "{status}");
    });
}

// ---------------------------------------------------------------------------------------------
// Leaving the queue
// ---------------------------------------------------------------------------------------------

/// Upper bound for a waiter to get the lock after a release when nothing but the release itself
/// is in the way (no dead waiter's liveness lease to run out).
const PROMPTLY: Duration = Duration::from_secs(3);

#[test]
fn a_sigkilled_waiter_stops_blocking_within_5_seconds() {
    each_store_and_server(|db| {
        db.json(&["acquire", "R", "--owner", "h", "--ttl", "60"], 0);
        let a = queued(db, "R", "a", &[], 1);
        let b = queued(db, "R", "b", &[], 2);
        a.signal(Signal::SIGKILL);
        let a = a.finish(LONG);
        assert_eq!(
            a.output.status.signal(),
            Some(Signal::SIGKILL as i32),
            "{}",
            a.describe()
        );

        db.json(&["release", "R", "--owner", "h"], 0);
        let released = Instant::now();
        let b = b.finish(LONG);
        let took = released.elapsed();
        let got = answer(&b, 0, "b");
        assert_eq!(got["lock"]["owner"], "b", "{got}");
        assert!(
            took < Duration::from_secs(10),
            "b got R {took:?} after the release: a dead waiter must stop blocking within 5 s"
        );
        wait_until(Duration::from_secs(10), "status counts no waiter", || {
            db.waiting("R") == 0
        });
        let (code, status) = db.status("R");
        assert_eq!(code, 0, "{status}");
        assert_eq!(keys(&status), ["held", "lock"], "{status}");
        assert_eq!(status["lock"]["owner"], "b", "{status}");
    });
}

#[test]
fn a_waiter_whose_wait_ran_out_leaves_the_queue_at_once() {
    each_store_and_server(|db| {
        db.json(&["acquire", "R", "--owner", "h", "--ttl", "60"], 0);
        // 5 s rather than 1 s: b must be seen queued behind a before a's wait runs out.
        let a = db.spawn(
            &[
                "acquire", "R", "--owner", "a", "--ttl", "60", "--wait", "5s",
            ],
            "a",
        );
        until_waiting(db, "R", 1);
        let b = queued(db, "R", "b", &[], 2);

        let busy = answer(&a.finish(LONG), 75, "a, whose wait ran out");
        assert_eq!(
            keys(&busy),
            ["acquired", "holder", "resource", "waiting"],
            "{busy}"
        );
        assert_eq!(busy["acquired"], false, "{busy}");
        assert_eq!(busy["holder"]["owner"], "h", "{busy}");
        // Whether a still counts itself in its last answer the contract leaves open: b, or both.
        assert!(
            matches!(busy["waiting"].as_u64(), Some(1 | 2)),
            "waiting is b, or a and b: {busy}"
        );
        assert_eq!(db.waiting("R"), 1, "a left the queue when its wait ran out");

        db.json(&["release", "R", "--owner", "h"], 0);
        let released = Instant::now();
        let b = b.finish(LONG);
        let took = released.elapsed();
        assert_eq!(answer(&b, 0, "b")["lock"]["owner"], "b");
        assert!(
            took < PROMPTLY,
            "b got R {took:?} after the release: a waiter that gave up must not block it"
        );
    });
}

#[test]
fn an_interrupted_waiter_leaves_the_queue_at_once() {
    each_store_and_server(|db| {
        let interrupts = [
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ];
        for signal in interrupts {
            for command in ["acquire", "run"] {
                let what = format!("{command} --wait interrupted by {signal}");
                let resource = format!("R-{command}-{signal}");
                let r = resource.as_str();
                let ran = db.file(&format!("ran-{command}-{signal}"));
                db.json(&["acquire", r, "--owner", "h", "--ttl", "60"], 0);
                let a = match command {
                    "acquire" => waiter(db, r, "a", &[]),
                    _ => db.spawn(
                        &[
                            "run",
                            "--resource",
                            r,
                            "--owner",
                            "a",
                            "--wait",
                            "60s",
                            "--",
                            "touch",
                            ran.to_str().unwrap(),
                        ],
                        "a",
                    ),
                };
                until_waiting(db, r, 1);
                let b = queued(db, r, "b", &[], 2);

                a.signal(signal);
                let a = a.finish(LONG);
                // 128+N, as if it had died of the signal, but only after leaving the queue.
                assert_eq!(
                    a.code(),
                    Some(128 + signal as i32),
                    "{what}: {}",
                    a.describe()
                );
                assert!(!ran.exists(), "{what}: the command ran");
                // Through a server too: the waiter tells the server it leaves before it exits.
                assert!(
                    a.stderr().contains("left the queue"),
                    "{what}: {}",
                    a.describe()
                );
                assert_eq!(db.waiting(r), 1, "{what}: a left the queue as it exited");

                db.json(&["release", r, "--owner", "h"], 0);
                let released = Instant::now();
                let b = b.finish(LONG);
                let took = released.elapsed();
                assert_eq!(answer(&b, 0, &what)["lock"]["owner"], "b");
                assert!(
                    took < PROMPTLY,
                    "{what}: b got it {took:?} after the release"
                );
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Modes in the queue
// ---------------------------------------------------------------------------------------------

/// The owners of a `status` answer's `"locks"`, in its order (by fence).
fn owners(status: &Value) -> Vec<&str> {
    status["locks"]
        .as_array()
        .unwrap_or_else(|| panic!("\"locks\" in {status}"))
        .iter()
        .map(|lock| lock["owner"].as_str().expect("an owner"))
        .collect()
}

#[test]
fn a_shared_request_does_not_overtake_a_queued_writer() {
    each_store_and_server(|db| {
        for reader in ["r1", "r2"] {
            db.json(
                &["acquire", "R", "--owner", reader, "--ttl", "60", "--shared"],
                0,
            );
        }
        let w = queued(db, "R", "w", &[], 1);
        // r3 could share R with r1 and r2, but w started waiting first.
        let r3 = queued(db, "R", "r3", &["--shared"], 2);
        let (code, status) = db.status("R");
        assert_eq!(code, 0, "{status}");
        assert_eq!(owners(&status), ["r1", "r2"], "r3 was not let in: {status}");

        for reader in ["r1", "r2"] {
            db.json(&["release", "R", "--owner", reader], 0);
        }
        let w_got = answer(&w.finish(LONG), 0, "w");
        assert_eq!(w_got["lock"]["owner"], "w", "{w_got}");
        let (code, status) = db.status("R");
        assert_eq!(code, 0, "{status}");
        assert_eq!(keys(&status), ["held", "lock", "waiting"], "{status}");
        assert_eq!(status["lock"]["owner"], "w", "{status}");
        assert_eq!(status["waiting"], 1, "r3 still waits: {status}");

        db.json(&["release", "R", "--owner", "w"], 0);
        let r3_got = answer(&r3.finish(LONG), 0, "r3");
        assert_eq!(r3_got["lock"]["owner"], "r3", "{r3_got}");
        assert_eq!(r3_got["lock"]["shared"], true, "{r3_got}");
        let fence = |got: &Value| got["lock"]["fence"].as_i64().expect("a fence");
        assert!(
            fence(&r3_got) > fence(&w_got),
            "r3's tenure comes after w's: {w_got} then {r3_got}"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Visibility
// ---------------------------------------------------------------------------------------------

/// Whether a human line says that `k` are waiting: it speaks of waiting or a queue, and has the
/// number `k` as a word of its own (a timestamp's parts never are a lone small number).
fn says_how_many_wait(line: &str, k: u64) -> bool {
    let lower = line.to_lowercase();
    let number = k.to_string();
    (lower.contains("waiting") || lower.contains("queue"))
        && line
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word == number)
}

#[test]
fn status_and_busy_answers_count_the_live_waiters() {
    each_store_and_server(|db| {
        db.json(&["acquire", "R", "--owner", "h", "--ttl", "60"], 0);
        // No waiter: no "waiting" key anywhere.
        let (code, status) = db.status("R");
        assert_eq!(code, 0, "{status}");
        assert_eq!(keys(&status), ["held", "lock"], "{status}");
        let busy = db.json(&["acquire", "R", "--owner", "x", "--ttl", "60"], 75);
        assert_eq!(keys(&busy), ["acquired", "holder", "resource"], "{busy}");

        let waiters: Vec<_> = (1..)
            .zip(["a", "b"])
            .map(|(n, owner)| queued(db, "R", owner, &[], n))
            .collect();
        let (code, status) = db.status("R");
        assert_eq!(code, 0, "{status}");
        assert_eq!(keys(&status), ["held", "lock", "waiting"], "{status}");
        assert_eq!(status["lock"]["owner"], "h", "{status}");
        assert_eq!(status["waiting"], 2, "{status}");

        assert_busy_with_waiters(db, 2);

        let text = db.run(&["--format", "text", "status", "R"]);
        assert_eq!(text.status.code(), Some(0), "{}", describe(&text));
        let line = String::from_utf8_lossy(&text.stdout);
        assert!(
            says_how_many_wait(&line, 2),
            "text status says 2 are waiting: {line:?}"
        );
        let text = db.run(&[
            "--format", "text", "acquire", "R", "--owner", "x", "--ttl", "60",
        ]);
        assert_eq!(text.status.code(), Some(75), "{}", describe(&text));
        let line = String::from_utf8_lossy(&text.stdout);
        assert!(
            says_how_many_wait(&line, 2),
            "text busy answer says 2 are waiting: {line:?}"
        );
        let run = db.run(&["run", "--resource", "R", "--", "true"]);
        assert_eq!(run.status.code(), Some(75), "{}", describe(&run));
        let busy_line = String::from_utf8_lossy(&run.stderr).to_lowercase();
        assert!(
            busy_line.contains("waiting") || busy_line.contains("queue"),
            "run's busy line speaks of the queue: {busy_line:?}"
        );
        assert_eq!(db.waiting("R"), 2, "try-once requests never queue");

        for waiter in waiters {
            waiter.signal(Signal::SIGTERM);
            let done = waiter.finish(LONG);
            assert!(!done.timed_out, "{}", done.describe());
        }
        if db.is_served() {
            // Through a server the places of waiters gone lapse within 5 s.
            until_waiting(db, "R", 0);
        }
        let (code, status) = db.status("R");
        assert_eq!(code, 0, "{status}");
        assert_eq!(keys(&status), ["held", "lock"], "no waiter left: {status}");
    });
}

// ---------------------------------------------------------------------------------------------
// Waking
// ---------------------------------------------------------------------------------------------

/// A time that `date +%s%3N` wrote, in milliseconds since the Unix epoch.
fn read_millis(path: &Path) -> i64 {
    let text =
        fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|err| panic!("{} holds {text:?}, not a time: {err}", path.display()))
}

/// Hand-overs measured per way of letting go; the median is checked.
const HANDOVERS: usize = 5;

/// The median hand-over must stay under this. A woken waiter takes a couple of process starts
/// (5–15 ms measured here on SQLite); a waiter that polled every 250–500 ms took a median of
/// about 300 ms (from 20 ms to 450 ms), so a looser bound would let polling pass.
const WAKE_MEDIAN: Duration = Duration::from_millis(150);

/// How the holder lets go of R in a hand-over.
#[derive(Debug, Clone, Copy)]
enum LetGo {
    /// The holder's `run` command exits and `run` releases.
    RunExits,
    /// The holder took R with `acquire` and gives it back with `release`.
    Release,
}

/// One hand-over of R: a holder, a waiter queued behind it for at least a second (long enough
/// for a poller to reach its slowest pace), then the holder lets go. Returns the time from the
/// moment the holder let go to the moment the waiter's command started.
fn hand_over(db: &Db, let_go: LetGo, n: usize) -> Duration {
    // Names the files and logs of this hand-over, and is the scripts' `$1`.
    let tag = format!("{let_go:?}{n}");
    let holder = match let_go {
        LetGo::RunExits => {
            let script = r#"touch "$D/started$1"
                while [ ! -e "$D/stop$1" ]; do sleep 0.05; done
                date +%s%3N > "$D/left$1""#;
            let holder = db.spawn(
                &sh_script(&["run", "--resource", "R"], script, &[&tag]),
                &format!("holder{tag}"),
            );
            wait_for_file(&db.file(&format!("started{tag}")), LONG);
            Some(holder)
        }
        LetGo::Release => {
            db.json(&["acquire", "R", "--owner", "h", "--ttl", "60"], 0);
            None
        }
    };
    let queued = Instant::now();
    let waiter = db.spawn(
        &sh_script(
            &["run", "--resource", "R", "--wait", "60s"],
            r#"date +%s%3N > "$D/got$1""#,
            &[&tag],
        ),
        &format!("waiter{tag}"),
    );
    until_waiting(db, "R", 1);
    sleep(Duration::from_secs(1).saturating_sub(queued.elapsed()));

    let left = match holder {
        Some(holder) => {
            fs::write(db.file(&format!("stop{tag}")), "").expect("the stop file");
            let done = holder.finish(LONG);
            assert_eq!(done.code(), Some(0), "holder {tag}: {}", done.describe());
            read_millis(&db.file(&format!("left{tag}")))
        }
        // From the moment release is done: its own start-up is not the waiter's latency. (The
        // waiter may even start before release has exited: that counts as no time.)
        None => {
            db.json(&["release", "R", "--owner", "h"], 0);
            now_millis()
        }
    };
    let done = waiter.finish(LONG);
    assert_eq!(done.code(), Some(0), "waiter {tag}: {}", done.describe());
    let got = read_millis(&db.file(&format!("got{tag}")));
    Duration::from_millis(u64::try_from(got - left).unwrap_or(0))
}

#[test]
fn letting_go_wakes_the_next_waiter_at_once_not_at_its_next_poll() {
    each_store_and_server(|db| {
        for let_go in [LetGo::RunExits, LetGo::Release] {
            let mut took: Vec<Duration> =
                (0..HANDOVERS).map(|n| hand_over(db, let_go, n)).collect();
            took.sort_unstable();
            let median = took[HANDOVERS / 2];
            eprintln!("{:?} {let_go:?}: hand-overs took {took:?}", db.kind);
            assert!(
                median < WAKE_MEDIAN,
                "{let_go:?}: the median hand-over took {median:?} (all: {took:?}); a waiter must \
                 be woken, not find out at its next poll"
            );
        }
    });
}
