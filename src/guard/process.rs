//! The three things the guard does to processes that the safe APIs cannot express, each a thin
//! wrapper around one system call, and the only `unsafe` in the guard:
//!
//! - [`tie_to_guard`]: the command's parent-death signal, set in the child between `fork` and
//!   `exec` (Linux);
//! - [`signal_group`]: a signal by number to a process group, for the real-time signals that
//!   the typed signal APIs do not name;
//! - [`stop_self`]: `run` stopping itself with a job-control signal's own default action, as
//!   a shell's job expects (`jobs` says "Stopped", not "Stopped (signal)").
//!
//! Each `unsafe` block states why it is sound.
#![allow(unsafe_code)]

use std::process::Command;

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::unistd::Pid;

/// Makes the command die with `run` (Linux): SIGKILL reaches it when the guard dies, even of
/// SIGKILL or the OOM killer, so it cannot run on past the lease unguarded.
///
/// The signal is set in the child after `fork` and before `exec`. A guard that died before the
/// call left the child to another parent already, and the signal would never come: the child
/// then checks that its parent is still the guard and, if not, exits before the command
/// starts. The parent-death signal reaches the command's own process only; what the command
/// started is orphaned, not killed (see the README's "Guarantees and limits").
///
/// Setting a `pre_exec` hook makes the standard library start the command with `fork` rather
/// than `posix_spawn`; BENCHMARKS.md gives what that costs `run -- true`.
#[cfg(target_os = "linux")]
pub fn tie_to_guard(command: &mut Command) {
    use std::os::unix::process::CommandExt;

    let guard = nix::unistd::getpid();
    let hook = move || {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
        if nix::unistd::getppid() == guard {
            Ok(())
        } else {
            // The guard is gone: the command must not start.
            Err(std::io::ErrorKind::Other.into())
        }
    };
    // SAFETY: the hook runs in the forked child, where only async-signal-safe calls are
    // allowed. It makes two system calls (`prctl`, `getppid`) and allocates nothing: both
    // errors are plain error codes.
    unsafe {
        command.pre_exec(hook);
    }
}

/// Elsewhere there is no parent-death signal: a guard killed with SIGKILL leaves its command
/// running (the README says so).
#[cfg(not(target_os = "linux"))]
pub fn tie_to_guard(_command: &mut Command) {}

/// Sends signal number `signal` to process group `group`, as `killpg(2)` does; errors (the
/// group is gone) are ignored, as for every forwarded signal.
pub fn signal_group(group: Pid, signal: i32) {
    // SAFETY: `killpg` takes two integers and touches no memory of this process.
    let _ = unsafe { libc::killpg(group.as_raw(), signal) };
}

/// Stops `run` with `signal` (SIGTSTP, SIGTTIN or SIGTTOU) as its default action would, and
/// returns once `run` is continued (SIGCONT). `run`'s own handler for the signal, which
/// forwards it, is set aside meanwhile and put back afterwards.
///
/// In an orphaned process group the kernel discards these signals; `run` then does not stop
/// and this returns at once.
pub fn stop_self(signal: Signal) {
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing the default action runs no code of this process in a handler; the
    // previous action, put back below, is the one signal-hook installed and still owns.
    let Ok(previous) = (unsafe { sigaction(signal, &default) }) else {
        return;
    };
    let mut only = SigSet::empty();
    only.add(signal);
    let _ = only.thread_unblock();
    let _ = nix::sys::signal::raise(signal);
    // SAFETY: as above; this restores signal-hook's own handler as it was.
    let _ = unsafe { sigaction(signal, &previous) };
}
