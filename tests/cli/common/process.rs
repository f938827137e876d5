//! Processes under test: the binary and how every test starts it ([`distlock`]), spawning with a
//! deadline, describing how a process ended, and waiting for a condition or a file.
//!
//! Every wait has a deadline and a process still running when its [`Proc`] is dropped (a
//! failing test) is killed, so a hang fails its test instead of blocking the suite. A [`Proc`]
//! writes its stdout and stderr to files, never to pipes: a pipe would keep a test waiting on
//! any stray grandchild that inherited it.
//!
//! Compiled into both `tests/cli` (as `common::process`) and `tests/recipes.rs` (by `#[path]`):
//! everything here is used by both, so that neither needs to allow dead code.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// `distlock`, the binary under test, started as [`isolated`] starts a program: the one way
/// the tests start it. A test adds the store, owner and arguments it means to give.
pub fn distlock() -> Command {
    isolated(BIN)
}

/// `program` with none of distlock's settings inherited from the test's environment (no
/// `DISTLOCK_*` variable: store, owner, token, CA, the fences `run` exports; and no
/// `PGPASSWORD`) and no stdin: [`distlock`] itself, or a program that ends up running it (`sh`,
/// `setpriv`, `strace`, a recipe's script). A developer's own `DISTLOCK_DB` never reaches a test.
pub fn isolated(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"DISTLOCK_") {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("PGPASSWORD").stdin(Stdio::null());
    cmd
}

/// `cmd` started through `wrapper` (a program and its first arguments, which runs what follows
/// them): the wrapper gets `cmd`'s program and arguments after its own, and `cmd`'s changes to
/// the environment and its folder. (An `env_clear` is not carried over.)
pub fn wrapped<S: AsRef<OsStr>>(wrapper: &[S], cmd: &Command) -> Command {
    let (program, first) = wrapper.split_first().expect("a wrapper program");
    let mut outer = isolated(program);
    outer
        .args(first)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (name, value) in cmd.get_envs() {
        match value {
            Some(value) => outer.env(name, value),
            None => outer.env_remove(name),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        outer.current_dir(dir);
    }
    outer
}

/// How often the waits here look again.
const POLL: Duration = Duration::from_millis(5);

/// Held while a script is written and while a process is spawned ([`Proc::spawn`] takes it). A
/// fork in another test thread while a script is open for writing would inherit that
/// descriptor, and exec'ing the script would then fail with ETXTBSY ("Text file busy").
static SPAWN: Mutex<()> = Mutex::new(());

/// Takes [`SPAWN`]; a panic in another test while it held the lock does not matter here.
pub fn spawn_lock() -> MutexGuard<'static, ()> {
    SPAWN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pid of a spawned child, as nix wants it.
pub fn pid_of(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).expect("pid fits i32"))
}

/// Waits for `child` up to `limit`; kills (and reaps) it and returns `None` if it runs longer.
pub fn wait_or_kill(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(POLL);
    }
}

/// Fails the test unless `out` exited `code`, naming `what` and showing the output.
pub fn assert_exited(out: &Output, code: i32, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}: {}", describe(out));
}

/// A finished process's exit status, stdout and stderr, as a failed assertion shows them.
pub fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A spawned process with its stdout and stderr in files; killed if dropped while it runs.
pub struct Proc {
    child: Child,
    what: String,
    stdout: PathBuf,
    stderr: PathBuf,
    started: Instant,
}

/// How a [`Proc`] ended: its output, how long it ran, and whether it had to be killed for
/// outliving its limit.
pub struct Finished {
    pub output: Output,
    pub elapsed: Duration,
    pub timed_out: bool,
    what: String,
}

impl Proc {
    /// Starts `cmd` with no stdin, and its stdout and stderr in `DIR/NAME.stdout` and
    /// `DIR/NAME.stderr`.
    pub fn spawn(cmd: &mut Command, dir: &Path, name: &str) -> Proc {
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        cmd.stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("stdout file"))
            .stderr(File::create(&stderr).expect("stderr file"));
        let what = format!("{cmd:?}");
        let child = {
            let _guard = spawn_lock();
            cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"))
        };
        Proc {
            child,
            what,
            stdout,
            stderr,
            started: Instant::now(),
        }
    }

    pub fn pid(&self) -> Pid {
        pid_of(&self.child)
    }

    /// Sends `signal` to the process (not to its group).
    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal the process");
    }

    /// Waits for the process, at most `limit` from now; kills it if it runs longer (the result
    /// then says so, and has no exit code).
    pub fn finish(mut self, limit: Duration) -> Finished {
        let (status, timed_out) = match wait_or_kill(&mut self.child, limit) {
            Some(status) => (status, false),
            None => (self.child.wait().expect("wait after kill"), true),
        };
        Finished {
            elapsed: self.started.elapsed(),
            timed_out,
            output: Output {
                status,
                stdout: std::fs::read(&self.stdout).unwrap_or_default(),
                stderr: std::fs::read(&self.stderr).unwrap_or_default(),
            },
            what: std::mem::take(&mut self.what),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Finished {
    /// The exit code; `None` when the process died of a signal (or was killed for its time).
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The command, how long it ran, its status and its output, for a failed assertion.
    pub fn describe(&self) -> String {
        format!(
            "{}\nran {:?}{}: {}",
            self.what,
            self.elapsed,
            if self.timed_out {
                " (killed: it took too long)"
            } else {
                ""
            },
            describe(&self.output)
        )
    }
}

/// Polls `done` until it holds; returns whether it did within `limit`.
pub fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        thread::sleep(POLL);
    }
}

/// Polls `done` until it holds; fails the test, naming `what`, if it does not within `limit`.
pub fn wait_until(limit: Duration, what: &str, done: impl FnMut() -> bool) {
    assert!(wait_for(limit, done), "timed out after {limit:?}: {what}");
}

/// Waits until `path` exists; fails the test if it does not within `limit`. (Files that other
/// processes wait for are written to a temporary name and renamed, so that they are never
/// seen half written.)
pub fn wait_for_file(path: &Path, limit: Duration) {
    wait_until(limit, &format!("{} appears", path.display()), || {
        path.exists()
    });
}
