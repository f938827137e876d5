//! distlock's tables on PostgreSQL, and the one write transaction every lock operation runs in.
//!
//! - **The server's clock decides.** "now" is read from the server (`statement_timestamp()`,
//!   truncated to milliseconds as times are printed) in the transaction that decides, never
//!   from this host, so a client whose clock is off still gets exactly its TTL.
//! - **One resource, one writer at a time.** Each write transaction first takes a
//!   transaction-level advisory lock keyed by the resource, then reads every row of it: unlike
//!   `SELECT … FOR UPDATE`, that also serialises requests for a resource that has no row yet.
//!   The primary key stays as the last line of defence: a conflicting insert, or a row that
//!   changed under a decision, starts the transaction over (as do serialization failures and
//!   deadlocks), a bounded number of times.
//! - Fences come from the sequence `distlock.fence` (never cycles; values are never reused, even
//!   after a rollback or a crash).
//! - The schema lives in its own `distlock` schema and is created on first use under a
//!   transaction-level advisory lock, so many processes starting at once create it exactly once.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use postgres::error::SqlState;
use postgres::{Client, Row, Transaction};

use crate::engine::{Change, Decision, Lease, State};
use crate::lock::{Event, Fence, Lock, LogQuery, Owner, Resource, Timestamp};
use crate::store::{Backend, FenceSource, GC_BATCH, GcReport, SCHEMA_VERSION, event, newer_schema};

/// Attempts per operation when the server reports a serialization failure, a deadlock, or a
/// conflict with a racing writer.
const ATTEMPTS: usize = 5;

/// An arbitrary, fixed advisory-lock key that serializes schema creation.
const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6c6f_636b;

/// The first half of the two-key advisory locks that serialise writes to one resource ("dist");
/// the second half is a hash of the resource name. Two-key locks live apart from one-key
/// locks, so they never meet the schema lock or another application's single-key locks.
const RESOURCE_LOCK_CLASS: i32 = 0x6469_7374;

const SCHEMA: &str = "
CREATE SCHEMA IF NOT EXISTS distlock;
CREATE TABLE IF NOT EXISTS distlock.locks (
    resource    text        NOT NULL PRIMARY KEY,   -- UNIQUE(resource): one row per resource
    owner       text        NOT NULL,
    fence       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL                -- live while now() < expires_at
);
CREATE SEQUENCE IF NOT EXISTS distlock.fence AS bigint NO CYCLE;
CREATE TABLE IF NOT EXISTS distlock.history (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             timestamptz NOT NULL,
    resource       text        NOT NULL,
    owner          text        NOT NULL,
    fence          bigint      NOT NULL,
    event          text        NOT NULL,
    previous_owner text
);
CREATE INDEX IF NOT EXISTS history_by_resource ON distlock.history (resource, id);
CREATE TABLE IF NOT EXISTS distlock.meta (schema_version integer NOT NULL);
INSERT INTO distlock.meta (schema_version)
    SELECT 1 WHERE NOT EXISTS (SELECT FROM distlock.meta);
";

/// The server's "now" in milliseconds since the epoch, as times are printed.
const NOW_MS: &str = "(extract(epoch FROM date_trunc('milliseconds', statement_timestamp())) \
                      * 1000)::bigint";

/// The lease columns as milliseconds since the epoch.
const LEASE_COLUMNS: &str = "owner, fence, (extract(epoch FROM acquired_at) * 1000)::bigint, \
                             (extract(epoch FROM expires_at) * 1000)::bigint";

/// A time from the core, in milliseconds since the epoch, as a `timestamptz` (exact: integer
/// arithmetic, no floating point).
macro_rules! at_ms {
    ($param:literal) => {
        concat!(
            "('epoch'::timestamptz + ",
            $param,
            "::bigint * interval '1 ms')"
        )
    };
}

/// The connection, owned by the worker thread.
pub struct Session {
    client: Client,
}

/// Why a transaction must start over.
enum Retry {
    Conflict,
    Server(postgres::Error),
}

impl From<postgres::Error> for Retry {
    fn from(err: postgres::Error) -> Retry {
        if err.code() == Some(&SqlState::UNIQUE_VIOLATION) {
            Retry::Conflict
        } else {
            Retry::Server(err)
        }
    }
}

impl Session {
    /// Checks the schema version on a new connection and creates the schema if it is missing.
    ///
    /// # Errors
    ///
    /// A newer schema, or a failed statement.
    pub fn open(client: Client) -> Result<Session> {
        let mut session = Session { client };
        let version = match session
            .client
            .query_opt("SELECT schema_version FROM distlock.meta", &[])
        {
            Ok(row) => row.map_or(0, |r| i64::from(r.get::<_, i32>(0))),
            Err(err)
                if matches!(
                    err.code(),
                    Some(&SqlState::UNDEFINED_TABLE | &SqlState::INVALID_SCHEMA_NAME)
                ) =>
            {
                0
            }
            Err(err) => return Err(err).context("cannot read the schema version"),
        };
        if version > SCHEMA_VERSION {
            bail!(newer_schema(version));
        }
        if version < SCHEMA_VERSION {
            let mut tx = session.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])?;
            tx.batch_execute(SCHEMA)
                .context("cannot create the distlock schema")?;
            tx.commit()?;
        }
        Ok(session)
    }
}

/// Reads `owner, fence, acquired_at, expires_at` from the columns starting at `first`.
fn lease(row: &Row, first: usize) -> Lease {
    Lease {
        owner: Owner::from_store(row.get(first)),
        fence: Fence(row.get(first + 1)),
        acquired_at: Timestamp(row.get(first + 2)),
        expires_at: Timestamp(row.get(first + 3)),
    }
}

/// The server's now and every row of `resource`, in one statement (one snapshot).
fn read_state(
    client: &mut impl postgres::GenericClient,
    resource: &str,
) -> Result<State, postgres::Error> {
    let sql = format!(
        "SELECT {NOW_MS}, l.* FROM (SELECT 1) one LEFT JOIN (
             SELECT {LEASE_COLUMNS} FROM distlock.locks WHERE resource = $1) l ON true"
    );
    let rows = client.query(&sql, &[&resource])?;
    let now = rows.first().map_or(0, |r| r.get(0));
    let leases = rows
        .iter()
        .filter(|r| r.get::<_, Option<String>>(1).is_some())
        .map(|r| lease(r, 1))
        .collect();
    Ok(State {
        now: Timestamp(now),
        leases,
    })
}

/// The advisory-lock key of a resource: FNV-1a of its name, folded to 32 bits. Collisions only
/// make two resources wait for each other's transactions, never share a lock.
fn resource_key(resource: &str) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in resource.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    i32::from_ne_bytes(hash.to_ne_bytes())
}

/// Writes the core's changes, in order.
fn apply(tx: &mut Transaction<'_>, resource: &str, changes: &[Change]) -> Result<(), Retry> {
    for change in changes {
        let rows = match change {
            Change::Insert(lease) => tx.execute(
                concat!(
                    "INSERT INTO distlock.locks (resource, owner, fence, acquired_at, expires_at)
                     VALUES ($1, $2, $3, ",
                    at_ms!("$4"),
                    ", ",
                    at_ms!("$5"),
                    ")"
                ),
                &[
                    &resource,
                    &lease.owner.as_str(),
                    &lease.fence.0,
                    &lease.acquired_at.0,
                    &lease.expires_at.0,
                ],
            )?,
            Change::Update {
                fence,
                acquired_at,
                expires_at,
            } => tx.execute(
                concat!(
                    "UPDATE distlock.locks SET acquired_at = ",
                    at_ms!("$3"),
                    ", expires_at = ",
                    at_ms!("$4"),
                    " WHERE resource = $1 AND fence = $2"
                ),
                &[&resource, &fence.0, &acquired_at.0, &expires_at.0],
            )?,
            Change::Delete { fence } => tx.execute(
                "DELETE FROM distlock.locks WHERE resource = $1 AND fence = $2",
                &[&resource, &fence.0],
            )?,
            Change::Record(record) => tx.execute(
                concat!(
                    "INSERT INTO distlock.history (at, resource, owner, fence, event, previous_owner)
                     VALUES (",
                    at_ms!("$1"),
                    ", $2, $3, $4, $5, $6)"
                ),
                &[
                    &record.at.0,
                    &resource,
                    &record.owner.as_str(),
                    &record.fence.0,
                    &record.event.as_str(),
                    &record.previous_owner.as_ref().map(Owner::as_str),
                ],
            )?,
        };
        if rows != 1 {
            // Only a writer that skipped the advisory lock can move a row under a decision.
            return Err(Retry::Conflict);
        }
    }
    Ok(())
}

fn is_transient(err: &postgres::Error) -> bool {
    matches!(
        err.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

impl Backend for Session {
    fn transact<T>(
        &mut self,
        resource: &Resource,
        _durable: bool,
        decide: &mut dyn FnMut(&State, &mut FenceSource<'_>) -> Result<Decision<T>>,
    ) -> Result<T> {
        let res = resource.as_str();
        let key = resource_key(res);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self.client.transaction()?;
            tx.execute(
                "SELECT pg_advisory_xact_lock($1, $2)",
                &[&RESOURCE_LOCK_CLASS, &key],
            )?;
            // Read after the lock is held: in READ COMMITTED each statement sees what was
            // committed before it began, so this sees the previous writer's changes.
            let state = read_state(&mut tx, res)?;
            let decision = {
                let tx = &mut tx;
                let mut fresh = || -> Result<Fence> {
                    let row = tx.query_one("SELECT nextval('distlock.fence')", &[])?;
                    Ok(Fence(row.get(0)))
                };
                decide(&state, &mut fresh)?
            };
            if decision.changes.is_empty() {
                // A refusal: dropping the transaction rolls it back.
                return Ok(decision.outcome);
            }
            let applied = apply(&mut tx, res, &decision.changes)
                .and_then(|()| tx.commit().map_err(Retry::from));
            match applied {
                Ok(()) => return Ok(decision.outcome),
                Err(Retry::Conflict) if attempt < ATTEMPTS => {}
                Err(Retry::Server(err)) if attempt < ATTEMPTS && is_transient(&err) => {}
                Err(Retry::Conflict) => {
                    bail!(
                        "the lock rows of {resource} kept changing; gave up after {ATTEMPTS} attempts"
                    )
                }
                Err(Retry::Server(err)) => return Err(err.into()),
            }
        }
    }

    fn read(&mut self, resource: &Resource) -> Result<State> {
        Ok(read_state(&mut self.client, resource.as_str())?)
    }

    fn scan(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        // COLLATE "C" sorts by bytes, as the SQLite store does, whatever the database's locale.
        let sql = format!(
            "SELECT {LEASE_COLUMNS}, resource FROM distlock.locks
             WHERE expires_at > now() AND starts_with(resource, $1)
             ORDER BY resource COLLATE \"C\""
        );
        let rows = self.client.query(&sql, &[&prefix])?;
        Ok(rows
            .iter()
            .map(|row| lease(row, 0).lock(&Resource::from_store(row.get(4))))
            .collect())
    }

    fn history(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        let limit = query.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let since_ms = query
            .since
            .map(|ago| i64::try_from(ago.as_millis()).unwrap_or(i64::MAX));
        let resource = query.resource.as_ref().map(Resource::as_str);
        let rows = self.client.query(
            "SELECT (extract(epoch FROM at) * 1000)::bigint, resource, owner, fence, event,
                    previous_owner
             FROM (SELECT * FROM distlock.history
                   WHERE ($1::text IS NULL OR resource = $1)
                     AND ($2::bigint IS NULL OR at >= now() - $2::bigint * interval '1 ms')
                   ORDER BY id DESC LIMIT $3) newest
             ORDER BY id",
            &[&resource, &since_ms, &limit],
        )?;
        rows.iter()
            .map(|r| {
                event(
                    Timestamp(r.get(0)),
                    r.get(1),
                    r.get(2),
                    Fence(r.get(3)),
                    r.get(4),
                    r.get(5),
                )
            })
            .collect()
    }

    fn prune(&mut self, keep_history: Duration) -> Result<GcReport> {
        let keep_ms = i64::try_from(keep_history.as_millis()).unwrap_or(i64::MAX);
        let mut report = GcReport::default();
        loop {
            let deleted = self.client.execute(
                "DELETE FROM distlock.locks WHERE resource IN (
                     SELECT resource FROM distlock.locks WHERE expires_at <= now()
                     LIMIT $1 FOR UPDATE SKIP LOCKED)",
                &[&GC_BATCH],
            )?;
            report.expired_locks += deleted;
            if deleted == 0 {
                break;
            }
        }
        loop {
            let deleted = self.client.execute(
                "DELETE FROM distlock.history WHERE id IN (
                     SELECT id FROM distlock.history
                     WHERE at < now() - $1::bigint * interval '1 ms' ORDER BY id LIMIT $2)",
                &[&keep_ms, &GC_BATCH],
            )?;
            report.history_events += deleted;
            if deleted == 0 {
                break;
            }
        }
        Ok(report)
    }
}
