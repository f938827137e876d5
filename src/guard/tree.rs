//! Everything the command started: its process group. The command leads a group of its own,
//! so `killpg` reaches what it started (a `sh -c` wrapper's children too).

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The command's process group.
pub struct Tree {
    /// The command's process group (its pid: it leads the group).
    group: Pid,
}

impl Tree {
    pub fn new(group: Pid) -> Tree {
        Tree { group }
    }

    /// Sends `signal` to the command's process group only.
    pub fn signal_group(&self, signal: Signal) {
        let _ = killpg(self.group, signal);
    }

    /// Sends `signal` to everything the command started.
    pub fn signal_all(&self, signal: Signal) {
        let _ = killpg(self.group, signal);
    }

    /// Whether anything the command started is still there.
    pub fn anything_left(&self) -> bool {
        killpg(self.group, None).is_ok()
    }
}
