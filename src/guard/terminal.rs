//! The controlling terminal, handed to the command's process group while it runs, so that an
//! interactive command reads from it and gets ^C and ^Z directly, as a shell's foreground job
//! does; taken back when `run` suspends itself (job control) and when it is dropped, on every
//! path.
//!
//! `run` hands the terminal over only while it is itself in the foreground: started in the
//! background (`&`, or continued with `bg`), it leaves the terminal to the shell, and a command
//! that reads from it stops on SIGTTIN, which `run` then follows.

use std::io::IsTerminal;

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

pub struct Terminal {
    /// The command's process group.
    group: Pid,
    /// `run`'s own process group, the shell's job.
    ours: Pid,
    /// The command's group has the terminal from `run`.
    handed: bool,
}

impl Terminal {
    /// The terminal of a command running in process group `group`, not handed over yet.
    pub fn new(group: Pid) -> Terminal {
        Terminal {
            group,
            ours: getpgrp(),
            handed: false,
        }
    }

    /// Hands the terminal to the command's group if `run`'s group has it (standard input is
    /// the terminal and `run` is in the foreground). Whether it did.
    pub fn hand_over(&mut self) -> bool {
        let stdin = std::io::stdin();
        let in_foreground = stdin.is_terminal()
            && tcgetpgrp(&stdin).is_ok_and(|foreground| foreground == self.ours);
        if in_foreground && tcsetpgrp(&stdin, self.group).is_ok() {
            self.handed = true;
        }
        self.handed
    }

    /// Whether the command's group has the terminal from `run`: an interactive job.
    pub fn handed(&self) -> bool {
        self.handed
    }

    /// Takes the terminal back for `run`'s group, if it was handed over.
    pub fn take_back(&mut self) {
        if !std::mem::take(&mut self.handed) {
            return;
        }
        // Taking the terminal from the background raises SIGTTOU unless it is blocked.
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let _ = ttou.thread_block();
        let _ = tcsetpgrp(std::io::stdin(), self.ours);
        let _ = ttou.thread_unblock();
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.take_back();
    }
}
