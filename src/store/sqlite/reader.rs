//! How `status`, `list` and `log` reach a SQLite store: read-only, creating nothing.
//!
//! A connection opened with `SQLITE_OPEN_READONLY` never writes the database, switches it to
//! WAL or upgrades its schema. In WAL mode, though, SQLite reads through the WAL index (the
//! `-shm` file) and opens the WAL (`-wal`), creating either if it is missing and the folder
//! lets it; where the folder does not, it cannot open the database at all. SQLite's documented
//! ways out (<https://www.sqlite.org/wal.html>, "Read-Only Databases") are that the `-shm` and
//! `-wal` files already exist (readable is enough), or that the database is opened
//! `immutable`. Which one is right depends on whether the WAL holds commits:
//!
//! - **A WAL with frames** may hold commits that are not in the database file yet: it is read
//!   through SQLite's locks and WAL index ([`Access::Shared`]), as every writer reads, so a read
//!   sees the latest commit, also while writers are busy. A `-shm` that this user may read but
//!   not write will do (SQLite then builds the index in its own memory from the WAL); a missing
//!   one is made by SQLite where the folder lets it, as it cannot do without. Where the folder
//!   does not, the WAL's commits cannot be read at all, and the error says that a command that
//!   writes, run by a user who may write the folder, makes the file.
//! - **No WAL, or one without a frame** (the `-wal`/`-shm` files gone, as `sqlite3`'s last
//!   connection leaves a database, or a WAL truncated after a checkpoint): the database file
//!   holds every commit, and no connection has it open in WAL mode, as each would hold the
//!   WAL. It is read with `immutable=1` ([`Access::Unshared`]): no locks, no `-wal`, no `-shm`,
//!   nothing created, whoever reads. `immutable` would skip a WAL's commits, but there are none.
//!
//! `immutable` also promises SQLite that nobody changes the file during the read, which nothing
//! here can promise: a writer may arrive meanwhile. A writer's commits go to its WAL, which it
//! makes before it writes anything; the database file itself changes only when a checkpoint
//! copies the WAL's commits into it. So the file is looked at before the connection opens and
//! after each read ([`Unwritten`]): its identity, length, modification and change times, and
//! that it still has no WAL with frames. A read during which a writer arrived is thrown away
//! and done again, through SQLite's locks (the writer's WAL now exists). The window that
//! remains: a writer that opens, commits, checkpoints into the file, and then removes its WAL
//! (as `sqlite3` does on closing; distlock keeps its WAL), all between the two looks, without
//! changing the file's length, while the file system's clock did not tick (file times are
//! coarse, a few milliseconds on many systems; newer kernels give a file changed right after a
//! `stat` a fine-grained time on ext4, XFS, btrfs and tmpfs, which narrows it further). Such a
//! read may mix pages from before and after the checkpoint.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_encode};
use rusqlite::{Connection, OpenFlags};

/// A WAL shorter than this holds no commit: its 32-byte header and one frame (a 24-byte frame
/// header and a page of at least 512 bytes).
const WAL_WITH_A_FRAME: u64 = 32 + 24 + 512;

/// How a read-only connection reaches the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Through SQLite's locks and WAL index, as every writer does.
    Shared,
    /// `immutable=1`, as no WAL with frames exists: the file as it was before the connection
    /// opened, which each read checks it still is.
    Unshared(Unwritten),
}

/// A database file that nobody has written to while it was read without locks: what a look
/// before and a look after must both find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unwritten {
    /// (device, inode): the same file, not one renamed into its place.
    identity: (u64, u64),
    len: u64,
    /// Modification and change times (seconds, nanoseconds); no program can set the latter.
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Unwritten {
    /// The database at `path` as it is now, if it has no WAL with frames. `None` when it has
    /// one, or when the file cannot be looked at (the open that follows says why).
    pub fn now(path: &Path) -> Option<Unwritten> {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        match std::fs::metadata(Path::new(&wal)) {
            Ok(meta) if meta.len() >= WAL_WITH_A_FRAME => return None,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
        // A rollback journal means a writer in rollback mode, live or crashed mid-transaction:
        // the file may hold changes that are not committed, which only SQLite's locks (and its
        // recovery) keep a reader from seeing.
        let mut journal = path.as_os_str().to_owned();
        journal.push("-journal");
        if std::fs::symlink_metadata(Path::new(&journal)).is_ok() || !in_wal_mode(path) {
            return None;
        }
        let meta = std::fs::metadata(path)
            .ok()
            .filter(std::fs::Metadata::is_file)?;
        Some(Unwritten {
            identity: (meta.dev(), meta.ino()),
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        })
    }

    /// Whether the database at `path` is still as it was.
    pub fn holds(&self, path: &Path) -> bool {
        Unwritten::now(path) == Some(*self)
    }
}

/// Whether the database header of the file at `path` says WAL mode (its read and write format
/// versions, bytes 18 and 19, are 2), or it is too short to have a header yet (an empty
/// store). A file in rollback mode is never read `immutable`: a writer may be changing it in
/// place.
pub(super) fn in_wal_mode(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 20];
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    match file.read(&mut header) {
        Ok(read) if read < header.len() => true,
        Ok(_) => header[18] == 2 && header[19] == 2,
        Err(_) => false,
    }
}

/// A read-only connection to the database at `path`: `immutable=1` when it has no WAL with
/// frames, else through SQLite's locks (see the module's notes).
///
/// # Errors
///
/// SQLite's, when the file cannot be opened.
pub fn connect(path: &Path) -> rusqlite::Result<(Connection, Access)> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    match Unwritten::now(path) {
        Some(before) => {
            let conn = Connection::open_with_flags(
                immutable_uri(path),
                flags | OpenFlags::SQLITE_OPEN_URI,
            )?;
            Ok((conn, Access::Unshared(before)))
        }
        None => Ok((Connection::open_with_flags(path, flags)?, Access::Shared)),
    }
}

/// `path` as a `file:` URI with `immutable=1`: every byte but letters, digits and `/-_.~`
/// percent-encoded (a `?` or `#` in a name would end the path), an absolute path after an
/// empty authority (`file:///…`).
fn immutable_uri(path: &Path) -> String {
    const KEEP: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    let encoded = percent_encode(path.as_os_str().as_bytes(), KEEP);
    let authority = if path.is_absolute() { "//" } else { "" };
    format!("file:{authority}{encoded}?immutable=1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_keep_every_name_exactly() {
        for (path, uri) in [
            ("/var/lib/locks.db", "file:///var/lib/locks.db?immutable=1"),
            ("locks.db", "file:locks.db?immutable=1"),
            ("./a:b?c#d%e f", "file:./a%3Ab%3Fc%23d%25e%20f?immutable=1"),
            ("//net/x", "file:////net/x?immutable=1"),
            ("é", "file:%C3%A9?immutable=1"),
        ] {
            assert_eq!(immutable_uri(Path::new(path)), uri, "{path}");
        }
    }

    #[test]
    fn a_database_without_a_wal_is_read_unshared_and_with_one_through_the_locks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd ?name#.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);",
            )
            .unwrap();
        // The writer is open: its WAL holds the commits.
        let (reader, access) = connect(&path).unwrap();
        assert_eq!(access, Access::Shared);
        let count: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 1);
        drop(reader);
        // Closed last, it checkpoints and removes its WAL and WAL index.
        drop(writer);
        let (reader, access) = connect(&path).unwrap();
        let Access::Unshared(before) = access else {
            panic!("no WAL, yet read through the locks");
        };
        let count: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 1);
        assert!(before.holds(&path));
        let siblings: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(siblings.len(), 1, "created files: {siblings:?}");
        // A writer arrives: what the reader read no longer holds.
        let writer = Connection::open(&path).unwrap();
        writer.execute("INSERT INTO t VALUES (2)", []).unwrap();
        assert!(!before.holds(&path));
    }
}
