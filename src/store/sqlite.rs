//! The embedded store: one SQLite file on one host.
//!
//! - WAL mode with `synchronous=FULL`, so a committed acquire survives power loss and a fence is
//!   never handed out twice; a busy database is waited on for [`connection::BUSY_TIMEOUT`].
//! - Every write runs in one `BEGIN IMMEDIATE` transaction: the write lock is taken before the
//!   resource's rows are read and decided on, so no other process can slip in between the read
//!   and the write; `resources` keeps `UNIQUE(resource)`. An acquire or renewal first decides
//!   on a read snapshot, and takes the write lock only if that decision writes: a refusal
//!   (busy, not found) is as true of a snapshot, and a waiter that is not first then does not
//!   queue for the lock.
//! - Places in the queue of waiters are written without an fsync: lost to a power failure, a
//!   place is taken again at the waiter's next attempt.
//! - Fences come from a store-wide counter (`fence_counter`), not from the lock row, so deleting
//!   rows (release, `gc`) can never make a fence repeat.
//! - Times are milliseconds since the Unix epoch, from the injected [`crate::store::Clock`].
//! - The schema version lives in `PRAGMA user_version`; a newer one is refused. Before anything
//!   else is done to a file, whatever its version, its tables are checked to be those of a
//!   distlock schema ([`recognise`](schema::recognise)): a SQLite file of another application
//!   is refused as it is, byte for byte, with no WAL switch and no `-wal`/`-shm` left behind.
//! - The read-only commands open the file read-only ([`SqliteStore::open_read_only`], and
//!   `reader` for how a user who may only read the files reads it): no schema work, no WAL
//!   switch, nothing created. They read an older schema as it is ([`Columns`]).
//! - Every SQLite failure is reported with the database's path and its cause in words
//!   ([`errors`]).
//!
//! This file holds the [`Backend`] operations, each one transaction decided by
//! [`crate::engine`]. The rest is split by concern:
//!
//! - [`connection`]: [`SqliteStore`] itself, the connection and what it knows of its file, and
//!   the busy handler;
//! - [`open`]: opening a file to write (creating it if need be), only if it exists, or
//!   read-only; each connection's settings, and the wait through another process's WAL
//!   recovery;
//! - [`schema`]: each version's DDL (the `.sql` files beside it), the upgrade, and the check
//!   that a file holds a distlock schema;
//! - [`wal`]: the WAL's bound and restart, unsynced commits, the folder sync;
//! - [`rows`]: the SQL statements, a resource's rows read into tenures and waiters, the core's
//!   changes written in order, the queries of `status`, `list`, `log` and `gc`;
//! - [`reader`]: how the read-only commands reach the file, creating nothing;
//! - [`turnstile`]: the turnstile whose futexes wake the first waiter (Linux; elsewhere waiters
//!   poll);
//! - [`errors`]: SQLite's failures in words a person can act on.

mod columns;
mod connection;
mod errors;
mod open;
mod reader;
mod rows;
mod schema;
pub(super) mod turnstile;
mod wal;

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use rusqlite::{Connection, Transaction, TransactionBehavior};

use super::op::Heard;
use super::{Backend, DecideSet, Durability, Error, Reads};
use crate::engine::{self, State};
use crate::lock::GcReport;
use crate::lock::{Event, Fence, Lock, LogQuery, Owner, Place, Resource, Timestamp};
use columns::Columns;
pub use connection::SqliteStore;

use open::identity;
use rows::{apply, next_fence, state};

/// The states of `resources`, in their order, as of `now`.
fn states(
    conn: &Connection,
    shape: Columns,
    resources: &[Resource],
    now: Timestamp,
) -> Result<Vec<State>> {
    resources
        .iter()
        .map(|resource| state(conn, shape, resource, now))
        .collect()
}
use errors::{Doing, worded};

impl SqliteStore {
    /// One operation on the members of a set: a durable one (acquire, renew) decides on a read
    /// snapshot first, and only if that writes, again under the write lock, then writes (a
    /// waiter just rung goes to the write lock at once). `durable: false` (a release, a waiter
    /// leaving) decides under the write lock at once and commits without an fsync; so does a
    /// decision that only moves places in the queue, which need not survive power loss. The
    /// one write lock covers the whole store, so a set is as atomic as a single resource.
    fn decide_and_apply<T>(
        &mut self,
        resources: &[Resource],
        durable: bool,
        decide: &mut DecideSet<'_, T>,
    ) -> super::Result<T> {
        let now = self.clock.now();
        // Look before taking the write lock: a decision that writes nothing (busy, not found,
        // forbidden) is as true of a consistent read snapshot as of the locked state. So a
        // waiter that is still not first learns it without queueing for the write lock, which
        // would delay the one that is; and the look tells whether the commit needs an fsync.
        // A release or a waiter leaving nearly always writes and never needs one: no look. Nor
        // does a waiter just rung, the head of the queue, which will most likely be granted.
        let rung = std::mem::take(&mut self.rung);
        let needs_sync = if durable && !rung {
            let shape = self.shape;
            let snapshot = self.conn.transaction()?;
            let states = states(&snapshot, shape, resources, now)?;
            // A new tenure's fence is only handed out under the write lock.
            let mut not_yet = || Ok(Fence(0));
            let decision = decide(&states, &mut not_yet)?;
            if !decision.writes() {
                return Ok(decision.outcome);
            }
            decision.is_durable()
        } else {
            durable
        };
        // The safety level cannot change inside a transaction: it is set for this one from
        // the look above, and if the locked state asks for more, the transaction starts over.
        let outcome = if needs_sync {
            self.write(resources, now, false, decide)
        } else {
            self.unsynced(|store| store.write(resources, now, durable, decide))?
        };
        match outcome? {
            Some(outcome) => Ok(outcome),
            // Unsynced, but the locked state needed a durable change after all.
            None => Ok(self
                .write(resources, now, false, decide)?
                .context("the decision changed twice")?),
        }
    }

    /// Decides under the write lock and writes. `None` when `refuse_durable` is set and the
    /// decision has a change that must survive power loss (nothing is written then).
    fn write<T>(
        &mut self,
        resources: &[Resource],
        now: Timestamp,
        refuse_durable: bool,
        decide: &mut DecideSet<'_, T>,
    ) -> super::Result<Option<T>> {
        let shape = self.shape;
        let tx = self.write_tx()?;
        let states = states(&tx, shape, resources, now)?;
        let mut fresh = || Ok(Fence(next_fence(&tx)?));
        let decision = decide(&states, &mut fresh)?;
        if !decision.writes() {
            // A refusal after all: dropping the transaction rolls it back.
            return Ok(Some(decision.outcome));
        }
        if refuse_durable && decision.is_durable() {
            return Ok(None);
        }
        let members = resources.iter().zip(&states).zip(&decision.changes);
        for ((resource, _), changes) in members.clone() {
            apply(&tx, resource, changes)?;
        }
        tx.commit()?;
        self.queue_behind = false;
        for ((resource, state), changes) in members {
            self.queue_behind |= engine::head_after(state, changes).is_some();
            if let Some(head) = engine::next_to_wake(state, changes) {
                self.ring(resource, head);
            }
        }
        Ok(Some(decision.outcome))
    }

    fn write_tx(&mut self) -> super::Result<Transaction<'_>> {
        // A connection held open (by `run`) keeps writing to its file even after the file is
        // deleted or replaced, while a new store appears at the path: refuse, so that `run`
        // stops its command before the lease could be doubled. A path that surely names
        // nothing any more is a store that vanished, and its locks with it: `run` stops at
        // once. Any other difference is a store failure, retried on a new connection.
        if identity(&self.path) != self.identity {
            if matches!(self.path.try_exists(), Ok(false)) {
                return Err(Error::Vanished(self.path.clone()));
            }
            return Err(anyhow!(
                "the database {} was removed or replaced while in use",
                self.path.display()
            )
            .into());
        }
        Ok(self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?)
    }

    /// Wakes `head`, the first waiter in `resource`'s queue, on its slot for the resource and
    /// on its slot for any resource, where it waits when it waits for a lock set (a waiter
    /// sleeps on one slot; a set waiter may be woken by any member), and a server's watcher,
    /// which wakes its own waiters. Best effort: if the turnstile cannot be opened, the head
    /// finds out at its next poll.
    fn ring(&mut self, resource: &Resource, head: &Owner) {
        if self.turnstile.is_none() {
            // Nobody waits without having created it.
            self.turnstile = turnstile::Turnstile::open(&self.path, false);
        }
        if let Some(turnstile) = &self.turnstile {
            turnstile.ring(turnstile::slot(resource.as_str(), head.as_str()));
            turnstile.ring(turnstile::any_slot(head.as_str()));
            turnstile.ring(turnstile::watch_slot());
        }
    }
}

impl Backend for SqliteStore {
    fn transact_set<T>(
        &mut self,
        resources: &[Resource],
        durability: Durability,
        _reads: Reads<'_>,
        decide: &mut DecideSet<'_, T>,
    ) -> super::Result<T> {
        let durable = durability == Durability::Durable;
        let done = self.decide_and_apply(resources, durable, decide);
        done.map_err(|err| err.reworded(|err| worded(&self.path, Doing::Write, err)))
    }

    fn subscribe(&mut self, resources: &[Resource], owner: &Owner) -> super::Result<()> {
        self.prepare_grant();
        if self.turnstile.is_none() {
            self.turnstile = turnstile::Turnstile::open(&self.path, true);
        }
        // A set waiter is rung on its slot for any resource (see `ring`).
        let slot = match resources {
            [resource] => turnstile::slot(resource.as_str(), owner.as_str()),
            _ => turnstile::any_slot(owner.as_str()),
        };
        self.waiting_on = self
            .turnstile
            .as_ref()
            .and_then(|turnstile| turnstile.read(slot))
            .map(|seen| (slot, seen));
        if self.waiting_on.is_none() {
            // Cut short already, or no turnstile here: poll.
            self.turnstile = None;
        }
        Ok(())
    }

    fn tidy(&mut self) {
        self.bound_wal();
    }

    /// A server's watcher: sleeps on the turnstile's watch counter, which every ring rings
    /// too, then reads every counter to say which moved since its last call.
    fn watch(&mut self, timeout: Duration) -> super::Result<Heard> {
        if self.turnstile.is_none() {
            self.turnstile = turnstile::Turnstile::open(&self.path, true);
        }
        let seen = self.watched.take();
        let Some(turnstile) = &self.turnstile else {
            std::thread::sleep(timeout);
            return Ok(Heard::Anything);
        };
        let Some(before) = seen.or_else(|| turnstile.read_all()) else {
            self.turnstile = None;
            std::thread::sleep(timeout);
            return Ok(Heard::Anything);
        };
        let watch = turnstile::watch_slot();
        let _ = turnstile.wait(watch, before[watch], timeout);
        let Some(after) = turnstile.read_all() else {
            // The file was cut short under the mapping: start over at the next call.
            self.turnstile = None;
            return Ok(Heard::Anything);
        };
        let rung: Vec<usize> = (before.iter().zip(&after).enumerate())
            .filter(|(slot, (was, is))| was != is && *slot != watch)
            .map(|(slot, _)| slot)
            .collect();
        self.watched = Some(after);
        Ok(if rung.is_empty() {
            Heard::Nothing
        } else {
            Heard::Rung(rung)
        })
    }

    fn wait_for_change(&mut self, _resources: &[Resource], timeout: Duration) -> super::Result<()> {
        if let (Some(turnstile), Some((slot, seen))) = (&self.turnstile, &mut self.waiting_on) {
            let woken = turnstile.wait(*slot, *seen, timeout);
            // Read before the caller's next look, so that a ring during it is not missed.
            if let (Some(rung), Some(now)) = (woken, turnstile.read(*slot)) {
                self.rung = rung;
                *seen = now;
                return Ok(());
            }
            // The file was cut short under the mapping: poll from now on.
            self.turnstile = None;
            self.waiting_on = None;
            if woken.is_some() {
                return Ok(());
            }
        }
        std::thread::sleep(timeout);
        Ok(())
    }

    fn read(&mut self, resource: &Resource) -> super::Result<State> {
        let read = self.look(|store| store.state_now(resource));
        read.map_err(|err| worded(&self.path, Doing::Read, err).into())
    }

    fn scan(&mut self, prefix: &str) -> super::Result<Vec<Lock>> {
        let scanned = self.look(|store| store.scan_rows(prefix));
        scanned.map_err(|err| worded(&self.path, Doing::Read, err).into())
    }

    fn places(&mut self, prefix: &str) -> super::Result<Vec<(Resource, Place)>> {
        let places = self.look(|store| store.place_rows(prefix));
        places.map_err(|err| worded(&self.path, Doing::Read, err).into())
    }

    fn history(&mut self, query: &LogQuery) -> super::Result<Vec<Event>> {
        let events = self.look(|store| store.history_rows(query));
        events.map_err(|err| worded(&self.path, Doing::Read, err).into())
    }

    fn prune(&mut self, keep_history: Duration) -> super::Result<GcReport> {
        let report = self.prune_rows(keep_history);
        report.map_err(|err| worded(&self.path, Doing::Write, err).into())
    }
}

#[cfg(test)]
mod tests;
