//! The SQLite store's WAL policy: the WAL is checkpointed and restarted once it passes a bound
//! ([`WAL_FRAMES`], larger while others wait in the queue), by `run` while its command runs and
//! by other commands as they close, never inside a commit; a commit that need not survive power
//! loss goes without an fsync ([`SqliteStore::unsynced`]); and the folder entry of a database or
//! WAL this process created is synced once, right after opening ([`sync_folder`]).

use std::path::Path;
use std::sync::atomic::Ordering;

use anyhow::Result;
use rusqlite::TransactionBehavior;

use super::connection::{SqliteStore, patient};

/// How many frames the WAL may hold before it is checkpointed into the database and restarted.
///
/// A distlock process nearly always opens the database alone, and SQLite then rebuilds the WAL
/// index from every frame in the WAL: one read and ~2,600 instructions a 4 KiB frame, about
/// 2 µs. A checkpoint costs three fsyncs (the WAL, the database, the restarted WAL's header)
/// and copying the frames. With ~9 frames written by an acquire and its release, a bound of T
/// frames costs each call ~T/2 × 2 µs at open plus 9/T of a checkpoint; that sum is lowest
/// near T = 100 (a checkpoint every ~11 runs), and both a much larger and a much smaller bound
/// cost more per call (see BENCHMARKS.md).
///
/// Who pays for the checkpoint: `run` does it while its command runs
/// ([`Backend::tidy`](crate::store::Backend::tidy)), off the path anyone waits on; other
/// commands do it as they close ([`Drop`]).
const WAL_FRAMES: u32 = 100;

/// How many times longer the WAL may grow while waiters are queued (see `bound_wal`).
const CONTENDED_WAL_FACTOR: u32 = 10;

/// The bytes of a WAL frame: a 24-byte header and a 4 KiB page.
const WAL_FRAME_BYTES: i64 = 24 + 4096;

impl SqliteStore {
    /// Checkpoints a WAL that holds more than [`WAL_FRAMES`] frames and restarts it from its
    /// first frame, without waiting: if another process is busy with the database, it is left
    /// for a later moment.
    ///
    /// The file keeps its length, so the commits that follow overwrite it rather than grow it.
    /// On a busy machine a commit that grows the file pays more for its fsync (0.8 ms against
    /// 0.5 ms a grant in 8 × 50 contended runs; see BENCHMARKS.md), most likely because ext4
    /// allocates new blocks as unwritten and converts them in a kernel worker that the fsync
    /// waits for. `journal_size_limit` caps what the file may keep.
    ///
    /// While others wait in the queue this process last wrote to, the bound is
    /// [`CONTENDED_WAL_FACTOR`] times larger. A checkpoint there would stand between this
    /// holder's release and the next holder: its fsyncs, and the write lock it holds. And a
    /// longer WAL costs nothing while processes keep the database open, as waiters do: only a
    /// process that opens it alone rebuilds the WAL index. The first process to leave nobody
    /// waiting checkpoints it back to the smaller bound.
    pub(super) fn bound_wal(&mut self) {
        let bound = if self.queue_behind {
            WAL_FRAMES * CONTENDED_WAL_FACTOR
        } else {
            WAL_FRAMES
        };
        let large = self.frames.load(Ordering::Relaxed) > bound;
        if large && self.conn.busy_handler(None::<fn(i32) -> bool>).is_ok() {
            // The first column is 0 once every frame is in the database and no reader is left
            // in the WAL: the next write starts it over.
            let restartable = self
                .conn
                .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0))
                .is_ok_and(|busy| busy == 0);
            if restartable {
                // What the restarted WAL may keep of its length: all that a contended bound
                // fills, and no more once a long reader has let it grow past that. SQLite cuts
                // the file at the restart's commit.
                let keep = i64::from(WAL_FRAMES * CONTENDED_WAL_FACTOR + 1) * WAL_FRAME_BYTES + 32;
                let _ = self.conn.pragma_update(None, "journal_size_limit", keep);
                let _ = self.restart_wal();
            }
            let _ = self.conn.busy_handler(Some(patient()));
        }
    }

    /// Restarts a checkpointed WAL now, with a write that changes nothing (the schema version,
    /// rewritten as it is), unsynced: SQLite writes the WAL's header anew, with a new salt, and
    /// fsyncs it. Left to the next writer, the restart would be skipped whenever every
    /// connection closed first, as distlock's processes do: the next process to open the
    /// database alone rebuilds the WAL index from the file, where the old frames, still under
    /// the old salt, look new, and it would append after all of them.
    fn restart_wal(&mut self) -> Result<()> {
        self.unsynced(|store| {
            let tx = store
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            tx.pragma_update(None, "user_version", version)?;
            Ok(tx.commit()?)
        })?
    }

    /// Runs `work`, whose commits go without an fsync (`synchronous=NORMAL`), then sets every
    /// later commit back to `FULL`. The level cannot change inside a transaction: `work` begins
    /// and ends its own.
    pub(super) fn unsynced<T>(&mut self, work: impl FnOnce(&mut Self) -> T) -> Result<T> {
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        let done = work(self);
        self.conn.pragma_update(None, "synchronous", "FULL")?;
        Ok(done)
    }
}

/// Makes the folder entries of a database or WAL this process created durable.
///
/// A commit must survive power loss, and so must the folder entry of the file it went to.
/// SQLite, unable to tell a WAL it created from one it found, would fsync the folder on every
/// connection's first commit: a second fsync on each `acquire`. distlock builds SQLite without
/// that (`SQLITE_DISABLE_DIRSYNC`, in `.cargo/config.toml`) and syncs the folder itself, once,
/// right after opening, when this process created the database or found a WAL that was not
/// there (or not the same file) before its first read; a durable commit then costs one fsync.
/// A build without the flag merely syncs the folder twice. Errors are ignored, as SQLite
/// ignores them.
pub(super) fn sync_folder(database: &Path) {
    let folder = database
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(folder) = std::fs::File::open(folder) {
        let _ = folder.sync_all();
    }
}
