//! The signals `run` takes while its command runs, and the self-pipe that wakes the runner's
//! event loop.
//!
//! `run` catches every signal it can, so that none ends the guard and leaves its command
//! running unguarded (contract, "`run`, the exec guard", item 4). The runner forwards each to
//! the command's process group; the job-control signals are forwarded too, and the runner
//! then follows the command (see [`super::runner`]). Not caught, each for its reason:
//! - SIGKILL and SIGSTOP cannot be;
//! - SIGSEGV, SIGBUS, SIGILL and SIGFPE report a fault in `run` itself, whose default action
//!   is the only safe one; the command then dies with the guard through its parent-death
//!   signal (Linux);
//! - SIGCHLD is `run`'s own news of its command: it wakes the loop and is not forwarded;
//! - SIGPIPE and SIGXFSZ are already harmless: ignored (Rust's runtime) and handled (`main`),
//!   so that a write fails with an error instead; forwarding them would hand the command
//!   signals that `run`'s own writes raised.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::error::{Error, Result};

use super::process;

/// Not forwarded: see the module's doc.
const KEPT: [i32; 9] = [
    libc::SIGKILL,
    libc::SIGSTOP,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGCHLD,
    libc::SIGPIPE,
    libc::SIGXFSZ,
];

/// The highest signal number with a name of its own (31 on Linux and the BSDs, 31 on macOS).
const LAST_NAMED: i32 = 31;

/// Every signal `run` forwards to its command, by number: the named ones but those it keeps
/// ([`KEPT`]), and on Linux the real-time signals from `SIGRTMIN` to `SIGRTMAX` (the C
/// library keeps the two below `SIGRTMIN` for itself).
pub fn forwarded() -> Vec<i32> {
    let named = (1..=LAST_NAMED).filter(|signal| !KEPT.contains(signal));
    #[cfg(target_os = "linux")]
    let realtime = libc::SIGRTMIN()..=libc::SIGRTMAX();
    #[cfg(not(target_os = "linux"))]
    let realtime = 0..=-1;
    named.chain(realtime).collect()
}

/// What wakes the event loop: one self-pipe, written by the signal handlers (each signal's
/// number) and by the heartbeat thread (a zero). Dropping it puts the signals' previous
/// actions back.
pub struct Wakeups {
    read: UnixStream,
    /// The pipe's write end, for the heartbeat's copy.
    write: UnixStream,
    _catch: process::Catch,
}

impl Wakeups {
    /// Installs the handlers of the [`forwarded`] signals and of SIGCHLD.
    ///
    /// # Errors
    ///
    /// [`Error::System`] when the pipe or a handler cannot be set up.
    pub fn start() -> Result<Wakeups> {
        let failed = |err| Error::system("cannot set up signal handling", err);
        let (read, write) = UnixStream::pair().map_err(failed)?;
        read.set_nonblocking(true).map_err(failed)?;
        // A full pipe already wakes the loop: a writer never waits.
        write.set_nonblocking(true).map_err(failed)?;
        let mut signals = forwarded();
        signals.push(libc::SIGCHLD);
        let handlers = OwnedFd::from(write.try_clone().map_err(failed)?);
        let catch = process::Catch::start(&signals, handlers).map_err(failed)?;
        Ok(Wakeups {
            read,
            write,
            _catch: catch,
        })
    }

    /// A write end for the heartbeat, which writes a byte after each report.
    ///
    /// # Errors
    ///
    /// [`Error::System`] when the descriptor cannot be duplicated.
    pub fn bell(&self) -> Result<UnixStream> {
        self.write
            .try_clone()
            .map_err(|err| Error::system("cannot set up signal handling", err))
    }

    /// Sleeps until something was written to the pipe, a signal interrupts, or `timeout`
    /// passes (`None`: no timeout).
    pub fn sleep(&self, timeout: Option<Duration>) {
        let timeout = timeout.map_or(PollTimeout::NONE, |timeout| {
            // Rounded up: waking before the deadline would only loop once more.
            let millis = timeout.as_micros().div_ceil(1000);
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
        });
        let mut fds = [PollFd::new(self.read.as_fd(), PollFlags::POLLIN)];
        // EINTR is a wake-up like any other; the caller looks at everything anyway.
        let _ = poll(&mut fds, timeout);
    }

    /// The forwarded signals that arrived since the last call, in the order they came (a
    /// signal sent twice before the loop looked counts once, as the kernel itself merges
    /// it), emptying the pipe. SIGCHLD and the heartbeat's bell only wake the loop, which
    /// then asks after the command and the heartbeat itself.
    pub fn signals(&mut self) -> Vec<i32> {
        let mut arrived = Vec::new();
        let mut buffer = [0u8; 256];
        while let Ok(read) = (&self.read).read(&mut buffer) {
            if read == 0 {
                break;
            }
            for &byte in &buffer[..read] {
                let signal = i32::from(byte);
                if signal != 0 && signal != libc::SIGCHLD && !arrived.contains(&signal) {
                    arrived.push(signal);
                }
            }
        }
        arrived
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catchable_signal_is_forwarded_but_faults_chld_pipe_and_xfsz() {
        let forwarded = forwarded();
        let named = [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTRAP,
            libc::SIGABRT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGALRM,
            libc::SIGTERM,
            libc::SIGCONT,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGURG,
            libc::SIGXCPU,
            libc::SIGVTALRM,
            libc::SIGPROF,
            libc::SIGWINCH,
            libc::SIGSYS,
        ];
        for signal in named {
            assert!(forwarded.contains(&signal), "{signal} is not forwarded");
        }
        #[cfg(target_os = "linux")]
        for signal in [
            libc::SIGSTKFLT,
            libc::SIGPWR,
            libc::SIGRTMIN(),
            libc::SIGRTMAX(),
        ] {
            assert!(forwarded.contains(&signal), "{signal} is not forwarded");
        }
        for signal in KEPT {
            assert!(!forwarded.contains(&signal), "{signal} is forwarded");
        }
        // Every one fits in the byte the handler writes.
        assert!(forwarded.iter().all(|&signal| (1..128).contains(&signal)));
        // The C library's own real-time signals are left alone.
        #[cfg(target_os = "linux")]
        assert!(!forwarded.contains(&(libc::SIGRTMIN() - 1)));
        let mut sorted = forwarded.clone();
        sorted.dedup();
        assert_eq!(sorted, forwarded, "each signal once, in order");
    }
}
