//! The shell completions in `completions/` and the man pages in `man/` are generated from the
//! clap definition and committed. These tests regenerate them and compare byte for byte, so they
//! can never drift from the CLI; `DISTLOCK_BLESS=1 cargo test --test generated` rewrites them.
//! They also check that the files work: bash completes from the script, groff renders the pages
//! without a warning.

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

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
    // clap's `help` subcommand has no page of its own (`distlock help X` shows X's help): the
    // list of subcommands leaves it out, as SEE ALSO does.
    let listed = cmd.clone().disable_help_subcommand(true);
    let man = clap_mangen::Man::new(listed.clone())
        .date("")
        .source("distlock");
    let mut extra = Roff::new();
    lock_sets(&mut extra);
    exit_status(&mut extra, None);
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
                "Take the database and the cache together, all or nothing, whatever order other scripts name them in:",
                "distlock run --resource db-primary --resource cache-cluster --wait 10m -- ./migrate-and-flush.sh",
            ),
            (
                "Share locks between hosts through PostgreSQL:",
                "DISTLOCK_DB=postgresql://distlock@db.internal/ops distlock run --resource report -- ./report.sh",
            ),
        ],
    );
    see_also(&mut extra, cmd, None);
    render(&man, &listed, &extra, true)
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
    exit_status(&mut extra, Some(name));
    environment(&mut extra, is_run);
    files(&mut extra);
    let example = match name {
        "acquire" => {
            "distlock acquire payment:42 --owner worker-1 --ttl 30s --wait 10s\n\
             # a lock set: both or neither\n\
             distlock acquire db-primary cache-cluster --owner deploy-812 --ttl 5m"
        }
        "status" => "distlock status payment:42 && echo held",
        "release" => {
            "distlock release payment:42 --owner worker-1\n\
             distlock release db-primary cache-cluster --owner deploy-812"
        }
        "renew" => {
            "distlock renew payment:42 --owner worker-1 --ttl 30s\n\
             distlock renew db-primary cache-cluster --owner deploy-812 --ttl 5m"
        }
        "run" => {
            "# cron: every 5 minutes, skip quietly while the previous run holds the lock\n\
                  */5 * * * * distlock run --resource backup --ttl 2m --conflict-exit-code 0 -- /usr/local/bin/backup.sh\n\
                  # wait up to 30 minutes for the deploy lock\n\
                  distlock run --resource deploy --ttl 5m --wait 30m -- ./deploy.sh production\n\
                  # the database and the cache together, all or nothing (DISTLOCK_FENCES has both fences)\n\
                  distlock run --resource db-primary --resource cache-cluster --wait 10m -- ./migrate-and-flush.sh"
        }
        "list" => "distlock --format text list --prefix payment:",
        "log" => "distlock log deploy --since 1d --limit 20",
        "gc" => "distlock gc --keep-history 7d",
        "serve" => {
            "distlock serve --listen 127.0.0.1:7443 --tls-cert /etc/distlock/server.pem --tls-key /etc/distlock/server.key\n\
             # after replacing both files: new connections get the new certificate\n\
             kill -HUP \"$(pidof distlock)\""
        }
        "break" => "distlock break deploy --reason 'runner lost, job cancelled' --by alice",
        _ => "",
    };
    examples(&mut extra, &[("", example)]);
    see_also(&mut extra, parent, Some(name));
    render(&man, &sub, &extra, false)
}

/// The exit codes of `command` (`None`: the main page, every command), each with its meaning
/// for that command: the contract's "Exit codes" table, per command.
fn exit_codes(command: Option<&str>) -> Vec<(&'static str, &'static str)> {
    const USAGE: (&str, &str) = (
        "64",
        "usage: bad arguments or invalid values; nothing was changed",
    );
    const STORE: (&str, &str) = (
        "74",
        "store error: the store cannot be opened, read or written, is corrupt, is not a distlock \
         store, has a newer schema, or stayed busy past the busy timeout; PostgreSQL unreachable; \
         the answer could not be written to stdout",
    );
    match command {
        Some("acquire") => vec![
            (
                "0",
                "acquired: a new tenure, or the owner's own extended; of a lock set, every member",
            ),
            USAGE,
            STORE,
            (
                "75",
                "busy: a live lock is held by another owner, or by a run with this owner (also when --wait runs out); of a lock set, any member, and no member was taken",
            ),
            (
                "78",
                "mismatch: --shared or --limit N conflicts with how the live holders hold it (of a lock set: any member, and the first such is named); nothing changed",
            ),
        ],
        Some("status") => vec![
            ("0", "the lock is held"),
            ("1", "not held: the lock is free or expired"),
            USAGE,
            STORE,
        ],
        Some("release") => vec![
            ("0", "released; of a lock set, every member"),
            (
                "1",
                "not held: the lock is missing or expired; of a lock set, the first such member, and no member was released",
            ),
            USAGE,
            STORE,
            (
                "77",
                "forbidden: a live lock held by another owner; of a lock set, the first such member, and no member was released",
            ),
        ],
        Some("renew") => vec![
            (
                "0",
                "renewed: the lease now ends --ttl from now; of a lock set, every member's",
            ),
            (
                "1",
                "not held: the lock is missing or expired (an expired lock is never renewed); of a lock set, the first such member, and no member was renewed",
            ),
            USAGE,
            STORE,
            (
                "77",
                "forbidden: a live lock held by another owner; of a lock set, the first such member, and no member was renewed",
            ),
        ],
        Some("break") => vec![
            (
                "0",
                "broken: every live tenure asked for was removed, and the history says who and why",
            ),
            (
                "1",
                "nothing live matched: no live tenure (of --owner, when given)",
            ),
            USAGE,
            STORE,
        ],
        Some("run") => vec![
            (
                "N",
                "the command's own exit status, or 128+N if it died of signal N",
            ),
            (
                "64, 74",
                "as for every command, before the command starts (the lock released)",
            ),
            (
                "75",
                "busy (or the --conflict-exit-code value): another owner, or another run with this owner, holds the lock, or of a lock set any member (also when --wait runs out); the command was not started",
            ),
            (
                "78",
                "mismatch: --shared or --limit N conflicts with how the live holders hold it; the command was not started",
            ),
            (
                "124",
                "distlock stopped the command (SIGTERM, SIGKILL after --kill-after): its lease was lost (the lock, or over a lock set any member, expired and was taken, was released or broken by an operator, the store vanished, renewals failed so long that it could expire, or the job was stopped past its lease), or it ran past --max-runtime",
            ),
            ("126", "the command was found but cannot be executed"),
            (
                "127",
                "the command, or the interpreter its #! line names, was not found",
            ),
        ],
        Some("serve") => vec![
            (
                "0",
                "stopped by SIGTERM or SIGINT: waiting requests answered, the others finished",
            ),
            (
                "64",
                "usage: bad arguments or invalid values, such as an address beyond loopback without tokens, a --listen host name that does not resolve, or --tls-cert and --tls-key files that cannot be read or used; nothing was served",
            ),
            STORE,
        ],
        Some(_) => vec![("0", "done"), USAGE, STORE],
        None => vec![
            (
                "0",
                "done: acquired, renewed, released, broken; status: the lock is held",
            ),
            (
                "1",
                "not held: status of a free or expired lock; release, renew or break of a missing or expired lock",
            ),
            USAGE,
            STORE,
            (
                "75",
                "busy: a live lock is held by another owner (acquire, run; also when --wait runs out)",
            ),
            (
                "77",
                "forbidden: release or renew of a live lock held by another owner",
            ),
            (
                "78",
                "mismatch: acquire or run asked for a mode that conflicts with how the live holders hold the lock; nothing changed",
            ),
            (
                "124, 126, 127",
                "run: the command was stopped by distlock, cannot be executed, was not found (see distlock-run(1)); otherwise run exits with its command's status",
            ),
        ],
    }
}

/// The main page's LOCK SETS section: the contract's "Lock sets", in brief.
fn lock_sets(roff: &mut Roff) {
    roff.control("SH", ["LOCK SETS"]);
    for paragraph in [
        "acquire, renew and release take several resources, and run takes --resource more than once: a lock set. One transaction grants a tenure on every member or changes nothing, so a set is never held in part. The members are sorted and repeats dropped (1 to 64 of them): the order they are listed in does not matter, and two sets listed in opposite orders never deadlock. The mode and note flags apply to every member.",
        "With --wait, a set waits in line on every member at once and holds nothing while it waits. Nobody who comes later overtakes it on any member: the price is that a member that is free meanwhile is kept for it.",
        "renew and release of a set act on every member or on none: if the owner does not hold every member live, nothing changes, and the answer and the exit code are those of the first member, by resource, that failed. run over a set exports DISTLOCK_RESOURCES and DISTLOCK_FENCES, renews the set as one, and stops its command (124) when any member is lost, releasing the rest.",
        "Each member is a tenure of its own, with its own fence and one history event per change; status, list, log and break act on one resource.",
    ] {
        roff.control("PP", []).text([roman(paragraph)]);
    }
}

fn exit_status(roff: &mut Roff, command: Option<&str>) {
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in exit_codes(command) {
        roff.control("TP", [])
            .text([bold(code)])
            .text([roman(meaning)]);
    }
}

fn environment(roff: &mut Roff, with_run: bool) {
    roff.control("SH", ["ENVIRONMENT"]);
    let mut rows = vec![
        (
            "DISTLOCK_DB",
            "The store, as --db: a SQLite file path, a postgres:// URL, or a distlock server's http:// or https:// URL. Keeps a password out of the process list.",
        ),
        (
            "DISTLOCK_TOKEN",
            "The token sent to a distlock server (--db http:// or https://) as Authorization: Bearer. Never read from the URL, never printed; a refused token, or a request outside its resources, exits 77.",
        ),
        (
            "DISTLOCK_CA_CERT",
            "A PEM file of the certificates that a distlock server's https:// certificate must chain to, instead of the system's roots.",
        ),
        (
            "DISTLOCK_OWNER",
            "The owner for acquire, release and renew, as --owner. run never reads it.",
        ),
        (
            "DISTLOCK_ALLOW_NETWORK_FS",
            "1 opens a SQLite store on a network filesystem (NFS, SMB, FUSE, 9p and others), which is otherwise refused (exit 74) as two hosts could both get a lock there: only for a mount that this host alone uses. 0 or empty is as unset; any other value is a usage error (64).",
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
        rows.push(("DISTLOCK_RESOURCES, DISTLOCK_FENCES", "Given by run over a lock set (--resource more than once) instead of DISTLOCK_RESOURCE and DISTLOCK_FENCE: a JSON array of the names, by resource, and a JSON object from each name to its member's fencing token, e.g. [\"cache-cluster\",\"db-primary\"] and {\"cache-cluster\":7,\"db-primary\":8}."));
    }
    for (name, meaning) in rows {
        roff.control("TP", [])
            .text([bold(name)])
            .text([roman(meaning)]);
    }
}

fn files(roff: &mut Roff) {
    roff.control("SH", ["FILES"]);
    for (file, meaning) in [
        (
            "$XDG_STATE_HOME/distlock/locks.db",
            "The default store; without XDG_STATE_HOME, ~/.local/state/distlock/locks.db. Missing folders are created by the first command that writes.",
        ),
        (
            "locks.db-wal, locks.db-shm",
            "SQLite's write-ahead log and its index, beside the store (WAL mode).",
        ),
        (
            "locks.db-turnstile",
            "Where waiters sleep until a release wakes them (Linux), beside the store.",
        ),
    ] {
        roff.control("TP", [])
            .text([italic(file)])
            .text([roman(meaning)]);
    }
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
        if Some(sub) != except && sub != "help" {
            let _ = write!(refs, "distlock-{sub}(1), ");
        }
    }
    refs.push_str("flock(1)");
    roff.text([roman(refs)]);
}

/// The text of section `name` of a rendered page, up to the next section, with roff's `\-`
/// read as the hyphen it stands for.
fn section(page: &str, name: &str) -> String {
    let start = page
        .find(&format!(".SH \"{name}\""))
        .or_else(|| page.find(&format!(".SH {name}")))
        .unwrap_or_else(|| panic!("no section {name}"));
    let rest = &page[start + 4..];
    let text = rest.find("\n.SH").map_or(rest, |end| &rest[..end]);
    text.replace("\\-", "-")
}

#[test]
fn every_page_gives_its_commands_exit_codes_and_only_those() {
    // The codes each command can exit with (contract, "Exit codes"), independently of the
    // table that renders them.
    let expected: [(&str, &[&str]); 11] = [
        (
            "distlock",
            &["0", "1", "64", "74", "75", "77", "78", "124", "126", "127"],
        ),
        ("acquire", &["0", "64", "74", "75", "78"]),
        ("status", &["0", "1", "64", "74"]),
        ("release", &["0", "1", "64", "74", "77"]),
        ("renew", &["0", "1", "64", "74", "77"]),
        ("run", &["64", "74", "75", "78", "124", "126", "127"]),
        ("list", &["0", "64", "74"]),
        ("log", &["0", "64", "74"]),
        ("gc", &["0", "64", "74"]),
        ("break", &["0", "1", "64", "74"]),
        ("serve", &["0", "64", "74"]),
    ];
    let pages = man_pages();
    for (command, codes) in expected {
        let file = match command {
            "distlock" => "man/distlock.1".to_owned(),
            sub => format!("man/distlock-{sub}.1"),
        };
        let (_, page) = pages
            .iter()
            .find(|(name, _)| *name == file)
            .unwrap_or_else(|| panic!("no page {file}"));
        let text = String::from_utf8_lossy(page);
        let exits = section(&text, "EXIT STATUS");
        let listed: Vec<&str> = exits
            .lines()
            .filter_map(|line| {
                line.strip_prefix("\\fB")
                    .and_then(|l| l.split("\\fR").next())
            })
            .flat_map(|codes| codes.split(", "))
            .filter(|code| code.chars().all(|c| c.is_ascii_digit()))
            .collect();
        for code in codes {
            assert!(
                listed.contains(code),
                "{file} does not give exit {code}: {listed:?}"
            );
        }
        for code in &listed {
            assert!(
                codes.contains(code),
                "{file} gives exit {code}, which {command} never exits with"
            );
        }
    }
    // run's 124 names every reason distlock stops a command.
    let run = String::from_utf8_lossy(
        &pages
            .iter()
            .find(|(f, _)| f == "man/distlock-run.1")
            .expect("run's page")
            .1,
    )
    .into_owned();
    for reason in [
        "lease was lost",
        "broken",
        "--max-runtime",
        "renewals failed",
    ] {
        assert!(
            section(&run, "EXIT STATUS").contains(reason),
            "run's 124 lacks {reason:?}"
        );
    }
    // break's page speaks of breaking, not of acquiring.
    let breaks = String::from_utf8_lossy(
        &pages
            .iter()
            .find(|(f, _)| f == "man/distlock-break.1")
            .expect("break's page")
            .1,
    )
    .into_owned();
    assert!(
        !section(&breaks, "EXIT STATUS").contains("acquired"),
        "{breaks}"
    );
}

#[test]
fn every_page_referred_to_exists_and_the_store_files_are_named() {
    let pages = man_pages();
    let names: Vec<String> = pages
        .iter()
        .map(|(file, _)| {
            file.trim_start_matches("man/")
                .trim_end_matches(".1")
                .to_owned()
        })
        .collect();
    for (file, page) in &pages {
        let text = String::from_utf8_lossy(page);
        // The list of subcommands names a page on each line of its own.
        if text.contains(".SH SUBCOMMANDS") {
            for line in section(&text, "SUBCOMMANDS").lines() {
                if let Some(name) = line.strip_suffix("(1)") {
                    assert!(
                        names.iter().any(|n| n == name),
                        "{file} lists {name}(1), which does not exist"
                    );
                }
            }
        }
        for reference in section(&text, "SEE ALSO").split(", ") {
            let reference = reference.trim();
            let Some(name) = reference.strip_suffix("(1)") else {
                continue;
            };
            let name = name.rsplit(['\n', ' ']).next().unwrap_or(name);
            assert!(
                name == "flock" || names.iter().any(|n| n == name),
                "{file} refers to {name}(1), which does not exist"
            );
        }
        let files = section(&text, "FILES");
        for kept in ["locks.db-wal", "locks.db-shm", "locks.db-turnstile"] {
            assert!(files.contains(kept), "{file} does not name {kept}");
        }
    }
}

#[test]
fn run_help_has_a_long_description_and_its_crontab_line_survives_a_paste() {
    for width in [80, 100, 200] {
        let help = Cli::command()
            .term_width(width)
            .find_subcommand_mut("run")
            .expect("a run subcommand")
            .render_long_help()
            .to_string();
        let cron = help
            .lines()
            .find(|line| line.contains("*/5 * * * *"))
            .unwrap_or_else(|| panic!("no crontab line at width {width}"));
        assert!(
            cron.trim_end().ends_with(".sh"),
            "the crontab line is wrapped at width {width}: {cron:?}"
        );
    }
    let page = man_pages()
        .into_iter()
        .find(|(file, _)| file == "man/distlock-run.1")
        .expect("run's page")
        .1;
    let text = String::from_utf8_lossy(&page).into_owned();
    let description = section(&text, "DESCRIPTION");
    assert!(description.lines().count() > 3, "{description}");
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

#[test]
fn lock_sets_are_in_the_pages_and_the_help() {
    let pages = man_pages();
    let page = |file: &str| {
        String::from_utf8_lossy(
            &pages
                .iter()
                .find(|(f, _)| f == file)
                .unwrap_or_else(|| panic!("no page {file}"))
                .1,
        )
        .into_owned()
    };
    let main = page("man/distlock.1");
    let sets = section(&main, "LOCK SETS");
    for needle in [
        "One transaction",
        "deadlock",
        "holds nothing",
        "DISTLOCK_FENCES",
    ] {
        assert!(
            sets.contains(needle),
            "distlock(1)'s LOCK SETS lacks {needle:?}"
        );
    }
    for file in ["man/distlock.1", "man/distlock-run.1"] {
        let environment = section(&page(file), "ENVIRONMENT");
        for variable in ["DISTLOCK_RESOURCES", "DISTLOCK_FENCES"] {
            assert!(environment.contains(variable), "{file} lacks {variable}");
        }
    }
    for command in ["acquire", "renew", "release", "run"] {
        let description = section(&page(&format!("man/distlock-{command}.1")), "DESCRIPTION");
        assert!(
            description.contains("lock set"),
            "distlock-{command}(1) does not describe lock sets: {description}"
        );
    }
    // No ellipsis character in any help text: troff warns about it, and the pages render it
    // badly on a terminal without UTF-8.
    for (file, page) in &pages {
        assert!(
            !String::from_utf8_lossy(page).contains('\u{2026}'),
            "{file} has an ellipsis character"
        );
    }
}
