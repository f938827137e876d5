//! distlock's tables on PostgreSQL, and the one write transaction every lock operation runs in.
//!
//! - **The server's clock decides.** "now" is read from the server (`statement_timestamp()`,
//!   truncated to milliseconds as times are printed) in the transaction that decides, never
//!   from this host, so a client whose clock is off still gets exactly its TTL.
//! - **One resource, one writer at a time.** Each write transaction first upserts the
//!   resource's row in `distlock.resources` (`UNIQUE(resource)`), which locks it until the
//!   transaction ends — also for a resource that had no row yet: a racing insert waits on the
//!   unique index, then takes the update path and the lock. Only then does it read the
//!   resource's tenures. A conflicting insert, or a row that changed under a decision, starts the
//!   transaction over (as do serialization failures and deadlocks), a bounded number of times.
//! - Fences come from the sequence `distlock.fence` (never cycles; values are never reused, even
//!   after a rollback or a crash).
//! - The schema lives in its own `distlock` schema and is created on first use under a
//!   transaction-level advisory lock, so many processes starting at once create it exactly once.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, GenericClient, Row, Statement, Transaction};

use std::collections::HashMap;

use crate::engine::{self, Change, Decision, Lease, State, Waiter};
use crate::lock::{Event, Fence, Lock, LogQuery, Mode, Note, Owner, Resource, Timestamp};
use crate::store::{
    Backend, FenceSource, GC_BATCH, GcReport, HistoryRow, SCHEMA_VERSION, event, mode_columns,
    mode_of, newer_schema,
};

/// Attempts per operation when the server reports a serialization failure, a deadlock, or a
/// conflict with a racing writer.
const ATTEMPTS: usize = 5;

/// An arbitrary, fixed advisory-lock key that serializes schema creation.
const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6c6f_636b;

/// Version 1, as distlock 0.1.0 created it. A new database is created at version 1 and
/// upgraded like any old one, so the upgrade path is the one every new store takes.
const SCHEMA_V1: &str = "
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

/// Version 1 → 2: a resource holds a set of tenures (lock modes), each with a mode and a note;
/// history rows carry the mode and note, and who broke a lock and why. `resources` keeps
/// `UNIQUE(resource)`, and its row is what serialises the writers of one resource.
const UPGRADE_V2: &str = "
CREATE TABLE distlock.resources (
    resource text NOT NULL PRIMARY KEY                  -- UNIQUE(resource)
);
INSERT INTO distlock.resources (resource) SELECT DISTINCT resource FROM distlock.locks;
ALTER TABLE distlock.locks DROP CONSTRAINT locks_pkey;
ALTER TABLE distlock.locks
    ADD COLUMN mode text NOT NULL DEFAULT 'exclusive',  -- exclusive | shared | semaphore
    ADD COLUMN lim integer,                             -- a semaphore's N
    ADD COLUMN note text,
    ADD PRIMARY KEY (resource, fence),
    ADD UNIQUE (resource, owner);                       -- one tenure per owner and resource
ALTER TABLE distlock.history
    ADD COLUMN mode text NOT NULL DEFAULT 'exclusive',
    ADD COLUMN lim integer,
    ADD COLUMN note text,
    ADD COLUMN operator text,                           -- who broke the lock
    ADD COLUMN reason text;                             -- why
CREATE TABLE distlock.waiters (
    ticket     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- arrival order
    resource   text        NOT NULL,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL,                    -- a live place while now() < expires_at
    UNIQUE (resource, owner)
);
UPDATE distlock.meta SET schema_version = 2;
";

/// The server's "now" in milliseconds since the epoch, as times are printed.
const NOW_MS: &str = "(extract(epoch FROM date_trunc('milliseconds', statement_timestamp())) \
                      * 1000)::bigint";

/// The lease columns, times as milliseconds since the epoch, in the order [`lease`] reads them.
const LEASE_COLUMNS: &str = "owner, fence, (extract(epoch FROM acquired_at) * 1000)::bigint, \
                             (extract(epoch FROM expires_at) * 1000)::bigint, mode, lim, note";

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

/// The channel on which commits that may let a waiter in are announced; the payload is the
/// resource.
const CHANNEL: &str = "distlock";

/// The connection, owned by the worker thread.
pub struct Session {
    client: Client,
    /// `LISTEN` was sent on this connection.
    listening: bool,
    statements: Statements,
}

/// Statements prepared on this connection, by their SQL. Each statement of the lock operations
/// then costs one round trip instead of two (parse and describe, then execute); a `run`'s
/// renewals and a waiter's attempts reuse them for the life of the process.
#[derive(Default)]
struct Statements(HashMap<String, Statement>);

impl Statements {
    fn get(
        &mut self,
        client: &mut impl GenericClient,
        sql: &str,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql)?;
        self.0.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
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
        let mut session = Session {
            client,
            listening: false,
            statements: Statements::default(),
        };
        let version = schema_version(&mut session.client)?;
        if version > SCHEMA_VERSION {
            bail!(newer_schema(version));
        }
        if version < SCHEMA_VERSION {
            // Created or upgraded once, atomically, however many processes arrive at once:
            // the first to take the advisory lock does it, the others find it done.
            let mut tx = session.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK_KEY])?;
            let version = schema_version(&mut tx)?;
            if version > SCHEMA_VERSION {
                bail!(newer_schema(version));
            }
            if version < 1 {
                tx.batch_execute(SCHEMA_V1)
                    .context("cannot create the distlock schema")?;
            }
            if version < 2 {
                tx.batch_execute(UPGRADE_V2)
                    .context("cannot upgrade the distlock schema to version 2")?;
            }
            tx.commit()?;
        }
        Ok(session)
    }
}

/// The schema version, 0 when there is no distlock schema yet.
fn schema_version(client: &mut impl GenericClient) -> Result<i64> {
    // A scan of pg_class, not to_regclass(): name lookups use a catalog cache that taking an
    // advisory lock does not refresh, so after waiting for another process's schema creation
    // they could still miss its tables. A query sees what committed before it began.
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_class c
                            JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = 'distlock' AND c.relname = 'meta')",
            &[],
        )?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = client
        .query_opt("SELECT schema_version FROM distlock.meta", &[])
        .context("cannot read the schema version")?;
    Ok(row.map_or(0, |r| i64::from(r.get::<_, i32>(0))))
}

/// Reads [`LEASE_COLUMNS`] from the columns starting at `first`.
fn lease(row: &Row, first: usize) -> Result<Lease> {
    Ok(Lease {
        owner: Owner::from_store(row.get(first)),
        fence: Fence(row.get(first + 1)),
        acquired_at: Timestamp(row.get(first + 2)),
        expires_at: Timestamp(row.get(first + 3)),
        mode: mode_of(
            row.get(first + 4),
            row.get::<_, Option<i32>>(first + 5).map(i64::from),
        )?,
        note: row.get::<_, Option<&str>>(first + 6).map(Note::from_store),
    })
}

/// The server's now and every row of `resource`, in one statement (one snapshot).
fn read_state(
    client: &mut impl GenericClient,
    statements: &mut Statements,
    resource: &str,
) -> Result<State> {
    let sql = format!(
        "SELECT {NOW_MS}, l.* FROM (SELECT 1) one LEFT JOIN (
             SELECT {LEASE_COLUMNS} FROM distlock.locks WHERE resource = $1) l ON true"
    );
    let statement = statements.get(client, &sql)?;
    let rows = client.query(&statement, &[&resource])?;
    let now = rows.first().map_or(0, |r| r.get(0));
    let leases = rows
        .iter()
        .filter(|r| r.get::<_, Option<&str>>(1).is_some())
        .map(|r| lease(r, 1))
        .collect::<Result<_>>()?;
    let statement = statements.get(
        client,
        "SELECT owner, ticket, (extract(epoch FROM expires_at) * 1000)::bigint
         FROM distlock.waiters WHERE resource = $1",
    )?;
    let queue = client
        .query(&statement, &[&resource])?
        .iter()
        .map(|r| Waiter {
            owner: Owner::from_store(r.get(0)),
            ticket: r.get(1),
            expires_at: Timestamp(r.get(2)),
        })
        .collect();
    Ok(State {
        now: Timestamp(now),
        leases,
        queue,
    })
}

/// Writes the core's changes, in order.
fn apply(
    tx: &mut Transaction<'_>,
    statements: &mut Statements,
    resource: &str,
    changes: &[Change],
) -> Result<(), Retry> {
    let mut run = |tx: &mut Transaction<'_>,
                   sql: &str,
                   params: &[&(dyn postgres::types::ToSql + Sync)]|
     -> Result<u64, postgres::Error> {
        let statement = statements.get(tx, sql)?;
        tx.execute(&statement, params)
    };
    for change in changes {
        let rows = match change {
            Change::Insert(lease) => {
                let (mode, lim) = pg_mode(lease.mode);
                run(
                    tx,
                    concat!(
                        "INSERT INTO distlock.locks
                             (resource, owner, fence, acquired_at, expires_at, mode, lim, note)
                         VALUES ($1, $2, $3, ",
                        at_ms!("$4"),
                        ", ",
                        at_ms!("$5"),
                        ", $6, $7, $8)"
                    ),
                    &[
                        &resource,
                        &lease.owner.as_str(),
                        &lease.fence.0,
                        &lease.acquired_at.0,
                        &lease.expires_at.0,
                        &mode,
                        &lim,
                        &lease.note.as_ref().map(Note::as_str),
                    ],
                )?
            }
            Change::Update(lease) => run(
                tx,
                concat!(
                    "UPDATE distlock.locks SET acquired_at = ",
                    at_ms!("$3"),
                    ", expires_at = ",
                    at_ms!("$4"),
                    ", note = $5 WHERE resource = $1 AND fence = $2"
                ),
                &[
                    &resource,
                    &lease.fence.0,
                    &lease.acquired_at.0,
                    &lease.expires_at.0,
                    &lease.note.as_ref().map(Note::as_str),
                ],
            )?,
            Change::Delete { fence } => run(
                tx,
                "DELETE FROM distlock.locks WHERE resource = $1 AND fence = $2",
                &[&resource, &fence.0],
            )?,
            Change::Enqueue { owner, expires_at } => run(
                tx,
                concat!(
                    "INSERT INTO distlock.waiters (resource, owner, expires_at) VALUES ($1, $2, ",
                    at_ms!("$3"),
                    ")"
                ),
                &[&resource, &owner.as_str(), &expires_at.0],
            )?,
            Change::Refresh { owner, expires_at } => run(
                tx,
                concat!(
                    "UPDATE distlock.waiters SET expires_at = ",
                    at_ms!("$3"),
                    " WHERE resource = $1 AND owner = $2"
                ),
                &[&resource, &owner.as_str(), &expires_at.0],
            )?,
            Change::Dequeue { owner } => run(
                tx,
                "DELETE FROM distlock.waiters WHERE resource = $1 AND owner = $2",
                &[&resource, &owner.as_str()],
            )?,
            Change::Record(record) => {
                let (mode, lim) = pg_mode(record.mode);
                run(
                    tx,
                    concat!(
                        "INSERT INTO distlock.history (at, resource, owner, fence, event,
                             previous_owner, mode, lim, note, operator, reason)
                         VALUES (",
                        at_ms!("$1"),
                        ", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
                    ),
                    &[
                        &record.at.0,
                        &resource,
                        &record.owner.as_str(),
                        &record.fence.0,
                        &record.event.as_str(),
                        &record.previous_owner.as_ref().map(Owner::as_str),
                        &mode,
                        &lim,
                        &record.note.as_ref().map(Note::as_str),
                        &record.broken.as_ref().map(|b| b.by.as_str()),
                        &record.broken.as_ref().map(|b| b.reason.as_str()),
                    ],
                )?
            }
        };
        if rows != 1 {
            // Only a writer that skipped the resource's row lock (`gc`) can move a row under a
            // decision.
            return Err(Retry::Conflict);
        }
    }
    Ok(())
}

/// [`mode_columns`], with the `integer` column's type.
fn pg_mode(mode: Mode) -> (&'static str, Option<i32>) {
    let (name, lim) = mode_columns(mode);
    (name, lim.and_then(|n| i32::try_from(n).ok()))
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
        let mut attempt = 0;
        loop {
            attempt += 1;
            let statements = &mut self.statements;
            let mut tx = self.client.transaction()?;
            let upsert = statements.get(
                &mut tx,
                "INSERT INTO distlock.resources (resource) VALUES ($1)
                 ON CONFLICT (resource) DO UPDATE SET resource = EXCLUDED.resource",
            )?;
            tx.execute(&upsert, &[&res])?;
            // Read after the lock is held: in READ COMMITTED each statement sees what was
            // committed before it began, so this sees the previous writer's changes.
            let state = read_state(&mut tx, statements, res)?;
            let decision = {
                let tx = &mut tx;
                let statements = &mut *statements;
                let mut fresh = || -> Result<Fence> {
                    let next = statements.get(tx, "SELECT nextval('distlock.fence')")?;
                    Ok(Fence(tx.query_one(&next, &[])?.get(0)))
                };
                decide(&state, &mut fresh)?
            };
            if decision.changes.is_empty() {
                // A refusal: dropping the transaction rolls it back.
                return Ok(decision.outcome);
            }
            // Waiters hear of a change that may let them in when it commits (NOTIFY is
            // delivered on commit, and not at all on a rollback).
            let wakes = engine::wakes_waiters(&decision.changes);
            let applied = apply(&mut tx, statements, res, &decision.changes)
                .and_then(|()| {
                    if wakes {
                        let notify = statements.get(&mut tx, "SELECT pg_notify($1, $2)")?;
                        tx.execute(&notify, &[&CHANNEL, &res])?;
                    }
                    Ok(())
                })
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

    fn watch(&mut self, _resource: &Resource) -> Result<()> {
        if !self.listening {
            self.client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
            self.listening = true;
        }
        Ok(())
    }

    fn wait_for_change(&mut self, resource: &Resource, timeout: Duration) -> Result<()> {
        if !self.listening {
            std::thread::sleep(timeout);
            return Ok(());
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut notifications = self.client.notifications();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match notifications.timeout_iter(left).next()? {
                Some(note) if note.payload() == resource.as_str() => return Ok(()),
                // Another resource's change: keep waiting for ours.
                Some(_) if !left.is_zero() => {}
                _ => return Ok(()),
            }
        }
    }

    fn read(&mut self, resource: &Resource) -> Result<State> {
        read_state(&mut self.client, &mut self.statements, resource.as_str())
    }

    fn scan(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        // COLLATE "C" sorts by bytes, as the SQLite store does, whatever the database's locale.
        let sql = format!(
            "SELECT {LEASE_COLUMNS}, resource FROM distlock.locks
             WHERE expires_at > now() AND starts_with(resource, $1)
             ORDER BY resource COLLATE \"C\", fence"
        );
        let rows = self.client.query(&sql, &[&prefix])?;
        rows.iter()
            .map(|row| Ok(lease(row, 0)?.lock(&Resource::from_store(row.get(7)))))
            .collect()
    }

    fn history(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        let limit = query.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let since_ms = query
            .since
            .map(|ago| i64::try_from(ago.as_millis()).unwrap_or(i64::MAX));
        let resource = query.resource.as_ref().map(Resource::as_str);
        let rows = self.client.query(
            "SELECT (extract(epoch FROM at) * 1000)::bigint, resource, owner, fence, event,
                    previous_owner, mode, lim, note, operator, reason
             FROM (SELECT * FROM distlock.history
                   WHERE ($1::text IS NULL OR resource = $1)
                     AND ($2::bigint IS NULL OR at >= now() - $2::bigint * interval '1 ms')
                   ORDER BY id DESC LIMIT $3) newest
             ORDER BY id",
            &[&resource, &since_ms, &limit],
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
                })
            })
            .collect()
    }

    fn prune(&mut self, keep_history: Duration) -> Result<GcReport> {
        let keep_ms = i64::try_from(keep_history.as_millis()).unwrap_or(i64::MAX);
        let mut report = GcReport::default();
        loop {
            let deleted = self.client.execute(
                "DELETE FROM distlock.locks WHERE (resource, fence) IN (
                     SELECT resource, fence FROM distlock.locks WHERE expires_at <= now()
                     LIMIT $1 FOR UPDATE SKIP LOCKED)",
                &[&GC_BATCH],
            )?;
            report.expired_locks += deleted;
            if deleted == 0 {
                break;
            }
        }
        // Resources nobody holds any more. A writer that races this re-creates its row.
        loop {
            let deleted = self.client.execute(
                "DELETE FROM distlock.resources WHERE resource IN (
                     SELECT r.resource FROM distlock.resources r
                     WHERE NOT EXISTS (
                         SELECT 1 FROM distlock.locks l WHERE l.resource = r.resource)
                     LIMIT $1 FOR UPDATE SKIP LOCKED)",
                &[&GC_BATCH],
            )?;
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
