//! The embedded store: one SQLite file on one host.
//!
//! - WAL mode with `synchronous=FULL`, so a committed acquire survives power loss and a fence is
//!   never handed out twice; a busy database is waited on for [`BUSY_TIMEOUT`].
//! - Every operation that may write runs in one `BEGIN IMMEDIATE` transaction: the write lock is
//!   taken before the current row is read, so no other process can slip in between the read and
//!   the write. `resource` is the table's primary key, the `UNIQUE(resource)` guard behind that.
//! - Fences come from a store-wide counter (`fence_counter`), not from the lock row, so deleting
//!   rows (release, `gc`) can never make a fence repeat.
//! - Times are milliseconds since the Unix epoch, from the injected [`Clock`].
//! - The schema version lives in `PRAGMA user_version`; a newer one is refused, and a SQLite file
//!   that holds other tables is never written to.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rusqlite::config::DbConfig;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use super::{Clock, GcReport, LockStore, SCHEMA_VERSION};
use crate::lock::{
    Acquire, Event, EventKind, Fence, Holder, Lock, LogQuery, Owner, Refusal, Release, Renew,
    Resource, Tenure, Timestamp, Ttl,
};

/// How long an operation waits for another process's write to finish before it gives up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How large the WAL may grow before a closing process checkpoints and truncates it. A process
/// that opens the database alone rebuilds the WAL index from every frame in the WAL (about
/// 4,000 instructions a 4 KiB frame) and cannot know which frames were already checkpointed, so
/// the WAL must be truncated, not merely restarted; at this size that happens every ~20 commits
/// and costs its two fsyncs there, instead of on every close.
const WAL_TRUNCATE_BYTES: u64 = 100 * 4120;

/// Rows deleted per `gc` transaction, so `gc` never holds the write lock for long.
const GC_BATCH: i64 = 1000;

const SCHEMA: &str = "
CREATE TABLE locks (
    resource    TEXT    NOT NULL PRIMARY KEY,   -- UNIQUE(resource): one row per resource
    owner       TEXT    NOT NULL,
    fence       INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,               -- ms since the Unix epoch
    expires_at  INTEGER NOT NULL                -- live while now < expires_at
) WITHOUT ROWID;

CREATE TABLE fence_counter (
    id   INTEGER PRIMARY KEY CHECK (id = 0),
    last INTEGER NOT NULL
);
INSERT INTO fence_counter (id, last) VALUES (0, 0);

CREATE TABLE history (
    id             INTEGER PRIMARY KEY,         -- commit order
    at             INTEGER NOT NULL,
    resource       TEXT    NOT NULL,
    owner          TEXT    NOT NULL,
    fence          INTEGER NOT NULL,
    event          TEXT    NOT NULL,
    previous_owner TEXT
);
CREATE INDEX history_by_resource ON history (resource, id);
";

pub struct SqliteStore {
    conn: Connection,
    clock: Box<dyn Clock>,
    /// The `-wal` file beside the database.
    wal: PathBuf,
    /// The database's path and the file it named when opened (device, inode).
    path: PathBuf,
    identity: Option<(u64, u64)>,
}

impl Drop for SqliteStore {
    /// Truncates a WAL that has grown past [`WAL_TRUNCATE_BYTES`], without waiting: if another
    /// process is busy with the database, it is left for a later close.
    fn drop(&mut self) {
        let large = std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > WAL_TRUNCATE_BYTES);
        if large && self.conn.busy_timeout(Duration::ZERO).is_ok() {
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }
}

/// The lock row as it is, live or not.
struct Row {
    owner: String,
    fence: i64,
    acquired_at: i64,
    expires_at: i64,
}

impl Row {
    /// Reads `owner, fence, acquired_at, expires_at` from the result columns starting at `first`.
    fn read(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Row> {
        Ok(Row {
            owner: r.get(first)?,
            fence: r.get(first + 1)?,
            acquired_at: r.get(first + 2)?,
            expires_at: r.get(first + 3)?,
        })
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up.
    ///
    /// # Errors
    ///
    /// When the file cannot be opened or created, is not a SQLite database, belongs to another
    /// application, or was written by a newer distlock.
    pub fn open(path: &Path, clock: Box<dyn Clock>) -> Result<SqliteStore> {
        let shown = path.display();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)
            .with_context(|| format!("cannot open database {shown}"))?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // A distlock process makes one or two commits and exits. Checkpointing the WAL into the
        // database on every close would cost three or four extra fsyncs; instead the WAL stays
        // until it passes WAL_TRUNCATE_BYTES (see Drop). Durability is unchanged: each commit
        // fsyncs the WAL.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let mut store = SqliteStore {
            conn,
            clock,
            wal: wal.into(),
            path: path.to_owned(),
            identity: identity(path),
        };
        // Opening races with other processes' WAL recovery and truncation, which SQLite
        // reports as SQLITE_BUSY without consulting the busy handler: wait those out too.
        let start = std::time::Instant::now();
        loop {
            match store.prepare() {
                Ok(()) => return Ok(store),
                Err(err) if is_busy(&err) && start.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(1 + fastrand::u64(..10)));
                }
                Err(err) => return Err(err.context(format!("cannot use database {shown}"))),
            }
        }
    }

    /// Settings every connection needs, then the schema check. Reads the header before anything
    /// writes, so a file that is not a database is left exactly as it was.
    fn prepare(&mut self) -> Result<()> {
        // One statement, one snapshot: a racing process commits its schema and the version
        // together, so both are seen or neither is.
        let (version, tables): (i64, i64) = self.conn.query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_master)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        check_version(version, tables)?;
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
        if version < SCHEMA_VERSION {
            self.create_schema()?;
        }
        Ok(())
    }

    /// Creates the schema once, even when many processes open a new file at the same moment:
    /// the first to take the write lock creates it, the others see the version and do nothing.
    fn create_schema(&mut self) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (version, tables): (i64, i64) = tx.query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_master)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        check_version(version, tables)?;
        if version == 0 {
            tx.execute_batch(SCHEMA)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn release_tenure(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
    ) -> Result<Release> {
        let now = self.clock.now();
        let tx = self.write_tx()?;
        let held = match own_tenure(&tx, now, resource, owner, fence)? {
            Ok(held) => held,
            Err(refusal) => return Ok(refusal.into()),
        };
        tx.prepare_cached("DELETE FROM locks WHERE resource = ?1")?
            .execute([resource.as_str()])?;
        record(
            &tx,
            now,
            resource,
            &held.owner,
            held.fence,
            EventKind::Released,
            None,
        )?;
        tx.commit().context("cannot commit the release")?;
        Ok(Release::Released)
    }

    fn write_tx(&mut self) -> Result<Transaction<'_>> {
        // A connection held open (by `run`) keeps writing to its file even after the file is
        // deleted or replaced, while a new store appears at the path: refuse, so `run` treats
        // it as a store failure and stops its command before the lease could be doubled.
        if identity(&self.path) != self.identity {
            bail!(
                "the database {} was removed or replaced while in use",
                self.path.display()
            );
        }
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("cannot start a write transaction")
    }
}

/// The (device, inode) of the file at `path`, if there is one.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

fn is_busy(err: &anyhow::Error) -> bool {
    err.downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|code| {
            matches!(
                code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        })
}

/// Refuses databases this build must not touch: a newer schema, or another application's.
fn check_version(version: i64, tables: i64) -> Result<()> {
    if version > SCHEMA_VERSION {
        bail!(
            "it was written by a newer distlock (schema version {version}; this one \
             understands up to {SCHEMA_VERSION}): upgrade distlock"
        );
    }
    if version == 0 && tables > 0 {
        bail!("it is a SQLite database of another application, not a distlock database");
    }
    Ok(())
}

fn current(tx: &Transaction<'_>, resource: &Resource) -> rusqlite::Result<Option<Row>> {
    tx.prepare_cached(
        "SELECT owner, fence, acquired_at, expires_at FROM locks WHERE resource = ?1",
    )?
    .query_row([resource.as_str()], |r| Row::read(r, 0))
    .optional()
}

/// The live lock of `owner`'s tenure on `resource` (this transaction holds the write lock), or
/// why not.
fn own_tenure(
    tx: &Transaction<'_>,
    now: Timestamp,
    resource: &Resource,
    owner: &Owner,
    fence: Option<Fence>,
) -> rusqlite::Result<Result<Row, Refusal>> {
    Ok(match current(tx, resource)? {
        Some(held) if held.expires_at > now.0 => {
            match Refusal::check(&held.owner, held.fence, owner, fence) {
                Some(refusal) => Err(refusal),
                None => Ok(held),
            }
        }
        _ => Err(Refusal::NotFound),
    })
}

fn next_fence(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
    tx.prepare_cached("UPDATE fence_counter SET last = last + 1 WHERE id = 0 RETURNING last")?
        .query_row([], |r| r.get(0))
}

fn record(
    tx: &Transaction<'_>,
    at: Timestamp,
    resource: &Resource,
    owner: &str,
    fence: i64,
    event: EventKind,
    previous_owner: Option<&str>,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO history (at, resource, owner, fence, event, previous_owner)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        at.0,
        resource.as_str(),
        owner,
        fence,
        event.as_str(),
        previous_owner
    ])?;
    Ok(())
}

fn lock_from(resource: &Resource, row: &Row) -> Lock {
    Lock {
        resource: resource.clone(),
        owner: Owner::from_store(&row.owner),
        fence: Fence(row.fence),
        acquired_at: Timestamp(row.acquired_at),
        expires_at: Timestamp(row.expires_at),
    }
}

impl LockStore for SqliteStore {
    fn acquire(&mut self, resource: &Resource, owner: &Owner, ttl: Ttl) -> Result<Acquire> {
        let now = self.clock.now();
        let expires_at = now.0.saturating_add(ttl.as_millis());
        let tx = self.write_tx()?;
        let (row, tenure, event, previous) = match current(&tx, resource)? {
            Some(held) if held.expires_at > now.0 => {
                if held.owner != owner.as_str() {
                    // Nothing was written: dropping the transaction rolls it back.
                    return Ok(Acquire::Busy {
                        holder: Holder {
                            owner: Owner::from_store(&held.owner),
                            expires_at: Timestamp(held.expires_at),
                        },
                    });
                }
                tx.prepare_cached(
                    "UPDATE locks SET acquired_at = ?2, expires_at = ?3 WHERE resource = ?1",
                )?
                .execute(params![resource.as_str(), now.0, expires_at])?;
                let row = Row {
                    acquired_at: now.0,
                    expires_at,
                    ..held
                };
                (row, Tenure::Extended, EventKind::Extended, None)
            }
            expired_or_missing => {
                let fence = next_fence(&tx)?;
                tx.prepare_cached(
                    "INSERT INTO locks (resource, owner, fence, acquired_at, expires_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (resource) DO UPDATE SET
                         owner = excluded.owner, fence = excluded.fence,
                         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                )?
                .execute(params![
                    resource.as_str(),
                    owner.as_str(),
                    fence,
                    now.0,
                    expires_at
                ])?;
                let row = Row {
                    owner: owner.as_str().to_owned(),
                    fence,
                    acquired_at: now.0,
                    expires_at,
                };
                match expired_or_missing {
                    Some(old) => (row, Tenure::New, EventKind::TakenOver, Some(old.owner)),
                    None => (row, Tenure::New, EventKind::Acquired, None),
                }
            }
        };
        record(
            &tx,
            now,
            resource,
            owner.as_str(),
            row.fence,
            event,
            previous.as_deref(),
        )?;
        tx.commit().context("cannot commit the acquire")?;
        Ok(Acquire::Acquired {
            lock: lock_from(resource, &row),
            tenure,
        })
    }

    fn status(&mut self, resource: &Resource) -> Result<Option<Lock>> {
        let now = self.clock.now();
        let row = self
            .conn
            .prepare_cached(
                "SELECT owner, fence, acquired_at, expires_at FROM locks
                 WHERE resource = ?1 AND expires_at > ?2",
            )?
            .query_row(params![resource.as_str(), now.0], |r| Row::read(r, 0))
            .optional()?;
        Ok(row.map(|row| lock_from(resource, &row)))
    }

    fn renew(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        ttl: Ttl,
        fence: Option<Fence>,
    ) -> Result<Renew> {
        let now = self.clock.now();
        let tx = self.write_tx()?;
        let held = match own_tenure(&tx, now, resource, owner, fence)? {
            Ok(held) => held,
            Err(refusal) => return Ok(refusal.into()),
        };
        let expires_at = now.0.saturating_add(ttl.as_millis());
        tx.prepare_cached("UPDATE locks SET expires_at = ?2 WHERE resource = ?1")?
            .execute(params![resource.as_str(), expires_at])?;
        record(
            &tx,
            now,
            resource,
            &held.owner,
            held.fence,
            EventKind::Renewed,
            None,
        )?;
        tx.commit().context("cannot commit the renewal")?;
        let row = Row { expires_at, ..held };
        Ok(Renew::Renewed {
            lock: lock_from(resource, &row),
        })
    }

    fn release(
        &mut self,
        resource: &Resource,
        owner: &Owner,
        fence: Option<Fence>,
    ) -> Result<Release> {
        // A release need not survive power loss: rolled back, the lock merely stays until its
        // TTL runs out, and the next commit's fsync persists it anyway (the WAL is synced
        // whole). Skipping its fsync halves the cost of `run`; acquires stay fully durable.
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        let outcome = self.release_tenure(resource, owner, fence);
        self.conn.pragma_update(None, "synchronous", "FULL")?;
        outcome
    }

    fn list(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        let now = self.clock.now();
        // Resources sharing a prefix form one contiguous range of the primary key (BINARY
        // collation compares bytes), so the scan starts at the prefix and stops after it.
        let mut stmt = self.conn.prepare_cached(
            "SELECT resource, owner, fence, acquired_at, expires_at FROM locks
             WHERE resource >= ?1 ORDER BY resource",
        )?;
        let mut rows = stmt.query([prefix])?;
        let mut locks = Vec::new();
        while let Some(r) = rows.next()? {
            let resource: String = r.get(0)?;
            if !resource.starts_with(prefix) {
                break;
            }
            let row = Row::read(r, 1)?;
            if row.expires_at > now.0 {
                locks.push(lock_from(&Resource::from_store(&resource), &row));
            }
        }
        Ok(locks)
    }

    fn log(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        let filter = if query.resource.is_some() {
            "resource = ?1 AND at >= ?2"
        } else {
            "?1 IS NULL AND at >= ?2"
        };
        let sql = format!(
            "SELECT at, resource, owner, fence, event, previous_owner FROM (
                 SELECT * FROM history WHERE {filter} ORDER BY id DESC LIMIT ?3
             ) ORDER BY id"
        );
        let limit = query
            .limit
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let since = query.since.map_or(i64::MIN, |ago| {
            let ago = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
            self.clock.now().0.saturating_sub(ago)
        });
        let resource = query.resource.as_ref().map(Resource::as_str);
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(params![resource, since, limit])?;
        let mut events = Vec::new();
        while let Some(r) = rows.next()? {
            let kind: String = r.get(4)?;
            let Some(event) = EventKind::parse(&kind) else {
                bail!("the history holds an unknown event kind {kind:?}");
            };
            let previous: Option<String> = r.get(5)?;
            events.push(Event {
                at: Timestamp(r.get(0)?),
                resource: Resource::from_store(&r.get::<_, String>(1)?),
                owner: Owner::from_store(&r.get::<_, String>(2)?),
                fence: Fence(r.get(3)?),
                event,
                previous_owner: previous.as_deref().map(Owner::from_store),
            });
        }
        Ok(events)
    }

    fn gc(&mut self, keep_history: Duration) -> Result<GcReport> {
        let now = self.clock.now();
        let keep = i64::try_from(keep_history.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now.0.saturating_sub(keep);
        let mut report = GcReport::default();
        // Expired rows, walked in key order a batch per transaction.
        let mut after = String::new();
        loop {
            let tx = self.write_tx()?;
            let batch: Vec<String> = tx
                .prepare_cached(
                    "DELETE FROM locks WHERE resource IN (
                         SELECT resource FROM locks WHERE resource > ?1 AND expires_at <= ?2
                         ORDER BY resource LIMIT ?3)
                     RETURNING resource",
                )?
                .query_map(params![after, now.0, GC_BATCH], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            tx.commit()?;
            report.expired_locks += batch.len() as u64;
            match batch.into_iter().max() {
                Some(last) => after = last,
                None => break,
            }
        }
        loop {
            let tx = self.write_tx()?;
            let deleted = tx
                .prepare_cached(
                    "DELETE FROM history WHERE id IN (
                         SELECT id FROM history WHERE at < ?1 ORDER BY id LIMIT ?2)",
                )?
                .execute(params![cutoff, GC_BATCH])?;
            tx.commit()?;
            report.history_events += deleted as u64;
            if deleted == 0 {
                break;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    /// A clock the test moves by hand.
    #[derive(Clone)]
    struct ManualClock(Arc<AtomicI64>);

    impl ManualClock {
        fn advance(&self, millis: i64) {
            self.0.fetch_add(millis, Ordering::SeqCst);
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Timestamp {
            Timestamp(self.0.load(Ordering::SeqCst))
        }
    }

    fn store() -> (tempfile::TempDir, SqliteStore, ManualClock) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock(Arc::new(AtomicI64::new(1_000_000)));
        let store =
            SqliteStore::open(&dir.path().join("locks.db"), Box::new(clock.clone())).unwrap();
        (dir, store, clock)
    }

    fn res(s: &str) -> Resource {
        Resource::parse(s).unwrap()
    }

    fn own(s: &str) -> Owner {
        Owner::parse(s).unwrap()
    }

    fn ttl(secs: u64) -> Ttl {
        Ttl::from_secs(secs).unwrap()
    }

    fn acquired(outcome: Acquire) -> (Lock, Tenure) {
        match outcome {
            Acquire::Acquired { lock, tenure } => (lock, tenure),
            Acquire::Busy { holder } => panic!("expected acquired, busy with {holder:?}"),
        }
    }

    #[test]
    fn lease_expires_exactly_at_expires_at() {
        let (_dir, mut store, clock) = store();
        let (lock, tenure) = acquired(store.acquire(&res("r"), &own("a"), ttl(10)).unwrap());
        assert_eq!(tenure, Tenure::New);
        assert_eq!(lock.expires_at.0 - lock.acquired_at.0, 10_000);
        clock.advance(9_999);
        assert!(store.status(&res("r")).unwrap().is_some());
        assert!(matches!(
            store.acquire(&res("r"), &own("b"), ttl(10)).unwrap(),
            Acquire::Busy { .. }
        ));
        clock.advance(1);
        assert_eq!(store.status(&res("r")).unwrap(), None);
        assert_eq!(
            store.renew(&res("r"), &own("a"), ttl(10), None).unwrap(),
            Renew::NotFound
        );
        let (taken, _) = acquired(store.acquire(&res("r"), &own("b"), ttl(10)).unwrap());
        assert!(taken.fence > lock.fence);
    }

    #[test]
    fn same_owner_extends_with_the_same_fence() {
        let (_dir, mut store, clock) = store();
        let (first, _) = acquired(store.acquire(&res("r"), &own("a"), ttl(10)).unwrap());
        clock.advance(4_000);
        let (again, tenure) = acquired(store.acquire(&res("r"), &own("a"), ttl(10)).unwrap());
        assert_eq!(tenure, Tenure::Extended);
        assert_eq!(again.fence, first.fence);
        assert_eq!(again.acquired_at.0, first.acquired_at.0 + 4_000);
        assert_eq!(again.expires_at.0, first.expires_at.0 + 4_000);
    }

    #[test]
    fn fence_survives_release_expiry_and_gc() {
        let (_dir, mut store, clock) = store();
        let mut last = Fence(0);
        for round in 0..5 {
            let (lock, _) = acquired(store.acquire(&res("r"), &own("a"), ttl(1)).unwrap());
            assert!(
                lock.fence > last,
                "round {round}: {:?} after {last:?}",
                lock.fence
            );
            last = lock.fence;
            match round % 3 {
                0 => assert_eq!(
                    store
                        .release(&res("r"), &own("a"), Some(lock.fence))
                        .unwrap(),
                    Release::Released
                ),
                1 => clock.advance(1_000),
                _ => {
                    clock.advance(1_000);
                    let report = store.gc(Duration::ZERO).unwrap();
                    assert_eq!(report.expired_locks, 1);
                }
            }
        }
    }

    #[test]
    fn renew_and_release_check_owner_and_tenure() {
        let (_dir, mut store, clock) = store();
        let (lock, _) = acquired(store.acquire(&res("r"), &own("a"), ttl(10)).unwrap());
        assert_eq!(
            store.renew(&res("r"), &own("b"), ttl(10), None).unwrap(),
            Renew::Forbidden
        );
        assert_eq!(
            store.release(&res("r"), &own("b"), None).unwrap(),
            Release::Forbidden
        );
        let stale = Fence(lock.fence.0 - 1);
        assert_eq!(
            store
                .renew(&res("r"), &own("a"), ttl(10), Some(stale))
                .unwrap(),
            Renew::NotFound
        );
        assert_eq!(
            store.release(&res("r"), &own("a"), Some(stale)).unwrap(),
            Release::NotFound
        );
        clock.advance(5_000);
        let Renew::Renewed { lock: renewed } = store
            .renew(&res("r"), &own("a"), ttl(10), Some(lock.fence))
            .unwrap()
        else {
            panic!("renew by the holder failed");
        };
        assert_eq!(renewed.fence, lock.fence);
        assert_eq!(renewed.acquired_at, lock.acquired_at);
        assert_eq!(renewed.expires_at.0, lock.expires_at.0 + 5_000);
        assert_eq!(
            store.release(&res("r"), &own("a"), None).unwrap(),
            Release::Released
        );
        assert_eq!(
            store.release(&res("r"), &own("a"), None).unwrap(),
            Release::NotFound
        );
    }

    #[test]
    fn history_records_every_change_and_nothing_else() {
        let (_dir, mut store, clock) = store();
        acquired(store.acquire(&res("r"), &own("a"), ttl(1)).unwrap());
        acquired(store.acquire(&res("r"), &own("a"), ttl(1)).unwrap());
        // A busy attempt and refused renew/release write nothing.
        store.acquire(&res("r"), &own("b"), ttl(1)).unwrap();
        store.renew(&res("r"), &own("b"), ttl(1), None).unwrap();
        store.release(&res("r"), &own("b"), None).unwrap();
        store.renew(&res("r"), &own("a"), ttl(1), None).unwrap();
        clock.advance(1_000);
        acquired(store.acquire(&res("r"), &own("b"), ttl(1)).unwrap());
        store.release(&res("r"), &own("b"), None).unwrap();
        let events = store.log(&LogQuery::default()).unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e.event).collect();
        assert_eq!(
            kinds,
            [
                EventKind::Acquired,
                EventKind::Extended,
                EventKind::Renewed,
                EventKind::TakenOver,
                EventKind::Released
            ]
        );
        assert_eq!(events[3].previous_owner, Some(own("a")));
        assert_eq!(events[3].owner, own("b"));
        let last_two = store
            .log(&LogQuery {
                limit: Some(2),
                ..LogQuery::default()
            })
            .unwrap();
        assert_eq!(last_two, events[3..]);
    }

    #[test]
    fn list_shows_live_locks_by_prefix_in_order() {
        let (_dir, mut store, clock) = store();
        for (name, secs) in [
            ("job:b", 10),
            ("job:a", 10),
            ("jobs", 10),
            ("job:c", 1),
            ("x", 10),
        ] {
            acquired(store.acquire(&res(name), &own("a"), ttl(secs)).unwrap());
        }
        clock.advance(1_000);
        let names = |locks: Vec<Lock>| -> Vec<String> {
            locks.iter().map(|l| l.resource.to_string()).collect()
        };
        assert_eq!(names(store.list("job:").unwrap()), ["job:a", "job:b"]);
        assert_eq!(
            names(store.list("").unwrap()),
            ["job:a", "job:b", "jobs", "x"]
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.db");
        drop(SqliteStore::open(&path, Box::new(super::super::SystemClock)).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = SqliteStore::open(&path, Box::new(super::super::SystemClock))
            .err()
            .expect("a newer schema must be refused");
        assert!(format!("{err:#}").contains("newer distlock"), "{err:#}");
    }
}
