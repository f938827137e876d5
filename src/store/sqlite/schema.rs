//! The SQLite store's tables: the DDL of each version (`schema_v1.sql`, `upgrade_v2.sql` to
//! `upgrade_v5.sql`), the upgrade that brings an older file to [`SCHEMA_VERSION`] once, and the
//! check, before anything else is done to a file, that its tables are a distlock schema's
//! ([`recognise`]).

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, TransactionBehavior};

use super::connection::SqliteStore;
use crate::store::SCHEMA_VERSION;
use crate::store::columns::newer_schema;

/// Version 1, as distlock 0.1.0 created it. A new store is created at version 1 and upgraded
/// like any old one, so the upgrade path is the one every new store takes.
const SCHEMA_V1: &str = include_str!("schema_v1.sql");

/// Version 1 → 2: a resource holds a set of tenures (lock modes), each with a mode and a note;
/// history rows carry the mode and note, and who broke a lock and why. `resources` keeps
/// `UNIQUE(resource)`: one row per resource that has (or had) a tenure.
const UPGRADE_V2: &str = include_str!("upgrade_v2.sql");

/// Version 2 → 3: a tenure records whether `run` took it, which guards it: only a tenure that
/// `acquire` took may be joined. Every tenure already there is one that may be joined.
const UPGRADE_V3: &str = include_str!("upgrade_v3.sql");

/// Version 3 → 4: a tenure, a place in the queue and a history event record the token of
/// `distlock serve --tokens` that proved their owner (empty: none, as for every row already
/// there), and one owner name may wait once per token. The queue is copied whole, tickets
/// and all, so every waiter keeps its place.
const UPGRADE_V4: &str = include_str!("upgrade_v4.sql");

/// Version 4 → 5: a `broken` event records the operator's token that broke the tenure through
/// `distlock serve --tokens` (NULL: none, as for every row already there), beside the free-text
/// `by` the caller gave.
const UPGRADE_V5: &str = include_str!("upgrade_v5.sql");

impl SqliteStore {
    /// Creates or upgrades the schema once, atomically, even when many processes open an old or
    /// new file at the same moment: the first to take the write lock does it, the others find
    /// the current version and do nothing. Every live lock, fence and history row is kept.
    pub(super) fn upgrade_schema(&mut self) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version = match recognise(tables(&tx)?)? {
            Holds::Nothing => 0,
            Holds::Schema(version) => version,
        };
        if version < 1 {
            tx.execute_batch(SCHEMA_V1)?;
        }
        if version < 2 {
            tx.execute_batch(UPGRADE_V2)
                .context("cannot upgrade the schema to version 2")?;
        }
        if version < 3 {
            tx.execute_batch(UPGRADE_V3)
                .context("cannot upgrade the schema to version 3")?;
        }
        if version < 4 {
            tx.execute_batch(UPGRADE_V4)
                .context("cannot upgrade the schema to version 4")?;
        }
        if version < 5 {
            tx.execute_batch(UPGRADE_V5)
                .context("cannot upgrade the schema to version 5")?;
        }
        if version < SCHEMA_VERSION {
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        tx.commit()?;
        Ok(())
    }
}

/// The schema version of a file and its tables, as [`TABLES`] counts them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tables {
    version: i64,
    /// `PRAGMA application_id`: distlock never sets one; an application that does is not
    /// distlock.
    application: i64,
    /// Views and triggers, which no distlock schema has.
    others: i64,
    /// `sqlite_sequence`, which SQLite makes for a table with `AUTOINCREMENT`: distlock's
    /// from version 2, another application's in a file with no table of distlock's.
    sequence: i64,
    /// Every table but SQLite's own (`sqlite_sequence`, `sqlite_stat1`, …).
    all: i64,
    /// Those of them that every distlock schema has: `locks`, `fence_counter`, `history`.
    core: i64,
    /// Those that version 2 added: `resources`, `waiters`.
    added: i64,
}

/// One statement, one snapshot: a racing process commits its schema and the version together,
/// so both are seen or neither is. Table names are unique, so counting them tells the set.
const TABLES: &str = r"SELECT (SELECT user_version FROM pragma_user_version),
           (SELECT application_id FROM pragma_application_id),
           count(*) FILTER (WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'),
           count(*) FILTER (WHERE type = 'table'
                            AND name IN ('locks', 'fence_counter', 'history')),
           count(*) FILTER (WHERE type = 'table' AND name IN ('resources', 'waiters')),
           count(*) FILTER (WHERE type IN ('view', 'trigger')),
           count(*) FILTER (WHERE type = 'table' AND name = 'sqlite_sequence')
    FROM sqlite_master";

/// Reads [`Tables`]: the file's header and schema only, so a file that is not a database, or
/// not distlock's, is left exactly as it was.
pub(super) fn tables(conn: &Connection) -> rusqlite::Result<Tables> {
    conn.query_row(TABLES, [], |r| {
        Ok(Tables {
            version: r.get(0)?,
            application: r.get(1)?,
            all: r.get(2)?,
            core: r.get(3)?,
            added: r.get(4)?,
            others: r.get(5)?,
            sequence: r.get(6)?,
        })
    })
}

/// What a file holds, as [`recognise`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Holds {
    /// No table at all, at version 0: a new database (or an empty file). A writing command
    /// creates the schema; the others find an empty store.
    Nothing,
    /// A distlock schema of this version (1 ..= [`SCHEMA_VERSION`]).
    Schema(i64),
}

/// Refuses databases this build must not touch, by their tables, whatever `user_version` says:
/// another application's (any set of tables that is not a distlock schema's: version 1's
/// three, or the five of versions 2 to 5; a version past this build's without distlock's
/// tables), or a newer distlock's.
pub(super) fn recognise(tables: Tables) -> Result<Holds> {
    let Tables {
        version,
        application,
        all,
        core,
        added,
        others,
        sequence,
    } = tables;
    let ours = application == 0
        && others == 0
        && match version {
            0 => all == 0 && sequence == 0,
            1 => (all, core) == (3, 3),
            2..=SCHEMA_VERSION => (all, core, added) == (5, 3, 2),
            _ => version > SCHEMA_VERSION && core == 3,
        };
    if !ours {
        bail!(
            "it is a SQLite database of another application, not a distlock database; \
             distlock leaves it as it is"
        );
    }
    if version > SCHEMA_VERSION {
        bail!(newer_schema(version));
    }
    Ok(if version == 0 {
        Holds::Nothing
    } else {
        Holds::Schema(version)
    })
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locks.db");
        drop(SqliteStore::open(&path, Box::new(crate::store::SystemClock)).unwrap());
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = SqliteStore::open(&path, Box::new(crate::store::SystemClock))
            .err()
            .expect("a newer schema must be refused");
        assert!(format!("{err:#}").contains("newer distlock"), "{err:#}");
    }
}
