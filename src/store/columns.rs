//! What both stores write and read back the same way: a history row, a lock's mode as two
//! columns, a place in the queue as `GET /queues` shows it, and the words for a store written
//! by a newer distlock.

use crate::lock::{
    Breaking, Event, EventKind, Fence, Mode, Owner, Place, Remark, Resource, Timestamp, TokenName,
};

use super::SCHEMA_VERSION;

/// A history row as both stores read it back.
pub(super) struct HistoryRow<'a> {
    pub(super) at: Timestamp,
    pub(super) resource: &'a str,
    pub(super) owner: &'a str,
    /// The token column (empty: none).
    pub(super) token: &'a str,
    pub(super) fence: Fence,
    pub(super) kind: &'a str,
    pub(super) previous_owner: Option<&'a str>,
    pub(super) mode: &'a str,
    pub(super) lim: Option<i64>,
    pub(super) note: Option<&'a str>,
    /// Who broke the tenure, and why (`broken` events).
    pub(super) by: Option<&'a str>,
    pub(super) reason: Option<&'a str>,
    /// The operator's token that broke it through a server (`broken` events; NULL: none).
    pub(super) by_token: Option<&'a str>,
    /// The end of the lease the event left (NULL: none, or not recorded).
    pub(super) expires_at: Option<i64>,
}

/// # Errors
///
/// An event kind or mode this build does not know (the store was written by something else).
pub(super) fn event(row: &HistoryRow<'_>) -> anyhow::Result<Event> {
    let Some(kind) = EventKind::parse(row.kind) else {
        anyhow::bail!("the history holds an unknown event kind {:?}", row.kind);
    };
    let owner = Owner::from_store(row.owner, row.token);
    Ok(Event {
        at: row.at,
        resource: Resource::from_store(row.resource),
        token: owner.token().cloned(),
        owner,
        fence: row.fence,
        event: kind,
        expires_at: row.expires_at.map(Timestamp),
        previous_owner: row.previous_owner.map(|name| Owner::from_store(name, "")),
        mode: mode_of(row.mode, row.lim)?,
        note: row.note.map(Remark::from_store),
        broken: row.by.zip(row.reason).map(|(by, reason)| Breaking {
            by: Remark::from_store(by),
            by_token: row.by_token.map(TokenName::from_store),
            reason: Remark::from_store(reason),
        }),
    })
}

/// A place in the queue as both stores read it back for `GET /queues`.
pub(super) struct PlaceRow<'a> {
    pub(super) resource: &'a str,
    pub(super) owner: &'a str,
    /// The token column (empty: none).
    pub(super) token: &'a str,
    /// When it was taken, in ms (NULL: not recorded).
    pub(super) since: Option<i64>,
    pub(super) mode: &'a str,
    pub(super) lim: Option<i64>,
    /// [`members_column`]'s text (NULL: one resource).
    pub(super) members: Option<&'a str>,
}

/// # Errors
///
/// A mode this build does not know, or members that are not the JSON array
/// [`members_column`] writes.
pub(super) fn place(row: &PlaceRow<'_>) -> anyhow::Result<(Resource, Place)> {
    let owner = Owner::from_store(row.owner, row.token);
    let members = match row.members {
        Some(text) => serde_json::from_str::<Vec<String>>(text)?
            .iter()
            .map(|member| Resource::from_store(member))
            .collect(),
        None => Vec::new(),
    };
    Ok((
        Resource::from_store(row.resource),
        Place {
            token: owner.token().cloned(),
            owner,
            since: row.since.map(Timestamp),
            mode: mode_of(row.mode, row.lim)?,
            members,
        },
    ))
}

/// How both stores write a waiting set's members: a JSON array of names; NULL for one
/// resource.
pub(super) fn members_column(members: &[Resource]) -> Option<String> {
    if members.is_empty() {
        return None;
    }
    let names: Vec<&str> = members.iter().map(Resource::as_str).collect();
    serde_json::to_string(&names).ok()
}

/// How both stores write a mode: a name, and a semaphore's N.
pub(super) fn mode_columns(mode: Mode) -> (&'static str, Option<i64>) {
    match mode {
        Mode::Exclusive => ("exclusive", None),
        Mode::Shared => ("shared", None),
        Mode::Semaphore(n) => ("semaphore", Some(i64::from(n))),
    }
}

/// Reads back what [`mode_columns`] wrote.
///
/// # Errors
///
/// A mode this build does not know.
pub(super) fn mode_of(name: &str, lim: Option<i64>) -> anyhow::Result<Mode> {
    match (name, lim.map(u32::try_from)) {
        ("exclusive", _) => Ok(Mode::Exclusive),
        ("shared", _) => Ok(Mode::Shared),
        ("semaphore", Some(Ok(n))) if n >= 2 => Ok(Mode::Semaphore(n)),
        _ => anyhow::bail!("the store holds an unknown lock mode {name:?} ({lim:?})"),
    }
}

/// The message for a store written by a newer distlock, the same on every backend.
pub(super) fn newer_schema(version: i64) -> String {
    format!(
        "it was written by a newer distlock (schema version {version}; this one understands up \
         to {SCHEMA_VERSION}): upgrade distlock"
    )
}
