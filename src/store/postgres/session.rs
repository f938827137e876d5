//! distlock's tables on PostgreSQL, and the one write transaction every lock operation runs in.
//!
//! - **The server's clock decides.** "now" is read from the server (`clock_timestamp()`, to
//!   the millisecond) in the transaction that decides, after it holds the resource, never from
//!   this host, so a client whose clock is off still gets exactly its TTL.
//! - **No lock is held across a round trip.** An operation reads in one batch (an implicit
//!   transaction that ends with it, holding nothing afterwards), decides in this process, and
//!   writes in a second batch, `BEGIN; …; COMMIT` sent as one message, which the server runs to
//!   its end whatever this process does meanwhile: stopped, cut off or killed, it keeps no
//!   other client waiting for more than a statement's time. The write batch first locks each
//!   member's row in `distlock.resources` (`UNIQUE(resource)`), in the members' order, so two
//!   writers of one resource are serialised and two sets never deadlock. Then it checks that
//!   the decision still holds ([`unchanged_since`]): the member's rows are those read (a digest
//!   of them, read before them), nothing live at the read has expired since, and the read is
//!   recent. A member that changed aborts the whole batch and the operation starts over, a
//!   bounded number of times, as after a serialization failure or a deadlock.
//! - **Two round trips per operation**, one for a refusal. A process makes one or two calls,
//!   so what costs is the number of round trips, not parsing: the statements are sent as
//!   simple-protocol batches, their values as literals ([`text`]: escape strings, so their
//!   meaning does not depend on server settings). The schema version is read in the first
//!   batch too: only when it is not this build's, or the batch fails on a connection that has
//!   not seen the schema yet, is the schema checked, created or upgraded the careful way
//!   ([`Session::ensure_schema`]), and the operation tried again.
//! - **Statements for all members at once.** Each read is one statement over every member (a
//!   lock set's, or the union of a server's batch), and each kind of change one statement
//!   ([`super::writes`]): a server's batch of a hundred operations costs PostgreSQL a dozen
//!   statements to parse and plan, not several hundred.
//! - Fences come from the sequence `distlock.fence` (never cycles; values are never reused, even
//!   after a rollback or a crash). For each member that has no live tenure and no live waiter
//!   (an acquire is then granted a new tenure), the first batch takes a fence already, saving
//!   a round trip; unused, it is a gap, as after a rollback.
//! - The schema lives in its own `distlock` schema and is created on first use under a
//!   transaction-level advisory lock, so many processes starting at once create it exactly once.
//! - Session state: only `LISTEN` (waiters), and only in a waiting process. No prepared
//!   statements, no session-level advisory locks, no temporary tables.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use postgres::Client;

use super::batch::{Output, column, number, required, send};
use super::statements::{
    Retry, digests, fences_ahead, found, head, is_transient, lock_rows, still_listening, tenures,
    text, unchanged_since, waiters,
};
use super::writes::{notify, writes};
use crate::engine::{self, Change, State};
use crate::lock::{Event, Fence, GcReport, Lock, LogQuery, Owner, Place, Resource};
use crate::store::Result as Done;
use crate::store::backend::{decide_on_nothing, nothing};
use crate::store::op::Heard;
use crate::store::{Backend, DecideSet, Durability, Reads, SCHEMA_VERSION};

/// A connection of this process was found not to keep its `LISTEN` (see
/// [`Session::check_listening`]): no new connection listens either.
pub(super) static POOLED: AtomicBool = AtomicBool::new(false);

/// Attempts per operation when the server reports a serialization failure or a deadlock, or
/// when a member changed between the read and the write. Between attempts a writer backs off
/// for a random while that grows with each attempt ([`back_off`]), so that writers racing for
/// one resource spread out.
const ATTEMPTS: u32 = 30;

/// Sleeps between 0 and `attempt` milliseconds, at most 10.
fn back_off(attempt: u32) {
    // The first conflict is tried again at once: under contention it is the common case, and
    // the read it needs is one round trip.
    if attempt <= 1 {
        return;
    }
    let most = u64::from(attempt.min(10)) * 1_000;
    std::thread::sleep(Duration::from_micros(fastrand::u64(0..=most)));
}

/// Whether `changes` (each member's) only take or keep one owner's place in a queue.
fn own_place_only(changes: &[Vec<Change>]) -> bool {
    let mut owners = changes.iter().flatten().map(|change| match change {
        Change::Enqueue { owner, .. } | Change::Refresh { owner, .. } => Some(owner),
        _ => None,
    });
    match owners.next() {
        Some(Some(first)) => owners.all(|owner| owner == Some(first)),
        _ => false,
    }
}

/// The connection, owned by the worker thread.
pub struct Session {
    pub(super) client: Client,
    /// The server process (`pg_backend_pid()`) that ran this connection's `LISTEN`, while
    /// this connection counts on being woken.
    pub(super) listening: Option<i64>,
    /// The schema was found at [`SCHEMA_VERSION`] on this connection, or made so.
    pub(super) checked: bool,
    /// Opened for `status`, `list` or `log`: the schema is never created or upgraded.
    pub(super) read_only: bool,
    /// Opened for a command that may create the schema (`acquire`, `run`); the others find a
    /// database without one empty, and leave it so.
    pub(super) creates: bool,
    /// A read-only session found no distlock schema: it reads as an empty store.
    pub(super) absent: bool,
    /// Set while a write batch is on its way and its answer has not come: a connection lost
    /// then leaves the commit's outcome unknown. Shared with the store's handle, which reads it
    /// when a call times out.
    pub(super) committing: Arc<AtomicBool>,
    /// What to tell the waiter this connection serves, once ([`Backend::notice`]).
    pub(super) notice: Option<String>,
    /// When the last transaction's last attempt sent the read whose "now" its decision used
    /// (less a millisecond, as "now" is truncated): a lease it granted began no earlier, however
    /// long the call waited for the server before (see [`crate::store::op::Acquisition::decided`]).
    pub(super) attempted: Option<Instant>,
}

impl Session {
    /// A session on `client`; `read_only` for the commands that only read, which never
    /// create or upgrade the schema. The schema is checked by the first operation, in its
    /// first round trip.
    pub fn new(
        client: Client,
        read_only: bool,
        creates: bool,
        committing: Arc<AtomicBool>,
    ) -> Session {
        Session {
            client,
            listening: None,
            checked: false,
            read_only,
            creates,
            absent: false,
            committing,
            notice: None,
            attempted: None,
        }
    }

    /// After a read on a listening connection: if the server session that ran it is not the
    /// one that ran this connection's `LISTEN`, or no longer listens, the `LISTEN` stayed
    /// behind on another server connection — a pooler in transaction mode hands each
    /// transaction whichever server connection is free — so no release will wake this
    /// waiter. It says so once (a [`Backend::notice`] for the waiter), and from then on looks
    /// again after each pause instead (every 250 ms at most, see [`crate::wait`]). The server session is told apart by its process
    /// id, not only by whether it listens: a pooled server connection keeps the `LISTEN` of
    /// any earlier client that ran one there, and in a pool where every server connection has
    /// one, every read would seem to run where this waiter listens.
    fn check_listening(&mut self, heard: Option<&Output>) {
        let listens = heard
            .and_then(|output| output.rows.first())
            .is_none_or(|row| matches!(column(row, 0), Ok(Some("t"))));
        if !listens {
            self.listening = None;
            if !POOLED.swap(true, Ordering::Relaxed) {
                self.notice = Some(
                    "the PostgreSQL connection does not keep its LISTEN between transactions \
                     (a pooler in transaction mode, such as PgBouncer?): waiting by looking \
                     again every 250 ms instead of being woken"
                        .to_owned(),
                );
            }
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
    fn transact_set<T>(
        &mut self,
        resources: &[Resource],
        durability: Durability,
        reads: Reads<'_>,
        decide: &mut DecideSet<'_, T>,
    ) -> Done<T> {
        Ok(self.transact(resources, durability, reads, decide)?)
    }

    fn read(&mut self, resource: &Resource) -> Done<State> {
        Ok(self.read_state(resource)?)
    }

    fn subscribe(&mut self, _resources: &[Resource], _owner: &Owner) -> Done<()> {
        Ok(self.listen()?)
    }

    fn wait_for_change(&mut self, resources: &[Resource], timeout: Duration) -> Done<()> {
        Ok(self.wait_for_notification(resources, timeout)?)
    }

    fn broken(&self) -> bool {
        self.client.is_closed()
    }

    fn watch(&mut self, timeout: Duration) -> Done<Heard> {
        Ok(self.heard(timeout)?)
    }

    fn scan(&mut self, prefix: &str) -> Done<Vec<Lock>> {
        Ok(self.scan_rows(prefix)?)
    }

    fn places(&mut self, prefix: &str) -> Done<Vec<(Resource, Place)>> {
        Ok(self.place_rows(prefix)?)
    }

    fn history(&mut self, query: &LogQuery) -> Done<Vec<Event>> {
        Ok(self.history_rows(query)?)
    }

    fn prune(&mut self, keep_history: Duration) -> Done<GcReport> {
        Ok(self.prune_rows(keep_history)?)
    }

    fn notice(&mut self) -> Option<String> {
        self.notice.take()
    }
}

impl Session {
    /// One write transaction on the members of a set (see [`Backend::transact_set`]): its
    /// read, its decision and its write, with their retries, in one piece (ARCHITECTURE.md,
    /// "Functions of one screen", names it as the exception).
    #[allow(clippy::too_many_lines)]
    fn transact<T>(
        &mut self,
        resources: &[Resource],
        durability: Durability,
        reads: Reads<'_>,
        decide: &mut DecideSet<'_, T>,
    ) -> Result<T> {
        let durable = durability == Durability::Durable;
        let members: Vec<String> = resources.iter().map(|r| text(r.as_str())).collect();
        let owner = match reads {
            Reads::All => None,
            Reads::Owner(owner) => Some(text(owner.as_str())),
        };
        let owner = owner.as_deref();
        let mut attempt = 0;
        let mut rechecked = false;
        loop {
            if self.absent {
                // No schema, and this command may not make one: it decides on an empty store,
                // and one that would write finds nothing to write to.
                return decide_on_nothing(resources, decide, "the database has no distlock schema");
            }
            attempt += 1;
            // Round trip 1, the reads: one implicit transaction that ends with the batch, so
            // nothing is held while this process decides. The members' digests are read before
            // their rows: a change committed in between makes the write below start over.
            // Each read is one statement for every member, so that a server's batch of many
            // operations costs the server as few statements as one operation.
            let mut batch = vec![
                head(),
                fences_ahead(&members),
                digests(&members, owner),
                tenures(&members),
                waiters(&members),
            ];
            let listener = self.listening;
            if let Some(pid) = listener {
                batch.push(still_listening(pid));
            }
            self.attempted = Instant::now().checked_sub(Duration::from_millis(1));
            let outputs = match send(&mut self.client, &batch) {
                Ok(mut outputs) if outputs.len() == batch.len() => {
                    if listener.is_some() {
                        let heard = outputs.pop();
                        self.check_listening(heard.as_ref());
                    }
                    outputs
                }
                Ok(_) => bail!("the server answered a different number of statements"),
                Err(err) => {
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
            let [head, fences, digests, tenures, waiters] = &outputs[..] else {
                bail!("the server answered a different number of statements");
            };
            let read = found(resources, head, Some(digests), tenures, waiters)?;
            if read.version != Some(SCHEMA_VERSION) {
                if self.recheck(true, &mut rechecked)? {
                    attempt -= 1;
                    continue;
                }
                bail!(
                    "the schema version changed while this operation ran ({:?})",
                    read.version
                );
            }
            self.checked = true;

            let decision = {
                let client = &mut self.client;
                // Handed out in the order they were taken.
                let mut ahead: Vec<i64> = fences
                    .rows
                    .iter()
                    .map(|row| required(number(row, 0)?, 0))
                    .collect::<Result<_>>()?;
                ahead.reverse();
                let mut fresh = || -> Result<Fence> {
                    if let Some(fence) = ahead.pop() {
                        return Ok(Fence(fence));
                    }
                    let next = send(client, &["SELECT nextval('distlock.fence')".to_owned()])?;
                    let row = next
                        .first()
                        .and_then(|o| o.rows.first())
                        .ok_or_else(|| anyhow!("nextval returned no row"))?;
                    Ok(Fence(required(number(row, 0)?, 0)?))
                };
                decide(&read.states, &mut fresh)?
            };
            if !decision.writes() {
                // A refusal, or nothing to do: nothing was locked, nothing to give back.
                return Ok(decision.outcome);
            }

            // Round trip 2, the write: one message that the server runs to its end whatever
            // this process does meanwhile. It locks the members' rows in their order (so two
            // sets never deadlock), checks that each decision still holds, writes, wakes the
            // waiters, and commits; a member that changed since the read aborts it all, and
            // the operation starts over.
            let mut statements = vec!["BEGIN".to_owned()];
            if !(durable && decision.is_durable()) {
                // As on SQLite: a commit that need not survive power loss (a release, a place
                // in the queue) does not wait for the server's WAL flush, nor for a synchronous
                // standby; lost, the lock merely stays until its TTL runs out.
                statements.push("SET LOCAL synchronous_commit TO off".to_owned());
            }
            // A decision that only moves one waiter's own place in the queue (taking it,
            // keeping it alive) stays harmless when others changed the resource meanwhile: a
            // place taken behind a lock that was let go meanwhile is looked at again at once,
            // and admission is checked where it matters, at the grant. So it is not checked,
            // and waiters arriving under contention do not start over at every handoff.
            let checked = owner.is_some() || !own_place_only(&decision.changes);
            statements.push(lock_rows(&members));
            if checked {
                statements.push(unchanged_since(&members, owner, &read.digests, read.now.0));
            }
            statements.extend(writes(&members, &decision.changes));
            // Waiters hear of a change that may let them in when it commits (NOTIFY is
            // delivered on commit, and not at all on a rollback).
            let wake: Vec<String> = members
                .iter()
                .zip(&decision.changes)
                .filter(|(_, changes)| engine::wakes_waiters(changes))
                .map(|(member, _)| member.clone())
                .collect();
            if !wake.is_empty() {
                statements.push(notify(&wake));
            }
            statements.push("COMMIT".to_owned());
            // Only a change to a tenure makes an unknown outcome matter: a place in the queue,
            // taken twice, is the same place.
            let tenure_changes = decision.changes.iter().flatten().any(|change| {
                matches!(
                    change,
                    Change::Insert(_) | Change::Update(_) | Change::Delete { .. }
                )
            });
            self.committing.store(tenure_changes, Ordering::SeqCst);
            let committed = send(&mut self.client, &statements);
            // An error the server answered with stopped the batch before its COMMIT ended:
            // nothing was committed. Only a connection lost with no answer leaves it unknown.
            if !matches!(&committed, Err(err) if err.as_db_error().is_none()) {
                self.committing.store(false, Ordering::SeqCst);
            }
            match committed.map_err(Retry::from) {
                Ok(outputs) if outputs.len() == statements.len() => {
                    return Ok(decision.outcome);
                }
                Ok(_) => {
                    self.rollback();
                    bail!("the server answered a different number of statements");
                }
                Err(retry) => {
                    // The transaction is aborted, and its row locks were let go with it; the
                    // connection waits for the ROLLBACK.
                    self.rollback();
                    match retry {
                        Retry::Conflict if attempt < ATTEMPTS => back_off(attempt),
                        Retry::Server(err) if attempt < ATTEMPTS && is_transient(&err) => {
                            back_off(attempt);
                        }
                        Retry::Conflict => {
                            bail!(
                                "the lock rows of {} kept changing; gave up after \
                                 {ATTEMPTS} attempts",
                                resources[0]
                            )
                        }
                        Retry::Server(err) => return Err(err.into()),
                    }
                }
            }
        }
    }

    /// The resource's rows and the server's "now", without writing.
    fn read_state(&mut self, resource: &Resource) -> Result<State> {
        let members = [text(resource.as_str())];
        let mut rechecked = false;
        loop {
            if self.absent {
                return Ok(nothing());
            }
            // One implicit transaction; each statement sees what committed before it began.
            let reads = [head(), tenures(&members), waiters(&members)];
            let outputs = match send(&mut self.client, &reads) {
                Ok(outputs) if outputs.len() == reads.len() => outputs,
                Ok(_) => bail!("the server answered a different number of statements"),
                Err(err) => {
                    if self.recheck(false, &mut rechecked)? {
                        continue;
                    }
                    return Err(err.into());
                }
            };
            let [head, tenures, waiters] = &outputs[..] else {
                bail!("the server answered a different number of statements");
            };
            let found = found(std::slice::from_ref(resource), head, None, tenures, waiters)?;
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
            return found
                .states
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("the server answered no rows for {resource}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Owner, Timestamp};

    #[test]
    fn only_a_decision_that_takes_or_keeps_one_owners_place_goes_unchecked() {
        let o = |name: &str| Owner::parse(name).unwrap();
        let at = Timestamp(1);
        let enqueue = |name: &str| Change::Enqueue {
            owner: o(name),
            expires_at: at,
            asking: crate::engine::Asking {
                since: at,
                mode: crate::lock::Mode::Exclusive,
                members: Vec::new(),
            },
        };
        let refresh = |name: &str| Change::Refresh {
            owner: o(name),
            expires_at: at,
        };
        let cases: Vec<(Vec<Vec<Change>>, bool)> = vec![
            (vec![vec![enqueue("a")]], true),
            (vec![vec![refresh("a")]], true),
            (vec![vec![enqueue("a")], vec![refresh("a")]], true),
            (vec![vec![enqueue("a"), refresh("b")]], false),
            (vec![vec![Change::Dequeue { owner: o("a") }]], false),
            (
                vec![vec![
                    enqueue("a"),
                    Change::Delete {
                        fence: crate::lock::Fence(1),
                    },
                ]],
                false,
            ),
            (vec![vec![]], false),
        ];
        for (changes, unchecked) in cases {
            assert_eq!(own_place_only(&changes), unchecked, "{changes:?}");
        }
    }
}
