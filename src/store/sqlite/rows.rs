//! The SQLite store's rows: the SQL statements of every operation, a resource's rows read into
//! tenures and places in the queue (in the columns of the schema version the connection reads,
//! [`Columns`]), the core's changes written in order, and the queries of `status`, `list`, `log`
//! and `gc`.

use std::time::Duration;

use anyhow::{Result, bail};
use rusqlite::{Connection, Transaction, params};

use super::columns::Columns;
use super::connection::SqliteStore;
use crate::engine::{Change, State, Tenure, Waiter};
use crate::lock::{
    Event, Fence, GcReport, Lock, LogQuery, Owner, Place, Remark, Resource, Timestamp, TokenName,
};
use crate::store::GC_BATCH;
use crate::store::columns::{
    HistoryRow, PlaceRow, event, members_column, mode_columns, mode_of, place,
};

impl SqliteStore {
    /// Prepares, while a waiter has time, the statements its grant and release will run, so
    /// that they are not parsed between the previous holder's release and this grant, where the
    /// next command waits for them. A statement that cannot be prepared now is prepared (and
    /// its error reported) where it is used.
    pub(super) fn prepare_grant(&mut self) {
        for sql in [
            NEXT_FENCE,
            INSERT_RESOURCE,
            INSERT_LOCK,
            DELETE_LOCK,
            INSERT_HISTORY,
            DEQUEUE,
        ] {
            let _ = self.conn.prepare_cached(sql);
        }
    }
}

/// Reads [`Columns::lease`] from the result columns starting at `first`.
fn lease(r: &rusqlite::Row<'_>, first: usize) -> Result<Tenure> {
    Ok(Tenure {
        owner: Owner::from_store(&r.get::<_, String>(first)?, &r.get::<_, String>(first + 8)?),
        fence: Fence(r.get(first + 1)?),
        acquired_at: Timestamp(r.get(first + 2)?),
        expires_at: Timestamp(r.get(first + 3)?),
        mode: mode_of(&r.get::<_, String>(first + 4)?, r.get(first + 5)?)?,
        note: r
            .get::<_, Option<String>>(first + 6)?
            .as_deref()
            .map(Remark::from_store),
        guarded: r.get(first + 7)?,
    })
}

/// Every tenure row and every place in the queue of `resource`, live or not, at `now`, from a
/// schema of `columns`.
pub(super) fn state(
    conn: &Connection,
    columns: Columns,
    resource: &Resource,
    now: Timestamp,
) -> Result<State> {
    let queue = if let Some(columns) = columns.queue {
        conn.prepare_cached(&format!(
            "SELECT {columns} FROM waiters WHERE resource = ?1"
        ))?
        .query_map([resource.as_str()], |r| {
            Ok(Waiter {
                owner: Owner::from_store(&r.get::<_, String>(0)?, &r.get::<_, String>(3)?),
                ticket: r.get(1)?,
                expires_at: Timestamp(r.get(2)?),
            })
        })?
        .collect::<rusqlite::Result<_>>()?
    } else {
        Vec::new()
    };
    Ok(State {
        now,
        leases: leases(conn, columns, resource)?,
        queue,
    })
}

/// Every tenure row of `resource`, live or not.
fn leases(conn: &Connection, columns: Columns, resource: &Resource) -> Result<Vec<Tenure>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {} FROM locks WHERE resource = ?1",
        columns.lease
    ))?;
    let mut rows = stmt.query([resource.as_str()])?;
    let mut leases = Vec::new();
    while let Some(r) = rows.next()? {
        leases.push(lease(r, 0)?);
    }
    Ok(leases)
}

pub(super) fn next_fence(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
    tx.prepare_cached(NEXT_FENCE)?.query_row([], |r| r.get(0))
}

/// The statements of a grant to a waiter and of its release, beyond the looks (see
/// [`SqliteStore::prepare_grant`]).
const NEXT_FENCE: &str = "UPDATE fence_counter SET last = last + 1 WHERE id = 0 RETURNING last";
const INSERT_RESOURCE: &str = "INSERT OR IGNORE INTO resources (resource) VALUES (?1)";
const INSERT_LOCK: &str = "INSERT INTO locks
        (resource, owner, fence, acquired_at, expires_at, mode, lim, note, guarded, token)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
const DELETE_LOCK: &str = "DELETE FROM locks WHERE resource = ?1 AND fence = ?2";
const INSERT_HISTORY: &str = "INSERT INTO history
        (at, resource, owner, fence, event, previous_owner, mode, lim, note, operator, reason,
         token, by_token, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";
const DEQUEUE: &str = "DELETE FROM waiters WHERE resource = ?1 AND owner = ?2 AND token = ?3";

/// Writes the core's changes, in order. A row that is not where the decision saw it means the
/// transaction did not hold what it read: that is refused, never written around.
pub(super) fn apply(tx: &Transaction<'_>, resource: &Resource, changes: &[Change]) -> Result<()> {
    let res = resource.as_str();
    for change in changes {
        let rows = match change {
            Change::Insert(lease) => {
                tx.prepare_cached(INSERT_RESOURCE)?.execute([res])?;
                let (mode, lim) = mode_columns(lease.mode);
                tx.prepare_cached(INSERT_LOCK)?.execute(params![
                    res,
                    lease.owner.as_str(),
                    lease.fence.0,
                    lease.acquired_at.0,
                    lease.expires_at.0,
                    mode,
                    lim,
                    lease.note.as_ref().map(Remark::as_str),
                    lease.guarded,
                    lease.owner.token_column()
                ])?
            }
            Change::Update(lease) => tx
                .prepare_cached(
                    "UPDATE locks SET acquired_at = ?3, expires_at = ?4, note = ?5
                     WHERE resource = ?1 AND fence = ?2",
                )?
                .execute(params![
                    res,
                    lease.fence.0,
                    lease.acquired_at.0,
                    lease.expires_at.0,
                    lease.note.as_ref().map(Remark::as_str)
                ])?,
            Change::Delete { fence } => tx
                .prepare_cached(DELETE_LOCK)?
                .execute(params![res, fence.0])?,
            Change::Enqueue { .. } | Change::Refresh { .. } | Change::Dequeue { .. } => {
                apply_queue(tx, res, change)?
            }
            Change::Record(record) => {
                let (mode, lim) = mode_columns(record.mode);
                tx.prepare_cached(INSERT_HISTORY)?.execute(params![
                    record.at.0,
                    res,
                    record.owner.as_str(),
                    record.fence.0,
                    record.event.as_str(),
                    record.previous_owner.as_ref().map(Owner::as_str),
                    mode,
                    lim,
                    record.note.as_ref().map(Remark::as_str),
                    record.broken.as_ref().map(|b| b.by.as_str()),
                    record.broken.as_ref().map(|b| b.reason.as_str()),
                    record.owner.token_column(),
                    record
                        .broken
                        .as_ref()
                        .and_then(|b| b.by_token.as_ref())
                        .map(TokenName::as_str),
                    record.expires_at.map(|at| at.0)
                ])?
            }
        };
        if rows != 1 {
            bail!("the lock row of {resource} changed during the transaction ({change:?})");
        }
    }
    Ok(())
}

/// Writes a change to the queue; none of them can miss its row (the write lock is held).
fn apply_queue(tx: &Transaction<'_>, res: &str, change: &Change) -> Result<usize> {
    // A place kept alive: four values, ?1 to ?4.
    let refresh = |sql: &str, owner: &Owner, expires_at: Timestamp| -> Result<usize> {
        let values = params![res, owner.as_str(), owner.token_column(), expires_at.0];
        Ok(tx.prepare_cached(sql)?.execute(values)?)
    };
    Ok(match change {
        Change::Enqueue {
            owner,
            expires_at,
            asking,
        } => {
            let (mode, lim) = mode_columns(asking.mode);
            tx.prepare_cached(
                "INSERT INTO waiters
                     (resource, owner, token, expires_at, since, mode, lim, members)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                res,
                owner.as_str(),
                owner.token_column(),
                expires_at.0,
                asking.since.0,
                mode,
                lim,
                members_column(&asking.members)
            ])?
        }
        Change::Refresh { owner, expires_at } => refresh(
            "UPDATE waiters SET expires_at = ?4 WHERE resource = ?1 AND owner = ?2 AND token = ?3",
            owner,
            *expires_at,
        )?,
        Change::Dequeue { owner } => tx.prepare_cached(DEQUEUE)?.execute(params![
            res,
            owner.as_str(),
            owner.token_column()
        ])?,
        _ => 0,
    })
}

/// The queries behind [`Backend`](crate::store::Backend)'s reads and `gc`, before their failures
/// are [`worded`](super::errors::worded).
impl SqliteStore {
    pub(super) fn state_now(&mut self, resource: &Resource) -> Result<State> {
        state(&self.conn, self.shape, resource, self.clock.now())
    }

    pub(super) fn scan_rows(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        let now = self.clock.now();
        // Resources sharing a prefix form one contiguous range of the primary key (BINARY
        // collation compares bytes), so the scan starts at the prefix and stops after it.
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT resource, {} FROM locks
             WHERE resource >= ?1 ORDER BY resource, fence",
            self.shape.lease
        ))?;
        let mut rows = stmt.query([prefix])?;
        let mut locks = Vec::new();
        while let Some(r) = rows.next()? {
            let resource: String = r.get(0)?;
            if !resource.starts_with(prefix) {
                break;
            }
            let lease = lease(r, 1)?;
            if lease.is_live(now) {
                locks.push(lease.lock(&Resource::from_store(&resource)));
            }
        }
        Ok(locks)
    }

    pub(super) fn place_rows(&mut self, prefix: &str) -> Result<Vec<(Resource, Place)>> {
        let Some(columns) = self.shape.places else {
            return Ok(Vec::new());
        };
        let now = self.clock.now();
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {columns} FROM waiters
             WHERE resource >= ?1 AND substr(resource, 1, length(?1)) = ?1 AND expires_at > ?2
             ORDER BY resource, ticket"
        ))?;
        let mut rows = stmt.query(params![prefix, now.0])?;
        let mut places = Vec::new();
        while let Some(r) = rows.next()? {
            places.push(place(&PlaceRow {
                resource: &r.get::<_, String>(0)?,
                owner: &r.get::<_, String>(1)?,
                token: &r.get::<_, String>(2)?,
                since: r.get(4)?,
                mode: &r.get::<_, String>(5)?,
                lim: r.get(6)?,
                members: r.get::<_, Option<String>>(7)?.as_deref(),
            })?);
        }
        Ok(places)
    }

    pub(super) fn history_rows(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        let filter = if query.resource.is_some() {
            "resource = ?1 AND at >= ?2"
        } else {
            "?1 IS NULL AND at >= ?2"
        };
        let prefix = if query.prefix.is_some() {
            " AND substr(resource, 1, length(?4)) = ?4"
        } else {
            " AND ?4 IS NULL"
        };
        let sql = format!(
            "SELECT {} FROM (
                 SELECT * FROM history WHERE {filter}{prefix} ORDER BY id DESC LIMIT ?3
             ) ORDER BY id",
            self.shape.history
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
        let mut rows = stmt.query(params![resource, since, limit, query.prefix])?;
        let mut events = Vec::new();
        while let Some(r) = rows.next()? {
            events.push(event(&HistoryRow {
                at: Timestamp(r.get(0)?),
                resource: &r.get::<_, String>(1)?,
                owner: &r.get::<_, String>(2)?,
                fence: Fence(r.get(3)?),
                kind: &r.get::<_, String>(4)?,
                previous_owner: r.get::<_, Option<String>>(5)?.as_deref(),
                mode: &r.get::<_, String>(6)?,
                lim: r.get(7)?,
                note: r.get::<_, Option<String>>(8)?.as_deref(),
                by: r.get::<_, Option<String>>(9)?.as_deref(),
                reason: r.get::<_, Option<String>>(10)?.as_deref(),
                token: &r.get::<_, String>(11)?,
                by_token: r.get::<_, Option<String>>(12)?.as_deref(),
                expires_at: r.get(13)?,
            })?);
        }
        Ok(events)
    }

    pub(super) fn prune_rows(&mut self, keep_history: Duration) -> Result<GcReport> {
        let now = self.clock.now();
        let keep = i64::try_from(keep_history.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now.0.saturating_sub(keep);
        let mut report = GcReport::default();
        // Expired rows, walked in key order a batch per transaction.
        let mut after = (String::new(), i64::MIN);
        loop {
            let tx = self.write_tx()?;
            let batch: Vec<(String, i64)> = tx
                .prepare_cached(
                    "DELETE FROM locks WHERE (resource, fence) IN (
                         SELECT resource, fence FROM locks
                         WHERE (resource, fence) > (?1, ?2) AND expires_at <= ?3
                         ORDER BY resource, fence LIMIT ?4)
                     RETURNING resource, fence",
                )?
                .query_map(params![after.0, after.1, now.0, GC_BATCH], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            tx.commit()?;
            report.expired_locks += batch.len() as u64;
            match batch.into_iter().max() {
                Some(last) => after = last,
                None => break,
            }
        }
        // Resources nobody holds any more.
        loop {
            let tx = self.write_tx()?;
            let deleted = tx
                .prepare_cached(
                    "DELETE FROM resources WHERE resource IN (
                         SELECT r.resource FROM resources r
                         WHERE NOT EXISTS (SELECT 1 FROM locks l WHERE l.resource = r.resource)
                         LIMIT ?1)",
                )?
                .execute([GC_BATCH])?;
            tx.commit()?;
            if deleted == 0 {
                break;
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
