//! Every command through a distlock server (`--db http://…`, `https://…`): the same flags, the
//! same JSON and the same exit codes as on the store behind it, with a real `distlock serve`
//! over each store, real commands as its clients, and real signals.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::common::certs::{Ca, CertFiles, Leaf};
use crate::common::output::{now_millis, parse_line, rfc3339_millis, timestamp_millis};
use crate::common::pids::is_gone;
use crate::common::process::{BIN, Proc, describe, distlock, wait_until};
use crate::common::proxy::Proxy;
use crate::common::server::Server;
use crate::common::store::{Db, each_store};

/// [`distlock`] with `DISTLOCK_DB` naming `url`, in the scratch folder.
fn via(db: &Db, url: &str) -> Command {
    let mut cmd = distlock();
    cmd.env("DISTLOCK_DB", url).current_dir(db.dir.path());
    cmd
}

fn run(cmd: &mut Command, args: &[&str]) -> Output {
    cmd.args(args).output().expect("run distlock")
}

/// The one JSON line of a command that exited `code`.
fn answer(out: &Output, code: i32) -> Value {
    assert_eq!(out.status.code(), Some(code), "{}", describe(out));
    parse_line(&out.stdout)
}

/// `distlock ARGS…` through the server at `url` ([`via`]): its one JSON line, once it exited
/// `code`.
fn answered(db: &Db, url: &str, args: &[&str], code: i32) -> Value {
    answer(&run(&mut via(db, url), args), code)
}

/// A SQLite store behind a server of its own, and the server's URL ([`base`]).
fn served_sqlite() -> (Db, Server, String) {
    let db = Db::sqlite();
    let server = Server::start(&db);
    let url = base(&server);
    (db, server, url)
}

/// The first server URL of a test's server, without a trailing slash.
fn base(server: &Server) -> String {
    server.url("")
}

#[test]
fn every_command_through_a_server_answers_as_on_its_store() {
    each_store(|db| {
        let server = Server::start(db);
        let url = base(&server);
        let dl = |args: &[&str]| run(&mut via(db, &url), args);
        let taken = answer(&dl(&["acquire", "r", "--owner", "a", "--ttl", "30"]), 0);
        assert_eq!(taken["lock"]["owner"], "a");
        let fence = taken["lock"]["fence"].as_i64().expect("fence");
        // The same tenure as the store itself reports.
        let direct = db.json(&["status", "r"], 0);
        assert_eq!(answer(&dl(&["status", "r"]), 0), direct);
        let busy = answer(&dl(&["acquire", "r", "--owner", "b", "--ttl", "30"]), 75);
        assert_eq!(busy["holder"]["owner"], "a", "{busy}");
        assert_eq!(
            busy.get("position"),
            None,
            "the command never prints a position"
        );
        let extended = answer(&dl(&["acquire", "r", "--owner", "a", "--ttl", "60"]), 0);
        assert_eq!(extended["lock"]["fence"], fence, "extended, same fence");
        let refused = answer(&dl(&["renew", "r", "--owner", "b", "--ttl", "30"]), 77);
        assert_eq!(refused["reason"], "forbidden");
        answer(&dl(&["renew", "r", "--owner", "a", "--ttl", "30"]), 0);
        let shared = answer(
            &dl(&["acquire", "s", "--owner", "x", "--shared", "--ttl", "30"]),
            0,
        );
        assert_eq!(shared["lock"]["shared"], true);
        let mismatch = answer(
            &dl(&[
                "acquire", "s", "--owner", "y", "--limit", "2", "--ttl", "30",
            ]),
            78,
        );
        assert_eq!(mismatch["reason"], "mismatch", "{mismatch}");
        assert_eq!(answer(&dl(&["list"]), 0), db.json(&["list"], 0));
        let log = dl(&["log", "r"]);
        assert_eq!(log.status.code(), Some(0), "{}", describe(&log));
        assert_eq!(log.stdout, db.run(&["log", "r"]).stdout, "the same history");
        assert_eq!(
            answer(&dl(&["release", "r", "--owner", "b"]), 77)["reason"],
            "forbidden"
        );
        answer(&dl(&["release", "r", "--owner", "a"]), 0);
        assert_eq!(
            answer(&dl(&["release", "r", "--owner", "a"]), 1)["reason"],
            "not_found"
        );
        assert_eq!(
            answer(&dl(&["status", "r"]), 1),
            db.json(&["status", "r"], 1)
        );
        answer(&dl(&["renew", "r", "--owner", "a", "--ttl", "30"]), 1);
        let broken = answer(&dl(&["break", "s", "--reason", "stuck", "--by", "ops"]), 0);
        assert_eq!(broken["broken"], true, "{broken}");
        answer(&dl(&["break", "s", "--reason", "again"]), 1);
        // --format text reads the same answers.
        let text = dl(&["--format", "text", "status", "s"]);
        assert_eq!(text.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&text.stdout).trim(),
            "s is not held"
        );
        // gc and serve belong where the store is.
        for args in [&["gc"][..], &["serve", "--listen", "127.0.0.1:0"]] {
            let out = dl(args);
            assert_eq!(out.status.code(), Some(64), "{args:?}: {}", describe(&out));
            assert!(out.stdout.is_empty());
            assert_eq!(
                String::from_utf8_lossy(&out.stderr).lines().count(),
                1,
                "{}",
                describe(&out)
            );
        }
    });
}

#[test]
fn run_through_a_server_guards_its_tenure_and_passes_the_exit_status_through() {
    each_store(|db| {
        let server = Server::start(db);
        let url = base(&server);
        // Inside: the lock is the run's, guarded (its own owner is busy), and DISTLOCK_DB names
        // the server.
        let script = r#"echo "$DISTLOCK_DB $DISTLOCK_FENCE" > inside;
            "$DL" acquire job --owner me --ttl 30 > /dev/null; echo $? >> inside; exit 7"#;
        let out = via(db, &url)
            .env("DL", BIN)
            .args([
                "run",
                "--resource",
                "job",
                "--owner",
                "me",
                "--",
                "sh",
                "-c",
                script,
            ])
            .output()
            .expect("run distlock");
        assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
        let inside = std::fs::read_to_string(db.dir.path().join("inside")).expect("inside");
        let lines: Vec<&str> = inside.lines().collect();
        assert!(lines[0].starts_with(&format!("{url} ")), "{inside}");
        assert_eq!(
            lines[1], "75",
            "the run's own owner finds its tenure guarded"
        );
        db.json(&["status", "job"], 1);
        // A tenure its owner took with acquire is joined, and stays held after the run.
        answered(
            db,
            &url,
            &["acquire", "joint", "--owner", "me", "--ttl", "30"],
            0,
        );
        let out = run(
            &mut via(db, &url),
            &["run", "--resource", "joint", "--owner", "me", "--", "true"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(db.json(&["status", "joint"], 0)["lock"]["owner"], "me");
        // --hold-at-least keeps it through the server.
        let out = run(
            &mut via(db, &url),
            &[
                "run",
                "--resource",
                "daily",
                "--hold-at-least",
                "1h",
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        db.json(&["status", "daily"], 0);
    });
}

#[test]
fn waiters_through_a_server_are_served_in_order_and_woken_at_once() {
    let (db, _server, url) = served_sqlite();
    answered(
        &db,
        &url,
        &["acquire", "q", "--owner", "h", "--ttl", "60"],
        0,
    );
    let mut waiters = Vec::new();
    for n in 0..3 {
        let mut cmd = via(&db, &url);
        cmd.args([
            "run",
            "--resource",
            "q",
            "--wait",
            "60",
            "--",
            "sh",
            "-c",
            &format!("echo {n} >> order; sleep 0.2"),
        ]);
        waiters.push(Proc::spawn(&mut cmd, db.dir.path(), &format!("waiter-{n}")));
        // Each is in the queue before the next comes.
        wait_until(
            Duration::from_secs(20),
            &format!("waiter {n} never queued"),
            || db.waiting("q") > n,
        );
    }
    let released = Instant::now();
    answered(&db, &url, &["release", "q", "--owner", "h"], 0);
    for waiter in waiters {
        let out = waiter.finish(Duration::from_secs(60));
        assert_eq!(out.code(), Some(0), "{}", out.describe());
    }
    let order = std::fs::read_to_string(db.dir.path().join("order")).expect("order");
    assert_eq!(order, "0\n1\n2\n", "served in arrival order");
    // Three handoffs of 0.2 s each: woken at once, not at a poll.
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "{:?}",
        released.elapsed()
    );
    // A wait that runs out is busy (75); an interrupted one exits 130 at once and its place
    // is gone within 5 s.
    answered(
        &db,
        &url,
        &["acquire", "q", "--owner", "h", "--ttl", "60"],
        0,
    );
    let started = Instant::now();
    let out = run(
        &mut via(&db, &url),
        &["acquire", "q", "--owner", "w", "--ttl", "9", "--wait", "2"],
    );
    assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
    assert!(started.elapsed() >= Duration::from_secs(2));
    let mut cmd = via(&db, &url);
    cmd.args(["acquire", "q", "--owner", "i", "--ttl", "9", "--wait", "60"]);
    let waiter = Proc::spawn(&mut cmd, db.dir.path(), "interrupted");
    wait_until(Duration::from_secs(20), "the waiter never queued", || {
        db.waiting("q") >= 1
    });
    let interrupted = Instant::now();
    waiter.signal(Signal::SIGINT);
    let out = waiter.finish(Duration::from_secs(20));
    assert_eq!(out.code(), Some(130), "{}", out.describe());
    assert!(
        interrupted.elapsed() < Duration::from_secs(5),
        "{:?}",
        interrupted.elapsed()
    );
    // Its place went with it (see
    // `an_interrupted_waiter_through_a_server_gives_its_place_up_before_it_exits`).
    assert_eq!(db.waiting("q"), 0);
}

/// ^C on a waiter whose long poll is in flight: the client tells the server to end the poll
/// and give the place up (`POST /locks/{r}/leave`) before it exits, as a local waiter leaves
/// the queue, so that nobody behind it is held back and the lock is never granted to a waiter
/// that is gone.
#[test]
fn an_interrupted_waiter_through_a_server_gives_its_place_up_before_it_exits() {
    each_store(|db| {
        let server = Server::start(db);
        let url = base(&server);
        let dl = |args: &[&str]| run(&mut via(db, &url), args);
        answer(&dl(&["acquire", "q", "--owner", "h", "--ttl", "60"]), 0);
        let mut cmd = via(db, &url);
        cmd.args([
            "acquire", "q", "--owner", "i", "--ttl", "60", "--wait", "60",
        ]);
        let waiter = Proc::spawn(&mut cmd, db.dir.path(), "interrupted");
        wait_until(Duration::from_secs(20), "the waiter never queued", || {
            db.waiting("q") == 1
        });
        waiter.signal(Signal::SIGINT);
        let out = waiter.finish(Duration::from_secs(20));
        assert_eq!(out.code(), Some(130), "{}", out.describe());
        assert!(
            out.stderr()
                .contains("interrupted while waiting for q; left the queue"),
            "{}",
            out.describe()
        );
        assert_eq!(db.waiting("q"), 0, "its place is gone when it has exited");
        assert!(
            server.stderr().contains("POST /locks/q/leave 204"),
            "{}",
            server.stderr()
        );
        // Its long poll ended with it: once the holder lets go, the lock is free for anyone at
        // once, not reserved for the waiter that left nor granted to it.
        answer(&dl(&["release", "q", "--owner", "h"]), 0);
        let taken = answer(&dl(&["acquire", "q", "--owner", "next", "--ttl", "60"]), 0);
        assert_eq!(taken["lock"]["owner"], "next", "{taken}");
        let events = db.log(&["q"]);
        assert!(
            events.iter().all(|event| event["owner"] != "i"),
            "the waiter that left never held the lock: {events:?}"
        );
    });
}

/// A grant that reaches `run` after the lease it starts has already ended (a proxy holds every
/// chunk back for longer than the TTL) starts nothing: 75, with a line saying it came too late.
#[test]
fn a_grant_that_arrives_after_its_lease_has_ended_starts_nothing() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    let proxy = Proxy::start(server.addr);
    // The answer comes back at least two delays after the request left, on a lease of 1 s; at
    // most four (a request and an answer of two chunks each) stay within the call's 10 s.
    proxy.delay(Duration::from_millis(1500));
    let url = format!("http://{}", proxy.addr);
    let marker = db.file("started");
    let out = run(
        &mut via(&db, &url),
        &[
            "run",
            "--resource",
            "late",
            "--ttl",
            "1",
            "--",
            "touch",
            marker.to_str().expect("a UTF-8 path"),
        ],
    );
    assert_eq!(out.status.code(), Some(75), "{}", describe(&out));
    assert!(
        !marker.exists(),
        "the command was started: {}",
        describe(&out)
    );
    assert!(out.stdout.is_empty(), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("distlock: ")
            && stderr.contains(
                "granted too late: the lease had already ended; the command was not started"
            ),
        "{stderr}"
    );
    proxy.restore();
    answered(&db, &base(&server), &["status", "late"], 1);
}

/// `run` over a set ends every member in one request (`POST /sets/release`, each member on its
/// own), released or kept for `--hold-at-least`: a server that died between one `DELETE` per
/// member would leave the rest held.
#[test]
fn run_over_a_set_through_a_server_ends_the_set_in_one_request() {
    each_store(|db| {
        let server = Server::start(db);
        let url = base(&server);
        let out = run(
            &mut via(db, &url),
            &["run", "--resource", "a", "--resource", "b", "--", "true"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        for member in ["a", "b"] {
            db.json(&["status", member], 1);
        }
        let out = run(
            &mut via(db, &url),
            &[
                "run",
                "--resource",
                "a",
                "--resource",
                "b",
                "--hold-at-least",
                "1h",
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        for member in ["a", "b"] {
            let lock = &db.json(&["status", member], 0)["lock"];
            let held_for = timestamp_millis(lock["expires_at"].as_str().expect("expires_at"))
                - timestamp_millis(lock["acquired_at"].as_str().expect("acquired_at"));
            assert_eq!(held_for, 3_600_000, "kept until its start + 1 h: {lock}");
        }
        let log = server.stderr();
        let ends: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("/sets/release") || line.contains("DELETE "))
            .collect();
        assert_eq!(ends.len(), 2, "one request per run: {log}");
        assert!(
            ends.iter()
                .all(|line| line.contains("POST /sets/release 200")),
            "{log}"
        );
    });
}

/// A waiter's long poll is granted up to 30 s after it was sent; its lease is timed from the
/// grant (the server says how long the request waited), not from the sending, so a `run`
/// that waited longer than its TTL keeps its lease and its command runs on.
#[test]
fn a_run_that_waited_longer_than_its_ttl_through_a_server_keeps_its_lease() {
    let (db, _server, url) = served_sqlite();
    answered(
        &db,
        &url,
        &["acquire", "w", "--owner", "h", "--ttl", "60"],
        0,
    );
    let mut cmd = via(&db, &url);
    cmd.args([
        "run",
        "--resource",
        "w",
        "--ttl",
        "2",
        "--wait",
        "60",
        "--",
        "sh",
        "-c",
        "sleep 4; echo done > done",
    ]);
    let waiter = Proc::spawn(&mut cmd, db.dir.path(), "waiter");
    wait_until(Duration::from_secs(20), "the waiter never queued", || {
        db.waiting("w") == 1
    });
    // Twice the waiter's TTL in line: the point of the test is the time it spends waiting.
    std::thread::sleep(Duration::from_secs(4));
    answered(&db, &url, &["release", "w", "--owner", "h"], 0);
    let out = waiter.finish(Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    assert!(db.dir.path().join("done").exists(), "{}", out.describe());
    db.json(&["status", "w"], 1);
}

#[test]
fn a_run_whose_server_is_gone_stops_its_command_before_the_lease_can_end() {
    let (db, server, url) = served_sqlite();
    let mut cmd = via(&db, &url);
    // The command notes, by the wall clock, when it is told to stop.
    let command = r"trap 'date +%s%3N > stopped; exit 143' TERM; sleep 30 & wait";
    cmd.args([
        "run",
        "--resource",
        "k",
        "--ttl",
        "6",
        "--",
        "sh",
        "-c",
        command,
    ]);
    let guard = Proc::spawn(&mut cmd, db.dir.path(), "guard");
    wait_until(
        Duration::from_secs(20),
        "the run never took the lock",
        || db.run(&["status", "k"]).status.code() == Some(0),
    );
    let held = db.json(&["status", "k"], 0);
    server.signal(Signal::SIGKILL);
    let out = guard.finish(Duration::from_secs(30));
    assert_eq!(out.code(), Some(124), "{}", out.describe());
    assert!(
        out.stderr().contains("could not be renewed"),
        "{}",
        out.describe()
    );
    assert!(!out.stderr().contains("panicked"), "{}", out.describe());
    // Told to stop before the lease could end (times in one format compare as text).
    let stopped: i64 = std::fs::read_to_string(db.dir.path().join("stopped"))
        .expect("the command was told to stop")
        .trim()
        .parse()
        .expect("a time");
    let expires = held["lock"]["expires_at"].as_str().expect("expires_at");
    assert!(
        rfc3339_millis(stopped).as_str() < expires,
        "stopped at {} , the lease ended at {expires}",
        rfc3339_millis(stopped)
    );
}

#[test]
fn a_run_survives_a_server_restart_within_its_lease_and_releases_after() {
    let db = Db::sqlite();
    let first = Server::start(&db);
    let url = base(&first);
    let port = first.addr.port();
    let mut cmd = via(&db, &url);
    cmd.args(["run", "--resource", "k", "--ttl", "12", "--", "sleep", "5"]);
    let guard = Proc::spawn(&mut cmd, db.dir.path(), "guard");
    wait_until(
        Duration::from_secs(20),
        "the run never took the lock",
        || db.run(&["status", "k"]).status.code() == Some(0),
    );
    first.signal(Signal::SIGKILL);
    drop(first);
    std::thread::sleep(Duration::from_millis(500));
    // The same address again, as a restarted service would have it.
    let again = Server::start_serving_at(&db, &format!("127.0.0.1:{port}"));
    let out = guard.finish(Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    db.json(&["status", "k"], 1);
    drop(again);
}

#[test]
fn tokens_through_a_server_are_sent_never_shown_and_refusals_are_77() {
    let db = Db::sqlite();
    let file = db.file("tokens.json");
    let file = file.to_str().expect("UTF-8");
    let made = db.json(
        &["token", "add", "ci", "--tokens", file, "--prefix", "ci/"],
        0,
    );
    let secret = made["secret"].as_str().expect("secret").to_owned();
    let server = Server::start_serving(&db, &["--tokens", file]);
    let url = base(&server);
    // (token, resource, what the refusal says)
    for (token, resource, words) in [
        (None, "ci/a", "refused the token"),
        (Some("dl_wrong"), "ci/a", "refused the token"),
        (Some(secret.as_str()), "prod", "may not use resource prod"),
    ] {
        let mut cmd = via(&db, &url);
        if let Some(token) = token {
            cmd.env("DISTLOCK_TOKEN", token);
        }
        let out = run(
            &mut cmd,
            &["acquire", resource, "--owner", "w", "--ttl", "30"],
        );
        assert_eq!(out.status.code(), Some(77), "{}", describe(&out));
        assert!(
            out.stdout.is_empty(),
            "nothing on stdout: {}",
            describe(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("distlock: ") && stderr.contains(words),
            "{stderr}"
        );
    }
    let mut cmd = via(&db, &url);
    cmd.env("DISTLOCK_TOKEN", &secret);
    let out = run(
        &mut cmd,
        &[
            "run",
            "--resource",
            "ci/a",
            "--",
            "sh",
            "-c",
            "echo $DISTLOCK_FENCE",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let mut shown = String::from_utf8_lossy(&out.stdout).into_owned();
    shown.push_str(&String::from_utf8_lossy(&out.stderr));
    shown.push_str(&server.stderr());
    assert!(
        !shown.contains(&secret[3..]),
        "the secret never shows: {shown}"
    );
    // A URL with credentials is refused: the token comes from DISTLOCK_TOKEN only.
    let with_credentials = url.replace("http://", &format!("http://{secret}@"));
    let out = run(&mut via(&db, &with_credentials), &["status", "ci/a"]);
    assert_eq!(out.status.code(), Some(64), "{}", describe(&out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(&secret[3..]));
}

#[test]
fn https_through_a_server_checks_its_certificate() {
    let db = Db::sqlite();
    let ca = Ca::new("distlock test CA");
    let files = ca.server_files(db.dir.path(), "server");
    let server = Server::start_tls(&db, &files, &ca);
    let url = server.url("");
    assert!(url.starts_with("https://"), "{url}");
    let ca_file = db.file("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write the CA");
    let mut trusting = via(&db, &url);
    trusting.env("DISTLOCK_CA_CERT", &ca_file);
    answer(
        &run(
            &mut trusting,
            &["acquire", "t", "--owner", "w", "--ttl", "30"],
        ),
        0,
    );
    // Another CA (or the system's roots) does not vouch for it: a store error, 74.
    let other = Ca::new("another CA");
    let other_file = db.file("other.pem");
    std::fs::write(&other_file, other.pem()).expect("write the other CA");
    let mut doubting = via(&db, &url);
    doubting.env("DISTLOCK_CA_CERT", &other_file);
    let out = run(&mut doubting, &["status", "t"]);
    assert_eq!(out.status.code(), Some(74), "{}", describe(&out));
    let out = run(&mut via(&db, &url), &["status", "t"]);
    assert_eq!(out.status.code(), Some(74), "{}", describe(&out));
    // Plain HTTP to the HTTPS port gets no answer distlock can read: 74, and no lock.
    let plain = url.replace("https://", "http://");
    let out = run(
        &mut via(&db, &plain),
        &["acquire", "u", "--owner", "w", "--ttl", "30"],
    );
    assert_eq!(out.status.code(), Some(74), "{}", describe(&out));
    db.json(&["status", "u"], 1);
}

/// The book's one line that makes a self-signed certificate for a server
/// (`docs/src/hosts/through-a-server.md`).
fn book_self_signed_command() -> String {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/src/hosts/through-a-server.md"
    ))
    .expect("read the book's page on every command through a server");
    let lines: Vec<&str> = page
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("openssl req -x509 "))
        .collect();
    assert_eq!(lines.len(), 1, "one `openssl req -x509` line: {lines:?}");
    lines[0].to_owned()
}

/// A self-signed certificate for `127.0.0.1` and `localhost`, marked a CA's as `openssl req
/// -x509` marks its own, whose validity ended in 2021, with its key: PEM files in the test's
/// folder.
fn expired_self_signed(db: &Db) -> CertFiles {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let key = KeyPair::generate().expect("a key");
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let mut params = CertificateParams::new(names).expect("parameters");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.self_signed(&key).expect("a certificate");
    let files = CertFiles {
        cert: db.file("expired.cert.pem"),
        key: db.file("expired.key.pem"),
    };
    std::fs::write(&files.cert, cert.pem()).expect("write the certificate");
    std::fs::write(&files.key, key.serialize_pem()).expect("write the key");
    files
}

/// A certificate made with `openssl req -x509` (which marks it a CA's, `CA:TRUE`) is its own
/// root: given as `DISTLOCK_CA_CERT`, the server that shows it is trusted, as curl trusts it
/// with `--cacert`. Its host names and validity are still checked.
#[test]
fn a_self_signed_certificate_made_as_the_book_says_is_trusted_through_distlock_ca_cert() {
    let db = Db::sqlite();
    let command = book_self_signed_command();
    let made = Command::new("sh")
        .args(["-c", &command])
        .current_dir(db.dir.path())
        .output()
        .expect("run openssl");
    assert!(made.status.success(), "{command}: {}", describe(&made));
    let files = CertFiles {
        cert: db.file("server.pem"),
        key: db.file("server.key"),
    };
    let server = Server::start_https(&db, &files);
    let url = server.url("");
    let trusting = |url: &str| {
        let mut cmd = via(&db, url);
        cmd.env("DISTLOCK_CA_CERT", &files.cert);
        cmd
    };
    answer(
        &run(
            &mut trusting(&url),
            &["acquire", "s", "--owner", "w", "--ttl", "30"],
        ),
        0,
    );
    answer(&run(&mut trusting(&url), &["status", "s"]), 0);
    answer(
        &run(&mut trusting(&url), &["release", "s", "--owner", "w"]),
        0,
    );
    let out = run(
        &mut trusting(&url),
        &["run", "--resource", "s", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // Without it, nothing vouches for the certificate.
    let out = run(&mut via(&db, &url), &["status", "s"]);
    assert_eq!(out.status.code(), Some(74), "{}", describe(&out));
    // The same server at an address its certificate does not name.
    let elsewhere = Proxy::start_on("127.0.0.2", server.addr);
    let out = run(
        &mut trusting(&format!("https://{}", elsewhere.addr)),
        &["status", "s"],
    );
    assert_eq!(out.status.code(), Some(74), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not valid for name"),
        "{}",
        describe(&out)
    );
    // A self-signed certificate whose validity has ended.
    let expired = expired_self_signed(&db);
    let old = Server::start_https(&db, &expired);
    let mut cmd = via(&db, &old.url(""));
    cmd.env("DISTLOCK_CA_CERT", &expired.cert);
    let out = run(&mut cmd, &["status", "s"]);
    assert_eq!(out.status.code(), Some(74), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("certificate expired"),
        "{}",
        describe(&out)
    );
}

/// A server that shows a certificate marked as a CA's (`CA:TRUE`) that `DISTLOCK_CA_CERT` does
/// not hold itself — a CA's certificate given to the server as if it were a server's, or a
/// self-signed one made with `openssl req -x509` while the client names another file — is
/// refused as any unverified server is (74), in one line that says so in plain words and what to
/// do, not as webpki's `CaUsedAsEndEntity`.
#[test]
fn a_servers_certificate_marked_as_a_cas_is_refused_in_one_line_saying_what_to_do() {
    let db = Db::sqlite();
    let ca = Ca::new("distlock test CA");
    let ca_file = db.file("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write the CA");
    let marked = Leaf {
        marked_ca: true,
        ..Leaf::default()
    };
    let intermediate = Server::start_tls(
        &db,
        &ca.server_files_as(db.dir.path(), "marked", &marked),
        &ca,
    );
    let made = Command::new("sh")
        .args(["-c", &book_self_signed_command()])
        .current_dir(db.dir.path())
        .output()
        .expect("run openssl");
    assert!(made.status.success(), "{}", describe(&made));
    let self_signed = Server::start_https(
        &db,
        &CertFiles {
            cert: db.file("server.pem"),
            key: db.file("server.key"),
        },
    );
    for (server, what) in [
        (&intermediate, "a CA-marked certificate signed by the CA"),
        (
            &self_signed,
            "a self-signed certificate, another file named",
        ),
    ] {
        let mut cmd = via(&db, &server.url(""));
        cmd.env("DISTLOCK_CA_CERT", &ca_file);
        let out = run(&mut cmd, &["acquire", "m", "--owner", "w", "--ttl", "30"]);
        assert_eq!(out.status.code(), Some(74), "{what}: {}", describe(&out));
        assert!(out.stdout.is_empty(), "{what}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
        for words in [
            "distlock: ",
            "the server's certificate is a CA's (marked CA:TRUE), not a server's",
            "name that very certificate in DISTLOCK_CA_CERT",
            "serve a leaf certificate, signed by the CA that DISTLOCK_CA_CERT names",
        ] {
            assert!(stderr.contains(words), "{what}: {words:?} in {stderr}");
        }
        assert!(!stderr.contains("CaUsedAsEndEntity"), "{what}: {stderr}");
    }
    db.json(&["status", "m"], 1);
}

#[test]
fn a_waiter_through_a_server_waits_on_across_a_server_restart() {
    let db = Db::sqlite();
    let first = Server::start(&db);
    let url = base(&first);
    let port = first.addr.port();
    db.json(&["acquire", "q", "--owner", "h", "--ttl", "60"], 0);
    let mut cmd = via(&db, &url);
    cmd.args([
        "acquire", "q", "--owner", "w", "--ttl", "30", "--wait", "40",
    ]);
    let waiter = Proc::spawn(&mut cmd, db.dir.path(), "waiter");
    wait_until(Duration::from_secs(20), "the waiter never queued", || {
        db.json(&["status", "q"], 0)["waiting"] == 1
    });
    first.signal(Signal::SIGKILL);
    drop(first);
    std::thread::sleep(Duration::from_millis(700));
    let again = Server::start_serving_at(&db, &format!("127.0.0.1:{port}"));
    // Granted through the new server when the holder lets go (the old one is gone).
    db.json(&["release", "q", "--owner", "h"], 0);
    let out = waiter.finish(Duration::from_secs(40));
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    assert_eq!(db.json(&["status", "q"], 0)["lock"]["owner"], "w");
    assert!(
        again.stderr().contains("POST /locks/q 200"),
        "granted by the new server: {}",
        again.stderr()
    );
}

/// An HTTP server that is not distlock's, at an address a user mistyped: it answers every
/// request with `status` and, for `echo`, a text body that repeats the request's head (the
/// bearer token in it), as a debugging endpoint or a proxy's error page may. Stops with the
/// test.
fn impostor(status: &str, echo: bool) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    let status = status.to_owned();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut head = String::new();
            while reader.read_line(&mut head).is_ok_and(|n| n > 2) && !head.ends_with("\r\n\r\n") {}
            let body = if echo { head.clone() } else { String::new() };
            let _ = (&stream).write_all(
                format!(
                    "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    url
}

#[test]
fn an_http_server_that_is_not_distlock_is_a_store_error_and_never_shows_the_token() {
    let db = Db::sqlite();
    let secret = format!("dl_{}", "5a".repeat(32));
    // (its answer, echoes the request) for every command that reads an outcome off a status.
    let impostors = [
        ("404 Not Found", false),
        ("403 Forbidden", false),
        ("204 No Content", false),
        ("200 OK", true),
        ("400 Bad Request", true),
        ("418 I'm a teapot", true),
        ("500 Internal Server Error", true),
    ];
    for (status, echo) in impostors {
        let url = impostor(status, echo);
        for args in [
            vec!["status", "x"],
            vec!["release", "x", "--owner", "o"],
            vec!["renew", "x", "--owner", "o", "--ttl", "30"],
            vec!["acquire", "x", "--owner", "o", "--ttl", "30"],
            vec!["break", "x", "--reason", "r"],
            vec!["list"],
            vec!["log"],
        ] {
            let mut cmd = via(&db, &url);
            cmd.env("DISTLOCK_TOKEN", &secret);
            let out = run(&mut cmd, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(74),
                "{status} {args:?}: {}",
                describe(&out)
            );
            assert!(
                out.stdout.is_empty(),
                "{status} {args:?}: {}",
                describe(&out)
            );
            assert_eq!(stderr.lines().count(), 1, "{status} {args:?}: {stderr}");
            assert!(
                !stderr.contains(&secret[3..20]),
                "{status} {args:?}: the token shows: {stderr}"
            );
            assert!(
                stderr.contains("not as a distlock server does"),
                "{status} {args:?}: {stderr}"
            );
        }
    }
}

#[test]
fn a_server_url_with_a_bad_port_or_a_bad_token_is_a_usage_error_at_once() {
    let db = Db::sqlite();
    for url in [
        "http://127.0.0.1:99999",
        "http://127.0.0.1:0",
        "http://127.0.0.1:abc",
        "http://[::1:7878",
        "http://fe80::1:7878",
    ] {
        let started = Instant::now();
        let out = run(&mut via(&db, url), &["status", "x"]);
        assert_eq!(out.status.code(), Some(64), "{url}: {}", describe(&out));
        assert!(started.elapsed() < Duration::from_secs(3), "{url}: at once");
    }
    let server = Server::start(&db);
    let url = base(&server);
    for token in ["dl_a\nX-Evil: 1", "dl_ab cd", "dl_é", "\u{7}"] {
        let mut cmd = via(&db, &url);
        cmd.env("DISTLOCK_TOKEN", token);
        let out = run(&mut cmd, &["status", "x"]);
        assert_eq!(out.status.code(), Some(64), "{token:?}: {}", describe(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("DISTLOCK_TOKEN"), "{stderr}");
        assert!(
            !stderr.contains("dl_a") && !stderr.contains("X-Evil"),
            "{stderr}"
        );
    }
    // Spaces around a token are trimmed.
    let mut cmd = via(&db, &url);
    cmd.env("DISTLOCK_TOKEN", "  dl_unused  ");
    let out = run(&mut cmd, &["status", "x"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
}

/// No request of `run`'s outlives its lease: a renewal sent to a server that stopped answering
/// (a proxy in front of it black-holes every byte) is given up when the lease it would renew
/// ends, not held open for the client's own timeout of 10 s.
#[test]
fn a_renewal_to_a_server_that_stopped_answering_is_given_up_when_the_lease_ends() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    let proxy = Proxy::start(server.addr);
    let url = format!("http://{}", proxy.addr);
    let started = db.file("started");
    let mut cmd = via(&db, &url);
    cmd.args(["run", "--resource", "hb", "--ttl", "6", "--", "sh", "-c"])
        .arg(format!("touch '{}'; exec sleep 30", started.display()));
    let guard = Proc::spawn(&mut cmd, db.dir.path(), "guard");
    wait_until(Duration::from_secs(20), "the command never started", || {
        started.exists()
    });
    // Its first renewal is due 2 s after the grant: black-holed from here on.
    proxy.black_hole();
    std::thread::sleep(Duration::from_millis(300));
    // The lease ends by the server's last word on it at the latest (any renewal that got
    // through before the black hole moved it there), and `run` counts it from earlier.
    let held = answer(&run(&mut via(&db, &base(&server)), &["status", "hb"]), 0);
    let expires = timestamp_millis(held["lock"]["expires_at"].as_str().expect("expires_at"));
    let judged_at = expires + 2_500;
    while now_millis() < judged_at {
        std::thread::sleep(Duration::from_millis(50));
    }
    let (chunks, open) = (proxy.client_chunks(), proxy.open());
    // `run` is still at it (its release, black-holed too, takes its own 10 s): its
    // connections are its to close, not the process's exit.
    assert!(
        !is_gone(guard.pid().as_raw()),
        "run exited before the lease's end could be judged"
    );
    // The first connection is `run`'s own (its acquire, then its release); every later one
    // that begins with a POST is the heartbeat's, renewing.
    let renewals: Vec<usize> = (1..chunks.len())
        .filter(|&at| chunks[at].first().is_some_and(|(byte, _)| *byte == b'P'))
        .collect();
    assert!(
        !renewals.is_empty(),
        "no renewal reached the proxy: {chunks:?}"
    );
    let still_open: Vec<usize> = renewals.iter().copied().filter(|&at| open[at]).collect();
    assert!(
        still_open.is_empty(),
        "renewals {still_open:?} (of {renewals:?}) were still open 2.5 s after the lease ended"
    );
    let out = guard.finish(Duration::from_secs(30));
    assert_eq!(out.code(), Some(124), "{}", out.describe());
}
