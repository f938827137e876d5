//! What a run reports besides its own timings, read from `/proc`: the CPU time of the server
//! (`--pid`) and of the generator itself, the machine's busy share, the disk's writes and cache
//! flushes (`--disk`), and a process's memory, threads and descriptors; and the percentiles of
//! a run's samples.

use std::time::Duration;

use serde_json::{Value, json};

/// Durations in milliseconds, as a JSON number rounded to the microsecond.
pub fn ms(duration: Duration) -> Value {
    json!((duration.as_secs_f64() * 1e6).round() / 1e3)
}

/// `n` as a float, for rates and shares (counts here stay far below 2^52).
#[allow(clippy::cast_precision_loss)]
pub fn float(n: u64) -> f64 {
    n as f64
}

/// `x` rounded to `places` decimals.
pub fn round(x: f64, places: i32) -> f64 {
    (x * 10_f64.powi(places)).round() / 10_f64.powi(places)
}

/// The p50, p90, p99 and max of `samples` (nearest rank), under `name_` keys.
pub fn percentiles(report: &mut Value, name: &str, samples: &mut [Duration]) {
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

/// Whose counters a run samples: the server's process and the disk, when given.
#[derive(Clone, Debug, Default)]
pub struct Watched {
    pub pid: Option<u32>,
    pub disk: Option<String>,
}

/// What the machine, the server and the disk had done by one moment: the counters whose
/// differences over the measured time say where the time went.
#[derive(Clone, Copy, Default)]
pub struct Sample {
    /// All CPUs' time, and the idle part of it, in clock ticks (`/proc/stat`).
    machine_ticks: u64,
    idle_ticks: u64,
    /// The server's user and system time, in clock ticks (`/proc/PID/stat`).
    server_ticks: u64,
    /// The generator's own CPU time, all its threads, to the microsecond (`getrusage`): a
    /// handful of ticks would not tell its cost over a short run.
    generator_cpu: Duration,
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

/// This process's user and system time so far, all its threads.
fn own_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let Ok(usage) = getrusage(UsageWho::RUSAGE_SELF) else {
        return Duration::ZERO;
    };
    [usage.user_time(), usage.system_time()]
        .iter()
        .map(|time| {
            let micros = time.tv_sec() * 1_000_000 + time.tv_usec();
            Duration::from_micros(u64::try_from(micros).unwrap_or(0))
        })
        .sum()
}

impl Sample {
    pub fn take(watched: &Watched) -> Sample {
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
        if let Some(pid) = watched.pid {
            sample.server_ticks = process_ticks(&format!("/proc/{pid}/stat"));
        }
        sample.generator_cpu = own_cpu();
        if let Some(disk) = &watched.disk {
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
    /// `report`: each side's CPU in cores and in ms per operation, the machine's busy share,
    /// the disk's writes and flushes.
    pub fn report(
        &self,
        later: &Sample,
        watched: &Watched,
        wall: Duration,
        per: usize,
        report: &mut Value,
    ) {
        let per = float(u64::try_from(per).unwrap_or(u64::MAX)).max(1.0);
        let wall = wall.as_secs_f64().max(1e-9);
        let machine = later.machine_ticks.saturating_sub(self.machine_ticks);
        if machine > 0 {
            let idle = later.idle_ticks.saturating_sub(self.idle_ticks);
            report["machine_busy"] = json!(round(1.0 - float(idle) / float(machine), 3));
        }
        let ticks_ms = |ticks: u64| float(ticks) / TICKS_PER_SECOND * 1e3;
        let generator = (later.generator_cpu.saturating_sub(self.generator_cpu)).as_secs_f64();
        report["client_cpu_cores"] = json!(round(generator / wall, 2));
        report["client_cpu_ms_per_op"] = json!(round(generator * 1e3 / per, 4));
        if watched.pid.is_some() {
            let server = later.server_ticks.saturating_sub(self.server_ticks);
            report["server_cpu_cores"] = json!(round(ticks_ms(server) / 1e3 / wall, 2));
            report["server_cpu_ms_per_op"] = json!(round(ticks_ms(server) / per, 4));
        }
        if watched.disk.is_some() {
            let flushes = later.flushes.saturating_sub(self.flushes);
            let writes = later.writes.saturating_sub(self.writes);
            report["disk_flushes_per_op"] = json!(round(float(flushes) / per, 3));
            report["disk_writes_per_op"] = json!(round(float(writes) / per, 3));
            report["disk_flushes_per_s"] = json!(round(float(flushes) / wall, 0));
            if flushes > 0 {
                let ms = later.flush_ms.saturating_sub(self.flush_ms);
                report["disk_flush_ms_mean"] = json!(round(float(ms) / float(flushes), 3));
            }
        }
    }
}

/// What `/proc/PID/status` and `/proc/PID/fd` say of a process at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts {
    /// Resident memory, and its peak so far (`VmRSS`, `VmHWM`), in KiB.
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    pub threads: u64,
    pub fds: usize,
}

impl Facts {
    /// # Errors
    ///
    /// The process is gone, or its status lacks a field.
    pub fn of(pid: u32) -> Result<Facts, String> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|err| format!("/proc/{pid}/status: {err}"))?;
        let field = |name: &str| -> Result<u64, String> {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse().ok())
                .ok_or_else(|| format!("/proc/{pid}/status has no {name}"))
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map_err(|err| format!("/proc/{pid}/fd: {err}"))?
            .count();
        Ok(Facts {
            rss_kib: field("VmRSS")?,
            peak_rss_kib: field("VmHWM")?,
            threads: field("Threads")?,
            fds,
        })
    }
}

/// A size in KiB as MiB, to the hundredth.
pub fn mib(kib: u64) -> f64 {
    round(float(kib) / 1024.0, 2)
}
