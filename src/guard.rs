//! `run`, the exec guard: acquire, run the command, keep the lease alive, stop the command if
//! the lease is lost, forward signals, release, and pass the command's exit status through.
//!
//! Threads and who owns what:
//! - the main thread owns the decision: it reacts to events on one channel and keeps the
//!   monotonic deadline by which the command must be stopped if renewals stop succeeding;
//! - the heartbeat thread renews every ttl/3 on a store connection of its own, so a slow or
//!   blocked renewal never delays the main thread's reaction;
//! - the waiter thread blocks in `wait()` for the command;
//! - the signal thread turns SIGINT/SIGTERM/SIGHUP/SIGQUIT into events to forward.
//!
//! The command runs in a process group of its own, so "stop the command" reaches everything it
//! started (a `sh -c` wrapper's children too), and so do forwarded signals — as a terminal
//! signals a foreground job.
//!
//! Invariant: while renewals fail, the command is SIGKILLed no later than `lease_end - margin`,
//! where `lease_end` is measured from *before* the last successful renewal (or the acquire) was
//! sent. The lease cannot have started earlier than that instant, so the command is gone
//! before any other owner can take the lock, even while the store is unreachable.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::exit::Exit;
use crate::lock::{Acquire, Fence, Lock, Owner, Release, Renew, Resource, Tenure, Ttl};
use crate::output::{StatusLine, warn};
use crate::store::{self, Location, LockStore};
use crate::wait;

/// The signals `run` forwards to its command.
const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// What to run, under which lock: the command line's `run`, as plain values.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub resource: Resource,
    /// `None`: a name unique to this process.
    pub owner: Option<Owner>,
    pub ttl: Ttl,
    pub wait: Option<Duration>,
    /// Exit with this instead of 75 when the lock is busy.
    pub conflict_exit_code: Option<u8>,
    /// Between SIGTERM and SIGKILL when the command must be stopped.
    pub kill_after: Duration,
    /// The program and its arguments; never empty.
    pub command: Vec<OsString>,
}

/// Runs `args.command` under the lock `args.resource`.
///
/// # Errors
///
/// Store failures before the command starts (exit 74). Once it runs, store trouble is handled
/// here: renewals retry, and the command is stopped before the lease could expire.
pub fn run(location: &Location, args: RunSpec) -> Result<Exit> {
    let owner = args.owner.clone().unwrap_or_else(Owner::unique_for_process);
    let mut store = store::open(location)?;
    // Taken even without --wait: the holder's side of it is what wakes later waiters.
    let wakeup = store.wakeup(&args.resource);
    let mut on_busy = StatusLine::reporter(args.wait, &args.resource);
    let attempt = wait::acquire(
        store.as_mut(),
        &args.resource,
        &owner,
        args.ttl,
        args.wait,
        wakeup,
        &mut on_busy,
    )?;
    drop(on_busy);
    // Held until this function returns, after the release: waiters wake as the tenure ends.
    let _tenancy = attempt.tenancy;
    let (lock, tenure) = match attempt.outcome {
        Acquire::Acquired { lock, tenure } => (lock, tenure),
        Acquire::Busy { holder } => {
            return Ok(match args.conflict_exit_code {
                Some(code) => Exit::Child(code),
                None => {
                    warn(format_args!(
                        "{} is held by {} until {}",
                        args.resource, holder.owner, holder.expires_at
                    ));
                    Exit::Busy
                }
            });
        }
    };
    // Joining a tenure this owner already held (a script's `acquire --owner X`, then steps with
    // `run --owner X`): keep it alive while the step runs, and leave it held afterwards.
    let joined = tenure == Tenure::Extended;
    let guard = Guard {
        location,
        resource: &args.resource,
        owner: &owner,
        ttl: args.ttl,
        fence: lock.fence,
        kill_after: args.kill_after,
        lease_end: attempt.started + args.ttl.as_duration(),
    };
    let exit = guard.supervise(&lock, &args.command)?;
    // Releasing only this tenure (owner and fence) is harmless after a lost lease: the store
    // refuses if someone else holds it, and frees it early if renewals merely failed.
    if !joined {
        guard.release(store.as_mut());
    }
    Ok(exit)
}

struct Guard<'a> {
    location: &'a Location,
    resource: &'a Resource,
    owner: &'a Owner,
    ttl: Ttl,
    fence: Fence,
    kill_after: Duration,
    /// When the lease ends at the earliest, on the monotonic clock: the TTL counted from just
    /// before the request that granted (or last renewed) it was sent.
    lease_end: Instant,
}

/// What the main thread hears about.
enum Event {
    Exited(std::io::Result<ExitStatus>),
    Signal(i32),
    /// A renewal succeeded; the lease now lasts at least until this instant.
    Renewed(Instant),
    /// The store answered that the lock is no longer ours.
    Lost(&'static str),
    /// A renewal failed on a store error; the heartbeat keeps retrying.
    Trouble(String),
}

enum Phase {
    Running,
    /// Lease lost: SIGTERM was sent; SIGKILL follows at the instant.
    Stopping(Instant),
    /// SIGKILL was sent; only the command's exit is awaited.
    Killed,
}

impl Guard<'_> {
    /// Starts the command and watches it until it exits. Returns its exit, or
    /// [`Exit::LeaseLost`] if it had to be stopped.
    fn supervise(&self, lock: &Lock, command: &[OsString]) -> Result<Exit> {
        let (events, inbox) = mpsc::channel();
        let mut signals = Signals::new(FORWARDED)
            .map_err(|e| Error::system("cannot set up signal forwarding", e))?;
        let signal_handle = signals.handle();
        let signal_thread = {
            let events = events.clone();
            thread::spawn(move || {
                for signal in signals.forever() {
                    if events.send(Event::Signal(signal)).is_err() {
                        break;
                    }
                }
            })
        };

        let result = match self.spawn(lock, command) {
            Ok(child) => Ok(self.watch(child, events, &inbox)),
            Err(exit) => Err(exit),
        };
        signal_handle.close();
        let _ = signal_thread.join();
        Ok(result.unwrap_or_else(|exit| exit))
    }

    /// Spawns the command directly (no shell) in its own process group.
    fn spawn(&self, lock: &Lock, command: &[OsString]) -> Result<Child, Exit> {
        let (program, args) = command.split_first().ok_or(Exit::Usage)?;
        let spawned = std::process::Command::new(program)
            .args(args)
            .env("DISTLOCK_RESOURCE", lock.resource.as_str())
            .env("DISTLOCK_OWNER", lock.owner.as_str())
            .env("DISTLOCK_FENCE", lock.fence.to_string())
            .env("DISTLOCK_DB", self.location.to_env_value())
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

    fn watch(&self, child: Child, events: Sender<Event>, inbox: &Receiver<Event>) -> Exit {
        let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let terminal = Terminal::hand_to(group);
        let waiter = {
            let events = events.clone();
            let mut child = child;
            thread::spawn(move || {
                let _ = events.send(Event::Exited(child.wait()));
            })
        };
        let (stop_heartbeat, heartbeat_stopped) = mpsc::channel::<()>();
        let heartbeat = {
            let heartbeat = Heartbeat {
                location: self.location.clone(),
                resource: self.resource.clone(),
                owner: self.owner.clone(),
                ttl: self.ttl,
                fence: self.fence,
            };
            thread::spawn(move || heartbeat.beat(&events, &heartbeat_stopped))
        };

        let status = self.watch_events(group, inbox);
        // The heartbeat ends at its next wake-up. It is not joined: it may be inside a renewal
        // that an unresponsive store holds up, and a renewal that lands after the release
        // below finds no lock of this tenure and changes nothing.
        drop(stop_heartbeat);
        drop(heartbeat);
        let _ = waiter.join();
        terminal.restore();
        status
    }

    fn watch_events(&self, group: Pid, inbox: &Receiver<Event>) -> Exit {
        let margin = safety_margin(self.ttl);
        // Time between SIGTERM and SIGKILL when renewals fail: the user's --kill-after, but
        // never so long that the command could outlive the lease.
        let failing_grace = self.kill_after.min(self.ttl.as_duration() / 4);
        let mut lease_end = self.lease_end;
        let mut phase = Phase::Running;
        let mut lost = false;
        // Whether renewals are failing: said once per outage, not once per retry.
        let mut troubled = false;
        loop {
            let deadline = match phase {
                Phase::Running => lease_end
                    .checked_sub(margin + failing_grace)
                    .unwrap_or_else(Instant::now),
                Phase::Stopping(kill_at) => kill_at,
                Phase::Killed => Instant::now() + Duration::from_secs(3600),
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            match inbox.recv_timeout(wait) {
                Ok(Event::Exited(status)) => {
                    if lost {
                        // The command's workers get the rest of their grace to clean up, but
                        // nothing it started may outlive a lost lease.
                        if let Phase::Stopping(kill_at) = phase {
                            while Instant::now() < kill_at && killpg(group, None).is_ok() {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        }
                        let _ = killpg(group, Signal::SIGKILL);
                        return Exit::LeaseLost;
                    }
                    return exit_of(status);
                }
                Ok(Event::Signal(signal)) => {
                    if let Ok(signal) = Signal::try_from(signal) {
                        let _ = killpg(group, signal);
                    }
                }
                Ok(Event::Renewed(until)) => {
                    lease_end = lease_end.max(until);
                    if std::mem::take(&mut troubled) && matches!(phase, Phase::Running) {
                        warn(format_args!("renewing the lock on {} again", self.resource));
                    }
                }
                Ok(Event::Lost(reason)) => {
                    if matches!(phase, Phase::Running) {
                        warn(format_args!(
                            "lost the lock on {}: {reason}; stopping the command",
                            self.resource
                        ));
                        lost = true;
                        let _ = killpg(group, Signal::SIGTERM);
                        phase = Phase::Stopping(Instant::now() + self.kill_after);
                    }
                }
                Ok(Event::Trouble(message)) => {
                    if matches!(phase, Phase::Running) && !std::mem::replace(&mut troubled, true) {
                        warn(format_args!(
                            "cannot renew the lock on {} (retrying): {message}",
                            self.resource
                        ));
                    }
                }
                Err(RecvTimeoutError::Timeout) => match phase {
                    Phase::Running => {
                        warn(format_args!(
                            "the lock on {} could not be renewed and may expire; stopping the \
                             command",
                            self.resource
                        ));
                        lost = true;
                        let _ = killpg(group, Signal::SIGTERM);
                        let kill_at = lease_end
                            .checked_sub(margin)
                            .unwrap_or_else(Instant::now)
                            .min(Instant::now() + self.kill_after);
                        phase = Phase::Stopping(kill_at);
                    }
                    Phase::Stopping(_) => {
                        let _ = killpg(group, Signal::SIGKILL);
                        phase = Phase::Killed;
                    }
                    Phase::Killed => {}
                },
                // Every sender is gone only if the waiter died without reporting: treat the
                // command as lost rather than wait forever.
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = killpg(group, Signal::SIGKILL);
                    return Exit::LeaseLost;
                }
            }
        }
    }

    /// Releases this run's tenure only (owner and fence), saying so on stderr if that fails.
    fn release(&self, store: &mut dyn LockStore) {
        match store.release(self.resource, self.owner, Some(self.fence)) {
            Ok(Release::Released | Release::NotFound | Release::Forbidden) => {}
            Err(err) => warn(format_args!(
                "cannot release the lock on {}: {err:#}",
                self.resource
            )),
        }
    }
}

/// How much earlier than the computed lease end the command must be gone: covers the store's
/// clock running a little faster than this host's monotonic clock.
fn safety_margin(ttl: Ttl) -> Duration {
    (ttl.as_duration() / 10).max(Duration::from_millis(100))
}

fn exit_of(status: std::io::Result<ExitStatus>) -> Exit {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Child(u8::try_from(code & 0xff).unwrap_or(u8::MAX)),
            (None, Some(signal)) => Exit::Child(u8::try_from(128 + signal).unwrap_or(u8::MAX)),
            (None, None) => Exit::Child(u8::MAX),
        },
        Err(err) => {
            warn(format_args!("lost track of the command: {err}"));
            Exit::LeaseLost
        }
    }
}

/// The renewing side: its own connection, its own thread.
struct Heartbeat {
    location: Location,
    resource: Resource,
    owner: Owner,
    ttl: Ttl,
    fence: Fence,
}

impl Heartbeat {
    /// Renews every ttl/3 until `stop` is dropped or the store says the lock is gone; after a
    /// store error, retries sooner.
    fn beat(self, events: &Sender<Event>, stop: &Receiver<()>) {
        let interval = self.ttl.as_duration() / 3;
        let retry = interval.min(Duration::from_secs(1));
        let mut store: Option<Box<dyn LockStore>> = None;
        let mut next = Instant::now() + interval;
        loop {
            match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            let attempt = Instant::now();
            let renewed = match store.as_mut() {
                Some(store) => store.renew(&self.resource, &self.owner, self.ttl, Some(self.fence)),
                None => store::open(&self.location).and_then(|opened| {
                    store.insert(opened).renew(
                        &self.resource,
                        &self.owner,
                        self.ttl,
                        Some(self.fence),
                    )
                }),
            };
            let event = match renewed {
                Ok(Renew::Renewed { .. }) => {
                    next = attempt + interval;
                    Event::Renewed(attempt + self.ttl.as_duration())
                }
                Ok(Renew::NotFound) => Event::Lost("it expired or was released"),
                Ok(Renew::Forbidden) => Event::Lost("another owner holds it"),
                Err(err) => {
                    // Reconnect for the next try: the connection itself may be what failed.
                    store = None;
                    next = Instant::now() + retry;
                    Event::Trouble(format!("{err:#}"))
                }
            };
            let lost = matches!(event, Event::Lost(_));
            if events.send(event).is_err() || lost {
                return;
            }
        }
    }
}

/// The controlling terminal, handed to the command's process group while it runs so that an
/// interactive command can read from it and gets ^C directly, as under a shell.
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

    fn restore(self) {
        let Some(ours) = self.ours else { return };
        // Taking the terminal back from a background group raises SIGTTOU unless it is blocked.
        let mut ttou = nix::sys::signal::SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let _ = ttou.thread_block();
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), ours);
        let _ = ttou.thread_unblock();
    }
}
