//! A load generator for `distlock serve`, and for etcd's lock API through its HTTP/JSON gateway
//! with the same loop, so that the two compare side by side (`scripts/bench-serve` runs it;
//! BENCHMARKS.md, and each run whole in the book's benchmark history, "The lock server").
//!
//! ```text
//! cargo bench --bench serve_load -- pairs   --distlock http://127.0.0.1:7878 --clients 64
//! cargo bench --bench serve_load -- pairs   --etcd http://127.0.0.1:2379 --clients 1,4,16,64,256
//! cargo bench --bench serve_load -- handoff --distlock URL --rounds 200
//! cargo bench --bench serve_load -- idle    --distlock URL --connections 1000 --pid PID
//! cargo bench --bench serve_load -- reads   --distlock URL --clients 1
//! cargo bench --bench serve_load -- flood   --distlock URL --waiters 10000 --resources 100 --pid PID
//! cargo bench --bench serve_load -- cli     --cli target/release/distlock --db URL --clients 64
//! cargo bench --bench serve_load -- fsync   --dir /var/tmp [--append]
//! ```
//!
//! Each run prints one JSON line on stdout (times in milliseconds); `pairs` and `reads` print
//! one per number of clients. Every request to distlock is a route and a typed body of
//! `distlock::protocol`, and every answer is read as the crate's own answer type: the generator
//! has no copy of the API. All clients are tasks on one small tokio runtime (`--threads`, one
//! thread unless told), each with its own keep-alive connection made with hyper's HTTP/1
//! client: the generator's cost per request is a few system calls and a small JSON, and it
//! reports it (`client_cpu_ms_per_op` and `client_cpu_cores`, the CPU time of the whole
//! process over the measured time).
//!
//! Tasks on one thread rather than a blocking thread per client, by measurement on this
//! project's 2-core machine beside the server (the benchmark history, "The load generator"):
//! a thread per client cost the generator about 0.25 ms of CPU per pair, and more than a core
//! once 64 or 256 clients drove reads, so that it, not the server, set the rate; a task costs
//! 0.02–0.07 ms per pair. A second runtime thread only adds cost on two cores.
//!
//! `--pid PID` (the server's) and `--disk DEVICE` (as `/proc/diskstats` names it) add, over the
//! measured time: the server's CPU time per operation, the machine's busy share, and the disk's
//! writes and cache flushes per operation.

mod client;
mod distlock;
mod etcd;
mod flood;
mod fsync;
mod handoff;
mod http;
mod idle;
mod measure;
mod pairs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};

use crate::client::Target;
use crate::flood::{Callers, Flood};
use crate::http::Endpoint;
use crate::measure::Watched;
use crate::pairs::Timing;

#[derive(Parser)]
#[command(
    name = "serve_load",
    about = "Load on a distlock server, and on etcd's lock API with the same loop"
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    /// Threads of the generator's runtime (1: every client on one thread)
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
    /// The server's process id: its CPU time (and memory) over the measured time
    #[arg(long, global = true)]
    pid: Option<u32>,
    /// The stores' disk as /proc/diskstats names it: its writes and cache flushes
    #[arg(long, global = true, value_name = "DEVICE")]
    disk: Option<String>,
    /// A label for each JSON line ("{n}" stands for the number of clients)
    #[arg(long, global = true)]
    label: Option<String>,
}

#[derive(Subcommand)]
enum Mode {
    /// N clients, each on its own resource with its own keep-alive connection, each
    /// iteration one acquire and one release (etcd: lock and unlock on a lease granted once)
    Pairs(Load),
    /// As pairs, each iteration two reads of the resource's state: the round trips of a pair
    /// without the store's writes
    Reads(Load),
    /// The holder's release → the long-polling waiter's grant, over many rounds
    Handoff(Handoff),
    /// K keep-alive connections that each made one request, held open: the server's memory
    Idle(Idle),
    /// One caller parks N long-polls on R held resources; another caller reads meanwhile
    Flood(FloodArgs),
    /// N command lines at once, each running `acquire` and `release` as processes
    Cli(CliArgs),
    /// No server: one writer's durable commits of a file, the floor of a commit
    Fsync(Fsync),
}

/// What is driven.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct TargetArgs {
    /// A distlock server's base URL (http://host:port)
    #[arg(long, value_name = "URL")]
    distlock: Option<String>,
    /// etcd's base URL (its JSON gateway, /v3/)
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
}

impl TargetArgs {
    fn target(&self) -> Result<Target, String> {
        match (&self.distlock, &self.etcd) {
            (Some(url), _) => Endpoint::parse(url).map(Target::Distlock),
            (None, Some(url)) => Endpoint::parse(url).map(Target::Etcd),
            (None, None) => Err("give --distlock URL or --etcd URL".to_owned()),
        }
    }
}

#[derive(Args)]
struct Names {
    /// The start of every resource's and owner's name [default: bench-PID]
    #[arg(long)]
    prefix: Option<String>,
    /// The lease of every acquire, in seconds
    #[arg(long, default_value_t = 300)]
    ttl: u64,
}

impl Names {
    fn get(&self) -> (String, u64) {
        let prefix =
            (self.prefix.clone()).unwrap_or_else(|| format!("bench-{}", std::process::id()));
        (prefix, self.ttl)
    }
}

#[derive(Args)]
struct TimingArgs {
    /// The measured time, in seconds
    #[arg(long, default_value = "10", value_parser = seconds)]
    duration: Duration,
    /// The time before it, not counted, in seconds
    #[arg(long, default_value = "1", value_parser = seconds)]
    warmup: Duration,
}

impl TimingArgs {
    fn get(&self) -> Timing {
        Timing {
            warmup: self.warmup,
            duration: self.duration,
        }
    }
}

#[derive(Args)]
struct Load {
    #[command(flatten)]
    target: TargetArgs,
    /// How many clients at once; a list (1,4,16,64,256) runs each in turn, one line each
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = clap::value_parser!(u32).range(1..))]
    clients: Vec<u32>,
    #[command(flatten)]
    names: Names,
    #[command(flatten)]
    timing: TimingArgs,
}

#[derive(Args)]
struct Handoff {
    #[command(flatten)]
    target: TargetArgs,
    /// How many handoffs are measured
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// How long the holder waits, once the waiter shows in the queue, before it lets go (ms;
    /// longer than the 100 ms tick on which etcd wakes a new waiter's watch)
    #[arg(long, default_value_t = 200)]
    settle_ms: u64,
    #[command(flatten)]
    names: Names,
}

#[derive(Args)]
struct Idle {
    #[command(flatten)]
    target: TargetArgs,
    /// How many connections are held
    #[arg(long, default_value_t = 1000)]
    connections: usize,
    /// How long they are held after the reading, in seconds
    #[arg(long, default_value = "0", value_parser = seconds)]
    hold: Duration,
}

#[derive(Args)]
struct FloodArgs {
    /// The distlock server's base URL (http://host:port)
    #[arg(long, value_name = "URL")]
    distlock: String,
    /// How many long-polls are parked
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    waiters: u32,
    /// On how many held resources
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    resources: u32,
    /// Each long-poll's wait_seconds: how long it stays parked
    #[arg(long, default_value_t = 25)]
    wait_seconds: u64,
    /// How long the other caller reads, in seconds (the long-polls must outlast it)
    #[arg(long, default_value = "10", value_parser = seconds)]
    duration: Duration,
    /// How often it reads, in milliseconds
    #[arg(long, default_value_t = 10)]
    interval_ms: u64,
    /// A file holding the flooding caller's token (its secret, one line)
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// A file holding the other caller's token
    #[arg(long, value_name = "FILE")]
    probe_token_file: Option<PathBuf>,
    /// A distlock binary: it runs `run --ttl` on another resource, as the other caller, while
    /// the flood is parked
    #[arg(long, value_name = "DISTLOCK")]
    cli: Option<String>,
    /// That run's TTL, in seconds
    #[arg(long, default_value_t = 6)]
    run_ttl: u64,
    /// How long that run's command lasts, in seconds
    #[arg(long, default_value_t = 10)]
    run_seconds: u64,
    #[command(flatten)]
    names: Names,
}

#[derive(Args)]
struct CliArgs {
    /// The distlock binary
    #[arg(long, value_name = "DISTLOCK")]
    cli: String,
    /// The store it is given (--db)
    #[arg(long, value_name = "PATH|URL")]
    db: String,
    /// How many command lines at once
    #[arg(long, default_value_t = 1)]
    clients: usize,
    #[command(flatten)]
    names: Names,
    #[command(flatten)]
    timing: TimingArgs,
}

#[derive(Args)]
struct Fsync {
    /// A folder on the stores' disk
    #[arg(long)]
    dir: PathBuf,
    /// Grow the file instead of overwriting the same bytes
    #[arg(long)]
    append: bool,
    #[command(flatten)]
    timing: TimingArgs,
}

/// A number of seconds (`2.5`).
fn seconds(value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("not a number of seconds: {value}"))
}

/// A token's secret, read from `path` (never shown).
fn secret(path: &PathBuf) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_owned())
        .map_err(|err| format!("{}: {err}", path.display()))
}

/// The open-files limit raised to its hard limit: thousands of connections need it.
fn raise_open_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench` to every bench target.
    let args = std::env::args().filter(|arg| arg != "--bench");
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let Some(mode) = &cli.mode else {
        // `cargo bench` of the whole project runs every bench target without a mode.
        eprintln!("serve_load: nothing to do without a mode (serve_load --help)");
        return ExitCode::SUCCESS;
    };
    raise_open_files();
    let runtime = if cli.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads)
            .enable_all()
            .build()
    };
    let outcome = runtime
        .map_err(|err| format!("the runtime: {err}"))
        .and_then(|runtime| runtime.block_on(run(&cli, mode)));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("serve_load: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `report` as one JSON line, with the label and the runtime's threads.
fn emit(cli: &Cli, mut report: Value) {
    if let Some(label) = &cli.label {
        let clients = report["clients"].to_string();
        report["label"] = json!(label.replace("{n}", &clients));
    }
    report["generator_threads"] = json!(cli.threads.max(1));
    println!("{report}");
}

async fn run(cli: &Cli, mode: &Mode) -> Result<(), String> {
    let watched = Watched {
        pid: cli.pid,
        disk: cli.disk.clone(),
    };
    let report = match mode {
        Mode::Pairs(load) | Mode::Reads(load) => {
            let (prefix, ttl) = load.names.get();
            let clients: Vec<usize> = load.clients.iter().map(|&n| n as usize).collect();
            let reads = matches!(mode, Mode::Reads(_));
            let target = load.target.target()?;
            let timing = load.timing.get();
            return pairs::pairs(
                &target,
                &clients,
                reads,
                (&prefix, ttl),
                timing,
                &watched,
                |r| {
                    emit(cli, r);
                },
            )
            .await;
        }
        Mode::Handoff(handoff) => {
            let (prefix, ttl) = handoff.names.get();
            let settle = Duration::from_millis(handoff.settle_ms);
            let target = handoff.target.target()?;
            handoff::handoff(&target, (&prefix, ttl), handoff.rounds, settle, &watched).await?
        }
        Mode::Idle(idle) => {
            let target = idle.target.target()?;
            idle::idle(&target, idle.connections, cli.pid, idle.hold).await?
        }
        Mode::Flood(args) => flood(args, cli.pid).await?,
        Mode::Cli(args) => {
            let (prefix, ttl) = args.names.get();
            let timing = args.timing.get();
            pairs::cli(
                &args.cli,
                &args.db,
                args.clients,
                (&prefix, ttl),
                timing,
                &watched,
            )
            .await?
        }
        Mode::Fsync(args) => fsync::fsync(&args.dir, args.append, args.timing.get(), &watched)?,
    };
    emit(cli, report);
    Ok(())
}

async fn flood(args: &FloodArgs, pid: Option<u32>) -> Result<Value, String> {
    let (prefix, ttl) = args.names.get();
    if args.wait_seconds <= args.duration.as_secs() {
        return Err("--wait-seconds must outlast --duration: the reads run while they wait".into());
    }
    let server = Endpoint::parse(&args.distlock)?;
    let (flood_secret, probe_secret) = match (&args.token_file, &args.probe_token_file) {
        (Some(flood), Some(probe)) => (Some(secret(flood)?), Some(secret(probe)?)),
        (None, None) => (None, None),
        _ => return Err("--token-file and --probe-token-file go together".into()),
    };
    let with = |secret: &Option<String>| match secret {
        Some(secret) => server.clone().with_token(secret),
        None => Ok(server.clone()),
    };
    let callers = Callers {
        flood: with(&flood_secret)?,
        probe: with(&probe_secret)?,
        probe_secret,
    };
    let flood = Flood {
        prefix,
        ttl,
        waiters: args.waiters as usize,
        resources: args.resources as usize,
        wait_seconds: args.wait_seconds,
        duration: args.duration,
        interval: Duration::from_millis(args.interval_ms),
        pid,
        run: (args.cli.clone()).map(|bin| (bin, args.run_ttl, args.run_seconds)),
    };
    flood::flood(&flood, &callers).await
}
