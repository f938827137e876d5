//! The README's guarded resource, `examples/fenced-write`: it appends `FENCE VALUE` to
//! `DIR/data` unless a higher fence already wrote there, and exits 1 when it rejects a write.
//!
//! Compiled into both `tests/cli` (as `common::fenced_write`) and `tests/recipes.rs` (by
//! `#[path]`); both use each item.

use std::path::{Path, PathBuf};

/// The script, checked to exist.
pub fn fenced_write() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fenced-write");
    assert!(path.exists(), "{} is missing", path.display());
    path
}

/// The entries `fenced-write` kept in `dir`, in the order it wrote them, as (fence, value).
pub fn ledger(dir: &Path) -> Vec<(i64, String)> {
    std::fs::read_to_string(dir.join("data"))
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (fence, value) = line.split_once(' ').expect("FENCE VALUE");
            (fence.parse().expect("a fence"), value.to_owned())
        })
        .collect()
}
