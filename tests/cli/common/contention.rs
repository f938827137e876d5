//! A starting gate: many processes released at the same instant, for races (many acquirers of
//! one resource, many processes opening one store for the first time).
//!
//! Processes wait on a FIFO, each for one byte; writing N newlines releases N of them at once.
//! The test holds the FIFO open for reading and writing, so no `open` ever blocks.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::process::wrapped;

pub struct Gate {
    fifo: PathBuf,
    ready: PathBuf,
    writer: File,
}

impl Gate {
    /// A gate named `name` in `dir` (a FIFO, and a folder where waiting processes check in).
    pub fn new(dir: &Path, name: &str) -> Gate {
        let fifo = dir.join(name);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let writer = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .expect("open the FIFO");
        let ready = dir.join(format!("{name}.ready"));
        fs::create_dir(&ready).expect("ready folder");
        Gate {
            fifo,
            ready,
            writer,
        }
    }

    /// `cmd`, held at the gate: a shell checks in, waits for the gate to open, then execs
    /// `cmd`'s program (the same process).
    pub fn hold(&self, cmd: &Command) -> Command {
        let script = r#": > "$1/$$"; read go < "$0"; shift; exec "$@""#;
        let wrapper = [
            OsStr::new("sh"),
            OsStr::new("-c"),
            OsStr::new(script),
            self.fifo.as_os_str(),
            self.ready.as_os_str(),
        ];
        wrapped(&wrapper, cmd)
    }

    /// Waits until `n` processes sit at the gate (at most a few seconds), then lets them all go.
    pub fn open(mut self, n: usize) {
        let start = Instant::now();
        while fs::read_dir(&self.ready).map_or(0, Iterator::count) < n
            && start.elapsed() < Duration::from_secs(10)
        {
            thread::sleep(Duration::from_millis(10));
        }
        // Let the last ones reach `read`.
        thread::sleep(Duration::from_millis(50));
        self.writer
            .write_all(&vec![b'\n'; n])
            .expect("open the gate");
    }
}
