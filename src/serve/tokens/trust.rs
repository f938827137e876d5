//! Whether a tokens file may be trusted, by the rules `ssh` holds `authorized_keys` to (its
//! `StrictModes`): whoever may write the file, or replace it, can make themselves an operator.
//!
//! - The file is a regular file: not a FIFO (whose reader would wait for a writer), a device or
//!   a folder. It is opened without blocking and checked on the descriptor that is then read,
//!   so what is checked is what is read.
//! - Neither the file nor any folder above its real path (links followed), up to `/`, may be
//!   written by its group or by others; nor, when the path names a link, any folder above the
//!   link, whose writers could point it elsewhere. The one exception is a folder with the sticky bit that
//!   root owns (`/tmp`): there nobody may rename or remove another's file.
//! - The file and those folders belong to the server's user or to root ([`Owners::UserOrRoot`]).
//!   `distlock token add` checks the modes only ([`Owners::Any`]): it may rightly run as root
//!   for a server that runs as a user of its own.

use std::io::Read as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Whose files and folders are trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owners {
    /// Those of this user (the server's) or of root.
    UserOrRoot(u32),
    /// Anyone's: the owners are not checked.
    Any,
}

impl Owners {
    /// The server's: its effective user's, or root's.
    pub(super) fn server() -> Owners {
        Owners::UserOrRoot(nix::unistd::Uid::effective().as_raw())
    }
}

/// The bytes of the tokens file at `path`, once it and the folders above it are found
/// trustworthy.
///
/// # Errors
///
/// One line naming the file (or folder) and what is wrong with it: it cannot be opened or
/// read, is not a regular file, may be written by others than its owner, or belongs to
/// someone else.
pub(super) fn read(path: &Path, owners: Owners) -> Result<Vec<u8>> {
    let shown = path.display();
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("cannot read the tokens file {shown}"))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read the tokens file {shown}"))?;
    if let Some(why) = file_problem(meta.mode(), meta.uid(), owners) {
        bail!("the tokens file {shown} {why}");
    }
    // The folders of the file itself (links followed), and, when the path given is a link,
    // those of the link too: whoever may write the link's folder may point it elsewhere.
    let real = std::fs::canonicalize(path)
        .with_context(|| format!("cannot find the folder of the tokens file {shown}"))?;
    if let Some(folder) = real.parent() {
        folders(folder, path, owners)?;
    }
    let named = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let named = std::fs::canonicalize(named)
        .with_context(|| format!("cannot find the folder of the tokens file {shown}"))?;
    if Some(named.as_path()) != real.parent() {
        folders(&named, path, owners)?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .with_context(|| format!("cannot read the tokens file {shown}"))?;
    Ok(bytes)
}

/// Checks `folder` (a real path, links followed) and every folder above it, the folders of the
/// tokens file `file`.
///
/// # Errors
///
/// One line naming the first folder, from `folder` up, that cannot be looked at, may be
/// written by others than its owner, or belongs to someone else.
pub(super) fn folders(folder: &Path, file: &Path, owners: Owners) -> Result<()> {
    for above in folder.ancestors() {
        let meta = std::fs::metadata(above).with_context(|| {
            format!(
                "cannot look at the folder {} of the tokens file {}",
                above.display(),
                file.display()
            )
        })?;
        if let Some(why) = folder_problem(meta.mode(), meta.uid(), owners) {
            bail!(
                "the folder {} of the tokens file {} {why}",
                above.display(),
                file.display()
            );
        }
    }
    Ok(())
}

/// What keeps a tokens file of this `st_mode` and owner from being trusted, if anything.
pub(super) fn file_problem(mode: u32, uid: u32, owners: Owners) -> Option<String> {
    let kind = mode & bits(libc::S_IFMT);
    if kind != bits(libc::S_IFREG) {
        return Some(format!("is not a regular file ({})", kind_name(kind)));
    }
    if let Some(writers) = writers(mode) {
        return Some(format!(
            "may be written by {writers} (mode {:04o}): whoever may write it can make \
             themselves an operator (chmod go-w)",
            mode & 0o7777
        ));
    }
    owner_problem(uid, owners)
}

/// What keeps a folder of this `st_mode` and owner from holding a trusted tokens file, if
/// anything.
pub(super) fn folder_problem(mode: u32, uid: u32, owners: Owners) -> Option<String> {
    let sticky_roots = mode & bits(libc::S_ISVTX) != 0 && uid == 0;
    if let Some(writers) = writers(mode).filter(|_| !sticky_roots) {
        return Some(format!(
            "may be written by {writers} (mode {:04o}): whoever may write it can replace the \
             file (chmod go-w)",
            mode & 0o7777
        ));
    }
    owner_problem(uid, owners)
}

/// Who besides its owner may write a file of this mode: "its group", "others", or both.
fn writers(mode: u32) -> Option<&'static str> {
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => None,
        (true, false) => Some("its group"),
        (false, true) => Some("others"),
        (true, true) => Some("its group and others"),
    }
}

fn owner_problem(uid: u32, owners: Owners) -> Option<String> {
    match owners {
        Owners::UserOrRoot(user) if uid != user && uid != 0 => Some(format!(
            "belongs to uid {uid}, neither the server's user (uid {user}) nor root"
        )),
        _ => None,
    }
}

/// A file type (the `S_IFMT` bits of a mode) in words.
fn kind_name(kind: u32) -> &'static str {
    let names = [
        (libc::S_IFIFO, "a FIFO"),
        (libc::S_IFCHR, "a character device"),
        (libc::S_IFBLK, "a block device"),
        (libc::S_IFDIR, "a folder"),
        (libc::S_IFSOCK, "a socket"),
        (libc::S_IFLNK, "a symbolic link"),
    ];
    (names.iter())
        .find(|(flag, _)| bits(*flag) == kind)
        .map_or("of an unknown type", |(_, name)| name)
}

/// Mode bits as a `u32`, as `st_mode` is read here: `mode_t` is a `u32` on Linux and a `u16`
/// on FreeBSD and macOS.
#[allow(clippy::useless_conversion)] // Not useless where `mode_t` is a `u16`.
fn bits(flag: libc::mode_t) -> u32 {
    u32::from(flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: u32 = libc::S_IFREG;
    const FOLDER: u32 = libc::S_IFDIR;
    const SERVER: Owners = Owners::UserOrRoot(1000);

    #[test]
    fn a_tokens_file_is_trusted_by_ssh_s_rules() {
        // (mode, owner, owners checked, the problem's words, or "" when trusted)
        let cases: [(u32, u32, Owners, &str); 13] = [
            (FILE | 0o600, 1000, SERVER, ""),
            (FILE | 0o640, 0, SERVER, ""),
            (FILE | 0o644, 1000, SERVER, ""),
            (FILE | 0o400, 1000, SERVER, ""),
            (
                FILE | 0o620,
                1000,
                SERVER,
                "written by its group (mode 0620)",
            ),
            (FILE | 0o602, 1000, SERVER, "written by others (mode 0602)"),
            (
                FILE | 0o666,
                1000,
                SERVER,
                "its group and others (mode 0666)",
            ),
            (FILE | 0o1666, 0, SERVER, "(mode 1666)"),
            (FILE | 0o600, 1001, SERVER, "belongs to uid 1001"),
            (FILE | 0o600, 1001, Owners::Any, ""),
            (
                libc::S_IFIFO | 0o600,
                1000,
                SERVER,
                "not a regular file (a FIFO)",
            ),
            (
                libc::S_IFCHR | 0o666,
                0,
                Owners::Any,
                "(a character device)",
            ),
            (FOLDER | 0o700, 1000, SERVER, "(a folder)"),
        ];
        for (mode, uid, owners, words) in cases {
            match file_problem(mode, uid, owners) {
                None => assert_eq!(words, "", "{mode:o} {uid}: trusted"),
                Some(why) => assert!(
                    !words.is_empty() && why.contains(words),
                    "{mode:o} {uid}: {why}"
                ),
            }
        }
    }

    #[test]
    fn a_folder_above_it_is_trusted_by_ssh_s_rules_and_tmp_too() {
        // (mode, owner, owners checked, the problem's words, or "" when trusted)
        let cases: [(u32, u32, Owners, &str); 10] = [
            (FOLDER | 0o700, 1000, SERVER, ""),
            (FOLDER | 0o755, 0, SERVER, ""),
            (FOLDER | 0o2755, 1000, SERVER, ""),
            // /tmp: written by everyone, but nobody may replace another's file.
            (FOLDER | 0o1777, 0, SERVER, ""),
            (
                FOLDER | 0o1777,
                1001,
                Owners::Any,
                "written by its group and others",
            ),
            (FOLDER | 0o777, 1000, SERVER, "(mode 0777)"),
            (
                FOLDER | 0o775,
                0,
                SERVER,
                "written by its group (mode 0775)",
            ),
            (
                FOLDER | 0o2775,
                1000,
                Owners::Any,
                "written by its group (mode 2775)",
            ),
            (FOLDER | 0o755, 1001, SERVER, "belongs to uid 1001"),
            (FOLDER | 0o755, 1001, Owners::Any, ""),
        ];
        for (mode, uid, owners, words) in cases {
            match folder_problem(mode, uid, owners) {
                None => assert_eq!(words, "", "{mode:o} {uid}: trusted"),
                Some(why) => assert!(
                    !words.is_empty() && why.contains(words),
                    "{mode:o} {uid}: {why}"
                ),
            }
        }
    }
}
