//! `flood`: one caller (one token) holds R resources and parks N long-polling acquires on
//! them, each on a connection of its own, waiting `wait_seconds`. Meanwhile another caller
//! (another token) reads a resource of its own over and over, and may run `distlock run` on a
//! third; the server's memory and threads are sampled from `/proc`. Reported: the other
//! caller's read latency, the run's exit, the server's peak RSS and threads, and every parked
//! request's answer by status (200, 429, 503, …), none missing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use distlock::protocol::Route;
use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::distlock::{Acquired, Distlock, read_acquire};
use crate::http::{Connection, Endpoint};
use crate::measure::{Facts, mib, ms, percentiles};

/// How many of the flood's connections are being opened at once.
const OPENING: usize = 256;

/// How long the parked requests may take to be sent, all of them.
const PARKING: Duration = Duration::from_secs(60);

/// How long a probe's read may take before it counts as timed out (at this time).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a parked request may go unanswered beyond its wait before it counts as missing.
const ANSWER_GRACE: Duration = Duration::from_secs(60);

/// What the flood is.
pub struct Flood {
    pub prefix: String,
    pub ttl: u64,
    pub waiters: usize,
    pub resources: usize,
    pub wait_seconds: u64,
    /// How long the other caller reads, and how often.
    pub duration: Duration,
    pub interval: Duration,
    /// The server's process, sampled.
    pub pid: Option<u32>,
    /// `distlock run --ttl` on another resource meanwhile: the binary, its TTL and the
    /// command's length, in seconds.
    pub run: Option<(String, u64, u64)>,
}

/// The flood's caller, and the other caller (the probe): each the server with its token.
pub struct Callers {
    pub flood: Endpoint,
    pub probe: Endpoint,
    /// The probe's token's secret, for `distlock run` (`DISTLOCK_TOKEN`).
    pub probe_secret: Option<String>,
}

/// What came of one parked request, and when.
struct Parked {
    outcome: Outcome,
    at: Instant,
}

/// A parked request's end: a whole answer, or why there was none.
enum Outcome {
    /// Its status, and for a 200 whether it granted.
    Answered(u16, bool),
    /// No connection was made (the server did not accept it in time, or refused it).
    NotConnected(String),
    /// Connected and sent, but no whole answer came (closed, cut, or too late).
    Unanswered(String),
}

/// How many of the flood's connections were tried (made or not), and made.
#[derive(Default)]
struct Parking {
    tried: AtomicUsize,
    made: AtomicUsize,
}

/// One parked request: connect, send the waiting acquire, read its whole answer.
async fn park(
    endpoint: Endpoint,
    (resource, owner, ttl, wait): (String, String, u64, u64),
    opening: Arc<Semaphore>,
    parking: Arc<Parking>,
) -> Parked {
    let opened = {
        let _turn = opening.acquire().await;
        Distlock::open(&endpoint, &resource, &owner, ttl).await
    };
    parking.tried.fetch_add(1, Ordering::Relaxed);
    let outcome = match opened {
        Err(err) => Outcome::NotConnected(err),
        Ok(mut client) => {
            parking.made.fetch_add(1, Ordering::Relaxed);
            let bound = Duration::from_secs(wait) + ANSWER_GRACE;
            match tokio::time::timeout(bound, client.send_acquire(Some(wait))).await {
                Err(_) => Outcome::Unanswered(format!("no answer within {bound:?}")),
                Ok(Err(err)) => Outcome::Unanswered(err),
                Ok(Ok(answer)) if answer.status == 200 => match read_acquire(&answer) {
                    Ok(acquired) => Outcome::Answered(200, matches!(acquired, Acquired::Granted)),
                    Err(err) => Outcome::Unanswered(err),
                },
                Ok(Ok(answer)) => Outcome::Answered(answer.status, false),
            }
        }
    };
    Parked {
        outcome,
        at: Instant::now(),
    }
}

/// What the other caller's reads came to: each one's time, those that failed, the first
/// failure.
#[derive(Default)]
struct Reads {
    samples: Vec<Duration>,
    failed: usize,
    first_error: Option<String>,
}

/// The other caller's reads: one every `interval` until `until`, on a connection made again
/// after a failure. A read that fails, or takes more than [`PROBE_TIMEOUT`] (connecting
/// included), counts with the time it took.
async fn probe(endpoint: &Endpoint, resource: &str, until: Instant, interval: Duration) -> Reads {
    let mut reads = Reads::default();
    let mut client = None;
    while Instant::now() < until {
        let started = Instant::now();
        let read = tokio::time::timeout(PROBE_TIMEOUT, async {
            if client.is_none() {
                client = Some(Distlock::open(endpoint, resource, "flood-probe", 60).await?);
            }
            match &mut client {
                Some(open) => open.waiting().await,
                None => Err("no connection".to_owned()),
            }
        })
        .await;
        reads.samples.push(started.elapsed());
        let failure = match read {
            Ok(Ok(_)) => None,
            Ok(Err(err)) => Some(err),
            Err(_) => Some(format!("no answer within {PROBE_TIMEOUT:?}")),
        };
        if let Some(err) = failure {
            reads.failed += 1;
            reads.first_error.get_or_insert(err);
            client = None;
        }
        tokio::time::sleep(interval.saturating_sub(started.elapsed())).await;
    }
    reads
}

/// The server's largest RSS (KiB) and thread count, sampled every 100 ms until `until`.
async fn sample_server(pid: u32, until: Instant) -> (u64, u64) {
    let (mut rss, mut threads) = (0, 0);
    while Instant::now() < until {
        if let Ok(facts) = Facts::of(pid) {
            rss = rss.max(facts.rss_kib);
            threads = threads.max(facts.threads);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (rss, threads)
}

/// How `distlock run` beside the flood ended.
struct Ran {
    /// Its exit code (-1: killed by a signal).
    code: i32,
    took: Duration,
    /// The last line it wrote on stderr, if any.
    said: Option<String>,
}

/// `distlock run --ttl TTLs --resource R -- sleep SECONDS` through the server.
async fn run_beside(
    (bin, ttl, seconds): &(String, u64, u64),
    url: &str,
    resource: &str,
    secret: Option<&str>,
) -> Result<Ran, String> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(bin);
    command
        .args(["--db", url, "run", "--resource", resource, "--ttl"])
        .arg(format!("{ttl}s"))
        .args(["--", "sleep", &seconds.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if let Some(secret) = secret {
        command.env("DISTLOCK_TOKEN", secret);
    }
    let output = command
        .output()
        .await
        .map_err(|err| format!("{bin}: {err}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    Ok(Ran {
        code: output.status.code().unwrap_or(-1),
        took: started.elapsed(),
        said: stderr.lines().last().map(str::to_owned),
    })
}

/// The server's count of waiting requests (`distlock_waiting_requests` in `GET /metrics`), if
/// it tells within [`PROBE_TIMEOUT`].
async fn waiting_requests(endpoint: &Endpoint) -> Option<u64> {
    let asked = async {
        let mut connection = Connection::open(endpoint).await?;
        connection
            .send(Method::GET, &Route::Metrics.path(), None)
            .await
    };
    let answer = tokio::time::timeout(PROBE_TIMEOUT, asked)
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix("distlock_waiting_requests "))
        .and_then(|value| value.trim().parse().ok())
}

/// # Errors
///
/// The resources could not be held, or the other caller could not connect.
pub async fn flood(flood: &Flood, callers: &Callers) -> Result<Value, String> {
    let prefix = &flood.prefix;
    let mut holders = Vec::with_capacity(flood.resources);
    for j in 0..flood.resources {
        let resource = format!("{prefix}-held-{j}");
        let mut holder = Distlock::open(
            &callers.flood,
            &resource,
            &format!("{prefix}-holder"),
            flood.ttl,
        )
        .await?;
        match holder.acquire(None).await? {
            Acquired::Granted => holders.push(holder),
            Acquired::Busy => return Err(format!("{resource} is held by someone else")),
        }
    }
    let started = Instant::now();
    let (opening, parking) = (
        Arc::new(Semaphore::new(OPENING)),
        Arc::new(Parking::default()),
    );
    let tasks: Vec<JoinHandle<Parked>> = (0..flood.waiters)
        .map(|i| {
            let request = (
                format!("{prefix}-held-{}", i % flood.resources),
                format!("{prefix}-waiter-{i}"),
                flood.ttl,
                flood.wait_seconds,
            );
            let endpoint = callers.flood.clone();
            tokio::spawn(park(endpoint, request, opening.clone(), parking.clone()))
        })
        .collect();
    while parking.tried.load(Ordering::Relaxed) < flood.waiters && started.elapsed() < PARKING {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let parked = (parking.made.load(Ordering::Relaxed), started.elapsed());
    // A moment for the last ones to reach the server and wait there.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let server_waiting = waiting_requests(&callers.probe).await;
    let report = measure_beside(flood, callers, tasks, parked, server_waiting).await?;
    // The held resources let go, within a bound: a server that stopped answering is not
    // waited for.
    let released = async {
        for holder in &mut holders {
            let _ = holder.release().await;
        }
    };
    let _ = tokio::time::timeout(PROBE_TIMEOUT, released).await;
    Ok(report)
}

/// The other caller's reads, the run beside them and the server's samples, while the flood
/// is parked; then every parked request's answer.
async fn measure_beside(
    flood: &Flood,
    callers: &Callers,
    tasks: Vec<JoinHandle<Parked>>,
    (connected, parking): (usize, Duration),
    server_waiting: Option<u64>,
) -> Result<Value, String> {
    let probe_from = Instant::now();
    let until = probe_from + flood.duration;
    let sampler = flood.pid.map(|pid| tokio::spawn(sample_server(pid, until)));
    let run = flood.run.as_ref().map(|run| {
        let (run, url) = (run.clone(), callers.probe.url.clone());
        let (resource, secret) = (
            format!("{}-run", flood.prefix),
            callers.probe_secret.clone(),
        );
        tokio::spawn(async move { run_beside(&run, &url, &resource, secret.as_deref()).await })
    });
    let probe_resource = format!("{}-probe", flood.prefix);
    let mut reads = probe(&callers.probe, &probe_resource, until, flood.interval).await;
    let probe_to = Instant::now();
    let mut report = json!({
        "mode": "flood",
        "target": "distlock",
        "url": callers.flood.url,
        "waiters": flood.waiters,
        "resources": flood.resources,
        "wait_seconds": flood.wait_seconds,
        "connected": connected,
        "parking_ms": ms(parking),
        "server_waiting": server_waiting,
        "reads": reads.samples.len(),
        "read_failures": reads.failed,
    });
    if let Some(err) = reads.first_error {
        report["first_read_error"] = json!(err);
    }
    percentiles(&mut report, "read_", &mut reads.samples);
    if let Some(sampler) = sampler {
        let (rss, threads) = sampler.await.map_err(|err| err.to_string())?;
        report["server_rss_max_mib"] = json!(mib(rss));
        report["server_threads_max"] = json!(threads);
    }
    if let Some(run) = run {
        let ran = run.await.map_err(|err| err.to_string())??;
        report["run_exit"] = json!(ran.code);
        report["run_ms"] = ms(ran.took);
        if let Some(said) = ran.said {
            report["run_said"] = json!(said);
        }
    }
    count_answers(tasks, (probe_from, probe_to), &mut report).await?;
    Ok(report)
}

/// Every parked request's answer, by status (a 200 that granted counted apart), and those with
/// no whole answer (`missing`: never connected, or connected and not answered); how many came
/// before the other caller's reads began and while they ran.
async fn count_answers(
    tasks: Vec<JoinHandle<Parked>>,
    (from, to): (Instant, Instant),
    report: &mut Value,
) -> Result<(), String> {
    let mut statuses = BTreeMap::<String, usize>::new();
    // Each kind of missing answer: how many, and the first one's reason.
    let (mut not_connected, mut unanswered) = ((0, None), (0, None));
    let (mut before, mut during) = (0, 0);
    for task in tasks {
        let parked = task.await.map_err(|err| err.to_string())?;
        match parked.outcome {
            Outcome::Answered(status, granted) => {
                let key = if granted {
                    "200 granted".to_owned()
                } else {
                    status.to_string()
                };
                *statuses.entry(key).or_default() += 1;
            }
            Outcome::NotConnected(err) => {
                not_connected.0 += 1;
                not_connected.1.get_or_insert(err);
            }
            Outcome::Unanswered(err) => {
                unanswered.0 += 1;
                unanswered.1.get_or_insert(err);
            }
        }
        if parked.at < from {
            before += 1;
        } else if parked.at < to {
            during += 1;
        }
    }
    report["answers"] = json!(statuses);
    report["missing"] = json!(not_connected.0 + unanswered.0);
    for (key, (count, first)) in [("not_connected", not_connected), ("unanswered", unanswered)] {
        report[key] = json!(count);
        if let Some(err) = first {
            report[format!("first_{key}")] = json!(err);
        }
    }
    report["answered_before_reads"] = json!(before);
    report["answered_during_reads"] = json!(during);
    Ok(())
}
