//! Load on a `distlock serve` from inside a test: HTTP clients that keep their connection alive
//! and carry a bearer token ([`Client`]), a flood of raw requests — thousands of long-polls, each
//! on a connection of its own — on an async runtime of the test's own ([`Flood`]), the server's
//! count of waiting requests ([`waiting_requests`]), and the open-files limit that thousands of
//! sockets need ([`raise_open_files`]).
//!
//! [`super::server`]'s clients open a connection per request and carry no token, as the tests of
//! one request's answer want. Load is another matter: 64 clients that each reconnect for every
//! request measure the kernel's handshakes, and a caller under a per-token bound needs its
//! token on every request. Every answer here is read whole (status line, headers, the body
//! that `Content-Length` or the chunks announce) or reported as the failure it is: a reset, a
//! connection closed early, no answer within a bound.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::server::Server;

/// The longest one request of a [`Client`] may take: a waiting request is answered within 30 s.
const CLIENT_REQUEST: Duration = Duration::from_secs(60);

/// How long a flood's connection may take to be accepted.
const CONNECT: Duration = Duration::from_secs(20);

/// How long a flood's request may go unanswered: a waiting request is answered within 30 s.
const FLOOD_ANSWER: Duration = Duration::from_secs(45);

/// A request's answer: the status, the headers (names in lower case), and the body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as one JSON value (`Value::Null` when it is not JSON, which the caller's
    /// assertion then shows).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The status and the body, for a failed assertion.
    pub fn describe(&self) -> String {
        format!("{} {}", self.status, String::from_utf8_lossy(&self.body))
    }

    /// A 200 acquire answer that granted the lock: its `lock` object.
    pub fn granted(&self) -> Option<Value> {
        let answer = self.json();
        (self.status == 200 && answer["acquired"] == true).then(|| answer["lock"].clone())
    }

    /// A 200 acquire answer that did not grant the lock (busy, or a place kept in the queue).
    pub fn busy(&self) -> bool {
        self.status == 200 && self.json()["acquired"] == false
    }

    /// A 429 for a waiting request past a bound, whole: `Retry-After` in seconds, and a problem
    /// document of type `…too-many-waiters` whose `detail` names the bound. `Err` says what is
    /// missing.
    ///
    /// # Errors
    ///
    /// The first thing the answer lacks.
    pub fn too_many_waiters(&self, bound: u64) -> Result<(), String> {
        if self.status != 429 {
            return Err(format!("not a 429: {}", self.describe()));
        }
        let retry_after = self.header("retry-after").unwrap_or_default();
        if retry_after.parse::<u64>().is_err() {
            return Err(format!(
                "a 429 carries Retry-After in seconds, got {retry_after:?}: {}",
                self.describe()
            ));
        }
        let problem = self.problem()?;
        if !problem["type"]
            .as_str()
            .is_some_and(|kind| kind.ends_with("too-many-waiters"))
        {
            return Err(format!(
                "the problem type ends in too-many-waiters: {problem}"
            ));
        }
        let detail = problem["detail"].as_str().unwrap_or_default();
        let named = detail
            .split(|c: char| !c.is_ascii_digit())
            .any(|number| number == bound.to_string());
        if !named {
            return Err(format!("the detail names the bound, {bound}: {problem}"));
        }
        Ok(())
    }

    /// The problem document of a non-2xx answer (RFC 9457: `application/problem+json` with
    /// `type`, `title`, `detail` and the answer's `status`).
    ///
    /// # Errors
    ///
    /// The first thing the answer lacks.
    pub fn problem(&self) -> Result<Value, String> {
        let media = self
            .header("content-type")
            .and_then(|value| value.split(';').next())
            .map(str::trim)
            .unwrap_or_default();
        if !media.eq_ignore_ascii_case("application/problem+json") {
            return Err(format!(
                "a {} is a problem document, got Content-Type {media:?}: {}",
                self.status,
                self.describe()
            ));
        }
        let problem = self.json();
        let strings = ["type", "title", "detail"].iter().all(|member| {
            problem[member]
                .as_str()
                .is_some_and(|s| !s.trim().is_empty())
        });
        if !strings || problem["status"] != self.status {
            return Err(format!(
                "a problem document has type, title, detail and the status {}: {problem}",
                self.status
            ));
        }
        Ok(problem)
    }
}

/// An HTTP client of one server that keeps its connection alive between requests, with a
/// bearer token or none.
pub struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(server: &Server, token: Option<&str>) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(CLIENT_REQUEST))
            .build()
            .into();
        Client {
            agent,
            base: server.url(""),
            token: token.map(str::to_owned),
        }
    }

    /// `GET PATH`.
    ///
    /// # Errors
    ///
    /// No whole answer (the server is gone, say).
    pub fn get(&self, path: &str) -> Result<Answer, String> {
        self.send("GET", path, None)
    }

    /// `POST PATH` with `body` as JSON.
    ///
    /// # Errors
    ///
    /// No whole answer.
    pub fn post(&self, path: &str, body: &Value) -> Result<Answer, String> {
        self.send("POST", path, Some(body))
    }

    /// `DELETE PATH` (the owner in the query) without a body.
    ///
    /// # Errors
    ///
    /// No whole answer.
    pub fn delete(&self, path: &str) -> Result<Answer, String> {
        self.send("DELETE", path, None)
    }

    fn send(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, String> {
        let mut request = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let sent = match body {
            Some(body) => self.agent.run(
                request
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .map_err(|e| e.to_string())?,
            ),
            None => self.agent.run(request.body(()).map_err(|e| e.to_string())?),
        };
        let mut response = sent.map_err(|e| format!("{method} {path}: {e}"))?;
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .body_mut()
            .read_to_vec()
            .map_err(|e| format!("{method} {path}: reading the body: {e}"))?;
        Ok(Answer {
            status: response.status().as_u16(),
            headers,
            body,
        })
    }
}

/// The server's `distlock_waiting_requests` in `GET /metrics` (asked by `client`).
///
/// # Errors
///
/// When the metrics are not answered or do not hold the gauge.
pub fn waiting_requests(client: &Client) -> Result<u64, String> {
    let answer = client.get("/metrics")?;
    if answer.status != 200 {
        return Err(format!("GET /metrics: {}", answer.describe()));
    }
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix("distlock_waiting_requests "))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("GET /metrics has no distlock_waiting_requests: {text}"))
}

/// `METHOD PATH` with `body` as JSON (none for `None`) and the bearer `token` (none for
/// `None`), as raw bytes. With `close`, the request asks the server to close the connection
/// after its answer; without, the connection stays open for the next request.
pub fn request_bytes(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    close: bool,
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if close {
        head.push_str("Connection: close\r\n");
    }
    let body = body.map(Value::to_string).unwrap_or_default();
    if !body.is_empty() {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    head.push_str(&body);
    head.into_bytes()
}

/// Raises this process's soft limit of open files to at least `wanted` (within the hard limit),
/// for a test that holds thousands of sockets. The server, started afterwards, inherits it.
///
/// # Panics
///
/// When the hard limit is below `wanted`: the test could not hold its sockets.
pub fn raise_open_files(wanted: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    assert!(
        hard >= wanted,
        "this test holds {wanted} sockets; the hard limit of open files is {hard}"
    );
    if soft < wanted {
        setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).expect("setrlimit");
    }
}

/// One request of a [`Flood`] and what came of it.
#[derive(Debug)]
pub struct Exchange {
    /// The request's index in the flood's list.
    pub index: usize,
    /// Whether this is the request posted again on its connection after a busy answer.
    pub again: bool,
    /// When its last byte was written (when the flood gave up on it, if it never was).
    pub sent: Instant,
    /// Its whole answer and when it was read; or why there was none.
    pub outcome: Result<(Answer, Instant), String>,
}

impl Exchange {
    /// How long the answer took, when there was one.
    pub fn took(&self) -> Option<Duration> {
        self.outcome
            .as_ref()
            .ok()
            .map(|(_, at)| at.duration_since(self.sent))
    }
}

/// Requests sent at once, each on a connection of its own, by a current-thread tokio runtime
/// in a thread of its own: thousands of long-polls cost the test one thread.
///
/// At most `in_flight` connections are open at a time. Each sends its request and reads its
/// whole answer; with `again`, a request answered 200 busy is posted again on the same
/// connection until [`Flood::finish`] (a client that keeps its place in the queue, as `--wait`
/// through a server does). The flood gives up on whatever is left when its `limit` runs out:
/// those requests are recorded as unanswered.
pub struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    thread: JoinHandle<Vec<Exchange>>,
}

impl Flood {
    pub fn start(
        addr: SocketAddr,
        requests: Vec<Vec<u8>>,
        in_flight: usize,
        again: bool,
        limit: Duration,
    ) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let shared = Shared {
            addr,
            again,
            deadline: Instant::now() + limit,
            stop: Arc::clone(&stop),
            sent: Arc::clone(&sent),
            answered: Arc::clone(&answered),
        };
        let thread = thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the flood")
                .block_on(shared.run(requests, in_flight))
        });
        Flood {
            stop,
            sent,
            answered,
            thread,
        }
    }

    /// How many of the requests have been sent whole (posts again not counted).
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }

    /// How many answers came back whole so far (posts again counted).
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    /// Stops posting again: each connection ends with the answer it is waiting for.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Stops posting again, and waits for every connection to end (each within its bounds):
    /// every exchange, in no particular order.
    pub fn finish(self) -> Vec<Exchange> {
        self.stop();
        self.thread.join().expect("the flood's thread")
    }
}

/// What every connection of a [`Flood`] shares.
#[derive(Clone)]
struct Shared {
    addr: SocketAddr,
    again: bool,
    deadline: Instant,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
}

impl Shared {
    async fn run(self, requests: Vec<Vec<u8>>, in_flight: usize) -> Vec<Exchange> {
        let places = Arc::new(Semaphore::new(in_flight));
        let mut connections = JoinSet::new();
        let mut exchanges = Vec::new();
        for (index, request) in requests.into_iter().enumerate() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let place = tokio::time::timeout(left, Arc::clone(&places).acquire_owned()).await;
            let Ok(Ok(place)) = place else {
                exchanges.push(Exchange {
                    index,
                    again: false,
                    sent: Instant::now(),
                    outcome: Err("never sent: the flood's time ran out".to_owned()),
                });
                continue;
            };
            let shared = self.clone();
            connections.spawn(async move {
                let _place = place;
                shared.connection(index, request).await
            });
        }
        while let Some(ended) = connections.join_next().await {
            exchanges.extend(ended.expect("a flood connection's task"));
        }
        exchanges
    }

    /// One connection: the request, posted again while it is answered busy (with `again`).
    async fn connection(&self, index: usize, request: Vec<u8>) -> Vec<Exchange> {
        let mut exchanges = Vec::new();
        let failed = |why: String| Exchange {
            index,
            again: false,
            sent: Instant::now(),
            outcome: Err(why),
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        let mut stream =
            match tokio::time::timeout(CONNECT.min(left), TcpStream::connect(self.addr)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return vec![failed(format!("connect: {e}"))],
                Err(_) => return vec![failed(format!("not accepted within {CONNECT:?}"))],
            };
        loop {
            let again = !exchanges.is_empty();
            if let Err(e) = stream.write_all(&request).await {
                exchanges.push(Exchange {
                    again,
                    ..failed(format!("sending: {e}"))
                });
                return exchanges;
            }
            let sent = Instant::now();
            if !again {
                self.sent.fetch_add(1, Ordering::SeqCst);
            }
            let left = self.deadline.saturating_duration_since(sent);
            let outcome = match tokio::time::timeout(
                FLOOD_ANSWER.min(left),
                read_answer(&mut stream),
            )
            .await
            {
                Ok(Ok(answer)) => {
                    self.answered.fetch_add(1, Ordering::SeqCst);
                    Ok((answer, Instant::now()))
                }
                Ok(Err(why)) => Err(why),
                Err(_) => Err(format!(
                    "no whole answer within {:?}",
                    FLOOD_ANSWER.min(left)
                )),
            };
            let post_again = self.again
                && !self.stop.load(Ordering::SeqCst)
                && matches!(&outcome, Ok((answer, _)) if answer.busy());
            exchanges.push(Exchange {
                index,
                again,
                sent,
                outcome,
            });
            if !post_again {
                return exchanges;
            }
        }
    }
}

/// Reads one whole answer from `stream`: the head, then the body its `Content-Length` or its
/// chunks announce.
async fn read_answer(stream: &mut TcpStream) -> Result<Answer, String> {
    let mut got = Vec::new();
    let mut buf = vec![0_u8; 4 * 1024];
    let end = loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading the answer after {} bytes: {e}", got.len()))?;
        if n == 0 {
            return Err(format!(
                "the connection closed before a whole head: {:?}",
                String::from_utf8_lossy(&got)
            ));
        }
        got.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not a status line: {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let mut rest = got[end + 4..].to_vec();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if let Some(length) = find("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| format!("a Content-Length that is not a number: {length:?}"))?;
        while rest.len() < length {
            let n = stream.read(&mut buf).await.map_err(|e| {
                format!(
                    "reading the body after {} of {length} bytes: {e}",
                    rest.len()
                )
            })?;
            if n == 0 {
                return Err(format!(
                    "the connection closed after {} of {length} bytes of the body",
                    rest.len()
                ));
            }
            rest.extend_from_slice(&buf[..n]);
        }
        rest.truncate(length);
        rest
    } else if find("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        read_chunks(stream, rest).await?
    } else {
        return Err(format!("an answer without a length: {head:?}"));
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// A chunked body, `got` being what was read past the head already.
async fn read_chunks(stream: &mut TcpStream, mut got: Vec<u8>) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut buf = vec![0_u8; 4 * 1024];
    loop {
        // The chunk's size line, then the chunk and its CRLF.
        let parsed = got.windows(2).position(|w| w == b"\r\n").and_then(|eol| {
            let size = std::str::from_utf8(&got[..eol])
                .ok()
                .and_then(|line| usize::from_str_radix(line.split(';').next()?.trim(), 16).ok())?;
            Some((eol, size))
        });
        if let Some((eol, size)) = parsed {
            if size == 0 {
                return Ok(body);
            }
            if got.len() >= eol + 2 + size + 2 {
                body.extend_from_slice(&got[eol + 2..eol + 2 + size]);
                got.drain(..eol + 2 + size + 2);
                continue;
            }
        }
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading a chunked body: {e}"))?;
        if n == 0 {
            return Err("the connection closed inside a chunked body".to_owned());
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// What a process holds: its threads and its resident memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    pub threads: u64,
    pub rss_kib: u64,
}

impl Footprint {
    /// The larger of each.
    pub fn max(self, other: Footprint) -> Footprint {
        Footprint {
            threads: self.threads.max(other.threads),
            rss_kib: self.rss_kib.max(other.rss_kib),
        }
    }
}

/// The pid of the `distlock … serve` process serving `store` (its `--db`): the one process
/// whose command line has both.
///
/// # Panics
///
/// When there is none, or more than one.
pub fn serving(store: &str) -> i32 {
    let found: Vec<i32> = std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|pid: &i32| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                let args: Vec<&[u8]> = line.split(|&b| b == 0).collect();
                args.contains(&b"serve".as_slice()) && args.contains(&store.as_bytes())
            })
        })
        .collect();
    assert_eq!(found.len(), 1, "one server serves {store}: {found:?}");
    found[0]
}

/// The threads and resident memory of `pid` now (`/proc/PID/status`); zeros once it is gone.
pub fn footprint(pid: i32) -> Footprint {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Footprint {
        threads: field("Threads:"),
        rss_kib: field("VmRSS:"),
    }
}
