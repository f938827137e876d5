//! The runner of `run`: the process, thread, signal and terminal I/O that the
//! [`Supervisor`] decides on.
//!
//! It owns:
//! - the set-up before the command starts: the subreaper and the signal handlers. Both happen
//!   *before* the command is spawned, so a failure there (an [`Error::System`]) leaves no
//!   command running, and the caller can release the lock;
//! - one event loop on this thread. It sleeps in `poll(2)` on a self-pipe that three things
//!   write to: the handlers of SIGINT/SIGTERM/SIGHUP/SIGQUIT (forwarded to the command), the
//!   handler of SIGCHLD (the command, or something it started, ended), and the heartbeat
//!   thread, after each report it queues. A wake-up turns into [`Event`]s for the supervisor,
//!   fed with the current instant; the poll's timeout is the supervisor's deadline
//!   ([`Event::Timer`]) or the first renewal, and once the command has exited, a probe every
//!   few milliseconds whether what it started is gone ([`Event::Emptied`]);
//! - the heartbeat thread, the only other thread: a renewal may block on the store, which
//!   must never delay the loop (see [`super::heartbeat`]). It is started when the first
//!   renewal is due, a third of the TTL after the command started ([`Pulse`]): most commands
//!   under `run` are done long before, and a process that never starts a thread is spared
//!   creating it, its stack and its memory arena, and the cost of being multi-threaded. If
//!   the system refuses the thread, that is reported and handled as a failed renewal: it is
//!   tried again, and the command is stopped before the lease could end;
//! - performing the actions: signals through [`Tree`], messages through [`warn`];
//! - the terminal, handed to the command's process group while it runs and taken back in
//!   `Drop`, on every path.
//!
//! The command runs in a process group of its own, so forwarded signals reach everything in
//! it, as a terminal signals a foreground job. Its status is collected with a non-blocking
//! `waitpid` on its own pid whenever SIGCHLD arrives, so the orphans `run` adopts are never
//! reaped before it (see [`tree`]).

use std::ffi::{OsStr, OsString};
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Child;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{AccessFlags, Pid, access};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::SignalOnly;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::lock::{Lock, Ttl};
use crate::output::warn;
use crate::store::Location;

use super::heartbeat::Heartbeat;
use super::supervisor::{Action, Ended, Event, Stop, Supervisor};
use super::tree::{self, Tree};

/// The signals `run` forwards to its command.
const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// After the command exited, how often the runner looks whether what it started is gone.
const PROBE: Duration = Duration::from_millis(20);

/// One command to run under a lock this process holds.
pub struct Job<'a> {
    pub location: &'a Location,
    pub lock: &'a Lock,
    pub ttl: Ttl,
    pub kill_after: Duration,
    /// When the lease ends at the earliest, on the monotonic clock.
    pub lease_end: Instant,
    /// The program and its arguments.
    pub command: &'a [OsString],
    /// `--max-runtime`.
    pub max_runtime: Option<Duration>,
}

/// How supervision ended.
pub struct Supervised {
    pub exit: Exit,
    /// The command was started (126 and 127 mean it never was).
    pub started: bool,
    /// Why the command was stopped, if `run` stopped it.
    pub stopped: Option<Stop>,
}

/// Starts the command and supervises it until it exits. Returns its exit (see
/// [`Supervisor`]), or what keeps it from starting (126, 127; 64 for no command at all).
/// `idle` is called once, as soon as the command runs: housekeeping that nobody then waits on.
///
/// # Errors
///
/// [`Error::System`] when the operating system refuses what guarding needs (the subreaper,
/// the signal handlers); the command was then never started.
pub fn supervise(job: &Job<'_>, idle: &mut dyn FnMut()) -> Result<Supervised> {
    tree::adopt_orphans()
        .map_err(|err| Error::system("cannot adopt what the command starts (prctl)", err))?;
    let mut wakeups = Wakeups::start()?;
    let (report, inbox) = mpsc::channel();
    let mut pulse = Pulse::new(job, report, wakeups.bell()?);
    let mut child = match spawn(job) {
        Ok(child) => child,
        Err(exit) => {
            return Ok(Supervised {
                exit,
                started: false,
                stopped: None,
            });
        }
    };
    let started = Instant::now();
    let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let tree = Tree::new(group);
    let _terminal = Terminal::hand_to(group);
    let mut supervisor = Supervisor::new(
        job.lock.resource.clone(),
        job.ttl,
        job.kill_after,
        job.lease_end,
    );
    if let Some(limit) = job.max_runtime {
        supervisor = supervisor.with_max_runtime(limit, started);
    }
    idle();
    let exit = watch(
        &mut supervisor,
        &tree,
        &mut child,
        &mut wakeups,
        &mut pulse,
        &inbox,
    );
    Ok(Supervised {
        exit,
        started: true,
        stopped: supervisor.stopped(),
    })
}

/// The event loop: turns wake-ups into events, feeds them to the supervisor and performs its
/// actions until it says to exit.
fn watch(
    supervisor: &mut Supervisor,
    tree: &Tree,
    child: &mut Child,
    wakeups: &mut Wakeups,
    pulse: &mut Pulse<'_>,
    inbox: &Receiver<Event>,
) -> Exit {
    // The command's status is known: orphans may be reaped, and what is left is probed.
    let mut exited = false;
    loop {
        let now = Instant::now();
        let mut wake = supervisor.deadline();
        if exited {
            wake = Some(wake.map_or(now + PROBE, |at| at.min(now + PROBE)));
        }
        let sleep = [wake, pulse.due()].into_iter().flatten().min();
        wakeups.sleep(sleep.map(|at| at.saturating_duration_since(now)));
        let mut events: Vec<Event> = wakeups.signals().into_iter().map(Event::Signal).collect();
        events.extend(pulse.start_if_due(Instant::now()));
        events.extend(inbox.try_iter());
        if !exited {
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => events.push(Event::Exited(Ended::from_wait(Ok(status)))),
                // Its fate is unknown, which the supervisor treats as the worst case.
                Err(err) => events.push(Event::Exited(Ended::from_wait(Err(err)))),
            }
        }
        if wake.is_some_and(|at| Instant::now() >= at) {
            events.push(if exited && !tree.anything_left() {
                Event::Emptied
            } else {
                Event::Timer
            });
        }
        for event in events {
            exited |= matches!(event, Event::Exited(_));
            let actions = supervisor.step(event, Instant::now());
            if let Some(exit) = perform(actions, tree) {
                if exited {
                    tree::reap_orphans();
                }
                return exit;
            }
        }
    }
}

/// Performs `actions` in order; the exit, once one says to.
fn perform(actions: Vec<Action>, tree: &Tree) -> Option<Exit> {
    for action in actions {
        match action {
            Action::SignalGroup(signal) => tree.signal_group(signal),
            Action::SignalAll(signal) => tree.signal_all(signal),
            Action::Warn(message) => warn(format_args!("{message}")),
            Action::Exit(exit) => return Some(exit),
        }
    }
    None
}

/// Spawns the command directly (no shell) in its own process group.
fn spawn(job: &Job<'_>) -> Result<Child, Exit> {
    let (program, args) = job.command.split_first().ok_or(Exit::Usage)?;
    let lock = job.lock;
    let found = on_path(program, std::env::var_os("PATH").as_deref());
    let spawned = std::process::Command::new(found.as_deref().unwrap_or(program.as_ref()))
        .arg0(program)
        .args(args)
        .env("DISTLOCK_RESOURCE", lock.resource.as_str())
        .env("DISTLOCK_OWNER", lock.owner.as_str())
        .env("DISTLOCK_FENCE", lock.fence.to_string())
        .env("DISTLOCK_DB", job.location.to_env_value())
        .process_group(0)
        .spawn();
    match spawned {
        Ok(child) => Ok(child),
        Err(err) => {
            let shown = program.to_string_lossy();
            warn(format_args!("cannot run {shown}: {err}"));
            Err(match err.kind() {
                std::io::ErrorKind::NotFound => Exit::CommandNotFound,
                _ => Exit::CannotExecute,
            })
        }
    }
}

/// Finds a command name without a slash in the folders of `path` (`PATH`), as `execvp(3)`
/// does: the first regular file this process may execute. Searching here rather than in the
/// child saves one failed `execve` per folder before the right one, which the lock's holder
/// otherwise waits out (the child shares its memory until it execs). `None` for a name with a
/// slash and when nothing is found: spawning then searches itself and reports the error (127
/// not found, 126 found but not executable), as before.
fn on_path(program: &OsStr, path: Option<&OsStr>) -> Option<PathBuf> {
    if program.is_empty() || program.as_bytes().contains(&b'/') {
        return None;
    }
    std::env::split_paths(path?)
        .map(|folder| {
            // An empty entry is the current folder.
            let folder = if folder.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                folder
            };
            folder.join(program)
        })
        .find(|candidate| {
            candidate.metadata().is_ok_and(|m| m.is_file())
                && access(candidate.as_path(), AccessFlags::X_OK).is_ok()
        })
}

/// What wakes the event loop: one self-pipe, written by the signal handlers and by the
/// heartbeat thread. Dropping it removes the handlers again.
struct Wakeups {
    delivery: SignalDelivery<UnixStream, SignalOnly>,
    /// The pipe's write end, for the heartbeat's copy.
    write: UnixStream,
}

impl Wakeups {
    /// Installs the handlers of the forwarded signals and of SIGCHLD.
    ///
    /// # Errors
    ///
    /// [`Error::System`] when the pipe or a handler cannot be set up.
    fn start() -> Result<Wakeups> {
        let failed = |err| Error::system("cannot set up signal handling", err);
        let (read, write) = UnixStream::pair().map_err(failed)?;
        read.set_nonblocking(true).map_err(failed)?;
        // A full pipe already wakes the loop: a writer never waits.
        write.set_nonblocking(true).map_err(failed)?;
        let mut signals = FORWARDED.to_vec();
        signals.push(SIGCHLD);
        let handlers = write.try_clone().map_err(failed)?;
        let delivery =
            SignalDelivery::with_pipe(read, handlers, SignalOnly, signals).map_err(failed)?;
        Ok(Wakeups { delivery, write })
    }

    /// A write end for the heartbeat, which writes a byte after each report.
    ///
    /// # Errors
    ///
    /// [`Error::System`] when the descriptor cannot be duplicated.
    fn bell(&self) -> Result<UnixStream> {
        self.write
            .try_clone()
            .map_err(|err| Error::system("cannot set up signal handling", err))
    }

    /// Sleeps until something was written to the pipe, a signal interrupts, or `timeout`
    /// passes (`None`: no timeout).
    fn sleep(&self, timeout: Option<Duration>) {
        let timeout = timeout.map_or(PollTimeout::NONE, |timeout| {
            // Rounded up: waking before the deadline would only loop once more.
            let millis = timeout.as_micros().div_ceil(1000);
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
        });
        let mut fds = [PollFd::new(
            self.delivery.get_read().as_fd(),
            PollFlags::POLLIN,
        )];
        // EINTR is a wake-up like any other; the caller looks at everything anyway.
        let _ = poll(&mut fds, timeout);
    }

    /// The forwarded signals that arrived since the last call (each once), emptying the pipe.
    /// SIGCHLD only wakes the loop, which then asks after the command itself.
    fn signals(&mut self) -> Vec<Signal> {
        self.delivery
            .pending()
            .filter(|&raw| raw != SIGCHLD)
            .filter_map(|raw| Signal::try_from(raw).ok())
            .collect()
    }
}

/// The heartbeat thread of a job, started once the first renewal is due (see the module's
/// doc). Dropping it stops the thread at its next wake-up. The thread is never joined: it may
/// be inside a renewal that an unresponsive store holds up, and a renewal that lands after the
/// release finds no lock of this tenure and changes nothing.
struct Pulse<'a> {
    job: &'a Job<'a>,
    /// Where the thread reports, and the bell it rings after each report.
    report: Sender<Event>,
    bell: UnixStream,
    thread: Lazily,
}

impl<'a> Pulse<'a> {
    /// The heartbeat of `job`, due a renewal interval from now.
    fn new(job: &'a Job<'a>, report: Sender<Event>, bell: UnixStream) -> Pulse<'a> {
        Pulse {
            job,
            report,
            bell,
            thread: Lazily::new(
                Instant::now() + Heartbeat::interval(job.ttl),
                Heartbeat::retry(job.ttl),
            ),
        }
    }

    /// When the thread is to be started, while it is not running.
    fn due(&self) -> Option<Instant> {
        self.thread.due()
    }

    /// Starts the thread if it is due, its first renewal at once; see [`Lazily::start_if_due`].
    fn start_if_due(&mut self, now: Instant) -> Option<Event> {
        let Pulse {
            job,
            report,
            bell,
            thread,
        } = self;
        thread.start_if_due(now, || {
            start_heartbeat(job, report.clone(), bell.try_clone()?)
        })
    }
}

/// A thread started when it is first needed, not before, and tried again after a refusal.
struct Lazily {
    /// When to start it, while it is not running.
    due: Instant,
    /// How long after a refusal to try again.
    retry: Duration,
    /// The running thread's stop signal: dropping it stops the thread.
    stop: Option<Sender<()>>,
}

impl Lazily {
    fn new(due: Instant, retry: Duration) -> Lazily {
        Lazily {
            due,
            retry,
            stop: None,
        }
    }

    fn due(&self) -> Option<Instant> {
        self.stop.is_none().then_some(self.due)
    }

    /// Calls `start` if the thread is due and not running. A refusal is reported as a failed
    /// renewal ([`Event::Trouble`]), so the supervisor stops the command before the lease
    /// could end unless a later try succeeds; the next try is `retry` later.
    fn start_if_due(
        &mut self,
        now: Instant,
        start: impl FnOnce() -> std::io::Result<Sender<()>>,
    ) -> Option<Event> {
        if self.stop.is_some() || now < self.due {
            return None;
        }
        match start() {
            Ok(stop) => {
                self.stop = Some(stop);
                None
            }
            Err(err) => {
                self.due = now + self.retry;
                Some(Event::Trouble(format!(
                    "cannot start the heartbeat thread: {err}"
                )))
            }
        }
    }
}

/// Starts the heartbeat thread, its first renewal at once; it reports into `report` and rings
/// `bell` after each report. Dropping the returned sender stops it.
fn start_heartbeat(
    job: &Job<'_>,
    report: Sender<Event>,
    bell: UnixStream,
) -> std::io::Result<Sender<()>> {
    let (stop, stopped) = mpsc::channel::<()>();
    let heartbeat = Heartbeat {
        location: job.location.clone(),
        resource: job.lock.resource.clone(),
        owner: job.lock.owner.clone(),
        ttl: job.ttl,
        fence: job.lock.fence,
    };
    std::thread::Builder::new()
        .name("distlock-heartbeat".to_owned())
        .spawn(move || {
            // Signals are the event loop's to handle, on the main thread.
            let _ = nix::sys::signal::SigSet::all().thread_block();
            heartbeat.beat(
                |event| {
                    let sent = report.send(event).is_ok();
                    let _ = (&bell).write(&[0]);
                    sent
                },
                &stopped,
            );
        })?;
    Ok(stop)
}

/// The controlling terminal, handed to the command's process group while it runs so that an
/// interactive command can read from it and gets ^C directly, as under a shell. Given back
/// when dropped.
struct Terminal {
    /// The process group to give the terminal back to, when we took it.
    ours: Option<Pid>,
}

impl Terminal {
    fn hand_to(group: Pid) -> Terminal {
        let stdin = std::io::stdin();
        let ours = nix::unistd::getpgrp();
        let in_foreground = stdin.is_terminal()
            && nix::unistd::tcgetpgrp(&stdin).is_ok_and(|foreground| foreground == ours);
        if in_foreground && nix::unistd::tcsetpgrp(&stdin, group).is_ok() {
            // The command may have touched the terminal before it was its own and been stopped.
            let _ = killpg(group, Signal::SIGCONT);
            return Terminal { ours: Some(ours) };
        }
        Terminal { ours: None }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let Some(ours) = self.ours else { return };
        // Taking the terminal back from a background group raises SIGTTOU unless it is blocked.
        let mut ttou = nix::sys::signal::SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let _ = ttou.thread_block();
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), ours);
        let _ = ttou.thread_unblock();
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_heartbeat_thread_starts_when_due_and_a_refusal_is_a_failed_renewal_retried_later() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let retry = ms(1000);
        // (now, what starting answers) → (started, reported trouble, due afterwards)
        type Start = fn() -> std::io::Result<Sender<()>>;
        let started: Start = || Ok(mpsc::channel().0);
        let refusing: Start = || Err(std::io::ErrorKind::WouldBlock.into());
        let cases: [(Duration, Start, bool, bool, Option<Instant>); 4] = [
            // Before it is due nothing is started, whatever starting would answer.
            (ms(0), started, false, false, Some(t0 + ms(500))),
            (ms(499), refusing, false, false, Some(t0 + ms(500))),
            // Due: started, and no longer due.
            (ms(500), started, true, false, None),
            // Due but refused: one failed renewal, tried again `retry` later.
            (ms(700), refusing, false, true, Some(t0 + ms(700) + retry)),
        ];
        for (at, start, want_started, want_trouble, want_due) in cases {
            let mut thread = Lazily::new(t0 + ms(500), retry);
            let mut called = false;
            let event = thread.start_if_due(t0 + at, || {
                called = true;
                start()
            });
            assert_eq!(called, at >= ms(500), "at {at:?}");
            assert_eq!(thread.stop.is_some(), want_started, "at {at:?}");
            match event {
                Some(Event::Trouble(message)) => {
                    assert!(want_trouble, "at {at:?}: {message}");
                    assert!(message.starts_with("cannot start the heartbeat thread: "));
                }
                other => assert!(!want_trouble && other.is_none(), "at {at:?}: {other:?}"),
            }
            assert_eq!(thread.due(), want_due, "at {at:?}");
        }
        // Once running, it is never started again.
        let mut thread = Lazily::new(t0, retry);
        assert!(thread.start_if_due(t0, started).is_none());
        let event = thread.start_if_due(t0 + ms(5000), || panic!("started twice"));
        assert!(event.is_none());
    }

    #[test]
    fn on_path_finds_the_first_executable_file_as_execvp_does() {
        let scratch = tempfile::tempdir().unwrap();
        let folder = |name: &str| {
            let folder = scratch.path().join(name);
            fs::create_dir(&folder).unwrap();
            folder
        };
        let tool = |folder: &PathBuf, mode: u32| {
            let file = folder.join("tool");
            fs::write(&file, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
        };
        let (plain, dir, exec, later) = (folder("a"), folder("b"), folder("c"), folder("d"));
        tool(&plain, 0o644);
        fs::create_dir(dir.join("tool")).unwrap();
        tool(&exec, 0o755);
        tool(&later, 0o700);
        let path = |folders: &[&PathBuf]| std::env::join_paths(folders).unwrap();
        let cases: [(&str, Option<OsString>, Option<&PathBuf>); 9] = [
            // Not executable, a folder: skipped, as execvp skips them.
            (
                "tool",
                Some(path(&[&plain, &dir, &exec, &later])),
                Some(&exec),
            ),
            ("tool", Some(path(&[&later, &exec])), Some(&later)),
            ("tool", Some(path(&[&plain, &dir])), None),
            ("missing", Some(path(&[&plain, &dir, &exec])), None),
            // An empty entry is the current folder, which has no `tool`.
            (
                "tool",
                Some(OsString::from(format!(":{}", exec.display()))),
                Some(&exec),
            ),
            // A name with a slash is not searched for; nor is anything without a PATH.
            ("./tool", Some(path(&[&exec])), None),
            ("c/tool", Some(path(&[&scratch.path().to_owned()])), None),
            ("", Some(path(&[&exec])), None),
            ("tool", None, None),
        ];
        for (program, path, found) in cases {
            assert_eq!(
                on_path(OsStr::new(program), path.as_deref()),
                found.map(|folder| folder.join(program)),
                "{program} on {path:?}"
            );
        }
    }
}
