//! distlock's integration suite: real binaries, real SQLite files (and a real PostgreSQL server
//! when `DISTLOCK_TEST_PG_URL` is set), real processes and signals. One binary, one module per
//! area, helpers in `common`.

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

mod common;
mod core;
mod fair;
mod faults;
mod fleet;
mod front_door;
mod guard;
mod history;
mod modes;
mod network_fs;
mod pooler;
mod postgres;
mod reliability;
mod run;
mod serve;
mod serve_tls;
mod serve_tokens;
mod sets;
mod through_server;
mod upgrade;
