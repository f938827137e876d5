//! What `/proc` says about a pid: whether the process still runs, its `stat` fields, its
//! children; the pid files that test commands write; and killing what a failing test leaves
//! running. Linux only, as the suite is.

use std::fs;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::files::read_number;
use super::process::{wait_for, wait_until};

/// The fields of `/proc/PID/stat` after the command name: state, ppid, pgrp, session, …
/// (`None` when there is no such process). The name is skipped by its last `)`: it may hold
/// anything.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Where a process stands: its parent, its process group, its session, and the foreground
/// process group of its controlling terminal (`-1` without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    pub tpgid: i32,
}

/// The [`Ids`] of `pid`, or `None` when there is no such process.
pub fn ids_of(pid: i32) -> Option<Ids> {
    let fields = stat_fields(pid)?;
    let field = |i: usize| fields.get(i)?.parse().ok();
    Some(Ids {
        ppid: field(1)?,
        pgrp: field(2)?,
        session: field(3)?,
        tpgid: field(5)?,
    })
}

/// The state letter of `pid` (`R`, `S`, `D`, `T` stopped, `t` traced, `Z` zombie, …), or
/// `None` when there is no such process.
pub fn state_of(pid: i32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// A process no longer runs: it does not exist, or it is a zombie (`Z`, or `X` on its way
/// out). A zombie is dead for every purpose of these tests — it holds no lock and runs no
/// code — but `kill(pid, 0)` still finds it until its parent (for an orphan, init or a
/// subreaper, whenever it gets to it) reaps it.
pub fn is_gone(pid: i32) -> bool {
    stat_fields(pid).is_none_or(|fields| matches!(fields[0].as_str(), "Z" | "X"))
}

/// Polls until every process in `pids` is gone; returns whether they all went within `limit`.
pub fn all_gone_within(pids: &[i32], limit: Duration) -> bool {
    wait_for(limit, || pids.iter().all(|&pid| is_gone(pid)))
}

/// The direct children of `pid`, from every thread's `children` list.
pub fn children_of(pid: Pid) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        if let Ok(list) = fs::read_to_string(task.path().join("children")) {
            children.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// The pid a command wrote to `path`, once the whole line is there (a command that cannot
/// afford a process to rename the file, under a task limit, writes it in place: it may be seen
/// empty at first); fails the test if it does not appear within `limit`.
pub fn pid_in(path: &Path, limit: Duration) -> i32 {
    wait_until(limit, &format!("a pid in {}", path.display()), || {
        fs::read_to_string(path).is_ok_and(|text| text.ends_with('\n'))
    });
    let pid = read_number(path);
    i32::try_from(pid).unwrap_or_else(|_| panic!("{} holds {pid}, not a pid", path.display()))
}

/// Kills the listed processes when dropped, so that a failing test leaves no long `sleep`
/// behind. Each pid is one the test saw running (and, for the sleeps in these tests, outliving
/// the test's checks is the failure being reported).
pub struct KillOnDrop(pub Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if !is_gone(pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}
