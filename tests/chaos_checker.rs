//! The fault campaign's checker (`scripts/chaos_lib/checker.py`, which `scripts/chaos` runs over
//! a campaign's whole history) on planted histories: a clean one, which it must pass, and each
//! kind of anomaly planted in it, which it must name. A checker that could not see an anomaly
//! would let every campaign pass with "0 anomalies"; this keeps that figure meaningful.
//!
//! The tests are Python's (`scripts/chaos_lib/test_checker.py`, standard library only); this
//! runs them with `python3 -m unittest` and fails when any fails or when fewer ran than there
//! are kinds of anomaly.

use std::path::PathBuf;
use std::process::Command;

/// The kinds of anomaly the checker names (`checker.KINDS`), each with a planted test, and the
/// clean history's own tests.
const AT_LEAST: usize = 14 + 2;

#[test]
fn the_chaos_checker_names_every_planted_anomaly_and_passes_a_clean_history() {
    let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let out = Command::new("python3")
        .args(["-m", "unittest", "-v", "chaos_lib.test_checker"])
        .current_dir(&scripts)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("PYTHONPATH")
        .output()
        .expect("run python3 (the checker's tests need it; CI installs it)");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the chaos checker's tests failed:\n{report}"
    );
    let ran: usize = report
        .lines()
        .find_map(|line| {
            line.strip_prefix("Ran ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no 'Ran N tests' line in:\n{report}"));
    assert!(
        ran >= AT_LEAST,
        "only {ran} checker tests ran, fewer than the {AT_LEAST} expected:\n{report}"
    );
    assert!(
        !report.contains("skipped"),
        "a checker test was skipped:\n{report}"
    );
}
