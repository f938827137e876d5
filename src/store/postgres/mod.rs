//! The multi-host store: PostgreSQL, for locks shared by many machines. Split by concern:
//!
//! - [`target`]: the `postgres://` URL, connection defaults and TLS settings, checked before
//!   anything connects; the password never appears in a message;
//! - [`tls`]: the rustls configurations `sslmode` asks for;
//! - [`worker`]: the connection on a thread of its own, so every call can be given up on;
//! - [`sql`]: the schema and the transactions, with the server's clock and a per-resource
//!   row lock, two round trips per operation; the decisions themselves are
//!   [`crate::engine`]'s.
//!
//! Waiting is bounded everywhere: a connect timeout, TCP keepalives and a user timeout,
//! server-side statement and lock timeouts, and a client-side deadline per call.

mod sql;
mod target;
mod tls;
mod worker;

pub use target::Target;
pub use worker::PostgresStore;
