//! The statements that write a decision's changes: one statement per kind of change, not per
//! change, so that a server's batch of many operations costs the server a few statements to
//! parse and plan, not a few per operation.
//!
//! Each member's changes keep their order: the `k`-th change of every member is written in
//! "layer" `k`, after every change of layer `k - 1`. Within a layer each member has at most one
//! change, so the changes of one statement touch different resources, and their order does not
//! matter. The waiters' tickets come from one sequence for every resource (the order of two
//! set waiters must be the same on every member they share, see `crate::engine::sets`): two
//! places taken on one resource are in different layers, in their order, so a waiter that came
//! first in the batch has the lower ticket on each of its members.
//!
//! A write that the decision counted on must happen: a statement that updates or deletes rows
//! fails with `division_by_zero` (read as a conflict: the operation starts over, and nothing
//! of the batch is committed) unless it found a row for each of its members.

use super::statements::{CHANNEL, array, at_ms, number_or_null, text, text_or_null};
use crate::engine::Change;
use crate::lock::{Owner, Remark, TokenName};
use crate::store::columns::{members_column, mode_columns};

/// The kinds of change, in the order a layer writes them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Delete,
    Dequeue,
    Update,
    Refresh,
    Insert,
    Enqueue,
    Record,
}

fn kind(change: &Change) -> Kind {
    match change {
        Change::Delete { .. } => Kind::Delete,
        Change::Dequeue { .. } => Kind::Dequeue,
        Change::Update(_) => Kind::Update,
        Change::Refresh { .. } => Kind::Refresh,
        Change::Insert(_) => Kind::Insert,
        Change::Enqueue { .. } => Kind::Enqueue,
        Change::Record(_) => Kind::Record,
    }
}

/// The statements that write `changes` (each member's, in the order of `members`, which are
/// literals), layer by layer.
pub(super) fn writes(members: &[String], changes: &[Vec<Change>]) -> Vec<String> {
    let depth = changes.iter().map(Vec::len).max().unwrap_or(0);
    let mut statements = Vec::new();
    for layer in 0..depth {
        let mut found: Vec<(Kind, (String, Option<String>))> = members
            .iter()
            .zip(changes)
            .filter_map(|(member, changes)| {
                let change = changes.get(layer)?;
                Some((kind(change), row(member, change)))
            })
            .collect();
        // Stable: a kind's changes stay in the members' order.
        found.sort_by_key(|(kind, _)| *kind);
        for group in found.chunk_by(|a, b| a.0 == b.0) {
            statements.extend(statements_for(group));
        }
    }
    statements
}

/// `SELECT pg_notify` on [`CHANNEL`] for each of `members` (literals): waiters hear of a change
/// that may let them in when it commits (and not at all on a rollback).
pub(super) fn notify(members: &[String]) -> String {
    format!(
        "SELECT pg_notify({}, r) FROM unnest({}) AS r",
        text(CHANNEL),
        array(members)
    )
}

/// A change as rows of `VALUES`: the row of its statement, and for a new tenure the row that
/// raises its resource's highest fence.
fn row(member: &str, change: &Change) -> (String, Option<String>) {
    let row = match change {
        Change::Insert(lease) => {
            let (mode, lim) = mode_columns(lease.mode);
            let raise = format!("({member}, {}::bigint)", lease.fence.0);
            let row = format!(
                "({member}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                text(lease.owner.as_str()),
                lease.fence.0,
                at_ms(lease.acquired_at.0),
                at_ms(lease.expires_at.0),
                text(mode),
                number_or_null(lim),
                text_or_null(lease.note.as_ref().map(Remark::as_str)),
                lease.guarded,
                text(lease.owner.token_column()),
            );
            return (row, Some(raise));
        }
        Change::Update(lease) => format!(
            "({member}, {}::bigint, {}, {}, {}::text)",
            lease.fence.0,
            at_ms(lease.acquired_at.0),
            at_ms(lease.expires_at.0),
            text_or_null(lease.note.as_ref().map(Remark::as_str)),
        ),
        Change::Delete { fence } => format!("({member}, {}::bigint)", fence.0),
        Change::Enqueue {
            owner,
            expires_at,
            asking,
        } => {
            let (mode, lim) = mode_columns(asking.mode);
            format!(
                "({member}, {}, {}, {}, {}, {}, {}, {})",
                text(owner.as_str()),
                text(owner.token_column()),
                at_ms(expires_at.0),
                at_ms(asking.since.0),
                text(mode),
                number_or_null(lim),
                text_or_null(members_column(&asking.members).as_deref()),
            )
        }
        Change::Refresh { owner, expires_at } => format!(
            "({member}, {}, {}, {})",
            text(owner.as_str()),
            text(owner.token_column()),
            at_ms(expires_at.0)
        ),
        Change::Dequeue { owner } => format!(
            "({member}, {}, {})",
            text(owner.as_str()),
            text(owner.token_column())
        ),
        Change::Record(record) => {
            let (mode, lim) = mode_columns(record.mode);
            format!(
                "({}, {member}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
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
    };
    (row, None)
}

/// The statements of one kind of change, for `rows` of that kind (see [`row`]), each on another
/// member.
fn statements_for(rows: &[(Kind, (String, Option<String>))]) -> Vec<String> {
    let Some(&(kind, _)) = rows.first() else {
        return Vec::new();
    };
    let values = rows
        .iter()
        .map(|(_, (row, _))| row.as_str())
        .collect::<Vec<_>>()
        .join(",\n ");
    let n = rows.len();
    match kind {
        Kind::Insert => {
            let raised = rows
                .iter()
                .filter_map(|(_, (_, raise))| raise.as_deref())
                .collect::<Vec<_>>()
                .join(",\n ");
            vec![
                // Under the row lock: each resource's highest fence raised to its new
                // tenure's. A resource that has had a fence as high already fails it all: a
                // fence is taken before the decision is written, and if another tenure of the
                // resource came and went meanwhile, its rows are the same again but its fence
                // is higher, and granting the older one would make fences go backwards.
                every_row(
                    n,
                    &format!(
                        "UPDATE distlock.resources t SET fence = v.fence, \
                                                      granted_at = clock_timestamp() \
                         FROM (VALUES {raised}) AS v(resource, fence) \
                         WHERE t.resource = v.resource AND t.fence < v.fence"
                    ),
                ),
                format!(
                    "INSERT INTO distlock.locks
                         (resource, owner, fence, acquired_at, expires_at, mode, lim, note,
                          guarded, token)
                     VALUES {values}"
                ),
            ]
        }
        Kind::Update => vec![every_row(
            n,
            &format!(
                "UPDATE distlock.locks t SET acquired_at = v.acquired_at, \
                                             expires_at = v.expires_at, note = v.note \
                 FROM (VALUES {values}) AS v(resource, fence, acquired_at, expires_at, note) \
                 WHERE t.resource = v.resource AND t.fence = v.fence"
            ),
        )],
        Kind::Delete => vec![every_row(
            n,
            &format!(
                "DELETE FROM distlock.locks t WHERE (t.resource, t.fence) IN (VALUES {values})"
            ),
        )],
        Kind::Enqueue => vec![format!(
            "INSERT INTO distlock.waiters
                 (resource, owner, token, expires_at, since, mode, lim, members)
             VALUES {values}"
        )],
        Kind::Refresh => vec![every_row(
            n,
            &format!(
                "UPDATE distlock.waiters t SET expires_at = v.expires_at \
                 FROM (VALUES {values}) AS v(resource, owner, token, expires_at) \
                 WHERE t.resource = v.resource AND t.owner = v.owner AND t.token = v.token"
            ),
        )],
        Kind::Dequeue => vec![every_row(
            n,
            &format!(
                "DELETE FROM distlock.waiters t \
                 WHERE (t.resource, t.owner, t.token) IN (VALUES {values})"
            ),
        )],
        Kind::Record => vec![format!(
            "INSERT INTO distlock.history (at, resource, owner, fence, event,
                 previous_owner, mode, lim, note, operator, reason, token, by_token,
                 expires_at)
             VALUES {values}"
        )],
    }
}

/// `sql`, an `UPDATE` or `DELETE` meant to find a row on each of `n` resources, made to fail
/// with `division_by_zero` (read as a conflict) when it finds rows on fewer: a write that the
/// decision counted on must happen, or the `COMMIT` sent in the same batch must not run.
fn every_row(n: usize, sql: &str) -> String {
    format!(
        "WITH w AS ({sql} RETURNING t.resource) \
         SELECT 1 / (count(DISTINCT resource) = {n})::integer FROM w"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Asking, Tenure};
    use crate::lock::{Fence, Mode, Timestamp};

    fn owner(name: &str) -> Owner {
        Owner::parse(name).unwrap()
    }

    fn tenure(name: &str, fence: i64) -> Tenure {
        Tenure {
            owner: owner(name),
            fence: Fence(fence),
            acquired_at: Timestamp(1),
            expires_at: Timestamp(2),
            mode: Mode::Exclusive,
            note: None,
            guarded: false,
        }
    }

    fn enqueue(name: &str) -> Change {
        Change::Enqueue {
            owner: owner(name),
            expires_at: Timestamp(2),
            asking: Asking {
                since: Timestamp(1),
                mode: Mode::Exclusive,
                members: Vec::new(),
            },
        }
    }

    /// A statement in short: what it does to which table, and the members it names, in order.
    fn shape(statement: &str) -> String {
        let words: Vec<&str> = statement.split_whitespace().collect();
        let verb = words
            .iter()
            .map(|w| w.trim_start_matches('('))
            .find(|w| ["INSERT", "UPDATE", "DELETE"].contains(w))
            .unwrap_or("?");
        let table = words
            .iter()
            .find(|w| w.starts_with("distlock."))
            .map_or("?", |w| w.trim_start_matches("distlock."));
        let what = format!("{verb} {table}");
        let mut named: Vec<(usize, char)> = ['a', 'b', 'c']
            .iter()
            .flat_map(|&m| {
                let literal = format!("('{m}'");
                statement
                    .match_indices(&literal)
                    .map(|(at, _)| (at, m))
                    .collect::<Vec<_>>()
            })
            .collect();
        named.sort_unstable();
        let named: String = named.into_iter().map(|(_, m)| m).collect();
        format!("{what} {named}")
    }

    #[test]
    fn each_kind_of_change_of_a_layer_is_one_statement_and_each_members_order_is_kept() {
        let members: Vec<String> = ["a", "b", "c"].iter().map(|m| text(m)).collect();
        let cases: Vec<(Vec<Vec<Change>>, Vec<&str>)> = vec![
            // Three grants: one fence raise and one insert for all three.
            (
                vec![
                    vec![Change::Insert(tenure("x", 5))],
                    vec![Change::Insert(tenure("y", 6))],
                    vec![Change::Insert(tenure("z", 7))],
                ],
                vec!["UPDATE resources abc", "INSERT locks abc"],
            ),
            // A release on a, a grant on b, nothing on c.
            (
                vec![
                    vec![Change::Delete { fence: Fence(1) }],
                    vec![Change::Insert(tenure("y", 6))],
                    vec![],
                ],
                vec!["DELETE locks a", "UPDATE resources b", "INSERT locks b"],
            ),
            // A handoff on a (the holder's tenure goes, the head of the queue comes in and
            // leaves the queue), a renewal on b, a place kept on c: a's changes in their
            // order, each layer's kinds together.
            (
                vec![
                    vec![
                        Change::Delete { fence: Fence(1) },
                        Change::Insert(tenure("w", 9)),
                        Change::Dequeue { owner: owner("w") },
                    ],
                    vec![Change::Update(tenure("y", 6))],
                    vec![Change::Refresh {
                        owner: owner("v"),
                        expires_at: Timestamp(3),
                    }],
                ],
                vec![
                    "DELETE locks a",
                    "UPDATE locks b",
                    "UPDATE waiters c",
                    "UPDATE resources a",
                    "INSERT locks a",
                    "DELETE waiters a",
                ],
            ),
            // Two set waiters in one batch, on a and c: the first's places in the first
            // layer, the second's in the next, so its tickets are the higher on both.
            (
                vec![
                    vec![enqueue("s1"), enqueue("s2")],
                    vec![],
                    vec![enqueue("s1"), enqueue("s2")],
                ],
                vec!["INSERT waiters ac", "INSERT waiters ac"],
            ),
            (vec![vec![], vec![], vec![]], vec![]),
        ];
        for (changes, expected) in cases {
            let shapes: Vec<String> = writes(&members, &changes)
                .iter()
                .map(|s| shape(s))
                .collect();
            assert_eq!(shapes, expected, "{changes:?}");
        }
    }

    #[test]
    fn a_write_that_must_find_its_rows_counts_them() {
        let members: Vec<String> = ["a", "b"].iter().map(|m| text(m)).collect();
        let changes = vec![
            vec![Change::Delete { fence: Fence(1) }],
            vec![Change::Delete { fence: Fence(2) }],
        ];
        let statements = writes(&members, &changes);
        assert_eq!(statements.len(), 1);
        assert!(
            statements[0].contains("count(DISTINCT resource) = 2"),
            "{}",
            statements[0]
        );
        assert_eq!(
            notify(&members),
            "SELECT pg_notify('distlock', r) FROM unnest(ARRAY['a', 'b']::text[]) AS r"
        );
    }
}
