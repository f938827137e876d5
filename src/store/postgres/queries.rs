//! The queries of `list`, `GET /queues`, `log` and `gc` on PostgreSQL: plain SQL with bound parameters, each
//! its own statement, outside the write transaction of [`super::session`].
//!
//! Each is sent in one round trip as an unnamed statement, its parameters' types given
//! (`query_typed`), or as a simple-protocol query (`gc`'s deletes, whose parameters are numbers
//! of distlock's own): never prepared as a named statement first, which behind a pooler in
//! transaction mode may land on one server connection and be used, or named again by another
//! client, on another.

use std::time::Duration;

use anyhow::Result;
use postgres::SimpleQueryMessage;
use postgres::types::Type;

use super::session::Session;
use super::statements::{DECISION_LIFETIME_MS, LEASE_COLUMNS, binary_lease};
use crate::lock::{Event, Fence, GcReport, Lock, LogQuery, Place, Resource, Timestamp};
use crate::store::GC_BATCH;
use crate::store::columns::{HistoryRow, PlaceRow, event, place};

/// How long `gc` keeps a resource's row after its highest fence was last raised: well past the
/// lifetime of a decision that may still be written with a lower one.
const FENCE_KEPT_MS: i64 = 10 * DECISION_LIFETIME_MS;

impl Session {
    pub(super) fn scan_rows(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        self.ensure_checked()?;
        if self.absent {
            return Ok(Vec::new());
        }
        // COLLATE "C" sorts by bytes, as the SQLite store does, whatever the database's locale.
        let sql = format!(
            "SELECT {LEASE_COLUMNS}, resource FROM distlock.locks
             WHERE expires_at > now() AND starts_with(resource, $1)
             ORDER BY resource COLLATE \"C\", fence"
        );
        let rows = self.client.query_typed(&sql, &[(&prefix, Type::TEXT)])?;
        rows.iter()
            .map(|row| Ok(binary_lease(row, 0)?.lock(&Resource::from_store(row.get(9)))))
            .collect()
    }

    pub(super) fn place_rows(&mut self, prefix: &str) -> Result<Vec<(Resource, Place)>> {
        self.ensure_checked()?;
        if self.absent {
            return Ok(Vec::new());
        }
        let rows = self.client.query_typed(
            "SELECT resource, owner, token, (extract(epoch FROM since) * 1000)::bigint, mode,
                    lim, members
             FROM distlock.waiters
             WHERE expires_at > now() AND starts_with(resource, $1)
             ORDER BY resource COLLATE \"C\", ticket",
            &[(&prefix, Type::TEXT)],
        )?;
        rows.iter()
            .map(|r| {
                place(&PlaceRow {
                    resource: r.get(0),
                    owner: r.get(1),
                    token: r.get(2),
                    since: r.get(3),
                    mode: r.get(4),
                    lim: r.get::<_, Option<i32>>(5).map(i64::from),
                    members: r.get(6),
                })
            })
            .collect()
    }

    pub(super) fn history_rows(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        self.ensure_checked()?;
        if self.absent {
            return Ok(Vec::new());
        }
        let limit = query.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let since_ms = query
            .since
            .map(|ago| i64::try_from(ago.as_millis()).unwrap_or(i64::MAX));
        let resource = query.resource.as_ref().map(Resource::as_str);
        let rows = self.client.query_typed(
            "SELECT (extract(epoch FROM at) * 1000)::bigint, resource, owner, fence, event,
                    previous_owner, mode, lim, note, operator, reason, token, by_token,
                    (extract(epoch FROM expires_at) * 1000)::bigint
             FROM (SELECT * FROM distlock.history
                   WHERE ($1::text IS NULL OR resource = $1)
                     AND ($2::bigint IS NULL OR at >= now() - $2::bigint * interval '1 ms')
                     AND ($4::text IS NULL OR starts_with(resource, $4))
                   ORDER BY id DESC LIMIT $3) newest
             ORDER BY id",
            &[
                (&resource, Type::TEXT),
                (&since_ms, Type::INT8),
                (&limit, Type::INT8),
                (&query.prefix, Type::TEXT),
            ],
        )?;
        rows.iter()
            .map(|r| {
                event(&HistoryRow {
                    at: Timestamp(r.get(0)),
                    resource: r.get(1),
                    owner: r.get(2),
                    fence: Fence(r.get(3)),
                    kind: r.get(4),
                    previous_owner: r.get(5),
                    mode: r.get(6),
                    lim: r.get::<_, Option<i32>>(7).map(i64::from),
                    note: r.get(8),
                    by: r.get(9),
                    reason: r.get(10),
                    token: r.get(11),
                    by_token: r.get(12),
                    expires_at: r.get(13),
                })
            })
            .collect()
    }

    pub(super) fn prune_rows(&mut self, keep_history: Duration) -> Result<GcReport> {
        self.ensure_checked()?;
        if self.absent {
            return Ok(GcReport::default());
        }
        let keep_ms = i64::try_from(keep_history.as_millis()).unwrap_or(i64::MAX);
        let mut report = GcReport::default();
        loop {
            let deleted = self.deleted(&format!(
                "DELETE FROM distlock.locks WHERE (resource, fence) IN (
                     SELECT resource, fence FROM distlock.locks WHERE expires_at <= now()
                     LIMIT {GC_BATCH} FOR UPDATE SKIP LOCKED)"
            ))?;
            report.expired_locks += deleted;
            if deleted == 0 {
                break;
            }
        }
        // Resources nobody holds any more. A writer that races this re-creates its row. A row
        // whose highest fence was raised lately is kept: a decision read before that, with a
        // lower fence, may still be written, and must find the higher one (the raise of a new
        // tenure's fence, in `super::writes`); past a decision's lifetime none can be.
        loop {
            let deleted = self.deleted(&format!(
                "DELETE FROM distlock.resources WHERE resource IN (
                     SELECT r.resource FROM distlock.resources r
                     WHERE NOT EXISTS (
                         SELECT 1 FROM distlock.locks l WHERE l.resource = r.resource)
                     AND r.granted_at < clock_timestamp() - {FENCE_KEPT_MS}::bigint * interval '1 ms'
                     LIMIT {GC_BATCH} FOR UPDATE SKIP LOCKED)"
            ))?;
            if deleted == 0 {
                break;
            }
        }
        loop {
            let deleted = self.deleted(&format!(
                "DELETE FROM distlock.history WHERE id IN (
                     SELECT id FROM distlock.history
                     WHERE at < now() - {keep_ms}::bigint * interval '1 ms' ORDER BY id
                     LIMIT {GC_BATCH})"
            ))?;
            report.history_events += deleted;
            if deleted == 0 {
                break;
            }
        }
        Ok(report)
    }

    /// How many rows `sql`, a `DELETE` whose values are all numbers of distlock's own, deleted,
    /// sent as a simple-protocol query.
    fn deleted(&mut self, sql: &str) -> Result<u64> {
        let messages = self.client.simple_query(sql)?;
        Ok(messages
            .iter()
            .find_map(|message| match message {
                SimpleQueryMessage::CommandComplete(rows) => Some(*rows),
                _ => None,
            })
            .unwrap_or(0))
    }
}
