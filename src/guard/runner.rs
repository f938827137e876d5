//! The runner of `run`: the process, thread, signal and terminal I/O that the
//! [`Supervisor`] decides on.
//!
//! It owns:
//! - the set-up before the command starts: the subreaper, signal forwarding and every helper
//!   thread. All of it happens *before* the command is spawned, so a failure there (an
//!   [`Error::System`]) leaves no command running, and the caller can release the lock;
//! - the threads: the signal thread turns SIGINT/SIGTERM/SIGHUP/SIGQUIT into events, the
//!   waiter blocks in `wait()` for the command (handed to it through a channel once spawned),
//!   the heartbeat renews (see [`super::heartbeat`]);
//! - the loop: it feeds each event to the supervisor with the current instant, sends
//!   [`Event::Timer`] when the supervisor's deadline comes, and, once the command has exited,
//!   looks every few milliseconds whether what it started is gone ([`Event::Emptied`]);
//! - performing the actions: signals through [`Tree`], messages through [`warn`];
//! - the terminal, handed to the command's process group while it runs and taken back in
//!   `Drop`, on every path.
//!
//! The command runs in a process group of its own, so forwarded signals reach everything in
//! it, as a terminal signals a foreground job.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::process::CommandExt;
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

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
///
/// # Errors
///
/// [`Error::System`] when the operating system refuses what guarding needs (the subreaper,
/// signal forwarding, a thread); the command was then never started.
pub fn supervise(job: &Job<'_>) -> Result<Supervised> {
    tree::adopt_orphans()
        .map_err(|err| Error::system("cannot adopt what the command starts (prctl)", err))?;
    let (events, inbox) = mpsc::channel();
    // Takes the only sender: once every helper is gone, `inbox` says so.
    let mut helpers = Helpers::start(job, events)?;
    let child = match spawn(job) {
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
    if let Err(mut child) = helpers.hand_over(child) {
        // The waiter thread is gone: stop the command, as its end could not be seen.
        let ended = Ended::Unknown("the thread waiting for it is gone".to_owned());
        let actions = supervisor.step(Event::Exited(ended), Instant::now());
        let exit = perform(actions, &tree);
        let _ = child.wait();
        tree::reap_orphans();
        return Ok(Supervised {
            exit: exit.unwrap_or(Exit::LeaseLost),
            started: true,
            stopped: Some(Stop::LeaseLost),
        });
    }
    let exit = watch(&mut supervisor, &tree, &inbox, &mut helpers);
    Ok(Supervised {
        exit,
        started: true,
        stopped: supervisor.stopped(),
    })
}

/// Feeds events to the supervisor and performs its actions until it says to exit.
fn watch(
    supervisor: &mut Supervisor,
    tree: &Tree,
    inbox: &Receiver<Event>,
    helpers: &mut Helpers,
) -> Exit {
    // The command's status is known (the waiter reported): orphans may be reaped.
    let mut exited = false;
    let mut disconnected = false;
    loop {
        let now = Instant::now();
        let mut wake = supervisor.deadline();
        if exited {
            wake = Some(wake.map_or(now + PROBE, |at| at.min(now + PROBE)));
        }
        let received = match wake {
            Some(at) if disconnected => {
                std::thread::sleep(at.saturating_duration_since(now));
                Err(RecvTimeoutError::Timeout)
            }
            Some(at) => inbox.recv_timeout(at.saturating_duration_since(now)),
            None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let event = match received {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) if exited && !tree.anything_left() => Event::Emptied,
            Err(RecvTimeoutError::Timeout) => Event::Timer,
            // Every helper is gone, the waiter without reporting: the command's fate is
            // unknown, which the supervisor treats as the worst case.
            Err(RecvTimeoutError::Disconnected) => {
                disconnected = true;
                Event::Exited(Ended::Unknown(
                    "the thread waiting for it is gone".to_owned(),
                ))
            }
        };
        if matches!(event, Event::Exited(_)) && !exited {
            exited = true;
            if let Some(waiter) = helpers.waiter.take() {
                let _ = waiter.join();
            }
        }
        let actions = supervisor.step(event, Instant::now());
        if let Some(exit) = perform(actions, tree) {
            if exited {
                tree::reap_orphans();
            }
            return exit;
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
    let spawned = std::process::Command::new(program)
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

/// The helper threads, all started before the command. Dropping this ends them (see `Drop`).
#[derive(Default)]
struct Helpers {
    signals: Option<signal_hook::iterator::Handle>,
    signal_thread: Option<JoinHandle<()>>,
    /// Where the waiter gets the command, once it is spawned.
    hand_child: Option<Sender<Child>>,
    waiter: Option<JoinHandle<()>>,
    /// Dropping it stops the heartbeat.
    stop_heartbeat: Option<Sender<()>>,
}

impl Helpers {
    /// Sets up signal forwarding and starts the signal, waiter and heartbeat threads, each
    /// with its own clone of `events`.
    ///
    /// # Errors
    ///
    /// [`Error::System`] when signal forwarding cannot be set up or a thread cannot be
    /// started; what was started by then is ended again (through `Drop`).
    fn start(job: &Job<'_>, events: Sender<Event>) -> Result<Helpers> {
        let mut helpers = Helpers::default();

        let mut signals = Signals::new(FORWARDED)
            .map_err(|err| Error::system("cannot set up signal forwarding", err))?;
        helpers.signals = Some(signals.handle());
        let forward = events.clone();
        helpers.signal_thread = Some(start_thread("signal", move || {
            for raw in signals.forever() {
                let Ok(signal) = Signal::try_from(raw) else {
                    continue;
                };
                if forward.send(Event::Signal(signal)).is_err() {
                    break;
                }
            }
        })?);

        let (hand_child, child_inbox) = mpsc::channel::<Child>();
        helpers.hand_child = Some(hand_child);
        let report = events.clone();
        helpers.waiter = Some(start_thread("waiter", move || {
            // No command comes when spawning it failed: the channel just closes.
            if let Ok(mut child) = child_inbox.recv() {
                let _ = report.send(Event::Exited(Ended::from_wait(child.wait())));
            }
        })?);

        let (stop_heartbeat, heartbeat_stopped) = mpsc::channel::<()>();
        helpers.stop_heartbeat = Some(stop_heartbeat);
        let heartbeat = Heartbeat {
            location: job.location.clone(),
            resource: job.lock.resource.clone(),
            owner: job.lock.owner.clone(),
            ttl: job.ttl,
            fence: job.lock.fence,
        };
        // Not joined (see `Drop`), so its handle is not kept.
        start_thread("heartbeat", move || {
            heartbeat.beat(&events, &heartbeat_stopped);
        })?;
        Ok(helpers)
    }

    /// Gives the spawned command to the waiter thread; back if that thread is gone.
    fn hand_over(&mut self, child: Child) -> Result<(), Child> {
        match &self.hand_child {
            Some(hand) => hand.send(child).map_err(|returned| returned.0),
            None => Err(child),
        }
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        if let Some(signals) = self.signals.take() {
            signals.close();
        }
        if let Some(thread) = self.signal_thread.take() {
            let _ = thread.join();
        }
        // Without a command handed over, the waiter ends as its channel closes. With one, the
        // watch loop joined it after it reported; it is never joined while the command runs.
        self.hand_child = None;
        self.waiter = None;
        // The heartbeat ends at its next wake-up. It is not joined: it may be inside a renewal
        // that an unresponsive store holds up, and a renewal that lands after the release
        // finds no lock of this tenure and changes nothing.
        self.stop_heartbeat = None;
    }
}

/// Starts a named helper thread.
///
/// # Errors
///
/// [`Error::System`] when the operating system refuses a thread.
fn start_thread(name: &str, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("distlock-{name}"))
        .spawn(body)
        .map_err(|err| Error::system(&format!("cannot start the {name} thread"), err))
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
