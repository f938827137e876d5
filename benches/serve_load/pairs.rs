//! The modes that drive N clients at once, each in a loop of its own on its own resource:
//! `pairs` (an acquire and a release per iteration), `reads` (two reads of the resource's
//! state: the same round trips without the store's writes) and `cli` (an `acquire` and a
//! `release` of the command line, as processes). Every client is a task of the generator's
//! runtime; [`drive`] runs them for a warm-up not counted and then the measured time, and
//! reports the rate, the percentiles and where the CPU went.

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::Command;
use tokio::sync::{Barrier, watch};

use crate::client::{Client, Target};
use crate::measure::{Sample, Watched, float, percentiles, round};

/// How long a run warms up (not counted) and then measures.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub warmup: Duration,
    pub duration: Duration,
}

/// One client's loop: what an iteration does.
pub enum Worker {
    /// An acquire and a release of its own resource.
    Pair(Client),
    /// Two reads of its own resource's state.
    Reads(Client),
    /// `distlock acquire` and `distlock release` as processes.
    Cli(CliWorker),
}

/// A client of the command line: the binary, its `--db`, and one owner's resource.
pub struct CliWorker {
    pub bin: String,
    pub db: String,
    pub resource: String,
    pub owner: String,
    pub ttl: String,
}

impl Worker {
    /// One iteration: the times of its two halves.
    async fn iteration(&mut self) -> Result<(Duration, Duration), String> {
        let started = Instant::now();
        let middle = match self {
            Worker::Pair(client) => {
                let held = client.acquire(None).await?;
                let acquired = Instant::now();
                client.release(held).await?;
                acquired
            }
            Worker::Reads(client) => {
                client.waiting().await?;
                let first = Instant::now();
                client.waiting().await?;
                first
            }
            Worker::Cli(cli) => {
                let ttl = cli.ttl.clone();
                cli.run(&[
                    "acquire",
                    &cli.resource,
                    "--owner",
                    &cli.owner,
                    "--ttl",
                    &ttl,
                ])
                .await?;
                let acquired = Instant::now();
                cli.run(&["release", &cli.resource, "--owner", &cli.owner])
                    .await?;
                acquired
            }
        };
        Ok((middle - started, middle.elapsed()))
    }
}

impl CliWorker {
    async fn run(&self, args: &[&str]) -> Result<(), String> {
        let status = Command::new(&self.bin)
            .arg("--db")
            .arg(&self.db)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .await
            .map_err(|err| format!("{}: {err}", self.bin))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{} {args:?}: {status}", self.bin))
        }
    }
}

/// What one client measured.
#[derive(Default)]
struct Measured {
    pairs: Vec<Duration>,
    firsts: Vec<Duration>,
    seconds: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
    /// From the start of the measured time to the end of its last counted iteration.
    counted: Duration,
}

impl Measured {
    fn failed(&mut self, err: String) {
        self.errors += 1;
        self.first_error.get_or_insert(err);
    }

    fn join(&mut self, mut other: Measured) {
        self.pairs.append(&mut other.pairs);
        self.firsts.append(&mut other.firsts);
        self.seconds.append(&mut other.seconds);
        self.errors += other.errors;
        if let Some(err) = other.first_error {
            self.first_error.get_or_insert(err);
        }
        self.counted = self.counted.max(other.counted);
    }
}

/// The loop of one client after its setup: iterations until the end of the measured time,
/// those that began within it counted.
async fn client_loop(mut worker: Worker, counted_from: Instant, until: Instant) -> Measured {
    let mut measured = Measured::default();
    let mut counted_until = counted_from;
    loop {
        let before = Instant::now();
        if before >= until {
            break;
        }
        match worker.iteration().await {
            Ok((first, second)) => {
                if before >= counted_from {
                    measured.firsts.push(first);
                    measured.seconds.push(second);
                    measured.pairs.push(before.elapsed());
                    counted_until = Instant::now();
                }
            }
            Err(err) => {
                measured.failed(err);
                // A server that refuses at once is not asked again in a tight loop.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    measured.counted = counted_until.saturating_duration_since(counted_from);
    measured
}

/// Runs `clients` clients, each made by `setup(i)`, together: all are set up first, then all
/// start at once, run `timing.warmup` not counted, then `timing.duration` measured; the
/// counters of `watched` are sampled over the measured time.
///
/// # Errors
///
/// No iteration was measured (the first failure is named).
pub async fn drive<F>(
    clients: usize,
    timing: Timing,
    watched: &Watched,
    setup: impl Fn(usize) -> F,
) -> Result<Value, String>
where
    F: Future<Output = Result<Worker, String>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(clients + 1));
    let (go, started) = watch::channel(None::<Instant>);
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (made, barrier, mut started) = (setup(i), barrier.clone(), started.clone());
            tokio::spawn(async move {
                let made = made.await;
                barrier.wait().await;
                let start = match started.wait_for(Option::is_some).await {
                    Ok(start) => start.unwrap_or_else(Instant::now),
                    Err(_) => Instant::now(),
                };
                match made {
                    Ok(worker) => {
                        let counted_from = start + timing.warmup;
                        client_loop(worker, counted_from, counted_from + timing.duration).await
                    }
                    Err(err) => {
                        let mut measured = Measured::default();
                        measured.failed(err);
                        measured
                    }
                }
            })
        })
        .collect();
    barrier.wait().await;
    let _ = go.send(Some(Instant::now()));
    tokio::time::sleep(timing.warmup).await;
    let first = Sample::take(watched);
    tokio::time::sleep(timing.duration).await;
    let last = Sample::take(watched);
    let mut all = Measured::default();
    for task in tasks {
        all.join(
            task.await
                .map_err(|err| format!("a client's task: {err}"))?,
        );
    }
    let count = all.pairs.len();
    let seconds = all.counted.as_secs_f64();
    let mut report = json!({
        "clients": clients,
        "seconds": round(seconds, 3),
        "pairs": count,
        "pairs_per_s": if seconds > 0.0 { round(float(count as u64) / seconds, 0) } else { 0.0 },
        "errors": all.errors,
    });
    if let Some(err) = &all.first_error {
        report["first_error"] = json!(err);
    }
    first.report(&last, watched, timing.duration, count, &mut report);
    percentiles(&mut report, "", &mut all.pairs);
    percentiles(&mut report, "acquire_", &mut all.firsts);
    percentiles(&mut report, "release_", &mut all.seconds);
    if count == 0 {
        return Err(format!("no iteration was measured: {report}"));
    }
    Ok(report)
}

/// How a client of `pairs` or `reads` is named: its resource and its owner.
fn names(prefix: &str, i: usize) -> (String, String) {
    (format!("{prefix}-{i}"), format!("{prefix}-owner-{i}"))
}

/// `pairs` or `reads` (`reads` true) at each count of `clients`: one report per count.
///
/// # Errors
///
/// A count at which no iteration was measured.
pub async fn pairs(
    target: &Target,
    clients: &[usize],
    reads: bool,
    (prefix, ttl): (&str, u64),
    timing: Timing,
    watched: &Watched,
    mut emit: impl FnMut(Value),
) -> Result<(), String> {
    for &count in clients {
        let mut report = drive(count, timing, watched, |i| {
            let (target, (resource, owner)) = (target.clone(), names(prefix, i));
            async move {
                let client = Client::open(&target, &resource, &owner, ttl).await?;
                Ok(if reads {
                    Worker::Reads(client)
                } else {
                    Worker::Pair(client)
                })
            }
        })
        .await?;
        report["mode"] = json!(if reads { "reads" } else { "pairs" });
        report["target"] = json!(target.name());
        report["url"] = json!(target.endpoint().url);
        emit(report);
    }
    Ok(())
}

/// `cli`: `clients` command lines at once on the store `db`.
///
/// # Errors
///
/// No iteration was measured.
pub async fn cli(
    bin: &str,
    db: &str,
    clients: usize,
    (prefix, ttl): (&str, u64),
    timing: Timing,
    watched: &Watched,
) -> Result<Value, String> {
    let mut report = drive(clients, timing, watched, |i| {
        let (resource, owner) = names(prefix, i);
        let worker = CliWorker {
            bin: bin.to_owned(),
            db: db.to_owned(),
            resource,
            owner,
            ttl: ttl.to_string(),
        };
        async move { Ok(Worker::Cli(worker)) }
    })
    .await?;
    report["mode"] = json!("cli");
    report["target"] = json!("distlock-cli");
    // The store, without a PostgreSQL URL's user and password.
    report["db"] = json!(db.split('@').next_back().unwrap_or_default());
    Ok(report)
}
