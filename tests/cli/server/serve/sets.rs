//! Lock sets through the lock server (the contract's "Lock sets" and the `POST /sets`,
//! `/sets/renew`, `/sets/release` row of "The lock server"), from outside: the real HTTP client
//! against a real server over each store, the CLI beside it on the same `--db` to say what the
//! store holds, and raw requests where a header is the point (`Distlock-Grant`).
//!
//! A set is all or nothing: every refusal below is checked to have changed nothing (the server's
//! `GET /locks` and `GET /log`, or the CLI's `list` and `log` for the 422 table). The last test
//! drives distlock's own client of a server (the store behind `--db http://…`) against the same
//! endpoints, which is what every command through a server uses for sets.

use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use distlock::engine::Request;
use distlock::lock::{Grant, Members, Mode as LockMode, Owner, Resource, SetAcquire, Ttl};
use distlock::store::op::{self, Acquisition};
use distlock::store::{Location, LockStore, Locks, NetworkFs};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use super::{
    HANDOVER, QUEUED, by, each_store_at_once, raw_request, refused, state, take, take_in, timed,
    until_waiting,
};
use crate::common::output::keys;
use crate::common::server::{Server, lock_path};
use crate::common::store::each_store;
use crate::common::tenure::{Mode, Tenure, busy, held, mismatch};
use crate::server::tokens::{call, make_token};

/// The body of a set's acquire of `resources` by `owner` for `ttl` seconds.
fn set_by(resources: &[&str], owner: &str, ttl: u64) -> Value {
    json!({ "resources": resources, "owner": owner, "ttl_seconds": ttl })
}

/// `POST /sets` that must grant: exactly `{"acquired":true,"locks":[…]}`, one lock per member
/// by resource, each in `mode` with its lease exactly the ttl. The tenures, by resource.
fn take_set(server: &Server, body: &Value, mode: Mode) -> Vec<Tenure> {
    let reply = server.post("/sets", body);
    granted(&reply.json(200), body, mode, &reply.describe())
}

/// The tenures of a set's grant `answer` to `body`, checked as [`take_set`] checks them.
fn granted(answer: &Value, body: &Value, mode: Mode, what: &str) -> Vec<Tenure> {
    assert_eq!(keys(answer), ["acquired", "locks"], "{what}");
    assert_eq!(answer["acquired"], true, "{what}");
    let tenures: Vec<Tenure> = answer["locks"]
        .as_array()
        .unwrap_or_else(|| panic!("locks is an array: {what}"))
        .iter()
        .map(|lock| Tenure::read(lock, mode))
        .collect();
    let mut members: Vec<&str> = body["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a name"))
        .collect();
    members.sort_unstable();
    members.dedup();
    let resources: Vec<&str> = tenures.iter().map(|t| t.resource.as_str()).collect();
    assert_eq!(
        resources, members,
        "one lock per member, by resource: {what}"
    );
    let ttl = body["ttl_seconds"].as_i64().expect("a ttl");
    for tenure in &tenures {
        assert_eq!(
            tenure.expires_ms() - tenure.acquired_ms(),
            ttl * 1000,
            "every member's lease is the ttl: {what}"
        );
        assert_eq!(tenure.owner, body["owner"].as_str().expect("an owner"));
    }
    tenures
}

/// A set's busy answer: `{"acquired":false,"resources":[…],"blocked":[…]}`, each blocked member
/// `(resource, every live tenure, others waiting, the requester's place)` as one resource's busy
/// answer shows it, less `"acquired"`.
fn set_busy(resources: &[&str], blocked: &[(&str, &[&Tenure], u64, Option<u64>)]) -> Value {
    let blocked: Vec<Value> = blocked
        .iter()
        .map(|(resource, holders, waiting, position)| {
            let mut member = busy(resource, holders);
            let fields = member.as_object_mut().expect("an object");
            fields.remove("acquired");
            if *waiting > 0 {
                fields.insert("waiting".into(), json!(waiting));
            }
            if let Some(position) = position {
                fields.insert("position".into(), json!(position));
            }
            member
        })
        .collect();
    json!({ "acquired": false, "resources": resources, "blocked": blocked })
}

/// `{"resources":[…],"owner":OWNER}` and, when given, `"fences":{name: fence}` of `tenures`.
fn change_of(resources: &[&str], owner: &str, fences: Option<&[(&str, i64)]>) -> Value {
    let mut body = json!({ "resources": resources, "owner": owner });
    if let Some(fences) = fences {
        let named: serde_json::Map<String, Value> = fences
            .iter()
            .map(|(name, fence)| ((*name).to_owned(), json!(fence)))
            .collect();
        body["fences"] = Value::Object(named);
    }
    body
}

/// A set's renew body: [`change_of`] with `ttl_seconds`.
fn renew_of(resources: &[&str], owner: &str, ttl: u64, fences: Option<&[(&str, i64)]>) -> Value {
    let mut body = change_of(resources, owner, fences);
    body["ttl_seconds"] = json!(ttl);
    body
}

/// `GET /locks/{r}` must say nobody holds `resource`.
fn free(server: &Server, resource: &str) {
    server.get(&lock_path(resource, "")).problem(404);
}

// ---------------------------------------------------------------------------------------------
// Acquire

#[test]
fn a_set_is_granted_whole_one_lock_per_member_by_resource_each_with_its_own_fence() {
    each_store(|db| {
        let server = Server::start(db);
        let body = set_by(&["db", "cache", "queue", "db"], "w1", 60);
        let tenures = take_set(&server, &body, Mode::Exclusive);
        let mut fences: Vec<i64> = tenures.iter().map(|t| t.fence).collect();
        fences.sort_unstable();
        fences.dedup();
        assert_eq!(fences.len(), 3, "each member its own fence: {tenures:?}");
        for tenure in &tenures {
            let (code, status) = db.status(&tenure.resource);
            assert_eq!((code, &status), (0, &held(&[tenure])));
            assert_eq!(
                server.get(&lock_path(&tenure.resource, "")).json(200),
                status
            );
        }
        let acquired: Vec<String> = db
            .log(&[])
            .iter()
            .filter(|event| event["event"] == "acquired")
            .map(|event| event["resource"].as_str().expect("a resource").to_owned())
            .collect();
        assert_eq!(acquired, ["cache", "db", "queue"], "one event per member");

        // Distlock-Grant names each member's tenure, in the members' order: `db` joined (its
        // tenure and fence kept), `extra` new. Distlock-Waited-Ms is there as for one resource.
        let body = set_by(&["extra", "db"], "w1", 60);
        let raw = server.raw(&raw_request(
            "POST",
            "/sets",
            "",
            body.to_string().as_bytes(),
        ));
        assert_eq!(raw.status, 200, "{}", String::from_utf8_lossy(&raw.body));
        assert_eq!(raw.header("distlock-grant"), Some("extended,new"));
        assert!(
            raw.header("distlock-waited-ms")
                .is_some_and(|ms| ms.parse::<u64>().is_ok()),
            "{:?}",
            raw.headers
        );
        let answer: Value = serde_json::from_slice(&raw.body).expect("a JSON answer");
        let joined = granted(&answer, &body, Mode::Exclusive, "the join");
        assert_eq!(
            joined[0].fence, tenures[1].fence,
            "db's tenure is the same one"
        );
        assert!(joined[1].fence > fences[2], "extra's fence is new");

        // The mode applies to every member: two shared holders of a set.
        let shared = |owner: &str| json!({"resources": ["r2", "r1"], "owner": owner, "ttl_seconds": 60, "shared": true});
        let s1 = take_set(&server, &shared("s1"), Mode::Shared);
        let s2 = take_set(&server, &shared("s2"), Mode::Shared);
        for (i, resource) in ["r1", "r2"].into_iter().enumerate() {
            assert_eq!(
                server.get(&lock_path(resource, "")).json(200),
                held(&[&s1[i], &s2[i]])
            );
        }
    });
}

#[test]
fn a_busy_set_names_every_busy_member_with_its_holders_and_grants_nothing() {
    each_store(|db| {
        let server = Server::start(db);
        let b = take(&server, "b", "h1", 60);
        let shared = |owner: &str| json!({"owner": owner, "ttl_seconds": 60, "shared": true});
        let d1 = take_in(&server, "d", &shared("s1"), Mode::Shared);
        let d2 = take_in(&server, "d", &shared("s2"), Mode::Shared);
        let e = take(&server, "e", "h3", 60);
        thread::scope(|s| {
            // Someone waits for e: its entry says so.
            let waiter = s.spawn(|| {
                server.post(
                    &lock_path("e", ""),
                    &json!({"owner": "v", "ttl_seconds": 60, "wait_seconds": 20}),
                )
            });
            until_waiting(&server, "e", 1, QUEUED);
            let before = state(&server);
            let members = ["a", "b", "c", "d", "e"];
            let reply = server.post("/sets", &set_by(&["e", "d", "c", "b", "a"], "w", 60));
            let expected = set_busy(
                &members,
                &[
                    ("b", &[&b], 0, None),
                    ("d", &[&d1, &d2], 0, None),
                    ("e", &[&e], 1, None),
                ],
            );
            assert_eq!(reply.json(200), expected, "{}", reply.describe());
            assert_eq!(state(&server), before, "a busy set takes nothing");
            free(&server, "a");
            free(&server, "c");
            server.delete(&lock_path("e", "?owner=h3")).no_content();
            let granted = waiter.join().expect("the waiter");
            assert_eq!(granted.json(200)["lock"]["owner"], "v");
        });
    });
}

#[test]
fn a_set_mismatch_is_409_naming_the_first_such_member_by_resource_and_does_not_wait() {
    each_store(|db| {
        let server = Server::start(db);
        let s1 = take_in(
            &server,
            "c",
            &json!({"owner": "s1", "ttl_seconds": 60, "shared": true}),
            Mode::Shared,
        );
        let b1 = take_in(
            &server,
            "b",
            &json!({"owner": "b1", "ttl_seconds": 60, "limit": 2}),
            Mode::Limit(2),
        );
        let before = state(&server);
        // Exclusive beside a semaphore (b) is a mismatch; beside shared holders (c), busy: b.
        server
            .post("/sets", &set_by(&["d", "c", "b", "a"], "m", 60))
            .problem_carrying(409, &mismatch("b", &[&b1]));
        // A semaphore beside shared holders: c, the first by resource of the clashing ones.
        let limit = json!({"resources": ["d", "c"], "owner": "m", "ttl_seconds": 60, "limit": 3});
        server
            .post("/sets", &limit)
            .problem_carrying(409, &mismatch("c", &[&s1]));
        let start = Instant::now();
        let mut waits = limit.clone();
        waits["wait_seconds"] = json!(30);
        server
            .post("/sets", &waits)
            .problem_carrying(409, &mismatch("c", &[&s1]));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "409 does not wait"
        );
        assert_eq!(state(&server), before, "a 409 changes nothing");
        free(&server, "a");
        free(&server, "d");
    });
}

// ---------------------------------------------------------------------------------------------
// Renew and release

#[test]
fn a_sets_renew_and_release_are_all_or_nothing_naming_the_first_member_that_fails() {
    each_store(|db| {
        let server = Server::start(db);
        let set = take_set(&server, &set_by(&["a", "b"], "w", 60), Mode::Exclusive);
        take(&server, "x", "other", 60);
        let before = state(&server);
        let refusals = [
            // (members, what the server answers: the first member that fails, by resource)
            (vec!["a", "b", "c"], 404, "c", "not_found"),
            (vec!["x", "a", "b"], 403, "x", "forbidden"),
            (vec!["x", "c", "b", "a"], 404, "c", "not_found"),
        ];
        for (members, status, resource, reason) in &refusals {
            server
                .post("/sets/renew", &renew_of(members, "w", 120, None))
                .problem_carrying(*status, &refused("renewed", resource, reason));
            server
                .post("/sets/release", &change_of(members, "w", None))
                .problem_carrying(*status, &refused("released", resource, reason));
        }
        assert_eq!(state(&server), before, "a refused set changes nothing");
        for tenure in &set {
            assert_eq!(
                server.get(&lock_path(&tenure.resource, "")).json(200),
                held(&[tenure])
            );
        }

        let reply = server.post("/sets/renew", &renew_of(&["b", "a"], "w", 120, None));
        let answer = reply.json(200);
        assert_eq!(keys(&answer), ["locks", "renewed"], "{}", reply.describe());
        assert_eq!(answer["renewed"], true);
        let renewed: Vec<Tenure> = answer["locks"]
            .as_array()
            .expect("locks")
            .iter()
            .map(|lock| Tenure::read(lock, Mode::Exclusive))
            .collect();
        assert_eq!(renewed.len(), 2, "{answer}");
        for (old, new) in set.iter().zip(&renewed) {
            assert_eq!((&new.resource, new.fence), (&old.resource, old.fence));
            assert!(new.expires_ms() >= old.expires_ms() + 59_000, "{answer}");
        }

        let reply = server.post("/sets/release", &change_of(&["b", "a", "b"], "w", None));
        assert_eq!(
            reply.json(200),
            json!({"released": true, "resources": ["a", "b"]}),
            "{}",
            reply.describe()
        );
        free(&server, "a");
        free(&server, "b");
        server
            .post("/sets/release", &change_of(&["a", "b"], "w", None))
            .problem_carrying(404, &refused("released", "a", "not_found"));
    });
}

#[test]
fn a_sets_fences_name_its_tenures_and_one_that_does_not_match_changes_nothing() {
    each_store(|db| {
        let server = Server::start(db);
        let set = take_set(&server, &set_by(&["a", "b"], "w", 60), Mode::Exclusive);
        let (a, b) = (set[0].fence, set[1].fence);
        let before = state(&server);
        server
            .post(
                "/sets/renew",
                &renew_of(&["a", "b"], "w", 120, Some(&[("a", a), ("b", b + 1000)])),
            )
            .problem_carrying(404, &refused("renewed", "b", "not_found"));
        server
            .post(
                "/sets/release",
                &change_of(&["a", "b"], "w", Some(&[("b", b), ("a", a + 1000)])),
            )
            .problem_carrying(404, &refused("released", "a", "not_found"));
        assert_eq!(
            state(&server),
            before,
            "a fence that does not match changes nothing"
        );

        let fences = [("a", a), ("b", b)];
        let answer = server
            .post(
                "/sets/renew",
                &renew_of(&["a", "b"], "w", 120, Some(&fences)),
            )
            .json(200);
        assert_eq!(answer["locks"][0]["fence"], a, "{answer}");
        assert_eq!(answer["locks"][1]["fence"], b, "{answer}");
        assert_eq!(
            server
                .post("/sets/release", &change_of(&["a", "b"], "w", Some(&fences)))
                .json(200),
            json!({"released": true, "resources": ["a", "b"]})
        );
        free(&server, "a");
        free(&server, "b");
    });
}

/// `run`'s end of a set: `POST /sets/release` with `"each":true` ends every member's tenure
/// named by its fence on its own (one no longer held is skipped, the others let go all the
/// same), or keeps each until its start + `hold_at_least_seconds`; the answer gives each
/// member's end as `DELETE /locks/{r}` would say it.
#[test]
fn a_sets_release_of_each_member_ends_every_tenure_still_held_or_keeps_it_for_a_hold() {
    each_store(|db| {
        let server = Server::start(db);
        let set = take_set(&server, &set_by(&["a", "b", "c"], "w", 60), Mode::Exclusive);
        let fences: Vec<(&str, i64)> = set
            .iter()
            .map(|tenure| (tenure.resource.as_str(), tenure.fence))
            .collect();
        db.json(&["break", "b", "--reason", "stuck"], 0);
        let mut each = change_of(&["a", "b", "c"], "w", Some(fences.as_slice()));
        each["each"] = json!(true);
        let reply = server.post("/sets/release", &each);
        assert_eq!(
            reply.json(200),
            json!({"members": [
                {"released": true, "resource": "a"},
                {"released": false, "resource": "b", "reason": "not_found"},
                {"released": true, "resource": "c"},
            ]}),
            "{}",
            reply.describe()
        );
        for member in ["a", "b", "c"] {
            free(&server, member);
        }
        // Again: nothing of the owner's is left to end.
        let reply = server.post("/sets/release", &each);
        assert_eq!(
            reply.json(200)["members"][0],
            json!({"released": false, "resource": "a", "reason": "not_found"}),
            "{}",
            reply.describe()
        );

        let set = take_set(&server, &set_by(&["a", "b"], "w", 60), Mode::Exclusive);
        let fences: Vec<(&str, i64)> = set
            .iter()
            .map(|tenure| (tenure.resource.as_str(), tenure.fence))
            .collect();
        let mut kept = change_of(&["a", "b"], "w", Some(fences.as_slice()));
        kept["each"] = json!(true);
        kept["hold_at_least_seconds"] = json!(3600);
        let reply = server.post("/sets/release", &kept);
        let answer = reply.json(200);
        for (at, tenure) in set.iter().enumerate() {
            let member = &answer["members"][at];
            assert_eq!(
                keys(member),
                ["kept_until", "released", "resource"],
                "{answer}"
            );
            assert_eq!(member["resource"], tenure.resource.as_str(), "{answer}");
            let lock = server.get(&lock_path(&tenure.resource, "")).json(200)["lock"].clone();
            assert_eq!(lock["fence"], tenure.fence, "{lock}");
            assert_eq!(member["kept_until"], lock["expires_at"], "{answer} {lock}");
            let kept = Tenure::read(&lock, Mode::Exclusive);
            assert_eq!(kept.expires_ms() - kept.acquired_ms(), 3_600_000, "{lock}");
        }

        // `each` names the tenures it ends; a hold is for `each` alone.
        let before = state(&server);
        let mut unfenced = change_of(&["a", "b"], "w", None);
        unfenced["each"] = json!(true);
        let mut held_whole = change_of(&["a", "b"], "w", Some(fences.as_slice()));
        held_whole["hold_at_least_seconds"] = json!(60);
        let mut not_a_flag = change_of(&["a", "b"], "w", Some(fences.as_slice()));
        not_a_flag["each"] = json!("yes");
        let mut no_hold = kept.clone();
        no_hold["hold_at_least_seconds"] = json!(0);
        for (body, words) in [
            (&unfenced, "fences"),
            (&held_whole, "each"),
            (&not_a_flag, "each"),
            (&no_hold, "hold_at_least_seconds"),
        ] {
            let problem = server.post("/sets/release", body).problem(422);
            assert!(
                problem["detail"]
                    .as_str()
                    .is_some_and(|detail| detail.contains(words)),
                "{body}: {problem}"
            );
        }
        assert_eq!(state(&server), before, "a refused body changes nothing");
    });
}

/// `POST /sets/leave`: a set waiter gives up its place in every member's queue at once, and
/// its waiting request ends.
#[test]
fn a_set_waiter_that_leaves_gives_up_every_place_at_once() {
    each_store(|db| {
        let server = Server::start(db);
        take(&server, "a", "h1", 60);
        take(&server, "b", "h2", 60);
        let body = json!({"resources": ["c", "b", "a"], "owner": "w", "ttl_seconds": 60,
                          "wait_seconds": 60});
        thread::scope(|s| {
            let waiter = s.spawn(|| timed(|| server.post("/sets", &body)));
            for member in ["a", "b", "c"] {
                until_waiting(&server, member, 1, QUEUED);
            }
            let left = Instant::now();
            server
                .post("/sets/leave", &change_of(&["a", "b", "c"], "w", None))
                .no_content();
            for member in ["a", "b", "c"] {
                assert_eq!(
                    super::waiting_via(&server, member),
                    0,
                    "{member}: the place is gone when the leave is answered"
                );
            }
            let (reply, answered) = waiter.join().expect("the waiter");
            assert_eq!(reply.json(200)["acquired"], false, "{}", reply.describe());
            assert!(answered - left < HANDOVER);
        });
        // c is no longer reserved for it.
        take(&server, "c", "later", 60);
    });
}

// ---------------------------------------------------------------------------------------------
// Bad input

/// `{"resources":["r00",…]}`'s names: `n` distinct ones.
fn numbered(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("r{i:02}")).collect()
}

#[test]
fn bad_set_bodies_are_422_naming_what_is_wrong_and_change_nothing() {
    each_store(|db| {
        let server = Server::start(db);
        take_set(&server, &set_by(&["a", "b"], "w", 60), Mode::Exclusive);
        let too_many = numbered(65);
        let long = "n".repeat(256);
        // (what is wrong, the body's `resources`, a word of the 422's detail)
        let wrong_members: Vec<(&str, Value, &str)> = vec![
            ("empty", json!([]), "at least one resource"),
            (
                "65 distinct",
                json!(too_many),
                "at most 64 resources; 65 were given",
            ),
            ("not an array", json!("a"), "must be an array"),
            ("a number", json!(["a", 7]), "resources[1] must be a string"),
            ("an empty name", json!(["a", ""]), "resources[1]"),
            ("a blank name", json!(["a", "  "]), "blank"),
            (
                "a control character",
                json!(["a", "b\u{1}"]),
                "control characters",
            ),
            ("256 bytes", json!(["a", long]), "256 bytes long"),
        ];
        let mut rows: Vec<(String, &str, Value, &str)> = Vec::new();
        for path in ["/sets", "/sets/renew", "/sets/release"] {
            let base = match path {
                "/sets" | "/sets/renew" => json!({"owner": "w", "ttl_seconds": 60}),
                _ => json!({"owner": "w"}),
            };
            let with = |fields: &[(&str, Value)]| {
                let mut body = base.clone();
                for (name, value) in fields {
                    body[*name] = value.clone();
                }
                body
            };
            for (what, resources, word) in &wrong_members {
                rows.push((
                    format!("{path}: {what}"),
                    path,
                    with(&[("resources", resources.clone())]),
                    word,
                ));
            }
            rows.push((
                format!("{path}: no resources"),
                path,
                base.clone(),
                "resources is required",
            ));
            rows.push((
                format!("{path}: resource instead of resources"),
                path,
                with(&[("resource", json!("a"))]),
                "resources is required",
            ));
            rows.push((
                format!("{path}: an unknown field"),
                path,
                with(&[("resources", json!(["a", "b"])), ("colour", json!("red"))]),
                r#"unknown field "colour""#,
            ));
            rows.push((
                format!("{path}: no owner"),
                path,
                json!({"resources": ["a", "b"], "ttl_seconds": 60}),
                "owner is required",
            ));
        }
        for path in ["/sets/renew", "/sets/release"] {
            let body = |fences: Value| {
                let mut body = json!({"resources": ["a", "b"], "owner": "w", "fences": fences});
                if path == "/sets/renew" {
                    body["ttl_seconds"] = json!(60);
                }
                body
            };
            for (what, fences, word) in [
                (
                    "fences naming a non-member",
                    json!({"a": 1, "b": 2, "c": 3}),
                    r#"fences names "c", which is not one of the set's resources"#,
                ),
                ("fences missing a member", json!({"a": 1}), "no fence for b"),
                ("fences not an object", json!([1, 2]), "must be an object"),
                (
                    "a fence not an integer",
                    json!({"a": 1, "b": "2"}),
                    "JSON integer",
                ),
            ] {
                rows.push((format!("{path}: {what}"), path, body(fences), word));
            }
        }
        rows.push((
            "/sets: a fence field".into(),
            "/sets",
            json!({"resources": ["a"], "owner": "w", "ttl_seconds": 60, "fences": {"a": 1}}),
            r#"unknown field "fences""#,
        ));
        rows.push((
            "/sets: ttl as a string".into(),
            "/sets",
            json!({"resources": ["c"], "owner": "w", "ttl_seconds": "60"}),
            "JSON integer",
        ));
        rows.push((
            "/sets/release: a ttl".into(),
            "/sets/release",
            json!({"resources": ["a"], "owner": "w", "ttl_seconds": 60}),
            r#"unknown field "ttl_seconds""#,
        ));
        let before = db.state();
        let mut wrong = Vec::new();
        for (what, path, body, word) in &rows {
            let reply = server.post(path, body);
            if reply.status != 422 {
                wrong.push(format!("{what}: {}", reply.describe()));
                continue;
            }
            let problem = reply.problem(422);
            let detail = problem["detail"].as_str().unwrap_or_default();
            if problem["type"] != "invalid-request" || !detail.contains(word) {
                wrong.push(format!("{what}: the detail should say {word:?}: {problem}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {} bad set requests were not refused with 422 saying why:\n{}",
            wrong.len(),
            rows.len(),
            wrong.join("\n")
        );
        server
            .post_as("/sets", "application/json", b"{\"resources\":[")
            .problem(400);
        server
            .post_as(
                "/sets",
                "text/plain",
                set_by(&["c"], "w", 60).to_string().as_bytes(),
            )
            .problem(415);
        assert_eq!(db.state(), before, "a refused set changes nothing");

        // Repeats collapse, and 64 distinct members are a set.
        take_set(
            &server,
            &set_by(&["c", "c", "d", "c"], "w2", 60),
            Mode::Exclusive,
        );
        let mut names = numbered(64);
        names.extend(["r00".to_owned(), "r63".to_owned()]);
        let body = json!({"resources": names, "owner": "w3", "ttl_seconds": 60});
        assert_eq!(take_set(&server, &body, Mode::Exclusive).len(), 64);
    });
}

// ---------------------------------------------------------------------------------------------
// Tokens

#[test]
fn a_set_with_a_member_outside_the_tokens_prefixes_is_403_and_nothing_is_granted() {
    each_store(|db| {
        let ci = make_token(db, "ci", &["--prefix", "a/"]);
        let other = make_token(db, "ci2", &["--prefix", "a/"]);
        let ops = make_token(db, "ops", &["--all-resources", "--operator"]);
        let tokens = db.file("tokens.json").display().to_string();
        let server = Server::start_serving(db, &["--tokens", &tokens]);
        let members = ["a/1", "b/x", "a/2"];
        for (path, body) in [
            ("/sets", set_by(&members, "w", 60)),
            ("/sets/renew", renew_of(&members, "w", 60, None)),
            ("/sets/release", change_of(&members, "w", None)),
            ("/sets/leave", change_of(&members, "w", None)),
        ] {
            let answer = call(&server, "POST", path, Some(&ci), Some(&body));
            let problem = answer.problem(403, "not-allowed");
            let detail = problem["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("token ci") && detail.contains("b/x"),
                "{path}: names the token and the member: {problem}"
            );
        }
        // One resource's leave is held to the token's prefixes as well.
        let leave = json!({"owner": "w"});
        call(
            &server,
            "POST",
            &lock_path("b/x", "/leave"),
            Some(&ci),
            Some(&leave),
        )
        .problem(403, "not-allowed");
        let left = call(
            &server,
            "POST",
            &lock_path("a/1", "/leave"),
            Some(&ci),
            Some(&leave),
        );
        assert_eq!(left.status, 204);
        let listed = call(&server, "GET", "/locks", Some(&ops), None);
        assert_eq!(listed.json(), json!({"locks": []}), "nothing was granted");
        assert_eq!(db.status("a/1").0, 1);

        // Within its prefixes: granted, and the tenures belong to the token that took them.
        let mine = set_by(&["a/1", "a/2"], "w", 60);
        let taken = call(&server, "POST", "/sets", Some(&ci), Some(&mine));
        assert_eq!(taken.status, 200);
        assert_eq!(taken.json()["acquired"], true, "{}", taken.json());
        let busy = call(&server, "POST", "/sets", Some(&other), Some(&mine));
        assert_eq!(busy.status, 200);
        assert_eq!(
            busy.json()["acquired"],
            false,
            "another token naming the same owner is busy: {}",
            busy.json()
        );
        let renew = renew_of(&["a/1", "a/2"], "w", 60, None);
        let problem = call(&server, "POST", "/sets/renew", Some(&other), Some(&renew))
            .problem(403, "forbidden");
        assert_eq!(
            (&problem["resource"], &problem["reason"]),
            (&json!("a/1"), &json!("forbidden")),
            "{problem}"
        );
        let renewed = call(&server, "POST", "/sets/renew", Some(&ci), Some(&renew));
        assert_eq!(renewed.status, 200);
        let release = change_of(&["a/1", "a/2"], "w", None);
        let released = call(&server, "POST", "/sets/release", Some(&ci), Some(&release));
        assert_eq!(
            (released.status, released.json()),
            (200, json!({"released": true, "resources": ["a/1", "a/2"]}))
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Waiting

#[test]
fn a_waiting_set_holds_nothing_and_is_granted_once_its_last_busy_member_is_let_go() {
    each_store(|db| {
        let server = Server::start(db);
        let a = take(&server, "a", "h1", 60);
        let b = take(&server, "b", "h2", 60);
        let body = json!({"resources": ["c", "b", "a"], "owner": "w", "ttl_seconds": 60,
                          "wait_seconds": 20});
        thread::scope(|s| {
            let waiter = s.spawn(|| timed(|| server.post("/sets", &body)));
            // In every member's queue at once, holding nothing: c is free, and kept for it.
            for member in ["a", "b", "c"] {
                until_waiting(&server, member, 1, QUEUED);
            }
            free(&server, "c");
            let late = server.post(&lock_path("c", ""), &by("late", 60)).json(200);
            assert_eq!(
                late,
                json!({"acquired": false, "resource": "c", "waiting": 1}),
                "a later request does not overtake the set on c"
            );

            server.delete(&lock_path("a", "?owner=h1")).no_content();
            sleep(Duration::from_millis(500));
            assert!(!waiter.is_finished(), "b is still held");
            free(&server, "a");

            let let_go = Instant::now();
            server.delete(&lock_path("b", "?owner=h2")).no_content();
            let (reply, answered) = waiter.join().expect("the waiter");
            let tenures = granted(&reply.json(200), &body, Mode::Exclusive, &reply.describe());
            assert!(tenures[0].fence > a.fence && tenures[1].fence > b.fence);
            let took = answered - let_go;
            assert!(took < HANDOVER, "answered {took:?} after the last release");
        });
        for member in ["a", "b", "c"] {
            assert_eq!(db.status(member).1["lock"]["owner"], "w");
            assert_eq!(db.waiting(member), 0);
        }
    });
}

#[test]
fn sigterm_answers_a_waiting_set_busy_with_its_place_in_each_blocked_members_queue() {
    each_store_at_once(|db| {
        let server = Server::start(db);
        let a = take(&server, "a", "h1", 60);
        let b = take(&server, "b", "h2", 60);
        let wait = json!({"owner": "v", "ttl_seconds": 60, "wait_seconds": 60});
        let set = json!({"resources": ["a", "b", "c"], "owner": "w", "ttl_seconds": 60,
                         "wait_seconds": 60});
        let answer = thread::scope(|s| {
            let single = s.spawn(|| server.post(&lock_path("b", ""), &wait));
            until_waiting(&server, "b", 1, QUEUED);
            let waiter = s.spawn(|| server.post("/sets", &set));
            until_waiting(&server, "b", 2, QUEUED);
            until_waiting(&server, "a", 1, QUEUED);
            server.signal(Signal::SIGTERM);
            let reply = waiter.join().expect("the set waiter");
            single.join().expect("the single waiter").json(200);
            reply.json(200)
        });
        // Second on b behind v, first on a; c, free and its turn, is not blocked.
        let expected = set_busy(
            &["a", "b", "c"],
            &[("a", &[&a], 0, Some(1)), ("b", &[&b], 1, Some(2))],
        );
        assert_eq!(answer, expected);
        let out = server.finish();
        assert_eq!(out.code(), Some(0), "{}", out.describe());
    });
}

// ---------------------------------------------------------------------------------------------
// Metrics and the log line

#[test]
fn the_set_routes_are_counted_and_logged_by_route_and_status() {
    each_store(|db| {
        let server = Server::start(db);
        take_set(&server, &set_by(&["a", "b"], "w", 60), Mode::Exclusive);
        server
            .post("/sets/renew", &renew_of(&["a", "b"], "w", 60, None))
            .json(200);
        server
            .post("/sets/renew", &renew_of(&["a", "c"], "w", 60, None))
            .problem(404);
        server
            .post("/sets/release", &change_of(&["a", "b"], "w", None))
            .json(200);
        server.post("/sets", &json!({"resources": []})).problem(422);
        let metrics = server.get("/metrics").text();
        for (route, status) in [
            ("POST /sets", 200),
            ("POST /sets", 422),
            ("POST /sets/renew", 200),
            ("POST /sets/renew", 404),
            ("POST /sets/release", 200),
        ] {
            let sample =
                format!("distlock_requests_total{{route=\"{route}\",status=\"{status}\"}} 1");
            assert!(metrics.lines().any(|l| l == sample), "{sample}:\n{metrics}");
        }
        let stderr = server.stderr();
        for line in [
            "POST /sets 200",
            "POST /sets/renew 404",
            "POST /sets/release 200",
            "POST /sets 422",
        ] {
            assert!(stderr.contains(line), "a log line {line:?}:\n{stderr}");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// distlock's own client of a server

fn resource(name: &str) -> Resource {
    Resource::parse(name).expect("a resource")
}

fn members(names: &[&str]) -> Members {
    Members::new(names.iter().map(|name| resource(name)).collect()).expect("members")
}

fn request(owner: &str, mode: LockMode, waits: bool) -> Request {
    Request {
        owner: Owner::parse(owner).expect("an owner"),
        ttl: Ttl::from_secs(60).expect("a ttl"),
        mode,
        note: None,
        waits,
        guarded: false,
    }
}

/// The store that `--db http://…` opens: distlock's client of `server`.
fn client(server: &Server) -> Box<dyn LockStore> {
    let location =
        Location::resolve(Some(&server.url("")), NetworkFs::Refused).expect("a server's URL");
    distlock::store::open(&location, distlock::store::Access::Create).expect("a client")
}

/// An acquire of `members` through `store`, waiting until `until` when the request waits.
fn acquire_set(
    store: &mut Box<dyn LockStore>,
    members: &Members,
    request: &Request,
    until: Option<Instant>,
) -> Acquisition {
    let request = request.clone();
    let members = members.clone();
    store
        .perform(op::Acquire {
            members,
            request,
            until,
        })
        .unwrap()
}

/// A renewal of `members` through `store`.
fn renew_set(
    store: &mut Box<dyn LockStore>,
    members: &Members,
    owner: &Owner,
    ttl: Ttl,
) -> distlock::lock::SetRenew {
    let (members, owner) = (members.clone(), owner.clone());
    store
        .perform(op::Renew {
            members,
            owner,
            ttl,
            fences: None,
            lease_end: None,
        })
        .unwrap()
}

/// A release of `members` (of tenures `fences`, when given) through `store`.
fn release_set(
    store: &mut Box<dyn LockStore>,
    members: &Members,
    owner: &Owner,
    fences: Option<&[distlock::lock::Fence]>,
) -> distlock::lock::SetRelease {
    let (members, owner) = (members.clone(), owner.clone());
    let fences = fences.map(<[distlock::lock::Fence]>::to_vec);
    store
        .perform(op::Release {
            members,
            owner,
            fences,
        })
        .unwrap()
}

#[test]
fn distlocks_client_of_a_server_reads_every_set_answer_back_and_waits_by_long_poll() {
    each_store(|db| {
        let server = Server::start(db);
        let mut store = client(&server);
        let ab = members(&["b", "a"]);
        let w = request("w", LockMode::Exclusive, false);
        let granted = acquire_set(&mut store, &ab, &w, None).outcome;
        let SetAcquire::Acquired { locks, tenures } = granted else {
            panic!("a free set is granted");
        };
        let names: Vec<&str> = locks.iter().map(|l| l.resource.as_str()).collect();
        assert_eq!(
            (names, tenures),
            (vec!["a", "b"], vec![Grant::New, Grant::New])
        );
        // Joined: a's tenure extended, c new, as Distlock-Grant says.
        let ac = members(&["c", "a"]);
        let SetAcquire::Acquired {
            locks: joined,
            tenures,
        } = acquire_set(&mut store, &ac, &w, None).outcome
        else {
            panic!("the owner's own set is granted");
        };
        assert_eq!(tenures, vec![Grant::Extended, Grant::New]);
        assert_eq!(joined[0].fence, locks[0].fence);

        let other = request("o", LockMode::Exclusive, false);
        let ad = members(&["a", "d"]);
        let SetAcquire::Busy { blocked } = acquire_set(&mut store, &ad, &other, None).outcome
        else {
            panic!("a held member makes the set busy");
        };
        assert_eq!(blocked.len(), 1, "{blocked:?}");
        assert_eq!(blocked[0].resource, resource("a"));
        assert_eq!(
            blocked[0].holder.as_ref().map(|h| h.owner.as_str()),
            Some("w")
        );
        let shared = request("w", LockMode::Shared, false);
        let asked = acquire_set(&mut store, &ad, &shared, None);
        let mismatch = asked.outcome;
        assert!(
            matches!(&mismatch, SetAcquire::Mismatch { resource: r, .. } if r.as_str() == "a"),
            "{mismatch:?}"
        );

        let ttl = Ttl::from_secs(60).unwrap();
        let owner = |name: &str| Owner::parse(name).unwrap();
        let abc = members(&["a", "b", "c"]);
        let renewed = renew_set(&mut store, &abc, &owner("w"), ttl);
        assert_eq!(renewed.map(|locks| locks.len()), Ok(3));
        let abz = members(&["a", "b", "z"]);
        let refused = renew_set(&mut store, &abz, &owner("w"), ttl);
        assert!(
            matches!(&refused, Err(r) if r.resource.as_str() == "z" && !r.forbidden),
            "{refused:?}"
        );
        let refused = release_set(&mut store, &abc, &owner("o"), None);
        assert!(
            matches!(&refused, Err(r) if r.resource.as_str() == "a" && r.forbidden),
            "{refused:?}"
        );
        let wrong = [
            joined[0].fence,
            locks[1].fence,
            distlock::lock::Fence(joined[1].fence.0 + 1),
        ];
        let refused = release_set(&mut store, &abc, &owner("w"), Some(&wrong));
        assert!(
            matches!(&refused, Err(r) if r.resource.as_str() == "c" && !r.forbidden),
            "{refused:?}"
        );
        let fences = [joined[0].fence, locks[1].fence, joined[1].fence];
        assert_eq!(
            release_set(&mut store, &abc, &owner("w"), Some(&fences)),
            Ok(())
        );
        free(&server, "a");

        // A waiting acquire is the server's long poll, granted when the holder lets go.
        take(&server, "x", "h", 60);
        let xy = members(&["y", "x"]);
        let waits = request("w", LockMode::Exclusive, true);
        thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut store = client(&server);
                let until = Instant::now() + Duration::from_secs(20);
                acquire_set(&mut store, &xy, &waits, Some(until)).outcome
            });
            until_waiting(&server, "x", 1, QUEUED);
            until_waiting(&server, "y", 1, QUEUED);
            server.delete(&lock_path("x", "?owner=h")).no_content();
            let outcome = waiter.join().expect("the waiter");
            assert!(
                matches!(&outcome, SetAcquire::Acquired { locks, .. } if locks.len() == 2),
                "{outcome:?}"
            );
        });
        assert!(asked.decided.is_some());
    });
}
