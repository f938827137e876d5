//! What the guard does to processes and signals that the safe APIs cannot express, each a
//! thin wrapper around system calls, and the only `unsafe` in the guard:
//!
//! - [`tie_to_guard`]: the command's parent-death signal, set in the child between `fork` and
//!   `exec` (Linux);
//! - [`Catch`]: a handler for every signal `run` forwards, by number (the real-time ones
//!   included), that writes the signal's number to the runner's self-pipe. One `sigaction`
//!   per signal and nothing else (why not a signal library's: see [`crate::signals`]);
//! - [`signal_group`]: a signal by number to a process group, for the real-time signals that
//!   the typed signal APIs do not name;
//! - [`stop_self`]: `run` stopping itself with a job-control signal's own default action, as
//!   a shell's job expects (`jobs` says "Stopped", not "Stopped (signal)");
//! - [`poll_child`], [`peek_zombie`], [`reap`]: `waitpid(2)` and `waitid(2)` by raw numbers,
//!   since a typed wait refuses (EINVAL) the status of a child killed by a real-time signal.
//!
//! Each `unsafe` block states why it is sound.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

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

/// The write end of the runner's self-pipe, for [`write_signal`]; -1 while nothing is caught.
static SELF_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The handler: writes the signal's number (one byte; signal numbers are below 128) to the
/// self-pipe. Only async-signal-safe calls: an atomic load, `write(2)`, and `errno` saved and
/// put back so that the interrupted code never sees it change.
extern "C" fn write_signal(signal: libc::c_int) {
    let pipe = SELF_PIPE.load(Ordering::Relaxed);
    if pipe < 0 {
        return;
    }
    let errno = nix::errno::Errno::last_raw();
    let byte = u8::try_from(signal).unwrap_or(0);
    // SAFETY: `byte` lives across the call, and one byte is written from it. A full or
    // closed pipe makes the write fail, which only loses a wake-up that is already pending.
    let _ = unsafe { libc::write(pipe, std::ptr::from_ref(&byte).cast(), 1) };
    nix::errno::Errno::set_raw(errno);
}

/// Signals caught by [`write_signal`] into a self-pipe, until dropped: then the actions they had
/// before are put back.
pub struct Catch {
    previous: Vec<(libc::c_int, libc::sigaction)>,
    /// Kept open for the handler as long as it may write.
    _pipe: OwnedFd,
}

impl Catch {
    /// Catches each of `signals`, writing its number to `pipe` (a non-blocking pipe's write
    /// end) when it comes. One catcher at a time.
    ///
    /// # Errors
    ///
    /// The system refused a handler; those installed before it are put back.
    pub fn start(signals: &[libc::c_int], pipe: OwnedFd) -> std::io::Result<Catch> {
        SELF_PIPE.store(pipe.as_raw_fd(), Ordering::Relaxed);
        let mut catch = Catch {
            previous: Vec::with_capacity(signals.len()),
            _pipe: pipe,
        };
        for &signal in signals {
            // SAFETY: `sigaction` is given a fully initialised action (zeroed, then the
            // handler, flags and an empty mask set) and a place for the old one; the handler
            // is `write_signal`, which is async-signal-safe.
            let previous = unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction =
                    write_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&raw mut action.sa_mask);
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, &raw const action, &raw mut previous) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                previous
            };
            catch.previous.push((signal, previous));
        }
        Ok(catch)
    }
}

impl Drop for Catch {
    fn drop(&mut self) {
        for (signal, previous) in self.previous.drain(..).rev() {
            // SAFETY: puts back an action that `sigaction` itself returned.
            let _ = unsafe { libc::sigaction(signal, &raw const previous, std::ptr::null_mut()) };
        }
        SELF_PIPE.store(-1, Ordering::Relaxed);
    }
}

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
    // previous action, put back below, is [`Catch`]'s.
    let Ok(previous) = (unsafe { sigaction(signal, &default) }) else {
        return;
    };
    let mut only = SigSet::empty();
    only.add(signal);
    let _ = only.thread_unblock();
    let _ = nix::sys::signal::raise(signal);
    // SAFETY: as above; this restores [`Catch`]'s handler as it was.
    let _ = unsafe { sigaction(signal, &previous) };
}

/// A child's state, as a non-blocking `waitpid(2)` reports it, by raw numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Nothing new.
    Running,
    /// It exited with this status.
    Exited(i32),
    /// Signal N killed it.
    Killed(i32),
    /// Signal N stopped it (reported only with `stops`).
    Stopped(i32),
}

/// What became of child `pid`, without waiting; with `stops`, a stop is reported too.
///
/// # Errors
///
/// The wait failed (`ECHILD`: it is not this process's child, or was reaped already).
pub fn poll_child(pid: Pid, stops: bool) -> std::io::Result<ChildState> {
    let flags = libc::WNOHANG | if stops { libc::WUNTRACED } else { 0 };
    let mut status: libc::c_int = 0;
    // SAFETY: `status` outlives the call, which writes one integer to it.
    let got = unsafe { libc::waitpid(pid.as_raw(), &raw mut status, flags) };
    if got < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(if got == 0 {
        ChildState::Running
    } else if libc::WIFEXITED(status) {
        ChildState::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ChildState::Killed(libc::WTERMSIG(status))
    } else if libc::WIFSTOPPED(status) {
        ChildState::Stopped(libc::WSTOPSIG(status))
    } else {
        ChildState::Running
    })
}

/// A zombie child of this process, left unreaped (`WNOWAIT`), if there is one.
#[cfg(target_os = "linux")]
pub fn peek_zombie() -> Option<Pid> {
    // SAFETY: a zeroed `siginfo_t` is a valid value of it; `waitid` fills it in, and `si_pid`
    // reads the field that `waitid` sets for every child it reports (0 when none is waitable).
    let pid = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_ALL, 0, &raw mut info, flags) != 0 {
            return None;
        }
        info.si_pid()
    };
    (pid > 0).then(|| Pid::from_raw(pid))
}

/// Reaps zombie child `pid` (`None`: any zombie child), without waiting. Whether one was
/// reaped.
pub fn reap(pid: Option<Pid>) -> bool {
    let mut status: libc::c_int = 0;
    let pid = pid.map_or(-1, Pid::as_raw);
    // SAFETY: as in `poll_child`.
    unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) > 0 }
}
