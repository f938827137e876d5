//! The lock server's front door (the contract's "Exposure" and SIGHUP): HTTPS with
//! `--tls-cert`/`--tls-key`, the exposure rule and the usage errors of its flags, the TLS
//! handshake's time limit, and SIGHUP rereading the certificate. Real server processes, a real
//! HTTPS client (`ureq` over rustls, trusting only a CA the test made) and raw TCP connections.
//!
//! The store does not matter here (HTTPS is in front of the same API), so the tests run on
//! SQLite, but for the round trip through HTTPS, which runs on each store.

use std::io::{ErrorKind, Read, Write};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::common::certs::{Ca, CertFiles, Leaf};
use crate::common::output::rfc3339_millis;
use crate::common::process::{describe, wait_for};
use crate::common::server::{Server, agent, lock_path};
use crate::common::store::{Db, each_store};

/// The longest a refused start may take to exit.
const REFUSED: Duration = Duration::from_secs(20);

/// How long a reread may take to be reported after SIGHUP.
const REREAD: Duration = Duration::from_secs(10);

/// `distlock serve ARGS…` that must be refused with 64, its message on stderr naming `names`
/// in its first line, before any store is made. Returns stderr.
fn refused_start(db: &Db, args: &[&str], names: &str) -> String {
    let out = db
        .cmd()
        .arg("serve")
        .args(args)
        .timeout(REFUSED)
        .output()
        .expect("run distlock serve");
    let what = format!("serve {args:?}");
    assert_eq!(out.status.code(), Some(64), "{what}: {}", describe(&out));
    assert!(out.stdout.is_empty(), "{what}: nothing on stdout");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let first = stderr.lines().next().unwrap_or_default().to_owned();
    assert!(
        first.contains(names),
        "{what}: the message names {names:?}: {stderr:?}"
    );
    assert!(
        !db.path().exists(),
        "{what}: a refused start makes no store"
    );
    stderr
}

/// The same, for a refusal that is one `distlock: …` line: that line.
fn refused_in_a_line(db: &Db, args: &[&str], names: &str) -> String {
    let stderr = refused_start(db, args, names);
    assert!(
        stderr.starts_with("distlock: ") && stderr.lines().count() == 1,
        "serve {args:?}: one line `distlock: …`: {stderr:?}"
    );
    stderr.trim_end().to_owned()
}

/// The lines of the server's stderr that contain `text`.
fn lines_with(server: &Server, text: &str) -> Vec<String> {
    server
        .stderr()
        .lines()
        .filter(|line| line.contains(text))
        .map(str::to_owned)
        .collect()
}

/// Sends SIGHUP and waits for the `n`th line on stderr that contains `text`; returns it.
fn hangup_and_wait_for(server: &Server, text: &str, n: usize) -> String {
    server.signal(Signal::SIGHUP);
    let found = wait_for(REREAD, || lines_with(server, text).len() >= n);
    assert!(
        found,
        "no line number {n} with {text:?} on stderr within {REREAD:?} of SIGHUP: {}",
        server.stderr()
    );
    lines_with(server, text)[n - 1].clone()
}

/// Whether `client` (trusting one CA) gets an answer to `GET /health` from `server`.
fn trusted_by(server: &Server, client: &ureq::Agent) -> bool {
    match server.get_by(client, "/health") {
        Ok(status) => {
            assert_eq!(status, 200, "/health through HTTPS");
            true
        }
        Err(_) => false,
    }
}

// ---------------------------------------------------------------------------------------------
// HTTPS

#[test]
fn https_serves_acquire_status_and_release_and_says_https_on_its_first_line() {
    each_store(|db| {
        let ca = Ca::new("distlock test CA");
        let files = ca.server_files(db.dir.path(), "server");
        // The first line is checked by `start_tls`: `distlock: listening on https://…`.
        let server = Server::start_tls(db, &files, &ca);
        assert!(server.url("/").starts_with("https://127.0.0.1:"));
        let path = lock_path("deploy/prod", "");
        let answer = server
            .post(&path, &json!({"owner": "w1", "ttl_seconds": 60}))
            .json(200);
        assert_eq!(answer["acquired"], true, "{answer}");
        assert_eq!(server.get(&path).json(200)["lock"]["owner"], "w1");
        let (code, status) = db.status("deploy/prod");
        assert_eq!(
            (code, &status["lock"]["owner"]),
            (0, &json!("w1")),
            "{status}"
        );
        server
            .delete_with(&path, &json!({"owner": "w1"}))
            .no_content();
        server.get(&path).problem(404);
        assert_eq!(db.status("deploy/prod").0, 1);
    });
}

#[test]
fn plain_http_to_the_https_port_gets_no_http_answer_and_takes_no_lock() {
    let db = Db::sqlite();
    let ca = Ca::new("distlock test CA");
    let files = ca.server_files(db.dir.path(), "server");
    let server = Server::start_tls(&db, &files, &ca);
    let body = r#"{"owner":"plain","ttl_seconds":60}"#;
    let request = format!(
        "POST /locks/plain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = server.connect();
    let _ = stream.write_all(request.as_bytes());
    let mut answer = Vec::new();
    if let Err(e) = stream.read_to_end(&mut answer) {
        assert!(
            !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "plain HTTP on the HTTPS port is closed at once, not left hanging"
        );
    }
    assert!(
        !answer.starts_with(b"HTTP/"),
        "no HTTP answer over plain TCP: {:?}",
        String::from_utf8_lossy(&answer)
    );
    server.get(&lock_path("plain", "")).problem(404);
    assert_eq!(db.status("plain").0, 1, "no lock was taken");
    assert_eq!(server.get("/health").status, 200, "HTTPS is still served");
}

#[test]
fn a_client_that_connects_and_sends_nothing_is_dropped_after_10s_and_others_are_served() {
    let db = Db::sqlite();
    let ca = Ca::new("distlock test CA");
    let files = ca.server_files(db.dir.path(), "server");
    let server = Server::start_tls(&db, &files, &ca);
    let start = Instant::now();
    // One says nothing at all; one starts a TLS handshake (a ClientHello's first bytes) and
    // stops there.
    let mut silent = server.connect();
    let mut stalled = server.connect();
    stalled
        .write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        .expect("the start of a ClientHello");
    for stream in [&silent, &stalled] {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("read timeout");
    }
    let mut open = [true, true];
    let mut served_meanwhile = false;
    let mut buf = [0_u8; 1024];
    while open.iter().any(|&o| o) {
        for (i, stream) in [&mut silent, &mut stalled].into_iter().enumerate() {
            if !open[i] {
                continue;
            }
            match stream.read(&mut buf) {
                // Closed, or a TLS alert before closing: dropped either way.
                Ok(_) => open[i] = false,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => open[i] = false,
            }
            if !open[i] {
                assert!(
                    start.elapsed() >= Duration::from_secs(5),
                    "dropped after {:?}, long before the handshake's 10 s",
                    start.elapsed()
                );
            }
        }
        if !served_meanwhile && start.elapsed() > Duration::from_secs(2) {
            let asked = Instant::now();
            let path = lock_path("meanwhile", "");
            let answer = server
                .post(&path, &json!({"owner": "w1", "ttl_seconds": 60}))
                .json(200);
            assert_eq!(answer["acquired"], true, "{answer}");
            assert!(
                asked.elapsed() < Duration::from_secs(2),
                "served beside two silent clients in {:?}",
                asked.elapsed()
            );
            served_meanwhile = true;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "a client that sends nothing is still connected after {:?}",
            start.elapsed()
        );
    }
    assert!(served_meanwhile, "dropped after {:?}", start.elapsed());
    assert_eq!(server.get("/health").status, 200);
}

// ---------------------------------------------------------------------------------------------
// Exposure and the flags' usage errors (64, before any store is made)

#[test]
fn beyond_loopback_without_tokens_the_server_refuses_to_start_with_64() {
    let db = Db::sqlite();
    let ca = Ca::new("distlock test CA");
    let files = ca.server_files(db.dir.path(), "server");
    let tls = files.args();
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let line = refused_in_a_line(&db, &["--listen", listen], "--tokens");
        assert!(line.contains("loopback"), "{line}");
        let mut with_tls = vec!["--listen", listen];
        with_tls.extend_from_slice(&tls);
        refused_in_a_line(&db, &with_tls, "--tokens");
        refused_in_a_line(&db, &["--listen", listen, "--insecure-http"], "--tokens");
    }
}

#[test]
fn tls_flags_go_together_and_not_with_insecure_http_else_64() {
    let db = Db::sqlite();
    let ca = Ca::new("distlock test CA");
    let files = ca.server_files(db.dir.path(), "server");
    let (cert, key) = (
        files.cert.to_str().expect("UTF-8"),
        files.key.to_str().expect("UTF-8"),
    );
    let line = refused_in_a_line(&db, &["--tls-cert", cert], "--tls-key");
    assert!(
        line.starts_with("distlock: --tls-cert needs --tls-key"),
        "{line}"
    );
    let line = refused_in_a_line(&db, &["--tls-key", key], "--tls-cert");
    assert!(
        line.starts_with("distlock: --tls-key needs --tls-cert"),
        "{line}"
    );
    // Clap's refusal, its usage hint after it.
    refused_start(
        &db,
        &["--tls-cert", cert, "--tls-key", key, "--insecure-http"],
        "--insecure-http",
    );
}

#[test]
fn tls_files_that_cannot_be_read_or_used_are_64_with_one_line_naming_the_file() {
    let db = Db::sqlite();
    let dir = db.dir.path();
    let ca = Ca::new("distlock test CA");
    let good = ca.server_files(dir, "good");
    let other = ca.server_files(dir, "other");
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write garbage");
    let cut = dir.join("cut.pem");
    let chain = std::fs::read_to_string(&good.cert).expect("the chain");
    std::fs::write(&cut, &chain[..chain.len() / 3]).expect("write a cut chain");
    let missing = dir.join("missing.pem");
    let fifo = dir.join("fifo.pem");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8").to_owned();
    let folder = path(dir);
    let cases = [
        (
            "a missing certificate",
            path(&missing),
            path(&good.key),
            "missing.pem",
        ),
        (
            "a missing key",
            path(&good.cert),
            path(&missing),
            "missing.pem",
        ),
        (
            "a certificate file that is not PEM",
            path(&garbage),
            path(&good.key),
            "garbage.pem",
        ),
        (
            "a certificate cut short",
            path(&cut),
            path(&good.key),
            "cut.pem",
        ),
        (
            "a key file that is not PEM",
            path(&good.cert),
            path(&garbage),
            "garbage.pem",
        ),
        (
            "a key file that holds a certificate",
            path(&good.cert),
            path(&good.cert),
            "good.cert.pem",
        ),
        (
            "the key of another certificate",
            path(&good.cert),
            path(&other.key),
            "other.key.pem",
        ),
        ("a folder", path(dir), path(&good.key), folder.as_str()),
        // Refused at once, never waited on for a writer that does not come.
        ("a FIFO", path(&fifo), path(&good.key), "fifo.pem"),
        (
            "a FIFO as the key",
            path(&good.cert),
            path(&fifo),
            "fifo.pem",
        ),
    ];
    for (what, cert, key, names) in cases {
        let line = refused_in_a_line(&db, &["--tls-cert", &cert, "--tls-key", &key], names);
        assert!(line.starts_with("distlock: --tls-"), "{what}: {line}");
    }
    // The same files, right: it serves.
    drop(Server::start_tls(&db, &good, &ca));
}

// ---------------------------------------------------------------------------------------------
// SIGHUP

/// Writes `from`'s chain and key over `to`'s files, each replaced whole (a new file renamed
/// into place, as a certificate manager does).
fn replace(from: &CertFiles, to: &CertFiles) {
    for (source, target) in [(&from.cert, &to.cert), (&from.key, &to.key)] {
        let next = target.with_extension("next");
        std::fs::copy(source, &next).expect("copy the new file");
        std::fs::rename(&next, target).expect("rename it into place");
    }
}

#[test]
fn sighup_with_a_new_certificate_serves_it_to_new_connections() {
    let db = Db::sqlite();
    let dir = db.dir.path();
    let (old_ca, new_ca) = (Ca::new("old CA"), Ca::new("new CA"));
    let served = old_ca.server_files(dir, "served");
    let renewed = new_ca.server_files(dir, "renewed");
    let server = Server::start_tls(&db, &served, &old_ca);
    let path = lock_path("kept", "");
    server
        .post(&path, &json!({"owner": "w1", "ttl_seconds": 300}))
        .json(200);
    assert!(trusted_by(&server, &agent(Some(&old_ca))));
    assert!(
        !trusted_by(&server, &agent(Some(&new_ca))),
        "the new CA signed nothing served yet"
    );
    replace(&renewed, &served);
    let line = hangup_and_wait_for(&server, "reloaded", 1);
    assert!(
        line.starts_with("distlock: ") && line.contains("served.cert.pem"),
        "the line names the files: {line}"
    );
    // Fresh clients, so that no TLS session of before is resumed.
    assert!(
        trusted_by(&server, &agent(Some(&new_ca))),
        "new connections get the new certificate"
    );
    assert!(
        !trusted_by(&server, &agent(Some(&old_ca))),
        "and no longer the old one"
    );
    let client = agent(Some(&new_ca));
    let status = client
        .get(server.url(&path))
        .call()
        .expect("status through the new certificate");
    assert_eq!(status.status().as_u16(), 200, "the locks are as they were");
    assert_eq!(db.status("kept").1["lock"]["owner"], "w1");
    server.signal(Signal::SIGTERM);
    let out = server.finish();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
}

#[test]
fn sighup_with_a_corrupted_certificate_keeps_the_old_one_and_says_why() {
    let db = Db::sqlite();
    let ca = Ca::new("distlock test CA");
    let files = ca.server_files(db.dir.path(), "server");
    let server = Server::start_tls(&db, &files, &ca);
    let chain = std::fs::read(&files.cert).expect("the chain");
    // Cut inside the server's own certificate, the first in the file.
    std::fs::write(&files.cert, &chain[..chain.len() / 3]).expect("cut the chain");
    let line = hangup_and_wait_for(&server, "reload failed", 1);
    assert!(
        line.starts_with("distlock: ") && line.contains("server.cert.pem"),
        "the line names the file and says why: {line}"
    );
    assert!(
        trusted_by(&server, &agent(Some(&ca))),
        "the old certificate is still served"
    );
    let path = lock_path("after", "");
    server
        .post(&path, &json!({"owner": "w1", "ttl_seconds": 60}))
        .json(200);
    // A missing key is no better.
    std::fs::write(&files.cert, &chain).expect("the chain back");
    std::fs::remove_file(&files.key).expect("remove the key");
    let line = hangup_and_wait_for(&server, "reload failed", 2);
    assert!(line.contains("server.key.pem"), "{line}");
    assert!(trusted_by(&server, &agent(Some(&ca))));
    assert!(
        lines_with(&server, "reloaded").is_empty(),
        "nothing was reloaded"
    );
    server.signal(Signal::SIGTERM);
    let out = server.finish();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    assert_eq!(db.status("after").1["lock"]["owner"], "w1");
}

#[test]
fn sighup_never_stops_a_plain_http_server() {
    let db = Db::sqlite();
    let server = Server::start(&db);
    // At once after the first line: the signal is already caught by then.
    for n in 1..=3 {
        hangup_and_wait_for(&server, "SIGHUP", n);
        assert_eq!(
            server.get("/health").status,
            200,
            "still serving after SIGHUP {n}"
        );
    }
    sleep(Duration::from_millis(100));
    assert_eq!(server.get("/health").status, 200);
    server.signal(Signal::SIGTERM);
    let out = server.finish();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
}

/// `SystemTime` `t` to the whole second, as the lines print times (a certificate's end has no
/// fraction of a second).
fn to_the_second(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    rfc3339_millis(i64::try_from(secs).expect("a time that fits") * 1000)
}

/// A server certificate valid until `not_after`.
fn until(not_after: SystemTime) -> Leaf {
    Leaf {
        not_after: Some(not_after),
        ..Leaf::default()
    }
}

#[test]
fn a_certificate_that_expired_or_expires_within_7_days_is_named_at_start_and_at_sighup() {
    let db = Db::sqlite();
    let dir = db.dir.path();
    let ca = Ca::new("distlock test CA");
    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();
    let (ended, ending) = (now - day, now + 3 * day);
    let served = ca.server_files_as(dir, "served", &until(ended));
    let soon = ca.server_files_as(dir, "soon", &until(ending));
    let later = ca.server_files_as(dir, "later", &until(now + 30 * day));
    // Served all the same (the locks stay reachable to whoever accepts it), and named in one
    // line after the first.
    let server = Server::start_tls(&db, &served, &ca);
    let expired = format!(
        "distlock: --tls-cert {}: its certificate expired at {}",
        served.cert.display(),
        to_the_second(ended)
    );
    assert!(
        wait_for(REREAD, || !lines_with(&server, "expired at").is_empty()),
        "no line names the expired certificate: {}",
        server.stderr()
    );
    let line = lines_with(&server, "expired at").remove(0);
    assert!(line.starts_with(&expired), "{line}");
    assert!(
        server
            .stderr()
            .starts_with("distlock: listening on https://"),
        "the first line still says where it listens: {}",
        server.stderr()
    );
    // One that ends in 3 days, at SIGHUP: served (clients take it), and named with its end.
    replace(&soon, &served);
    let line = hangup_and_wait_for(&server, "expires at", 1);
    assert_eq!(
        lines_with(&server, "reloaded").len(),
        1,
        "{}",
        server.stderr()
    );
    assert_eq!(
        line,
        format!(
            "distlock: --tls-cert {}: its certificate expires at {}, in 3 days: renew it, then \
             send SIGHUP",
            served.cert.display(),
            to_the_second(ending)
        )
    );
    assert!(trusted_by(&server, &agent(Some(&ca))));
    // One that ends in 30 days: no warning.
    replace(&later, &served);
    hangup_and_wait_for(&server, "reloaded", 2);
    server.signal(Signal::SIGTERM);
    let out = server.finish();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
    let stderr = out.stderr();
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("certificate exp"))
        .collect();
    assert_eq!(
        warned.len(),
        2,
        "one line each time, none for the last: {warned:?}"
    );
}
