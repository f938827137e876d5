//! A job that must never run beside the next holder of its lock, and the check that it did not,
//! for the tests where a holder is killed, stopped or signalled and cannot be trusted to leave
//! a critical section tidily (`common::critical` needs its holders to leave it).
//!
//! The job ([`Ticking::command`]) appends the time to its log every 0.05 s, on one clock for
//! every process (`/proc/uptime`, hundredths of a second since boot), until the test says it is
//! done; it notes the signals it is sent and goes on, so it stops only when SIGKILLed or told
//! to. The next holder ([`Ticking::next_holder`], a `distlock run --wait` on the store itself)
//! writes the time it got in. Afterwards [`Ticking::assert_gone_before_the_next`] compares the
//! two: no tick at or after the next holder's start.

use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::process::{BIN, Proc, wait_until};
use crate::{Scratch, read_or_empty};

/// `sh ticking LOG`: the job. It ignores SIGTERM, as a job busy with something it will not cut
/// short does (and notes it, with USR1, ALRM and HUP, in `LOG.signals`). It gives up by itself
/// after about 40 s, so that a job nothing stopped cannot outlive its test by much.
const TICKING: &str = r#"log=$1
echo $$ >"$log.pid"
for signal in TERM USR1 ALRM HUP; do trap "echo $signal >>'$log.signals'" "$signal"; done
i=0
while [ ! -e "$log.done" ] && [ $i -lt 800 ]; do
  read -r up _ </proc/uptime
  echo "$up" >>"$log"
  sleep 0.05
  i=$((i + 1))
done
"#;

/// The ticking jobs of one test. Dropped, it ends every one of them still running (each is told
/// it is done, then SIGKILLed), so that a failing test leaves none behind.
pub(crate) struct Ticking {
    logs: Vec<PathBuf>,
    script: PathBuf,
}

impl Ticking {
    pub(crate) fn new(s: &Scratch) -> Ticking {
        let script = s.path("ticking");
        std::fs::write(&script, TICKING).expect("write the ticking job");
        Ticking {
            logs: Vec::new(),
            script,
        }
    }

    /// The job's log `NAME.ticks` in the scratch folder, and the job: `sh ticking LOG`.
    pub(crate) fn command(&mut self, s: &Scratch, name: &str) -> (PathBuf, Vec<String>) {
        let log = s.path(&format!("{name}.ticks"));
        self.logs.push(log.clone());
        let words = [&self.script, &log].map(|p| p.to_str().expect("utf-8 path").to_owned());
        (
            log,
            vec!["sh".to_owned(), words[0].clone(), words[1].clone()],
        )
    }

    /// An executable script `FILE` that execs the job logging to `NAME.ticks`, for the recipes
    /// that run a script of a fixed name (`./deploy.sh`, `./switch-traffic.sh`).
    pub(crate) fn script(&mut self, s: &Scratch, file: &str, name: &str) -> (PathBuf, PathBuf) {
        let (log, job) = self.command(s, name);
        let words: Vec<String> = job.iter().map(|word| format!("'{word}'")).collect();
        let script = s.script(file, &format!("exec {}\n", words.join(" ")));
        (log, script)
    }

    /// Waits until the job logging to `log` ticks.
    pub(crate) fn wait_running(log: &Path, what: &str) {
        wait_until(
            std::time::Duration::from_secs(60),
            &format!("{what}: its job runs"),
            || !read_or_empty(log).is_empty(),
        );
    }

    /// The signals the job logging to `log` has noted, by name (`TERM`, `USR1`, …).
    pub(crate) fn signals(log: &Path) -> Vec<String> {
        read_or_empty(&suffixed(log, ".signals"))
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Tells the job logging to `log` that it is done: it exits within 0.05 s.
    pub(crate) fn done(log: &Path) {
        std::fs::write(suffixed(log, ".done"), "").expect("tell the job it is done");
    }

    /// The next holder of `resource`: `distlock run --wait 60s` on the store itself (never
    /// through a server), whose command writes the time it got in to `LOG.next`.
    pub(crate) fn next_holder(s: &Scratch, resource: &str, log: &Path) -> Proc {
        let mut cmd = s.cmd(BIN);
        s.own_store_env(&mut cmd)
            .args(["run", "--resource", resource, "--wait", "60s", "--"])
            .args([
                "sh",
                "-c",
                r#"read -r up _ </proc/uptime; echo "$up" >"$0""#,
            ])
            .arg(suffixed(log, ".next"));
        s.spawn(&mut cmd)
    }

    /// Whether the next holder behind the job logging to `log` got in.
    pub(crate) fn next_is_in(log: &Path) -> bool {
        !read_or_empty(&suffixed(log, ".next")).is_empty()
    }

    /// Fails unless the job logging to `log` ticked, the next holder got in, and every tick came
    /// before it did: the two never ran at once. `what` names the holder.
    pub(crate) fn assert_gone_before_the_next(log: &Path, what: &str) {
        let ticks = hundredths(&read_or_empty(log));
        let next = hundredths(&read_or_empty(&suffixed(log, ".next")));
        assert!(!ticks.is_empty(), "{what}: its job never ran");
        assert_eq!(
            next.len(),
            1,
            "{what}: the next holder got in once: {next:?}"
        );
        let last = ticks.iter().max().copied().unwrap_or(0);
        assert!(
            last < next[0],
            "{what}: its job still ran when the next holder got in (its last tick {} \
             hundredths of a second after that, 0: in the same hundredth)",
            last - next[0]
        );
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        for log in &self.logs {
            let _ = std::fs::write(suffixed(log, ".done"), "");
            let pid = read_or_empty(&suffixed(log, ".pid")).trim().parse::<i32>();
            if let Ok(pid) = pid {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// `path` with `suffix` added to its name.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The times of `text`, one `/proc/uptime` reading (`1234.56`) a line, in hundredths.
fn hundredths(text: &str) -> Vec<u64> {
    text.lines()
        .map(|line| {
            line.replace('.', "")
                .parse()
                .unwrap_or_else(|_| panic!("a time: {line:?}"))
        })
        .collect()
}
