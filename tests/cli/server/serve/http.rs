//! The lock server's HTTP held to RFC 9110 (the contract's "HTTP details" and limits), from
//! outside: a real HTTP client, and raw TCP connections where a header, a method no client
//! sends by itself, or a byte the client would not send as it is, is the point.
//!
//! Nothing is taken twice: a JSON key given twice, a query parameter given twice, an owner in
//! the query that differs from the body's are 422, saying which, and change nothing. `HEAD` is
//! `GET` without the body; a 405 says what the path takes (`Allow`); a path that is not
//! percent-encoded is 400. The details of a refusal name the field and say what is wrong in
//! the client's own terms (its number as a number, how to write what it meant).
//!
//! The server's own limits answer as distlock does (a head of many short headers is 431 with a
//! problem document), a client that never reads its answers is let go after 10 s of writes that
//! make no progress, `--listen` takes a host name, and `/health` answers within 900 ms (a
//! probe with a 1 s timeout always gets its answer), saying nothing of the store but that it
//! is unavailable.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{P42, by, object, raw_request, send, state, take};
use crate::common::pg_url::PgUrl;
use crate::common::process::{Proc, wait_for};
use crate::common::proxy::Proxy;
use crate::common::server::{RawReply, Server, lock_path};
use crate::common::store::{Db, each_store};
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
            ("GET", "/lo%ZZcks", ""),
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

/// A number no field takes — past any integer (`1e300`, `18446744073709551616`), negative, a
/// fraction — is a 422 whose detail says in plain words what the field takes (whole numbers,
/// the range, in seconds where it is a time; for `ttl_seconds` as `--ttl` says it: between 1s
/// and 365 days), on every route and every numeric field, and nothing changes.
#[test]
fn a_number_out_of_range_is_refused_saying_what_the_field_takes_on_every_route() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    take(&server, P42, "w1", 60);
    let before = state(&server);
    let ttl = "a whole number of seconds between 1s and 365 days (1 to 31536000)";
    let wait = "a whole number of seconds between 0s and 24 hours (0 to 86400)";
    let fence = "a whole number from 1 to 9223372036854775807";
    let limit = "a whole number from 1 to 10000";
    let one = lock_path(P42, "");
    // (method, path, the body with the number as N, the field as named, what it takes)
    let fields = [
        (
            "POST",
            one.clone(),
            r#"{"owner":"w","ttl_seconds":N}"#,
            "ttl_seconds",
            ttl,
        ),
        (
            "POST",
            "/sets".to_owned(),
            r#"{"resources":["a"],"owner":"w","ttl_seconds":N}"#,
            "ttl_seconds",
            ttl,
        ),
        (
            "POST",
            one.clone(),
            r#"{"owner":"w","ttl_seconds":9,"wait_seconds":N}"#,
            "wait_seconds",
            wait,
        ),
        (
            "POST",
            one.clone(),
            r#"{"owner":"w","ttl_seconds":9,"limit":N}"#,
            "limit",
            limit,
        ),
        (
            "POST",
            lock_path(P42, "/renew"),
            r#"{"owner":"w1","ttl_seconds":N}"#,
            "ttl_seconds",
            ttl,
        ),
        (
            "POST",
            lock_path(P42, "/renew"),
            r#"{"owner":"w1","ttl_seconds":9,"fence":N}"#,
            "fence",
            fence,
        ),
        (
            "DELETE",
            one.clone(),
            r#"{"owner":"w1","fence":N}"#,
            "fence",
            fence,
        ),
        (
            "DELETE",
            one.clone(),
            r#"{"owner":"w1","hold_at_least_seconds":N}"#,
            "hold_at_least_seconds",
            ttl,
        ),
        (
            "POST",
            "/sets/renew".to_owned(),
            r#"{"resources":["a","b"],"owner":"w","ttl_seconds":9,"fences":{"a":1,"b":N}}"#,
            "the fence of b",
            fence,
        ),
    ];
    // (the number as sent, as the detail shows it)
    let numbers = [
        ("1e300", "1e300"),
        ("18446744073709551616", "1.8446744073709552e19"),
        ("-1", "-1"),
        ("1.5", "1.5"),
    ];
    for (method, path, body, name, takes) in &fields {
        for (number, shown) in numbers {
            let body = body.replace('N', number);
            let reply = send(&server, method, path, Some(&body));
            assert_eq!(
                reply.problem(422)["detail"],
                Value::from(format!("{name} must be {takes}, got {shown}")),
                "{method} {path} {body}: {}",
                reply.describe()
            );
        }
    }
    assert_eq!(state(&server), before, "nothing changed");
}

#[test]
fn a_head_of_many_short_headers_is_distlocks_own_431_with_a_problem_document() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    // 1,500 headers of 12 bytes (18 KB), and 12,000 of the shortest (4 bytes: 48 KB, within
    // what the server reads of a head).
    let small: String = (0..1500).map(|i| format!("X-{i:04}: vv\r\n")).collect();
    let shortest = "a:\r\n".repeat(12_000);
    for (what, headers) in [
        ("1,500 small headers", &small),
        ("12,000 empty ones", &shortest),
    ] {
        let reply = server.raw(&raw_request("GET", "/health", headers, b""));
        let problem = reply.problem(431);
        assert_eq!(problem["type"], "too-large", "{what}: {problem}");
        assert_eq!(reply.header("distlock-api"), Some("1"), "{what}");
    }
    // Fewer of them, within 16 KiB, are served.
    let fewer: String = (0..1000).map(|i| format!("X-{i:04}: vv\r\n")).collect();
    assert_eq!(
        server
            .raw(&raw_request("GET", "/health", &fewer, b""))
            .status,
        200
    );
}

/// Whether the server's end of the connection from `client` to `server` is still established,
/// as the system's TCP table (`/proc/net/tcp`, `/proc/net/tcp6`) says: its local port the
/// server's, its remote one the client's.
fn server_side_established(server: SocketAddr, client: SocketAddr) -> bool {
    const ESTABLISHED: &str = "01";
    let port = |field: &str| {
        field
            .rsplit(':')
            .next()
            .and_then(|hex| u16::from_str_radix(hex, 16).ok())
    };
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.len() > 3
                    && port(fields[1]) == Some(server.port())
                    && port(fields[2]) == Some(client.port())
                    && fields[3] == ESTABLISHED
            })
    })
}

/// A client that pipelines requests and never reads the answers: once the answers fill what
/// the network holds, the server's writes make no progress, and after 10 s of that it closes
/// the connection (it held it for as long as the client stayed); the other clients are served
/// all the while.
#[test]
fn a_client_that_never_reads_its_answers_is_let_go_after_10s_of_stalled_writes() {
    /// 10 s without progress, after the buffers fill; slack for a loaded machine.
    const LET_GO: Duration = Duration::from_secs(45);
    let db = Db::sqlite();
    let server = Server::start(&db);
    // 512 locks with 1 KiB notes: each `GET /locks` answers over 600 KB, so that a few dozen
    // unread answers fill the socket buffers (up to 36 MB here) and the server's writes wait.
    let note = "n".repeat(1024);
    for set in 0..8 {
        let members: Vec<String> = (0..64).map(|i| format!("big/{set}/{i}")).collect();
        let reply = server.post(
            "/sets",
            &json!({"resources": members, "owner": "w1", "ttl_seconds": 600, "note": note}),
        );
        assert_eq!(reply.json(200)["acquired"], true, "{}", reply.describe());
    }
    let mut stream = server.connect();
    let client = stream.local_addr().expect("the client's address");
    let pipelined = "GET /locks HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".repeat(200);
    stream
        .write_all(pipelined.as_bytes())
        .expect("send the requests");
    let sent = Instant::now();
    assert!(server_side_established(server.addr, client), "connected");
    // Served meanwhile: another client, and then the stalled one let go.
    let mut others = 0;
    let let_go = wait_for(LET_GO, || {
        assert_eq!(server.get("/health").status, 200, "others are served");
        others += 1;
        !server_side_established(server.addr, client)
    });
    assert!(
        let_go,
        "the server still holds the connection of a client that read nothing for {:?}",
        sent.elapsed()
    );
    assert!(others > 0);
    assert!(
        sent.elapsed() >= Duration::from_secs(9),
        "let go only after its writes stalled for 10 s, not {:?} after the requests",
        sent.elapsed()
    );
    drop(stream);
    assert_eq!(server.get("/health").status, 200);
}

#[test]
fn listen_takes_a_host_name_and_localhost_is_loopback() {
    let db = Db::sqlite();
    let mut cmd = db.std_cmd();
    cmd.env_remove("DISTLOCK_DB").args([
        "--db",
        db.store_url(),
        "serve",
        "--listen",
        "localhost:0",
    ]);
    let proc = Proc::spawn(&mut cmd, db.dir.path(), "serve-localhost");
    let stderr = db.dir.path().join("serve-localhost.stderr");
    let localhost: Vec<SocketAddr> = ("localhost", 0)
        .to_socket_addrs()
        .expect("localhost resolves")
        .collect();
    let mut lines = Vec::new();
    let listening = wait_for(Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        lines = text
            .lines()
            .filter_map(|line| line.strip_prefix("distlock: listening on http://"))
            .filter_map(|address| address.parse::<SocketAddr>().ok())
            .collect();
        !lines.is_empty()
    });
    assert!(listening, "the server says where it listens");
    for address in &lines {
        assert!(address.ip().is_loopback(), "{address}");
        assert!(
            localhost.iter().any(|l| l.ip() == address.ip()),
            "{address}"
        );
        assert_eq!(
            address.port(),
            lines[0].port(),
            "one port for every address"
        );
        let mut stream = TcpStream::connect(address).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        stream
            .write_all(&raw_request("GET", "/health", "", b""))
            .expect("ask");
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stream, &mut answer).expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200 "), "{address}: {answer}");
    }
    let _ = nix::sys::signal::kill(proc.pid(), nix::sys::signal::Signal::SIGTERM);
    let finished = proc.finish(Duration::from_secs(10));
    assert_eq!(finished.output.status.code(), Some(0));

    // A name that does not resolve, or no port: 64, one line, no store made.
    for (listen, says) in [
        ("nowhere.invalid:7878", "cannot resolve nowhere.invalid"),
        ("localhost", "is not HOST:PORT (no port)"),
        ("::1:7878", "in brackets"),
    ] {
        let fresh = Db::sqlite();
        let out = fresh.run(&["serve", "--listen", listen]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "--listen {listen}: {err}");
        assert!(err.contains(says), "--listen {listen}: {err}");
        assert!(!fresh.path().exists(), "--listen {listen}: no store made");
    }
}

/// `/health` while PostgreSQL takes bytes and never answers (a partition): every answer within
/// a bound far below the store's own 5 s, a 503 saying only "store unavailable", the cause in
/// one line of the log and in `/metrics`, no password anywhere; 200 once the store is back.
#[test]
fn health_answers_within_1s_and_names_nothing_of_the_store_while_postgresql_is_away() {
    /// 1 s by the contract, with slack for a loaded machine: the store's own timeouts are 5 s.
    const PROMPT: Duration = Duration::from_secs(3);
    let Some(db) = Db::postgres() else { return };
    let (proxy, via_proxy) = Proxy::in_front_of(&db);
    let url = PgUrl::parse(db.pg_url());
    let password = url.password.clone().unwrap_or_default();
    let server = Server::start_at(&db, &via_proxy);
    assert_eq!(server.get("/health").status, 200);
    take(&server, "r", "w1", 60);
    proxy.black_hole();
    let timed_health = || {
        let asked = Instant::now();
        let reply = server.get("/health");
        let took = asked.elapsed();
        assert!(took < PROMPT, "/health took {took:?}: {}", reply.describe());
        reply
    };
    let mut last = None;
    let down = wait_for(Duration::from_secs(20), || {
        let reply = timed_health();
        let down = reply.status == 503;
        last = Some(reply);
        down
    });
    let last = last.expect("asked");
    assert!(down, "503 while the store is away: {}", last.describe());
    let problem = last.problem(503);
    assert_eq!(problem["detail"], "store unavailable", "{problem}");
    assert_eq!(problem["type"], "store-unavailable", "{problem}");
    let body = last.text();
    let (host, port) = proxy_parts(&proxy.addr);
    for secret in [url.user.as_str(), &host, &port, password.as_str()] {
        if !secret.is_empty() {
            assert!(!body.contains(secret), "{secret:?} in {body}");
        }
    }
    // The cause, once, on stderr (when the store's own call gives up), and in /metrics.
    let logged = wait_for(Duration::from_secs(30), || {
        timed_health();
        server.stderr().contains("distlock: store unavailable: ")
    });
    assert!(logged, "the cause on stderr: {}", server.stderr());
    let asked = Instant::now();
    let metrics = server.get("/metrics");
    assert!(asked.elapsed() < PROMPT, "/metrics while the store is away");
    let text = metrics.text();
    assert!(
        text.lines().any(|line| line == "distlock_store_up 0"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|line| line.starts_with("distlock_store_last_error{error=\"")),
        "{text}"
    );
    proxy.restore();
    let back = wait_for(Duration::from_secs(30), || timed_health().status == 200);
    assert!(back, "200 once the store answers again");
    assert_eq!(server.get("/locks/r").json(200)["lock"]["owner"], "w1");
    let up = server.get("/metrics").text();
    assert!(up.lines().any(|line| line == "distlock_store_up 1"), "{up}");
    let stderr = server.stderr();
    assert_eq!(
        stderr.matches("distlock: store unavailable: ").count(),
        1,
        "one line per change of state, however often asked: {stderr}"
    );
    assert_eq!(
        stderr.matches("distlock: the store answers again").count(),
        1,
        "{stderr}"
    );
    if !password.is_empty() {
        assert!(!stderr.contains(&password), "no password on stderr");
        assert!(!text.contains(&password), "no password in /metrics");
    }
}

/// A probe with a 1 s timeout (a load balancer's, `curl -m 1`) always gets an answer from
/// `/health` while the store hangs (PostgreSQL behind a proxy that takes bytes and never
/// answers): the server waits for its store for less than that (700 ms), so that its 503
/// reaches the probe within 900 ms, before the probe gives up.
#[test]
fn health_answers_a_probe_with_a_1s_timeout_while_the_store_hangs() {
    let Some(db) = Db::postgres() else { return };
    let (proxy, via_proxy) = Proxy::in_front_of(&db);
    let server = Server::start_at(&db, &via_proxy);
    assert_eq!(server.get("/health").status, 200);
    proxy.black_hole();
    let probe = crate::common::certs::agent(None, Duration::from_secs(1));
    let mut answers = Vec::new();
    // Until the store is found hanging (a probe of it under way from before may still answer),
    // then five more: every one answered within the probe's second.
    while answers.iter().filter(|status| **status == 503).count() < 6 {
        match server.get_by(&probe, "/health") {
            Ok(status) => answers.push(status),
            Err(why) => panic!(
                "probe {} got no answer within 1 s: {why}",
                answers.len() + 1
            ),
        }
        assert!(
            answers.len() < 30,
            "never 503 while the store hangs: {answers:?}"
        );
    }
    proxy.restore();
}

/// The proxy's host and port as text, as a detail naming the store would show them.
fn proxy_parts(addr: &SocketAddr) -> (String, String) {
    (addr.ip().to_string(), addr.port().to_string())
}
