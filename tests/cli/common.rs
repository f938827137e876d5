//! Helpers shared by every test module.
//!
//! [`each_store`] runs one test body against every store under test: always a fresh SQLite file,
//! and a fresh PostgreSQL database when `DISTLOCK_TEST_PG_URL` is set — the same code, not a
//! copy.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_distlock");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// One store under test, removed when dropped.
pub struct Db {
    pub kind: Kind,
    /// What `--db` / `DISTLOCK_DB` gets.
    pub url: String,
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
            kind: Kind::Sqlite,
            url,
            dir,
            pg: None,
        }
    }

    /// A fresh PostgreSQL database, when the suite has a server (`DISTLOCK_TEST_PG_URL`).
    /// `None` (with a note on stderr) without one, unless `DISTLOCK_TEST_REQUIRE_PG` is set:
    /// then a missing server fails the test instead of skipping it.
    pub fn postgres() -> Option<Db> {
        let Ok(admin) = std::env::var("DISTLOCK_TEST_PG_URL") else {
            assert!(
                std::env::var_os("DISTLOCK_TEST_REQUIRE_PG").is_none(),
                "DISTLOCK_TEST_REQUIRE_PG is set but DISTLOCK_TEST_PG_URL is not"
            );
            eprintln!("note: PostgreSQL variant skipped: DISTLOCK_TEST_PG_URL is not set");
            return None;
        };
        let pg = PgDatabase::create(&admin);
        Some(Db {
            kind: Kind::Postgres,
            url: pg.url.clone(),
            dir: tempfile::tempdir().expect("temp dir"),
            pg: Some(pg),
        })
    }

    /// The PostgreSQL database's connection URL (for tests that talk to the server directly).
    pub fn pg_url(&self) -> &str {
        &self.pg.as_ref().expect("a PostgreSQL store").url
    }

    /// `distlock` with this store in `DISTLOCK_DB` and no owner inherited from the test's
    /// environment.
    pub fn cmd(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.env("DISTLOCK_DB", &self.url)
            .env_remove("DISTLOCK_OWNER");
        cmd
    }

    /// The same, as a `std::process::Command` for tests that spawn and signal processes.
    pub fn std_cmd(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(BIN);
        cmd.env("DISTLOCK_DB", &self.url)
            .env_remove("DISTLOCK_OWNER");
        cmd
    }

    /// The SQLite file, for tests that inspect it.
    pub fn path(&self) -> &Path {
        assert_eq!(self.kind, Kind::Sqlite, "only SQLite stores have a file");
        Path::new(&self.url)
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
                "distlock {args:?}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            state.push_str(std::str::from_utf8(&out.stdout).expect("utf-8 stdout"));
        }
        state
    }

    /// Runs `distlock ARGS…`, checks the exit code, and parses the one JSON line on stdout.
    pub fn json(&self, args: &[&str], code: i32) -> Value {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "distlock {args:?}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        parse_line(&out.stdout)
    }
}

/// Parses stdout that must be exactly one JSON object on one line.
pub fn parse_line(stdout: &[u8]) -> Value {
    let text = std::str::from_utf8(stdout).expect("utf-8 stdout");
    assert!(
        text.ends_with('\n') && text.matches('\n').count() == 1,
        "expected exactly one line, got {text:?}"
    );
    let value: Value = serde_json::from_str(text).expect("valid JSON");
    assert!(value.is_object(), "expected an object, got {value}");
    value
}

/// Checks a usage error (exit 64): a message on stderr, nothing on stdout.
pub fn assert_usage_error(out: &Output, what: &dyn std::fmt::Debug) {
    assert_eq!(
        out.status.code(),
        Some(64),
        "{what:?} must be a usage error\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "{what:?}: a usage error prints nothing on stdout"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).trim().is_empty(),
        "{what:?}: a usage error explains itself on stderr"
    );
}

/// Checks a store error (exit 74): exactly one line `distlock: …` on stderr, nothing on stdout.
/// Returns that line.
pub fn assert_store_error(out: &Output, what: &dyn std::fmt::Debug) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(74),
        "{what:?} must be a store error\nstdout: {}\nstderr: {stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "{what:?}: a store error prints nothing on stdout"
    );
    assert!(
        stderr.starts_with("distlock: ") && stderr.ends_with('\n') && stderr.lines().count() == 1,
        "{what:?}: a store error is one line `distlock: …` on stderr, got {stderr:?}"
    );
    stderr
}

/// Checks that `text` is an RFC 3339 UTC time with milliseconds (`2026-11-30T04:08:52.123Z`)
/// and returns it as milliseconds since the Unix epoch.
pub fn timestamp_millis(text: &str) -> i64 {
    let shape = text.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        10 => b == b'T',
        13 | 16 => b == b':',
        19 => b == b'.',
        23 => b == b'Z',
        _ => b.is_ascii_digit(),
    });
    assert!(
        text.len() == 24 && shape,
        "{text:?} is not RFC 3339 UTC with milliseconds"
    );
    let time = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    let since_epoch = time
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a time after 1970");
    i64::try_from(since_epoch.as_millis()).expect("a time in range")
}

/// The test's own clock, in milliseconds since the Unix epoch.
pub fn now_millis() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    i64::try_from(since_epoch.as_millis()).expect("a time in range")
}

/// Runs `test` against a fresh SQLite store, then against a fresh PostgreSQL database when
/// `DISTLOCK_TEST_PG_URL` is set (and says so on stderr when it is not).
pub fn each_store(test: impl Fn(&Db)) {
    test(&Db::sqlite());
    if let Some(db) = Db::postgres() {
        test(&db);
    }
}

/// A database created for one test on the suite's PostgreSQL server, dropped afterwards.
struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    fn create(admin: &str) -> PgDatabase {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!(
            "distlock_test_{}_{n}_{:08x}",
            std::process::id(),
            fastrand::u32(..)
        );
        let mut client = postgres::Client::connect(admin, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the test server DISTLOCK_TEST_PG_URL: {e}"));
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create a test database");
        // Same server and credentials, another database.
        let (base, query) = admin.split_once('?').unwrap_or((admin, ""));
        let (server, _) = base.rsplit_once('/').expect("a URL with a database name");
        let url = if query.is_empty() {
            format!("{server}/{name}")
        } else {
            format!("{server}/{name}?{query}")
        };
        PgDatabase {
            admin: admin.to_owned(),
            name,
            url,
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = client.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
