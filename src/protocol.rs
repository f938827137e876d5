//! The HTTP API of `distlock serve`, written once for both of its sides: the server
//! (`crate::serve`), its client (the store of `--db http(s)://…`) and the load generator
//! (`benches/serve_load/`) all take from here, so that no two of them can disagree about a
//! path, a header, a limit or a field.
//!
//! - [`Route`]s: what a method on a path asks for, and the method and path a client sends
//!   (`routes`); a lock operation has one route for a single resource (`/locks/{r}…`) and one
//!   for a lock set (`/sets…`), told apart by a [`Target`];
//! - the request bodies as types ([`AcquireRequest`], [`RenewRequest`], [`ReleaseRequest`],
//!   [`BreakRequest`], [`LeaveRequest`]): a client serializes them, the server reads them back
//!   strictly (`body`, [`Fields`]: unknown fields and keys given twice refused, each field checked as its
//!   command-line flag is), and the queries of `list`, `queues` and `log` (`query`, `reads`);
//! - the headers every answer or grant carries, and the limits every request keeps.
//!
//! The answers are not here: each is the command's own type in [`crate::answer`], which the
//! server sends and the client reads back. The rules a request is held to are
//! docs/src/reference/server.md ("Requests", "Bad input", "Limits") and the HTTP API reference,
//! docs/src/http-api.md.

use std::time::Duration;

mod body;
mod query;
mod reads;
mod requests;
mod routes;

pub use body::{Bad, Fields};
pub use reads::{list_path, log_path, queues_path, read_list, read_log, read_queues};
pub use requests::{
    AcquireRequest, BreakRequest, End, LeaveRequest, ReleaseRequest, RenewRequest, grant_header,
    read_grant_header, whole_seconds,
};
pub use routes::{Route, Target, Unrouted};

/// The header of every answer of a distlock server, so that its clients can tell it from
/// another HTTP server at a mistyped address (whose bare 404 must not read as "not held").
pub const API_HEADER: &str = "distlock-api";

/// The header of a grant that says whether it is a new tenure or the owner's own, extended:
/// `new` or `extended`, and for a lock set one of them per member, in the members' order,
/// separated by commas (`new,extended,new`): see [`grant_header`].
pub const GRANT_HEADER: &str = "distlock-grant";

/// The header of a grant that says how long, in whole milliseconds rounded down, the request
/// waited on the server before the transaction that granted it began: a client's lease
/// began no earlier than its sending of the request plus this.
pub const WAITED_HEADER: &str = "distlock-waited-ms";

/// The largest request body.
pub const MAX_BODY: usize = 64 * 1024;

/// The most bytes of a request line, and of a request line and its headers.
pub const MAX_HEAD: usize = 16 * 1024;

/// The longest one request waits in a queue; a longer `wait_seconds` is waited out over
/// several requests, each from the place the one before kept.
pub const LONGEST_POLL: Duration = Duration::from_secs(30);

/// The longest `wait_seconds` a request may give.
pub const MAX_WAIT_SECS: u64 = 86_400;
