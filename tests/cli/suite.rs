//! The suite's own rules, checked from its files: CI requires every tool that a test may skip
//! without (`.ci/run` sets each `DISTLOCK_TEST_REQUIRE_<TOOL>` that the gate,
//! `common::require`, is asked about), so that in CI no test is skipped.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Rust files under `dir`, recursively.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read a folder of tests") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// Every tool the tests ask the gate about: the first argument of each call of `require`, a
/// string of capitals.
fn tools_the_tests_require() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root().join("tests"), &mut files);
    let mut tools = BTreeSet::new();
    // This file names the call too, in its search.
    for file in files.iter().filter(|file| !file.ends_with(file!())) {
        let text = fs::read_to_string(file).expect("read a test file");
        for (at, _) in text.match_indices("require(") {
            let Some(rest) = text[at + "require(".len()..].trim_start().strip_prefix('"') else {
                continue;
            };
            let tool: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            assert!(
                rest[tool.len()..].starts_with('"') && !tool.is_empty(),
                "{}: a tool is named in capitals, as its switch: require({:?}…",
                file.display(),
                &rest[..rest.len().min(30)]
            );
            tools.insert(tool);
        }
    }
    tools
}

#[test]
fn ci_requires_every_tool_a_test_may_skip_without() {
    let tools = tools_the_tests_require();
    for known in ["PG", "STRACE", "PGBOUNCER", "FUSE"] {
        assert!(tools.contains(known), "{known} is among {tools:?}");
    }
    let ci = fs::read_to_string(root().join(".ci/run")).expect("read .ci/run");
    let exported: BTreeSet<&str> = ci
        .lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .flat_map(str::split_whitespace)
        .filter_map(|word| word.strip_prefix("DISTLOCK_TEST_REQUIRE_"))
        .filter_map(|word| word.strip_suffix("=1"))
        .collect();
    let missing: Vec<&String> = tools
        .iter()
        .filter(|tool| !exported.contains(tool.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        ".ci/run must export DISTLOCK_TEST_REQUIRE_<TOOL>=1 for each of {missing:?} (it exports \
         {exported:?}), or CI skips what those tests check"
    );
}
