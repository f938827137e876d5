//! The statements every operation sends, built as text with their values as literals.

use std::collections::HashMap;
use std::fmt::Display;

use anyhow::{Result, anyhow, bail};
use postgres::error::SqlState;
use postgres::{Row, SimpleQueryRow};
use postgres_protocol::escape::escape_literal;

use super::batch::{Output, column, flag, number, required};
use crate::engine::{State, Tenure, Waiter};
use crate::lock::{Fence, Owner, Remark, Resource, Timestamp};
use crate::store::SCHEMA_VERSION;
use crate::store::columns::mode_of;

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

/// The first millisecond past the last that [`at_ms`] writes as a literal: the year 10000.
const LITERAL_END_MS: u64 = 253_402_300_800_000;

/// A time from the core, in milliseconds since the epoch, as a `timestamptz`: an RFC 3339
/// literal in UTC, which the server turns into a constant as it parses the statement (an
/// expression would cost it an operator lookup and a folding, per time, per row of a batch);
/// outside the years 1970 to 9999, the same instant as an expression.
pub(super) fn at_ms(ms: i64) -> String {
    match u64::try_from(ms) {
        Ok(since_epoch) if since_epoch < LITERAL_END_MS => {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(since_epoch);
            format!("'{}'::timestamptz", humantime::format_rfc3339_millis(at))
        }
        _ => format!("('epoch'::timestamptz + ({ms})::bigint * interval '1 ms')"),
    }
}

/// `members` (literals) as an SQL array of text.
pub(super) fn array(members: &[String]) -> String {
    format!("ARRAY[{}]::text[]", members.join(", "))
}

/// Locks the rows of `members` (literals, sorted) in `distlock.resources` (`UNIQUE(resource)`)
/// until the transaction ends, in their order, creating those that are missing. `DO UPDATE …
/// WHERE false` locks an existing row as an update would (so it also serialises with distlock
/// versions that rewrite the row) but leaves it as it is: a busy resource leaves no dead row
/// versions behind, and the statement writes no row to the WAL.
pub(super) fn lock_rows(members: &[String]) -> String {
    format!(
        "INSERT INTO distlock.resources (resource) \
         SELECT m.resource FROM unnest({}) WITH ORDINALITY AS m(resource, i) ORDER BY m.i \
         ON CONFLICT (resource) DO UPDATE SET resource = EXCLUDED.resource WHERE false",
        array(members)
    )
}

/// The server's now in milliseconds since the epoch (as times are printed), and the schema
/// version.
pub(super) fn head() -> String {
    "SELECT (extract(epoch FROM date_trunc('milliseconds', clock_timestamp())) * 1000)::bigint, \
            (SELECT schema_version FROM distlock.meta)"
        .to_owned()
}

/// Fences taken ahead: one for each of `members` (literals) that has no live tenure and no live
/// waiter, where an acquire would be granted a new tenure, so that a grant (of one resource, of
/// a set, or the grants of a server's batch) takes the same two round trips as a refusal. A
/// fence taken and not used is a gap, which fences may have. Never takes a fence from a schema
/// this build does not know.
pub(super) fn fences_ahead(members: &[String]) -> String {
    format!(
        "SELECT nextval('distlock.fence') FROM unnest({}) AS m(resource)
         WHERE (SELECT schema_version FROM distlock.meta) = {SCHEMA_VERSION}
           AND NOT EXISTS (SELECT FROM distlock.locks l
                           WHERE l.resource = m.resource AND l.expires_at > clock_timestamp())
           AND NOT EXISTS (SELECT FROM distlock.waiters w
                           WHERE w.resource = m.resource AND w.expires_at > clock_timestamp())",
        array(members)
    )
}

/// A digest of the rows each member's decision reads, in the order of `members` (literals):
/// its tenure rows and its queue, each row whole — all of them, or only `owner`'s (a literal;
/// see [`crate::store::Reads`]). Read before the rows themselves, it is compared under the row
/// lock when the decision is written ([`unchanged_since`]).
pub(super) fn digests(members: &[String], owner: Option<&str>) -> String {
    format!(
        "SELECT {} FROM unnest({}) WITH ORDINALITY AS m(resource, i) ORDER BY m.i",
        digest("m.resource", owner),
        array(members)
    )
}

/// The condition that narrows a resource's rows to `owner`'s, or nothing.
fn whose(owner: Option<&str>) -> String {
    owner.map_or_else(String::new, |owner| format!(" AND owner = {owner}"))
}

/// The digest of the rows of `resource`, an SQL expression.
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

/// Under the row locks of [`lock_rows`]: fails with `division_by_zero` (read as a conflict)
/// unless the decision that the read of `members` (literals) at `read_at` (ms) led to still
/// holds — the rows it read of each member (all, or `owner`'s) are as they were (`digests`,
/// from [`digests`], in the members' order), none of them has expired since (nothing the
/// decision counted as live has stopped being so), and the read is not older than
/// [`DECISION_LIFETIME_MS`].
pub(super) fn unchanged_since(
    members: &[String],
    owner: Option<&str>,
    digests: &[String],
    read_at: i64,
) -> String {
    let read = at_ms(read_at);
    let whose = whose(owner);
    let expired = |table: &str| {
        format!(
            "NOT EXISTS (SELECT FROM distlock.{table} x WHERE x.resource = c.resource{whose} \
             AND x.expires_at > {read} AND x.expires_at <= clock_timestamp())"
        )
    };
    let read_rows: Vec<String> = members
        .iter()
        .zip(digests)
        .map(|(member, digest)| format!("({member}, {})", text(digest)))
        .collect();
    format!(
        "SELECT 1 / coalesce(bool_and({} = c.digest AND {} AND {}) \
                             AND clock_timestamp() < {read} + interval '{DECISION_LIFETIME_MS} ms', \
                             false)::integer \
         FROM (VALUES {}) AS c(resource, digest)",
        digest("c.resource", owner),
        expired("locks"),
        expired("waiters"),
        read_rows.join(", "),
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

/// The tenure rows of `members` (literals): [`LEASE_COLUMNS`], then the resource.
pub(super) fn tenures(members: &[String]) -> String {
    format!(
        "SELECT {LEASE_COLUMNS}, resource FROM distlock.locks WHERE resource = ANY({})",
        array(members)
    )
}

/// The queue rows of `members` (literals): owner, ticket, expiry, token, then the resource.
pub(super) fn waiters(members: &[String]) -> String {
    format!(
        "SELECT owner, ticket, (extract(epoch FROM expires_at) * 1000)::bigint, token, resource \
         FROM distlock.waiters WHERE resource = ANY({})",
        array(members)
    )
}

/// What the reads of a transaction found: each member's state and digest, the server's now, and
/// the schema version.
pub(super) struct Found {
    pub(super) states: Vec<State>,
    pub(super) digests: Vec<String>,
    pub(super) now: Timestamp,
    pub(super) version: Option<i64>,
}

/// Reads what [`head`], [`digests`] (for the reads of a write), [`tenures`] and [`waiters`] of
/// `resources` returned.
pub(super) fn found(
    resources: &[Resource],
    head: &Output,
    digests: Option<&Output>,
    tenures: &Output,
    waiters: &Output,
) -> Result<Found> {
    let first = head
        .rows
        .first()
        .ok_or_else(|| anyhow!("the server's clock query returned no row"))?;
    let now = Timestamp(required(number(first, 0)?, 0)?);
    let at: HashMap<&str, usize> = resources
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    let member = |name: Option<&str>| -> Result<usize> {
        let name = required(name, 0)?;
        at.get(name).copied().ok_or_else(|| {
            anyhow!("the server answered a row of {name:?}, which was not asked for")
        })
    };
    let mut states: Vec<State> = resources
        .iter()
        .map(|_| State {
            now,
            leases: Vec::new(),
            queue: Vec::new(),
        })
        .collect();
    for row in &tenures.rows {
        states[member(column(row, 9)?)?].leases.push(lease(row)?);
    }
    for row in &waiters.rows {
        states[member(column(row, 4)?)?].queue.push(Waiter {
            owner: Owner::from_store(required(column(row, 0)?, 0)?, required(column(row, 3)?, 3)?),
            ticket: required(number(row, 1)?, 1)?,
            expires_at: Timestamp(required(number(row, 2)?, 2)?),
        });
    }
    let digests = match digests {
        None => Vec::new(),
        Some(output) => {
            if output.rows.len() != resources.len() {
                bail!(
                    "the server's digest query returned {} rows",
                    output.rows.len()
                );
            }
            output
                .rows
                .iter()
                .map(|row| Ok(required(column(row, 0)?, 0)?.to_owned()))
                .collect::<Result<_>>()?
        }
    };
    Ok(Found {
        states,
        digests,
        now,
        version: number(first, 1)?,
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

/// Why a transaction must start over.
pub(super) enum Retry {
    Conflict,
    Server(postgres::Error),
}

impl From<postgres::Error> for Retry {
    fn from(err: postgres::Error) -> Retry {
        // A racing insert, or a row that a write expected and no longer found (see
        // [`super::writes`]), or a decision that no longer holds
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
        // (ms since the epoch, the literal): UTC, to the millisecond.
        let literals = [
            (0, "'1970-01-01T00:00:00.000Z'::timestamptz"),
            (1_796_088_942_123, "'2026-12-01T01:35:42.123Z'::timestamptz"),
            (
                253_402_300_799_999,
                "'9999-12-31T23:59:59.999Z'::timestamptz",
            ),
            (
                253_402_300_800_000,
                "('epoch'::timestamptz + (253402300800000)::bigint * interval '1 ms')",
            ),
            (
                i64::MAX,
                "('epoch'::timestamptz + (9223372036854775807)::bigint * interval '1 ms')",
            ),
        ];
        for (ms, literal) in literals {
            assert_eq!(at_ms(ms), literal, "{ms}");
        }
    }
}
