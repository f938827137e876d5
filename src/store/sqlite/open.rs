//! Opening the SQLite store: a file opened for writing (created if need be, brought to the
//! current schema), or only if it exists, or read-only; each connection's settings (the busy
//! handler, no checkpoint on close, the WAL hook, WAL mode and `synchronous=FULL`); the wait
//! through another process's WAL recovery; and a read-only connection's fresh look when a
//! writer wrote while it read unshared.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use super::columns::Columns;
use super::connection::{BUSY_TIMEOUT, SqliteStore, patient};
use super::errors::{self, Doing, worded};
use super::reader::{self, Access};
use super::schema::{Holds, recognise, tables};
use super::wal::sync_folder;
use crate::store::{Clock, SCHEMA_VERSION};

/// How many times a read-only command reads a file again that a writer wrote to while it was
/// read without locks (see `reader`): the second read goes through SQLite's locks.
const LOOKS: usize = 3;

/// Refuses a file in rollback mode with a hot journal beside it (`PATH-journal`, not empty):
/// SQLite's first read would roll the journal back into the file, and a distlock store is in
/// WAL mode from its first commit on, so such a file is another application's (or one a crash
/// left mid-write): distlock leaves both as they are.
///
/// # Errors
///
/// Such a file, named.
fn refuse_rollback_journal(path: &Path) -> Result<()> {
    let mut journal = path.as_os_str().to_owned();
    journal.push("-journal");
    let hot = std::fs::metadata(std::path::Path::new(&journal)).is_ok_and(|m| m.len() > 0);
    if hot && !super::reader::in_wal_mode(path) {
        anyhow::bail!(
            "cannot use {}: it is a SQLite database of another application in rollback mode, \
             with a journal beside it; distlock leaves both as they are",
            crate::lock::shown(&path.display().to_string())
        );
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or created, is not a SQLite database, belongs to another
    /// application, or was written by a newer distlock.
    pub fn open(path: &Path, clock: Box<dyn Clock>) -> Result<SqliteStore> {
        refuse_rollback_journal(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        // Missing, or the empty file `store::open` creates: the schema is written now.
        let created = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
        let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(|err| worded(path, Doing::Open, err.into()))?;
        SqliteStore::with_connection(conn, path, clock, created)
    }

    /// Opens the database at `path` for writing only if the file exists: `None` when it does
    /// not, and then nothing is created (`run`'s heartbeat finds its store gone).
    ///
    /// # Errors
    ///
    /// As [`SqliteStore::open`], for a file that exists.
    pub fn open_existing(path: &Path, clock: Box<dyn Clock>) -> Result<Option<SqliteStore>> {
        refuse_rollback_journal(path)?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        match Connection::open_with_flags(path, flags) {
            Ok(conn) => SqliteStore::with_connection(conn, path, clock, false).map(Some),
            // Not there at all: a path this user may not look into is not "not there" (it is
            // reported, permission denied), nor is a symlink loop.
            Err(err)
                if err.sqlite_error_code() == Some(rusqlite::ErrorCode::CannotOpen)
                    && std::fs::metadata(path).is_err_and(|e| {
                        matches!(
                            e.kind(),
                            std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                        )
                    }) =>
            {
                Ok(None)
            }
            Err(err) => Err(worded(path, Doing::Open, err.into())),
        }
    }

    /// Opens the database at `path` read-only, for the commands that only read (`status`,
    /// `list`, `log`). Nothing is written or created: no schema, no upgrade, no WAL switch, and
    /// no `-wal`/`-shm` where SQLite can do without; a user who may only read the files (and
    /// their folder) can read it, and a read sees the latest commit also while others write
    /// (see `reader`). An older schema is read as it is ([`Columns`]). `None` for a file that
    /// holds no store — missing (with its folders), empty, or a database without tables —
    /// which the commands answer as an empty store.
    ///
    /// # Errors
    ///
    /// When the file cannot be read, is not a SQLite database, belongs to another application,
    /// or was written by a newer distlock.
    pub fn open_read_only(path: &Path, clock: Box<dyn Clock>) -> Result<Option<SqliteStore>> {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() && meta.len() == 0 => return Ok(None),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None);
            }
            _ => {}
        }
        let Some((conn, access, shape)) = SqliteStore::connect_reader(path)? else {
            return Ok(None);
        };
        let mut store = SqliteStore::new(conn, path, clock);
        store.access = access;
        store.shape = shape;
        Ok(Some(store))
    }

    /// A read-only connection to `path` with its schema recognised; `None` for a database
    /// without tables. Read unshared, the schema is read again if the file changed meanwhile.
    fn connect_reader(path: &Path) -> Result<Option<(Connection, Access, Columns)>> {
        let start = std::time::Instant::now();
        let mut looks = 0;
        loop {
            let (mut conn, access) =
                reader::connect(path).map_err(|err| worded(path, Doing::Open, err.into()))?;
            conn.busy_handler(Some(patient()))
                .map_err(|err| worded(path, Doing::Open, err.into()))?;
            // It never checkpoints, as it writes nothing (SQLite would refuse anyway).
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
                .map_err(|err| worded(path, Doing::Open, err.into()))?;
            let found = tables(&conn);
            if let Access::Unshared(before) = access {
                looks += 1;
                if !before.holds(path) {
                    if looks < LOOKS {
                        continue;
                    }
                    bail!(changing(path));
                }
            }
            let found = match found {
                // As for a writer (see `with_connection`): another process's WAL recovery.
                Err(err) if is_busy_code(&err) && start.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_micros(100 + fastrand::u64(..900)));
                    continue;
                }
                found => found.map_err(|err| worded(path, Doing::Read, err.into()))?,
            };
            let found = recognise(found)
                .with_context(|| format!("cannot use database {}", path.display()))?;
            return Ok(match found {
                Holds::Nothing => None,
                Holds::Schema(version) => Some((conn, access, Columns::of(version))),
            });
        }
    }

    /// Runs a read-only command's `query`. A connection that reads unshared then checks that
    /// nobody wrote to the file meanwhile; if someone did, the answer is thrown away and
    /// `query` runs again on a new connection, through SQLite's locks (see `reader`).
    pub(super) fn look<T>(&mut self, mut query: impl FnMut(&mut Self) -> Result<T>) -> Result<T> {
        for _ in 0..LOOKS {
            let answer = query(self);
            let Access::Unshared(before) = self.access else {
                return answer;
            };
            if before.holds(&self.path) {
                return answer;
            }
            let Some((conn, access, shape)) = SqliteStore::connect_reader(&self.path)? else {
                break;
            };
            self.conn = conn;
            self.access = access;
            self.shape = shape;
        }
        bail!(changing(&self.path))
    }

    /// A store on `conn`, reading and writing the current schema through SQLite's locks.
    fn new(conn: Connection, path: &Path, clock: Box<dyn Clock>) -> SqliteStore {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        SqliteStore {
            conn,
            clock,
            wal: PathBuf::from(wal),
            frames: Arc::new(AtomicU32::new(0)),
            path: path.to_owned(),
            identity: identity(path),
            queue_behind: false,
            turnstile: None,
            waiting_on: None,
            rung: false,
            watched: None,
            shape: Columns::CURRENT,
            access: Access::Shared,
        }
    }

    /// `created`: the database was new (missing, or the empty file `store::open` makes).
    fn with_connection(
        mut conn: Connection,
        path: &Path,
        clock: Box<dyn Clock>,
        created: bool,
    ) -> Result<SqliteStore> {
        let fail = |err: rusqlite::Error| worded(path, Doing::Open, err.into());
        conn.busy_handler(Some(patient())).map_err(fail)?;
        // A distlock process makes one or two commits and exits. Checkpointing the WAL into the
        // database on every close would cost three or four extra fsyncs; instead the WAL stays
        // until it passes WAL_FRAMES (see `bound_wal`). Durability is unchanged: each
        // commit fsyncs the WAL.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(fail)?;
        // This takes the place of SQLite's automatic checkpoint (its WAL hook too), which would
        // checkpoint inside whichever commit passed 1,000 frames: `bound_wal` does it instead.
        let frames = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&frames);
        conn.wal_hook(Some(
            move |_: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int| {
                counted.store(u32::try_from(pages).unwrap_or(0), Ordering::Relaxed);
                Ok(())
            },
        ))
        .map_err(fail)?;
        let mut store = SqliteStore::new(conn, path, clock);
        store.frames = frames;
        // Before this connection's first read, which opens the WAL (creating it if needed).
        let wal_before = identity(&store.wal);
        // Opening races with other processes' WAL recovery and truncation, which SQLite
        // reports as SQLITE_BUSY without consulting the busy handler: wait those out too.
        let start = std::time::Instant::now();
        loop {
            match store.prepare() {
                Ok(()) => {
                    if created || identity(&store.wal) != wal_before {
                        sync_folder(path);
                    }
                    return Ok(store);
                }
                Err(err) if is_busy(&err) && start.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_micros(100 + fastrand::u64(..900)));
                }
                Err(err) => {
                    if wal_before.is_none() {
                        // The look at a file in WAL mode that had no WAL made one, and its
                        // index: SQLite removes both as its last connection closes, when it
                        // may checkpoint on close. Nothing was written, so nothing is copied
                        // into the file. A WAL that was there before stays as it was.
                        let _ = store
                            .conn
                            .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false);
                    }
                    return Err(if errors::is_sqlite(&err) {
                        worded(path, Doing::Open, err)
                    } else {
                        err.context(format!("cannot use database {}", path.display()))
                    });
                }
            }
        }
    }

    /// The schema check, before anything else is done to the file, then the settings every
    /// writing connection needs and the upgrade. The check reads only the header and the
    /// schema, so a file that is not a database, or not distlock's, is left exactly as it was.
    fn prepare(&mut self) -> Result<()> {
        let found = recognise(tables(&self.conn)?)?;
        let mode: String = self
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            let mode: String = self
                .conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                bail!("cannot switch it to WAL mode (it stays in {mode} mode)");
            }
        }
        self.conn.pragma_update(None, "synchronous", "FULL")?;
        if found != Holds::Schema(SCHEMA_VERSION) {
            self.upgrade_schema()?;
        }
        Ok(())
    }
}

/// The (device, inode) of the file at `path`, if there is one.
pub(super) fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn is_busy(err: &anyhow::Error) -> bool {
    err.downcast_ref::<rusqlite::Error>()
        .is_some_and(is_busy_code)
}

fn is_busy_code(err: &rusqlite::Error) -> bool {
    err.sqlite_error_code().is_some_and(|code| {
        matches!(
            code,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
        )
    })
}

/// The failure of a read that found the file written to every time it read it without locks.
fn changing(path: &Path) -> String {
    format!(
        "cannot read database {}: it kept changing while it was read; try again",
        path.display()
    )
}
