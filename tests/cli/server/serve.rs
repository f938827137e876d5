//! The lock server, `distlock serve` (the contract's "The lock server"), from outside: a real
//! HTTP client (`ureq`) and raw TCP connections against a real server process, over the test's
//! store (SQLite, and PostgreSQL through [`each_store`] when the suite has a server), with the
//! CLI run beside it on the same `--db` to say what the store holds and what the CLI prints for
//! the same outcome.
//!
//! The seed's attacks, through HTTP as the seed wrote them:
//!
//! | attack | test |
//! | --- | --- |
//! | ATK-01 acquire of a held lock | [`atk_01_acquire_of_a_lock_another_owner_holds_is_200_busy_and_changes_nothing`] |
//! | ATK-02 release of another's lock | [`atk_02_release_of_another_owners_lock_is_403_by_body_or_query`] |
//! | ATK-03 steal after expiry | [`atk_03_after_expiry_anyone_may_take_the_lock_and_the_old_owner_gets_403`] |
//! | ATK-04 renew of another's lock | [`atk_04_renew_of_another_owners_lock_is_403_whatever_the_ttl`] |
//! | ATK-05 zero or negative TTL | rows `ATK-05` of [`bad_bodies_are_422_problem_documents_and_change_nothing`] |
//! | ATK-06 SQL in the resource | [`atk_06_sql_in_names_owners_and_prefixes_is_taken_literally`] |
//! | ATK-07 empty owner | rows `ATK-07` of [`bad_bodies_are_422_problem_documents_and_change_nothing`] |
//! | ATK-08 string or float TTL | rows `ATK-08` of [`bad_bodies_are_422_problem_documents_and_change_nothing`] |
//! | ATK-09 same-owner re-acquire | [`atk_09_the_holder_acquires_again_the_same_tenure_and_fence`] |
//! | ATK-10 racing acquirers | [`atk_10_twenty_owners_post_at_once_and_exactly_one_acquires`] |
//! | ATK-11 status of a missing or expired lock | [`atk_11_status_of_a_missing_or_expired_lock_is_404_without_stale_data`] |
//! | ATK-12 very long names | [`atk_12_and_bad_names_are_422_on_every_endpoint`], and past 16 KiB [`oversized_requests_are_413_414_or_431`] |
//!
//! Answers are compared with what the CLI prints on the same store (parsed objects; bytes where
//! the contract pins them: a plain exclusive lock and its busy answer). Every non-2xx answer is
//! checked as a problem document (`application/problem+json`, `type`, `title`, `status`,
//! `detail`), carrying the members of the CLI's object for the same outcome where there is one.
//!
//! "Nothing changed" is checked with the CLI's `list` and `log` where that is the point (the
//! 422 tables) and with the server's own `GET /locks` and `GET /log` elsewhere (two PostgreSQL
//! processes per look add up); waiter counts are the server's `"waiting"`, cross-checked with
//! the CLI's `status` at the steps that matter. The HTTP client opens a connection per request;
//! what a kept-alive connection meets after a refused request is a test of its own.
//!
//! Timing: bounds are upper bounds with slack for 2 shared cores; the slow cases (a request
//! answered after 30 s, a trickling client dropped after 10 s, places that lapse after 5 s) run
//! both stores at the same time ([`each_store_at_once`]) to keep the module's wall time down.
//!
//! `/metrics` names are not fixed by the contract; what is assumed of them is written at
//! [`metrics_count_requests_by_route_and_status_and_show_live_tenures_and_waiters`].
//!
//! Lock sets (`POST /sets`, `/sets/renew`, `/sets/release`) have a module of their own,
//! [`sets`], with these helpers.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Barrier;
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::common::output::{event_names, keys, now_millis};
use crate::common::process::{wait_for, wait_until};
use crate::common::proxy::Proxy;
use crate::common::server::{Reply, Server, lock_path, segment};
use crate::common::store::{Db, Kind, each_store};
use crate::common::tenure::{Mode, Tenure, busy, held, mismatch};

mod http;
mod sets;

/// The seed's resource.
const P42: &str = "payment:42";

/// How long after the holder lets go a waiting request may take to be answered "acquired"
/// (immediate by the contract; slack for a loaded machine).
const HANDOVER: Duration = Duration::from_millis(2500);

/// How long a waiter may take to show up in `status`'s count.
const QUEUED: Duration = Duration::from_secs(15);

/// How long a place that nobody comes back for may take to lapse: 5 s by the contract, plus
/// slack for the store's own look at dead waiters and a loaded machine.
const LAPSED: Duration = Duration::from_secs(9);

// ---------------------------------------------------------------------------------------------
// Helpers

/// Runs `test` against a fresh SQLite store and, when the suite has a PostgreSQL server, a
/// fresh PostgreSQL database, both at the same time: for the tests that mostly wait.
fn each_store_at_once(test: impl Fn(&Db) + Sync) {
    let sqlite = Db::sqlite();
    let postgres = Db::postgres();
    thread::scope(|s| {
        let test = &test;
        s.spawn(|| test(&sqlite));
        if let Some(pg) = &postgres {
            s.spawn(move || test(pg));
        }
    });
}

/// The body of an acquire by `owner` for `ttl` seconds.
fn by(owner: &str, ttl: u64) -> Value {
    json!({ "owner": owner, "ttl_seconds": ttl })
}

/// `POST /locks/{resource}` that must acquire: a new or re-acquired tenure in `mode`, its lease
/// exactly `ttl` seconds, the answer exactly `{"acquired":true,"lock":{…}}`.
fn take_in(server: &Server, resource: &str, body: &Value, mode: Mode) -> Tenure {
    let reply = server.post(&lock_path(resource, ""), body);
    let answer = reply.json(200);
    assert_eq!(keys(&answer), ["acquired", "lock"], "{}", reply.describe());
    assert_eq!(answer["acquired"], true, "{}", reply.describe());
    let tenure = Tenure::read(&answer["lock"], mode);
    assert_eq!(tenure.resource, resource, "{}", reply.describe());
    let ttl = body["ttl_seconds"].as_i64().expect("a ttl");
    assert_eq!(
        tenure.expires_ms() - tenure.acquired_ms(),
        ttl * 1000,
        "the lease is the ttl: {}",
        reply.describe()
    );
    tenure
}

/// An exclusive acquire of `resource` by `owner` for `ttl` seconds, through the server.
fn take(server: &Server, resource: &str, owner: &str, ttl: u64) -> Tenure {
    take_in(server, resource, &by(owner, ttl), Mode::Exclusive)
}

/// Sleeps until the test's clock is past `tenure`'s end (both stores here use this host's
/// clock).
fn past(tenure: &Tenure) {
    let left = tenure.expires_ms() + 150 - now_millis();
    if let Ok(left) = u64::try_from(left) {
        sleep(Duration::from_millis(left));
    }
}

/// `{KEY: false, "resource": RESOURCE, "reason": REASON}`: what `release` (`released`),
/// `renew` (`renewed`) or `break` (`broken`) print when refused.
fn refused(key: &str, resource: &str, reason: &str) -> Value {
    json!({ key: false, "resource": resource, "reason": reason })
}

/// `{"held":false,"resource":RESOURCE}`: `status` of a lock nobody holds.
fn not_held(resource: &str) -> Value {
    json!({ "held": false, "resource": resource })
}

/// Polls `count` until it says `k`; fails the test, naming `what`, if it does not within
/// `limit`. Returns how long it took.
fn until_counted(what: &str, k: u64, limit: Duration, mut count: impl FnMut() -> u64) -> Duration {
    let start = Instant::now();
    let mut seen = 0;
    let counted = wait_for(limit, || {
        seen = count();
        if seen != k {
            sleep(Duration::from_millis(20));
        }
        seen == k
    });
    assert!(
        counted,
        "{what} should count {k} waiting within {limit:?}; it counts {seen}"
    );
    start.elapsed()
}

/// The live waiters for `resource` that the server counts: `"waiting"` in its status answer
/// (200), or in its problem document (404), absent for none.
fn waiting_via(server: &Server, resource: &str) -> u64 {
    let reply = server.get(&lock_path(resource, ""));
    let answer = match reply.status {
        200 => reply.json(200),
        _ => reply.problem(404),
    };
    answer.get("waiting").map_or(0, |k| {
        k.as_u64()
            .filter(|&k| k > 0)
            .unwrap_or_else(|| panic!("\"waiting\" is a positive integer when present: {answer}"))
    })
}

/// Waits until the server's status of `resource` counts `k` live waiters (within `limit`).
/// Returns how long it took.
fn until_waiting(server: &Server, resource: &str, k: u64, limit: Duration) -> Duration {
    until_counted(&format!("GET /locks/{resource}"), k, limit, || {
        waiting_via(server, resource)
    })
}

/// What the server shows of its whole store: `GET /locks` and `GET /log`, so that a test can
/// check that requests changed nothing (the CLI's view of the same, [`Db::state`], costs two
/// processes; it is used where the check is the point).
fn state(server: &Server) -> String {
    let locks = server.get("/locks");
    let log = server.get("/log");
    assert_eq!((locks.status, log.status), (200, 200));
    locks.text() + &log.text()
}

/// Runs `request` and says when it was answered.
fn timed(request: impl FnOnce() -> Reply) -> (Reply, Instant) {
    let reply = request();
    (reply, Instant::now())
}

/// A JSON object written out by hand from `(key, JSON text)` pairs, so that numbers such as
/// `60.5`, `3600.0` and `1e3` reach the server as written.
fn object(members: &[(&str, &str)]) -> String {
    let members: Vec<String> = members
        .iter()
        .map(|(key, value)| format!("{}:{value}", json!(key)))
        .collect();
    format!("{{{}}}", members.join(","))
}

/// A JSON string literal.
fn quoted(text: &str) -> String {
    json!(text).to_string()
}

/// Sends `METHOD PATH` with `body` (JSON text, as `application/json`) when given.
fn send(server: &Server, method: &str, path: &str, body: Option<&str>) -> Reply {
    match (method, body) {
        ("GET", None) => server.get(path),
        ("POST", Some(body)) => server.post_as(path, "application/json", body.as_bytes()),
        ("DELETE", None) => server.delete(path),
        ("DELETE", Some(body)) => server.delete_as(path, "application/json", body.as_bytes()),
        _ => panic!("no such request in these tests: {method} {path} {body:?}"),
    }
}

/// A raw HTTP/1.1 request that asks the server to close the connection after its answer.
fn raw_request(method: &str, target: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}")
            .into_bytes();
    if !body.is_empty() {
        request.extend_from_slice(
            format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            )
            .as_bytes(),
        );
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body);
    request
}

// ---------------------------------------------------------------------------------------------
// Starting, logging, the store it serves

#[test]
fn serve_says_where_it_listens_answers_health_and_logs_one_line_per_request() {
    each_store(|db| {
        let server = Server::start(db);
        assert_eq!(server.get("/health").status, 200);
        server.get("/locks/nothinghere").problem(404);
        take(&server, "logged", "w1", 60);
        let expected = [
            ("GET", "/health", "200"),
            ("GET", "/locks/nothinghere", "404"),
            ("POST", "/locks/logged", "200"),
        ];
        wait_until(Duration::from_secs(5), "a stderr line per request", || {
            server.stderr().lines().count() > expected.len()
        });
        let stderr = server.stderr();
        let lines: Vec<&str> = stderr.lines().skip(1).collect();
        assert_eq!(
            lines.len(),
            expected.len(),
            "after the first line, one line per request: {stderr}"
        );
        for (line, (method, path, status)) in lines.iter().zip(expected) {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert!(
                words.contains(&method)
                    && line.contains(path)
                    && line
                        .split(|c: char| !c.is_ascii_digit())
                        .any(|number| number == status),
                "a log line names the method, path and status ({method} {path} {status}): \
                 {line:?}"
            );
        }
    });
}

#[test]
fn serve_takes_its_store_from_distlock_db_as_every_command_does() {
    each_store(|db| {
        let server = Server::start_from_env(db);
        let tenure = take(&server, "from-env", "w1", 60);
        assert_eq!(db.status("from-env"), (0, held(&[&tenure])));
    });
}

// ---------------------------------------------------------------------------------------------
// Acquire, status, and the CLI beside the server

#[test]
fn acquire_answers_what_the_cli_prints_and_the_cli_sees_the_lock() {
    each_store(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        let reply = server.post(&path, &by("w1", 60));
        let answer = reply.json(200);
        let tenure = Tenure::read(&answer["lock"], Mode::Exclusive);
        assert_eq!((&*tenure.resource, &*tenure.owner), (P42, "w1"));
        assert_eq!(tenure.expires_ms() - tenure.acquired_ms(), 60_000);
        assert_eq!(
            reply.line(200),
            format!(r#"{{"acquired":true,"lock":{}}}"#, tenure.plain_lock_text()),
            "a plain exclusive lock is exactly the CLI's line"
        );

        // The CLI on the same store sees it, and GET answers what `status` prints.
        let (code, status) = db.status(P42);
        assert_eq!((code, &status), (0, &held(&[&tenure])));
        assert_eq!(server.get(&path).json(200), status);

        // Busy for another owner: 200, what `acquire` prints with 75, byte for byte.
        let reply = server.post(&path, &by("w2", 60));
        assert_eq!(reply.json(200), busy(P42, &[&tenure]));
        assert_eq!(reply.line(200), tenure.plain_busy_text());
        assert_eq!(
            reply.json(200),
            db.json(&["acquire", P42, "--owner", "w2", "--ttl", "60"], 75)
        );

        // The holder's re-acquire by the CLI and by the server: the same answer, the same
        // tenure.
        let by_cli = db.json(&["acquire", P42, "--owner", "w1", "--ttl", "60"], 0);
        let by_server = server.post(&path, &by("w1", 60)).json(200);
        assert_eq!(keys(&by_cli), keys(&by_server));
        let (cli, srv) = (
            Tenure::read(&by_cli["lock"], Mode::Exclusive),
            Tenure::read(&by_server["lock"], Mode::Exclusive),
        );
        assert_eq!((cli.fence, srv.fence), (tenure.fence, tenure.fence));

        // A lock the CLI took is busy through the server too, and the other way round.
        let by_cli = db.json(&["acquire", "cli-held", "--owner", "c1", "--ttl", "60"], 0);
        let cli_tenure = Tenure::read(&by_cli["lock"], Mode::Exclusive);
        let answer = server
            .post(&lock_path("cli-held", ""), &by("c2", 60))
            .json(200);
        assert_eq!(answer, busy("cli-held", &[&cli_tenure]));
        let srv_tenure = take(&server, "server-held", "s1", 60);
        assert_eq!(
            db.json(
                &["acquire", "server-held", "--owner", "s2", "--ttl", "60"],
                75
            ),
            busy("server-held", &[&srv_tenure])
        );
    });
}

#[test]
fn atk_01_acquire_of_a_lock_another_owner_holds_is_200_busy_and_changes_nothing() {
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let before = state(&server);
        for attacker in ["attacker", "W1", "w1x"] {
            // The seed's path, the colon as written.
            let answer = server
                .post(&format!("/locks/{P42}"), &by(attacker, 3600))
                .json(200);
            assert_eq!(answer, busy(P42, &[&tenure]), "{attacker}");
        }
        assert_eq!(state(&server), before, "a busy answer changes nothing");
        assert_eq!(db.status(P42), (0, held(&[&tenure])));
    });
}

#[test]
fn atk_02_release_of_another_owners_lock_is_403_by_body_or_query() {
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let forbidden = refused("released", P42, "forbidden");
        assert_eq!(
            db.json(&["release", P42, "--owner", "attacker"], 77),
            forbidden
        );
        let before = state(&server);
        for attacker in ["attacker", "W1", "w1x"] {
            server
                .delete_with(&lock_path(P42, ""), &json!({ "owner": attacker }))
                .problem_carrying(403, &forbidden);
            let query = format!("?owner={}", segment(attacker));
            server
                .delete(&lock_path(P42, &query))
                .problem_carrying(403, &forbidden);
        }
        assert_eq!(state(&server), before, "a 403 changes nothing");
        assert_eq!(db.status(P42), (0, held(&[&tenure])));
    });
}

#[test]
fn atk_03_after_expiry_anyone_may_take_the_lock_and_the_old_owner_gets_403() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let old = take(&server, P42, "w1", 1);
        past(&old);
        let stolen = take(&server, P42, "attacker", 60);
        assert!(stolen.fence > old.fence, "{stolen:?} after {old:?}");
        server
            .delete_with(&lock_path(P42, ""), &json!({"owner": "w1"}))
            .problem_carrying(403, &refused("released", P42, "forbidden"));
        server
            .post(&lock_path(P42, "/renew"), &by("w1", 60))
            .problem_carrying(403, &refused("renewed", P42, "forbidden"));
        assert_eq!(server.get(&lock_path(P42, "")).json(200), held(&[&stolen]));
        let events = server
            .get(&format!("/log?resource={}", segment(P42)))
            .ndjson();
        let last = events.last().expect("history");
        assert_eq!(
            (&last["event"], &last["owner"], &last["previous_owner"]),
            (&json!("taken_over"), &json!("attacker"), &json!("w1")),
            "{events:?}"
        );
    });
}

#[test]
fn atk_04_renew_of_another_owners_lock_is_403_whatever_the_ttl() {
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let forbidden = refused("renewed", P42, "forbidden");
        assert_eq!(
            db.json(&["renew", P42, "--owner", "attacker", "--ttl", "3600"], 77),
            forbidden
        );
        let before = state(&server);
        for ttl in [3600, 60, 1] {
            server
                .post(&lock_path(P42, "/renew"), &by("attacker", ttl))
                .problem_carrying(403, &forbidden);
        }
        assert_eq!(state(&server), before, "a 403 changes nothing");
        assert_eq!(db.status(P42), (0, held(&[&tenure])));
    });
}

/// ATK-06's names: a statement ended early, and a condition that is always true.
const INJECTED: &str = "payment:42'; DROP TABLE locks; --";
const ALWAYS_TRUE: &str = "x' OR '1'='1";

#[test]
fn atk_06_sql_in_names_owners_and_prefixes_is_taken_literally() {
    each_store(|db| {
        let server = Server::start(db);
        let injected = take(&server, INJECTED, "w1", 60);
        take(&server, ALWAYS_TRUE, "w1", 60);
        assert_eq!(db.status(INJECTED), (0, held(&[&injected])));
        let payment = take(&server, P42, "w2", 60);
        server
            .get(&lock_path("unrelated", ""))
            .problem_carrying(404, &not_held("unrelated"));
        // SQL in the owner is an owner like any other: not the holder.
        let query = format!("?owner={}", segment(ALWAYS_TRUE));
        server
            .delete(&lock_path(P42, &query))
            .problem_carrying(403, &refused("released", P42, "forbidden"));
        server
            .delete(&lock_path(ALWAYS_TRUE, "?owner=w1"))
            .no_content();
        let all = json!({"locks": [payment.lock(), injected.lock()]});
        assert_eq!(server.get("/locks").json(200), all);
        assert_eq!(db.json(&["list"], 0), all);
        // A prefix matches names that start with it, and nothing else: LIKE's wildcards and
        // quotes are characters.
        for (prefix, expected) in [
            ("%", json!({"locks": []})),
            ("_", json!({"locks": []})),
            ("payment:42_", json!({"locks": []})),
            (ALWAYS_TRUE, json!({"locks": []})),
            ("payment:42'", json!({"locks": [injected.lock()]})),
        ] {
            let answer = server
                .get(&format!("/locks?prefix={}", segment(prefix)))
                .json(200);
            assert_eq!(answer, expected, "prefix {prefix:?}");
            if matches!(prefix, "%" | "payment:42'") {
                assert_eq!(
                    answer,
                    db.json(&["list", "--prefix", prefix], 0),
                    "prefix {prefix:?}"
                );
            }
        }
    });
}

#[test]
fn atk_09_the_holder_acquires_again_the_same_tenure_and_fence() {
    each_store(|db| {
        let server = Server::start(db);
        let first = take(&server, P42, "w1", 60);
        sleep(Duration::from_millis(5));
        let shorter = take(&server, P42, "w1", 30);
        sleep(Duration::from_millis(5));
        let trimmed = take(&server, P42, " w1 ", 60);
        assert_eq!(trimmed.owner, "w1", "owners are trimmed");
        for again in [&shorter, &trimmed] {
            assert_eq!(again.fence, first.fence, "the same tenure: {again:?}");
        }
        assert!(first.acquired_ms() < shorter.acquired_ms());
        assert!(shorter.acquired_ms() < trimmed.acquired_ms());
        assert_eq!(db.status(P42), (0, held(&[&trimmed])));
        assert_eq!(
            event_names(&db.log(&[P42])),
            ["acquired", "extended", "extended"]
        );
    });
}

#[test]
fn atk_10_twenty_owners_post_at_once_and_exactly_one_acquires() {
    const RACERS: usize = 20;
    each_store(|db| {
        let server = Server::start(db);
        let rounds = if db.kind == Kind::Sqlite { 4 } else { 2 };
        for round in 0..rounds {
            let resource = format!("race:{round}");
            let path = lock_path(&resource, "");
            let barrier = Barrier::new(RACERS);
            let answers: Vec<Value> = thread::scope(|s| {
                let racers: Vec<_> = (0..RACERS)
                    .map(|i| {
                        let (server, path, barrier) = (&server, &path, &barrier);
                        s.spawn(move || {
                            barrier.wait();
                            server.post(path, &by(&format!("racer-{i}"), 60)).json(200)
                        })
                    })
                    .collect();
                racers
                    .into_iter()
                    .map(|racer| racer.join().expect("a racer"))
                    .collect()
            });
            let winners: Vec<&Value> = answers.iter().filter(|a| a["acquired"] == true).collect();
            assert_eq!(winners.len(), 1, "exactly one acquires: {answers:#?}");
            let winner = Tenure::read(&winners[0]["lock"], Mode::Exclusive);
            for answer in answers.iter().filter(|a| a["acquired"] != true) {
                assert_eq!(answer, &busy(&resource, &[&winner]));
            }
            assert_eq!(db.status(&resource), (0, held(&[&winner])));
            assert_eq!(
                event_names(&db.log(&[&resource])),
                ["acquired"],
                "only the winner wrote anything"
            );
        }
    });
}

#[test]
fn atk_11_status_of_a_missing_or_expired_lock_is_404_without_stale_data() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let missing = not_held("nonexistent");
        assert_eq!(db.status("nonexistent"), (1, missing.clone()));
        server
            .get(&lock_path("nonexistent", ""))
            .problem_carrying(404, &missing);
        let tenure = take(&server, P42, "w1", 2);
        assert_eq!(server.get(&lock_path(P42, "")).json(200), held(&[&tenure]));
        past(&tenure);
        let problem = server
            .get(&lock_path(P42, ""))
            .problem_carrying(404, &not_held(P42));
        assert!(
            problem.get("lock").is_none() && !problem.to_string().contains(&tenure.expires_at),
            "no stale lock data in {problem}"
        );
        assert_eq!(server.get("/locks").json(200), json!({"locks": []}));
    });
}

// ---------------------------------------------------------------------------------------------
// Bad input: 422 (and 400, 415, 413, 414/431), always a problem document, nothing changed

/// One bad request: what it is about (an ATK id or the rule), and what it sends.
#[derive(Clone)]
struct Bad {
    id: &'static str,
    method: &'static str,
    path: String,
    body: Option<String>,
}

fn bad(id: &'static str, method: &'static str, path: &str, body: Option<String>) -> Bad {
    Bad {
        id,
        method,
        path: path.to_owned(),
        body,
    }
}

/// Acquires that must be refused (422) on `path`, a held lock or a free one.
fn bad_acquires(path: &str) -> Vec<Bad> {
    let owner = ("owner", r#""w1""#);
    let ttl = ("ttl_seconds", "60");
    let post = |id, members: &[(&str, &str)]| bad(id, "POST", path, Some(object(members)));
    let mut rows = Vec::new();
    for t in ["0", "-100", "-1"] {
        rows.push(post("ATK-05", &[owner, ("ttl_seconds", t)]));
    }
    for t in [
        r#""3600""#,
        "60.5",
        "3600.0",
        "1e3",
        "0.5",
        "true",
        "[60]",
        "null",
    ] {
        rows.push(post("ATK-08", &[owner, ("ttl_seconds", t)]));
    }
    for t in ["31536001", "99999999999", "18446744073709551616"] {
        rows.push(post("ttl past 365 days", &[owner, ("ttl_seconds", t)]));
    }
    rows.push(post("ttl missing", &[owner]));
    for o in [r#""""#, r#"" ""#, r#""   ""#, r#""\t""#, r#"" \t ""#] {
        rows.push(post("ATK-07", &[("owner", o), ttl]));
    }
    rows.push(post("ATK-07: owner missing", &[ttl]));
    let long_owner = quoted(&"o".repeat(256));
    for o in [
        "null",
        "42",
        r#""w\n1""#,
        r#""w\u007f""#,
        r#""w\u0001""#,
        &long_owner,
    ] {
        rows.push(post("invalid owner", &[("owner", o), ttl]));
    }
    rows.push(post("unknown field", &[owner, ttl, ("ttl", "60")]));
    rows.push(post("unknown field", &[owner, ttl, ("resource", r#""x""#)]));
    for s in [r#""yes""#, "1"] {
        rows.push(post("shared not a bool", &[owner, ttl, ("shared", s)]));
    }
    for l in ["0", "-1", "10001", r#""2""#, "2.5"] {
        rows.push(post("limit out of 1..=10000", &[owner, ttl, ("limit", l)]));
    }
    rows.push(post(
        "shared and limit",
        &[owner, ttl, ("shared", "true"), ("limit", "3")],
    ));
    let long_note = quoted(&"n".repeat(1025));
    for n in [r#""""#, r#"" ""#, r#""a\nb""#, &long_note] {
        rows.push(post("invalid note", &[owner, ttl, ("note", n)]));
    }
    for w in ["-1", "86401", r#""5""#] {
        rows.push(post(
            "wait_seconds out of 0..=86400",
            &[owner, ttl, ("wait_seconds", w)],
        ));
    }
    rows
}

/// Renewals, releases and breaks of `path` (held by w1) that must be refused (422).
fn bad_changes(path: &str) -> Vec<Bad> {
    let renew = format!("{path}/renew");
    let brk = format!("{path}/break");
    let owner = ("owner", r#""w1""#);
    let ttl = ("ttl_seconds", "60");
    let post = |id, at: &str, members: &[(&str, &str)]| bad(id, "POST", at, Some(object(members)));
    let delete = |id, members: &[(&str, &str)]| bad(id, "DELETE", path, Some(object(members)));
    let mut rows = Vec::new();
    for t in ["0", "-100"] {
        rows.push(post("ATK-05", &renew, &[owner, ("ttl_seconds", t)]));
    }
    for t in [r#""3600""#, "60.5", "3600.0"] {
        rows.push(post("ATK-08", &renew, &[owner, ("ttl_seconds", t)]));
    }
    rows.push(post(
        "ttl past 365 days",
        &renew,
        &[owner, ("ttl_seconds", "31536001")],
    ));
    rows.push(post("ttl missing", &renew, &[owner]));
    for o in [r#""""#, r#"" ""#] {
        rows.push(post("ATK-07", &renew, &[("owner", o), ttl]));
        rows.push(delete("ATK-07", &[("owner", o)]));
    }
    rows.push(post("ATK-07: owner missing", &renew, &[ttl]));
    rows.push(delete("ATK-07: owner missing", &[]));
    rows.push(bad("ATK-07: owner missing", "DELETE", path, None));
    rows.push(bad("ATK-07", "DELETE", &format!("{path}?owner="), None));
    rows.push(bad("ATK-07", "DELETE", &format!("{path}?owner=%20"), None));
    rows.push(bad(
        "invalid owner",
        "DELETE",
        &format!("{path}?owner=w%0A1"),
        None,
    ));
    rows.push(post(
        "unknown field",
        &renew,
        &[owner, ttl, ("shared", "true")],
    ));
    rows.push(delete("unknown field", &[owner, ttl]));
    for f in [r#""7""#, "1.5"] {
        rows.push(post(
            "fence not an integer",
            &renew,
            &[owner, ttl, ("fence", f)],
        ));
        rows.push(delete("fence not an integer", &[owner, ("fence", f)]));
    }
    for h in ["0", "-1", "31536001", r#""60""#, "1.5"] {
        rows.push(delete(
            "hold_at_least_seconds out of 1..=365 days",
            &[owner, ("hold_at_least_seconds", h)],
        ));
    }
    let long_reason = quoted(&"r".repeat(1025));
    rows.push(post("reason missing", &brk, &[]));
    for r in [r#""""#, r#"" ""#, r#""a\nb""#, "42", &long_reason] {
        rows.push(post("invalid reason", &brk, &[("reason", r)]));
    }
    let reason = ("reason", r#""stuck""#);
    for b in [r#""""#, r#"" ""#] {
        rows.push(post("invalid by", &brk, &[reason, ("by", b)]));
    }
    for o in [r#""""#, r#"" ""#] {
        rows.push(post("invalid owner", &brk, &[reason, ("owner", o)]));
    }
    rows.push(post("unknown field", &brk, &[reason, ("fence", "1")]));
    for query in ["limit=abc", "limit=-1", "since=-5s", "since=abc"] {
        rows.push(bad(
            "invalid log query",
            "GET",
            &format!("/log?{query}"),
            None,
        ));
    }
    rows
}

#[test]
fn bad_bodies_are_422_problem_documents_and_change_nothing() {
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let held_path = lock_path(P42, "");
        let rows: Vec<Bad> = [
            bad_acquires(&held_path),
            bad_acquires(&lock_path("fresh", "")),
            bad_changes(&held_path),
        ]
        .concat();
        let before = db.state();
        let mut wrong = Vec::new();
        for row in &rows {
            let reply = send(&server, row.method, &row.path, row.body.as_deref());
            if reply.status == 422 {
                reply.problem(422);
            } else {
                wrong.push(format!("{}: {}", row.id, reply.describe()));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {} bad requests were not refused with 422:\n{}",
            wrong.len(),
            rows.len(),
            wrong.join("\n")
        );
        assert_eq!(db.state(), before, "a 422 changes nothing");
        assert_eq!(db.status(P42), (0, held(&[&tenure])));

        // The edges of each rule are fine.
        take(&server, "ttl:max", "w1", 31_536_000);
        take(&server, "ttl:min", "w1", 1);
        let long_owner = "o".repeat(255);
        assert_eq!(
            take(&server, "owner:255", &long_owner, 60).owner,
            long_owner
        );
        let note = "n".repeat(1024);
        let answer = server
            .post(
                &lock_path("note:1024", ""),
                &json!({"owner": "w1", "ttl_seconds": 60, "note": note}),
            )
            .json(200);
        assert_eq!(answer["lock"]["note"], json!(note));
        take_in(
            &server,
            "limit:10000",
            &json!({"owner": "w1", "ttl_seconds": 60, "limit": 10_000}),
            Mode::Limit(10_000),
        );
        let answer = server
            .post(
                &held_path,
                &json!({"owner": "w2", "ttl_seconds": 60, "wait_seconds": 0}),
            )
            .json(200);
        assert_eq!(answer, busy(P42, &[&tenure]), "wait_seconds 0 tries once");
        take_in(
            &server,
            "wait:max",
            &json!({"owner": "w1", "ttl_seconds": 60, "wait_seconds": 86_400}),
            Mode::Exclusive,
        );
    });
}

#[test]
fn atk_12_and_bad_names_are_422_on_every_endpoint() {
    let mut names: Vec<String> = vec![
        // ATK-12: over 255 bytes of UTF-8 (a 10 MB name is past the 16 KiB head limit: see
        // `oversized_requests_are_413_414_or_431`).
        "x".repeat(256),
        "é".repeat(128),
        "€".repeat(86),
        format!("{}€", "a".repeat(253)),
        "x".repeat(8000),
    ]
    .into_iter()
    .map(|name| segment(&name))
    .collect();
    // Blank, and control characters (C0, DEL, C1), percent-encoded.
    names.extend(
        [
            " ",
            "   ",
            "\t",
            "a\nb",
            "a\tb",
            "a\x7f",
            "a\x01b",
            "\x1b[31mred",
            "a\rb",
            "\x1f",
            "\u{80}",
            "a\u{85}b",
            "\u{9f}",
            "\0",
        ]
        .map(segment),
    );
    // Not UTF-8 once decoded.
    names.extend(["a%FFb", "%E2%82", "%C0%AF"].map(str::to_owned));
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let before = db.state();
        let mut wrong = Vec::new();
        for name in &names {
            let at = |tail: &str| format!("/locks/{name}{tail}");
            let body = by("w1", 60).to_string();
            for (method, path, body) in [
                ("POST", at(""), Some(body.clone())),
                ("GET", at(""), None),
                ("DELETE", at("?owner=w1"), None),
                ("DELETE", at(""), Some(r#"{"owner":"w1"}"#.to_owned())),
                ("POST", at("/renew"), Some(body)),
                (
                    "POST",
                    at("/break"),
                    Some(r#"{"reason":"stuck"}"#.to_owned()),
                ),
                ("GET", format!("/log?resource={name}"), None),
            ] {
                let reply = send(&server, method, &path, body.as_deref());
                if reply.status == 422 {
                    reply.problem(422);
                } else {
                    let shown: String = path.chars().take(80).collect();
                    wrong.push(format!(
                        "{method} {shown}…: {} {}",
                        reply.status,
                        reply.text()
                    ));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "bad names not refused with 422:\n{}",
            wrong.join("\n")
        );
        // No name at all: not a lock of any name (no route, or a refused name), never a
        // lock named "".
        let reply = server.post("/locks/", &by("w1", 60));
        assert!(
            [404, 405, 422].contains(&reply.status),
            "{}",
            reply.describe()
        );
        reply.problem(reply.status);
        assert_eq!(db.state(), before, "a refused name changes nothing");
        assert_eq!(db.status(P42), (0, held(&[&tenure])));
        // 255 bytes are fine.
        for name in ["x".repeat(255), "€".repeat(85)] {
            take(&server, &name, "w1", 60);
        }
    });
}

#[test]
fn malformed_json_is_400_and_other_content_types_415() {
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let path = lock_path(P42, "");
        let renew = lock_path(P42, "/renew");
        let before = state(&server);
        // (An empty body is left out: read as no body at all, it is a missing owner, 422.)
        let malformed: [&[u8]; 6] = [
            b"{",
            b"{owner: \"w1\", ttl_seconds: 60}",
            br#"{"owner":"w1","ttl_seconds":60"#,
            br#"{"owner":"w1","ttl_seconds":60}}"#,
            b"not json",
            b"{\"owner\":\"w\xff1\",\"ttl_seconds\":60}",
        ];
        for body in malformed {
            for at in [&path, &renew] {
                server.post_as(at, "application/json", body).problem(400);
            }
            server
                .delete_as(&path, "application/json", body)
                .problem(400);
        }
        let acquire = by("w2", 60).to_string();
        let release = r#"{"owner":"w1"}"#;
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/json",
            "application/xml",
        ] {
            server
                .post_as(&path, content_type, acquire.as_bytes())
                .problem(415);
            server
                .post_as(&renew, content_type, by("w1", 60).to_string().as_bytes())
                .problem(415);
            server
                .delete_as(&path, content_type, release.as_bytes())
                .problem(415);
        }
        assert_eq!(state(&server), before, "a 400 or 415 changes nothing");
        assert_eq!(db.status(P42), (0, held(&[&tenure])));
        // JSON is JSON whatever its parameters, and media types are case-insensitive.
        for (i, content_type) in ["application/json; charset=utf-8", "Application/JSON"]
            .into_iter()
            .enumerate()
        {
            let resource = format!("typed:{i}");
            let reply = server.post_as(
                &lock_path(&resource, ""),
                content_type,
                by("w1", 60).to_string().as_bytes(),
            );
            assert_eq!(reply.json(200)["acquired"], true, "{}", reply.describe());
        }
    });
}

#[test]
fn oversized_requests_are_413_414_or_431() {
    const KIB: usize = 1024;
    each_store(|db| {
        let server = Server::start(db);
        let path = lock_path("big", "");
        // A body of exactly 64 KiB is fine; one byte more is not.
        let mut body = by("w1", 60).to_string().into_bytes();
        body.resize(64 * KIB, b' ');
        let at_limit = body.clone();
        body.push(b' ');
        let before = state(&server);
        server
            .raw(&raw_request("POST", &path, "", &body))
            .problem(413);
        let mut huge = by("w1", 60).to_string().into_bytes();
        huge.resize(1024 * KIB, b' ');
        server
            .raw(&raw_request("POST", &path, "", &huge))
            .problem(413);
        // The same with no Content-Length to go by: a chunked body that goes on past 64 KiB.
        let mut chunked = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        .into_bytes();
        let first = by("w1", 60).to_string();
        chunked.extend_from_slice(format!("{:x}\r\n{first}\r\n", first.len()).as_bytes());
        for _ in 0..9 {
            chunked.extend_from_slice(format!("{:x}\r\n", 8 * KIB).as_bytes());
            chunked.extend_from_slice(&[b' '; 8 * KIB]);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        server.raw(&chunked).problem(413);

        // A request line past 16 KiB (a name far past 255 bytes): 414 or 431, not a lock.
        let long_target = format!("/locks/{}", "x".repeat(20 * KIB));
        server
            .raw(&raw_request("GET", &long_target, "", b""))
            .problem_of(&[414, 431]);
        // Headers past 16 KiB: one long header, or many.
        let long_header = format!("X-Pad: {}\r\n", "p".repeat(20 * KIB));
        server
            .raw(&raw_request("GET", "/health", &long_header, b""))
            .problem_of(&[414, 431]);
        let many: String = (0..300)
            .map(|i| format!("X-Pad-{i}: {}\r\n", "p".repeat(60)))
            .collect();
        server
            .raw(&raw_request("GET", "/health", &many, b""))
            .problem_of(&[414, 431]);
        // ATK-12's 10 MB name: past 64 KiB of head the HTTP layer refuses it before distlock
        // sees it (a 431 with no body, as the README says), and the server is none the worse
        // for it.
        let target = format!("/locks/{}", "x".repeat(10 * 1024 * KIB));
        let refused = server.raw(&raw_request("POST", &target, "", b"{}"));
        assert_eq!(refused.status, 431, "a 10 MB request line");
        assert_eq!(
            state(&server),
            before,
            "an oversized request changes nothing"
        );

        // Below the limits, the same requests are served.
        let fine_header = format!("X-Pad: {}\r\n", "p".repeat(8 * KIB));
        let reply = server.raw(&raw_request("GET", "/health", &fine_header, b""));
        assert_eq!(reply.status, 200, "8 KiB of headers are fine");
        let reply = server.post_as(&path, "application/json", &at_limit);
        assert_eq!(reply.json(200)["acquired"], true, "{}", reply.describe());
    });
}

/// Reads one answer (its head, lower-cased, and a `Content-Length` body) from a connection
/// that the server may keep open; `Err` says what came instead.
fn read_answer(stream: &mut TcpStream) -> Result<(String, Vec<u8>), String> {
    let mut got = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return Ok((head, got[end + 4..end + 4 + length].to_vec()));
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                return Err(format!(
                    "the connection closed before a whole answer; got {:?}",
                    String::from_utf8_lossy(&got)
                ));
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => {
                return Err(format!(
                    "no whole answer ({e}); got {:?}",
                    String::from_utf8_lossy(&got)
                ));
            }
        }
    }
}

/// A request refused on its head alone (a bad name, a content type, a route) whose body is
/// still on its way: the server reads past that body and serves the next request on the
/// connection, or says `Connection: close` in its answer. Closing silently after an answer
/// that promised nothing breaks every client that keeps connections alive (a pooled client's
/// next request on it fails, though the server is fine).
#[test]
fn a_refused_request_whose_body_comes_late_leaves_its_connection_usable_or_says_close() {
    each_store(|db| {
        let server = Server::start(db);
        let body = by("w1", 60).to_string();
        for (target, content_type, status) in [
            (lock_path(&"x".repeat(256), ""), "application/json", 422),
            (lock_path("r", ""), "text/plain", 415),
            ("/nope".to_owned(), "application/json", 404),
        ] {
            let mut stream = server.connect();
            let head = format!(
                "POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n\
                 Content-Length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).expect("send the head");
            sleep(Duration::from_millis(100));
            // The server may have answered (and closed) already.
            let _ = stream.write_all(body.as_bytes());
            let shown = &target[..target.len().min(40)];
            let (answer, _) = read_answer(&mut stream)
                .unwrap_or_else(|e| panic!("POST {shown}… with its body late: {e}"));
            assert!(
                answer.starts_with(&format!("http/1.1 {status} ")),
                "POST {shown}…: {answer}"
            );
            let says_close = answer
                .lines()
                .any(|line| line.starts_with("connection:") && line.contains("close"));
            if says_close {
                continue;
            }
            let _ = stream.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
            let next = read_answer(&mut stream);
            assert!(
                next.as_ref()
                    .is_ok_and(|(head, _)| head.starts_with("http/1.1 200 ")),
                "POST {shown}… answered {status} without `Connection: close`, and the next \
                 request on that connection got: {next:?}"
            );
        }
    });
}

#[test]
fn unknown_routes_and_methods_answer_problem_documents() {
    each_store(|db| {
        let server = Server::start(db);
        let before = state(&server);
        server.get("/nope").problem(404);
        server.get("/locks/a/b").problem(404);
        for (method, target) in [
            ("PUT", "/locks/r"),
            ("PATCH", "/locks/r"),
            ("POST", "/health"),
            ("DELETE", "/locks"),
            ("GET", "/locks/r/renew"),
            ("GET", "/locks/r/break"),
            ("POST", "/log"),
        ] {
            let reply = server.raw(&raw_request(method, target, "", br#"{"owner":"w1"}"#));
            reply.problem_of(&[404, 405]);
        }
        assert_eq!(state(&server), before, "nothing was written");
    });
}

#[test]
fn percent_encoded_names_are_decoded_once() {
    each_store(|db| {
        let server = Server::start(db);
        let post = |target: &str, owner: &str| server.post(target, &by(owner, 60)).json(200);
        let answer = post("/locks/deploy%2Fprod", "w 1");
        let deploy = Tenure::read(&answer["lock"], Mode::Exclusive);
        assert_eq!(deploy.resource, "deploy/prod");
        assert_eq!(db.status("deploy/prod"), (0, held(&[&deploy])));
        assert_eq!(
            server.get("/locks/deploy%2Fprod").json(200),
            held(&[&deploy])
        );
        // Lower-case hex names the same lock: the holder re-acquires it.
        let again = post("/locks/deploy%2fprod", "w 1");
        let deploy = Tenure::read(&again["lock"], Mode::Exclusive);
        assert_eq!(deploy.resource, "deploy/prod");
        assert_eq!(again["lock"]["fence"], answer["lock"]["fence"]);
        for (target, name) in [
            ("/locks/%20a%20", " a "),
            ("/locks/a%25b", "a%b"),
            ("/locks/%2541", "%41"),
            ("/locks/a+b", "a+b"),
            ("/locks/a~b_c.d-e", "a~b_c.d-e"),
            ("/locks/payment:42", "payment:42"),
            ("/locks/%D0%BA%D0%BB%D1%8E%D1%87%2F%C3%A9", "ключ/é"),
        ] {
            let answer = post(target, "w1");
            assert_eq!(answer["lock"]["resource"], json!(name), "{target}");
            let status = server.get(&lock_path(name, "")).json(200);
            assert_eq!(status["lock"], answer["lock"], "{target} is {name:?}");
        }
        // The CLI finds them under their decoded names.
        assert_eq!(db.status(" a ").0, 0);
        assert_eq!(db.status("ключ/é").0, 0);
        server.get("/locks/a").problem(404);
        server.get("/locks/A").problem(404);
        assert_eq!(
            server.get("/locks?prefix=deploy%2F").json(200),
            json!({"locks": [deploy.lock()]})
        );
        server
            .delete("/locks/deploy%2Fprod?owner=w%201")
            .no_content();
        assert_eq!(db.status("deploy/prod").0, 1);
    });
}

// ---------------------------------------------------------------------------------------------
// Release, renew, break

#[test]
fn release_by_the_holder_is_204_by_body_or_query_and_404_once_gone() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        let first = take(&server, P42, "w1", 60);
        server
            .delete_with(&path, &json!({"owner": "w1"}))
            .no_content();
        assert_eq!(db.status(P42), (1, not_held(P42)));
        let second = take(&server, P42, "w1", 60);
        assert!(second.fence > first.fence);
        server.delete(&lock_path(P42, "?owner=w1")).no_content();
        let third = take(&server, P42, "w1", 60);
        server
            .delete_with(&path, &json!({"owner": " w1 "}))
            .no_content();
        assert!(third.fence > second.fence);
        let not_found = refused("released", P42, "not_found");
        assert_eq!(db.json(&["release", P42, "--owner", "w1"], 1), not_found);
        server
            .delete(&lock_path(P42, "?owner=w1"))
            .problem_carrying(404, &not_found);
        server
            .delete_with(&lock_path("never", ""), &json!({"owner": "w1"}))
            .problem_carrying(404, &refused("released", "never", "not_found"));
        // An expired lock belongs to no one: 404 for its owner and for others, never 403.
        let brief = take(&server, "brief", "w1", 1);
        past(&brief);
        for owner in ["w2", "w1"] {
            server
                .delete_with(&lock_path("brief", ""), &json!({ "owner": owner }))
                .problem_carrying(404, &refused("released", "brief", "not_found"));
        }
        assert_eq!(
            event_names(&db.log(&[P42])),
            [
                "acquired", "released", "acquired", "released", "acquired", "released"
            ]
        );
    });
}

#[test]
fn release_and_renew_name_one_tenure_by_its_fence() {
    each_store(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        let renew = lock_path(P42, "/renew");
        let old = take(&server, P42, "w1", 60);
        server.delete(&lock_path(P42, "?owner=w1")).no_content();
        let current = take(&server, P42, "w1", 60);
        let before = state(&server);
        // The owner's earlier tenure is gone: 404, and the current one is untouched.
        server
            .delete_with(&path, &json!({"owner": "w1", "fence": old.fence}))
            .problem_carrying(404, &refused("released", P42, "not_found"));
        server
            .post(
                &renew,
                &json!({"owner": "w1", "ttl_seconds": 60, "fence": old.fence}),
            )
            .problem_carrying(404, &refused("renewed", P42, "not_found"));
        // The current fence with another owner: 403.
        server
            .delete_with(&path, &json!({"owner": "w2", "fence": current.fence}))
            .problem_carrying(403, &refused("released", P42, "forbidden"));
        assert_eq!(state(&server), before);
        let answer = server
            .post(
                &renew,
                &json!({"owner": "w1", "ttl_seconds": 120, "fence": current.fence}),
            )
            .json(200);
        assert_eq!(answer["lock"]["fence"], json!(current.fence), "{answer}");
        server
            .delete_with(&path, &json!({"owner": "w1", "fence": current.fence}))
            .no_content();
        assert_eq!(db.status(P42).0, 1);
    });
}

#[test]
fn release_with_hold_at_least_keeps_the_lock_until_start_plus_hold() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 10);
        let path = lock_path(P42, "");
        server
            .delete_with(&path, &json!({"owner": "w2", "hold_at_least_seconds": 60}))
            .problem_carrying(403, &refused("released", P42, "forbidden"));
        let reply = server.delete_with(&path, &json!({"owner": "w1", "hold_at_least_seconds": 60}));
        let answer = reply.json(200);
        let (code, status) = db.status(P42);
        assert_eq!(code, 0, "kept: still held, {status}");
        let kept = Tenure::read(&status["lock"], Mode::Exclusive);
        assert_eq!(
            (kept.fence, &kept.acquired_at, kept.expires_ms()),
            (
                tenure.fence,
                &tenure.acquired_at,
                tenure.acquired_ms() + 60_000
            ),
            "kept until the tenure's start + the hold"
        );
        // Assumed: the body says which lock is kept and until when.
        let text = answer.to_string();
        assert!(
            text.contains(&json!(P42).to_string()) && text.contains(&kept.expires_at),
            "the answer names the kept lock and its end: {}",
            reply.describe()
        );
        assert_eq!(event_names(&db.log(&[P42])).last(), Some(&"kept"));
        // A hold already over: released as usual.
        let short = take(&server, "short", "w1", 60);
        sleep(Duration::from_millis(
            u64::try_from(short.acquired_ms() + 1100 - now_millis()).unwrap_or(0),
        ));
        server
            .delete_with(
                &lock_path("short", ""),
                &json!({"owner": "w1", "hold_at_least_seconds": 1}),
            )
            .no_content();
        assert_eq!(db.status("short").0, 1);
    });
}

#[test]
fn renew_by_the_holder_moves_the_lease_and_keeps_the_tenure() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let renew = lock_path(P42, "/renew");
        let tenure = take(&server, P42, "w1", 60);
        sleep(Duration::from_millis(5));
        for (owner, ttl) in [("w1", 120), (" w1 ", 10)] {
            let reply = server.post(&renew, &by(owner, ttl));
            let answer = reply.json(200);
            assert_eq!(keys(&answer), ["lock", "renewed"], "{}", reply.describe());
            assert_eq!(answer["renewed"], true);
            let renewed = Tenure::read(&answer["lock"], Mode::Exclusive);
            assert_eq!(
                (renewed.fence, &renewed.acquired_at, &*renewed.owner),
                (tenure.fence, &tenure.acquired_at, "w1"),
                "the same tenure"
            );
            let ttl = i64::try_from(ttl).expect("small");
            let since = renewed.expires_ms() - ttl * 1000;
            assert!(
                since > tenure.acquired_ms() && since < tenure.acquired_ms() + 60_000,
                "expires_at = now + ttl: {renewed:?}"
            );
            assert_eq!(db.status(P42), (0, held(&[&renewed])));
        }
        let not_found = refused("renewed", "other", "not_found");
        assert_eq!(
            db.json(&["renew", "other", "--owner", "w1", "--ttl", "60"], 1),
            not_found
        );
        server
            .post(&lock_path("other", "/renew"), &by("w1", 60))
            .problem_carrying(404, &not_found);
        assert_eq!(
            db.status("other"),
            (1, not_held("other")),
            "renew creates none"
        );
        // An expired lock is never renewed, for its owner or anyone.
        let brief = take(&server, "brief", "w1", 1);
        past(&brief);
        for owner in ["w1", "w2"] {
            server
                .post(&lock_path("brief", "/renew"), &by(owner, 60))
                .problem_carrying(404, &refused("renewed", "brief", "not_found"));
        }
        assert_eq!(db.status("brief").0, 1);
        assert_eq!(
            event_names(&db.log(&[P42])),
            ["acquired", "renewed", "renewed"]
        );
    });
}

#[test]
fn break_removes_tenures_on_record_and_is_404_when_nothing_matched() {
    each_store(|db| {
        let server = Server::start(db);
        let shared = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "shared": true});
        let r1 = take_in(&server, "db", &shared("r1"), Mode::Shared);
        let r2 = take_in(&server, "db", &shared("r2"), Mode::Shared);
        let brk = lock_path("db", "/break");
        let answer = server
            .post(
                &brk,
                &json!({"reason": "stuck backup", "owner": "r1", "by": "ops"}),
            )
            .json(200);
        assert_eq!(
            answer,
            json!({"broken": true, "resource": "db", "locks": [r1.lock()]})
        );
        assert_eq!(db.status("db"), (0, held(&[&r2])));
        let answer = server
            .post(&brk, &json!({"reason": "maintenance", "by": "ops"}))
            .json(200);
        assert_eq!(
            answer,
            json!({"broken": true, "resource": "db", "locks": [r2.lock()]})
        );
        assert_eq!(db.status("db").0, 1);
        let broken: Vec<(Value, Value, Value)> = db
            .log(&["db"])
            .into_iter()
            .filter(|e| e["event"] == "broken")
            .map(|e| (e["owner"].clone(), e["by"].clone(), e["reason"].clone()))
            .collect();
        assert_eq!(
            broken,
            [
                (json!("r1"), json!("ops"), json!("stuck backup")),
                (json!("r2"), json!("ops"), json!("maintenance"))
            ]
        );
        let not_found = refused("broken", "db", "not_found");
        assert_eq!(db.json(&["break", "db", "--reason", "again"], 1), not_found);
        server
            .post(&brk, &json!({"reason": "again"}))
            .problem_carrying(404, &not_found);
        // Only OWNER's tenure with `owner`: nothing of w2's to break.
        let other = take(&server, "other", "w1", 60);
        server
            .post(
                &lock_path("other", "/break"),
                &json!({"reason": "x", "owner": "w2"}),
            )
            .problem_carrying(404, &refused("broken", "other", "not_found"));
        assert_eq!(db.status("other"), (0, held(&[&other])));
        // The next tenure gets a higher fence, as always.
        let next = take(&server, "db", "w3", 60);
        assert!(next.fence > r2.fence);
    });
}

// ---------------------------------------------------------------------------------------------
// Lock modes and notes

#[test]
fn shared_semaphore_and_note_through_the_server_and_409_on_mismatch() {
    each_store(|db| {
        let server = Server::start(db);
        let shared = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "shared": true});
        let s1 = take_in(&server, "db", &shared("s1"), Mode::Shared);
        let s2 = take_in(&server, "db", &shared("s2"), Mode::Shared);
        let path = lock_path("db", "");
        let answer = server.post(&path, &by("w", 60)).json(200);
        assert_eq!(answer, busy("db", &[&s1, &s2]));
        assert_eq!(
            answer,
            db.json(&["acquire", "db", "--owner", "w", "--ttl", "60"], 75)
        );
        let status = server.get(&path).json(200);
        assert_eq!(status, held(&[&s1, &s2]));
        assert_eq!(status, db.status("db").1);
        // A semaphore beside shared holders, or a holder asking for another mode: 409.
        let expected = mismatch("db", &[&s1, &s2]);
        assert_eq!(
            db.json(
                &[
                    "acquire", "db", "--owner", "m", "--ttl", "60", "--limit", "3"
                ],
                78
            ),
            expected
        );
        let before = state(&server);
        server
            .post(&path, &json!({"owner": "m", "ttl_seconds": 60, "limit": 3}))
            .problem_carrying(409, &expected);
        let other_mode = db.json(&["acquire", "db", "--owner", "s1", "--ttl", "60"], 78);
        server
            .post(&path, &by("s1", 60))
            .problem_carrying(409, &other_mode);
        // At once, even for a request that would wait.
        let start = Instant::now();
        server
            .post(
                &path,
                &json!({"owner": "m", "ttl_seconds": 60, "limit": 3, "wait_seconds": 30}),
            )
            .problem_carrying(409, &expected);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "409 does not wait"
        );
        assert_eq!(state(&server), before, "a 409 changes nothing");

        // A semaphore of 2.
        let limit = |owner: &str, n: u32| json!({"owner": owner, "ttl_seconds": 60, "limit": n});
        let a = take_in(&server, "sem", &limit("a", 2), Mode::Limit(2));
        let b = take_in(&server, "sem", &limit("b", 2), Mode::Limit(2));
        let sem = lock_path("sem", "");
        assert_eq!(
            server.post(&sem, &limit("c", 2)).json(200),
            busy("sem", &[&a, &b])
        );
        for body in [limit("d", 3), shared("e"), by("f", 60)] {
            server
                .post(&sem, &body)
                .problem_carrying(409, &mismatch("sem", &[&a, &b]));
        }
        // `limit: 1` is the plain exclusive lock.
        take_in(&server, "one", &limit("o", 1), Mode::Exclusive);

        // A note travels with the tenure: in the lock, in status, in the busy answer.
        let note = "deploy v1.4 by alice, pipeline 812";
        let answer = server
            .post(
                &lock_path("noted", ""),
                &json!({"owner": "alice", "ttl_seconds": 60, "note": note}),
            )
            .json(200);
        assert_eq!(answer["lock"]["note"], json!(note), "{answer}");
        let status = server.get(&lock_path("noted", "")).json(200);
        assert_eq!(status, db.status("noted").1);
        assert_eq!(status["lock"], answer["lock"]);
        let busy = server
            .post(&lock_path("noted", ""), &by("bob", 60))
            .json(200);
        assert_eq!(busy["holder"]["note"], json!(note), "{busy}");
        assert_eq!(
            busy,
            db.json(&["acquire", "noted", "--owner", "bob", "--ttl", "60"], 75)
        );
    });
}

// ---------------------------------------------------------------------------------------------
// List, log, health, metrics

#[test]
fn list_and_log_answer_what_the_cli_prints() {
    each_store(|db| {
        let server = Server::start(db);
        take(&server, "deploy/prod", "w1", 60);
        take(&server, "deploy/stage", "w2", 60);
        take(&server, "other", "w3", 60);
        server.delete(&lock_path("other", "?owner=w3")).no_content();
        server
            .post(&lock_path("deploy/prod", "/renew"), &by("w1", 120))
            .json(200);
        take(&server, "other", "w4", 60);

        let all = server.get("/locks").json(200);
        assert_eq!(all["locks"].as_array().map(Vec::len), Some(3), "{all}");
        assert_eq!(all, db.json(&["list"], 0));
        let deploy = server.get("/locks?prefix=deploy%2F").json(200);
        assert_eq!(
            deploy["locks"].as_array().map(Vec::len),
            Some(2),
            "{deploy}"
        );
        assert_eq!(deploy, db.json(&["list", "--prefix", "deploy/"], 0));
        assert_eq!(
            server.get("/locks?prefix=nomatch").json(200),
            json!({"locks": []})
        );

        assert_eq!(server.get("/log").ndjson(), db.log(&[]));
        for (query, args) in [
            ("resource=other", &["other"][..]),
            ("resource=deploy%2Fprod", &["deploy/prod"]),
            (
                "resource=deploy%2Fprod&limit=1",
                &["deploy/prod", "--limit", "1"],
            ),
            ("limit=2", &["--limit", "2"]),
            ("since=1h", &["--since", "1h"]),
            ("since=3600&resource=other", &["other", "--since", "3600"]),
        ] {
            let events = server.get(&format!("/log?{query}")).ndjson();
            assert!(!events.is_empty(), "{query}");
            assert_eq!(events, db.log(args), "GET /log?{query} is `log {args:?}`");
        }
        let reply = server.get("/log?resource=never");
        assert_eq!(reply.ndjson(), Vec::<Value>::new());
        assert!(reply.body.is_empty());
    });
}

#[test]
fn health_is_503_while_postgresql_does_not_answer_and_200_once_it_does() {
    let Some(db) = Db::postgres() else { return };
    let (proxy, via_proxy) = Proxy::in_front_of(&db);
    let server = Server::start_at(&db, &via_proxy);
    assert_eq!(server.get("/health").status, 200);
    take(&server, "r", "w1", 60);
    proxy.kill();
    let mut last = None;
    let unavailable = wait_for(Duration::from_secs(20), || {
        let reply = server.get("/health");
        let down = reply.status == 503;
        last = Some(reply);
        down
    });
    let last = last.expect("asked");
    assert!(
        unavailable,
        "503 while the store is away: {}",
        last.describe()
    );
    last.problem(503);
    // A store error says what failed, not where the store lives nor who the server logs in
    // as (the server's log says it whole).
    let at = via_proxy
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .expect("user@host:port in the URL");
    let wait_for_503 = |path: &str| {
        let mut reply = server.get(path);
        for _ in 0..50 {
            if reply.status == 503 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            reply = server.get(path);
        }
        reply
    };
    let reply = wait_for_503("/locks/r");
    let problem = reply.problem(503);
    let detail = problem["detail"].as_str().expect("a detail");
    assert!(
        !detail.contains(at) && !detail.contains("postgres@"),
        "the store's address is not told: {detail}"
    );
    assert!(
        server.stderr().contains(at),
        "the server's log has it: {}",
        server.stderr()
    );
    proxy.restore();
    let mut status = 0;
    let back = wait_for(Duration::from_secs(20), || {
        status = server.get("/health").status;
        status == 200
    });
    assert!(back, "200 once the store answers again; last {status}");
    assert_eq!(server.get("/locks/r").json(200)["lock"]["owner"], "w1");
}

/// While the server's PostgreSQL is away, a request that arrives while the server seeks it for
/// another is answered with that search's outcome (503) when it ends, not after a search of its
/// own: no request waits for two (docs/src/guarantees/faults.md, "the server's store stops
/// answering").
#[test]
fn requests_that_arrive_while_the_store_is_sought_share_that_searchs_503() {
    let Some(db) = Db::postgres() else { return };
    let (proxy, via_proxy) = Proxy::in_front_of(&db);
    let server = Server::start_at(&db, &via_proxy);
    take(&server, "r", "w1", 60);
    proxy.kill();
    let body = json!({"owner": "w2", "ttl_seconds": 10});
    std::thread::scope(|scope| {
        let first = scope.spawn(|| server.post("/locks/a", &body));
        // Into the first one's search (5 s), and a renewal too: holders go first, never after
        // a second search.
        std::thread::sleep(Duration::from_secs(1));
        let started = Instant::now();
        let later = scope.spawn(|| server.post("/locks/b", &body));
        let renewal = scope
            .spawn(|| server.post("/locks/r/renew", &json!({"owner": "w1", "ttl_seconds": 60})));
        first.join().expect("first").problem(503);
        for (what, reply) in [("an acquire", later), ("a renewal", renewal)] {
            reply.join().expect(what).problem(503);
            let took = started.elapsed();
            // One search is 5 s, the rest of the first one about 4 s; two would be 9 s or
            // more.
            assert!(
                took < Duration::from_secs(7),
                "{what} that arrived during a search was answered after {took:?}"
            );
        }
    });
    proxy.restore();
}

/// One Prometheus sample: `name{labels} value`.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// `GET /metrics`: the Prometheus text and its samples.
fn scrape(server: &Server) -> (String, Vec<Sample>) {
    let reply = server.get("/metrics");
    assert_eq!(reply.status, 200, "{}", reply.describe());
    assert!(
        reply
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("text/plain")),
        "Prometheus text is text/plain: {:?}",
        reply.content_type
    );
    let text = reply.text();
    let samples = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| parse_sample(line).unwrap_or_else(|| panic!("not a sample: {line:?}")))
        .collect();
    (text, samples)
}

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inside) = rest.strip_prefix('{') {
        let mut chars = inside.char_indices();
        let mut key = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => break i,
                ',' | ' ' => {}
                '=' => {
                    let (_, '"') = chars.next()? else {
                        return None;
                    };
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '"' => break,
                            '\\' => value.push(chars.next()?.1),
                            c => value.push(c),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                c => key.push(c),
            }
        };
        rest = &inside[end + 1..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// The sum of the samples that `pick` keeps.
fn total(samples: &[Sample], pick: impl Fn(&Sample) -> bool) -> f64 {
    samples.iter().filter(|s| pick(s)).map(|s| s.value).sum()
}

/// A request counter's sample for answers `status`: a `distlock_` sample, not a histogram's
/// bucket or sum, with a label whose value is the status code.
fn answered(status: &'static str) -> impl Fn(&Sample) -> bool {
    move |s| {
        s.name.starts_with("distlock_")
            && !s.name.ends_with("_bucket")
            && !s.name.ends_with("_sum")
            && s.labels.iter().any(|(_, v)| v == status)
    }
}

/// A gauge's sample whose name has `word` in it: `distlock_`, and not a counter (`_total`)
/// or a histogram's part.
fn gauge(word: &'static str) -> impl Fn(&Sample) -> bool {
    move |s| {
        s.name.starts_with("distlock_")
            && s.name.contains(word)
            && !["_total", "_bucket", "_sum", "_count", "_created"]
                .iter()
                .any(|suffix| s.name.ends_with(suffix))
    }
}

/// The contract names what `/metrics` shows, not the metrics' names. Assumed here:
/// - every metric of distlock's own is named `distlock_…`;
/// - requests are counted with the status code as a label value (`…{route="…",status="404"}`),
///   by route, not by path: a resource's name never shows up in a label;
/// - the latency histogram is a `# TYPE distlock_… histogram` family with `_bucket{le="+Inf"}`
///   samples and a `_count`;
/// - live tenures are a gauge named `distlock_…tenure…` (summed over its labels, the number of
///   live tenures), and waiters one named `distlock_…wait…` (the number of live waiters).
#[test]
fn metrics_count_requests_by_route_and_status_and_show_live_tenures_and_waiters() {
    each_store(|db| {
        let server = Server::start(db);
        let (_, before) = scrape(&server);
        for i in 0..3 {
            server.get(&format!("/locks/missing{i}")).problem(404);
        }
        let (text, after) = scrape(&server);
        let not_found = total(&after, answered("404")) - total(&before, answered("404"));
        assert!(
            not_found >= 3.0,
            "three more 404s counted (by a label valued \"404\"), {not_found} counted:\n{text}"
        );
        assert!(
            !text.contains("missing0"),
            "requests are counted by route, never by a resource's name:\n{text}"
        );
        let histogram = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter_map(|line| line.strip_suffix(" histogram"))
            .find(|name| name.starts_with("distlock_"))
            .unwrap_or_else(|| panic!("a distlock_ latency histogram:\n{text}"))
            .to_owned();
        let bucket = format!("{histogram}_bucket");
        let count = format!("{histogram}_count");
        assert!(
            after
                .iter()
                .any(|s| s.name == bucket && s.labels.iter().any(|(k, v)| k == "le" && v == "+Inf")),
            "{histogram} has a +Inf bucket:\n{text}"
        );
        let timed = total(&after, |s| s.name == count) - total(&before, |s| s.name == count);
        assert!(timed >= 3.0, "{histogram} timed the requests: {timed}");

        // Live tenures and waiters.
        let tenures = |samples: &[Sample]| total(samples, gauge("tenure"));
        let waiters = |samples: &[Sample]| total(samples, gauge("wait"));
        assert!(
            after.iter().any(gauge("tenure")) && after.iter().any(gauge("wait")),
            "a distlock_…tenure… and a distlock_…wait… gauge:\n{text}"
        );
        let shared = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "shared": true});
        take_in(&server, "db", &shared("s1"), Mode::Shared);
        take_in(&server, "db", &shared("s2"), Mode::Shared);
        take(&server, "x", "w", 60);
        let (text, now) = scrape(&server);
        assert!((tenures(&now) - 3.0).abs() < 0.5, "3 live tenures:\n{text}");
        assert!(waiters(&now).abs() < 0.5, "nobody waits:\n{text}");
        thread::scope(|s| {
            let waiter = s.spawn(|| {
                server.post(
                    &lock_path("x", ""),
                    &json!({"owner": "v", "ttl_seconds": 60, "wait_seconds": 10}),
                )
            });
            until_waiting(&server, "x", 1, QUEUED);
            let (text, now) = scrape(&server);
            assert!((waiters(&now) - 1.0).abs() < 0.5, "1 waiter:\n{text}");
            server.delete(&lock_path("x", "?owner=w")).no_content();
            let granted = waiter.join().expect("the waiter");
            assert_eq!(
                granted.json(200)["acquired"],
                true,
                "{}",
                granted.describe()
            );
        });
        let (text, now) = scrape(&server);
        assert!((tenures(&now) - 3.0).abs() < 0.5, "3 live tenures:\n{text}");
        assert!(waiters(&now).abs() < 0.5, "nobody waits:\n{text}");
        server.delete(&lock_path("x", "?owner=v")).no_content();
        let (text, now) = scrape(&server);
        assert!((tenures(&now) - 2.0).abs() < 0.5, "2 live tenures:\n{text}");
    });
}

// ---------------------------------------------------------------------------------------------
// Waiting

#[test]
fn waiters_are_granted_promptly_when_the_holder_lets_go_in_the_order_they_came() {
    each_store(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        let holder = take(&server, P42, "h", 60);
        let wait = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "wait_seconds": 10});
        thread::scope(|s| {
            let a = s.spawn(|| timed(|| server.post(&path, &wait("a"))));
            until_waiting(&server, P42, 1, QUEUED);
            let b = s.spawn(|| timed(|| server.post(&path, &wait("b"))));
            until_waiting(&server, P42, 2, QUEUED);
            // A try-once request does not overtake them, and is told they wait.
            let answer = server.post(&path, &by("c", 60)).json(200);
            assert_eq!(answer["waiting"], 2, "{answer}");
            assert_eq!(
                answer,
                db.json(&["acquire", P42, "--owner", "c", "--ttl", "60"], 75)
            );

            let let_go = Instant::now();
            server.delete(&lock_path(P42, "?owner=h")).no_content();
            let (reply, answered) = a.join().expect("waiter a");
            let first = Tenure::read(&reply.json(200)["lock"], Mode::Exclusive);
            assert_eq!(first.owner, "a", "{}", reply.describe());
            assert!(first.fence > holder.fence);
            let took = answered - let_go;
            assert!(took < HANDOVER, "a was answered {took:?} after the release");
            assert!(!b.is_finished(), "b waits on behind a");
            assert_eq!(db.waiting(P42), 1);

            let let_go = Instant::now();
            server.delete(&lock_path(P42, "?owner=a")).no_content();
            let (reply, answered) = b.join().expect("waiter b");
            let second = Tenure::read(&reply.json(200)["lock"], Mode::Exclusive);
            assert_eq!(second.owner, "b", "{}", reply.describe());
            assert!(second.fence > first.fence);
            let took = answered - let_go;
            assert!(took < HANDOVER, "b was answered {took:?} after the release");
        });
        assert_eq!(db.waiting(P42), 0);
    });
}

#[test]
fn a_wait_that_runs_out_answers_busy_and_gives_up_its_place_at_once() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        let holder = take(&server, P42, "h", 60);
        let start = Instant::now();
        let reply = server.post(
            &path,
            &json!({"owner": "a", "ttl_seconds": 60, "wait_seconds": 1}),
        );
        let took = start.elapsed();
        let answer = reply.json(200);
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(6),
            "wait_seconds 1 waits about 1 s: {took:?}"
        );
        assert_eq!(db.waiting(P42), 0, "the place is given up at once");
        assert_eq!(answer, busy(P42, &[&holder]), "{}", reply.describe());
        assert_eq!(
            answer,
            db.json(
                &["acquire", P42, "--owner", "a", "--ttl", "60", "--wait", "1"],
                75
            ),
            "what `acquire --wait` prints when its wait runs out"
        );
        // wait_seconds 0 tries once.
        let start = Instant::now();
        let answer = server
            .post(
                &path,
                &json!({"owner": "a", "ttl_seconds": 60, "wait_seconds": 0}),
            )
            .json(200);
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(answer, busy(P42, &[&holder]));
    });
}

#[test]
fn one_request_waits_at_most_30s_and_its_place_is_kept_5s_for_the_client_to_come_back() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        let holder = take(&server, P42, "h", 120);
        let wait = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "wait_seconds": 600});
        let post = |owner: &'static str| {
            let (server, path) = (&server, &path);
            move || timed(|| server.post(path, &wait(owner)))
        };
        // The first answer of a waiter in line: busy after 30 s, with its place.
        let at_30s = |(reply, answered): (Reply, Instant), started: Instant, position: u64| {
            let took = answered - started;
            assert!(
                took >= Duration::from_secs(20) && took <= Duration::from_secs(34),
                "a request waits at most 30 s: answered after {took:?}: {}",
                reply.describe()
            );
            let answer = reply.json(200);
            assert_eq!(
                (
                    &answer["acquired"],
                    &answer["holder"]["owner"],
                    &answer["position"]
                ),
                (&json!(false), &json!("h"), &json!(position)),
                "a busy answer after 30 s names the holder and the waiter's place (\"position\":{position}): {}",
                reply.describe()
            );
            answered
        };
        thread::scope(|s| {
            let started_a = Instant::now();
            let a = s.spawn(post("a"));
            until_waiting(&server, P42, 1, QUEUED);
            let started_b = Instant::now();
            let b = s.spawn(post("b"));
            until_waiting(&server, P42, 2, QUEUED);
            let started_c = Instant::now();
            let c = s.spawn(post("c"));
            until_waiting(&server, P42, 3, QUEUED);

            at_30s(a.join().expect("a"), started_a, 1);
            assert_eq!(db.waiting(P42), 3, "a's place is kept while it comes back");
            at_30s(b.join().expect("b"), started_b, 2);
            // b comes back first, then a: a's place is still ahead of b's.
            let b = s.spawn(post("b"));
            sleep(Duration::from_millis(300));
            let a = s.spawn(post("a"));
            let c_answered = at_30s(c.join().expect("c"), started_c, 3);
            // c does not come back: its place lapses, a's and b's stay.
            until_waiting(&server, P42, 2, LAPSED);
            let lapsed = c_answered.elapsed();
            assert!(
                lapsed < LAPSED,
                "c's place lapsed {lapsed:?} after its answer"
            );

            let let_go = Instant::now();
            server.delete(&lock_path(P42, "?owner=h")).no_content();
            let (reply, answered) = a.join().expect("a again");
            let granted = Tenure::read(&reply.json(200)["lock"], Mode::Exclusive);
            assert_eq!(granted.owner, "a", "a kept its place: {}", reply.describe());
            assert!(granted.fence > holder.fence);
            assert!(answered - let_go < HANDOVER);
            assert!(!b.is_finished(), "b waits on behind a");
            server.delete(&lock_path(P42, "?owner=a")).no_content();
            let (reply, _) = b.join().expect("b again");
            assert_eq!(
                reply.json(200)["lock"]["owner"],
                "b",
                "{}",
                reply.describe()
            );
        });
    });
}

#[test]
fn a_waiter_that_leaves_gives_up_its_place_at_once_and_its_waiting_request_ends() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        let leave = lock_path(P42, "/leave");
        take(&server, P42, "h", 60);
        let wait = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "wait_seconds": 60});
        thread::scope(|s| {
            let leaving = s.spawn(|| timed(|| server.post(&path, &wait("w"))));
            until_waiting(&server, P42, 1, QUEUED);
            let next = s.spawn(|| timed(|| server.post(&path, &wait("next"))));
            until_waiting(&server, P42, 2, QUEUED);

            let left = Instant::now();
            server.post(&leave, &json!({"owner": "w"})).no_content();
            assert_eq!(
                waiting_via(&server, P42),
                1,
                "the place is gone when the leave is answered"
            );
            let (reply, answered) = leaving.join().expect("the waiter that left");
            assert_eq!(reply.json(200)["acquired"], false, "{}", reply.describe());
            let took = answered - left;
            assert!(
                took < HANDOVER,
                "its waiting request ended {took:?} after the leave"
            );

            // Nobody is held back by it: the next waiter is served when the holder lets go.
            let let_go = Instant::now();
            server.delete(&lock_path(P42, "?owner=h")).no_content();
            let (reply, answered) = next.join().expect("the next waiter");
            assert_eq!(
                reply.json(200)["lock"]["owner"],
                "next",
                "{}",
                reply.describe()
            );
            assert!(answered - let_go < HANDOVER);
        });
        // Leaving a queue one is not in changes nothing; an owner is required.
        let before = state(&server);
        server
            .post(&leave, &json!({"owner": "nobody"}))
            .no_content();
        server.post(&leave, &json!({})).problem(422);
        server
            .post(&leave, &json!({"owner": "w", "ttl_seconds": 5}))
            .problem(422);
        assert_eq!(state(&server), before);
        let events = db.log(&[P42]);
        assert!(
            events.iter().all(|e| e["owner"] != "w"),
            "the waiter that left never held the lock: {events:?}"
        );
    });
}

/// `POST PATH` with `body` on a raw connection, left open without reading the answer.
fn post_and_hold(server: &Server, path: &str, body: &Value) -> TcpStream {
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = server.connect();
    stream
        .write_all(request.as_bytes())
        .expect("send the request");
    stream
}

#[test]
fn a_waiter_whose_client_vanishes_loses_its_place_within_5s() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        take(&server, P42, "h", 60);
        let gone = post_and_hold(
            &server,
            &path,
            &json!({"owner": "gone", "ttl_seconds": 60, "wait_seconds": 60}),
        );
        until_waiting(&server, P42, 1, QUEUED);
        thread::scope(|s| {
            let next = s.spawn(|| {
                timed(|| {
                    server.post(
                        &path,
                        &json!({"owner": "next", "ttl_seconds": 60, "wait_seconds": 30}),
                    )
                })
            });
            until_waiting(&server, P42, 2, QUEUED);
            let _ = gone.shutdown(Shutdown::Both);
            drop(gone);
            let vanished = Instant::now();
            until_waiting(&server, P42, 1, LAPSED);
            let lapsed = vanished.elapsed();
            assert!(
                lapsed < LAPSED,
                "the place lapsed {lapsed:?} after the client left"
            );
            let let_go = Instant::now();
            server.delete(&lock_path(P42, "?owner=h")).no_content();
            let (reply, answered) = next.join().expect("the next waiter");
            assert_eq!(
                reply.json(200)["lock"]["owner"],
                "next",
                "{}",
                reply.describe()
            );
            assert!(answered - let_go < HANDOVER);
        });
        let events = db.log(&[P42]);
        assert!(
            events.iter().all(|e| e["owner"] != "gone"),
            "the vanished client never held the lock: {events:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Abuse

#[test]
fn a_client_that_trickles_its_headers_is_dropped_after_10s_and_others_are_served_meanwhile() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let mut slow = server.connect();
        slow.set_read_timeout(Some(Duration::from_millis(500)))
            .expect("read timeout");
        let start = Instant::now();
        slow.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .expect("the start of a request");
        let mut served_meanwhile = false;
        let mut buf = [0_u8; 1024];
        let dropped_after = loop {
            // One more byte of the header every half second.
            if slow.write_all(b"a").is_err() {
                break start.elapsed();
            }
            match slow.read(&mut buf) {
                // Closed, or answered (a 408) before closing: dropped either way.
                Ok(_) => break start.elapsed(),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break start.elapsed(),
            }
            if !served_meanwhile && start.elapsed() > Duration::from_secs(2) {
                let asked = Instant::now();
                assert_eq!(server.get("/health").status, 200);
                take(&server, "meanwhile", "w1", 60);
                assert!(asked.elapsed() < Duration::from_secs(2));
                served_meanwhile = true;
            }
            assert!(
                start.elapsed() < Duration::from_secs(16),
                "a client trickling its headers is still connected after {:?}",
                start.elapsed()
            );
        };
        assert!(
            served_meanwhile,
            "dropped after {dropped_after:?}, before the check"
        );
        assert!(
            dropped_after <= Duration::from_secs(15),
            "dropped after {dropped_after:?}"
        );
        assert_eq!(server.get("/health").status, 200);
    });
}

#[test]
fn idle_connections_and_floods_of_bad_requests_do_not_stop_service() {
    each_store(|db| {
        let server = Server::start(db);
        let idle: Vec<TcpStream> = (0..200).map(|_| server.connect()).collect();
        let half: Vec<TcpStream> = (0..50)
            .map(|_| {
                let mut stream = server.connect();
                stream
                    .write_all(b"POST /locks/x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    .expect("half a request");
                stream
            })
            .collect();
        let start = Instant::now();
        let reply = server.raw(&raw_request("GET", "/health", "", b""));
        assert_eq!(reply.status, 200);
        take(&server, "served", "w1", 60);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "served beside 250 idle connections in {:?}",
            start.elapsed()
        );
        // A flood of bad requests, each answered (or its connection closed) and forgotten.
        let garbage: [&[u8]; 4] = [
            b"GARBAGE\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
            b"POST /locks/x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        ];
        for i in 0..100 {
            let mut stream = server.connect();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("read timeout");
            let _ = stream.write_all(garbage[i % garbage.len()]);
            let _ = stream.shutdown(Shutdown::Write);
            let mut answer = Vec::new();
            if let Err(e) = stream.read_to_end(&mut answer) {
                assert!(
                    !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                    "a bad request that ended its side is answered or closed within 5 s"
                );
            }
            let head = String::from_utf8_lossy(&answer);
            assert!(
                answer.is_empty()
                    || head.starts_with("HTTP/1.1 4")
                    || head.starts_with("HTTP/1.0 4"),
                "a bad request gets a 4xx or nothing: {head:?}"
            );
        }
        for i in 0..100 {
            server
                .post_as(
                    &lock_path("x", ""),
                    "application/json",
                    format!("{{{i}").as_bytes(),
                )
                .problem(400);
        }
        let start = Instant::now();
        assert_eq!(server.get("/health").status, 200);
        assert_eq!(server.get("/locks/served").json(200)["lock"]["owner"], "w1");
        assert!(start.elapsed() < Duration::from_secs(2));
        drop((idle, half));
    });
}

// ---------------------------------------------------------------------------------------------
// Shutdown

#[test]
fn sigterm_answers_waiting_requests_at_once_keeps_their_places_and_exits_0() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let path = lock_path(P42, "");
        take(&server, P42, "h", 60);
        let answered = thread::scope(|s| {
            let waiter = s.spawn(|| {
                timed(|| {
                    server.post(
                        &path,
                        &json!({"owner": "a", "ttl_seconds": 60, "wait_seconds": 60}),
                    )
                })
            });
            until_waiting(&server, P42, 1, QUEUED);
            let stopped = Instant::now();
            server.signal(Signal::SIGTERM);
            let (reply, answered) = waiter.join().expect("the waiter");
            let took = answered - stopped;
            assert!(
                took < Duration::from_secs(3),
                "answered {took:?} after SIGTERM"
            );
            let answer = reply.json(200);
            assert_eq!(
                (&answer["acquired"], &answer["holder"]["owner"]),
                (&json!(false), &json!("h")),
                "{}",
                reply.describe()
            );
            if let Some(position) = answer.get("position") {
                assert_eq!(position, 1, "{answer}");
            }
            // The place is kept for the client to post again (to another server)…
            assert_eq!(db.waiting(P42), 1, "the waiter's place is kept");
            answered
        });
        let addr = server.addr;
        let out = server.finish();
        assert_eq!(out.code(), Some(0), "{}", out.describe());
        assert!(
            answered.elapsed() < Duration::from_secs(8),
            "exited {:?} after the answer",
            answered.elapsed()
        );
        assert!(
            TcpStream::connect(addr).is_err(),
            "nothing listens any more"
        );
        // …and lapses when nobody comes back.
        until_counted(&format!("status {P42}"), 0, LAPSED, || db.waiting(P42));
        assert_eq!(db.status(P42).1["lock"]["owner"], "h");
    });
}

#[test]
fn sigint_stops_the_server_with_exit_0() {
    each_store(|db| {
        let server = Server::start(db);
        take(&server, "r", "w1", 60);
        let stopped = Instant::now();
        server.signal(Signal::SIGINT);
        let out = server.finish();
        assert_eq!(out.code(), Some(0), "{}", out.describe());
        assert!(
            stopped.elapsed() < Duration::from_secs(5),
            "{}",
            out.describe()
        );
        assert_eq!(db.status("r").1["lock"]["owner"], "w1");
    });
}

/// Signals that ask nothing of the server but would end it by default — one meant for another
/// process, a timer's — are said in one line each and change nothing: the server serves on,
/// its locks as they were, and still stops at SIGTERM with exit 0.
#[test]
fn sigusr1_sigusr2_and_sigalrm_are_one_line_each_and_the_server_serves_on() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    take(&server, "r", "w1", 60);
    for (signal, name) in [
        (Signal::SIGUSR1, "SIGUSR1"),
        (Signal::SIGUSR2, "SIGUSR2"),
        (Signal::SIGALRM, "SIGALRM"),
        (Signal::SIGVTALRM, "SIGVTALRM"),
        (Signal::SIGPROF, "SIGPROF"),
        (Signal::SIGIO, "SIGIO"),
        (Signal::SIGPWR, "SIGPWR"),
    ] {
        server.signal(signal);
        let line = format!("distlock: ignoring {name}");
        assert!(
            wait_for(Duration::from_secs(10), || server.stderr().contains(&line)),
            "{line:?}: {}",
            server.stderr()
        );
        let reply = server.get("/locks/r");
        assert_eq!(reply.json(200)["lock"]["owner"], "w1", "after {name}");
    }
    server.signal(Signal::SIGUSR1);
    let ignored = || {
        server
            .stderr()
            .matches("distlock: ignoring SIGUSR1")
            .count()
    };
    assert!(
        wait_for(Duration::from_secs(10), || ignored() == 2),
        "one line each time: {}",
        server.stderr()
    );
    server.signal(Signal::SIGTERM);
    let out = server.finish();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    assert_eq!(db.status("r").1["lock"]["owner"], "w1");
}

/// Two servers over one PostgreSQL database keep no state of their own: a lock taken through
/// one is held through the other, a waiter on one is granted when the holder lets go through
/// the other, and the fences run on across both.
#[test]
fn two_servers_over_one_postgresql_serve_the_same_locks_and_one_queue() {
    let Some(db) = Db::postgres() else { return };
    let (a, b) = (Server::start(&db), Server::start(&db));
    let path = lock_path(P42, "");
    let holder = take(&a, P42, "h", 60);
    let held_through_b = b.get(&path).json(200);
    assert_eq!(
        held_through_b["lock"]["fence"], holder.fence,
        "{held_through_b}"
    );
    // The other server refuses another owner, as the first would.
    let busy = b.post(&path, &by("x", 60)).json(200);
    assert_eq!(busy["acquired"], false, "{busy}");
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            timed(|| {
                b.post(
                    &path,
                    &json!({"owner": "w", "ttl_seconds": 60, "wait_seconds": 10}),
                )
            })
        });
        until_waiting(&a, P42, 1, QUEUED);
        let let_go = Instant::now();
        a.delete(&lock_path(P42, "?owner=h")).no_content();
        let (reply, answered) = waiter.join().expect("the waiter");
        let next = Tenure::read(&reply.json(200)["lock"], Mode::Exclusive);
        assert_eq!(next.owner, "w", "{}", reply.describe());
        assert!(
            next.fence > holder.fence,
            "{} after {}",
            next.fence,
            holder.fence
        );
        let took = answered - let_go;
        assert!(
            took < HANDOVER,
            "the waiter on the other server took {took:?}"
        );
    });
    b.delete(&lock_path(P42, "?owner=w")).no_content();
    a.get(&path).problem(404);
}

#[test]
fn a_body_that_stalls_is_answered_408_within_10_s_and_the_others_are_served_meanwhile() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    let started = Instant::now();
    let stalled = std::thread::scope(|scope| {
        // The headers whole, then five of the forty bytes of the body, then nothing.
        let waiting = scope.spawn(|| {
            server.raw(
                b"POST /locks/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Content-Length: 40\r\n\r\n{\"own",
            )
        });
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(server.get("/health").status, 200, "served meanwhile");
        take(&server, "meanwhile", "w1", 60);
        waiting.join().expect("the stalled request")
    });
    assert_eq!(
        stalled.status,
        408,
        "{}",
        String::from_utf8_lossy(&stalled.body)
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(14),
        "answered after {took:?}"
    );
    db.json(&["status", "x"], 1);
}

#[test]
fn the_server_raises_its_open_files_limit_to_hold_its_connections() {
    let db = Db::sqlite();
    let mut cmd = crate::common::process::isolated("sh");
    cmd.args([
        "-c",
        r#"ulimit -Sn 256 && exec "$0" --db "$1" serve --listen 127.0.0.1:0"#,
        crate::common::process::BIN,
        &db.url,
    ]);
    let proc = crate::common::process::Proc::spawn(&mut cmd, db.dir.path(), "limited");
    let stderr = db.dir.path().join("limited.stderr");
    wait_until(Duration::from_secs(20), "the server listens", || {
        std::fs::read_to_string(&stderr).is_ok_and(|text| text.contains("listening on"))
    });
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", proc.pid())).expect("limits");
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("the open files line");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    let (soft, hard) = (numbers[0], numbers[1]);
    let wanted = hard
        .parse::<u64>()
        .map_or(65_536, |hard| hard.min(65_536))
        .to_string();
    assert_eq!(
        soft, wanted,
        "the soft limit raised to the hard one: {line}"
    );
    proc.signal(Signal::SIGTERM);
    let out = proc.finish(Duration::from_secs(10));
    assert_eq!(out.code(), Some(0), "{}", out.describe());
}

#[test]
fn a_server_keeps_its_sqlite_wal_short_however_long_it_serves() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    // Each pair appends a few pages to the WAL; unchecked, 400 pairs grow it past 10 MB.
    for n in 0..400 {
        let resource = format!("r{}", n % 8);
        take(&server, &resource, "w", 60);
        server
            .delete(&lock_path(&resource, "?owner=w"))
            .no_content();
    }
    let wal = std::fs::metadata(format!("{}-wal", db.url)).map_or(0, |meta| meta.len());
    assert!(
        wal < 8 * 1024 * 1024,
        "the WAL is {wal} bytes after 400 acquire and release pairs"
    );
}
