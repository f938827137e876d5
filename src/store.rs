//! Where locks live. [`LockStore`] is the one interface every command talks to; each backend
//! (the embedded SQLite file, PostgreSQL) implements it with the same guarantees:
//!
//! - every operation is one atomic transaction on one resource or on a set of them, serialised
//!   per resource and guarded by `UNIQUE(resource)`; its decision is [`crate::engine`]'s, the
//!   same on every store;
//! - a lock is live while `now < expires_at`, by the store's own clock;
//! - fences strictly increase with every new tenure and are never reused, not after release,
//!   expiry, `gc` or a crash;
//! - every state change is recorded in the history in the same transaction.
//!
//! The operations are values ([`op`]); what a local store provides, and every operation over
//! it, is `backend`'s ([`Backend`]); what both stores read and write alike is `columns`'. Where a
//! store is ([`Location`], from `--db`) is `location`'s; opening it for what a command does
//! ([`open()`], [`Access`]) is `open`'s; whether a SQLite store would lie on a network
//! filesystem, which `open` refuses, is `network_fs`'s. Why a store could not carry an
//! operation out is an [`Error`].

mod backend;
mod batch;
mod carry;
mod columns;
mod error;
mod location;
mod network_fs;
pub mod op;
mod open;
mod postgres;
mod remote;
mod sqlite;

pub use backend::{Backend, Decide, DecideSet, FenceSource, Reads};
pub use error::{Error, Result};
pub use location::{Folders, Location, NetworkFs};
pub use op::{Durability, LockStore, Locks, Op, Operation, Outcome};
pub use open::{Access, open};
pub use postgres::PostgresStore;
pub(crate) use remote::certificate_validity;
pub use remote::{RemoteStore, ServerUrl, authorization as server_authorization};
pub use sqlite::SqliteStore;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 5;

/// Rows deleted per `gc` transaction, so `gc` never holds a write lock for long.
const GC_BATCH: i64 = 1000;

/// The store's notion of now. The CLI uses the host's clock; tests drive a manual one.
pub trait Clock: Send {
    fn now(&self) -> crate::lock::Timestamp;
}

/// The host's wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> crate::lock::Timestamp {
        crate::lock::Timestamp::now()
    }
}
