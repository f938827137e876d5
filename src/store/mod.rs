//! Where locks live. [`LockStore`] is the one interface every command talks to; each backend
//! (the embedded SQLite file, PostgreSQL) implements it with the same guarantees:
//!
//! - every operation is one atomic transaction, guarded by `UNIQUE(resource)`;
//! - a lock is live while `now < expires_at`, by the store's own clock;
//! - fences strictly increase with every new tenure and are never reused, not after release,
//!   expiry, `gc` or a crash;
//! - every state change is recorded in the history in the same transaction.

mod postgres;
mod sqlite;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::lock::{Acquire, Event, Fence, Lock, LogQuery, Owner, Release, Renew, Resource, Ttl};

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 1;

/// A lock store. Synchronous and object-safe, so commands hold a `Box<dyn LockStore>` and never
/// know which backend is behind it.
pub trait LockStore: Send {
    /// Takes the lock if it is free or expired (a new tenure, with a new fence), or extends it if
    /// `owner` already holds it; otherwise reports the holder and changes nothing.
    ///
    /// # Errors
    ///
    /// Only store failures; a busy lock is [`Acquire::Busy`].
    fn acquire(&mut self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<Acquire>;

    /// The live lock on `resource`, if any. An expired lock is `None`, never stale data.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn status(&mut self, resource: &Resource) -> Result<Option<Lock>>;

    /// Moves the live lock's expiry to now + `ttl`. With `fence`, only that tenure is renewed.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn renew(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> Result<Renew>;

    /// Removes the live lock held by `owner`. With `fence`, only that tenure is released.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn release(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
    ) -> Result<Release>;

    /// The live locks whose resource starts with `prefix`, sorted by resource.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn list(&mut self, prefix: &str) -> Result<Vec<Lock>>;

    /// Recorded state changes, oldest first.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn log(&mut self, query: &LogQuery) -> Result<Vec<Event>>;

    /// Deletes expired lock rows and history older than `keep_history`, in bounded batches.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn gc(&mut self, keep_history: Duration) -> Result<GcReport>;
}

/// What `gc` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    pub expired_locks: u64,
    pub history_events: u64,
}

/// Where the store is, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// Reads `--db` / `DISTLOCK_DB`: a `postgres://` or `postgresql://` URL selects PostgreSQL,
    /// anything else is a file path. Without one, the default path under the user's state folder.
    ///
    /// # Errors
    ///
    /// A usage message when a PostgreSQL URL cannot be read, `--db` is empty, or no `--db` was
    /// given and neither `XDG_STATE_HOME` nor `HOME` is set.
    pub fn resolve(db: Option<&str>) -> Result<Location, String> {
        match db {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                postgres::Target::parse(url)?;
                Ok(Location::Postgres(url.to_owned()))
            }
            Some("") => Err("--db must not be empty".to_owned()),
            Some(path) => Ok(Location::Sqlite(PathBuf::from(path))),
            None => default_path().map(Location::Sqlite),
        }
    }

    /// The turnstile that lets waiters for `resource` sleep until its holder exits (SQLite
    /// only; see [`crate::turnstile`]).
    pub fn turnstile(&self, resource: &Resource) -> Option<crate::turnstile::Turnstile> {
        match self {
            Location::Sqlite(path) => crate::turnstile::Turnstile::open(path, resource),
            Location::Postgres(_) => None,
        }
    }

    /// The value `run` exports to its command as `DISTLOCK_DB`.
    pub fn to_env_value(&self) -> std::ffi::OsString {
        match self {
            Location::Sqlite(path) => path.clone().into_os_string(),
            Location::Postgres(url) => url.into(),
        }
    }
}

/// `$XDG_STATE_HOME/distlock/locks.db`, else `$HOME/.local/state/distlock/locks.db`.
fn default_path() -> Result<PathBuf, String> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(state) = absolute("XDG_STATE_HOME") {
        return Ok(state.join("distlock").join("locks.db"));
    }
    if let Some(home) = absolute("HOME") {
        return Ok(home.join(".local/state/distlock/locks.db"));
    }
    Err("cannot find a default database: neither XDG_STATE_HOME nor HOME is set; pass --db".into())
}

/// Opens the store at `location` with the host's clock.
///
/// # Errors
///
/// When the store cannot be opened, is corrupt or comes from a newer distlock.
pub fn open(location: &Location) -> Result<Box<dyn LockStore>> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(open_sqlite(path)?)),
        Location::Postgres(url) => Ok(Box::new(PostgresStore::open(url)?)),
    }
}

fn open_sqlite(path: &Path) -> Result<SqliteStore> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
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

/// The store's notion of now. The CLI uses the host's clock; tests drive a manual one.
pub trait Clock: Send {
    fn now(&self) -> crate::lock::Timestamp;
}

/// The host's wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> crate::lock::Timestamp {
        crate::lock::Timestamp::now()
    }
}
