//! The lock server's HTTP held to RFC 9110 (the contract's "HTTP details" and limits), from
//! outside: a real HTTP client, and raw TCP connections where a header, a method no client
//! sends by itself, or a byte the client would not send as it is, is the point.
//!
//! Nothing is taken twice: a JSON key given twice, a query parameter given twice, an owner in
//! the query that differs from the body's are 422, saying which, and change nothing. `HEAD` is
//! `GET` without the body; a 405 says what the path takes (`Allow`); a path that is not
//! percent-encoded is 400. The details of a refusal name the field and say what is wrong in
//! the client's own terms (its number as a number, how to write what it meant).

use serde_json::{Value, json};

use super::{P42, by, object, raw_request, state, take};
use crate::common::server::{RawReply, Server, lock_path};
use crate::common::store::each_store;
use crate::common::tenure::held;

/// The `detail` of a 422 problem document, which must contain `word`.
fn refused_saying(reply: &crate::common::server::Reply, word: &str) -> String {
    let problem = reply.problem(422);
    let detail = problem["detail"].as_str().unwrap_or_default().to_owned();
    assert!(
        detail.contains(word),
        "the detail says {word:?}: {}",
        reply.describe()
    );
    detail
}

#[test]
fn a_json_key_given_twice_or_two_different_owners_are_422_saying_which_and_change_nothing() {
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let held_path = lock_path(P42, "");
        let before = state(&server);
        // (method, path, body as sent, what the detail says)
        let cases = [
            (
                "POST",
                lock_path("fresh", ""),
                r#"{"owner":"a","owner":"b","ttl_seconds":60}"#.to_owned(),
                r#"the key "owner" is given twice"#,
            ),
            (
                "POST",
                lock_path("fresh", ""),
                r#"{"owner":"a","ttl_seconds":60,"ttl_seconds":60}"#.to_owned(),
                r#"the key "ttl_seconds" is given twice"#,
            ),
            (
                "POST",
                lock_path(P42, "/renew"),
                r#"{"owner":"w1","ttl_seconds":60,"owner":"w1"}"#.to_owned(),
                r#"the key "owner" is given twice"#,
            ),
            (
                "DELETE",
                format!("{held_path}?owner=zz"),
                r#"{"owner":"w1"}"#.to_owned(),
                r#"owner is given twice, differently: "zz" in the query and "w1" in the body"#,
            ),
            (
                "DELETE",
                format!("{held_path}?owner=w1"),
                r#"{"owner":"zz"}"#.to_owned(),
                r#""w1" in the query and "zz" in the body"#,
            ),
            (
                "POST",
                "/sets/release".to_owned(),
                format!(
                    r#"{{"resources":["{P42}"],"owner":"w1","fences":{{"{P42}":1,"{P42}":1}}}}"#
                ),
                r#"fences: the key "payment:42" is given twice"#,
            ),
        ];
        for (method, path, body, says) in &cases {
            let reply = match *method {
                "POST" => server.post_as(path, "application/json", body.as_bytes()),
                _ => server.delete_as(path, "application/json", body.as_bytes()),
            };
            refused_saying(&reply, says);
        }
        assert_eq!(state(&server), before, "a refused request changes nothing");
        assert_eq!(db.status(P42), (0, held(&[&tenure])));
        // The same owner in the query and the body is one owner.
        server
            .delete_with(&format!("{held_path}?owner=w1"), &json!({"owner": " w1 "}))
            .no_content();
    });
}

#[test]
fn a_query_parameter_given_twice_is_422_naming_it() {
    each_store(|db| {
        let server = Server::start(db);
        let tenure = take(&server, P42, "w1", 60);
        let held_path = lock_path(P42, "");
        let before = state(&server);
        for (path, name) in [
            (format!("{held_path}?owner=w1&owner=w2"), "owner"),
            (format!("{held_path}?owner=w1&owner=w1"), "owner"),
            ("/log?resource=a&resource=b".to_owned(), "resource"),
            ("/log?limit=1&since=1h&limit=2".to_owned(), "limit"),
            ("/locks?prefix=a&prefix=b".to_owned(), "prefix"),
        ] {
            let reply = if path.starts_with("/locks/") {
                server.delete(&path)
            } else {
                server.get(&path)
            };
            let detail = refused_saying(&reply, "given twice");
            assert!(
                detail.contains(&format!("{name:?}")),
                "the detail names {name}: {detail}"
            );
        }
        assert_eq!(state(&server), before);
        assert_eq!(db.status(P42), (0, held(&[&tenure])));
    });
}

/// `METHOD TARGET` on a connection of its own, the answer read to the end.
fn raw(server: &Server, method: &str, target: &str) -> RawReply {
    server.raw(&raw_request(method, target, "", b""))
}

#[test]
fn head_answers_as_get_without_a_body_on_every_get_route() {
    each_store(|db| {
        let server = Server::start(db);
        take(&server, P42, "w1", 60);
        for target in [
            "/health".to_owned(),
            "/metrics".to_owned(),
            "/locks".to_owned(),
            "/locks?prefix=pay".to_owned(),
            "/log".to_owned(),
            lock_path(P42, ""),
            lock_path("free", ""),
            lock_path(&"x".repeat(256), ""),
        ] {
            let get = raw(&server, "GET", &target);
            let head = raw(&server, "HEAD", &target);
            assert_eq!(head.status, get.status, "HEAD {target} answers as GET");
            assert!(
                head.body.is_empty(),
                "HEAD {target}: no body, got {:?}",
                String::from_utf8_lossy(&head.body)
            );
            assert!(!get.body.is_empty(), "GET {target} has a body");
            for name in ["content-type", "distlock-api"] {
                assert_eq!(
                    head.header(name),
                    get.header(name),
                    "HEAD {target}: {name} as GET's"
                );
            }
            // Where the body cannot change between the two (not /metrics, which counts the
            // GET), HEAD's length is GET's.
            if target != "/metrics" {
                if let Some(length) = head.header("content-length") {
                    assert_eq!(
                        length,
                        get.body.len().to_string(),
                        "HEAD {target}: Content-Length as GET's body"
                    );
                }
            }
        }
    });
}

/// The methods of an `Allow` header, sorted.
fn methods(allow: Option<&str>) -> Vec<String> {
    let mut methods: Vec<String> = allow
        .unwrap_or_default()
        .split(',')
        .map(|method| method.trim().to_owned())
        .filter(|method| !method.is_empty())
        .collect();
    methods.sort();
    methods
}

#[test]
fn every_405_carries_allow_with_the_methods_the_path_takes() {
    each_store(|db| {
        let server = Server::start(db);
        let before = state(&server);
        let get = "GET, HEAD";
        let lock = "DELETE, GET, HEAD, POST";
        for (method, target, allow) in [
            ("PUT", "/locks/r", lock),
            ("PATCH", "/locks/r", lock),
            ("OPTIONS", "/locks/r", lock),
            ("POST", "/health", get),
            ("DELETE", "/health", get),
            ("POST", "/metrics", get),
            ("DELETE", "/locks", get),
            ("POST", "/log", get),
            ("GET", "/locks/r/renew", "POST"),
            ("HEAD", "/locks/r/renew", "POST"),
            ("GET", "/locks/r/break", "POST"),
            ("GET", "/sets", "POST"),
            ("DELETE", "/sets/renew", "POST"),
            ("PUT", "/sets/release", "POST"),
        ] {
            let reply = if method == "HEAD" {
                raw(&server, method, target)
            } else {
                server.raw(&raw_request(method, target, "", br#"{"owner":"w1"}"#))
            };
            assert_eq!(reply.status, 405, "{method} {target}");
            if method != "HEAD" {
                reply.problem(405);
            }
            assert_eq!(
                methods(reply.header("allow")),
                methods(Some(allow)),
                "{method} {target}: Allow lists what the path takes, got {:?}",
                reply.header("allow")
            );
        }
        assert_eq!(state(&server), before, "nothing was written");
    });
}

#[test]
fn a_path_or_query_that_is_not_percent_encoded_is_400_and_nothing_is_taken() {
    each_store(|db| {
        let server = Server::start(db);
        take(&server, P42, "w1", 60);
        let before = state(&server);
        let acquire = by("w1", 60).to_string();
        for (method, target, body) in [
            ("GET", "/locks/%ZZ", ""),
            ("POST", "/locks/%ZZ", acquire.as_str()),
            ("POST", "/locks/a%2", acquire.as_str()),
            ("POST", "/locks/100%/renew", acquire.as_str()),
            ("DELETE", "/locks/%G0", r#"{"owner":"w1"}"#),
            ("DELETE", "/locks/payment:42?owner=w%ZZ", ""),
            ("GET", "/locks?prefix=%", ""),
            ("GET", "/log?resource=%zz", ""),
        ] {
            let reply = server.raw(&raw_request(method, target, "", body.as_bytes()));
            let problem = reply.problem(400);
            assert_eq!(
                problem["type"], "invalid-percent-encoding",
                "{method} {target}: {problem}"
            );
            let detail = problem["detail"].as_str().unwrap_or_default();
            assert!(
                detail.starts_with("invalid percent-encoding in the ")
                    && detail.contains("two hexadecimal digits"),
                "{method} {target}: {detail}"
            );
        }
        assert_eq!(state(&server), before, "nothing was taken");
        // `%25` is how a name says `%`: a lock named `%ZZ` is its own.
        server.get("/locks/%25ZZ").problem(404);
        take(&server, "%ZZ", "w1", 60);
        assert_eq!(
            server.get("/locks/%25ZZ").json(200)["lock"]["resource"],
            "%ZZ"
        );
    });
}

#[test]
fn a_refusal_names_the_field_and_says_what_is_wrong_in_the_clients_terms() {
    each_store(|db| {
        let server = Server::start(db);
        take(&server, P42, "w1", 60);
        let before = state(&server);
        let fresh = lock_path("fresh", "");
        let long = json!("x".repeat(1025)).to_string();
        let owner = ("owner", r#""w1""#);
        let ttl = ("ttl_seconds", "60");
        // (path, the body as sent, the detail exactly)
        let posts = [
            (
                fresh.clone(),
                object(&[owner, ttl, ("limit", "10001")]),
                "limit must be a whole number from 1 to 10000, got 10001".to_owned(),
            ),
            (
                fresh.clone(),
                object(&[owner, ("ttl_seconds", "1e2")]),
                "ttl_seconds must be a JSON integer, written without a decimal point or an \
                 exponent: 100, not 100.0 or 1e2"
                    .to_owned(),
            ),
            (
                fresh.clone(),
                object(&[owner, ttl, ("note", &long)]),
                "note: the text is 1025 bytes long; the limit is 1024".to_owned(),
            ),
            (
                lock_path(P42, "/break"),
                object(&[("reason", &long)]),
                "reason: the text is 1025 bytes long; the limit is 1024".to_owned(),
            ),
            (
                lock_path(P42, "/break"),
                object(&[("reason", r#""stuck""#), ("by", &long)]),
                "by: the text is 1025 bytes long; the limit is 1024".to_owned(),
            ),
        ];
        for (path, body, detail) in &posts {
            let reply = server.post_as(path, "application/json", body.as_bytes());
            assert_eq!(
                reply.problem(422)["detail"],
                Value::from(detail.as_str()),
                "{}",
                reply.describe()
            );
        }
        let reply = server.get("/log?since=-1");
        assert!(
            refused_saying(&reply, "since must not be negative").contains("such as 90s"),
            "says how to write a duration: {}",
            reply.describe()
        );
        assert_eq!(state(&server), before);
    });
}
