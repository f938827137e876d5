//! The shell completions in `completions/` and the man pages in `man/` are generated from the
//! clap definition and committed. These tests regenerate them and compare byte for byte, so they
//! can never drift from the CLI; `DISTLOCK_BLESS=1 cargo test --test generated` rewrites them.
//! They also check that the files work: bash completes from the script, groff renders the pages
//! without a warning.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use clap::CommandFactory;
use clap_complete::Shell;
use distlock::cli::Cli;
use roff::{Roff, bold, italic, roman};

const BLESS: &str = "DISTLOCK_BLESS";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compares `content` with the committed file at `relative`, or rewrites it when blessing.
fn check(relative: &str, content: &[u8], stale: &mut Vec<String>) {
    let path = root().join(relative);
    if std::env::var_os(BLESS).is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent folder")).expect("create folder");
        std::fs::write(&path, content).expect("write generated file");
        return;
    }
    match std::fs::read(&path) {
        Ok(committed) if committed == content => {}
        _ => stale.push(relative.to_owned()),
    }
}

fn report(stale: &[String]) {
    assert!(
        stale.is_empty(),
        "generated files are out of date: {stale:?}\nrefresh them with: \
         {BLESS}=1 cargo test --test generated"
    );
}

fn completion_files() -> Vec<(&'static str, Shell)> {
    vec![
        ("completions/distlock.bash", Shell::Bash),
        ("completions/_distlock", Shell::Zsh),
        ("completions/distlock.fish", Shell::Fish),
        ("completions/distlock.elv", Shell::Elvish),
        ("completions/_distlock.ps1", Shell::PowerShell),
    ]
}

fn completion(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "distlock", &mut out);
    out
}

#[test]
fn completions_match_the_cli() {
    let mut stale = Vec::new();
    for (file, shell) in completion_files() {
        check(file, &completion(shell), &mut stale);
    }
    report(&stale);
}

#[test]
fn man_pages_match_the_cli() {
    let mut stale = Vec::new();
    for (file, page) in man_pages() {
        check(&file, &page, &mut stale);
    }
    report(&stale);
}

/// Asks bash, after sourcing the completion script, what it offers for `line`.
fn bash_completes(line: &str) -> Vec<String> {
    // The freshly generated script (the drift test pins it to the committed one), so blessing
    // in parallel cannot race with this test.
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), completion(Shell::Bash)).expect("write completion");
    let words: Vec<&str> = line.split(' ').collect();
    let script = format!(
        "source {}\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE='{line}'\nCOMP_POINT=${{#COMP_LINE}}\n\
         _distlock distlock '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file.path().display(),
        words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        words.len() - 1,
        words.last().expect("a word"),
        words
            .get(words.len().wrapping_sub(2))
            .copied()
            .unwrap_or(""),
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .output()
        .expect("run bash");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "bash failed on {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_subcommands_and_flags() {
    let subcommands = bash_completes("distlock ");
    for expected in [
        "acquire", "status", "release", "renew", "run", "list", "log", "gc",
    ] {
        assert!(
            subcommands.iter().any(|s| s == expected),
            "{expected} missing from {subcommands:?}"
        );
    }
    assert_eq!(bash_completes("distlock ac"), ["acquire"]);
    let run_flags = bash_completes("distlock run --");
    for expected in [
        "--resource",
        "--ttl",
        "--wait",
        "--conflict-exit-code",
        "--kill-after",
    ] {
        assert!(
            run_flags.iter().any(|s| s == expected),
            "{expected} missing from {run_flags:?}"
        );
    }
    assert_eq!(bash_completes("distlock --format "), ["json", "text"]);
}

#[test]
fn man_pages_render_without_warnings() {
    for (file, _) in man_pages() {
        let path = root().join(&file);
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .arg(&path)
            .output()
            .expect("run groff (Debian package groff-base)");
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && warnings.is_empty(),
            "{file}: {warnings}"
        );
    }
}

#[test]
fn distlock_help_fits_a_screen_and_run_help_shows_cron() {
    let help = Cli::command().render_help().to_string();
    assert!(
        help.lines().count() <= 40,
        "`distlock --help` is {} lines",
        help.lines().count()
    );
    let run_help = Cli::command()
        .find_subcommand_mut("run")
        .expect("a run subcommand")
        .render_long_help()
        .to_string();
    assert!(run_help.contains("*/5 * * * *"), "{run_help}");
}

/// Every man page: `distlock.1` and one per subcommand.
fn man_pages() -> Vec<(String, Vec<u8>)> {
    let cmd = Cli::command();
    let mut pages = vec![("man/distlock.1".to_owned(), main_page(&cmd))];
    for sub in cmd.get_subcommands() {
        let name = sub.get_name();
        pages.push((format!("man/distlock-{name}.1"), sub_page(&cmd, sub)));
    }
    pages
}

fn render(man: &clap_mangen::Man, cmd: &clap::Command, extra: &Roff, subcommands: bool) -> Vec<u8> {
    let mut out = Vec::new();
    man.render_title(&mut out).expect("render");
    man.render_name_section(&mut out).expect("render");
    man.render_synopsis_section(&mut out).expect("render");
    man.render_description_section(&mut out).expect("render");
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out).expect("render");
    }
    if subcommands {
        man.render_subcommands_section(&mut out).expect("render");
    }
    extra.to_writer(&mut out).expect("render");
    out
}

fn main_page(cmd: &clap::Command) -> Vec<u8> {
    let man = clap_mangen::Man::new(cmd.clone())
        .date("")
        .source("distlock");
    let mut extra = Roff::new();
    exit_status(&mut extra, true);
    environment(&mut extra, true);
    files(&mut extra);
    examples(
        &mut extra,
        &[
            (
                "Take a lock, look at it, give it back:",
                "distlock acquire payment:42 --owner worker-1 --ttl 30s\n\
                 distlock status payment:42\n\
                 distlock release payment:42 --owner worker-1",
            ),
            (
                "Run a backup under a lock from cron, skipping quietly while one still runs:",
                "*/5 * * * * distlock run --resource backup --ttl 2m --conflict-exit-code 0 -- /usr/local/bin/backup.sh",
            ),
            (
                "Share locks between hosts through PostgreSQL:",
                "DISTLOCK_DB=postgresql://distlock@db.internal/ops distlock run --resource report -- ./report.sh",
            ),
        ],
    );
    see_also(&mut extra, cmd, None);
    render(&man, cmd, &extra, true)
}

fn sub_page(parent: &clap::Command, sub: &clap::Command) -> Vec<u8> {
    let name = sub.get_name();
    let full = format!("distlock-{name}");
    // clap names are 'static; a test may leak a few short strings.
    let leaked: &'static str = Box::leak(full.clone().into_boxed_str());
    let mut sub = sub
        .clone()
        .name(leaked)
        .bin_name(format!("distlock {name}"));
    // Global options belong to every subcommand's synopsis and options.
    for arg in parent.get_arguments().filter(|a| a.is_global_set()) {
        sub = sub.arg(arg.clone());
    }
    let man = clap_mangen::Man::new(sub.clone())
        .title(full.to_uppercase())
        .date("")
        .source("distlock");
    let mut extra = Roff::new();
    let is_run = name == "run";
    exit_status(&mut extra, is_run);
    environment(&mut extra, is_run);
    files(&mut extra);
    let example = match name {
        "acquire" => "distlock acquire payment:42 --owner worker-1 --ttl 30s --wait 10s",
        "status" => "distlock status payment:42 && echo held",
        "release" => "distlock release payment:42 --owner worker-1",
        "renew" => "distlock renew payment:42 --owner worker-1 --ttl 30s",
        "run" => {
            "# cron: every 5 minutes, skip quietly while the previous run holds the lock\n\
                  */5 * * * * distlock run --resource backup --ttl 2m --conflict-exit-code 0 -- /usr/local/bin/backup.sh\n\
                  # wait up to 30 minutes for the deploy lock\n\
                  distlock run --resource deploy --ttl 5m --wait 30m -- ./deploy.sh production"
        }
        "list" => "distlock --format text list --prefix payment:",
        "log" => "distlock log deploy --since 1d --limit 20",
        "gc" => "distlock gc --keep-history 7d",
        _ => "",
    };
    examples(&mut extra, &[("", example)]);
    see_also(&mut extra, parent, Some(name));
    render(&man, &sub, &extra, false)
}

fn exit_status(roff: &mut Roff, with_run: bool) {
    roff.control("SH", ["EXIT STATUS"]);
    let rows: &[(&str, &str)] = &[
        (
            "0",
            "done: acquired, renewed, released; status: the lock is held",
        ),
        (
            "1",
            "not held: status of a free or expired lock; release or renew of a missing or expired lock",
        ),
        (
            "64",
            "usage: bad arguments or invalid values; nothing was changed",
        ),
        (
            "74",
            "store error: the database cannot be opened, read or written, is corrupt, has a newer schema, or stayed busy; PostgreSQL unreachable",
        ),
        (
            "75",
            "busy: a live lock is held by another owner (also when --wait runs out)",
        ),
        (
            "77",
            "forbidden: release or renew of a live lock held by another owner",
        ),
    ];
    for (code, meaning) in rows {
        roff.control("TP", [])
            .text([bold(*code)])
            .text([roman(*meaning)]);
    }
    if with_run {
        roff.control("PP", []).text([roman(
            "run exits with its command's status, or 128+N if the command died of signal N, and also:",
        )]);
        for (code, meaning) in [
            (
                "75",
                "busy (or the --conflict-exit-code value); the command was not started",
            ),
            ("124", "the lease was lost; the command was stopped"),
            ("126", "the command cannot be executed"),
            ("127", "the command was not found"),
        ] {
            roff.control("TP", [])
                .text([bold(code)])
                .text([roman(meaning)]);
        }
    }
}

fn environment(roff: &mut Roff, with_run: bool) {
    roff.control("SH", ["ENVIRONMENT"]);
    let mut rows = vec![
        (
            "DISTLOCK_DB",
            "The store, as --db: a SQLite file path or a postgres:// URL. Keeps a password out of the process list.",
        ),
        (
            "DISTLOCK_OWNER",
            "The owner for acquire, release and renew, as --owner. run never reads it.",
        ),
        (
            "PGPASSWORD",
            "The PostgreSQL password when the URL has none.",
        ),
        (
            "XDG_STATE_HOME, HOME",
            "Locate the default database (see FILES).",
        ),
    ];
    if with_run {
        rows.push(("DISTLOCK_RESOURCE, DISTLOCK_OWNER, DISTLOCK_FENCE, DISTLOCK_DB", "Given by run to its command: the resource, the owner, the fencing token of this tenure, and the store."));
    }
    for (name, meaning) in rows {
        roff.control("TP", [])
            .text([bold(name)])
            .text([roman(meaning)]);
    }
}

fn files(roff: &mut Roff) {
    roff.control("SH", ["FILES"]);
    roff.control("TP", [])
        .text([italic("$XDG_STATE_HOME/distlock/locks.db")])
        .text([roman(
            "The default database; without XDG_STATE_HOME, ~/.local/state/distlock/locks.db. Missing folders are created.",
        )]);
}

fn examples(roff: &mut Roff, examples: &[(&str, &str)]) {
    roff.control("SH", ["EXAMPLES"]);
    for (what, command) in examples {
        if !what.is_empty() {
            roff.control("PP", []).text([roman(*what)]);
        }
        roff.control("PP", [])
            .control("nf", [])
            .control("RS", ["4"]);
        for line in command.lines() {
            roff.text([roman(line)]);
        }
        roff.control("RE", []).control("fi", []);
    }
}

fn see_also(roff: &mut Roff, parent: &clap::Command, except: Option<&str>) {
    roff.control("SH", ["SEE ALSO"]);
    let mut refs = String::new();
    if except.is_some() {
        refs.push_str("distlock(1), ");
    }
    for sub in parent.get_subcommands().map(clap::Command::get_name) {
        if Some(sub) != except {
            let _ = write!(refs, "distlock-{sub}(1), ");
        }
    }
    refs.push_str("flock(1)");
    roff.text([roman(refs)]);
}

#[test]
fn every_man_page_carries_the_contract_sections() {
    for (file, page) in man_pages() {
        let text = String::from_utf8(page).expect("utf-8");
        for section in [
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "EXAMPLES",
            "DISTLOCK_DB",
        ] {
            assert!(text.contains(section), "{file} lacks {section}");
        }
    }
}
