//! The multi-host store: PostgreSQL, for locks shared by many machines. Split by concern:
//!
//! - [`target`]: the `postgres://` URL, connection defaults and TLS settings, checked before
//!   anything connects; the password never appears in a message;
//! - [`tls`]: the rustls configurations `sslmode` asks for;
//! - [`worker`]: the connection on a thread of its own, so every call can be given up on;
//! - [`session`]: the transactions, with the server's clock: a read, then one write message
//!   that locks the resources' rows and checks that the read still holds; the decisions
//!   themselves are [`crate::engine`]'s;
//! - [`queries`]: the plain queries of `list`, `log` and `gc`;
//! - [`schema`]: the tables of each version and the careful check that creates or upgrades
//!   them once;
//! - [`statements`]: the SQL each operation sends, values as escaped literals;
//! - [`batch`]: several statements in one round trip, and the text rows they return.
//!
//! Waiting is bounded everywhere: a connect timeout, TCP keepalives and a user timeout,
//! server-side statement and lock timeouts, and a client-side deadline per call.

mod batch;
mod listen;
mod queries;
mod schema;
mod session;
mod statements;
mod target;
mod tls;
mod worker;
mod writes;

pub use target::Target;
pub use worker::PostgresStore;
