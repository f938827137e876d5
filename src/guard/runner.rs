//! The runner of `run`: the process, thread, signal and terminal I/O that the
//! [`Supervisor`] decides on.
//!
//! It owns:
//! - the set-up before the command starts: the subreaper and the signal handlers. Both happen
//!   *before* the command is spawned, so a failure there (an [`Error::System`]) leaves no
//!   command running, and the caller can release the lock;
//! - one event loop on this thread. It sleeps in `poll(2)` on a self-pipe that three things
//!   write to: the handlers of every signal `run` forwards (see [`super::signals`]), the
//!   handler of SIGCHLD (the command, or something it started, ended or stopped), and the
//!   heartbeat thread, after each report it queues. A wake-up turns into [`Event`]s for the
//!   supervisor, fed with the current instant; the poll's timeout is the supervisor's
//!   deadline ([`Event::Timer`]) or the first renewal, and once the command has exited, a
//!   probe every few milliseconds whether what it started is gone ([`Event::Emptied`]);
//! - the heartbeat thread, the only other thread: a renewal may block on the store, which
//!   must never delay the loop (see [`super::heartbeat`]). It is started when the first
//!   renewal is due, a third of the TTL after the command started ([`Pulse`]): most commands
//!   under `run` are done long before, and a process that never starts a thread is spared
//!   creating it, its stack and its memory arena, and the cost of being multi-threaded. If
//!   the system refuses the thread, that is reported and handled as a failed renewal: it is
//!   tried again, and the command is stopped before the lease could end;
//! - performing the actions: signals through [`Tree`], messages through [`warn`], job control
//!   through [`Terminal`] and [`process::stop_self`];
//! - the terminal, handed to the command's process group while it runs and taken back when
//!   `run` suspends itself and in `Drop`, on every path.
//!
//! The command runs in a process group of its own, so forwarded signals reach everything in
//! it, as a terminal signals a foreground job. Its status is collected with a non-blocking
//! `waitpid` on its own pid whenever SIGCHLD arrives (stops included, for job control); the
//! orphans `run` adopts are reaped at each wake-up too, by their own pids, so none piles up as
//! a zombie and the command's status is never taken by another wait (see [`tree`]).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::lock::{Lock, Ttl};
use crate::output::warn;
use crate::store::Location;

use super::heartbeat::Heartbeat;
use super::process;
use super::signals::Wakeups;
use super::spawn::spawn;
use super::supervisor::{Action, Event, SignalNumber, Stop, Supervisor};
use super::terminal::Terminal;
use super::tree::{self, Tree};

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
    let lock = job.lock;
    let env = [
        ("DISTLOCK_RESOURCE", OsString::from(lock.resource.as_str())),
        ("DISTLOCK_OWNER", OsString::from(lock.owner.as_str())),
        ("DISTLOCK_FENCE", OsString::from(lock.fence.to_string())),
        ("DISTLOCK_DB", job.location.to_env_value()),
    ];
    let child = match spawn(job.command, &env) {
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
    let command = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    // Its status is collected with `waitpid` below; the handle is not needed (dropping a
    // `Child` neither waits nor kills).
    drop(child);
    let tree = Tree::new(command);
    let mut terminal = Terminal::new(command);
    if terminal.hand_over() {
        // The command may have touched the terminal before it was its own and been stopped.
        tree.signal_group(Signal::SIGCONT as SignalNumber);
    }
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
    let mut guard = Guard {
        supervisor: &mut supervisor,
        tree: &tree,
        terminal: &mut terminal,
    };
    let exit = guard.watch(command, &mut wakeups, &mut pulse, &inbox);
    Ok(Supervised {
        exit,
        started: true,
        stopped: supervisor.stopped(),
    })
}

/// What the event loop acts through.
struct Guard<'a> {
    supervisor: &'a mut Supervisor,
    tree: &'a Tree,
    terminal: &'a mut Terminal,
}

impl Guard<'_> {
    /// The event loop: turns wake-ups into events, feeds them to the supervisor and performs
    /// its actions until it says to exit.
    fn watch(
        &mut self,
        command: Pid,
        wakeups: &mut Wakeups,
        pulse: &mut Pulse<'_>,
        inbox: &Receiver<Event>,
    ) -> Exit {
        // The command's status is known: what is left is probed.
        let mut exited = false;
        loop {
            let now = Instant::now();
            let mut wake = self.supervisor.deadline();
            if exited {
                wake = Some(wake.map_or(now + PROBE, |at| at.min(now + PROBE)));
            }
            let sleep = [wake, pulse.due()].into_iter().flatten().min();
            wakeups.sleep(sleep.map(|at| at.saturating_duration_since(now)));
            let mut events: VecDeque<Event> =
                wakeups.signals().into_iter().map(Event::Signal).collect();
            events.extend(pulse.start_if_due(Instant::now()));
            events.extend(inbox.try_iter());
            if !exited {
                events.extend(news_of(command));
                tree::reap_orphans_but(command);
            }
            if wake.is_some_and(|at| Instant::now() >= at) {
                events.push_back(if exited && !self.tree.anything_left() {
                    Event::Emptied
                } else {
                    Event::Timer
                });
            }
            while let Some(event) = events.pop_front() {
                exited |= matches!(event, Event::Exited(_));
                let actions = self.supervisor.step(event, Instant::now());
                if let Some(exit) = self.perform(actions, &mut events) {
                    if exited {
                        tree::reap_orphans();
                    }
                    return exit;
                }
            }
        }
    }

    /// Performs `actions` in order; the exit, once one says to. Events that performing them
    /// causes (`run` continued after suspending itself) are queued to `events`.
    fn perform(&mut self, actions: Vec<Action>, events: &mut VecDeque<Event>) -> Option<Exit> {
        for action in actions {
            match action {
                Action::SignalGroup(signal) => self.tree.signal_group(signal),
                Action::SignalAll(signal) => self.tree.signal_all(signal),
                Action::Warn(message) => warn(format_args!("{message}")),
                Action::Suspend(signal) => {
                    self.terminal.take_back();
                    process::stop_self(signal);
                    events.push_back(Event::Continued);
                }
                Action::Foreground => {
                    self.terminal.hand_over();
                }
                Action::Exit(exit) => return Some(exit),
            }
        }
        None
    }
}

/// What `waitpid` says of the command, without waiting (see [`Event::from_wait`]).
fn news_of(command: Pid) -> Option<Event> {
    Event::from_wait(waitpid(
        command,
        Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED),
    ))
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

#[cfg(test)]
mod tests {
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
}
