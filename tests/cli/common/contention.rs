//! The contention harness: many real processes at once on the same locks, for races (many
//! acquirers of one resource, many processes opening one store for the first time) and for
//! loops of `run --wait` around a critical section.
//!
//! [`Contention::run`] starts `workers` threads that each run `rounds` processes one after the
//! other. The first process of every worker waits at a [`Gate`] until all have checked in, so
//! that they start at the same instant. A process that outlives its bound is killed; after the
//! first process that does not exit 0, no worker starts another round, so that a deadlock
//! costs one bound, not one per round. [`Contended`] holds how each process ended.
//!
//! What the processes do is the caller's: usually the critical section of
//! [`super::critical`], whose checks say whether two holders were ever inside at once and
//! whether fences rose in the order holders got in.
//!
//! The gate: processes wait on a FIFO, each for one byte; writing N newlines releases N of
//! them at once. The test holds the FIFO open for reading and writing, so no `open` ever
//! blocks.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::process::{Finished, Proc, wrapped};

/// Whether `end` exited in time with one of the `allowed` codes.
pub fn ended_as(end: &Finished, allowed: &[i32]) -> bool {
    !end.timed_out && end.code().is_some_and(|code| allowed.contains(&code))
}

/// Many processes at once: `workers` threads, each starting `rounds` processes one after the
/// other ([`Contention::run`]).
pub struct Contention<'a> {
    /// Where the gate is, and each process's stdout and stderr (`NAME-wW-R.stdout`, `.stderr`).
    pub dir: &'a Path,
    /// Names this contention's processes and gate apart from others in `dir`.
    pub name: &'a str,
    pub workers: usize,
    pub rounds: usize,
    /// How long each process has to finish before it is killed.
    pub bound: Duration,
}

/// How each process of a [`Contention`] ended, in the order they ended.
pub struct Contended {
    pub ends: Vec<End>,
}

/// How one process of a [`Contention`] ended.
pub struct End {
    pub worker: usize,
    /// `NAME-wWORKER-ROUND`: its stdout and stderr are `NAME-wWORKER-ROUND.stdout`, `.stderr`.
    pub name: String,
    pub finished: Finished,
}

impl Contention<'_> {
    /// Runs the contention: `start(worker, round)` makes each command. Every worker's first
    /// process waits at the gate until all have checked in; once one process has not exited
    /// 0, no new round starts.
    pub fn run(&self, start: impl Fn(usize, usize) -> Command + Sync) -> Contended {
        let gate = Gate::new(self.dir, &format!("{}-gate", self.name));
        let ends = Mutex::new(Vec::new());
        let failed = AtomicBool::new(false);
        thread::scope(|scope| {
            for worker in 0..self.workers {
                let (gate, ends, failed, start) = (&gate, &ends, &failed, &start);
                scope.spawn(move || {
                    for round in 0..self.rounds {
                        if round > 0 && failed.load(Ordering::SeqCst) {
                            break;
                        }
                        let name = format!("{}-w{worker}-{round}", self.name);
                        let mut cmd = start(worker, round);
                        if round == 0 {
                            cmd = gate.hold(&cmd);
                        }
                        let finished = Proc::spawn(&mut cmd, self.dir, &name).finish(self.bound);
                        if finished.code() != Some(0) {
                            failed.store(true, Ordering::SeqCst);
                        }
                        ends.lock().expect("the ends").push(End {
                            worker,
                            name,
                            finished,
                        });
                    }
                });
            }
            gate.open(self.workers);
        });
        Contended {
            ends: ends.into_inner().expect("the ends"),
        }
    }
}

impl Contended {
    /// What is wrong when any process did not exit in time with one of the `allowed` codes:
    /// how many, counted by how they ended, and the first few shown whole. `None` when none.
    pub fn problem(&self, what: &str, allowed: &[i32]) -> Option<String> {
        let failed: Vec<&End> = self
            .ends
            .iter()
            .filter(|end| !ended_as(&end.finished, allowed))
            .collect();
        if failed.is_empty() {
            return None;
        }
        let mut how: Vec<(String, usize)> = Vec::new();
        for end in &failed {
            let ended = if end.finished.timed_out {
                "still running at its limit".to_owned()
            } else {
                end.finished.output.status.to_string()
            };
            match how.iter_mut().find(|(seen, _)| *seen == ended) {
                Some((_, n)) => *n += 1,
                None => how.push((ended, 1)),
            }
        }
        let how: Vec<String> = how
            .iter()
            .map(|(ended, n)| format!("{n} × {ended}"))
            .collect();
        let mut problem = format!(
            "{} of {} {what} must exit with one of {allowed:?}; they ended: {}",
            failed.len(),
            self.ends.len(),
            how.join(", ")
        );
        for end in failed.iter().take(3) {
            problem.push_str(&format!("\n- {}: {}", end.name, end.finished.describe()));
        }
        Some(problem)
    }

    /// Fails the test unless every process exited 0 in time.
    pub fn assert_all_exited_0(&self, what: &str) {
        if let Some(problem) = self.problem(what, &[0]) {
            panic!("{problem}");
        }
    }
}

struct Gate {
    fifo: PathBuf,
    ready: PathBuf,
    writer: File,
}

impl Gate {
    /// A gate named `name` in `dir` (a FIFO, and a folder where waiting processes check in).
    fn new(dir: &Path, name: &str) -> Gate {
        let fifo = dir.join(name);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let writer = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .expect("open the FIFO");
        let ready = dir.join(format!("{name}.ready"));
        fs::create_dir(&ready).expect("ready folder");
        Gate {
            fifo,
            ready,
            writer,
        }
    }

    /// `cmd`, held at the gate: a shell checks in, waits for the gate to open, then execs
    /// `cmd`'s program (the same process).
    fn hold(&self, cmd: &Command) -> Command {
        let script = r#": > "$1/$$"; read go < "$0"; shift; exec "$@""#;
        let wrapper = [
            OsStr::new("sh"),
            OsStr::new("-c"),
            OsStr::new(script),
            self.fifo.as_os_str(),
            self.ready.as_os_str(),
        ];
        wrapped(&wrapper, cmd)
    }

    /// Waits until `n` processes sit at the gate (at most a few seconds), then lets them all go.
    fn open(&self, n: usize) {
        let start = Instant::now();
        while fs::read_dir(&self.ready).map_or(0, Iterator::count) < n
            && start.elapsed() < Duration::from_secs(10)
        {
            thread::sleep(Duration::from_millis(10));
        }
        // Let the last ones reach `read`.
        thread::sleep(Duration::from_millis(50));
        (&self.writer)
            .write_all(&vec![b'\n'; n])
            .expect("open the gate");
    }
}
