//! Whether a SQLite store would lie on a network filesystem, where distlock refuses it: SQLite
//! in WAL mode keeps its locks in the `-shm` index, memory that every process using the file
//! maps and shares. Processes on two hosts map two copies that never meet, so both could take
//! the same lock, and the file itself can be corrupted.
//!
//! The filesystem is the one `statfs` reports for the file, or for the nearest folder on its
//! path that exists: a store not made yet lies where its folders would be made. On Linux the
//! kernel tells a filesystem by a magic number ([`magic`]); macOS and FreeBSD name it
//! ([`named`]); elsewhere nothing is refused.

use std::path::Path;

#[cfg(target_os = "linux")]
mod magic;
#[cfg(any(target_os = "macos", target_os = "freebsd", test))]
mod named;

/// The kernel's name for the type of the network filesystem that holds `path`, or would hold
/// it once it is made (`nfs`, `cifs`, `fuse`, …); `None` for a local filesystem, and where
/// `statfs` cannot tell (a folder this user may not search: opening the store then says what
/// is wrong).
pub fn network_filesystem(path: &Path) -> Option<&'static str> {
    judge(path, 0)
}

/// The most symbolic links followed from a path to where its store would be made, as the
/// kernel's own limit (`ELOOP`).
const MAX_LINKS: usize = 40;

/// [`network_filesystem`], `links` symbolic links deep. A link that names nothing yet (the
/// store is made where it points) is judged by where it points, not by the folder it is in.
fn judge(path: &Path, links: usize) -> Option<&'static str> {
    for at in path.ancestors() {
        // A relative path's last ancestor is the empty path: the current folder.
        let at = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            at
        };
        match type_at(at) {
            Ok(network) => return network,
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => {
                if let Ok(target) = std::fs::read_link(at) {
                    if links >= MAX_LINKS {
                        return None;
                    }
                    let beside = at.parent().unwrap_or(Path::new("."));
                    let pointed = beside.join(target);
                    // What the path names below the link (joining an empty rest would add a
                    // trailing slash, which makes the kernel follow the link itself).
                    let pointed = match path.strip_prefix(at) {
                        Ok(rest) if !rest.as_os_str().is_empty() => pointed.join(rest),
                        _ => pointed,
                    };
                    return judge(&pointed, links + 1);
                }
            }
            Err(_) => return None,
        }
    }
    None
}

/// Whether `name`, from this module's tables, is a FUSE filesystem's: its daemon may reach
/// another host (sshfs, GlusterFS) or only this one (bindfs), which distlock cannot tell apart.
pub fn is_fuse(name: &str) -> bool {
    name.contains("fuse")
}

#[cfg(target_os = "linux")]
fn type_at(path: &Path) -> nix::Result<Option<&'static str>> {
    let fs = nix::sys::statfs::statfs(path)?;
    Ok(magic::network(magic::of(fs.filesystem_type().0)))
}

#[cfg(any(target_os = "macos", target_os = "freebsd"))]
fn type_at(path: &Path) -> nix::Result<Option<&'static str>> {
    let fs = nix::sys::statfs::statfs(path)?;
    Ok(named::network(fs.filesystem_type_name()))
}

#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "freebsd")))]
fn type_at(_: &Path) -> nix::Result<Option<&'static str>> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_not_made_yet_is_judged_by_its_nearest_folder_and_a_local_one_passes() {
        let dir = tempfile::tempdir().unwrap();
        // The test's scratch folder is local (a network TMPDIR would fail this test, and
        // rightly: distlock would refuse a store there).
        for path in [
            dir.path().join("locks.db"),
            dir.path().join("not/made/yet/locks.db"),
            Path::new("relative/locks.db").to_path_buf(),
            Path::new("locks.db").to_path_buf(),
        ] {
            assert_eq!(network_filesystem(&path), None, "{}", path.display());
        }
        assert!(!dir.path().join("not").exists());
    }

    #[test]
    fn a_link_that_names_nothing_yet_is_judged_by_where_it_points() {
        let dir = tempfile::tempdir().unwrap();
        // Local targets, so every answer is None; what is checked is that following links
        // ends, for chains, relative links and a loop alike.
        let links = [
            ("to-missing.db", "nowhere/locks.db"),
            ("chain.db", "to-missing.db"),
            ("loop-a", "loop-b"),
            ("loop-b", "loop-a"),
        ];
        for (link, target) in links {
            std::os::unix::fs::symlink(target, dir.path().join(link)).unwrap();
        }
        for name in ["to-missing.db", "chain.db", "loop-a", "loop-a/locks.db"] {
            assert_eq!(network_filesystem(&dir.path().join(name)), None, "{name}");
        }
    }

    #[test]
    fn fuse_is_told_by_its_name() {
        for (name, fuse) in [
            ("fuse", true),
            ("fusefs", true),
            ("macfuse", true),
            ("nfs", false),
            ("cifs", false),
            ("v9fs", false),
        ] {
            assert_eq!(is_fuse(name), fuse, "{name}");
        }
    }
}
