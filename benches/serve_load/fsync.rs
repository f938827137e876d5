//! `fsync`: no server; one writer's durable commits of a file on the stores' disk, the floor of
//! one durable commit.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::measure::{Sample, Watched, float, percentiles, round};
use crate::pairs::Timing;

/// The bytes one durable commit of a grant writes, about: four WAL frames of a 4 KiB page.
const COMMIT_BYTES: usize = 4 * (24 + 4096);

/// One writer's durable commits with nothing else: [`COMMIT_BYTES`] written and `fsync`ed,
/// over and over, in a file of `dir` (on the disk the stores use). Overwriting the same
/// bytes, as a WAL restarted in place is, or (`append`) growing the file, as a WAL that is
/// never restarted does. The floor of a commit's latency, and so the most grants a store that
/// commits one grant at a time can make in a second.
///
/// # Errors
///
/// The file cannot be made or written.
pub fn fsync(dir: &Path, append: bool, timing: Timing, watched: &Watched) -> Result<Value, String> {
    let path = dir.join(format!("fsync-{}.bin", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    let block = vec![0x5a_u8; COMMIT_BYTES];
    let write = |offset: u64| -> Result<Duration, String> {
        let started = Instant::now();
        file.write_all_at(&block, offset)
            .and_then(|()| file.sync_all())
            .map_err(|err| format!("{}: {err}", path.display()))?;
        Ok(started.elapsed())
    };
    // The overwritten file is written whole and synced once first, so that its blocks exist.
    write(0)?;
    let step = COMMIT_BYTES as u64;
    let mut offset = 0;
    let counted_from = Instant::now() + timing.warmup;
    let until = counted_from + timing.duration;
    let mut samples = Vec::new();
    let mut first = None;
    while Instant::now() < until {
        if append {
            offset += step;
        }
        let took = write(offset)?;
        if Instant::now() >= counted_from {
            if first.is_none() {
                first = Some((Sample::take(watched), Instant::now()));
            }
            samples.push(took);
        }
    }
    let last = Sample::take(watched);
    drop(file);
    let _ = std::fs::remove_file(&path);
    let count = samples.len();
    let (first, from) = first.ok_or("no commit was measured")?;
    let wall = from.elapsed();
    let mut report = json!({
        "mode": "fsync",
        "append": append,
        "bytes": COMMIT_BYTES,
        "commits": count,
        "commits_per_s": round(float(count as u64) / wall.as_secs_f64(), 0),
    });
    first.report(&last, watched, wall, count, &mut report);
    percentiles(&mut report, "", &mut samples);
    Ok(report)
}
