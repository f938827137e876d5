//! distlock: leased, named locks for shell scripts, cron jobs, deploy steps and CI steps.
//!
//! The binary (`src/main.rs`) is a thin shell over this library. The library is public for the
//! project's own tools — the benchmarks use the store API, and the man pages and shell
//! completions are generated from [`cli::Cli`] — not as a stable Rust API.

pub mod answer;
pub mod cli;
pub mod commands;
pub mod engine;
pub mod error;
pub mod exit;
mod guard;
pub mod lock;
pub mod output;
pub mod protocol;
mod serve;
pub mod signals;
pub mod store;
mod wait;

#[cfg(test)]
mod layers;
#[cfg(test)]
mod sizes;
