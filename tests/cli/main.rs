//! distlock's integration suite: real binaries, real SQLite files (and a real PostgreSQL server
//! when `DISTLOCK_TEST_PG_URL` is set), real processes and signals. One binary; a folder per
//! area, a file per feature; helpers in `common`.
//!
//! | folder | what its tests hold distlock to |
//! | --- | --- |
//! | [`locks`] | the lock commands (`acquire`, `status`, `release`, `renew`), lock modes, lock sets, and the command line's front door |
//! | [`run_guard`] | `run`: exit statuses, the heartbeat, a lost lease, `--wait`; the guard's signals, job control and orphans |
//! | [`waiting`] | fair waiting: queue order, reserved resources, waiters that leave or die, wake-ups |
//! | [`operators`] | `list`, `log`, `gc`; `--note`, `--hold-at-least`, `--max-runtime`, `break` |
//! | [`stores`] | what the stores must survive: PostgreSQL (races, clocks, TLS), poolers, network filesystems, schema upgrades, a failing server, crashes and hostile files |
//! | [`server`] | `distlock serve`: the HTTP API (and its sets), tokens, TLS, and every command through a server |
//! | [`suite`] | the suite's own rules: CI requires every tool a test may skip without |
//!
//! The recipes in `examples/` have a test binary of their own, `tests/recipes.rs`.

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

mod common;
mod locks;
mod operators;
mod run_guard;
mod server;
mod stores;
mod suite;
mod waiting;
