//! The server's engine keeps its promises under load (the contract's "The lock server": a grant
//! is answered only after it is durable; "Waiters are bounded, renewals are not starved"),
//! judged from outside — HTTP and the command line against a real server over a real store — so
//! that they hold however the server is built inside:
//!
//! | promise | test |
//! | --- | --- |
//! | every grant answered is in the store, whatever kills the server | [`a_server_killed_under_load_loses_no_grant_it_answered_and_reuses_no_fence`] |
//! | an operation the store refuses fails alone | [`an_operation_the_store_refuses_fails_alone_and_the_others_beside_it_are_committed`] |
//! | 10,000 long-polls of one caller cost the others nothing | [`ten_thousand_long_polls_of_one_token_leave_another_tokens_run_and_reads_healthy`] |
//! | renewals never wait behind another token's traffic | [`renewals_keep_their_leases_through_another_tokens_flood_of_waiters_and_acquires`] |
//! | waiting requests are bounded by flags: 429 past them | [`waiting_requests_past_a_bound_are_429_and_the_bounds_are_flags`] |
//! | `--wait` through a server keeps trying past a 429 | [`acquire_wait_through_a_server_keeps_trying_past_a_429_within_its_wait`] |
//!
//! Each runs on SQLite and on PostgreSQL behind the server ([`each_store`]), but the 10,000
//! long-polls run on SQLite only: waiting requests are the server's own tasks whatever the
//! store, and the flood is the heaviest test of the suite.
//!
//! What they take of the server beyond the contract's words: `serve --max-waiters N` (default
//! 10,000) and `--max-waiters-per-token N` (default 1,000, callers without a token counting as
//! one); a 429's `Retry-After` in whole seconds and its problem document of a type ending in
//! `too-many-waiters` whose `detail` names the bound; `distlock_waiting_requests` in `/metrics`
//! counting the requests waiting now; the log line `METHOD PATH STATUS …` per request. Whether
//! operations sent together really share one commit is not visible from outside (the server
//! shows no batch sizes): the one-bad-operation test sends them at the same instant so that
//! they can, and judges what each caller is answered and what the store holds.
//!
//! Timing: judged by events — a count of grants, the server's gauge of waiting requests
//! (`distlock_waiting_requests` in `/metrics`), an answer, a line in the server's log — within
//! generous bounds. The one figure measured is the p99 of another caller's reads beside the
//! flood, over a whole sample of 200.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::common::load::{
    Answer, Client, Exchange, Flood, Footprint, footprint, raise_open_files, request_bytes,
    serving, waiting_requests,
};
use crate::common::output::{fence, parse_line};
use crate::common::process::{Proc, wait_for, wait_until};
use crate::common::server::{RawReply, Server, lock_path};
use crate::common::store::{Db, Kind, distlock_at, each_store};
use crate::server::tokens::make_token;

/// How long a server may take to show a count of waiting requests it should reach at once.
const PARKING: Duration = Duration::from_secs(30);

/// The pause between two looks at the server's gauge of waiting requests.
const GAUGE_POLL: Duration = Duration::from_millis(100);

/// How long a `distlock run` or `acquire` of these tests may take in all before it is killed.
const COMMAND: Duration = Duration::from_secs(90);

/// The longest a flood may last before it gives up on what is left.
const FLOOD_LIMIT: Duration = Duration::from_secs(150);

// ---------------------------------------------------------------------------------------------
// Helpers

/// A grant: a resource, its owner and the fence the tenure got.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Grant {
    resource: String,
    owner: String,
    fence: i64,
}

impl Grant {
    /// The grant a lock object or an `acquired` event names.
    fn of(object: &Value) -> Grant {
        let text = |key: &str| {
            object[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key} must be a string in {object}"))
                .to_owned()
        };
        Grant {
            resource: text("resource"),
            owner: text("owner"),
            fence: fence(object),
        }
    }
}

/// An acquire's body: `owner` for 60 s, waiting up to `wait` seconds when given.
fn acquire_body(owner: &str, wait: Option<u64>) -> Value {
    match wait {
        Some(seconds) => json!({"owner": owner, "ttl_seconds": 60, "wait_seconds": seconds}),
        None => json!({"owner": owner, "ttl_seconds": 60}),
    }
}

/// `resource` taken by `owner` for 300 s through `client`, which must be granted.
fn hold(client: &Client, resource: &str, owner: &str) {
    let body = json!({"owner": owner, "ttl_seconds": 300});
    let answer = client
        .post(&lock_path(resource, ""), &body)
        .unwrap_or_else(|e| panic!("holding {resource}: {e}"));
    assert!(
        answer.granted().is_some(),
        "holding {resource}: {}",
        answer.describe()
    );
}

/// The path of the tokens file that [`make_token`] writes for `db`.
fn tokens_file(db: &Db) -> String {
    db.file("tokens.json")
        .to_str()
        .expect("a UTF-8 path")
        .to_owned()
}

/// Waits until the server's gauge of waiting requests (read by `client`) says `k`, at most
/// [`PARKING`]: what it said last.
fn parking(client: &Client, k: u64) -> Result<u64, String> {
    let mut seen = Err(String::new());
    wait_for(PARKING, || {
        seen = waiting_requests(client);
        let done = seen == Ok(k);
        if !done {
            sleep(GAUGE_POLL);
        }
        done
    });
    seen
}

/// [`parking`], which must reach `k`: otherwise the test fails, naming `what`.
fn until_parked(client: &Client, k: u64, what: &str) {
    let seen = parking(client, k);
    assert_eq!(
        seen,
        Ok(k),
        "{what}: the server should count {k} waiting requests within {PARKING:?}"
    );
}

/// `distlock ARGS…` through `server` with the bearer `token` (none for `None`), started in the
/// background with its output in `NAME.stdout` and `NAME.stderr` of the test's folder.
fn through(db: &Db, server: &Server, token: Option<&str>, args: &[&str], name: &str) -> Proc {
    let mut cmd = distlock_at(server.url(""));
    cmd.env_remove("DISTLOCK_TOKEN").args(args);
    if let Some(token) = token {
        cmd.env("DISTLOCK_TOKEN", token);
    }
    Proc::spawn(&mut cmd, db.dir.path(), name)
}

/// The failures among `exchanges` (no whole answer: a reset, a connection closed early, no
/// answer in time), at most `shown` of them written out, with their count.
fn unanswered(exchanges: &[Exchange], shown: usize) -> (usize, Vec<String>) {
    let failed: Vec<String> = exchanges
        .iter()
        .filter_map(|exchange| {
            exchange
                .outcome
                .as_ref()
                .err()
                .map(|why| format!("request {}: {why}", exchange.index))
        })
        .collect();
    (failed.len(), failed.into_iter().take(shown).collect())
}

/// The answers among `exchanges`, with the exchange each belongs to.
fn answers(exchanges: &[Exchange]) -> impl Iterator<Item = (&Exchange, &Answer)> {
    exchanges.iter().filter_map(|exchange| {
        exchange
            .outcome
            .as_ref()
            .ok()
            .map(|(answer, _)| (exchange, answer))
    })
}

// ---------------------------------------------------------------------------------------------
// kill -9 under load

/// Clients of the kill -9 test, each with one kept-alive connection, on as many resources.
const CLIENTS: usize = 64;

/// Grants answered before the server is killed: ten pairs a client on average, well into the
/// load.
const KILL_AFTER: usize = 640;

/// How long the load may take to reach [`KILL_AFTER`] grants.
const LOAD: Duration = Duration::from_secs(90);

/// What one client of the load was answered: its grants (200, acquired), and answers no pair
/// should get. A 503 (the store did not answer in time, on a machine this loaded) is neither:
/// the operation did not happen, and the next round goes on (a tenure whose release was
/// refused stays until its owner comes back to it, which re-acquires it with its own fence).
#[derive(Default)]
struct Pairs {
    grants: Vec<Grant>,
    wrong: Vec<String>,
}

/// Whether `answer` is a 503 problem document: the server could not reach its store.
fn unavailable(answer: &Answer) -> bool {
    answer.status == 503 && answer.problem().is_ok()
}

/// Acquire and release pairs by client `client` (owner `c{client}`) through `server` until the
/// server stops answering: in round `k`, on `load-{(client + k) % 64}`, so that each round the
/// 64 clients are on 64 resources and each resource has many owners over time.
fn pairs(server: &Server, client: usize, granted: &AtomicUsize) -> Pairs {
    let http = Client::new(server, None);
    let owner = format!("c{client}");
    let mut seen = Pairs::default();
    for round in 0.. {
        let resource = format!("load-{}", (client + round) % CLIENTS);
        let path = lock_path(&resource, "");
        let Ok(answer) = http.post(&path, &acquire_body(&owner, None)) else {
            break;
        };
        if let Some(lock) = answer.granted() {
            let grant = Grant::of(&lock);
            if grant.resource != resource || grant.owner != owner {
                seen.wrong
                    .push(format!("POST {path} by {owner}: {}", answer.describe()));
            }
            seen.grants.push(grant);
            granted.fetch_add(1, Ordering::SeqCst);
            let Ok(released) = http.delete(&format!("{path}?owner={owner}")) else {
                break;
            };
            if released.status != 204 && !unavailable(&released) {
                seen.wrong.push(format!(
                    "DELETE {path}?owner={owner}: {}",
                    released.describe()
                ));
            }
        } else if !answer.busy() && !unavailable(&answer) {
            seen.wrong
                .push(format!("POST {path} by {owner}: {}", answer.describe()));
        }
    }
    seen
}

/// The kill -9 test on one store: load, SIGKILL, restart, and the store's history against what
/// the clients were answered.
fn killed_under_load(db: &Db) {
    let server = Server::start(db);
    let granted = AtomicUsize::new(0);
    let (loaded, seen) = thread::scope(|s| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (server, granted) = (&server, &granted);
                s.spawn(move || pairs(server, client, granted))
            })
            .collect();
        let loaded = wait_for(LOAD, || granted.load(Ordering::SeqCst) >= KILL_AFTER);
        server.signal(Signal::SIGKILL);
        let seen: Vec<Pairs> = clients
            .into_iter()
            .map(|client| client.join().expect("a client of the load"))
            .collect();
        (loaded, seen)
    });
    let killed = server.finish();
    assert_eq!(
        killed.output.status.signal(),
        Some(Signal::SIGKILL as i32),
        "the server dies of the SIGKILL: {}",
        killed.describe()
    );
    assert!(
        loaded,
        "{:?}: the load should reach {KILL_AFTER} grants within {LOAD:?}; it reached {}",
        db.kind,
        granted.load(Ordering::SeqCst)
    );
    let wrong: Vec<&String> = seen.iter().flat_map(|pairs| &pairs.wrong).collect();
    assert!(
        wrong.is_empty(),
        "{:?}: answers no acquire or release of the load should get: {wrong:#?}",
        db.kind
    );
    let grants: Vec<&Grant> = seen.iter().flat_map(|pairs| &pairs.grants).collect();

    // No fence was answered twice on one resource, but to its own owner coming back to a tenure
    // it still held.
    let mut answered: HashMap<(&str, i64), &str> = HashMap::new();
    for grant in &grants {
        if let Some(other) = answered.insert((&grant.resource, grant.fence), &grant.owner) {
            assert_eq!(
                other, grant.owner,
                "{:?}: fence {} of {} was answered to two owners",
                db.kind, grant.fence, grant.resource
            );
        }
    }

    // Started again on the same store, every grant answered before the kill is in its history.
    let server = Server::start(db);
    let history = db.log(&[]);
    let acquired: Vec<Grant> = history
        .iter()
        .filter(|event| event["event"] == "acquired")
        .map(Grant::of)
        .collect();
    let recorded: HashSet<&Grant> = acquired.iter().collect();
    let lost: Vec<&&Grant> = grants
        .iter()
        .filter(|grant| !recorded.contains(**grant))
        .collect();
    assert!(
        lost.is_empty(),
        "{:?}: {} of the {} grants answered 200 before the kill are not in the store's history \
         after the restart: {:?}",
        db.kind,
        lost.len(),
        grants.len(),
        &lost[..lost.len().min(10)]
    );

    // Per resource, the history's fences rise: none reused, none going back.
    let mut highest: HashMap<String, i64> = HashMap::new();
    for grant in &acquired {
        let last = highest.entry(grant.resource.clone()).or_insert(0);
        assert!(
            grant.fence > *last,
            "{:?}: in the history of {}, fence {} comes after fence {last}",
            db.kind,
            grant.resource,
            grant.fence
        );
        *last = grant.fence;
    }

    // And the server started again goes on above them: a new tenure of every resource gets a
    // fence above every fence it had (a tenure left by a client cut off at the kill is let go
    // first, by its owner).
    let http = Client::new(&server, None);
    for resource in (0..CLIENTS).map(|r| format!("load-{r}")) {
        let path = lock_path(&resource, "");
        let status = http.get(&path).expect("GET after the restart");
        if status.status == 200 {
            let owner = status.json()["lock"]["owner"]
                .as_str()
                .unwrap_or_else(|| panic!("a holder in {}", status.describe()))
                .to_owned();
            let released = http
                .delete(&format!("{path}?owner={owner}"))
                .expect("DELETE after the restart");
            assert_eq!(released.status, 204, "{}", released.describe());
        } else {
            assert_eq!(status.status, 404, "{}", status.describe());
        }
        let answer = http
            .post(&path, &acquire_body("after-restart", None))
            .expect("POST after the restart");
        let lock = answer.granted().unwrap_or_else(|| {
            panic!(
                "{resource} is free after the restart: {}",
                answer.describe()
            )
        });
        let before = grants
            .iter()
            .filter(|grant| grant.resource == resource)
            .map(|grant| grant.fence)
            .chain(highest.get(&resource).copied())
            .max()
            .unwrap_or(0);
        assert!(
            fence(&lock) > before,
            "{:?}: after the restart {resource} got fence {}, not above its fence {before} \
             from before the kill",
            db.kind,
            fence(&lock)
        );
    }
    drop(server);

    if db.kind == Kind::Sqlite {
        let conn = rusqlite::Connection::open(db.path()).expect("open the SQLite file");
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("integrity_check");
        assert_eq!(
            check, "ok",
            "PRAGMA integrity_check after a SIGKILL under load"
        );
    }
}

#[test]
fn a_server_killed_under_load_loses_no_grant_it_answered_and_reuses_no_fence() {
    each_store(killed_under_load);
}

// ---------------------------------------------------------------------------------------------
// One operation the store refuses

/// The resource whose tenures the store refuses to write.
const POISON: &str = "poison";

/// Acquires of other resources sent at once with each round's acquires of [`POISON`].
const OTHERS: usize = 32;

/// Acquires of [`POISON`] in each round, by as many owners.
const POISONED: usize = 8;

/// Rounds of acquires (then releases) sent at once.
const ROUNDS: usize = 3;

/// Makes the store itself refuse to write a tenure of [`POISON`]: on SQLite, the `locks` table
/// gets `CHECK (resource <> 'poison')` (rebuilt as SQLite's ALTER TABLE documents: a new
/// table, the rows copied, the old one dropped, the new one renamed — a trigger would do the
/// same, but distlock refuses a file with triggers as another application's); on PostgreSQL, a
/// trigger in the `distlock` schema that raises an error. Everything else the store does is
/// left as it is.
fn poison(db: &Db) {
    // The store's schema, made by the command line.
    db.json(&["acquire", "setup", "--owner", "setup", "--ttl", "60s"], 0);
    db.json(&["release", "setup", "--owner", "setup"], 0);
    match db.kind {
        Kind::Sqlite => {
            let conn = rusqlite::Connection::open(db.path()).expect("open the SQLite file");
            let table: String = conn
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'locks'",
                    [],
                    |r| r.get(0),
                )
                .expect("the locks table");
            let indexes: Vec<String> = conn
                .prepare(
                    "SELECT sql FROM sqlite_master
                     WHERE type = 'index' AND tbl_name = 'locks' AND sql IS NOT NULL",
                )
                .and_then(|mut indexes| indexes.query_map([], |r| r.get(0))?.collect())
                .expect("the locks table's indexes");
            let columns = table.find('(').expect("a table's columns");
            let end = table.rfind(')').expect("a table's columns end");
            let poisoned = format!(
                "CREATE TABLE locks_poisoned {},\n    CHECK (resource <> '{POISON}')\n{}",
                &table[columns..end],
                &table[end..]
            );
            conn.execute_batch(&format!(
                "BEGIN IMMEDIATE;
                 {poisoned};
                 INSERT INTO locks_poisoned SELECT * FROM locks;
                 DROP TABLE locks;
                 ALTER TABLE locks_poisoned RENAME TO locks;
                 {};
                 COMMIT;",
                indexes.join(";\n")
            ))
            .expect("poison the locks table");
        }
        Kind::Postgres => {
            db.pg_client()
                .batch_execute(&format!(
                    "CREATE FUNCTION distlock.poisoned() RETURNS trigger LANGUAGE plpgsql AS
                         $$ BEGIN RAISE EXCEPTION 'poisoned: %', NEW.resource; END $$;
                     CREATE TRIGGER poisoned BEFORE INSERT ON distlock.locks FOR EACH ROW
                         WHEN (NEW.resource = '{POISON}') EXECUTE FUNCTION distlock.poisoned();"
                ))
                .expect("poison the locks table");
        }
    }
}

/// Sends every request of `requests` (raw, each on a connection of its own that the server
/// closes after its answer) at the same instant: each thread connects and waits at a barrier
/// before it writes. The answers, in the same order.
fn all_at_once(server: &Server, requests: &[Vec<u8>]) -> Vec<RawReply> {
    let barrier = Barrier::new(requests.len());
    thread::scope(|s| {
        let sent: Vec<_> = requests
            .iter()
            .map(|request| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    server.raw(request)
                })
            })
            .collect();
        sent.into_iter()
            .map(|reply| reply.join().expect("a request sent at once"))
            .collect()
    })
}

/// The one-bad-operation test on one store.
fn refused_alone(db: &Db) {
    poison(db);
    let server = Server::start(db);
    let mut granted = Vec::new();
    for round in 0..ROUNDS {
        // Acquires of 32 resources and 8 acquires of the poisoned one, sent together so that
        // the server has them all at once.
        let others: Vec<(String, String)> = (0..OTHERS)
            .map(|i| (format!("ok-{round}-{i}"), format!("o{round}-{i}")))
            .collect();
        let poisoned = |phase: &str| -> Vec<Vec<u8>> {
            (0..POISONED)
                .map(|i| {
                    let body = acquire_body(&format!("p{round}-{phase}-{i}"), None);
                    request_bytes("POST", &lock_path(POISON, ""), None, Some(&body), true)
                })
                .collect()
        };
        let mut requests: Vec<Vec<u8>> = others
            .iter()
            .map(|(resource, owner)| {
                let body = acquire_body(owner, None);
                request_bytes("POST", &lock_path(resource, ""), None, Some(&body), true)
            })
            .collect();
        requests.extend(poisoned("acquire"));
        let replies = all_at_once(&server, &requests);
        let mut round_grants = Vec::new();
        for ((resource, owner), reply) in others.iter().zip(&replies) {
            let answer: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
            assert!(
                reply.status == 200 && answer["acquired"] == true,
                "{:?}: an acquire of {resource} beside the poisoned ones is granted: {} {answer}",
                db.kind,
                reply.status
            );
            let grant = Grant::of(&answer["lock"]);
            assert_eq!(
                (grant.resource.as_str(), grant.owner.as_str()),
                (resource.as_str(), owner.as_str())
            );
            round_grants.push(grant);
        }
        for reply in &replies[OTHERS..] {
            reply.problem(503);
        }

        // Their tenures are there, as granted.
        for grant in &round_grants {
            let status = server.get(&lock_path(&grant.resource, "")).json(200);
            assert_eq!(
                Grant::of(&status["lock"]),
                *grant,
                "{:?}: the tenure as granted: {status}",
                db.kind
            );
        }

        // Then their releases, with the poisoned acquires again among them.
        let mut requests: Vec<Vec<u8>> = round_grants
            .iter()
            .map(|grant| {
                let path = lock_path(&grant.resource, &format!("?owner={}", grant.owner));
                request_bytes("DELETE", &path, None, None, true)
            })
            .collect();
        requests.extend(poisoned("release"));
        let replies = all_at_once(&server, &requests);
        for (grant, reply) in round_grants.iter().zip(&replies) {
            assert_eq!(
                reply.status,
                204,
                "{:?}: the release of {grant:?} beside the poisoned acquires: {}",
                db.kind,
                String::from_utf8_lossy(&reply.body)
            );
        }
        for reply in &replies[OTHERS..] {
            reply.problem(503);
        }
        granted.extend(round_grants);
    }

    // The history has every other tenure, acquired and released with its fence, and nothing of
    // the poisoned resource.
    let history = db.log(&[]);
    let events: HashSet<(String, Grant)> = history
        .iter()
        .map(|event| {
            let name = event["event"].as_str().expect("an event name").to_owned();
            (name, Grant::of(event))
        })
        .collect();
    for grant in &granted {
        for name in ["acquired", "released"] {
            assert!(
                events.contains(&(name.to_owned(), grant.clone())),
                "{:?}: the history has {grant:?} {name}: {history:#?}",
                db.kind
            );
        }
    }
    assert!(
        history.iter().all(|event| event["resource"] != POISON),
        "{:?}: nothing of {POISON} was written: {history:#?}",
        db.kind
    );
    server.get(&lock_path(POISON, "")).problem(404);
}

#[test]
fn an_operation_the_store_refuses_fails_alone_and_the_others_beside_it_are_committed() {
    each_store(refused_alone);
}

// ---------------------------------------------------------------------------------------------
// 10,000 long-polls beside a healthy run

/// The flood's waiting requests.
const FLOOD: usize = 10_000;

/// The held resources the flood waits on.
const FLOOD_RESOURCES: usize = 100;

/// The default bound of waiting requests per token (`--max-waiters-per-token`).
const PER_TOKEN: usize = 1000;

/// The flood's connections open at once. A server serves at most 4,096 connections at once and
/// leaves the rest in the kernel's backlog: more than that would measure the kernel's SYN
/// retries, not the server.
const FLOOD_IN_FLIGHT: usize = 3000;

/// How long the flood may take to send all its requests.
const FLOOD_SENDING: Duration = Duration::from_secs(30);

/// How soon a request past the bound is refused ("at once": well below the 30 s a waiting
/// request waits).
const REFUSED_WITHIN: Duration = Duration::from_secs(10);

/// The other caller's reads of its resource while the flood waits, and their bound at p99.
const READS: usize = 200;
const READ_P99: Duration = Duration::from_millis(100);

/// The most threads and resident memory the server may hold with the flood waiting: waiting
/// requests are tasks, not threads (the bounds for the release build; the debug build
/// under test holds no more threads, and more memory only for its code).
const SERVER_THREADS: u64 = 64;
const SERVER_RSS_KIB: u64 = 256 * 1024;

#[test]
fn ten_thousand_long_polls_of_one_token_leave_another_tokens_run_and_reads_healthy() {
    raise_open_files(FLOOD_IN_FLIGHT as u64 + 1024);
    let db = Db::sqlite();
    let flood_token = make_token(&db, "flood", &["--all-resources"]);
    let calm_token = make_token(&db, "calm", &["--prefix", "other"]);
    let server = Server::start_serving(&db, &["--tokens", &tokens_file(&db)]);
    let pid = serving(db.store_url());
    let flooder = Client::new(&server, Some(&flood_token));
    for r in 0..FLOOD_RESOURCES {
        hold(&flooder, &format!("busy-{r}"), "holder");
    }

    // One caller parks 10,000 long-polls on the 100 held resources, each on a connection of
    // its own, and posts again whenever one is answered busy, as a waiting client does.
    let requests = (0..FLOOD)
        .map(|i| {
            let path = lock_path(&format!("busy-{}", i % FLOOD_RESOURCES), "");
            let body = acquire_body(&format!("w{i}"), Some(30));
            request_bytes("POST", &path, Some(&flood_token), Some(&body), false)
        })
        .collect();
    let flood = Flood::start(server.addr, requests, FLOOD_IN_FLIGHT, true, FLOOD_LIMIT);
    let sent_all = wait_for(FLOOD_SENDING, || flood.sent() == FLOOD);
    let calm = Client::new(&server, Some(&calm_token));
    let parked = parking(&calm, PER_TOKEN as u64);
    let mut held_most = footprint(pid);

    // Meanwhile another caller's guarded command runs to its end, and its reads are answered.
    let run = through(
        &db,
        &server,
        Some(&calm_token),
        &[
            "run",
            "--ttl",
            "6s",
            "--resource",
            "other",
            "--",
            "sleep",
            "8",
        ],
        "calm-run",
    );
    let held = wait_for(Duration::from_secs(30), || {
        calm.get(&lock_path("other", ""))
            .is_ok_and(|answer| answer.status == 200)
    });
    let mut reads = Vec::with_capacity(READS);
    let mut unread = Vec::new();
    if held {
        for _ in 0..READS {
            let start = Instant::now();
            match calm.get(&lock_path("other", "")) {
                Ok(answer) if answer.status == 200 => reads.push(start.elapsed()),
                Ok(answer) => unread.push(answer.describe()),
                Err(e) => unread.push(e),
            }
            held_most = held_most.max(footprint(pid));
            sleep(Duration::from_millis(10));
        }
    }
    let ran = run.finish(COMMAND);
    held_most = held_most.max(footprint(pid));

    // SIGTERM answers the waiting requests at once (busy), and the flood ends.
    let sent = flood.sent();
    flood.stop();
    drop(server);
    let exchanges = flood.finish();

    assert_eq!(
        ran.code(),
        Some(0),
        "a run of another token beside the flood ({sent} of {FLOOD} requests sent, the server \
         counting {parked:?} waiting, holding {held_most:?}) keeps its lease to its end: {}",
        ran.describe()
    );
    assert!(held, "the run's lock is seen through the server");
    assert!(unread.is_empty(), "reads of another token: {unread:#?}");
    reads.sort_unstable();
    let p99 = reads[READS * 99 / 100 - 1];
    assert!(
        p99 <= READ_P99,
        "another token's reads beside the flood: p99 {p99:?} (over {READS}), at most \
         {READ_P99:?}; slowest {:?}",
        reads.last()
    );

    let Footprint { threads, rss_kib } = held_most;
    assert!(
        threads <= SERVER_THREADS && rss_kib <= SERVER_RSS_KIB,
        "the server beside the flood holds at most {SERVER_THREADS} threads and \
         {SERVER_RSS_KIB} KiB resident; it held {threads} threads and {rss_kib} KiB"
    );

    // Every one of the flood's connections got whole answers: 200, 429 or 503.
    assert!(
        sent_all,
        "the flood's {FLOOD} requests are sent within {FLOOD_SENDING:?}"
    );
    let (failed, shown) = unanswered(&exchanges, 10);
    assert_eq!(
        failed, 0,
        "every flood request gets a whole answer; {failed} did not, such as {shown:#?}"
    );
    for (exchange, answer) in answers(&exchanges) {
        let fine = match answer.status {
            200 => answer.json()["acquired"].is_boolean(),
            429 => answer.too_many_waiters(PER_TOKEN as u64).is_ok(),
            503 => answer.problem().is_ok(),
            _ => false,
        };
        assert!(
            fine,
            "flood request {}: {} (200, 429 past the bound, or 503, whole)",
            exchange.index,
            answer
                .too_many_waiters(PER_TOKEN as u64)
                .err()
                .unwrap_or_else(|| answer.describe())
        );
    }

    // With the default bound, 1,000 of them wait, and the rest are refused at once.
    let firsts: Vec<(&Exchange, &Answer)> = answers(&exchanges)
        .filter(|(exchange, _)| !exchange.again)
        .collect();
    let first_waiter_back = firsts
        .iter()
        .filter(|(_, answer)| answer.status == 200)
        .filter_map(|(exchange, _)| exchange.outcome.as_ref().ok().map(|(_, at)| *at))
        .min();
    let late = first_waiter_back.map_or(0, |back| {
        firsts
            .iter()
            .filter(|(exchange, _)| exchange.sent >= back)
            .count()
    });
    let admitted = firsts
        .iter()
        .filter(|(_, answer)| answer.status == 200)
        .count();
    assert!(
        admitted <= PER_TOKEN + late,
        "at most {PER_TOKEN} of one token's requests wait at once: {admitted} did ({late} sent \
         after a waiting one was answered)"
    );
    let slow: Vec<Duration> = firsts
        .iter()
        .filter(|(_, answer)| answer.status == 429)
        .filter_map(|(exchange, _)| exchange.took())
        .filter(|took| *took > REFUSED_WITHIN)
        .collect();
    assert!(
        slow.is_empty(),
        "requests past the bound are refused at once (within {REFUSED_WITHIN:?}); {} took \
         longer, up to {:?}",
        slow.len(),
        slow.iter().max()
    );
    assert_eq!(
        parked,
        Ok(PER_TOKEN as u64),
        "the flood parks as many waiting requests as the bound per token, and they wait \
         while the run runs"
    );
}

// ---------------------------------------------------------------------------------------------
// Renewals under a flood of waiters

/// Guarded commands renewing through the server while another token floods it.
const HOLDERS: usize = 3;

/// The other token's waiting requests, within the default bound per token.
const FLOOD_WAITERS: usize = 800;

/// The resources they wait on, held by that token's own owner.
const FLOOD_HELD: usize = 40;

/// Threads of the other token that acquire and release, and acquire held resources, all along.
const CHURNERS: usize = 4;

/// Acquires of the other token that never wait, until `stop`: pairs on resources of its own,
/// and tries of the held ones. How many requests it made.
fn churn(server: &Server, token: &str, churner: usize, stop: &AtomicBool) -> usize {
    let http = Client::new(server, Some(token));
    let owner = format!("churn-{churner}");
    let mut made = 0;
    for round in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let path = lock_path(&format!("churn-{churner}-{}", round % 16), "");
        if http
            .post(&path, &acquire_body(&owner, None))
            .is_ok_and(|answer| answer.granted().is_some())
        {
            let _ = http.delete(&format!("{path}?owner={owner}"));
        }
        let held = lock_path(&format!("fl-{}", round % FLOOD_HELD), "");
        let _ = http.post(&held, &acquire_body(&owner, None));
        made += 3;
    }
    made
}

/// The renewals test on one store.
fn renewals_under_a_flood(db: &Db) {
    let holders = make_token(db, "holders", &["--prefix", "hold-"]);
    let flooding = make_token(db, "flood", &["--all-resources"]);
    let server = Server::start_serving(db, &["--tokens", &tokens_file(db)]);
    let flooder = Client::new(&server, Some(&flooding));
    for r in 0..FLOOD_HELD {
        hold(&flooder, &format!("fl-{r}"), "fl-holder");
    }
    let requests = (0..FLOOD_WAITERS)
        .map(|i| {
            let path = lock_path(&format!("fl-{}", i % FLOOD_HELD), "");
            let body = acquire_body(&format!("fw-{i}"), Some(30));
            request_bytes("POST", &path, Some(&flooding), Some(&body), false)
        })
        .collect();
    let flood = Flood::start(server.addr, requests, FLOOD_WAITERS, true, FLOOD_LIMIT);
    let stop = AtomicBool::new(false);
    let (parked, ran, made) = thread::scope(|s| {
        let churners: Vec<_> = (0..CHURNERS)
            .map(|churner| {
                let (server, token, stop) = (&server, &flooding, &stop);
                s.spawn(move || churn(server, token, churner, stop))
            })
            .collect();
        wait_for(FLOOD_SENDING, || flood.sent() == FLOOD_WAITERS);
        let parked = parking(&flooder, FLOOD_WAITERS as u64);
        let runs: Vec<Proc> = (0..HOLDERS)
            .map(|k| {
                let resource = format!("hold-{k}");
                through(
                    db,
                    &server,
                    Some(&holders),
                    &[
                        "run",
                        "--ttl",
                        "3s",
                        "--resource",
                        &resource,
                        "--",
                        "sleep",
                        "9",
                    ],
                    &format!("holder-{k}"),
                )
            })
            .collect();
        let ran: Vec<_> = runs.into_iter().map(|run| run.finish(COMMAND)).collect();
        stop.store(true, Ordering::SeqCst);
        let made: usize = churners
            .into_iter()
            .map(|churner| churner.join().expect("a churner"))
            .sum();
        (parked, ran, made)
    });
    let sent = flood.sent();
    flood.stop();
    drop(server);
    flood.finish();
    for run in &ran {
        assert_eq!(
            run.code(),
            Some(0),
            "{:?}: a run renewing through the server beside another token's {sent} waiting \
             requests (the server counting {parked:?}) and {made} acquires keeps its lease: {}",
            db.kind,
            run.describe()
        );
    }
    assert_eq!(
        parked,
        Ok(FLOOD_WAITERS as u64),
        "{:?}: the other token's waiting requests all wait while the runs renew",
        db.kind
    );
}

#[test]
fn renewals_keep_their_leases_through_another_tokens_flood_of_waiters_and_acquires() {
    each_store(renewals_under_a_flood);
}

// ---------------------------------------------------------------------------------------------
// The bounds are flags

/// A waiting request of `owner` on `resource` (held) for up to `wait` seconds, by `token`, as
/// raw bytes for a [`Flood`].
fn waiting(token: Option<&str>, resource: &str, owner: &str, wait: u64) -> Vec<u8> {
    let body = acquire_body(owner, Some(wait));
    request_bytes("POST", &lock_path(resource, ""), token, Some(&body), false)
}

/// The bounds test on one store: at most 3 waiting requests per token, 5 on the server.
fn bounded_by_flags(db: &Db) {
    let [a, b, c] = ["a", "b", "c"].map(|name| make_token(db, name, &["--all-resources"]));
    let server = Server::start_serving(
        db,
        &[
            "--tokens",
            &tokens_file(db),
            "--max-waiters-per-token",
            "3",
            "--max-waiters",
            "5",
        ],
    );
    let [by_a, by_b, by_c] = [&a, &b, &c].map(|token| Client::new(&server, Some(token)));
    for r in 0..9 {
        hold(&by_c, &format!("q-{r}"), "holder");
    }
    let refused = |answer: Result<Answer, String>, bound: u64, what: &str| {
        let answer = answer.unwrap_or_else(|e| panic!("{what}: {e}"));
        if let Err(why) = answer.too_many_waiters(bound) {
            panic!("{:?}: {what} is refused: {why}", db.kind);
        }
    };

    // A's fourth waiting request is past the bound per token.
    let of_a = Flood::start(
        server.addr,
        vec![
            waiting(Some(&a), "q-1", "a1", 30),
            waiting(Some(&a), "q-2", "a2", 30),
            waiting(Some(&a), "q-3", "a3", 30),
        ],
        3,
        false,
        FLOOD_LIMIT,
    );
    until_parked(&by_a, 3, "A's three waiting requests");
    refused(
        by_a.post(&lock_path("q-4", ""), &acquire_body("a4", Some(30))),
        3,
        "A's fourth waiting request",
    );

    // The server's fourth and fifth, of another token, wait; the sixth, of a third token with
    // none waiting, is past the server's bound.
    let of_b = Flood::start(
        server.addr,
        vec![
            waiting(Some(&b), "q-5", "b1", 30),
            waiting(Some(&b), "q-6", "b2", 6),
        ],
        2,
        false,
        FLOOD_LIMIT,
    );
    until_parked(&by_b, 5, "B's two waiting requests beside A's three");
    refused(
        by_c.post(&lock_path("q-7", ""), &acquire_body("c1", Some(30))),
        5,
        "the server's sixth waiting request",
    );

    // Requests that do not wait are never refused: without wait_seconds, or with 0.
    for (client, token) in [(&by_a, "a"), (&by_b, "b"), (&by_c, "c")] {
        for wait in [None, Some(0)] {
            let owner = format!("{token}-now");
            let answer = client
                .post(&lock_path("q-8", ""), &acquire_body(&owner, wait))
                .expect("a request that does not wait");
            assert!(
                answer.busy(),
                "{:?}: a request of {token} that does not wait (wait_seconds {wait:?}) is \
                 answered busy: {}",
                db.kind,
                answer.describe()
            );
        }
    }

    // B's second request leaves when its 6 s run out; then a waiting request of C gets the
    // place it left.
    wait_until(PARKING, "B's 6 s waiting request is answered", || {
        of_b.answered() == 1
    });
    until_parked(&by_c, 4, "after B's second request left");
    let answer = by_c
        .post(&lock_path("q-7", ""), &acquire_body("c2", Some(1)))
        .expect("C's waiting request");
    assert!(
        answer.busy(),
        "{:?}: a waiting request that comes after another left waits (then is answered busy): {}",
        db.kind,
        answer.describe()
    );

    // SIGTERM answers the waiting requests at once: busy, each whole.
    drop(server);
    for exchange in of_a.finish().iter().chain(&of_b.finish()) {
        match &exchange.outcome {
            Ok((answer, _)) => assert!(answer.busy(), "{:?}: {}", db.kind, answer.describe()),
            Err(why) => panic!("{:?}: a waiting request: {why}", db.kind),
        }
    }
}

#[test]
fn waiting_requests_past_a_bound_are_429_and_the_bounds_are_flags() {
    each_store(bounded_by_flags);
}

/// The `--wait` test on one store: a server that lets one caller wait once, a caller without a
/// token (callers without a token are one caller) already waiting.
fn waits_past_a_429(db: &Db) {
    let server = Server::start_serving(db, &["--max-waiters-per-token", "1"]);
    let http = Client::new(&server, None);
    hold(&http, "cli", "holder");
    let parked = Flood::start(
        server.addr,
        vec![waiting(None, "cli", "w", 8)],
        1,
        false,
        FLOOD_LIMIT,
    );
    until_parked(&http, 1, "the waiting request without a token");
    let acquire = through(
        db,
        &server,
        None,
        &[
            "acquire", "cli", "--owner", "cli-user", "--ttl", "60s", "--wait", "20s",
        ],
        "acquire-past-429",
    );
    wait_until(
        PARKING,
        "the server answers the command line's waiting request 429",
        || server.stderr().contains("POST /locks/cli 429"),
    );
    // The waiting request's 8 s run out, and it leaves; then the holder lets go.
    wait_until(PARKING, "the waiting request is answered", || {
        parked.answered() == 1
    });
    let released = http
        .delete(&lock_path("cli", "?owner=holder"))
        .expect("the holder's release");
    assert_eq!(released.status, 204, "{}", released.describe());
    let out = acquire.finish(COMMAND);
    assert_eq!(
        out.code(),
        Some(0),
        "{:?}: acquire --wait through a server that answered it 429 keeps trying within its \
         wait: {}",
        db.kind,
        out.describe()
    );
    let answer = parse_line(&out.output.stdout);
    assert_eq!(answer["acquired"], true, "{answer}");
    assert_eq!(answer["lock"]["owner"], "cli-user", "{answer}");
    // It asked again after a pause each time, never at once: the parked request's 8 s at four
    // requests a second are 32; far fewer than a loop without a pause sends (thousands).
    let refused = server.stderr().matches("POST /locks/cli 429").count();
    assert!(
        refused <= 60,
        "{:?}: a waiter past a 429 pauses before it asks again; it was answered 429 {refused} times",
        db.kind
    );
    drop(server);
    for exchange in parked.finish() {
        let (answer, _) = exchange.outcome.expect("the waiting request's answer");
        assert!(answer.busy(), "{}", answer.describe());
    }
}

#[test]
fn acquire_wait_through_a_server_keeps_trying_past_a_429_within_its_wait() {
    each_store(waits_past_a_429);
}
