//! The book's recipes are files in `examples/`, and these tests keep them honest: each recipe
//! page of the book (`docs/src/recipes/`) must show its file byte for byte (mdBook's include
//! directive of the whole file, alone in a code block), and every recipe is run for real against
//! a scratch SQLite store, with only the job
//! paths (`/usr/local/bin/backup.sh`, `./deploy.sh`, `/srv/ledger`, …) pointed at test scripts
//! and the fleet crontab's minutes made seconds. The checks are about behaviour — who held the
//! lock while the job ran, whether two deploys overlapped, which writes the guarded resource
//! accepted, how many hosts ran the report — not only exit codes.
//!
//! The recipes whose point is a store that several processes share (the cron lines, the CI
//! steps, the deploy script, the fleet crontab, break-lock, the fenced write's stale holder) run
//! twice, by [`on_the_store_and_through_a_server`]: on the scratch store, then with every
//! command going through a real `distlock serve` over it (HTTPS, a token), as a CI runner or a
//! cron host without the store's credentials would. The ones about the store's own host (`gc`,
//! the systemd unit over its file) run on the store alone, and so, for now, does the lock-set
//! deploy (`set_deploy_*`).
//!
//! The lock server's recipes run against a real `distlock serve --tokens` over the scratch
//! store (and, for the lease rule, over a PostgreSQL one too); they are in `recipes/server.rs`.
//!
//! Processes, deadlines and waits come from the integration suite's `common::process`, the
//! guarded resource from its `common::fenced_write`, the HTTPS certificates from its
//! `common::certs`, the jobs that note two holders at once from its `common::critical`, a
//! PostgreSQL database from its `common::pg_database`, a private PostgreSQL server to stop and
//! start from its `common::cluster`, and the gate for a tool this machine may lack from its
//! `common::require`: the same files, compiled into this crate too. The jobs that cannot be
//! trusted to leave a critical section (killed, stopped, ignoring SIGTERM) log the time
//! instead, compared with when the next holder got in (`recipes/ticks.rs`).

#![allow(clippy::too_many_lines)] // Tables, one row a case: long by design.

#[path = "cli/common/certs.rs"]
mod certs;
#[path = "cli/common/cluster.rs"]
mod cluster;
#[path = "cli/common/critical.rs"]
mod critical;
#[path = "cli/common/fenced_write.rs"]
mod fenced_write;
#[path = "cli/common/pg_database.rs"]
mod pg_database;
#[path = "cli/common/process.rs"]
mod process;
#[path = "cli/common/require.rs"]
mod require;
#[path = "recipes/server.rs"]
mod server;
#[path = "recipes/ticks.rs"]
mod ticks;

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tempfile::TempDir;

use fenced_write::{fenced_write, ledger};
use process::{BIN, Proc, describe, spawn_lock, wait_for_file, wait_until};
use ticks::Ticking;

/// The book's command for the fenced-write recipe, run by [`fenced_write_book_command`].
const FENCED_USAGE: &str =
    r#"distlock run --resource ledger -- examples/fenced-write /srv/ledger "entry""#;

/// Every recipe file, in the order of the book's recipe pages.
const RECIPES: [&str; 14] = [
    "examples/crontab",
    "examples/distlock-backup.service",
    "examples/ci-deploy.yml",
    "examples/deploy.sh",
    "examples/fenced-write",
    "examples/migrate-and-flush.sh",
    "examples/ci-deploy-slots.yml",
    "examples/crontab-search-index",
    "examples/crontab-fleet",
    "examples/break-lock",
    "examples/ci-deploy-server.yml",
    "examples/distlock_client.py",
    "examples/distlock-serve.service",
    "examples/ci-deploy-through-server.yml",
];

/// systemd's default `PATH` for services.
const SYSTEMD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn example(name: &str) -> String {
    read(&root().join("examples").join(name))
}

fn bin_dir() -> &'static Path {
    Path::new(BIN).parent().expect("the binary's folder")
}

/// `PATH` with the binary under test first.
fn path_with_bin(rest: &str) -> String {
    format!("{}:{rest}", bin_dir().display())
}

/// Replaces each site path in `text` with a test path, insisting that it is there: a recipe
/// that renamed its job must fail here rather than run something else.
fn substitute(text: &str, paths: &[(&str, &Path)]) -> String {
    let paths: Vec<(&str, &str)> = paths
        .iter()
        .map(|(from, to)| (*from, to.to_str().expect("utf-8 path")))
        .collect();
    replace_each(text, &paths)
}

/// Replaces each `from` in `text` with its `to`, insisting that it is there (as [`substitute`]
/// does for paths).
fn replace_each(text: &str, pairs: &[(&str, &str)]) -> String {
    let mut text = text.to_owned();
    for (from, to) in pairs {
        assert!(text.contains(from), "{from} not found in {text:?}");
        text = text.replace(from, to);
    }
    text
}

/// Runs `cmd` to completion and captures its output; spawned under [`SPAWN`], like every
/// process these tests start.
fn output(cmd: &mut Command) -> std::io::Result<Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = {
        let _guard = spawn_lock();
        cmd.spawn()?
    };
    child.wait_with_output()
}

fn host_name() -> String {
    let out = output(&mut Command::new("hostname")).expect("run hostname");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// A scratch folder with its own store, and processes with a time limit.

struct Scratch {
    /// The server the commands go through, when they do ([`Scratch::through_server`]). First,
    /// so that it stops before its folder is removed and its database is dropped.
    front: Option<server::Front>,
    /// The store's PostgreSQL database, for a scratch store there ([`Scratch::postgres`]).
    pg: Option<pg_database::PgDatabase>,
    dir: TempDir,
    /// The store's SQLite file, whether or not a server is in front of it (none on PostgreSQL).
    db: PathBuf,
    names: AtomicU32,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("locks.db");
        Scratch {
            front: None,
            pg: None,
            dir,
            db,
            names: AtomicU32::new(0),
        }
    }

    /// A scratch folder whose store is a fresh PostgreSQL database of the suite's server;
    /// `None` (with a note naming `what` skipped) without one, unless `DISTLOCK_TEST_REQUIRE_PG`
    /// is set.
    fn postgres(what: &str) -> Option<Scratch> {
        let admin = pg_database::pg_admin_url(what)?;
        let pg = pg_database::PgDatabase::create(&admin, "").expect("create a test database");
        Some(Scratch {
            pg: Some(pg),
            ..Scratch::new()
        })
    }

    /// What `--db` names for the store itself (never its server): the SQLite file, or the
    /// PostgreSQL database's URL.
    fn store_url(&self) -> &OsStr {
        match &self.pg {
            Some(pg) => OsStr::new(&pg.url),
            None => self.db.as_os_str(),
        }
    }

    /// Points `cmd` at the store: `DISTLOCK_DB` names it ([`Scratch::own_store_env`]), or the
    /// server in front of it with the server's token and CA in `DISTLOCK_TOKEN` and
    /// `DISTLOCK_CA_CERT`. Neither of those is ever inherited from the test's environment.
    fn store_env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        match &self.front {
            None => self.own_store_env(cmd),
            Some(front) => cmd
                .env("DISTLOCK_DB", front.url())
                .env("DISTLOCK_TOKEN", front.secret())
                .env("DISTLOCK_CA_CERT", front.ca_cert()),
        }
    }

    /// Points `cmd` at the store itself, whether or not a server is in front of it: a client
    /// that opens the store.
    fn own_store_env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("DISTLOCK_DB", self.store_url())
            .env_remove("DISTLOCK_TOKEN")
            .env_remove("DISTLOCK_CA_CERT")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A scratch path as a string, for baking into scripts.
    fn p(&self, name: &str) -> String {
        self.path(name).to_str().expect("utf-8 path").to_owned()
    }

    /// `program` (a recipe's script, a shell) with this store (through its server, when it has
    /// one) and the binary first in `PATH`; nothing else of distlock's is inherited from the
    /// test's environment ([`process::isolated`]), and there is no terminal.
    fn cmd(&self, program: impl AsRef<OsStr>) -> Command {
        self.with_store(process::isolated(program))
    }

    /// `distlock` itself, as [`Scratch::cmd`] starts a program.
    fn distlock_cmd(&self) -> Command {
        self.with_store(process::distlock())
    }

    fn with_store(&self, mut cmd: Command) -> Command {
        cmd.env(
            "PATH",
            path_with_bin(&std::env::var("PATH").unwrap_or_default()),
        );
        self.store_env(&mut cmd);
        cmd
    }

    /// Writes an executable `/bin/sh` script.
    fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(name);
        let _guard = spawn_lock();
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    /// Starts `cmd` with stdout and stderr going to scratch files.
    fn spawn(&self, cmd: &mut Command) -> Proc {
        let n = self.names.fetch_add(1, Ordering::Relaxed);
        Proc::spawn(cmd, self.dir.path(), &format!("proc-{n}"))
    }

    /// Runs `distlock ARGS…` to completion.
    fn run(&self, args: &[&str]) -> Output {
        let out = output(self.distlock_cmd().args(args)).expect("run distlock");
        if let Some(front) = &self.front {
            front.assert_secret_kept(&[&out.stdout, &out.stderr], &format!("distlock {args:?}"));
        }
        out
    }

    /// Runs `distlock ARGS…`, checks its exit code, and parses its one JSON line.
    fn json(&self, args: &[&str], code: i32) -> Value {
        let out = self.run(args);
        process::assert_exited(&out, code, &format!("distlock {args:?}"));
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    }

    /// Creates the scratch store (`gc` writes; `status` would not create it), so that the
    /// processes a test starts together race for a lock, not to create the file. (`gc` runs
    /// where the store is, never through a server.)
    fn create_store(&self) {
        let store = self.store_url().to_str().expect("utf-8 path").to_owned();
        self.json(&["--db", &store, "gc"], 0);
    }

    /// The live lock on `resource`, or `None` when nobody holds it.
    fn holder(&self, resource: &str) -> Option<Value> {
        let out = self.run(&["status", resource]);
        let value: Value = serde_json::from_slice(&out.stdout).expect("status prints JSON");
        match out.status.code() {
            Some(0) => Some(value["lock"].clone()),
            Some(1) => None,
            other => panic!(
                "status {resource}: exit {other:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// How many wait in line for `resource` (`status`'s `"waiting"`, there only when some do).
    fn waiting(&self, resource: &str) -> u64 {
        let out = self.run(&["status", resource]);
        let value: Value = serde_json::from_slice(&out.stdout).expect("status prints JSON");
        value.get("waiting").map_or(0, |n| {
            n.as_u64()
                .unwrap_or_else(|| panic!("\"waiting\" is a count: {value}"))
        })
    }

    /// Takes `resource` for `owner`; returns the lock.
    fn hold(&self, resource: &str, owner: &str, ttl: &str) -> Value {
        self.json(&["acquire", resource, "--owner", owner, "--ttl", ttl], 0)["lock"].clone()
    }

    fn release(&self, resource: &str, owner: &str) {
        self.json(&["release", resource, "--owner", owner], 0);
    }

    /// The history of `resource`, oldest first.
    fn log(&self, resource: &str) -> Vec<Value> {
        let out = self.run(&["log", resource]);
        assert!(out.status.success(), "log {resource}");
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }
}

/// Runs `test` on a scratch store, then on another whose commands all go through a real
/// `distlock serve` over it ([`Scratch::through_server`]: HTTPS, with a token that may do what
/// any recipe does). A recipe whose point is a store that several processes share must work
/// the same when they share it through a server. The server must have answered the token's
/// requests, and no command's output, nor any file in the scratch folder (the processes'
/// stdout and stderr, the server's log), may show the token's secret.
fn on_the_store_and_through_a_server(test: impl Fn(&Scratch)) {
    test(&Scratch::new());
    let s = Scratch::new().through_server(&["--all-resources", "--operator"]);
    let front = s.front.as_ref().expect("a server in front");
    eprintln!("note: the same through {}", front.url());
    test(&s);
    front.assert_served();
    front.assert_secret_kept_in(s.dir.path());
}

// ---------------------------------------------------------------------------------------------
// The book shows each recipe file exactly, and every kind of recipe is there.

/// The book's source folder, `docs/src`.
fn book() -> PathBuf {
    root().join("docs/src")
}

/// The recipe pages, in the order `SUMMARY.md` lists them under `# Recipes`.
fn recipe_pages() -> Vec<PathBuf> {
    let summary = read(&book().join("SUMMARY.md"));
    let part = summary
        .split("\n# Recipes\n")
        .nth(1)
        .expect("a # Recipes part in SUMMARY.md");
    let part = part.split("\n# ").next().unwrap_or_default();
    part.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| target.starts_with("recipes/"))
        .map(|target| book().join(target))
        .collect()
}

/// Each recipe page's `{{#include ../../../examples/NAME}}`, in the order of the pages: the
/// file's path (`examples/NAME`) and the page. Each include must be the whole file (no anchor,
/// no line range) and the only line of a fenced code block, so that the page shows the file
/// byte for byte.
fn book_recipes() -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for page in recipe_pages() {
        let text = read(&page);
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.contains("{{#include") {
                continue;
            }
            let target = line
                .trim()
                .strip_prefix("{{#include ../../../")
                .and_then(|rest| rest.strip_suffix("}}"))
                .unwrap_or_else(|| {
                    panic!("{}: an include of a file under the repository, on a line of its own: {line:?}", page.display())
                });
            assert!(
                target.starts_with("examples/") && !target.contains(':'),
                "{}: a recipe page includes a whole file of examples/, no anchor or line range: {line:?}",
                page.display()
            );
            let open = i.checked_sub(1).map(|k| lines[k]).unwrap_or_default();
            let close = lines.get(i + 1).copied().unwrap_or_default();
            assert!(
                open.starts_with("```") && close == "```",
                "{}: the include of {target} must be alone in a code block, not between {open:?} and {close:?}",
                page.display()
            );
            found.push((target.to_owned(), page.clone()));
        }
    }
    found
}

#[test]
fn the_book_shows_each_recipe_file_byte_for_byte() {
    let recipes = book_recipes();
    let paths: Vec<&str> = recipes.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        paths, RECIPES,
        "the recipe pages' includes, in SUMMARY.md's order"
    );
    for (path, page) in &recipes {
        let file = read(&root().join(path));
        // mdBook leaves a whole file's text as it is, but for lines that mark an anchor, and a
        // code block ends at the first line that starts with its fence.
        for line in file.lines() {
            assert!(
                !line.contains("ANCHOR:") && !line.contains("ANCHOR_END:"),
                "{path}: mdBook would drop the line {line:?} from {}",
                page.display()
            );
            assert!(
                !line.trim_start().starts_with("```"),
                "{path}: the line {line:?} would end the code block of {}",
                page.display()
            );
        }
    }
    // No recipe file that the book does not show.
    let mut files: Vec<String> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .map(|entry| {
            format!(
                "examples/{}",
                entry.expect("entry").file_name().to_string_lossy()
            )
        })
        .collect();
    files.sort();
    let mut shown: Vec<String> = RECIPES.iter().map(|p| (*p).to_owned()).collect();
    shown.sort();
    assert_eq!(
        files, shown,
        "every file in examples/ is a recipe of the book"
    );
}

#[test]
fn the_book_has_all_ten_kinds_of_recipe() {
    let cron = Crontab::parse();
    let skip = cron.job("--conflict-exit-code 0");
    assert_eq!(
        skip.0, "*/5 * * * *",
        "cron skip-if-running runs every 5 minutes"
    );
    assert!(skip.1.starts_with("distlock run --resource backup "));
    let wait = cron.job("--wait 10m");
    assert_eq!(wait.0, "0 * * * *", "cron wait-up-to runs hourly");
    assert!(wait.1.starts_with("distlock run --resource backup "));

    let unit = Unit::parse();
    assert!(
        unit.exec_start.starts_with("/usr/local/bin/distlock run "),
        "systemd service: {}",
        unit.exec_start
    );

    assert_eq!(
        ci_run_line("ci-deploy.yml"),
        "distlock run --resource deploy-production --ttl 5m --wait 30m -- ./deploy.sh",
        "CI step"
    );
    assert_eq!(
        ci_run_line("ci-deploy-through-server.yml"),
        "distlock run --resource deploy-production --wait 20m -- ./deploy.sh",
        "CI step through a server"
    );

    let deploy = example("deploy.sh");
    for needle in [
        "distlock acquire",
        "distlock renew",
        "distlock release",
        r#"distlock run --resource "$resource" --owner "$owner""#,
        r#"owner="$(hostname):$$""#,
        "sed -n",
        "trap ",
        "75)",
    ] {
        assert!(deploy.contains(needle), "deploy.sh lacks {needle}");
    }

    let fenced = example("fenced-write");
    assert!(fenced.contains("DISTLOCK_FENCE") && fenced.contains("flock"));
    let fenced_page = read(&book().join("recipes/fenced-write.md"));
    assert!(
        fenced_page.lines().any(|line| line == FENCED_USAGE),
        "docs/src/recipes/fenced-write.md must show `{FENCED_USAGE}` on a line of its own"
    );
    assert!(read(&book().join("SUMMARY.md")).contains("\n# Recipes\n"));

    let set_deploy = example("migrate-and-flush.sh");
    let set_page = read(&book().join("recipes/database-and-cache.md"));
    assert!(
        set_page.lines().any(|line| line == SET_DEPLOY_USAGE)
            && set_deploy.contains(&format!("#   {SET_DEPLOY_USAGE}\n")),
        "docs/src/recipes/database-and-cache.md and the recipe must show `{SET_DEPLOY_USAGE}` on a line of its own"
    );
    for needle in [
        "DISTLOCK_FENCES",
        "fence_of db-primary",
        "fence_of cache-cluster",
        "exit 64",
    ] {
        assert!(
            set_deploy.contains(needle),
            "migrate-and-flush.sh lacks {needle}"
        );
    }

    assert_eq!(
        ci_run_line("ci-deploy-slots.yml"),
        r#"distlock run --resource deploy-slots --limit 2 --ttl 5m --wait 30m --note "$SERVICE, run $GITHUB_RUN_ID" -- ./deploy.sh "$SERVICE""#,
        "CI step with at most 2 deploys at once"
    );

    let index = Crontab::of("crontab-search-index");
    for reader in ["search-report.sh", "sitemap.sh"] {
        let (_, command) = index.job(reader);
        assert!(
            command.starts_with("distlock run --resource search-index --shared --wait "),
            "a reader of the index: {command}"
        );
    }
    let (schedule, rebuild) = index.job("rebuild-index.sh");
    assert_eq!(schedule, "30 2 * * *", "the rebuild runs nightly");
    assert!(
        rebuild.starts_with("distlock run --resource search-index --ttl 5m --wait 1h ")
            && !rebuild.contains("--shared")
            && !rebuild.contains("--limit"),
        "the rebuild holds the index exclusively: {rebuild}"
    );

    let fleet = Crontab::of("crontab-fleet");
    let (schedule, report) = fleet.job("report.sh");
    assert_eq!(schedule, "0 * * * *", "the fleet's report runs hourly");
    assert_eq!(
        report,
        r#"distlock run --resource hourly-report --hold-at-least 50m --max-runtime 45m --conflict-exit-code 0 --note "$(hostname)" -- /usr/local/bin/report.sh"#,
        "once per period across the fleet"
    );
    assert!(
        fleet
            .env
            .iter()
            .any(|(name, value)| name == "DISTLOCK_DB" && value.starts_with("postgresql://")),
        "the fleet shares one PostgreSQL store"
    );

    let break_lock = example("break-lock");
    for needle in [
        r#"distlock status "$resource""#,
        r#"distlock --format text log "$resource""#,
        r#"distlock --format text break "$resource" --reason "$reason""#,
        "read -r answer",
    ] {
        assert!(break_lock.contains(needle), "break-lock lacks {needle}");
    }
}

#[test]
fn recipe_scripts_are_executable_and_parse() {
    for name in [
        "deploy.sh",
        "fenced-write",
        "migrate-and-flush.sh",
        "break-lock",
    ] {
        let path = root().join("examples").join(name);
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{name} must be executable");
        assert!(read(&path).starts_with("#!/bin/sh\n"), "{name}: POSIX sh");
        for shell in ["sh", "bash"] {
            let out = output(Command::new(shell).arg("-n").arg(&path)).expect("run a shell");
            assert!(
                out.status.success(),
                "{shell} -n {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn the_book_says_where_every_completion_and_man_page_goes() {
    let page = read(&book().join("installing.md"));
    let start = page
        .find("## Installing completions and man pages")
        .expect("an install section in docs/src/installing.md");
    let section = &page[start..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    for entry in std::fs::read_dir(root().join("completions")).expect("completions/") {
        let name = entry.expect("entry").file_name();
        let name = format!("completions/{}", name.to_string_lossy());
        assert!(section.contains(&name), "the install section misses {name}");
    }
    for destination in [
        "/usr/share/bash-completion/completions/distlock",
        "fpath",
        "~/.config/fish/completions/",
        "/usr/local/share/man/man1",
        "mandb",
        "$PROFILE",
        "rc.elv",
    ] {
        assert!(
            section.contains(destination),
            "the install section misses {destination}"
        );
    }
    let pages: Vec<String> = std::fs::read_dir(root().join("man"))
        .expect("man/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(pages.iter().any(|p| p == "distlock.1"));
    assert!(
        pages.iter().all(|p| p.ends_with(".1")),
        "man/*.1 installs every page: {pages:?}"
    );
    // Every `completions/…` or `man/…` file the section names exists.
    for word in section.split(|c: char| c.is_whitespace() || c == '`') {
        if (word.starts_with("completions/") || word.starts_with("man/"))
            && !word.contains('*')
            && !word.ends_with('/')
        {
            assert!(root().join(word).is_file(), "the section names {word}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cron

struct Crontab {
    env: Vec<(String, String)>,
    /// (schedule, command)
    jobs: Vec<(String, String)>,
}

impl Crontab {
    /// The cron recipe, `examples/crontab`.
    fn parse() -> Crontab {
        Crontab::of("crontab")
    }

    /// The crontab in `examples/NAME`.
    fn of(name: &str) -> Crontab {
        let mut env = Vec::new();
        let mut jobs = Vec::new();
        for line in example(name).lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some((name, value)) = line.split_once('=').filter(|(name, _)| {
                !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !name.starts_with(|c: char| c.is_ascii_digit())
            }) {
                env.push((name.to_owned(), value.to_owned()));
                continue;
            }
            let mut rest = line;
            let mut fields = Vec::new();
            for _ in 0..5 {
                rest = rest.trim_start();
                let end = rest
                    .find(char::is_whitespace)
                    .unwrap_or_else(|| panic!("a cron line has five time fields: {line}"));
                fields.push(&rest[..end]);
                rest = &rest[end..];
            }
            let command = rest.trim().to_owned();
            assert!(
                !command.contains('%'),
                "cron turns % into a newline: {command}"
            );
            jobs.push((fields.join(" "), command));
        }
        Crontab { env, jobs }
    }

    /// The one job whose command contains `needle`.
    fn job(&self, needle: &str) -> (String, String) {
        let found: Vec<_> = self.jobs.iter().filter(|j| j.1.contains(needle)).collect();
        assert_eq!(found.len(), 1, "one crontab line with {needle}");
        found[0].clone()
    }

    /// `/bin/sh -c COMMAND` in cron's sparse environment plus the crontab's variables; of
    /// those, the store and `PATH` point at the scratch store (or its server, with the
    /// server's token and CA) and the binary under test.
    fn command(&self, scratch: &Scratch, command: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(command)
            .env_clear()
            .env("HOME", scratch.dir.path())
            .env("LOGNAME", "root")
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null());
        let names: Vec<&str> = self.env.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            names.contains(&"DISTLOCK_DB") && names.contains(&"PATH"),
            "the crontab sets DISTLOCK_DB and PATH: {names:?}"
        );
        for (name, value) in &self.env {
            match name.as_str() {
                "DISTLOCK_DB" => scratch.store_env(&mut cmd),
                "PATH" => cmd.env(name, path_with_bin(value)),
                _ => cmd.env(name, value),
            };
        }
        cmd
    }
}

/// A job that records who held `backup` while it ran, and that it ran.
fn backup_job(s: &Scratch, name: &str) -> PathBuf {
    s.script(
        name,
        &format!(
            "distlock status backup >'{status}'\necho ran >>'{runs}'\n",
            status = s.p(&format!("{name}.status")),
            runs = s.p(&format!("{name}.runs"))
        ),
    )
}

fn runs(s: &Scratch, name: &str) -> usize {
    std::fs::read_to_string(s.path(&format!("{name}.runs"))).map_or(0, |text| text.lines().count())
}

/// The `"fence"` of a lock object, which must be an integer: a missing fence fails the test
/// instead of comparing as `None`.
fn fence_of(lock: &Value) -> i64 {
    lock["fence"]
        .as_i64()
        .unwrap_or_else(|| panic!("fence must be an integer in {lock}"))
}

/// The lock a job saw while it ran (from its `distlock status backup`).
fn seen_by(s: &Scratch, name: &str) -> Value {
    let status: Value =
        serde_json::from_str(&read(&s.path(&format!("{name}.status")))).expect("status JSON");
    assert_eq!(
        status["held"], true,
        "{name} ran without the lock: {status}"
    );
    status["lock"].clone()
}

#[test]
fn cron_skip_line_skips_quietly_while_held_and_runs_when_free() {
    on_the_store_and_through_a_server(|s| {
        let cron = Crontab::parse();
        let job = backup_job(s, "backup.sh");
        let line = substitute(
            &cron.job("--conflict-exit-code 0").1,
            &[("/usr/local/bin/backup.sh", &job)],
        );

        let previous = s.hold("backup", "previous-backup", "60s");
        let done = s
            .spawn(&mut cron.command(s, &line))
            .finish(Duration::from_secs(20));
        assert_eq!(
            done.code(),
            Some(0),
            "a skipped run succeeds: {}",
            done.describe()
        );
        assert!(
            done.stdout().is_empty() && done.stderr().is_empty(),
            "a skipped run says nothing (cron would mail it): {}",
            done.describe()
        );
        assert_eq!(runs(s, "backup.sh"), 0, "the job must not start while held");
        assert_eq!(
            s.holder("backup"),
            Some(previous.clone()),
            "the holder's lock is untouched"
        );

        s.release("backup", "previous-backup");
        let done = s
            .spawn(&mut cron.command(s, &line))
            .finish(Duration::from_secs(20));
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        assert_eq!(
            runs(s, "backup.sh"),
            1,
            "the job runs when the lock is free"
        );
        let lock = seen_by(s, "backup.sh");
        assert_eq!(lock["resource"], "backup");
        assert_ne!(lock["owner"], "previous-backup");
        assert!(
            fence_of(&lock) > fence_of(&previous),
            "{lock} after {previous}"
        );
        assert_eq!(s.holder("backup"), None, "released after the job");
    });
}

#[test]
fn cron_wait_line_runs_once_the_holder_releases() {
    on_the_store_and_through_a_server(|s| {
        let cron = Crontab::parse();
        let job = backup_job(s, "prune.sh");
        let line = substitute(
            &cron.job("--wait 10m").1,
            &[("/usr/local/bin/prune-backups.sh", &job)],
        );

        let held = s.hold("backup", "nightly-backup", "60s");
        let waiting = s.spawn(&mut cron.command(s, &line));
        wait_until(Duration::from_secs(20), "the job waits in line", || {
            s.waiting("backup") == 1
        });
        assert_eq!(
            runs(s, "prune.sh"),
            0,
            "the job ran while another owner held the lock"
        );
        s.release("backup", "nightly-backup");
        let done = waiting.finish(Duration::from_secs(30));
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        assert_eq!(runs(s, "prune.sh"), 1);
        let lock = seen_by(s, "prune.sh");
        assert_ne!(lock["owner"], "nightly-backup");
        assert!(fence_of(&lock) > fence_of(&held), "{lock} after {held}");
        assert_eq!(s.holder("backup"), None, "released after the job");
    });
}

#[test]
fn cron_gc_line_drops_expired_locks_and_keeps_recent_history() {
    // On the store alone: `gc` runs where the store is (through a server it is refused), and
    // this test reads the file's rows.
    let s = Scratch::new();
    let cron = Crontab::parse();
    let line = cron.job("distlock gc").1;
    assert_eq!(cron.job("distlock gc").0, "17 3 * * *");

    s.hold("expired", "w1", "1");
    s.hold("live", "w1", "60s");
    wait_until(Duration::from_secs(10), "the 1 s lock expires", || {
        s.holder("expired").is_none()
    });
    let done = s
        .spawn(&mut cron.command(&s, &line))
        .finish(Duration::from_secs(20));
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    assert!(
        done.stdout().is_empty() && done.stderr().is_empty(),
        "{}",
        done.describe()
    );

    let conn = rusqlite::Connection::open(&s.db).expect("open the store");
    let mut rows = conn
        .prepare("SELECT resource FROM locks ORDER BY resource")
        .expect("query");
    let left: Vec<String> = rows
        .query_map([], |row| row.get(0))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    assert_eq!(left, ["live"], "gc drops the expired row only");
    assert_eq!(s.log("expired").len(), 1, "a week of history is kept");
    assert_eq!(s.holder("live").expect("still held")["owner"], "w1");
}

// ---------------------------------------------------------------------------------------------
// systemd

struct Unit {
    exec_start: String,
    env: Vec<(String, String)>,
    settings: Vec<(String, String)>,
}

impl Unit {
    /// The backup's unit, `examples/distlock-backup.service`.
    fn parse() -> Unit {
        Unit::of("distlock-backup.service")
    }

    /// The unit in `examples/NAME`.
    fn of(name: &str) -> Unit {
        let mut unit = Unit {
            exec_start: String::new(),
            env: Vec::new(),
            settings: Vec::new(),
        };
        for line in example(name).lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with(['#', ';', '[']) {
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("not a setting: {line}"));
            match key {
                "ExecStart" => {
                    assert!(unit.exec_start.is_empty(), "one ExecStart");
                    unit.exec_start = value.to_owned();
                }
                "Environment" => {
                    assert!(!value.contains(['"', '\'']), "unquoted: {value}");
                    let (name, value) = value.split_once('=').expect("NAME=value");
                    unit.env.push((name.to_owned(), value.to_owned()));
                }
                _ => {}
            }
            unit.settings.push((key.to_owned(), value.to_owned()));
        }
        assert!(!unit.exec_start.is_empty(), "an ExecStart line");
        unit
    }

    fn setting(&self, key: &str) -> &str {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    /// ExecStart's words with the job and distlock paths replaced (systemd splits on spaces;
    /// this line has no quotes).
    fn argv(&self, job: &Path) -> Vec<String> {
        assert!(!self.exec_start.contains(['"', '\'', '$', '%']));
        substitute(
            &self.exec_start,
            &[
                ("/usr/local/bin/distlock", Path::new(BIN)),
                ("/usr/local/bin/backup.sh", job),
            ],
        )
        .split_whitespace()
        .map(str::to_owned)
        .collect()
    }

    /// ExecStart as systemd starts it: no shell, systemd's `PATH`, the unit's `Environment=`
    /// (with the store pointed at the scratch one).
    fn command(&self, s: &Scratch, job: &Path) -> Command {
        let argv = self.argv(job);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", path_with_bin(SYSTEMD_PATH))
            .stdin(Stdio::null());
        assert!(
            self.env.iter().any(|(name, _)| name == "DISTLOCK_DB"),
            "the unit names its store"
        );
        for (name, value) in &self.env {
            if name == "DISTLOCK_DB" {
                s.store_env(&mut cmd);
            } else {
                cmd.env(name, value);
            }
        }
        cmd
    }
}

#[test]
fn systemd_exec_start_runs_the_backup_under_the_lock() {
    // On the store alone: the unit is a host's own service over its file (a unit through a
    // server is the same ExecStart with another DISTLOCK_DB).
    let s = Scratch::new();
    let unit = Unit::parse();
    let job = backup_job(&s, "backup.sh");

    let service = s.spawn(&mut unit.command(&s, &job));
    let pid = service.pid();
    let done = service.finish(Duration::from_secs(20));
    assert_eq!(done.code(), Some(0), "{}", done.describe());
    assert_eq!(runs(&s, "backup.sh"), 1);
    let lock = seen_by(&s, "backup.sh");
    assert_eq!(lock["resource"], "backup");
    let owner = lock["owner"].as_str().expect("owner");
    assert!(
        owner.contains(&format!(":{pid}:")),
        "the default owner is <host>:<distlock's pid>:<random>, got {owner}"
    );
    assert_eq!(s.holder("backup"), None, "released after the backup");
    let log = s.log("backup");
    let events: Vec<&str> = log
        .iter()
        .map(|e| e["event"].as_str().expect("event"))
        .collect();
    assert_eq!(events, ["acquired", "released"]);

    // Busy: the unit says 75 is success, and the backup does not start.
    assert!(
        unit.setting("SuccessExitStatus")
            .split_whitespace()
            .any(|c| c == "75")
    );
    s.hold("backup", "cron-backup", "60s");
    let done = s
        .spawn(&mut unit.command(&s, &job))
        .finish(Duration::from_secs(20));
    assert_eq!(done.code(), Some(75), "{}", done.describe());
    assert!(
        done.stderr().contains("cron-backup"),
        "names the holder: {}",
        done.describe()
    );
    assert_eq!(runs(&s, "backup.sh"), 1, "no second backup while held");

    let argv = unit.argv(&job).join(" ");
    verify_unit(&s, "distlock-backup.service", &unit.exec_start, &argv);
}

/// Where systemd-analyze exists, it accepts the unit `examples/NAME` without a warning, with its
/// ExecStart line `exec_start` made `real` (paths that exist here).
fn verify_unit(s: &Scratch, name: &str, exec_start: &str, real: &str) {
    let analyze = require::runs("systemd-analyze", &["--version"]);
    if require::require("SYSTEMD_ANALYZE", &format!("{name} verified"), analyze).is_none() {
        return;
    }
    let text = example(name).replace(exec_start, real);
    let copy = s.path(name);
    std::fs::write(&copy, text).expect("write unit");
    let out =
        output(Command::new("systemd-analyze").arg("verify").arg(&copy)).expect("systemd-analyze");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify {name} (warnings count): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn systemd_stop_lets_the_backup_finish_and_then_releases() {
    // On the store alone, as `systemd_exec_start_runs_the_backup_under_the_lock` is.
    let s = Scratch::new();
    let unit = Unit::parse();
    assert_eq!(unit.setting("KillMode"), "control-group");
    assert!(!unit.setting("TimeoutStopSec").is_empty());
    // A backup that takes a second to shut down after SIGTERM, and ignores the repeat that
    // arrives while it cleans up.
    let job = s.script(
        "backup.sh",
        &format!(
            "stopping=\ntrap 'stopping=1' TERM\n\
             echo $$ >'{started}.tmp' && mv '{started}.tmp' '{started}'\n\
             while [ -z \"$stopping\" ]; do sleep 0.1; done\n\
             trap '' TERM\n\
             sleep 1\n\
             distlock status backup >'{during}'\n\
             echo clean >'{stopped}'\n",
            started = s.p("started"),
            during = s.p("during-stop.json"),
            stopped = s.p("stopped"),
        ),
    );

    let service = s.spawn(&mut unit.command(&s, &job));
    wait_for_file(&s.path("started"), Duration::from_secs(10));
    let group: i32 = read(&s.path("started")).trim().parse().expect("a pid");
    let before = s.holder("backup").expect("held while the backup runs");

    // KillMode=control-group: SIGTERM to every process of the unit.
    let stop = Instant::now();
    service.signal(Signal::SIGTERM);
    let _ = killpg(Pid::from_raw(group), Signal::SIGTERM);
    let done = service.finish(Duration::from_secs(20));
    assert_eq!(
        done.code(),
        Some(0),
        "the backup's own status: {}",
        done.describe()
    );
    assert!(
        stop.elapsed() >= Duration::from_millis(900),
        "distlock must wait for the backup's clean-up"
    );
    assert_eq!(read(&s.path("stopped")), "clean\n");
    let during: Value = serde_json::from_str(&read(&s.path("during-stop.json"))).expect("JSON");
    assert_eq!(during["held"], true, "the lock is held during the clean-up");
    assert_eq!(during["lock"]["fence"], before["fence"]);
    assert_eq!(s.holder("backup"), None, "released once the backup exited");
}

// ---------------------------------------------------------------------------------------------
// CI

/// The command of the `run:` step of the CI workflow `examples/NAME`.
fn ci_run_line(name: &str) -> String {
    let found: Vec<String> = example(name)
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("run: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(found.len(), 1, "one run: step");
    found[0].clone()
}

#[test]
fn ci_step_serialises_concurrent_deploys() {
    on_the_store_and_through_a_server(|s| {
        assert!(
            example("ci-deploy.yml").contains("DISTLOCK_DB:"),
            "the step names its store"
        );
        let deploy = turn_job(s, "deploy.sh", "sleep 1\n");
        let line = substitute(&ci_run_line("ci-deploy.yml"), &[("./deploy.sh", &deploy)]);
        // The deploys race for the lock, not to create the file: that race has a test of its own
        // (`core::race_on_a_brand_new_database_file_has_one_winner`).
        s.create_store();
        // GitHub Actions runs `run:` with `bash --noprofile --norc -eo pipefail`.
        let step = || {
            let mut cmd = s.cmd("bash");
            cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &line]);
            s.spawn(&mut cmd)
        };
        for pipeline in [step(), step()] {
            let done = pipeline.finish(Duration::from_secs(40));
            assert_eq!(done.code(), Some(0), "{}", done.describe());
        }
        // One deploy after the other, each a tenure of its own.
        turns_taken(s, 2);
        assert_eq!(s.holder("deploy-production"), None);
    });
}

/// A job that takes its turn in the scratch folder's critical section, doing `work` (shell
/// lines) inside: a holder that finds another inside notes its fence in `overlaps`; each
/// writes `start FENCE` and `end FENCE` to `events` around its work ([`turns_taken`] reads
/// both).
fn turn_job(s: &Scratch, name: &str, work: &str) -> PathBuf {
    s.script(
        name,
        &format!(
            "mkdir '{critical}' 2>/dev/null || echo \"$DISTLOCK_FENCE\" >>'{overlaps}'\n\
             echo \"start $DISTLOCK_FENCE\" >>'{events}'\n\
             {work}\
             echo \"end $DISTLOCK_FENCE\" >>'{events}'\n\
             rmdir '{critical}'\n",
            critical = s.p("critical"),
            overlaps = s.p("overlaps"),
            events = s.p("events"),
        ),
    )
}

/// The fences of the `count` holders of [`turn_job`]s, checked: never two inside at once, one
/// after the other, each with a higher fence than the one before.
fn turns_taken(s: &Scratch, count: usize) -> Vec<i64> {
    assert!(
        !s.path("overlaps").exists(),
        "two holders were inside at once: {}",
        read(&s.path("overlaps"))
    );
    let events = read(&s.path("events"));
    let mut fences = Vec::new();
    for pair in events.lines().collect::<Vec<_>>().chunks(2) {
        let start = pair[0].strip_prefix("start ");
        let end = pair.get(1).and_then(|l| l.strip_prefix("end "));
        assert!(
            start.is_some() && start == end,
            "one holder after the other: {events}"
        );
        fences.push(start.expect("a start").parse::<i64>().expect("a fence"));
    }
    assert_eq!(fences.len(), count, "{count} holders: {events}");
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "each a tenure of its own, with a higher fence: {fences:?}"
    );
    fences
}

/// A job for a host that is lost while it runs: the first time, it says which `distlock run`
/// guards it (its parent, in `guard`) and then ticks (a line in `ticks` every 0.1 s) until it
/// is killed; each later time it notes its fence in `runs`, after checking for a second that
/// the first no longer ticks (else its fence goes to `overlaps`).
fn lost_host_job(s: &Scratch, name: &str) -> PathBuf {
    s.script(
        name,
        &format!(
            "if mkdir '{first}' 2>/dev/null; then\n\
             \x20 echo $PPID >'{guard}.tmp' && mv '{guard}.tmp' '{guard}'\n\
             \x20 while :; do echo tick >>'{ticks}'; sleep 0.1; done\n\
             fi\n\
             before=$(wc -l <'{ticks}'); sleep 1\n\
             [ \"$(wc -l <'{ticks}')\" = \"$before\" ] || echo \"$DISTLOCK_FENCE\" >>'{overlaps}'\n\
             echo \"$DISTLOCK_FENCE\" >>'{runs}'\n",
            first = s.p("first"),
            guard = s.p("guard"),
            ticks = s.p("ticks"),
            overlaps = s.p("overlaps"),
            runs = s.p("runs"),
        ),
    )
}

#[test]
fn ci_step_of_a_lost_runner_holds_the_lock_until_its_lease_ends_then_the_next_pipeline_deploys() {
    on_the_store_and_through_a_server(|s| {
        let deploy = lost_host_job(s, "deploy.sh");
        // The 5-minute lease made 3 s.
        let line = replace_each(&ci_run_line("ci-deploy.yml"), &[("--ttl 5m", "--ttl 3")]);
        let line = substitute(&line, &[("./deploy.sh", &deploy)]);
        s.create_store();
        let step = || {
            let mut cmd = s.cmd("bash");
            cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &line]);
            s.spawn(&mut cmd)
        };
        let lost = step();
        wait_for_file(&s.path("guard"), Duration::from_secs(20));
        let next = step();
        wait_until(Duration::from_secs(20), "the next pipeline waits", || {
            s.waiting("deploy-production") == 1
        });
        // The runner is lost: its distlock dies with SIGKILL, and its deploy with it.
        let guard: i32 = read(&s.path("guard")).trim().parse().expect("a pid");
        kill(Pid::from_raw(guard), Signal::SIGKILL).expect("kill the runner's distlock");
        let done = next.finish(Duration::from_secs(30));
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        let done = lost.finish(Duration::from_secs(10));
        assert_eq!(done.code(), None, "killed: {}", done.describe());
        assert!(
            !s.path("overlaps").exists(),
            "the lost runner's deploy ran on beside the next one"
        );
        // Its tenure was never released: the next deploy took the lock over once it expired.
        let fence: i64 = read(&s.path("runs")).trim().parse().expect("one run");
        let log = s.log("deploy-production");
        let events: Vec<(&str, i64)> = log
            .iter()
            .map(|e| (e["event"].as_str().expect("event"), fence_of(e)))
            .filter(|(event, _)| *event != "renewed")
            .collect();
        assert_eq!(
            events,
            [
                ("acquired", fence_of(&log[0])),
                ("taken_over", fence),
                ("released", fence)
            ],
            "{log:?}"
        );
        assert_eq!(s.holder("deploy-production"), None);
    });
}

// ---------------------------------------------------------------------------------------------
// The deploy script

/// A working folder with the deploy script's steps: each records its arguments, the fence in
/// its environment, and who held the lock while it ran.
fn deploy_steps(s: &Scratch) -> PathBuf {
    let work = s.path("work");
    std::fs::create_dir(&work).expect("mkdir work");
    for step in ["migrate", "switch-traffic"] {
        s.script(
            &format!("work/{step}.sh"),
            &format!(
                "if [ -e '{block}' ]; then echo $$ >'{started}'; while :; do sleep 0.1; done; fi\n\
                 [ ! -e '{fail}' ] || exit 3\n\
                 printf '%s %s\\n' \"$*\" \"${{DISTLOCK_FENCE:-none}}\" >'{seen}'\n\
                 distlock status deploy-production >'{status}'\n",
                block = s.p(&format!("block-{step}")),
                started = s.p(&format!("{step}.started")),
                fail = s.p(&format!("fail-{step}")),
                seen = s.p(&format!("{step}.seen")),
                status = s.p(&format!("{step}.status")),
            ),
        );
    }
    work
}

/// The deploy script in `work`, in a process group of its own, with SIGINT and SIGTERM at their
/// default actions as a terminal's foreground job and a CI job get them (a test run started in
/// the background by a non-interactive shell ignores SIGINT, and a shell cannot trap a signal
/// it was started ignoring).
fn deploy(s: &Scratch, work: &Path) -> Proc {
    let script = s.cmd(root().join("examples/deploy.sh"));
    let mut cmd = process::wrapped(&["env", "--default-signal=INT,TERM"], &script);
    cmd.current_dir(work).process_group(0);
    s.spawn(&mut cmd)
}

#[test]
fn deploy_script_holds_one_tenure_across_its_steps() {
    on_the_store_and_through_a_server(|s| {
        let work = deploy_steps(s);
        // Another tenure first, so the deploy's fence is not simply 1.
        s.hold("warm-up", "w", "60s");
        s.release("warm-up", "w");

        let script = deploy(s, &work);
        let owner = format!("{}:{}", host_name(), script.pid());
        let done = script.finish(Duration::from_secs(30));
        assert_eq!(done.code(), Some(0), "{}", done.describe());

        let log = s.log("deploy-production");
        let fence = log[0]["fence"].as_i64().expect("fence");
        assert!(fence >= 2);
        assert!(
            done.stderr().contains(&format!("done (fence {fence})")),
            "{}",
            done.describe()
        );
        let events: Vec<&str> = log
            .iter()
            .map(|e| e["event"].as_str().expect("event"))
            .collect();
        assert_eq!(
            events,
            ["acquired", "extended", "renewed", "released"],
            "acquire, the joined run step, renew, release: one tenure"
        );
        for event in &log {
            assert_eq!(event["owner"], owner.as_str(), "owner is $(hostname):$$");
            assert_eq!(event["fence"], fence);
        }
        assert_eq!(
            read(&s.path("migrate.seen")),
            format!("{fence} {fence}\n"),
            "migrate gets the fence as its argument and in DISTLOCK_FENCE"
        );
        assert_eq!(
            read(&s.path("switch-traffic.seen")),
            format!("{fence} none\n"),
            "switch-traffic gets the fence as its argument"
        );
        for step in ["migrate", "switch-traffic"] {
            let status: Value =
                serde_json::from_str(&read(&s.path(&format!("{step}.status")))).expect("JSON");
            assert_eq!(status["held"], true, "{step} ran under the lock");
            assert_eq!(status["lock"]["owner"], owner.as_str());
            assert_eq!(status["lock"]["fence"], fence);
        }
        assert_eq!(s.holder("deploy-production"), None, "released at the end");
    });
}

#[test]
fn deploy_script_exits_75_and_touches_nothing_while_another_deploy_runs() {
    on_the_store_and_through_a_server(|s| {
        let work = deploy_steps(s);
        let running = s.hold("deploy-production", "ci-runner-7", "60s");

        let done = deploy(s, &work).finish(Duration::from_secs(30));
        assert_eq!(done.code(), Some(75), "{}", done.describe());
        assert!(
            done.stderr().contains("another deploy holds the lock")
                && done.stderr().contains("ci-runner-7"),
            "{}",
            done.describe()
        );
        assert!(!s.path("migrate.seen").exists() && !s.path("switch-traffic.seen").exists());
        assert_eq!(s.holder("deploy-production"), Some(running));
    });
}

#[test]
fn deploy_script_releases_the_lock_when_a_step_fails() {
    on_the_store_and_through_a_server(|s| {
        let work = deploy_steps(s);
        std::fs::write(s.path("fail-migrate"), "").expect("flag");

        let done = deploy(s, &work).finish(Duration::from_secs(30));
        assert_eq!(
            done.code(),
            Some(3),
            "the failed step's status: {}",
            done.describe()
        );
        assert!(
            !s.path("switch-traffic.seen").exists(),
            "no step after a failure"
        );
        assert_eq!(s.holder("deploy-production"), None, "the trap released it");
        let log = s.log("deploy-production");
        assert_eq!(log.last().expect("events")["event"], "released");
    });
}

#[test]
fn deploy_script_releases_the_lock_on_ctrl_c_or_kill() {
    // ^C in a terminal sends SIGINT to the foreground job, a cancelled CI job SIGTERM to its
    // processes: the script and `distlock run`, which forwards it to the step's own group.
    for (signal, code) in [(Signal::SIGINT, 130), (Signal::SIGTERM, 143)] {
        on_the_store_and_through_a_server(|s| {
            let work = deploy_steps(s);
            std::fs::write(s.path("block-migrate"), "").expect("flag");

            let script = deploy(s, &work);
            wait_for_file(&s.path("migrate.started"), Duration::from_secs(10));
            assert!(s.holder("deploy-production").is_some());
            killpg(script.pid(), signal).expect("signal the script's group");
            let done = script.finish(Duration::from_secs(20));
            assert_eq!(done.code(), Some(code), "{signal}: {}", done.describe());
            assert!(!s.path("switch-traffic.seen").exists());
            assert_eq!(
                s.holder("deploy-production"),
                None,
                "{signal}: the trap released it"
            );
        });
    }
}

/// Starts the deploy script with its 5-minute lease made `ttl` (`ttl=10`) in `work`, in a
/// process group of its own, `distlock` found first in `bin` when given.
fn deploy_with(s: &Scratch, work: &Path, ttl: &str, bin: Option<&Path>) -> Proc {
    let script = s.path("deploy-short.sh");
    std::fs::write(
        &script,
        replace_each(&example("deploy.sh"), &[("ttl=300", ttl)]),
    )
    .expect("write the script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut cmd = s.cmd(&script);
    cmd.current_dir(work).process_group(0);
    if let Some(bin) = bin {
        let path = path_with_bin(&std::env::var("PATH").unwrap_or_default());
        cmd.env("PATH", format!("{}:{path}", bin.display()));
    }
    s.spawn(&mut cmd)
}

#[test]
fn deploy_script_stops_a_direct_step_before_its_lease_can_end() {
    on_the_store_and_through_a_server(|s| {
        let work = deploy_steps(s);
        std::fs::write(s.path("block-switch-traffic"), "").expect("flag");
        // The script with a 10 s lease: switch-traffic, which never ends, must be gone 8 s after
        // the renew before it.
        let deploy = deploy_with(s, &work, "ttl=10", None);
        wait_for_file(&s.path("switch-traffic.started"), Duration::from_secs(20));
        let step = read(&s.path("switch-traffic.started")).trim().to_owned();
        let group = deploy.pid();

        // Behind it, another deploy: once it holds the lock, the step must be gone.
        let next = s.spawn(s.distlock_cmd().args([
            "run",
            "--resource",
            "deploy-production",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!(
                "if kill -0 {step} 2>/dev/null; then echo still >'{overlap}'; fi; : >'{ran}'",
                overlap = s.p("overlap"),
                ran = s.p("next.ran"),
            ),
        ]));
        let done = deploy.finish(Duration::from_secs(30));
        let next = next.finish(Duration::from_secs(60));
        // A step left running by the script goes now, before any check can fail.
        let _ = killpg(group, Signal::SIGKILL);
        assert!(
            !s.path("overlap").exists(),
            "switch-traffic ran on past the lease, beside the next deploy: {}",
            done.describe()
        );
        assert_eq!(next.code(), Some(0), "{}", next.describe());
        assert!(s.path("next.ran").exists(), "the next deploy ran");
        assert_eq!(
            done.code(),
            Some(124),
            "the step stopped by timeout(1): {}",
            done.describe()
        );
        assert_eq!(s.holder("deploy-production"), None, "released");
    });
}

/// The deploy script with a lease of `ttl` in a working folder whose `migrate.sh` ends at once
/// and whose `switch-traffic.sh` never ends by itself and ignores SIGTERM (a [`Ticking`] job);
/// `distlock` found first in `bin` when given. Behind it, the next deploy (`distlock run
/// --wait` on the store itself) must find switch-traffic gone, and the script must exit 124.
fn deploy_kills_a_stubborn_step_in_time(s: &Scratch, ttl: &str, bin: Option<&Path>) {
    let work = s.path("work");
    std::fs::create_dir(&work).expect("mkdir work");
    s.script("work/migrate.sh", "exit 0\n");
    let mut ticking = Ticking::new(s);
    let (log, _) = ticking.script(s, "work/switch-traffic.sh", "switch-traffic");
    let deploy = deploy_with(s, &work, ttl, bin);
    Ticking::wait_running(&log, "switch-traffic");
    let next = Ticking::next_holder(s, "deploy-production", &log).finish(Duration::from_secs(60));
    // A step left running by the script ends now, before any check can fail.
    Ticking::done(&log);
    let done = deploy.finish(Duration::from_secs(30));
    assert_eq!(next.code(), Some(0), "{}", next.describe());
    Ticking::assert_gone_before_the_next(&log, "switch-traffic");
    // (timeout(1) sends SIGTERM to its command and to its own process group: one or two.)
    let signals = Ticking::signals(&log);
    assert!(
        !signals.is_empty() && signals.iter().all(|signal| signal == "TERM"),
        "SIGTERM first, then SIGKILL: {signals:?}: {}",
        done.describe()
    );
    assert_eq!(done.code(), Some(124), "{}", done.describe());
    assert!(
        done.stderr()
            .contains("deploy: switch-traffic was stopped before its lease could end"),
        "{}",
        done.describe()
    );
}

#[test]
fn deploy_script_kills_a_direct_step_that_ignores_sigterm_before_a_short_lease_can_end() {
    // A 5 s lease: SIGTERM 3.5 s after the renew was sent, SIGKILL at 4 s (a tenth of the
    // lease after SIGTERM: timeout's --kill-after is never 0, which would send none).
    on_the_store_and_through_a_server(|s| deploy_kills_a_stubborn_step_in_time(s, "ttl=5", None));
}

#[test]
fn deploy_script_counts_a_direct_steps_time_from_when_its_renew_was_sent() {
    // The renew's answer comes 3 s after the store renewed the lease (a slow network, a proxy
    // holding the answer): `distlock` on the script's PATH runs the real one, then waits. The
    // step's 7/10 and 8/10 of the 10 s lease count from before the renew was sent, not after
    // it came back.
    let s = Scratch::new();
    let bin = s.path("late-answers");
    std::fs::create_dir(&bin).expect("mkdir");
    s.script(
        "late-answers/distlock",
        &format!("'{BIN}' \"$@\"\nrc=$?\n[ \"$1\" != renew ] || sleep 3\nexit $rc\n"),
    );
    deploy_kills_a_stubborn_step_in_time(&s, "ttl=10", Some(&bin));
}

#[test]
fn deploy_script_exits_124_when_its_run_step_loses_the_lease() {
    on_the_store_and_through_a_server(|s| {
        let work = deploy_steps(s);
        std::fs::write(s.path("block-migrate"), "").expect("flag");
        // A 3 s lease, renewed every second while migrate runs; an operator breaks the lock.
        let deploy = deploy_with(s, &work, "ttl=3", None);
        wait_for_file(&s.path("migrate.started"), Duration::from_secs(20));
        s.json(
            &[
                "break",
                "deploy-production",
                "--reason",
                "the deploy script's test",
            ],
            0,
        );
        let done = deploy.finish(Duration::from_secs(30));
        assert_eq!(
            done.code(),
            Some(124),
            "the lease lost, as the header says, not the release's status: {}",
            done.describe()
        );
        assert!(!s.path("switch-traffic.seen").exists(), "no step after it");
        assert_eq!(s.holder("deploy-production"), None);
    });
}

// ---------------------------------------------------------------------------------------------
// Guarding a write with DISTLOCK_FENCE

fn assert_fence_order(entries: &[(i64, String)]) {
    assert!(
        entries.windows(2).all(|w| w[0].0 <= w[1].0),
        "writes out of fence order: {entries:?}"
    );
}

#[test]
fn fenced_write_accepts_newer_fences_and_rejects_older_ones() {
    // No lock store here: fenced-write guards its folder with flock(1) alone.
    let s = Scratch::new();
    let dir = s.path("ledger");
    let write = |fence: Option<&str>, env: Option<&str>, value: &str| {
        let mut cmd = s.cmd(fenced_write());
        if let Some(fence) = fence {
            cmd.args(["--fence", fence]);
        }
        if let Some(env) = env {
            cmd.env("DISTLOCK_FENCE", env);
        }
        cmd.arg(&dir).arg(value);
        s.spawn(&mut cmd).finish(Duration::from_secs(10))
    };
    for (fence, env, value) in [
        (Some("5"), None, "a"),
        (None, Some("7"), "b"),
        (Some("7"), None, "c"),
        (Some("9"), Some("3"), "d"),
    ] {
        let done = write(fence, env, value);
        assert_eq!(done.code(), Some(0), "{value}: {}", done.describe());
    }
    let accepted = vec![
        (5, "a".to_owned()),
        (7, "b".to_owned()),
        (7, "c".to_owned()),
        (9, "d".to_owned()),
    ];
    assert_eq!(ledger(&dir), accepted, "--fence wins over DISTLOCK_FENCE");

    let stale = write(Some("8"), None, "stale");
    assert_eq!(stale.code(), Some(1), "{}", stale.describe());
    assert!(stale.stderr().contains("rejected"), "{}", stale.describe());
    let unfenced = write(None, None, "no fence");
    assert_eq!(unfenced.code(), Some(64), "{}", unfenced.describe());
    assert_eq!(ledger(&dir), accepted, "rejected writes change nothing");
    assert_eq!(read(&dir.join("fence")), "9\n");
}

#[test]
fn fenced_write_is_atomic_against_concurrent_writers() {
    // No lock store here either, as in `fenced_write_accepts_newer_fences_and_rejects_older_ones`.
    let s = Scratch::new();
    let dir = s.path("ledger");
    std::fs::create_dir(&dir).expect("mkdir");
    let mut fences: Vec<u32> = (1..=24).collect();
    fastrand::shuffle(&mut fences);
    let writers: Vec<(u32, Proc)> = fences
        .iter()
        .map(|&fence| {
            let mut cmd = s.cmd(fenced_write());
            cmd.env("DISTLOCK_FENCE", fence.to_string())
                .arg(&dir)
                .arg(format!("w{fence}"));
            (fence, s.spawn(&mut cmd))
        })
        .collect();
    let mut accepted = 0;
    for (fence, writer) in writers {
        let done = writer.finish(Duration::from_secs(30));
        match done.code() {
            Some(0) => accepted += 1,
            Some(1) => assert!(done.stderr().contains("rejected"), "{}", done.describe()),
            _ => panic!("writer {fence}: {}", done.describe()),
        }
    }
    let entries = ledger(&dir);
    assert_fence_order(&entries);
    assert_eq!(
        entries.len(),
        accepted,
        "every accepted write is in the ledger"
    );
    assert_eq!(
        entries.last().expect("a write").0,
        24,
        "the newest fence always wins"
    );
}

#[test]
fn fenced_write_book_command() {
    on_the_store_and_through_a_server(|s| {
        let dir = s.path("ledger");
        let line = substitute(FENCED_USAGE, &[("/srv/ledger", &dir)]);
        for _ in 0..2 {
            let mut cmd = s.cmd("/bin/sh");
            cmd.arg("-c").arg(&line).current_dir(root());
            let done = s.spawn(&mut cmd).finish(Duration::from_secs(20));
            assert_eq!(done.code(), Some(0), "{}", done.describe());
        }
        let tenures: Vec<i64> = s
            .log("ledger")
            .iter()
            .filter(|e| e["event"] == "acquired")
            .map(|e| e["fence"].as_i64().expect("fence"))
            .collect();
        let entries = ledger(&dir);
        assert_eq!(
            entries,
            tenures
                .iter()
                .map(|&f| (f, "entry".to_owned()))
                .collect::<Vec<_>>(),
            "each run wrote once, with its tenure's fence"
        );
        assert!(tenures.len() == 2 && tenures[0] < tenures[1]);
        assert_eq!(s.holder("ledger"), None);
    });
}

/// Stopped processes, continued and killed if the test fails before it resumes them.
struct Paused {
    run: Pid,
    group: Pid,
    armed: bool,
}

impl Drop for Paused {
    fn drop(&mut self) {
        if self.armed {
            let _ = killpg(self.group, Signal::SIGKILL);
            let _ = kill(self.run, Signal::SIGKILL);
        }
    }
}

/// True if a writer could take the store's write lock right now.
fn store_writable(db: &Path) -> bool {
    let conn = rusqlite::Connection::open(db).expect("open the store");
    conn.busy_timeout(Duration::from_millis(300))
        .expect("busy timeout");
    conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;").is_ok()
}

#[test]
fn fenced_write_rejects_a_stale_holders_late_write() {
    on_the_store_and_through_a_server(|s| {
        let dir = s.path("ledger");
        // A: writes once, says it is ready to be paused, then (once continued) writes again and
        // lingers until its guard stops it.
        let step = s.script(
            "a-step.sh",
            &format!(
                "'{fw}' '{dir}' A:early || exit 9\n\
                 echo $$ >'{pid}.tmp' && mv '{pid}.tmp' '{pid}'\n\
                 while [ ! -e '{go}' ]; do sleep 0.1; done\n\
                 '{fw}' '{dir}' A:late\n\
                 echo $? >'{late}'\n\
                 sleep 30\n",
                fw = fenced_write().display(),
                dir = dir.display(),
                pid = s.p("a.pid"),
                go = s.p("go"),
                late = s.p("a.late"),
            ),
        );
        let a = s.spawn(
            s.distlock_cmd()
                .args(["run", "--resource", "ledger", "--ttl", "2", "--"])
                .arg(&step),
        );
        wait_for_file(&s.path("a.pid"), Duration::from_secs(10));
        let group = Pid::from_raw(read(&s.path("a.pid")).trim().parse().expect("a pid"));
        let mut paused = Paused {
            run: a.pid(),
            group,
            armed: true,
        };

        // Pause A, its guard and its command alike, past its 2 s lease. (Not in the middle of a
        // renewal: a process stopped inside a SQLite write would block every other writer.
        // Through a server the server writes, and a client paused mid-request holds nothing.)
        let mut tries = 0;
        loop {
            kill(paused.run, Signal::SIGSTOP).expect("stop A's distlock");
            killpg(group, Signal::SIGSTOP).expect("stop A's command");
            if store_writable(&s.db) {
                break;
            }
            tries += 1;
            assert!(tries < 20, "A keeps the store's write lock");
            kill(paused.run, Signal::SIGCONT).expect("continue");
            std::thread::sleep(Duration::from_millis(50));
        }
        let a_fence = ledger(&dir)[0].0;
        wait_until(Duration::from_secs(15), "A's lease runs out", || {
            s.holder("ledger").is_none()
        });

        // B: the book's command takes the expired lock and writes with a newer fence.
        let line = substitute(FENCED_USAGE, &[("/srv/ledger", &dir)]);
        let mut cmd = s.cmd("/bin/sh");
        cmd.arg("-c").arg(&line).current_dir(root());
        let b = s.spawn(&mut cmd).finish(Duration::from_secs(20));
        assert_eq!(b.code(), Some(0), "{}", b.describe());

        // A resumes: its command first, so the late write is attempted before the guard can
        // stop it, as when a write is already under way.
        std::fs::write(s.path("go"), "").expect("go");
        killpg(group, Signal::SIGCONT).expect("continue A's command");
        wait_until(Duration::from_secs(10), "A's late write", || {
            read_or_empty(&s.path("a.late")).ends_with('\n')
        });
        assert_eq!(
            read(&s.path("a.late")),
            "1\n",
            "fenced-write must reject A's late write"
        );
        kill(paused.run, Signal::SIGCONT).expect("continue A's distlock");
        paused.armed = false;
        let a_done = a.finish(Duration::from_secs(20));
        assert_eq!(
            a_done.code(),
            Some(124),
            "A's guard notices the lost lease: {}",
            a_done.describe()
        );
        assert!(
            a_done.stderr().contains("fenced-write: rejected"),
            "{}",
            a_done.describe()
        );

        let entries = ledger(&dir);
        assert_fence_order(&entries);
        let values: Vec<&str> = entries.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values, ["A:early", "entry"], "never A's late write");
        assert!(entries[1].0 > a_fence, "B's tenure has the larger fence");
        let taken = s
            .log("ledger")
            .into_iter()
            .find(|e| e["event"] == "taken_over")
            .expect("B took over A's expired lock");
        assert_eq!(taken["fence"], entries[1].0);
    });
}

fn read_or_empty(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// A deploy that takes the database and the cache together (a lock set)

/// The book's command for the lock-set deploy, also in the recipe's own header.
const SET_DEPLOY_USAGE: &str = "distlock run --resource db-primary --resource cache-cluster --wait 10m -- ./migrate-and-flush.sh";

/// The book's command with the recipe's path, and the same with its two resources listed the
/// other way round, as another team's script might list them.
fn set_deploy_lines() -> (String, String) {
    let line = substitute(
        SET_DEPLOY_USAGE,
        &[(
            "./migrate-and-flush.sh",
            &root().join("examples/migrate-and-flush.sh"),
        )],
    );
    let reversed = replace_each(
        &line,
        &[(
            "--resource db-primary --resource cache-cluster",
            "--resource cache-cluster --resource db-primary",
        )],
    );
    (line, reversed)
}

/// A job that uses the cache alone, under its single lock.
const CACHE_JOB: &str = "distlock run --resource cache-cluster --wait 10m -- ./warm-cache.sh";

/// A working folder with the steps the deploy calls and the cache job, each a guarded write:
/// `migrate.sh FENCE` writes to the database's ledger, `flush-cache.sh FENCE` and
/// `warm-cache.sh` (with `DISTLOCK_FENCE`) to the cache's, through `examples/fenced-write`.
/// Each step says in `seen/RESOURCE` who wrote with which fence. A deploy holds both resources
/// from its first step to the end of its last: `migrate.sh` marks both taken (a folder each in
/// `held/`), `flush-cache.sh` gives both back; the cache job marks the cache alone. A mark that
/// is already there is an overlap, written to `overlaps`.
fn set_deploy_steps(s: &Scratch) -> PathBuf {
    let work = s.path("work");
    for dir in ["work", "held", "seen", "ledgers"] {
        std::fs::create_dir(s.path(dir)).expect("mkdir");
    }
    let fenced = fenced_write();
    let mark = |resource: &str| {
        format!(
            "mkdir '{held}/{resource}' 2>/dev/null || echo \"{resource} $DISTLOCK_OWNER\" >>'{overlaps}'\n",
            held = s.p("held"),
            overlaps = s.p("overlaps"),
        )
    };
    let write = |resource: &str, fence: &str| {
        format!(
            "echo \"$DISTLOCK_OWNER {fence}\" >>'{seen}/{resource}'\n\
             '{fenced}' --fence \"{fence}\" '{ledgers}/{resource}' \"$DISTLOCK_OWNER\" || exit 1\n\
             sleep 0.2\n",
            seen = s.p("seen"),
            fenced = fenced.display(),
            ledgers = s.p("ledgers"),
        )
    };
    s.script(
        "work/migrate.sh",
        &format!(
            "{}{}echo \"$DISTLOCK_RESOURCES\" >>'{}'\n{}",
            mark("db-primary"),
            mark("cache-cluster"),
            s.p("resources"),
            write("db-primary", "$1")
        ),
    );
    s.script(
        "work/flush-cache.sh",
        &format!(
            "{}rmdir '{held}/db-primary' '{held}/cache-cluster'\n",
            write("cache-cluster", "$1"),
            held = s.p("held")
        ),
    );
    s.script(
        "work/warm-cache.sh",
        &format!(
            "{}{}rmdir '{}/cache-cluster'\n",
            mark("cache-cluster"),
            write("cache-cluster", "$DISTLOCK_FENCE"),
            s.p("held")
        ),
    );
    work
}

/// `sh -c 'LINE'` in the deploy's working folder, `rounds` times over, stopping at a failure.
fn set_deploy_job(s: &Scratch, work: &Path, line: &str, rounds: u32) -> Proc {
    let mut cmd = s.cmd("/bin/sh");
    cmd.arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt {rounds} ]; do {line} || exit $?; i=$((i + 1)); done"
        ))
        .current_dir(work);
    s.spawn(&mut cmd)
}

/// The `(owner, fence)` lines of `seen/RESOURCE`, sorted.
fn seen_writes(s: &Scratch, resource: &str) -> Vec<(String, i64)> {
    let mut writes: Vec<(String, i64)> = read_or_empty(&s.path("seen").join(resource))
        .lines()
        .map(|line| {
            let (owner, fence) = line.rsplit_once(' ').expect("OWNER FENCE");
            (owner.to_owned(), fence.parse().expect("a fence"))
        })
        .collect();
    writes.sort();
    writes
}

/// The new tenures in `resource`'s history, in the order it gives them.
fn tenures_of(s: &Scratch, resource: &str) -> Vec<Value> {
    let log = s.log(resource);
    let ends = log.iter().filter(|e| e["event"] == "released").count();
    let tenures: Vec<Value> = log
        .into_iter()
        .filter(|e| e["event"] == "acquired")
        .collect();
    assert_eq!(ends, tenures.len(), "{resource}: every tenure released");
    tenures
}

#[test]
fn set_deploy_two_deploys_in_opposite_orders_and_a_cache_job_never_overlap_nor_deadlock() {
    on_the_store_and_through_a_server(|s| {
        let work = set_deploy_steps(s);
        let (line, reversed) = set_deploy_lines();
        // See `ci_step_serialises_concurrent_deploys`.
        s.create_store();
        let rounds = 3;
        let jobs = [
            ("the deploy", set_deploy_job(s, &work, &line, rounds)),
            (
                "the deploy listing them the other way",
                set_deploy_job(s, &work, &reversed, rounds),
            ),
            ("the cache job", set_deploy_job(s, &work, CACHE_JOB, rounds)),
        ];
        // Taken one at a time in opposite orders, the two deploys could each hold one resource and
        // wait for the other's for the whole 10 minutes; as sets, every round is done in seconds.
        for (what, job) in jobs {
            let done = job.finish(Duration::from_secs(60));
            assert_eq!(done.code(), Some(0), "{what}: {}", done.describe());
            if what != "the cache job" {
                assert_eq!(
                    done.stderr().matches("migrate-and-flush: done").count(),
                    3,
                    "{what}: {}",
                    done.describe()
                );
            }
        }
        assert!(
            !s.path("overlaps").exists(),
            "a resource was used by two at once: {}",
            read_or_empty(&s.path("overlaps"))
        );
        assert_eq!(
            read(&s.path("resources")),
            "[\"cache-cluster\",\"db-primary\"]\n".repeat(6),
            "DISTLOCK_RESOURCES names both, by resource, in whichever order they were listed"
        );

        // Each write went out with the fence that the history recorded for its writer's tenure of
        // that resource: the fences the recipe passes on are the set's own.
        for (resource, count) in [("db-primary", 6), ("cache-cluster", 9)] {
            let tenures = tenures_of(s, resource);
            assert_eq!(tenures.len(), count, "{resource}: {tenures:?}");
            let fences: Vec<i64> = tenures.iter().map(fence_of).collect();
            assert!(
                fences.windows(2).all(|w| w[0] < w[1]),
                "{resource}: fences strictly increase: {fences:?}"
            );
            let mut recorded: Vec<(String, i64)> = tenures
                .iter()
                .map(|e| (e["owner"].as_str().expect("owner").to_owned(), fence_of(e)))
                .collect();
            recorded.sort();
            assert_eq!(seen_writes(s, resource), recorded, "{resource}");
            let entries = ledger(&s.path("ledgers").join(resource));
            assert_eq!(entries.len(), count, "{resource}: every write accepted");
            assert_fence_order(&entries);
        }
        // A deploy took both in one transaction: its tenures of the two began at the same moment.
        let cache = tenures_of(s, "cache-cluster");
        for db in tenures_of(s, "db-primary") {
            let together = cache
                .iter()
                .find(|c| c["owner"] == db["owner"])
                .unwrap_or_else(|| panic!("no cache-cluster tenure for {db}"));
            assert_eq!(together["at"], db["at"], "{db} and {together}");
        }

        for resource in ["db-primary", "cache-cluster"] {
            assert_eq!(s.holder(resource), None, "{resource} is free afterwards");
            assert_eq!(s.waiting(resource), 0, "nobody waits for {resource}");
        }
        assert_eq!(s.json(&["list"], 0)["locks"], serde_json::json!([]));
    });
}

#[test]
fn set_deploy_waits_for_the_cache_and_meanwhile_holds_the_free_database_back() {
    on_the_store_and_through_a_server(|s| {
        let work = set_deploy_steps(s);
        let (line, _) = set_deploy_lines();
        s.hold("cache-cluster", "cache-warmer", "60s");

        let deploy = set_deploy_job(s, &work, &line, 1);
        // The deploy waits in line on both resources, the free database too, and holds neither.
        wait_until(
            Duration::from_secs(10),
            "the deploy waits for db-primary",
            || s.waiting("db-primary") == 1,
        );
        assert_eq!(s.waiting("cache-cluster"), 1);
        assert_eq!(s.holder("db-primary"), None, "a waiter holds nothing");
        // The price of never being overtaken: the free database goes to nobody who came later.
        let later = s.json(
            &["acquire", "db-primary", "--owner", "hotfix", "--ttl", "30s"],
            75,
        );
        assert_eq!(
            later,
            serde_json::json!({"acquired": false, "resource": "db-primary", "waiting": 1}),
            "reserved for the deploy"
        );
        assert!(!s.path("seen/db-primary").exists(), "nothing migrated yet");

        s.release("cache-cluster", "cache-warmer");
        let done = deploy.finish(Duration::from_secs(20));
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        let db = tenures_of(s, "db-primary");
        assert_eq!(
            db.len(),
            1,
            "the deploy's tenure alone, not the hotfix's: {db:?}"
        );
        assert_eq!(seen_writes(s, "db-primary").len(), 1);
        assert_eq!(seen_writes(s, "cache-cluster").len(), 1);
        for resource in ["db-primary", "cache-cluster"] {
            assert_eq!(s.holder(resource), None, "{resource} is free afterwards");
        }
    });
}

#[test]
fn set_deploy_step_refuses_to_run_without_both_locks() {
    on_the_store_and_through_a_server(|s| {
        let work = set_deploy_steps(s);
        let recipe = root().join("examples/migrate-and-flush.sh");
        let recipe = recipe.to_str().expect("utf-8 path");
        for line in [
            format!("distlock run --resource db-primary -- {recipe}"),
            format!("distlock run --resource cache-cluster --resource payments -- {recipe}"),
            recipe.to_owned(),
        ] {
            let done = set_deploy_job(s, &work, &line, 1).finish(Duration::from_secs(20));
            assert_eq!(done.code(), Some(64), "{line}: {}", done.describe());
            assert!(
                done.stderr().contains(
                    "run it under distlock run --resource db-primary --resource cache-cluster"
                ),
                "{line}: {}",
                done.describe()
            );
        }
        assert!(!s.path("seen/db-primary").exists() && !s.path("seen/cache-cluster").exists());
        for resource in ["db-primary", "cache-cluster", "payments"] {
            assert_eq!(s.holder(resource), None, "{resource} is free afterwards");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// At most 2 deploys at once (a counting semaphore)

/// The four services of the workflow's matrix.
const SERVICES: [&str; 4] = ["api", "web", "worker", "billing"];

/// The `run:` step of `ci-deploy-slots.yml` for `service`, as GitHub Actions runs it (with
/// `SERVICE` and `GITHUB_RUN_ID` in its environment), with `./deploy.sh` pointed at `deploy`.
fn slots_step(s: &Scratch, deploy: &Path, service: &str) -> Proc {
    let line = substitute(
        &ci_run_line("ci-deploy-slots.yml"),
        &[("./deploy.sh", deploy)],
    );
    let mut cmd = s.cmd("bash");
    cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &line])
        .env("SERVICE", service)
        .env("GITHUB_RUN_ID", "812");
    s.spawn(&mut cmd)
}

#[test]
fn ci_slots_step_runs_at_most_two_deploys_at_once() {
    on_the_store_and_through_a_server(|s| {
        let entered = s.path("entered");
        std::fs::create_dir(&entered).expect("mkdir entered");
        // The deploy stand-in: says when it starts and ends, and what `status` showed while it ran.
        // Whoever enters first stays until a second deploy has entered, so two always overlap, then
        // every deploy holds its slot for half a second more: long enough for a third to barge in
        // if the limit let it.
        let deploy = s.script(
            "deploy.sh",
            &format!(
                "echo \"start $1 $DISTLOCK_FENCE\" >>'{events}'\n\
                 distlock status deploy-slots >'{status}-'\"$1\"\n\
                 : >'{entered}/'\"$1\"\n\
                 i=0\n\
                 while [ \"$(ls '{entered}' | wc -l)\" -lt 2 ] && [ $i -lt 200 ]; do\n\
                 \x20 sleep 0.1; i=$((i + 1))\n\
                 done\n\
                 sleep 0.5\n\
                 echo \"end $1 $DISTLOCK_FENCE\" >>'{events}'\n",
                events = s.p("events"),
                status = s.p("status"),
                entered = entered.display(),
            ),
        );
        // See `ci_step_serialises_concurrent_deploys`.
        s.create_store();

        let jobs: Vec<(&str, Proc)> = SERVICES
            .iter()
            .map(|&service| (service, slots_step(s, &deploy, service)))
            .collect();
        for (service, job) in jobs {
            let done = job.finish(Duration::from_secs(60));
            assert_eq!(done.code(), Some(0), "{service}: {}", done.describe());
        }

        // The events file is appended in the order things happened: replay it.
        let log = read(&s.path("events"));
        let mut running = Vec::new();
        let mut most = 0;
        let mut fences = Vec::new();
        for line in log.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            assert_eq!(words.len(), 3, "{log}");
            let (service, fence) = (words[1], words[2]);
            match words[0] {
                "start" => {
                    running.push(service);
                    most = most.max(running.len());
                    fences.push(fence.to_owned());
                }
                "end" => {
                    let at = running.iter().position(|&r| r == service).expect("started");
                    running.remove(at);
                }
                other => panic!("{other}: {log}"),
            }
        }
        assert!(running.is_empty(), "every deploy ended: {log}");
        assert_eq!(fences.len(), 4, "four deploys: {log}");
        assert_eq!(most, 2, "at most two at once, and two did overlap: {log}");
        fences.sort();
        fences.dedup();
        assert_eq!(
            fences.len(),
            4,
            "a tenure, and a fence, of its own each: {log}"
        );

        // While each deploy ran, `status` listed it among at most two semaphore holders, with the
        // note that says which service and pipeline.
        for service in SERVICES {
            let status: Value =
                serde_json::from_str(&read(&s.path(&format!("status-{service}")))).expect("JSON");
            assert_eq!(status["held"], true, "{service}: {status}");
            let locks = status["locks"]
                .as_array()
                .expect("\"locks\" for a semaphore");
            assert!((1..=2).contains(&locks.len()), "{service}: {status}");
            assert!(locks.iter().all(|l| l["limit"] == 2), "{status}");
            let note = format!("{service}, run 812");
            assert_eq!(
                locks.iter().filter(|l| l["note"] == note.as_str()).count(),
                1,
                "{service}'s own tenure: {status}"
            );
        }
        assert_eq!(s.holder("deploy-slots"), None, "every slot released");
    });
}

#[test]
fn ci_slots_step_exits_78_at_once_beside_another_kind_of_holder() {
    // A job elsewhere that takes deploy-slots with another limit, or as a plain lock: the step
    // can never fit beside it, so it fails at once instead of waiting its 30 minutes.
    for mode in [&["--limit", "3"][..], &[]] {
        on_the_store_and_through_a_server(|s| {
            let deploy = s.script("deploy.sh", &format!(": >'{}'\n", s.p("deployed")));
            let mut args = vec![
                "acquire",
                "deploy-slots",
                "--owner",
                "old-pipeline",
                "--ttl",
                "60s",
            ];
            args.extend(mode);
            let holder = s.json(&args, 0)["lock"].clone();

            let done = slots_step(s, &deploy, "api").finish(Duration::from_secs(20));
            assert_eq!(done.code(), Some(78), "{mode:?}: {}", done.describe());
            assert!(
                done.elapsed < Duration::from_secs(10),
                "78 is answered at once, even with --wait: {}",
                done.describe()
            );
            assert!(
                done.stderr().contains("old-pipeline"),
                "names the holder: {}",
                done.describe()
            );
            assert!(!s.path("deployed").exists(), "{mode:?}: the deploy ran");
            assert_eq!(s.holder("deploy-slots"), Some(holder), "nothing changed");
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Readers and a nightly rebuild (a shared lock)

/// The `events` file's lines with the `$$` dropped from readers: `start reader`, `end rebuild`…
fn index_events(s: &Scratch) -> Vec<String> {
    read(&s.path("events"))
        .lines()
        .map(|line| line.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn crontab_readers_share_the_index_and_the_rebuild_waits_for_them() {
    on_the_store_and_through_a_server(|s| {
        let cron = Crontab::of("crontab-search-index");
        let inside = s.path("inside");
        std::fs::create_dir(&inside).expect("mkdir inside");
        // A reader says when it starts and ends, and stays until the test opens the readers' gate.
        let reader = |name: &str| {
            s.script(
                name,
                &format!(
                    "echo \"start reader $$\" >>'{events}'\n\
                     : >'{inside}/'$$\n\
                     i=0\n\
                     while [ ! -e '{gate}' ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done\n\
                     echo \"end reader $$\" >>'{events}'\n",
                    events = s.p("events"),
                    inside = inside.display(),
                    gate = s.p("readers-go"),
                ),
            )
        };
        let report = reader("search-report.sh");
        let sitemap = reader("sitemap.sh");
        let rebuild = s.script(
            "rebuild-index.sh",
            &format!(
                "echo 'start rebuild' >>'{events}'\n\
                 distlock status search-index >'{status}'\n\
                 : >'{started}'\n\
                 i=0\n\
                 while [ ! -e '{gate}' ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done\n\
                 echo 'end rebuild' >>'{events}'\n",
                events = s.p("events"),
                status = s.p("rebuild.status"),
                started = s.p("rebuild.started"),
                gate = s.p("rebuild-go"),
            ),
        );
        let report_line = substitute(
            &cron.job("search-report.sh").1,
            &[("/usr/local/bin/search-report.sh", &report)],
        );
        let sitemap_line = substitute(
            &cron.job("sitemap.sh").1,
            &[("/usr/local/bin/sitemap.sh", &sitemap)],
        );
        let rebuild_line = substitute(
            &cron.job("rebuild-index.sh").1,
            &[("/usr/local/bin/rebuild-index.sh", &rebuild)],
        );
        let job = |line: &str| s.spawn(&mut cron.command(s, line));
        let readers_inside = || std::fs::read_dir(&inside).expect("inside/").count();
        // See `ci_step_serialises_concurrent_deploys`.
        s.create_store();

        // Three readers at once: none can leave before the gate opens, so all three are inside
        // together.
        let readers = [job(&report_line), job(&sitemap_line), job(&report_line)];
        wait_until(Duration::from_secs(20), "three readers inside", || {
            readers_inside() == 3
        });
        let status = s.json(&["status", "search-index"], 0);
        let locks = status["locks"].as_array().expect("\"locks\" while shared");
        assert_eq!(locks.len(), 3, "{status}");
        assert!(locks.iter().all(|l| l["shared"] == true), "{status}");

        // The rebuild, started while they read, waits for them.
        let rebuilding = job(&rebuild_line);
        let in_line = |what: &str| {
            wait_until(Duration::from_secs(20), what, || {
                s.waiting("search-index") == 1
            });
        };
        in_line("the rebuild waits in line");
        assert!(
            !s.path("rebuild.started").exists(),
            "the rebuild started beside readers: {:?}",
            index_events(s)
        );
        std::fs::write(s.path("readers-go"), "").expect("gate");
        for reader in readers {
            let done = reader.finish(Duration::from_secs(20));
            assert_eq!(done.code(), Some(0), "{}", done.describe());
        }
        wait_for_file(&s.path("rebuild.started"), Duration::from_secs(20));
        let seen: Value = serde_json::from_str(&read(&s.path("rebuild.status"))).expect("JSON");
        assert_eq!(seen["held"], true, "{seen}");
        assert_eq!(seen["lock"]["note"], "nightly rebuild", "{seen}");
        assert!(
            seen["lock"].get("shared").is_none() && seen.get("locks").is_none(),
            "the rebuild holds the index alone: {seen}"
        );

        // A reader that starts while the rebuild runs waits for it.
        let late = job(&report_line);
        in_line("the late reader waits in line");
        assert_eq!(readers_inside(), 3, "a reader got in during the rebuild");
        std::fs::write(s.path("rebuild-go"), "").expect("gate");
        let done = rebuilding.finish(Duration::from_secs(20));
        assert_eq!(done.code(), Some(0), "{}", done.describe());
        let done = late.finish(Duration::from_secs(20));
        assert_eq!(done.code(), Some(0), "{}", done.describe());

        assert_eq!(
            index_events(s),
            [
                "start reader",
                "start reader",
                "start reader",
                "end reader",
                "end reader",
                "end reader",
                "start rebuild",
                "end rebuild",
                "start reader",
                "end reader",
            ],
            "readers together, then the rebuild alone, then the late reader"
        );
        assert_eq!(s.holder("search-index"), None, "released at the end");
    });
}

// ---------------------------------------------------------------------------------------------
// Once per period across a fleet (--hold-at-least, --max-runtime)

/// The report line of `crontab-fleet`, with the report pointed at `report` and the hold and
/// the cap shortened to `hold` and `cap`.
fn fleet_line(cron: &Crontab, report: &Path, hold: &str, cap: &str) -> String {
    let hold = format!("--hold-at-least {hold}");
    let cap = format!("--max-runtime {cap}");
    substitute(
        &cron.job("report.sh").1,
        &[
            ("/usr/local/bin/report.sh", report),
            ("--hold-at-least 50m", Path::new(&hold)),
            ("--max-runtime 45m", Path::new(&cap)),
        ],
    )
}

/// Starts `line` as cron does on the host `host`: as [`Crontab::command`] sets it up, with a
/// `hostname` first in `PATH` that says `host`.
fn on_host(s: &Scratch, cron: &Crontab, line: &str, host: &str) -> Proc {
    let bin = s.path(host);
    if !bin.exists() {
        std::fs::create_dir(&bin).expect("mkdir");
        s.script(&format!("{host}/hostname"), &format!("echo {host}\n"));
    }
    let mut cmd = cron.command(s, line);
    let path = cmd
        .get_envs()
        .find(|(name, _)| *name == "PATH")
        .and_then(|(_, value)| value)
        .expect("cron's PATH")
        .to_str()
        .expect("utf-8 PATH")
        .to_owned();
    cmd.env("PATH", format!("{}:{path}", bin.display()));
    s.spawn(&mut cmd)
}

/// An RFC 3339 time as milliseconds since the Unix epoch.
fn millis(value: &Value) -> u128 {
    let text = value.as_str().expect("a time");
    humantime::parse_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
}

/// Cron's result must be silent success: exit 0 and no output (cron mails any output).
fn assert_quiet_success(done: &process::Finished, host: &str) {
    assert_eq!(done.code(), Some(0), "{host}: {}", done.describe());
    assert!(
        done.stdout().is_empty() && done.stderr().is_empty(),
        "{host} must say nothing (cron would mail it): {}",
        done.describe()
    );
}

#[test]
fn fleet_crontab_runs_the_report_once_per_period_across_hosts() {
    on_the_store_and_through_a_server(|s| {
        let cron = Crontab::of("crontab-fleet");
        let report = s.script(
            "report.sh",
            &format!(
                "echo \"$(hostname) $DISTLOCK_FENCE\" >>'{runs}'\n",
                runs = s.p("runs")
            ),
        );
        let line = fleet_line(&cron, &report, "5s", "45m");
        let runs = || -> Vec<String> {
            read_or_empty(&s.path("runs"))
                .lines()
                .map(str::to_owned)
                .collect()
        };
        // Every host's cron fires at :00, at the same moment.
        let period = || {
            let hosts = ["web-1", "web-2", "web-3"];
            let jobs: Vec<(&str, Proc)> = hosts
                .iter()
                .map(|&host| (host, on_host(s, &cron, &line, host)))
                .collect();
            for (host, job) in jobs {
                assert_quiet_success(&job.finish(Duration::from_secs(20)), host);
            }
        };

        period();
        let first = runs();
        assert_eq!(first.len(), 1, "the report ran once: {first:?}");
        let (host, _) = first[0].split_once(' ').expect("HOST FENCE");
        // The lock stays held, with the host that ran it as its note, until start + the hold.
        let lock = s
            .holder("hourly-report")
            .expect("held after the report ended");
        assert_eq!(lock["note"], host, "{lock}");
        assert_eq!(
            millis(&lock["expires_at"]) - millis(&lock["acquired_at"]),
            5000,
            "{lock}"
        );
        let events: Vec<Value> = s.log("hourly-report");
        let names: Vec<&str> = events
            .iter()
            .map(|e| e["event"].as_str().expect("event"))
            .collect();
        assert_eq!(names, ["acquired", "kept"], "one tenure, kept: {events:?}");

        // A host whose cron fires later (a slow start, a clock behind) still skips.
        assert_quiet_success(
            &on_host(s, &cron, &line, "web-4").finish(Duration::from_secs(20)),
            "web-4",
        );
        assert_eq!(runs(), first, "no second report in the same period");

        // The next period, once the hold is over: one more report, a new tenure.
        wait_until(Duration::from_secs(20), "the hold ends", || {
            s.holder("hourly-report").is_none()
        });
        period();
        let second = runs();
        assert_eq!(second.len(), 2, "one report per period: {second:?}");
        let fence = |line: &str| -> i64 {
            line.split(' ')
                .nth(1)
                .expect("a fence")
                .parse()
                .expect("a number")
        };
        assert!(fence(&second[1]) > fence(&second[0]), "{second:?}");
    });
}

#[test]
fn fleet_crontab_stops_a_hung_report_and_still_holds_the_period() {
    on_the_store_and_through_a_server(|s| {
        let cron = Crontab::of("crontab-fleet");
        let report = s.script(
            "report.sh",
            &format!(
                "trap 'echo stopped >\"{stopped}\"; exit 143' TERM\n\
                 while :; do sleep 0.1; done\n",
                stopped = s.p("stopped"),
            ),
        );
        let line = fleet_line(&cron, &report, "30s", "1s");
        let done = on_host(s, &cron, &line, "web-1").finish(Duration::from_secs(20));
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        // (The report's shell may add a line of its own about its `sleep`.)
        let said: Vec<String> = done
            .stderr()
            .lines()
            .filter(|line| line.starts_with("distlock: "))
            .map(str::to_owned)
            .collect();
        assert!(
            said.len() == 1 && said[0].contains("--max-runtime"),
            "one line for cron to mail, naming the limit: {}",
            done.describe()
        );
        assert!(done.stdout().is_empty(), "{}", done.describe());
        assert_eq!(
            read(&s.path("stopped")),
            "stopped\n",
            "the report got SIGTERM"
        );

        let lock = s.holder("hourly-report").expect("kept for the period");
        assert_eq!(lock["note"], "web-1", "{lock}");
        assert_eq!(
            millis(&lock["expires_at"]) - millis(&lock["acquired_at"]),
            30_000,
            "{lock}"
        );
        assert_quiet_success(
            &on_host(s, &cron, &line, "web-2").finish(Duration::from_secs(20)),
            "web-2",
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Breaking a stuck lock (operators)

/// `examples/break-lock ARGS…` with `answer` typed at its question, as the user `alice`.
fn break_lock(s: &Scratch, answer: &str, args: &[&str]) -> process::Finished {
    let mut cmd = s.cmd("sh");
    cmd.args(["-c", r#"printf '%s\n' "$ANSWER" | "$0" "$@""#])
        .arg(root().join("examples/break-lock"))
        .args(args)
        .env("ANSWER", answer)
        .env("USER", "alice");
    s.spawn(&mut cmd).finish(Duration::from_secs(20))
}

#[test]
fn break_lock_script_evicts_a_stuck_run_and_the_history_says_who_and_why() {
    on_the_store_and_through_a_server(|s| {
        // The stuck report: it never ends on its own; it notes the SIGTERM that stops it.
        let stuck = s.script(
            "report.sh",
            &format!(
                "trap 'echo stopped >\"{stopped}\"; exit 143' TERM\n\
                 : >\"{started}\"\n\
                 while :; do sleep 0.1; done\n",
                stopped = s.p("stopped"),
                started = s.p("started"),
            ),
        );
        let run = s.spawn(
            s.distlock_cmd()
                .args([
                    "run",
                    "--resource",
                    "hourly-report",
                    "--ttl",
                    "6",
                    "--note",
                    "web-3",
                    "--",
                ])
                .arg(&stuck),
        );
        wait_for_file(&s.path("started"), Duration::from_secs(10));
        let holder = s.holder("hourly-report").expect("held");

        // The operator looks, and says no: nothing changes.
        let looked = break_lock(s, "n", &["hourly-report", "report hung since 03:00"]);
        assert_eq!(looked.code(), Some(2), "{}", looked.describe());
        let shown = looked.stdout();
        let status: Value =
            serde_json::from_str(shown.lines().next().unwrap_or_default()).expect("status JSON");
        // (Its expires_at may have moved on since: the run renews every 2 s.)
        for key in ["owner", "fence", "acquired_at", "note"] {
            assert_eq!(
                status["lock"][key],
                holder[key],
                "who holds it, since when, and why: {}",
                looked.describe()
            );
        }
        assert!(
            shown.contains("acquired by"),
            "its history: {}",
            looked.describe()
        );
        let still = s.holder("hourly-report").expect("still held");
        assert_eq!(still["fence"], holder["fence"], "{still}");

        // The operator says yes.
        let broke = break_lock(s, "y", &["hourly-report", "report hung since 03:00"]);
        let broken_at = Instant::now();
        assert_eq!(broke.code(), Some(0), "{}", broke.describe());
        assert!(
            broke.stdout().contains("broke hourly-report"),
            "{}",
            broke.describe()
        );
        let by = format!("alice@{}", host_name());
        // Through a server, the operator's token is recorded beside the user and host.
        let token = s.front.as_ref().map(|_| "recipes");
        let breaker = match token {
            Some(token) => format!("{by} (token {token})"),
            None => by.clone(),
        };

        // The evicted run stops its command at its next renewal (ttl/3 = 2 s) and says why.
        let done = run.finish(Duration::from_secs(20));
        assert!(
            broken_at.elapsed() < Duration::from_secs(5),
            "the run went on {:?} after the break",
            broken_at.elapsed()
        );
        assert_eq!(done.code(), Some(124), "{}", done.describe());
        assert!(
            done.stderr()
                .contains(&format!("broken by {breaker} (report hung since 03:00)")),
            "{}",
            done.describe()
        );
        assert_eq!(
            read(&s.path("stopped")),
            "stopped\n",
            "the report got SIGTERM"
        );

        // The history says who broke it and why; the next holder gets a higher fence.
        let events = s.log("hourly-report");
        let last = events.last().expect("events");
        assert_eq!(last["event"], "broken", "{events:?}");
        assert_eq!(last["owner"], holder["owner"]);
        assert_eq!(last["by"], by.as_str());
        assert_eq!(
            last.get("by_token"),
            token.map(Value::from).as_ref(),
            "{last}"
        );
        assert_eq!(last["reason"], "report hung since 03:00");
        let next = s.hold("hourly-report", "web-1", "60s");
        assert!(fence_of(&next) > fence_of(&holder), "{next} after {holder}");
        s.release("hourly-report", "web-1");

        // Nobody holds it: 1, without asking. No arguments: 64.
        let again = break_lock(s, "y", &["hourly-report", "again"]);
        assert_eq!(again.code(), Some(1), "{}", again.describe());
        assert!(
            !again.stderr().contains("Break the lock"),
            "{}",
            again.describe()
        );
        let usage = break_lock(s, "y", &[]);
        assert_eq!(usage.code(), Some(64), "{}", usage.describe());
    });
}
