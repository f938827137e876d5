//! distlock's tables on PostgreSQL, and the one write transaction every lock operation runs in.
//!
//! - **The server's clock decides.** "now" is read from the server (`clock_timestamp()`,
//!   truncated to milliseconds as times are printed) in the transaction that decides, after it
//!   holds the resource, never from this host, so a client whose clock is off still gets
//!   exactly its TTL.
//! - **One resource, one writer at a time.** Each write transaction first inserts or locks the
//!   resource's row in `distlock.resources` (`UNIQUE(resource)`), which it holds until the
//!   transaction ends — also for a resource that had no row yet: a racing insert waits on the
//!   unique index, then takes the conflict path and the lock. Only then, in later statements (each
//!   with a snapshot of its own), does it read the resource's tenures. A conflicting insert, or a
//!   row that changed under a decision, starts the transaction over (as do serialization
//!   failures and deadlocks), a bounded number of times.
//! - **Two round trips per operation.** A process makes one or two calls, so what costs is the
//!   number of round trips, not parsing. The statements are sent in two simple-protocol
//!   batches: `BEGIN`, the row lock and the reads; then the core's writes, `pg_notify` and
//!   `COMMIT`. Values go into the SQL as literals ([`text`]: escape strings, so their meaning
//!   does not depend on server settings). The schema version is read in the first batch too:
//!   only when it is not this build's, or the batch fails on a connection that has not seen the
//!   schema yet, is the schema checked, created or upgraded the careful way
//!   ([`Session::ensure_schema`]), and the operation tried again.
//! - Fences come from the sequence `distlock.fence` (never cycles; values are never reused, even
//!   after a rollback or a crash). When the resource has no live tenure and no live waiter (an
//!   acquire is then granted a new tenure), the first batch takes the next fence already,
//!   saving a round trip; unused, it is a gap, as after a rollback.
//! - The schema lives in its own `distlock` schema and is created on first use under a
//!   transaction-level advisory lock, so many processes starting at once create it exactly once.
//! - Session state: only `LISTEN` (waiters), and only in a waiting process. No prepared
//!   statements, no session-level advisory locks, no temporary tables.

use std::fmt::Display;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, GenericClient, Row, SimpleQueryMessage, SimpleQueryRow};

use crate::engine::{self, Change, Decision, Lease, State, Waiter};
use crate::lock::{Event, Fence, Lock, LogQuery, Note, Owner, Resource, Timestamp};
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

/// Version 2 → 3: a tenure records whether `run` took it, which guards it: only a tenure that
/// `acquire` took may be joined. Every tenure already there is one that may be joined. (A
/// column with a constant default: the server adds it without rewriting the table.)
const UPGRADE_V3: &str = "
ALTER TABLE distlock.locks
    ADD COLUMN guarded boolean NOT NULL DEFAULT false;  -- taken by run
UPDATE distlock.meta SET schema_version = 3;
";

/// The lease columns, times as milliseconds since the epoch, in the order [`lease`] reads them.
const LEASE_COLUMNS: &str = "owner, fence, (extract(epoch FROM acquired_at) * 1000)::bigint, \
                             (extract(epoch FROM expires_at) * 1000)::bigint, mode, lim, note, \
                             guarded";

/// The channel on which commits that may let a waiter in are announced; the payload is the
/// resource.
const CHANNEL: &str = "distlock";

/// The connection, owned by the worker thread.
pub struct Session {
    client: Client,
    /// `LISTEN` was sent on this connection.
    listening: bool,
    /// The schema was found at [`SCHEMA_VERSION`] on this connection, or made so.
    checked: bool,
}

/// Why a transaction must start over.
enum Retry {
    Conflict,
    Server(postgres::Error),
}

impl From<postgres::Error> for Retry {
    fn from(err: postgres::Error) -> Retry {
        // A racing insert, or a row that a write expected and no longer found (see
        // [`one_row`]).
        if err.code() == Some(&SqlState::UNIQUE_VIOLATION)
            || err.code() == Some(&SqlState::DIVISION_BY_ZERO)
        {
            Retry::Conflict
        } else {
            Retry::Server(err)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Batches: several statements, one round trip.

/// `value` as an SQL string literal: an escape string (`E'…'`) with every quote and backslash
/// doubled, which reads the same whatever the server's `standard_conforming_strings`. The
/// connection's encoding is UTF-8 (the driver sets `client_encoding`), and a NUL cannot be
/// sent at all (the driver refuses the query), so nothing else needs escaping.
fn text(value: &str) -> String {
    let mut literal = String::with_capacity(value.len() + 3);
    literal.push_str("E'");
    for c in value.chars() {
        match c {
            '\'' => literal.push_str("''"),
            '\\' => literal.push_str("\\\\"),
            c => literal.push(c),
        }
    }
    literal.push('\'');
    literal
}

/// [`text`], or `NULL`.
fn text_or_null(value: Option<&str>) -> String {
    value.map_or_else(|| "NULL".to_owned(), text)
}

/// A number, or `NULL`.
fn number_or_null(value: Option<impl Display>) -> String {
    value.map_or_else(|| "NULL".to_owned(), |n| n.to_string())
}

/// A time from the core, in milliseconds since the epoch, as a `timestamptz`.
fn at_ms(ms: i64) -> String {
    format!("('epoch'::timestamptz + ({ms})::bigint * interval '1 ms')")
}

/// What one statement of a batch returned.
struct Output {
    rows: Vec<SimpleQueryRow>,
}

/// Sends `statements` as one simple-protocol query (one round trip) and returns what each
/// returned, in order. On an error the server skips the rest; inside `BEGIN` the transaction
/// is then aborted and must be rolled back.
fn send(
    client: &mut impl GenericClient,
    statements: &[String],
) -> Result<Vec<Output>, postgres::Error> {
    let messages = client.simple_query(&statements.join(";\n"))?;
    let mut outputs = Vec::with_capacity(statements.len());
    let mut rows = Vec::new();
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => rows.push(row),
            SimpleQueryMessage::CommandComplete(_) => outputs.push(Output {
                rows: std::mem::take(&mut rows),
            }),
            _ => {}
        }
    }
    Ok(outputs)
}

/// Column `i` of a text row.
fn column(row: &SimpleQueryRow, i: usize) -> Result<Option<&str>> {
    row.try_get(i)
        .with_context(|| format!("the server's answer has no column {i}"))
}

/// Column `i` of a text row, as a number (`None` for `NULL`).
fn number(row: &SimpleQueryRow, i: usize) -> Result<Option<i64>> {
    column(row, i)?
        .map(|value| {
            value
                .parse()
                .with_context(|| format!("the server answered {value:?} for a number"))
        })
        .transpose()
}

/// Column `i` of a text row, a `boolean` that must not be `NULL` (the text protocol sends
/// `t` or `f`).
fn flag(row: &SimpleQueryRow, i: usize) -> Result<bool> {
    match required(column(row, i)?, i)? {
        "t" => Ok(true),
        "f" => Ok(false),
        value => bail!("the server answered {value:?} for a boolean"),
    }
}

/// Column `i` of a text row, which must not be `NULL`.
fn required<T>(value: Option<T>, i: usize) -> Result<T> {
    value.ok_or_else(|| anyhow!("the server answered NULL in column {i}"))
}

/// `sql`, an `UPDATE` or `DELETE` of one row, made to fail with `division_by_zero` (read as a
/// conflict) when it finds no row: a write that the decision counted on must happen, or the
/// `COMMIT` sent in the same batch must not run.
fn one_row(sql: &str) -> String {
    format!("WITH w AS ({sql} RETURNING 1) SELECT 1 / count(*)::integer FROM w")
}

// ---------------------------------------------------------------------------------------------
// The statements.

/// Locks `resource`'s row until the transaction ends, creating it if needed. `DO UPDATE …
/// WHERE false` locks an existing row as an update would (so it also serialises with distlock
/// versions that rewrite the row) but leaves it as it is: a busy resource leaves no dead row
/// versions behind, and the statement writes no row to the WAL.
fn lock_row(resource: &str) -> String {
    format!(
        "INSERT INTO distlock.resources (resource) VALUES ({resource}) \
         ON CONFLICT (resource) DO UPDATE SET resource = EXCLUDED.resource WHERE false"
    )
}

/// The server's now in milliseconds since the epoch (as times are printed), the schema
/// version, and — with `fence` — the next fence when the resource has no live tenure and no
/// live waiter, else `NULL`. Never takes a fence from a schema this build does not know.
fn head(resource: &str, fence: bool) -> String {
    let fence = if fence {
        format!(
            "CASE WHEN n.version = {SCHEMA_VERSION}
                   AND NOT EXISTS (SELECT FROM distlock.locks
                                   WHERE resource = {resource} AND expires_at > n.now)
                   AND NOT EXISTS (SELECT FROM distlock.waiters
                                   WHERE resource = {resource} AND expires_at > n.now)
                  THEN nextval('distlock.fence') END"
        )
    } else {
        "NULL".to_owned()
    };
    format!(
        "WITH n AS (SELECT date_trunc('milliseconds', clock_timestamp()) AS now,
                           (SELECT schema_version FROM distlock.meta) AS version)
         SELECT (extract(epoch FROM n.now) * 1000)::bigint, n.version, {fence} FROM n"
    )
}

fn tenures(resource: &str) -> String {
    format!("SELECT {LEASE_COLUMNS} FROM distlock.locks WHERE resource = {resource}")
}

fn waiters(resource: &str) -> String {
    format!(
        "SELECT owner, ticket, (extract(epoch FROM expires_at) * 1000)::bigint \
         FROM distlock.waiters WHERE resource = {resource}"
    )
}

/// What the reads of a batch found: the state, the schema version, and a fence taken ahead.
struct Found {
    state: State,
    version: Option<i64>,
    fence: Option<i64>,
}

/// Reads the outputs of [`head`], [`tenures`] and [`waiters`].
fn found(head: &Output, tenures: &Output, waiters: &Output) -> Result<Found> {
    let first = head
        .rows
        .first()
        .ok_or_else(|| anyhow!("the server's clock query returned no row"))?;
    let leases = tenures.rows.iter().map(lease).collect::<Result<_>>()?;
    let queue = waiters
        .rows
        .iter()
        .map(|r| {
            Ok(Waiter {
                owner: Owner::from_store(required(column(r, 0)?, 0)?),
                ticket: required(number(r, 1)?, 1)?,
                expires_at: Timestamp(required(number(r, 2)?, 2)?),
            })
        })
        .collect::<Result<_>>()?;
    Ok(Found {
        state: State {
            now: Timestamp(required(number(first, 0)?, 0)?),
            leases,
            queue,
        },
        version: number(first, 1)?,
        fence: number(first, 2)?,
    })
}

/// Reads [`LEASE_COLUMNS`] from a text row.
fn lease(row: &SimpleQueryRow) -> Result<Lease> {
    Ok(Lease {
        owner: Owner::from_store(required(column(row, 0)?, 0)?),
        fence: Fence(required(number(row, 1)?, 1)?),
        acquired_at: Timestamp(required(number(row, 2)?, 2)?),
        expires_at: Timestamp(required(number(row, 3)?, 3)?),
        mode: mode_of(required(column(row, 4)?, 4)?, number(row, 5)?)?,
        note: column(row, 6)?.map(Note::from_store),
        guarded: flag(row, 7)?,
    })
}

/// Reads [`LEASE_COLUMNS`] from the binary row of `list`, starting at column `first`.
fn binary_lease(row: &Row, first: usize) -> Result<Lease> {
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
        guarded: row.get(first + 7),
    })
}

/// The statement that writes `change` to `resource` (already a literal).
fn write(resource: &str, change: &Change) -> String {
    match change {
        Change::Insert(lease) => {
            let (mode, lim) = mode_columns(lease.mode);
            format!(
                "INSERT INTO distlock.locks
                     (resource, owner, fence, acquired_at, expires_at, mode, lim, note, guarded)
                 VALUES ({resource}, {}, {}, {}, {}, {}, {}, {}, {})",
                text(lease.owner.as_str()),
                lease.fence.0,
                at_ms(lease.acquired_at.0),
                at_ms(lease.expires_at.0),
                text(mode),
                number_or_null(lim),
                text_or_null(lease.note.as_ref().map(Note::as_str)),
                lease.guarded,
            )
        }
        Change::Update(lease) => one_row(&format!(
            "UPDATE distlock.locks SET acquired_at = {}, expires_at = {}, note = {}
             WHERE resource = {resource} AND fence = {}",
            at_ms(lease.acquired_at.0),
            at_ms(lease.expires_at.0),
            text_or_null(lease.note.as_ref().map(Note::as_str)),
            lease.fence.0,
        )),
        Change::Delete { fence } => one_row(&format!(
            "DELETE FROM distlock.locks WHERE resource = {resource} AND fence = {}",
            fence.0
        )),
        Change::Enqueue { owner, expires_at } => format!(
            "INSERT INTO distlock.waiters (resource, owner, expires_at) VALUES ({resource}, {}, {})",
            text(owner.as_str()),
            at_ms(expires_at.0),
        ),
        Change::Refresh { owner, expires_at } => one_row(&format!(
            "UPDATE distlock.waiters SET expires_at = {}
             WHERE resource = {resource} AND owner = {}",
            at_ms(expires_at.0),
            text(owner.as_str()),
        )),
        Change::Dequeue { owner } => one_row(&format!(
            "DELETE FROM distlock.waiters WHERE resource = {resource} AND owner = {}",
            text(owner.as_str()),
        )),
        Change::Record(record) => {
            let (mode, lim) = mode_columns(record.mode);
            format!(
                "INSERT INTO distlock.history (at, resource, owner, fence, event,
                     previous_owner, mode, lim, note, operator, reason)
                 VALUES ({}, {resource}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                at_ms(record.at.0),
                text(record.owner.as_str()),
                record.fence.0,
                text(record.event.as_str()),
                text_or_null(record.previous_owner.as_ref().map(Owner::as_str)),
                text(mode),
                number_or_null(lim),
                text_or_null(record.note.as_ref().map(Note::as_str)),
                text_or_null(record.broken.as_ref().map(|b| b.by.as_str())),
                text_or_null(record.broken.as_ref().map(|b| b.reason.as_str())),
            )
        }
    }
}

fn is_transient(err: &postgres::Error) -> bool {
    matches!(
        err.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

// ---------------------------------------------------------------------------------------------
// The session.

impl Session {
    /// A session on a new connection. The schema is checked by the first operation, in its
    /// first round trip.
    pub fn new(client: Client) -> Session {
        Session {
            client,
            listening: false,
            checked: false,
        }
    }

    /// Checks the schema version the careful way, and creates or upgrades the schema if it is
    /// missing or older.
    ///
    /// # Errors
    ///
    /// A newer schema, or a failed statement.
    fn ensure_schema(&mut self) -> Result<()> {
        let version = schema_version(&mut self.client)?;
        if version > SCHEMA_VERSION {
            bail!(newer_schema(version));
        }
        if version < SCHEMA_VERSION {
            // Created or upgraded once, atomically, however many processes arrive at once:
            // the first to take the advisory lock does it, the others find it done.
            let mut tx = self.client.transaction()?;
            tx.batch_execute(&format!("SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})"))?;
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
            if version < 3 {
                tx.batch_execute(UPGRADE_V3)
                    .context("cannot upgrade the distlock schema to version 3")?;
            }
            tx.commit()?;
        }
        self.checked = true;
        Ok(())
    }

    /// [`Session::ensure_schema`], once per connection: for the queries that do not read the
    /// version themselves (`list`, `log`, `gc`).
    fn ensure_checked(&mut self) -> Result<()> {
        if self.checked {
            Ok(())
        } else {
            self.ensure_schema()
        }
    }

    /// Ends the open transaction, after an error or a refusal. A failure to roll back is not
    /// reported: the caller reports what went wrong first, and a broken connection rolls the
    /// transaction back on the server anyway.
    fn rollback(&mut self) {
        let _ = self.client.batch_execute("ROLLBACK");
    }

    /// What to do after the first batch failed, or found another schema version: check the
    /// schema the careful way (creating or upgrading it, refusing a newer one) and try again,
    /// once per operation. `Ok(false)`: the schema was fine, the failure is real.
    fn recheck(&mut self, version_seen: bool, rechecked: &mut bool) -> Result<bool> {
        if *rechecked || (self.checked && !version_seen) {
            return Ok(false);
        }
        *rechecked = true;
        self.ensure_schema()?;
        Ok(true)
    }
}

/// The schema version, 0 when there is no distlock schema yet.
fn schema_version(client: &mut impl GenericClient) -> Result<i64> {
    // A scan of pg_class, not to_regclass(): name lookups use a catalog cache that taking an
    // advisory lock does not refresh, so after waiting for another process's schema creation
    // they could still miss its tables. A query sees what committed before it began.
    let exists = send(
        client,
        &["SELECT EXISTS (SELECT FROM pg_catalog.pg_class c
                          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                          WHERE n.nspname = 'distlock' AND c.relname = 'meta')"
            .to_owned()],
    )?;
    let exists = exists
        .first()
        .and_then(|o| o.rows.first())
        .map(|r| column(r, 0))
        .transpose()?
        .flatten();
    if exists != Some("t") {
        return Ok(0);
    }
    let version = send(
        client,
        &["SELECT schema_version FROM distlock.meta".to_owned()],
    )
    .context("cannot read the schema version")?;
    match version.first().and_then(|o| o.rows.first()) {
        Some(row) => Ok(number(row, 0)?.unwrap_or(0)),
        None => Ok(0),
    }
}

impl Backend for Session {
    fn transact<T>(
        &mut self,
        resource: &Resource,
        durable: bool,
        decide: &mut dyn FnMut(&State, &mut FenceSource<'_>) -> Result<Decision<T>>,
    ) -> Result<T> {
        let res = text(resource.as_str());
        let mut attempt = 0;
        let mut rechecked = false;
        loop {
            attempt += 1;
            // Round trip 1: take the resource's row lock, then read (each read a statement of
            // its own, so it sees what the previous writer committed).
            let opened = send(
                &mut self.client,
                &[
                    "BEGIN".to_owned(),
                    lock_row(&res),
                    head(&res, true),
                    tenures(&res),
                    waiters(&res),
                ],
            );
            let outputs = match opened {
                Ok(outputs) if outputs.len() == 5 => outputs,
                Ok(_) => {
                    self.rollback();
                    bail!("the server answered a different number of statements");
                }
                Err(err) => {
                    self.rollback();
                    if self.recheck(false, &mut rechecked)? {
                        attempt -= 1;
                        continue;
                    }
                    if attempt < ATTEMPTS && is_transient(&err) {
                        continue;
                    }
                    return Err(err.into());
                }
            };
            let found = match found(&outputs[2], &outputs[3], &outputs[4]) {
                Ok(found) => found,
                Err(err) => {
                    self.rollback();
                    return Err(err);
                }
            };
            if found.version != Some(SCHEMA_VERSION) {
                self.rollback();
                if self.recheck(true, &mut rechecked)? {
                    attempt -= 1;
                    continue;
                }
                bail!(
                    "the schema version changed while this operation ran ({:?})",
                    found.version
                );
            }
            self.checked = true;

            let decision = {
                let client = &mut self.client;
                let mut ahead = found.fence;
                let mut fresh = || -> Result<Fence> {
                    if let Some(fence) = ahead.take() {
                        return Ok(Fence(fence));
                    }
                    let next = send(client, &["SELECT nextval('distlock.fence')".to_owned()])?;
                    let row = next
                        .first()
                        .and_then(|o| o.rows.first())
                        .ok_or_else(|| anyhow!("nextval returned no row"))?;
                    Ok(Fence(required(number(row, 0)?, 0)?))
                };
                decide(&found.state, &mut fresh)
            };
            let decision = match decision {
                Ok(decision) => decision,
                Err(err) => {
                    self.rollback();
                    return Err(err);
                }
            };
            if decision.changes.is_empty() {
                // A refusal, or nothing to do: give the row lock back.
                self.rollback();
                return Ok(decision.outcome);
            }

            // Round trip 2: the writes, the wake-up and the commit.
            let mut statements = Vec::with_capacity(decision.changes.len() + 3);
            if !(durable && decision.changes.iter().any(Change::is_durable)) {
                // As on SQLite: a commit that need not survive power loss (a release, a place
                // in the queue) does not wait for the server's WAL flush, nor for a synchronous
                // standby; lost, the lock merely stays until its TTL runs out.
                statements.push("SET LOCAL synchronous_commit TO off".to_owned());
            }
            statements.extend(decision.changes.iter().map(|change| write(&res, change)));
            // Waiters hear of a change that may let them in when it commits (NOTIFY is
            // delivered on commit, and not at all on a rollback).
            if engine::wakes_waiters(&decision.changes) {
                statements.push(format!("SELECT pg_notify({}, {res})", text(CHANNEL)));
            }
            statements.push("COMMIT".to_owned());
            let committed = send(&mut self.client, &statements);
            match committed.map_err(Retry::from) {
                Ok(outputs) if outputs.len() == statements.len() => {
                    return Ok(decision.outcome);
                }
                Ok(_) => {
                    self.rollback();
                    bail!("the server answered a different number of statements");
                }
                Err(retry) => {
                    self.rollback();
                    match retry {
                        Retry::Conflict if attempt < ATTEMPTS => {}
                        Retry::Server(err) if attempt < ATTEMPTS && is_transient(&err) => {}
                        Retry::Conflict => {
                            bail!(
                                "the lock rows of {resource} kept changing; gave up after \
                                 {ATTEMPTS} attempts"
                            )
                        }
                        Retry::Server(err) => return Err(err.into()),
                    }
                }
            }
        }
    }

    fn read(&mut self, resource: &Resource) -> Result<State> {
        let res = text(resource.as_str());
        let mut rechecked = false;
        loop {
            // One implicit transaction; each statement sees what committed before it began.
            let read = send(
                &mut self.client,
                &[head(&res, false), tenures(&res), waiters(&res)],
            );
            let outputs = match read {
                Ok(outputs) if outputs.len() == 3 => outputs,
                Ok(_) => bail!("the server answered a different number of statements"),
                Err(err) => {
                    if self.recheck(false, &mut rechecked)? {
                        continue;
                    }
                    return Err(err.into());
                }
            };
            let found = found(&outputs[0], &outputs[1], &outputs[2])?;
            if found.version != Some(SCHEMA_VERSION) {
                if self.recheck(true, &mut rechecked)? {
                    continue;
                }
                bail!(
                    "the schema version changed while this operation ran ({:?})",
                    found.version
                );
            }
            self.checked = true;
            return Ok(found.state);
        }
    }

    fn watch(&mut self, _resource: &Resource, _owner: &Owner) -> Result<()> {
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

    fn scan(&mut self, prefix: &str) -> Result<Vec<Lock>> {
        self.ensure_checked()?;
        // COLLATE "C" sorts by bytes, as the SQLite store does, whatever the database's locale.
        let sql = format!(
            "SELECT {LEASE_COLUMNS}, resource FROM distlock.locks
             WHERE expires_at > now() AND starts_with(resource, $1)
             ORDER BY resource COLLATE \"C\", fence"
        );
        let rows = self.client.query(&sql, &[&prefix])?;
        rows.iter()
            .map(|row| Ok(binary_lease(row, 0)?.lock(&Resource::from_store(row.get(8)))))
            .collect()
    }

    fn history(&mut self, query: &LogQuery) -> Result<Vec<Event>> {
        self.ensure_checked()?;
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
        self.ensure_checked()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_double_every_quote_and_backslash() {
        assert_eq!(text(r"it's a \ test"), r"E'it''s a \\ test'");
        assert_eq!(text(r"\'"), r"E'\\'''");
        assert_eq!(text(""), "E''");
        assert_eq!(text_or_null(None), "NULL");
        assert_eq!(text_or_null(Some("x")), "E'x'");
        assert_eq!(number_or_null(None::<i64>), "NULL");
        assert_eq!(number_or_null(Some(-3)), "-3");
        assert_eq!(
            at_ms(-5),
            "('epoch'::timestamptz + (-5)::bigint * interval '1 ms')"
        );
    }
}
