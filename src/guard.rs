//! `run`, the exec guard: acquire, run the command, keep the lease alive, stop the command if
//! the lease is lost, forward signals, release, and pass the command's exit status through.
//!
//! Who owns what:
//! - this module: the lock's tenure. It acquires, hands the command to the runner, and
//!   releases this run's own tenure (owner and fence) on every path once the lock is taken —
//!   also when guarding could not start ([`crate::error::Error::System`]) — except when it
//!   joined a tenure the same owner took with `acquire`. The tenure it takes itself is guarded:
//!   nobody joins it, so another `run` or an `acquire` of the same owner finds it busy;
//! - [`supervisor`]: every decision once the command runs, as a pure state machine (events
//!   and the current instant in, actions out);
//! - [`runner`]: the event loop that carries those decisions out, through [`self_pipe`] (every
//!   catchable signal, and the heartbeat's reports, wake it), [`spawn`] (the command started as
//!   `execvp` starts it, tied to the guard by [`process`]) and [`terminal`] (job control);
//! - [`heartbeat`]: renewing every ttl/3 on a store connection of its own;
//! - [`job`]: the command and its lock, as the runner and the heartbeat both see them;
//! - [`tree`]: "everything the command started", its process group and (on Linux) every
//!   descendant, found through `/proc` with `run` as their subreaper.
//!
//! Invariant: while renewals fail, the command is SIGKILLed no later than `lease_end - margin`,
//! where `lease_end` is measured from *before* the last successful renewal (or the acquire) was
//! sent. The lease cannot have started earlier than that instant, so the command is gone
//! before any other owner can take the lock, even while the store is unreachable.

mod heartbeat;
mod job;
mod process;
mod runner;
mod self_pipe;
mod spawn;
mod supervisor;
mod terminal;
mod tree;

use supervisor::Stop;

use std::ffi::OsString;
use std::time::Duration;

use crate::answer::{Answer, ShapedAcquire};
use crate::engine::Request;
use crate::error::Result;
use crate::exit::Exit;
use crate::lock::{Grant, Lock, Members, Mode, Owner, Remark, SetAcquire, Ttl};
use crate::output::{StatusLine, warn};
use crate::store::{self, Location, LockStore, Locks, op};
use crate::wait;

/// What to run, under which lock: the command line's `run`, as plain values.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The resource, or a lock set's members (taken all at once).
    pub members: Members,
    /// `None`: a name unique to this process.
    pub owner: Option<Owner>,
    pub ttl: Ttl,
    pub wait: Option<Duration>,
    /// Exclusive, shared, or one of N.
    pub mode: Mode,
    /// Why or for whom the lock is held.
    pub note: Option<Remark>,
    /// Exit with this instead of 75 when the lock is busy.
    pub conflict_exit_code: Option<u8>,
    /// Between SIGTERM and SIGKILL when the command must be stopped.
    pub kill_after: Duration,
    /// `--hold-at-least`: keep the lock until the tenure's start + this, however soon the
    /// command ends (not after a lost lease).
    pub hold_at_least: Option<Duration>,
    /// `--max-runtime`: stop a command still running this long after it started (exit 124).
    pub max_runtime: Option<Duration>,
    /// The program and its arguments; never empty.
    pub command: Vec<OsString>,
}

/// Runs `args.command` under the lock on `args.members` (one resource, or a lock set).
///
/// # Errors
///
/// Store failures before the command starts, and the operating system refusing what guarding
/// needs (a thread, signal forwarding) — both exit 74, the lock released. Once the command
/// runs, store trouble is handled here: renewals retry, and the command is stopped before the
/// lease could expire.
pub fn run(location: &Location, args: RunSpec) -> Result<Exit> {
    let owner = args.owner.clone().unwrap_or_else(Owner::unique_for_process);
    // Every signal is caught from here to the exit: one that comes as the lock is granted, or
    // while it is released, is never lost nor ends `run` with the lock held; the command gets
    // those that came before it started as soon as it runs.
    let mut self_pipe = self_pipe::SelfPipe::start()?;
    let mut store = store::open(location, store::Access::Create)?;
    let request = Request {
        owner: owner.clone(),
        ttl: args.ttl,
        mode: args.mode,
        note: args.note.clone(),
        waits: false,
        // The tenure this run takes is its own: nobody joins it, not even its owner.
        guarded: true,
    };
    let granted = match take(store.as_mut(), &args, &request)? {
        Ok(granted) => granted,
        Err(exit) => return Ok(exit),
    };
    let job = job::Job {
        location,
        members: &args.members,
        locks: &granted.locks,
        ttl: args.ttl,
        kill_after: args.kill_after,
        lease_end: granted.started + args.ttl.as_duration(),
        command: &args.command,
        max_runtime: args.max_runtime,
    };
    // While the command runs, the store may do what it would otherwise do as `run` exits.
    let supervised = runner::supervise(&job, &mut self_pipe, &mut || {
        let _ = store.perform(op::Tidy);
    });
    // On every path, the command's end or a failure to start guarding it alike, this run
    // lets go of its own tenures (owner and fence) only — harmless after a lost lease: the
    // store refuses if someone else holds it, and frees it early if renewals merely failed.
    // Joining a tenure this owner took with `acquire` (a script's `acquire --owner X`, then
    // steps with `run --owner X`) keeps it alive while the step runs, and leaves it held
    // afterwards: only such a tenure is ever extended for a guarded request.
    let own = (args.members).only(|at| granted.tenures.get(at) == Some(&Grant::New));
    if let Some(own) = own {
        // The hold is for a job that ran: not for one that never started (126, 127, a
        // failure to start guarding it), which would keep the whole fleet from the period's
        // run, and not after a lost lease, which is no longer this run's to keep.
        let ran = matches!(&supervised, Ok(s) if s.started && s.stopped != Some(Stop::LeaseLost));
        // A store that lost its connection meanwhile is sought again while the lease lasts,
        // so that a job that finished while its server was away is released once it is back.
        let lease_end = supervised.as_ref().map_or(job.lease_end, |s| s.lease_end);
        let ending = op::Finish {
            fences: (granted.locks.iter())
                .filter(|lock| own.as_slice().contains(&lock.resource))
                .map(|lock| lock.fence)
                .collect(),
            members: own,
            owner,
            hold: args.hold_at_least.filter(|_| ran),
            until: Some(lease_end),
        };
        finish(store.as_mut(), ending);
    }
    supervised.map(|s| s.exit)
}

/// The locks a run was granted: one, or a lock set's by resource, each with how it came about,
/// and when the grant was asked for at the latest.
struct Granted {
    locks: Vec<Lock>,
    tenures: Vec<Grant>,
    started: std::time::Instant,
}

/// Acquires (or waits for) the run's lock or lock set; a refusal is the exit to end with,
/// after its line on stderr.
fn take(
    store: &mut dyn LockStore,
    args: &RunSpec,
    request: &Request,
) -> Result<std::result::Result<Granted, Exit>> {
    let members = &args.members;
    let mut on_busy = StatusLine::reporter(args.wait, &members.listed());
    let waited = wait::acquire(store, members, request, args.wait, &mut on_busy)?;
    drop(on_busy);
    let attempt = match waited.attempt(&members.listed()) {
        Ok(attempt) => attempt,
        Err(interrupted) => return Ok(Err(interrupted)),
    };
    Ok(match attempt.outcome {
        SetAcquire::Acquired { locks, tenures } => Ok(Granted {
            locks,
            tenures,
            started: attempt.started,
        }),
        refused => Err(refusal(
            &ShapedAcquire::new(members.shape(), members, &refused, args.mode),
            args.conflict_exit_code,
        )),
    })
}

/// The exit of a run whose lock was refused, after its line on stderr: a mismatch is a
/// configuration error, never skipped quietly; a busy lock exits with `--conflict-exit-code`
/// when one is given, silently.
fn refusal(answer: &impl Answer, conflict_exit_code: Option<u8>) -> Exit {
    match answer.exit() {
        Exit::Mismatch => {
            warn(format_args!("{}", answer.text()));
            Exit::Mismatch
        }
        Exit::Busy if conflict_exit_code.is_some() => {
            Exit::Child(conflict_exit_code.unwrap_or_default())
        }
        exit => {
            warn(format_args!(
                "{}",
                answer.text().trim_start_matches("busy: ")
            ));
            exit
        }
    }
}

/// Ends this run's own tenures only (owner and fence): each released, or kept until its
/// start plus the hold, a lock set's members each on their own (a member already lost leaves
/// the others to be let go); says so on stderr if that fails.
fn finish(store: &mut dyn LockStore, ending: op::Finish) {
    let names = ending.members.listed();
    if let Err(err) = store.perform(ending) {
        warn(format_args!("cannot release the lock on {names}: {err}"));
    }
}
