//! SQLite's failures in words a person can act on.
//!
//! SQLite says "unable to open database file" for a directory, a missing permission and a
//! missing folder alike, and "database is locked" without the file or how long it waited. A
//! store error here names what distlock was doing, the database's path and the cause in words
//! ("is a directory", "permission denied", "busy for 5 s", "read-only"), and then SQLite's own
//! text after a colon:
//!
//! ```text
//! cannot open database /srv/locks: it is a directory: unable to open database file: /srv/locks
//! cannot write to database /srv/locks.db: busy for 5 s (…): database is locked
//! ```
//!
//! Where SQLite's code does not tell the cause apart, the file system is asked, after the
//! failure: the cost is paid only by a command that is failing anyway.

use std::io::ErrorKind;
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::{AccessFlags, access};
use rusqlite::ErrorCode;

use super::connection::BUSY_TIMEOUT;

/// What distlock was doing with the database when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doing {
    /// Opening the file and checking its schema (and, for a writer, switching it to WAL and
    /// upgrading it).
    Open,
    /// A read-only command's query.
    Read,
    /// A transaction that writes, or `gc`.
    Write,
}

impl Doing {
    fn verb(self) -> &'static str {
        match self {
            Doing::Open => "cannot open database",
            Doing::Read => "cannot read database",
            Doing::Write => "cannot write to database",
        }
    }
}

/// `err` in words, when SQLite's failure is behind it: `doing` and `path`, any steps between
/// (`cannot upgrade the schema to version 2`), the cause, then SQLite's text. Failures that are
/// not SQLite's (a store that vanished, a file of another application) pass unchanged: they
/// say what they are already, and callers tell some of them apart by type.
pub fn worded(path: &Path, doing: Doing, err: anyhow::Error) -> anyhow::Error {
    let Some(sqlite) = err
        .chain()
        .find_map(|cause| cause.downcast_ref::<rusqlite::Error>())
    else {
        return err;
    };
    let mut words = format!("{} {}", doing.verb(), path.display());
    for step in err
        .chain()
        .take_while(|cause| cause.downcast_ref::<rusqlite::Error>().is_none())
    {
        words.push_str(": ");
        words.push_str(&step.to_string());
    }
    if let Some(cause) = sqlite
        .sqlite_error_code()
        .and_then(|code| cause(path, code))
    {
        words.push_str(": ");
        words.push_str(&cause);
    }
    words.push_str(": ");
    words.push_str(&raw(sqlite));
    anyhow::Error::msg(words)
}

/// Whether SQLite's failure is behind `err`: [`worded`] words it.
pub fn is_sqlite(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.downcast_ref::<rusqlite::Error>().is_some())
}

/// SQLite's own text, once (rusqlite's error would repeat it with its code).
fn raw(err: &rusqlite::Error) -> String {
    match err {
        rusqlite::Error::SqliteFailure(failure, None) => {
            rusqlite::ffi::code_to_str(failure.extended_code).to_owned()
        }
        other => other.to_string(),
    }
}

/// The cause of a failure with SQLite's `code` on the database at `path`, in words; `None`
/// where SQLite's text says all there is.
fn cause(path: &Path, code: ErrorCode) -> Option<String> {
    match code {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(format!(
            "busy for {} s (another process held its write lock all that time)",
            BUSY_TIMEOUT.as_secs()
        )),
        ErrorCode::ReadOnly => Some(match unwritable(path) {
            Some(why) => format!("read-only ({why})"),
            None => "read-only".to_owned(),
        }),
        // A directory opened read-only fails with an I/O error.
        ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::SystemIoFailure => {
            unopenable(path)
        }
        ErrorCode::NotADatabase => Some("it is not a SQLite database, or it is damaged".to_owned()),
        ErrorCode::DatabaseCorrupt => Some("it is damaged (corrupt)".to_owned()),
        ErrorCode::DiskFull => Some("the disk is full".to_owned()),
        _ => None,
    }
}

/// Why this process may not write the database, or create its `-wal`/`-shm` files beside it.
fn unwritable(path: &Path) -> Option<String> {
    if let Err(errno) = access(path, AccessFlags::W_OK) {
        return Some(format!("{} for this user", errno_words(errno)));
    }
    let folder = folder_of(path);
    for suffix in ["-wal", "-shm"] {
        let mut sibling = path.as_os_str().to_owned();
        sibling.push(suffix);
        match access(Path::new(&sibling), AccessFlags::W_OK) {
            Ok(()) => {}
            Err(Errno::ENOENT) => {
                if let Err(errno) = access(folder, AccessFlags::W_OK) {
                    return Some(format!(
                        "{}: this user may not create its {suffix} file in {}",
                        errno_words(errno),
                        folder.display()
                    ));
                }
            }
            Err(errno) => {
                return Some(format!(
                    "{}: this user may not write its {suffix} file",
                    errno_words(errno)
                ));
            }
        }
    }
    None
}

/// Why the database cannot be opened, as far as the file system tells.
fn unopenable(path: &Path) -> Option<String> {
    let folder = folder_of(path);
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return Some("it is a directory".to_owned()),
        Ok(_) => {}
        Err(err) if err.kind() == ErrorKind::NotFound => {
            return Some(if folder.is_dir() {
                "it does not exist".to_owned()
            } else {
                format!("its folder {} does not exist", folder.display())
            });
        }
        Err(err) if err.kind() == ErrorKind::NotADirectory => {
            return Some("a part of its path is not a folder".to_owned());
        }
        Err(err) if err.kind() == ErrorKind::PermissionDenied => {
            return Some(
                "permission denied: this user may not enter a folder on its path".to_owned(),
            );
        }
        Err(_) => return None,
    }
    if let Err(errno) = access(path, AccessFlags::R_OK) {
        return Some(format!("{}: this user may not read it", errno_words(errno)));
    }
    // The file itself can be read: what is missing is its WAL or WAL index.
    for suffix in ["-wal", "-shm"] {
        let mut sibling = path.as_os_str().to_owned();
        sibling.push(suffix);
        match access(Path::new(&sibling), AccessFlags::R_OK) {
            Ok(()) => {}
            Err(Errno::ENOENT) => {
                if let Err(errno) = access(folder, AccessFlags::W_OK) {
                    return Some(format!(
                        "{}: its {suffix} file is missing and this user may not create it in {} \
                         (a command that writes, run by a user who may, makes it)",
                        errno_words(errno),
                        folder.display()
                    ));
                }
            }
            Err(errno) => {
                return Some(format!(
                    "{}: this user may not read its {suffix} file",
                    errno_words(errno)
                ));
            }
        }
    }
    None
}

/// The folder the database's files live in.
fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// An errno as the words a person knows it by.
fn errno_words(errno: Errno) -> String {
    match errno {
        Errno::EACCES => "permission denied".to_owned(),
        Errno::EROFS => "the file system is mounted read-only".to_owned(),
        Errno::EPERM => "operation not permitted (is the file immutable? see lsattr)".to_owned(),
        other => other.desc().to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32, message: Option<&str>) -> anyhow::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), message.map(str::to_owned))
            .into()
    }

    #[test]
    fn a_busy_database_names_the_path_and_the_timeout() {
        let err = sqlite(rusqlite::ffi::SQLITE_BUSY, Some("database is locked"))
            .context("cannot commit the change");
        let words = worded(Path::new("/srv/locks.db"), Doing::Write, err).to_string();
        assert_eq!(
            words,
            "cannot write to database /srv/locks.db: cannot commit the change: busy for 5 s \
             (another process held its write lock all that time): database is locked"
        );
    }

    #[test]
    fn a_directory_is_named_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let err = sqlite(rusqlite::ffi::SQLITE_CANTOPEN, None);
        let words = worded(dir.path(), Doing::Open, err).to_string();
        assert_eq!(
            words,
            format!(
                "cannot open database {}: it is a directory: unable to open database file",
                dir.path().display()
            )
        );
    }

    #[test]
    fn failures_that_are_not_sqlites_pass_unchanged() {
        let err = anyhow::anyhow!("it is a SQLite database of another application");
        let words = worded(Path::new("x.db"), Doing::Open, err).to_string();
        assert_eq!(words, "it is a SQLite database of another application");
    }
}
