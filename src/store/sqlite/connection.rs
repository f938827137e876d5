//! [`SqliteStore`]: one connection to a store's file, with what it knows of the file and of
//! the waiters it wakes, and the busy handler every connection waits with.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rusqlite::Connection;

use super::columns::Columns;
use super::reader::Access;
use super::turnstile;
use crate::store::Clock;

/// How long an operation waits for another process's write to finish before it gives up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How an operation waits for the write lock: in short steps at first. A distlock transaction
/// holds the lock for a fraction of a millisecond, and SQLite's own handler sleeps 1 ms, then
/// longer; under contention that would put whole milliseconds into a handoff. Steps grow from
/// 0.1 ms to 2 ms; the wait ends with SQLITE_BUSY after [`BUSY_TIMEOUT`].
pub(super) fn patient() -> impl FnMut(i32) -> bool + Send + 'static {
    let mut since = std::time::Instant::now();
    move |attempt| {
        if attempt == 0 {
            since = std::time::Instant::now();
        }
        if since.elapsed() >= BUSY_TIMEOUT {
            return false;
        }
        let step = 100 * (u64::try_from(attempt).unwrap_or(0) + 1);
        std::thread::sleep(Duration::from_micros(step.min(2_000)));
        true
    }
}

pub struct SqliteStore {
    pub(super) conn: Connection,
    pub(super) clock: Box<dyn Clock>,
    /// The `-wal` file beside the database.
    pub(super) wal: PathBuf,
    /// How many frames the WAL held after this connection's latest commit (SQLite's WAL hook).
    pub(super) frames: Arc<AtomicU32>,
    /// The database's path and the file it named when opened (device, inode).
    pub(super) path: PathBuf,
    pub(super) identity: Option<(u64, u64)>,
    /// Whether this process's latest write left waiters in the resource's queue.
    pub(super) queue_behind: bool,
    /// The store's turnstile, once this process waits or wakes a waiter.
    pub(super) turnstile: Option<turnstile::Turnstile>,
    /// A waiter's counter in the turnstile, and its value before the waiter's latest look.
    pub(super) waiting_on: Option<(usize, u32)>,
    /// Whether the waiter's latest wait was ended by a ring: its next attempt will most likely
    /// be granted, so it skips the look at a read snapshot.
    pub(super) rung: bool,
    /// A server's watcher: every turnstile counter as its latest watch left them.
    pub(super) watched: Option<Vec<u32>>,
    /// The columns of the schema version the connection reads: the current one, except for a
    /// read-only connection to an older store.
    pub(super) shape: Columns,
    /// How the connection reaches the file: read-only connections may read it unshared.
    pub(super) access: Access,
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.bound_wal();
    }
}
