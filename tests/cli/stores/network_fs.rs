//! A SQLite store on a network filesystem is refused (contract, "Store faults"): every command
//! exits 74 with one line that names the filesystem and the ways out, and makes nothing there;
//! `DISTLOCK_ALLOW_NETWORK_FS=1` opens it all the same. The filesystem is a real FUSE mount
//! (bindfs over a scratch folder), which distlock refuses as it refuses NFS or SMB; the other
//! filesystems are told by the magic numbers of the unit table (`store::network_fs`).
//!
//! Without a FUSE mount (no `/dev/fuse`, no bindfs, a container that may not mount) the test is
//! skipped by the gate (`common::require`, tool `FUSE`); `DISTLOCK_TEST_REQUIRE_FUSE` makes that
//! a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::files::names_in;
use crate::common::output::{assert_store_error, assert_usage_error, parse_line};
use crate::common::process::describe;
use crate::common::require::require;
use crate::common::store::distlock_at;

const ALLOW: &str = "DISTLOCK_ALLOW_NETWORK_FS";

/// A bindfs mount of one folder over another, unmounted when dropped.
struct Bindfs {
    mount: PathBuf,
}

impl Bindfs {
    /// Mounts `source` at `mount` with bindfs. `None` when FUSE cannot mount here: skipped by
    /// the gate.
    fn mount(source: &Path, mount: &Path) -> Option<Bindfs> {
        let mounted = if Path::new("/dev/fuse").exists() {
            match Command::new("bindfs").arg(source).arg(mount).output() {
                Ok(out) if out.status.success() => Ok(Bindfs {
                    mount: mount.to_owned(),
                }),
                Ok(out) => Err(format!("bindfs failed: {}", describe(&out))),
                Err(err) => Err(format!(
                    "bindfs cannot run ({err}); apt-get install bindfs fuse3"
                )),
            }
        } else {
            Err("there is no /dev/fuse".to_owned())
        };
        require("FUSE", "SQLite on a network filesystem", mounted)
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        for unmount in [
            &["fusermount3", "-u"][..],
            &["fusermount", "-u"],
            &["umount", "-l"],
        ] {
            let done = Command::new(unmount[0])
                .args(&unmount[1..])
                .arg(&self.mount)
                .output()
                .is_ok_and(|out| out.status.success());
            if done {
                return;
            }
        }
        eprintln!("note: {} is still mounted", self.mount.display());
    }
}

/// Runs `distlock --db DB ARGS…`, with `DISTLOCK_ALLOW_NETWORK_FS` set to `allow` (or unset).
fn run_allowing(db: &Path, allow: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut cmd = distlock_at(db);
    cmd.args(args);
    if let Some(allow) = allow {
        cmd.env(ALLOW, allow);
    }
    cmd.output().expect("distlock")
}

#[test]
fn a_sqlite_store_on_a_fuse_mount_is_refused_by_every_command_unless_allowed() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let source = scratch.path().join("source");
    let mount = scratch.path().join("mount");
    for dir in [&source, &mount] {
        std::fs::create_dir(dir).expect("a folder");
    }
    // Dropped before `scratch`: unmounted before its folders are removed.
    let Some(_fuse) = Bindfs::mount(&source, &mount) else {
        return;
    };
    let marker = scratch.path().join("ran");
    let marker_arg = marker.to_str().expect("utf-8");
    let every_command: [&[&str]; 9] = [
        &["acquire", "deploy", "--owner", "o", "--ttl", "30"],
        &["run", "--resource", "deploy", "--", "touch", marker_arg],
        &["status", "deploy"],
        &["list"],
        &["log"],
        &["release", "deploy", "--owner", "o"],
        &["renew", "deploy", "--owner", "o", "--ttl", "30"],
        &["break", "deploy", "--reason", "test"],
        &["gc"],
    ];
    let refused = |db: &Path, allow: Option<&str>, args: &[&str]| {
        let out = run_allowing(db, allow, args);
        let line = assert_store_error(&out, &(db, allow, args));
        for said in [
            &format!("cannot use {} as a store", db.display()),
            "a FUSE filesystem (fuse)",
            "two hosts could both get a lock",
            "PostgreSQL",
            "distlock server",
            "DISTLOCK_ALLOW_NETWORK_FS=1",
        ] {
            assert!(line.contains(said), "{args:?}: {said:?} not in {line}");
        }
    };

    // A store not made yet, in the mount and in folders not made yet under it; "0" and empty
    // are as unset.
    // A link outside the mount that names a store not made yet inside it, directly, through a
    // relative link, and through a chain of two.
    let link = scratch.path().join("link.db");
    std::os::unix::fs::symlink(mount.join("linked.db"), &link).expect("a link");
    let relative = scratch.path().join("relative.db");
    std::os::unix::fs::symlink("mount/relative.db", &relative).expect("a link");
    let chain = scratch.path().join("chain.db");
    std::os::unix::fs::symlink("link.db", &chain).expect("a link");
    for db in [
        mount.join("locks.db"),
        mount.join("state/distlock/locks.db"),
        link,
        relative,
        chain,
    ] {
        for allow in [None, Some("0"), Some("")] {
            for args in every_command {
                refused(&db, allow, args);
            }
        }
        assert!(
            names_in(&source).is_empty(),
            "made: {:?}",
            names_in(&source)
        );
        assert!(!marker.exists(), "run ran its command");
    }

    // Allowed, the store is made there and works.
    let db = mount.join("locks.db");
    let allowed = |args: &[&str]| {
        let out = run_allowing(&db, Some("1"), args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
        out
    };
    let acquired = parse_line(&allowed(every_command[0]).stdout);
    assert_eq!(acquired["acquired"], true, "{acquired}");
    let status = parse_line(&allowed(&["status", "deploy"]).stdout);
    assert_eq!(status["held"], true, "{status}");
    allowed(&["release", "deploy", "--owner", "o"]);
    allowed(every_command[1]);
    assert!(marker.exists(), "run did not run its command");
    assert!(names_in(&source).contains(&"locks.db".to_owned()));

    // The store that is there now is refused all the same without the allowance, and left as
    // it was.
    let before: Vec<(String, Vec<u8>)> = names_in(&source)
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(source.join(&name)).expect("read");
            (name, bytes)
        })
        .collect();
    for args in every_command {
        refused(&db, None, args);
    }
    let after: Vec<(String, Vec<u8>)> = names_in(&source)
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(source.join(&name)).expect("read");
            (name, bytes)
        })
        .collect();
    assert!(before == after, "the refused commands changed the store");
}

#[test]
fn an_allowance_that_is_neither_1_nor_0_is_a_usage_error_and_makes_nothing() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let db = scratch.path().join("locks.db");
    for value in ["yes", "true", "2", " 1", "1 "] {
        for args in [
            &["acquire", "r", "--owner", "o", "--ttl", "30"][..],
            &["status", "r"],
            &["run", "--resource", "r", "--", "true"],
        ] {
            let out = run_allowing(&db, Some(value), args);
            assert_usage_error(&out, &(value, args));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.starts_with("distlock: DISTLOCK_ALLOW_NETWORK_FS must be 1 ")
                    && stderr.contains(&format!("{value:?}"))
                    && stderr.lines().count() == 1,
                "{value:?} {args:?}: {stderr}"
            );
        }
    }
    assert!(
        names_in(scratch.path()).is_empty(),
        "made: {:?}",
        names_in(scratch.path())
    );
    // On a local filesystem the allowance changes nothing.
    for allow in [None, Some("1"), Some("0")] {
        let out = run_allowing(&db, allow, &["acquire", "r", "--owner", "o", "--ttl", "30"]);
        assert_eq!(out.status.code(), Some(0), "{allow:?}: {}", describe(&out));
        let out = run_allowing(&db, allow, &["release", "r", "--owner", "o"]);
        assert_eq!(out.status.code(), Some(0), "{allow:?}: {}", describe(&out));
    }
}
