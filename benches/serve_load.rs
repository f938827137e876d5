//! A load generator for `distlock serve`, and for etcd's lock API through its HTTP/JSON gateway
//! with the same loop, so that the two compare side by side (BENCHMARKS.md; each run whole in
//! the book's benchmark history, "The lock server").
//!
//! ```text
//! cargo bench --bench serve_load -- pairs   --distlock http://127.0.0.1:7878 --clients 64
//! cargo bench --bench serve_load -- pairs   --etcd http://127.0.0.1:2379 --clients 64
//! cargo bench --bench serve_load -- handoff --distlock URL --rounds 200
//! cargo bench --bench serve_load -- idle    --distlock URL --connections 1000 --pid PID
//! cargo bench --bench serve_load -- cli     --cli target/release/distlock --db URL --clients 64
//! cargo bench --bench serve_load -- reads   --distlock URL --clients 1
//! cargo bench --bench serve_load -- fsync   --dir /var/tmp [--append]
//! ```
//!
//! Each mode prints one JSON line on stdout (times in milliseconds):
//!
//! - `pairs`: N client threads, each on its own resource with its own keep-alive connection,
//!   each iteration one acquire and one release (etcd: lock and unlock, on a lease each client
//!   is granted once, as a real client is). Pairs per second over the measured time (after a
//!   warm-up not counted), and the percentiles of a pair, of its acquire and of its release.
//! - `handoff`: one holder and one waiter on one resource. The waiter long-polls (distlock:
//!   `wait_seconds`; etcd: its lock call blocks); once the server shows it waiting, the holder
//!   lets go. The time from the holder's release being sent to the waiter's grant arriving,
//!   over many rounds.
//! - `idle`: K keep-alive connections that each made one request (`GET /health`), held open;
//!   with `--pid` the server's resident memory and open descriptors are read from `/proc`
//!   before and after. (`distlock serve` closes a connection idle for 10 s: the reading is
//!   taken at once, and `--hold` should stay under that to keep them all.)
//! - `cli`: N threads, each running `distlock acquire` and `distlock release` as processes on
//!   its own resource of the store `--db` names: the command line's own rate, for comparison.
//! - `reads`: as `pairs`, but each iteration two reads of the resource's state: the same round
//!   trips without the store's writes, the floor under a pair.
//! - `fsync`: no server; one writer's durable commits of a file on the stores' disk, the floor
//!   of one durable commit.
//!
//! `--pid PID` (the server's) and `--disk DEVICE` (as `/proc/diskstats` names it) add, over the
//! measured time: the server's and this program's CPU time per operation, the machine's busy
//! share, and the disk's writes and cache flushes per operation.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Barrier;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// What is driven, and at which base URL (`http://host:port`).
#[derive(Clone, Debug)]
enum Target {
    Distlock(String),
    Etcd(String),
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Distlock(_) => "distlock",
            Target::Etcd(_) => "etcd",
        }
    }

    fn url(&self) -> &str {
        match self {
            Target::Distlock(url) | Target::Etcd(url) => url,
        }
    }
}

#[derive(Debug)]
struct Options {
    mode: String,
    target: Option<Target>,
    clients: usize,
    duration: Duration,
    warmup: Duration,
    rounds: usize,
    connections: usize,
    pid: Option<u32>,
    disk: Option<String>,
    hold: Duration,
    settle: Duration,
    prefix: String,
    ttl: u64,
    cli: Option<String>,
    db: Option<String>,
    dir: Option<String>,
    append: bool,
    label: Option<String>,
}

const USAGE: &str = "usage: serve_load pairs|reads|handoff|idle (--distlock URL | --etcd URL) \
[--clients N] [--duration S] [--warmup S] [--rounds N] [--settle-ms MS] [--connections K] \
[--pid PID] [--disk DEVICE] [--hold S] [--prefix NAME] [--ttl S] [--label TEXT]
       serve_load cli --cli DISTLOCK --db URL [--clients N] [--duration S] [--warmup S]
       serve_load fsync --dir FOLDER [--append] [--duration S] [--warmup S] [--disk DEVICE]";

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut options = Options {
        mode: String::new(),
        target: None,
        clients: 1,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(1),
        rounds: 200,
        connections: 1000,
        pid: None,
        disk: None,
        hold: Duration::ZERO,
        settle: Duration::from_millis(20),
        prefix: format!("bench-{}", std::process::id()),
        ttl: 300,
        cli: None,
        db: None,
        dir: None,
        append: false,
        label: None,
    };
    let mut args = args.peekable();
    let seconds = |value: String| -> Result<Duration, String> {
        value
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("not a number of seconds: {value}"))
    };
    let count = |value: String| -> Result<usize, String> {
        value
            .parse::<usize>()
            .map_err(|_| format!("not a count: {value}"))
    };
    let number = |value: String| -> Result<u64, String> {
        value
            .parse::<u64>()
            .map_err(|_| format!("not a number: {value}"))
    };
    while let Some(arg) = args.next() {
        // `cargo bench` passes `--bench` to every bench target.
        if arg == "--bench" {
            continue;
        }
        if arg == "--append" {
            options.append = true;
            continue;
        }
        if !arg.starts_with("--") {
            if options.mode.is_empty() {
                options.mode = arg;
                continue;
            }
            return Err(format!("unexpected argument: {arg}"));
        }
        let value = args.next().ok_or_else(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--distlock" => {
                options.target = Some(Target::Distlock(value.trim_end_matches('/').into()));
            }
            "--etcd" => options.target = Some(Target::Etcd(value.trim_end_matches('/').into())),
            "--clients" => options.clients = count(value)?.max(1),
            "--duration" => options.duration = seconds(value)?,
            "--warmup" => options.warmup = seconds(value)?,
            "--rounds" => options.rounds = count(value)?.max(1),
            "--settle-ms" => options.settle = Duration::from_millis(number(value)?),
            "--connections" => options.connections = count(value)?,
            "--pid" => {
                options.pid = Some(value.parse().map_err(|_| format!("not a pid: {value}"))?);
            }
            "--disk" => options.disk = Some(value),
            "--hold" => options.hold = seconds(value)?,
            "--prefix" => options.prefix = value,
            "--ttl" => options.ttl = number(value)?,
            "--cli" => options.cli = Some(value),
            "--db" => options.db = Some(value),
            "--dir" => options.dir = Some(value),
            "--label" => options.label = Some(value),
            _ => return Err(format!("unknown option: {arg}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("serve_load: {err}\n{USAGE}");
            return ExitCode::from(64);
        }
    };
    let report = match (options.mode.as_str(), &options.target) {
        // `cargo bench` with no arguments (as `cargo bench` of the whole project runs it).
        ("", None) => {
            eprintln!("serve_load: nothing to do without a mode\n{USAGE}");
            return ExitCode::SUCCESS;
        }
        ("pairs", Some(target)) => pairs(&options, target),
        ("handoff", Some(target)) => handoff(&options, target),
        ("idle", Some(target)) => idle(&options, target),
        ("reads", Some(target)) => reads(&options, target),
        ("cli", _) => cli(&options),
        ("fsync", _) => fsync(&options),
        _ => Err(format!("which mode, and against what?\n{USAGE}")),
    };
    match report {
        Ok(mut report) => {
            if let Some(label) = &options.label {
                report["label"] = json!(label);
            }
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("serve_load: {err}");
            ExitCode::FAILURE
        }
    }
}

/// One keep-alive connection's client (ureq pools the connection for the next request).
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .max_idle_connections(4)
        .max_idle_connections_per_host(4)
        .build()
        .into()
}

/// A client of one target: the calls one pair is made of.
enum Client {
    Distlock {
        agent: ureq::Agent,
        url: String,
        owner: String,
        ttl: u64,
    },
    Etcd {
        agent: ureq::Agent,
        url: String,
        lease: String,
    },
}

/// What a client holds between its acquire and its release.
enum Held {
    Distlock,
    /// etcd's lock key (base64, as the gateway gave it).
    Etcd(String),
}

impl Client {
    fn new(target: &Target, owner: &str, ttl: u64) -> Result<Client, String> {
        let agent = agent();
        Ok(match target {
            Target::Distlock(url) => Client::Distlock {
                agent,
                url: url.clone(),
                owner: owner.to_owned(),
                ttl,
            },
            Target::Etcd(url) => {
                let granted = post(
                    &agent,
                    &format!("{url}/v3/lease/grant"),
                    &json!({"TTL": ttl}),
                )?;
                let lease = match &granted["ID"] {
                    Value::String(id) => id.clone(),
                    Value::Number(id) => id.to_string(),
                    other => return Err(format!("etcd granted no lease: {other}")),
                };
                Client::Etcd {
                    agent,
                    url: url.clone(),
                    lease,
                }
            }
        })
    }

    /// Acquires `resource`, waiting up to `wait` (distlock; etcd's lock call always waits).
    fn acquire(&self, resource: &str, wait: u64) -> Result<Held, String> {
        match self {
            Client::Distlock {
                agent,
                url,
                owner,
                ttl,
            } => {
                let mut body = json!({"owner": owner, "ttl_seconds": ttl});
                if wait > 0 {
                    body["wait_seconds"] = json!(wait);
                }
                let answer = post(agent, &format!("{url}/locks/{resource}"), &body)?;
                if answer["acquired"] == json!(true) {
                    Ok(Held::Distlock)
                } else {
                    Err(format!("not acquired: {answer}"))
                }
            }
            Client::Etcd { agent, url, lease } => {
                let body = json!({"name": base64(resource.as_bytes()), "lease": lease});
                let answer = post(agent, &format!("{url}/v3/lock/lock"), &body)?;
                match answer["key"].as_str() {
                    Some(key) => Ok(Held::Etcd(key.to_owned())),
                    None => Err(format!("etcd gave no key: {answer}")),
                }
            }
        }
    }

    fn release(&self, resource: &str, held: Held) -> Result<(), String> {
        match (self, held) {
            (
                Client::Distlock {
                    agent, url, owner, ..
                },
                Held::Distlock,
            ) => {
                let mut answer = agent
                    .delete(format!("{url}/locks/{resource}?owner={owner}"))
                    .call()
                    .map_err(|err| format!("DELETE: {err}"))?;
                let status = answer.status().as_u16();
                let body = answer.body_mut().read_to_string().unwrap_or_default();
                if status == 204 {
                    Ok(())
                } else {
                    Err(format!("release answered {status}: {body}"))
                }
            }
            (Client::Etcd { agent, url, .. }, Held::Etcd(key)) => post(
                agent,
                &format!("{url}/v3/lock/unlock"),
                &json!({"key": key}),
            )
            .map(drop),
            _ => Err("held by another kind of client".into()),
        }
    }

    /// How many wait for `resource` (distlock: `status`'s `waiting`; etcd: the keys under the
    /// lock's prefix beyond the holder's).
    fn waiting(&self, resource: &str) -> Result<u64, String> {
        match self {
            Client::Distlock { agent, url, .. } => {
                let mut answer = agent
                    .get(format!("{url}/locks/{resource}"))
                    .call()
                    .map_err(|err| format!("GET: {err}"))?;
                let body = answer.body_mut().read_to_string().unwrap_or_default();
                let value: Value = serde_json::from_str(&body).unwrap_or_default();
                Ok(value["waiting"].as_u64().unwrap_or(0))
            }
            Client::Etcd { agent, url, .. } => {
                // The lock's keys are `name/lease`: the range [name/, name0).
                let body = json!({
                    "key": base64(format!("{resource}/").as_bytes()),
                    "range_end": base64(format!("{resource}0").as_bytes()),
                    "count_only": true,
                });
                let answer = post(agent, &format!("{url}/v3/kv/range"), &body)?;
                let count = match &answer["count"] {
                    Value::String(count) => count.parse().unwrap_or(0),
                    Value::Number(count) => count.as_u64().unwrap_or(0),
                    _ => 0,
                };
                Ok(count.saturating_sub(1))
            }
        }
    }
}

/// POSTs `body` as JSON and reads the answer's JSON.
fn post(agent: &ureq::Agent, url: &str, body: &Value) -> Result<Value, String> {
    let mut answer = agent
        .post(url)
        .header("content-type", "application/json")
        .send(body.to_string())
        .map_err(|err| format!("POST {url}: {err}"))?;
    let status = answer.status().as_u16();
    let text = answer
        .body_mut()
        .read_to_string()
        .map_err(|err| format!("POST {url}: {err}"))?;
    if status != 200 {
        return Err(format!("POST {url} answered {status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|err| format!("POST {url}: {err}: {text}"))
}

/// Standard base64 with padding, as etcd's gateway takes and gives bytes.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Durations in milliseconds, as a JSON number rounded to the microsecond.
fn ms(duration: Duration) -> Value {
    json!((duration.as_secs_f64() * 1e6).round() / 1e3)
}

/// The p50, p90, p99 and max of `samples` (nearest rank), under `name_` keys.
fn percentiles(report: &mut Value, name: &str, samples: &mut [Duration]) {
    samples.sort_unstable();
    let rank = |p: usize| -> Duration {
        if samples.is_empty() {
            return Duration::ZERO;
        }
        let index = (samples.len() * p).div_ceil(100).max(1) - 1;
        samples[index.min(samples.len() - 1)]
    };
    report[format!("{name}p50_ms")] = ms(rank(50));
    report[format!("{name}p90_ms")] = ms(rank(90));
    report[format!("{name}p99_ms")] = ms(rank(99));
    report[format!("{name}max_ms")] = ms(samples.last().copied().unwrap_or_default());
}

/// What the machine, the server (`--pid`) and the disk (`--disk`) had done by one moment: the
/// counters whose differences over the measured time say where the time went.
#[derive(Clone, Copy, Default)]
struct Sample {
    /// All CPUs' time, and the idle part of it, in clock ticks (`/proc/stat`).
    machine_ticks: u64,
    idle_ticks: u64,
    /// The server's user and system time, in clock ticks (`/proc/PID/stat`).
    server_ticks: u64,
    /// This program's own (the clients').
    client_ticks: u64,
    /// The disk's completed writes and cache flushes, and the time spent flushing (ms), from
    /// `/proc/diskstats`.
    writes: u64,
    flushes: u64,
    flush_ms: u64,
}

/// Clock ticks per second: Linux's `USER_HZ`, 100 on every architecture it reports in.
const TICKS_PER_SECOND: f64 = 100.0;

/// User and system time of a process, in clock ticks.
fn process_ticks(path: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0;
    };
    // The command name may hold spaces and parentheses: fields are counted after its last `)`.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum()
}

impl Sample {
    fn take(options: &Options) -> Sample {
        let mut sample = Sample::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
            if let Some(cpu) = stat.lines().next() {
                let ticks: Vec<u64> = cpu
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|n| n.parse().ok())
                    .collect();
                sample.machine_ticks = ticks.iter().take(8).sum();
                // idle and iowait
                sample.idle_ticks = ticks.iter().skip(3).take(2).sum();
            }
        }
        if let Some(pid) = options.pid {
            sample.server_ticks = process_ticks(&format!("/proc/{pid}/stat"));
        }
        sample.client_ticks = process_ticks("/proc/self/stat");
        if let Some(disk) = &options.disk {
            let stats = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
            if let Some(fields) = stats
                .lines()
                .map(|line| line.split_whitespace().collect::<Vec<_>>())
                .find(|fields| fields.get(2) == Some(&disk.as_str()))
            {
                let field = |i: usize| fields.get(i).and_then(|n| n.parse().ok()).unwrap_or(0);
                sample.writes = field(7);
                sample.flushes = field(18);
                sample.flush_ms = field(19);
            }
        }
        sample
    }

    /// What happened between `self` and `later`, per `per` operations of `wall` time, into
    /// `report`.
    fn report(
        &self,
        later: &Sample,
        options: &Options,
        wall: Duration,
        per: usize,
        report: &mut Value,
    ) {
        let count = |n: u64| f64::from(u32::try_from(n).unwrap_or(u32::MAX));
        let per = count(u64::try_from(per).unwrap_or(u64::MAX)).max(1.0);
        let wall = wall.as_secs_f64().max(1e-9);
        let round = |x: f64, places: i32| (x * 10_f64.powi(places)).round() / 10_f64.powi(places);
        let machine = later.machine_ticks.saturating_sub(self.machine_ticks);
        if machine > 0 {
            let idle = later.idle_ticks.saturating_sub(self.idle_ticks);
            report["machine_busy"] = json!(round(1.0 - count(idle) / count(machine), 3));
        }
        let ticks_ms = |ticks: u64| count(ticks) / TICKS_PER_SECOND * 1e3;
        let client = later.client_ticks.saturating_sub(self.client_ticks);
        report["client_cpu_cores"] = json!(round(ticks_ms(client) / 1e3 / wall, 2));
        report["client_cpu_ms_per_op"] = json!(round(ticks_ms(client) / per, 4));
        if options.pid.is_some() {
            let server = later.server_ticks.saturating_sub(self.server_ticks);
            report["server_cpu_cores"] = json!(round(ticks_ms(server) / 1e3 / wall, 2));
            report["server_cpu_ms_per_op"] = json!(round(ticks_ms(server) / per, 4));
        }
        if options.disk.is_some() {
            let flushes = later.flushes.saturating_sub(self.flushes);
            let writes = later.writes.saturating_sub(self.writes);
            report["disk_flushes_per_op"] = json!(round(count(flushes) / per, 3));
            report["disk_writes_per_op"] = json!(round(count(writes) / per, 3));
            report["disk_flushes_per_s"] = json!(round(count(flushes) / wall, 0));
            if flushes > 0 {
                let ms = later.flush_ms.saturating_sub(self.flush_ms);
                report["disk_flush_ms_mean"] = json!(round(count(ms) / count(flushes), 3));
            }
        }
    }
}

/// What one client thread of `pairs` or `cli` measured.
#[derive(Default)]
struct Measured {
    pairs: Vec<Duration>,
    acquires: Vec<Duration>,
    releases: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
}

impl Measured {
    fn failed(&mut self, err: String) {
        self.errors += 1;
        self.first_error.get_or_insert(err);
    }
}

/// Runs `clients` threads of `iteration` (which returns the times of its acquire and its
/// release) for the warm-up and then the measured time, and reports them.
fn drive<C>(
    options: &Options,
    setup: impl Fn(usize) -> Result<C, String> + Sync,
    iteration: impl Fn(&C, usize) -> Result<(Duration, Duration), String> + Sync,
) -> Result<Value, String> {
    let clients = options.clients;
    let barrier = Barrier::new(clients + 1);
    let (measured, elapsed, samples) = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..clients)
            .map(|i| {
                let (barrier, setup, iteration) = (&barrier, &setup, &iteration);
                scope.spawn(move || {
                    let mut measured = Measured::default();
                    let client = setup(i);
                    barrier.wait();
                    let client = match client {
                        Ok(client) => client,
                        Err(err) => {
                            measured.failed(err);
                            return (measured, Duration::ZERO);
                        }
                    };
                    let started = Instant::now();
                    let counted_from = started + options.warmup;
                    let until = counted_from + options.duration;
                    let mut counted_until = counted_from;
                    loop {
                        let before = Instant::now();
                        if before >= until {
                            break;
                        }
                        match iteration(&client, i) {
                            Ok((acquire, release)) => {
                                if before >= counted_from {
                                    measured.acquires.push(acquire);
                                    measured.releases.push(release);
                                    measured.pairs.push(before.elapsed());
                                    counted_until = Instant::now();
                                }
                            }
                            Err(err) => measured.failed(err),
                        }
                    }
                    (
                        measured,
                        counted_until.saturating_duration_since(counted_from),
                    )
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        std::thread::sleep(options.warmup);
        let first = Sample::take(options);
        std::thread::sleep(options.duration);
        let last = Sample::take(options);
        let mut all = Measured::default();
        let mut longest = Duration::ZERO;
        for thread in threads {
            let (mut one, elapsed) = thread.join().expect("a client thread");
            all.pairs.append(&mut one.pairs);
            all.acquires.append(&mut one.acquires);
            all.releases.append(&mut one.releases);
            all.errors += one.errors;
            if let Some(err) = one.first_error {
                all.first_error.get_or_insert(err);
            }
            longest = longest.max(elapsed);
        }
        (all, longest, (first, last, started.elapsed()))
    });
    let mut measured = measured;
    let count = measured.pairs.len();
    let seconds = elapsed.as_secs_f64();
    let mut report = json!({
        "clients": clients,
        "seconds": (seconds * 1e3).round() / 1e3,
        "pairs": count,
        "pairs_per_s": if seconds > 0.0 { (f64::from(u32::try_from(count).unwrap_or(u32::MAX)) / seconds).round() } else { 0.0 },
        "errors": measured.errors,
    });
    if let Some(err) = measured.first_error {
        report["first_error"] = json!(err);
    }
    let (first, last, _) = samples;
    first.report(&last, options, options.duration, count, &mut report);
    percentiles(&mut report, "", &mut measured.pairs);
    percentiles(&mut report, "acquire_", &mut measured.acquires);
    percentiles(&mut report, "release_", &mut measured.releases);
    if count == 0 {
        return Err(format!("no pair was measured: {report}"));
    }
    Ok(report)
}

fn pairs(options: &Options, target: &Target) -> Result<Value, String> {
    let resource = |i: usize| format!("{}-{i}", options.prefix);
    let mut report = drive(
        options,
        |i| {
            Client::new(
                target,
                &format!("{}-owner-{i}", options.prefix),
                options.ttl,
            )
        },
        |client, i| {
            let name = resource(i);
            let started = Instant::now();
            let held = client.acquire(&name, 0)?;
            let acquired = Instant::now();
            client.release(&name, held)?;
            Ok((acquired - started, acquired.elapsed()))
        },
    )?;
    report["mode"] = json!("pairs");
    report["target"] = json!(target.name());
    report["url"] = json!(target.url());
    Ok(report)
}

/// Two reads of a resource's state per iteration: as many round trips as a pair, with the
/// store's read and none of its writes (distlock: `GET /locks/{r}`; etcd: a range read of the
/// lock's keys).
fn reads(options: &Options, target: &Target) -> Result<Value, String> {
    let mut report = drive(
        options,
        |i| {
            Client::new(
                target,
                &format!("{}-owner-{i}", options.prefix),
                options.ttl,
            )
        },
        |client, i| {
            let name = format!("{}-{i}", options.prefix);
            let started = Instant::now();
            client.waiting(&name)?;
            let first = Instant::now();
            client.waiting(&name)?;
            Ok((first - started, first.elapsed()))
        },
    )?;
    report["mode"] = json!("reads");
    report["target"] = json!(target.name());
    report["url"] = json!(target.url());
    Ok(report)
}

/// The bytes one durable commit of a grant writes, about: four WAL frames of a 4 KiB page.
const COMMIT_BYTES: usize = 4 * (24 + 4096);

/// One writer's durable commits with nothing else: [`COMMIT_BYTES`] written and `fsync`ed,
/// over and over, in a file of `--dir` (on the disk the stores use). Overwriting the same
/// bytes, as a WAL restarted in place is, or with `--append` growing the file, as a WAL that
/// is never restarted does. The floor of a commit's latency, and so the most grants a store
/// that commits one grant at a time can make in a second.
fn fsync(options: &Options) -> Result<Value, String> {
    use std::os::unix::fs::FileExt;
    let dir = options.dir.as_deref().ok_or("fsync needs --dir")?;
    let path = std::path::Path::new(dir).join(format!("fsync-{}.bin", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    let block = vec![0x5a_u8; COMMIT_BYTES];
    let write = |offset: u64| -> Result<Duration, String> {
        let started = Instant::now();
        file.write_all_at(&block, offset)
            .and_then(|()| file.sync_all())
            .map_err(|err| format!("{}: {err}", path.display()))?;
        Ok(started.elapsed())
    };
    // The overwritten file is written whole and synced once first, so that its blocks exist.
    write(0)?;
    let step = COMMIT_BYTES as u64;
    let mut offset = 0;
    let started = Instant::now();
    let counted_from = started + options.warmup;
    let until = counted_from + options.duration;
    let mut samples = Vec::new();
    let mut first = None;
    while Instant::now() < until {
        if options.append {
            offset += step;
        }
        let took = write(offset)?;
        if Instant::now() >= counted_from {
            if first.is_none() {
                first = Some((Sample::take(options), Instant::now()));
            }
            samples.push(took);
        }
    }
    let last = Sample::take(options);
    drop(file);
    let _ = std::fs::remove_file(&path);
    let count = samples.len();
    let (first, from) = first.ok_or("no commit was measured")?;
    let wall = from.elapsed();
    let mut report = json!({
        "mode": "fsync",
        "append": options.append,
        "bytes": COMMIT_BYTES,
        "commits": count,
        "commits_per_s": (f64::from(u32::try_from(count).unwrap_or(u32::MAX)) / wall.as_secs_f64()).round(),
    });
    first.report(&last, options, wall, count, &mut report);
    percentiles(&mut report, "", &mut samples);
    Ok(report)
}

fn cli(options: &Options) -> Result<Value, String> {
    let (Some(bin), Some(db)) = (&options.cli, &options.db) else {
        return Err(format!("cli needs --cli and --db\n{USAGE}"));
    };
    let run = |args: &[&str]| -> Result<Duration, String> {
        let started = Instant::now();
        let status = Command::new(bin)
            .arg("--db")
            .arg(db)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .map_err(|err| format!("{bin}: {err}"))?;
        if status.success() {
            Ok(started.elapsed())
        } else {
            Err(format!("{bin} {args:?}: {status}"))
        }
    };
    let ttl = options.ttl.to_string();
    let mut report = drive(
        options,
        |i| Ok(format!("{}-owner-{i}", options.prefix)),
        |owner, i| {
            let name = format!("{}-{i}", options.prefix);
            let acquire = run(&["acquire", &name, "--owner", owner, "--ttl", &ttl])?;
            let release = run(&["release", &name, "--owner", owner])?;
            Ok((acquire, release))
        },
    )?;
    report["mode"] = json!("cli");
    report["target"] = json!("distlock-cli");
    report["db"] = json!(db.split('@').next_back().unwrap_or_default());
    Ok(report)
}

fn handoff(options: &Options, target: &Target) -> Result<Value, String> {
    let resource = format!("{}-handoff", options.prefix);
    let holder = Client::new(target, &format!("{}-holder", options.prefix), options.ttl)?;
    // The waiter's thread: told to wait, it acquires (long-polling) and says when its grant
    // arrived; then it lets go, so that the holder takes the lock again at once.
    let (go, told) = mpsc::channel::<()>();
    let (granted, grants) = mpsc::channel::<Result<Instant, String>>();
    let waiter = {
        let target = target.clone();
        let resource = resource.clone();
        let owner = format!("{}-waiter", options.prefix);
        let ttl = options.ttl;
        std::thread::spawn(move || {
            let client = match Client::new(&target, &owner, ttl) {
                Ok(client) => client,
                Err(err) => {
                    let _ = granted.send(Err(err));
                    return;
                }
            };
            // A first request, so that the waiter's connection is open before the first round.
            let _ = client.waiting(&resource);
            while told.recv().is_ok() {
                let outcome = client
                    .acquire(&resource, 60)
                    .map(|held| (Instant::now(), held));
                let sent = match outcome {
                    Ok((at, held)) => client.release(&resource, held).map(|()| at),
                    Err(err) => Err(err),
                };
                if granted.send(sent).is_err() {
                    return;
                }
            }
        })
    };
    let settle = options.settle;
    let mut samples = Vec::with_capacity(options.rounds);
    let round = || -> Result<Duration, String> {
        let held = holder.acquire(&resource, 0)?;
        go.send(()).map_err(|_| "the waiter is gone".to_owned())?;
        let asked = Instant::now();
        while holder.waiting(&resource)? == 0 {
            if asked.elapsed() > Duration::from_secs(10) {
                return Err("the waiter never showed as waiting".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Let the waiter go to sleep in the server (its wait is a blocking wait there).
        std::thread::sleep(settle);
        let sent = Instant::now();
        holder.release(&resource, held)?;
        let arrived = grants
            .recv()
            .map_err(|_| "the waiter is gone".to_owned())??;
        Ok(arrived.saturating_duration_since(sent))
    };
    // Two rounds not counted: the first connections and statements.
    for _ in 0..2 {
        round()?;
    }
    let first = Sample::take(options);
    let started = Instant::now();
    for _ in 0..options.rounds {
        samples.push(round()?);
    }
    let wall = started.elapsed();
    let last = Sample::take(options);
    drop(go);
    let _ = waiter.join();
    let mut report = json!({
        "mode": "handoff",
        "target": target.name(),
        "url": target.url(),
        "rounds": samples.len(),
        "settle_ms": ms(settle),
    });
    first.report(&last, options, wall, samples.len(), &mut report);
    percentiles(&mut report, "", &mut samples);
    Ok(report)
}

/// What `/proc` says of a process: resident memory (KiB) and open descriptors.
fn proc_facts(pid: u32) -> Result<(u64, usize), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|err| format!("/proc/{pid}/status: {err}"))?;
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .ok_or_else(|| format!("no VmRSS for {pid}"))?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|err| format!("/proc/{pid}/fd: {err}"))?
        .count();
    Ok((rss, fds))
}

/// The peak resident memory (`VmHWM`, KiB) of a process.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// One `GET /health` on a new connection, the answer read whole, the connection kept open.
fn health_connection(address: &str) -> Result<TcpStream, String> {
    let mut stream = TcpStream::connect(address).map_err(|err| format!("{address}: {err}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|err| err.to_string())?;
    stream
        .write_all(format!("GET /health HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .map_err(|err| format!("{address}: {err}"))?;
    let mut answer = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        let read = stream
            .read(&mut buffer)
            .map_err(|err| format!("{address}: {err}"))?;
        if read == 0 {
            return Err(format!("{address} closed the connection"));
        }
        answer.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&answer);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if answer.len() >= end + 4 + length {
                if !text.starts_with("HTTP/1.1 200") {
                    return Err(format!("{address}: {}", text.lines().next().unwrap_or("")));
                }
                return Ok(stream);
            }
        }
    }
}

fn idle(options: &Options, target: &Target) -> Result<Value, String> {
    let address = target
        .url()
        .strip_prefix("http://")
        .ok_or("idle needs an http:// URL")?
        .trim_end_matches('/')
        .to_owned();
    let before = options.pid.map(proc_facts).transpose()?;
    let started = Instant::now();
    let connections = (0..options.connections)
        .map(|_| health_connection(&address))
        .collect::<Result<Vec<_>, _>>()?;
    let opened = started.elapsed();
    // A moment for the server to settle what each connection left (buffers freed or kept).
    std::thread::sleep(Duration::from_millis(500));
    let after = options.pid.map(proc_facts).transpose()?;
    let mut report = json!({
        "mode": "idle",
        "target": target.name(),
        "url": target.url(),
        "connections": connections.len(),
        "open_ms": ms(opened),
    });
    if let (Some(pid), Some((rss_before, fds_before)), Some((rss_after, fds_after))) =
        (options.pid, before, after)
    {
        report["rss_before_kib"] = json!(rss_before);
        report["rss_kib"] = json!(rss_after);
        report["rss_mib"] = json!(
            (f64::from(u32::try_from(rss_after).unwrap_or(u32::MAX)) / 1024.0 * 100.0).round()
                / 100.0
        );
        report["peak_rss_kib"] = json!(peak_rss(pid));
        report["fds_before"] = json!(fds_before);
        report["fds"] = json!(fds_after);
    }
    eprintln!("serve_load: {} connections open", connections.len());
    std::thread::sleep(options.hold);
    drop(connections);
    Ok(report)
}
