//! The command line's front door: what `--db` names is never guessed, `--help` never shows a
//! secret, an answer that cannot be written is an error, and what distlock echoes or prints
//! cannot drive a terminal (contract, "Commands" and "Validation"). And what it does to the
//! file `--db` names: the read-only commands read (an old store as it is, as a user who may
//! only read it) and write nothing; commands that change nothing create nothing; another
//! application's file is left byte for byte; store errors name the path and the cause; the
//! default store's folders are the user's own (0700).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::common::files::names_in;
use crate::common::output::{assert_store_error, assert_usage_error, now_millis, parse_line};
use crate::common::process::{BIN, describe, distlock, isolated, wait_until};
use crate::common::require::{require, runs};
use crate::common::store::{Db, distlock_at, each_store};

#[test]
fn help_never_shows_the_value_of_an_environment_variable() {
    let secret_db = "postgresql://distlock:S3cret@db.example/ops";
    let env = [
        ("DISTLOCK_DB", secret_db),
        ("DISTLOCK_OWNER", "owner-T0ken"),
    ];
    let pages: [&[&str]; 12] = [
        &["--help"],
        &["-h"],
        &["acquire", "--help"],
        &["status", "--help"],
        &["release", "--help"],
        &["renew", "--help"],
        &["run", "--help"],
        &["list", "--help"],
        &["log", "--help"],
        &["gc", "--help"],
        &["break", "--help"],
        &["help", "acquire"],
    ];
    for args in pages {
        let out = distlock()
            .envs(env)
            .args(args)
            .output()
            .expect("distlock --help");
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for secret in ["S3cret", "db.example", "owner-T0ken"] {
            assert!(!text.contains(secret), "{args:?} shows {secret:?}:\n{text}");
        }
    }
    // A usage error's usage line neither shows it nor makes --db look required.
    let out = distlock()
        .envs(env)
        .arg("status")
        .output()
        .expect("distlock status");
    assert_usage_error(&out, &"status without a resource");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("S3cret") && !text.contains("--db <"),
        "{text}"
    );
    // The variables are named, so a user knows they exist.
    let out = distlock()
        .args(["acquire", "--help"])
        .output()
        .expect("help");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("DISTLOCK_DB") && text.contains("DISTLOCK_OWNER"),
        "{text}"
    );
}

#[test]
fn a_mistyped_or_foreign_url_is_refused_and_creates_nothing() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let typos = [
        "postgress://distlock:pw@db/ops",
        "postgres:/x",
        "mysql://x/y",
        "sqlite:///tmp/x.db",
        "Mysql:/x",
        "redis://host:6379",
        "file:/tmp/locks.db",
    ];
    for db in typos {
        for args in [
            &["acquire", "r", "--owner", "o", "--ttl", "30"][..],
            &["status", "r"],
            &["run", "--resource", "r", "--", "true"],
        ] {
            let out = distlock_at(db)
                .args(args)
                .current_dir(scratch.path())
                .output()
                .expect("distlock");
            assert_usage_error(&out, &(db, args));
            let text = String::from_utf8_lossy(&out.stderr);
            assert!(
                (text.contains("postgres://") || text.contains("PostgreSQL URL"))
                    && !text.contains("pw@"),
                "{db}: the message names the known schemes and hides the URL: {text}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(scratch.path()).expect("ls").collect();
    assert!(left.is_empty(), "files were created: {left:?}");
    // A path with a colon is still a path, written ./a:b, and schemes are case-insensitive.
    let out = distlock_at("./a:b.db")
        .args(["acquire", "r", "--owner", "o", "--ttl", "30"])
        .current_dir(scratch.path())
        .output()
        .expect("distlock");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(scratch.path().join("a:b.db").exists());
}

#[test]
fn a_bad_postgresql_url_names_the_bad_parameter_and_never_the_password() {
    for (url, word) in [
        (
            "postgres://u:Pw1@h/db?connect_timeout=abc",
            "connect_timeout",
        ),
        ("postgres://u:Pw1@h/db?nosuchoption=1", "nosuchoption"),
        ("postgres://u:Pw1@h/db?sslmode=bogus", "sslmode"),
    ] {
        let out = distlock_at(url)
            .args(["status", "r"])
            .output()
            .expect("distlock");
        assert_usage_error(&out, &url);
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains(word) && !text.contains("Pw1"),
            "{url}: {text}"
        );
    }
}

#[test]
fn upper_case_postgres_schemes_select_postgresql() {
    let Some(db) = Db::postgres() else { return };
    let upper = db.url.replacen("postgres://", "POSTGRES://", 1);
    let out = distlock_at(&upper)
        .args(["acquire", "r", "--owner", "o", "--ttl", "30"])
        .output()
        .expect("distlock");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(db.status("r").0, 0, "the lock is in PostgreSQL");
}

#[test]
fn an_empty_distlock_db_counts_as_unset_and_a_blank_db_is_refused() {
    let home = tempfile::tempdir().expect("temp dir");
    let home_path = home.path().to_str().expect("utf-8");
    let env = [
        ("DISTLOCK_DB", ""),
        ("HOME", home_path),
        ("XDG_STATE_HOME", ""),
    ];
    let out = distlock()
        .envs(env)
        .args(["acquire", "r", "--owner", "o", "--ttl", "30"])
        .output()
        .expect("distlock");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(home.path().join(".local/state/distlock/locks.db").exists());
    for blank in [" ", "\t"] {
        let out = distlock()
            .args(["--db", blank, "release", "r", "--owner", "o"])
            .current_dir(home.path())
            .output()
            .expect("distlock");
        assert_usage_error(&out, &blank);
        assert!(!home.path().join(blank).exists());
    }
    // A relative HOME is said to be one, not "not set".
    let out = distlock()
        .envs([("HOME", "relative/home"), ("XDG_STATE_HOME", "")])
        .args(["status", "r"])
        .output()
        .expect("distlock");
    assert_usage_error(&out, &"relative HOME");
    assert!(String::from_utf8_lossy(&out.stderr).contains("HOME is not an absolute path"));
}

#[test]
fn an_answer_that_cannot_be_written_is_a_store_error() {
    each_store(|db| {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = db
            .std_cmd()
            .args(["acquire", "r", "--owner", "o", "--ttl", "30"])
            .stdout(full)
            .output()
            .expect("distlock");
        let line = assert_store_error(&out, &"acquire >/dev/full");
        assert!(
            line.contains("stdout") && line.contains("No space left"),
            "{line}"
        );
        // What the command did stands: the lock is taken, as its status says.
        assert_eq!(db.status("r").0, 0);
        // A reader that went away is an error too (`log | head -0`).
        let mut log = db
            .std_cmd()
            .arg("log")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("distlock log");
        drop(log.stdout.take());
        let out = log.wait_with_output().expect("log");
        assert_eq!(out.status.code(), Some(74), "{out:?}");
    });
}

#[test]
fn version_with_arguments_and_negative_durations_are_usage_errors_naming_the_rule() {
    let out = distlock()
        .args(["--version", "extra"])
        .output()
        .expect("distlock");
    assert_usage_error(&out, &"--version extra");
    let out = distlock().arg("--version").output().expect("distlock");
    assert_eq!(out.status.code(), Some(0));
    for (flag, value) in [
        ("--ttl", "-1"),
        ("--ttl", "-30s"),
        ("--wait", "-5"),
        ("--kill-after", "-1s"),
    ] {
        let mut args = vec!["run", "--resource", "r", flag, value];
        args.extend(["--", "true"]);
        let out = distlock()
            .env("DISTLOCK_DB", "/nonexistent/x.db")
            .args(args)
            .output()
            .expect("distlock");
        assert_usage_error(&out, &(flag, value));
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            !text.contains("unexpected argument") && text.contains(flag),
            "{flag} {value}: {text}"
        );
    }
}

#[test]
fn echoed_values_are_short_and_escaped() {
    let long = "x".repeat(100_000);
    let hostile = "evil\u{1b}]0;pwned\u{7}\u{1b}[2J";
    for value in [long.as_str(), hostile, "c1\u{9b}31m"] {
        let out = distlock()
            .env("DISTLOCK_DB", "/nonexistent/x.db")
            .args(["acquire", value, "--owner", "o", "--ttl", "30"])
            .output()
            .expect("distlock");
        assert_usage_error(&out, &"a hostile resource");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(text.len() < 1000, "{} bytes of error", text.len());
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "raw control characters reach the terminal: {text:?}"
        );
    }
}

#[test]
fn text_output_escapes_direction_controls() {
    each_store(|db| {
        let name = "invoice\u{202e}fdp.exe";
        let out = db
            .std_cmd()
            .args([
                "--format", "text", "acquire", name, "--owner", "o", "--ttl", "30",
            ])
            .output()
            .expect("distlock");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("invoice\\u{202e}fdp.exe"), "{text}");
        assert!(!text.contains('\u{202e}'), "{text}");
        // JSON keeps the name exactly: it is data, not a terminal line.
        let json = parse_line(
            &db.std_cmd()
                .args(["status", name])
                .output()
                .expect("status")
                .stdout,
        );
        assert_eq!(json["lock"]["resource"], name);
    });
}

#[test]
fn c1_control_characters_are_refused_in_names_and_notes() {
    for c in ['\u{80}', '\u{85}', '\u{9b}', '\u{9f}'] {
        let name = format!("a{c}b");
        for args in [
            vec!["acquire", name.as_str(), "--owner", "o", "--ttl", "30"],
            vec!["acquire", "r", "--owner", name.as_str(), "--ttl", "30"],
            vec![
                "acquire",
                "r",
                "--owner",
                "o",
                "--ttl",
                "30",
                "--note",
                name.as_str(),
            ],
        ] {
            let out = distlock()
                .env("DISTLOCK_DB", "/nonexistent/x.db")
                .args(&args)
                .output()
                .expect("distlock");
            assert_usage_error(&out, &args);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Read-only means read-only; a file that is not distlock's is never touched
// ---------------------------------------------------------------------------------------------

/// Every command, as a user would type it on a store that holds a lock on `deploy`.
const EVERY_COMMAND: [&[&str]; 9] = [
    &["status", "deploy"],
    &["list"],
    &["log"],
    &["acquire", "deploy", "--owner", "o", "--ttl", "30"],
    &["release", "deploy", "--owner", "o"],
    &["renew", "deploy", "--owner", "o", "--ttl", "30"],
    &["break", "deploy", "--reason", "test"],
    &["gc"],
    &["run", "--resource", "deploy", "--", "true"],
];

/// The read-only commands.
const READS: [&[&str]; 3] = [&["status", "deploy"], &["list"], &["log"]];

/// A copy of the fixture store of schema `version` (1 or 2, made by that distlock) at `path`,
/// alone in its folder, its year-long leases moved forward so that they are live whenever the
/// test runs (a plain UPDATE: the copy keeps its version and has no `-wal`/`-shm` after it).
fn old_store(version: i64, path: &Path) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("v{version}.db"));
    std::fs::copy(&fixture, path).expect("copy the fixture");
    let conn = Connection::open(path).expect("open the copy");
    let day = 86_400_000_i64;
    conn.execute(
        "UPDATE locks SET expires_at = max(expires_at, ?1) WHERE expires_at - acquired_at > ?2",
        [now_millis() + day, day],
    )
    .expect("move the leases forward");
    drop(conn);
    assert_eq!(user_version(path), version);
}

/// `PRAGMA user_version` of the SQLite file at `path`, read without writing anything.
fn user_version(path: &Path) -> i64 {
    let uri = format!("file:{}?immutable=1", path.display());
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
    Connection::open_with_flags(uri, flags)
        .expect("open read-only")
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version")
}

/// What `status deploy`, `list` and `log` print for the store at `path`, run as `user`
/// (`None`: this test's own); `status` must exit 0 or 1, the others 0.
fn reads(path: &Path, user: Option<&Nobody>) -> Vec<String> {
    READS
        .iter()
        .map(|args| {
            let mut cmd = match user {
                Some(nobody) => nobody.distlock_at(path),
                None => distlock_at(path),
            };
            let out = cmd.args(*args).output().expect("distlock");
            let codes: &[i32] = if args[0] == "status" { &[0, 1] } else { &[0] };
            assert!(
                out.status.code().is_some_and(|code| codes.contains(&code)),
                "{args:?}: {}",
                describe(&out)
            );
            String::from_utf8(out.stdout).expect("utf-8")
        })
        .collect()
}

/// distlock run as another user (`nobody`, uid 65534) with no supplementary groups, by
/// `setpriv` (util-linux).
struct Nobody;

impl Nobody {
    /// `None` where the test cannot switch users (not root, or no `setpriv`): skipped by the
    /// gate (tool `ROOT`).
    fn here(what: &str) -> Option<Nobody> {
        let can = if nix::unistd::Uid::effective().is_root() {
            runs("setpriv", &["--version"])
        } else {
            Err("switching to another user needs root".to_owned())
        };
        require("ROOT", what, can).map(|()| Nobody)
    }

    /// [`distlock_at`]` PATH`, as nobody.
    fn distlock_at(&self, path: &Path) -> Command {
        let mut cmd = isolated("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(BIN)
            .arg("--db")
            .arg(path);
        cmd
    }
}

/// A scratch folder that every user may enter and read, but only this test's user may write.
fn shared_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

#[test]
fn read_only_commands_read_an_old_store_as_it_is_and_change_nothing() {
    // Upgraded by a newer binary's `status` in one crontab, a v1 store would be refused (74) by
    // every older binary in the others. Read as it is, it answers as an upgraded store would,
    // and stays as it was.
    let nobody = Nobody::here("reading an old store as another user");
    for version in [1, 2] {
        let dir = shared_folder();
        let path = dir.path().join("locks.db");
        old_store(version, &path);
        let before = std::fs::read(&path).expect("read");
        let mut answers = vec![reads(&path, None)];
        if let Some(nobody) = &nobody {
            answers.push(reads(&path, Some(nobody)));
        }
        assert!(
            std::fs::read(&path).expect("read") == before,
            "v{version}: the file changed"
        );
        assert_eq!(names_in(dir.path()), ["locks.db"], "v{version}: files made");
        assert_eq!(user_version(&path), version, "v{version}: upgraded");

        // The same store upgraded (by a command that writes) answers the same.
        let upgraded = dir.path().join("upgraded.db");
        old_store(version, &upgraded);
        let out = distlock_at(&upgraded)
            .args(["acquire", "zz", "--owner", "u", "--ttl", "60"])
            .output()
            .expect("acquire");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let after = reads(&upgraded, None);
        let list = parse_line(after[1].as_bytes());
        let mut locks = list["locks"].as_array().expect("locks").clone();
        assert_eq!(
            locks.pop().map(|l| l["resource"].clone()),
            Some("zz".into())
        );
        let mut log: Vec<&str> = after[2].lines().collect();
        assert!(log.pop().is_some_and(|e| e.contains("\"zz\"")), "{log:?}");
        let log: String = log.iter().map(|line| format!("{line}\n")).collect();
        for answer in &answers {
            // `status` and `log` byte for byte; `list` as the same objects (its line without
            // the upgraded store's own lock is not printed by anyone).
            assert_eq!(answer[0], after[0], "v{version} status read as it is");
            assert_eq!(
                parse_line(answer[1].as_bytes()),
                serde_json::json!({ "locks": locks }),
                "v{version} list read as it is"
            );
            assert_eq!(answer[2], log, "v{version} log read as it is");
        }
        assert!(
            parse_line(answers[0][0].as_bytes())["held"] == true,
            "the fixture's deploy lock is live"
        );
    }
}

/// Another application's SQLite file: a table of its own, `user_version` = `version`, in
/// rollback or WAL mode (left without `-wal`/`-shm`, as SQLite's last connection leaves it).
fn foreign_file(path: &Path, version: i64, wal: bool, tables: &str) {
    let conn = Connection::open(path).expect("create");
    conn.execute_batch(tables).expect("its tables");
    conn.pragma_update(None, "user_version", version)
        .expect("user_version");
    if wal {
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .expect("WAL");
        assert_eq!(mode, "wal");
    }
}

#[test]
fn a_file_of_another_application_is_refused_unchanged_whatever_its_user_version() {
    // The guard goes by the tables, not by user_version, and comes first: a WAL switch (the
    // bytes change, -wal/-shm appear) or any other step before it would touch the file.
    let own_tables = [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO customers (name) VALUES ('keep me');",
        // distlock's names, but not distlock's set of tables.
        "CREATE TABLE locks (resource TEXT PRIMARY KEY, owner TEXT);
         CREATE TABLE history (id INTEGER PRIMARY KEY);",
        // distlock's tables and one more: another application's below version 4; past this
        // build's version, what a newer distlock may well have (refused as newer).
        "CREATE TABLE locks (x); CREATE TABLE fence_counter (x); CREATE TABLE history (x);
         CREATE TABLE resources (x); CREATE TABLE waiters (x); CREATE TABLE extra (x);",
        // No table of its own, but plainly not a new, empty database: a view, an application
        // id, the sequence table an AUTOINCREMENT leaves behind.
        "CREATE VIEW answer AS SELECT 42;",
        "PRAGMA application_id = 1234; CREATE TABLE t (x); DROP TABLE t;",
        "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT);
         INSERT INTO t DEFAULT VALUES; DROP TABLE t;",
    ];
    let marker = tempfile::tempdir().expect("temp dir");
    for version in [0, 1, 2, 3, 99] {
        for wal in [false, true] {
            for tables in own_tables {
                let dir = tempfile::tempdir().expect("temp dir");
                let path = dir.path().join("other.db");
                foreign_file(&path, version, wal, tables);
                let before = std::fs::read(&path).expect("read");
                let what = (version, wal, tables.split('(').next());
                for args in EVERY_COMMAND {
                    let out = distlock_at(&path)
                        .args(args)
                        .current_dir(marker.path())
                        .output()
                        .expect("distlock");
                    let line = assert_store_error(&out, &(what, args));
                    let says = if version == 99 && tables.contains("extra") {
                        "newer distlock"
                    } else {
                        "another application"
                    };
                    assert!(
                        line.contains(says) && line.contains("other.db"),
                        "{what:?} {args:?}: {line}"
                    );
                    assert!(
                        std::fs::read(&path).expect("read") == before,
                        "{what:?} {args:?} changed the file"
                    );
                    assert_eq!(
                        names_in(dir.path()),
                        ["other.db"],
                        "{what:?} {args:?} left files"
                    );
                }
            }
        }
    }
    assert!(
        names_in(marker.path()).is_empty(),
        "run started its command"
    );
}

#[test]
fn commands_that_change_nothing_create_nothing() {
    // A mistyped path, or an empty file, holds no lock: each command answers as for an empty
    // store, and neither the schema nor the store and its folders are made.
    let answers: [(&[&str], i32, &str); 7] = [
        (&["status", "r"], 1, r#"{"held":false,"resource":"r"}"#),
        (&["list"], 0, r#"{"locks":[]}"#),
        (&["log"], 0, ""),
        (
            &["release", "r", "--owner", "o"],
            1,
            r#"{"released":false,"resource":"r","reason":"not_found"}"#,
        ),
        (
            &["renew", "r", "--owner", "o", "--ttl", "30"],
            1,
            r#"{"renewed":false,"resource":"r","reason":"not_found"}"#,
        ),
        (
            &["break", "r", "--reason", "stuck"],
            1,
            r#"{"broken":false,"resource":"r","reason":"not_found"}"#,
        ),
        (&["gc"], 0, r#"{"expired_locks":0,"history_events":0}"#),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").expect("an empty file");
    for path in [
        empty.clone(),
        dir.path().join("missing.db"),
        dir.path().join("mistyped/folder/locks.db"),
    ] {
        for (args, code, stdout) in answers {
            let out = distlock_at(&path).args(args).output().expect("distlock");
            let printed = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                (out.status.code(), printed.trim_end()),
                (Some(code), stdout),
                "{} {args:?}: {}",
                path.display(),
                describe(&out)
            );
        }
        assert_eq!(names_in(dir.path()), ["empty.db"], "{}", path.display());
        assert_eq!(std::fs::metadata(&empty).expect("stat").len(), 0);
    }
    // A command that writes makes the store, in the empty file too.
    let out = distlock_at(&empty)
        .args(["acquire", "r", "--owner", "o", "--ttl", "30"])
        .output()
        .expect("acquire");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let version: i64 = Connection::open(&empty)
        .expect("open")
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version");
    assert_eq!(version, 5, "the schema version of this build");
}

/// Checkpoints the WAL of the store at `path` into the database and removes the `-wal` and
/// `-shm` files, as SQLite's last connection does on closing (distlock's keep them).
fn without_wal(path: &Path) {
    let conn = Connection::open(path).expect("open");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    drop(conn);
    let dir = path.parent().expect("a folder");
    let name = path.file_name().expect("a name").to_string_lossy();
    assert_eq!(names_in(dir), [name.as_ref()], "the WAL files are gone");
}

#[test]
fn a_user_who_may_only_read_the_store_reads_it_also_once_its_wal_is_gone() {
    // Others may read a store (the README says so), also once its -wal/-shm files are gone and
    // they may not create them: "attempt to write a readonly database" is no answer for them.
    let Some(nobody) = Nobody::here("reading a store as a user who may only read it") else {
        return;
    };
    let dir = shared_folder();
    let path = dir.path().join("locks.db");
    let held = |args: &[&str]| {
        let out = distlock_at(&path).args(args).output().expect("distlock");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
        parse_line(&out.stdout)["lock"].clone()
    };
    let status_as_nobody = |resource: &str| {
        let out = nobody
            .distlock_at(&path)
            .args(["status", resource])
            .output()
            .expect("status");
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "status {resource} as nobody: {}",
            describe(&out)
        );
        parse_line(&out.stdout)
    };
    let first = held(&["acquire", "first", "--owner", "o", "--ttl", "600"]);

    // The -wal and -shm files are there (distlock keeps them): read through them.
    assert_eq!(
        names_in(dir.path()),
        ["locks.db", "locks.db-shm", "locks.db-wal"]
    );
    assert_eq!(status_as_nobody("first")["lock"], first);

    // Gone: the database file holds everything, and is read as it is.
    without_wal(&path);
    let before = std::fs::read(&path).expect("read");
    assert_eq!(status_as_nobody("first")["lock"], first);
    reads(&path, Some(&nobody));
    assert_eq!(names_in(dir.path()), ["locks.db"]);
    assert!(std::fs::read(&path).expect("read") == before);

    // A writer arrives and stays (a run holds the store open): its commits, in its WAL, are
    // seen at once.
    let mut guard = distlock_at(&path)
        .args(["run", "--resource", "busy", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .expect("run");
    wait_until(Duration::from_secs(20), "run takes its lock", || {
        status_as_nobody("busy")["held"] == true
    });
    let second = held(&["acquire", "second", "--owner", "o", "--ttl", "600"]);
    assert_eq!(status_as_nobody("second")["lock"], second);
    let _ = guard.kill();
    let _ = guard.wait();

    // Commits in a WAL whose index is gone cannot be read by this user: 74, saying why.
    std::fs::remove_file(dir.path().join("locks.db-shm")).expect("remove -shm");
    let out = nobody
        .distlock_at(&path)
        .args(["status", "second"])
        .output()
        .expect("status");
    let line = assert_store_error(&out, &"a WAL without its index");
    assert!(
        line.contains(&path.display().to_string()) && line.contains("-shm"),
        "{line}"
    );
    assert!(!dir.path().join("locks.db-shm").exists());
    // Its owner's next command makes it again, and the user reads on.
    assert_eq!(reads(&path, None).len(), 3);
    assert_eq!(status_as_nobody("second")["lock"], second);
}

// ---------------------------------------------------------------------------------------------
// Store errors name the path and the cause
// ---------------------------------------------------------------------------------------------

/// Asserts that `out` is a store error whose line names `path` and says `cause`.
fn assert_says(out: &std::process::Output, path: &Path, cause: &str, what: &dyn std::fmt::Debug) {
    let line = assert_store_error(out, what);
    assert!(
        line.contains(&path.display().to_string()) && line.contains(cause),
        "{what:?}: the error must name {} and say {cause:?}: {line}",
        path.display()
    );
}

#[test]
fn store_errors_name_the_path_and_the_cause_in_words() {
    // SQLite says "unable to open database file" for a directory and a missing permission
    // alike, and "attempt to write a readonly database" without the path: the message names
    // the path and the cause a person can act on.
    let dir = shared_folder();
    let folder = dir.path().join("a-folder");
    std::fs::create_dir(&folder).expect("mkdir");
    for args in EVERY_COMMAND {
        let out = distlock_at(&folder).args(args).output().expect("distlock");
        assert_says(&out, &folder, "is a directory", &args);
    }
    let Some(nobody) = Nobody::here("store errors of another user") else {
        return;
    };
    let path = dir.path().join("locks.db");
    let out = distlock_at(&path)
        .args(["acquire", "deploy", "--owner", "o", "--ttl", "600"])
        .output()
        .expect("acquire");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // Readable by all (0644, as made under umask 022): a write is refused as read-only (an
    // acquire that finds the lock busy writes nothing, and answers 75).
    let writes: [&[&str]; 7] = [
        &["acquire", "deploy", "--owner", "o", "--ttl", "30"],
        &["acquire", "free", "--owner", "o", "--ttl", "30"],
        &["release", "deploy", "--owner", "o"],
        &["renew", "deploy", "--owner", "o", "--ttl", "30"],
        &["break", "deploy", "--reason", "test"],
        &["gc"],
        &["run", "--resource", "free", "--", "true"],
    ];
    for args in writes {
        let out = nobody
            .distlock_at(&path)
            .args(args)
            .output()
            .expect("distlock");
        assert_says(&out, &path, "read-only (permission denied", &args);
    }
    // The owner's alone (0600): nothing is allowed.
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", path.display());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    for args in EVERY_COMMAND {
        let out = nobody
            .distlock_at(&path)
            .args(args)
            .output()
            .expect("distlock");
        assert_says(&out, &path, "permission denied", &args);
    }
}

#[test]
fn a_store_that_stays_busy_is_reported_with_its_path_and_the_busy_timeout() {
    // SQLite's "database is locked" names neither the file nor how long it waited.
    let db = Db::sqlite();
    db.json(&["acquire", "held", "--owner", "o", "--ttl", "600"], 0);
    let holder = Connection::open(db.path()).expect("open");
    holder
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    let start = std::time::Instant::now();
    let writers: Vec<std::process::Child> = [
        &["acquire", "new", "--owner", "o", "--ttl", "30"][..],
        &["release", "held", "--owner", "o"],
    ]
    .iter()
    .map(|args| {
        distlock_at(db.path())
            .args(*args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    })
    .collect();
    // Readers are not held up by a writer (WAL).
    let out = db.run(&["status", "held"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    for writer in writers {
        let out = writer.wait_with_output().expect("wait");
        assert_says(&out, db.path(), "busy for 5 s", &"a writer behind the lock");
    }
    assert!(
        start.elapsed() >= Duration::from_secs(5),
        "gave up after {:?}",
        start.elapsed()
    );
    holder.execute_batch("ROLLBACK").expect("let go");
    assert_eq!(db.status("held").0, 0, "nothing changed");
}

// ---------------------------------------------------------------------------------------------
// The default store's folders
// ---------------------------------------------------------------------------------------------

/// The permission bits of `path`.
fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

#[test]
fn the_default_stores_folders_are_private_and_a_named_paths_follow_the_umask() {
    // XDG: folders under $XDG_STATE_HOME (default ~/.local/state) are made 0700.
    let scratch = tempfile::tempdir().expect("temp dir");
    let home = scratch.path().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    let state = scratch.path().join("state");
    let under_022 = |env: &[(&str, &Path)], args: &[&str]| {
        let mut cmd = isolated("sh");
        cmd.args(["-c", r#"umask 022; exec "$0" "$@""#, BIN])
            .args(args)
            .env_remove("XDG_STATE_HOME");
        for (name, value) in env {
            cmd.env(name, value);
        }
        cmd.output().expect("distlock")
    };
    let acquire = ["acquire", "r", "--owner", "o", "--ttl", "30"];
    for (env, made) in [
        (
            vec![("HOME", home.as_path())],
            vec![
                home.join(".local"),
                home.join(".local/state"),
                home.join(".local/state/distlock"),
            ],
        ),
        (
            vec![
                ("HOME", home.as_path()),
                ("XDG_STATE_HOME", state.as_path()),
            ],
            vec![state.clone(), state.join("distlock")],
        ),
    ] {
        // Only a command that writes makes them.
        for args in [
            &["status", "r"][..],
            &["release", "r", "--owner", "o"],
            &["gc"],
        ] {
            under_022(&env, args);
            assert!(!made[0].exists(), "{args:?} made {}", made[0].display());
        }
        let out = under_022(&env, &acquire);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        for folder in &made {
            assert_eq!(mode_of(folder), 0o700, "{}", folder.display());
        }
    }
    // A path the user named: as `mkdir -p` makes folders (a group's store under umask 002
    // needs them so: `reliability::new_store_files_are_group_writable_under_umask_002`).
    let named = scratch.path().join("named/deeper/locks.db");
    let mut args = vec!["--db", named.to_str().expect("utf-8")];
    args.extend(acquire);
    let out = under_022(&[], &args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    for folder in ["named", "named/deeper"] {
        assert_eq!(mode_of(&scratch.path().join(folder)), 0o755, "{folder}");
    }
}

/// Whether the PostgreSQL database behind `db` has a `distlock` schema.
fn has_distlock_schema(db: &Db) -> bool {
    let schemas = db
        .pg_client()
        .query(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = 'distlock'",
            &[],
        )
        .expect("query the catalogue");
    !schemas.is_empty()
}

#[test]
fn reading_commands_never_create_a_postgresql_schema() {
    let Some(db) = Db::postgres() else { return };
    for args in [&["status", "r"][..], &["list"], &["log"], &["log", "r"]] {
        let out = db.std_cmd().args(args).output().expect("distlock");
        let expected = i32::from(args[0] == "status");
        assert_eq!(out.status.code(), Some(expected), "{args:?}: {out:?}");
    }
    assert!(
        !has_distlock_schema(&db),
        "a reading command created the schema"
    );
    // A command that writes creates it, and then the readers read it.
    let out = db
        .std_cmd()
        .args(["acquire", "r", "--owner", "o", "--ttl", "30"])
        .output()
        .expect("distlock");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(db.status("r").0, 0);
}

#[test]
fn help_and_version_that_cannot_be_written_are_store_errors() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["--version"],
        &["-V"],
        &["help", "run"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = distlock()
            .args(args)
            .stdout(full)
            .output()
            .expect("distlock");
        assert_store_error(&out, &args);
    }
}

#[test]
fn commands_that_change_nothing_create_no_postgresql_schema() {
    let Some(db) = Db::postgres() else { return };
    let commands: [(&[&str], i32); 4] = [
        (&["release", "r", "--owner", "o"], 1),
        (&["renew", "r", "--owner", "o", "--ttl", "30"], 1),
        (&["break", "r", "--reason", "stuck"], 1),
        (&["gc"], 0),
    ];
    for (args, code) in commands {
        let out = db.std_cmd().args(args).output().expect("distlock");
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
    }
    assert!(
        !has_distlock_schema(&db),
        "a command that changed nothing made the schema"
    );
}

#[test]
fn special_files_and_url_like_paths_are_never_taken_for_a_store() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let fifo = scratch.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    for special in [fifo.to_str().expect("utf-8"), "/dev/null", "/dev/zero"] {
        for args in [
            &["status", "r"][..],
            &["release", "r", "--owner", "o"],
            &["acquire", "r", "--owner", "o", "--ttl", "30"],
        ] {
            let out = distlock_at(special).args(args).output().expect("distlock");
            let line = assert_store_error(&out, &(special, args));
            assert!(line.contains("not a file"), "{special}: {line}");
        }
    }
    for db in [
        " postgres://u:S3cret@h/x",
        "postgres:u:S3cret@h/x",
        "file:x.db",
        "1a://x",
        "state/",
    ] {
        let out = distlock_at(db)
            .args(["acquire", "r", "--owner", "o", "--ttl", "30"])
            .current_dir(scratch.path())
            .output()
            .expect("distlock");
        assert_usage_error(&out, &db);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("S3cret"));
    }
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["fifo"], "files were made");
}

#[test]
fn a_foreign_database_with_a_hot_rollback_journal_is_left_as_it_is() {
    // Another application's database in rollback mode, its writer killed mid-transaction: the
    // journal is hot, and SQLite's first read would roll it back into the file.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("other.db");
    let writer = r#"
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=DELETE")
c.execute("CREATE TABLE t (x)")
c.execute("PRAGMA cache_size=1")
c.execute("BEGIN")
for _ in range(500):
    c.execute("INSERT INTO t VALUES (randomblob(500))")
os._exit(0)
"#;
    let status = std::process::Command::new("python3")
        .args(["-c", writer])
        .arg(&path)
        .status()
        .expect("python3 (Debian's python3) writes the foreign database");
    assert!(status.success());
    let journal = dir.path().join("other.db-journal");
    let (db_before, journal_before) = (
        std::fs::read(&path).expect("read"),
        std::fs::read(&journal).expect("a hot journal"),
    );
    assert!(!journal_before.is_empty(), "the journal is hot");
    for args in [
        &["acquire", "r", "--owner", "o", "--ttl", "30"][..],
        &["release", "r", "--owner", "o"],
        &["gc"],
        &["status", "r"],
    ] {
        let out = distlock_at(&path).args(args).output().expect("distlock");
        assert_store_error(&out, &args);
        assert!(
            std::fs::read(&path).expect("read") == db_before,
            "{args:?}: file changed"
        );
        assert!(
            std::fs::read(&journal).expect("read") == journal_before,
            "{args:?}: journal changed"
        );
    }
}
