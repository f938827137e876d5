//! distlock's tables on PostgreSQL: the DDL of each version, and the careful check that
//! creates, upgrades or refuses a schema once, whatever the number of processes starting at
//! once.

use anyhow::{Context, Result, bail};
use postgres::GenericClient;

use super::batch::{column, number, send};
use super::session::Session;
use crate::store::SCHEMA_VERSION;
use crate::store::columns::newer_schema;

/// An arbitrary, fixed advisory-lock key that serializes schema creation.
pub(super) const SCHEMA_LOCK_KEY: i64 = 0x6469_7374_6c6f_636b;

/// Version 1, as distlock 0.1.0 created it. A new database is created at version 1 and
/// upgraded like any old one, so the upgrade path is the one every new store takes.
pub(super) const SCHEMA_V1: &str = "
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
pub(super) const UPGRADE_V2: &str = "
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
pub(super) const UPGRADE_V3: &str = "
ALTER TABLE distlock.locks
    ADD COLUMN guarded boolean NOT NULL DEFAULT false;  -- taken by run
UPDATE distlock.meta SET schema_version = 3;
";

/// Version 3 → 4: a tenure, a place in the queue and a history event record the token of
/// `distlock serve --tokens` that proved their owner (empty: none, as for every row already
/// there), and one owner name may wait once per token. (Columns with a constant default: the
/// server adds them without rewriting the tables.)
pub(super) const UPGRADE_V4: &str = "
ALTER TABLE distlock.locks
    ADD COLUMN token text NOT NULL DEFAULT '';          -- the server token that took it
ALTER TABLE distlock.history
    ADD COLUMN token text NOT NULL DEFAULT '';
ALTER TABLE distlock.waiters
    ADD COLUMN token text NOT NULL DEFAULT '',          -- '': no token
    DROP CONSTRAINT waiters_resource_owner_key,
    ADD UNIQUE (resource, owner, token);
UPDATE distlock.meta SET schema_version = 4;
";

/// Version 4 → 5: a `broken` event records the operator's token that broke the tenure through
/// `distlock serve --tokens` (NULL: none, as for every row already there), beside the free-text
/// `by` the caller gave. And a resource's row keeps the highest fence any tenure of it was
/// granted, and when: a grant raises it under the row's lock, and one whose fence is not
/// higher starts over, so that no fence taken before another tenure came and went can be
/// granted after it (the rows a late decision read may be the same again: none). `gc` keeps a
/// row whose fence was raised lately, for a decision that may still be written. An event
/// records the end of the lease it left, and a place in the queue since when it waits, in
/// which mode, and a set's members, for those who look (`GET /queues`, the dashboard). (Columns
/// without a default, or with a constant one: the server adds them without rewriting the
/// tables.)
pub(super) const UPGRADE_V5: &str = "
ALTER TABLE distlock.history
    ADD COLUMN by_token text;                           -- the operator's token that broke it
ALTER TABLE distlock.resources
    ADD COLUMN fence bigint NOT NULL DEFAULT 0,         -- the highest fence granted on it
    ADD COLUMN granted_at timestamptz NOT NULL DEFAULT '-infinity'; -- when it was raised
UPDATE distlock.resources r SET fence = m.fence
    FROM (SELECT resource, max(fence) AS fence FROM distlock.locks GROUP BY resource) m
    WHERE m.resource = r.resource;
ALTER TABLE distlock.history
    ADD COLUMN expires_at timestamptz;                  -- the end of the lease the event left
ALTER TABLE distlock.waiters
    ADD COLUMN since timestamptz,                       -- when the place was taken
    ADD COLUMN mode text NOT NULL DEFAULT 'exclusive',  -- what it waits for
    ADD COLUMN lim integer,
    ADD COLUMN members text;                            -- a set's members, a JSON array
UPDATE distlock.meta SET schema_version = 5;
";

impl Session {
    /// Checks the schema version the careful way, and creates or upgrades the schema if it is
    /// missing or older.
    ///
    /// # Errors
    ///
    /// A newer schema, or a failed statement.
    pub(super) fn ensure_schema(&mut self) -> Result<()> {
        let version = schema_version(&mut self.client)?;
        if version > SCHEMA_VERSION {
            bail!(newer_schema(version));
        }
        if (self.read_only || !self.creates) && version == 0 {
            // Nothing to read: an empty store, and nothing is created.
            self.absent = true;
            self.checked = true;
            return Ok(());
        }
        if self.read_only && version < SCHEMA_VERSION {
            bail!(
                "it was written by an older distlock (schema version {version}); a command that \
                 writes (acquire, release, renew, break, gc) upgrades it"
            );
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
            if version < 4 {
                tx.batch_execute(UPGRADE_V4)
                    .context("cannot upgrade the distlock schema to version 4")?;
            }
            if version < 5 {
                tx.batch_execute(UPGRADE_V5)
                    .context("cannot upgrade the distlock schema to version 5")?;
            }
            tx.commit()?;
        }
        self.checked = true;
        Ok(())
    }

    /// [`Session::ensure_schema`], once per connection: for the queries that do not read the
    /// version themselves (`list`, `log`, `gc`).
    pub(super) fn ensure_checked(&mut self) -> Result<()> {
        if self.checked {
            Ok(())
        } else {
            self.ensure_schema()
        }
    }

    /// What to do after the first batch failed, or found another schema version: check the
    /// schema the careful way (creating or upgrading it, refusing a newer one) and try again,
    /// once per operation. `Ok(false)`: the schema was fine, the failure is real.
    pub(super) fn recheck(&mut self, version_seen: bool, rechecked: &mut bool) -> Result<bool> {
        if *rechecked || (self.checked && !version_seen) {
            return Ok(false);
        }
        *rechecked = true;
        self.ensure_schema()?;
        Ok(true)
    }
}

/// The schema version, 0 when there is no distlock schema yet.
pub(super) fn schema_version(client: &mut impl GenericClient) -> Result<i64> {
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
