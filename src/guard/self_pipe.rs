//! The self-pipe that wakes `run`'s event loop: the handlers of every signal `run` forwards
//! write the signal's number to it ([`process::Catch`]), and the heartbeat thread a zero after
//! each report. Which signals, and why not the others, is [`crate::signals`]'s; the runner
//! forwards each to the command's process group, and follows the command through job control
//! (see [`super::runner`]).

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::error::{Error, Result};
use crate::signals::forwarded;

use super::process;

/// What wakes the event loop: one self-pipe, written by the signal handlers (each signal's
/// number) and by the heartbeat thread (a zero). Dropping it puts the signals' previous
/// actions back.
pub struct SelfPipe {
    read: UnixStream,
    /// The pipe's write end, for the heartbeat's copy.
    write: UnixStream,
    _catch: process::Catch,
}

impl SelfPipe {
    /// Installs the handlers of the [`forwarded`] signals and of SIGCHLD.
    ///
    /// # Errors
    ///
    /// [`Error::System`] when the pipe or a handler cannot be set up.
    pub fn start() -> Result<SelfPipe> {
        let failed = |err| Error::system("cannot set up signal handling", err);
        let (read, write) = UnixStream::pair().map_err(failed)?;
        read.set_nonblocking(true).map_err(failed)?;
        // A full pipe already wakes the loop: a writer never waits.
        write.set_nonblocking(true).map_err(failed)?;
        let mut signals = forwarded();
        signals.push(libc::SIGCHLD);
        let handlers = OwnedFd::from(write.try_clone().map_err(failed)?);
        let catch = process::Catch::start(&signals, handlers).map_err(failed)?;
        Ok(SelfPipe {
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
    pub fn waker(&self) -> Result<UnixStream> {
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
    /// it), emptying the pipe. SIGCHLD and the heartbeat's byte only wake the loop, which
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
