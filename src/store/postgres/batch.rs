//! Batches: several statements sent as one simple-protocol query, one round trip, and the
//! text rows they return.

use anyhow::{Context, Result, anyhow, bail};
use postgres::{GenericClient, SimpleQueryMessage, SimpleQueryRow};

/// What one statement of a batch returned.
pub(super) struct Output {
    pub(super) rows: Vec<SimpleQueryRow>,
}

/// Sends `statements` as one simple-protocol query (one round trip) and returns what each
/// returned, in order. On an error the server skips the rest; inside `BEGIN` the transaction
/// is then aborted and must be rolled back.
pub(super) fn send(
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
pub(super) fn column(row: &SimpleQueryRow, i: usize) -> Result<Option<&str>> {
    row.try_get(i)
        .with_context(|| format!("the server's answer has no column {i}"))
}

/// Column `i` of a text row, as a number (`None` for `NULL`).
pub(super) fn number(row: &SimpleQueryRow, i: usize) -> Result<Option<i64>> {
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
pub(super) fn flag(row: &SimpleQueryRow, i: usize) -> Result<bool> {
    match required(column(row, i)?, i)? {
        "t" => Ok(true),
        "f" => Ok(false),
        value => bail!("the server answered {value:?} for a boolean"),
    }
}

/// Column `i` of a text row, which must not be `NULL`.
pub(super) fn required<T>(value: Option<T>, i: usize) -> Result<T> {
    value.ok_or_else(|| anyhow!("the server answered NULL in column {i}"))
}
