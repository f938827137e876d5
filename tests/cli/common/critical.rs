//! A critical section for the holders of one exclusive lock, and the checks that read what it
//! leaves in a folder: no two holders were ever inside at once, and fences strictly increase in
//! the order the holders got in.
//!
//! A holder is a command under `run` ([`command`]), or the test itself after an `acquire` it
//! made ([`visit`]). Entering makes the folder `crit` (`mkdir` is atomic and fails if it exists)
//! and appends the holder's fence to `fences`; a holder that finds `crit` there writes a line to
//! `overlaps` instead.
//!
//! Compiled into both `tests/cli` (as `common::critical`) and `tests/recipes.rs` (by `#[path]`,
//! for the jobs of the recipes' clients): everything here is used by both.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

/// The command's script, `sh critical-section DIR SECONDS`. It stays inside for SECONDS, and
/// leaves on SIGTERM too (a lease lost while it is inside is reported by `run`'s 124, not as an
/// overlap by the next holder).
const CRITICAL_SECTION: &str = r#"d=$1
if ! mkdir "$d/crit" 2>/dev/null; then
  echo "fence $DISTLOCK_FENCE found the critical section occupied" >>"$d/overlaps"
  exit 99
fi
trap 'rmdir "$d/crit"; exit 143' TERM
printf '%s\n' "$DISTLOCK_FENCE" >>"$d/fences"
sleep "$2" & wait $!
rmdir "$d/crit" || { echo "fence $DISTLOCK_FENCE: crit vanished" >>"$d/overlaps"; exit 98; }
"#;

/// `-- sh DIR/critical-section DIR SECONDS`: what follows `run`'s flags to make its command the
/// critical section, kept in `dir` for `seconds` (`"0.02"`). The script is written to `dir`
/// the first time (to a temporary name, then renamed: never seen half written).
pub fn command(dir: &Path, seconds: &str) -> Vec<String> {
    let script = dir.join("critical-section");
    if !script.exists() {
        let partial = dir.join(format!("critical-section.{:08x}", fastrand::u32(..)));
        fs::write(&partial, CRITICAL_SECTION).expect("write the critical section");
        fs::rename(&partial, &script).expect("rename the critical section");
    }
    let text = |path: &Path| path.to_str().expect("a UTF-8 path").to_owned();
    vec![
        "--".to_owned(),
        "sh".to_owned(),
        text(&script),
        text(dir),
        seconds.to_owned(),
    ]
}

/// The test enters and leaves the critical section in `dir` as the holder of `fence` (a lock
/// an `acquire` of its own got).
pub fn visit(dir: &Path, fence: i64) {
    let crit = dir.join("crit");
    if fs::create_dir(&crit).is_err() {
        append(
            &dir.join("overlaps"),
            &format!("fence {fence} (an acquire) found the critical section occupied"),
        );
        return;
    }
    append(&dir.join("fences"), &fence.to_string());
    fs::remove_dir(&crit).expect("leave the critical section");
}

fn append(path: &Path, line: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open for appending");
    writeln!(file, "{line}").expect("append a line");
}

/// What went wrong in `dir`'s critical section, one line each: two holders inside at once, a
/// fence that did not exceed the one before it. Empty when nothing did.
pub fn violations(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = fs::read_to_string(dir.join("overlaps"))
        .unwrap_or_default()
        .lines()
        .map(|line| format!("two holders at once: {line}"))
        .collect();
    found.extend(not_rising(&fences(dir)));
    found
}

/// Each fence that did not exceed the one before it, in `fences` (in the order their holders
/// got in), as a line of what went wrong.
pub fn not_rising(fences: &[i64]) -> Vec<String> {
    fences
        .windows(2)
        .filter(|pair| pair[0] >= pair[1])
        .map(|pair| {
            format!(
                "fence {} came in after fence {}: fences must strictly increase, in {fences:?}",
                pair[1], pair[0]
            )
        })
        .collect()
}

/// The fences of the holders that got in, in the order they did.
pub fn fences(dir: &Path) -> Vec<i64> {
    fs::read_to_string(dir.join("fences"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().expect("a fence"))
        .collect()
}
