//! Everything the command started: its process group and, on Linux, every descendant of `run`,
//! also those that left the group (`setsid`, double-forked daemons).
//!
//! On Linux `run` makes itself the *child subreaper* of its command before starting it, so an
//! orphaned descendant is reparented to `run` instead of init: every process the command
//! started keeps a parent chain that leads to `run`, and can be found by walking `/proc`. The
//! zombies of those orphans are `run`'s to reap.
//!
//! Invariants:
//! - `run` starts no process other than its command, so every descendant of `run` is
//!   something the command started;
//! - while the command runs, orphans are reaped as they end by their own pids
//!   ([`reap_orphans_but`]), never with a wait that could collect the command's status; once
//!   that status is known, [`reap_orphans`] takes what is left.
//!
//! Elsewhere (other Unix systems) "everything" is the command's process group: there is no
//! subreaper, so orphans go to init and leave no zombies with `run`.
//!
//! A pid read from `/proc` may be gone, and in theory reused, by the time it is signalled.

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

mod procfs;

use procfs::descendants;

/// How many times the descendants are looked up again for processes forked meanwhile.
const ROUNDS: usize = 8;

/// Makes `run` the subreaper of what it starts from now on.
///
/// # Errors
///
/// The kernel refused (`prctl`).
#[cfg(target_os = "linux")]
pub fn adopt_orphans() -> Result<(), Errno> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Without a subreaper, orphans go to init; [`Tree`] then reaches the process group only.
///
/// # Errors
///
/// None: the signature is the Linux one's.
#[cfg(not(target_os = "linux"))]
pub fn adopt_orphans() -> Result<(), Errno> {
    Ok(())
}

/// Reaps the zombies among `run`'s children but `command`, without waiting: each is looked at
/// first (`WNOWAIT`) and reaped by its own pid, so the command's status stays for its own
/// `waitpid`. Stops at the command's zombie, which the caller then collects.
#[cfg(target_os = "linux")]
pub fn reap_orphans_but(command: Pid) {
    while let Some(pid) = super::process::peek_zombie() {
        if pid == command || !super::process::reap(Some(pid)) {
            break;
        }
    }
}

/// Without a subreaper no orphan is `run`'s to reap.
#[cfg(not(target_os = "linux"))]
pub fn reap_orphans_but(_command: Pid) {}

/// Reaps every zombie child of `run`, without waiting. Only once the command's own status is
/// known (see the module note).
pub fn reap_orphans() {
    while super::process::reap(None) {}
}

/// The command's process group and what else it started.
pub struct Tree {
    /// The command's process group (its pid: it leads the group).
    group: Pid,
    /// `run` itself, the root of the parent chains.
    root: Pid,
}

impl Tree {
    pub fn new(group: Pid) -> Tree {
        Tree {
            group,
            root: nix::unistd::getpid(),
        }
    }

    /// Sends signal number `signal` to the command's process group only.
    pub fn signal_group(&self, signal: i32) {
        super::process::signal_group(self.group, signal);
    }

    /// Sends `signal` to the process group and to every live descendant of `run` outside it,
    /// looking again while new ones appear. SIGKILL goes to every descendant, in the group
    /// or not, round after round, so nothing forked meanwhile is missed; other signals reach
    /// each process once (the group through `killpg`). SIGTERM is followed by SIGCONT to all
    /// of them, as `timeout(1)` does, so that a stopped process acts on it.
    pub fn signal_all(&self, signal: Signal) {
        self.signal_all_once(signal);
        if signal == Signal::SIGTERM {
            self.signal_all_once(Signal::SIGCONT);
        }
    }

    fn signal_all_once(&self, signal: Signal) {
        let _ = killpg(self.group, signal);
        let mut sent = std::collections::HashSet::new();
        for _ in 0..ROUNDS {
            let fresh: Vec<Pid> = descendants(self.root)
                .into_iter()
                .filter(|p| p.live && (every_round(signal) || p.group != self.group))
                .map(|p| p.pid)
                .filter(|&pid| sent.insert(pid))
                .collect();
            if fresh.is_empty() {
                break;
            }
            for pid in fresh {
                let _ = kill(pid, signal);
            }
            if every_round(signal) {
                let _ = killpg(self.group, signal);
            }
        }
    }

    /// Whether anything the command started is still running (zombies do not count).
    pub fn anything_left(&self) -> bool {
        if cfg!(target_os = "linux") {
            descendants(self.root).iter().any(|p| p.live)
        } else {
            killpg(self.group, None).is_ok()
        }
    }
}

/// SIGKILL and SIGSTOP go to every descendant, in the group or not, round after round, so that
/// nothing forked meanwhile escapes them (a stopped job must not run on beside its stopped
/// guard).
fn every_round(signal: Signal) -> bool {
    matches!(signal, Signal::SIGKILL | Signal::SIGSTOP)
}
