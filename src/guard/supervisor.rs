//! The supervisor of `run`: a pure state machine that decides and never does.
//!
//! It owns every rule about *when* `run` warns, signals and exits once the command runs. It is
//! fed [`Event`]s together with the instant the caller read from the monotonic clock, and
//! answers with [`Action`]s for the runner to perform, in order. It reads no clock, sends no
//! signal and prints nothing, so each timing rule below is a unit test.
//!
//! The rules (docs/src/reference/run.md, "3. Renewals and the lease rule" and "Everything `run` started"):
//! - The heartbeat renews every ttl/3. A renewal outage is reported once, when it starts, and
//!   once more ("renewing the lock on R again") when a renewal succeeds again.
//! - The store says the lock is gone or taken: SIGTERM to everything the command started,
//!   SIGKILL `kill_after` later, exit 124.
//! - Renewals keep failing: at `lease_end - margin - min(kill_after, ttl/4)` the command is
//!   stopped as on a lost lease, and SIGKILLed at `lease_end - margin` at the latest.
//! - Signals sent to `run` are forwarded to the command's process group, in every phase; they
//!   are signal numbers, so the real-time signals are forwarded like the named ones.
//! - Job control: when the command stops on SIGTSTP, SIGTTIN or SIGTTOU (^Z, a background
//!   read), `run` suspends itself with the same signal, the terminal taken back, so that the
//!   shell regains control. Continued, it first checks its lease: while the lease is surely
//!   still this run's (before the renewal stop below), the terminal is handed back and the
//!   command continued; past it, the command is stopped as on a lost lease, and past
//!   `lease_end - margin` SIGKILLed while still stopped, so it never runs beside the next
//!   holder. A stop by any other signal (SIGSTOP of the command alone) leaves `run` guarding
//!   and renewing.
//! - When the command exits after being stopped, what it started gets the rest of its grace
//!   (or less, once nothing is left), then SIGKILL; `run` exits 124.
//! - When the command exits on its own, `run` exits with its status at once.
//! - A grant that comes when the lease may already be over, or so nearly over that the
//!   renewal stop below has come, starts no command ([`Supervisor::too_late`]).
//! - `--max-runtime`: a command still running that long after it started is stopped exactly as
//!   on a lost lease (SIGTERM to everything, SIGKILL `kill_after` later, while renewals keep
//!   the lease; sooner if the lease could end first), with one line naming the limit; `run`
//!   exits 124.
//!
//! Invariant: while renewals fail, [`Action::SignalAll`]`(SIGKILL)` is emitted no later than
//! `lease_end - margin`, where `lease_end` is the latest lease end a successful renewal (or the
//! acquire) reported — each measured from before its request was sent — provided the caller
//! delivers [`Event::Timer`] when [`Supervisor::deadline`] comes. `margin` covers the store's
//! clock running a little faster than this host's and the runner's own lag.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::process::ChildState;

use crate::exit::Exit;
use crate::lock::Ttl;

/// A signal by number, as `run` receives and forwards it (the real-time signals have no
/// [`Signal`] of their own).
pub type SignalNumber = i32;

/// How the command ended, as the thread waiting for it saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status.
    Code(i32),
    /// Signal N killed it.
    Signal(i32),
    /// Waiting for it failed: whether it still runs is unknown.
    Unknown(String),
}

impl Ended {
    /// The exit `run` passes on: the status, or 128+N for a death by signal N.
    fn exit(&self) -> Exit {
        match self {
            Ended::Code(code) => Exit::Child(u8::try_from(code & 0xff).unwrap_or(u8::MAX)),
            Ended::Signal(signal) => Exit::Child(u8::try_from(128 + signal).unwrap_or(u8::MAX)),
            Ended::Unknown(_) => Exit::LeaseLost,
        }
    }
}

/// What the supervisor hears about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The command ended (its own process, not what it started).
    Exited(Ended),
    /// `run` received a signal to forward to the command.
    Signal(SignalNumber),
    /// The command stopped on this job-control signal (SIGTSTP, SIGTTIN, SIGTTOU).
    Stopped(Signal),
    /// `run` was continued after [`Action::Suspend`].
    Continued,
    /// A renewal succeeded: the lease lasts at least until this instant.
    Renewed(Instant),
    /// The store answered that the lock is no longer this run's (why, in words).
    Lost(String),
    /// No renewal can succeed any more, though the lease runs on (the token was refused).
    Refused(String),
    /// A renewal failed on a store error (the message); the heartbeat keeps retrying.
    Trouble(String),
    /// The instant [`Supervisor::deadline`] asked for has come (or a wake-up without news).
    Timer,
    /// Nothing the command started is still running. Meaningful only after [`Event::Exited`].
    Emptied,
}

impl Event {
    /// What a non-blocking wait on the command (stops included) tells: that it ended, or
    /// stopped on a job-control signal. A stop on any other signal (SIGSTOP of the command
    /// alone) is no news: `run` goes on guarding and renewing. A failed wait is the worst
    /// case, a command whose fate is unknown.
    pub fn from_wait(waited: std::io::Result<ChildState>) -> Option<Event> {
        let job_control = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];
        match waited {
            Ok(ChildState::Exited(code)) => Some(Event::Exited(Ended::Code(code))),
            Ok(ChildState::Killed(signal)) => Some(Event::Exited(Ended::Signal(signal))),
            Ok(ChildState::Stopped(signal)) if job_control.contains(&signal) => {
                Signal::try_from(signal).ok().map(Event::Stopped)
            }
            Ok(ChildState::Stopped(_) | ChildState::Running) => None,
            Err(err) => Some(Event::Exited(Ended::Unknown(err.to_string()))),
        }
    }
}

/// What the runner is to do, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send the signal to the command's process group (forwarding, as a terminal would).
    SignalGroup(SignalNumber),
    /// Send the signal to the command's process group and to every process it started, also
    /// those that left the group.
    SignalAll(Signal),
    /// Say this on stderr (one line).
    Warn(String),
    /// Take the terminal back from the command and stop `run` itself with this signal, as the
    /// shell's job; once `run` is continued, report [`Event::Continued`].
    Suspend(Signal),
    /// Hand the terminal to the command's process group again, if `run` has it.
    Foreground,
    /// Supervision is over: `run` exits with this (after releasing the lock).
    Exit(Exit),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The command runs and the lease is, as far as is known, this run's.
    Running,
    /// SIGTERM was sent (the lease is lost or may expire, or `--max-runtime` came); SIGKILL
    /// follows at `kill_at`, or at `lease_end - margin` if that comes first and the stop
    /// `follows_lease` (a lease still renewed meanwhile).
    Stopping {
        kill_at: Instant,
        follows_lease: bool,
    },
    /// SIGKILL was sent; only the command's status is awaited.
    Killed,
    /// The command exited after SIGTERM; what it started may clean up until `kill_at`.
    Draining { kill_at: Instant },
    /// [`Action::Exit`] was given; nothing happens any more.
    Done,
}

/// The decisions of one `run`, from the command's start to `run`'s exit.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// The lock's resource, or a lock set's members, as messages name it.
    resource: String,
    kill_after: Duration,
    /// How much earlier than `lease_end` the command must be gone.
    margin: Duration,
    /// SIGTERM to SIGKILL when renewals fail: `kill_after`, but never more than ttl/4.
    failing_grace: Duration,
    /// The latest known lease end, on the monotonic clock, counted from before the request
    /// that granted or renewed it was sent.
    lease_end: Instant,
    /// Renewals are failing: said once per outage, not once per retry.
    troubled: bool,
    /// `--max-runtime`: the limit, and the instant the command reaches it.
    max_runtime: Option<(Duration, Instant)>,
    /// Why the command was stopped, once it was.
    stopped: Option<Stop>,
    phase: Phase,
}

/// Why `run` stopped its command (both exit 124).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The lock is gone, taken, broken, or may expire: it is no longer certainly this run's.
    LeaseLost,
    /// `--max-runtime` was reached; the lease is still this run's.
    MaxRuntime,
}

/// How much earlier than the computed lease end the command must be gone: covers the store's
/// clock running a little faster than this host's monotonic clock.
pub fn safety_margin(ttl: Ttl) -> Duration {
    (ttl.as_duration() / 10).max(Duration::from_millis(100))
}

impl Supervisor {
    /// A supervisor for a command just started under a lease that lasts at least until
    /// `lease_end`.
    pub fn new(
        resource: impl std::fmt::Display,
        ttl: Ttl,
        kill_after: Duration,
        lease_end: Instant,
    ) -> Self {
        Supervisor {
            resource: resource.to_string(),
            kill_after,
            margin: safety_margin(ttl),
            failing_grace: kill_after.min(ttl.as_duration() / 4),
            lease_end,
            troubled: false,
            max_runtime: None,
            stopped: None,
            phase: Phase::Running,
        }
    }

    /// Stops the command once it has run for `limit` since `started` (`--max-runtime`).
    #[must_use]
    pub fn with_max_runtime(mut self, limit: Duration, started: Instant) -> Self {
        self.max_runtime = Some((limit, started + limit));
        self
    }

    /// Why the command was stopped, if it was.
    /// The latest lease end a successful renewal (or the acquire) made sure of.
    pub fn lease_end(&self) -> Instant {
        self.lease_end
    }

    pub fn stopped(&self) -> Option<Stop> {
        self.stopped
    }

    /// When [`Event::Timer`] must come at the latest, or `None` when only other events matter.
    pub fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => Some(match self.max_runtime {
                Some((_, at)) => self.stop_at().min(at),
                None => self.stop_at(),
            }),
            Phase::Stopping { .. } => Some(self.kill_at()),
            Phase::Draining { kill_at } => Some(kill_at),
            Phase::Killed | Phase::Done => None,
        }
    }

    /// Why a command that would start at `now` must not start at all, if it must not: the
    /// lease may have ended already (past `lease_end - margin`: a grant that came too late, or
    /// an acquire that took longer than the TTL), or it ends so soon that the renewal stop has
    /// come (the point at which a running command is stopped for want of a renewal), before
    /// any renewal could be sent. Either way the command would be stopped as soon as it
    /// started, or, were it quick, run to its end with no lease left.
    pub fn too_late(&self, now: Instant) -> Option<String> {
        let ended = if now >= self.earlier(self.lease_end, self.margin) {
            "the lease had already ended"
        } else if now >= self.stop_at() {
            "the lease would end before it could be renewed"
        } else {
            return None;
        };
        Some(format!(
            "the lock on {} was granted too late: {ended}; the command was not started",
            self.resource
        ))
    }

    /// Whether [`Action::Exit`] was given. (The runner stops at that action itself.)
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Takes `event`, which happened at `now`, and says what to do about it.
    pub fn step(&mut self, event: Event, now: Instant) -> Vec<Action> {
        match event {
            Event::Signal(signal) if self.phase != Phase::Done => {
                vec![Action::SignalGroup(signal)]
            }
            Event::Stopped(signal) => self.stopped_on(signal),
            Event::Continued => self.continued(now),
            Event::Exited(ended) => self.exited(ended, now),
            Event::Renewed(until) => self.renewed(until),
            Event::Lost(reason) => self.lost(&reason, now),
            Event::Refused(reason) if self.phase == Phase::Running => {
                let why = format!("lost the lock on {}: {reason}", self.resource);
                self.stop_for_lease(now, why + "; stopping the command")
            }
            Event::Trouble(message) => self.trouble(&message),
            Event::Timer => self.timer(now),
            Event::Emptied => match self.phase {
                Phase::Draining { .. } => self.finish_stopped(),
                _ => Vec::new(),
            },
            Event::Signal(_) | Event::Refused(_) => Vec::new(),
        }
    }

    /// While renewals fail, when the command must get SIGTERM: its grace before
    /// `lease_end - margin`.
    fn stop_at(&self) -> Instant {
        self.earlier(self.lease_end, self.margin + self.failing_grace)
    }

    /// In [`Phase::Stopping`], when SIGKILL is due.
    fn kill_at(&self) -> Instant {
        match self.phase {
            Phase::Stopping {
                kill_at,
                follows_lease: true,
            } => kill_at.min(self.earlier(self.lease_end, self.margin)),
            Phase::Stopping { kill_at, .. } | Phase::Draining { kill_at } => kill_at,
            Phase::Running | Phase::Killed | Phase::Done => self.lease_end,
        }
    }

    /// SIGTERM now, SIGKILL at `lease_end - margin` or `kill_after` from now, whichever comes
    /// first: the stop of a lease that may be ending.
    fn stop_for_lease(&mut self, now: Instant, why: String) -> Vec<Action> {
        let kill_at = self
            .earlier(self.lease_end, self.margin)
            .min(now + self.kill_after);
        self.phase = Phase::Stopping {
            kill_at,
            follows_lease: false,
        };
        self.stopped = Some(Stop::LeaseLost);
        vec![Action::Warn(why), Action::SignalAll(Signal::SIGTERM)]
    }

    /// `at - by`, or `at` when the monotonic clock has no instant that early (never, in
    /// practice: the lease started after the boot).
    fn earlier(&self, at: Instant, by: Duration) -> Instant {
        at.checked_sub(by).unwrap_or(at)
    }

    fn exited(&mut self, ended: Ended, now: Instant) -> Vec<Action> {
        match self.phase {
            Phase::Running => {
                let mut actions = Vec::new();
                if let Ended::Unknown(err) = &ended {
                    // It may still run: nothing may outlive the lock that is about to be released.
                    actions.push(Action::Warn(format!("lost track of the command: {err}")));
                    actions.push(Action::SignalAll(Signal::SIGKILL));
                }
                actions.push(Action::Exit(ended.exit()));
                self.phase = Phase::Done;
                actions
            }
            Phase::Stopping { .. } if now < self.kill_at() => {
                let kill_at = self.kill_at();
                // The command's workers get the rest of their grace to clean up, but nothing
                // it started may outlive a lost lease.
                self.phase = Phase::Draining { kill_at };
                Vec::new()
            }
            Phase::Stopping { .. } | Phase::Killed => self.finish_stopped(),
            Phase::Draining { .. } | Phase::Done => Vec::new(),
        }
    }

    /// The end of a stopped command: SIGKILL to whatever is left, exit 124.
    fn finish_stopped(&mut self) -> Vec<Action> {
        self.phase = Phase::Done;
        vec![
            Action::SignalAll(Signal::SIGKILL),
            Action::Exit(Exit::LeaseLost),
        ]
    }

    fn renewed(&mut self, until: Instant) -> Vec<Action> {
        self.lease_end = self.lease_end.max(until);
        let recovered = std::mem::take(&mut self.troubled);
        if recovered && self.phase == Phase::Running {
            vec![Action::Warn(format!(
                "renewing the lock on {} again",
                self.resource
            ))]
        } else {
            Vec::new()
        }
    }

    fn lost(&mut self, reason: &str, now: Instant) -> Vec<Action> {
        if self.phase != Phase::Running {
            return Vec::new();
        }
        // The lock is gone already, so no lease end is left to respect: the command gets the
        // whole of the grace its user chose (docs/src/reference/run.md, "3. Renewals and the lease rule").
        self.phase = Phase::Stopping {
            kill_at: now + self.kill_after,
            follows_lease: false,
        };
        self.stopped = Some(Stop::LeaseLost);
        vec![
            Action::Warn(format!(
                "lost the lock on {}: {reason}; stopping the command",
                self.resource
            )),
            Action::SignalAll(Signal::SIGTERM),
        ]
    }

    fn trouble(&mut self, message: &str) -> Vec<Action> {
        if self.phase != Phase::Running || std::mem::replace(&mut self.troubled, true) {
            return Vec::new();
        }
        vec![Action::Warn(format!(
            "cannot renew the lock on {} (retrying): {message}",
            self.resource
        ))]
    }

    /// The command stopped on a job-control signal: `run` follows it while it guards a
    /// running command; once it is stopping the command, it continues it instead, so that the
    /// SIGTERM is acted on.
    fn stopped_on(&mut self, signal: Signal) -> Vec<Action> {
        match self.phase {
            // What left the process group, or ignores the signal, stops too: nothing of the
            // job runs while its guard is stopped.
            Phase::Running => vec![Action::SignalAll(Signal::SIGSTOP), Action::Suspend(signal)],
            Phase::Stopping { .. } | Phase::Killed | Phase::Draining { .. } => {
                vec![Action::SignalGroup(Signal::SIGCONT as SignalNumber)]
            }
            Phase::Done => Vec::new(),
        }
    }

    /// `run` was continued after suspending itself. No renewal was sent while it was stopped:
    /// the command may continue only while the lease surely lasts (before the renewal stop).
    /// Past that but before `lease_end - margin`, it is stopped as on a lost lease, continued
    /// so that it gets the SIGTERM, and SIGKILLed by `lease_end - margin`. Past
    /// `lease_end - margin`, the lease may be another owner's already: the command, still
    /// stopped, is SIGKILLed without running another instruction.
    fn continued(&mut self, now: Instant) -> Vec<Action> {
        let resume = Action::SignalGroup(Signal::SIGCONT as SignalNumber);
        match self.phase {
            Phase::Running if now >= self.earlier(self.lease_end, self.margin) => {
                self.phase = Phase::Killed;
                self.stopped = Some(Stop::LeaseLost);
                vec![
                    Action::Warn(format!(
                        "the lock on {} may have expired while the job was stopped; killing the command",
                        self.resource
                    )),
                    Action::SignalAll(Signal::SIGKILL),
                ]
            }
            Phase::Running if now >= self.stop_at() => {
                let why = format!(
                    "the lock on {} may expire soon after the job was stopped; stopping the command",
                    self.resource
                );
                let mut actions = self.stop_for_lease(now, why);
                actions.push(resume);
                actions
            }
            Phase::Running => vec![Action::Foreground, Action::SignalAll(Signal::SIGCONT)],
            Phase::Done => Vec::new(),
            _ => vec![resume],
        }
    }

    fn timer(&mut self, now: Instant) -> Vec<Action> {
        match self.phase {
            Phase::Running if now >= self.stop_at() => {
                let why = format!(
                    "the lock on {} could not be renewed and may expire; stopping the command",
                    self.resource
                );
                self.stop_for_lease(now, why)
            }
            Phase::Running if self.max_runtime.is_some_and(|(_, at)| now >= at) => {
                let limit = self.max_runtime.map_or(Duration::ZERO, |(limit, _)| limit);
                // The lease is still this run's and renewed: the command gets its whole
                // --kill-after, but the SIGKILL may not come after the lease could end, should
                // renewals fail meanwhile.
                self.phase = Phase::Stopping {
                    kill_at: now + self.kill_after,
                    follows_lease: true,
                };
                self.stopped = Some(Stop::MaxRuntime);
                vec![
                    Action::Warn(format!(
                        "the command ran for its --max-runtime of {}; stopping it",
                        humantime::format_duration(limit)
                    )),
                    Action::SignalAll(Signal::SIGTERM),
                ]
            }
            Phase::Stopping { .. } if now >= self.kill_at() => {
                self.phase = Phase::Killed;
                vec![Action::SignalAll(Signal::SIGKILL)]
            }
            Phase::Draining { kill_at } if now >= kill_at => self.finish_stopped(),
            // Early or spurious: nothing is due yet.
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
