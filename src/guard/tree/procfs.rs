//! The descendants of a process, as far as the tree is concerned: on Linux read from
//! `/proc/<pid>/stat`; elsewhere none are known, and [`super::Tree`] signals the process
//! group with `killpg`.
//!
//! One pass lists every process with its parent, process group and state, then follows the
//! parent links down from the root. A process that vanishes between the listing and the read
//! of its `stat` file is simply left out; unreadable entries are skipped, never an error.

#[cfg(target_os = "linux")]
use std::collections::HashMap;

use nix::unistd::Pid;

/// One process, as far as the tree is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Process {
    pub(super) pid: Pid,
    pub(super) group: Pid,
    /// Not a zombie.
    pub(super) live: bool,
}

/// Without `/proc` only the process group is known.
#[cfg(not(target_os = "linux"))]
pub(super) fn descendants(_root: Pid) -> Vec<Process> {
    Vec::new()
}

/// Every process whose parent chain leads to `root` (not `root` itself).
#[cfg(target_os = "linux")]
pub(super) fn descendants(root: Pid) -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all = entries.filter_map(|entry| {
        let entry = entry.ok()?;
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        parse_stat(pid, &stat)
    });
    below(root, all)
}

/// A process and its parent, from the text of its `stat` file.
#[cfg(target_os = "linux")]
#[derive(Clone)]
struct Entry {
    process: Process,
    parent: Pid,
}

/// Reads `stat` (see proc_pid_stat(5)): `pid (comm) state ppid pgrp …`. The command name may
/// hold spaces and parentheses, so the fields are counted from the *last* `)`.
#[cfg(target_os = "linux")]
fn parse_stat(pid: i32, stat: &str) -> Option<Entry> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let parent: i32 = fields.next()?.parse().ok()?;
    let group: i32 = fields.next()?.parse().ok()?;
    Some(Entry {
        process: Process {
            pid: Pid::from_raw(pid),
            group: Pid::from_raw(group),
            // Z: a zombie; X (x on old kernels): dead, being removed.
            live: !matches!(state, "Z" | "X" | "x"),
        },
        parent: Pid::from_raw(parent),
    })
}

/// The processes among `all` whose parent chain leads to `root`.
#[cfg(target_os = "linux")]
fn below(root: Pid, all: impl IntoIterator<Item = Entry>) -> Vec<Process> {
    let mut children: HashMap<Pid, Vec<Process>> = HashMap::new();
    for entry in all {
        children
            .entry(entry.parent)
            .or_default()
            .push(entry.process);
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(parent) = next.pop() {
        for process in children.remove(&parent).unwrap_or_default() {
            next.push(process.pid);
            found.push(process);
        }
    }
    found
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn entry(pid: i32, parent: i32, group: i32, live: bool) -> Entry {
        Entry {
            process: Process {
                pid: Pid::from_raw(pid),
                group: Pid::from_raw(group),
                live,
            },
            parent: Pid::from_raw(parent),
        }
    }

    fn pids(found: &[Process]) -> Vec<i32> {
        let mut pids: Vec<i32> = found.iter().map(|p| p.pid.as_raw()).collect();
        pids.sort_unstable();
        pids
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let parsed = parse_stat(42, "42 (a) b) (c) S 7 40 7 0 -1 4194560 …").expect("parsed");
        assert_eq!(parsed.parent, Pid::from_raw(7));
        assert_eq!(parsed.process.group, Pid::from_raw(40));
        assert!(parsed.process.live);
        let zombie = parse_stat(43, "43 (sleep) Z 1 43 1 0").expect("parsed");
        assert!(!zombie.process.live);
        assert!(parse_stat(44, "44 (truncated").is_none());
        assert!(parse_stat(45, "45 (x) S notanumber 1").is_none());
    }

    #[test]
    fn descendants_follow_parent_links_across_groups_and_only_from_the_root() {
        let all = [
            entry(10, 1, 10, true),   // run itself
            entry(11, 10, 11, true),  // the command
            entry(12, 11, 11, true),  // its child, in its group
            entry(13, 12, 13, true),  // setsid: a group of its own
            entry(14, 10, 14, false), // an orphan reparented to run, a zombie
            entry(15, 14, 14, true),
            entry(20, 1, 20, true),  // unrelated
            entry(21, 20, 11, true), // unrelated, even in the command's group number
        ];
        assert_eq!(
            pids(&below(Pid::from_raw(10), all.clone())),
            [11, 12, 13, 14, 15]
        );
        assert_eq!(pids(&below(Pid::from_raw(12), all)), [13]);
    }

    #[test]
    fn this_process_is_found_below_its_parent() {
        let me = nix::unistd::getpid();
        let found = descendants(nix::unistd::getppid());
        assert!(found.iter().any(|p| p.pid == me && p.live), "{found:?}");
    }
}
