//! Where locks live. [`LockStore`] is the one interface every command talks to; each backend
//! (the embedded SQLite file, PostgreSQL) implements it with the same guarantees:
//!
//! - every operation is one atomic transaction on one resource, serialised per resource and
//!   guarded by `UNIQUE(resource)`; its decision is [`crate::engine`]'s, the same on every store;
//! - a lock is live while `now < expires_at`, by the store's own clock;
//! - fences strictly increase with every new tenure and are never reused, not after release,
//!   expiry, `gc` or a crash;
//! - every state change is recorded in the history in the same transaction.

mod op;
mod postgres;
mod sqlite;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::engine::{self, Decision, State};
use crate::lock::{
    Breach, Event, EventKind, Fence, Lock, LogQuery, Mode, Note, Owner, Resource, Timestamp,
};

pub use op::{Durability, Locks, Op, Outcome};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 3;

/// Rows deleted per `gc` transaction, so `gc` never holds a write lock for long.
const GC_BATCH: i64 = 1000;

/// A lock store. Synchronous and object-safe, so commands hold a `Box<dyn LockStore>` and never
/// know which backend is behind it. A store does one thing: it carries out an [`Op`]
/// ([`Locks`] gives each one a typed method). Every local backend gets it from [`Backend`]:
/// the operations are written once, below, and their decisions are [`engine`]'s.
pub trait LockStore: Send {
    /// Carries out `op`.
    ///
    /// # Errors
    ///
    /// Only store failures; every "no" (busy, not held, forbidden) is an [`Outcome`].
    fn perform(&mut self, op: Op) -> Result<Outcome>;

    /// Housekeeping for a moment when nobody waits on this process — `run` calls it once its
    /// command is running — so that it is not paid at exit instead. Best effort: it never
    /// fails, and what it cannot do now is done at a later moment or by another process.
    /// Nothing by default (PostgreSQL has nothing to do).
    fn tidy(&mut self) {}
}

/// Hands out a fresh fence inside the deciding transaction.
pub type FenceSource<'a> = dyn FnMut() -> Result<Fence> + 'a;

/// What a backend provides: reading a resource's state and applying the core's changes in one
/// transaction, plus the read-only queries, which are plain SQL of its own.
pub trait Backend: Send {
    /// One write transaction on `resource`: reads its rows and the store's "now" under the
    /// store's per-resource serialisation, lets `decide` choose, writes the changes it returns in
    /// order, and commits. `decide` may run again if the store retries the transaction.
    /// [`Durability::Relaxed`] lets the store skip flushing this commit to stable storage.
    ///
    /// # Errors
    ///
    /// Store failures, and whatever `decide` returns.
    fn transact<T>(
        &mut self,
        resource: &Resource,
        durability: Durability,
        decide: &mut dyn FnMut(&State, &mut FenceSource<'_>) -> Result<Decision<T>>,
    ) -> Result<T>;

    /// The resource's rows and the store's "now", without writing.
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn read(&mut self, resource: &Resource) -> Result<State>;

    /// The live locks for [`Op::List`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn scan(&mut self, prefix: &str) -> Result<Vec<Lock>>;

    /// The history for [`Op::Log`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn history(&mut self, query: &LogQuery) -> Result<Vec<Event>>;

    /// The deletions of [`Op::Gc`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn prune(&mut self, keep_history: Duration) -> Result<GcReport>;

    /// See [`Op::Watch`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn watch(&mut self, resource: &Resource, owner: &Owner) -> Result<()>;

    /// See [`Op::WaitForChange`].
    ///
    /// # Errors
    ///
    /// Only store failures.
    fn wait_for_change(&mut self, resource: &Resource, timeout: Duration) -> Result<()>;

    /// See [`LockStore::tidy`]; nothing by default.
    fn tidy(&mut self) {}
}

impl<B: Backend> LockStore for B {
    fn perform(&mut self, op: Op) -> Result<Outcome> {
        use Durability::{Durable, Relaxed};
        Ok(match op {
            Op::Acquire { resource, request } => {
                Outcome::Acquire(self.transact(&resource, Durable, &mut |state, fresh| {
                    engine::acquire(&resource, state, &request, &mut *fresh)
                })?)
            }
            Op::Status { resource } => {
                Outcome::Status(engine::status(&resource, &self.read(&resource)?))
            }
            Op::Renew {
                resource,
                owner,
                ttl,
                fence,
            } => Outcome::Renew(self.transact(&resource, Durable, &mut |state, _| {
                Ok(engine::renew(&resource, state, &owner, ttl, fence))
            })?),
            // A release need not survive power loss (see `Durability`).
            Op::Release {
                resource,
                owner,
                fence,
            } => Outcome::Release(self.transact(&resource, Relaxed, &mut |state, _| {
                Ok(engine::release(&resource, state, &owner, fence))
            })?),
            // A kept lease must survive power loss (the hold is what stops a second host); a
            // release need not.
            Op::Finish {
                resource,
                owner,
                fence,
                hold,
            } => {
                let durability = if hold.is_some() { Durable } else { Relaxed };
                Outcome::Finish(self.transact(&resource, durability, &mut |state, _| {
                    Ok(engine::finish(&resource, state, &owner, fence, hold))
                })?)
            }
            Op::Break {
                resource,
                owner,
                breach,
            } => Outcome::Break(self.transact(&resource, Durable, &mut |state, _| {
                Ok(engine::breach(&resource, state, owner.as_ref(), &breach))
            })?),
            Op::Leave { resource, owner } => {
                self.transact(&resource, Relaxed, &mut |state, _| {
                    Ok(engine::leave(state, &owner))
                })?;
                Outcome::Left
            }
            Op::List { prefix } => Outcome::List(self.scan(&prefix)?),
            Op::Log { query } => Outcome::Log(self.history(&query)?),
            Op::Gc { keep_history } => Outcome::Gc(self.prune(keep_history)?),
            Op::Watch { resource, owner } => {
                Backend::watch(self, &resource, &owner)?;
                Outcome::Watching
            }
            Op::WaitForChange { resource, timeout } => {
                Backend::wait_for_change(self, &resource, timeout)?;
                Outcome::Woken
            }
        })
    }

    fn tidy(&mut self) {
        Backend::tidy(self);
    }
}

/// A history row as both stores read it back.
struct HistoryRow<'a> {
    at: Timestamp,
    resource: &'a str,
    owner: &'a str,
    fence: Fence,
    kind: &'a str,
    previous_owner: Option<&'a str>,
    mode: &'a str,
    lim: Option<i64>,
    note: Option<&'a str>,
    /// Who broke the tenure, and why (`broken` events).
    by: Option<&'a str>,
    reason: Option<&'a str>,
}

/// # Errors
///
/// An event kind or mode this build does not know (the store was written by something else).
fn event(row: &HistoryRow<'_>) -> Result<Event> {
    let Some(kind) = EventKind::parse(row.kind) else {
        anyhow::bail!("the history holds an unknown event kind {:?}", row.kind);
    };
    Ok(Event {
        at: row.at,
        resource: Resource::from_store(row.resource),
        owner: Owner::from_store(row.owner),
        fence: row.fence,
        event: kind,
        previous_owner: row.previous_owner.map(Owner::from_store),
        mode: mode_of(row.mode, row.lim)?,
        note: row.note.map(Note::from_store),
        broken: row.by.zip(row.reason).map(|(by, reason)| Breach {
            by: Note::from_store(by),
            reason: Note::from_store(reason),
        }),
    })
}

/// How both stores write a mode: a name, and a semaphore's N.
fn mode_columns(mode: Mode) -> (&'static str, Option<i64>) {
    match mode {
        Mode::Exclusive => ("exclusive", None),
        Mode::Shared => ("shared", None),
        Mode::Semaphore(n) => ("semaphore", Some(i64::from(n))),
    }
}

/// Reads back what [`mode_columns`] wrote.
///
/// # Errors
///
/// A mode this build does not know.
fn mode_of(name: &str, lim: Option<i64>) -> Result<Mode> {
    match (name, lim.map(u32::try_from)) {
        ("exclusive", _) => Ok(Mode::Exclusive),
        ("shared", _) => Ok(Mode::Shared),
        ("semaphore", Some(Ok(n))) if n >= 2 => Ok(Mode::Semaphore(n)),
        _ => anyhow::bail!("the store holds an unknown lock mode {name:?} ({lim:?})"),
    }
}

/// The message for a store written by a newer distlock, the same on every backend.
fn newer_schema(version: i64) -> String {
    format!(
        "it was written by a newer distlock (schema version {version}; this one understands up \
         to {SCHEMA_VERSION}): upgrade distlock"
    )
}

/// What `gc` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GcReport {
    pub expired_locks: u64,
    pub history_events: u64,
}

/// Where the store is, as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file, and how its missing folders are made.
    Sqlite(PathBuf, Folders),
    Postgres(String),
}

/// How the missing folders of a SQLite store's path are made, by the first command that writes
/// to it (no other command makes any).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folders {
    /// Mode 0700, as the XDG Base Directory spec asks of the folders it names: the default
    /// store, under `$XDG_STATE_HOME` or `~/.local/state`, is the user's own.
    Private,
    /// As `mkdir -p` makes them (0777 less the umask): the user named the path, maybe for a
    /// store shared by a group, made under `umask 002` in a setgid folder (see the README).
    AsUmask,
}

impl Location {
    /// Reads `--db` / `DISTLOCK_DB`. What it names is never guessed: a value with a URL
    /// scheme (`word://…` or `word:/…`, the scheme in any case) is a URL, and only
    /// `postgres`/`postgresql` (PostgreSQL) are stores; any other scheme is refused, so a
    /// mistyped URL never becomes a local file named after it. Anything else is a file path
    /// (one with a colon in it is written `./a:b`). Without one, the default path under the
    /// user's state folder.
    ///
    /// # Errors
    ///
    /// A usage message when a URL has an unknown scheme or cannot be read, `--db` is empty or
    /// blank, or no `--db` was given and neither `XDG_STATE_HOME` nor `HOME` is an absolute
    /// path.
    pub fn resolve(db: Option<&str>) -> Result<Location, String> {
        let Some(db) = db else {
            return default_path().map(|path| Location::Sqlite(path, Folders::Private));
        };
        if db.trim().is_empty() {
            return Err("--db must not be empty or blank".to_owned());
        }
        let Some((scheme, rest)) = url_scheme(db) else {
            return Ok(Location::Sqlite(PathBuf::from(db), Folders::AsUmask));
        };
        match scheme.to_ascii_lowercase().as_str() {
            known @ ("postgres" | "postgresql") => {
                let url = format!("{known}:{rest}");
                postgres::Target::parse(&url)?;
                Ok(Location::Postgres(url))
            }
            "http" | "https" => Err(format!(
                "--db {scheme}://…: distlock servers are not supported by this build; use a file \
                 path or a postgres:// URL"
            )),
            _ => Err(format!(
                "--db: unknown URL scheme {:?}; distlock knows postgres:// and postgresql:// \
                 (PostgreSQL) and file paths (write a path with a colon in it as ./{}…)",
                crate::output::shown(scheme),
                crate::output::shown(scheme),
            )),
        }
    }

    /// The value `run` exports to its command as `DISTLOCK_DB`: a URL as given, a file path
    /// made absolute against the current folder, so that a command that changes folders still
    /// reaches this store. As [`std::path::absolute`] does it: `.` components are dropped and
    /// nothing else is touched — no symlink is resolved, no `..` collapsed, the file need not
    /// exist — so the value names the store exactly as `--db` did. Should the current folder
    /// be unreadable (removed), the path is exported as given.
    pub fn to_env_value(&self) -> std::ffi::OsString {
        match self {
            Location::Sqlite(path, _) => std::path::absolute(path)
                .unwrap_or_else(|_| path.clone())
                .into_os_string(),
            Location::Postgres(url) => url.into(),
        }
    }
}

/// The scheme of a value that is a URL, and what follows its colon: `word:/…`, where the word
/// is a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-` or `.`).
fn url_scheme(value: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = value.split_once(':')?;
    let mut chars = scheme.chars();
    let starts = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let word = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (starts && word && rest.starts_with('/')).then_some((scheme, rest))
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
    let why = if std::env::var_os("HOME").is_some() {
        "HOME is not an absolute path"
    } else {
        "neither XDG_STATE_HOME nor HOME is set"
    };
    Err(format!("cannot find a default database: {why}; pass --db"))
}

/// Opens the store at `location` with the host's clock, for a command that may create it
/// (`acquire`, `run`): a SQLite store is made, with its missing folders, if it is not there.
///
/// # Errors
///
/// When the store cannot be opened, is corrupt or comes from a newer distlock.
pub fn open(location: &Location) -> Result<Box<dyn LockStore>> {
    match location {
        Location::Sqlite(path, folders) => Ok(Box::new(open_sqlite(path, *folders)?)),
        Location::Postgres(url) => Ok(Box::new(PostgresStore::open(url)?)),
    }
}

/// Opens the store at `location` for a command that writes only what it finds (`release`,
/// `renew`, `break`, `gc`): a SQLite store that is not there — no file, or an empty one — is
/// [`Absent`], and nothing is created, not the file, not its folders. Such a command finds
/// nothing to change there, and answers as for an empty store (`release` → 1).
///
/// # Errors
///
/// As [`open`], for a store that exists.
pub fn open_existing(location: &Location) -> Result<Box<dyn LockStore>> {
    match location {
        Location::Sqlite(path, _) if !holds_a_store(path) => Ok(Box::new(Absent)),
        Location::Sqlite(path, _) => match SqliteStore::open_existing(path, Box::new(SystemClock))?
        {
            Some(store) => Ok(Box::new(store)),
            None => Ok(Box::new(Absent)),
        },
        Location::Postgres(url) => Ok(Box::new(PostgresStore::open(url)?)),
    }
}

/// Opens the store at `location` for a command that only reads (`status`, `list`, `log`). A
/// SQLite store is opened read-only ([`SqliteStore::open_read_only`]): nothing is written,
/// upgraded or created, and one that is not there is [`Absent`].
///
/// # Errors
///
/// As [`open`], for a store that exists.
pub fn open_read_only(location: &Location) -> Result<Box<dyn LockStore>> {
    match location {
        Location::Sqlite(path, _) => {
            match SqliteStore::open_read_only(path, Box::new(SystemClock))? {
                Some(store) => Ok(Box::new(store)),
                None => Ok(Box::new(Absent)),
            }
        }
        Location::Postgres(url) => Ok(Box::new(PostgresStore::open_read_only(url)?)),
    }
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

/// Opens again a store this process opened before (`run`'s heartbeat, on a connection of its
/// own, and after a failure on a new one): as [`open`], except that a SQLite store is never
/// created — not its file, not its folders. One that is gone is [`Vanished`]: its locks went
/// with it, and a store made anew at its path would hold none of them.
///
/// # Errors
///
/// [`Vanished`] when the SQLite file no longer exists; otherwise as [`open`].
pub fn reopen(location: &Location) -> Result<Box<dyn LockStore>> {
    match location {
        Location::Sqlite(path, _) => {
            match SqliteStore::open_existing(path, Box::new(SystemClock))? {
                Some(store) => Ok(Box::new(store)),
                None => Err(Vanished(path.clone()).into()),
            }
        }
        Location::Postgres(url) => Ok(Box::new(PostgresStore::open(url)?)),
    }
}

/// A SQLite store that is not there: no file (and perhaps no folder), or an empty file. It
/// reads as an empty store, and nothing is ever written to it, so nothing is made at a path
/// that was mistyped: a decision that would write (which no command that opens it makes: see
/// [`open_existing`] and [`open_read_only`]) is refused.
struct Absent;

impl Absent {
    /// A resource of a store that holds nothing.
    fn nothing() -> State {
        State {
            now: Timestamp::now(),
            leases: Vec::new(),
            queue: Vec::new(),
        }
    }
}

impl Backend for Absent {
    fn transact<T>(
        &mut self,
        _resource: &Resource,
        _durability: Durability,
        decide: &mut dyn FnMut(&State, &mut FenceSource<'_>) -> Result<Decision<T>>,
    ) -> Result<T> {
        let mut no_fence = || anyhow::bail!("the store does not exist");
        let decision = decide(&Absent::nothing(), &mut no_fence)?;
        if !decision.changes.is_empty() {
            anyhow::bail!("the store does not exist");
        }
        Ok(decision.outcome)
    }

    fn read(&mut self, _resource: &Resource) -> Result<State> {
        Ok(Absent::nothing())
    }

    fn scan(&mut self, _prefix: &str) -> Result<Vec<Lock>> {
        Ok(Vec::new())
    }

    fn history(&mut self, _query: &LogQuery) -> Result<Vec<Event>> {
        Ok(Vec::new())
    }

    fn prune(&mut self, _keep_history: Duration) -> Result<GcReport> {
        Ok(GcReport::default())
    }

    fn watch(&mut self, _resource: &Resource, _owner: &Owner) -> Result<()> {
        Ok(())
    }

    fn wait_for_change(&mut self, _resource: &Resource, timeout: Duration) -> Result<()> {
        std::thread::sleep(timeout);
        Ok(())
    }
}

/// A SQLite store that was there and is gone: its file (or its folder) was removed after this
/// process opened it. [`reopen`] reports it, and so does a write through a connection opened
/// before the removal, which would otherwise go to the unlinked file. The locks it held are
/// lost to everyone: whoever opens the path next makes an empty store there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vanished(pub PathBuf);

impl std::fmt::Display for Vanished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the store {} no longer exists", self.0.display())
    }
}

impl std::error::Error for Vanished {}

fn open_sqlite(path: &Path, folders: Folders) -> Result<SqliteStore> {
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

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;
    use crate::engine::Request;
    use crate::lock::{Acquire, Owner, Resource, Ttl};

    #[test]
    fn db_values_with_a_url_scheme_are_urls_and_only_known_schemes_are_stores() {
        // (value, what it names: Ok(path or url), or Err(a word the message must hold))
        let path = |p: &str| Ok(Location::Sqlite(PathBuf::from(p), Folders::AsUmask));
        let pg = |u: &str| Ok(Location::Postgres(u.to_owned()));
        let refused = |word: &'static str| Err(word);
        let cases: [(&str, Result<Location, &str>); 22] = [
            ("locks.db", path("locks.db")),
            (
                "/var/lib/distlock/locks.db",
                path("/var/lib/distlock/locks.db"),
            ),
            ("./a:b", path("./a:b")),
            ("a:b", path("a:b")),
            ("dir/x:/y", path("dir/x:/y")),
            ("1x://y", path("1x://y")),
            ("_x://y", path("_x://y")),
            ("postgres://u@h/db", pg("postgres://u@h/db")),
            ("postgresql://u@h/db", pg("postgresql://u@h/db")),
            // Schemes in any case, passed on in lower case.
            ("POSTGRES://u@h/db", pg("postgres://u@h/db")),
            ("PostgreSQL://u@h/db", pg("postgresql://u@h/db")),
            // Typos and other databases are never files.
            ("postgress://u@h/db", refused("\"postgress\"")),
            ("mysql://x/y", refused("\"mysql\"")),
            ("sqlite:/tmp/x.db", refused("\"sqlite\"")),
            ("file:///tmp/x.db", refused("\"file\"")),
            ("a+b.c-d://x", refused("\"a+b.c-d\"")),
            ("postgres:/x", refused("PostgreSQL")),
            ("http://locks:7878", refused("servers")),
            ("HTTPS://locks:7878", refused("servers")),
            ("", refused("empty")),
            (" ", refused("blank")),
            ("\t\n", refused("blank")),
        ];
        for (value, want) in cases {
            let got = Location::resolve(Some(value));
            match (&got, &want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{value:?}"),
                (Err(message), Err(word)) => {
                    assert!(message.contains(word), "{value:?}: {message}");
                    // The URL itself is never echoed: it may hold a password.
                    assert!(
                        !message.contains("x/y") && !message.contains("u@h"),
                        "{message}"
                    );
                }
                _ => panic!("{value:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_removed_sqlite_store_is_vanished_to_its_open_connection_and_is_never_reopened_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("locks.db");
        let location = Location::Sqlite(path.clone(), Folders::AsUmask);
        let resource = Resource::parse("r").unwrap();
        let owner = Owner::parse("o").unwrap();
        let ttl = Ttl::from_secs(30).unwrap();
        let mut held = open(&location).unwrap();
        let request = Request::exclusive(owner.clone(), ttl);
        let Acquire::Acquired { lock, .. } = held.acquire(&resource, &request).unwrap() else {
            panic!("a new store's first acquire is granted");
        };
        let vanished = |err: anyhow::Error| err.downcast_ref::<Vanished>().cloned();
        let gone = Some(Vanished(path.clone()));

        // The file alone, then its folder too.
        for remove in [dir.path().join("state/locks.db"), dir.path().join("state")] {
            if remove.is_dir() {
                std::fs::remove_dir_all(&remove).unwrap();
            } else {
                std::fs::remove_file(&remove).unwrap();
            }
            let renewed = held.renew(&resource, &owner, ttl, Some(lock.fence));
            assert_eq!(
                renewed.err().and_then(vanished),
                gone,
                "{remove:?}: a write"
            );
            let reopened = reopen(&location).map(|_| ());
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
            gone.map(|g| g.to_string()),
            Some(format!("the store {} no longer exists", path.display()))
        );
    }

    #[test]
    fn the_exported_db_is_absolute_for_a_file_and_unchanged_for_a_url() {
        let here = std::env::current_dir().expect("the current folder");
        for (given, exported) in [
            ("locks.db", here.join("locks.db")),
            ("./state/locks.db", here.join("state/locks.db")),
            // Kept as named: `..` is not collapsed (a symlink may stand before it).
            ("link/../locks.db", here.join("link/../locks.db")),
            (
                "/var/lib/distlock/locks.db",
                PathBuf::from("/var/lib/distlock/locks.db"),
            ),
        ] {
            let location = Location::Sqlite(PathBuf::from(given), Folders::AsUmask);
            // Compared as strings: `Path` equality would overlook a `.` left in.
            assert_eq!(
                location.to_env_value(),
                exported.into_os_string(),
                "--db {given}"
            );
        }
        let url = "postgres://distlock@db.internal/ops";
        assert_eq!(
            Location::Postgres(url.to_owned()).to_env_value(),
            OsString::from(url)
        );
    }
}
