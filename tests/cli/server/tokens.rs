//! `distlock serve --tokens`: tokens made with `distlock token add`, shown as bearer tokens by
//! a real HTTP client; a tenure bound to the token that took it; scopes, operators, and the
//! secrets never shown.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::process::{Proc, wait_for, wait_for_file, wait_until};
use crate::common::require::require;
use crate::common::server::{Server, lock_path};
use crate::common::store::{Db, distlock_at, each_store};

/// A token made with `distlock token add NAME --tokens FILE ARGS`: its secret.
pub(crate) fn make_token(db: &Db, name: &str, args: &[&str]) -> String {
    let file = db.file("tokens.json");
    let file = file.to_str().expect("a UTF-8 path");
    let mut all = vec!["token", "add", name, "--tokens", file];
    all.extend_from_slice(args);
    let made = db.json(&all, 0);
    assert_eq!(made["token"], name, "{made}");
    assert_eq!(made["file"], file, "{made}");
    made["secret"].as_str().expect("a secret").to_owned()
}

/// What a request with a bearer token came back with.
pub(crate) struct Answer {
    pub(crate) status: u16,
    body: Vec<u8>,
    challenge: Option<String>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as NDJSON (`GET /log`): one object per line.
    pub(crate) fn json_lines(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    pub(crate) fn problem(&self, status: u16, kind: &str) -> Value {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        let problem = self.json();
        assert_eq!(problem["type"], kind, "{problem}");
        problem
    }
}

/// `METHOD PATH` with `Authorization: Bearer TOKEN` (none for `None`), and `body` as JSON.
pub(crate) fn call(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let agent = crate::common::server::agent(None);
    let mut request = ureq::http::Request::builder()
        .method(method)
        .uri(server.url(path));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let sent = match body {
        Some(body) => agent.run(
            request
                .header("content-type", "application/json")
                .body(body.to_string())
                .expect("a request"),
        ),
        None => agent.run(request.body(()).expect("a request")),
    };
    let mut response = sent.unwrap_or_else(|e| panic!("{method} {path}: no answer: {e}"));
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Answer {
        status: response.status().as_u16(),
        body: response.body_mut().read_to_vec().expect("a body"),
        challenge,
    }
}

fn acquire_body(owner: &str) -> Value {
    json!({"owner": owner, "ttl_seconds": 60})
}

#[test]
fn a_token_is_made_once_and_its_file_keeps_only_a_hash() {
    let db = Db::sqlite();
    let secret = make_token(&db, "ci", &["--prefix", "ci/"]);
    assert!(secret.starts_with("dl_") && secret.len() == 67, "{secret}");
    let file = db.file("tokens.json");
    let text = std::fs::read_to_string(&file).expect("the tokens file");
    assert!(!text.contains(&secret), "no secret in the file: {text}");
    assert!(text.contains("\"ci/\""), "{text}");
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
    let file = file.to_str().expect("a UTF-8 path");
    // (arguments, why it is refused): each a usage error with one line, and the file unchanged.
    let refused: [(&[&str], &str); 6] = [
        (
            &["token", "add", "ci", "--tokens", file, "--all-resources"],
            "already has",
        ),
        (&["token", "add", "x", "--tokens", file], "--prefix"),
        (
            &["token", "add", "x", "--tokens", file, "--prefix", ""],
            "empty",
        ),
        (
            &[
                "token",
                "add",
                "x",
                "--tokens",
                file,
                "--prefix",
                "a",
                "--all-resources",
            ],
            "cannot be used with",
        ),
        (
            &["token", "add", "a b", "--tokens", file, "--all-resources"],
            "letters",
        ),
        (
            &["token", "add", "", "--tokens", file, "--all-resources"],
            "empty",
        ),
    ];
    for (args, words) in refused {
        let out = db.run(args);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(words), "{args:?}: {stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(file).expect("the tokens file"),
        text,
        "a refused token leaves the file as it was"
    );
    // A file that is not a tokens file is refused, and left alone.
    let other = db.file("other.json");
    std::fs::write(&other, "{\"tokens\": 3}").expect("write");
    let other = other.to_str().expect("a UTF-8 path");
    let out = db.run(&["token", "add", "x", "--tokens", other, "--all-resources"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(other).expect("read"),
        "{\"tokens\": 3}"
    );
    // The server refuses to start with it, or with none at all.
    for bad in [
        other.to_owned(),
        db.file("missing.json").display().to_string(),
    ] {
        let out = db.run(&["serve", "--listen", "127.0.0.1:0", "--tokens", &bad]);
        assert_eq!(out.status.code(), Some(64), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("--tokens"), "{stderr}");
    }
}

#[test]
fn with_tokens_every_request_but_health_shows_a_known_one() {
    let db = Db::sqlite();
    let secret = make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json").display().to_string();
    let server = Server::start_serving(&db, &["--tokens", &tokens]);
    let wrong = format!("{secret}0");
    let path = lock_path("r", "");
    for token in [None, Some(wrong.as_str()), Some("dl_"), Some("")] {
        for (method, path, body) in [
            ("POST", path.as_str(), Some(acquire_body("w"))),
            ("GET", path.as_str(), None),
            ("GET", "/locks", None),
            ("GET", "/log", None),
            ("GET", "/metrics", None),
            ("POST", "/locks/r/break", Some(json!({"reason": "x"}))),
            // Even a bad request is refused for its token first.
            ("POST", "/locks/%00", Some(json!({}))),
        ] {
            let answer = call(&server, method, path, token, body.as_ref());
            let problem = answer.problem(401, "unauthorized");
            assert_eq!(answer.challenge.as_deref(), Some("Bearer"), "{problem}");
            let text = String::from_utf8_lossy(&answer.body);
            assert!(!text.contains(&secret[3..]), "{method} {path}: {text}");
        }
    }
    let health = call(&server, "GET", "/health", None, None);
    assert_eq!(health.status, 200);
    let taken = call(
        &server,
        "POST",
        &path,
        Some(&secret),
        Some(&acquire_body("w")),
    );
    assert_eq!(taken.status, 200);
    assert_eq!(taken.json()["acquired"], true);
    let stderr = server.stderr();
    assert!(
        !stderr.contains(&secret[3..]),
        "no secret in the log: {stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("distlock: POST /locks/r 200") && l.ends_with(" token ci")),
        "the log line names the token: {stderr}"
    );
}

#[test]
fn a_tenure_belongs_to_the_token_that_took_it_whatever_owner_another_claims() {
    each_store(|db| {
        let ci = make_token(db, "ci", &["--prefix", "jobs/"]);
        let intruder = make_token(db, "intruder", &["--prefix", "jobs/"]);
        let ops = make_token(db, "ops", &["--all-resources", "--operator"]);
        let tokens = db.file("tokens.json").display().to_string();
        let server = Server::start_serving(db, &["--tokens", &tokens]);
        let path = lock_path("jobs/a", "");
        let renew = lock_path("jobs/a", "/renew");
        let taken = call(&server, "POST", &path, Some(&ci), Some(&acquire_body("w")));
        assert_eq!(taken.status, 200);
        let fence = taken.json()["lock"]["fence"].clone();
        // The owner is anyone's to read, and proves nothing.
        let seen = call(&server, "GET", &path, Some(&intruder), None);
        assert_eq!(seen.json()["lock"]["owner"], "w");
        let busy = call(
            &server,
            "POST",
            &path,
            Some(&intruder),
            Some(&acquire_body("w")),
        );
        assert_eq!(busy.status, 200);
        assert_eq!(
            busy.json()["acquired"],
            false,
            "busy as if another owner held it"
        );
        let shared = call(
            &server,
            "POST",
            &path,
            Some(&intruder),
            Some(&json!({"owner": "w", "ttl_seconds": 60, "wait_seconds": 1})),
        );
        assert_eq!(shared.json()["acquired"], false, "still busy after waiting");
        let body = json!({"owner": "w", "ttl_seconds": 60, "fence": fence});
        call(&server, "POST", &renew, Some(&intruder), Some(&body)).problem(403, "forbidden");
        call(
            &server,
            "DELETE",
            &path,
            Some(&intruder),
            Some(&json!({"owner": "w"})),
        )
        .problem(403, "forbidden");
        // A caller of the store itself proves no token either.
        assert_eq!(
            db.run(&["release", "jobs/a", "--owner", "w"]).status.code(),
            Some(77)
        );
        // Its own token renews and extends it; only an operator breaks it.
        let renewed = call(&server, "POST", &renew, Some(&ci), Some(&body));
        assert_eq!(
            renewed.status,
            200,
            "{}",
            String::from_utf8_lossy(&renewed.body)
        );
        let extended = call(&server, "POST", &path, Some(&ci), Some(&acquire_body("w")));
        assert_eq!(extended.json()["lock"]["fence"], fence);
        let brk = lock_path("jobs/a", "/break");
        call(
            &server,
            "POST",
            &brk,
            Some(&ci),
            Some(&json!({"reason": "mine"})),
        )
        .problem(403, "not-allowed");
        let broken = call(
            &server,
            "POST",
            &brk,
            Some(&ops),
            Some(&json!({"reason": "stuck"})),
        );
        assert_eq!(broken.status, 200);
        assert_eq!(broken.json()["broken"], true);
        // The history names the token of every tenure.
        let log = call(&server, "GET", "/log?resource=jobs%2Fa", Some(&ci), None);
        let events: Vec<Value> = String::from_utf8_lossy(&log.body)
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
            .collect();
        let kinds: Vec<(&str, &str)> = events
            .iter()
            .map(|e| {
                (
                    e["event"].as_str().unwrap_or("?"),
                    e["token"].as_str().unwrap_or("-"),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("acquired", "ci"),
                ("renewed", "ci"),
                ("extended", "ci"),
                ("broken", "ci")
            ],
            "{events:?}"
        );
        // And the command line shows it too.
        let cli_log = db.json(&["log", "jobs/a", "--limit", "1"], 0);
        assert_eq!(cli_log["token"], "ci", "{cli_log}");
    });
}

#[test]
fn a_token_uses_and_sees_only_its_resources_and_an_operator_every_one() {
    let db = Db::sqlite();
    let ci = make_token(&db, "ci", &["--prefix", "ci/", "--prefix", "build-"]);
    let ops = make_token(&db, "ops", &["--all-resources", "--operator"]);
    let tokens = db.file("tokens.json").display().to_string();
    let server = Server::start_serving(&db, &["--tokens", &tokens]);
    for resource in ["ci/a", "build-7", "prod", "ci"] {
        let taken = call(
            &server,
            "POST",
            &lock_path(resource, ""),
            Some(&ops),
            Some(&acquire_body("o")),
        );
        assert_eq!(taken.status, 200, "{resource}");
    }
    // (method, resource, tail, body): all outside ci's prefixes, reads included.
    for (method, resource, tail, body) in [
        ("POST", "prod", "", Some(acquire_body("w"))),
        ("GET", "prod", "", None),
        ("GET", "ci", "", None),
        ("DELETE", "prod", "?owner=o", None),
        ("POST", "prod", "/renew", Some(acquire_body("o"))),
        ("GET", "Ci/a", "", None),
    ] {
        let answer = call(
            &server,
            method,
            &lock_path(resource, tail),
            Some(&ci),
            body.as_ref(),
        );
        let problem = answer.problem(403, "not-allowed");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("token ci")),
            "{problem}"
        );
    }
    call(&server, "GET", "/log?resource=prod", Some(&ci), None).problem(403, "not-allowed");
    let resources = |answer: Answer| -> Vec<String> {
        answer.json()["locks"]
            .as_array()
            .expect("locks")
            .iter()
            .map(|l| l["resource"].as_str().expect("resource").to_owned())
            .collect()
    };
    assert_eq!(
        resources(call(&server, "GET", "/locks", Some(&ci), None)),
        ["build-7", "ci/a"]
    );
    assert_eq!(
        resources(call(&server, "GET", "/locks?prefix=c", Some(&ci), None)),
        ["ci/a"]
    );
    assert_eq!(
        resources(call(&server, "GET", "/locks", Some(&ops), None)),
        ["build-7", "ci", "ci/a", "prod"]
    );
    let log = call(&server, "GET", "/log", Some(&ci), None);
    let seen: Vec<String> = String::from_utf8_lossy(&log.body)
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).expect("a JSON line")["resource"]
                .as_str()
                .expect("resource")
                .to_owned()
        })
        .collect();
    assert_eq!(seen, ["ci/a", "build-7"], "only ci's resources in the log");
    let status = call(&server, "GET", &lock_path("ci/a", ""), Some(&ci), None);
    assert_eq!(
        status.json()["lock"]["owner"],
        "o",
        "ci reads its own resources"
    );
    let metrics = call(&server, "GET", "/metrics", Some(&ci), None);
    assert_eq!(metrics.status, 200);
}

/// Waits until the server's stderr has `n` lines holding `text`.
fn wait_for_lines(server: &Server, text: &str, n: usize) {
    let seen = || server.stderr().lines().filter(|l| l.contains(text)).count() >= n;
    assert!(
        wait_for(Duration::from_secs(10), seen),
        "no line number {n} with {text:?}: {}",
        server.stderr()
    );
}

#[test]
fn sighup_rereads_the_tokens_file_and_a_bad_one_keeps_the_tokens_served() {
    let db = Db::sqlite();
    let ci = make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json");
    let server = Server::start_serving(&db, &["--tokens", &tokens.display().to_string()]);
    let status = |token: &str| call(&server, "GET", "/locks", Some(token), None).status;
    // A token added to the file is let in once SIGHUP rereads it.
    let late = make_token(&db, "late", &["--all-resources"]);
    assert_eq!(status(&late), 401, "not yet reread");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reloaded the tokens", 1);
    assert_eq!((status(&ci), status(&late)), (200, 200));
    // A file cut short, or gone: the tokens served before are kept, and the line says why.
    let whole = std::fs::read(&tokens).expect("read the tokens file");
    std::fs::write(&tokens, &whole[..whole.len() / 2]).expect("cut the file short");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reload failed", 1);
    std::fs::remove_file(&tokens).expect("remove the file");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reload failed", 2);
    assert_eq!(
        (status(&ci), status(&late)),
        (200, 200),
        "the old tokens are kept"
    );
    // A file that drops a token locks it out at the next reread.
    std::fs::write(&tokens, &whole).expect("put the file back");
    let mut file: Value = serde_json::from_slice(&whole).expect("JSON");
    file["tokens"]
        .as_array_mut()
        .expect("tokens")
        .retain(|t| t["name"] != "late");
    std::fs::write(&tokens, file.to_string()).expect("write the file");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reloaded the tokens", 2);
    assert_eq!((status(&ci), status(&late)), (200, 401));
    let stderr = server.stderr();
    for secret in [&ci, &late] {
        assert!(
            !stderr.contains(&secret[3..]),
            "no secret on stderr: {stderr}"
        );
    }
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let out = server.finish();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
}

#[test]
fn beyond_loopback_tokens_need_https_or_insecure_http() {
    let db = Db::sqlite();
    make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json").display().to_string();
    let out = db.run(&["serve", "--listen", "0.0.0.0:0", "--tokens", &tokens]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--insecure-http") && stderr.contains("--tls-cert"),
        "{stderr}"
    );
    // With --insecure-http it serves, on every address.
    let mut cmd = db.std_cmd();
    cmd.args([
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--tokens",
        &tokens,
        "--insecure-http",
    ]);
    let proc = crate::common::process::Proc::spawn(&mut cmd, db.dir.path(), "wide");
    let stderr = db.dir.path().join("wide.stderr");
    let first_line = || {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        text.split_once('\n').map(|(line, _)| line.to_owned())
    };
    wait_until(Duration::from_secs(20), "a first line on stderr", || {
        first_line().is_some()
    });
    let first = first_line().unwrap_or_default();
    assert!(
        first.starts_with("distlock: listening on http://0.0.0.0:"),
        "{first}"
    );
    proc.signal(nix::sys::signal::Signal::SIGTERM);
    let out = proc.finish(Duration::from_secs(10));
    assert_eq!(out.code(), Some(0), "{}", out.describe());
}

#[test]
fn token_add_at_once_keeps_every_token_and_writes_through_a_link_keeping_the_mode() {
    let db = Db::sqlite();
    let real = db.file("real.json");
    let link = db.file("link.json");
    std::os::unix::fs::symlink("real.json", &link).expect("a link");
    let link_text = link.to_str().expect("UTF-8").to_owned();
    // Twenty at once, through the link (dangling until the first writes the file).
    let made: Vec<std::process::Child> = (0..20)
        .map(|n| {
            let mut cmd = crate::common::process::distlock();
            cmd.args(["token", "add", &format!("t{n}"), "--tokens", &link_text])
                .args(["--prefix", &format!("p{n}/")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().expect("start token add")
        })
        .collect();
    let mut secrets = Vec::new();
    for child in made {
        let out = child.wait_with_output().expect("token add");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let made: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        secrets.push(made["secret"].as_str().expect("secret").to_owned());
    }
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("stat")
            .file_type()
            .is_symlink(),
        "the link is still a link"
    );
    let file: Value = serde_json::from_slice(&std::fs::read(&real).expect("read")).expect("JSON");
    assert_eq!(file["tokens"].as_array().map(Vec::len), Some(20), "{file}");
    // A mode the owner chose (a server reading the file as its group) stays.
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let out = db.run(&[
        "token",
        "add",
        "more",
        "--tokens",
        &link_text,
        "--all-resources",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let mode = std::fs::metadata(&real).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o640, "the mode the file had");
    // Every secret handed out works.
    let server = Server::start_serving(&db, &["--tokens", real.to_str().expect("UTF-8")]);
    for (n, secret) in secrets.iter().enumerate() {
        let answer = call(
            &server,
            "GET",
            &lock_path(&format!("p{n}/x"), ""),
            Some(secret),
            None,
        );
        assert_eq!(
            answer.status,
            404,
            "token t{n}: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }
    // Something that is not a regular file is refused, and never waited on.
    let fifo = db.file("fifo.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let out = db.run(&[
        "token",
        "add",
        "x",
        "--tokens",
        fifo.to_str().expect("UTF-8"),
        "--all-resources",
    ]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a regular file"),
        "{out:?}"
    );
}

#[test]
fn a_token_taken_out_of_the_file_ends_its_waiting_request_without_the_lock() {
    let db = Db::sqlite();
    let holder = make_token(&db, "holder", &["--prefix", "q"]);
    let revoked = make_token(&db, "revoked", &["--prefix", "q"]);
    let tokens = db.file("tokens.json");
    let server = Server::start_serving(&db, &["--tokens", tokens.to_str().expect("UTF-8")]);
    let path = lock_path("q", "");
    assert_eq!(
        call(
            &server,
            "POST",
            &path,
            Some(&holder),
            Some(&acquire_body("h"))
        )
        .status,
        200
    );
    let answered = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let body = json!({"owner": "w", "ttl_seconds": 600, "wait_seconds": 25});
            call(&server, "POST", &path, Some(&revoked), Some(&body))
        });
        // In the queue, then out of the file.
        wait_until(Duration::from_secs(10), "never queued", || {
            db.json(&["status", "q"], 0)["waiting"] == 1
        });
        let mut file: Value =
            serde_json::from_slice(&std::fs::read(&tokens).expect("read")).expect("JSON");
        file["tokens"]
            .as_array_mut()
            .expect("tokens")
            .retain(|t| t["name"] != "revoked");
        std::fs::write(&tokens, file.to_string()).expect("write");
        server.signal(nix::sys::signal::Signal::SIGHUP);
        wait_for_lines(&server, "SIGHUP: reloaded the tokens", 1);
        assert_eq!(
            call(
                &server,
                "DELETE",
                &path,
                Some(&holder),
                Some(&json!({"owner": "h"}))
            )
            .status,
            204
        );
        waiting.join().expect("the waiting request")
    });
    assert_eq!(answered.status, 200);
    assert_eq!(
        answered.json()["acquired"],
        false,
        "the revoked token's wait ended unanswered"
    );
    let status = db.run(&["status", "q"]);
    assert_eq!(status.status.code(), Some(1), "nobody holds it: {status:?}");
    // Its place went with its answer: the resource is not kept for a caller that can never
    // ask again.
    let free = db.json(&["status", "q"], 1);
    assert!(
        free.get("waiting").is_none_or(|waiting| waiting == 0),
        "the revoked token's place is given up: {free}"
    );
    assert_eq!(
        call(
            &server,
            "POST",
            &path,
            Some(&revoked),
            Some(&acquire_body("w"))
        )
        .status,
        401
    );
}

/// A token taken out of the file (and SIGHUP) while a `run` through the server holds a lock
/// with it: the run's next renewal is refused (401), and the run stops its command at once, as
/// for a lost lease (124, one line saying the token was refused), instead of retrying until
/// its lease is about to end. With a 30 s TTL the renewal comes at 10 s; retrying would stop
/// the command only at 22 s.
#[test]
fn a_run_whose_token_is_taken_out_of_the_file_stops_its_command_at_its_next_renewal() {
    let db = Db::sqlite();
    let secret = make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json");
    let server = Server::start_serving(&db, &["--tokens", tokens.to_str().expect("UTF-8")]);
    let mut cmd = distlock_at(server.url(""));
    cmd.env("DISTLOCK_TOKEN", &secret).env("D", db.dir.path());
    cmd.args(["run", "--resource", "job", "--ttl", "30", "--", "sh", "-c"]);
    cmd.arg(r#"touch "$D/started"; exec sleep 120"#);
    let started = Instant::now();
    let run = Proc::spawn(&mut cmd, db.dir.path(), "run");
    wait_for_file(&db.file("started"), Duration::from_secs(20));
    let mut file: Value =
        serde_json::from_slice(&std::fs::read(&tokens).expect("read")).expect("JSON");
    file["tokens"].as_array_mut().expect("tokens").clear();
    std::fs::write(&tokens, file.to_string()).expect("write");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reloaded the tokens", 1);

    let out = run.finish(Duration::from_secs(60));
    let took = started.elapsed();
    assert_eq!(out.code(), Some(124), "{}", out.describe());
    let stderr = out.stderr();
    assert!(
        stderr.starts_with("distlock: lost the lock on job: ")
            && stderr.contains("refused the token")
            && stderr
                .lines()
                .next()
                .is_some_and(|line| line.ends_with("; stopping the command")),
        "{stderr}"
    );
    assert!(!stderr.contains("retrying"), "not retried: {stderr}");
    assert!(!stderr.contains(&secret[3..]), "no secret: {stderr}");
    // Stopped at the first renewal (10 s), well before the 22 s of renewals retried.
    assert!(took < Duration::from_secs(18), "stopped after {took:?}");
    assert!(
        server.stderr().contains("POST /locks/job/renew 401"),
        "{}",
        server.stderr()
    );
}

#[test]
fn an_operator_reads_and_breaks_every_lock_but_takes_only_its_own_resources() {
    let db = Db::sqlite();
    let ops = make_token(&db, "ops", &["--prefix", "ops/", "--operator"]);
    let ci = make_token(&db, "ci", &["--prefix", "ci/"]);
    let tokens = db.file("tokens.json");
    let server = Server::start_serving(&db, &["--tokens", tokens.to_str().expect("UTF-8")]);
    let ci_lock = lock_path("ci/a", "");
    assert_eq!(
        call(
            &server,
            "POST",
            &ci_lock,
            Some(&ci),
            Some(&acquire_body("w"))
        )
        .status,
        200
    );
    // Reads and breaks anywhere.
    assert_eq!(call(&server, "GET", &ci_lock, Some(&ops), None).status, 200);
    let listed = call(&server, "GET", "/locks", Some(&ops), None).json();
    assert_eq!(
        listed["locks"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let broken = call(
        &server,
        "POST",
        &lock_path("ci/a", "/break"),
        Some(&ops),
        Some(&json!({"reason": "stuck"})),
    );
    assert_eq!(broken.status, 200);
    // Takes, renews and releases only under its own prefixes.
    call(
        &server,
        "POST",
        &ci_lock,
        Some(&ops),
        Some(&acquire_body("o")),
    )
    .problem(403, "not-allowed");
    assert_eq!(
        call(
            &server,
            "POST",
            &lock_path("ops/x", ""),
            Some(&ops),
            Some(&acquire_body("o"))
        )
        .status,
        200
    );
}

/// A request without a known token is answered 401 on its head alone: a client that sends a
/// POST's head and never its body is not waited for (a body may take 10 s to come), and its
/// connection is closed after the answer.
#[test]
fn a_request_without_a_known_token_is_401_before_its_body_is_read() {
    use std::io::{Read, Write};
    use std::time::Instant;

    /// Far less than the 10 s a body may take to come: a 401 within it did not wait for one.
    const AT_ONCE: Duration = Duration::from_secs(5);

    let db = Db::sqlite();
    let secret = make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json").display().to_string();
    let server = Server::start_serving(&db, &["--tokens", &tokens]);
    let wrong = format!("Authorization: Bearer {secret}0\r\n");
    for (target, authorization) in [
        (lock_path("r", ""), ""),
        (lock_path("r", ""), wrong.as_str()),
        (lock_path("r", "/renew"), "Authorization: Basic eDp5\r\n"),
        ("/sets".to_owned(), ""),
    ] {
        let mut stream = server.connect();
        stream
            .set_read_timeout(Some(AT_ONCE))
            .expect("a read timeout");
        let head = format!(
            "POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{authorization}\
             Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"
        );
        let sent = Instant::now();
        stream.write_all(head.as_bytes()).expect("send the head");
        let mut got = Vec::new();
        let mut buf = [0_u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!(
                    "POST {target} without its body: no answer within {AT_ONCE:?} ({e}); got \
                     {:?}",
                    String::from_utf8_lossy(&got)
                ),
            }
        }
        let answer = String::from_utf8_lossy(&got).to_ascii_lowercase();
        assert!(
            answer.starts_with("http/1.1 401 "),
            "POST {target}: {answer}"
        );
        assert!(sent.elapsed() < AT_ONCE, "POST {target}: at once");
        assert!(
            answer.contains("\r\nconnection: close\r\n"),
            "its body unread, the connection is closed after the answer: {answer}"
        );
        assert!(!answer.contains(&secret[3..]), "{answer}");
    }
    // With the token, the same request is served as before.
    let taken = call(
        &server,
        "POST",
        &lock_path("r", ""),
        Some(&secret),
        Some(&acquire_body("w")),
    );
    assert_eq!(taken.status, 200);
    assert_eq!(taken.json()["acquired"], true);
}

#[test]
fn a_break_records_the_operators_token_that_the_server_let_in_beside_the_by_it_was_told() {
    each_store(|db| {
        let ci = make_token(db, "ci", &["--prefix", "jobs/"]);
        let ops = make_token(db, "ops", &["--all-resources", "--operator"]);
        let tokens = db.file("tokens.json").display().to_string();
        let server = Server::start_serving(db, &["--tokens", &tokens]);
        for resource in ["jobs/a", "jobs/b"] {
            let taken = call(
                &server,
                "POST",
                &lock_path(resource, ""),
                Some(&ci),
                Some(&acquire_body("w")),
            );
            assert_eq!(taken.status, 200, "{resource}");
        }
        // The body names someone else; the server knows it was ops.
        let brk = lock_path("jobs/a", "/break");
        let broken = call(
            &server,
            "POST",
            &brk,
            Some(&ops),
            Some(&json!({"reason": "stuck", "by": "ci-bot@innocent"})),
        );
        assert_eq!(broken.status, 200);
        // Nor can a body claim a token of its own.
        call(
            &server,
            "POST",
            &lock_path("jobs/b", "/break"),
            Some(&ops),
            Some(&json!({"reason": "stuck", "by_token": "ci"})),
        )
        .problem(422, "invalid-request");
        // Through distlock's own client too, with the by it makes up (`<user>@<hostname>`).
        let out = db
            .std_cmd()
            .args([
                "--db",
                &server.url(""),
                "break",
                "jobs/b",
                "--reason",
                "gone",
            ])
            .env("DISTLOCK_TOKEN", &ops)
            .output()
            .expect("break through the server");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        // GET /log, and the command line on the store itself, say the same.
        let log = call(&server, "GET", "/log?resource=jobs%2Fa", Some(&ops), None);
        let served: Vec<Value> = String::from_utf8_lossy(&log.body)
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect();
        let event = served.last().expect("events").clone();
        assert_eq!(
            (
                &event["event"],
                &event["token"],
                &event["by"],
                &event["by_token"],
                &event["reason"]
            ),
            (
                &json!("broken"),
                &json!("ci"),
                &json!("ci-bot@innocent"),
                &json!("ops"),
                &json!("stuck")
            ),
            "the victim tenure's token, and the operator's that broke it: {event}"
        );
        assert_eq!(db.log(&["jobs/a", "--limit", "1"])[0], event);
        let by_cli = db.log(&["jobs/b", "--limit", "1"]);
        assert_eq!(
            (&by_cli[0]["event"], &by_cli[0]["by_token"]),
            (&json!("broken"), &json!("ops")),
            "{by_cli:?}"
        );
        let text = db.text_lines(&["log", "jobs/a", "--limit", "1"], 0);
        assert!(
            text[0].contains("broken by ci-bot@innocent (token ops): the tenure of w"),
            "{text:?}"
        );
        // A break without a server's token records none: no key at all.
        db.json(&["acquire", "local", "--owner", "x", "--ttl", "60"], 0);
        db.json(&["break", "local", "--reason", "r", "--by", "me"], 0);
        let local = db.log(&["local", "--limit", "1"]);
        assert_eq!(local[0]["by"], "me", "{local:?}");
        assert!(local[0].get("by_token").is_none(), "{local:?}");
    });
}

/// How long a refused start may take (a start that waits on a FIFO would take for ever).
const REFUSED: Duration = Duration::from_secs(20);

/// `serve --tokens FILE`, which must be refused at once with 64 and one line naming `names`
/// (and the file), before any store is made: that line.
fn refused_start(db: &Db, tokens: &std::path::Path, names: &str) -> String {
    let tokens = tokens.to_str().expect("a UTF-8 path");
    let out = db
        .cmd()
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens", tokens])
        .timeout(REFUSED)
        .output()
        .expect("run distlock serve");
    assert_eq!(out.status.code(), Some(64), "--tokens {tokens}: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.starts_with("distlock: --tokens: ") && stderr.lines().count() == 1,
        "one line: {stderr:?}"
    );
    assert!(
        stderr.contains(names) && stderr.contains(tokens),
        "names {names:?} and the file: {stderr}"
    );
    assert!(!db.path().exists(), "a refused start makes no store");
    stderr.trim_end().to_owned()
}

/// A tokens file named through a link is trusted only if the folders of the link are too:
/// whoever may write the folder the link lies in may point it at a file of their own.
#[test]
fn a_tokens_file_named_through_a_link_in_a_folder_others_may_write_is_refused() {
    let db = Db::sqlite();
    make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json");
    let open = db.dir.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    chmod(&open, 0o777);
    let link = open.join("tokens.json");
    std::os::unix::fs::symlink(&tokens, &link).expect("symlink");
    let line = refused_start(&db, &link, "(mode 0777)");
    assert!(
        line.contains(&format!("the folder {} ", open.display())),
        "{line}"
    );
    // The same link in a folder only its owner may write is followed.
    chmod(&open, 0o755);
    let server = Server::start_serving(&db, &["--tokens", link.to_str().expect("UTF-8")]);
    assert_eq!(call(&server, "GET", "/locks", None, None).status, 401);
}

/// `chmod MODE PATH`.
fn chmod(path: &std::path::Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[test]
fn a_tokens_file_or_a_folder_above_it_that_others_may_write_is_refused_at_start_and_at_sighup() {
    let db = Db::sqlite();
    let ci = make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json");
    let folder = db.dir.path();
    // As ssh refuses an authorized_keys that others may write: any of them could add an
    // operator of their own.
    for (mode, writers) in [
        (0o666, "its group and others (mode 0666)"),
        (0o622, "its group and others (mode 0622)"),
        (0o620, "its group (mode 0620)"),
        (0o602, "others (mode 0602)"),
    ] {
        chmod(&tokens, mode);
        let line = refused_start(&db, &tokens, writers);
        assert!(line.contains("the tokens file"), "{line}");
    }
    chmod(&tokens, 0o600);
    // Or whose folder they may write: any of them could put another file in its place.
    chmod(folder, 0o777);
    let line = refused_start(&db, &tokens, "(mode 0777)");
    assert!(
        line.contains(&format!("the folder {} ", folder.display())),
        "{line}"
    );
    chmod(folder, 0o770);
    refused_start(&db, &tokens, "its group (mode 0770)");
    chmod(folder, 0o700);
    let root = if nix::unistd::Uid::effective().is_root() {
        Ok(())
    } else {
        Err("giving a file to another user needs root".to_owned())
    };
    if require("ROOT", "a tokens file of another user", root).is_some() {
        // Neither the server's user's nor root's.
        nix::unistd::chown(&tokens, Some(nix::unistd::Uid::from_raw(65534)), None).expect("chown");
        refused_start(&db, &tokens, "belongs to uid 65534");
        nix::unistd::chown(&tokens, Some(nix::unistd::Uid::from_raw(0)), None).expect("chown");
    }
    // At SIGHUP, such a file keeps the tokens served, and one line says why.
    let server = Server::start_serving(&db, &["--tokens", tokens.to_str().expect("UTF-8")]);
    let late = make_token(&db, "late", &["--all-resources"]);
    let status = |token: &str| call(&server, "GET", "/locks", Some(token), None).status;
    chmod(&tokens, 0o666);
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reload failed", 1);
    let failed: Vec<String> = server
        .stderr()
        .lines()
        .filter(|l| l.contains("SIGHUP"))
        .map(str::to_owned)
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("mode 0666"), "{failed:?}");
    assert_eq!(
        (status(&ci), status(&late)),
        (200, 401),
        "the old tokens kept"
    );
    chmod(&tokens, 0o600);
    chmod(folder, 0o757);
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reload failed", 2);
    assert_eq!(
        (status(&ci), status(&late)),
        (200, 401),
        "the old tokens kept"
    );
    chmod(folder, 0o700);
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reloaded the tokens", 1);
    assert_eq!(
        (status(&ci), status(&late)),
        (200, 200),
        "the file as it should be"
    );
}

#[test]
fn a_tokens_path_that_is_no_regular_file_is_refused_at_once_and_sighup_never_waits_on_it() {
    let db = Db::sqlite();
    let fifo = db.file("fifo.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    refused_start(&db, &fifo, "is not a regular file (a FIFO)");
    refused_start(&db, db.dir.path(), "is not a regular file (a folder)");
    let ci = make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json");
    let server = Server::start_serving(&db, &["--tokens", tokens.to_str().expect("UTF-8")]);
    // A FIFO where the file was: the reread says so at once, and the next one is not held up.
    let kept = db.file("kept.json");
    std::fs::rename(&tokens, &kept).expect("move the file away");
    std::fs::rename(&fifo, &tokens).expect("a FIFO in its place");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reload failed", 1);
    assert!(
        server.stderr().contains("is not a regular file (a FIFO)"),
        "{}",
        server.stderr()
    );
    assert_eq!(call(&server, "GET", "/locks", Some(&ci), None).status, 200);
    std::fs::rename(&kept, &tokens).expect("the file back");
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reloaded the tokens", 1);
    assert_eq!(call(&server, "GET", "/locks", Some(&ci), None).status, 200);
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let out = server.finish();
    assert_eq!(out.code(), Some(0), "{}", out.describe());
}

#[test]
fn an_empty_prefix_in_the_tokens_file_is_refused_as_token_add_refuses_it() {
    let db = Db::sqlite();
    let ci = make_token(&db, "ci", &["--prefix", "ci/"]);
    let tokens = db.file("tokens.json");
    let whole: Value =
        serde_json::from_slice(&std::fs::read(&tokens).expect("read")).expect("JSON");
    let with_prefixes = |prefixes: Value| {
        let mut file = whole.clone();
        file["tokens"][0]["resources"] = prefixes;
        std::fs::write(&tokens, file.to_string()).expect("write the file");
    };
    // `token add --prefix ''` refuses it; so does the server, with the same words.
    let out = db.run(&[
        "token",
        "add",
        "x",
        "--tokens",
        tokens.to_str().expect("UTF-8"),
        "--prefix",
        "",
    ]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let words = "a prefix must not be empty";
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(words),
        "{out:?}"
    );
    for prefixes in [json!([""]), json!(["ci/", ""])] {
        with_prefixes(prefixes);
        let line = refused_start(&db, &tokens, words);
        assert!(line.contains("token ci"), "{line}");
    }
    // At SIGHUP: the old tokens kept, and ci keeps to its prefix.
    std::fs::write(&tokens, whole.to_string()).expect("write the file");
    let server = Server::start_serving(&db, &["--tokens", tokens.to_str().expect("UTF-8")]);
    with_prefixes(json!([""]));
    server.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for_lines(&server, "SIGHUP: reload failed", 1);
    assert!(server.stderr().contains(words), "{}", server.stderr());
    let elsewhere = call(
        &server,
        "POST",
        &lock_path("prod", ""),
        Some(&ci),
        Some(&acquire_body("w")),
    );
    elsewhere.problem(403, "not-allowed");
}

/// The tokens file's bytes, or `None` when there is none.
fn file_bytes(path: &std::path::Path) -> Option<Vec<u8>> {
    std::fs::read(path).ok()
}

#[test]
fn token_add_never_leaves_a_token_in_the_file_whose_secret_nobody_saw() {
    let db = Db::sqlite();
    let tokens = db.file("tokens.json");
    let file = tokens.to_str().expect("UTF-8").to_owned();
    // `token add NAME … REDIRECTION` through sh: (redirection, what it is)
    let cases = [
        ("> /dev/full", "a full disk"),
        (">&-", "stdout closed"),
        ("> /dev/null", "stdout thrown away"),
    ];
    let add = |name: &str, redirection: &str| {
        crate::common::process::isolated("sh")
            .arg("-c")
            .arg(format!(
                "exec \"$0\" token add {name} --tokens \"$1\" --all-resources --operator {redirection}"
            ))
            .arg(crate::common::process::BIN)
            .arg(&file)
            .output()
            .expect("token add through sh")
    };
    for round in ["a new file", "a file with a token"] {
        let before = file_bytes(&tokens);
        for (redirection, what) in cases {
            let out = add("lost", redirection);
            assert_eq!(out.status.code(), Some(74), "{round}, {what}: {out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.starts_with("distlock: cannot write the answer to stdout")
                    && stderr.lines().count() == 1,
                "{round}, {what}: {stderr}"
            );
            assert_eq!(
                file_bytes(&tokens),
                before,
                "{round}, {what}: no token whose secret nobody saw"
            );
        }
        if round == "a new file" {
            make_token(&db, "seen", &["--all-resources"]);
        }
    }
    // The one token whose secret was shown is the only one in the file.
    let kept: Value = serde_json::from_slice(&std::fs::read(&tokens).expect("read")).expect("JSON");
    assert_eq!(kept["tokens"].as_array().map(Vec::len), Some(1), "{kept}");
}

#[test]
fn token_add_refuses_a_file_or_folder_the_server_would_refuse_and_changes_nothing() {
    let db = Db::sqlite();
    make_token(&db, "ci", &["--all-resources"]);
    let tokens = db.file("tokens.json");
    let file = tokens.to_str().expect("UTF-8");
    let before = std::fs::read(&tokens).expect("read");
    let add = || db.run(&["token", "add", "x", "--tokens", file, "--all-resources"]);
    chmod(&tokens, 0o666);
    let out = add();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("may be written by its group and others"),
        "{out:?}"
    );
    chmod(&tokens, 0o600);
    chmod(db.dir.path(), 0o777);
    let out = add();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the folder"),
        "{out:?}"
    );
    // Nor a new file in such a folder.
    let fresh = db.file("fresh.json");
    let out = db.run(&[
        "token",
        "add",
        "x",
        "--tokens",
        fresh.to_str().expect("UTF-8"),
        "--all-resources",
    ]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(!fresh.exists(), "no new file");
    chmod(db.dir.path(), 0o700);
    assert_eq!(std::fs::read(&tokens).expect("read"), before, "unchanged");
    assert_eq!(add().status.code(), Some(0), "once the modes are right");
}
