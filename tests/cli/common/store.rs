//! The store under test and the commands that read it.
//!
//! [`each_store`] runs one test body against every store under test: always a fresh SQLite file,
//! and a fresh PostgreSQL database when `DISTLOCK_TEST_PG_URL` is set — the same code, not a
//! copy. [`Db`] runs `distlock` against its store (or starts it in the background), and reads
//! `status`, its `"waiting"` count, and `log` as values.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

use super::files::read_trimmed;
use super::output::{parse_line, parse_lines};
use super::pg_database::{PgDatabase, pg_admin_url};
use super::pids::{KillOnDrop, pid_in};
use super::process::{BIN, Proc, assert_exited, describe, distlock, isolated, wait_for_file};
use super::require::require;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// One store under test, removed when dropped.
pub struct Db {
    /// The distlock server in front of the store, when the commands go through one
    /// ([`Db::through_server`]); stopped first when dropped.
    server: Option<Box<super::server::Server>>,
    pub kind: Kind,
    /// What `--db` / `DISTLOCK_DB` gets: the store's path or URL, or a server's URL.
    pub url: String,
    /// The store's own path or URL (what a server in front of it serves).
    store_url: String,
    /// A scratch folder for the test's own files (markers, scripts, the SQLite file).
    pub dir: TempDir,
    /// The PostgreSQL database behind `url`, dropped with this value.
    pg: Option<PgDatabase>,
}

impl Db {
    pub fn sqlite() -> Db {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = dir
            .path()
            .join("locks.db")
            .to_str()
            .expect("utf-8 path")
            .to_owned();
        Db {
            server: None,
            kind: Kind::Sqlite,
            store_url: url.clone(),
            url,
            dir,
            pg: None,
        }
    }

    /// A fresh PostgreSQL database, when the suite has a server (`DISTLOCK_TEST_PG_URL`).
    /// `None` (with a note on stderr) without one, unless `DISTLOCK_TEST_REQUIRE_PG` is set:
    /// then a missing server fails the test instead of skipping it.
    pub fn postgres() -> Option<Db> {
        let admin = pg_admin_url("PostgreSQL variant")?;
        let pg = PgDatabase::create(&admin, "").expect("create a test database");
        Some(Db::on(pg))
    }

    /// A fresh PostgreSQL database made by `CREATE DATABASE <name> <OPTIONS>` (a template, a
    /// locale, …). `None`, `what` skipped by the gate ([`require`], tool `PG`), without a server
    /// (as for [`Db::postgres`]) or when the server refuses the options.
    pub fn postgres_with(options: &str, what: &str) -> Option<Db> {
        let admin = pg_admin_url(what)?;
        let made = PgDatabase::create(&admin, options)
            .map_err(|err| format!("the server refused {options:?}: {err}"));
        require("PG", what, made).map(Db::on)
    }

    /// A fresh PostgreSQL database on the server behind `admin` (a test's own server, such as
    /// a [`super::cluster::Cluster`]'s).
    pub fn postgres_on(admin: &str) -> Db {
        Db::on(PgDatabase::create(admin, "").expect("create a test database"))
    }

    fn on(pg: PgDatabase) -> Db {
        Db {
            server: None,
            kind: Kind::Postgres,
            url: pg.url.clone(),
            store_url: pg.url.clone(),
            dir: tempfile::tempdir().expect("temp dir"),
            pg: Some(pg),
        }
    }

    /// The same store behind a `distlock serve` of its own: the commands then go through the
    /// server (`DISTLOCK_DB=http://…`), and the store's own file or database is still there
    /// to inspect.
    pub fn through_server(mut self) -> Db {
        let server = super::server::Server::start(&self);
        self.url = server.url("");
        self.server = Some(Box::new(server));
        self
    }

    /// Whether the commands go through a server.
    pub fn is_served(&self) -> bool {
        self.server.is_some()
    }

    /// The store's own path or URL, whether or not a server is in front of it.
    pub fn store_url(&self) -> &str {
        &self.store_url
    }

    /// The PostgreSQL database's connection URL (for tests that talk to the server directly).
    pub fn pg_url(&self) -> &str {
        &self.pg.as_ref().expect("a PostgreSQL store").url
    }

    /// A connection to the PostgreSQL database, for tests that talk to the server directly.
    pub fn pg_client(&self) -> postgres::Client {
        postgres::Client::connect(self.pg_url(), postgres::NoTls)
            .expect("connect to the test database")
    }

    /// [`distlock`] with this store in `DISTLOCK_DB`, as an `assert_cmd` command.
    pub fn cmd(&self) -> Command {
        Command::from_std(self.std_cmd())
    }

    /// The same, as a `std::process::Command` for tests that spawn and signal processes.
    pub fn std_cmd(&self) -> std::process::Command {
        let mut cmd = distlock();
        cmd.env("DISTLOCK_DB", &self.url);
        cmd
    }

    /// `program` (a wrapper that ends up running distlock) with this store in `DISTLOCK_DB` and
    /// nothing else of distlock's inherited ([`isolated`]).
    pub fn env_cmd(&self, program: impl AsRef<OsStr>) -> std::process::Command {
        let mut cmd = isolated(program);
        cmd.env("DISTLOCK_DB", &self.url);
        cmd
    }

    /// Whether another process is inside a transaction on the store that a writer would wait
    /// for: SQLite's write lock (without a busy timeout, it is BUSY at once), or on PostgreSQL a
    /// session that is not idle (inside a statement, or idle in a transaction).
    pub fn busy_elsewhere(&self) -> bool {
        match self.kind {
            Kind::Sqlite => rusqlite::Connection::open(self.path())
                .and_then(|conn| {
                    conn.busy_timeout(std::time::Duration::ZERO)?;
                    conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;")
                })
                .is_err(),
            Kind::Postgres => {
                let busy: i64 = self
                    .pg_client()
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity
                         WHERE datname = current_database() AND pid <> pg_backend_pid()
                           AND state <> 'idle'",
                        &[],
                    )
                    .expect("read pg_stat_activity")
                    .get(0);
                busy > 0
            }
        }
    }

    /// Runs `distlock ARGS…` under `strace -f -y -e trace=SYSCALLS`, which must succeed, and
    /// returns the trace. `None` when strace cannot run here: `what` skipped by the gate
    /// ([`require`], tool `STRACE`).
    pub fn strace(&self, what: &str, syscalls: &str, args: &[&str]) -> Option<String> {
        let trace = self.file("distlock.strace");
        let traced = self
            .env_cmd("strace")
            .args(["-f", "-y", "-e", &format!("trace={syscalls}"), "-o"])
            .arg(&trace)
            .arg(BIN)
            .args(args)
            .output()
            .map_err(|err| format!("strace cannot run ({err})"));
        let out = require("STRACE", what, traced)?;
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        Some(std::fs::read_to_string(&trace).expect("strace output"))
    }

    /// The SQLite file, for tests that inspect it.
    pub fn path(&self) -> &Path {
        assert_eq!(self.kind, Kind::Sqlite, "only SQLite stores have a file");
        Path::new(&self.store_url)
    }

    /// A path in the test's scratch folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs `distlock ARGS…` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("run distlock")
    }

    /// Everything the lock commands can observe of the store — the live locks (`list`) and the
    /// whole history (`log`) — so a test can check that a command changed nothing.
    pub fn state(&self) -> String {
        let mut state = String::new();
        for args in [["list"], ["log"]] {
            let out = self.run(&args);
            assert_eq!(
                out.status.code(),
                Some(0),
                "distlock {args:?}: {}",
                describe(&out)
            );
            state.push_str(std::str::from_utf8(&out.stdout).expect("utf-8 stdout"));
        }
        state
    }

    /// Runs `distlock ARGS…`, checks the exit code, and parses the one JSON line on stdout.
    pub fn json(&self, args: &[&str], code: i32) -> Value {
        let out = self.run(args);
        assert_exited(&out, code, &format!("distlock {args:?}"));
        parse_line(&out.stdout)
    }

    /// `status RESOURCE` (after `--`, so that any name passes): its exit code, which must be 0
    /// (held) or 1 (not held), and its JSON line.
    pub fn status(&self, resource: &str) -> (i32, Value) {
        let out = self.run(&["status", "--", resource]);
        let code = out.status.code().expect("status exited");
        assert!(
            code == 0 || code == 1,
            "status {resource:?}: {}",
            describe(&out)
        );
        (code, parse_line(&out.stdout))
    }

    /// `status RESOURCE`'s `"waiting"`: the number of live waiters the store counts for it.
    /// The key is there only when that number is positive; its absence reads as 0.
    pub fn waiting(&self, resource: &str) -> u64 {
        let (_, json) = self.status(resource);
        json.get("waiting").map_or(0, |k| {
            k.as_u64()
                .filter(|&k| k > 0)
                .unwrap_or_else(|| panic!("\"waiting\" is a positive integer when present: {json}"))
        })
    }

    /// Starts `distlock ARGS…` in the background with the scratch folder in `$D`, its stdout and
    /// stderr in `NAME.stdout` and `NAME.stderr` there (see [`Proc`]).
    pub fn spawn(&self, args: &[&str], name: &str) -> Proc {
        let mut cmd = self.std_cmd();
        cmd.args(args).env("D", self.dir.path());
        Proc::spawn(&mut cmd, self.dir.path(), name)
    }

    /// `distlock --format text ARGS…`, which must exit `code` and print whole lines on stdout
    /// (at least one): those lines.
    pub fn text_lines(&self, args: &[&str], code: i32) -> Vec<String> {
        let mut all = vec!["--format", "text"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert_eq!(out.status.code(), Some(code), "{all:?}: {}", describe(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.ends_with('\n') && !stdout.trim().is_empty(),
            "{all:?}: lines on stdout, got {stdout:?}"
        );
        stdout.lines().map(str::to_owned).collect()
    }

    /// `log ARGS…`, which must exit 0: the events, oldest first.
    pub fn log(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["log"];
        all.extend_from_slice(args);
        let out = self.run(&all);
        assert_eq!(out.status.code(), Some(0), "{all:?}: {}", describe(&out));
        parse_lines(&out.stdout)
    }
}

/// [`distlock`]` --db DB`, for a store given by path or URL rather than by a [`Db`].
pub fn distlock_at(db: impl AsRef<OsStr>) -> std::process::Command {
    let mut cmd = distlock();
    cmd.arg("--db").arg(db);
    cmd
}

/// `distlock run ARGS…` against `db`, with the scratch folder in `$D` (for the command's marker
/// files) and the binary under test in `$DL` (for commands that look at the lock from inside).
pub fn run_cmd(db: &Db, args: &[&str]) -> std::process::Command {
    let mut cmd = db.std_cmd();
    cmd.arg("run")
        .args(args)
        .env("D", db.dir.path())
        .env("DL", BIN);
    cmd
}

/// A `run` whose command started a `sleep 60` child and waits for it ([`held_run`]).
pub struct HeldRun {
    pub guard: Proc,
    /// The command's child; killed, if it still runs, when this is dropped.
    pub child: i32,
    /// The run's owner, as its command saw it.
    pub owner: String,
    _cleanup: KillOnDrop,
}

/// `run FLAGS…` (with a `--resource` or more) over a command that starts a `sleep 60` child and
/// waits for it, once the command runs: for a test that ends the tenure from outside (a
/// break) and checks that the command and its child are stopped.
pub fn held_run(db: &Db, flags: &[&str]) -> HeldRun {
    let script = r#"sleep 60 & echo $! > "$D/child.tmp"; mv "$D/child.tmp" "$D/child.pid"
        echo "$DISTLOCK_OWNER" > "$D/owner.tmp"; mv "$D/owner.tmp" "$D/owner"
        wait"#;
    let guard = Proc::spawn(
        &mut run_cmd(db, &sh_script(flags, script, &[])),
        db.dir.path(),
        "run",
    );
    let child = pid_in(&db.file("child.pid"), LONG);
    let cleanup = KillOnDrop(vec![child]);
    wait_for_file(&db.file("owner"), LONG);
    HeldRun {
        guard,
        child,
        owner: read_trimmed(&db.file("owner")),
        _cleanup: cleanup,
    }
}

/// `FLAGS… -- sh -c SCRIPT sh ARGS…`: distlock's own arguments (a command and its flags, or
/// `run`'s flags for [`run_cmd`]), then a shell script for `run` to start, with `ARGS` as its
/// `$1`….
pub fn sh_script<'a>(flags: &[&'a str], script: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = flags.to_vec();
    all.extend(["--", "sh", "-c", script, "sh"]);
    all.extend_from_slice(args);
    all
}

/// Runs `cmd` (a distlock command line, such as [`run_cmd`] makes) to its end: its output, once
/// it has exited `code`.
pub fn output_exiting(cmd: &mut std::process::Command, code: i32) -> Output {
    let out = cmd.output().expect("run distlock");
    assert_eq!(out.status.code(), Some(code), "{cmd:?}: {}", describe(&out));
    out
}

/// Asserts that `resource` is free.
pub fn assert_free(db: &Db, resource: &str) {
    let (code, json) = db.status(resource);
    assert_eq!(code, 1, "{resource} should be free, status says {json}");
    assert_eq!(json["held"], false);
}

/// Asserts that `resource` is held by `owner`, and returns the lock object.
pub fn assert_held_by(db: &Db, resource: &str, owner: &str) -> Value {
    let (code, json) = db.status(resource);
    assert_eq!(
        code, 0,
        "{resource} should be held by {owner}, status says {json}"
    );
    assert_eq!(json["lock"]["owner"], owner, "{json}");
    json["lock"].clone()
}

/// How long a [`held_run`]'s command may take to start.
const LONG: std::time::Duration = std::time::Duration::from_secs(20);

/// How long a waiter may take to show up in `status`'s count.
const QUEUED: std::time::Duration = std::time::Duration::from_secs(15);

/// The pause between two `status` calls while waiting for a count: each is a process start.
const STATUS_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Waits until `status RESOURCE` counts exactly `k` live waiters.
pub fn until_waiting(db: &Db, resource: &str, k: u64) {
    let mut seen = 0;
    let counted = super::process::wait_for(QUEUED, || {
        seen = db.waiting(resource);
        if seen != k {
            std::thread::sleep(STATUS_POLL);
        }
        seen == k
    });
    assert!(
        counted,
        "status {resource} should count {k} waiting within {QUEUED:?}; it counts {seen} \
         (no \"waiting\" key reads as 0): {}",
        db.status(resource).1
    );
}

/// Runs `test` against a fresh SQLite store, then against a fresh PostgreSQL database when
/// `DISTLOCK_TEST_PG_URL` is set (and says so on stderr when it is not).
pub fn each_store(test: impl Fn(&Db)) {
    test(&Db::sqlite());
    if let Some(db) = Db::postgres() {
        test(&db);
    }
}

/// [`each_store`], then the same through a distlock server in front of each store
/// (`--db http://…`): the commands must behave exactly alike.
pub fn each_store_and_server(test: impl Fn(&Db)) {
    each_store(&test);
    test(&Db::sqlite().through_server());
    if let Some(db) = Db::postgres() {
        test(&db.through_server());
    }
}

/// The stores of [`each_store_and_server`], all at once: for a test whose steps wait for the
/// clock, each step taken on every store before the wait, so that they wait once together.
pub fn every_store_and_server() -> Vec<Db> {
    let mut dbs = every_store();
    dbs.push(Db::sqlite().through_server());
    dbs.extend(Db::postgres().map(Db::through_server));
    dbs
}

/// The stores of [`each_store`], all at once (see [`every_store_and_server`]).
pub fn every_store() -> Vec<Db> {
    let mut dbs = vec![Db::sqlite()];
    dbs.extend(Db::postgres());
    dbs
}
