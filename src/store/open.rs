//! Opening the store at a [`Location`] for what a command does with it ([`Access`]): one that
//! may create a SQLite store and its folders, one that creates nothing and reads a store that
//! is not there as [`Absent`] (an empty one), one that only reads, and one that opens again a
//! store this process had, and finds it [`Error::Vanished`] if it is gone. A SQLite path that
//! is no place for a store — a device, a FIFO, a socket, a network filesystem — is refused
//! before anything is made.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::backend::{decide_on_nothing, nothing};
use super::{
    Backend, DecideSet, Durability, Error, Folders, Location, LockStore, NetworkFs, PostgresStore,
    Reads, RemoteStore, Result, SqliteStore, SystemClock, network_fs,
};
use crate::engine::State;
use crate::lock::{Event, GcReport, Lock, LogQuery, Owner, Place, Resource};

/// What a command may do to the store it opens, which decides how it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A command that may create the store (`acquire`, `run`, `serve`): a SQLite store is
    /// made, with its missing folders, if it is not there.
    Create,
    /// A command that writes only what it finds (`release`, `renew`, `break`, `gc`): a SQLite
    /// store that is not there — no file, or an empty one — is [`Absent`], and nothing is
    /// created, not the file, not its folders. Such a command finds nothing to change there,
    /// and answers as for an empty store (`release` → 1).
    Existing,
    /// A command that only reads (`status`, `list`, `log`): a SQLite store is opened read-only
    /// ([`SqliteStore::open_read_only`]): nothing is written, upgraded or created, and one that
    /// is not there is [`Absent`].
    ReadOnly,
    /// A store this process opened before (`run`'s heartbeat, on a connection of its own, and
    /// after a failure on a new one): as [`Access::Create`], except that a SQLite store is
    /// never created — not its file, not its folders. One that is gone is
    /// [`Error::Vanished`]: its locks went with it, and a store made anew at its path would
    /// hold none of them; a PostgreSQL schema dropped meanwhile is not made anew either.
    Again,
}

/// Opens the store at `location`, with the host's clock, for what a command does with it
/// ([`Access`]). A SQLite path that is no place for a store — a device, a FIFO, a socket, a
/// network filesystem — is refused before anything is made, also where nothing is there yet.
///
/// # Errors
///
/// When the store cannot be opened, is corrupt or comes from a newer distlock; a SQLite path
/// that is no place for a store; [`Error::Vanished`] for a SQLite store opened
/// [`Access::Again`] that no longer exists.
pub fn open(location: &Location, access: Access) -> Result<Box<dyn LockStore>> {
    let url = match location {
        Location::Server(url) => return Ok(Box::new(RemoteStore::open(url)?)),
        Location::Postgres(url) => url,
        Location::Sqlite(path, folders, allowed) => {
            return open_sqlite(path, *folders, *allowed, access);
        }
    };
    Ok(Box::new(match access {
        Access::Create => PostgresStore::open(url)?,
        Access::Existing | Access::Again => PostgresStore::open_existing(url)?,
        Access::ReadOnly => PostgresStore::open_read_only(url)?,
    }))
}

/// [`open`] of the SQLite store at `path`.
///
/// # Errors
///
/// As [`open`].
fn open_sqlite(
    path: &Path,
    folders: Folders,
    allowed: NetworkFs,
    access: Access,
) -> Result<Box<dyn LockStore>> {
    if access != Access::Again {
        refuse_special(path)?;
        refuse_network_fs(path, allowed)?;
    }
    let clock = || Box::new(SystemClock);
    let found = match access {
        Access::Create => return Ok(Box::new(create_sqlite(path, folders)?)),
        Access::Existing if !holds_a_store(path) => None,
        Access::Existing | Access::Again => SqliteStore::open_existing(path, clock())?,
        Access::ReadOnly => SqliteStore::open_read_only(path, clock())?,
    };
    match (found, access) {
        (Some(store), _) => Ok(Box::new(store)),
        (None, Access::Again) => Err(Error::Vanished(path.to_path_buf())),
        (None, _) => Ok(Box::new(Absent)),
    }
}

/// Refuses a path that names something other than a file or a folder: a block or character
/// device (`--db /dev/sdb` would have its first blocks overwritten, and a size of 0 makes every
/// open a new store), a FIFO (an open would wait for a writer for ever), a socket.
///
/// # Errors
///
/// Such a path, named with what it is.
fn refuse_special(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let kind = meta.file_type();
    let what = if kind.is_block_device() {
        "a block device"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        return Ok(());
    };
    anyhow::bail!(
        "cannot use {} as a store: it is {what}, not a file",
        crate::lock::shown(&path.display().to_string())
    )
}

/// Refuses a store on a network filesystem ([`network_fs`]) unless the user `allowed` it:
/// SQLite's WAL keeps its locks in memory that only the processes of one host share, so where
/// other hosts reach the file too, two hosts could both get a lock. The file need not exist: a
/// store not made yet is judged by the folder it would be made in, so nothing is made there.
///
/// # Errors
///
/// Such a path, with its filesystem named and the ways out: PostgreSQL or a distlock server
/// across hosts, `DISTLOCK_ALLOW_NETWORK_FS=1` for a mount that one host alone uses.
fn refuse_network_fs(path: &Path, allowed: NetworkFs) -> anyhow::Result<()> {
    if allowed == NetworkFs::Allowed {
        return Ok(());
    }
    let Some(name) = network_fs::network_filesystem(path) else {
        return Ok(());
    };
    let what = if network_fs::is_fuse(name) {
        format!(
            "a FUSE filesystem ({name}), which may be a network one (sshfs, GlusterFS: \
             distlock cannot tell)"
        )
    } else {
        format!("a network filesystem ({name})")
    };
    anyhow::bail!(
        "cannot use {} as a store: it is on {what}, where SQLite's WAL keeps its locks in \
         memory that only the processes of one host share, so two hosts could both get a lock; \
         across hosts use PostgreSQL (--db postgres://…) or a distlock server, or set \
         DISTLOCK_ALLOW_NETWORK_FS=1 if this host alone uses the mount",
        crate::lock::shown(&path.display().to_string())
    )
}

/// Whether a file that may hold a store is at `path`: not when nothing is there (or a part of
/// its path is not a folder), nor for an empty file, which is an empty database. Anything else
/// (a folder, a file this user may not see) is opened, and the open says what is wrong.
fn holds_a_store(path: &Path) -> bool {
    match std::fs::metadata(path) {
        Ok(meta) => !(meta.is_file() && meta.len() == 0),
        Err(err) => !matches!(
            err.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
        ),
    }
}

/// A SQLite store that is not there: no file (and perhaps no folder), or an empty file. It
/// reads as an empty store, and nothing is ever written to it, so nothing is made at a path
/// that was mistyped: a decision that would write (which no command that opens it makes: see
/// [`Access::Existing`] and [`Access::ReadOnly`]) is refused.
struct Absent;

impl Backend for Absent {
    fn transact_set<T>(
        &mut self,
        resources: &[Resource],
        _durability: Durability,
        _reads: Reads<'_>,
        decide: &mut DecideSet<'_, T>,
    ) -> Result<T> {
        Ok(decide_on_nothing(
            resources,
            decide,
            "the store does not exist",
        )?)
    }

    fn read(&mut self, _resource: &Resource) -> Result<State> {
        Ok(nothing())
    }

    fn scan(&mut self, _prefix: &str) -> Result<Vec<Lock>> {
        Ok(Vec::new())
    }

    fn places(&mut self, _prefix: &str) -> Result<Vec<(Resource, Place)>> {
        Ok(Vec::new())
    }

    fn history(&mut self, _query: &LogQuery) -> Result<Vec<Event>> {
        Ok(Vec::new())
    }

    fn prune(&mut self, _keep_history: Duration) -> Result<GcReport> {
        Ok(GcReport::default())
    }

    fn subscribe(&mut self, _resources: &[Resource], _owner: &Owner) -> Result<()> {
        Ok(())
    }

    fn wait_for_change(&mut self, _resources: &[Resource], timeout: Duration) -> Result<()> {
        std::thread::sleep(timeout);
        Ok(())
    }
}

fn create_sqlite(path: &Path, folders: Folders) -> anyhow::Result<SqliteStore> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        use std::os::unix::fs::DirBuilderExt;
        let mode = match folders {
            Folders::Private => 0o700,
            Folders::AsUmask => 0o777,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(parent)
            .with_context(|| format!("cannot create folder {}", parent.display()))?;
    }
    // SQLite would create the file 0644 whatever the umask, and gives its -wal and -shm files
    // the database's mode; created here (0666 less the umask), a store made under umask 002 can
    // be shared by a group. An empty file is a valid empty database.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        // Let SQLite report whatever is wrong (a directory, a missing permission) its own way.
        Err(_) => {}
    }
    SqliteStore::open(path, Box::new(SystemClock))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Request;
    use crate::lock::Members;
    use crate::lock::{Acquire, Owner, Resource, Ttl};
    use crate::store::{Locks, op};

    #[test]
    fn a_removed_sqlite_store_is_vanished_to_its_open_connection_and_is_never_reopened_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("locks.db");
        let location = Location::Sqlite(path.clone(), Folders::AsUmask, NetworkFs::Refused);
        let resource = Resource::parse("r").unwrap();
        let owner = Owner::parse("o").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let mut held = open(&location, Access::Create).unwrap();
        let request = Request::exclusive(owner.clone(), ttl);
        let acquire = op::Acquire {
            members: Members::one(resource.clone()),
            request,
            until: None,
        };
        let Acquire::Acquired { lock, .. } = held.perform(acquire).unwrap().outcome.into_one()
        else {
            panic!("a new store's first acquire is granted");
        };
        let vanished = |err: Error| match err {
            Error::Vanished(gone) => Some(gone),
            _ => None,
        };
        let gone = Some(path.clone());

        // The file alone, then its folder too.
        for remove in [dir.path().join("state/locks.db"), dir.path().join("state")] {
            if remove.is_dir() {
                std::fs::remove_dir_all(&remove).unwrap();
            } else {
                std::fs::remove_file(&remove).unwrap();
            }
            let renewed = held.perform(op::Renew {
                members: Members::one(resource.clone()),
                owner: owner.clone(),
                ttl,
                fences: Some(vec![lock.fence]),
                lease_end: None,
            });
            assert_eq!(
                renewed.err().and_then(vanished),
                gone,
                "{remove:?}: a write"
            );
            let reopened = open(&location, Access::Again).map(|_| ());
            assert_eq!(
                reopened.err().and_then(vanished),
                gone,
                "{remove:?}: reopen"
            );
            assert!(!path.exists(), "{remove:?}: reopen made a new store");
        }
        assert!(
            !path.parent().unwrap().exists(),
            "reopen made the folder anew"
        );
        assert_eq!(
            gone.map(|gone| Error::Vanished(gone).to_string()),
            Some(format!("the store {} no longer exists", path.display()))
        );
    }
}
