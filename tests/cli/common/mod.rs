//! Helpers shared by the modules of the integration suite, one submodule per concern:
//!
//! | module | owns |
//! | --- | --- |
//! | [`store`] | the store under test ([`store::Db`], [`store::each_store`]: SQLite, and PostgreSQL when the suite has a server), `distlock` command lines (`run` with `$D` and `$DL`: [`store::run_cmd`]; a shell script after distlock's flags: [`store::sh_script`]; run to the end, its exit code checked: [`store::output_exiting`]), `status` and `log` as values, "free" and "held by" as assertions |
//! | [`output`] | what distlock prints: one JSON line, JSON lines and their event names, key sets, a fence, RFC 3339 times, the usage and store error shapes |
//! | [`process`] | the binary, spawning with a deadline ([`process::Proc`]), describing an outcome, waiting for a condition or a file |
//! | [`tenure`] | a tenure in each lock mode (exclusive, shared, semaphore) and the answers built from tenures: lock and holder objects, busy, mismatch, held |
//! | [`pids`] | what `/proc` says about a pid: gone (zombies count as gone), its stat fields, its children; killing leftovers ([`pids::KillOnDrop`]) |
//! | [`cluster`] | a private PostgreSQL server for one test, which it may restart and whose sessions it may terminate |
//! | [`contention`] | the contention harness: many real processes at once, released together by a gate, each worker running its rounds; how each ended, and a report of those that failed |
//! | [`critical`] | a critical section for the holders of one lock, and its checks: no two holders inside at once, fences strictly increasing |
//! | [`files`] | the marker files that commands write: a trimmed line, a number; the names a command left in a folder |
//! | [`pg_database`] | a PostgreSQL database of the suite's server made for one test and dropped after it, and the server's admin URL (`DISTLOCK_TEST_PG_URL`, required when `DISTLOCK_TEST_REQUIRE_PG` is set) |
//! | [`pg_url`] | a `postgres://` URL taken apart, to point it elsewhere or change a setting |
//! | [`fenced_write`] | the `examples/fenced-write` guarded resource and the ledger it writes |
//! | [`server`] | `distlock serve` over a test's store on a free loopback port (its address from its first stderr line, its log, SIGTERM then SIGKILL when dropped), a real HTTP client for it (`ureq`) and raw TCP requests, and the checks of its answers: JSON, problem documents, NDJSON |
//! | [`load`] | load on a server: clients that keep their connection alive and carry a token, a flood of raw long-polls on an async runtime of the test's own (each answer read whole, or its failure recorded), the server's gauge of waiting requests, the open-files limit |
//! | [`certs`] | certificates made by the test for the HTTPS server: a CA of its own and server certificates it signs for 127.0.0.1, ::1 and localhost, as PEM files |
//! | [`require`] | the one gate for a tool, service or privilege the machine may lack: skipped with a note, or a failure under CI's `DISTLOCK_TEST_REQUIRE_<TOOL>` |
//! | [`browser`] | a real headless Chromium driven through chromedriver (WebDriver), for the dashboard: a page, scripts run in it, waits for its DOM, screenshots under `target/dashboard-screenshots/` |
//! | [`proxy`] | a TCP proxy in front of PostgreSQL that injects network faults: a partition, delay, a cut connection (also mid-statement), a dead server, and healing |
//!
//! `process`, `require`, `fenced_write`, `certs`, `critical`, `pg_database` and `cluster` are
//! also compiled into `tests/recipes.rs` (`#[path]`), so each of their items is used by both
//! test crates; what only this suite needs lives elsewhere.
//! No item is allowed to be dead: a helper nobody calls is deleted.

pub mod browser;
pub mod certs;
pub mod cluster;
pub mod contention;
pub mod critical;
pub mod fenced_write;
pub mod files;
pub mod load;
pub mod output;
pub mod pg_database;
pub mod pg_url;
pub mod pids;
pub mod process;
pub mod proxy;
pub mod require;
pub mod server;
pub mod store;
pub mod tenure;
