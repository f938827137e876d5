//! The one gate for what a test needs from the machine it runs on: a program (strace,
//! PgBouncer, faketime, prlimit, systemd-analyze), a service (the suite's PostgreSQL server) or
//! a privilege (root, a mount, a cgroup).
//!
//! A test asks [`require`] before it relies on one. Where the machine has it, the test goes on.
//! Where it does not, the test fails if CI's switch for that tool, `DISTLOCK_TEST_REQUIRE_<TOOL>`,
//! is set (`.ci/run` sets one for every tool it installs, so that in CI nothing is skipped);
//! anywhere else it says so in one line, `note: WHAT skipped: WHY`, and checks nothing more. No
//! test passes silently for a missing tool or privilege.
//!
//! The note is written to stderr past the test harness's capture, so that `cargo test` shows
//! it, and appended to `target/tmp/skipped-tests.txt`, which `scripts/test` lists at the end of
//! a run (nextest shows no output of a test that passes).
//!
//! Compiled into both `tests/cli` (as `common::require`) and `tests/recipes.rs` (by `#[path]`).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Where every skip of a run is listed, one line each (`scripts/test` empties it first).
const SKIPPED: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/skipped-tests.txt");

/// `found` if the machine has `tool`, else why not (`Err`). `None` means the test must skip
/// `what` (and the note has been written); with `DISTLOCK_TEST_REQUIRE_<TOOL>` set, a missing
/// tool fails the test instead.
pub fn require<T>(tool: &str, what: &str, found: Result<T, String>) -> Option<T> {
    let why = match found {
        Ok(found) => return Some(found),
        Err(why) => why,
    };
    let switch = format!("DISTLOCK_TEST_REQUIRE_{tool}");
    assert!(
        std::env::var_os(&switch).is_none(),
        "{switch} is set, but {what} cannot be tested here: {why}"
    );
    let note = format!("note: {what} skipped: {why} ({switch} would make this a failure)\n");
    // Past the capture of `eprintln!`: a note nobody sees is a silent pass.
    let _ = std::io::stderr().write_all(note.as_bytes());
    let test = std::thread::current()
        .name()
        .unwrap_or("a test's helper thread")
        .to_owned();
    if let Ok(mut list) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(Path::new(SKIPPED))
    {
        let _ = list.write_all(format!("{test}: {note}").as_bytes());
    }
    None
}

/// Whether `program ARGS…` runs here and succeeds: a probe for [`require`].
pub fn runs(program: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(err) => Err(format!("{program} cannot run ({err}): is it installed?")),
    }
}
