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

use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use postgres::Client;
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;

use super::batch::{number, required, send};
use super::statements::{
    CHANNEL, LEASE_COLUMNS, binary_lease, found, head, is_transient, lock_row, tenures, text,
    waiters, write,
};
use crate::engine::{self, Change, Decision, State};
use crate::lock::{Event, Fence, Lock, LogQuery, Owner, Resource, Timestamp};
use crate::store::{
    Backend, Durability, FenceSource, GC_BATCH, GcReport, HistoryRow, SCHEMA_VERSION, event,
};

/// Attempts per operation when the server reports a serialization failure, a deadlock, or a
/// conflict with a racing writer.
const ATTEMPTS: usize = 5;

/// The connection, owned by the worker thread.
pub struct Session {
    pub(super) client: Client,
    /// `LISTEN` was sent on this connection.
    pub(super) listening: bool,
    /// The schema was found at [`SCHEMA_VERSION`] on this connection, or made so.
    pub(super) checked: bool,
    /// Opened for `status`, `list` or `log`: the schema is never created or upgraded.
    pub(super) read_only: bool,
    /// Opened for a command that may create the schema (`acquire`, `run`); the others find a
    /// database without one empty, and leave it so.
    pub(super) creates: bool,
    /// A read-only session found no distlock schema: it reads as an empty store.
    pub(super) absent: bool,
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

impl Session {
    /// A session on a new connection. The schema is checked by the first operation, in its
    /// first round trip.
    /// A session on `client`; `read_only` for the commands that only read, which never
    /// create or upgrade the schema.
    pub fn new(client: Client, read_only: bool, creates: bool) -> Session {
        Session {
            client,
            listening: false,
            checked: false,
            read_only,
            creates,
            absent: false,
        }
    }

    /// The state of a resource of a store without a distlock schema: nobody holds it.
    fn nothing() -> State {
        State {
            now: Timestamp::now(),
            leases: Vec::new(),
            queue: Vec::new(),
        }
    }

    /// Ends the open transaction, after an error or a refusal. A failure to roll back is not
    /// reported: the caller reports what went wrong first, and a broken connection rolls the
    /// transaction back on the server anyway.
    fn rollback(&mut self) {
        let _ = self.client.batch_execute("ROLLBACK");
    }
}

impl Backend for Session {
    fn transact<T>(
        &mut self,
        resource: &Resource,
        durability: Durability,
        decide: &mut dyn FnMut(&State, &mut FenceSource<'_>) -> Result<Decision<T>>,
    ) -> Result<T> {
        let durable = durability == Durability::Durable;
        let res = text(resource.as_str());
        let mut attempt = 0;
        let mut rechecked = false;
        loop {
            if self.absent {
                // No schema, and this command may not make one: it decides on an empty store,
                // and one that would write finds nothing to write to.
                let mut no_fence = || bail!("the database has no distlock schema");
                let decision = decide(&Session::nothing(), &mut no_fence)?;
                if !decision.changes.is_empty() {
                    bail!("the database has no distlock schema");
                }
                return Ok(decision.outcome);
            }
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
            if self.absent {
                return Ok(Session::nothing());
            }
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
        if self.absent {
            return Ok(Vec::new());
        }
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
        if self.absent {
            return Ok(Vec::new());
        }
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
        if self.absent {
            return Ok(GcReport::default());
        }
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
