//! A private PostgreSQL cluster for one test: its own data folder, port and server process, so
//! the test may restart the server or terminate its sessions while other tests use the suite's
//! shared server (`DISTLOCK_TEST_PG_URL`) undisturbed.
//!
//! [`Cluster::start`] runs `initdb` and `pg_ctl start` from the newest
//! `/usr/lib/postgresql/*/bin`, as the `postgres` user when the suite runs as root (the server
//! refuses to run as root). The server listens on 127.0.0.1 only, on a port below Linux's
//! ephemeral range (from [`FIRST_PORT`], so no outgoing connection can take it while the server
//! restarts), with `trust` authentication and `fsync=off`. Dropping the cluster stops the server
//! (`-m immediate`) and removes its folder. A test killed before that leaves the server
//! running: `pg_ctl -D /tmp/.tmpXXXX/data stop` ends it.
//!
//! Compiled into both `tests/cli` (as `common::cluster`) and `tests/recipes.rs` (by `#[path]`,
//! for the recipes' clients of a server whose PostgreSQL goes away): everything here is used by
//! both.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::unistd::{Uid, User, chown};
use tempfile::TempDir;

use super::pg_database::pg_admin_url;
use super::process::describe;
use super::require::require;

/// Where the search for a free port starts; each test process starts at a place of its own
/// between here and 29999, so that suites running side by side rarely collide.
const FIRST_PORT: u16 = 21000;

pub struct Cluster {
    bin: PathBuf,
    dir: TempDir,
    port: u16,
    /// The server's settings, as `pg_ctl -o` takes them.
    options: String,
}

impl Cluster {
    /// A new cluster with its server running, when the suite runs its PostgreSQL variants
    /// (`DISTLOCK_TEST_PG_URL` is set) and PostgreSQL's programs are here; else `None`, `what`
    /// skipped by the gate ([`require`], tool `PG`).
    pub fn start(what: &str) -> Option<Cluster> {
        pg_admin_url(what)?;
        let programs =
            server_programs().ok_or_else(|| "no /usr/lib/postgresql/*/bin has initdb".to_owned());
        let bin = require("PG", what, programs)?;
        let dir = tempfile::tempdir().expect("temp dir");
        if Uid::effective().is_root() {
            let postgres = User::from_name("postgres")
                .expect("read the user database")
                .expect("a postgres user to run the server as");
            chown(dir.path(), Some(postgres.uid), Some(postgres.gid)).expect("chown the folder");
        }
        let data = dir.path().join("data");
        let mut initdb = server_command(&bin, "initdb");
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"])
            .args(["--locale=C.UTF-8", "--no-sync"]);
        let out = initdb.output().expect("run initdb");
        assert!(out.status.success(), "initdb: {}", describe(&out));
        let mut cluster = Cluster {
            bin,
            dir,
            port: 0,
            options: String::new(),
        };
        for _ in 0..20 {
            cluster.port = free_port();
            cluster.options = format!(
                "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={} \
                 -c fsync=off -c max_connections=100 -c shared_buffers=16MB",
                cluster.port,
                cluster.dir.path().display()
            );
            if cluster.try_start() {
                return Some(cluster);
            }
            // Someone took the port between the probe and the start: another one.
        }
        panic!(
            "the private PostgreSQL server did not start:\n{}",
            cluster.log()
        );
    }

    /// The admin URL: user `postgres`, database `postgres`, no TLS.
    pub fn admin_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A connection to the `postgres` database, for what the test does on the server itself.
    pub fn admin(&self) -> postgres::Client {
        postgres::Client::connect(&self.admin_url(), postgres::NoTls)
            .expect("connect to the private server")
    }

    /// Stops the server with `-m fast` (every session is ended, as in a managed server's
    /// maintenance), keeps it down for `down`, and starts it again on the same port.
    pub fn restart(&self, down: Duration) {
        let mut stop = self.pg_ctl();
        stop.args(["-m", "fast", "-w", "-t", "60", "stop"]);
        let out = stop.output().expect("run pg_ctl stop");
        assert!(out.status.success(), "pg_ctl stop: {}", describe(&out));
        std::thread::sleep(down);
        assert!(
            self.try_start(),
            "the private server did not start again:\n{}",
            self.log()
        );
    }

    /// `pg_ctl start`, waiting until the server takes connections; whether it did.
    fn try_start(&self) -> bool {
        let mut start = self.pg_ctl();
        start
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o", &self.options, "start"]);
        start.output().expect("run pg_ctl start").status.success()
    }

    fn pg_ctl(&self) -> Command {
        let mut cmd = server_command(&self.bin, "pg_ctl");
        cmd.arg("-D").arg(self.dir.path().join("data"));
        cmd
    }

    /// The server's log, for a failure's message.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .pg_ctl()
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// The newest `/usr/lib/postgresql/VERSION/bin` that has `initdb`.
fn server_programs() -> Option<PathBuf> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin)
}

/// `BIN/PROGRAM`, run as `postgres` when the suite runs as root, with no output to a terminal.
fn server_command(bin: &Path, program: &str) -> Command {
    let path = bin.join(program);
    if Uid::effective().is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(path);
        cmd
    } else {
        Command::new(path)
    }
}

/// A port of 127.0.0.1 that nothing listens on now, from [`FIRST_PORT`] up.
fn free_port() -> u16 {
    static TRIED: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id() % 800 * 10;
    loop {
        let offset = (start + TRIED.fetch_add(1, Ordering::SeqCst)) % 9000;
        let port = FIRST_PORT + u16::try_from(offset).expect("below 9000");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}
