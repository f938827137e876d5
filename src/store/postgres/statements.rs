//! The statements every operation sends, built as text with their values as literals.

use std::fmt::Display;

use anyhow::{Result, anyhow, bail};
use postgres::error::SqlState;
use postgres::{Row, SimpleQueryRow};
use postgres_protocol::escape::escape_literal;

use super::batch::{Output, column, flag, number, one_row, required};
use crate::engine::{Change, State, Tenure, Waiter};
use crate::lock::{Fence, Owner, Remark, Timestamp, TokenName};
use crate::store::SCHEMA_VERSION;
use crate::store::columns::{members_column, mode_columns, mode_of};

/// The lease columns, times as milliseconds since the epoch, in the order [`lease`] reads them.
pub(super) const LEASE_COLUMNS: &str = "owner, fence, (extract(epoch FROM acquired_at) * 1000)::bigint, \
                             (extract(epoch FROM expires_at) * 1000)::bigint, mode, lim, note, \
                             guarded, token";

/// The channel on which commits that may let a waiter in are announced; the payload is the
/// resource.
pub(super) const CHANNEL: &str = "distlock";

/// `value` as an SQL string literal, escaped as libpq's `PQescapeLiteral` does
/// ([`escape_literal`]: quotes doubled, and an escape string `E'…'` with doubled backslashes
/// when it holds any, so it reads the same whatever the server's
/// `standard_conforming_strings`). The connection's encoding is UTF-8 (the driver sets
/// `client_encoding`), and a NUL cannot be sent at all (the driver refuses the query).
pub(super) fn text(value: &str) -> String {
    escape_literal(value)
}

/// [`text`], or `NULL`.
pub(super) fn text_or_null(value: Option<&str>) -> String {
    value.map_or_else(|| "NULL".to_owned(), text)
}

/// A number, or `NULL`.
pub(super) fn number_or_null(value: Option<impl Display>) -> String {
    value.map_or_else(|| "NULL".to_owned(), |n| n.to_string())
}

/// A time from the core, in milliseconds since the epoch, as a `timestamptz`.
pub(super) fn at_ms(ms: i64) -> String {
    format!("('epoch'::timestamptz + ({ms})::bigint * interval '1 ms')")
}

/// Locks `resource`'s row until the transaction ends, creating it if needed. `DO UPDATE …
/// WHERE false` locks an existing row as an update would (so it also serialises with distlock
/// versions that rewrite the row) but leaves it as it is: a busy resource leaves no dead row
/// versions behind, and the statement writes no row to the WAL.
pub(super) fn lock_row(resource: &str) -> String {
    format!(
        "INSERT INTO distlock.resources (resource) VALUES ({resource}) \
         ON CONFLICT (resource) DO UPDATE SET resource = EXCLUDED.resource WHERE false"
    )
}

/// Under the row lock of [`lock_row`]: raises `resource`'s highest fence to `fence`, the fence
/// of a tenure this transaction inserts, or fails with `division_by_zero` (read as a conflict:
/// the operation starts over) when the resource has had a fence as high already. A fence is
/// taken before the decision is written (in its read, or while deciding); if another tenure
/// of the resource came and went meanwhile, the rows read are the same again, but its fence
/// is higher, and granting the older one would make fences go backwards.
pub(super) fn raise_fence(resource: &str, fence: Fence) -> String {
    let fence = fence.0;
    format!(
        "WITH raised AS (UPDATE distlock.resources SET fence = {fence}, \
                                granted_at = clock_timestamp() \
                         WHERE resource = {resource} AND fence < {fence} RETURNING 1) \
         SELECT 1 / count(*)::integer FROM raised"
    )
}

/// The server's now in milliseconds since the epoch (as times are printed), the schema
/// version, and — with `fence` — the next fence when the resource has no live tenure and no
/// live waiter, else `NULL`. Never takes a fence from a schema this build does not know.
pub(super) fn head(resource: &str, fence: bool) -> String {
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

/// Fences taken ahead for a lock set's grant: one per member, when none of `members` (literals)
/// has a live tenure or waiter, so that a set is granted in the same two round trips as one
/// resource; none otherwise. A fence taken and not used is a gap, which fences may have.
pub(super) fn fences_ahead(members: &[String]) -> String {
    let listed = members.join(", ");
    format!(
        "SELECT nextval('distlock.fence') FROM generate_series(1, {count})
         WHERE (SELECT schema_version FROM distlock.meta) = {SCHEMA_VERSION}
           AND NOT EXISTS (SELECT FROM distlock.locks
                           WHERE resource IN ({listed}) AND expires_at > clock_timestamp())
           AND NOT EXISTS (SELECT FROM distlock.waiters
                           WHERE resource IN ({listed}) AND expires_at > clock_timestamp())",
        count = members.len()
    )
}

/// A digest of the rows `resource`'s decision reads: its tenure rows and its queue, each row
/// whole — all of them, or only `owner`'s (a literal; see [`crate::store::Reads`]). Read before
/// the rows themselves, it is compared under the row lock when the decision is written
/// ([`unchanged_since`]).
pub(super) fn fingerprint(resource: &str, owner: Option<&str>) -> String {
    format!("SELECT {}", digest(resource, owner))
}

/// The condition that narrows a resource's rows to `owner`'s, or nothing.
fn whose(owner: Option<&str>) -> String {
    owner.map_or_else(String::new, |owner| format!(" AND owner = {owner}"))
}

fn digest(resource: &str, owner: Option<&str>) -> String {
    let whose = whose(owner);
    format!(
        "md5(coalesce((SELECT string_agg(l::text, ';' ORDER BY l.fence) FROM distlock.locks l \
                       WHERE l.resource = {resource}{whose}), '') || '|' || \
             coalesce((SELECT string_agg(w::text, ';' ORDER BY w.ticket) FROM distlock.waiters w \
                       WHERE w.resource = {resource}{whose}), ''))"
    )
}

/// How long a decision may take from its read to its write: past this the write is refused and
/// the operation starts over from a new read, so that no write carries times read long ago
/// (from a client that was stopped or cut off in between).
pub(super) const DECISION_LIFETIME_MS: i64 = 2_000;

/// Under the row lock of [`lock_row`]: fails with `division_by_zero` (read as a conflict) unless
/// the decision that `resource`'s read at `read_at` (ms) led to still holds — the rows it read
/// (all, or `owner`'s) are as they were (`digest`, from [`fingerprint`]), none of them has
/// expired since (nothing the decision counted as live has stopped being so), and the read is
/// not older than [`DECISION_LIFETIME_MS`].
pub(super) fn unchanged_since(
    resource: &str,
    owner: Option<&str>,
    digest_read: &str,
    read_at: i64,
) -> String {
    let read = at_ms(read_at);
    let whose = whose(owner);
    let expired = |table: &str| {
        format!(
            "NOT EXISTS (SELECT FROM distlock.{table} WHERE resource = {resource}{whose} \
             AND expires_at > {read} AND expires_at <= clock_timestamp())"
        )
    };
    format!(
        "SELECT 1 / ({} = {} AND {} AND {} \
                     AND clock_timestamp() < {read} + interval '{DECISION_LIFETIME_MS} ms')::integer",
        digest(resource, owner),
        text(digest_read),
        expired("locks"),
        expired("waiters"),
    )
}

/// Whether the server session that runs it is server process `pid` (the one that ran a
/// waiter's `LISTEN`) and listens on [`CHANNEL`].
pub(super) fn still_listening(pid: i64) -> String {
    format!(
        "SELECT pg_backend_pid() = {pid} \
         AND EXISTS (SELECT FROM pg_listening_channels() c WHERE c = {})",
        text(CHANNEL)
    )
}

pub(super) fn tenures(resource: &str) -> String {
    format!("SELECT {LEASE_COLUMNS} FROM distlock.locks WHERE resource = {resource}")
}

pub(super) fn waiters(resource: &str) -> String {
    format!(
        "SELECT owner, ticket, (extract(epoch FROM expires_at) * 1000)::bigint, token \
         FROM distlock.waiters WHERE resource = {resource}"
    )
}

/// What the reads of a batch found: each member's state and digest, the server's now, the
/// schema version, and a fence taken ahead.
pub(super) struct Found {
    pub(super) states: Vec<State>,
    pub(super) digests: Vec<String>,
    pub(super) now: Timestamp,
    pub(super) version: Option<i64>,
    pub(super) fence: Option<i64>,
}

/// Reads the outputs of a batch of reads: [`head`], then for each member [`fingerprint`] (when
/// `digested`: the reads of a write), [`tenures`] and [`waiters`].
pub(super) fn found(outputs: &[Output], digested: bool) -> Result<Found> {
    let (head, members) = outputs
        .split_first()
        .ok_or_else(|| anyhow!("the server answered no statement"))?;
    let first = head
        .rows
        .first()
        .ok_or_else(|| anyhow!("the server's clock query returned no row"))?;
    let now = Timestamp(required(number(first, 0)?, 0)?);
    let mut states = Vec::with_capacity(members.len() / 3);
    let mut digests = Vec::with_capacity(members.len() / 3);
    for member in members.chunks(if digested { 3 } else { 2 }) {
        let (digest, tenures, waiters) = match member {
            [digest, tenures, waiters] if digested => (Some(digest), tenures, waiters),
            [tenures, waiters] if !digested => (None, tenures, waiters),
            _ => bail!("the server answered a different number of statements"),
        };
        if let Some(digest) = digest {
            let digest = digest
                .rows
                .first()
                .ok_or_else(|| anyhow!("the server's digest query returned no row"))?;
            digests.push(required(column(digest, 0)?, 0)?.to_owned());
        }
        let leases = tenures.rows.iter().map(lease).collect::<Result<_>>()?;
        let queue = waiters
            .rows
            .iter()
            .map(|r| {
                Ok(Waiter {
                    owner: Owner::from_store(
                        required(column(r, 0)?, 0)?,
                        required(column(r, 3)?, 3)?,
                    ),
                    ticket: required(number(r, 1)?, 1)?,
                    expires_at: Timestamp(required(number(r, 2)?, 2)?),
                })
            })
            .collect::<Result<_>>()?;
        states.push(State { now, leases, queue });
    }
    Ok(Found {
        states,
        digests,
        now,
        version: number(first, 1)?,
        fence: number(first, 2)?,
    })
}

/// Reads [`LEASE_COLUMNS`] from a text row.
pub(super) fn lease(row: &SimpleQueryRow) -> Result<Tenure> {
    Ok(Tenure {
        owner: Owner::from_store(required(column(row, 0)?, 0)?, required(column(row, 8)?, 8)?),
        fence: Fence(required(number(row, 1)?, 1)?),
        acquired_at: Timestamp(required(number(row, 2)?, 2)?),
        expires_at: Timestamp(required(number(row, 3)?, 3)?),
        mode: mode_of(required(column(row, 4)?, 4)?, number(row, 5)?)?,
        note: column(row, 6)?.map(Remark::from_store),
        guarded: flag(row, 7)?,
    })
}

/// Reads [`LEASE_COLUMNS`] from the binary row of `list`, starting at column `first`.
pub(super) fn binary_lease(row: &Row, first: usize) -> Result<Tenure> {
    Ok(Tenure {
        owner: Owner::from_store(row.get(first), row.get(first + 8)),
        fence: Fence(row.get(first + 1)),
        acquired_at: Timestamp(row.get(first + 2)),
        expires_at: Timestamp(row.get(first + 3)),
        mode: mode_of(
            row.get(first + 4),
            row.get::<_, Option<i32>>(first + 5).map(i64::from),
        )?,
        note: row
            .get::<_, Option<&str>>(first + 6)
            .map(Remark::from_store),
        guarded: row.get(first + 7),
    })
}

/// The statement that writes `change` to `resource` (already a literal).
pub(super) fn write(resource: &str, change: &Change) -> String {
    match change {
        Change::Insert(lease) => {
            let (mode, lim) = mode_columns(lease.mode);
            format!(
                "INSERT INTO distlock.locks
                     (resource, owner, fence, acquired_at, expires_at, mode, lim, note, guarded,
                      token)
                 VALUES ({resource}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                text(lease.owner.as_str()),
                lease.fence.0,
                at_ms(lease.acquired_at.0),
                at_ms(lease.expires_at.0),
                text(mode),
                number_or_null(lim),
                text_or_null(lease.note.as_ref().map(Remark::as_str)),
                lease.guarded,
                text(lease.owner.token_column()),
            )
        }
        Change::Update(lease) => one_row(&format!(
            "UPDATE distlock.locks SET acquired_at = {}, expires_at = {}, note = {}
             WHERE resource = {resource} AND fence = {}",
            at_ms(lease.acquired_at.0),
            at_ms(lease.expires_at.0),
            text_or_null(lease.note.as_ref().map(Remark::as_str)),
            lease.fence.0,
        )),
        Change::Delete { fence } => one_row(&format!(
            "DELETE FROM distlock.locks WHERE resource = {resource} AND fence = {}",
            fence.0
        )),
        Change::Enqueue {
            owner,
            expires_at,
            asking,
        } => {
            let (mode, lim) = mode_columns(asking.mode);
            format!(
                "INSERT INTO distlock.waiters
                     (resource, owner, token, expires_at, since, mode, lim, members)
                 VALUES ({resource}, {}, {}, {}, {}, {}, {}, {})",
                text(owner.as_str()),
                text(owner.token_column()),
                at_ms(expires_at.0),
                at_ms(asking.since.0),
                text(mode),
                number_or_null(lim),
                text_or_null(members_column(&asking.members).as_deref()),
            )
        }
        Change::Refresh { owner, expires_at } => one_row(&format!(
            "UPDATE distlock.waiters SET expires_at = {}
             WHERE resource = {resource} AND owner = {} AND token = {}",
            at_ms(expires_at.0),
            text(owner.as_str()),
            text(owner.token_column()),
        )),
        Change::Dequeue { owner } => one_row(&format!(
            "DELETE FROM distlock.waiters WHERE resource = {resource} AND owner = {} AND token = {}",
            text(owner.as_str()),
            text(owner.token_column()),
        )),
        Change::Record(record) => {
            let (mode, lim) = mode_columns(record.mode);
            format!(
                "INSERT INTO distlock.history (at, resource, owner, fence, event,
                     previous_owner, mode, lim, note, operator, reason, token, by_token,
                     expires_at)
                 VALUES ({}, {resource}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                at_ms(record.at.0),
                text(record.owner.as_str()),
                record.fence.0,
                text(record.event.as_str()),
                text_or_null(record.previous_owner.as_ref().map(Owner::as_str)),
                text(mode),
                number_or_null(lim),
                text_or_null(record.note.as_ref().map(Remark::as_str)),
                text_or_null(record.broken.as_ref().map(|b| b.by.as_str())),
                text_or_null(record.broken.as_ref().map(|b| b.reason.as_str())),
                text(record.owner.token_column()),
                text_or_null(
                    record
                        .broken
                        .as_ref()
                        .and_then(|b| b.by_token.as_ref())
                        .map(TokenName::as_str)
                ),
                record
                    .expires_at
                    .map_or_else(|| "NULL".to_owned(), |at| at_ms(at.0)),
            )
        }
    }
}

/// Why a transaction must start over.
pub(super) enum Retry {
    Conflict,
    Server(postgres::Error),
}

impl From<postgres::Error> for Retry {
    fn from(err: postgres::Error) -> Retry {
        // A racing insert, or a row that a write expected and no longer found (see
        // [`super::batch::one_row`]), or a decision that no longer holds
        // ([`unchanged_since`]).
        if err.code() == Some(&SqlState::UNIQUE_VIOLATION)
            || err.code() == Some(&SqlState::DIVISION_BY_ZERO)
        {
            Retry::Conflict
        } else {
            Retry::Server(err)
        }
    }
}

pub(super) fn is_transient(err: &postgres::Error) -> bool {
    matches!(
        err.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_libpqs_escaped_strings() {
        // (value, literal): quotes doubled; with a backslash, an escape string whose
        // backslashes are doubled too, so it reads the same whatever
        // standard_conforming_strings says.
        let cases = [
            ("", "''"),
            ("x", "'x'"),
            ("it's", "'it''s'"),
            (
                "'; DROP TABLE distlock.locks; --",
                "'''; DROP TABLE distlock.locks; --'",
            ),
            (r"a\b", r" E'a\\b'"),
            (r"it's a \ test", r" E'it''s a \\ test'"),
            (r"\'", r" E'\\'''"),
            ("zürich-東京-🔒", "'zürich-東京-🔒'"),
        ];
        for (value, literal) in cases {
            assert_eq!(text(value), literal, "{value:?}");
        }
        assert_eq!(text_or_null(None), "NULL");
        assert_eq!(text_or_null(Some("x")), "'x'");
        assert_eq!(number_or_null(None::<i64>), "NULL");
        assert_eq!(number_or_null(Some(-3)), "-3");
        assert_eq!(
            at_ms(-5),
            "('epoch'::timestamptz + (-5)::bigint * interval '1 ms')"
        );
    }
}
