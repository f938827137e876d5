//! The command line's front door: what `--db` names is never guessed, `--help` never shows a
//! secret, an answer that cannot be written is an error, and what distlock echoes or prints
//! cannot drive a terminal (contract, "Commands" and "Validation").

use std::process::Stdio;

use super::common::output::{assert_store_error, assert_usage_error, parse_line};
use super::common::process::BIN;
use super::common::store::{Db, distlock_at, each_store};

/// `distlock ARGS…` with `DISTLOCK_DB`/`DISTLOCK_OWNER` as given (or removed) and no stdin.
fn distlock(env: &[(&str, &str)], args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(args)
        .env_remove("DISTLOCK_DB")
        .env_remove("DISTLOCK_OWNER")
        .stdin(Stdio::null());
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

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
        let out = distlock(&env, args).output().expect("distlock --help");
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for secret in ["S3cret", "db.example", "owner-T0ken"] {
            assert!(!text.contains(secret), "{args:?} shows {secret:?}:\n{text}");
        }
    }
    // A usage error's usage line neither shows it nor makes --db look required.
    let out = distlock(&env, &["status"])
        .output()
        .expect("distlock status");
    assert_usage_error(&out, &"status without a resource");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("S3cret") && !text.contains("--db <"),
        "{text}"
    );
    // The variables are named, so a user knows they exist.
    let out = distlock(&[], &["acquire", "--help"])
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
    let out = distlock(&env, &["acquire", "r", "--owner", "o", "--ttl", "30"])
        .output()
        .expect("distlock");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(home.path().join(".local/state/distlock/locks.db").exists());
    for blank in [" ", "\t"] {
        let out = distlock(&[], &["--db", blank, "release", "r", "--owner", "o"])
            .current_dir(home.path())
            .output()
            .expect("distlock");
        assert_usage_error(&out, &blank);
        assert!(!home.path().join(blank).exists());
    }
    // A relative HOME is said to be one, not "not set".
    let out = distlock(
        &[("HOME", "relative/home"), ("XDG_STATE_HOME", "")],
        &["status", "r"],
    )
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
    let out = distlock(&[], &["--version", "extra"])
        .output()
        .expect("distlock");
    assert_usage_error(&out, &"--version extra");
    let out = distlock(&[], &["--version"]).output().expect("distlock");
    assert_eq!(out.status.code(), Some(0));
    for (flag, value) in [
        ("--ttl", "-1"),
        ("--ttl", "-30s"),
        ("--wait", "-5"),
        ("--kill-after", "-1s"),
    ] {
        let mut args = vec!["run", "--resource", "r", flag, value];
        args.extend(["--", "true"]);
        let out = distlock(&[("DISTLOCK_DB", "/nonexistent/x.db")], &args)
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
        let out = distlock(
            &[("DISTLOCK_DB", "/nonexistent/x.db")],
            &["acquire", value, "--owner", "o", "--ttl", "30"],
        )
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
            let out = distlock(&[("DISTLOCK_DB", "/nonexistent/x.db")], &args)
                .output()
                .expect("distlock");
            assert_usage_error(&out, &args);
        }
    }
}
