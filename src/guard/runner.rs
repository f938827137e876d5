//! The runner of `run`: the process, thread, signal and terminal I/O that the
//! [`Supervisor`] decides on.
//!
//! It owns:
//! - the set-up before the command starts: the subreaper and the signal handlers. Both happen
//!   *before* the command is spawned, so a failure there (an [`Error::System`]) leaves no
//!   command running, and the caller can release the lock;
//! - one event loop on this thread. It sleeps in `poll(2)` on a self-pipe that three things
//!   write to: the handlers of every signal `run` forwards (see [`crate::signals`]), the
//!   handler of SIGCHLD (the command, or something it started, ended or stopped), and the
//!   heartbeat thread, after each report it queues. A wake-up turns into [`Event`]s for the
//!   supervisor, fed with the current instant; the poll's timeout is the supervisor's
//!   deadline ([`Event::Timer`]) or the first renewal, and once the command has exited, a
//!   probe every few milliseconds whether what it started is gone ([`Event::Emptied`]);
//! - the heartbeat thread, the only other thread: a renewal may block on the store, which
//!   must never delay the loop. It is started when the first renewal is due, a third of the
//!   TTL after the command started ([`HeartbeatThread`], in [`super::heartbeat`], which owns the
//!   thread's whole life);
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
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::output::warn;

use super::heartbeat::HeartbeatThread;
use super::job::Job;
use super::process;
use super::self_pipe::SelfPipe;
use super::spawn::spawn;
use super::supervisor::{Action, Event, SignalNumber, Stop, Supervisor};
use super::terminal::Terminal;
use super::tree::{self, Tree};

/// After the command exited, how often the runner looks whether what it started is gone.
const PROBE: Duration = Duration::from_millis(20);

/// How supervision ended.
pub struct Supervised {
    pub exit: Exit,
    /// The command was started (126 and 127 mean it never was).
    pub started: bool,
    /// Why the command was stopped, if `run` stopped it.
    pub stopped: Option<Stop>,
    /// The latest end of the lease that a renewal (or the acquire) made sure of.
    pub lease_end: Instant,
}

/// Starts the command and supervises it until it exits; `self_pipe` has caught `run`'s signals
/// since before the lock was taken, and those that came meanwhile reach the command first. Returns its exit (see
/// [`Supervisor`]), or what keeps it from starting (126, 127; 64 for no command at all; 75
/// for a lease too nearly over to start it under, [`Supervisor::too_late`]).
/// `idle` is called once, as soon as the command runs: housekeeping that nobody then waits on.
///
/// # Errors
///
/// [`Error::System`] when the operating system refuses what guarding needs (the subreaper,
/// the signal handlers); the command was then never started.
pub fn supervise(
    job: &Job<'_>,
    self_pipe: &mut SelfPipe,
    idle: &mut dyn FnMut(),
) -> Result<Supervised> {
    tree::adopt_orphans()
        .map_err(|err| Error::system("cannot adopt what the command starts (prctl)", err))?;
    let (report, inbox) = mpsc::channel();
    let mut heartbeat = HeartbeatThread::new(job, report, self_pipe.waker()?);
    let env = environment(job);
    // Signals that came before the command exists: one that asks to end (a terminal's, a
    // service manager's) is honoured by not starting it; the others had no command to reach.
    let ending = crate::signals::ENDING;
    if let Some(signal) = self_pipe.signals().into_iter().find(|s| ending.contains(s)) {
        warn(format_args!(
            "interrupted before the command started; it was not run"
        ));
        return Ok(Supervised {
            exit: Exit::Child(u8::try_from(128 + signal).unwrap_or(u8::MAX)),
            started: false,
            stopped: None,
            lease_end: job.lease_end,
        });
    }
    let mut supervisor =
        Supervisor::new(job.members.listed(), job.ttl, job.kill_after, job.lease_end);
    if let Some(why) = supervisor.too_late(Instant::now()) {
        warn(format_args!("{why}"));
        return Ok(Supervised {
            exit: Exit::Busy,
            started: false,
            stopped: None,
            lease_end: job.lease_end,
        });
    }
    let child = match spawn(job.command, &env) {
        Ok(child) => child,
        Err(exit) => {
            return Ok(Supervised {
                exit,
                started: false,
                stopped: None,
                lease_end: job.lease_end,
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
    if let Some(limit) = job.max_runtime {
        supervisor = supervisor.with_max_runtime(limit, started);
    }
    idle();
    let mut guard = Guard {
        supervisor: &mut supervisor,
        tree: &tree,
        terminal: &mut terminal,
    };
    let exit = guard.event_loop(command, self_pipe, &mut heartbeat, &inbox);
    Ok(Supervised {
        exit,
        started: true,
        stopped: supervisor.stopped(),
        lease_end: supervisor.lease_end(),
    })
}

/// What the command finds in its environment: `DISTLOCK_RESOURCE` and `DISTLOCK_FENCE` for one
/// lock; for a set, `DISTLOCK_RESOURCES` (a JSON array of the names) and `DISTLOCK_FENCES` (a
/// JSON object, name to fence) instead; either way the other pair taken out (an outer `run`'s
/// would mislead); and `DISTLOCK_OWNER` and `DISTLOCK_DB`.
fn environment(job: &Job<'_>) -> Vec<(&'static str, Option<OsString>)> {
    let mut env = Vec::with_capacity(6);
    match job.locks {
        [lock] => {
            env.push(("DISTLOCK_RESOURCE", Some(lock.resource.as_str().into())));
            env.push(("DISTLOCK_FENCE", Some(lock.fence.to_string().into())));
            env.push(("DISTLOCK_RESOURCES", None));
            env.push(("DISTLOCK_FENCES", None));
        }
        locks => {
            let names: Vec<&str> = locks.iter().map(|l| l.resource.as_str()).collect();
            let fences: serde_json::Map<String, serde_json::Value> = locks
                .iter()
                .map(|l| (l.resource.as_str().to_owned(), l.fence.0.into()))
                .collect();
            let names = serde_json::Value::from(names).to_string();
            let fences = serde_json::Value::Object(fences).to_string();
            env.push(("DISTLOCK_RESOURCES", Some(names.into())));
            env.push(("DISTLOCK_FENCES", Some(fences.into())));
            env.push(("DISTLOCK_RESOURCE", None));
            env.push(("DISTLOCK_FENCE", None));
        }
    }
    if let Some(lock) = job.locks.first() {
        env.push(("DISTLOCK_OWNER", Some(lock.owner.as_str().into())));
    }
    env.push(("DISTLOCK_DB", Some(job.location.to_env_value())));
    env
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
    fn event_loop(
        &mut self,
        command: Pid,
        self_pipe: &mut SelfPipe,
        heartbeat: &mut HeartbeatThread<'_>,
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
            let sleep = [wake, heartbeat.due()].into_iter().flatten().min();
            self_pipe.sleep(sleep.map(|at| at.saturating_duration_since(now)));
            let mut events: VecDeque<Event> =
                self_pipe.signals().into_iter().map(Event::Signal).collect();
            events.extend(heartbeat.start_if_due(Instant::now()));
            events.extend(inbox.try_iter());
            if !exited {
                events.extend(news_of(command, self.terminal.handed()));
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
                if let Some(exit) = self.perform(actions, &mut events, heartbeat) {
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
    fn perform(
        &mut self,
        actions: Vec<Action>,
        events: &mut VecDeque<Event>,
        heartbeat: &HeartbeatThread<'_>,
    ) -> Option<Exit> {
        for action in actions {
            match action {
                Action::SignalGroup(signal) => self.tree.signal_group(signal),
                Action::SignalAll(signal) => self.tree.signal_all(signal),
                Action::Warn(message) => warn(format_args!("{message}")),
                Action::Suspend(signal) => {
                    // Never stopped inside a renewal: the store must not wait on this job.
                    let quiet = heartbeat.quiet();
                    self.terminal.take_back();
                    process::stop_self(signal);
                    drop(quiet);
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

/// What `waitpid` says of the command, without waiting (see [`Event::from_wait`]). In an
/// interactive job, any stop of the command is job control: a shell's `suspend`, or a program
/// that stops itself with SIGSTOP, must give the terminal back to the shell as ^Z does.
fn news_of(command: Pid, interactive: bool) -> Option<Event> {
    let state = process::poll_child(command, true);
    if let (true, Ok(process::ChildState::Stopped(signal))) = (interactive, &state) {
        let signal = match Signal::try_from(*signal) {
            Ok(job @ (Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU)) => job,
            _ => Signal::SIGTSTP,
        };
        return Some(Event::Stopped(signal));
    }
    Event::from_wait(state)
}
