//! `distlock serve` under test, and two clients for it.
//!
//! [`Server::start`] runs the server over a test's store ([`Db`]'s `--db`) on a free port of
//! 127.0.0.1 (`--listen 127.0.0.1:0`), and reads the port from its first stderr line, which
//! must be exactly `distlock: listening on http://127.0.0.1:PORT` (`https://` for a server
//! started with a certificate, [`Server::start_tls`]). Its stderr (one line per request after
//! that) stays in a file the test can read. Dropped, it gets SIGTERM, then SIGKILL if it is
//! still there 5 s later.
//!
//! The clients are a real HTTP client (`ureq`, which knows nothing of the server's types; over
//! HTTPS it trusts only the test's CA) for well-formed requests, answering a [`Reply`], and raw
//! [`TcpStream`]s for what no client would send: malformed, oversized and slow requests
//! ([`Server::raw`] answers a [`RawReply`]).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use super::certs::{Ca, CertFiles};
use super::pids::is_gone;
use super::process::{Finished, Proc};
use super::store::{Db, distlock_at};

/// How long a server may take to say where it listens.
const STARTUP: Duration = Duration::from_secs(20);

/// How long a stopped server may take to exit before it is killed.
const STOPPING: Duration = Duration::from_secs(5);

/// The longest any one request of a test may take (a waiting request is answered within 30 s).
const REQUEST: Duration = Duration::from_secs(60);

/// How long a raw request may take to be answered (or its connection closed).
const RAW_ANSWER: Duration = Duration::from_secs(15);

/// The server's first stderr line up to the scheme (`http` or `https`); then come
/// `://127.0.0.1:` and the port.
const LISTENING: &str = "distlock: listening on ";

/// A running `distlock serve`.
pub struct Server {
    proc: Option<Proc>,
    pub addr: SocketAddr,
    /// `http` or `https`.
    scheme: &'static str,
    stderr: PathBuf,
    agent: ureq::Agent,
}

impl Server {
    /// `distlock --db DB serve --listen 127.0.0.1:0`, once it listens.
    pub fn start(db: &Db) -> Server {
        Server::start_serving(db, &[])
    }

    /// The same, with these arguments of `serve` after `--listen` (`--tokens FILE`, say).
    pub fn start_serving(db: &Db, serve_args: &[&str]) -> Server {
        let cmd = distlock_at(db.store_url());
        Server::start_with(db, cmd, serve_args)
    }

    /// The same, with the store in `DISTLOCK_DB` only (as [`Db::std_cmd`] sets it).
    pub fn start_from_env(db: &Db) -> Server {
        Server::start_with(db, db.std_cmd(), &[])
    }

    /// `distlock serve` with the store given by `url` instead of the test's own (the same
    /// database through a proxy, say).
    pub fn start_at(db: &Db, url: &str) -> Server {
        Server::start_with(db, distlock_at(url), &[])
    }

    /// `distlock --db DB serve --listen 127.0.0.1:0 --tls-cert … --tls-key …` (HTTPS with the
    /// certificate in `files`), once it listens; its client trusts `ca` only.
    pub fn start_tls(db: &Db, files: &CertFiles, ca: &Ca) -> Server {
        let cmd = distlock_at(db.store_url());
        Server::launch(db, cmd, &files.args(), Some(ca))
    }

    /// HTTPS with the certificate in `files` that no CA of the test signed (one that signs
    /// itself, say), once it listens; its own client trusts only the system's roots.
    pub fn start_https(db: &Db, files: &CertFiles) -> Server {
        let cmd = distlock_at(db.store_url());
        Server::launch_at(db, cmd, "127.0.0.1:0", &files.args(), true, None)
    }

    /// `CMD serve --listen 127.0.0.1:0 ARGS` (CMD being distlock with its store), once it
    /// listens.
    fn start_with(db: &Db, cmd: std::process::Command, serve_args: &[&str]) -> Server {
        let args: Vec<String> = serve_args.iter().map(|&arg| arg.to_owned()).collect();
        Server::launch(db, cmd, &args, None)
    }

    /// `distlock --db DB serve --listen LISTEN` (a port of 127.0.0.1 that a server before it
    /// had, say), once it listens.
    pub fn start_serving_at(db: &Db, listen: &str) -> Server {
        let cmd = distlock_at(db.store_url());
        Server::launch_at(db, cmd, listen, &[], false, None)
    }

    /// `CMD serve --listen 127.0.0.1:0 ARGS`, once it listens: HTTPS, trusting `ca` only, when
    /// there is one.
    fn launch(db: &Db, cmd: std::process::Command, args: &[String], ca: Option<&Ca>) -> Server {
        Server::launch_at(db, cmd, "127.0.0.1:0", args, ca.is_some(), ca)
    }

    /// `CMD serve --listen LISTEN ARGS`, once it listens: over HTTPS when `https`, its client
    /// trusting `ca` if there is one.
    fn launch_at(
        db: &Db,
        mut cmd: std::process::Command,
        listen: &str,
        args: &[String],
        https: bool,
        ca: Option<&Ca>,
    ) -> Server {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("serve-{}", NEXT.fetch_add(1, Ordering::SeqCst));
        cmd.args(["serve", "--listen", listen]).args(args);
        let proc = Proc::spawn(&mut cmd, db.dir.path(), &name);
        let stderr = db.dir.path().join(format!("{name}.stderr"));
        let start = Instant::now();
        let first = loop {
            let text = std::fs::read_to_string(&stderr).unwrap_or_default();
            if let Some((line, _)) = text.split_once('\n') {
                break line.to_owned();
            }
            if is_gone(proc.pid().as_raw()) {
                let out = proc.finish(STOPPING);
                panic!(
                    "distlock serve exited before it said where it listens: {}",
                    out.describe()
                );
            }
            assert!(
                start.elapsed() < STARTUP,
                "distlock serve said nothing on stderr within {STARTUP:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let scheme = if https { "https" } else { "http" };
        let prefix = format!("{LISTENING}{scheme}://127.0.0.1:");
        let port: u16 = first
            .strip_prefix(&prefix)
            .and_then(|port| port.parse().ok())
            .filter(|&port| port != 0)
            .unwrap_or_else(|| {
                panic!("the first stderr line must be `{prefix}PORT`, got {first:?}")
            });
        Server {
            proc: Some(proc),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            scheme,
            stderr,
            agent: agent(ca),
        }
    }

    /// `http://127.0.0.1:PORT` (or `https://`) + `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// `GET PATH` by `client`: the status, or why there was no answer (a refused certificate,
    /// say).
    pub fn get_by(&self, client: &ureq::Agent, path: &str) -> Result<u16, String> {
        client
            .get(self.url(path))
            .call()
            .map(|response| response.status().as_u16())
            .map_err(|e| e.to_string())
    }

    /// Everything the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends `signal` to the server.
    pub fn signal(&self, signal: Signal) {
        self.proc.as_ref().expect("a running server").signal(signal);
    }

    /// Waits for the server to exit (at most 10 s, then kills it).
    pub fn finish(mut self) -> Finished {
        let proc = self.proc.take().expect("a running server");
        proc.finish(2 * STOPPING)
    }

    pub fn get(&self, path: &str) -> Reply {
        let what = format!("GET {path}");
        Reply::read(self.agent.get(self.url(path)).call(), what)
    }

    /// `POST PATH` with `body` as `application/json`.
    pub fn post(&self, path: &str, body: &Value) -> Reply {
        self.post_as(path, "application/json", body.to_string().as_bytes())
    }

    /// `POST PATH` with these bytes as the body, of this content type.
    pub fn post_as(&self, path: &str, content_type: &str, body: &[u8]) -> Reply {
        let what = format!(
            "POST {path} ({content_type}) {}",
            String::from_utf8_lossy(body)
        );
        let request = self.agent.post(self.url(path)).content_type(content_type);
        Reply::read(request.send(body), what)
    }

    /// `DELETE PATH` without a body.
    pub fn delete(&self, path: &str) -> Reply {
        let what = format!("DELETE {path}");
        Reply::read(self.agent.delete(self.url(path)).call(), what)
    }

    /// `DELETE PATH` with `body` as `application/json`.
    pub fn delete_with(&self, path: &str, body: &Value) -> Reply {
        self.delete_as(path, "application/json", body.to_string().as_bytes())
    }

    /// `DELETE PATH` with these bytes as the body, of this content type.
    pub fn delete_as(&self, path: &str, content_type: &str, body: &[u8]) -> Reply {
        let what = format!(
            "DELETE {path} ({content_type}) {}",
            String::from_utf8_lossy(body)
        );
        let request = self
            .agent
            .delete(self.url(path))
            .force_send_body()
            .content_type(content_type);
        Reply::read(request.send(body), what)
    }

    /// A new TCP connection to the server.
    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect to the server");
        stream
            .set_read_timeout(Some(RAW_ANSWER))
            .expect("read timeout");
        stream
            .set_write_timeout(Some(RAW_ANSWER))
            .expect("write timeout");
        stream
    }

    /// Sends `request` as it is on a new connection (stopping early if the server closes it)
    /// and reads what comes back until the server closes the connection: the request should
    /// say `Connection: close`.
    pub fn raw(&self, request: &[u8]) -> RawReply {
        let mut stream = self.connect();
        for chunk in request.chunks(64 * 1024) {
            if stream.write_all(chunk).is_err() {
                // Closed by the server, which may well have answered already.
                break;
            }
        }
        RawReply::read_from(
            &mut stream,
            &String::from_utf8_lossy(&request[..request.len().min(200)]),
        )
    }
}

/// An HTTP client for one server: a new connection per request (each test checks its own
/// subject, and what a kept-alive connection meets after a refused request is the subject of
/// one test of its own: `serve::a_refused_request_whose_body_comes_late_…`); over HTTPS, one
/// that trusts `ca` only (not the system's roots), when given.
pub fn agent(ca: Option<&Ca>) -> ureq::Agent {
    super::certs::agent(ca, REQUEST)
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(proc) = self.proc.take() {
            let _ = kill(proc.pid(), Signal::SIGTERM);
            // Killed (SIGKILL) if it outlives the limit.
            proc.finish(STOPPING);
        }
    }
}

/// A resource name as one path segment: every byte but ASCII letters and digits
/// percent-encoded.
pub fn segment(name: &str) -> String {
    utf8_percent_encode(name, NON_ALPHANUMERIC).to_string()
}

/// `/locks/{name}` + `tail` (`""`, `/renew`, `/break`, `?owner=…`).
pub fn lock_path(name: &str, tail: &str) -> String {
    format!("/locks/{}{tail}", segment(name))
}

/// Whether a Content-Type header names `media_type` (parameters such as `charset` aside).
fn is_media_type(content_type: Option<&str>, media_type: &str) -> bool {
    content_type.is_some_and(|value| {
        value
            .split(';')
            .next()
            .is_some_and(|name| name.trim().eq_ignore_ascii_case(media_type))
    })
}

/// A body that must be one JSON object (a final newline allowed).
fn json_object(body: &[u8], what: &str) -> Value {
    let text = std::str::from_utf8(body).unwrap_or_else(|e| panic!("{what}: body not UTF-8: {e}"));
    let value: Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{what}: body is not JSON ({e}): {text:?}"));
    assert!(value.is_object(), "{what}: body must be an object: {text}");
    value
}

/// Checks a problem document (RFC 9457) answered with `status`: `application/problem+json`,
/// with `type`, `title` and `detail` strings and `status` the HTTP status. Returns it.
fn check_problem(status: u16, content_type: Option<&str>, body: &[u8], what: &str) -> Value {
    assert!(
        is_media_type(content_type, "application/problem+json"),
        "{what}: a {status} is a problem document (application/problem+json), got \
         Content-Type {content_type:?}: {}",
        String::from_utf8_lossy(body)
    );
    let problem = json_object(body, what);
    for member in ["type", "title", "detail"] {
        assert!(
            problem[member]
                .as_str()
                .is_some_and(|s| !s.trim().is_empty()),
            "{what}: a problem document has a `{member}` string: {problem}"
        );
    }
    assert_eq!(
        problem["status"],
        Value::from(status),
        "{what}: the problem document's `status` is the HTTP status: {problem}"
    );
    problem
}

/// What the server answered to a well-formed request.
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    what: String,
}

impl Reply {
    fn read(sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>, what: String) -> Reply {
        let mut response = sent.unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .body_mut()
            .read_to_vec()
            .unwrap_or_else(|e| panic!("{what}: reading the body: {e}"));
        Reply {
            status: response.status().as_u16(),
            content_type,
            body,
            what,
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The request and its answer, for a failed assertion.
    pub fn describe(&self) -> String {
        format!(
            "{} → {} ({:?}) {}",
            self.what,
            self.status,
            self.content_type,
            self.text()
        )
    }

    fn assert_status(&self, status: u16) {
        assert_eq!(self.status, status, "{}", self.describe());
    }

    /// The body, which must be one JSON object (`application/json`), of an answer `status`.
    pub fn json(&self, status: u16) -> Value {
        self.assert_status(status);
        assert!(
            is_media_type(self.content_type.as_deref(), "application/json"),
            "{}: JSON answers are application/json",
            self.describe()
        );
        json_object(&self.body, &self.what)
    }

    /// The body's text without the one final newline it may have: a JSON answer as bytes.
    pub fn line(&self, status: u16) -> String {
        self.json(status);
        let text = self.text();
        text.strip_suffix('\n').unwrap_or(&text).to_owned()
    }

    /// The problem document of an answer `status` (see [`check_problem`]).
    pub fn problem(&self, status: u16) -> Value {
        self.assert_status(status);
        check_problem(
            status,
            self.content_type.as_deref(),
            &self.body,
            &self.describe(),
        )
    }

    /// A problem document answered with `status` that carries every member of `object` (what
    /// the CLI prints for the same outcome) with the same value. Returns it.
    pub fn problem_carrying(&self, status: u16, object: &Value) -> Value {
        let problem = self.problem(status);
        for (key, value) in object.as_object().expect("an object") {
            assert_eq!(
                &problem[key],
                value,
                "{}: the problem document carries `{key}` as the CLI prints it in {object}",
                self.describe()
            );
        }
        problem
    }

    /// A 204: no body.
    pub fn no_content(&self) {
        self.assert_status(204);
        assert!(
            self.body.is_empty(),
            "{}: a 204 has no body",
            self.describe()
        );
    }

    /// An `application/x-ndjson` answer (200): one JSON object per line.
    pub fn ndjson(&self) -> Vec<Value> {
        self.assert_status(200);
        assert!(
            is_media_type(self.content_type.as_deref(), "application/x-ndjson"),
            "{}: the log is application/x-ndjson",
            self.describe()
        );
        let text = self.text();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{}: every line ends with a newline",
            self.describe()
        );
        text.lines()
            .map(|line| json_object(line.as_bytes(), &self.what))
            .collect()
    }
}

/// What came back on a raw connection: the status line's code, the headers, and the body (as
/// sent: a chunked body is not decoded).
pub struct RawReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    what: String,
}

impl RawReply {
    /// Reads an answer from `stream` until the server closes it (or a reset), within
    /// [`RAW_ANSWER`].
    fn read_from(stream: &mut TcpStream, what: &str) -> RawReply {
        let start = Instant::now();
        let mut got = Vec::new();
        let mut buf = [0_u8; 16 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!(
                        "{what}: the server neither answered nor closed the connection within \
                         {RAW_ANSWER:?}; got {:?}",
                        String::from_utf8_lossy(&got)
                    )
                }
                // A reset after the answer (the server closed with our bytes unread).
                Err(_) => break,
            }
            assert!(
                start.elapsed() < RAW_ANSWER,
                "{what}: an answer that never ends"
            );
        }
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            panic!(
                "{what}: no HTTP answer before the connection closed; got {:?}",
                String::from_utf8_lossy(&got)
            );
        };
        let head = String::from_utf8_lossy(&got[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("{what}: not a status line: {status_line:?}"));
        let headers = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        RawReply {
            status,
            headers,
            body: got[end + 4..].to_vec(),
            what: what.to_owned(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body with chunked transfer coding undone (as sent otherwise).
    fn decoded_body(&self) -> Vec<u8> {
        let chunked = self
            .header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
        if !chunked {
            return self.body.clone();
        }
        let mut body = Vec::new();
        let mut rest = &self.body[..];
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = std::str::from_utf8(&rest[..eol])
                .ok()
                .and_then(|line| usize::from_str_radix(line.split(';').next()?.trim(), 16).ok())
                .unwrap_or(0);
            rest = &rest[eol + 2..];
            if size == 0 || size > rest.len() {
                break;
            }
            body.extend_from_slice(&rest[..size]);
            rest = rest.get(size + 2..).unwrap_or_default();
        }
        body
    }

    /// The problem document of an answer `status` (see [`check_problem`]).
    pub fn problem(&self, status: u16) -> Value {
        let what = format!("{} → {status}", self.what);
        assert_eq!(
            self.status,
            status,
            "{what}: answered {} {}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        check_problem(
            status,
            self.header("content-type"),
            &self.decoded_body(),
            &what,
        )
    }

    /// The problem document of an answer whose status is one of `statuses`.
    pub fn problem_of(&self, statuses: &[u16]) -> Value {
        assert!(
            statuses.contains(&self.status),
            "{}: expected one of {statuses:?}, answered {} {}",
            self.what,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        self.problem(self.status)
    }
}
