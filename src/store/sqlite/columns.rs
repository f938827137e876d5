//! The columns a connection reads a store's rows with: this build's, or an older schema
//! version's, read as it is ([`Columns`]).

/// The lease columns, in the order `rows::lease` reads them.
const LEASE_COLUMNS: &str =
    "owner, fence, acquired_at, expires_at, mode, lim, note, guarded, token";

/// A history row's columns, in the order `SqliteStore::history_rows` reads them.
const HISTORY_COLUMNS: &str = "at, resource, owner, fence, event, previous_owner, mode, lim, \
                               note, operator, reason, token, by_token, expires_at";

/// What a schema version has, so that a read-only command reads a store as it is, without
/// upgrading it: a column a version lacks reads as the value its upgrade gives it. Version 1
/// (before lock modes) has exclusive tenures without notes, history rows of exclusive locks
/// nobody broke, and no queue; version 2 (before guarded tenures) has tenures that may all be
/// joined; version 3 (before tokens) has rows no token proved; version 4 (before `by_token`)
/// has breaks no operator's token is recorded for, events without their lease's end, and places
/// in the queue that do not say since when or what for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Columns {
    /// [`LEASE_COLUMNS`], or what stands for them.
    pub(super) lease: &'static str,
    /// [`HISTORY_COLUMNS`], or what stands for them.
    pub(super) history: &'static str,
    /// The columns of a place in the queue (`waiters`, from version 2), or `None`.
    pub(super) queue: Option<&'static str>,
    /// The columns of a place as `GET /queues` shows it, or `None`.
    pub(super) places: Option<&'static str>,
}

impl Columns {
    /// The schema this build writes: every writing connection's, once it is upgraded.
    pub(super) const CURRENT: Columns = Columns {
        lease: LEASE_COLUMNS,
        history: HISTORY_COLUMNS,
        queue: Some(WAITER_COLUMNS),
        places: Some(PLACE_COLUMNS),
    };

    /// The columns of schema `version`, one that [`recognise`](super::schema::recognise) found.
    pub(super) fn of(version: i64) -> Columns {
        match version {
            1 => Columns {
                lease: "owner, fence, acquired_at, expires_at, 'exclusive', NULL, NULL, 0, ''",
                history: "at, resource, owner, fence, event, previous_owner,
                          'exclusive', NULL, NULL, NULL, NULL, '', NULL, NULL",
                queue: None,
                places: None,
            },
            2 => Columns {
                lease: "owner, fence, acquired_at, expires_at, mode, lim, note, 0, ''",
                ..Columns::of(3)
            },
            3 => Columns {
                lease: "owner, fence, acquired_at, expires_at, mode, lim, note, guarded, ''",
                history: "at, resource, owner, fence, event, previous_owner, mode, lim, note,
                          operator, reason, '', NULL, NULL",
                queue: Some("owner, ticket, expires_at, ''"),
                places: Some("resource, owner, '', ticket, NULL, 'exclusive', NULL, NULL"),
            },
            4 => Columns {
                history: "at, resource, owner, fence, event, previous_owner, mode, lim, note,
                          operator, reason, token, NULL, NULL",
                places: Some("resource, owner, token, ticket, NULL, 'exclusive', NULL, NULL"),
                ..Columns::CURRENT
            },
            _ => Columns::CURRENT,
        }
    }
}

/// A place in the queue's columns, in the order `rows::state` reads them.
const WAITER_COLUMNS: &str = "owner, ticket, expires_at, token";

/// A place as `GET /queues` shows it, in the order `SqliteStore::place_rows` reads them.
const PLACE_COLUMNS: &str = "resource, owner, token, ticket, since, mode, lim, members";
